//! What the simulator's suites share.

use platter_sim::disk::drive::{Command, Drive, Hit, Kind};
use std::path::PathBuf;

/// DiskSim's three validation drives, shipped in the repository's
/// `data/disksim` (its README says where they come from).
#[allow(dead_code)] // not every suite reads DiskSim's drives
pub fn disksim_data() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/disksim");
    assert!(
        d.join("cheetah9LP.parv").exists(),
        "DiskSim's drives are missing from {}: they ship in the repository",
        d.display()
    );
    d
}

#[allow(dead_code)] // not every suite drives a drive by hand
pub fn read(token: u64, lbn: u64, count: u32) -> Command {
    Command {
        token,
        kind: Kind::Read,
        lbn,
        count,
    }
}

/// Serves one command on an idle drive at `now`; returns when it
/// completed and how it met the cache.
#[allow(dead_code)]
pub fn serve(d: &mut Drive, now: f64, cmd: Command) -> (f64, Hit) {
    d.submit(now, cmd);
    let t = d.next_event_ms().expect("a command in service");
    let s = d.advance(t);
    assert_eq!(s.len(), 1, "one command at a time");
    (s[0].done_ms, s[0].hit)
}
