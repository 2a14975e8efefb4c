//! A drive model from measurement (`platter sim calibrate`), in the manner
//! of DIXtrac and Skippy but through reads alone: every figure comes from
//! the times of queue-depth-1 commands, never from the drive's own
//! address translation or mode pages, so it works on any block device,
//! and on a modelled drive in virtual time for the closed-loop test.
//!
//! What is measured, in this order (docs/simulator.md has the why):
//! 1. **Cache hits**: a sector read twice, a 64-sector read twice: the
//!    hit overhead and the bus time per sector.
//! 2. **Rotation**: single-sector misses at one long seek distance, the
//!    target's angle random: their spread is one revolution.
//! 3. **Zones**: sequential rate at points across the disk (two lengths,
//!    so the start-up cancels); the effective sectors per track is the
//!    rate times the revolution (skews included, so the model has none);
//!    boundaries found by bisection.
//! 4. **Positioning by distance**: misses `d` tracks behind a miss, the
//!    target's angle random: the midrange minus half a revolution is the
//!    miss overhead plus the seek.
//! 5. **Cache**: how far read-ahead runs, how many segments, how large.
//! 6. **Write-back** (only when writes are allowed): a write that
//!    completes long before the media could have taken it.
//!
//! The model folds surfaces into tracks (one surface; its "cylinder" is a
//! track) and the miss overhead into the seek curve, which is what can
//! be seen from outside.

pub mod model;
pub mod probe;

pub use model::{Measured, MeasuredZone};

use model::{interpolate, zone_end};
pub use probe::{ModelProbe, Probe, ProbeError};

use crate::rng::Rng;
use std::fmt;

#[derive(Clone, Debug)]
pub struct Options {
    /// Samples per measured point (positioning distances, majority votes
    /// scale from it); more is slower and more precise.
    pub samples: u32,
    /// Give up (writing nothing) once this much time went on the target.
    pub budget_ms: f64,
    /// May write (the data already there) to measure write-back.
    pub allow_write: bool,
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            samples: 32,
            budget_ms: 600_000.0,
            allow_write: false,
            seed: 1,
        }
    }
}

#[derive(Debug)]
pub enum CalibrateError {
    Probe(ProbeError),
    Budget {
        phase: Phase,
        spent_ms: f64,
        budget_ms: f64,
    },
    TooSmall {
        blocks: u64,
    },
    /// The target does not behave like a rotating disk.
    NotADisk(String),
}

impl fmt::Display for CalibrateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CalibrateError::Probe(e) => write!(f, "{e}"),
            CalibrateError::Budget {
                phase,
                spent_ms,
                budget_ms,
            } => write!(
                f,
                "the time budget ({:.0} s) ran out while measuring {phase} after {:.0} s; \
                 no model written (raise --budget or lower --samples)",
                budget_ms / 1e3,
                spent_ms / 1e3
            ),
            CalibrateError::TooSmall { blocks } => write!(
                f,
                "{blocks} sectors is too small to calibrate (at least {MIN_BLOCKS})"
            ),
            CalibrateError::NotADisk(m) => write!(f, "{m}"),
        }
    }
}

impl From<ProbeError> for CalibrateError {
    fn from(e: ProbeError) -> Self {
        CalibrateError::Probe(e)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Hits,
    Rotation,
    Zones,
    Positioning,
    Cache,
    WriteBack,
}

impl Phase {
    pub const ALL: [Phase; 6] = [
        Phase::Hits,
        Phase::Rotation,
        Phase::Zones,
        Phase::Positioning,
        Phase::Cache,
        Phase::WriteBack,
    ];
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Hits => "cache hits",
            Phase::Rotation => "the rotation period",
            Phase::Zones => "zones",
            Phase::Positioning => "seek times",
            Phase::Cache => "the cache",
            Phase::WriteBack => "write-back",
        })
    }
}

/// 64 MiB: room for the long seeks and the zone reads.
pub const MIN_BLOCKS: u64 = 1 << 17;
/// Sectors of the long reads that measure a zone's rate.
const ZONE_SHORT: u32 = 512;
const ZONE_LONG: u32 = 2048;
/// Points across the disk where the rate is measured.
const ZONE_POINTS: u64 = 64;
/// Bisection steps per zone boundary (to 1/4096 of the gap).
const BOUNDARY_STEPS: u32 = 12;
/// Adjacent points whose rates differ by more than this are in
/// different zones: closer for sequential rates than for the pace of
/// read-ahead, which track switches inside its short run disturb.
const ZONE_TOLERANCE: f64 = 0.015;
const PACE_TOLERANCE: f64 = 0.04;
/// Search bounds of the cache measurements.
const MAX_READ_AHEAD: u64 = 1 << 16;
const MAX_SEGMENTS: u64 = 64;

/// Measures the drive behind `probe`. `progress` hears each phase and
/// the fraction of the whole done.
pub fn calibrate(
    probe: &mut dyn Probe,
    opts: &Options,
    progress: &mut dyn FnMut(Phase, f64),
) -> Result<Measured, CalibrateError> {
    let blocks = probe.blocks();
    if blocks < MIN_BLOCKS {
        return Err(CalibrateError::TooSmall { blocks });
    }
    let mut c = Cal {
        probe,
        rng: Rng::new(opts.seed),
        opts: opts.clone(),
        progress,
        blocks,
        phase: Phase::Hits,
        done: 0.0,
        reads: 0,
        hit_ms: 0.0,
        bus_ms: 0.0,
        rotation_ms: 0.0,
        read_ahead: 0,
        zones: Vec::new(),
        positioning: Vec::new(),
    };
    c.enter(Phase::Hits, 0.0);
    c.hits()?;
    c.enter(Phase::Rotation, 0.05);
    c.rotation()?;
    c.enter(Phase::Cache, 0.15);
    let (read_ahead_blocks, segments, segment_blocks) = c.cache()?;
    c.read_ahead = read_ahead_blocks;
    c.enter(Phase::Zones, 0.25);
    c.zones()?;
    c.enter(Phase::Positioning, 0.45);
    c.positioning = c.positioning()?;
    let (write_back, write_overhead_ms) = if opts.allow_write {
        c.enter(Phase::WriteBack, 0.97);
        let (on, overhead) = c.write_back()?;
        (Some(on), Some(overhead))
    } else {
        (None, None)
    };
    c.report(c.phase, 1.0);
    Ok(Measured {
        blocks,
        hit_ms: c.hit_ms,
        bus_ms_per_sector: c.bus_ms,
        rotation_ms: c.rotation_ms,
        zones: c.zones,
        positioning: c.positioning,
        read_ahead_blocks,
        segments,
        segment_blocks,
        write_back,
        write_overhead_ms,
        spent_ms: c.probe.elapsed_ms(),
        reads: c.reads,
    })
}

struct Cal<'a> {
    probe: &'a mut dyn Probe,
    rng: Rng,
    opts: Options,
    progress: &'a mut dyn FnMut(Phase, f64),
    blocks: u64,
    phase: Phase,
    done: f64,
    reads: u64,
    hit_ms: f64,
    bus_ms: f64,
    rotation_ms: f64,
    read_ahead: u32,
    zones: Vec<MeasuredZone>,
    positioning: Vec<(u32, f64)>,
}

/// The smallest and the largest of `v`.
fn spread(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

fn median(v: &mut [f64]) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

impl Cal<'_> {
    fn enter(&mut self, phase: Phase, done: f64) {
        self.phase = phase;
        self.report(phase, done);
    }

    /// Progress never moves back, whatever a phase's estimate says.
    fn report(&mut self, phase: Phase, done: f64) {
        self.done = self.done.max(done.min(1.0));
        (self.progress)(phase, self.done);
    }

    fn check_budget(&self) -> Result<(), CalibrateError> {
        let spent_ms = self.probe.elapsed_ms();
        if spent_ms > self.opts.budget_ms {
            return Err(CalibrateError::Budget {
                phase: self.phase,
                spent_ms,
                budget_ms: self.opts.budget_ms,
            });
        }
        Ok(())
    }

    fn read(&mut self, lbn: u64, count: u32, idle_ms: f64) -> Result<f64, CalibrateError> {
        self.check_budget()?;
        let count = u64::from(count).clamp(1, self.blocks);
        let lbn = lbn.min(self.blocks - count);
        self.reads += 1;
        Ok(self.probe.read(lbn, count as u32, idle_ms)?)
    }

    fn random_lbn(&mut self, room: u64) -> u64 {
        self.rng.below(self.blocks - room.min(self.blocks - 1))
    }

    /// Whether a single-sector read took no longer than a hit can: the
    /// hit's time plus half the shortest sector time on the media.
    fn is_hit(&self, t_ms: f64) -> bool {
        let slot_ms = match self.zones.iter().map(|z| z.blocks_per_track).max() {
            Some(spt) if self.rotation_ms > 0.0 => self.rotation_ms / f64::from(spt),
            _ => 0.01,
        };
        t_ms <= self.hit_ms + self.bus_ms + 0.5 * slot_ms
    }

    /// A hit's time for 1 and for 64 sectors: the fastest of a read
    /// repeated at once and a read of what read-ahead brought in after
    /// an idle spell (a drive may give up a request's own sectors to its
    /// read-ahead, or not read ahead at all).
    fn hits(&mut self) -> Result<(), CalibrateError> {
        const IDLE_MS: f64 = 100.0;
        let mut best = [f64::INFINITY; 2];
        for (i, n) in [1u32, 64].into_iter().enumerate() {
            let (mut again, mut ahead) = (Vec::new(), Vec::new());
            for _ in 0..5 {
                let a = self.random_lbn(u64::from(n) + 1);
                self.read(a, n, 0.0)?;
                again.push(self.read(a, n, 0.0)?);
                let b = self.random_lbn(u64::from(n) + 1);
                self.read(b, 1, 0.0)?;
                ahead.push(self.read(b + 1, n, IDLE_MS)?);
            }
            best[i] = median(&mut again).min(median(&mut ahead));
        }
        let [h1, h64] = best;
        self.bus_ms = ((h64 - h1) / 63.0).max(0.0);
        self.hit_ms = (h1 - self.bus_ms).max(0.0);
        Ok(())
    }

    /// Misses at one long distance (a tenth of the disk) from the middle
    /// of the disk, the target's sector random within a few thousand:
    /// seek time nearly constant, rotational wait uniform over a
    /// revolution. The range of `n` uniform samples is `(n-1)/(n+1)` of
    /// the interval on average.
    fn rotation(&mut self) -> Result<(), CalibrateError> {
        let n = (self.opts.samples * 8).max(64);
        let far = self.blocks / 10;
        let region = self.blocks / 200;
        let base = self.blocks * 2 / 5;
        let mut times = Vec::new();
        let mut tries = 0;
        while times.len() < n as usize && tries < 4 * n {
            tries += 1;
            let a = base + self.rng.below(region);
            let ta = self.read(a, 1, 0.0)?;
            let b = a - far - self.rng.below(8192.min(far / 2));
            let t = self.read(b, 1, 0.0)?;
            if self.is_hit(ta) || self.is_hit(t) {
                continue;
            }
            times.push(t);
        }
        if times.len() < 16 {
            return Err(CalibrateError::NotADisk(format!(
                "reads {far} sectors apart hit the cache every time: the target caches \
                 everything it reads (a file in the page cache?); calibrate models hard disks"
            )));
        }
        let (lo, hi) = spread(&times);
        let k = times.len() as f64;
        let rotation = (hi - lo) * (k + 1.0) / (k - 1.0);
        if !(2.0..=40.0).contains(&rotation) {
            return Err(CalibrateError::NotADisk(format!(
                "reads {far} sectors apart took {lo:.3} to {hi:.3} ms: no revolution of \
                 2-40 ms in their spread; calibrate models rotating disks"
            )));
        }
        // A revolution spreads the waits evenly: half of them lie in the
        // middle half of the range. A few slow outliers over a flat
        // distribution (flash, a cache, a busy host) do not.
        let mut sorted = times.clone();
        sorted.sort_by(f64::total_cmp);
        let q = |f: f64| sorted[((sorted.len() - 1) as f64 * f) as usize];
        let iqr = q(0.75) - q(0.25);
        if iqr < 0.3 * (hi - lo) {
            return Err(CalibrateError::NotADisk(format!(
                "reads {far} sectors apart took {lo:.3} to {hi:.3} ms, half of them within \
                 {iqr:.3} ms: not the even spread of a revolution; calibrate models rotating \
                 disks"
            )));
        }
        self.rotation_ms = rotation;
        Ok(())
    }

    /// Sectors per track at `lbn`, and whether they are effective (the
    /// sequential rate times the revolution, track switches included) or
    /// the media's own (the pace of read-ahead, where the bus is slower
    /// than the media and hides them from a sequential read).
    fn spt_at(&mut self, lbn: u64) -> Result<(f64, bool), CalibrateError> {
        let room = 5 * 16384 + 8192 + u64::from(4 * ZONE_LONG) + 256;
        let lbn = lbn.min(self.blocks - room);
        let rate = |c: &mut Self, short: u32, long: u32| -> Result<f64, CalibrateError> {
            c.read(lbn, 256, 0.0)?;
            let t_short = c.read(lbn + 256, short, 0.0)?;
            let b = lbn + 8192;
            c.read(b, 256, 0.0)?;
            let t_long = c.read(b + 256, long, 0.0)?;
            let dt = t_long - t_short;
            if dt <= 0.0 {
                return Err(CalibrateError::NotADisk(format!(
                    "reading {} more sectors at sector {lbn} took no longer: not a disk's \
                     sequential rate; calibrate models rotating disks",
                    long - short
                )));
            }
            Ok(f64::from(long - short) / dt)
        };
        let per_ms = rate(self, ZONE_SHORT, ZONE_LONG)?;
        let bus_bound = self.bus_ms > 0.0 && per_ms * self.bus_ms > 0.9;
        if !bus_bound || self.read_ahead < 16 {
            // Long enough that a track switch more or less is noise.
            let per_ms = rate(self, ZONE_LONG, 3 * ZONE_LONG)?;
            return Ok((per_ms * self.rotation_ms, true));
        }
        // A read of a sector read-ahead is bringing in completes when it
        // arrives: two such reads at different distances give the pace.
        let (k1, k2) = (
            u64::from(self.read_ahead / 8).max(1),
            u64::from(self.read_ahead - 1),
        );
        let mut paces = Vec::new();
        for i in 0..5u64 {
            let a = lbn + 16384 * i;
            self.read(a, 1, 0.0)?;
            let t1 = self.read(a + k1, 1, 0.0)?;
            let b = a + 8192;
            self.read(b, 1, 0.0)?;
            let t2 = self.read(b + k2, 1, 0.0)?;
            if t2 > t1 {
                paces.push((k2 - k1) as f64 / (t2 - t1));
            }
        }
        if paces.is_empty() {
            return Ok((per_ms * self.rotation_ms, true));
        }
        Ok((median(&mut paces) * self.rotation_ms, false))
    }

    fn zones(&mut self) -> Result<(), CalibrateError> {
        let points: Vec<u64> = (0..ZONE_POINTS)
            .map(|i| self.blocks * (2 * i + 1) / (2 * ZONE_POINTS))
            .collect();
        let mut spts = Vec::new();
        for (i, &p) in points.iter().enumerate() {
            spts.push(self.spt_at(p)?);
            self.report(Phase::Zones, 0.25 + 0.1 * i as f64 / points.len() as f64);
        }
        let differ = |a: (f64, bool), b: (f64, bool)| {
            let tol = if a.1 && b.1 {
                ZONE_TOLERANCE
            } else {
                PACE_TOLERANCE
            };
            (a.0 - b.0).abs() > tol * a.0.max(b.0)
        };
        let zone = |first_lbn: u64, run: &mut Vec<(f64, bool)>| {
            let mut v: Vec<f64> = run.iter().map(|r| r.0).collect();
            MeasuredZone {
                first_lbn,
                blocks_per_track: (median(&mut v).round() as u32).max(1),
                effective: run.iter().filter(|r| r.1).count() * 2 >= run.len(),
            }
        };
        // Runs of points with one rate; a boundary between runs is
        // bisected between its two points.
        let mut zones = Vec::new();
        let mut first = 0;
        let mut run = vec![spts[0]];
        for i in 1..points.len() {
            if !differ(spts[i - 1], spts[i]) {
                run.push(spts[i]);
                continue;
            }
            let (left, right) = (spts[i - 1].0, spts[i].0);
            let (mut lo, mut hi) = (points[i - 1], points[i]);
            for _ in 0..BOUNDARY_STEPS {
                let mid = lo + (hi - lo) / 2;
                let s = self.spt_at(mid)?.0;
                if (s - left).abs() <= (s - right).abs() {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            zones.push(zone(first, &mut run));
            first = hi;
            run = vec![spts[i]];
            self.report(Phase::Zones, 0.35 + 0.1 * i as f64 / points.len() as f64);
        }
        zones.push(zone(first, &mut run));
        self.zones = zones;
        Ok(())
    }

    /// The zone holding `lbn`.
    fn zone_of(&self, lbn: u64) -> usize {
        self.zones.partition_point(|z| z.first_lbn <= lbn) - 1
    }

    fn zone_end(&self, i: usize) -> u64 {
        zone_end(&self.zones, i, self.blocks)
    }

    /// Track number of `lbn` in the model's geometry (whole tracks per
    /// zone, the last one partial).
    fn track_of(&self, lbn: u64) -> u64 {
        let mut track = 0;
        for (i, z) in self.zones.iter().enumerate() {
            let spt = u64::from(z.blocks_per_track);
            let end = self.zone_end(i);
            if lbn < end {
                return track + (lbn - z.first_lbn) / spt;
            }
            track += (end - z.first_lbn).div_ceil(spt);
        }
        unreachable!("lbn {lbn} past the disk")
    }

    /// First LBN and length of model track `t`.
    fn track_span(&self, t: u64) -> (u64, u64) {
        let mut first_track = 0;
        for (i, z) in self.zones.iter().enumerate() {
            let spt = u64::from(z.blocks_per_track);
            let end = self.zone_end(i);
            let tracks = (end - z.first_lbn).div_ceil(spt);
            if t < first_track + tracks {
                let start = z.first_lbn + (t - first_track) * spt;
                return (start, spt.min(end - start));
            }
            first_track += tracks;
        }
        unreachable!("track {t} past the disk")
    }

    /// Miss overhead plus seek over `d` tracks, for distances from one
    /// track to the whole stroke.
    fn positioning(&mut self) -> Result<Vec<(u32, f64)>, CalibrateError> {
        let tracks = self.track_of(self.blocks - 1) + 1;
        let mut distances = vec![1u64, 2, 3, 4, 5, 6, 8];
        while let Some(&d) = distances.last() {
            let next = (d as f64 * 1.4).ceil() as u64;
            if next >= tracks - 1 {
                break;
            }
            distances.push(next);
        }
        distances.retain(|&d| d < tracks);
        if distances.last() != Some(&(tracks - 1)) {
            distances.push(tracks - 1);
        }
        let samples = self.opts.samples.max(8) as usize;
        let mut out = Vec::new();
        for (i, &d) in distances.iter().enumerate() {
            let mut times = Vec::new();
            let mut tries = 0;
            while times.len() < samples && tries < 4 * samples {
                tries += 1;
                // From a track at least `d` in, to a random sector `d`
                // tracks behind it (behind, so read-ahead never has it).
                let t_from = d + self.rng.below(tracks - d);
                let (start, len) = self.track_span(t_from);
                let a = start + self.rng.below(len);
                let ta = self.read(a, 1, 0.0)?;
                let (s2, len2) = self.track_span(t_from - d);
                let b = s2 + self.rng.below(len2);
                let t = self.read(b, 1, 0.0)?;
                if self.is_hit(ta) || self.is_hit(t) {
                    continue;
                }
                let spt = self.zones[self.zone_of(b)].blocks_per_track;
                times.push(t - self.rotation_ms / f64::from(spt) - self.bus_ms);
            }
            if times.len() >= 4 {
                let (lo, hi) = spread(&times);
                let m = ((lo + hi) / 2.0 - self.rotation_ms / 2.0).max(0.0);
                out.push((d.min(u64::from(u32::MAX)) as u32, m));
            }
            self.report(
                Phase::Positioning,
                0.45 + 0.5 * (i + 1) as f64 / distances.len() as f64,
            );
        }
        if out.is_empty() {
            return Err(CalibrateError::NotADisk(
                "every read at every distance hit the cache: no seek times to measure; calibrate \
                 models rotating disks"
                    .into(),
            ));
        }
        Ok(out)
    }

    /// Majority of three: `trial` says whether its read hit.
    fn vote(
        &mut self,
        trial: &mut dyn FnMut(&mut Self) -> Result<bool, CalibrateError>,
    ) -> Result<bool, CalibrateError> {
        let mut yes = 0;
        for _ in 0..3 {
            if trial(self)? {
                yes += 1;
            }
        }
        Ok(yes >= 2)
    }

    /// The largest `x` in `1..=max` for which `hit(x)` holds, `hit`
    /// holding below some threshold and not above it; 0 when `hit(1)`
    /// fails.
    fn largest(
        &mut self,
        max: u64,
        hit: &mut dyn FnMut(&mut Self, u64) -> Result<bool, CalibrateError>,
    ) -> Result<u64, CalibrateError> {
        if !hit(self, 1)? {
            return Ok(0);
        }
        let mut lo = 1;
        let mut hi = loop {
            let next = (lo * 2).min(max);
            if !hit(self, next)? {
                break next;
            }
            if next == max {
                return Ok(max);
            }
            lo = next;
        };
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if hit(self, mid)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    fn cache(&mut self) -> Result<(u32, u32, u32), CalibrateError> {
        let settle_ms = 8.0 * self.rotation_ms;
        // Read-ahead: after a one-sector read and a long idle, is the
        // sector `k` past it already in the buffer?
        let read_ahead = self.largest(MAX_READ_AHEAD, &mut |c, k| {
            c.vote(&mut |c| {
                let a = c.random_lbn(k + 1);
                c.read(a, 1, 0.0)?;
                let t = c.read(a + k, 1, settle_ms)?;
                Ok(c.is_hit(t))
            })
        })?;
        // Segments: after reads at `n` far-apart places, is the first
        // still in the buffer? (Its read-ahead, when there is one: a
        // drive may give up the request's own sector to its read-ahead.)
        let probe_at = u64::from(read_ahead > 0);
        let segments = self.largest(MAX_SEGMENTS, &mut |c, n| {
            c.vote(&mut |c| {
                let first = c.random_lbn(2);
                c.read(first, 1, 0.0)?;
                for _ in 1..n {
                    let o = c.random_lbn(1);
                    c.read(o, 1, settle_ms)?;
                }
                let t = c.read(first + probe_at, 1, settle_ms)?;
                Ok(c.is_hit(t))
            })
        })?;
        // Segment size: after a read of `s` sectors, is its first sector
        // still in the buffer?
        let segment = if segments == 0 {
            0
        } else {
            self.largest(MAX_READ_AHEAD, &mut |c, s| {
                c.vote(&mut |c| {
                    let a = c.random_lbn(s);
                    c.read(a, s as u32, 0.0)?;
                    let t = c.read(a, 1, 0.0)?;
                    Ok(c.is_hit(t))
                })
            })?
        };
        let segment = segment.max(read_ahead + 1).min(MAX_READ_AHEAD);
        Ok((read_ahead as u32, segments as u32, segment as u32))
    }

    /// Writes of what a sector held, a third of the stroke from where
    /// the heads are (a read there just before): a write-through drive
    /// pays its overhead, the seek and the rotation; one that
    /// acknowledges from its buffer only its overhead and the bus.
    /// Answers write-back and the write's overhead.
    fn write_back(&mut self) -> Result<(bool, f64), CalibrateError> {
        let tracks = self.track_of(self.blocks - 1) + 1;
        let d = (tracks / 3).max(1);
        let mut times = Vec::new();
        let mut slots = Vec::new();
        for _ in 0..self.opts.samples.clamp(8, 64) {
            self.check_budget()?;
            let t_from = d + self.rng.below(tracks - d);
            let (s2, len2) = self.track_span(t_from - d);
            let b = s2 + self.rng.below(len2);
            self.reads += 1;
            self.probe.keep(b, 1)?;
            let (start, len) = self.track_span(t_from);
            let a = start + self.rng.below(len);
            self.read(a, 1, 0.0)?;
            self.reads += 1;
            times.push(self.probe.write_kept(0.0)?);
            let spt = self.zones[self.zone_of(b)].blocks_per_track;
            slots.push(self.rotation_ms / f64::from(spt));
        }
        let (lo, hi) = spread(&times);
        let m = median(&mut times);
        if m < self.rotation_ms / 2.0 {
            return Ok((true, (m - self.bus_ms).max(0.0)));
        }
        // The model's seek is the read's positioning less its overhead.
        let seek = interpolate(&self.positioning, d.min(u64::from(u32::MAX)) as u32) - self.hit_ms;
        let slot = median(&mut slots);
        let overhead = (lo + hi) / 2.0 - self.rotation_ms / 2.0 - slot - self.bus_ms - seek;
        Ok((false, overhead.max(0.0)))
    }
}
