//! What a write, a flush or a maintenance request answers after a member
//! failed under it: success exactly when every byte it covers is still
//! held by a member in use. Mutation testing found `intact`'s range
//! arithmetic and its flush case unexamined: the answer could cover the
//! wrong bytes (or none) and no test noticed.

mod support;

use platter_core::volume::Request;
use platter_core::Level;
use support::*;

const IL: u64 = 4096;

fn config(level: Level, members: u32, copies: u32) -> Config {
    Config::of(level, members, copies, IL, 16)
}

/// RAID-10 over 4 with 2 copies: even chunks on members 0 and 1, odd ones
/// on 2 and 3. With 2 and 3 gone, a write to an even chunk that also
/// fails on member 1 succeeds (member 0 has it); one that reaches an odd
/// chunk fails.
#[test]
fn a_raid10_write_answers_for_exactly_its_bytes() {
    let mut h = Harness::new(&config(Level::Raid10, 4, 2), 31);
    let mut model = Model::new(&h.volume);
    random_workload(&mut h, &mut model, 10, 4);
    h.volume.mark_faulty(2, "test: pair lost".into());
    h.volume.mark_faulty(3, "test: pair lost".into());
    h.record_failures();
    h.broken[1] = true;
    // Chunk 4, on members 0 and 1, away from its start.
    h.write(4 * IL + 512, &[0x11; 1024])
        .expect("member 0 holds every byte written");
    assert_eq!(
        h.volume.health()[1],
        platter_core::volume::Health::Faulty,
        "the write failed on member 1"
    );
    // Chunks 6 and 7: 7 is on the lost pair.
    h.write(6 * IL + 512, &[0x22; IL as usize])
        .expect_err("chunk 7 has no member left");
}

/// Concat over 2: a write across the boundary that fails on member 1 fails,
/// however far past the first chunk the lost bytes lie.
#[test]
fn a_concat_write_across_a_lost_member_fails() {
    let mut h = Harness::new(&config(Level::Concat, 2, 1), 32);
    let m0 = h.volume.geometry().member_used_bytes(0);
    h.broken[1] = true;
    // One chunk on member 0, two on member 1.
    h.write(m0 - IL, &vec![0x33; 3 * IL as usize])
        .expect_err("two chunks of it are on the lost member");
    // Wholly on member 0: fine.
    h.write(m0 - IL, &vec![0x44; IL as usize])
        .expect("member 0 holds it");
}

/// A flush that fails on a member of a concat fails: the data it promised
/// durable is not all on members in use.
#[test]
fn a_flush_failing_on_a_concat_member_fails() {
    let mut h = Harness::new(&config(Level::Concat, 2, 1), 33);
    let mut model = Model::new(&h.volume);
    random_workload(&mut h, &mut model, 10, 4);
    h.broken[1] = true;
    h.one(Request::Flush)
        .expect_err("member 1's bytes are not durable");
}

/// A rebuild step whose write to the member being rebuilt fails answers
/// with that reason (the server logs it; the member is failed and the
/// rebuild stops), not a repair's.
#[test]
fn a_rebuild_step_whose_write_fails_says_why() {
    let setup = || {
        let mut h = Harness::new(&config(Level::Mirror, 2, 2), 34);
        let mut model = Model::new(&h.volume);
        random_workload(&mut h, &mut model, 6, 3);
        h.volume.mark_faulty(1, "test: replaced".into());
        h.record_failures();
        h.volume.start_rebuild(1, 0).unwrap();
        h
    };
    let mut h = setup();
    let before = h.ios;
    h.log = Some(Vec::new());
    h.volume.rebuild_step(2).expect("a step");
    for c in h.run() {
        c.result.expect("a step without faults");
    }
    let k = h
        .log
        .take()
        .unwrap()
        .iter()
        .position(|&(m, op)| m == 1 && op == "write")
        .expect("the step writes member 1");

    let mut h = setup();
    h.fail_nth = Some(before + k as u64 + 1);
    let step = h.volume.rebuild_step(2).expect("a step");
    let done = h.run();
    let c = done.iter().find(|c| c.id == step).expect("the step ends");
    let err = c.result.as_ref().expect_err("its write failed");
    assert!(
        err.to_string()
            .contains("the member being rebuilt failed a write"),
        "{err}"
    );
    assert!(h.volume.rebuild_progress().is_none(), "the rebuild stopped");
}
