//! Starting degraded only when asked (issue 41): `serve` given fewer
//! members than the labels expect refuses, naming each one missing and
//! where it was last seen; `--run` (mdadm's word) starts it degraded; the
//! log and `status` (live and offline, text and JSON) name every member
//! left out, why, and the command that brings it back. And `--control`
//! given the NBD socket says so.

mod e2e_support;

use e2e_support::*;
use serde_json::Value;
use std::fs;
use std::path::Path;

const RAID6: Spec = Spec::new("raid6", 4, "64k");

/// The `left_out` entries of a status, by slot.
fn left_out(status: &Value) -> Vec<(u64, String, String)> {
    status["left_out"]
        .as_array()
        .unwrap_or_else(|| panic!("no left_out in {status}"))
        .iter()
        .map(|l| {
            (
                l["slot"].as_u64().unwrap(),
                l["reason"].as_str().unwrap().to_string(),
                l["remedy"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Every member file's bytes: a refused start must write nothing.
fn contents(members: &[String]) -> Vec<Vec<u8>> {
    members.iter().map(|m| fs::read(m).unwrap()).collect()
}

/// (How it showed: `serve m0 m1` of a RAID-6 of four served it degraded
/// without asking; the next start with all four left two out as stale,
/// the log saying only "serving degraded: 2 member(s) unavailable", with
/// no names, no reason and no hint of `re-add`.)
#[test]
fn a_partial_member_list_is_refused_unless_run_and_each_member_left_out_is_named() {
    let v = Volume::create(RAID6, 8 * MIB);
    let members = v.members.clone();
    let sock = v.path().join("sock");
    let uuids: Vec<String> = v.status()["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["member_uuid"].as_str().unwrap().to_string())
        .collect();
    let before = contents(&members);
    let out = run(
        platter(&["serve", "--socket"])
            .arg(&sock)
            .args(&members[..2]),
        CMD_TIMEOUT,
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        out.describe("serve m0 m1")
    );
    let said = out.stderr.trim();
    assert_eq!(said.lines().count(), 1, "one line: {said}");
    for slot in [2, 3] {
        let at = format!(
            "slot {slot} (member {}, last seen at {}",
            uuids[slot], members[slot]
        );
        assert!(said.contains(&at), "{at} in: {said}");
    }
    assert!(said.contains("--run"), "{said}");
    assert_eq!(contents(&members), before, "a refused start wrote");

    // --run: served degraded; the log names each member left out.
    let mut s = Server::start_with(
        v,
        ServeOptions {
            leave_out: vec![2, 3],
            ..ServeOptions::default()
        },
    );
    let log = s.log();
    for slot in [2, 3] {
        let line = format!(
            "member left out: slot {slot} (member {}, {}): missing (not among the members \
             given); brought back by: platter re-add --control {} {}",
            uuids[slot],
            members[slot],
            s.control(),
            members[slot]
        );
        assert!(log.contains(&line), "{line}\nnot in the log:\n{log}");
    }
    let live = s.live("status");
    let re_add =
        |slot: usize| format!("platter re-add --control {} {}", s.control(), members[slot]);
    assert_eq!(
        left_out(&live),
        [
            (2, "missing".into(), re_add(2)),
            (3, "missing".into(), re_add(3))
        ],
        "{live}"
    );
    let text = run_ok(
        &mut platter(&["status", "--control", &s.control()]),
        CMD_TIMEOUT,
        "status",
    );
    assert!(
        text.stdout
            .contains(&format!("left out: slot 2 (member {}", uuids[2])),
        "{}",
        text.stdout
    );
    s.stop();

    // The labels now record them gone: the same two start without --run.
    let out = run(
        platter(&["status", "--json"]).args(&members[..2]),
        CMD_TIMEOUT,
    );
    let offline: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(left_out(&offline).len(), 2, "{offline}");
    s.options.leave_out.clear();
    s.options.extra_args = Vec::new();
    s.volume.members.truncate(2);
    s.start_again_unchecked();
    s.stop_with("TERM");

    // All four: the two come back stale, named with the command that
    // brings them back, and re-add does.
    s.volume.members = members.clone();
    s.start_again_unchecked();
    let live = s.live("status");
    let reasons: Vec<(u64, String)> = left_out(&live)
        .into_iter()
        .map(|(s, r, _)| (s, r))
        .collect();
    assert_eq!(
        reasons,
        [(2, "stale".into()), (3, "stale".into())],
        "{live}"
    );
    assert!(
        s.log().contains(&format!(
            "slot 2 (member {}, {}): stale at events",
            uuids[2], members[2]
        )),
        "{}",
        s.log()
    );
    let remedy = live["left_out"][0]["remedy"].as_str().unwrap().to_string();
    let words: Vec<&str> = remedy.split(' ').collect();
    assert_eq!(words[..2], ["platter", "re-add"], "{remedy}");
    run_ok(&mut platter(&words[1..]), CMD_TIMEOUT, &remedy);
    let live = s.live("status");
    assert_eq!(left_out(&live).len(), 1, "slot 2 is back: {live}");
    s.stop_with("TERM");
}

/// `serve --scan` that finds fewer members than the labels expect refuses
/// the same way, saying where it looked; `run = true` in the volumes file
/// starts it degraded (a unit starting at boot with a disk missing
/// refuses instead of starting degraded without a word).
#[test]
fn serve_by_scan_or_config_with_a_member_not_found_needs_run() {
    let v = Volume::create(RAID6, 8 * MIB);
    let only = v.path().join("only-three");
    fs::create_dir(&only).unwrap();
    for m in &v.members[..3] {
        let name = Path::new(m).file_name().unwrap();
        std::os::unix::fs::symlink(m, only.join(name)).unwrap();
    }
    let only_s = only.display().to_string();
    let out = run(
        platter(&["serve", "--socket"])
            .arg(v.path().join("sock"))
            .args(["--scan", &only_s, "--name", &v.name]),
        CMD_TIMEOUT,
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        out.describe("serve --scan")
    );
    assert!(
        out.stderr
            .contains(&format!("not found by the scan of {only_s}"))
            && out.stderr.contains("slot 3"),
        "{}",
        out.stderr
    );
    let config = v.path().join("volumes.toml");
    fs::write(
        &config,
        format!(
            "[volumes.{}]\nscan = [\"{only_s}\"]\n[volumes.{}.options]\nrun = true\n",
            v.name, v.name
        ),
    )
    .unwrap();
    let name = v.name.clone();
    let mut s = Server::start_with(
        v,
        ServeOptions {
            instead_of_members: Some(vec!["--config".into(), config.display().to_string(), name]),
            ..ServeOptions::default()
        },
    );
    assert_eq!(s.member_states()[3], "missing");
    assert!(s.log().contains("member left out: slot 3"), "{}", s.log());
    s.stop_with("TERM");
}

/// `--control` given the NBD socket, or a member file, says what it is in
/// one line. (How it showed: "control socket sent no JSON answer:
/// expected value at line 1 column 1".)
#[test]
fn control_pointed_at_an_nbd_socket_says_so() {
    let v = Volume::create(Spec::new("mirror", 2, "64k"), 4 * MIB);
    let member = v.members[0].clone();
    let mut s = Server::start(v);
    let nbd = s.socket().display().to_string();
    let out = run(&mut platter(&["status", "--control", &nbd]), CMD_TIMEOUT);
    assert_eq!(out.status.code(), Some(1), "{}", out.describe("status"));
    assert_eq!(
        out.stderr.trim(),
        format!(
            "platter: error: {nbd} is an NBD socket, not a control socket: the control \
             socket is {}",
            s.control()
        )
    );
    let out = run(&mut platter(&["status", "--control", &member]), CMD_TIMEOUT);
    assert_eq!(out.status.code(), Some(1), "{}", out.describe("status"));
    assert!(
        out.stderr
            .contains("is a regular file, not a control socket"),
        "{}",
        out.stderr
    );
    s.stop();
}
