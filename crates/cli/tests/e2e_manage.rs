//! Issue 4, 6b on a real server: for raid5, raid6 and raid10, fail each
//! member in turn while fio verifies the volume; the volume's sha256 never
//! changes; a new device replaces the member and is rebuilt in the
//! background; `platter check` then finds no mismatch.

mod e2e_support;

use e2e_support::*;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn platter(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_platter"));
    c.args(args);
    c
}

fn control(s: &Server) -> String {
    format!("{}.ctl", s.socket().display())
}

fn live_status(s: &Server) -> Value {
    let out = run_ok(
        &mut platter(&["status", "--json", "--control", &control(s)]),
        CMD_TIMEOUT,
        "platter status --control",
    );
    serde_json::from_str(&out.stdout).expect("status --json is JSON")
}

fn volume_sha256(t: &Tools, s: &Server, what: &str) -> String {
    let mut copy = t.cmd("nbdcopy");
    copy.arg(s.uri()).arg("-").stdout(Stdio::piped());
    let mut child = copy.spawn().expect("nbdcopy runs");
    let out = t
        .cmd("sha256sum")
        .stdin(child.stdout.take().expect("nbdcopy stdout"))
        .output()
        .expect("sha256sum runs");
    assert!(
        child.wait().expect("nbdcopy ends").success(),
        "{what}: nbdcopy failed"
    );
    assert!(out.status.success(), "{what}: sha256sum failed");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .expect("a digest")
        .to_string()
}

fn fio(t: &Tools, s: &Server, verify_only: bool, what: &str) {
    let size = s.volume.size_bytes / 4096 * 4096;
    let mut c = t.cmd("fio");
    c.args([
        "--name=manage",
        "--ioengine=nbd",
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=16",
        "--randrepeat=1",
        "--verify=crc32c",
        "--verify_fatal=1",
        "--verify_state_save=0",
    ])
    .arg(format!("--uri={}", s.uri()))
    .arg(format!("--size={size}"));
    if verify_only {
        c.arg("--verify_only=1");
    }
    let out = run_ok(&mut c, CMD_TIMEOUT, what);
    assert!(out.stdout.contains("err= 0"), "{}", out.describe(what));
}

fn wait_rebuilt(s: &Server, what: &str) {
    let start = Instant::now();
    loop {
        let st = live_status(s);
        let rebuilding = !st["rebuild"].is_null()
            || st["members"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["state"] != "active");
        if !rebuilding {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{what}: rebuild did not finish: {st}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn fail_each_member_in_turn(spec: Spec) {
    let test = format!("fail_each_member_in_turn {}", spec.label());
    let Some(t) = tools(&test, &["fio", "nbdcopy", "sha256sum"]) else {
        return;
    };
    if !fio_has_nbd(&t) {
        eprintln!("skipping {test}: fio has no nbd engine");
        return;
    }
    let members = spec.members;
    let mut s = Server::start(Volume::create(spec, 24 * MIB));
    fio(&t, &s, false, &format!("{test}: fill"));
    let digest = volume_sha256(&t, &s, &test);
    for m in 0..members {
        let what = format!("{test}: member {m}");
        // The verify load runs while the member fails.
        let mut load = Background::spawn(
            t.cmd("fio")
                .args([
                    "--name=load",
                    "--ioengine=nbd",
                    "--rw=randwrite",
                    "--bs=4k",
                    "--iodepth=16",
                    "--randrepeat=1",
                    "--verify=crc32c",
                    "--verify_fatal=1",
                    "--verify_only=1",
                    "--verify_state_save=0",
                ])
                .arg(format!("--uri={}", s.uri()))
                .arg(format!("--size={}", s.volume.size_bytes / 4096 * 4096)),
            "fio verify load",
        );
        std::thread::sleep(Duration::from_millis(150));
        run_ok(
            &mut platter(&["fail", "--control", &control(&s), &m.to_string()]),
            CMD_TIMEOUT,
            &what,
        );
        let status = load.wait(CMD_TIMEOUT);
        assert!(
            status.success(),
            "{what}: fio verify failed:\n{}",
            load.stdout()
        );
        assert_eq!(live_status(&s)["state"], "degraded", "{what}");
        assert_eq!(
            volume_sha256(&t, &s, &what),
            digest,
            "{what}: degraded contents differ"
        );

        let new = s.volume.path().join(format!("new{m}"));
        run_ok(
            &mut platter(&[
                "replace",
                "--control",
                &control(&s),
                &m.to_string(),
                new.to_str().unwrap(),
            ]),
            CMD_TIMEOUT,
            &what,
        );
        wait_rebuilt(&s, &what);
        assert_eq!(
            volume_sha256(&t, &s, &what),
            digest,
            "{what}: contents differ after the rebuild"
        );
        let check = run_ok(
            &mut platter(&["check", "--json", "--control", &control(&s)]),
            CMD_TIMEOUT,
            &what,
        );
        let report: Value = serde_json::from_str(&check.stdout).unwrap();
        assert_eq!(report["mismatched_stripes"], 0, "{what}: {report}");
        assert_eq!(report["unchecked_stripes"], 0, "{what}: {report}");
        s.volume.members[m] = new.to_str().unwrap().to_string();
    }
    fio(&t, &s, true, &format!("{test}: final verify"));
    // After a restart the new members are trusted.
    s.restart();
    assert_eq!(
        volume_sha256(&t, &s, &test),
        digest,
        "{test}: after restart"
    );
    s.stop();
}

#[test]
fn raid5_fail_each_member_in_turn() {
    fail_each_member_in_turn(Spec::new("raid5", 4, "64k"));
}

#[test]
fn raid6_fail_each_member_in_turn() {
    fail_each_member_in_turn(Spec::new("raid6", 5, "126s"));
}

#[test]
fn raid10_fail_each_member_in_turn() {
    fail_each_member_in_turn(Spec::new("raid10", 4, "64k"));
}

/// A spare waits beside a running raid5; when a member fails, the spare takes
/// its place and is rebuilt without anyone asking. After a stop, the member
/// that failed is not trusted again: given back among the others, it is
/// refused as not the volume's (its slot now belongs to the spare).
#[test]
fn a_spare_takes_over_and_the_failed_member_stays_out() {
    let test = "a_spare_takes_over_and_the_failed_member_stays_out";
    let Some(t) = tools(test, &["fio", "nbdcopy", "sha256sum"]) else {
        return;
    };
    if !fio_has_nbd(&t) {
        eprintln!("skipping {test}: fio has no nbd engine");
        return;
    }
    let mut s = Server::start(Volume::create(Spec::new("raid5", 4, "64k"), 16 * MIB));
    fio(&t, &s, false, &format!("{test}: fill"));
    let digest = volume_sha256(&t, &s, test);
    let spare = s.volume.path().join("spare");
    run_ok(
        &mut platter(&[
            "add-spare",
            "--control",
            &control(&s),
            spare.to_str().unwrap(),
        ]),
        CMD_TIMEOUT,
        test,
    );
    assert_eq!(live_status(&s)["spares"].as_array().unwrap().len(), 1);
    run_ok(
        &mut platter(&["fail", "--control", &control(&s), "2"]),
        CMD_TIMEOUT,
        test,
    );
    wait_rebuilt(&s, test);
    let st = live_status(&s);
    assert_eq!(st["members"][2]["path"], spare.to_str().unwrap(), "{st}");
    assert!(st["spares"].as_array().unwrap().is_empty(), "{st}");
    assert_eq!(volume_sha256(&t, &s, test), digest);
    let old = std::mem::replace(
        &mut s.volume.members[2],
        spare.to_str().unwrap().to_string(),
    );
    s.stop();

    // The old member comes back with the others: refused, by name.
    let mut members = s.volume.members.clone();
    members.push(old.clone());
    let mut args = vec!["status"];
    args.extend(members.iter().map(String::as_str));
    let out = run(&mut platter(&args), CMD_TIMEOUT);
    assert!(!out.status.success(), "{}", out.describe(test));
    assert!(out.stderr.contains(&old), "{}", out.describe(test));
}
