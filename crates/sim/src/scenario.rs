//! Random scenarios for seeded testing: a seed picks the level, geometry,
//! workload and fault schedule.

use crate::members::{CrashUndo, Jitter, SimpleLatency};
use crate::rng::{mix64, Rng, Stream};
use crate::run::{Arrival, Fault, Mix, RebuildPace, ScheduledFault, SimConfig, Workload};
use platter_core::balance::ReadPolicy;
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::integrity::{Algorithm, PageFormat};
use platter_core::intent::{IntentLayout, DEFAULT_REGION_BYTES, INTENT_PAGE_BYTES};
use platter_core::volume::CacheLimits;
use platter_core::{Level, ParityLayout};

pub const SECTOR_BYTES: u64 = 512;
/// Room before the data area: a label, then a page of write-intent bitmap.
pub const DATA_OFFSET_BYTES: u64 = 8192;

#[derive(Clone, Debug)]
pub struct ScenarioOptions {
    pub levels: Vec<Level>,
    /// Percent of scenarios whose member failures exceed the redundancy.
    pub beyond_budget_percent: u32,
    /// Schedule one crash (use only with levels a crash cannot corrupt).
    pub crash: bool,
    /// With `crash`: member failures are transient (one failed I/O) and the
    /// crash comes right after the first, around the time its labels are
    /// written, so the failed member may be assembled again. Levels with
    /// copies only (a parity volume must not crash degraded).
    pub crash_after_failure: bool,
    /// With `crash`, parity levels only: the crash takes a member with it
    /// ([`Fault::CrashLosingMember`]) and no other member fails.
    pub crash_loses_member: bool,
    pub requests_min: u64,
    pub requests_max: u64,
}

impl Default for ScenarioOptions {
    fn default() -> Self {
        ScenarioOptions {
            levels: Level::ALL.to_vec(),
            beyond_budget_percent: 15,
            crash: false,
            crash_after_failure: false,
            crash_loses_member: false,
            requests_min: 100,
            requests_max: 300,
        }
    }
}

impl ScenarioOptions {
    /// These options less the levels without redundancy, and no crash: for
    /// the scenarios that take a member's bytes away and bring them back.
    fn redundant_without_crash(&self) -> ScenarioOptions {
        ScenarioOptions {
            levels: self
                .levels
                .iter()
                .copied()
                .filter(|l| !matches!(l, Level::Concat | Level::Stripe))
                .collect(),
            crash: false,
            ..self.clone()
        }
    }
}

/// The scenario for `seed`.
///
/// Every choice is drawn from one stream in a fixed order: a change to
/// the order changes every seed's scenario.
pub fn random_config(seed: u64, opts: &ScenarioOptions) -> SimConfig {
    let mut r = Rng::stream(seed, Stream::Scenario);
    let level = *r.pick(&opts.levels);
    let geometry = random_geometry(&mut r, level);
    let (members, copies) = (geometry.member_data_bytes.len() as u32, geometry.copies);
    let stripe_bytes = geometry.interleave_bytes
        * match level {
            Level::Concat | Level::Mirror => 1,
            Level::Stripe => u64::from(members),
            Level::Raid10 => u64::from(members), // close enough for lengths
            Level::Raid5 | Level::Raid6 => u64::from(members - level.parity_members()),
        };
    let (latency, workload) = random_load(&mut r, opts, stripe_bytes);
    let run_ns = run_estimate_ns(&latency, &workload.arrival, workload.requests);
    let redundancy = match level {
        Level::Concat | Level::Stripe => 0,
        Level::Mirror | Level::Raid10 => u64::from(copies - 1),
        Level::Raid5 | Level::Raid6 => u64::from(level.parity_members()),
    };
    let faults = random_faults(&mut r, opts, &geometry, redundancy, run_ns);
    let crash_undo = if r.chance(50) {
        CrashUndo::All
    } else {
        CrashUndo::Subset {
            persist_percent: r.range(0, 100) as u32,
        }
    };
    let (label_min_ns, flush_ns) = (latency.base_ns + 1, latency.flush_ns);
    let mut config = SimConfig {
        geometry,
        workload,
        faults,
        latency,
        member_extra_ns: Vec::new(),
        crash_undo,
        limits_max_requests: 1024,
        max_steps: 2_000_000,
        max_queue_len: 1 << 16,
        // Drawn last, so that older seeds keep their other choices.
        intent_region_stripes: if redundancy > 0 && r.chance(90) {
            r.range(1, 8)
        } else {
            0
        },
        sweep_interval_ns: r.range(run_ns / 16 + 1, run_ns / 2 + 2),
        read_policy: random_read_policy(&mut r, members, copies),
        // The stripe cache on most parity volumes, often small so that it
        // fills; its ticks a few to a few dozen times per run.
        stripe_cache: (level.is_parity() && r.chance(80)).then(|| CacheLimits {
            max_stripes: *r.pick(&[1, 2, 4, 64]),
            max_bytes: 16 << 20,
        }),
        destage_interval_ns: r.range(run_ns / 50 + 1, run_ns / 4 + 2),
        // A label update is a write and a flush on every member in use.
        label_write_ns: r.range(label_min_ns, label_min_ns + 2 * flush_ns + 1),
        silent_corruption: None,
        checksums: None,
        checksum_format: PageFormat::Sealed { records: true },
        checksum_cache_pages: platter_core::integrity::Limits::default().pages_per_member,
        ppl: None,
        // No draw: the rebuild scenarios set their own pace.
        rebuild: RebuildPace {
            stripes_per_step: 4,
            gap_ns: 100_000,
        },
    };
    if opts.crash && opts.crash_after_failure {
        crash_after_first_failure(&mut config, &mut r);
    }
    if opts.crash && opts.crash_loses_member {
        crash_losing_member(&mut config, &mut r);
    }
    config
}

/// Members, copies, parity layout and interleave for `level`, on small
/// members of unequal sizes.
fn random_geometry(r: &mut Rng, level: Level) -> GeometrySpec {
    let members = r.range(u64::from(level.min_members()), 8) as u32;
    let copies = match level {
        Level::Mirror => members,
        Level::Raid10 => r.range(2, u64::from(members)) as u32,
        _ => 1,
    };
    let parity_layout = *r.pick(&ParityLayout::ALL);
    let interleave_bytes = r.range(1, 256) * SECTOR_BYTES;
    // Small members: about 256 KiB of data each, at least 2 rows.
    let rows = (256 * 1024 / interleave_bytes).clamp(2, 16);
    let member_data_bytes = (0..members)
        .map(|_| {
            // Unequal sizes: the volume cuts to the smallest (or, for
            // concat, uses every whole interleave).
            let extra = if r.chance(30) {
                r.below(interleave_bytes / SECTOR_BYTES * 2) * SECTOR_BYTES
            } else {
                0
            };
            rows * interleave_bytes + extra
        })
        .collect();
    GeometrySpec {
        level,
        parity_layout,
        copies,
        interleave_bytes,
        data_offset_bytes: DATA_OFFSET_BYTES,
        member_data_bytes,
    }
}

/// The members' latency and the clients' requests: how they arrive, how
/// many, of which kinds.
fn random_load(
    r: &mut Rng,
    opts: &ScenarioOptions,
    stripe_bytes: u64,
) -> (SimpleLatency, Workload) {
    let latency = SimpleLatency {
        base_ns: r.range(20_000, 200_000),
        ns_per_kib: r.range(500, 10_000),
        jitter: Jitter::Uniform {
            max_ns: r.range(0, 200_000),
        },
        flush_ns: r.range(50_000, 1_000_000),
    };
    let arrival = if r.chance(75) {
        Arrival::Closed {
            concurrency: r.range(1, 16) as u32,
            think_ns: if r.chance(50) { 0 } else { r.range(1, 100_000) },
        }
    } else {
        Arrival::Open {
            mean_gap_ns: r.range(5_000, 300_000),
        }
    };
    let requests = r.range(opts.requests_min, opts.requests_max);
    let mix = Mix {
        read: r.range(20, 60) as u32,
        write: r.range(20, 60) as u32,
        write_zeroes: r.range(0, 10) as u32,
        trim: r.range(0, 10) as u32,
        flush: r.range(0, 6) as u32,
        fua_percent: r.range(0, 20) as u32,
    };
    let workload = Workload {
        requests,
        arrival,
        mix,
        max_len_bytes: 2 * stripe_bytes + 1000,
        aligned_percent: 50,
        verify_at_end: true,
        windows: Vec::new(),
    };
    (latency, workload)
}

/// Member failures, within the redundancy or (`beyond_budget_percent` of
/// the time) past it, at random times in the run; and the crash, if
/// asked for.
fn random_faults(
    r: &mut Rng,
    opts: &ScenarioOptions,
    geometry: &GeometrySpec,
    redundancy: u64,
    run_ns: u64,
) -> Vec<ScheduledFault> {
    let members = geometry.member_data_bytes.len() as u32;
    let n = u64::from(members);
    let failures = if r.chance(opts.beyond_budget_percent) {
        r.range(redundancy + 1, (redundancy + 2).min(n))
    } else {
        r.range(0, redundancy.min(n))
    };
    let mut victims: Vec<u32> = (0..members).collect();
    let mut faults = Vec::new();
    for _ in 0..failures {
        let i = r.below(victims.len() as u64) as usize;
        let member = victims.swap_remove(i);
        let fault = if r.chance(70) {
            Fault::Die { member }
        } else {
            Fault::FailOneIo { member }
        };
        faults.push(ScheduledFault {
            at_ns: r.below(run_ns),
            fault,
        });
    }
    if opts.crash {
        // A parity volume must not crash degraded (see Fault::Crash): the
        // crash comes before its member failures.
        let before = if geometry.level.is_parity() {
            faults
                .iter()
                .map(|f| f.at_ns)
                .min()
                .unwrap_or(run_ns)
                .max(1)
        } else {
            run_ns
        };
        faults.push(ScheduledFault {
            at_ns: r.below(before),
            fault: Fault::Crash,
        });
    }
    faults
}

/// `crash_loses_member`: the crash takes a member with it, and no member
/// fails otherwise.
fn crash_losing_member(config: &mut SimConfig, r: &mut Rng) {
    assert!(
        config.geometry.level.is_parity(),
        "a crash losing a member is the parity levels' hole"
    );
    let member = r.below(config.geometry.member_data_bytes.len() as u64) as u32;
    config.faults.retain(|f| f.fault == Fault::Crash);
    for f in &mut config.faults {
        f.fault = Fault::CrashLosingMember { member };
    }
}

/// A rough length of a run, to place faults inside it.
fn run_estimate_ns(latency: &SimpleLatency, arrival: &Arrival, requests: u64) -> u64 {
    let per_request_ns = latency.base_ns + latency.jitter.mean_ns() + 16 * latency.ns_per_kib;
    let parallel = match *arrival {
        Arrival::Closed { concurrency, .. } => u64::from(concurrency),
        Arrival::Open { .. } => 4,
    };
    (requests * per_request_ns * 2 / parallel).max(1)
}

/// Turns on the partial parity log (RAID-5/6): its area goes where the
/// data began, and the data moves up past it. Before [`with_checksums`],
/// whose area must stay right before the data. The area is the smallest
/// the engine accepts for the interleave (not `platter create`'s 4 MiB
/// floor), so that its ring wraps and fills within a short run.
pub fn with_ppl(c: &mut SimConfig) {
    assert!(c.checksums.is_none(), "with_ppl goes before with_checksums");
    assert!(
        c.geometry.level.is_parity(),
        "a partial parity log needs parity"
    );
    let g = &mut c.geometry;
    let offset_bytes = g.data_offset_bytes.max(DATA_OFFSET_BYTES);
    let len_bytes = platter_core::ppl::ring_bytes_min(g.interleave_bytes);
    g.data_offset_bytes = offset_bytes + len_bytes;
    c.ppl = Some(platter_core::ppl::Layout {
        offset_bytes,
        len_bytes,
    });
}

const TIB: u64 = 1 << 40;
/// `platter create`'s data offset: room for a bitmap of 255 pages.
pub const LARGE_DATA_OFFSET_BYTES: u64 = 1 << 20;

/// A scenario at the size of real disks: [`random_config`]'s level,
/// workload and faults for `seed`, on members of 1.5 to 3 TiB (sparse in
/// the simulator's memory: [`crate::sparse`]) laid out as `platter create`
/// lays them out (data from 1 MiB, 4 MiB bitmap regions: a bitmap of 12 to
/// 170 pages). The requests stay in eight windows, each straddling a
/// region boundary: between bitmap pages 0|1, 1|2 and 2|3 (adjacent pages
/// dirty together), in the middle page, between the last two pages, past
/// 2^40 bytes, at a random place, and at the volume's end.
pub fn large_config(seed: u64, opts: &ScenarioOptions) -> SimConfig {
    let mut c = random_config(seed, opts);
    // Its own stream: the base scenario keeps its draws.
    let mut r = Rng::stream(mix64(seed ^ 0x7b5e_5ca1_e000_0001), Stream::Scenario);
    let g = &mut c.geometry;
    let il = g.interleave_bytes;
    let base = r.range(3 * TIB / 2, 3 * TIB) / il * il;
    for b in g.member_data_bytes.iter_mut() {
        *b = base
            + if r.chance(30) {
                r.below(il / SECTOR_BYTES * 2) * SECTOR_BYTES
            } else {
                0
            };
    }
    g.data_offset_bytes = LARGE_DATA_OFFSET_BYTES;
    let geometry = Geometry::new(g.clone()).expect("a large geometry");
    if geometry.redundancy() == 0 {
        c.intent_region_stripes = 0;
        c.workload.windows = vec![
            (0, 1 << 20),
            (geometry.volume_size_bytes() - (1 << 20), 1 << 20),
        ];
        return c;
    }
    c.intent_region_stripes = IntentLayout::choose_region_stripes(&geometry, DEFAULT_REGION_BYTES);
    let layout = IntentLayout::new(&geometry, c.intent_region_stripes)
        .expect("create's bitmap fits")
        .expect("a bitmap");
    let size = geometry.volume_size_bytes();
    let region_bytes = layout.region_stripes * geometry.stripe_data_bytes();
    let per_page = INTENT_PAGE_BYTES * 8;
    let pages = layout.pages();
    assert!(pages >= 4, "seed {seed}: a bitmap of {pages} pages");
    let half = (128 << 10)
        .max(geometry.stripe_data_bytes())
        .min(region_bytes);
    let around = |region: u64| {
        let at = (region * region_bytes).min(size - half);
        (at.saturating_sub(half), 2 * half)
    };
    let past_2_40 = TIB.div_ceil(region_bytes) + 1;
    c.workload.windows = vec![
        around(per_page),
        around(2 * per_page),
        around(3 * per_page),
        around(pages / 2 * per_page),
        around((pages - 1) * per_page),
        around(past_2_40),
        around(r.range(1, layout.regions - 1)),
        (size - 2 * half, 2 * half),
    ];
    c
}

/// Makes every failure one failed I/O and moves the crash to just after
/// the first of them (drawn after everything else, so other scenarios keep
/// their choices).
fn crash_after_first_failure(config: &mut SimConfig, r: &mut Rng) {
    for f in &mut config.faults {
        if let Fault::Die { member } = f.fault {
            f.fault = Fault::FailOneIo { member };
        }
    }
    let first = config
        .faults
        .iter()
        .filter(|f| f.fault != Fault::Crash)
        .map(|f| f.at_ns)
        .min();
    let Some(first) = first else { return };
    let crash_at = first + r.below(3 * config.label_write_ns + 1);
    for f in &mut config.faults {
        if f.fault == Fault::Crash {
            f.at_ns = crash_at;
        }
    }
}

/// Any read policy for levels with copies (so the seeded runs cover every
/// one with failures, rebuilds and crashes), `auto` for the others.
fn random_read_policy(r: &mut Rng, members: u32, copies: u32) -> ReadPolicy {
    if copies < 2 {
        return ReadPolicy::Auto;
    }
    match r.below(6) {
        0 => ReadPolicy::Auto,
        1 => ReadPolicy::RoundRobin,
        2 => ReadPolicy::Split {
            threshold_bytes: *r.pick(&[0, 1024, 4096, 64 << 10]),
        },
        3 => ReadPolicy::Load,
        4 => ReadPolicy::Prefer {
            slot: r.below(u64::from(members)) as u32,
        },
        _ => ReadPolicy::Proximity {
            window_bytes: *r.pick(&[0, 512, 64 << 10]),
        },
    }
}

/// Turns on per-block checksums in `c`: the data area moves up to make
/// room for the checksum area after the label and the bitmap's page, and a
/// redundant level gets a bitmap if it had none (checksums need it).
pub fn with_checksums(c: &mut SimConfig, algorithm: platter_core::integrity::Algorithm) {
    let g = &mut c.geometry;
    let data = g.member_data_bytes.iter().copied().max().unwrap_or(0);
    let area = c.checksum_format.area_bytes(data);
    g.data_offset_bytes = g.data_offset_bytes.max(DATA_OFFSET_BYTES) + area;
    if c.intent_region_stripes == 0 {
        c.intent_region_stripes = 1;
    }
    c.checksums = Some(algorithm);
}

/// A rebuild under load with members failing during it: [`random_config`]'s
/// redundant volume and workload, where one member fails early and is
/// then replaced by a fresh device or comes back with its own bytes
/// (`platter re-add`: a partial rebuild where the bitmap allows), and while
/// the rebuild runs, members fail at random: the one being rebuilt (its
/// reads below the cursor, its writes), a source, or both. Each rebuild
/// step is a few stripes with a pause after it, so the run is long enough
/// for the failures to land inside the rebuild. Some volumes keep
/// checksums: a new device's pages are blank until rebuilt.
pub fn rebuild_config(seed: u64, opts: &ScenarioOptions) -> SimConfig {
    let opts = opts.redundant_without_crash();
    assert!(!opts.levels.is_empty(), "a rebuild needs a redundant level");
    let mut c = random_config(seed, &opts);
    // Its own stream: the base scenario keeps its draws.
    let mut r = Rng::stream(mix64(seed ^ 0x4eb0_11d0_0000_0001), Stream::Scenario);
    let members = c.geometry.member_data_bytes.len() as u32;
    let run_ns = run_estimate_ns(&c.latency, &c.workload.arrival, c.workload.requests);
    let victim = r.below(u64::from(members)) as u32;
    let fail_at = r.below(run_ns / 4 + 1);
    let back_at = fail_at + r.range(1, run_ns / 4 + 2);
    let mut faults = vec![
        ScheduledFault {
            at_ns: fail_at,
            fault: if r.chance(50) {
                Fault::Die { member: victim }
            } else {
                Fault::FailOneIo { member: victim }
            },
        },
        ScheduledFault {
            at_ns: back_at,
            fault: if r.chance(50) {
                Fault::Replace { member: victim }
            } else {
                Fault::ReAdd { member: victim }
            },
        },
    ];
    // During the rebuild: the target again, a source, or both.
    let during = r.range(0, 3);
    for _ in 0..during {
        let member = if r.chance(60) {
            victim
        } else {
            r.below(u64::from(members)) as u32
        };
        let fault = match r.below(3) {
            0 => Fault::Die { member },
            _ => Fault::FailOneIo { member },
        };
        faults.push(ScheduledFault {
            at_ns: back_at + r.range(1, run_ns / 2 + 2),
            fault,
        });
    }
    c.faults = faults;
    c.rebuild = RebuildPace {
        stripes_per_step: r.range(1, 4),
        gap_ns: r.range(10_000, run_ns / 20 + 20_000),
    };
    // A new device's checksum pages are blank until the rebuild writes
    // them; a small cache reads them back often.
    if r.chance(40) {
        with_checksums(&mut c, Algorithm::Crc32c);
        if r.chance(50) {
            c.checksum_cache_pages = 2;
        }
    }
    c
}

/// A checksummed redundant volume under load where one member loses what
/// it holds behind the engine's back: it is discarded (everything from its
/// checksum area on reads as zeros) while serving or while stopped, or it
/// acknowledges writes for a while
/// and keeps none (data, checksum pages and write records alike). Clean
/// restarts follow, so checksum pages are read afresh from the members;
/// half the scenarios cache a page or two per member, so pages are read
/// back while serving too. A second member may die, also where the level
/// has no redundancy left for it.
pub fn lost_bytes_config(seed: u64, opts: &ScenarioOptions) -> SimConfig {
    let opts = ScenarioOptions {
        beyond_budget_percent: 0,
        ..opts.redundant_without_crash()
    };
    let mut c = random_config(seed, &opts);
    // Its own stream: the base scenario keeps its draws.
    let mut r = Rng::stream(mix64(seed ^ 0x1057_b17e_0000_0001), Stream::Scenario);
    with_checksums(&mut c, *r.pick(&[Algorithm::Crc32c, Algorithm::Xxh3]));
    if r.chance(50) {
        c.checksum_cache_pages = r.range(1, 4) as usize;
    }
    let members = c.geometry.member_data_bytes.len() as u32;
    let run_ns = run_estimate_ns(&c.latency, &c.workload.arrival, c.workload.requests);
    let victim = r.below(u64::from(members)) as u32;
    let at_ns = r.below(run_ns / 2 + 1);
    let (fault, quiet_from) = match r.below(3) {
        0 => (Fault::Discard { member: victim }, at_ns),
        1 => (
            Fault::Restart {
                discard: Some(victim),
            },
            at_ns,
        ),
        _ => {
            // Often until the restart below, which resets it: the pages
            // it dropped are then read afresh before anything rewrites
            // them.
            let for_ns = if r.chance(50) {
                u64::MAX / 4
            } else {
                r.range(1, run_ns / 3 + 2)
            };
            (
                Fault::DropWrites {
                    member: victim,
                    for_ns,
                },
                at_ns + for_ns.min(r.range(1, run_ns / 4 + 2)),
            )
        }
    };
    let drops = matches!(fault, Fault::DropWrites { .. });
    let mut faults = vec![ScheduledFault { at_ns, fault }];
    for _ in 0..r.range(1, 3) {
        faults.push(ScheduledFault {
            at_ns: quiet_from + r.range(1, run_ns / 2 + 2),
            fault: Fault::Restart { discard: None },
        });
    }
    // Another member dies: within the budget where the level has room for
    // both, beyond it (EIO allowed, never a wrong byte) where it has not.
    if r.chance(30) {
        let mut other = (victim + 1 + r.below(u64::from(members) - 1) as u32) % members;
        // Not the member that keeps a dropping victim's write records: a
        // lost write on a member whose record holder is gone is not caught
        // (docs/failures.md says so); on two members there is no other.
        let holder = (victim + 1) % members;
        if drops && other == holder {
            if members < 3 {
                c.faults = faults;
                return c;
            }
            other = (holder + 1) % members;
        }
        faults.push(ScheduledFault {
            at_ns: r.below(run_ns),
            fault: Fault::Die { member: other },
        });
    }
    c.faults = faults;
    c
}
