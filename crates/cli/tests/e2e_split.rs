//! Issue 44 on the real binary: a plex split off its volume while fio
//! writes and verifies it (vinum's `detach`, LVM's `--splitmirrors`),
//! served as a volume of its own, and joined back with only what changed
//! revived; a writable copy revived whole; the server killed with SIGKILL
//! after a split and in the middle of a revive; bad requests refused with
//! one line, nothing written.

mod e2e_support;

use e2e_support::pool::*;
use e2e_support::*;

/// Plex `name`'s state as `list --json` shows it.
fn plex_state(dev: &str, name: &str) -> String {
    let pool = list_json(dev);
    for v in pool["volumes"].as_array().unwrap() {
        for p in v["plexes"].as_array().unwrap() {
            if p["name"] == name {
                return p["state"].as_str().unwrap().to_string();
            }
        }
    }
    panic!("no plex {name}: {pool}")
}

/// `platter plex VERB tank ARGS... --control CTL`.
fn plex(verb: &str, ctl: &str, args: &[&str]) -> Vec<String> {
    let mut all: Vec<String> = vec!["plex".into(), verb.into(), "tank".into()];
    all.extend(args.iter().map(|a| a.to_string()));
    all.extend(["--control".to_string(), ctl.to_string()]);
    all
}

/// The regions an attach says it revives, and of how many.
fn revived_regions(said: &str) -> (u64, u64) {
    let words: Vec<&str> = said.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| *w == "region(s)")
        .unwrap_or_else(|| panic!("no region count: {said}"));
    (
        words[at - 1].parse().unwrap(),
        words[at + 2].parse().unwrap(),
    )
}

/// A raid5-and-concat volume under fio: its concat plex detached as
/// `snap`, whose sha256 is the volume's at the split and stays so while
/// fio writes the volume's first region; `snap` refuses writes; attached
/// back while fio writes that region again, only that region is revived
/// (counted, 1 of 6); fio then writes and verifies the whole volume and
/// every copy checks clean. Refusals change nothing: an unknown plex, a
/// plex not detached, a name the pool has, a volume of one plex, the last
/// plex, a plex detached twice, removing or extending the volume while
/// its plex is split off.
#[test]
fn a_detached_plex_holds_the_volume_at_the_split_and_attaches_back_reviving_what_changed() {
    let test =
        "a_detached_plex_holds_the_volume_at_the_split_and_attaches_back_reviving_what_changed";
    let Some(t) = tools_with_fio_nbd(test, &["fio", "nbdcopy", "sha256sum", "qemu-io"]) else {
        return;
    };
    let dir = temp_dir();
    let (_d, dev) = pool_of(dir.path(), 5, "64M");
    ok(
        &[
            "volume", "create", "tank", "u", "--plex", "raid5:3", "--plex", "concat", "--size",
            "24M", &dev,
        ],
        "volume create u",
    );
    create_volumes(&dev, &[("one", "concat", "8M", "d4")]);
    let mut s = serve_pool_first(dir.path(), &dev, "u", &[]);
    let size = 24 * MIB;
    fio_all(&t, &s, &[("u", size)], false);
    let at_split = volume_sha256(&t, &uri(&s, "u"), "u before the split");
    let ctl = s.control();

    let before = generation(&dev);
    refused(&strs(&plex("detach", &ctl, &["u", "u.p5"])), "no plex u.p5");
    refused(
        &strs(&plex("attach", &ctl, &["u", "p1"])),
        "is not detached",
    );
    refused(
        &strs(&plex("detach", &ctl, &["u", "1", "--as", "one"])),
        "names a volume or plex",
    );
    refused(&strs(&plex("detach", &ctl, &["one", "0"])), "has one plex");
    assert_eq!(generation(&dev), before, "nothing written");

    let out = ok(
        &strs(&plex("detach", &ctl, &["u", "u.p1", "--as", "snap"])),
        "detach",
    );
    assert!(
        out.stdout.contains("served as volume snap (read-only)"),
        "{}",
        out.stdout
    );
    assert_eq!(
        plex_state(&dev, "u.p1"),
        "detached (served as snap, read-only)"
    );
    let st = ok(&["status", "--volume", "u", "--control", &ctl], "status u").stdout;
    assert!(
        st.contains("its plex is detached")
            && st.contains("brought back by: platter plex attach tank u u.p1"),
        "{st}"
    );
    let snap = uri(&s, "snap");
    assert_eq!(
        volume_sha256(&t, &snap, "snap"),
        at_split,
        "snap is u at the split"
    );
    let before = generation(&dev);
    refused(&strs(&plex("detach", &ctl, &["u", "p0"])), "the last plex");
    refused(
        &strs(&plex("detach", &ctl, &["u", "p1"])),
        "detached already",
    );
    refused(
        &["volume", "remove", "tank", "u", "--control", &ctl],
        "is served as volume snap",
    );
    refused(
        &[
            "volume",
            "extend",
            "tank",
            "u",
            "--size",
            "28M",
            "--control",
            &ctl,
        ],
        "plex u.p1 is not served (detached",
    );
    assert_eq!(generation(&dev), before, "nothing written");
    let written = run(
        t.cmd("qemu-io")
            .args(["-f", "raw", "-c", "write 0 64k", &snap]),
        CMD_TIMEOUT,
    );
    assert!(
        !written.status.success(),
        "snap is read-only: {}",
        written.stdout
    );

    // Writes after the split: the volume's first 4 MiB region only.
    fio_all(&t, &s, &[("u", 4 * MIB)], false);
    assert_eq!(
        volume_sha256(&t, &snap, "snap after"),
        at_split,
        "not in snap"
    );
    assert_ne!(volume_sha256(&t, &uri(&s, "u"), "u after"), at_split);

    // Attached while fio writes and verifies that region again (writes
    // elsewhere before the re-add would be missed regions too).
    let mut load = Background::spawn(&mut fio(&t, &uri(&s, "u"), 4 * MIB, false), "fio on u");
    let out = ok(&strs(&plex("attach", &ctl, &["u", "u.p1"])), "attach");
    let (missed, regions) = revived_regions(&out.stdout);
    assert_eq!(
        (missed, regions),
        (1, 6),
        "only the region written: {}",
        out.stdout
    );
    assert!(load.wait(CMD_TIMEOUT).success(), "{}", load.stderr());
    assert!(load.stdout().contains("err= 0"), "{}", load.stdout());
    wait_rebuilt(&s, "u");
    assert!(!plex_state(&dev, "u.p1").contains("detached"));
    fio_all(&t, &s, &[("u", size)], false);
    check_clean(&s, &["u", "u.p0", "u.p1"]);
    s.stop_expecting_errors("TERM", &[]);
}

/// A split whose copy is written (`--writable`) is revived whole when
/// attached; the server killed with SIGKILL just after a split starts
/// with the plex out and its copy served; killed while a revive runs
/// (rebuild rate 1 MiB/s), the next start finishes it; an attach made
/// offline is revived by the next start. fio verifies after each, and
/// every copy checks clean. A detached plex whose drive is then cut to
/// nothing is refused attach, naming the subdisk, and stays detached.
#[test]
fn a_written_copy_is_revived_whole_and_kills_mid_split_and_mid_revive_recover() {
    let test = "a_written_copy_is_revived_whole_and_kills_mid_split_and_mid_revive_recover";
    let Some(t) = tools_with_fio_nbd(test, &["fio", "nbdcopy", "sha256sum", "qemu-io"]) else {
        return;
    };
    let dir = temp_dir();
    let (_d, dev) = pool_of(dir.path(), 5, "64M");
    ok(
        &[
            "volume", "create", "tank", "u", "--plex", "raid5:3", "--plex", "concat", "--size",
            "24M", &dev,
        ],
        "volume create u",
    );
    let size = 24 * MIB;
    let mut s = serve_pool_first(dir.path(), &dev, "u", &["--rebuild-rate", "1M"]);
    fio_all(&t, &s, &[("u", size)], false);
    let ctl = s.control();

    ok(
        &strs(&plex(
            "detach",
            &ctl,
            &["u", "1", "--as", "w", "--writable"],
        )),
        "detach writable",
    );
    let w = uri(&s, "w");
    qemu_io(&t, &w, &["write -P 0x5a 0 1M".to_string()], "write w");
    let u_now = volume_sha256(&t, &uri(&s, "u"), "u");
    assert_ne!(volume_sha256(&t, &w, "w"), u_now);
    let out = ok(&strs(&plex("attach", &ctl, &["u", "1"])), "attach w");
    assert!(
        out.stdout.contains("reviving the whole plex"),
        "{}",
        out.stdout
    );
    wait_rebuilt(&s, "u");
    assert_eq!(volume_sha256(&t, &uri(&s, "u"), "u revived"), u_now);
    check_clean(&s, &["u", "u.p1"]);

    // Killed just after a split: the plex stays out, its copy is served.
    let at_split = volume_sha256(&t, &uri(&s, "u"), "u");
    ok(
        &strs(&plex("detach", &ctl, &["u", "1", "--as", "snap"])),
        "detach",
    );
    s.crash();
    s.start_again_unchecked();
    assert_eq!(volume_sha256(&t, &uri(&s, "snap"), "snap"), at_split);
    fio_all(&t, &s, &[("u", size)], false);
    let st = live(&s, "u");
    assert_ne!(st["members"][1]["state"], "active", "the plex is out: {st}");

    // Killed while the revive runs; the next start goes on with it.
    let out = ok(&strs(&plex("attach", &ctl, &["u", "1"])), "attach");
    let (missed, regions) = revived_regions(&out.stdout);
    assert!(missed > 1 && missed <= regions, "{}", out.stdout);
    wait_rebuilding(&s, "u");
    s.crash();
    s.start_again_unchecked();
    wait_rebuilt(&s, "u");
    fio_all(&t, &s, &[("u", size)], true);
    check_clean(&s, &["u", "u.p0", "u.p1"]);

    // Offline: split, write the volume, attach; the next start revives.
    s.stop_expecting_errors("TERM", &[]);
    ok(
        &["plex", "detach", "tank", "u", "1", &dev],
        "offline detach",
    );
    assert_eq!(plex_state(&dev, "u.p1"), "detached");
    s.start_again_unchecked();
    let st = ok(
        &["status", "--volume", "u", "--control", &s.control()],
        "status",
    )
    .stdout;
    assert!(
        st.contains("brought back by: platter plex attach tank u u.p1"),
        "{st}"
    );
    fio_all(&t, &s, &[("u", 4 * MIB)], false);
    s.stop_expecting_errors("TERM", &[]);
    ok(
        &["plex", "attach", "tank", "u", "1", &dev],
        "offline attach",
    );
    s.start_again_unchecked();
    wait_rebuilt(&s, "u");
    fio_all(&t, &s, &[("u", size)], true);
    check_clean(&s, &["u", "u.p1"]);
    let log = s.log();
    assert!(log.contains("plex attached again"), "{}", tail(&log, 4000));

    // A detached plex whose drive is lost meanwhile cannot come back: the
    // attach is refused and it stays detached, the volume served.
    let ctl = s.control();
    ok(&strs(&plex("detach", &ctl, &["u", "1"])), "detach");
    let drive = subdisk_drives_of(&dev, "u", 1)[0].clone();
    truncate(&dev, &drive);
    let before = generation(&dev);
    refused(&strs(&plex("attach", &ctl, &["u", "1"])), "shrank from");
    assert_eq!(generation(&dev), before, "nothing written");
    assert_eq!(plex_state(&dev, "u.p1").split(' ').next(), Some("detached"));
    fio_all(&t, &s, &[("u", size)], true);
    s.stop_expecting_errors("TERM", &[]);
}

/// The server killed with SIGKILL at seeded moments of detaches and
/// attaches (while the command runs, or while the plex is revived): after
/// each kill the next start serves the volume with the plex out and its
/// copy (`snap`) holding the volume as it was at the split, or with the
/// plex back and revived; fio's bytes verify on the volume and its copies
/// check clean. `PLATTER_SPLIT_KILLS=N` runs N kills (CI runs 4).
#[test]
fn a_volume_killed_at_seeded_moments_of_splits_keeps_its_bytes_and_its_copy() {
    let test = "a_volume_killed_at_seeded_moments_of_splits_keeps_its_bytes_and_its_copy";
    let Some(t) = tools_with_fio_nbd(test, &["fio", "nbdcopy", "sha256sum"]) else {
        return;
    };
    let kills = e2e_support::pool::env_count("PLATTER_SPLIT_KILLS", 4);
    let dir = temp_dir();
    let (_d, dev) = pool_of(dir.path(), 5, "64M");
    ok(
        &[
            "volume", "create", "tank", "u", "--plex", "raid5:3", "--plex", "concat", "--size",
            "24M", &dev,
        ],
        "volume create u",
    );
    let size = 24 * MIB;
    let mut s = serve_pool_first(dir.path(), &dev, "u", &["--rebuild-rate", "8M"]);
    fio_all(&t, &s, &[("u", size)], false);
    let mut seed: u64 = 0x5b11_7000;
    let mut at_split = String::new();
    let mut outcomes = std::collections::BTreeMap::new();
    for k in 0..kills {
        let detached = plex_state(&dev, "u.p1").starts_with("detached");
        if !detached {
            at_split = volume_sha256(&t, &uri(&s, "u"), "u before the split");
        }
        let (verb, more): (&str, &[&str]) = if detached {
            ("attach", &[])
        } else {
            ("detach", &["--as", "snap"])
        };
        let mut args = vec!["u", "1"];
        args.extend(more);
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let delay_ms = (seed >> 33) % if k % 4 < 2 { 100 } else { 2000 };
        let cmd_args = plex(verb, &s.control(), &args);
        let mut running = Background::spawn(&mut platter(&strs(&cmd_args)), verb);
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        s.crash();
        let _ = running.wait(CMD_TIMEOUT);
        s.start_again_unchecked();
        let now = plex_state(&dev, "u.p1");
        if now.starts_with("detached") {
            assert_eq!(
                volume_sha256(&t, &uri(&s, "snap"), "snap"),
                at_split,
                "kill {k}: the copy is the volume at the split"
            );
        } else {
            wait_rebuilt(&s, "u");
            check_clean(&s, &["u", "u.p1"]);
        }
        *outcomes.entry(format!("{verb} -> {now}")).or_insert(0) += 1;
        fio_all(&t, &s, &[("u", size)], true);
        // What the next attach revives.
        fio_all(&t, &s, &[("u", size)], false);
    }
    eprintln!("outcomes: {outcomes:?}");
    s.stop_expecting_errors("TERM", &[]);
}
