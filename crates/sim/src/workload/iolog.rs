//! Export a workload as fio iologs, one per process, for fio to replay
//! against a real volume (`platter sim iolog`): version 2, or version 3
//! with timestamps when the workload has think or arrival times.
//!
//! Which process issues which request can depend on when requests
//! complete (raidtest's processes share one request counter and one random
//! stream; bonnie's seekers wait for the sequential phases). The export
//! fixes that with a schedule of its own, [`per_process`]: the closed loop
//! the simulator runs, with every request taking the same time, so
//! requests complete in the order they were issued. Process `p`'s iolog is
//! then its requests in the order it issued them.
//!
//! **Think times and arrival times** go into fio's version 3 timestamps
//! (microseconds; fio waits the difference between one request's and the
//! next before issuing it: `delay_since_ttime` in fio's `iolog.c`): a
//! request's time is its arrival time in an open-loop replay, else its
//! process's think times so far (the service times are the volume's to
//! add). fio's v2 `wait` is documented as a relative delay but replayed by
//! recent fio as "since fio started", so it is never written. A workload
//! with neither (every synthetic generator) is written as version 2.
//!
//! What the iologs do not carry:
//! - **Ordering between processes.** fio runs the jobs independently; a
//!   process that waited in the simulator for another's requests (bonnie's
//!   seekers) starts at once.
//!
//! Flushes become `sync` (fio's nbd engine sends NBD_CMD_FLUSH for it;
//! it rejects `datasync`). Writes carry whatever data fio writes.

use super::{Generator, Next, Op, OpKind};
use std::collections::VecDeque;
use std::fmt::Write as _;

/// The file name in the iologs. fio's nbd engine serves its one file
/// whatever it is called; it names it `nbd` itself when no file is given.
pub const FILE_NAME: &str = "nbd";

/// A generator's requests, per process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Export {
    /// Process `p`'s requests in issue order.
    pub processes: Vec<Vec<Op>>,
    /// Process `p`'s requests' times in ns ([module docs](self)).
    pub times_ns: Vec<Vec<u64>>,
    /// Some request had a think time or an arrival time: the iologs are
    /// version 3, with timestamps.
    pub timed: bool,
}

/// Runs `gen` to its end in a closed loop in which requests complete in
/// the order they were issued (each takes the same time), and returns
/// each process's requests in order. Open-loop generators (timed trace
/// replays) are asked as in a closed loop; their arrival times are dropped.
pub fn per_process(gen: &mut dyn Generator) -> Export {
    let procs = gen.processes();
    let mut ex = Export {
        processes: vec![Vec::new(); procs as usize],
        times_ns: vec![Vec::new(); procs as usize],
        timed: false,
    };
    // Each process's think times so far.
    let mut thought_ns = vec![0u64; procs as usize];
    // Processes with a request outstanding, in issue order.
    let mut outstanding: VecDeque<u32> = VecDeque::new();
    let mut waiting: Vec<u32> = Vec::new();
    // Virtual time: one tick per completion.
    let mut now_ns = 0u64;
    let mut ask = |p: u32,
                   now_ns: u64,
                   ex: &mut Export,
                   outstanding: &mut VecDeque<u32>,
                   waiting: &mut Vec<u32>| {
        match gen.next(p, now_ns) {
            Next::Op(op) => {
                ex.timed |= op.think_ns != 0 || op.at_ns != 0;
                let thought = &mut thought_ns[p as usize];
                *thought = thought.saturating_add(op.think_ns);
                let at_ns = if op.at_ns != 0 { op.at_ns } else { *thought };
                ex.times_ns[p as usize].push(at_ns);
                ex.processes[p as usize].push(op);
                outstanding.push_back(p);
            }
            Next::Wait => waiting.push(p),
            Next::Done => {}
        }
    };
    for p in 0..procs {
        ask(p, now_ns, &mut ex, &mut outstanding, &mut waiting);
    }
    while let Some(p) = outstanding.pop_front() {
        now_ns += 1;
        ask(p, now_ns, &mut ex, &mut outstanding, &mut waiting);
        for w in std::mem::take(&mut waiting) {
            ask(w, now_ns, &mut ex, &mut outstanding, &mut waiting);
        }
    }
    ex
}

/// One process's requests as a fio version 2 iolog: `add`, `open`, one
/// line per request, `close`.
pub fn fio_iolog_v2(ops: &[Op]) -> String {
    let f = FILE_NAME;
    let mut s = String::with_capacity(32 * (ops.len() + 4));
    s.push_str("fio version 2 iolog\n");
    let _ = writeln!(s, "{f} add");
    let _ = writeln!(s, "{f} open");
    for op in ops {
        let _ = match op.kind {
            OpKind::Read => writeln!(s, "{f} read {} {}", op.offset_bytes, op.len_bytes),
            OpKind::Write => writeln!(s, "{f} write {} {}", op.offset_bytes, op.len_bytes),
            OpKind::Flush => writeln!(s, "{f} sync 0 0"),
        };
    }
    let _ = writeln!(s, "{f} close");
    s
}

/// One process's requests as a fio version 3 iolog: the same lines as
/// [`fio_iolog_v2`], each after its time in microseconds.
pub fn fio_iolog_v3(ops: &[Op], times_ns: &[u64]) -> String {
    let f = FILE_NAME;
    let mut s = String::with_capacity(40 * (ops.len() + 4));
    s.push_str("fio version 3 iolog\n");
    let _ = writeln!(s, "0 {f} add");
    let _ = writeln!(s, "0 {f} open");
    let mut last_us = 0;
    for (op, &at_ns) in ops.iter().zip(times_ns) {
        // Never back in time: fio's delays are differences.
        let us = (at_ns / 1000).max(last_us);
        last_us = us;
        let _ = match op.kind {
            OpKind::Read => writeln!(s, "{us} {f} read {} {}", op.offset_bytes, op.len_bytes),
            OpKind::Write => writeln!(s, "{us} {f} write {} {}", op.offset_bytes, op.len_bytes),
            OpKind::Flush => writeln!(s, "{us} {f} sync 0 0"),
        };
    }
    let _ = writeln!(s, "{last_us} {f} close");
    s
}

/// Counts of one process's requests, as fio reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub reads: u64,
    pub writes: u64,
    pub syncs: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

pub fn counts(ops: &[Op]) -> Counts {
    let mut c = Counts::default();
    for op in ops {
        match op.kind {
            OpKind::Read => {
                c.reads += 1;
                c.read_bytes += op.len_bytes;
            }
            OpKind::Write => {
                c.writes += 1;
                c.write_bytes += op.len_bytes;
            }
            OpKind::Flush => c.syncs += 1,
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::replay::parse_fio_iolog;
    use crate::workload::WorkloadSpec;

    const VOLUME: u64 = 96 << 20;

    fn export(spec: &str) -> Export {
        let w = WorkloadSpec::parse(spec).unwrap();
        per_process(w.build(VOLUME, 7).as_mut())
    }

    /// The iolog of every process parses back (with the replay parser)
    /// into that process's requests.
    fn round_trip(spec: &str) -> Export {
        let ex = export(spec);
        for (p, ops) in ex.processes.iter().enumerate() {
            let text = fio_iolog_v2(ops);
            let back = parse_fio_iolog(&text, &format!("{spec} proc {p}")).unwrap();
            let want: Vec<(OpKind, u64, u64)> = ops
                .iter()
                .map(|o| (o.kind, o.offset_bytes, o.len_bytes))
                .collect();
            let got: Vec<(OpKind, u64, u64)> = back
                .iter()
                .map(|o| (o.kind, o.offset_bytes, o.len_bytes))
                .collect();
            assert_eq!(got, want, "{spec}: process {p}");
            assert!(back.iter().all(|o| o.wait_ns == 0 && o.at_ns.is_none()));
        }
        ex
    }

    #[test]
    fn every_synthetic_workload_round_trips() {
        let ex = round_trip("raidtest:p=4,n=500");
        assert_eq!(ex.processes.len(), 4);
        // Completions in issue order: the processes take turns.
        assert!(ex.processes.iter().all(|p| p.len() == 125));
        let ex = round_trip("dd:rw=write,bs=64k,total=8M");
        assert_eq!(ex.processes.len(), 1);
        assert_eq!(ex.processes[0].len(), 128);
        assert_eq!(ex.processes[0][1], Op::write(64 << 10, 64 << 10));
        let ex = round_trip("dd:bs=64k,qd=3,total=1M");
        assert_eq!(ex.processes.iter().map(Vec::len).sum::<usize>(), 16);
        let ex = round_trip("bonnie:size=1M,seeks=30");
        // The sequential phases on process 0 (128 writes, 128 reads and
        // 128 writes of rewrite, 128 reads), then 30 seeks over the three
        // seekers, one in ten written back.
        assert!(ex.processes[0].len() >= 4 * 128);
        let reads: usize = ex
            .processes
            .iter()
            .map(|p| p.iter().filter(|o| o.kind == OpKind::Read).count())
            .sum();
        assert_eq!(reads, 2 * 128 + 30);
        round_trip("news:readers=3,files=20,dirs=10,per-dir=10");
        round_trip("untar:files=50,p=2");
        assert!(!ex.timed);
    }

    #[test]
    fn same_seed_same_iologs() {
        assert_eq!(export("raidtest:p=3,n=60"), export("raidtest:p=3,n=60"));
    }

    /// Issue 19, point 5: a trace's arrival times survive the export (as
    /// v3 timestamps) and read back as the same times; v2 `wait`s (think
    /// times) become timestamps too.
    #[test]
    fn times_survive_the_export_as_v3_timestamps() {
        let dir = std::env::temp_dir().join(format!("platter-iolog-v3-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.iolog");
        std::fs::write(
            &path,
            "fio version 3 iolog\n5 x add\n100 x read 0 4096\n2100 x write 8192 4096\n\
             2100 x sync 0 0\n9600 x read 4096 512\n",
        )
        .unwrap();
        let ex = export(&format!("fio:{},timed=1", path.display()));
        assert!(ex.timed);
        let text = fio_iolog_v3(&ex.processes[0], &ex.times_ns[0]);
        let back = parse_fio_iolog(&text, "export").unwrap();
        let times: Vec<Option<u64>> = back.iter().map(|o| o.at_ns).collect();
        assert_eq!(
            times,
            [Some(0), Some(2_000_000), Some(2_000_000), Some(9_500_000)],
            "{text}"
        );
        // Think times (v2 waits, a closed loop) add up per process.
        std::fs::write(
            &path,
            "fio version 2 iolog\nx add\nx read 0 4096\nx wait 700 0\nx read 4096 4096\n\
             x wait 300 0\nx write 0 512\n",
        )
        .unwrap();
        let ex = export(&format!("fio:{}", path.display()));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(ex.timed);
        let text = fio_iolog_v3(&ex.processes[0], &ex.times_ns[0]);
        assert!(
            text.contains("\n0 nbd read 0 4096\n700 nbd read 4096 4096\n1000 nbd write 0 512\n"),
            "{text}"
        );
    }

    #[test]
    fn flushes_are_syncs_and_trace_timing_is_kept() {
        let dir = std::env::temp_dir().join(format!("platter-iolog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.iolog");
        std::fs::write(
            &path,
            "fio version 2 iolog\nx add\nx open\nx write 0 4096\nx wait 100 0\nx sync 0 0\nx read 512 1024\nx close\n",
        )
        .unwrap();
        let ex = export(&format!("fio:{}", path.display()));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(ex.timed);
        assert_eq!(ex.processes.len(), 1);
        let text = fio_iolog_v2(&ex.processes[0]);
        assert_eq!(
            text,
            "fio version 2 iolog\nnbd add\nnbd open\nnbd write 0 4096\nnbd sync 0 0\nnbd read 512 1024\nnbd close\n"
        );
        let c = counts(&ex.processes[0]);
        assert_eq!((c.reads, c.writes, c.syncs), (1, 1, 1));
    }
}
