//! Issue 41, point 3, on real servers: `platter status` with no argument
//! lists the volumes served on this host (and not a stopped or killed
//! one), `status --test` exits as mdadm `--detail --test` does, offline
//! and live, and the live and offline status of one volume carry the same
//! fields, in JSON and for people.

mod e2e_support;

use e2e_support::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

/// `platter status ARGS` with its exit code; stdout as it came.
fn status(args: &[&str]) -> (Option<i32>, Out) {
    let mut full = vec!["status"];
    full.extend(args);
    let out = run(&mut platter(&full), CMD_TIMEOUT);
    (out.status.code(), out)
}

/// `platter status --json --run-dir DIR`, parsed, and its exit code with
/// `--test`.
fn listed(run_dir: &Path) -> (Value, Option<i32>) {
    let dir = run_dir.to_str().unwrap();
    let (code, out) = status(&["--json", "--run-dir", dir]);
    assert_eq!(code, Some(0), "{}", out.describe("status --json"));
    let v: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("status --json: {e}\n{}", out.stdout));
    let (test, out) = status(&["--test", "--run-dir", dir]);
    assert!(out.stderr.is_empty(), "{}", out.describe("status --test"));
    (v, test)
}

fn names(listing: &Value) -> Vec<String> {
    let mut n: Vec<String> = listing["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    n.sort();
    n
}

fn serve_in(run_dir: &Path, spec: Spec, extra: &[String]) -> Server {
    let mut args = vec!["--run-dir".to_string(), run_dir.display().to_string()];
    args.extend_from_slice(extra);
    let options = ServeOptions {
        extra_args: args,
        ..ServeOptions::default()
    };
    Server::start_with(Volume::create(spec, 8 * MIB), options)
}

#[test]
fn status_with_no_argument_lists_the_volumes_served_here() {
    let test = "status_with_no_argument_lists_the_volumes_served_here";
    let run = temp_dir();
    let run_dir = run.path().join("run");
    let (listing, code) = listed(&run_dir);
    assert_eq!(names(&listing), Vec::<String>::new(), "{test}: {listing}");
    assert_eq!(code, Some(0), "{test}: nothing served is nothing wrong");
    let mirror = serve_in(&run_dir, Spec::new("mirror", 2, "64k"), &[]);
    let raid5 = serve_in(&run_dir, Spec::new("raid5", 3, "64k"), &[]);
    // A control socket made in the run directory itself (a systemd socket
    // unit's) is found as it is, with no link.
    let own = run_dir.join("stripe.ctl").display().to_string();
    let stripe = serve_in(
        &run_dir,
        Spec::new("stripe", 2, "64k"),
        &["--control".into(), own.clone()],
    );
    let mut stopped = serve_in(&run_dir, Spec::new("raid6", 4, "64k"), &[]);
    let mut killed = serve_in(&run_dir, Spec::new("raid10", 2, "64k"), &[]);
    assert_eq!(names(&listed(&run_dir).0).len(), 5, "{test}: all five run");
    stopped.stop();
    killed.crash();
    run_ok(
        &mut platter(&["fail", "--control", &mirror.control(), "1"]),
        CMD_TIMEOUT,
        "fail a mirror member",
    );
    let (listing, code) = listed(&run_dir);
    let mut want = vec![mirror.volume.name.clone(), raid5.volume.name.clone()];
    want.push(stripe.volume.name.clone());
    want.sort();
    assert_eq!(names(&listing), want, "{test}: {listing}");
    // One volume is degraded: the OR of the codes is mdadm's 1.
    assert_eq!(code, Some(1), "{test}: {listing}");
    let by_name = |n: &str| {
        listing["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == n)
            .cloned()
            .unwrap()
    };
    let m = by_name(&mirror.volume.name);
    assert_eq!(m["state"], "degraded", "{m}");
    assert_eq!(
        (m["members_online"].clone(), m["member_count"].clone()),
        (1.into(), 2.into())
    );
    assert_eq!(by_name(&stripe.volume.name)["control"], own.as_str());
    // The killed server's link is gone, not only passed over; the clean
    // stop removed its own. What is left: a link each for the mirror and
    // the raid5, and the stripe's own socket.
    let left: BTreeSet<String> = std::fs::read_dir(&run_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left.len(), 3, "{test}: {left:?}");
    assert!(left.contains("stripe.ctl"), "{test}: {left:?}");
    // For people: one line each, with state and members.
    let (code, out) = status(&["--run-dir", run_dir.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{}", out.describe(test));
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with(&mirror.volume.name))
        .unwrap_or_else(|| panic!("{}", out.describe(test)));
    assert!(
        line.contains("mirror") && line.contains("degraded") && line.contains("1/2"),
        "{line}"
    );
    assert!(!out.stdout.contains(&stopped.volume.name), "{}", out.stdout);
    assert!(!out.stdout.contains(&killed.volume.name), "{}", out.stdout);
}

#[test]
fn status_test_exits_as_mdadm_detail_test_offline_and_live() {
    let test = "status_test_exits_as_mdadm_detail_test_offline_and_live";
    let mut s = Server::start(Volume::create(Spec::new("raid5", 3, "64k"), 8 * MIB));
    let members = s.volume.members.clone();
    let members: Vec<&str> = members.iter().map(String::as_str).collect();
    let ctl = s.control();
    let live = |what: &str| {
        let (code, out) = status(&["--test", "--control", &ctl]);
        assert!(out.stdout.contains("State:"), "{}", out.describe(what));
        code
    };
    assert_eq!(live("clean"), Some(0), "{test}: live, clean");
    run_ok(
        &mut platter(&["fail", "--control", &ctl, "1"]),
        CMD_TIMEOUT,
        "fail 1",
    );
    assert_eq!(live("degraded"), Some(1), "{test}: live, a member failed");
    run_ok(
        &mut platter(&["fail", "--force", "--control", &ctl, "2"]),
        CMD_TIMEOUT,
        "fail 2",
    );
    assert_eq!(live("failed"), Some(2), "{test}: live, two of three failed");
    // Without --test the same volume exits 0: the status was printed.
    assert_eq!(status(&["--control", &ctl]).0, Some(0));
    s.crash();
    let (code, out) = status(&["--test", "--control", &ctl]);
    assert_eq!(code, Some(4), "{}", out.describe("no server"));
    // Offline: the labels say slot 1 and 2 failed; with member 0 only it
    // cannot serve; a fresh volume is clean.
    let offline = |list: &[&str]| {
        let mut args = vec!["--test"];
        args.extend(list);
        status(&args).0
    };
    assert_eq!(offline(&members), Some(2), "{test}: offline, failed");
    let fresh = Volume::create(Spec::new("raid5", 3, "64k"), 8 * MIB);
    let fresh_members: Vec<&str> = fresh.members.iter().map(String::as_str).collect();
    assert_eq!(offline(&fresh_members), Some(0), "{test}: offline, clean");
    assert_eq!(
        offline(&fresh_members[..2]),
        Some(1),
        "{test}: offline, one missing"
    );
    assert_eq!(
        offline(&fresh_members[..1]),
        Some(2),
        "{test}: offline, two missing"
    );
    let nothing = fresh.path().join("no-such-member");
    assert_eq!(
        offline(&[nothing.to_str().unwrap()]),
        Some(4),
        "{test}: no such volume"
    );
}

/// The fields only a running server has: work in progress and members
/// beside the slots. Everything else is in both.
const LIVE_ONLY: [&str; 7] = [
    "clients",
    "member_timeout_seconds",
    "rebuild",
    "recording",
    "resync",
    "spares",
    "unreachable",
];

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().expect("an object").keys().cloned().collect()
}

/// The "  Name:" labels of the human status, and the member table's head.
fn text_fields(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| {
            let head = l.strip_prefix("  ")?;
            if head.starts_with("Slot ") {
                return Some(head.split_whitespace().collect::<Vec<_>>().join(" "));
            }
            let (name, _) = head.split_once(':')?;
            (!name.contains(' ')).then(|| name.to_string())
        })
        .collect()
}

/// How it showed: the live status dropped the parity layout, member sizes,
/// the checksum and PPL line and the last scrub (only `--json` had some),
/// and its JSON lacked the checksum layout, member sizes in use and the
/// creation time that the offline JSON had.
#[test]
fn live_and_offline_status_show_the_same_fields() {
    let test = "live_and_offline_status_show_the_same_fields";
    let volume = Volume::create_with(
        Spec::new("raid5", 3, "64k"),
        8 * MIB,
        temp_dir(),
        &["--checksums", "crc32c", "--consistency-policy", "ppl"],
    );
    let offline = volume.status();
    let members: Vec<&str> = volume.members.iter().map(String::as_str).collect();
    let mut args = vec!["status"];
    args.extend(&members);
    let offline_text = run_ok(&mut platter(&args), CMD_TIMEOUT, "status").stdout;
    let s = Server::start(volume);
    let live = live_status(&s);
    let live_text = run_ok(
        &mut platter(&["status", "--control", &s.control()]),
        CMD_TIMEOUT,
        "status --control",
    )
    .stdout;
    let (off, on) = (keys(&offline), keys(&live));
    let only_offline: Vec<_> = off.difference(&on).collect();
    assert_eq!(only_offline, ["unreadable"], "{test}: {offline}\n{live}");
    let only_live: Vec<_> = on.difference(&off).map(String::as_str).collect();
    assert_eq!(only_live, LIVE_ONLY, "{test}: {offline}\n{live}");
    for k in &off & &on {
        assert_eq!(
            std::mem::discriminant(&offline[&k]),
            std::mem::discriminant(&live[&k]),
            "{test}: {k} is {} offline and {} live",
            offline[&k],
            live[&k]
        );
    }
    let (m_off, m_on) = (keys(&offline["members"][0]), keys(&live["members"][0]));
    let extra: Vec<_> = m_on.difference(&m_off).collect();
    assert!(
        m_off.is_subset(&m_on) && extra == ["away_seconds"],
        "{m_off:?} {m_on:?}"
    );
    // The labels' facts agree.
    for k in [
        "uuid",
        "level",
        "layout",
        "parity_layout",
        "checksums",
        "checksum_pages",
        "checksum_offset_bytes",
        "data_offset_bytes",
        "consistency_policy",
        "created_unix_seconds",
        "size_bytes",
        "member_count",
        "filesystem",
    ] {
        assert_eq!(offline[k], live[k], "{test}: {k}");
    }
    assert_eq!(offline["checksum_pages"], "sealed+records");
    assert_eq!(offline["bitmap"]["regions"], live["bitmap"]["regions"]);
    for k in ["data_size_bytes", "used_bytes", "member_uuid"] {
        assert_eq!(
            offline["members"][2][k], live["members"][2][k],
            "{test}: {k}"
        );
    }
    // For people: every line the offline status has, the live one has,
    // and the layout and what it keeps read the same.
    let (t_off, t_on) = (text_fields(&offline_text), text_fields(&live_text));
    assert!(
        t_off.is_subset(&t_on),
        "{test}:\n{offline_text}\n{live_text}"
    );
    for want in ["Keeps", "Bitmap", "Scrub", "Created", "Data", "Level"] {
        assert!(t_off.contains(want), "{test}: no {want}:\n{offline_text}");
    }
    let line = |t: &str, k: &str| t.lines().find(|l| l.contains(k)).unwrap_or("").to_string();
    for k in ["Level:", "Keeps:", "Interleave:", "Data:"] {
        assert_eq!(line(&offline_text, k), line(&live_text, k), "{test}: {k}");
    }
    assert!(
        line(&live_text, "Keeps:").contains("crc32c checksums (sealed pages, lost writes caught")
    );
    assert!(line(&live_text, "Keeps:").contains("a partial parity log"));
    assert!(line(&live_text, "Level:").contains("raid5 (left-symmetric)"));
}

/// `rebuild-rate unlimited`, 0 refused naming it, and the default in the
/// help of `rebuild-rate` and `serve`.
#[test]
fn rebuild_rate_takes_unlimited_and_says_its_default() {
    for cmd in ["rebuild-rate", "serve"] {
        let out = run_ok(&mut platter(&[cmd, "--help"]), CMD_TIMEOUT, cmd);
        assert!(out.stdout.contains("128M"), "{cmd} --help:\n{}", out.stdout);
        assert!(
            out.stdout.contains("unlimited"),
            "{cmd} --help:\n{}",
            out.stdout
        );
    }
    let s = Server::start(Volume::create(Spec::new("mirror", 2, "64k"), 8 * MIB));
    let out = run(
        &mut platter(&["rebuild-rate", "--control", &s.control(), "0"]),
        CMD_TIMEOUT,
    );
    assert!(
        !out.status.success() && out.stderr.contains("`unlimited`"),
        "{}",
        out.describe("rebuild-rate 0")
    );
    let out = run_ok(
        &mut platter(&[
            "rebuild-rate",
            "--json",
            "--control",
            &s.control(),
            "unlimited",
        ]),
        CMD_TIMEOUT,
        "rebuild-rate unlimited",
    );
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(v["rebuild_rate_bytes_per_sec"].is_null(), "{v}");
    let out = run_ok(
        &mut platter(&["rebuild-rate", "--control", &s.control(), "20M"]),
        CMD_TIMEOUT,
        "rebuild-rate 20M",
    );
    assert!(out.stdout.contains("20M/s"), "{}", out.stdout);
}
