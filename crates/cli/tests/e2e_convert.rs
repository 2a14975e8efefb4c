//! Issue 44 on the real binary: a volume's organisation changed by plex
//! (`platter volume convert`, vinum's attach-revive-remove) while it
//! serves: a concat plex becomes raid5 with the volume's bytes unchanged
//! (sha256) through a SIGKILL mid-revive; a plex converted under fio; the
//! server killed at seeded moments of converts, each taken up or never
//! begun; bad requests refused with one line, nothing written.

mod e2e_support;

use e2e_support::pool::*;
use e2e_support::*;
use serde_json::Value;

fn volume_of(pool: &Value, name: &str) -> Value {
    pool["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no volume {name}: {pool}"))
        .clone()
}

/// Waits (2 minutes at most) until volume `name` has two plexes again,
/// plex `p` of organisation `org`.
fn wait_converted(dev: &str, name: &str, p: usize, org: &str) {
    let start = std::time::Instant::now();
    loop {
        let v = volume_of(&list_json(dev), name);
        let plexes = v["plexes"].as_array().unwrap();
        if plexes.len() == 2 && plexes[p]["org"] == org {
            return;
        }
        assert!(start.elapsed().as_secs() < 120, "{name} not converted: {v}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

fn convert(ctl: &str, volume: &str, plex: &str, level: &str, more: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["volume", "convert", "tank", volume, "--plex", plex]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(["--level".to_string(), level.to_string()]);
    args.extend(more.iter().map(|s| s.to_string()));
    args.extend(["--control".to_string(), ctl.to_string()]);
    args
}

/// A volume of a concat and a mirror plex: the concat plex becomes a
/// raid5 of three subdisks with a 126s interleave while the volume serves
/// (revived at 4 MiB/s), the server killed with SIGKILL in the middle of
/// the revive; the next start goes on, the old plex's drive is freed, and
/// the volume's sha256 is the same before, during and after. Then its
/// mirror plex becomes a stripe while fio writes and verifies the volume,
/// and, recorded offline, a mirror again at the next start, the volume's
/// sha256 unchanged.
/// Refused with one line, nothing written: a new plex whose drives are
/// too small to hold the volume, a second plex of a volume of one, a drive a plex of
/// the volume uses, a plex the volume lacks, a second convert while one
/// runs, an extend while one runs.
#[test]
fn a_concat_plex_becomes_raid5_with_the_bytes_unchanged_through_a_kill() {
    let test = "a_concat_plex_becomes_raid5_with_the_bytes_unchanged_through_a_kill";
    let Some(t) = tools_with_fio_nbd(test, &["fio", "nbdcopy", "sha256sum"]) else {
        return;
    };
    let dir = temp_dir();
    let (_d, dev) = pool_of(dir.path(), 7, "64M");
    ok(
        &[
            "volume", "create", "tank", "u", "--plex", "concat", "--plex", "mirror:2", "--size",
            "24M", "--drives", "d0,d1,d2", &dev,
        ],
        "volume create u",
    );
    create_volumes(&dev, &[("one", "concat", "8M", "d6")]);
    let size = 24 * MIB;
    let mut s = serve_pool_first(dir.path(), &dev, "u", &["--rebuild-rate", "4M"]);
    fio_all(&t, &s, &[("u", size)], false);
    let before = volume_sha256(&t, &uri(&s, "u"), "u before");
    let ctl = s.control();

    // A drive too small to hold a copy of the volume.
    let small = format!("d7={dev}/d7");
    ok(
        &[
            "pool",
            "add-drive",
            "tank",
            "--drive",
            &small,
            "--drive-size",
            "16M",
            "--control",
            &ctl,
        ],
        "add d7",
    );
    let generation_before = generation(&dev);
    refused(
        &strs(&convert(
            &ctl,
            "u",
            "0",
            "mirror",
            &["--subdisks", "2", "--drives", "d6,d7"],
        )),
        "needs 2 drives with",
    );
    refused(
        &strs(&convert(&ctl, "one", "1", "raid5", &[])),
        "has one plex, one.p0",
    );
    refused(
        &strs(&convert(&ctl, "u", "0", "raid5", &["--drives", "d1,d3,d4"])),
        "drive d1 holds a plex of volume u",
    );
    refused(&strs(&convert(&ctl, "u", "5", "raid5", &[])), "no plex 5");
    assert_eq!(generation(&dev), generation_before, "nothing written");

    let out = ok(
        &strs(&convert(
            &ctl,
            "u",
            "u.p0",
            "raid5",
            &[
                "--subdisks",
                "3",
                "--interleave",
                "126s",
                "--drives",
                "d3,d4,d5",
            ],
        )),
        "convert u.p0",
    );
    assert!(
        out.stdout.contains("raid5 plex on d3, d4, d5"),
        "{}",
        out.stdout
    );
    let generation_before = generation(&dev);
    refused(
        &strs(&convert(&ctl, "u", "1", "stripe", &[])),
        "being converted already",
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
        "being converted",
    );
    assert_eq!(generation(&dev), generation_before, "nothing written");
    let v = volume_of(&list_json(&dev), "u");
    assert_eq!(v["plexes"][2]["state"], "converting: replaces u.p0", "{v}");
    wait_rebuilding(&s, "u");
    assert_eq!(volume_sha256(&t, &uri(&s, "u"), "u mid-revive"), before);
    s.crash();
    s.start_again_unchecked();
    wait_converted(&dev, "u", 0, "raid5");
    let v = volume_of(&list_json(&dev), "u");
    assert_eq!(v["plexes"][0]["interleave_bytes"], 126 * 512, "{v}");
    let pool = list_json(&dev);
    let d0 = pool["drives"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "d0")
        .unwrap()
        .clone();
    assert_eq!(d0["free_bytes"].as_u64(), Some(63 * MIB), "d0 freed: {d0}");
    assert_eq!(volume_sha256(&t, &uri(&s, "u"), "u after"), before);
    fio_all(&t, &s, &[("u", size)], true);
    check_clean(&s, &["u", "u.p0"]);

    // Its mirror plex becomes a stripe while fio writes and verifies.
    let mut load = Background::spawn(&mut fio(&t, &uri(&s, "u"), size, false), "fio on u");
    ok(
        &strs(&convert(&ctl, "u", "1", "stripe", &["--subdisks", "2"])),
        "convert u.p1",
    );
    wait_converted(&dev, "u", 1, "stripe");
    assert!(load.wait(CMD_TIMEOUT).success(), "{}", load.stderr());
    assert!(load.stdout().contains("err= 0"), "{}", load.stdout());
    fio_all(&t, &s, &[("u", size)], true);
    check_clean(&s, &["u", "u.p0"]);
    let written = volume_sha256(&t, &uri(&s, "u"), "u written");

    // Offline: recorded, and done by the next start while it serves.
    s.stop_expecting_errors("TERM", &[]);
    let out = ok(
        &[
            "volume",
            "convert",
            "tank",
            "u",
            "--plex",
            "1",
            "--level",
            "mirror",
            "--subdisks",
            "2",
            &dev,
        ],
        "offline convert",
    );
    assert!(
        out.stdout.contains("the next `serve --pool` revives it"),
        "{}",
        out.stdout
    );
    let v = volume_of(&list_json(&dev), "u");
    assert_eq!(v["plexes"][2]["state"], "converting: replaces u.p1", "{v}");
    s.start_again_unchecked();
    wait_converted(&dev, "u", 1, "mirror");
    wait_rebuilt(&s, "u");
    assert_eq!(volume_sha256(&t, &uri(&s, "u"), "u after"), written);
    check_clean(&s, &["u", "u.p0", "u.p1"]);
    s.stop_expecting_errors("TERM", &[]);
}

/// The server killed with SIGKILL at seeded moments of a convert (while
/// the command runs, or while the new plex is revived): after each kill
/// the next start finishes the convert or it never began, the volume
/// holds the bytes fio wrote, and its copies check clean. Plex 1 turns
/// from a mirror to a stripe and back, each time onto the drives the
/// last one freed. `PLATTER_CONVERT_KILLS=N` runs N kills (CI runs 3).
#[test]
fn a_volume_killed_at_seeded_moments_of_converts_keeps_its_bytes() {
    let test = "a_volume_killed_at_seeded_moments_of_converts_keeps_its_bytes";
    let Some(t) = tools_with_fio_nbd(test, &["fio"]) else {
        return;
    };
    let kills = env_count("PLATTER_CONVERT_KILLS", 3);
    let dir = temp_dir();
    let (_d, dev) = pool_of(dir.path(), 7, "64M");
    ok(
        &[
            "volume",
            "create",
            "tank",
            "u",
            "--plex",
            "raid5:3",
            "--plex",
            "mirror:2",
            "--size",
            "24M",
            "--drives",
            "d0,d1,d2,d3,d4",
            &dev,
        ],
        "volume create u",
    );
    let size = 24 * MIB;
    let mut s = serve_pool_first(dir.path(), &dev, "u", &["--rebuild-rate", "8M"]);
    fio_all(&t, &s, &[("u", size)], false);
    let mut seed: u64 = 0x44c0_ffee;
    let (mut began, mut never) = (0, 0);
    for k in 0..kills {
        let stripe_now = volume_of(&list_json(&dev), "u")["plexes"][1]["org"] == "stripe";
        let (level, count) = if stripe_now {
            ("mirror", "2")
        } else {
            ("stripe", "2")
        };
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        // Half while the command runs (its writes take milliseconds),
        // half while the new plex is revived.
        let delay_ms = (seed >> 33) % if k % 2 == 0 { 150 } else { 3000 };
        let args = convert(&s.control(), "u", "1", level, &["--subdisks", count]);
        let mut cmd = platter(&strs(&args));
        let mut running = Background::spawn(&mut cmd, "convert");
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        s.crash();
        let _ = running.wait(CMD_TIMEOUT);
        s.start_again_unchecked();
        let v = volume_of(&list_json(&dev), "u");
        if v["plexes"].as_array().unwrap().len() == 3 {
            began += 1;
            wait_converted(&dev, "u", 1, level);
        } else if v["plexes"][1]["org"] == level {
            began += 1;
        } else {
            never += 1;
        }
        wait_rebuilt(&s, "u");
        fio_all(&t, &s, &[("u", size)], true);
        check_clean(&s, &["u", "u.p0"]);
        eprintln!("kill {k} after {delay_ms} ms: the convert began {began}, never {never}");
    }
    fio_all(&t, &s, &[("u", size)], false);
    s.stop_expecting_errors("TERM", &[]);
}

/// A convert given up (`volume convert --abort`), the way out of one
/// whose new plex cannot be revived: until it, a convert once begun could
/// only end, and a new plex on a failing drive left the volume a copy
/// short with nothing to do but replace the drive. Through the server,
/// mid-revive while fio writes the volume: the new plex leaves the
/// mirror, its drives are freed, and the old plex serves again, revived
/// with what was written since it left (fio verifies, the copies check
/// clean). Offline, after a SIGKILL mid-revive: the configuration drops
/// the convert and the next start takes the old plex back. Refused with
/// one line, nothing written: an abort with no convert under way, one
/// with the options of a new plex, and one whose old plex's drive was cut
/// to nothing (the convert then goes on to its end, the bytes unchanged).
#[test]
fn a_convert_given_up_serves_the_old_plex_again_with_what_was_written() {
    let test = "a_convert_given_up_serves_the_old_plex_again_with_what_was_written";
    let Some(t) = tools_with_fio_nbd(test, &["fio", "nbdcopy", "sha256sum"]) else {
        return;
    };
    let dir = temp_dir();
    let (_d, dev) = pool_of(dir.path(), 6, "64M");
    ok(
        &[
            "volume", "create", "tank", "u", "--plex", "concat", "--plex", "mirror:2", "--size",
            "24M", "--drives", "d0,d1,d2", &dev,
        ],
        "volume create u",
    );
    let size = 24 * MIB;
    let mut s = serve_pool_first(dir.path(), &dev, "u", &["--rebuild-rate", "1M"]);
    fio_all(&t, &s, &[("u", size)], false);
    let ctl = s.control();
    let abort = |ctl: &str| {
        vec![
            "volume".to_string(),
            "convert".into(),
            "tank".into(),
            "u".into(),
            "--abort".into(),
            "--control".into(),
            ctl.to_string(),
        ]
    };
    let generation_before = generation(&dev);
    refused(&strs(&abort(&ctl)), "volume u has no convert under way");
    let args = [
        "volume",
        "convert",
        "tank",
        "u",
        "--abort",
        "--level",
        "raid5",
        "--control",
        &ctl,
    ];
    let out = run(&mut platter(&args), CMD_TIMEOUT);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        out.describe("abort --level")
    );
    assert!(
        out.stderr
            .contains("'--abort' cannot be used with '--level <LEVEL>'"),
        "{}",
        out.describe("abort --level")
    );
    assert_eq!(generation(&dev), generation_before, "nothing written");

    let to_raid5 = convert(&ctl, "u", "0", "raid5", &["--drives", "d3,d4,d5"]);
    ok(&strs(&to_raid5), "convert u.p0");
    wait_rebuilding(&s, "u");
    let mut load = Background::spawn(&mut fio(&t, &uri(&s, "u"), size, false), "fio on u");
    std::thread::sleep(std::time::Duration::from_secs(2));
    let out = ok(&strs(&abort(&ctl)), "abort mid-revive");
    eprintln!("{}", out.stdout.trim_end());
    assert!(
        out.stdout
            .contains("the convert is given up; plex u.p0 serves again"),
        "{}",
        out.stdout
    );
    assert!(load.wait(CMD_TIMEOUT).success(), "{}", load.stderr());
    assert!(load.stdout().contains("err= 0"), "{}", load.stdout());
    let v = volume_of(&list_json(&dev), "u");
    assert_eq!(v["plexes"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["plexes"][0]["org"], "concat", "{v}");
    assert_all_free(&dev, &["d3", "d4", "d5"]);
    wait_rebuilt(&s, "u");
    fio_all(&t, &s, &[("u", size)], true);
    check_clean(&s, &["u", "u.p0"]);
    let written = volume_sha256(&t, &uri(&s, "u"), "u written");

    // Killed mid-revive, given up offline, taken back by the next start.
    ok(&strs(&to_raid5), "convert u.p0 again");
    wait_rebuilding(&s, "u");
    s.crash();
    let out = ok(
        &["volume", "convert", "tank", "u", "--abort", &dev],
        "offline abort",
    );
    assert!(
        out.stdout
            .contains("the next `serve --pool` takes the plex back"),
        "{}",
        out.stdout
    );
    assert_all_free(&dev, &["d3", "d4", "d5"]);
    s.start_again_unchecked();
    wait_rebuilt(&s, "u");
    let v = volume_of(&list_json(&dev), "u");
    assert_eq!(v["plexes"][0]["org"], "concat", "{v}");
    assert_eq!(volume_sha256(&t, &uri(&s, "u"), "u after"), written);
    fio_all(&t, &s, &[("u", size)], true);
    check_clean(&s, &["u", "u.p0"]);

    // An old plex that cannot be assembled any more (its drive cut to
    // nothing) cannot be given back: the abort is refused before anything
    // changes, and the convert goes on to its end.
    let ctl = s.control();
    ok(
        &strs(&convert(&ctl, "u", "0", "raid5", &["--drives", "d3,d4,d5"])),
        "convert u.p0",
    );
    wait_rebuilding(&s, "u");
    truncate(&dev, "d0");
    let generation_before = generation(&dev);
    refused(&strs(&abort(&ctl)), "shrank from");
    assert_eq!(generation(&dev), generation_before, "nothing written");
    wait_converted(&dev, "u", 0, "raid5");
    wait_rebuilt(&s, "u");
    assert_eq!(volume_sha256(&t, &uri(&s, "u"), "u converted"), written);
    check_clean(&s, &["u", "u.p0"]);
    s.stop_expecting_errors("TERM", &[]);
}

/// Every drive named has all of its room free (a 64 MiB drive: 63 MiB
/// past the pool area).
fn assert_all_free(dev: &str, drives: &[&str]) {
    let pool = list_json(dev);
    for name in drives {
        let d = pool["drives"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == *name)
            .unwrap_or_else(|| panic!("no drive {name}: {pool}"))
            .clone();
        assert_eq!(
            d["free_bytes"].as_u64(),
            Some(63 * MIB),
            "{name} freed: {d}"
        );
    }
}

/// Waits (2 minutes at most) until volume `name` is of one plex again, of
/// organisation `org`, its convert's copy ended.
fn wait_copied(dev: &str, name: &str, org: &str) {
    let start = std::time::Instant::now();
    loop {
        let v = volume_of(&list_json(dev), name);
        let plexes = v["plexes"].as_array().unwrap();
        if plexes.len() == 1 && plexes[0]["org"] == org {
            return;
        }
        assert!(start.elapsed().as_secs() < 120, "{name} not converted: {v}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Waits (20 s at most) until volume `name`'s convert by copy has copied
/// some bytes, and returns its status.
fn wait_copying(s: &Server, name: &str) -> Value {
    let start = std::time::Instant::now();
    loop {
        let st = live(s, name);
        if st["convert"]["copied_bytes"].as_u64().unwrap_or(0) > 0 {
            return st;
        }
        assert!(
            start.elapsed().as_secs() < 20,
            "{name}: no copy began: {st}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A volume of one plex (a plain concat, with no mirror above it) becomes
/// a raid5 of three subdisks while fio writes and verifies it: the copy
/// runs behind the volume's writes and the raid5's array then serves the
/// export alone; the concat's drive is free after. Recorded offline as a
/// stripe, the server SIGKILLed in the middle of the copy past a
/// checkpoint, the next start goes on from the checkpoint and ends it,
/// the volume's sha256 unchanged. A convert
/// given up through the server mid-copy leaves the volume on its plex,
/// the new plex's drives free. Refused meanwhile, nothing written: a
/// second convert, an extend, a remove.
#[test]
fn a_volume_of_one_plex_becomes_raid5_while_fio_writes() {
    let test = "a_volume_of_one_plex_becomes_raid5_while_fio_writes";
    let Some(t) = tools_with_fio_nbd(test, &["fio", "nbdcopy", "sha256sum"]) else {
        return;
    };
    let dir = temp_dir();
    let (_d, dev) = pool_of(dir.path(), 6, "64M");
    create_volumes(&dev, &[("c", "concat", "16M", "d0")]);
    let size = 16 * MIB;
    let mut s = serve_pool_first(dir.path(), &dev, "c", &["--rebuild-rate", "2M"]);
    fio_all(&t, &s, &[("c", size)], false);
    let ctl = s.control();

    let mut load = Background::spawn(&mut fio(&t, &uri(&s, "c"), size, false), "fio on c");
    let args = [
        "volume",
        "convert",
        "tank",
        "c",
        "--level",
        "raid5",
        "--subdisks",
        "3",
        "--interleave",
        "126s",
        "--drives",
        "d1,d2,d3",
        "--control",
        &ctl,
    ];
    let out = ok(&args, "convert c");
    assert!(
        out.stdout.contains("raid5 plex on d1, d2, d3"),
        "{}",
        out.stdout
    );
    let generation_before = generation(&dev);
    refused(&args, "being converted already");
    refused(
        &[
            "volume",
            "extend",
            "tank",
            "c",
            "--size",
            "20M",
            "--control",
            &ctl,
        ],
        "being converted",
    );
    refused(
        &["volume", "remove", "tank", "c", "--control", &ctl],
        "being converted",
    );
    assert_eq!(generation(&dev), generation_before, "nothing written");
    let v = volume_of(&list_json(&dev), "c");
    assert_eq!(v["plexes"][1]["state"], "converting: replaces c.p0", "{v}");
    wait_copied(&dev, "c", "raid5");
    assert!(load.wait(CMD_TIMEOUT).success(), "{}", load.stderr());
    assert!(load.stdout().contains("err= 0"), "{}", load.stdout());
    fio_all(&t, &s, &[("c", size)], true);
    check_clean(&s, &["c"]);
    assert_eq!(subdisk_drives(&dev, "c"), ["d1", "d2", "d3"]);
    assert!(
        all_subdisks(&list_json(&dev))
            .iter()
            .all(|sd| sd["drive"] != "d0"),
        "d0 freed"
    );
    let written = volume_sha256(&t, &uri(&s, "c"), "c written");

    // Offline: recorded; the next start copies while it serves, and a
    // SIGKILL mid-copy leaves the volume on its plex to copy again.
    s.stop_expecting_errors("TERM", &[]);
    let out = ok(
        &[
            "volume",
            "convert",
            "tank",
            "c",
            "--level",
            "stripe",
            "--subdisks",
            "2",
            "--drives",
            "d4,d5",
            &dev,
        ],
        "offline convert",
    );
    assert!(
        out.stdout.contains("copies the volume onto it"),
        "{}",
        out.stdout
    );
    s.start_again_unchecked();
    wait_copying(&s, "c");
    let start = std::time::Instant::now();
    while !volume_of(&list_json(&dev), "c")["plexes"][1]["state"]
        .as_str()
        .unwrap_or("")
        .contains("copied")
    {
        assert!(start.elapsed().as_secs() < 20, "no checkpoint recorded");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(volume_sha256(&t, &uri(&s, "c"), "c mid-copy"), written);
    s.crash();
    s.start_again_unchecked();
    let st = wait_copying(&s, "c");
    assert!(
        st["convert"]["resumed_from_bytes"].as_u64().unwrap_or(0) > 0,
        "the copy goes on from its checkpoint: {st}"
    );
    wait_copied(&dev, "c", "stripe");
    assert_eq!(volume_sha256(&t, &uri(&s, "c"), "c after"), written);
    check_clean(&s, &["c"]);

    // Given up mid-copy: the stripe serves on, the new plex's drive free.
    let args = [
        "volume",
        "convert",
        "tank",
        "c",
        "--level",
        "concat",
        "--drives",
        "d0",
        "--control",
        &ctl,
    ];
    ok(&args, "convert c back");
    wait_copying(&s, "c");
    let out = ok(
        &[
            "volume",
            "convert",
            "tank",
            "c",
            "--abort",
            "--control",
            &ctl,
        ],
        "abort",
    );
    assert!(
        out.stdout.contains("the convert is given up"),
        "{}",
        out.stdout
    );
    let v = volume_of(&list_json(&dev), "c");
    assert_eq!(v["plexes"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["plexes"][0]["org"], "stripe", "{v}");
    assert!(
        all_subdisks(&list_json(&dev))
            .iter()
            .all(|sd| sd["drive"] != "d0"),
        "d0 freed again"
    );
    assert_eq!(volume_sha256(&t, &uri(&s, "c"), "c given up"), written);
    fio_all(&t, &s, &[("c", size)], true);
    check_clean(&s, &["c"]);
    s.stop_expecting_errors("TERM", &[]);
}

/// A convert by copy whose new plex loses a drive mid-copy (its file cut
/// to nothing, as a pulled disk): the copy stops, the volume serves on
/// from its plex with every byte, `status` says why, and `--abort` gives
/// the convert up, the volume of one plex as before and `check` clean.
#[test]
fn a_copy_whose_new_plex_fails_leaves_the_volume_on_its_plex() {
    let test = "a_copy_whose_new_plex_fails_leaves_the_volume_on_its_plex";
    let Some(t) = tools_with_fio_nbd(test, &["fio", "nbdcopy", "sha256sum"]) else {
        return;
    };
    let dir = temp_dir();
    let (_d, dev) = pool_of(dir.path(), 4, "64M");
    create_volumes(&dev, &[("c", "concat", "16M", "d0")]);
    let size = 16 * MIB;
    let mut s = serve_pool_first(dir.path(), &dev, "c", &["--rebuild-rate", "2M"]);
    fio_all(&t, &s, &[("c", size)], false);
    let before = volume_sha256(&t, &uri(&s, "c"), "c before");
    let ctl = s.control();
    ok(
        &[
            "volume",
            "convert",
            "tank",
            "c",
            "--level",
            "stripe",
            "--subdisks",
            "2",
            "--drives",
            "d1,d2",
            "--control",
            &ctl,
        ],
        "convert c",
    );
    wait_copying(&s, "c");
    truncate(&dev, "d2");
    let start = std::time::Instant::now();
    let failed = loop {
        let st = live(&s, "c");
        if let Some(why) = st["convert"]["failed"].as_str() {
            break why.to_string();
        }
        assert!(
            start.elapsed().as_secs() < 30,
            "the copy did not stop: {st}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(failed.contains("new plex"), "{failed}");
    assert_eq!(volume_sha256(&t, &uri(&s, "c"), "c after the loss"), before);
    fio_all(&t, &s, &[("c", size)], true);
    let out = ok(
        &[
            "volume",
            "convert",
            "tank",
            "c",
            "--abort",
            "--control",
            &ctl,
        ],
        "abort",
    );
    assert!(
        out.stdout.contains("the convert is given up"),
        "{}",
        out.stdout
    );
    let v = volume_of(&list_json(&dev), "c");
    assert_eq!(v["plexes"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["plexes"][0]["org"], "concat", "{v}");
    assert_eq!(v["size_bytes"], size, "{v}");
    fio_all(&t, &s, &[("c", size)], false);
    check_clean(&s, &["c"]);
    s.stop_expecting_errors("TERM", &["could not be zeroed", "failed"]);
}

/// The server killed with SIGKILL at seeded moments of converts of a
/// volume of one plex (while the command runs, while the copy runs, and
/// about when it ends), with fio writing the volume: after each kill the
/// next start ends the convert or it never began, or it begins the copy
/// again; the volume holds the bytes fio wrote, at its size, and checks
/// clean. The volume turns from a concat to a stripe and back, each time
/// onto the drives the last one freed. `PLATTER_COPY_KILLS=N` runs N
/// kills (CI runs 3).
#[test]
fn a_volume_of_one_plex_killed_at_seeded_moments_of_copies_keeps_its_bytes() {
    let test = "a_volume_of_one_plex_killed_at_seeded_moments_of_copies_keeps_its_bytes";
    let Some(t) = tools_with_fio_nbd(test, &["fio"]) else {
        return;
    };
    let kills = env_count("PLATTER_COPY_KILLS", 3);
    let dir = temp_dir();
    let (_d, dev) = pool_of(dir.path(), 4, "64M");
    create_volumes(&dev, &[("c", "concat", "8M", "d0")]);
    let size = 8 * MIB;
    let mut s = serve_pool_first(dir.path(), &dev, "c", &["--rebuild-rate", "8M"]);
    fio_all(&t, &s, &[("c", size)], false);
    let mut seed: u64 = 0x0c09_7c0d;
    let (mut ended, mut copying, mut never) = (0, 0, 0);
    for k in 0..kills {
        let was = volume_of(&list_json(&dev), "c")["plexes"][0]["org"].clone();
        let (level, count, drives) = if was == "stripe" {
            ("concat", "1", "d0")
        } else {
            ("stripe", "2", "d1,d2")
        };
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        // A third while the command runs, the rest over the copy's second
        // and its end.
        let delay_ms = (seed >> 33) % if k % 3 == 0 { 150 } else { 1500 };
        let args = [
            "volume",
            "convert",
            "tank",
            "c",
            "--level",
            level,
            "--subdisks",
            count,
            "--drives",
            drives,
            "--control",
            &s.control(),
        ];
        let mut load = Background::spawn(&mut fio(&t, &uri(&s, "c"), size, false), "fio on c");
        let mut running = Background::spawn(&mut platter(&args), "convert");
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        s.crash();
        let _ = running.wait(CMD_TIMEOUT);
        let _ = load.wait(CMD_TIMEOUT);
        s.start_again_unchecked();
        let v = volume_of(&list_json(&dev), "c");
        match v["plexes"].as_array().unwrap().len() {
            2 => {
                copying += 1;
                wait_copied(&dev, "c", level);
            }
            _ if v["plexes"][0]["org"] == level => ended += 1,
            _ => never += 1,
        }
        assert_eq!(volume_of(&list_json(&dev), "c")["size_bytes"], size);
        // fio's writes cut by the kill were never acknowledged as flushed:
        // the volume is written whole again, then verified.
        fio_all(&t, &s, &[("c", size)], false);
        fio_all(&t, &s, &[("c", size)], true);
        check_clean(&s, &["c"]);
        eprintln!(
            "kill {k} after {delay_ms} ms: ended {ended}, copied again {copying}, never {never}"
        );
    }
    s.stop_expecting_errors("TERM", &[]);
}
