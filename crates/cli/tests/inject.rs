//! `platter serve --inject MEMBER=SPEC`: refused in one line when the spec
//! or the member is wrong; with a member dying under qemu-io, the data still
//! reads back and the server says the member was marked faulty.

mod e2e_support;

use std::process::Command;
use std::time::{Duration, Instant};

use e2e_support::*;

fn serve_cmd(v: &Volume, injects: &[String]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_platter"));
    cmd.arg("serve").arg("--socket").arg(v.path().join("sock"));
    for i in injects {
        cmd.arg("--inject").arg(i);
    }
    cmd.args(&v.members)
        .env("RUST_BACKTRACE", "1")
        .env("PLATTER_LOG", "info")
        .env("NO_COLOR", "1");
    cmd
}

/// The command exits non-zero at once with one line on stderr naming
/// `says`, nothing on stdout, and leaves the labels alone.
fn assert_refused_in_one_line(v: &Volume, injects: &[String], says: &str) {
    let out = run(&mut serve_cmd(v, injects), CMD_TIMEOUT);
    let what = format!("serve --inject {injects:?}");
    assert!(
        out.status.code().is_some_and(|c| c != 0),
        "{}",
        out.describe(&what)
    );
    assert!(out.stdout.is_empty(), "{}", out.describe(&what));
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", out.describe(&what));
    assert!(
        lines[0].starts_with("platter: error: --inject") && lines[0].contains(says),
        "{}",
        out.describe(&what)
    );
    assert!(!out.stderr.contains("panicked"));
    assert_eq!(v.state(), "clean", "{what}: labels left alone");
}

#[test]
fn bad_injections_are_refused_in_one_line() {
    let v = Volume::create(Spec::new("raid5", 4, "64k"), 4 * MIB);
    let m1 = &v.members[1];
    for (inject, says) in [
        (format!("{m1}=fial-nth=3"), "unknown key \"fial-nth\""),
        (format!("{m1}=fail-rate=2"), "between 0 and 1"),
        (format!("{m1}=latency=5"), "needs a unit"),
        (format!("{m1}=fail-nth=0"), "numbered from 1"),
        (m1.to_string(), "is not one of the members"),
        (
            format!("{}/elsewhere=fail-nth=1", v.path().display()),
            "is not one of the members",
        ),
        ("m1=fail-nth=1".to_string(), "m1 is not one of the members"),
    ] {
        assert_refused_in_one_line(&v, &[inject], says);
    }
    // The same member twice.
    assert_refused_in_one_line(
        &v,
        &[format!("{m1}=fail-nth=1"), format!("{m1}=seed=2")],
        "named twice",
    );
}

/// Waits for the ready banner on the server's stdout.
fn wait_ready(server: &mut Background) {
    let start = Instant::now();
    while !server.stdout().contains("\ntry:") {
        assert!(
            server.is_running(),
            "the server ended early:\n{}",
            server.stderr()
        );
        assert!(
            start.elapsed() < READY_TIMEOUT,
            "no banner:\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn raid5_serves_through_a_member_dying_under_qemu_io() {
    let Some(tools) = tools(
        "raid5_serves_through_a_member_dying_under_qemu_io",
        &["qemu-io"],
    ) else {
        return;
    };
    let v = Volume::create(Spec::new("raid5", 4, "64k"), 8 * MIB);
    let inject = format!("{}=fail-from=50", v.members[1]);
    let mut server = Background::spawn(&mut serve_cmd(&v, &[inject]), "platter serve --inject");
    wait_ready(&mut server);
    let uri = format!(
        "nbd+unix:///{}?socket={}",
        v.name,
        v.path().join("sock").display()
    );
    // 100 patterns of up to 40k at unaligned offsets, one in each 80k of
    // the volume, across interleaves and stripes: enough member I/O that
    // m1 dies part-way through the writes whatever the engine merges.
    let mut rng = Rng::new(7);
    let regions: Vec<(u64, u64, u8)> = (0..100u64)
        .map(|i| {
            let off = i * 80 * KIB + rng.below(40 * KIB);
            let len = 1 + rng.below(40 * KIB);
            (off, len, 1 + (i % 250) as u8)
        })
        .collect();
    let mut write = tools.cmd("qemu-io");
    write.args(["-f", "raw"]);
    for &(off, len, p) in &regions {
        write.args(["-c", &format!("write -P {p:#x} {off} {len}")]);
    }
    write.args(["-c", "flush"]).arg(&uri);
    run_ok(&mut write, CMD_TIMEOUT, "qemu-io write");
    read_back(&tools, &uri, &regions);
    send_signal(server.pid(), "TERM");
    let status = server.wait(STOP_TIMEOUT);
    let log = server.stderr();
    assert!(log.contains("injecting faults"), "{log}");
    let faulty = log
        .lines()
        .find(|l| l.contains("member marked faulty"))
        .unwrap_or_else(|| panic!("no member marked faulty in the log:\n{log}"));
    assert!(
        faulty.contains("injected fault") && faulty.contains(&v.members[1]),
        "{faulty}"
    );
    assert!(!log.contains("panicked"), "{log}");
    assert!(status.success(), "server exit: {status}\n{log}");
    // The member stays out; served again without faults, the volume is
    // degraded and still holds every pattern.
    assert_eq!(v.state(), "degraded");
    let mut again = Background::spawn(&mut serve_cmd(&v, &[]), "platter serve again");
    wait_ready(&mut again);
    read_back(&tools, &uri, &regions);
    send_signal(again.pid(), "TERM");
    let status = again.wait(STOP_TIMEOUT);
    assert!(
        status.success(),
        "second server: {status}\n{}",
        again.stderr()
    );
}

/// Reads every pattern back on a new connection (qemu-io `read -P` prints
/// "Pattern verification failed" and still exits 0, so look).
fn read_back(tools: &Tools, uri: &str, regions: &[(u64, u64, u8)]) {
    let mut read = tools.cmd("qemu-io");
    read.args(["-f", "raw"]);
    for &(off, len, p) in regions {
        read.args(["-c", &format!("read -P {p:#x} {off} {len}")]);
    }
    read.arg(uri);
    let out = run_ok(&mut read, CMD_TIMEOUT, "qemu-io read");
    assert!(
        !out.stdout.contains("verification failed") && !out.stderr.contains("failed"),
        "{}",
        out.describe("qemu-io read")
    );
    assert_eq!(
        out.stdout.matches("read ").count(),
        regions.len(),
        "{}",
        out.describe("qemu-io read")
    );
}
