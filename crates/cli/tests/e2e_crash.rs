//! Issue 4, 6c: kill -9 of the server under write load at random moments.
//! After the restart, everything written and flushed before the kill reads
//! back intact, the resync covers only the regions the write-intent bitmap
//! marked (those that were being written), makes parity and copies agree
//! again there, and `check` then reports no mismatch anywhere.

mod e2e_support;

use e2e_support::*;
use serde_json::Value;
use std::time::{Duration, Instant};

fn live(s: &Server, cmd: &str) -> Value {
    let out = run_ok(
        &mut platter(&[cmd, "--json", "--control", &s.control()]),
        CMD_TIMEOUT,
        cmd,
    );
    serde_json::from_str(&out.stdout).expect("JSON")
}

fn crash_under_load(spec: Spec, kills: u64, seed: u64) {
    let test = format!("crash_under_load {}", spec.label());
    let Some(t) = tools(&test, &["fio", "qemu-io"]) else {
        return;
    };
    if !fio_has_nbd(&t) {
        platter_testkit::skips::skipped(test, "fio has no nbd engine");
        return;
    }
    let mut rng = Rng::new(seed);
    let mut s = Server::start(Volume::create(spec, 64 * MIB));
    let quarter = s.volume.size_bytes / 4 / 4096 * 4096;
    // The write load stays in an 8 MiB window near the end, so that most
    // regions are never written and must not be resynced.
    let window = (s.volume.size_bytes - 12 * MIB) / 4096 * 4096
        ..(s.volume.size_bytes - 4 * MIB) / 4096 * 4096;
    let mut resynced_total = 0;
    for kill in 0..kills {
        let what = format!("{test}: kill {kill}");
        let pattern = 0x10 + kill;
        // Written and flushed: must survive the kill.
        run_ok(
            t.cmd("qemu-io").args([
                "-f",
                "raw",
                "-c",
                &format!("write -P {pattern} 0 {quarter}"),
                "-c",
                "flush",
                s.uri(),
            ]),
            CMD_TIMEOUT,
            &what,
        );
        let mut load = Background::spawn(
            t.cmd("fio")
                .args([
                    "--name=crash",
                    "--thread",
                    "--ioengine=nbd",
                    "--rw=randwrite",
                    "--bsrange=4k-256k",
                    "--iodepth=16",
                    "--time_based",
                    "--runtime=30",
                ])
                .arg(format!("--uri={}", s.uri()))
                .arg(format!("--offset={}", window.start))
                .arg(format!("--size={}", window.end - window.start)),
            "fio write load",
        );
        std::thread::sleep(Duration::from_millis(50 + rng.below(400)));
        s.crash();
        load.kill();
        s.start_again();
        // Flushed data is there at once (degraded reads are not needed).
        run_ok(
            t.cmd("qemu-io").args([
                "-f",
                "raw",
                "-c",
                &format!("read -P {pattern} 0 {quarter}"),
                s.uri(),
            ]),
            CMD_TIMEOUT,
            &what,
        );
        let start = Instant::now();
        while !live(&s, "status")["resync"].is_null() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{what}: resync did not end"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let bitmap = &live(&s, "status")["bitmap"];
        let region_bytes = bitmap["region_bytes"].as_u64().expect("a bitmap");
        let regions = bitmap["regions"].as_u64().unwrap();
        let resynced = bitmap["resync_regions_at_start"].as_u64().unwrap();
        // Regions touched by the flushed write and by the load window.
        let touched = (quarter - 1) / region_bytes + 1 + (window.end - 1) / region_bytes
            - window.start / region_bytes
            + 1;
        assert!(
            resynced <= touched && touched < regions,
            "{what}: resynced {resynced} regions; only {touched} of {regions} were written"
        );
        eprintln!("{what}: resynced {resynced} of {regions} regions ({touched} written)");
        resynced_total += resynced;
        let report = live(&s, "check");
        assert_eq!(report["mismatched_stripes"], 0, "{what}: {report}");
    }
    // The kills landed while writes were in flight: the bitmap had marks.
    assert!(resynced_total > 0, "{test}: no kill found a marked region");
    s.stop();
}

#[test]
fn raid5_survives_kill_9_under_load() {
    crash_under_load(Spec::new("raid5", 4, "64k"), 6, 1);
}

#[test]
fn raid6_survives_kill_9_under_load() {
    crash_under_load(Spec::new("raid6", 5, "126s"), 6, 2);
}

#[test]
fn mirror_survives_kill_9_under_load() {
    crash_under_load(Spec::new("mirror", 2, "64k"), 4, 3);
}

#[test]
fn raid10_survives_kill_9_under_load() {
    crash_under_load(Spec::new("raid10", 4, "64k"), 4, 4);
}
