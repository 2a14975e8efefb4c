//! Issue 18: a volume reshaped in place while it serves. `platter grow`
//! writes the labels of a stopped volume; the server moves the data while
//! clients read and write, and resumes from the labels after kill -9 at
//! any moment. The volume's bytes are the same after as before, the new
//! layout's parity agrees (`check`), and bad requests are refused with the
//! reason and change nothing.

mod e2e_support;

use e2e_support::*;
use std::path::Path;
use std::time::{Duration, Instant};

const SLOW_RATE: &str = "16M";

/// Writes a random image over the whole volume and returns its path.
fn fill(t: &Tools, s: &Server, seed: u64, test: &str) -> std::path::PathBuf {
    let image = s.volume.path().join("before.raw");
    write_random_image(&image, s.volume.size_bytes, seed);
    run_ok(
        t.cmd("nbdcopy").arg(&image).arg(s.uri()),
        CMD_TIMEOUT,
        &format!("{test}: fill"),
    );
    image
}

/// `platter reshape ARGS --add NEW... MEMBERS...` on the stopped volume;
/// the new members join `s.volume.members`.
fn reshape(s: &mut Server, add: usize, args: &[&str], test: &str) -> Out {
    let n = s.volume.members.len();
    let added: Vec<String> = (n..n + add)
        .map(|i| {
            s.volume
                .path()
                .join(format!("m{i}"))
                .to_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let size = s.volume.member_size_bytes.to_string();
    let mut cmd = platter(&["reshape", "--member-size", &size]);
    cmd.args(args);
    for a in &added {
        cmd.args(["--add", a]);
    }
    cmd.args(&s.volume.members);
    let out = run_ok(&mut cmd, CMD_TIMEOUT, &format!("{test}: platter reshape"));
    s.volume.members.extend(added);
    out
}

/// Waits until the running server's reshape has moved everything, and
/// the resync a kill left owed is done (until then a clean stop leaves
/// the labels dirty, as it should).
fn wait_reshaped(s: &Server, test: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let st = live_status(s);
        let r = &st["reshape"];
        if (r.is_null() || r["finished"].as_bool() == Some(true)) && st["resync"].is_null() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{test}: the reshape did not finish: {r}\n{}",
            tail(&s.log(), 5000)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn slow_down(s: &Server, test: &str) {
    run_ok(
        &mut platter(&["rebuild-rate", "--control", &s.control(), SLOW_RATE]),
        CMD_TIMEOUT,
        &format!("{test}: rebuild-rate"),
    );
}

/// `platter check --control`: every stripe checked and in agreement.
fn assert_check_clean(s: &Server, test: &str) {
    let check = run(
        &mut platter(&["check", "--control", &s.control()]),
        CMD_TIMEOUT,
    );
    assert!(
        check.status.success() && check.stdout.contains(" 0 mismatched"),
        "{test}: {}",
        check.describe("check")
    );
}

/// The size a client connecting now is told (`qemu-img info`).
fn client_size(t: &Tools, s: &Server, test: &str) -> u64 {
    let info = run_ok(
        t.cmd("qemu-img")
            .args(["info", "--output=json", "-f", "raw"])
            .arg(s.uri()),
        CMD_TIMEOUT,
        test,
    );
    let info: serde_json::Value = serde_json::from_str(&info.stdout).expect("JSON");
    info["virtual-size"].as_u64().expect("a size")
}

/// Waits until no rebuild runs (Q written on an added member).
fn wait_rebuilt(s: &Server, test: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !live_status(s)["rebuild"].is_null() {
        assert!(Instant::now() < deadline, "{test}: the rebuild did not end");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `platter reshape --control ... ARGS --member-size SIZE --add NEW` on
/// the running server.
fn online(s: &Server, args: &[&str], new: &str) -> std::process::Command {
    let size = s.volume.member_size_bytes.to_string();
    let mut cmd = platter(&["reshape", "--control", &s.control()]);
    cmd.args(args).args(["--member-size", &size, "--add", new]);
    cmd
}

/// How much a reshape changes the size clients see.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Size {
    /// By at least half a member: data disks were added.
    Grows,
    /// Within half a member: the rows hold as much as before.
    Keeps,
}

/// Reshapes `spec` (adding `add` members, with `args`) with `kills`
/// kill -9s at random moments of the move, each restart resuming it;
/// then the volume holds what was written before, the new size after a
/// restart, and `check` finds every stripe in agreement.
fn reshape_survives_kills(
    spec: Spec,
    add: usize,
    args: &[&str],
    size: Size,
    kills: u64,
    seed: u64,
) {
    let test = format!("reshape_survives_kills {} +{add} {args:?}", spec.label());
    let Some(t) = tools(&test, &["nbdcopy", "qemu-img"]) else {
        return;
    };
    let mut s = Server::start(Volume::create(spec, 80 * MIB));
    let image = fill(&t, &s, seed, &test);
    s.stop();
    let reshaped = Reshaped {
        add,
        args,
        size,
        says: "labels written",
    };
    survives_kills(&t, &mut s, &image, &reshaped, kills, seed, &test);
}

/// A reshape asked of a stopped volume, and what its plan must say.
struct Reshaped<'a> {
    add: usize,
    args: &'a [&'a str],
    size: Size,
    says: &'a str,
}

/// Reshapes the stopped volume `s` (which holds `image`), kills the
/// server `kills` times while it moves, and checks the volume after.
fn survives_kills(
    t: &Tools,
    s: &mut Server,
    image: &std::path::Path,
    reshaped: &Reshaped,
    kills: u64,
    seed: u64,
    test: &str,
) {
    let test = test.to_string();
    let grows = reshaped.size == Size::Grows;
    let mut rng = Rng::new(seed);
    let planned = reshape(s, reshaped.add, reshaped.args, &test);
    assert!(
        planned.stdout.contains("labels written") && planned.stdout.contains(reshaped.says),
        "{test}: the plan does not say {:?}: {}",
        reshaped.says,
        planned.stdout
    );
    let mut killed_moving = 0;
    for _ in 0..kills {
        s.start_again_unchecked();
        slow_down(s, &test);
        std::thread::sleep(Duration::from_millis(50 + rng.below(600)));
        // Null once the move is done and the new layout's volume took
        // over (the labels no longer name a reshape).
        let r = &live_status(s)["reshape"];
        if r["finished"].as_bool() == Some(false) {
            killed_moving += 1;
        }
        s.crash();
    }
    assert!(
        killed_moving * 2 >= kills,
        "{test}: only {killed_moving} of {kills} kills landed while the data moved"
    );
    s.start_again_unchecked();
    // Reads while it moves: the whole volume, as written.
    assert_images_identical(t, image, s.uri(), &format!("{test}: during the move"));
    wait_reshaped(s, &test);
    assert_images_identical(t, image, s.uri(), &format!("{test}: after the move"));
    // A client that connects now is told the new size (the same when the
    // rows hold as much as before).
    let grown = client_size(t, s, &test);
    let more = s.volume.member_size_bytes / 2;
    assert!(
        (grown > s.volume.size_bytes + more) == grows && grown >= s.volume.size_bytes,
        "{test}: a new connection sees {grown} bytes; the volume had {} and grows: {grows}",
        s.volume.size_bytes
    );
    s.stop();
    s.start_again();
    let st = live_status(s);
    assert!(
        st["reshape"].is_null(),
        "{test}: a reshape after the restart"
    );
    let new_size = st["size_bytes"].as_u64().unwrap();
    assert_eq!(new_size, grown, "{test}: the size after a restart");
    // The bytes past the old end read as zeros: qemu-img compare says so
    // of a larger image whose tail is zero.
    assert_images_identical(t, image, s.uri(), &format!("{test}: after a restart"));
    assert_check_clean(s, &test);
    s.stop();
}

#[test]
fn raid5_grows_from_4_to_5_through_20_kills() {
    reshape_survives_kills(
        Spec::new("raid5", 4, "64k"),
        1,
        &[],
        Size::Grows,
        20,
        0x5e5a,
    );
}

#[test]
fn raid6_grows_from_5_to_6_through_kills() {
    reshape_survives_kills(Spec::new("raid6", 5, "64k"), 1, &[], Size::Grows, 6, 0x5e6b);
}

#[test]
fn raid5_grows_and_changes_interleave_through_kills() {
    reshape_survives_kills(
        Spec::new("raid5", 4, "64k"),
        1,
        &["--interleave", "126s"],
        Size::Grows,
        6,
        0x5e7c,
    );
}

/// With no member added, each window's old rows are saved first in every
/// member's reserved area (before the data offset), and a kill in the
/// window puts them back.
#[test]
fn raid5_changes_its_interleave_in_place_through_kills() {
    reshape_survives_kills(
        Spec::new("raid5", 4, "64k"),
        0,
        &["--interleave", "128k"],
        Size::Keeps,
        6,
        0x5eaf,
    );
}

/// Two interleave changes in a row on the same members. The first moves
/// the data down into half the room before it (md moves `data_offset` the
/// same way): nothing backed up. The second, with too little room left
/// for the lead a 256k interleave needs, backs up every window in that
/// room instead and leaves the data where it is. Kills during each.
#[test]
fn raid5_changes_its_interleave_twice_through_kills() {
    let test = "raid5_changes_its_interleave_twice_through_kills";
    let Some(t) = tools(test, &["nbdcopy", "qemu-img"]) else {
        return;
    };
    let mut s = Server::start(Volume::create(Spec::new("raid5", 4, "64k"), 80 * MIB));
    let image = fill(&t, &s, 0x5eb1, test);
    s.stop();
    let data_offset = |s: &Server| {
        let label = std::fs::read(&s.volume.members[0]).unwrap();
        u64::from_le_bytes(label[0x48..0x50].try_into().unwrap())
    };
    assert_eq!(data_offset(&s), MIB, "{test}: platter create's data offset");
    let once = Reshaped {
        add: 0,
        args: &["--interleave", "128k"],
        size: Size::Keeps,
        says: "lower on every member",
    };
    survives_kills(&t, &mut s, &image, &once, 4, 0x5eb2, test);
    let lowered = data_offset(&s);
    assert!(
        (MIB / 2..MIB).contains(&lowered),
        "{test}: the data offset after moving down is {lowered}"
    );
    let twice = Reshaped {
        add: 0,
        args: &["--interleave", "256k"],
        size: Size::Keeps,
        says: "backed up",
    };
    survives_kills(&t, &mut s, &image, &twice, 4, 0x5eb3, test);
    assert_eq!(
        data_offset(&s),
        lowered,
        "{test}: backups keep the data offset"
    );
}

/// A restart must read each member's backup area to know whether a window
/// was cut short; when it cannot, it refuses to serve, saying so, rather
/// than go on and perhaps leave the old layout of that window torn. Once
/// the area reads again the reshape goes on and loses nothing.
#[test]
fn an_unreadable_backup_area_refuses_the_restart_and_loses_nothing() {
    let test = "an_unreadable_backup_area_refuses_the_restart_and_loses_nothing";
    let Some(t) = tools(test, &["nbdcopy", "qemu-img"]) else {
        return;
    };
    let mut s = Server::start(Volume::create(Spec::new("raid5", 4, "64k"), 80 * MIB));
    let image = fill(&t, &s, 0x5eb4, test);
    s.stop();
    // The first change takes half the room before the data; the second
    // has too little left to move down into and backs up every window.
    reshape(&mut s, 0, &["--interleave", "128k"], test);
    s.start_again_unchecked();
    wait_reshaped(&s, test);
    s.stop();
    let planned = reshape(&mut s, 0, &["--interleave", "256k"], test);
    assert!(planned.stdout.contains("backed up"), "{}", planned.stdout);
    s.start_again_unchecked();
    slow_down(&s, test);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        live_status(&s)["reshape"]["finished"].as_bool(),
        Some(false)
    );
    s.crash();
    let label = std::fs::read(&s.volume.members[0]).unwrap();
    let data_offset = u64::from_le_bytes(label[0x48..0x50].try_into().unwrap());
    // Past the label and its bitmap page, up to the data: the backup area.
    let bad = format!(
        "{}=bad-range=8192+{}",
        s.volume.members[0],
        data_offset - 8192
    );
    let mut serve = platter(&["serve", "--socket"]);
    serve
        .arg(s.volume.path().join("refused.sock"))
        .args(["--inject", &bad])
        .args(&s.volume.members);
    let refused = run(&mut serve, CMD_TIMEOUT);
    assert!(
        !refused.status.success()
            && refused
                .stderr
                .contains("the reshape's backup: cannot read it on member 0"),
        "{test}: {} {}",
        refused.status,
        refused.stderr
    );
    s.start_again_unchecked();
    wait_reshaped(&s, test);
    assert_images_identical(&t, &image, s.uri(), &format!("{test}: after the move"));
    assert_check_clean(&s, test);
    s.stop();
}

/// RAID-5 to RAID-6 in its ordinary layout (Q spread over the members,
/// not the `_6` layout's Q on the added one): the rows hold as much data
/// as before, so every window keeps a backup, as for an interleave change.
#[test]
fn raid5_restripes_into_ordinary_raid6_through_kills() {
    reshape_survives_kills(
        Spec::new("raid5", 4, "64k"),
        1,
        &["--level", "raid6", "--layout", "left-symmetric"],
        Size::Keeps,
        4,
        0x5eb0,
    );
}

#[test]
fn stripe_and_raid10_grow_by_two() {
    reshape_survives_kills(
        Spec::new("stripe", 3, "64k"),
        2,
        &[],
        Size::Grows,
        3,
        0x5e8d,
    );
    reshape_survives_kills(
        Spec::new("raid10", 4, "64k"),
        2,
        &[],
        Size::Grows,
        3,
        0x5e9e,
    );
}

#[test]
fn fio_verifies_its_writes_while_the_volume_grows() {
    fio_verifies_during(Spec::new("raid5", 4, "64k"), 1, &[]);
}

#[test]
fn fio_verifies_its_writes_while_a_raid6_grows() {
    fio_verifies_during(Spec::new("raid6", 5, "64k"), 1, &[]);
}

#[test]
fn fio_verifies_its_writes_while_the_interleave_changes() {
    fio_verifies_during(Spec::new("raid5", 4, "64k"), 1, &["--interleave", "126s"]);
}

/// 64k to 126 sectors on the same members holds fewer bytes (the rows
/// are shorter), which is refused as a shrink; 64k to 32k holds as many.
#[test]
fn fio_verifies_its_writes_while_the_interleave_changes_in_place() {
    fio_verifies_during(Spec::new("raid5", 4, "64k"), 0, &["--interleave", "32k"]);
}

/// fio writes and verifies half the volume while it is reshaped (`add`
/// members added, with `args`); the other half keeps what was written.
fn fio_verifies_during(spec: Spec, add: usize, args: &[&str]) {
    let test = &format!("fio_verifies_during {} +{add} {args:?}", spec.label());
    let Some(t) = tools_with_fio_nbd(test, &["fio", "nbdcopy", "qemu-img"]) else {
        return;
    };
    let mut s = Server::start(Volume::create(spec, 48 * MIB));
    let image = fill(&t, &s, 0xf10, test);
    s.stop();
    reshape(&mut s, add, args, test);
    s.start_again_unchecked();
    slow_down(&s, test);
    // fio writes the second half and reads every block back with its
    // checksum while the windows move under it.
    let half = s.volume.size_bytes / 2 / MIB * MIB;
    let out = run_ok(
        t.cmd("fio")
            .args([
                "--name=verify",
                "--thread",
                "--ioengine=nbd",
                "--rw=randwrite",
                "--bsrange=4k-128k",
                "--iodepth=8",
                "--verify=crc32c",
                "--do_verify=1",
                "--verify_fatal=1",
            ])
            .arg(format!("--uri={}", s.uri()))
            .arg(format!("--offset={half}"))
            .arg(format!("--size={}", s.volume.size_bytes - half)),
        CMD_TIMEOUT,
        test,
    );
    assert!(!out.stdout.contains("verify: bad"), "{}", out.stdout);
    let st = live_status(&s);
    assert!(
        !st["reshape"].is_null(),
        "{test}: the reshape ended before fio did; the load did not meet it"
    );
    wait_reshaped(&s, test);
    // The first half is what was written before.
    let first = s.volume.path().join("first-half.raw");
    run_ok(t.cmd("nbdcopy").arg(s.uri()).arg(&first), CMD_TIMEOUT, test);
    let a = std::fs::read(&image).unwrap();
    let b = std::fs::read(&first).unwrap();
    assert!(
        a[..half as usize] == b[..half as usize],
        "{test}: the half fio did not write changed"
    );
    s.stop();
    s.start_again();
    assert_check_clean(&s, test);
    s.stop();
}

fn refused(cmd: &mut std::process::Command, what: &str, says: &str) {
    let out = run(cmd, CMD_TIMEOUT);
    assert!(!out.status.success(), "{what}: not refused: {}", out.stdout);
    assert!(
        out.stderr.contains(says),
        "{what}: the refusal does not say {says:?}: {}",
        out.stderr
    );
}

fn labels(members: &[String]) -> Vec<Vec<u8>> {
    members
        .iter()
        .map(|m| {
            let mut b = std::fs::read(Path::new(m)).unwrap();
            b.truncate(4096);
            b
        })
        .collect()
}

/// Issue 41, point 7: a refused reshape said only why ("new stripe 0
/// overwrites data beyond 64 stripes" for 128k to 126s; "needs a backup"
/// for 64k to 1M), leaving the operator to guess what would work. The
/// refusal must name a change the plan accepts, and that change must then
/// be accepted (a dry run of it succeeds).
#[test]
fn a_refused_reshape_says_what_would_make_it_possible() {
    let test = "a_refused_reshape_says_what_would_make_it_possible";
    let refusal = |v: &Volume, to: &str| {
        let out = run(
            platter(&["reshape", "--interleave", to]).args(&v.members),
            CMD_TIMEOUT,
        );
        assert!(!out.status.success(), "{test}: to {to}: accepted");
        out.stderr
    };
    let accepted = |v: &Volume, to: &str, extra: &[&str]| {
        let out = run(
            platter(&["reshape", "--dry-run", "--interleave", to])
                .args(extra)
                .args(&v.members),
            CMD_TIMEOUT,
        );
        assert!(
            out.status.success(),
            "{test}: to {to} {extra:?}: {}",
            out.stderr
        );
    };
    let v = Volume::create(Spec::new("raid5", 4, "128k"), 16 * MIB);
    let said = refusal(&v, "126s");
    assert!(
        said.contains("the plan accepts the same reshape with a member added"),
        "{test}: {said}"
    );
    let added = v.path().join("added").to_str().unwrap().to_string();
    let size = v.member_size_bytes.to_string();
    accepted(&v, "126s", &["--member-size", &size, "--add", &added]);
    // A backup larger than the room before the data: what --reserve at
    // create gives is what the refusal names.
    let v = Volume::create(Spec::new("raid5", 4, "64k"), 16 * MIB);
    let said = refusal(&v, "1M");
    assert!(said.contains("a larger --reserve"), "{test}: {said}");
    let roomy = Volume::create_with(
        Spec::new("raid5", 4, "64k"),
        16 * MIB,
        temp_dir(),
        &["--reserve", "4M"],
    );
    accepted(&roomy, "1M", &[]);
}

#[test]
fn bad_reshapes_are_refused_and_change_nothing() {
    let test = "bad_reshapes_are_refused_and_change_nothing";
    let mut s = Server::start(Volume::create(Spec::new("raid5", 4, "64k"), 16 * MIB));
    let members = s.volume.members.clone();
    let dir = s.volume.path().to_path_buf();
    let other = Volume::create(Spec::new("raid5", 4, "64k"), 16 * MIB);
    // While it is served: the server holds the members.
    let small = dir.join("small").to_str().unwrap().to_string();
    std::fs::write(&small, vec![0u8; 2 << 20]).unwrap();
    refused(
        platter(&["grow", "--add", &small]).args(&members),
        "grow while served",
        "in use by another process",
    );
    s.stop();
    let before = labels(&members);
    refused(
        platter(&["grow", "--add", &small]).args(&members),
        "a member too small",
        "is too small",
    );
    refused(
        platter(&["grow", "--add", &other.members[0]]).args(&members),
        "another volume's member",
        "already belongs to volume",
    );
    refused(
        platter(&["grow", "--add", &members[1]]).args(&members),
        "one of its own, named twice",
        "named twice",
    );
    let copy = dir.join("copy").to_str().unwrap().to_string();
    std::fs::copy(&members[2], &copy).unwrap();
    refused(
        platter(&["grow", "--add", &copy]).args(&members),
        "a copy of one of its own",
        "already a member of this volume",
    );
    refused(
        platter(&["grow", "--add", &small]).args(&members[..3]),
        "a degraded volume",
        "needs every member",
    );
    // Every window of 1M stripes needs a backup of 1 MiB per member;
    // the members keep 1 MiB before their data, the label and bitmap in it.
    refused(
        platter(&["reshape", "--interleave", "1M"]).args(&members),
        "an interleave change whose backup does not fit",
        "ask for a smaller interleave",
    );
    refused(
        platter(&["reshape", "--interleave", "126s"]).args(&members),
        "an interleave change that holds less",
        "shrinking is not a reshape",
    );
    refused(
        platter(&["reshape", "--level", "raid6"]).args(&members),
        "raid5 to raid6 on the same members",
        "shrinking is not a reshape",
    );
    assert_eq!(
        labels(&members),
        before,
        "{test}: a refusal changed a label"
    );
    // A second reshape while one is in progress.
    let new = dir.join("m4").to_str().unwrap().to_string();
    let size = s.volume.member_size_bytes.to_string();
    run_ok(
        platter(&["grow", "--member-size", &size, "--add", &new]).args(&members),
        CMD_TIMEOUT,
        test,
    );
    let new2 = dir.join("m5").to_str().unwrap().to_string();
    let mut all = members.clone();
    all.push(new);
    refused(
        platter(&["grow", "--member-size", &size, "--add", &new2]).args(&all),
        "a second reshape",
        "already being reshaped",
    );
    // The dry run of a plan says what moves and changes nothing.
    let before = labels(&all);
    let out = run(platter(&["status"]).args(&all), CMD_TIMEOUT);
    assert!(out.stdout.contains("Reshape:"), "{}", out.stdout);
    assert_eq!(labels(&all), before);
}

/// A reshape that leaves the volume surviving fewer lost members (raid5 to
/// stripe drops all of it, raid6 to raid5 half) is refused without
/// --force, on a stopped volume and through the control socket alike,
/// naming what is lost and how to go on; a dry run says so and changes
/// nothing; with --force it is done. How it showed: `platter reshape
/// --level stripe` of a raid5 was accepted without a word, offline and
/// live.
#[test]
fn a_reshape_that_lowers_the_redundancy_needs_force() {
    let test = "a_reshape_that_lowers_the_redundancy_needs_force";
    let says = "lowers the volume's redundancy";
    // Stopped volumes.
    for (spec, to, lost) in [
        (
            Spec::new("raid5", 4, "64k"),
            "stripe",
            "stripe of 4 members would survive no lost member",
        ),
        (
            Spec::new("raid6", 5, "64k"),
            "raid5",
            "raid5 of 5 members would survive the loss of any one member",
        ),
    ] {
        let v = Volume::create(spec, 16 * MIB);
        let members = v.members.clone();
        let before = labels(&members);
        let out = run(
            platter(&["reshape", "--level", to]).args(&members),
            CMD_TIMEOUT,
        );
        let what = format!("{test}: {} to {to}", spec.level);
        assert!(!out.status.success(), "{what}: not refused: {}", out.stdout);
        let line = out.stderr.trim_end();
        assert!(
            line.lines().count() == 1
                && line.contains(says)
                && line.contains(lost)
                && line.contains("--force"),
            "{what}: the refusal: {line}"
        );
        assert_eq!(
            labels(&members),
            before,
            "{what}: a refusal changed a label"
        );
        let out = run_ok(
            platter(&["reshape", "--dry-run", "--level", to]).args(&members),
            CMD_TIMEOUT,
            &what,
        );
        assert!(
            out.stdout.contains(says) && out.stdout.contains("without --force"),
            "{what}: the dry run: {}",
            out.stdout
        );
        assert_eq!(
            labels(&members),
            before,
            "{what}: the dry run changed a label"
        );
        run_ok(
            platter(&["reshape", "--force", "--level", to]).args(&members),
            CMD_TIMEOUT,
            &what,
        );
        let st = v.status();
        assert_eq!(st["level"], to, "{what}: {st}");
        assert_eq!(st["reshape"]["from"]["level"], spec.level, "{what}: {st}");
    }

    // A running raid5, through its control socket.
    let s = Server::start(Volume::create(Spec::new("raid5", 4, "64k"), 16 * MIB));
    let ctl = s.control();
    refused(
        &mut platter(&["reshape", "--control", &ctl, "--level", "stripe"]),
        "raid5 to stripe through the server",
        "stripe of 4 members would survive no lost member",
    );
    assert!(
        live_status(&s)["reshape"].is_null(),
        "{test}: refused, yet begun"
    );
    let out = run_ok(
        &mut platter(&[
            "reshape",
            "--control",
            &ctl,
            "--dry-run",
            "--level",
            "stripe",
        ]),
        CMD_TIMEOUT,
        test,
    );
    assert!(
        out.stdout.contains(says) && out.stdout.contains("without --force"),
        "{test}: the live dry run: {}",
        out.stdout
    );
    assert!(
        live_status(&s)["reshape"].is_null(),
        "{test}: a dry run began it"
    );
    let out = run_ok(
        &mut platter(&["reshape", "--control", &ctl, "--force", "--level", "stripe"]),
        CMD_TIMEOUT,
        test,
    );
    assert!(out.stdout.contains("reshape started"), "{}", out.stdout);
    wait_reshaped(&s, test);
    assert_eq!(live_status(&s)["level"], "stripe", "{test}");
    let mut s = s;
    s.stop();
}

#[test]
fn a_dry_run_says_what_moves_and_writes_nothing() {
    let mut s = Server::start(Volume::create(Spec::new("raid5", 4, "64k"), 16 * MIB));
    s.stop();
    let members = s.volume.members.clone();
    let new = s.volume.path().join("m4");
    std::fs::write(&new, vec![0u8; s.volume.member_size_bytes as usize]).unwrap();
    let before = labels(&members);
    let out = run_ok(
        platter(&["grow", "--dry-run", "--add", new.to_str().unwrap()]).args(&members),
        CMD_TIMEOUT,
        "dry run",
    );
    assert!(
        out.stdout.contains("raid5 of 4 members") && out.stdout.contains("raid5 of 5 members"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("moves ") && out.stdout.contains(" s at "));
    assert!(out.stdout.contains("dry run: nothing changed"));
    assert_eq!(labels(&members), before);
    assert!(std::fs::read(&new).unwrap().iter().all(|&b| b == 0));
}

/// A dry run given a member that `--member-size` would make plans with
/// it and makes nothing; a size too small for the volume is refused.
///
/// Regression: the dry run opened the missing file without making it and
/// refused it, "give a member size to create a file", though one was given.
#[test]
fn a_dry_run_plans_with_a_member_it_would_make() {
    let v = Volume::create(Spec::new("raid5", 4, "64k"), 16 * MIB);
    let new = v.path().join("m4");
    let before = labels(&v.members);
    let size = v.member_size_bytes.to_string();
    let out = run_ok(
        platter(&["grow", "--dry-run", "--member-size", &size, "--add"])
            .arg(&new)
            .args(&v.members),
        CMD_TIMEOUT,
        "dry run of a member to make",
    );
    assert!(out.stdout.contains("raid5 of 5 members"), "{}", out.stdout);
    assert!(
        out.stdout.contains("dry run: nothing changed"),
        "{}",
        out.stdout
    );
    assert!(!new.exists(), "the dry run made {}", new.display());
    let out = run(
        platter(&["grow", "--dry-run", "--member-size", "1M", "--add"])
            .arg(&new)
            .args(&v.members),
        CMD_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", out.describe("too small"));
    assert!(
        out.stderr
            .contains("--member-size 1048576 bytes is too small"),
        "{}",
        out.stderr
    );
    assert!(!new.exists());
    assert_eq!(labels(&v.members), before);
}

#[test]
fn a_running_volume_grows_through_its_control_socket() {
    let test = "a_running_volume_grows_through_its_control_socket";
    let Some(t) = tools(test, &["nbdcopy", "qemu-img"]) else {
        return;
    };
    let mut s = Server::start(Volume::create(Spec::new("raid5", 4, "64k"), 80 * MIB));
    let image = fill(&t, &s, 0x9a0, test);
    slow_down(&s, test);
    let new = s.volume.path().join("m4").to_str().unwrap().to_string();
    let out = run_ok(&mut online(&s, &[], &new), CMD_TIMEOUT, test);
    assert!(out.stdout.contains("reshape started"), "{}", out.stdout);
    s.volume.members.push(new);
    // A second one is refused while this one runs.
    let other = s.volume.path().join("m5").to_str().unwrap().to_string();
    refused(
        &mut online(&s, &[], &other),
        "a second reshape",
        "already being reshaped",
    );
    let st = live_status(&s);
    assert_eq!(st["reshape"]["finished"], serde_json::json!(false), "{st}");
    // Clients read the volume whole while it moves.
    assert_images_identical(&t, &image, s.uri(), &format!("{test}: during the move"));
    wait_reshaped(&s, test);
    // The new layout's volume took over at once, with its bitmap: no
    // restart is needed for it (or for a rebuild or scrub).
    let st = live_status(&s);
    assert!(st["reshape"].is_null() && !st["bitmap"].is_null(), "{st}");
    assert!(client_size(&t, &s, test) > s.volume.size_bytes);
    assert_check_clean(&s, test);
    s.stop();
    s.start_again();
    assert!(live_status(&s)["reshape"].is_null());
    assert_images_identical(&t, &image, s.uri(), &format!("{test}: after a restart"));
    s.stop();
}

/// An interleave change on a running volume with no member added: every
/// window keeps a backup in the members' reserved areas.
#[test]
fn a_running_volume_changes_its_interleave_through_its_control_socket() {
    let test = "a_running_volume_changes_its_interleave_through_its_control_socket";
    let Some(t) = tools(test, &["nbdcopy", "qemu-img"]) else {
        return;
    };
    let mut s = Server::start(Volume::create(Spec::new("raid6", 5, "64k"), 48 * MIB));
    let image = fill(&t, &s, 0x9a1, test);
    slow_down(&s, test);
    let out = run_ok(
        &mut platter(&["reshape", "--control", &s.control(), "--interleave", "256k"]),
        CMD_TIMEOUT,
        test,
    );
    assert!(out.stdout.contains("reshape started"), "{}", out.stdout);
    let st = live_status(&s);
    assert_eq!(st["reshape"]["finished"], serde_json::json!(false), "{st}");
    assert_images_identical(&t, &image, s.uri(), &format!("{test}: during the move"));
    wait_reshaped(&s, test);
    let st = live_status(&s);
    assert_eq!(st["interleave_bytes"], serde_json::json!(256 << 10), "{st}");
    assert_check_clean(&s, test);
    s.stop();
    s.start_again();
    assert_images_identical(&t, &image, s.uri(), &format!("{test}: after a restart"));
    s.stop();
}

/// `platter create --reserve` leaves more room before the data: a
/// reshape on the same members keeps larger backups there. A 1M
/// interleave's window needs 1 MiB per member and a header, more than the
/// default 1 MiB holds beside the label and bitmap: refused there, done
/// with `--reserve 8M`.
#[test]
fn a_larger_reserve_lets_the_interleave_grow_in_place() {
    let test = "a_larger_reserve_lets_the_interleave_grow_in_place";
    let Some(t) = tools(test, &["nbdcopy", "qemu-img"]) else {
        return;
    };
    let small = Server::start(Volume::create(Spec::new("raid5", 4, "64k"), 48 * MIB));
    refused(
        &mut platter(&[
            "reshape",
            "--control",
            &small.control(),
            "--interleave",
            "1M",
        ]),
        "a 1M interleave in 1 MiB of room",
        "ask for a smaller interleave",
    );
    drop(small);
    let spec = Spec::new("raid5", 4, "64k");
    let mut s = Server::start(Volume::create_with(
        spec,
        48 * MIB,
        temp_dir(),
        &["--reserve", "8M"],
    ));
    let image = fill(&t, &s, 0x9a2, test);
    let first = std::fs::read(&s.volume.members[0]).unwrap();
    let offset = u64::from_le_bytes(first[0x48..0x50].try_into().unwrap());
    assert_eq!(offset, 8 * MIB, "{test}: the label's data offset");
    run_ok(
        &mut platter(&["reshape", "--control", &s.control(), "--interleave", "1M"]),
        CMD_TIMEOUT,
        test,
    );
    wait_reshaped(&s, test);
    assert_eq!(live_status(&s)["interleave_bytes"], serde_json::json!(MIB));
    assert_images_identical(&t, &image, s.uri(), &format!("{test}: after the move"));
    assert_check_clean(&s, test);
    s.stop();
    refused(
        platter(&["create", "--level", "raid5", "--reserve", "1500k"]).args(&s.volume.members),
        "a reserve of part of a MiB",
        "give whole MiBs",
    );
}

#[test]
fn sweep_compares_a_volumes_layout_with_a_target() {
    // `platter sweep --volume` puts the volume's own layout among the
    // rows, beside the one a reshape would move it to.
    let mut s = Server::start(Volume::create(Spec::new("raid5", 4, "64k"), 16 * MIB));
    s.stop();
    let members = s.volume.members.join(",");
    let out = run_ok(
        &mut platter(&[
            "sweep",
            "--volume",
            &members,
            "--levels",
            "raid5",
            "--members",
            "5",
            "--interleaves",
            "126s",
            "--workload",
            "raidtest:n=300",
            "--threads",
            "2",
            "--json",
        ]),
        CMD_TIMEOUT,
        "sweep --volume",
    );
    let rows: Vec<(u64, u64)> = out
        .stdout
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            assert!(v["mb_per_s"].as_f64().is_some_and(|x| x > 0.0), "{v}");
            (
                v["members"].as_u64().unwrap(),
                v["interleave_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(
        rows.contains(&(4, 65536)),
        "the volume's own layout: {rows:?}"
    );
    assert!(rows.contains(&(5, 126 * 512)), "the target: {rows:?}");
}

#[test]
fn a_raid5_becomes_raid6_with_q_on_the_added_member() {
    // `platter reshape --level raid6 --add ONE`: md's --layout=preserve.
    // Nothing moves; the added member is rebuilt as Q, and then the
    // volume reads back whole with any two members gone.
    let test = "a_raid5_becomes_raid6_with_q_on_the_added_member";
    let Some(t) = tools(test, &["nbdcopy", "qemu-img"]) else {
        return;
    };
    let mut s = Server::start(Volume::create(Spec::new("raid5", 4, "64k"), 48 * MIB));
    let image = fill(&t, &s, 0x6a6, test);
    s.stop();
    let out = reshape(&mut s, 1, &["--level", "raid6"], test);
    assert!(out.stdout.contains("left-symmetric-6"), "{}", out.stdout);
    s.start_again_unchecked();
    wait_rebuilt(&s, test);
    let st = live_status(&s);
    assert_eq!(st["level"], "raid6", "{st}");
    assert_images_identical(&t, &image, s.uri(), test);
    assert_check_clean(&s, test);
    s.stop();
    for gone in [[0, 1], [2, 4], [3, 4]] {
        s.start_again_degraded_read_only(&gone);
        assert_images_identical(&t, &image, s.uri(), &format!("{test}: without {gone:?}"));
        s.stop();
    }
}

#[test]
fn a_running_raid5_becomes_raid6_through_its_control_socket() {
    let test = "a_running_raid5_becomes_raid6_through_its_control_socket";
    let Some(t) = tools(test, &["nbdcopy", "qemu-img"]) else {
        return;
    };
    let mut s = Server::start(Volume::create(Spec::new("raid5", 4, "64k"), 48 * MIB));
    let image = fill(&t, &s, 0x6b6, test);
    let new = s.volume.path().join("m4").to_str().unwrap().to_string();
    let out = run_ok(
        &mut online(&s, &["--level", "raid6"], &new),
        CMD_TIMEOUT,
        test,
    );
    assert!(
        out.stdout.contains("Q on the added member"),
        "{}",
        out.stdout
    );
    s.volume.members.push(new);
    // Clients read it whole while Q is written.
    assert_images_identical(&t, &image, s.uri(), &format!("{test}: while Q is written"));
    wait_rebuilt(&s, test);
    assert_eq!(live_status(&s)["level"], "raid6");
    s.stop();
    s.start_again_degraded_read_only(&[1, 3]);
    assert_images_identical(&t, &image, s.uri(), &format!("{test}: without 1 and 3"));
    s.stop();
}

#[test]
fn a_member_failed_during_a_grow_loses_nothing() {
    // A redundant volume that loses a member while its data moves goes on
    // moving degraded (the member is out of both layouts) and loses no byte.
    let test = "a_member_failed_during_a_grow_loses_nothing";
    let Some(t) = tools(test, &["nbdcopy", "qemu-img"]) else {
        return;
    };
    let mut s = Server::start(Volume::create(Spec::new("raid5", 4, "64k"), 80 * MIB));
    let image = fill(&t, &s, 0xfa1, test);
    s.stop();
    reshape(&mut s, 1, &[], test);
    s.start_again_unchecked();
    slow_down(&s, test);
    std::thread::sleep(Duration::from_millis(300));
    let r = &live_status(&s)["reshape"];
    assert_eq!(r["finished"], serde_json::json!(false), "{test}: {r}");
    run_ok(
        &mut platter(&["fail", "--control", &s.control(), "1"]),
        CMD_TIMEOUT,
        test,
    );
    assert_images_identical(&t, &image, s.uri(), &format!("{test}: degraded, moving"));
    wait_reshaped(&s, test);
    assert_images_identical(&t, &image, s.uri(), &format!("{test}: degraded, moved"));
    let states = s.member_states();
    assert_eq!(states[1], "faulty", "{states:?}");
    s.stop_expecting_errors("TERM", &[]);
    // Served again without the failed member: every byte from the new
    // layout's parity.
    s.start_again_degraded_read_only(&[1]);
    assert_images_identical(&t, &image, s.uri(), &format!("{test}: after a restart"));
    s.stop();
}

#[test]
fn a_reshape_that_moved_nothing_can_be_aborted() {
    // A reshape whose labels stand at position 0 has moved nothing for
    // good: `reshape --abort` puts the old layout's labels back and blanks
    // the added member. Also when the stop came while `grow` wrote the
    // labels and the added member is still blank (with --force: the tool
    // cannot see that no window began without it). Once
    // data has moved for good it can only go forward.
    let test = "a_reshape_that_moved_nothing_can_be_aborted";
    let Some(t) = tools(test, &["nbdcopy", "qemu-img"]) else {
        return;
    };
    let mut s = Server::start(Volume::create(Spec::new("raid5", 4, "64k"), 64 * MIB));
    let image = fill(&t, &s, 0xab0, test);
    s.stop();
    let old_members = s.volume.members.clone();
    reshape(&mut s, 1, &[], test);
    let added = s.volume.members[4].clone();
    let out = run_ok(
        platter(&["reshape", "--abort"]).args(&s.volume.members),
        CMD_TIMEOUT,
        test,
    );
    assert!(
        out.stdout.contains("raid5 of 4 members again"),
        "{}",
        out.stdout
    );
    let head = std::fs::read(&added).unwrap();
    assert!(
        head[..4096].iter().all(|&b| b == 0),
        "the added member's label stays"
    );
    s.volume.members = old_members.clone();
    s.start_again_unchecked();
    assert!(live_status(&s)["reshape"].is_null());
    assert_images_identical(&t, &image, s.uri(), &format!("{test}: after the abort"));
    s.stop();
    // A grow cut short while its labels were written: the added member
    // blank, the old members' labels naming it.
    reshape(&mut s, 1, &[], test);
    let added = s.volume.members[4].clone();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&added)
            .unwrap();
        f.write_all_at(&[0u8; 4096], 0).unwrap();
    }
    // Without the member that keeps the backup the tool cannot know that
    // no window began: it says so, and --force goes ahead.
    refused(
        platter(&["reshape", "--abort"]).args(&old_members),
        "an abort without the backup's member",
        "--force",
    );
    run_ok(
        platter(&["reshape", "--abort", "--force"]).args(&old_members),
        CMD_TIMEOUT,
        test,
    );
    s.volume.members = old_members.clone();
    s.start_again_unchecked();
    assert_images_identical(
        &t,
        &image,
        s.uri(),
        &format!("{test}: after the second abort"),
    );
    s.stop();
    // Moved for good: refused.
    reshape(&mut s, 1, &[], test);
    s.start_again_unchecked();
    slow_down(&s, test);
    let deadline = Instant::now() + Duration::from_secs(60);
    while live_status(&s)["reshape"]["durable_bytes"].as_u64() == Some(0) {
        assert!(Instant::now() < deadline, "{test}: nothing moved for good");
        std::thread::sleep(Duration::from_millis(20));
    }
    s.crash();
    refused(
        platter(&["reshape", "--abort"]).args(&s.volume.members),
        "an abort after the move",
        "can only go",
    );
}

/// The story: `platter reshape --add A --add B` writes the new layout's
/// label to the volume's members first and to the added devices after;
/// killed between the two, A and B were left blank while every other
/// label counted them, and `platter serve m0 m1 m2 A B` refused with
/// "member A: no platter label", a raid5 of five missing two. Nothing had
/// moved, so `serve` now labels the blank added members as the reshape
/// would have, and the volume serves, reshapes and keeps every byte. The
/// cut-off is made by zeroing the added devices' label areas after the
/// reshape wrote them (the bytes a kill between the writes leaves).
#[test]
fn a_reshape_cut_off_before_the_added_labels_serves_and_moves() {
    let test = "a_reshape_cut_off_before_the_added_labels_serves_and_moves";
    let Some(t) = tools(test, &["nbdcopy", "qemu-img"]) else {
        return;
    };
    let mut s = Server::start(Volume::create(Spec::new("raid5", 3, "64k"), 40 * MIB));
    let image = fill(&t, &s, 0xadd5, test);
    s.stop();
    reshape(&mut s, 2, &[], test);
    let added = &s.volume.members[3..];
    for m in added {
        let mut f = std::fs::OpenOptions::new().write(true).open(m).unwrap();
        std::io::Write::write_all(&mut f, &[0u8; 4096]).unwrap();
    }
    s.start_again();
    assert!(
        s.log().contains("labelled as the reshape would have"),
        "{test}: {}",
        tail(&s.log(), 3000)
    );
    assert_images_identical(&t, &image, s.uri(), &format!("{test}: during the move"));
    wait_reshaped(&s, test);
    assert_images_identical(&t, &image, s.uri(), &format!("{test}: after the move"));
    assert_check_clean(&s, test);
    s.stop();
}
