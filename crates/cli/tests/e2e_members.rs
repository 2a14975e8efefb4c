//! Members that change under a running server: a member file truncated
//! behind its back is failed, never read as data (the outside tester's
//! issue, item 1).

mod e2e_support;

use e2e_support::*;
use std::fs;
use std::time::{Duration, Instant};

/// raid5 over four members of 64 MiB at 64k, as the tester had it.
const RAID5: Spec = Spec::new("raid5", 4, "64k");

fn truncate(path: &str, len_bytes: u64) {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(len_bytes))
        .unwrap_or_else(|e| panic!("truncate {path}: {e}"));
}

/// Waits until the running server reports `slot` faulty.
fn wait_faulty(s: &Server, slot: usize, what: &str) {
    let start = Instant::now();
    loop {
        let states = s.member_states();
        if states[slot] == "faulty" {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{what}: slot {slot} is still {states:?}; log:\n{}",
            tail(&s.log(), 5000)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The tester's story: `truncate -s 2M m1` behind the running server, then
/// a full-stripe write far into the volume re-extended m1 with a hole from
/// 2 MiB to the write; reads then returned zeros from the hole with no
/// error (48.5 MB of the volume differed) and m1 stayed `active`. Parity
/// still had the data. Now the write finds m1 shrank, m1 is failed with a
/// log line saying so, and every byte reads back right, degraded.
#[test]
fn a_truncated_member_is_failed_and_never_read_as_data() {
    let test = "a_truncated_member_is_failed_and_never_read_as_data";
    let Some(t) = tools(test, &["qemu-io"]) else {
        return;
    };
    let s = Server::start(Volume::create(RAID5, 180 * MIB));
    let size = s.volume.size_bytes;
    let stripe = s.volume.stripe_data_bytes;
    qemu_io(&t, s.uri(), &[format!("write -P 0x5a 0 {size}")], test);

    let full = fs::metadata(&s.volume.members[1]).expect("m1").len();
    truncate(&s.volume.members[1], 2 * MIB);
    // A whole stripe half way in: on m1 it lies some 30 MiB past the cut.
    let at = size / 2 / stripe * stripe;
    qemu_io(
        &t,
        s.uri(),
        &[format!("write -P 0xc3 {at} {stripe}")],
        &format!("{test}: full-stripe write after the truncation"),
    );
    qemu_io(
        &t,
        s.uri(),
        &[
            format!("read -P 0x5a 0 {at}"),
            format!("read -P 0xc3 {at} {stripe}"),
            format!("read -P 0x5a {} {}", at + stripe, size - at - stripe),
        ],
        &format!("{test}: every byte after m1 was cut"),
    );
    wait_faulty(&s, 1, test);
    let log = s.log();
    let member = &s.volume.members[1];
    assert!(
        log.contains(&format!("member {member} shrank from {full} to ")),
        "{test}: no log line says m1 shrank:\n{}",
        tail(&log, 5000)
    );
}

/// A member truncated while nothing is written to it is found by the
/// server's periodic size check (before this, it stayed `active` until a
/// read happened to cross its new end); a member that is short when the
/// server starts makes the assembly refuse, naming it; left out, the
/// volume is served degraded with its data intact.
#[test]
fn a_member_cut_while_idle_is_failed_and_refused_at_the_next_start() {
    let test = "a_member_cut_while_idle_is_failed_and_refused_at_the_next_start";
    let Some(t) = tools(test, &["qemu-io"]) else {
        return;
    };
    let mut s = Server::start(Volume::create(RAID5, 180 * MIB));
    let size = s.volume.size_bytes;
    qemu_io(&t, s.uri(), &[format!("write -P 0x6b 0 {size}")], test);

    let full = fs::metadata(&s.volume.members[2]).expect("m2").len();
    truncate(&s.volume.members[2], 2 * MIB);
    wait_faulty(&s, 2, test);
    assert!(
        s.log()
            .contains(&format!("shrank from {full} to 2097152 bytes")),
        "{test}: the log does not say m2 shrank:\n{}",
        tail(&s.log(), 5000)
    );
    qemu_io(&t, s.uri(), &[format!("read -P 0x6b 0 {size}")], test);
    s.stop_with("TERM");

    // The short member makes the assembly refuse, in one line naming it.
    let refused = run(
        std::process::Command::new(env!("CARGO_BIN_EXE_platter"))
            .arg("serve")
            .arg("--socket")
            .arg(s.socket())
            .args(&s.volume.members),
        CMD_TIMEOUT,
    );
    assert!(!refused.status.success(), "{}", refused.describe(test));
    let m2 = &s.volume.members[2];
    assert!(
        refused.stderr.contains(&format!(
            "member {m2}: device is 2097152 bytes but its label needs {full} \
             (truncated or the wrong device?)"
        )),
        "{}",
        refused.describe(test)
    );
    // Left out, the volume is served degraded, every byte intact.
    s.options.leave_out = vec![2];
    s.start_again_unchecked();
    assert_eq!(s.member_states()[2], "missing", "{test}");
    qemu_io(
        &t,
        s.uri(),
        &[format!("read -P 0x6b 0 {size}")],
        &format!("{test}: after the restart"),
    );
    s.stop_with("TERM");
}
