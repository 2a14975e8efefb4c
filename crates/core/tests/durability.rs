//! What an acknowledgement promises when a member fails under a write: the
//! bytes are durable on the members that remain, and the failure is in
//! their labels, so that a crash cannot bring the stale member back as
//! current.

mod support;

use bytes::Bytes;
use platter_core::volume::{MemberOp, Reply, Request};
use platter_core::{Level, ParityLayout};
use support::{Config, Harness};

fn mirror(members: u32) -> Config {
    Config {
        level: Level::Mirror,
        layout: ParityLayout::LeftSymmetric,
        copies: members,
        members,
        interleave_bytes: 4096,
        rows: 16,
    }
}

/// Takes every member I/O the volume has emitted so far.
fn take_ios(h: &mut Harness) -> Vec<platter_core::volume::MemberIo> {
    std::iter::from_fn(|| h.volume.next_io()).collect()
}

fn fua_write(h: &mut Harness) -> platter_core::volume::RequestId {
    h.volume.submit(Request::Write {
        offset_bytes: 0,
        data: Bytes::from(vec![0xab; 4096]),
        fua: true,
    })
}

/// Seed 1142 of `crashes_keep_flushed_writes` (raid10, 7 copies): a FUA
/// write's member write failed on two copies and succeeded on three. The
/// engine then skipped the FUA flush altogether (it flushed only when no
/// write had failed) and acknowledged the write; the crash that followed
/// undid it on every surviving copy, and the read after the restart
/// returned zeros where the FUA data was. 8 of 10,000 crash seeds lost
/// flushed writes this way.
#[test]
fn a_fua_write_that_lost_a_copy_still_flushes_the_copies_it_kept() {
    let mut h = Harness::new(&mirror(3), 1);
    let id = fua_write(&mut h);
    let writes = take_ios(&mut h);
    assert_eq!(writes.len(), 3, "one write per copy");
    for io in writes {
        assert!(matches!(io.op, MemberOp::Write { .. }));
        if io.member == 0 {
            h.volume
                .io_done(io.id, Err(String::from("test: write error").into()));
        } else {
            h.perform(io);
        }
    }
    assert!(
        h.volume.next_completion().is_none(),
        "acknowledged before its FUA flush"
    );
    let flushes = take_ios(&mut h);
    let mut flushed: Vec<u32> = flushes
        .iter()
        .filter(|io| matches!(io.op, MemberOp::Flush))
        .map(|io| io.member)
        .collect();
    flushed.sort_unstable();
    assert_eq!(
        flushed,
        [1, 2],
        "the copies that hold the write are flushed"
    );
    for io in flushes {
        h.perform(io);
    }
    let c = h.volume.next_completion().expect("completed");
    assert_eq!(c.id, id);
    assert_eq!(c.result, Ok(Reply::Done));
}

/// The other half of the same loss: a write that leaves a failed member
/// behind must not be acknowledged until the failure is in the labels of
/// the members that remain. Acknowledged earlier, a crash before the label
/// update lands assembles the failed member again as current, and its old
/// bytes are served (or copied over the new ones by the resync).
#[test]
fn a_write_that_left_a_member_behind_waits_for_its_failure_to_be_recorded() {
    let mut h = Harness::new(&mirror(2), 2);
    h.record_failures = false;
    let id = fua_write(&mut h);
    for io in take_ios(&mut h) {
        if io.member == 1 {
            h.volume
                .io_done(io.id, Err(String::from("test: write error").into()));
        } else {
            h.perform(io);
        }
    }
    // The FUA flush of member 0, then the write is done but held.
    for _ in 0..4 {
        for io in take_ios(&mut h) {
            h.perform(io);
        }
    }
    assert_eq!(h.volume.unrecorded_failures().collect::<Vec<_>>(), [1]);
    assert!(
        h.volume.next_completion().is_none(),
        "acknowledged while the failure was not in the labels"
    );
    assert!(h.volume.is_idle(), "nothing is owed to the members");
    // Reads are not held: they promise nothing about durability.
    let read = h.volume.submit(Request::Read {
        offset_bytes: 0,
        len_bytes: 4096,
    });
    for io in take_ios(&mut h) {
        h.perform(io);
    }
    let c = h.volume.next_completion().expect("the read completes");
    assert_eq!(c.id, read);
    assert!(c.result.is_ok());

    h.volume.failure_recorded(1);
    let c = h.volume.next_completion().expect("released");
    assert_eq!(c.id, id);
    assert_eq!(c.result, Ok(Reply::Done));
    assert_eq!(h.volume.unrecorded_failures().count(), 0);
}

/// Errors are not held: a failed write promises nothing.
#[test]
fn a_failed_write_is_reported_at_once() {
    let mut h = Harness::new(&mirror(2), 3);
    h.record_failures = false;
    let id = fua_write(&mut h);
    for io in take_ios(&mut h) {
        h.volume
            .io_done(io.id, Err(String::from("test: write error").into()));
    }
    let c = h.volume.next_completion().expect("completed");
    assert_eq!(c.id, id);
    assert!(c.result.is_err());
}

/// Answers every member I/O the volume has out, and those they lead to,
/// with success (reads with zeros), except writes to `failing`.
fn settle(v: &mut platter_core::volume::Volume, failing: Option<u32>) {
    for _ in 0..1000 {
        let Some(io) = v.next_io() else { return };
        let result = match io.op {
            MemberOp::Read { len_bytes, .. } => Ok(Some(Bytes::from(vec![0; len_bytes as usize]))),
            MemberOp::Write { .. } if Some(io.member) == failing => {
                Err(String::from("test: write error").into())
            }
            _ => Ok(None),
        };
        v.io_done(io.id, result);
    }
    panic!("the volume did not settle");
}

/// While a failure is not in the labels, the failed member may come back
/// after a crash as current; the regions written without it must stay
/// marked in the write-intent bitmap so that the resync makes the copies
/// agree. A sweep then clears nothing. Once the failure is recorded the
/// region still stays marked while the member is away (it missed that
/// write: a partial rebuild brings it back, tests/partial_rebuild.rs);
/// only quiet regions nobody missed are cleared.
#[test]
fn sweeps_keep_every_bit_while_a_failure_is_unrecorded() {
    use platter_core::geometry::{Geometry, GeometrySpec};
    use platter_core::intent::{IntentLayout, RegionSet};
    use platter_core::volume::{Health, Limits, Volume};
    // Room for a bitmap page between the label and the data.
    let geometry = Geometry::new(GeometrySpec {
        data_offset_bytes: 8192,
        ..mirror(2).geometry().spec().clone()
    })
    .unwrap();
    let layout = IntentLayout::new(&geometry, 2).unwrap().expect("a bitmap");
    let v = &mut Volume::new(geometry, vec![Health::Online; 2], Limits::default());
    v.enable_intent(layout, RegionSet::new(&layout), false);
    let write = fua_write_on(v);
    settle(v, Some(1));
    assert_eq!(v.unrecorded_failures().collect::<Vec<_>>(), [1]);
    let dirty = |v: &platter_core::volume::Volume| v.intent_status().unwrap().dirty_regions;
    assert_eq!(dirty(v), 1, "the write marked its region");

    let sweep = v.submit(Request::Sweep { all: true });
    settle(v, None);
    assert_eq!(
        dirty(v),
        1,
        "a sweep cleared a bit while a failure was unrecorded"
    );

    v.failure_recorded(1);
    let released: Vec<_> = std::iter::from_fn(|| v.next_completion())
        .map(|c| c.id)
        .collect();
    assert_eq!(released, [write, sweep]);
    v.submit(Request::Sweep { all: true });
    settle(v, None);
    assert_eq!(
        dirty(v),
        1,
        "a sweep cleared a region the absent member missed"
    );
    assert!(v.region_missed(0));
}

fn fua_write_on(v: &mut platter_core::volume::Volume) -> platter_core::volume::RequestId {
    v.submit(Request::Write {
        offset_bytes: 0,
        data: Bytes::from(vec![0xab; 4096]),
        fua: true,
    })
}
