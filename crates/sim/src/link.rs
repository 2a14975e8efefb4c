//! The client's connection to a served volume, for performance runs
//! ([`crate::bench`]) that predict what a client of `platter serve` sees.
//!
//! Members are not the whole of a served request's time: a write's payload
//! crosses the connection before the engine sees the request, a read's
//! reply crosses it after the last member read, and each request costs
//! system calls and thread wake-ups on both ends. A [`Link`] models that
//! as two channels (client to server, server to client), each carrying one
//! request at a time in the order they become ready: a request holds its
//! channel for [`Link::request_ns`] plus its bytes at the direction's cost
//! per MiB. So one request at a time sees the whole cost, and many at once
//! are bounded by the channel's rate. What the figures are on a machine is
//! measured (`bench/sim_vs_served.sh` measures them on a one-member volume
//! with no injected latency); the default is no link at all.

use crate::members::parse_time_ns;
use crate::workload::OpKind;
use std::fmt;

/// Costs of the connection; all zero is no link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Link {
    /// What every request holds its channel for, whatever its size.
    pub request_ns: u64,
    /// Per MiB of a read's reply (server to client).
    pub read_ns_per_mib: u64,
    /// Per MiB of a write's payload (client to server).
    pub write_ns_per_mib: u64,
}

/// Which channel a request's bytes take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// A write's payload (and a flush's header): before the engine sees it.
    ToServer,
    /// A read's reply: after the engine completes it.
    ToClient,
}

impl Link {
    /// `request=T,read=T,write=T` (times per request and per MiB read and
    /// written, with a unit: `ns`, `us`, `ms`, `s`); missing keys are 0.
    pub fn parse(text: &str) -> Result<Link, String> {
        let mut link = Link::default();
        for part in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("link `{part}`: expected key=value"))?;
            let field = match key.trim() {
                "request" => &mut link.request_ns,
                "read" => &mut link.read_ns_per_mib,
                "write" => &mut link.write_ns_per_mib,
                other => {
                    return Err(format!(
                        "link: unknown key `{other}` (request, read, write)"
                    ))
                }
            };
            *field = parse_time_ns(value.trim()).map_err(|e| format!("link {key}: {e}"))?;
        }
        Ok(link)
    }

    /// Whether the link costs anything.
    pub fn is_some(&self) -> bool {
        *self != Link::default()
    }

    /// The channel a request of `kind` takes.
    pub fn direction(kind: OpKind) -> Direction {
        match kind {
            OpKind::Read => Direction::ToClient,
            OpKind::Write | OpKind::Flush => Direction::ToServer,
        }
    }

    /// How long a request of `kind` moving `len_bytes` holds its channel.
    pub fn hold_ns(&self, kind: OpKind, len_bytes: u64) -> u64 {
        let per_mib = match kind {
            OpKind::Read => self.read_ns_per_mib,
            OpKind::Write => self.write_ns_per_mib,
            OpKind::Flush => 0,
        };
        let bytes_ns = (u128::from(len_bytes) * u128::from(per_mib)) >> 20;
        self.request_ns + bytes_ns as u64
    }
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "link request={}ns,read={}ns,write={}ns",
            self.request_ns, self.read_ns_per_mib, self.write_ns_per_mib
        )
    }
}

/// The two channels' state: when each is next free.
#[derive(Clone, Debug, Default)]
pub struct Channels {
    to_server_free_ns: u64,
    to_client_free_ns: u64,
}

impl Channels {
    /// A transfer ready at `now_ns` that holds `dir` for `hold_ns`: it
    /// starts when the channel is free (after every transfer reserved
    /// before it) and ends at the returned time.
    pub fn reserve(&mut self, now_ns: u64, dir: Direction, hold_ns: u64) -> u64 {
        let free = match dir {
            Direction::ToServer => &mut self.to_server_free_ns,
            Direction::ToClient => &mut self.to_client_free_ns,
        };
        let end = (*free).max(now_ns) + hold_ns;
        *free = end;
        end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_costs_by_direction() {
        let l = Link::parse("request=40us,read=300us,write=450us").unwrap();
        assert_eq!(
            l,
            Link {
                request_ns: 40_000,
                read_ns_per_mib: 300_000,
                write_ns_per_mib: 450_000,
            }
        );
        assert_eq!(l.hold_ns(OpKind::Read, 1 << 20), 340_000);
        assert_eq!(l.hold_ns(OpKind::Write, 512 << 10), 40_000 + 225_000);
        assert_eq!(l.hold_ns(OpKind::Flush, 0), 40_000);
        assert!(!Link::default().is_some());
        assert!(Link::parse("request=40").is_err(), "a unit is needed");
        assert!(Link::parse("latency=1ms").is_err());
    }

    #[test]
    fn a_channel_carries_one_transfer_at_a_time_each_way() {
        let mut c = Channels::default();
        // Two replies ready at once: the second waits for the first.
        assert_eq!(c.reserve(1_000, Direction::ToClient, 300), 1_300);
        assert_eq!(c.reserve(1_000, Direction::ToClient, 300), 1_600);
        // The other direction is free.
        assert_eq!(c.reserve(1_000, Direction::ToServer, 50), 1_050);
        // Ready after the channel freed up: no wait.
        assert_eq!(c.reserve(5_000, Direction::ToClient, 300), 5_300);
    }
}
