//! The event loop: client requests arrive, the [`Volume`] turns them into
//! member I/O, each member I/O completes at a virtual time drawn from the
//! service model, and faults and crashes happen at scheduled times.

use crate::clock::Clock;
use crate::events::EventQueue;
use crate::members::{CrashUndo, ServiceModel, SimMember, SimpleLatency, SimpleService};
use crate::oracle::{Oracle, ReadExpect};
use crate::rng::{mix64, Rng, Stream};
use crate::trace::TraceHash;
use bytes::Bytes;
use platter_core::balance::ReadPolicy;
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::integrity::{self, Algorithm, PageFormat};
use platter_core::intent::{IntentLayout, RegionSet, INTENT_OFFSET_BYTES, INTENT_PAGE_BYTES};
use platter_core::stats::LatencyOf;
use platter_core::volume::{
    CacheLimits, CheckReport, Completion, ErrorKind, Event, Health, Limits, Maintenance, MemberIo,
    MemberOp, Reply, Request, RequestId, Volume,
};
use platter_core::Level;
use std::collections::{BTreeMap, BTreeSet};

/// How client requests arrive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// `concurrency` clients, each submitting its next request `think_ns`
    /// after the previous one completed.
    Closed { concurrency: u32, think_ns: u64 },
    /// Requests arrive independently, `1..=2 * mean_gap_ns` apart.
    Open { mean_gap_ns: u64 },
}

/// Relative weights of the request kinds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mix {
    pub read: u32,
    pub write: u32,
    pub write_zeroes: u32,
    pub trim: u32,
    pub flush: u32,
    /// Percent of writes and write-zeroes with FUA.
    pub fua_percent: u32,
}

impl Default for Mix {
    fn default() -> Self {
        Mix {
            read: 40,
            write: 45,
            write_zeroes: 7,
            trim: 5,
            flush: 3,
            fua_percent: 10,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Random requests; a verify pass (reads of the whole volume) follows
    /// when `verify_at_end` is set.
    pub requests: u64,
    pub arrival: Arrival,
    pub mix: Mix,
    /// Longest request (at least 1 byte, cut to the volume size).
    pub max_len_bytes: u64,
    /// Percent of requests rounded to whole sectors (when at least one).
    pub aligned_percent: u32,
    pub verify_at_end: bool,
    /// Ranges of the volume, (offset, length), that the requests and the
    /// verify pass stay in, each window picked with equal odds; empty: the
    /// whole volume. A volume of TiBs is tested in a few windows.
    pub windows: Vec<(u64, u64)>,
}

/// Something that happens to the members or the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Every I/O of the member that completes from now on fails.
    Die { member: u32 },
    /// The next I/O of the member to complete fails. The engine then stops
    /// using the member (a single error costs a member), unless it was a
    /// client read on a level with copies: that one is served from another
    /// copy and rewritten, and the member stays in use.
    FailOneIo { member: u32 },
    /// The next read of the member returns one flipped bit, silently. The
    /// engine cannot notice; this exists to prove the oracle can fail.
    CorruptOneRead { member: u32 },
    /// Power failure: in-flight I/O is lost, unflushed writes are undone
    /// (per [`SimConfig::crash_undo`]), and a new volume is assembled over
    /// the member bytes, with members known to have failed missing. With a
    /// write-intent bitmap, the regions it marks are resynced at once.
    ///
    /// Member failures that fall inside that resync are deferred until it
    /// ends: a failure there is the write hole (docs/failures.md), which the
    /// bitmap narrows and nothing but a journal closes. For the same reason
    /// a parity volume should not crash while degraded (md refuses to start
    /// such an array); the scenarios schedule crashes before failures.
    Crash,
    /// One 512-byte block of the member's data area changes behind the
    /// engine's back while it serves (bit rot, a misdirected or lost
    /// write): a flipped bit, a few bytes or the whole block. No read
    /// reports it. Without checksums the next read of it is served wrong;
    /// with them ([`SimConfig::checksums`]) it must never be.
    CorruptStored { member: u32 },
    /// Power failure, as [`Fault::Crash`], and this member does not come
    /// back: the volume is assembled without it, degraded, before any
    /// resync (the write hole's own scenario). Stripes a partial write was
    /// changing when the power went then rebuild the member's chunks from
    /// parity that may not match the data, unless the volume keeps a
    /// partial parity log ([`SimConfig::ppl`]), applied before it serves.
    CrashLosingMember { member: u32 },
    /// Everything of the member's from its checksum area on (checksum
    /// pages, write records, data) reads as zeros from now on, behind the
    /// engine's back: a discarded or thin-provisioned LUN that lost its
    /// mapping, `blkdiscard`, a firmware bug. Reported by no I/O.
    Discard { member: u32 },
    /// The member acknowledges every write for `for_ns` from now and keeps
    /// none of them (data, checksum pages and write records alike): a
    /// dropped write, as a firmware bug or a cache that lies makes it.
    /// Reported by no I/O; flushes succeed.
    DropWrites { member: u32, for_ns: u64 },
    /// A clean stop and start: new requests wait, and once those in
    /// flight have completed the host flushes, clears the bitmap and
    /// flushes again, as `platter serve` does at a stop; then the volume
    /// is assembled again from the members, its checksum pages and
    /// records read afresh, and the waiting requests go on. With
    /// `discard`, that member is discarded ([`Fault::Discard`]) while the
    /// volume is stopped: nothing of it is cached when it starts again.
    Restart { discard: Option<u32> },
    /// A fresh, zeroed device takes the member's slot (`platter replace`),
    /// once the engine has failed the member and the labels record it
    /// (until then the fault waits); the engine rebuilds it whole from the
    /// others, stepped at [`SimConfig::rebuild`]'s pace.
    Replace { member: u32 },
    /// The member comes back holding what it held (a remote member whose
    /// host answers again: `platter re-add`), once failed and recorded as
    /// for [`Fault::Replace`]; the engine rebuilds only the regions the
    /// bitmap kept for it (all of it without a bitmap).
    ReAdd { member: u32 },
}

/// How the host steps a rebuild: one step at a time, as the server's
/// upkeep thread does, with a pause between steps (its rate limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RebuildPace {
    pub stripes_per_step: u64,
    /// Virtual time from one step's end to the next; a failed step waits
    /// ten times as long (the server retries every second).
    pub gap_ns: u64,
}

/// Silent corruption of what members store ("bit rot"), and the scrub that
/// must find and mend it.
///
/// When the workload's random requests have completed (and any crash's
/// resync with them), the stripe cache is written out, then the stored
/// bytes of `stripes` random stripes are changed behind the engine's back:
/// in each, one block of one member (RAID-6: a data block, P or Q; mirror
/// and RAID-10: one copy of one chunk), a flipped bit, a few bytes, or a
/// whole sector or chunk of other data. No read reports it. Then `scrub`
/// runs over every stripe, a [`Maintenance::Check`] pass after it, and
/// then the verify pass reads the whole volume against the oracle.
///
/// Only on levels whose redundancy can name the wrong member (RAID-6;
/// mirror and RAID-10 with three or more copies), at most one wrong block
/// per stripe, and only while every member is in use and none has a
/// failure the engine has yet to see: a scrub checks no stripe that has a
/// member missing. Otherwise nothing is corrupted (the scrub and verify
/// still run).
///
/// With [`Maintenance::Repair`] the scrub must report each corrupted
/// stripe as mismatched with its member named, nothing else, and the
/// verify pass must read no wrong byte. [`Maintenance::Resync`] (parity
/// from the data, copies from the first copy) mends only some of it: a
/// test uses it to show the verify pass catches what is left wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SilentCorruption {
    /// Stripes to corrupt (fewer on a volume with fewer stripes).
    pub stripes: u64,
    /// The whole-volume scrub after the corruption.
    pub scrub: Maintenance,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduledFault {
    pub at_ns: u64,
    pub fault: Fault,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimConfig {
    pub geometry: GeometrySpec,
    pub workload: Workload,
    pub faults: Vec<ScheduledFault>,
    pub latency: SimpleLatency,
    /// Per member, time added to each of its I/Os on top of `latency`
    /// (empty: none): one member slower than the others by milliseconds,
    /// so that its writes of a stripe land long after the others'.
    pub member_extra_ns: Vec<u64>,
    pub crash_undo: CrashUndo,
    pub limits_max_requests: usize,
    /// Hard bound on event-loop steps (an assert, not a timeout).
    pub max_steps: u64,
    /// Hard bound on the event queue's length.
    pub max_queue_len: usize,
    /// Stripes per write-intent bit; 0 = no bitmap.
    pub intent_region_stripes: u64,
    /// Virtual time between bitmap sweeps; 0 = none.
    pub sweep_interval_ns: u64,
    /// How reads choose among copies (mirror, raid10).
    pub read_policy: ReadPolicy,
    /// The stripe cache (RAID-5/6), or none.
    pub stripe_cache: Option<CacheLimits>,
    /// Virtual time between the stripe cache's destage ticks; 0 = none.
    pub destage_interval_ns: u64,
    /// Virtual time from a member's failure to its record in the labels of
    /// the members in use. A crash before then assembles the failed member
    /// again, as a real restart would.
    pub label_write_ns: u64,
    /// Silent corruption at the end of the workload, then a scrub; none
    /// when `None`.
    pub silent_corruption: Option<SilentCorruption>,
    /// Per-block checksums (`platter create --checksums`): the checksum
    /// area sits right before the data area ([`checksum_layout`]), so the
    /// geometry's data offset must leave room for it after the bitmap.
    pub checksums: Option<Algorithm>,
    /// How the checksum pages are laid out, and how many the layer caches
    /// per member (a few make it read pages back often).
    pub checksum_format: PageFormat,
    pub checksum_cache_pages: usize,
    /// A partial parity log (RAID-5/6) in this area of every member,
    /// applied after each crash before the volume serves.
    pub ppl: Option<platter_core::ppl::Layout>,
    /// How rebuilds ([`Fault::Replace`], [`Fault::ReAdd`]) are stepped.
    pub rebuild: RebuildPace,
}

/// Where a simulated volume keeps its checksums: the pages (and any write
/// records) right before the data area.
pub fn checksum_layout(
    geometry: &Geometry,
    algorithm: Algorithm,
    format: PageFormat,
) -> integrity::Layout {
    let spec = geometry.spec();
    let data_size_bytes = spec.member_data_bytes.iter().copied().max().unwrap_or(0);
    let area = format.area_bytes(data_size_bytes);
    integrity::Layout {
        algorithm,
        format,
        volume_uuid: SIM_VOLUME_UUID,
        area_offset_bytes: spec
            .data_offset_bytes
            .checked_sub(area)
            .expect("room for the checksums before the data"),
        data_offset_bytes: spec.data_offset_bytes,
        data_size_bytes,
    }
}

impl SimConfig {
    /// The members that get a fault that costs their bytes (`Die`,
    /// `FailOneIo`, `Discard`, `DropWrites`), in order.
    pub fn failing_members(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .faults
            .iter()
            .filter_map(|f| match f.fault {
                Fault::Die { member }
                | Fault::FailOneIo { member }
                | Fault::Discard { member }
                | Fault::Restart {
                    discard: Some(member),
                }
                | Fault::DropWrites { member, .. } => Some(member),
                _ => None,
            })
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// True when the faults may exceed what the level survives: failed
    /// requests (EIO) are then allowed, wrong bytes never.
    pub fn beyond_budget(&self, geometry: &Geometry) -> bool {
        self.failing_members().len() as u64 > u64::from(geometry.redundancy())
    }
}

/// What a run did. Two runs of one config and seed give equal reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub seed: u64,
    pub trace_hash: u64,
    pub beyond_budget: bool,
    pub steps: u64,
    pub end_ns: u64,
    pub submitted: u64,
    pub completed: u64,
    /// Completed with an error.
    pub failed: u64,
    /// Lost in a crash (never completed).
    pub lost: u64,
    pub reads_checked: u64,
    pub bytes_checked: u64,
    pub member_ios: u64,
    pub member_io_errors: u64,
    /// Faults that happened while requests were still being served.
    pub faults_fired: u64,
    pub crashes: u64,
    /// Unflushed member writes undone by crashes.
    pub writes_lost_in_crashes: u64,
    /// Regions the bitmap marked at crashes (and so resynced), and the
    /// regions the volume has.
    pub resynced_regions: u64,
    pub regions: u64,
    /// Pages (4 KiB) of the write-intent bitmap, and over all crashes, the
    /// pages with a marked region.
    pub bitmap_pages: u64,
    pub marked_pages_at_crashes: u64,
    /// Unflushed member writes at crashes, each checked to lie in regions
    /// the bitmap marked.
    pub unflushed_writes_checked: u64,
    /// Member failures held back until a resync ended.
    pub deferred_faults: u64,
    /// [`Fault::DropWrites`] windows, [`Fault::Discard`]s and clean
    /// [`Fault::Restart`]s that happened.
    pub dropped_write_windows: u64,
    pub members_discarded: u64,
    pub restarts: u64,
    /// Sealed checksum pages read that were refused (blank, damaged) or
    /// stale, over every assembly.
    pub checksum_pages_refused: u64,
    pub checksum_pages_stale: u64,
    /// Rebuilds started ([`Fault::Replace`], [`Fault::ReAdd`]), finished,
    /// and their steps that failed (a member failing under them).
    pub rebuilds_started: u64,
    pub rebuilds_done: u64,
    pub rebuild_steps_failed: u64,
    /// Members the engine marked faulty, in order.
    pub faulty_members: Vec<u32>,
    /// Read errors the engine corrected from another copy.
    pub read_errors_corrected: u64,
    pub violations: u64,
    /// The first few violations, in words.
    pub violation_messages: Vec<String>,
    /// The engine's statistics at the end of the run (since the last
    /// crash, which assembles the volume afresh), latencies in virtual ns.
    pub stats: platter_core::stats::Stats,
    /// The most stripes the stripe cache held at once (0 without one).
    pub cache_peak_stripes: u64,
    /// Cached stripes lost in crashes (acknowledged, never flushed).
    pub cached_stripes_lost_in_crashes: u64,
    /// Member failures the engine knew of and the labels did not yet
    /// record when a crash came: those members were assembled again.
    pub failures_unrecorded_at_crashes: u64,
    /// Members lost with a crash ([`Fault::CrashLosingMember`]).
    pub members_lost_at_crashes: u64,
    /// Partial parity log records applied after crashes, and the bytes of
    /// rows left alone because a member they modify was lost.
    pub ppl_records_applied: u64,
    pub ppl_rows_skipped_bytes: u64,
    /// Parity bytes the log at the end of the run would rewrite, each
    /// checked to be what the members hold (`check_log_at_rest`).
    pub ppl_parity_checked_at_rest_bytes: u64,
    /// Reads that returned bytes the oracle vouches for and that were
    /// wrong, and how many such bytes they held.
    pub wrong_reads: u64,
    pub wrong_bytes: u64,
    /// Silent corruption ([`SimConfig::silent_corruption`]): the blocks
    /// changed behind the engine's back, as (stripe, member), one per
    /// stripe; none when the level cannot locate a wrong member or a
    /// member was out of use.
    pub corrupted: Vec<(u64, u32)>,
    /// What the scrub after the corruption reported, over every stripe.
    pub scrub: Option<CheckReport>,
    /// What the check after that scrub reported.
    pub check_after_scrub: Option<CheckReport>,
    /// Blocks changed behind the engine's back while it served
    /// ([`Fault::CorruptStored`]).
    pub stored_corruptions: u64,
}

impl Report {
    /// A run's report before it starts: every count zero, the bitmap's
    /// size from `intent`.
    fn new(seed: u64, beyond_budget: bool, intent: Option<IntentLayout>) -> Report {
        Report {
            seed,
            trace_hash: 0,
            beyond_budget,
            steps: 0,
            end_ns: 0,
            submitted: 0,
            completed: 0,
            failed: 0,
            lost: 0,
            reads_checked: 0,
            bytes_checked: 0,
            member_ios: 0,
            member_io_errors: 0,
            faults_fired: 0,
            crashes: 0,
            writes_lost_in_crashes: 0,
            resynced_regions: 0,
            regions: intent.map_or(0, |l| l.regions),
            bitmap_pages: intent.map_or(0, |l| l.pages()),
            marked_pages_at_crashes: 0,
            unflushed_writes_checked: 0,
            deferred_faults: 0,
            dropped_write_windows: 0,
            members_discarded: 0,
            restarts: 0,
            checksum_pages_refused: 0,
            checksum_pages_stale: 0,
            rebuilds_started: 0,
            rebuilds_done: 0,
            rebuild_steps_failed: 0,
            faulty_members: Vec::new(),
            read_errors_corrected: 0,
            violations: 0,
            violation_messages: Vec::new(),
            stats: Default::default(),
            cache_peak_stripes: 0,
            cached_stripes_lost_in_crashes: 0,
            members_lost_at_crashes: 0,
            ppl_records_applied: 0,
            ppl_rows_skipped_bytes: 0,
            ppl_parity_checked_at_rest_bytes: 0,
            failures_unrecorded_at_crashes: 0,
            wrong_reads: 0,
            wrong_bytes: 0,
            corrupted: Vec::new(),
            stored_corruptions: 0,
            scrub: None,
            check_after_scrub: None,
        }
    }

    pub fn ok(&self) -> bool {
        self.violations == 0
    }
}

const VIOLATION_MESSAGES_MAX: usize = 8;
/// How long a [`Fault::Replace`] or [`Fault::ReAdd`] waits before it tries
/// again, while the member is not yet failed and recorded.
const BRING_BACK_RETRY_NS: u64 = 1_000_000;
/// Stripes per step of a resync without a bitmap.
const RESYNC_STEP_STRIPES: u64 = 16;
/// Scrub steps in flight at once after a silent corruption.
const SCRUB_STEPS_IN_FLIGHT: u64 = 64;

enum SimEvent {
    /// A client submits its next request.
    Arrival,
    /// The service model completes I/O at this time.
    ServiceWake,
    Fault(Fault),
    /// Time to clear the write-intent bits of quiet regions.
    Sweep,
    /// The stripe cache's clock.
    Destage,
    /// The labels now record the member's failure (unless a crash came
    /// first: `epoch` counts crashes).
    LabelsWritten {
        member: u32,
        epoch: u64,
    },
    /// The host submits the rebuild's next step.
    RebuildStep,
}

struct Inflight {
    io: MemberIo,
    flush_mark: u64,
    issued_ns: u64,
    /// The member's device when issued ([`Simulation::devices`]).
    device: u64,
}

struct Outstanding {
    submitted_ns: u64,
    name: &'static str,
    writer: Option<u32>,
    fua: bool,
    read: Option<ReadExpect>,
    flush_covers: Option<Vec<u32>>,
    /// Volume upkeep (a sweep, a resync step), not a client's request.
    upkeep: bool,
    /// Where the request's latency goes in the statistics.
    latency: Option<LatencyOf>,
    /// A resync step; of this bitmap region, if any.
    resync: Option<Option<u64>>,
    /// A scrub step after a silent corruption: its report is collected.
    scrub: bool,
    /// A rebuild step: the next one follows it.
    rebuild: bool,
}

impl Outstanding {
    /// Volume upkeep: no client waits for it, no data of theirs rides on it.
    fn upkeep(submitted_ns: u64, name: &'static str) -> Outstanding {
        Outstanding {
            submitted_ns,
            name,
            writer: None,
            fua: false,
            read: None,
            flush_covers: None,
            upkeep: true,
            latency: None,
            resync: None,
            scrub: false,
            rebuild: false,
        }
    }
}

/// Produces the client requests, then the verify pass.
struct RequestGen {
    rng: Rng,
    remaining: u64,
    /// The verify pass's next read: (window, offset).
    verify_at: Option<(usize, u64)>,
    /// The workload's windows, or the whole volume.
    windows: Vec<(u64, u64)>,
    max_len_bytes: u64,
    mix: Mix,
    aligned_percent: u32,
}

impl RequestGen {
    /// The workload's requests over its windows (each checked to lie in
    /// the volume of `size` bytes), or over the whole volume.
    fn new(config: &SimConfig, size: u64, seed: u64) -> RequestGen {
        let w = &config.workload;
        let windows = if w.windows.is_empty() {
            vec![(0, size)]
        } else {
            w.windows.clone()
        };
        for &(start, len) in &windows {
            assert!(
                len > 0 && start.checked_add(len).is_some_and(|e| e <= size),
                "seed {seed}: window {start}+{len} outside the volume of {size} bytes"
            );
        }
        RequestGen {
            rng: Rng::stream(seed, Stream::Workload),
            remaining: w.requests,
            // With silent corruption, the verify pass comes after the scrub.
            verify_at: (w.verify_at_end && config.silent_corruption.is_none())
                .then_some((0, windows[0].0)),
            windows,
            max_len_bytes: w.max_len_bytes.max(1),
            mix: w.mix.clone(),
            aligned_percent: w.aligned_percent,
        }
    }

    fn next(&mut self) -> Option<Request> {
        if self.remaining > 0 {
            self.remaining -= 1;
            return Some(self.random());
        }
        let (i, at) = self.verify_at?;
        let Some(&(start, len)) = self.windows.get(i) else {
            self.verify_at = None;
            return None;
        };
        let end = start + len;
        let n = self.max_len_bytes.min(end - at);
        self.verify_at = if at + n >= end {
            Some((i + 1, self.windows.get(i + 1).map_or(0, |w| w.0)))
        } else {
            Some((i, at + n))
        };
        Some(Request::Read {
            offset_bytes: at,
            len_bytes: n,
        })
    }

    fn exhausted(&self) -> bool {
        self.remaining == 0 && self.verify_at.is_none_or(|(i, _)| i >= self.windows.len())
    }

    fn random(&mut self) -> Request {
        let r = &mut self.rng;
        let m = &self.mix;
        let total = m.read + m.write + m.write_zeroes + m.trim + m.flush;
        assert!(total > 0, "empty request mix");
        let mut pick = r.below(u64::from(total)) as u32;
        // One window: no draw, so that whole-volume runs keep their seeds.
        let (base, size) = match self.windows.len() {
            1 => self.windows[0],
            n => self.windows[r.below(n as u64) as usize],
        };
        // Lengths: mostly short, some up to the longest.
        let max = self.max_len_bytes.min(size).max(1);
        let len = match r.below(10) {
            0..=4 => r.range(1, max.min(4096)),
            _ => r.range(1, max),
        };
        let mut offset = base + r.below(size - len + 1);
        let mut len = len;
        if len >= 512 && r.chance(self.aligned_percent) {
            offset = offset / 512 * 512;
            len = len / 512 * 512;
        }
        let fua = r.chance(m.fua_percent);
        if pick < m.read {
            return Request::Read {
                offset_bytes: offset,
                len_bytes: len,
            };
        }
        pick -= m.read;
        if pick < m.write {
            return Request::Write {
                offset_bytes: offset,
                data: Bytes::from(r.bytes(len as usize)),
                fua,
            };
        }
        pick -= m.write;
        if pick < m.write_zeroes {
            return Request::WriteZeroes {
                offset_bytes: offset,
                len_bytes: len,
                fua,
            };
        }
        pick -= m.write_zeroes;
        if pick < m.trim {
            return Request::Trim {
                offset_bytes: offset,
                len_bytes: len,
            };
        }
        Request::Flush
    }
}

/// One simulated run of one volume.
pub struct Simulation {
    seed: u64,
    config: SimConfig,
    geometry: Geometry,
    clock: Clock,
    queue: EventQueue<SimEvent>,
    volume: Volume,
    members: Vec<SimMember>,
    /// Per slot, which device is in it: raised when a member comes back
    /// (a fresh device, or its own revived). The server sends an I/O to
    /// the device it was issued to, so one issued before a replacement
    /// never reaches the new device; here an I/O takes effect when it
    /// completes, and one whose device went away meanwhile fails.
    devices: Vec<u64>,
    service: Box<dyn ServiceModel>,
    latency_rng: Rng,
    fault_rng: Rng,
    oracle: Oracle,
    gen: RequestGen,
    /// Member I/O at the service model, by token (a crash empties it).
    inflight: BTreeMap<u64, Inflight>,
    next_token: u64,
    /// Times at which a `ServiceWake` is queued.
    wakes: std::collections::BTreeSet<u64>,
    outstanding: BTreeMap<RequestId, Outstanding>,
    /// Members the engine marked faulty (across crashes).
    known_faulty: Vec<bool>,
    /// Members whose failure the labels record: what a restart leaves out.
    labels_faulty: Vec<bool>,
    /// Members we made fail.
    injected: Vec<bool>,
    trace: TraceHash,
    report: Report,
    intent: Option<IntentLayout>,
    /// Member failures waiting for a resync to end.
    deferred: Vec<Fault>,
    /// Resync requests outstanding.
    resyncing: u64,
    /// Test support: the step from which to break an invariant on purpose.
    #[cfg(feature = "test-hooks")]
    break_at_step: Option<u64>,
    /// The workload's random requests are done: scheduled faults no longer
    /// fire (they never did past this point before silent corruption ran
    /// on from here).
    quiesced: bool,
    /// The reports of the scrub steps in flight, merged.
    scrub_tally: Option<CheckReport>,
    /// A [`Fault::Restart`] waits for the requests in flight; arrivals
    /// meanwhile are held, and go on after it.
    restart_pending: bool,
    arrivals_held: u64,
    /// The member a [`Fault::Restart`] discards while stopped.
    discard_at_restart: Option<u32>,
    /// The stop's own requests, and whether one of them failed.
    stop_steps: BTreeSet<RequestId>,
    stop_steps_failed: bool,
}

/// The volume as the configuration sets it up: its read policy, bitmap,
/// checksums (their pages written on the members, as `platter create`
/// writes them), stripe cache and log.
fn new_volume(
    config: &SimConfig,
    geometry: &Geometry,
    members: &mut [SimMember],
    seed: u64,
) -> (Volume, Option<IntentLayout>) {
    let n = geometry.members();
    let mut volume = Volume::new(
        geometry.clone(),
        vec![Health::Online; n as usize],
        Limits {
            max_requests: config.limits_max_requests,
        },
    );
    volume
        .set_read_policy(config.read_policy)
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let intent = IntentLayout::new(geometry, config.intent_region_stripes)
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    if let Some(layout) = intent {
        volume.enable_intent(layout, RegionSet::new(&layout), false);
    }
    if let Some(alg) = config.checksums {
        let layout = checksum_layout(geometry, alg, config.checksum_format);
        assert!(
            layout.format.area_bytes(layout.data_size_bytes) <= 64 << 20,
            "seed {seed}: checksum pages written at creation stay small"
        );
        for (m, member) in members.iter_mut().enumerate() {
            let area = created_checksum_area(&layout, m as u32, n);
            member.write_flushed(layout.area_offset_bytes, &area);
        }
        assert!(
            layout.area_offset_bytes >= INTENT_OFFSET_BYTES + intent.map_or(0, |l| l.area_bytes()),
            "seed {seed}: the checksums overlap the bitmap"
        );
        volume.enable_checksums(layout, checksum_limits(config));
    }
    if let Some(limits) = config.stripe_cache {
        volume.enable_stripe_cache(limits);
    }
    if let Some(layout) = config.ppl {
        volume.enable_ppl(layout, PPL_VOLUME_UUID);
    }
    (volume, intent)
}

impl Simulation {
    pub fn new(config: SimConfig, seed: u64) -> Simulation {
        let geometry = Geometry::new(config.geometry.clone())
            .unwrap_or_else(|e| panic!("seed {seed}: bad simulated geometry: {e}"));
        let n = geometry.members();
        let can_crash = config.faults.iter().any(|f| {
            matches!(
                f.fault,
                Fault::Crash | Fault::CrashLosingMember { .. } | Fault::Restart { .. }
            )
        });
        let spec = geometry.spec();
        let mut members: Vec<SimMember> = (0..n)
            .map(|m| {
                SimMember::new(
                    m,
                    spec.data_offset_bytes + spec.member_data_bytes[m as usize],
                    spec.data_offset_bytes,
                    can_crash,
                )
            })
            .collect();
        let oracle = Oracle::new(
            geometry.volume_size_bytes(),
            geometry.stripe_data_bytes(),
            geometry.level().is_parity(),
        );
        let gen = RequestGen::new(&config, geometry.volume_size_bytes(), seed);
        let (volume, intent) = new_volume(&config, &geometry, &mut members, seed);
        let report = Report::new(seed, config.beyond_budget(&geometry), intent);
        Simulation {
            seed,
            queue: EventQueue::new(config.max_queue_len),
            service: Box::new(
                SimpleService::new(config.latency.clone())
                    .with_member_extra_ns(config.member_extra_ns.clone()),
            ),
            config,
            geometry,
            clock: Clock::new(),
            volume,
            devices: vec![0; n as usize],
            members,
            latency_rng: Rng::stream(seed, Stream::Latency),
            fault_rng: Rng::stream(seed, Stream::Faults),
            oracle,
            gen,
            inflight: BTreeMap::new(),
            next_token: 0,
            wakes: Default::default(),
            outstanding: BTreeMap::new(),
            known_faulty: vec![false; n as usize],
            labels_faulty: vec![false; n as usize],
            injected: vec![false; n as usize],
            trace: TraceHash::new(mix64(seed)),
            report,
            intent,
            deferred: Vec::new(),
            resyncing: 0,
            #[cfg(feature = "test-hooks")]
            break_at_step: None,
            quiesced: false,
            scrub_tally: None,
            restart_pending: false,
            arrivals_held: 0,
            discard_at_restart: None,
            stop_steps: BTreeSet::new(),
            stop_steps_failed: false,
        }
    }

    /// Replaces the service model (issue #7: disk models).
    pub fn with_service_model(mut self, model: Box<dyn ServiceModel>) -> Simulation {
        self.service = model;
        self
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// Test support: from `step` on, at the first step with member I/O in
    /// flight, the volume's pending count is broken on purpose
    /// ([`Volume::break_pending_count_for_tests`]), so a test can show the
    /// invariant check run after every step fails the seed.
    #[cfg(feature = "test-hooks")]
    pub fn break_invariant_at_step(mut self, step: u64) -> Simulation {
        self.break_at_step = Some(step);
        self
    }

    /// A copy of member bytes (for tests that look behind the engine's
    /// back).
    pub fn member_read(&self, member: u32, offset_bytes: u64, len_bytes: u64) -> Vec<u8> {
        self.members[member as usize].read(offset_bytes, len_bytes)
    }

    /// Bytes the members hold in memory: a sparse member holds only the
    /// pages the run touched.
    pub fn member_bytes_held(&self) -> u64 {
        self.members.iter().map(|m| m.bytes_held()).sum()
    }

    fn violation(&mut self, what: String) {
        self.report.violations += 1;
        if self.report.violation_messages.len() < VIOLATION_MESSAGES_MAX {
            self.report.violation_messages.push(format!(
                "seed {} at {} ns: {what}",
                self.seed,
                self.clock.now_ns()
            ));
        }
    }

    /// Runs the workload to the end and reports.
    pub fn run(mut self) -> Report {
        for f in self.config.faults.clone() {
            self.queue.push(f.at_ns, SimEvent::Fault(f.fault));
        }
        match self.config.workload.arrival {
            Arrival::Closed { concurrency, .. } => {
                assert!(concurrency > 0, "a closed loop needs clients");
                for _ in 0..concurrency {
                    self.queue.push(0, SimEvent::Arrival);
                }
            }
            Arrival::Open { .. } => self.queue.push(0, SimEvent::Arrival),
        }
        if self.intent.is_some() && self.config.sweep_interval_ns > 0 {
            self.queue
                .push(self.config.sweep_interval_ns, SimEvent::Sweep);
        }
        if self.config.stripe_cache.is_some() && self.config.destage_interval_ns > 0 {
            self.queue
                .push(self.config.destage_interval_ns, SimEvent::Destage);
        }
        self.drive();
        if let Some(layout) = self.config.ppl {
            self.check_log_at_rest(layout);
        }
        if let Some(sc) = self.config.silent_corruption.clone() {
            self.silent_corruption(&sc);
        }
        if self.report.violations == 0 && !self.volume.is_idle() {
            self.violation("the volume is not idle after every request completed".into());
        }
        if !self.report.beyond_budget {
            // Within budget the engine must take out only failed members.
            for m in 0..self.known_faulty.len() {
                if self.known_faulty[m] && !self.injected[m] {
                    self.violation(format!("member {m} was marked faulty without a fault"));
                }
            }
        }
        self.tally_checksum_pages();
        self.report.end_ns = self.clock.now_ns();
        self.report.stats = self.volume.stats();
        self.report.trace_hash = self.trace.finish();
        self.report
    }

    /// Runs the event loop until every request has completed, the
    /// workload has nothing left to send, and the volume is idle.
    fn drive(&mut self) {
        // Whatever was submitted outside an event (the steps after the
        // workload) starts now.
        self.pump();
        // The volume's own requests (the stripe cache's write-outs) run on
        // after the clients' have completed.
        while !(self.gen.exhausted() && self.outstanding.is_empty() && self.volume.is_idle()) {
            self.report.steps += 1;
            assert!(
                self.report.steps <= self.config.max_steps,
                "seed {}: more than {} steps",
                self.seed,
                self.config.max_steps
            );
            let Some((at_ns, ev)) = self.queue.pop() else {
                let stuck = self.outstanding.len();
                self.violation(format!(
                    "stalled: {stuck} requests outstanding and nothing left to happen"
                ));
                break;
            };
            self.clock.advance_to(at_ns);
            self.step_event(at_ns, ev);
            self.pump();
            #[cfg(feature = "test-hooks")]
            if self.break_at_step.is_some_and(|s| self.report.steps >= s)
                && self.volume.break_pending_count_for_tests()
            {
                self.break_at_step = None;
            }
            // Every step: the volume's invariants hold between calls.
            self.volume.check_invariants();
            self.report.cache_peak_stripes = self
                .report
                .cache_peak_stripes
                .max(self.volume.cached_stripes());
            self.restart_when_quiet();
        }
    }

    /// What one event does.
    fn step_event(&mut self, at_ns: u64, ev: SimEvent) {
        match ev {
            SimEvent::Arrival => self.arrival(),
            SimEvent::ServiceWake => self.service_wake(at_ns),
            // Past the workload's end (silent corruption runs on from
            // there) scheduled faults fire no more, as before.
            SimEvent::Fault(_) if self.quiesced => {}
            SimEvent::Fault(f) => self.fault(f),
            SimEvent::LabelsWritten { member, epoch } => {
                if epoch == self.report.crashes {
                    self.trace.fold(&[11, at_ns, u64::from(member)]);
                    self.labels_faulty[member as usize] = true;
                    self.volume.failure_recorded(member);
                }
            }
            SimEvent::Sweep => {
                self.submit_upkeep(Request::Sweep { all: false }, None);
                // Only while something else can still happen: a lone
                // sweep chain must not hide a stall.
                if !self.queue.is_empty() {
                    self.queue.push(
                        self.clock.now_ns() + self.config.sweep_interval_ns,
                        SimEvent::Sweep,
                    );
                }
            }
            SimEvent::RebuildStep => self.rebuild_step(),
            SimEvent::Destage => {
                self.submit_upkeep(Request::CacheTick { all: false }, None);
                // As for sweeps: only while something else can happen.
                if !self.queue.is_empty() {
                    self.queue.push(
                        self.clock.now_ns() + self.config.destage_interval_ns,
                        SimEvent::Destage,
                    );
                }
            }
        }
    }

    fn arrival(&mut self) {
        if self.restart_pending {
            self.arrivals_held += 1;
            return;
        }
        let Some(req) = self.gen.next() else {
            return;
        };
        if let Arrival::Open { mean_gap_ns } = self.config.workload.arrival {
            if !self.gen.exhausted() {
                let gap = self.latency_rng.range(1, 2 * mean_gap_ns.max(1));
                self.queue
                    .push(self.clock.now_ns() + gap, SimEvent::Arrival);
            }
        }
        self.submit(req);
    }

    fn submit(&mut self, req: Request) {
        let (offset_bytes, len_bytes) = req.range();
        let kind = match &req {
            Request::Read { .. } => 1,
            Request::Write { .. } => 2,
            Request::WriteZeroes { .. } => 3,
            Request::Trim { .. } => 4,
            Request::Flush => 5,
            _ => 6,
        };
        let fua = matches!(
            req,
            Request::Write { fua: true, .. } | Request::WriteZeroes { fua: true, .. }
        );
        let read = matches!(req, Request::Read { .. })
            .then(|| self.oracle.expect(offset_bytes, len_bytes));
        let flush_covers = matches!(req, Request::Flush).then(|| self.oracle.flush_covers());
        let writer = self.oracle.apply(&req);
        let name = req.name();
        let latency = req.latency_of();
        let id = self.volume.submit(req);
        self.trace.fold(&[
            1,
            self.clock.now_ns(),
            id.0,
            kind,
            offset_bytes,
            len_bytes,
            u64::from(fua),
        ]);
        self.report.submitted += 1;
        let o = Outstanding {
            submitted_ns: self.clock.now_ns(),
            name,
            writer,
            fua,
            read,
            flush_covers,
            upkeep: false,
            latency,
            resync: None,
            scrub: false,
            rebuild: false,
        };
        self.track(id, o);
    }

    fn track(&mut self, id: RequestId, o: Outstanding) {
        let prev = self.outstanding.insert(id, o);
        assert!(prev.is_none(), "request id {id:?} reused");
    }

    /// Submits volume upkeep: it changes no client data, and no client is
    /// waiting for it.
    fn submit_upkeep(&mut self, req: Request, resync: Option<Option<u64>>) -> RequestId {
        let name = req.name();
        let id = self.volume.submit(req);
        let region = resync.flatten().unwrap_or(u64::MAX);
        self.trace.fold(&[10, self.clock.now_ns(), id.0, region]);
        if resync.is_some() {
            self.resyncing += 1;
        }
        let o = Outstanding {
            resync,
            ..Outstanding::upkeep(self.clock.now_ns(), name)
        };
        self.track(id, o);
        id
    }

    fn upkeep_done(
        &mut self,
        id: RequestId,
        o: Outstanding,
        result: Result<Reply, platter_core::volume::VolumeError>,
    ) {
        if o.rebuild {
            return self.rebuild_step_done(result);
        }
        if result.is_err() && self.stop_steps.contains(&id) {
            self.stop_steps_failed = true;
        }
        if let Err(e) = &result {
            if !self.report.beyond_budget {
                let msg = format!("{} failed: {:?}: {}", o.name, e.kind, e.message);
                self.violation(msg);
            }
        }
        if o.scrub {
            if let Ok(Reply::Checked(r)) = &result {
                let t = self.scrub_tally.get_or_insert_with(CheckReport::default);
                t.mismatched_stripes.extend(&r.mismatched_stripes);
                t.unchecked_stripes += r.unchecked_stripes;
                t.wrong_members.extend(&r.wrong_members);
                t.unlocated_stripes.extend(&r.unlocated_stripes);
            } else if result.is_ok() {
                self.violation(format!("{} completed without its report", o.name));
            }
            return;
        }
        let Some(region) = o.resync else { return };
        if let (Ok(_), Some(region)) = (result, region) {
            self.volume.resynced(region);
            self.report.resynced_regions += 1;
        }
        self.resyncing -= 1;
        if self.resyncing == 0 {
            for f in std::mem::take(&mut self.deferred) {
                self.fault(f);
            }
        }
    }

    /// Moves everything the volume has to say into the simulation.
    fn pump(&mut self) {
        platter_core::drive::pump(self);
    }

    fn issue(&mut self, io: MemberIo) {
        let now = self.clock.now_ns();
        let (kind, off, len) = op_words(&io.op);
        self.trace
            .fold(&[2, now, io.id.0, u64::from(io.member), kind, off, len]);
        self.report.member_ios += 1;
        let flush_mark = self.members[io.member as usize].flush_mark();
        let token = self.next_token;
        self.next_token += 1;
        self.service
            .submit(now, io.member, token, &io.op, &mut self.latency_rng);
        self.inflight.insert(
            token,
            Inflight {
                device: self.devices[io.member as usize],
                io,
                flush_mark,
                issued_ns: now,
            },
        );
        self.arm_wake();
    }

    /// Queues a wake-up for the service model's next completion.
    fn arm_wake(&mut self) {
        if let Some(t) = self.service.next_event_ns() {
            let t = t.max(self.clock.now_ns());
            if self.wakes.insert(t) {
                self.queue.push(t, SimEvent::ServiceWake);
            }
        }
    }

    fn service_wake(&mut self, at_ns: u64) {
        self.wakes.remove(&at_ns);
        let now = self.clock.now_ns();
        for token in self.service.advance(now, &mut self.latency_rng) {
            // Unknown tokens were lost in a crash.
            if let Some(f) = self.inflight.remove(&token) {
                self.volume
                    .record_latency(LatencyOf::Member(f.io.member), now - f.issued_ns);
                self.io_done(f.io, f.flush_mark, f.device);
            }
        }
        self.arm_wake();
    }

    fn io_done(&mut self, io: MemberIo, flush_mark: u64, device: u64) {
        let now = self.clock.now_ns();
        let result = if device == self.devices[io.member as usize] {
            self.members[io.member as usize].perform(now, &io.op, flush_mark, &mut self.fault_rng)
        } else {
            Err(platter_core::member_io::IoError::new(
                platter_core::member_io::IoErrorKind::Gone,
                "the device went away while the I/O was out",
            ))
        };
        let (kind, off, len) = op_words(&io.op);
        self.trace.fold(&[
            3,
            now,
            io.id.0,
            u64::from(io.member),
            kind,
            off,
            len,
            u64::from(result.is_err()),
        ]);
        if result.is_err() {
            self.report.member_io_errors += 1;
        }
        self.volume.io_done(io.id, result);
    }

    fn engine_event(&mut self, ev: Event) {
        #[allow(unreachable_patterns)]
        match ev {
            Event::MemberFaulty { member, .. } => {
                self.trace
                    .fold(&[6, self.clock.now_ns(), u64::from(member)]);
                if !self.known_faulty[member as usize] {
                    self.known_faulty[member as usize] = true;
                    self.report.faulty_members.push(member);
                }
                self.queue.push(
                    self.clock.now_ns() + self.config.label_write_ns,
                    SimEvent::LabelsWritten {
                        member,
                        epoch: self.report.crashes,
                    },
                );
            }
            Event::RebuildDone { member } => {
                self.trace
                    .fold(&[17, self.clock.now_ns(), u64::from(member)]);
                self.report.rebuilds_done += 1;
                // The labels now hold it as active: a restart assembles it.
                self.labels_faulty[member as usize] = false;
                self.known_faulty[member as usize] = false;
            }
            Event::ReadErrorCorrected {
                member,
                offset_bytes,
                ..
            } => {
                self.trace
                    .fold(&[9, self.clock.now_ns(), u64::from(member), offset_bytes]);
                self.report.read_errors_corrected += 1;
                // Simulated disks fail reads only when told to.
                if !self.injected[member as usize] {
                    self.violation(format!(
                        "member {member} had a read error corrected without a fault"
                    ));
                }
            }
            other => {
                // Newer engine events: fold their words into the trace.
                let text = format!("{other:?}");
                self.trace
                    .fold(&[7, self.clock.now_ns(), text.len() as u64]);
                self.trace.fold_bytes(text.as_bytes());
            }
        }
    }

    fn completion(&mut self, c: Completion) {
        let now = self.clock.now_ns();
        let o = self.outstanding.remove(&c.id).unwrap_or_else(|| {
            panic!(
                "seed {}: completion of unknown request {:?}",
                self.seed, c.id
            )
        });
        self.report.completed += 1;
        let code = match &c.result {
            Ok(_) => 0,
            Err(e) => match e.kind {
                ErrorKind::Io => 1,
                ErrorKind::OutOfRange => 2,
                ErrorKind::Busy => 3,
                ErrorKind::NoSpace => 4,
            },
        };
        self.trace.fold(&[4, now, c.id.0, code]);
        if let Some(of) = o.latency {
            self.volume.record_latency(of, now - o.submitted_ns);
        }
        if o.upkeep {
            return self.upkeep_done(c.id, o, c.result);
        }
        if let Arrival::Closed { think_ns, .. } = self.config.workload.arrival {
            let think = if think_ns > 0 {
                self.latency_rng.below(think_ns + 1)
            } else {
                0
            };
            self.queue.push(now + think, SimEvent::Arrival);
        }
        let what = || {
            format!(
                "{} (request {}, submitted at {} ns)",
                o.name, c.id.0, o.submitted_ns
            )
        };
        match c.result {
            Err(e) => {
                self.report.failed += 1;
                if let Some(w) = o.writer {
                    self.oracle.failed(w);
                }
                let allowed = self.report.beyond_budget && e.kind == ErrorKind::Io;
                if !allowed {
                    let msg = format!("{} failed: {:?}: {}", what(), e.kind, e.message);
                    self.violation(msg);
                }
            }
            Ok(reply) => {
                if let Some(w) = o.writer {
                    self.oracle.acked(w, o.fua);
                }
                if let Some(covers) = &o.flush_covers {
                    self.oracle.flushed(covers);
                }
                match (o.read, reply) {
                    (Some(expect), Reply::Data(data)) => {
                        let got = data.to_bytes();
                        self.trace.fold(&[5, crate::trace::hash_bytes(&got)]);
                        self.report.reads_checked += 1;
                        self.report.bytes_checked += got.len() as u64;
                        if let Err(msg) = self.oracle.check(&expect, &got) {
                            self.report.wrong_reads += 1;
                            self.report.wrong_bytes += self.oracle.wrong_bytes(&expect, &got);
                            let msg = format!("{}: {msg}", what());
                            self.violation(msg);
                        }
                    }
                    (Some(_), Reply::Done) => {
                        let msg = format!("{} completed without data", what());
                        self.violation(msg);
                    }
                    (None, Reply::Data(_)) => {
                        let msg = format!("{} completed with data", what());
                        self.violation(msg);
                    }
                    (None, Reply::Done) => {}
                    (_, other) => {
                        let msg =
                            format!("{} completed with an unexpected reply {other:?}", what());
                        self.violation(msg);
                    }
                }
            }
        }
    }

    fn fault(&mut self, fault: Fault) {
        let now = self.clock.now_ns();
        if !self.outstanding.is_empty() || !self.gen.exhausted() {
            self.report.faults_fired += 1;
        }
        match fault {
            Fault::Die { member } | Fault::FailOneIo { member } if self.resyncing > 0 => {
                self.trace.fold(&[8, now, 4, u64::from(member)]);
                self.report.deferred_faults += 1;
                self.deferred.push(fault);
            }
            Fault::Die { member } => {
                self.trace.fold(&[8, now, 1, u64::from(member)]);
                self.injected[member as usize] = true;
                self.members[member as usize].die_at(now);
            }
            Fault::FailOneIo { member } => {
                self.trace.fold(&[8, now, 2, u64::from(member)]);
                self.injected[member as usize] = true;
                self.members[member as usize].fail_next_io();
            }
            Fault::CorruptOneRead { member } => {
                self.trace.fold(&[8, now, 3, u64::from(member)]);
                self.members[member as usize].corrupt_next_read();
            }
            Fault::Crash => self.crash(None, false),
            Fault::CrashLosingMember { member } => self.crash(Some(member), false),
            Fault::CorruptStored { member } => self.corrupt_stored(member, now),
            Fault::Replace { .. } | Fault::ReAdd { .. } => self.bring_back(fault, now),
            Fault::Discard { member } => self.discard(member, now),
            Fault::DropWrites { member, for_ns } => {
                // Tag 18: writes dropped from now.
                self.trace.fold(&[18, now, u64::from(member), for_ns]);
                self.injected[member as usize] = true;
                self.report.dropped_write_windows += 1;
                self.members[member as usize].drop_writes_until(now.saturating_add(for_ns));
            }
            Fault::Restart { discard } => {
                self.trace
                    .fold(&[19, now, discard.map_or(u64::MAX, u64::from)]);
                self.restart_pending = true;
                if let Some(m) = discard {
                    self.injected[m as usize] = true;
                    self.discard_at_restart = Some(m);
                }
            }
        }
    }

    /// Adds the volume's refused and stale checksum pages to the report
    /// (the volume's counts start afresh at each assembly).
    fn tally_checksum_pages(&mut self) {
        for m in 0..self.geometry.members() {
            if let Some(st) = self.volume.checksum_stats(m) {
                self.report.checksum_pages_refused += st.pages_refused;
                self.report.checksum_pages_stale += st.pages_stale;
            }
        }
    }

    /// [`Fault::Discard`]: zeros from the checksum area (or the data area)
    /// to the member's end.
    fn discard(&mut self, member: u32, now: u64) {
        let spec = self.geometry.spec();
        let from = match self.config.checksums {
            Some(alg) => {
                checksum_layout(&self.geometry, alg, self.config.checksum_format).area_offset_bytes
            }
            None => spec.data_offset_bytes,
        };
        // Tag 20: a member discarded.
        self.trace.fold(&[20, now, u64::from(member), from]);
        self.injected[member as usize] = true;
        self.report.members_discarded += 1;
        self.members[member as usize].discard_from(from);
    }

    /// [`Fault::Restart`], once no client request is in flight: the stop's
    /// flush, bitmap sweep and second flush (which writes the records the
    /// first made), then a new volume from the members.
    fn restart_when_quiet(&mut self) {
        if !self.restart_pending || self.outstanding.values().any(|o| !o.upkeep) {
            return;
        }
        if !self.outstanding.is_empty() || self.resyncing > 0 {
            return;
        }
        if self.config.stripe_cache.is_some() {
            self.submit_upkeep(Request::CacheTick { all: true }, None);
        }
        // A clean stop makes every acknowledged write durable: it must
        // read back after the start, whatever a member dropped.
        let covers = self.oracle.flush_covers();
        let mut flushed = true;
        for req in [Request::Flush, Request::Sweep { all: true }, Request::Flush] {
            let id = self.submit_upkeep(req, None);
            self.stop_steps.insert(id);
            self.drain_upkeep();
            flushed &= !self.stop_steps_failed;
        }
        if flushed {
            self.oracle.flushed(&covers);
        }
        self.stop_steps.clear();
        self.stop_steps_failed = false;
        // A member's firmware that dropped writes is reset with the host.
        for m in &mut self.members {
            m.stop_dropping_writes();
        }
        self.report.restarts += 1;
        if let Some(m) = self.discard_at_restart.take() {
            let now = self.clock.now_ns();
            self.discard(m, now);
        }
        self.crash(None, true);
        self.restart_pending = false;
        // The requests that waited go on.
        for _ in 0..std::mem::take(&mut self.arrivals_held) {
            self.queue.push(self.clock.now_ns(), SimEvent::Arrival);
        }
    }

    /// Runs the event loop until no request is outstanding (the stop's
    /// own steps; arrivals wait meanwhile).
    fn drain_upkeep(&mut self) {
        self.pump();
        while !self.outstanding.is_empty() || !self.volume.is_idle() {
            let Some((at_ns, ev)) = self.queue.pop() else {
                self.violation("stalled while stopping for a restart".into());
                return;
            };
            self.clock.advance_to(at_ns);
            self.step_event(at_ns, ev);
            self.pump();
            self.volume.check_invariants();
        }
    }

    /// [`Fault::Replace`] and [`Fault::ReAdd`]: as the server does them,
    /// only for a member failed and recorded, one rebuild at a time and
    /// none during a resync; otherwise the fault waits and tries again.
    fn bring_back(&mut self, fault: Fault, now: u64) {
        let (member, fresh) = match fault {
            Fault::Replace { member } => (member, true),
            Fault::ReAdd { member } => (member, false),
            _ => unreachable!("only replace and re-add bring a member back"),
        };
        let m = member as usize;
        let out = matches!(self.volume.health()[m], Health::Faulty | Health::Missing)
            && self.labels_faulty[m];
        if !out || self.volume.rebuild_progress().is_some() || self.resyncing > 0 {
            self.queue
                .push(now + BRING_BACK_RETRY_NS, SimEvent::Fault(fault));
            return;
        }
        // Tag 15: a member brought back (1 a fresh device, 0 its own).
        self.trace
            .fold(&[15, now, u64::from(member), u64::from(fresh)]);
        let partial = !fresh && self.intent.is_some();
        self.devices[m] += 1;
        if fresh {
            let spec = self.geometry.spec();
            self.members[m] = SimMember::new(
                member,
                spec.data_offset_bytes + spec.member_data_bytes[m],
                spec.data_offset_bytes,
                self.members[m].tracks_undo(),
            );
        } else {
            self.members[m].revive();
        }
        let started = if partial {
            self.volume.start_partial_rebuild(member, 0)
        } else {
            self.volume.start_rebuild(member, 0)
        };
        if let Err(e) = started {
            return self.violation(format!("member {member}'s rebuild refused: {}", e.message));
        }
        self.report.rebuilds_started += 1;
        self.queue.push(now, SimEvent::RebuildStep);
    }

    /// The host's next rebuild step, if a rebuild runs and no step is out.
    fn rebuild_step(&mut self) {
        if self.quiesced {
            return;
        }
        let Some(id) = self
            .volume
            .rebuild_step(self.config.rebuild.stripes_per_step)
        else {
            return;
        };
        let name = "rebuild step";
        self.trace.fold(&[16, self.clock.now_ns(), id.0]);
        let o = Outstanding {
            rebuild: true,
            ..Outstanding::upkeep(self.clock.now_ns(), name)
        };
        self.track(id, o);
    }

    /// A rebuild step ended. One fails only when a member failed under it
    /// (the target's write, or sources beyond what the level covers); the
    /// host then tries again later, as the server does, while the rebuild
    /// lasts and the workload runs.
    fn rebuild_step_done(&mut self, result: Result<Reply, platter_core::volume::VolumeError>) {
        let mut gap = self.config.rebuild.gap_ns;
        if let Err(e) = result {
            self.report.rebuild_steps_failed += 1;
            if !self.injected.iter().any(|&i| i) {
                self.violation(format!(
                    "a rebuild step failed without a fault: {}",
                    e.message
                ));
            }
            gap = gap.saturating_mul(10);
        }
        if self.volume.rebuild_progress().is_some() && !self.gen.exhausted() {
            self.queue
                .push(self.clock.now_ns() + gap, SimEvent::RebuildStep);
        }
    }

    /// [`Fault::CorruptStored`].
    fn corrupt_stored(&mut self, member: u32, now: u64) {
        let data_bytes = self.geometry.spec().member_data_bytes[member as usize];
        let mut rng = Rng::stream(mix64(self.seed ^ now), Stream::Corruption);
        let block = rng.below(data_bytes / 512);
        let (within, mask) = corruption_mask(&mut rng, 512);
        let at = self.geometry.spec().data_offset_bytes + block * 512 + within;
        self.members[member as usize].corrupt_stored(at, &mask);
        self.report.stored_corruptions += 1;
        // A fault the engine may meet: with checksums a read of the block
        // is corrected, and a write that must read it first (RAID-5/6's
        // read-modify-write) fails the member.
        self.injected[member as usize] = true;
        // Tag 14: a block corrupted while serving.
        self.trace
            .fold(&[14, now, u64::from(member), at, mask.len() as u64]);
    }

    /// A power failure, or (`clean`) the assembly after a clean stop:
    /// nothing unflushed, and the bitmap's regions are what an absent
    /// member missed, not owed a resync.
    fn crash(&mut self, lose: Option<u32>, clean: bool) {
        let now = self.clock.now_ns();
        let (lost, unflushed) = self.lose_host_state(now);
        if let Some(m) = lose {
            // The member's disk dies with the host: assembled as missing.
            self.report.members_lost_at_crashes += 1;
            self.injected[m as usize] = true;
            self.labels_faulty[m as usize] = true;
            self.members[m as usize].die_at(now);
            if !self.known_faulty[m as usize] {
                self.known_faulty[m as usize] = true;
                self.report.faulty_members.push(m);
            }
        }
        if let Some(layout) = self.config.ppl {
            self.apply_ppl(layout);
        }
        let unknown = self.oracle.crash();
        // Tag 12: a crash (9 is a corrected read error).
        self.trace.fold(&[12, now, lost, unknown]);
        self.restart_volume();
        self.resync_after_crash(&unflushed, clean);
        // Closed loop: the clients whose requests were lost start again.
        if matches!(self.config.workload.arrival, Arrival::Closed { .. }) {
            for _ in 0..lost {
                self.queue.push(now + 1, SimEvent::Arrival);
            }
        }
        // Open loop: the arrival chain is still in the queue.
    }

    /// What the host loses: I/O in flight, requests outstanding (their
    /// count returned), the stripe cache, and on each member what a
    /// flush did not cover (returned as (member, offset, length), from
    /// the members the labels hold in use).
    fn lose_host_state(&mut self, now: u64) -> (u64, Vec<(u32, u64, u64)>) {
        self.service.power_fail(now);
        self.inflight.clear();
        self.report.crashes += 1;
        self.report.failures_unrecorded_at_crashes += self
            .known_faulty
            .iter()
            .zip(&self.labels_faulty)
            .filter(|(&known, &recorded)| known && !recorded)
            .count() as u64;
        // The stripe cache is memory: it goes with the host.
        self.report.cached_stripes_lost_in_crashes += self.volume.cached_stripes();
        self.tally_checksum_pages();
        let lost = self.outstanding.len() as u64;
        self.report.lost += lost;
        self.outstanding.clear();
        // What the crash may undo: member writes not covered by a flush.
        let unflushed: Vec<(u32, u64, u64)> = self
            .members
            .iter()
            .enumerate()
            .filter(|(m, _)| !self.labels_faulty[*m])
            .flat_map(|(m, member)| {
                member
                    .unflushed_ranges()
                    .map(move |(off, len)| (m as u32, off, len))
            })
            .collect();
        for m in &mut self.members {
            self.report.writes_lost_in_crashes +=
                m.crash(self.config.crash_undo, &mut self.fault_rng);
        }
        (lost, unflushed)
    }

    /// A new volume over the members, as assembly makes it: those the
    /// labels hold failed are missing.
    fn restart_volume(&mut self) {
        let health = self
            .labels_faulty
            .iter()
            .map(|&f| if f { Health::Missing } else { Health::Online })
            .collect();
        self.volume = Volume::new(
            self.geometry.clone(),
            health,
            Limits {
                max_requests: self.config.limits_max_requests,
            },
        );
        self.volume
            .set_read_policy(self.config.read_policy)
            .expect("checked at the start");
        if let Some(limits) = self.config.stripe_cache {
            self.volume.enable_stripe_cache(limits);
        }
        if let Some(layout) = self.config.ppl {
            self.volume.enable_ppl(layout, PPL_VOLUME_UUID);
        }
    }

    /// The bitmap as the members hold it now, OR-ed over those in use;
    /// the regions it marks are resynced before anything else (unless
    /// `clean`). Without a bitmap, every stripe of a redundant volume.
    fn resync_after_crash(&mut self, unflushed: &[(u32, u64, u64)], clean: bool) {
        let Some(layout) = self.intent else {
            if self.geometry.redundancy() > 0 && !clean {
                // No bitmap: every stripe, as md does without one.
                let stripes = self.geometry.stripes();
                for first_stripe in (0..stripes).step_by(RESYNC_STEP_STRIPES as usize) {
                    self.submit_upkeep(
                        Request::Maintain {
                            first_stripe,
                            stripe_count: RESYNC_STEP_STRIPES.min(stripes - first_stripe),
                            action: Maintenance::Resync,
                        },
                        Some(None),
                    );
                }
            }
            return;
        };
        let mut bits = RegionSet::new(&layout);
        for (m, member) in self.members.iter().enumerate() {
            if !self.labels_faulty[m] {
                bits.union_with(&RegionSet::from_bytes(
                    &layout,
                    &member.read(INTENT_OFFSET_BYTES, layout.area_bytes()),
                ));
            }
        }
        self.check_unflushed_marked(&layout, &bits, unflushed);
        let mut pages: Vec<u64> = bits.iter().map(|r| r / (INTENT_PAGE_BYTES * 8)).collect();
        pages.dedup();
        self.report.marked_pages_at_crashes += pages.len() as u64;
        self.volume.enable_intent(layout, bits.clone(), !clean);
        if let Some(alg) = self.config.checksums {
            let layout = checksum_layout(&self.geometry, alg, self.config.checksum_format);
            self.volume
                .enable_checksums(layout, checksum_limits(&self.config));
        }
        for region in bits.iter().filter(|_| !clean) {
            let (first_stripe, stripe_count) = layout.stripes_of(region);
            self.submit_upkeep(
                Request::Maintain {
                    first_stripe,
                    stripe_count,
                    action: Maintenance::Resync,
                },
                Some(Some(region)),
            );
        }
    }
}

/// The simulated volume's identity in its log records and sealed pages.
const PPL_VOLUME_UUID: [u8; 16] = SIM_VOLUME_UUID;
pub const SIM_VOLUME_UUID: [u8; 16] = *b"platter-sim-ppl!";

fn checksum_limits(config: &SimConfig) -> integrity::Limits {
    integrity::Limits {
        pages_per_member: config.checksum_cache_pages,
    }
}

/// What `platter create` writes in a new member's checksum area: every
/// sealed page with the entries of zeroed blocks, and empty write records.
fn created_checksum_area(layout: &integrity::Layout, slot: u32, members: u32) -> Vec<u8> {
    use integrity::format::{PageId, RecordPage, SealedPage, RECORDS_PER_PAGE};
    let mut area = Vec::new();
    if !layout.format.is_sealed() {
        return area;
    }
    let blocks = layout.data_size_bytes / integrity::BLOCK_BYTES;
    let id = |slot, index| PageId {
        volume_uuid: layout.volume_uuid,
        slot,
        index,
    };
    for p in 0..layout.pages() {
        area.extend(SealedPage::zeroed(layout.algorithm, id(slot, p), blocks));
    }
    // This member keeps the records of the one before it.
    let described = (slot + members - 1) % members;
    for q in 0..layout.format.record_pages(layout.data_size_bytes) {
        let gens = [0; RECORDS_PER_PAGE as usize];
        area.extend(RecordPage::encode(&gens, id(described, q)));
    }
    area
}

impl Simulation {
    /// After a crash, before the volume is assembled again: the partial
    /// parity log applied as `platter serve` applies it (the same
    /// `platter_core::ppl::recover`), then emptied.
    fn apply_ppl(&mut self, layout: platter_core::ppl::Layout) {
        let present: Vec<bool> = self.labels_faulty.iter().map(|&f| !f).collect();
        let records = self.log_records(layout, &present);
        let members = &self.members;
        let recovered =
            platter_core::ppl::recover(&self.geometry, &present, records, &mut |m, at, len| {
                Ok(members[m as usize].read(at, len))
            })
            .unwrap_or_else(|e| panic!("seed {}: the log did not apply: {e}", self.seed));
        self.report.ppl_records_applied += recovered.records;
        self.report.ppl_rows_skipped_bytes += recovered.rows_skipped_bytes;
        for f in recovered.fixes {
            self.members[f.member as usize].write_flushed(f.offset_bytes, &f.data);
        }
        let zeros = vec![0u8; layout.len_bytes as usize];
        for (m, member) in self.members.iter_mut().enumerate() {
            if present[m] {
                member.write_flushed(layout.offset_bytes, &zeros);
            }
        }
    }

    /// The records of the log areas of the `present` members.
    fn log_records(
        &self,
        layout: platter_core::ppl::Layout,
        present: &[bool],
    ) -> Vec<platter_core::ppl::Record> {
        let il = self.geometry.interleave_bytes();
        let mut records = Vec::new();
        for (m, member) in self.members.iter().enumerate() {
            if present[m] {
                let area = member.read(layout.offset_bytes, layout.len_bytes);
                records.extend(platter_core::ppl::parse_area(&area, &PPL_VOLUME_UUID, il));
            }
        }
        records
    }

    /// At rest (every request done), applying the log the members hold
    /// must change no parity byte: a restart applies it, and a row whose
    /// parity it changed rebuilds wrong once a member is lost, in cells
    /// nobody was writing. Checked after every run with a log, degraded
    /// runs included (the rows a lost member's cells decide are left out,
    /// as at a restart).
    fn check_log_at_rest(&mut self, layout: platter_core::ppl::Layout) {
        // Beyond the budget, or with a member failed while serving, a
        // write that failed on a member may leave its stripe disagreeing.
        let health = self.volume.health();
        if self.report.beyond_budget
            || health
                .iter()
                .any(|h| !matches!(h, Health::Online | Health::Missing))
        {
            return;
        }
        let present: Vec<bool> = health.iter().map(|h| *h == Health::Online).collect();
        let records = self.log_records(layout, &present);
        let members = &self.members;
        let recovered =
            platter_core::ppl::recover(&self.geometry, &present, records, &mut |m, at, len| {
                Ok(members[m as usize].read(at, len))
            })
            .unwrap_or_else(|e| panic!("seed {}: the log at rest did not apply: {e}", self.seed));
        for f in &recovered.fixes {
            let len = f.data.len() as u64;
            let now = self.members[f.member as usize].read(f.offset_bytes, len);
            self.report.ppl_parity_checked_at_rest_bytes += len;
            let wrong = now.iter().zip(&f.data).filter(|(a, b)| a != b).count();
            if wrong > 0 {
                return self.violation(format!(
                    "at rest, applying the log would change {wrong} of {len} parity bytes of \
                     member {} at {}: a restart would leave parity disagreeing with the data",
                    f.member, f.offset_bytes
                ));
            }
        }
    }

    /// The bitmap's promise, checked at a crash: every data write a member
    /// had not flushed (which the crash may have undone, kept, or kept in
    /// part) lies in a region the members' bitmap marks, so the resync
    /// covers it. A bitmap page written at the wrong offset, or not
    /// written, breaks it even when no later read happens to notice.
    fn check_unflushed_marked(
        &mut self,
        layout: &IntentLayout,
        bits: &RegionSet,
        unflushed: &[(u32, u64, u64)],
    ) {
        let data_offset = self.geometry.spec().data_offset_bytes;
        for &(member, off, len) in unflushed {
            if off < data_offset || len == 0 {
                continue; // the bitmap itself
            }
            self.report.unflushed_writes_checked += 1;
            let (first, last) = member_range_stripes(&self.geometry, off - data_offset, len);
            for region in layout.region_of(first)..=layout.region_of(last) {
                if !bits.contains(region) {
                    self.violation(format!(
                        "member {member}: an unflushed write of {len} bytes at {off} (stripes \
                         {first}..={last}) lies in region {region} (bitmap page {}), which the \
                         bitmap on the members does not mark",
                        region / (INTENT_PAGE_BYTES * 8)
                    ));
                    return;
                }
            }
        }
    }
}

impl Simulation {
    /// [`SilentCorruption`], once the workload's random requests are done.
    fn silent_corruption(&mut self, sc: &SilentCorruption) {
        self.quiesced = true;
        // The stripe cache's data goes to the members first: a destage
        // that read a corrupted block to fill in the rest of its stripe
        // would compute parity over it and hide the corruption for good
        // (as it would in md; not what this fault is about).
        if self.config.stripe_cache.is_some() {
            self.submit_upkeep(Request::CacheTick { all: true }, None);
            self.drive();
            let left = self.volume.cached_stripes();
            if left > 0 {
                self.violation(format!(
                    "{left} stripes still cached after a destage of all"
                ));
            }
        }
        self.corrupt(sc.stripes);
        let scrub = self.scrub_all(sc.scrub);
        let after = self.scrub_all(Maintenance::Check);
        self.check_scrub(sc.scrub, &scrub, &after);
        self.report.scrub = Some(scrub);
        self.report.check_after_scrub = Some(after);
        // The verify pass, held back until now.
        if self.config.workload.verify_at_end {
            self.gen.verify_at = Some((0, self.gen.windows[0].0));
            let clients = match self.config.workload.arrival {
                Arrival::Closed { concurrency, .. } => concurrency,
                Arrival::Open { .. } => 1,
            };
            for _ in 0..clients {
                self.queue.push(self.clock.now_ns(), SimEvent::Arrival);
            }
            self.drive();
        }
    }

    /// Changes the stored bytes of one block in each of `count` random
    /// stripes, if the level can locate a wrong block and every member is
    /// in use.
    fn corrupt(&mut self, count: u64) {
        let g = self.geometry.clone();
        let locates = match g.level() {
            Level::Raid6 => true,
            Level::Mirror | Level::Raid10 => g.copies() >= 3,
            _ => false,
        };
        // A scrub checks no stripe with a member out of use (failed,
        // missing or being rebuilt): nothing could be found. Nor with a
        // member whose failure the engine has yet to see (dead since its
        // last I/O, or its next I/O to fail): the scrub's reads would
        // find it, take it out of use and check nothing (seed 479 of
        // silent_corruption_is_located_and_repaired, an open loop whose
        // last requests missed the member that had died).
        let now = self.clock.now_ns();
        let all_in_use = self.volume.health().iter().all(|&h| h == Health::Online)
            && !self.members.iter().any(|m| m.failure_pending(now));
        if !locates || !all_in_use {
            return;
        }
        let mut rng = Rng::stream(self.seed, Stream::Corruption);
        let stripes = g.stripes();
        let mut picked = BTreeSet::new();
        while (picked.len() as u64) < count.min(stripes) {
            picked.insert(rng.below(stripes));
        }
        let il = g.interleave_bytes();
        let k = u64::from(g.data_per_stripe());
        let chunks = g.volume_size_bytes() / il;
        for stripe in picked {
            let (member, row) = if g.level().is_parity() {
                // A data block, P or Q.
                (rng.below(u64::from(g.members())) as u32, stripe)
            } else {
                // One copy of one chunk (RAID-10's last stripe may hold
                // fewer than k chunks).
                let d = rng.below((chunks - stripe * k).min(k)) as u32;
                let copies: Vec<_> = g.data_locations(stripe, d).collect();
                let loc = copies[rng.below(copies.len() as u64) as usize];
                (loc.member, loc.row)
            };
            let (within, mask) = corruption_mask(&mut rng, il);
            let at = g.member_offset_bytes(row, within);
            self.members[member as usize].corrupt_stored(at, &mask);
            // Tag 13: a silent corruption.
            self.trace
                .fold(&[13, now, stripe, u64::from(member), at, mask.len() as u64]);
            self.report.corrupted.push((stripe, member));
        }
    }

    /// Runs `action` over every stripe, a few steps at a time; returns
    /// the steps' reports merged, sorted.
    fn scrub_all(&mut self, action: Maintenance) -> CheckReport {
        let stripes = self.geometry.stripes();
        self.scrub_tally = Some(CheckReport {
            first_stripe: 0,
            stripe_count: stripes,
            ..CheckReport::default()
        });
        let firsts: Vec<u64> = (0..stripes).step_by(RESYNC_STEP_STRIPES as usize).collect();
        for wave in firsts.chunks(SCRUB_STEPS_IN_FLIGHT as usize) {
            for &first_stripe in wave {
                let id = self.submit_upkeep(
                    Request::Maintain {
                        first_stripe,
                        stripe_count: RESYNC_STEP_STRIPES.min(stripes - first_stripe),
                        action,
                    },
                    None,
                );
                self.outstanding.get_mut(&id).expect("just submitted").scrub = true;
            }
            self.drive();
        }
        let mut t = self.scrub_tally.take().expect("set above");
        t.mismatched_stripes.sort_unstable();
        t.wrong_members.sort_unstable();
        t.unlocated_stripes.sort_unstable();
        t
    }

    /// The scrub after a silent corruption found what was corrupted (and,
    /// for a repair, named the member), nothing else; and the check after
    /// it finds the volume consistent.
    fn check_scrub(&mut self, action: Maintenance, scrub: &CheckReport, after: &CheckReport) {
        let corrupted = self.report.corrupted.clone();
        let repair = action == Maintenance::Repair;
        for &(stripe, member) in &corrupted {
            if scrub.mismatched_stripes.binary_search(&stripe).is_err() {
                self.violation(format!(
                    "the scrub ({action:?}) missed stripe {stripe}, corrupted on member {member}"
                ));
            } else if repair
                && scrub
                    .wrong_members
                    .binary_search(&(stripe, member))
                    .is_err()
            {
                let named: Vec<u32> = scrub.wrong_members_of(stripe).collect();
                self.violation(format!(
                    "the repair did not name member {member} of stripe {stripe}, which was \
                     corrupted there (it named {named:?})"
                ));
            }
        }
        if !corrupted.is_empty() && scrub.unchecked_stripes > 0 {
            self.violation(format!(
                "the scrub left {} stripes unchecked with every member in use",
                scrub.unchecked_stripes
            ));
        }
        // Beyond the budget a failed write may leave a stripe disagreeing.
        if self.report.beyond_budget {
            return;
        }
        let bad: BTreeSet<u64> = corrupted.iter().map(|c| c.0).collect();
        for &stripe in &scrub.mismatched_stripes {
            if !bad.contains(&stripe) {
                self.violation(format!(
                    "the scrub ({action:?}) found stripe {stripe} mismatched, which was not \
                     corrupted"
                ));
            }
        }
        if repair {
            for &(stripe, member) in &scrub.wrong_members {
                if !corrupted.contains(&(stripe, member)) {
                    self.violation(format!(
                        "the repair named member {member} of stripe {stripe}, which was not \
                         corrupted"
                    ));
                }
            }
            if !scrub.unlocated_stripes.is_empty() {
                self.violation(format!(
                    "the repair could not locate the wrong member of stripes {:?}",
                    scrub.unlocated_stripes
                ));
            }
        }
        if !after.mismatched_stripes.is_empty() {
            self.violation(format!(
                "after the scrub ({action:?}), a check still finds stripes {:?} mismatched",
                after.mismatched_stripes
            ));
        }
    }
}

/// Where in a chunk of `il` bytes a silent corruption lands, and the mask
/// XOR-ed there (no zero byte: every byte in the range changes): one
/// flipped bit, a few bytes, a sector, or the whole chunk (a misdirected
/// or lost write of it).
fn corruption_mask(rng: &mut Rng, il: u64) -> (u64, Vec<u8>) {
    let sector = 512.min(il);
    let (within, len) = match rng.below(4) {
        0 => return (rng.below(il), vec![1 << rng.below(8)]),
        1 => {
            let len = rng.range(1, il.min(64));
            (rng.below(il - len + 1), len)
        }
        2 => (rng.below(il / sector) * sector, sector),
        _ => (0, il),
    };
    let mask = (0..len).map(|_| rng.range(1, 255) as u8).collect();
    (within, mask)
}

/// The stripes whose chunks lie in `len` bytes at `data_offset` of a
/// member's data area (at least one, at most the volume's).
fn member_range_stripes(g: &Geometry, data_offset: u64, len: u64) -> (u64, u64) {
    let il = g.interleave_bytes();
    let (a, b) = (data_offset / il, (data_offset + len - 1) / il);
    let last = g.stripes() - 1;
    let (first, end) = match g.level() {
        // A row of a member holds one chunk of one stripe (a mirror's
        // stripe is one chunk).
        Level::Raid5 | Level::Raid6 | Level::Mirror => (a, b),
        // md's near layout: row r holds chunk slots r*n..r*n+n, slot s is
        // a copy of chunk s / copies, and a stripe is k chunks.
        Level::Raid10 => {
            let n = u64::from(g.members());
            let c = u64::from(g.copies());
            let k = u64::from(g.data_per_stripe());
            (a * n / c / k, ((b + 1) * n - 1) / c / k)
        }
        // No redundancy, no bitmap: every stripe could be any.
        Level::Concat | Level::Stripe => (0, last),
    };
    (first.min(last), end.min(last))
}

fn op_words(op: &MemberOp) -> (u64, u64, u64) {
    match op {
        MemberOp::Read {
            offset_bytes,
            len_bytes,
        } => (1, *offset_bytes, *len_bytes),
        MemberOp::Write { offset_bytes, data } => (2, *offset_bytes, data.len() as u64),
        MemberOp::Trim {
            offset_bytes,
            len_bytes,
        } => (3, *offset_bytes, *len_bytes),
        MemberOp::Flush => (4, 0, 0),
    }
}

impl platter_core::drive::Host for Simulation {
    type Engine = Volume;
    fn engine(&mut self) -> &mut Volume {
        &mut self.volume
    }
    fn issue(&mut self, io: MemberIo) {
        Simulation::issue(self, io)
    }
    fn complete(&mut self, done: Completion) {
        self.completion(done)
    }
    fn event(&mut self, event: Event) {
        self.engine_event(event)
    }
}
