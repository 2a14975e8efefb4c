//! Issue 44 on the real binary: a subdisk moved to another drive while
//! its volume serves (vinum's `move`, LVM's `pvmove`), under fio
//! --verify, the server killed mid-copy and the move taken up by the next
//! start; a move offline; moves that would share a drive refused with one
//! line, nothing written.

mod e2e_support;

use e2e_support::pool::*;
use e2e_support::*;
use serde_json::Value;

/// Subdisk `name` (`v.p0.s1`) as `list --json` shows it.
fn subdisk(pool: &Value, name: &str) -> Value {
    all_subdisks(pool)
        .into_iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no subdisk {name}: {pool}"))
}

/// Waits (2 minutes at most) until subdisk `name` lies on `drive` with no
/// move recorded.
fn wait_moved(dev: &str, name: &str, drive: &str) {
    let start = std::time::Instant::now();
    loop {
        let sd = subdisk(&list_json(dev), name);
        if sd["drive"] == drive && sd["moving"].is_null() {
            return;
        }
        assert!(start.elapsed().as_secs() < 120, "{name} not moved: {sd}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// A raid5's subdisk moves to a fifth drive while fio writes and
/// verifies the volume; the server is killed with SIGKILL mid-copy, the
/// move is recorded with its checkpoint, and the next start takes it up
/// and finishes it; every byte fio wrote reads back, the check is clean.
/// A concat's subdisk then moves offline. Moves onto the plex's own
/// drives, of a subdisk the pool lacks, or while one moves, are refused
/// with one line and change nothing.
#[test]
fn a_subdisk_moves_under_fio_and_a_kill_mid_copy_is_taken_up_by_the_next_start() {
    let test = "a_subdisk_moves_under_fio_and_a_kill_mid_copy_is_taken_up_by_the_next_start";
    let Some(t) = tools_with_fio_nbd(test, &["fio"]) else {
        return;
    };
    let dir = temp_dir();
    let (_d, dev) = pool_of(dir.path(), 5, "64M");
    create_volumes(
        &dev,
        &[
            ("r", "raid5", "40M", "d0,d1,d2"),
            ("c", "concat", "16M", "d3"),
        ],
    );
    let volumes = sizes(&list_json(&dev));
    let vols: Vec<(&str, u64)> = volumes.iter().map(|(n, s)| (n.as_str(), *s)).collect();
    let mut s = serve_pool_first(dir.path(), &dev, "r", &[]);
    fio_all(&t, &s, &vols, false);

    let ctl = s.control();
    let before = generation(&dev);
    let mv = |sd: &str, to: &str| {
        vec![
            "subdisk".to_string(),
            "move".into(),
            "tank".into(),
            sd.into(),
            "--to".into(),
            to.into(),
            "--control".into(),
            ctl.clone(),
        ]
    };
    let refuse = |args: Vec<String>, says: &str| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refused(&args, says);
    };
    refuse(mv("r.p0.s0", "d1"), "r.p0.s1 of its plex");
    refuse(mv("r.p0.s7", "d4"), "no subdisk r.p0.s7");
    refuse(mv("c.p0.s0", "d4:63M"), "not inside drive");
    assert_eq!(generation(&dev), before, "nothing written");

    // Slow enough to be caught mid-copy: 2 MiB/s over a ~21 MiB subdisk.
    let mut args = mv("r.p0.s1", "d4");
    args.extend(["--rate".into(), "2M".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = ok(&args, "subdisk move r.p0.s1");
    assert!(out.stdout.contains("moving to d4"), "{}", out.stdout);
    refuse(mv("r.p0.s1", "d4"), "moving already");
    // Its progress, live: status --json and the text form.
    let st = live(&s, "r");
    assert_eq!(st["moves"][0]["subdisk"], "r.p0.s1", "{st}");
    assert_eq!(st["moves"][0]["to"], "d4", "{st}");
    let text = ok(&["status", "--volume", "r", "--control", &ctl], "status r").stdout;
    assert!(text.contains("Moving:     r.p0.s1 to d4"), "{text}");
    fio_all(&t, &s, &[("r", vols[0].1)], false);
    let start = std::time::Instant::now();
    let sd = loop {
        let sd = subdisk(&list_json(&dev), "r.p0.s1");
        if sd["moving"]["copied_bytes"].as_u64().unwrap_or(0) > 0 {
            break sd;
        }
        assert!(
            start.elapsed().as_secs() < 20,
            "a checkpoint is recorded as the copy goes: {sd}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(sd["drive"], "d1", "not moved yet: {sd}");
    // Writes land on both places while the copy runs.
    fio_all(&t, &s, &[("r", vols[0].1)], false);
    s.crash();
    let sd = subdisk(&list_json(&dev), "r.p0.s1");
    assert_eq!(
        sd["moving"]["drive"], "d4",
        "the kill left the move recorded: {sd}"
    );

    let s = serve_pool_first(dir.path(), &dev, "r", &[]);
    wait_moved(&dev, "r.p0.s1", "d4");
    wait_rebuilt(&s, "r");
    fio_all(&t, &s, &vols, true);
    for name in ["r", "c"] {
        ok(
            &["check", "--volume", name, "--control", &s.control()],
            &format!("check {name}"),
        );
    }
    drop(s);

    let out = ok(
        &["subdisk", "move", "tank", "c.p0.s0", "--to", "d4", &dev],
        "offline move",
    );
    assert!(out.stdout.contains("on d4"), "{}", out.stdout);
    assert_eq!(subdisk(&list_json(&dev), "c.p0.s0")["drive"], "d4");
    let s = serve_pool_first(dir.path(), &dev, "r", &[]);
    fio_all(&t, &s, &vols, true);
    ok(
        &["check", "--volume", "c", "--control", &s.control()],
        "check c",
    );
}

/// Waits (2 minutes at most) until no subdisk lies on `drive` and no
/// move is recorded.
fn wait_emptied(dev: &str, drive: &str) {
    let start = std::time::Instant::now();
    loop {
        let pool = list_json(dev);
        let on_it = all_subdisks(&pool)
            .iter()
            .any(|s| s["drive"] == drive || !s["moving"].is_null());
        if !on_it {
            return;
        }
        assert!(
            start.elapsed().as_secs() < 120,
            "{drive} not emptied: {pool}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// LVM's `pvmove` of a whole drive: d1 holds a subdisk of a raid5, a
/// mirror and a concat; `pool evacuate --control` moves all three while
/// fio writes and verifies each volume; the server is killed with
/// SIGKILL mid-copy and the next start takes every recorded move up; then
/// `pool remove-drive` takes the empty drive out, and every byte fio wrote
/// reads back, checks clean. A drive whose subdisks have nowhere to go
/// (every other drive holds their plex, or is full) is refused whole.
#[test]
fn a_drive_under_three_volumes_is_evacuated_while_they_serve() {
    let test = "a_drive_under_three_volumes_is_evacuated_while_they_serve";
    let Some(t) = tools_with_fio_nbd(test, &["fio"]) else {
        return;
    };
    let dir = temp_dir();
    let (_d, dev) = pool_of(dir.path(), 5, "64M");
    create_volumes(
        &dev,
        &[
            ("r", "raid5", "40M", "d0,d1,d2"),
            ("m", "mirror", "12M", "d1,d3"),
            ("c", "concat", "8M", "d1"),
        ],
    );
    let volumes = sizes(&list_json(&dev));
    let vols: Vec<(&str, u64)> = volumes.iter().map(|(n, s)| (n.as_str(), *s)).collect();
    let mut s = serve_pool_first(dir.path(), &dev, "r", &[]);
    fio_all(&t, &s, &vols, false);
    let ctl = s.control();
    let before = list_json(&dev)["generation"].as_u64().unwrap();
    // d0's subdisk of r can go only to d3 or d4: with both named full of
    // a volume, it has nowhere to go.
    let fill = [
        "volume",
        "create",
        "tank",
        "big",
        "--level",
        "mirror",
        "--size",
        "44M",
        "--drives",
        "d3,d4",
        "--control",
        &ctl,
    ];
    ok(&fill, "volume create big");
    refused(
        &["pool", "evacuate", "tank", "d0", "--control", &ctl],
        "r.p0.s0 has nowhere to go",
    );
    ok(
        &["volume", "remove", "tank", "big", "--control", &ctl],
        "volume remove big",
    );
    assert_eq!(
        list_json(&dev)["generation"].as_u64().unwrap(),
        before + 2,
        "the refused evacuation wrote nothing"
    );

    let out = ok(
        &[
            "pool",
            "evacuate",
            "tank",
            "d1",
            "--rate",
            "4M",
            "--control",
            &ctl,
        ],
        "pool evacuate d1",
    );
    assert_eq!(out.stdout.matches("moving to").count(), 3, "{}", out.stdout);
    fio_all(&t, &s, &vols, false);
    s.crash();
    let pool = list_json(&dev);
    let recorded = ["r.p0.s1", "m.p0.s0", "c.p0.s0"]
        .iter()
        .filter(|n| !subdisk(&pool, n)["moving"].is_null())
        .count();
    assert!(recorded > 0, "the kill left moves recorded: {pool}");

    let s = serve_pool_first(dir.path(), &dev, "r", &[]);
    wait_emptied(&dev, "d1");
    // Marked as it is emptied: nothing new goes there.
    assert_eq!(drive_state(&dev, "d1"), "leaving");
    refused(
        &[
            "volume",
            "create",
            "tank",
            "x",
            "--level",
            "concat",
            "--size",
            "4M",
            "--drives",
            "d1",
            "--control",
            &s.control(),
        ],
        "drive d1 is being emptied",
    );
    fio_all(&t, &s, &vols, true);
    for name in ["r", "m", "c"] {
        wait_rebuilt(&s, name);
        ok(
            &["check", "--volume", name, "--control", &s.control()],
            &format!("check {name}"),
        );
    }
    ok(
        &[
            "pool",
            "remove-drive",
            "tank",
            "d1",
            "--control",
            &s.control(),
        ],
        "remove-drive d1",
    );
    drop(s);
    let s = serve_pool_first(dir.path(), &dev, "r", &[]);
    fio_all(&t, &s, &vols, true);
}

/// Evacuating a drive that fails reads: a bad sector where the copy of a
/// raid5's subdisk reads (between its bitmap and its data: bytes no
/// client and no label write touches, so nothing heals them first) stops
/// that copy, and the raid5 rebuilds the subdisk at its new place from
/// its other subdisks instead; a concat's subdisk, with nothing to be
/// rebuilt from, stays where it is, its move recorded. Every byte fio
/// wrote reads back and the raid5's check is clean.
#[test]
fn a_move_whose_old_place_fails_a_read_is_rebuilt_at_its_new_place() {
    let test = "a_move_whose_old_place_fails_a_read_is_rebuilt_at_its_new_place";
    let Some(t) = tools_with_fio_nbd(test, &["fio"]) else {
        return;
    };
    let dir = temp_dir();
    let (d, dev) = pool_of(dir.path(), 5, "64M");
    create_volumes(
        &dev,
        &[
            ("r", "raid5", "40M", "d0,d1,d2"),
            ("c", "concat", "8M", "d1"),
        ],
    );
    let pool = list_json(&dev);
    let at = |name: &str| subdisk(&pool, name)["offset_bytes"].as_u64().unwrap() + 512 * KIB;
    let bad = format!(
        "{}=bad-range={}+4k,bad-range={}+4k",
        d.join("d1").display(),
        at("r.p0.s1"),
        at("c.p0.s0")
    );
    let volumes = sizes(&pool);
    let vols: Vec<(&str, u64)> = volumes.iter().map(|(n, s)| (n.as_str(), *s)).collect();
    let s = serve_pool_first(dir.path(), &dev, "r", &["--inject", &bad]);
    fio_all(&t, &s, &vols, false);
    ok(
        &["pool", "evacuate", "tank", "d1", "--control", &s.control()],
        "pool evacuate d1",
    );
    let start = std::time::Instant::now();
    let r_moved = loop {
        let sd = subdisk(&list_json(&dev), "r.p0.s1");
        if sd["drive"] != "d1" && sd["moving"].is_null() {
            break sd;
        }
        assert!(start.elapsed().as_secs() < 60, "r.p0.s1 not placed: {sd}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    wait_rebuilt(&s, "r");
    assert!(
        s.log().contains("rebuilt at its new place"),
        "the failed read turned into a rebuild: {}",
        s.log()
    );
    let c = subdisk(&list_json(&dev), "c.p0.s0");
    assert_eq!(c["drive"], "d1", "the concat stays: {c}");
    assert!(!c["moving"].is_null(), "its move stays recorded: {c}");
    fio_all(&t, &s, &vols, true);
    ok(
        &["check", "--volume", "r", "--control", &s.control()],
        &format!("check r ({r_moved})"),
    );
}

/// A subdisk of a plex of a volume of several moves as a volume's does:
/// the plex's array takes it over both places, fio verifies the volume
/// through both plexes, and the plex's check is clean. Onto a drive the
/// other plex uses, it is refused (one drive's loss would cost both).
#[test]
fn a_plex_s_subdisk_moves_while_its_volume_serves() {
    let test = "a_plex_s_subdisk_moves_while_its_volume_serves";
    let Some(t) = tools_with_fio_nbd(test, &["fio"]) else {
        return;
    };
    let dir = temp_dir();
    let (_d, dev) = pool_of(dir.path(), 5, "64M");
    let args = [
        "volume", "create", "tank", "u", "--plex", "raid5:3", "--plex", "concat", "--size", "24M",
        &dev,
    ];
    ok(&args, "volume create u");
    let pool = list_json(&dev);
    let concat_drive = subdisk(&pool, "u.p1.s0")["drive"]
        .as_str()
        .unwrap()
        .to_string();
    let used: Vec<String> = (0..3)
        .map(|s| {
            subdisk(&pool, &format!("u.p0.s{s}"))["drive"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .chain([concat_drive.clone()])
        .collect();
    let free = (0..5)
        .map(|i| format!("d{i}"))
        .find(|d| !used.contains(d))
        .unwrap();
    let size = sizes(&pool)[0].1;
    let s = serve_pool_first(dir.path(), &dev, "u", &[]);
    fio_all(&t, &s, &[("u", size)], false);
    refused(
        &[
            "subdisk",
            "move",
            "tank",
            "u.p1.s0",
            "--to",
            &used[0],
            "--control",
            &s.control(),
        ],
        "plex u.p0 of its volume",
    );
    ok(
        &[
            "subdisk",
            "move",
            "tank",
            "u.p1.s0",
            "--to",
            &free,
            "--rate",
            "8M",
            "--control",
            &s.control(),
        ],
        "subdisk move u.p1.s0",
    );
    fio_all(&t, &s, &[("u", size)], false);
    wait_moved(&dev, "u.p1.s0", &free);
    fio_all(&t, &s, &[("u", size)], true);
    for array in ["u", "u.p0", "u.p1"] {
        ok(
            &["check", "--volume", array, "--control", &s.control()],
            &format!("check {array}"),
        );
    }
}

/// Kills of the pool's server (SIGKILL) at seeded moments of a move: the
/// record, the copy, a checkpoint, the finish. Each time the next start
/// takes the move up (or finds it done, or never begun: then it is asked
/// again) and finishes it; every byte fio wrote before reads back and the
/// check is clean. The subdisk goes back and forth between two drives.
/// `PLATTER_MOVE_KILLS` sets how many (CI: 4).
#[test]
fn subdisk_moves_killed_at_seeded_moments_keep_every_byte() {
    let test = "subdisk_moves_killed_at_seeded_moments_keep_every_byte";
    let Some(t) = tools_with_fio_nbd(test, &["fio"]) else {
        return;
    };
    let kills = env_count("PLATTER_MOVE_KILLS", 4);
    let dir = temp_dir();
    let (_d, dev) = pool_of(dir.path(), 4, "48M");
    let args = [
        "volume", "create", "tank", "r", "--level", "raid5", "--size", "24M", "--drives",
        "d0,d1,d2", &dev,
    ];
    ok(&args, "volume create r");
    let size = sizes(&list_json(&dev))[0].1;
    let s = serve_pool_first(dir.path(), &dev, "r", &[]);
    fio_all(&t, &s, &[("r", size)], false);
    drop(s);
    let mut outcomes = std::collections::BTreeMap::new();
    for seed in 0..kills {
        let mut rng = platter_testkit::rng::Rng::new(0x6d0e + seed);
        let delay = std::time::Duration::from_millis(rng.below(2500));
        let from = subdisk(&list_json(&dev), "r.p0.s1")["drive"]
            .as_str()
            .unwrap()
            .to_string();
        let to = if from == "d1" { "d3" } else { "d1" };
        let mut s = serve_pool_first(dir.path(), &dev, "r", &[]);
        let args = [
            "subdisk",
            "move",
            "tank",
            "r.p0.s1",
            "--to",
            to,
            "--rate",
            "8M",
            "--control",
            &s.control(),
        ];
        ok(&args, "subdisk move");
        std::thread::sleep(delay);
        s.crash();
        let story = format!("seed {seed}: r.p0.s1 from {from} to {to}, killed after {delay:?}");
        println!("{story}");
        let sd = subdisk(&list_json(&dev), "r.p0.s1");
        let left = if sd["drive"] == to {
            "moved"
        } else if sd["moving"].is_null() {
            "not begun"
        } else {
            "recorded"
        };
        *outcomes.entry(left).or_insert(0) += 1;
        let s = serve_pool_first(dir.path(), &dev, "r", &[]);
        if left == "not begun" {
            let args = [
                "subdisk",
                "move",
                "tank",
                "r.p0.s1",
                "--to",
                to,
                "--control",
                &s.control(),
            ];
            ok(&args, &format!("{story}: move again"));
        }
        wait_moved(&dev, "r.p0.s1", to);
        wait_rebuilt(&s, "r");
        ok(
            &["check", "--volume", "r", "--control", &s.control()],
            &format!("{story}: check"),
        );
        let out = run_ok(
            &mut fio(&t, &uri(&s, "r"), size, true),
            CMD_TIMEOUT,
            &format!("{story}: fio verify"),
        );
        assert!(out.stdout.contains("err= 0"), "{story}: {}", out.stdout);
    }
    println!("{test}: {kills} kills: {outcomes:?}");
}
