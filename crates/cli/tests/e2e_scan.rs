//! Finding volumes by their labels (issue 17): `platter scan` lists what
//! it finds among directories, files and block devices, says what is
//! damaged or missing through its exit status, and writes nothing;
//! `platter serve --scan` assembles the volume named from what it finds.

mod e2e_support;

use e2e_support::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

const RAID5: Spec = Spec::new("raid5", 3, "64k");
const MIRROR: Spec = Spec::new("mirror", 2, "64k");

/// `platter scan ARGS`: its exit code and stdout.
fn scan(args: &[&str]) -> (i32, String, String) {
    let out = run(platter(&["scan"]).args(args), CMD_TIMEOUT);
    (
        out.status.code().expect("an exit code"),
        out.stdout,
        out.stderr,
    )
}

fn scan_json(args: &[&str]) -> (i32, Value) {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = scan(&all);
    let v = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("scan --json: {e}\n{stdout}\n{stderr}"));
    (code, v)
}

/// Every file under `dir` with its bytes' hash and modification time.
fn fingerprint(dir: &Path) -> BTreeMap<String, (u64, std::time::SystemTime)> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = fs::read(&p).unwrap();
            let mtime = fs::metadata(&p).unwrap().modified().unwrap();
            (p.display().to_string(), (fnv1a(&bytes), mtime))
        })
        .collect()
}

fn volumes_of(v: &Value) -> Vec<&Value> {
    v["volumes"].as_array().expect("volumes").iter().collect()
}

#[test]
fn scan_lists_whole_half_present_and_damaged_volumes_and_writes_nothing() {
    let raid5 = Volume::create(RAID5, 8 * MIB);
    let mirror = Volume::create(MIRROR, 4 * MIB);
    let dir = raid5.path();
    // Not labels: a small file, a file of random bytes.
    fs::write(dir.join("small"), b"not a member").unwrap();
    write_random_image(&dir.join("random"), MIB, 7);
    let before = fingerprint(dir);

    // Everything in one directory, the mirror named by its files.
    let mut args = vec![dir.to_str().unwrap()];
    args.extend(mirror.members.iter().map(String::as_str));
    let (code, text, stderr) = scan(&args);
    assert_eq!(code, 0, "every volume whole: {text}{stderr}");
    assert!(text.contains(&format!("volume '{}'", raid5.name)), "{text}");
    assert!(
        text.contains(&format!("volume '{}'", mirror.name)),
        "{text}"
    );
    assert!(text.contains("raid5, 3 of 3 members"), "{text}");
    let (_, j) = scan_json(&args);
    let vols = volumes_of(&j);
    assert_eq!(vols.len(), 2, "{j}");
    let r = vols
        .iter()
        .find(|v| v["name"] == raid5.name.as_str())
        .unwrap();
    assert_eq!(r["state"], "clean");
    assert_eq!(r["members_online"], 3);
    let paths: Vec<&str> = r["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, raid5.members, "found in slot order");
    assert_eq!(j["damaged"].as_array().unwrap().len(), 0, "{j}");
    // The random file and the small one are looked at and passed over.
    assert_eq!(j["looked_at"], 3 + 2 + 2, "{j}");

    // Half present: one raid5 member not among the paths.
    let (code, j) = scan_json(&[&raid5.members[0], &raid5.members[2]]);
    assert_eq!(code, 4, "a member missing: {j}");
    assert_eq!(volumes_of(&j)[0]["state"], "degraded", "{j}");
    let (code, j) = scan_json(&[&raid5.members[0]]);
    assert_eq!(code, 4, "{j}");
    assert_eq!(volumes_of(&j)[0]["state"], "failed", "{j}");

    // A damaged label: a copy of a member with a byte of its label changed.
    let damaged = dir.join("damaged");
    let mut bytes = fs::read(&mirror.members[0]).unwrap();
    bytes[200] ^= 0xff;
    fs::write(&damaged, &bytes).unwrap();
    let (code, j) = scan_json(&[damaged.to_str().unwrap()]);
    assert_eq!(code, 4, "{j}");
    let d = &j["damaged"][0];
    assert_eq!(d["path"], damaged.to_str().unwrap());
    assert!(d["reason"].as_str().unwrap().contains("checksum"), "{j}");
    fs::remove_file(&damaged).unwrap();

    // Nothing there: 3, and a mistyped path is an error (1), not "nothing".
    let empty = temp_dir();
    let (code, text, _) = scan(&[empty.path().to_str().unwrap()]);
    assert_eq!(code, 3, "{text}");
    let missing = dir.join("no-such-dir");
    let (code, _, stderr) = scan(&[missing.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(stderr.contains("no-such-dir"), "{stderr}");

    assert_eq!(fingerprint(dir), before, "scan wrote to a member");
}

/// A copy of a member (`cp m0 m0.bak`) carries the same label: the two
/// claim one slot. Scan shows both; serve refuses to guess which is real.
#[test]
fn a_copied_member_is_shown_and_serve_refuses_to_guess() {
    let v = Volume::create(MIRROR, 4 * MIB);
    let copy = v.path().join("m0.bak");
    fs::copy(&v.members[0], &copy).unwrap();
    let (code, j) = scan_json(&[v.path().to_str().unwrap()]);
    assert_eq!(code, 4, "{j}");
    let found = volumes_of(&j)[0];
    assert!(found["state"].is_null(), "{j}");
    assert!(
        found["error"].as_str().unwrap().contains("claims slot 0"),
        "{j}"
    );
    let out = run(
        platter(&["serve", "--socket"])
            .arg(v.path().join("sock"))
            .args(["--scan", v.path().to_str().unwrap(), "--name", &v.name]),
        CMD_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", out.describe("serve"));
    assert!(out.stderr.contains("m0.bak"), "{}", out.stderr);
}

#[test]
fn serve_by_scan_assembles_the_volume_named_and_no_other() {
    let test = "serve_by_scan_assembles_the_volume_named_and_no_other";
    let Some(t) = required_tools(test, &["qemu-io"]) else {
        return;
    };
    // Two volumes with one name in one directory, their members named in
    // no order (slot 0 of the raid5 is a-disk9).
    let dir = temp_dir();
    let name = "shared";
    let copies = |prefix: &str| -> Vec<String> {
        (7..10)
            .rev()
            .take(if prefix == "a" { 3 } else { 2 })
            .map(|i| {
                dir.path()
                    .join(format!("{prefix}-disk{i}"))
                    .display()
                    .to_string()
            })
            .collect()
    };
    for (prefix, level, size) in [("a", "raid5", "8M"), ("b", "mirror", "4M")] {
        let mut create = platter(&[
            "create",
            "--level",
            level,
            "--name",
            name,
            "--member-size",
            size,
        ]);
        create.args(copies(prefix));
        run_ok(&mut create, CMD_TIMEOUT, "create");
    }
    let (code, j) = scan_json(&[dir.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{j}");
    assert_eq!(j["shared_names"][0], name, "{j}");
    let raid5_uuid = volumes_of(&j)
        .into_iter()
        .find(|v| v["level"] == "raid5")
        .expect("the raid5")["uuid"]
        .as_str()
        .unwrap()
        .to_string();

    // By name alone: refused, naming both uuids and --uuid.
    let scan_dir = dir.path().to_str().unwrap().to_string();
    let out = run(
        platter(&["serve", "--socket"])
            .arg(dir.path().join("sock"))
            .args(["--scan", &scan_dir, "--name", name]),
        CMD_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", out.describe("serve"));
    assert!(
        out.stderr.contains("--uuid") && out.stderr.contains(&raid5_uuid),
        "{}",
        out.stderr
    );

    // By uuid: the raid5 is served from its three copies.
    // The harness's volume lends its directory (for the socket) and the
    // name the banner must show; its own members are not named.
    let mut volume = Volume::create(RAID5, 8 * MIB);
    volume.name = name.to_string();
    let mut s = Server::start_with(
        volume,
        ServeOptions {
            instead_of_members: Some(vec![
                "--scan".into(),
                scan_dir.clone(),
                "--uuid".into(),
                raid5_uuid.to_uppercase(),
            ]),
            ..ServeOptions::default()
        },
    );
    let status = s.live("status");
    assert_eq!(status["level"], "raid5", "{status}");
    assert_eq!(
        s.member_states(),
        ["active", "active", "active"],
        "{status}"
    );
    let slot0 = status["members"][0]["path"].as_str().unwrap();
    assert!(slot0.ends_with("/a-disk9"), "slots by label: {status}");
    let pattern = ["write -P 0x5a 0 1M".to_string()];
    qemu_io(&t, s.uri(), &pattern, "write through the scanned volume");
    s.stop();
    // The data is on the copies: served by naming them, it reads back.
    let mut direct = platter(&["serve", "--read-only", "--socket"]);
    let sock = dir.path().join("sock2");
    direct.arg(&sock).args(copies("a"));
    let mut bg = Background::spawn(&mut direct, "serve the copies by name");
    let uri = format!("nbd+unix:///{name}?socket={}", sock.display());
    let start = std::time::Instant::now();
    while !sock.exists() {
        assert!(start.elapsed() < CMD_TIMEOUT, "{}", bg.stderr());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    qemu_io_with(
        &t,
        &["-r"],
        &uri,
        &["read -P 0x5a 0 1M".to_string()],
        "read back",
    );
    bg.kill();
}

/// Without a path, scan reads every block device in /dev: a member on a
/// loop device is found there, and `serve --scan /dev DIR` puts it
/// together with members that are files.
#[test]
fn scan_finds_members_on_block_devices_in_dev() {
    let test = "scan_finds_members_on_block_devices_in_dev";
    if !is_root() || !Path::new("/dev/loop-control").exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: CI runs as root with loop devices"
        );
        platter_testkit::skips::skipped(test, "needs root and loop devices");
        return;
    }
    let Some(t) = required_tools(test, &["losetup"]) else {
        return;
    };
    let v = Volume::create(MIRROR, 4 * MIB);
    // m1 moves onto a loop device (the file itself out of the directory).
    let outside = temp_dir();
    let backing = outside.path().join("m1");
    fs::rename(&v.members[1], &backing).unwrap();
    let lo = Loop::attach(&t, &backing);
    let (code, j) = scan_json(&[]);
    assert!(matches!(code, 0 | 4), "scan of /dev: {code} {j}");
    // Other tests' loop devices may carry volumes of the same name: this
    // one is the volume found on this loop device.
    let found = volumes_of(&j)
        .into_iter()
        .find(|f| f["members"][0]["path"] == lo.dev.as_str())
        .unwrap_or_else(|| panic!("{} not found in /dev: {j}", lo.dev));
    assert_eq!(found["name"], v.name.as_str(), "{j}");
    let uuid = found["uuid"].as_str().unwrap().to_string();
    assert_eq!(found["state"], "degraded", "only the loop device: {j}");

    let mut volume = Volume::create(MIRROR, 4 * MIB);
    volume.name = v.name.clone();
    let s = Server::start_with(
        volume,
        ServeOptions {
            instead_of_members: Some(vec![
                "--scan".into(),
                "/dev".into(),
                v.path().display().to_string(),
                "--uuid".into(),
                uuid,
            ]),
            ..ServeOptions::default()
        },
    );
    let status = s.live("status");
    assert_eq!(s.member_states(), ["active", "active"], "{status}");
    assert_eq!(status["members"][1]["path"], lo.dev.as_str(), "{status}");
    drop(s);
    lo.detach();
}

/// A device that cannot be opened (a node with no driver behind it: ENXIO)
/// is listed as unreadable; the scan goes on and finds the rest.
#[test]
fn an_unreadable_device_is_listed_and_the_scan_goes_on() {
    let test = "an_unreadable_device_is_listed_and_the_scan_goes_on";
    if !is_root() {
        platter_testkit::skips::skipped(test, "needs root (mknod)");
        return;
    }
    let Some(t) = required_tools(test, &["mknod"]) else {
        return;
    };
    let v = Volume::create(MIRROR, 4 * MIB);
    // Major 60 is reserved for local use: no driver answers it here.
    let node = v.path().join("dead-disk");
    run_ok(
        t.cmd("mknod").arg(&node).args(["b", "60", "0"]),
        CMD_TIMEOUT,
        "mknod",
    );
    let (code, j) = scan_json(&[v.path().to_str().unwrap()]);
    assert_eq!(code, 0, "the volume is whole: {j}");
    let u = &j["unreadable"][0];
    assert_eq!(u["path"], node.to_str().unwrap(), "{j}");
    assert!(
        u["reason"].as_str().unwrap().contains("No such device"),
        "{j}"
    );
    assert_eq!(volumes_of(&j)[0]["state"], "clean", "{j}");
}

/// Lines of `log` that mention `what`.
fn lines_with<'l>(log: &'l str, what: &str) -> Vec<&'l str> {
    log.lines().filter(|l| l.contains(what)).collect()
}

/// After `replace` the old disk keeps its label, older than the volume's,
/// naming a member the volume's table no longer holds. It is shown as
/// superseded (by the new member, at which events) and passed over:
/// `scan` and offline `status` of the directory show the volume whole,
/// `serve --scan` serves it with one line about the old disk, `wipe`
/// clears it (a current member needs --force, and a running volume's
/// member is refused even with it), and `scan` then passes over it.
/// (How it showed: "cannot be assembled: member .../m1: not in the
/// volume's member table (slot 1 belongs to another member)", exit 4;
/// `serve --scan` exited 1; `status` of a glob with the old disk errored
/// out with no table.)
#[test]
fn a_replaced_disk_is_superseded_passed_over_and_wiped() {
    let v = Volume::create(RAID5, 8 * MIB);
    let (name, dir) = (v.name.clone(), v.path().to_path_buf());
    let old = v.members[1].clone();
    let new = dir.join("new").display().to_string();
    let size = v.member_size_bytes.to_string();
    let mut s = Server::start(v);
    run_ok(
        platter(&["replace", "--wait", "--member-size", &size, "--control"])
            .arg(s.control())
            .args(["1", &new]),
        CMD_TIMEOUT,
        "replace slot 1",
    );
    s.volume.members[1] = new.clone();
    s.stop();
    let dir_s = dir.display().to_string();

    let (code, text, stderr) = scan(&[&dir_s]);
    assert_eq!(code, 0, "the volume is whole: {text}{stderr}");
    assert!(
        text.contains("3 of 3 members") && text.contains("superseded"),
        "{text}"
    );
    let (_, j) = scan_json(&[&dir_s]);
    let found = volumes_of(&j)[0];
    assert_eq!(found["state"], "clean", "{j}");
    let entry = |p: &str| {
        found["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["path"] == p)
            .unwrap_or_else(|| panic!("{p} in {j}"))
            .clone()
    };
    assert_eq!(entry(&old)["state"], "superseded", "{j}");
    assert_eq!(entry(&old)["superseded_by"]["path"], new.as_str(), "{j}");
    assert_eq!(entry(&new)["state"], "active", "{j}");

    // Offline status of every file there: a table, the old disk named.
    let mut files: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .filter(|p| !p.ends_with("sock") && !p.ends_with(".ctl"))
        .collect();
    files.sort();
    let out = run_ok(
        platter(&["status", "--json"]).args(&files),
        CMD_TIMEOUT,
        "status",
    );
    let st: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(st["state"], "clean", "{st}");
    assert_eq!(st["superseded"][0]["path"], old.as_str(), "{st}");
    assert_eq!(st["superseded"][0]["by_path"], new.as_str(), "{st}");
    assert_eq!(st["superseded"][0]["slot"], 1, "{st}");
    let out = run_ok(platter(&["status"]).args(&files), CMD_TIMEOUT, "status");
    assert!(
        out.stdout.contains(&format!("superseded: {old}")),
        "{}",
        out.stdout
    );

    // examine prints the old label as it is on disk.
    let out = run_ok(
        &mut platter(&["examine", "--json", &old]),
        CMD_TIMEOUT,
        "examine",
    );
    let label: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(label["slot"], 1, "{label}");
    assert!(
        label["event_counter"].as_u64() < st["event_counter"].as_u64(),
        "{label}"
    );

    // serve --scan serves the volume, saying one thing of the old disk.
    let mut volume = Volume::create(RAID5, 8 * MIB);
    volume.name = name.clone();
    let mut served = Server::start_with(
        volume,
        ServeOptions {
            instead_of_members: Some(vec!["--scan".into(), dir_s.clone(), "--name".into(), name]),
            ..ServeOptions::default()
        },
    );
    assert_eq!(served.member_states(), ["active", "active", "active"]);
    let log = served.log();
    let said = lines_with(&log, "superseded");
    assert_eq!(said.len(), 1, "{}", served.log());
    assert!(said[0].contains(&old), "{}", said[0]);
    let live = served.live("status");
    assert_eq!(live["superseded"][0]["path"], old.as_str(), "{live}");
    assert_eq!(live["superseded"][0]["by_path"], new.as_str(), "{live}");
    // A member of the running volume: refused, even with --force.
    let m0 = dir.join("m0").display().to_string();
    let out = run(&mut platter(&["wipe", "--force", &m0]), CMD_TIMEOUT);
    assert_eq!(out.status.code(), Some(1), "{}", out.describe("wipe m0"));
    assert!(out.stderr.contains("in use"), "{}", out.stderr);
    served.stop_with("TERM");

    // A current member needs --force; nothing is written without it.
    let before = fs::read(&m0).unwrap();
    let out = run(&mut platter(&["wipe", &m0]), CMD_TIMEOUT);
    assert_eq!(out.status.code(), Some(1), "{}", out.describe("wipe m0"));
    assert!(out.stderr.contains("--force"), "{}", out.stderr);
    assert_eq!(fs::read(&m0).unwrap(), before, "a refused wipe wrote");
    // A device that is not there is named as missing (it was blamed on a
    // running volume before), and the devices beside it are not written:
    // every one is checked before any is.
    let missing = dir.join("nosuch").display().to_string();
    let out = run(
        &mut platter(&["wipe", "--force", &m0, &missing]),
        CMD_TIMEOUT,
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        out.describe("wipe a missing device")
    );
    assert!(
        out.stderr.contains("no such file or device"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("running volume"), "{}", out.stderr);
    assert_eq!(fs::read(&m0).unwrap(), before, "a refused wipe wrote");
    // The superseded one goes without it, once wipe sees the newer labels
    // (in its directory, or where --scan says); scan passes over it then.
    let away = dir.join("away");
    fs::create_dir(&away).unwrap();
    let moved = away.join("m1").display().to_string();
    fs::rename(&old, &moved).unwrap();
    let out = run(&mut platter(&["wipe", &moved]), CMD_TIMEOUT);
    assert_eq!(out.status.code(), Some(1), "{}", out.describe("wipe alone"));
    assert!(out.stderr.contains("--scan"), "{}", out.stderr);
    let out = run_ok(
        &mut platter(&["wipe", "--scan", &dir_s, &moved]),
        CMD_TIMEOUT,
        "wipe the old disk",
    );
    assert!(out.stdout.contains("superseded"), "{}", out.stdout);
    fs::rename(&moved, &old).unwrap();
    let (code, j) = scan_json(&[&dir_s]);
    assert_eq!(code, 0, "{j}");
    let found = volumes_of(&j)[0];
    assert!(
        found["members"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["path"] != old.as_str()),
        "{j}"
    );
    let out = run(&mut platter(&["examine", &old]), CMD_TIMEOUT);
    assert_eq!(out.status.code(), Some(2), "{}", out.describe("examine"));
    assert!(out.stderr.contains("no platter label"), "{}", out.stderr);
}

/// The fields a table of docs/on-disk-format.md names (its third column's
/// backticked names), reserved rows left out.
fn documented_fields(section: &str) -> Vec<String> {
    let doc = fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/on-disk-format.md"
    ))
    .unwrap();
    let table = &doc[doc.find(section).expect("the section")..];
    table
        .lines()
        .skip_while(|l| !l.starts_with("| 0x"))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let name = l.split('|').nth(3)?.trim();
            Some(name.strip_prefix('`')?.strip_suffix('`')?.to_string())
        })
        .collect()
}

/// `examine` prints every field the on-disk format documents, the slot
/// table with each slot's state and left_at_events, as text and JSON; a
/// damaged label is shown as such with its checksums, a blank device is
/// named as one, both with exit status 2.
#[test]
fn examine_prints_every_documented_field_and_says_what_is_wrong() {
    let v = Volume::create(MIRROR, 4 * MIB);
    let m = &v.members[1];
    let out = run_ok(
        &mut platter(&["examine", "--json", m]),
        CMD_TIMEOUT,
        "examine",
    );
    let j: Value = serde_json::from_str(&out.stdout).unwrap();
    let header = documented_fields("## Label byte table");
    assert!(header.len() > 40, "{header:?}");
    for field in &header {
        assert!(j.get(field).is_some(), "{field} missing from {j}");
    }
    let entry = documented_fields("### Slot table entry");
    for slot in j["slots"].as_array().unwrap() {
        for field in &entry {
            assert!(slot.get(field).is_some(), "{field} missing from {slot}");
        }
    }
    assert_eq!(j["slots"][1]["state"], "active", "{j}");
    assert_eq!(j["slots"][1]["member_uuid"], j["member_uuid"], "{j}");
    let text = run_ok(&mut platter(&["examine", m]), CMD_TIMEOUT, "examine");
    for field in header.iter().chain(&entry) {
        assert!(
            text.stdout.contains(field.as_str()),
            "{field} not in\n{}",
            text.stdout
        );
    }

    // A byte of the label changed: damaged, its checksums shown.
    let mut bytes = fs::read(m).unwrap();
    bytes[200] ^= 0xff;
    let damaged = v.path().join("damaged");
    fs::write(&damaged, &bytes).unwrap();
    let d = damaged.display().to_string();
    let out = run(&mut platter(&["examine", "--json", &d]), CMD_TIMEOUT);
    assert_eq!(out.status.code(), Some(2), "{}", out.describe("examine"));
    let j: Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(j["error"].as_str().unwrap().contains("damaged"), "{j}");
    assert_ne!(j["checksum"], j["checksum_computed"], "{j}");
    // A blank device.
    let blank = v.path().join("blank");
    fs::write(&blank, vec![0u8; 8192]).unwrap();
    let out = run(
        &mut platter(&["examine", blank.to_str().unwrap()]),
        CMD_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(2), "{}", out.describe("examine"));
    assert!(out.stderr.contains("no platter label"), "{}", out.stderr);
}
