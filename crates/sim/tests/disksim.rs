//! DiskSim import and validation against DiskSim's measured traces.
//!
//! The data ship in the repository's `data/disksim`.

mod common;

use platter_sim::disk::drive::{Command, Drive, DriveSpec, Hit};
use platter_sim::disk::layout::Sparing;
use platter_sim::disk::seek::SeekCurve;
use platter_sim::disksim::load_drive;
use platter_sim::disksim::trace::{read_trace, validate};
use std::path::PathBuf;

fn data_dir() -> PathBuf {
    common::disksim_data()
}

/// The three drives: parameter file, trace, DiskSim's own demerit (ms,
/// as DiskSim 4.0 and its `rms` print it for the same trace).
const DRIVES: &[(&str, &str, f64)] = &[
    ("cheetah9LP.parv", "cheetah9LP.trace", 0.107098),
    ("hp_c2247a.parv", "hp_c2247a.trace", 0.089932),
    ("barracuda.parv", "barracuda.trace", 0.347863),
];

/// How far above DiskSim's own demerit each drive may be: issue 19 asks
/// at most DiskSim's on two thirds of the validation drives and at most
/// 1.3 times on every one. The HP's read high water mark is not modelled
/// (docs/simulator.md), so it has only the second.
fn demerit_bound(parv: &str) -> f64 {
    if parv.starts_with("hp_c2247a") {
        1.3
    } else {
        1.0
    }
}

fn drive(name: &str) -> DriveSpec {
    load_drive(&data_dir().join(name)).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn parses_the_three_drives() {
    let c = drive("cheetah9LP.parv");
    assert_eq!(c.rpm, 10045.0);
    assert_eq!(c.layout.surfaces, 12);
    assert_eq!(c.layout.zones.len(), 11);
    assert_eq!(c.layout.sparing, Sparing::PerZone);
    assert_eq!(c.layout.zones[0].blocks_per_track, 254);
    assert_eq!(c.layout.zones[0].slips.len(), 34);
    assert_eq!(c.layout.zones[0].track_skew, 97);
    assert_eq!(c.layout.zones[0].cyl_skew, 133);
    // DiskSim recomputes the capacity from the zones (layout_g1's
    // checknumblocks) and uses that, not the file's "Block count"; for
    // the Seagates the zones hold more than the count says.
    assert_eq!(c.layout.blocks, 17_918_387);
    match &c.seek {
        SeekCurve::Table { points } => {
            assert_eq!(points.len(), 106);
            assert_eq!(points[0], (1, 0.831));
        }
        other => panic!("cheetah seek {other:?}"),
    }
    assert_eq!(c.bus_read_ms, 0.105);
    assert_eq!(c.cache.segments, 3);
    assert_eq!(c.cache.segment_blocks, 561);
    assert_eq!(c.head_switch_ms, 0.03);
    assert_eq!(c.write_settle_ms, 0.461);
    assert_eq!(c.overheads.read_miss_after_read, 0.28362);

    let h = drive("hp_c2247a.parv");
    assert_eq!(h.rpm, 5400.0);
    assert_eq!(h.layout.surfaces, 13);
    assert_eq!(h.layout.zones.len(), 8);
    assert_eq!(h.layout.sparing, Sparing::Tracks);
    assert_eq!(h.layout.zones[0].dead_space, 1632);
    assert_eq!(
        h.layout.blocks, 2_054_864,
        "the HP zones give its block count exactly"
    );
    assert!(matches!(
        h.seek,
        SeekCurve::Hpl {
            boundary: 300,
            first_ten: Some(_),
            ..
        }
    ));
    assert_eq!(h.seek.seek_ms(1), 2.89);
    assert!((h.seek.seek_ms(100) - (3.81 + 0.33 * 10.0)).abs() < 1e-12);
    assert!((h.seek.seek_ms(1000) - (7.75 + 0.0059 * 1000.0)).abs() < 1e-12);
    // The slow bus of the HP (BUS1), not the disk's zero.
    assert_eq!(h.bus_read_ms, 0.1701);
    assert_eq!(h.bus_write_ms, 0.18686);
    assert!(h.overheads.extra_write_disconnect.is_some());

    let b = drive("barracuda.parv");
    assert_eq!(b.rpm, 7200.0);
    assert_eq!(b.layout.surfaces, 5);
    assert_eq!(b.layout.zones.len(), 11);
    assert_eq!(b.layout.sparing, Sparing::PerRange { cylinders: 6 });
    assert_eq!(b.layout.blocks, 4_217_670);
    match &b.seek {
        SeekCurve::Table { points } => assert_eq!(points.len(), 87),
        other => panic!("barracuda seek {other:?}"),
    }
}

#[test]
fn parse_errors_name_file_line_and_key() {
    let d = data_dir();
    let tmp = std::env::temp_dir().join(format!("platter-disksim-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let text = std::fs::read_to_string(d.join("cheetah9LP.diskspecs"))
        .unwrap()
        .replace(
            "Segment size (in blks) = 561",
            "Segment size (in blks) = lots",
        );
    std::fs::write(tmp.join("bad.diskspecs"), text).unwrap();
    std::fs::write(tmp.join("bad.parv"), "source bad.diskspecs\n").unwrap();
    // The model and its seek curve resolve next to the file that sources them.
    std::fs::copy(d.join("cheetah9LP.model"), tmp.join("cheetah9LP.model")).unwrap();
    std::fs::copy(d.join("cheetah9LP.seek"), tmp.join("cheetah9LP.seek")).unwrap();
    let e = load_drive(&tmp.join("bad.parv")).unwrap_err();
    let s = e.to_string();
    assert!(s.contains("bad.diskspecs:36:"), "{s}");
    assert!(s.contains("`Segment size (in blks)`"), "{s}");
    // An odd number of defect numbers (they come in pairs) names the
    // model's line and key.
    std::fs::write(
        tmp.join("bad.diskspecs"),
        std::fs::read_to_string(d.join("cheetah9LP.diskspecs")).unwrap(),
    )
    .unwrap();
    let model = std::fs::read_to_string(d.join("cheetah9LP.model")).unwrap();
    let first = model.find("defects = []").expect("a defects list");
    let mut bad = model.clone();
    bad.replace_range(first..first + "defects = []".len(), "defects = [ 12 ]");
    std::fs::write(tmp.join("cheetah9LP.model"), bad).unwrap();
    let s = load_drive(&tmp.join("bad.parv")).unwrap_err().to_string();
    assert!(
        s.contains("cheetah9LP.model:") && s.contains("`defects`"),
        "{s}"
    );
    assert!(s.contains("pairs"), "{s}");
    // Scheme 7 (slips to the zone's end) loads as that many spares at the
    // end of each zone; spares of its own are refused, naming the key.
    let at_end = model.replace("Sparing scheme used = 9", "Sparing scheme used = 7");
    let no_spares = with_no_spares(&at_end);
    std::fs::write(tmp.join("cheetah9LP.model"), &no_spares).unwrap();
    let d7 = load_drive(&tmp.join("bad.parv")).unwrap_or_else(|e| panic!("{e}"));
    let d9 = load_drive(&d.join("cheetah9LP.parv")).unwrap();
    assert_eq!(d7.layout.sparing, Sparing::PerZone);
    for (z7, z9) in d7.layout.zones.iter().zip(&d9.layout.zones) {
        assert_eq!(z7.spares, z7.slips.len() as u64);
        assert_eq!(z7.lbns + z7.spares, z9.lbns + z9.spares, "the same sectors");
    }
    std::fs::write(tmp.join("cheetah9LP.model"), &at_end).unwrap();
    let s = load_drive(&tmp.join("bad.parv")).unwrap_err().to_string();
    assert!(
        s.contains("`Number of spares`") && s.contains("scheme 7"),
        "{s}"
    );
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
fn layout_round_trips_and_skews() {
    for (parv, _, _) in DRIVES {
        let spec = drive(parv);
        let l = &spec.layout;
        // Every zone's first, middle and last blocks, and a stride over
        // the disk, map to distinct sectors and back.
        let mut lbns: Vec<u64> = (0..l.blocks).step_by(9973).collect();
        for z in &l.zones {
            lbns.extend([
                z.first_lbn,
                z.first_lbn + z.lbns / 2,
                z.first_lbn + z.lbns - 1,
            ]);
        }
        for lbn in lbns {
            let p = l.ltop(lbn);
            assert!(p.head < l.surfaces && p.sector < l.blocks_per_track(p.cyl));
            assert_eq!(l.ptol(p), Some(lbn), "{parv}: lbn {lbn} at {p:?}");
        }
        // Track skew: the first sector of the next track of a zone starts
        // `track_skew` slots after the first sector of the track before.
        let z = &l.zones[1];
        let bpt = z.blocks_per_track;
        let a = l.slot(platter_sim::disk::layout::Pbn {
            cyl: z.first_cyl,
            head: 0,
            sector: 0,
        });
        let b = l.slot(platter_sim::disk::layout::Pbn {
            cyl: z.first_cyl,
            head: 1,
            sector: 0,
        });
        assert_eq!((a + z.track_skew) % bpt, b, "{parv}: track skew");
        let c = l.slot(platter_sim::disk::layout::Pbn {
            cyl: z.first_cyl + 1,
            head: 0,
            sector: 0,
        });
        let expect = (a + (l.surfaces - 1) * z.track_skew + z.cyl_skew) % bpt;
        assert_eq!(c, expect, "{parv}: cylinder skew");
    }
}

/// Serves one command on an idle drive at `now`; returns (ms taken, hit).
fn took(d: &mut Drive, now: f64, cmd: Command) -> (f64, Hit) {
    let (done, hit) = common::serve(d, now, cmd);
    (done - now, hit)
}

#[test]
fn model_units() {
    let mut spec = drive("cheetah9LP.parv");
    let period = spec.period_ms();
    let bpt = spec.layout.zones[0].blocks_per_track;
    let xfer = spec.bus_read_ms;
    let ovh = spec.overheads.read_miss_after_read;
    // No cache: every read goes to the media.
    spec.cache.enabled = false;
    let mut d = Drive::new(spec.clone());
    // Warm up at block 0 (track 0), then read the next sectors of the
    // same track: no seek, only rotation.
    took(&mut d, 0.0, common::read(0, 0, 1));
    let arm = d.arm();
    let (t, _) = took(&mut d, 100.0, common::read(1, 10, 4));
    assert_eq!(d.arm(), arm, "same track");
    assert!(
        t < ovh + period + 4.0 * xfer + 1e-6,
        "same-track read took {t}"
    );

    // A full-stroke seek matches the curve (first cylinder to last).
    let mut d = Drive::new(spec.clone());
    let last = spec.layout.blocks - 1;
    let (t, _) = took(&mut d, 0.0, common::read(0, last, 1));
    let full = spec.seek.seek_ms(spec.layout.ltop(last).cyl);
    let fixed = ovh
        + full
        + period / f64::from(spec.layout.blocks_per_track(spec.layout.ltop(last).cyl))
        + xfer;
    assert!(
        t >= fixed - 1e-9 && t <= fixed + period + 1e-9,
        "full stroke {t} vs seek {full} + overheads {fixed}"
    );
    assert!(
        (full - 10.627).abs() < 0.3,
        "full stroke seek {full} vs 10.627 in the model file"
    );

    // Rotational latency averages half a revolution over random reads on
    // one track at random times.
    let mut d = Drive::new(spec.clone());
    let mut rng = platter_sim::rng::Rng::new(7);
    let mut sum = 0.0;
    let n = 2000;
    let mut now = 0.0;
    for i in 0..n {
        now += 50.0 + rng.below(10_000) as f64 / 1000.0;
        let lbn = rng.below(u64::from(bpt));
        let (t, _) = took(&mut d, now, common::read(i, lbn, 1));
        sum += t - ovh - xfer - period / f64::from(bpt);
    }
    let mean = sum / f64::from(n as u32);
    assert!(
        (mean - period / 2.0).abs() < 0.05 * period,
        "mean rotational latency {mean} vs half a revolution {}",
        period / 2.0
    );

    // Cache: a re-read hits and costs only overhead and transfer.
    let mut d = Drive::new(drive("cheetah9LP.parv"));
    let (miss, h1) = took(&mut d, 0.0, common::read(0, 5000, 8));
    let (hit, h2) = took(&mut d, 50.0, common::read(1, 5000, 8));
    assert_eq!((h1, h2), (Hit::Miss, Hit::Whole));
    let c = d.spec();
    let expect = c.overheads.read_hit_after_read + 8.0 * c.bus_read_ms;
    assert!(
        (hit - expect).abs() < 1e-9,
        "hit {hit} vs {expect} (miss {miss})"
    );
    // Read-ahead: the blocks after it hit too, once prefetched.
    let (_, h3) = took(&mut d, 100.0, common::read(2, 5008, 8));
    assert_eq!(h3, Hit::Whole);
}

#[test]
fn validation_against_disksim() {
    let d = data_dir();
    let mut failures = Vec::new();
    for (parv, trace, disksim) in DRIVES {
        let spec = load_drive(&d.join(parv)).unwrap();
        let t = read_trace(&d.join(trace)).unwrap();
        let v = validate(&spec, &t);
        let bound = demerit_bound(parv) * disksim;
        println!(
            "{parv}: demerit {:.3} ms (exact quantiles {:.3}), DiskSim {disksim:.3}, bound {bound:.3}; \
             mean measured {:.3} ms, simulated {:.3} ms; read hits measured {:?}, simulated {:.3}",
            v.demerit_ms,
            v.demerit_exact_ms,
            v.mean_measured_ms,
            v.mean_simulated_ms,
            v.measured_read_hit_ratio,
            v.simulated_read_hit_ratio
        );
        if v.demerit_ms > bound {
            failures.push(format!("{parv}: {:.3} > {bound:.3}", v.demerit_ms));
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// The engine runs on modelled disks: seeded scenarios stay correct and
/// deterministic with a queue depth, SPTF and commands split at MAXPHYS.
#[test]
fn seeded_runs_on_modelled_disks() {
    use platter_sim::{random_config, DiskModel, HostModel, ScenarioOptions, Simulation};
    let mut spec = drive("cheetah9LP.parv");
    spec.scheduler = platter_sim::disk::drive::Scheduler::Sptf;
    let opts = ScenarioOptions::default();
    for seed in 0..40 {
        let host = HostModel {
            max_transfer_bytes: 16 * 1024,
            queue_depth: 1 + (seed % 4) as u32,
        };
        let run = || {
            let c = random_config(seed, &opts);
            let n = c.geometry.member_data_bytes.len() as u32;
            Simulation::new(c, seed)
                .with_service_model(Box::new(DiskModel::new(&spec, n, host.clone())))
                .run()
        };
        let a = run();
        assert!(a.ok(), "seed {seed}: {:?}", a.violation_messages);
        assert!(a.completed > 0);
        // Milliseconds per I/O, not the default model's microseconds.
        assert!(a.end_ns > 1_000_000, "seed {seed}: {}", a.end_ns);
        assert_eq!(a, run(), "seed {seed}: two runs differ");
    }
}

/// `text` with every zone's "Number of spares" set to 0.
fn with_no_spares(text: &str) -> String {
    text.lines()
        .map(|l| match l.split_once("Number of spares =") {
            Some((indent, _)) => format!("{indent}Number of spares = 0,"),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}
