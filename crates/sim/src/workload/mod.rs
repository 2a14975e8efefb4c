//! Workload generators for performance runs ([`crate::bench`]) and sweeps
//! ([`crate::sweep`]).
//!
//! A [`Generator`] is a set of client processes. In a closed loop (the
//! usual case) each process has at most one request outstanding: the
//! driver asks it for its next request when the previous one completed,
//! and submits that request after the request's think time. A process may
//! also say it has nothing to do yet ([`Next::Wait`]: asked again after
//! the next completion of any process) or that it is done. An open-loop
//! generator (a timed trace replay) gives each request an arrival time
//! and is asked for the next one as soon as one is submitted.
//!
//! Generators know the volume's size and nothing else about it: the same
//! generator and seed give the same requests on every level, member count
//! and interleave (common random numbers, so that a sweep compares like
//! with like).
//!
//! The workloads (one module each), as [`WorkloadSpec::parse`] takes them:
//!
//! | spec | what |
//! |---|---|
//! | `dd[:rw=read\|write,bs=64k,qd=1,total=64M]` | sequential stream, `qd` requests in flight |
//! | `raidtest[:p=8,n=10000,read=50,min=1k,max=128k,align=512]` | random, sizes uniform over min..max in whole KiB, offsets multiples of align |
//! | `bonnie[:size=100M,phase=all\|write\|rewrite\|read\|seeks,seeks=4000]` | bonnie's block phases and 3 seekers |
//! | `news[:readers=30,files=1000,dirs=390,per-dir=100,run=10]` | news spool readers over [`fs::FsModel`] |
//! | `untar[:files=2000,p=1,dir-files=20,cluster=64k]` | file creation, tar's size mix |
//! | `fio:PATH[,qd=N,timed=0\|1]` | fio iolog v2 or v3 replay |
//! | `blkparse:PATH[,qd=N,timed=0\|1,action=D\|Q]` | blkparse text replay |
//!
//! [`iolog`] writes any of them as fio iologs, one per process, for fio to
//! replay against a real volume.

pub mod bonnie;
pub mod dd;
pub mod fs;
pub mod iolog;
pub mod news;
pub mod raidtest;
pub mod replay;
pub mod untar;

use crate::rng::Rng;
use platter_core::units::parse_size;
use std::collections::BTreeMap;
use std::sync::Arc;

pub const SECTOR: u64 = 512;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    Read,
    Write,
    Flush,
}

/// One client request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    pub kind: OpKind,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    /// Closed loop: wait this long after the previous completion.
    pub think_ns: u64,
    /// Open loop: the arrival time.
    pub at_ns: u64,
}

impl Op {
    pub fn read(offset_bytes: u64, len_bytes: u64) -> Op {
        Op {
            kind: OpKind::Read,
            offset_bytes,
            len_bytes,
            think_ns: 0,
            at_ns: 0,
        }
    }

    pub fn write(offset_bytes: u64, len_bytes: u64) -> Op {
        Op {
            kind: OpKind::Write,
            ..Op::read(offset_bytes, len_bytes)
        }
    }

    pub fn flush() -> Op {
        Op {
            kind: OpKind::Flush,
            ..Op::read(0, 0)
        }
    }
}

/// What a process does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    Op(Op),
    /// Nothing yet: ask again after the next completion.
    Wait,
    Done,
}

pub trait Generator: Send {
    /// Client processes (closed loop) or streams (open loop).
    fn processes(&self) -> u32;
    /// Requests arrive at their `at_ns` whatever completes (trace replay).
    fn open_loop(&self) -> bool {
        false
    }
    /// Process `p`'s next request at virtual time `now_ns`.
    fn next(&mut self, p: u32, now_ns: u64) -> Next;
}

/// Parameters of a workload spec: `key=value` pairs.
#[derive(Clone, Debug, Default)]
pub struct Params {
    map: BTreeMap<String, String>,
    /// A bare word (a trace's path).
    pub path: Option<String>,
}

impl Params {
    fn parse(text: &str) -> Result<Params, String> {
        let mut p = Params::default();
        for part in text.split(',').filter(|s| !s.is_empty()) {
            match part.split_once('=') {
                Some((k, v)) => {
                    p.map.insert(k.trim().to_string(), v.trim().to_string());
                }
                None if p.path.is_none() => p.path = Some(part.to_string()),
                None => return Err(format!("`{part}`: expected key=value")),
            }
        }
        Ok(p)
    }

    fn take(&mut self, key: &str) -> Option<String> {
        self.map.remove(key)
    }

    pub fn size(&mut self, key: &str, default: u64) -> Result<u64, String> {
        match self.take(key) {
            None => Ok(default),
            Some(v) => parse_size(&v).map_err(|e| format!("{key}={v}: {e}")),
        }
    }

    pub fn num(&mut self, key: &str, default: u64) -> Result<u64, String> {
        match self.take(key) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("{key}={v}: expected a number")),
        }
    }

    pub fn word(&mut self, key: &str, default: &str) -> String {
        self.take(key).unwrap_or_else(|| default.to_string())
    }

    fn finish(self, name: &str) -> Result<(), String> {
        match self.map.keys().next() {
            Some(k) => Err(format!("workload {name}: unknown parameter `{k}`")),
            None => Ok(()),
        }
    }
}

/// A workload, as named on the command line; builds its generator for a
/// volume size and a seed.
#[derive(Clone, Debug)]
pub enum WorkloadSpec {
    Dd(dd::Dd),
    Raidtest(raidtest::Raidtest),
    Bonnie(bonnie::Bonnie),
    News(news::News),
    Untar(untar::Untar),
    Replay(replay::Replay),
}

impl WorkloadSpec {
    /// `NAME[:key=value,...]`; see the module documentation.
    pub fn parse(text: &str) -> Result<WorkloadSpec, String> {
        let (name, rest) = text.split_once(':').unwrap_or((text, ""));
        let mut p = Params::parse(rest)?;
        let spec = match name {
            "dd" => WorkloadSpec::Dd(dd::Dd::from_params(&mut p)?),
            "raidtest" => WorkloadSpec::Raidtest(raidtest::Raidtest::from_params(&mut p)?),
            "bonnie" => WorkloadSpec::Bonnie(bonnie::Bonnie::from_params(&mut p)?),
            "news" => WorkloadSpec::News(news::News::from_params(&mut p)?),
            "untar" => WorkloadSpec::Untar(untar::Untar::from_params(&mut p)?),
            "fio" | "blkparse" => WorkloadSpec::Replay(replay::Replay::from_params(name, &mut p)?),
            other => {
                return Err(format!(
                    "unknown workload `{other}` (dd, raidtest, bonnie, news, untar, fio:PATH, blkparse:PATH)"
                ))
            }
        };
        if !matches!(spec, WorkloadSpec::Replay(_)) && p.path.is_some() {
            return Err(format!("workload {name}: expected key=value parameters"));
        }
        p.finish(name)?;
        Ok(spec)
    }

    pub fn build(&self, volume_bytes: u64, seed: u64) -> Box<dyn Generator> {
        let rng = Rng::stream(seed, crate::rng::Stream::Workload);
        match self {
            WorkloadSpec::Dd(w) => Box::new(w.generator(volume_bytes)),
            WorkloadSpec::Raidtest(w) => Box::new(w.generator(volume_bytes, rng)),
            WorkloadSpec::Bonnie(w) => Box::new(w.generator(volume_bytes, rng)),
            WorkloadSpec::News(w) => Box::new(w.generator(volume_bytes, rng)),
            WorkloadSpec::Untar(w) => Box::new(w.generator(volume_bytes, rng)),
            WorkloadSpec::Replay(w) => Box::new(w.generator(volume_bytes)),
        }
    }

    /// A short description for tables.
    pub fn describe(&self) -> String {
        match self {
            WorkloadSpec::Dd(w) => format!("{w}"),
            WorkloadSpec::Raidtest(w) => format!("{w}"),
            WorkloadSpec::Bonnie(w) => format!("{w}"),
            WorkloadSpec::News(w) => format!("{w}"),
            WorkloadSpec::Untar(w) => format!("{w}"),
            WorkloadSpec::Replay(w) => format!("{w}"),
        }
    }
}

/// Shared read-only trace records.
pub type Records = Arc<Vec<replay::TraceOp>>;

/// Uniform in `[lo, hi]` in whole units of `unit`.
pub(crate) fn uniform_units(rng: &mut Rng, lo: u64, hi: u64, unit: u64) -> u64 {
    rng.range(lo / unit, hi / unit) * unit
}

/// A random multiple of `align` at which `len` bytes fit in a volume.
pub(crate) fn random_offset_aligned(rng: &mut Rng, volume_bytes: u64, len: u64, align: u64) -> u64 {
    let slots = (volume_bytes.saturating_sub(len)) / align + 1;
    rng.below(slots) * align
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_reject_typos() {
        assert!(matches!(
            WorkloadSpec::parse("dd:bs=64k,qd=2").unwrap(),
            WorkloadSpec::Dd(_)
        ));
        assert!(WorkloadSpec::parse("raidtest:p=30,read=100").is_ok());
        let e = WorkloadSpec::parse("raidtest:procs=3").unwrap_err();
        assert!(e.contains("procs"), "{e}");
        assert!(WorkloadSpec::parse("nosuch").is_err());
    }
}
