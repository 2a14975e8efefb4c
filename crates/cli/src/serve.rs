//! `platter serve`: assemble a volume from its members and serve it over NBD.

use crate::error::{CliError, Result};
use crate::members::{assemble_devices, open_all};
use clap::Args;
use platter_core::label::printable;
use platter_core::units::format_size;
use platter_io::{FaultSpec, FaultyMember, Member, OpenOptions};
use platter_server::{serve, Ready, ServeConfig};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args)]
pub struct ServeArgs {
    /// Unix socket to serve on (created; a stale one is replaced).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Also serve over TCP on HOST:PORT (only when asked: NBD has no
    /// authentication here, so bind to a trusted address).
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,
    /// Refuse writes; the members are opened read-only and labels are left alone.
    #[arg(long)]
    read_only: bool,
    /// Worker threads per connection (at least 1): each reads a request,
    /// runs it (member I/O blocks here) and queues the reply.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = at_least_one)]
    threads: usize,
    /// Connections served at once (at least 1); more are refused.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = at_least_one)]
    max_connections: usize,
    /// Inject faults into a member, for testing: MEMBER is one of the
    /// members as given, SPEC is comma-separated keys, e.g.
    /// fail-nth=7,fail-from=100,fail-rate=0.001,latency=500us,tear-rate=0.01,seed=3.
    /// Keys: fail-nth=N, fail-from=N, fail-rate=P, latency=T, tear-rate=P,
    /// seed=N, undo-log=on|off, bad-range=OFFSET+LEN (bad sectors at member
    /// bytes, e.g. 2M+64k, whole 512-byte sectors: reads touching them fail,
    /// a write covering a sector whole heals it; give the key once per
    /// range). I/Os are counted from opening, label reads included.
    /// Repeatable, once per member.
    #[arg(long, value_name = "MEMBER=SPEC")]
    inject: Vec<String>,
    /// Control socket for `platter status|fail|remove|replace|add-spare|check|
    /// repair|rebuild-rate|read-policy --control PATH` (default: the --socket
    /// path plus ".ctl").
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    /// Serve the volume's statistics in the Prometheus text format at
    /// http://HOST:PORT/metrics (see docs/statistics.md).
    #[arg(long, value_name = "HOST:PORT")]
    metrics: Option<String>,
    /// Whether a member spins, for the `auto` read policy (proximity if any
    /// member may spin, load when none does). MEMBER is one of the members
    /// as given, or a slot number. Block devices say so themselves (sysfs
    /// queue/rotational), and a file the disk under it; NBD exports and
    /// files on RAM or network file systems cannot, and count as possibly
    /// spinning unless told. Repeatable.
    #[arg(long, value_name = "MEMBER=yes|no")]
    rotational: Vec<String>,
    /// RAID-5/6: stripes of partial-stripe writes held in memory until
    /// later writes complete them (at most 16 MiB; 0 turns the cache off).
    /// Held data is written out within about 50 ms of the last write to
    /// it, and by every FLUSH; like a disk's write cache, it is lost in a
    /// crash unless flushed (docs/failures.md).
    #[arg(long, value_name = "STRIPES", default_value_t = 64)]
    stripe_cache: u64,
    /// The volume's members, in any order.
    #[arg(value_name = "MEMBER", required = true)]
    members: Vec<String>,
}

/// A count that must be at least 1: 0 connections would refuse every
/// client, 0 threads serve nothing.
fn at_least_one(text: &str) -> std::result::Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("not a count: {e}")),
    }
}

pub fn run(args: ServeArgs) -> Result<()> {
    if args.socket.is_none() && args.listen.is_none() {
        return Err(CliError(
            "give --socket PATH (or --listen HOST:PORT) to serve on".into(),
        ));
    }
    let opts = OpenOptions {
        read_only: args.read_only,
        claim: true,
        ..OpenOptions::default()
    };
    let injections = parse_injections(&args.inject, &args.members)?;
    let mut devices = open_all(&args.members, opts)?;
    for (i, spec) in injections {
        let size = devices[i].size_bytes();
        if let Some(r) = spec.bad_ranges.iter().find(|r| r.end_bytes() > size) {
            return Err(CliError(format!(
                "--inject {}: bad-range {}+{} ends past the member's end ({size} bytes)",
                args.members[i], r.offset_bytes, r.len_bytes
            )));
        }
        tracing::warn!(member = %args.members[i], faults = %spec, "injecting faults");
        let inner = Arc::clone(&devices[i]);
        devices[i] = Arc::new(FaultyMember::new(inner, spec));
    }
    let volume = assemble_devices(devices)?;
    let rotational = parse_rotational(&args.rotational, &args.members, &volume)?;
    let config = ServeConfig {
        socket: args.socket,
        listen: args.listen,
        read_only: args.read_only,
        threads: args.threads,
        max_connections: args.max_connections,
        control: args.control,
        metrics: args.metrics,
        rotational,
        stripe_cache_stripes: args.stripe_cache,
    };
    serve(volume, config, print_ready).map_err(|e| CliError(e.to_string()))
}

/// `--inject MEMBER=SPEC` options as (index into `members`, spec). MEMBER
/// is matched against the members as given (the longest that fits, so a
/// path may itself contain `=`).
fn parse_injections(injects: &[String], members: &[String]) -> Result<Vec<(usize, FaultSpec)>> {
    let mut out: Vec<(usize, FaultSpec)> = Vec::new();
    for arg in injects {
        let Some((i, text)) = members
            .iter()
            .enumerate()
            .filter_map(|(i, m)| Some((i, arg.strip_prefix(m.as_str())?.strip_prefix('=')?)))
            .min_by_key(|(_, text)| text.len())
        else {
            let named = arg.split_once('=').map_or(arg.as_str(), |(m, _)| m);
            return Err(CliError(format!(
                "--inject {arg}: {named} is not one of the members given (want MEMBER=SPEC)"
            )));
        };
        let spec = FaultSpec::parse(text).map_err(|e| CliError(format!("--inject {arg}: {e}")))?;
        if out.iter().any(|(j, _)| *j == i) {
            return Err(CliError(format!(
                "--inject: member {} is named twice; give one spec with every fault",
                members[i]
            )));
        }
        out.push((i, spec));
    }
    Ok(out)
}

/// `--rotational MEMBER=yes|no` options as slot → spins. MEMBER is a
/// member as given (the longest that fits, as for --inject) or a slot.
fn parse_rotational(
    opts: &[String],
    members: &[String],
    volume: &platter_io::assembly::OpenVolume,
) -> Result<BTreeMap<u32, bool>> {
    let slots = volume.assembly.slot_device.len();
    let mut out = BTreeMap::new();
    for arg in opts {
        let bad = |why: String| CliError(format!("--rotational {arg}: {why}"));
        let named = members
            .iter()
            .enumerate()
            .filter_map(|(i, m)| Some((i, arg.strip_prefix(m.as_str())?.strip_prefix('=')?)))
            .min_by_key(|(_, text)| text.len());
        let (slot, value) = match named {
            Some((i, value)) => {
                let slot = volume
                    .assembly
                    .slot_device
                    .iter()
                    .position(|d| *d == Some(i))
                    .ok_or_else(|| bad(format!("{} is not in use in the volume", members[i])))?;
                (slot as u32, value)
            }
            None => {
                let (key, value) = arg
                    .split_once('=')
                    .ok_or_else(|| bad("want MEMBER=yes|no".into()))?;
                let slot: u32 = key.parse().map_err(|_| {
                    bad(format!(
                        "{key} is neither one of the members given nor a slot number"
                    ))
                })?;
                if slot as usize >= slots {
                    return Err(bad(format!("there is no slot {slot} (slots 0..{slots})")));
                }
                (slot, value)
            }
        };
        let spins = match value.to_ascii_lowercase().as_str() {
            "yes" | "true" | "1" | "hdd" => true,
            "no" | "false" | "0" | "ssd" => false,
            other => return Err(bad(format!("'{other}' is not yes or no"))),
        };
        out.insert(slot, spins);
    }
    Ok(out)
}

fn print_ready(r: &Ready) {
    println!(
        "serving '{}' ({}, {} bytes); stop with Ctrl-C or SIGTERM",
        printable(&r.export_name),
        format_size(r.size_bytes),
        r.size_bytes
    );
    for uri in &r.uris {
        println!("  {}", printable(uri));
    }
    if let Some(m) = &r.metrics {
        println!("metrics: {m}");
    }
    if let Some(uri) = r.uris.first().map(|u| printable(u)) {
        println!("try:");
        println!("  nbdinfo '{uri}'");
        println!("  qemu-io -f raw -c 'write -P 0xab 0 1M' -c 'read -P 0xab 0 1M' '{uri}'");
        println!("  mkdir -p /tmp/platter-fuse && nbdfuse /tmp/platter-fuse/disk '{uri}' &");
    }
    // Scripts wait for this line; make sure it is out.
    use std::io::Write;
    let _ = std::io::stdout().flush();
}
