//! Issue 14, point 5: a volume of several TiB, end to end. Four sparse
//! member files of about 2.4 TiB each (past 2^32 sectors) make a RAID-5 of
//! 7 TiB with `platter create`'s bitmap of 4 MiB regions: about 55 bitmap
//! pages, where every other end-to-end test has one. A real client
//! (qemu-io over NBD) writes and reads a few MiB at offsets past 2^40,
//! around bitmap page boundaries and at the volume's end; the server is
//! killed with SIGKILL and started again; the resync must cover exactly the
//! regions written (all of them, on pages far from page 0), the data must
//! read back, and `platter check` must find those stripes consistent.
//!
//! The member files hold only what was written: the test never writes
//! TiBs. A full `platter check` would read 9 TiB of holes, so the check
//! covers the written ranges (`--offset`, `--length`).
//!
//! The file system must take sparse files of that size (ext4 takes up to
//! 16 TiB); where it does not, the test says why and is skipped, except
//! under `CI=true`, where it fails.

mod e2e_support;

use e2e_support::*;
use serde_json::Value;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const TIB: u64 = 1 << 40;
/// The server's bitmap sweep interval (crates/server/src/engine/upkeep.rs): a
/// region's bit outlives its last write by at least this long.
const SWEEP_INTERVAL: Duration = Duration::from_secs(5);
const REGIONS_PER_PAGE: u64 = 4096 * 8;

/// Whether `dir`'s file system takes a sparse file of `bytes`: why not,
/// if it does not.
fn sparse_files_of(dir: &Path, bytes: u64) -> Result<(), String> {
    let probe = dir.join("probe");
    let f = fs::File::create(&probe).map_err(|e| format!("cannot create {probe:?}: {e}"))?;
    let r = f
        .set_len(bytes)
        .map_err(|e| format!("{:?} cannot hold a sparse file of {bytes} bytes: {e}", dir));
    drop(f);
    let _ = fs::remove_file(&probe);
    r
}

fn check_range(s: &Server, offset: u64, len: u64) -> Value {
    let out = run_ok(
        Command::new(env!("CARGO_BIN_EXE_platter")).args([
            "check",
            "--json",
            "--control",
            &s.control(),
            "--offset",
            &offset.to_string(),
            "--length",
            &len.to_string(),
        ]),
        CMD_TIMEOUT,
        "check of a range",
    );
    serde_json::from_str(&out.stdout).expect("JSON")
}

#[test]
fn a_7_tib_raid5_on_sparse_files_resyncs_its_bitmap_regions_after_kill_9() {
    let test = "a_7_tib_raid5_on_sparse_files";
    let Some(t) = required_tools(test, &["qemu-io"]) else {
        return;
    };
    let spec = Spec::new("raid5", 4, "64k");
    let dir = temp_dir();
    if let Err(why) = sparse_files_of(dir.path(), spec.member_size_for(7 * TIB)) {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: {why} (CI must run this test)"
        );
        platter_testkit::skips::skipped(test, why);
        return;
    }
    let mut s = Server::start(Volume::create_in(spec, 7 * TIB, dir));
    let size = s.volume.size_bytes;
    assert!(s.volume.member_size_bytes > (1 << 32) * 512);
    let bitmap = &s.live("status")["bitmap"];
    let region = bitmap["region_bytes"].as_u64().expect("a bitmap");
    let regions = bitmap["regions"].as_u64().unwrap();
    assert!(
        regions > 50 * REGIONS_PER_PAGE,
        "{test}: {regions} regions, a bitmap of {} pages",
        regions.div_ceil(REGIONS_PER_PAGE)
    );
    // (offset, length, pattern): past 2^40; across the boundary of bitmap
    // pages 10 and 11 (the last region of one page, the first of the next:
    // one bitmap write of two pages); on the last page, at the volume's end.
    let page_edge = 11 * REGIONS_PER_PAGE * region;
    let writes = [
        (TIB + 123 * MIB + 4096, 2 * MIB, 0x41u8),
        (page_edge - 512 * KIB, MIB, 0x42),
        ((size - 3 * MIB) / 4096 * 4096, 3 * MIB, 0x43),
    ];
    let touched: std::collections::BTreeSet<u64> = writes
        .iter()
        .flat_map(|&(o, l, _)| o / region..=(o + l - 1) / region)
        .collect();
    let mut cmd = t.cmd("qemu-io");
    cmd.args(["-f", "raw"]);
    for &(o, l, p) in &writes {
        cmd.args(["-c", &format!("write -P {p} {o} {l}")]);
    }
    cmd.args(["-c", "flush", s.uri()]);
    let written_at = Instant::now();
    run_ok(&mut cmd, CMD_TIMEOUT, "qemu-io writes past 2^40");
    // Killed before a sweep could clear a bit: every region written is
    // still marked on the members.
    let quick = written_at.elapsed() < SWEEP_INTERVAL;
    s.crash();
    s.start_again();
    let start = Instant::now();
    while !s.live("status")["resync"].is_null() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{test}: the resync did not end"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let resynced = s.live("status")["bitmap"]["resync_regions_at_start"]
        .as_u64()
        .unwrap();
    eprintln!(
        "{test}: {size} bytes, {regions} regions of {region} bytes; resynced {resynced} \
         regions, {} written",
        touched.len()
    );
    // A bitmap page written at the wrong offset, or not at all, loses the
    // marks of the regions past page 0: the resync would miss them.
    assert!(
        resynced <= touched.len() as u64,
        "{test}: resynced {resynced} regions, {} written",
        touched.len()
    );
    if quick {
        assert_eq!(
            resynced,
            touched.len() as u64,
            "{test}: regions {touched:?}"
        );
    } else {
        eprintln!("{test}: the writes took longer than a sweep interval; not all marks need stand");
    }
    // The flushed data reads back, through a new client.
    let mut cmd = t.cmd("qemu-io");
    cmd.args(["-f", "raw"]);
    for &(o, l, p) in &writes {
        cmd.args(["-c", &format!("read -P {p} {o} {l}")]);
        // And the bytes around it are still zeros.
        cmd.args(["-c", &format!("read -P 0 {} 4096", o - 4096)]);
    }
    cmd.arg(s.uri());
    let out = run_ok(&mut cmd, CMD_TIMEOUT, "qemu-io reads past 2^40");
    assert!(
        !out.stdout.contains("Pattern verification failed"),
        "{test}: {}",
        out.stdout
    );
    // Parity agrees where the writes went (a region on each side).
    for &(o, l, _) in &writes {
        let from = (o / region).saturating_sub(1) * region;
        let to = ((o + l).div_ceil(region) + 1).min(regions) * region;
        let report = check_range(&s, from, to.min(size) - from);
        assert_eq!(report["mismatched_stripes"], 0, "{test}: {report}");
        assert_eq!(report["unchecked_stripes"], 0, "{test}: {report}");
        assert!(report["stripes"].as_u64().unwrap() > 0, "{test}: {report}");
    }
    s.stop();
    // The member files hold what was written, not TiBs.
    let allocated = s.volume.allocated_bytes();
    assert!(
        allocated < 512 * MIB,
        "{test}: the members allocated {allocated} bytes"
    );
}
