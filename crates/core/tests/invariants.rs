//! The invariant check sees what it claims to: the harness runs
//! `Volume::check_invariants` at every step, so a volume whose bookkeeping
//! is broken on purpose fails at the next step instead of hanging or
//! returning wrong bytes later.

mod support;

use bytes::Bytes;
use platter_core::volume::Request;
use platter_core::Level;
use std::panic::{catch_unwind, AssertUnwindSafe};
use support::*;

fn harness() -> Harness {
    let config = all_configs(&[4096], &[4])
        .into_iter()
        .find(|c| c.level == Level::Raid5)
        .expect("a RAID-5 config");
    Harness::new(&config, 1)
}

/// A healthy volume passes the check at every step of a busy workload.
#[test]
fn a_healthy_volume_passes_every_step() {
    let mut h = harness();
    let mut model = Model::new(&h.volume);
    random_workload(&mut h, &mut model, 200, 8);
    verify_all(&mut h, &model);
    h.volume.check_invariants();
}

/// One more I/O counted pending than is in flight (what a phase that
/// forgot to count an I/O's completion would leave): `check_invariants`
/// names it, and so the harness's step, which runs it, fails.
#[test]
fn a_broken_pending_count_fails_the_step_check() {
    let mut h = harness();
    h.volume.submit(Request::Write {
        offset_bytes: 0,
        data: Bytes::from(vec![7u8; 4096]),
        fua: false,
    });
    h.volume.check_invariants();
    assert!(h.volume.break_pending_count_for_tests());
    let direct = catch_unwind(AssertUnwindSafe(|| h.volume.check_invariants()));
    assert!(direct.is_err(), "the check missed a broken pending count");
    let stepped = catch_unwind(AssertUnwindSafe(|| h.run()));
    assert!(stepped.is_err(), "the harness's step check missed it");
}
