//! Trace replay: fio iolog (versions 2 and 3) and blkparse's default text
//! output, parsed into [`TraceOp`]s and replayed against a volume.
//!
//! - **fio iolog v2**: `fio version 2 iolog`, then `FILE ACTION [OFFSET
//!   LENGTH]` lines; actions `read`, `write`, `sync`, `datasync`, `trim`,
//!   `wait` (OFFSET is the delay in µs before the next I/O) and the file
//!   actions `add`, `open`, `close` (ignored).
//! - **fio iolog v3**: `fio version 3 iolog`, then the same lines with a
//!   leading timestamp in µs since the start (fio writes
//!   `utime_since_now`); `wait` is not allowed there (fio ignores it, so do
//!   we).
//! - **blkparse** (default format): `MAJ,MIN CPU SEQ SECONDS PID ACTION
//!   RWBS SECTOR + COUNT [PROCESS]`. Only one action is replayed: `D`
//!   (issued to the driver) when the trace has any, else `Q` (queued);
//!   RWBS with `R` is a read, with `W` a write, a lone `F` (flush) a
//!   flush; discards and everything else are skipped. Timestamps are
//!   seconds with nanoseconds.
//!
//! Offsets past the end of the volume wrap around it (modulo the room for
//! the request, rounded down to a sector); lengths longer than the volume
//! are cut. Trims are not replayed (the simulator models no trim cost).
//!
//! Replay is **timed** (open loop: each request arrives at its trace
//! time, whatever the volume does) when the trace has timestamps, else
//! **as fast as possible** with `qd` requests in flight (v2's `wait`s are
//! kept as think time). `timed=0|1` overrides.

use super::{Generator, Next, Op, OpKind, Params, Records};
use std::fmt;
use std::sync::Arc;

/// One request of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceOp {
    /// Since the trace's first request (ns), when known.
    pub at_ns: Option<u64>,
    /// Delay before this request (fio v2 `wait`), ns.
    pub wait_ns: u64,
    pub kind: OpKind,
    pub offset_bytes: u64,
    pub len_bytes: u64,
}

fn bad(name: &str, line: usize, what: impl fmt::Display) -> String {
    format!("{name}:{line}: {what}")
}

/// Parses a fio iolog, version 2 or 3.
pub fn parse_fio_iolog(text: &str, name: &str) -> Result<Vec<TraceOp>, String> {
    let mut lines = text.lines().enumerate();
    let version = match lines.next().map(|(_, l)| l.trim()) {
        Some("fio version 2 iolog") => 2,
        Some("fio version 3 iolog") => 3,
        Some(other) => {
            return Err(bad(
                name,
                1,
                format!("`{other}`: not a fio version 2 or 3 iolog"),
            ))
        }
        None => return Err(format!("{name}: empty")),
    };
    let mut out = Vec::new();
    let mut wait_ns = 0u64;
    let mut first_ts: Option<u64> = None;
    for (i, line) in lines {
        let n = i + 1;
        let mut f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        let mut ts = None;
        if version == 3 {
            let t: u64 = f[0]
                .parse()
                .map_err(|_| bad(name, n, format!("`{}`: expected a timestamp", f[0])))?;
            ts = Some(t);
            f.remove(0);
        }
        let action = *f
            .get(1)
            .ok_or_else(|| bad(name, n, "expected FILE ACTION"))?;
        let num = |k: usize, what: &str| -> Result<u64, String> {
            f.get(k)
                .ok_or_else(|| bad(name, n, format!("{action}: missing {what}")))?
                .parse::<u64>()
                .map_err(|_| {
                    bad(
                        name,
                        n,
                        format!("{action}: {what} `{}` is not a number", f[k]),
                    )
                })
        };
        let kind = match action {
            "add" | "open" | "close" | "trim" => continue,
            "wait" => {
                if version == 2 {
                    wait_ns += num(2, "delay")? * 1000;
                }
                continue;
            }
            "read" => OpKind::Read,
            "write" => OpKind::Write,
            "sync" | "datasync" => OpKind::Flush,
            other => return Err(bad(name, n, format!("unknown action `{other}`"))),
        };
        let (offset_bytes, len_bytes) = if kind == OpKind::Flush {
            (0, 0)
        } else {
            (num(2, "offset")?, num(3, "length")?)
        };
        if kind != OpKind::Flush && len_bytes == 0 {
            continue;
        }
        let at_ns = ts.map(|t| {
            let first = *first_ts.get_or_insert(t);
            t.saturating_sub(first) * 1000
        });
        out.push(TraceOp {
            at_ns,
            wait_ns: std::mem::take(&mut wait_ns),
            kind,
            offset_bytes,
            len_bytes,
        });
    }
    Ok(out)
}

/// Parses blkparse's default text output; `action` is `D` or `Q`, or
/// `None` for `D` if the trace has any, else `Q`.
pub fn parse_blkparse(
    text: &str,
    name: &str,
    action: Option<&str>,
) -> Result<Vec<TraceOp>, String> {
    // (line, seconds, action, rwbs, sector, count)
    let mut events = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Summary lines and the per-CPU tables at the end do not start
        // with MAJ,MIN.
        if f.len() < 7 || !f[0].contains(',') || f[0].starts_with("CPU") {
            continue;
        }
        let Ok(secs) = f[3].parse::<f64>() else {
            continue;
        };
        let act = f[5];
        let rwbs = f[6];
        let (sector, count) = if f.len() >= 10 && f[8] == "+" {
            let s = f[7]
                .parse::<u64>()
                .map_err(|_| bad(name, i + 1, format!("sector `{}`", f[7])))?;
            let c = f[9]
                .parse::<u64>()
                .map_err(|_| bad(name, i + 1, format!("count `{}`", f[9])))?;
            (s, c)
        } else {
            (0, 0)
        };
        events.push((secs, act, rwbs, sector, count));
    }
    let want = match action {
        Some(a) => a.to_string(),
        None if events.iter().any(|e| e.1 == "D") => "D".into(),
        None => "Q".into(),
    };
    let mut out = Vec::new();
    let mut first: Option<f64> = None;
    for (secs, act, rwbs, sector, count) in events {
        if act != want {
            continue;
        }
        let kind = if rwbs.contains('D') {
            continue;
        } else if rwbs.contains('R') {
            OpKind::Read
        } else if rwbs.contains('W') {
            OpKind::Write
        } else if rwbs.contains('F') {
            OpKind::Flush
        } else {
            continue;
        };
        if kind != OpKind::Flush && count == 0 {
            // A write with FLUSH and no data (`FWS 0 + 0`) is a flush.
            if rwbs.contains('F') {
                out.push(TraceOp {
                    at_ns: Some(ns_since(&mut first, secs)),
                    wait_ns: 0,
                    kind: OpKind::Flush,
                    offset_bytes: 0,
                    len_bytes: 0,
                });
            }
            continue;
        }
        out.push(TraceOp {
            at_ns: Some(ns_since(&mut first, secs)),
            wait_ns: 0,
            kind,
            offset_bytes: if kind == OpKind::Flush {
                0
            } else {
                sector * 512
            },
            len_bytes: if kind == OpKind::Flush {
                0
            } else {
                count * 512
            },
        });
    }
    Ok(out)
}

fn ns_since(first: &mut Option<f64>, secs: f64) -> u64 {
    let f = *first.get_or_insert(secs);
    ((secs - f).max(0.0) * 1e9).round() as u64
}

#[derive(Clone)]
pub struct Replay {
    pub path: String,
    pub format: &'static str,
    pub records: Records,
    pub queue_depth: u32,
    pub timed: bool,
}

impl fmt::Debug for Replay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Replay({self})")
    }
}

impl Replay {
    pub fn from_params(format: &str, p: &mut Params) -> Result<Replay, String> {
        let path = p
            .path
            .clone()
            .ok_or_else(|| format!("{format}: expected {format}:PATH"))?;
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        let action = p.take("action");
        let (format, records) = if format == "fio" {
            if action.is_some() {
                return Err("fio: action= is for blkparse traces".into());
            }
            ("fio", parse_fio_iolog(&text, &path)?)
        } else {
            if let Some(a) = &action {
                if a != "D" && a != "Q" {
                    return Err(format!("blkparse: action={a}: expected D or Q"));
                }
            }
            ("blkparse", parse_blkparse(&text, &path, action.as_deref())?)
        };
        if records.is_empty() {
            return Err(format!("{path}: no requests to replay"));
        }
        let has_times = records.iter().all(|r| r.at_ns.is_some());
        let timed = p.num("timed", u64::from(has_times))? != 0;
        if timed && !has_times {
            return Err(format!(
                "{path}: timed replay needs timestamps (fio v3, blkparse)"
            ));
        }
        Ok(Replay {
            path,
            format,
            records: Arc::new(records),
            queue_depth: p.num("qd", 1)?.max(1) as u32,
            timed,
        })
    }

    pub fn from_records(records: Vec<TraceOp>, timed: bool, queue_depth: u32) -> Replay {
        Replay {
            path: "(records)".into(),
            format: "records",
            records: Arc::new(records),
            queue_depth: queue_depth.max(1),
            timed,
        }
    }

    pub fn generator(&self, volume_bytes: u64) -> ReplayGen {
        ReplayGen {
            records: self.records.clone(),
            next: 0,
            volume_bytes,
            timed: self.timed,
            processes: if self.timed { 1 } else { self.queue_depth },
        }
    }
}

impl fmt::Display for Replay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} replay {} ({} requests, {})",
            self.format,
            self.path,
            self.records.len(),
            if self.timed {
                "timed".to_string()
            } else {
                format!("qd={}", self.queue_depth)
            }
        )
    }
}

pub struct ReplayGen {
    records: Records,
    next: usize,
    volume_bytes: u64,
    timed: bool,
    processes: u32,
}

impl Generator for ReplayGen {
    fn processes(&self) -> u32 {
        self.processes
    }

    fn open_loop(&self) -> bool {
        self.timed
    }

    fn next(&mut self, _p: u32, _now_ns: u64) -> Next {
        let Some(r) = self.records.get(self.next) else {
            return Next::Done;
        };
        self.next += 1;
        let mut op = match r.kind {
            OpKind::Flush => Op::flush(),
            kind => {
                let len = r.len_bytes.min(self.volume_bytes / 512 * 512).max(512);
                let len = len.div_ceil(512) * 512;
                let mut off = r.offset_bytes / 512 * 512;
                if off + len > self.volume_bytes {
                    off = off % (self.volume_bytes - len + 1) / 512 * 512;
                }
                Op {
                    kind,
                    ..Op::read(off, len)
                }
            }
        };
        op.think_ns = r.wait_ns;
        op.at_ns = r.at_ns.unwrap_or(0);
        Next::Op(op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V2: &str = "fio version 2 iolog
/dev/sdb add
/dev/sdb open
/dev/sdb read 0 4096
/dev/sdb wait 250 0
/dev/sdb write 8192 16384
/dev/sdb sync 0 0
/dev/sdb trim 0 4096
/dev/sdb close
";

    const V3: &str = "fio version 3 iolog
2 nbd0 add
872 nbd0 open
878 nbd0 write 0 16384
888 nbd0 read 65536 4096
1891 nbd0 datasync 0 0
";

    const BLK: &str = "  8,0    3        1     0.000000000   697  Q   W 223490 + 8 [kjournald]
  8,0    3        2     0.000001000   697  G   W 223490 + 8 [kjournald]
  8,0    3        3     0.000002500   697  D   W 223490 + 8 [kjournald]
  8,0    1        4     0.001500000   100  Q   R 1000 + 16 [cat]
  8,0    1        5     0.001600000   100  D   R 1000 + 16 [cat]
  8,0    1        6     0.002000000   100  D  RA 2048 + 256 [cat]
  8,0    0        7     0.003000000   697  C   W 223490 + 8 [0]
  8,0    0        8     0.004000000   697  D   D 0 + 2048 [fstrim]
  8,0    0        9     0.005000000   697  D  FN [jbd2]
CPU0 (8,0):
 Reads Queued:           1,        8KiB\t Writes Queued:           1,        4KiB
";

    #[test]
    fn fio_v2() {
        let ops = parse_fio_iolog(V2, "v2").unwrap();
        assert_eq!(ops.len(), 3);
        assert_eq!(ops[0].kind, OpKind::Read);
        assert_eq!((ops[0].offset_bytes, ops[0].len_bytes), (0, 4096));
        assert_eq!(ops[1].wait_ns, 250_000);
        assert_eq!(ops[1].kind, OpKind::Write);
        assert_eq!((ops[1].offset_bytes, ops[1].len_bytes), (8192, 16384));
        assert_eq!(ops[2].kind, OpKind::Flush);
        assert!(ops.iter().all(|o| o.at_ns.is_none()));
    }

    #[test]
    fn fio_v3_times_are_microseconds_from_the_first_request() {
        let ops = parse_fio_iolog(V3, "v3").unwrap();
        assert_eq!(ops.len(), 3);
        assert_eq!(ops[0].at_ns, Some(0));
        assert_eq!(ops[1].at_ns, Some(10_000));
        assert_eq!(ops[2].at_ns, Some(1_013_000));
        assert_eq!(ops[2].kind, OpKind::Flush);
    }

    #[test]
    fn fio_errors_name_the_line() {
        let e = parse_fio_iolog("fio version 2 iolog\nf read x 4096\n", "t").unwrap_err();
        assert!(e.starts_with("t:2:"), "{e}");
        assert!(parse_fio_iolog("fio version 1 iolog\n", "t").is_err());
    }

    #[test]
    fn blkparse_dispatches() {
        let ops = parse_blkparse(BLK, "b", None).unwrap();
        let got: Vec<(OpKind, u64, u64)> = ops
            .iter()
            .map(|o| (o.kind, o.offset_bytes, o.len_bytes))
            .collect();
        assert_eq!(
            got,
            vec![
                (OpKind::Write, 223490 * 512, 4096),
                (OpKind::Read, 1000 * 512, 8192),
                (OpKind::Read, 2048 * 512, 256 * 512),
                (OpKind::Flush, 0, 0),
            ]
        );
        assert_eq!(ops[0].at_ns, Some(0));
        assert_eq!(ops[1].at_ns, Some(1_597_500));
        let queued = parse_blkparse(BLK, "b", Some("Q")).unwrap();
        assert_eq!(queued.len(), 2);
    }

    #[test]
    fn replay_wraps_offsets_into_the_volume() {
        let r = Replay::from_records(
            vec![TraceOp {
                at_ns: None,
                wait_ns: 0,
                kind: OpKind::Read,
                offset_bytes: 10 << 20,
                len_bytes: 4096,
            }],
            false,
            1,
        );
        let mut g = r.generator(1 << 20);
        let Next::Op(o) = g.next(0, 0) else { panic!() };
        assert!(o.offset_bytes + o.len_bytes <= 1 << 20);
        assert_eq!(g.next(0, 0), Next::Done);
    }
}
