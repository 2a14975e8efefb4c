//! Remote members (issue 16): volumes whose members are NBD exports served
//! by nbdkit (its file plugin over files in the test's directory), built
//! with `platter create` over nbd+unix:// URIs, served, and written and
//! read by qemu-io.
//!
//! Needs nbdkit and qemu-io; skips with the reason elsewhere, fails under
//! `CI=true`.

mod e2e_support;

use e2e_support::*;
use platter_testkit::nbdkit::Nbdkit;

/// `n` member files of `size` bytes in `dir`, each exported by its own
/// nbdkit through `filters` (with their parameters in `params`); the
/// servers and their URIs.
fn exported_members(
    test: &str,
    dir: &std::path::Path,
    n: usize,
    size: u64,
    filters: &[&str],
    params: &[&str],
) -> Option<(Vec<Nbdkit>, Vec<String>)> {
    let mut kits = Vec::new();
    for (i, path) in member_paths(dir, n).iter().enumerate() {
        std::fs::File::create(path)
            .and_then(|f| f.set_len(size))
            .expect("a member file");
        let k = Nbdkit::start(
            test,
            &dir.join(format!("m{i}.sock")),
            filters,
            &[&["file", &format!("file={path}")], params].concat(),
        )?;
        kits.push(k);
    }
    let uris = kits.iter().map(Nbdkit::uri).collect();
    Some((kits, uris))
}

/// Polls `done` every 50 ms for up to a minute.
fn wait_until(test: &str, mut done: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done() {
        assert!(
            std::time::Instant::now() < until,
            "{test}: not done in a minute"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn qemu_io_cmds(cmds: &[&str]) -> Vec<String> {
    cmds.iter().map(|c| c.to_string()).collect()
}

/// A mirror over two hosts' exports: written and read through the volume;
/// one host killed without a goodbye (SIGKILL) leaves the mirror serving
/// from the other copy, with the member out of use.
#[test]
fn a_mirror_over_two_exports_serves_on_when_one_host_dies() {
    let test = "a_mirror_over_two_exports_serves_on_when_one_host_dies";
    let Some(t) = required_tools(test, &["qemu-io"]) else {
        return;
    };
    let dir = temp_dir();
    let Some((mut kits, uris)) = exported_members(test, dir.path(), 2, 32 * MIB, &[], &[]) else {
        return;
    };
    let volume = Volume::create_on(
        Spec::new("mirror", 2, "64k"),
        uris.clone(),
        32 * MIB,
        dir,
        &[],
    );
    assert_eq!(volume.status()["members"][1]["path"], uris[1]);
    let mut s = Server::start(volume);
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&[
            "write -P 0x5a 0 8M",
            "write -P 0x11 1000 3333",
            "read -P 0x5a 0 1000",
            "read -P 0x11 1000 3333",
            "read -P 0x5a 4333 1M",
        ]),
        "write through two remote members",
    );
    kits[1].kill();
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&[
            "write -P 0x77 0 1M",
            "flush",
            "read -P 0x77 0 1M",
            "read -P 0x5a 1M 7M",
        ]),
        "serve on with one host gone",
    );
    let live = live_status(&s);
    let state = live["members"][1]["state"].as_str().unwrap_or_default();
    assert!(
        state.starts_with("faulty"),
        "{test}: slot 1 is {state:?}: {live}"
    );
    s.stop_expecting_errors("TERM", &["nbd+unix"]);
}

/// RAID-5 over exports that take only whole 4 KiB blocks, at most 64 KiB
/// at once (nbdkit's blocksize-policy, erroring on anything else): the
/// volume's partial-block writes are merged and long ones split, so
/// qemu-io's odd offsets read back right, also after a restart.
#[test]
fn raid5_over_exports_with_4k_blocks_reads_back_unaligned_writes() {
    let test = "raid5_over_exports_with_4k_blocks_reads_back_unaligned_writes";
    let Some(t) = required_tools(test, &["qemu-io"]) else {
        return;
    };
    let dir = temp_dir();
    let Some((_kits, uris)) = exported_members(
        test,
        dir.path(),
        3,
        16 * MIB,
        &["blocksize-policy"],
        &[
            "blocksize-minimum=4096",
            "blocksize-maximum=65536",
            "blocksize-error-policy=error",
        ],
    ) else {
        return;
    };
    let volume = Volume::create_on(Spec::new("raid5", 3, "64k"), uris, 16 * MIB, dir, &[]);
    let mut s = Server::start(volume);
    let cmds = [
        "write -P 0x21 0 5M",
        "write -P 0x42 513 70001",
        "write -P 0x63 1048575 3",
        "read -P 0x21 0 513",
        "read -P 0x42 513 70001",
        "read -P 0x21 70514 978061",
        "read -P 0x63 1048575 3",
        "read -P 0x21 1048578 1M",
    ];
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&cmds),
        "unaligned writes over 4k-block exports",
    );
    s.restart();
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&cmds[3..]),
        "read back after a restart",
    );
    s.stop();
}

/// The story of a remote member: its host dies under a mirror (the member
/// is failed, the volume serves on), writes land in one region meanwhile,
/// the host comes back with the member's bytes as they were, and `platter
/// re-add` brings it back rebuilding only that region: the member's bytes
/// written by the rebuild are a region's worth, not the whole member, and
/// afterwards the volume reads back right from the returned member alone.
/// A second re-add of a member in use, and a re-add of a device from
/// elsewhere, are refused with the reason.
#[test]
fn a_host_that_comes_back_is_re_added_and_gets_only_what_it_missed() {
    let test = "a_host_that_comes_back_is_re_added_and_gets_only_what_it_missed";
    let Some(t) = required_tools(test, &["qemu-io"]) else {
        return;
    };
    let dir = temp_dir();
    let Some((mut kits, uris)) = exported_members(test, dir.path(), 2, 40 * MIB, &[], &[]) else {
        return;
    };
    let volume = Volume::create_on(
        Spec::new("mirror", 2, "64k"),
        uris.clone(),
        40 * MIB,
        dir,
        &["--bitmap-region", "1M"],
    );
    // The operator brings it back here; the next test lets the server.
    let mut s = Server::start_with(
        volume,
        ServeOptions {
            extra_args: vec!["--no-reconnect".into()],
            ..ServeOptions::default()
        },
    );
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&["write -P 0x5a 0 32M", "flush"]),
        "fill",
    );
    // The bitmap's sweeps clear the quiet regions (every 5 s): a member
    // leaving now misses only what is written after.
    wait_until(test, || live_status(&s)["bitmap"]["dirty_regions"] == 0);
    kits[1].kill();
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&["write -P 0x77 4M 1M", "flush"]),
        "write while the host is away",
    );
    let live = live_status(&s);
    assert!(
        live["members"][1]["state"]
            .as_str()
            .unwrap_or_default()
            .starts_with("faulty"),
        "{live}"
    );
    let missed = live["bitmap"]["missed_regions"].as_u64().unwrap_or(0);
    assert!((1..=2).contains(&missed), "{test}: missed regions {live}");

    kits[1].restart();
    let before = s.live("stats")["members"][1]["bytes_written"]
        .as_u64()
        .unwrap_or(0);
    let out = run_ok(
        &mut platter(&["re-add", "--json", "--control", &s.control(), &uris[1]]),
        CMD_TIMEOUT,
        "re-add",
    );
    let answer: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(answer["re_added"], 1, "{answer}");
    assert_eq!(answer["missed_regions"], missed, "{answer}");
    wait_until(test, || live_status(&s)["members"][1]["state"] == "active");
    let written = s.live("stats")["members"][1]["bytes_written"]
        .as_u64()
        .unwrap_or(0)
        - before;
    assert!(
        (MIB..=missed * MIB + 256 * 1024).contains(&written),
        "{test}: the re-add wrote {written} bytes to the member; it missed {missed} MiB"
    );
    assert_eq!(live_status(&s)["bitmap"]["missed_regions"], 0);

    // Refusals: the member is in use now; a blank file is no member.
    let refused = run(
        &mut platter(&["re-add", "--control", &s.control(), &uris[1]]),
        CMD_TIMEOUT,
    );
    assert!(
        !refused.status.success() && refused.stderr.contains("in use"),
        "{}",
        refused.stderr
    );

    // The returned member alone holds the volume.
    run_ok(
        &mut platter(&["fail", "--force", "--control", &s.control(), "0"]),
        CMD_TIMEOUT,
        "fail member 0",
    );
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&[
            "read -P 0x5a 0 4M",
            "read -P 0x77 4M 1M",
            "read -P 0x5a 5M 27M",
        ]),
        "read from the returned member alone",
    );
    s.stop_expecting_errors("TERM", &["nbd+unix", "member"]);
}

/// The same host death and return without the operator: the server tries
/// the member's URI again with backoff and, once nbdkit answers, brings it
/// back rebuilding only the region written meanwhile.
#[test]
fn a_host_that_comes_back_is_reconnected_on_its_own() {
    let test = "a_host_that_comes_back_is_reconnected_on_its_own";
    let Some(t) = required_tools(test, &["qemu-io"]) else {
        return;
    };
    let dir = temp_dir();
    let Some((mut kits, uris)) = exported_members(test, dir.path(), 2, 40 * MIB, &[], &[]) else {
        return;
    };
    let volume = Volume::create_on(
        Spec::new("mirror", 2, "64k"),
        uris,
        40 * MIB,
        dir,
        &["--bitmap-region", "1M"],
    );
    let mut s = Server::start(volume);
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&["write -P 0x5a 0 32M", "flush"]),
        "fill",
    );
    wait_until(test, || live_status(&s)["bitmap"]["dirty_regions"] == 0);
    kits[1].kill();
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&["write -P 0x77 4M 1M", "flush"]),
        "write while the host is away",
    );
    let before = s.live("stats")["members"][1]["bytes_written"]
        .as_u64()
        .unwrap_or(0);
    // Away for a few of the server's tries.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(live_status(&s)["members"][1]["state"]
        .as_str()
        .unwrap_or_default()
        .starts_with("faulty"));
    kits[1].restart();
    wait_until(test, || live_status(&s)["members"][1]["state"] == "active");
    let written = s.live("stats")["members"][1]["bytes_written"]
        .as_u64()
        .unwrap_or(0)
        - before;
    assert!(
        written <= 2 * MIB + 256 * 1024,
        "{test}: the reconnect wrote {written} bytes to the member"
    );
    assert!(
        s.log().contains("reconnected; rebuilding what it missed"),
        "{}",
        s.log()
    );
    run_ok(
        &mut platter(&["fail", "--force", "--control", &s.control(), "0"]),
        CMD_TIMEOUT,
        "fail member 0",
    );
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&[
            "read -P 0x5a 0 4M",
            "read -P 0x77 4M 1M",
            "read -P 0x5a 5M 27M",
        ]),
        "read from the returned member alone",
    );
    s.stop_expecting_errors("TERM", &["nbd+unix", "member"]);
}
