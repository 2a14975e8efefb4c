//! Members that change under a running server (the outside tester's
//! issue): a member file truncated behind its back is failed, never read
//! as data; a full file system refuses writes with ENOSPC and costs no
//! member; `serve --force` brings back members marked faulty.

mod e2e_support;

use e2e_support::*;
use std::fs;
use std::path::Path;
use std::process::Command;
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

/// The story: a member file removed (`rm`) behind a running server was never
/// noticed. Reads and writes went on to the open inode, status said
/// `active`, and a clean stop marked the volume clean, after which the
/// inode and every byte written to it were gone: on a stripe or concat,
/// the volume with it. The periodic size check now fails a member whose
/// file has no name left, while the data can still be served from the
/// others.
#[test]
fn a_member_deleted_while_served_is_failed() {
    let test = "a_member_deleted_while_served_is_failed";
    let Some(t) = tools(test, &["qemu-io"]) else {
        return;
    };
    let mut s = Server::start(Volume::create(RAID5, 32 * MIB));
    let size = s.volume.size_bytes;
    qemu_io(&t, s.uri(), &[format!("write -P 0x3c 0 {size}")], test);
    fs::remove_file(&s.volume.members[1]).expect("rm m1");
    wait_faulty(&s, 1, test);
    assert!(
        s.log().contains("was deleted while in use"),
        "{test}: the log does not say m1 was deleted:\n{}",
        tail(&s.log(), 5000)
    );
    qemu_io(&t, s.uri(), &[format!("read -P 0x3c 0 {size}")], test);
    s.stop_with("TERM");
}

/// A member truncated while nothing is written to it is found by the
/// server's periodic size check (before this, it stayed `active` until a
/// read happened to cross its new end); a member that is short when the
/// server starts is left out, the log naming it and why, and the volume is
/// served degraded with its data intact. (Once, the whole start was
/// refused: one shrunken export on a far host kept the volume down.)
#[test]
fn a_member_cut_while_idle_is_failed_and_left_out_at_the_next_start() {
    let test = "a_member_cut_while_idle_is_failed_and_left_out_at_the_next_start";
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

    // At the next start the short member is left out, the log naming it
    // and why, and the volume is served degraded, every byte intact.
    s.start_again_unchecked();
    let m2 = s.volume.members[2].clone();
    assert_eq!(s.member_states()[2], "missing", "{test}");
    assert!(
        s.log().contains(&format!(
            "member {m2}: device is 2097152 bytes but its label needs {full} \
             (truncated or the wrong device?); left out of the volume"
        )),
        "{test}: the log does not say why m2 is left out:\n{}",
        tail(&s.log(), 5000)
    );
    qemu_io(
        &t,
        s.uri(),
        &[format!("read -P 0x6b 0 {size}")],
        &format!("{test}: after the restart"),
    );
    s.stop_expecting_errors("TERM", &["left out of the volume"]);
    assert_eq!(
        fs::metadata(&m2).expect("m2").len(),
        2 * MIB,
        "{test}: the short member was touched"
    );
}

/// A tmpfs of `size` mounted on `dir` for the test's life (lazily
/// unmounted on drop, after the server that holds its files is gone).
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    /// None (with the reason printed) when it cannot be mounted; under
    /// CI=true that is a failure, not a skip.
    fn mount(test: &str, dir: &Path, size: &str) -> Option<Tmpfs> {
        let why = if !is_root() {
            "not root".to_string()
        } else {
            let out = run(
                Command::new("mount")
                    .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                    .arg(dir),
                CMD_TIMEOUT,
            );
            if out.status.success() {
                return Some(Tmpfs(dir.to_path_buf()));
            }
            format!("mount -t tmpfs failed: {}", out.stderr.trim())
        };
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: cannot mount a tmpfs under CI: {why}"
        );
        platter_testkit::skips::skipped(test, format!("cannot mount a tmpfs ({why})"));
        None
    }

    fn resize(&self, size: &str) {
        run_ok(
            Command::new("mount")
                .args(["-o", &format!("remount,size={size}")])
                .arg(&self.0),
            CMD_TIMEOUT,
            "remount the tmpfs",
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Waits until the server runs no resync and owes none.
fn wait_resynced(s: &Server, what: &str) {
    let start = Instant::now();
    loop {
        let st = s.live("status");
        if st["resync"].is_null() && st["bitmap"]["unsynced_regions"] == 0 {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what}: no end to the resync: {st}\n{}",
            tail(&s.log(), 5000)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The tester's story: members on a 100 MiB tmpfs, the volume written
/// until the file system was full. All four members were marked faulty,
/// the client got EIO (not ENOSPC), reads of old data failed too, SIGTERM
/// ended in "final flush failed", and after space was freed `serve`
/// refused ("2 of 4 members unavailable and raid5 survives 1"), though the
/// data on the members was intact. Now: ENOSPC for the write, members
/// active, old data reads right, a clean stop and restart, and once there
/// is room the resync leaves nothing for `check` to find.
#[test]
fn a_full_file_system_refuses_writes_with_enospc_and_keeps_the_members() {
    full_file_system_story(
        "a_full_file_system_refuses_writes_with_enospc_and_keeps_the_members",
        &[],
    );
}

/// The same with checksums. How it showed: the checksum-page write of a
/// flush was refused for space ("writing the checksums at member byte
/// 1245184: No space left on device"), every member was marked faulty,
/// the stop exited 1 and the restart was refused ("3 of 4 members
/// unavailable") until `serve --force`. The pages are now written whole at
/// `create` and allocated again at every writable start, as the bitmap is.
#[test]
fn with_checksums_a_full_file_system_refuses_writes_with_enospc_and_keeps_the_members() {
    full_file_system_story(
        "with_checksums_a_full_file_system_refuses_writes_with_enospc_and_keeps_the_members",
        &["--checksums", "crc32c"],
    );
}

fn full_file_system_story(test: &str, create_args: &[&str]) {
    let Some(t) = tools(test, &["qemu-io"]) else {
        return;
    };
    let dir = temp_dir();
    let Some(tmpfs) = Tmpfs::mount(test, dir.path(), "100m") else {
        return;
    };
    let inner = tempfile::tempdir_in(dir.path()).expect("a directory on the tmpfs");
    let mut s = Server::start(Volume::create_with(RAID5, 180 * MIB, inner, create_args));
    let size = s.volume.size_bytes;
    let old = 16 * MIB;
    qemu_io(&t, s.uri(), &[format!("write -P 0x11 0 {old}")], test);

    let chunk = 4 * MIB;
    let mut at = old;
    let refused = loop {
        assert!(at + chunk <= size, "{test}: the tmpfs never filled up");
        let out = run(
            t.cmd("qemu-io")
                .args(["-f", "raw", s.uri(), "-c"])
                .arg(format!("write -P 0x22 {at} {chunk}")),
            CMD_TIMEOUT,
        );
        let said = format!("{}{}", out.stdout, out.stderr);
        if said.contains("failed") {
            break said;
        }
        at += chunk;
    };
    assert!(
        refused.contains("No space left on device"),
        "{test}: the full write failed otherwise: {refused}"
    );
    assert_eq!(s.member_states(), ["active"; 4], "{test}");
    qemu_io(
        &t,
        s.uri(),
        &[
            format!("read -P 0x11 0 {old}"),
            format!("read -P 0x22 {old} {}", at - old),
        ],
        &format!("{test}: what was written before the file system filled"),
    );
    s.stop_with("TERM");
    s.start_again_unchecked();
    assert_eq!(s.member_states(), ["active"; 4], "{test}: after a restart");

    tmpfs.resize("400m");
    wait_resynced(&s, test);
    let report = s.live("check");
    assert_eq!(report["mismatched_stripes"], 0, "{test}: {report}");
    qemu_io(
        &t,
        s.uri(),
        &[
            format!("read -P 0x11 0 {old}"),
            format!("write -P 0x33 {at} {chunk}"),
            format!("read -P 0x33 {at} {chunk}"),
        ],
        &format!("{test}: once there is room"),
    );
    s.stop();
}

/// The abuse pass's story: a raid5 copied with `cp --sparse=always` (the
/// zeroed write-intent bitmap becomes a hole) onto a file system that then
/// filled up. The first write to a quiet region set its bitmap bit, the
/// bitmap write found no room on any member, and all four members were
/// marked faulty at once: the client got EIO and the volume was "failed".
/// Now a read-write start allocates every member's label and bitmap area,
/// and refuses, saying so, when it cannot; once it could, a full file
/// system costs the writes their ENOSPC and no member.
#[test]
fn a_sparse_copy_on_a_full_file_system_keeps_its_members() {
    let test = "a_sparse_copy_on_a_full_file_system_keeps_its_members";
    let Some(t) = tools(test, &["qemu-io", "cp", "dd"]) else {
        return;
    };
    let dir = temp_dir();
    let Some(_tmpfs) = Tmpfs::mount(test, dir.path(), "64m") else {
        return;
    };
    let inner = tempfile::tempdir_in(dir.path()).expect("a directory on the tmpfs");
    let mut s = Server::start(Volume::create_in(RAID5, 24 * MIB, inner));
    let old = 4 * MIB;
    qemu_io(&t, s.uri(), &[format!("write -P 0x11 0 {old}")], test);
    s.stop();
    for m in &s.volume.members {
        let copy = format!("{m}.sparse");
        run_ok(
            t.cmd("cp").args(["--sparse=always", m, &copy]),
            CMD_TIMEOUT,
            "sparse copy",
        );
        fs::rename(&copy, m).unwrap();
    }
    let filler = s.volume.path().join("filler");
    let fill = || {
        let out = run(
            t.cmd("dd")
                .args(["if=/dev/zero", "bs=1M"])
                .arg(format!("of={}", filler.display())),
            CMD_TIMEOUT,
        );
        assert!(
            out.stderr.contains("No space left"),
            "{}",
            out.describe(test)
        );
    };
    fill();
    let events = s.volume.status()["event_counter"].as_u64();
    let out = run(
        Command::new(env!("CARGO_BIN_EXE_platter"))
            .arg("serve")
            .arg("--socket")
            .arg(s.volume.path().join("refused.sock"))
            .args(&s.volume.members),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(1), "{}", out.describe(test));
    assert!(
        out.stderr.contains("write-intent bitmap area") && out.stderr.contains("make room"),
        "{}",
        out.describe(test)
    );
    let st = s.volume.status();
    assert_eq!(st["state"], "clean", "{test}: labels after the refusal");
    assert_eq!(
        st["event_counter"].as_u64(),
        events,
        "{test}: labels untouched"
    );

    fs::remove_file(&filler).unwrap();
    s.start_again();
    s.stop();
    fill();
    s.start_again();
    let out = run(
        t.cmd("qemu-io")
            .args(["-f", "raw", s.uri(), "-c"])
            .arg(format!(
                "write -P 0x22 {} {}",
                s.volume.size_bytes / 2,
                4 * MIB
            )),
        CMD_TIMEOUT,
    );
    assert!(
        format!("{}{}", out.stdout, out.stderr).contains("No space left on device"),
        "{}",
        out.describe(test)
    );
    assert_eq!(
        s.member_states(),
        ["active"; 4],
        "{test}: a full file system"
    );
    qemu_io(
        &t,
        s.uri(),
        &[format!("read -P 0x11 0 {old}")],
        &format!("{test}: what was written before"),
    );
    s.stop_with("TERM");
}

/// md's escape hatch: members the labels mark faulty (two of a raid5, so
/// a plain `serve` refuses the volume) but whose data is current are
/// brought back by `serve --force`, which says what it risks; the data is
/// intact, and the resync it runs leaves nothing for `check` to find.
#[test]
fn serve_force_uses_members_the_labels_mark_faulty() {
    let test = "serve_force_uses_members_the_labels_mark_faulty";
    let Some(t) = tools(test, &["qemu-io", "nbdcopy", "sha256sum"]) else {
        return;
    };
    let mut s = Server::start(Volume::create(RAID5, 32 * MIB));
    let size = s.volume.size_bytes;
    qemu_io(
        &t,
        s.uri(),
        &[
            format!("write -P 0x44 0 {}", size / 2),
            format!("write -P 0x55 {} {}", size / 2, size - size / 2),
        ],
        test,
    );
    let digest = volume_sha256(&t, s.uri(), test);
    // Two of raid5's four: the second needs --force.
    for slot in ["1", "2"] {
        run_ok(
            Command::new(env!("CARGO_BIN_EXE_platter")).args([
                "fail",
                "--force",
                "--control",
                &s.control(),
                slot,
            ]),
            CMD_TIMEOUT,
            "platter fail",
        );
    }
    s.crash();

    let serve = |force: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_platter"));
        c.arg("serve").arg("--socket").arg(s.socket());
        if force {
            c.arg("--force");
        }
        c.args(&s.volume.members);
        c
    };
    let refused = run(&mut serve(false), CMD_TIMEOUT);
    assert!(
        !refused.status.success()
            && refused
                .stderr
                .contains("2 of 4 members unavailable, and raid5 cannot serve all of its data"),
        "{}",
        refused.describe(test)
    );

    let _ = fs::remove_file(s.socket());
    s.options.extra_args = vec!["--force".into()];
    s.start_again_unchecked();
    let log = s.log();
    for m in &s.volume.members[1..3] {
        assert!(
            log.contains(&format!("--force: using member {m}")) && log.contains("return old data"),
            "{test}: --force does not say what it does with {m}:\n{}",
            tail(&log, 5000)
        );
    }
    assert_eq!(s.member_states(), ["active"; 4], "{test}");
    assert_eq!(volume_sha256(&t, s.uri(), test), digest, "{test}: forced");
    wait_resynced(&s, test);
    let report = s.live("check");
    assert_eq!(report["mismatched_stripes"], 0, "{test}: {report}");
    s.stop();
    // In sync again: a plain serve takes every member.
    s.options.extra_args.clear();
    s.start_again();
    assert_eq!(s.member_states(), ["active"; 4], "{test}: without --force");
    assert_eq!(
        volume_sha256(&t, s.uri(), test),
        digest,
        "{test}: restarted"
    );
    s.stop();
}
