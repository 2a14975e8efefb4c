//! One modelled disk drive: command overheads, the mechanism (seek, head
//! switch, write settle, exact rotational position), the bus transfer, a
//! segmented cache with read-ahead and optional write-back, and an
//! on-board queue (FCFS or shortest positioning time first).
//!
//! Times are milliseconds (`f64`) on the drive's clock, which the caller
//! drives forward; the model never reads a wall clock and draws no
//! random numbers, so a run is a pure function of its inputs. The
//! rotational position at time `t` is `t / period` (mod 1): slot 0 of
//! every track passes under the heads at `t = 0`.
//!
//! A command's whole timeline is computed when the drive starts it.
//! Background work (read-ahead after a read, destaging a write-back
//! write) is a timeline too; the next command cuts read-ahead short at
//! the sector boundary where it starts, and waits for a destage.

use super::layout::{Layout, Pbn};
use super::seek::SeekCurve;
use std::collections::VecDeque;

/// Command processing overheads (ms), DiskSim's names.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overheads {
    pub per_request: f64,
    pub read_hit_after_read: f64,
    pub read_hit_after_write: f64,
    pub read_miss_after_read: f64,
    pub read_miss_after_write: f64,
    pub write_hit_after_read: f64,
    pub write_hit_after_write: f64,
    pub write_miss_after_read: f64,
    pub write_miss_after_write: f64,
    pub read_completion: f64,
    pub write_completion: f64,
    pub data_prep: f64,
    pub first_reselect: f64,
    pub other_reselect: f64,
    pub read_disconnect_after_read: f64,
    pub read_disconnect_after_write: f64,
    pub write_disconnect: f64,
    /// A write disconnects before taking any data (seen in one HP disk).
    pub extra_write_disconnect: Option<ExtraDisconnect>,
    /// Least time from command to media for a non-sequential write.
    pub min_seek_delay: f64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExtraDisconnect {
    pub command: f64,
    pub disconnect: f64,
    pub inter_disconnect: f64,
    pub second_disconnect: f64,
    pub seek_delta: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadAhead {
    None,
    /// To the end of the track holding the request's last sector.
    TrackEnd,
    /// To the end of its cylinder.
    CylinderEnd,
    /// Until the segment is full (or the read-ahead maximum).
    SegmentEnd,
    /// To the end of the track after the request; one more track when the
    /// segment already held the track before (DiskSim's DEC scheme).
    NextTrack,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteBack {
    /// Writes complete when their data are on the media.
    Off,
    /// Writes complete when their data are in the cache (DiskSim's fast
    /// write levels 1 and 2; with one command at a time they coincide).
    On,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CacheSpec {
    pub enabled: bool,
    pub segments: u32,
    pub segment_blocks: u32,
    pub write_segments: u32,
    pub separate_write_segment: bool,
    /// Fraction of the request (or segment) that must be in the buffer
    /// before a read reconnects to the bus.
    pub read_water: f64,
    pub water_by_request: bool,
    pub read_ahead: ReadAhead,
    pub max_read_ahead: u32,
    pub read_ahead_over_requested: bool,
    pub read_ahead_on_idle_hit: bool,
    pub write_back: WriteBack,
    pub read_hits_on_write_data: bool,
    /// Read-ahead stops mid-sector (else at the next sector boundary).
    pub stop_prefetch_in_sector: bool,
}

impl CacheSpec {
    /// A plain cache: `segments` of `segment_blocks`, read-ahead of up to
    /// `read_ahead_blocks` after a read (0: none) into the segment, one
    /// write segment, write-back or not. What a data sheet or an outside
    /// measurement can tell.
    pub fn plain(
        segments: u32,
        segment_blocks: u32,
        read_ahead_blocks: u32,
        write_back: bool,
    ) -> CacheSpec {
        CacheSpec {
            enabled: segments > 0,
            segments: segments.max(1),
            segment_blocks: segment_blocks.max(1),
            write_segments: 1,
            separate_write_segment: false,
            read_water: 0.0,
            water_by_request: true,
            read_ahead: if read_ahead_blocks > 0 {
                ReadAhead::SegmentEnd
            } else {
                ReadAhead::None
            },
            max_read_ahead: read_ahead_blocks,
            read_ahead_over_requested: true,
            read_ahead_on_idle_hit: false,
            write_back: if write_back {
                WriteBack::On
            } else {
                WriteBack::Off
            },
            read_hits_on_write_data: true,
            stop_prefetch_in_sector: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheduler {
    Fcfs,
    /// Shortest positioning time first (cache hits first).
    Sptf,
}

/// Everything that defines a drive.
#[derive(Clone, Debug, PartialEq)]
pub struct DriveSpec {
    pub name: String,
    pub layout: Layout,
    pub seek: SeekCurve,
    pub rpm: f64,
    pub head_switch_ms: f64,
    pub write_settle_ms: f64,
    pub overheads: Overheads,
    /// Bus time per 512-byte sector (the largest of the disk's, the
    /// buses' and the controller's), reads and writes.
    pub bus_read_ms: f64,
    pub bus_write_ms: f64,
    /// Keep the bus for a whole read (else reconnect when data arrive).
    pub hold_bus_read: bool,
    pub cache: CacheSpec,
    pub scheduler: Scheduler,
}

impl DriveSpec {
    pub fn period_ms(&self) -> f64 {
        60_000.0 / self.rpm
    }

    /// Seek plus head switch plus write settle, DiskSim's
    /// `dm_seek_time`: the longer of the seek and the head switch, and
    /// the settle for a write that moved at all.
    pub fn reposition_ms(&self, from: Arm, to: Arm, write: bool) -> f64 {
        let seek = self.seek.seek_ms(from.cyl.abs_diff(to.cyl));
        let switch = if from.head != to.head {
            self.head_switch_ms
        } else {
            0.0
        };
        let t = seek.max(switch);
        if t > 0.0 && write {
            t + self.write_settle_ms
        } else {
            t
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Arm {
    pub cyl: u32,
    pub head: u32,
}

impl From<Pbn> for Arm {
    fn from(p: Pbn) -> Arm {
        Arm {
            cyl: p.cyl,
            head: p.head,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
    /// Make cached writes durable.
    Flush,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Command {
    pub token: u64,
    pub kind: Kind,
    pub lbn: u64,
    pub count: u32,
}

/// How a read met the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hit {
    Whole,
    Partial,
    Miss,
}

impl Hit {
    /// As `sim validate --requests` writes it.
    pub fn name(self) -> &'static str {
        match self {
            Hit::Whole => "whole",
            Hit::Partial => "partial",
            Hit::Miss => "miss",
        }
    }
}

/// What the drive did with one command.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Served {
    pub token: u64,
    pub start_ms: f64,
    pub done_ms: f64,
    pub hit: Hit,
    /// Seek distance of the first positioning (cylinders).
    pub seek_cyls: u32,
}

#[derive(Clone, Debug)]
struct Segment {
    start: u64,
    end: u64,
    last_use: u64,
    /// Holds write data (dirty until `clean_at_ms`).
    write: bool,
    clean_at_ms: f64,
}

/// Read-ahead in progress: sector `lbn0 + i` is in the buffer at
/// `ready[i]`.
#[derive(Clone, Debug)]
struct Prefetch {
    seg: usize,
    lbn0: u64,
    ready: Vec<f64>,
    arms: Vec<Arm>,
}

/// A media access from where the arm is: `count` sectors from `lbn`,
/// positioning from `start`, at least `min_seek` before the first sector.
struct Access {
    start: f64,
    lbn: u64,
    count: u32,
    write: bool,
    min_seek: f64,
}

/// A media access: the end time of each sector and where the arm is.
struct MediaRun {
    done: Vec<f64>,
    arms: Vec<Arm>,
    seek_cyls: u32,
}

/// A read as the buffer meets it: how much of it is cached, and the
/// overheads that apply to it.
struct ReadAtCache {
    /// After the per-request overhead.
    t0: f64,
    cmd: Command,
    end: u64,
    hit: Hit,
    /// Sectors from the start that the buffer holds or read-ahead in
    /// progress brings in, and their segment.
    cached_prefix: u32,
    prefix_seg: Option<usize>,
    /// When each of them is in the buffer.
    cached_at: Vec<f64>,
    hit_ovh: f64,
    miss_ovh: f64,
    disc_ovh: f64,
}

pub struct Drive {
    spec: DriveSpec,
    period: f64,
    arm: Arm,
    /// The mechanism is busy (positioning, reading, writing) until then.
    mech_free: f64,
    last_was_read: bool,
    segments: Vec<Segment>,
    prefetch: Option<Prefetch>,
    use_counter: u64,
    queue: VecDeque<(f64, Command)>,
    busy: Option<(Command, Served)>,
    done: Vec<Served>,
}

const EPS: f64 = 1e-9;

impl Drive {
    pub fn new(spec: DriveSpec) -> Drive {
        let period = spec.period_ms();
        let n = spec.cache.segments.max(1) as usize;
        Drive {
            period,
            arm: Arm::default(),
            mech_free: 0.0,
            last_was_read: true,
            segments: (0..n)
                .map(|_| Segment {
                    start: 0,
                    end: 0,
                    last_use: 0,
                    write: false,
                    clean_at_ms: 0.0,
                })
                .collect(),
            prefetch: None,
            use_counter: 0,
            queue: VecDeque::new(),
            busy: None,
            done: Vec::new(),
            spec,
        }
    }

    pub fn spec(&self) -> &DriveSpec {
        &self.spec
    }

    pub fn blocks(&self) -> u64 {
        self.spec.layout.blocks
    }

    pub fn arm(&self) -> Arm {
        self.arm
    }

    /// Commands queued or in service.
    pub fn outstanding(&self) -> usize {
        self.queue.len() + usize::from(self.busy.is_some())
    }

    /// Queues a command that arrived at `now`.
    pub fn submit(&mut self, now: f64, cmd: Command) {
        assert!(
            cmd.kind == Kind::Flush
                || (cmd.count > 0 && cmd.lbn + u64::from(cmd.count) <= self.blocks()),
            "command {cmd:?} outside the drive's {} blocks",
            self.blocks()
        );
        self.queue.push_back((now, cmd));
        if self.busy.is_none() {
            self.start_next(now);
        }
    }

    /// When the command in service completes.
    pub fn next_event_ms(&self) -> Option<f64> {
        self.busy.map(|(_, s)| s.done_ms)
    }

    /// Completes the commands due at or before `now`, in order.
    pub fn advance(&mut self, now: f64) -> Vec<Served> {
        while let Some((_, s)) = self.busy {
            if s.done_ms > now {
                break;
            }
            self.busy = None;
            self.done.push(s);
            self.start_next(s.done_ms);
        }
        std::mem::take(&mut self.done)
    }

    /// A power failure: queued and running commands are dropped, the cache
    /// is emptied, the mechanism stops where it is.
    pub fn power_fail(&mut self, now: f64) {
        self.queue.clear();
        self.busy = None;
        self.prefetch = None;
        for s in &mut self.segments {
            s.start = 0;
            s.end = 0;
            s.write = false;
        }
        self.mech_free = self.mech_free.min(now);
    }

    fn start_next(&mut self, now: f64) {
        if self.queue.is_empty() {
            return;
        }
        let i = match self.spec.scheduler {
            Scheduler::Fcfs => 0,
            Scheduler::Sptf => self.pick_sptf(now),
        };
        let (arrived, cmd) = self.queue.remove(i).expect("queued command");
        let start = now.max(arrived);
        let served = self.serve(start, cmd);
        self.busy = Some((cmd, served));
    }

    /// The queued command with the least estimated positioning time
    /// (ties: the oldest).
    fn pick_sptf(&self, now: f64) -> usize {
        let mut best = (f64::INFINITY, 0);
        for (i, (_, cmd)) in self.queue.iter().enumerate() {
            let no_media = cmd.kind == Kind::Flush
                || (cmd.kind == Kind::Read && self.whole_hit(cmd.lbn, cmd.count));
            let est = if no_media {
                0.0
            } else {
                let start = now.max(self.mech_free);
                let p = self.spec.layout.ltop(cmd.lbn);
                let t = start
                    + self
                        .spec
                        .reposition_ms(self.arm, p.into(), cmd.kind == Kind::Write);
                t - now + self.rot_wait(t, p)
            };
            if est < best.0 - EPS {
                best = (est, i);
            }
        }
        best.1
    }

    fn whole_hit(&self, lbn: u64, count: u32) -> bool {
        let end = lbn + u64::from(count);
        self.spec.cache.enabled
            && self.segments.iter().enumerate().any(|(i, s)| {
                self.serves_reads(i) && s.start <= lbn && end <= s.end && s.end > s.start
            })
    }

    /// Whether reads may use segment `i`: not the separate write segment,
    /// which a read neither fills nor hits (DiskSim's
    /// `disk_buffer_select_read_segment` only checks it for collisions).
    fn serves_reads(&self, i: usize) -> bool {
        !(i == 0 && self.spec.cache.separate_write_segment && self.segments.len() > 1)
    }

    /// Slot under the heads at `t` on a track of `bpt` slots (fraction).
    fn slot_at(&self, t: f64, bpt: u32) -> f64 {
        let rev = t / self.period;
        (rev - rev.floor()) * f64::from(bpt)
    }

    /// Time from `t` until physical sector `p` starts under the heads.
    fn rot_wait(&self, t: f64, p: Pbn) -> f64 {
        let bpt = self.spec.layout.blocks_per_track(p.cyl);
        let target = f64::from(self.spec.layout.slot(p));
        let mut d = target - self.slot_at(t, bpt);
        if d < 0.0 {
            d += f64::from(bpt);
        }
        // A hair short of a whole revolution is rounding: no wait.
        if d > f64::from(bpt) - 1e-6 {
            d = 0.0;
        }
        d * self.period / f64::from(bpt)
    }

    /// Reads or writes `count` sectors from `lbn`, positioning from
    /// `from` at `start`. A write's sector `i` must be in the buffer
    /// (`data_ready(i)`) before the heads reach it.
    fn media(&self, access: Access, data_ready: &dyn Fn(u32) -> f64) -> MediaRun {
        let Access {
            start,
            lbn,
            count,
            write,
            min_seek,
        } = access;
        let layout = &self.spec.layout;
        let mut t = start;
        let mut arm = self.arm;
        let mut done = Vec::with_capacity(count as usize);
        let mut arms = Vec::with_capacity(count as usize);
        let mut prev: Option<(Pbn, u32)> = None;
        let mut seek_cyls = 0;
        for i in 0..count {
            let p = layout.ltop(lbn + u64::from(i));
            let bpt = layout.blocks_per_track(p.cyl);
            let slot = layout.slot(p);
            let ready = data_ready(i);
            let st = match prev {
                // The next slot on the same track, data at hand: no gap.
                Some((q, qs))
                    if Arm::from(q) == Arm::from(p)
                        && (qs + 1) % bpt == slot
                        && ready <= t + EPS =>
                {
                    t
                }
                _ => {
                    let to = Arm::from(p);
                    if to != arm {
                        let mut r = self.spec.reposition_ms(arm, to, write);
                        if prev.is_none() {
                            seek_cyls = arm.cyl.abs_diff(to.cyl);
                            r = r.max(min_seek);
                        }
                        t += r;
                        arm = to;
                    } else if prev.is_none() {
                        t += min_seek;
                    }
                    let t0 = t.max(ready);
                    t0 + self.rot_wait(t0, p)
                }
            };
            t = st + self.period / f64::from(bpt);
            done.push(t);
            arms.push(arm);
            prev = Some((p, slot));
        }
        MediaRun {
            done,
            arms,
            seek_cyls,
        }
    }

    /// Cuts read-ahead at `now`: what was read stays in its segment, the
    /// mechanism finishes the sector under the heads.
    fn stop_prefetch(&mut self, now: f64) {
        let n = self.scroll_prefetch(now);
        let Some(pf) = self.prefetch.take() else {
            return;
        };
        self.segments[pf.seg].end = pf.lbn0 + n as u64;
        if n < pf.ready.len() {
            if self.spec.cache.stop_prefetch_in_sector {
                self.mech_free = now;
            } else {
                // Finish the sector being read (it is not kept).
                self.mech_free = pf.ready[n];
            }
            if n > 0 {
                self.arm = pf.arms[n - 1];
            }
            if self.mech_free > now && n < pf.arms.len() {
                self.arm = pf.arms[n];
            }
        }
    }

    /// Carries the read-ahead in progress on to `to`, from where the
    /// mechanism will be when it ends.
    fn extend_prefetch(&mut self, to: u64) {
        let Some(pf) = &self.prefetch else {
            return;
        };
        let from = pf.lbn0 + pf.ready.len() as u64;
        if to <= from {
            return;
        }
        let run = self.media(
            Access {
                start: self.mech_free,
                lbn: from,
                count: (to - from) as u32,
                write: false,
                min_seek: 0.0,
            },
            &|_| f64::NEG_INFINITY,
        );
        self.mech_free = *run.done.last().expect("at least a sector");
        self.arm = *run.arms.last().expect("at least a sector");
        let pf = self.prefetch.as_mut().expect("checked");
        pf.ready.extend(run.done);
        pf.arms.extend(run.arms);
        self.segments[pf.seg].end = to;
    }

    /// Moves the start of the segment read-ahead is filling on by what it
    /// has read by `now`, and says how many sectors that is: a segment
    /// holds at most its size, and the oldest sectors make room as new
    /// ones come in (DiskSim's `disk_buffer_segment_wrap`), not all at
    /// once when the read-ahead starts.
    fn scroll_prefetch(&mut self, now: f64) -> usize {
        let Some(pf) = &self.prefetch else {
            return 0;
        };
        let n = pf.ready.partition_point(|&r| r <= now + EPS);
        let size = u64::from(self.spec.cache.segment_blocks);
        let seg = &mut self.segments[pf.seg];
        seg.start = seg.start.max((pf.lbn0 + n as u64).saturating_sub(size));
        n
    }

    /// When read-ahead in progress has `lbn` in the buffer (or long ago,
    /// if it is not bringing it in).
    fn prefetch_ready(&self, lbn: u64) -> f64 {
        match &self.prefetch {
            Some(pf) if pf.lbn0 <= lbn && lbn < pf.lbn0 + pf.ready.len() as u64 => {
                pf.ready[(lbn - pf.lbn0) as usize]
            }
            _ => f64::NEG_INFINITY,
        }
    }

    fn touch(&mut self, i: usize) {
        self.use_counter += 1;
        self.segments[i].last_use = self.use_counter;
    }

    /// A segment to fill for a read that misses: an empty one, else the
    /// least recently used clean one (DiskSim's ranking; a miss never
    /// continues a segment that ends where it starts, it restarts one).
    fn read_segment(&self, now: f64) -> usize {
        (0..self.segments.len())
            .filter(|&i| self.serves_reads(i))
            .filter(|&i| self.segments[i].clean_at_ms <= now + EPS)
            .min_by_key(|&i| {
                let s = &self.segments[i];
                (s.end > s.start, s.last_use)
            })
            .unwrap_or(self.segments.len() - 1)
    }

    /// A segment for write data at `lbn`: the separate write segment, one
    /// ending at `lbn`, or the least recently used.
    fn write_segment(&self, lbn: u64) -> usize {
        let c = &self.spec.cache;
        if c.separate_write_segment {
            return 0;
        }
        if let Some(i) = self.segments.iter().position(|s| s.write && s.end == lbn) {
            return i;
        }
        (0..self.segments.len())
            .min_by_key(|&i| self.segments[i].last_use)
            .unwrap_or(0)
    }

    /// Drops cached copies of `[lbn, end)` (a write makes them stale).
    fn invalidate(&mut self, lbn: u64, end: u64, except: usize) {
        for (i, s) in self.segments.iter_mut().enumerate() {
            if i != except && s.start < end && lbn < s.end {
                s.start = 0;
                s.end = 0;
            }
        }
    }

    /// Where read-ahead after a read of `[lbn, end)` stops.
    fn read_ahead_end(&self, seg_start: u64, lbn: u64, end: u64) -> u64 {
        let c = &self.spec.cache;
        let layout = &self.spec.layout;
        let blocks = layout.blocks;
        // How far read-ahead may go, as DiskSim's
        // disk_buffer_get_max_readahead says: the DEC scheme to the next
        // track's end whatever else is set; otherwise the read-ahead
        // maximum when there is one, else a segment's worth (from the
        // request's start when read-ahead may not replace the request's
        // own data).
        let limit = match c.read_ahead {
            ReadAhead::None => return end,
            ReadAhead::NextTrack => {
                if end >= blocks {
                    return end;
                }
                let (first, last) = self.track_bounds(end);
                let mut e = last + 1;
                if seg_start < first {
                    e += u64::from(layout.zone_of_lbn(lbn).blocks_per_track);
                }
                return e.min(blocks).max(end);
            }
            _ if c.max_read_ahead > 0 => end + u64::from(c.max_read_ahead),
            _ if !c.read_ahead_over_requested => {
                let seg = u64::from(c.segment_blocks);
                if end - lbn >= seg {
                    end
                } else {
                    lbn + seg
                }
            }
            _ => end + u64::from(c.segment_blocks),
        };
        // The track and cylinder schemes also stop where the heads would
        // have to move.
        let target = match c.read_ahead {
            ReadAhead::TrackEnd | ReadAhead::CylinderEnd => {
                let last = layout.ltop(end - 1);
                let mut e = end;
                while e < blocks.min(limit) {
                    let p = layout.ltop(e);
                    let same = if c.read_ahead == ReadAhead::TrackEnd {
                        Arm::from(p) == Arm::from(last)
                    } else {
                        p.cyl == last.cyl
                    };
                    if !same {
                        break;
                    }
                    e += 1;
                }
                e
            }
            _ => limit,
        };
        target.min(blocks).max(end)
    }

    /// First and last LBN on the track holding `lbn`.
    fn track_bounds(&self, lbn: u64) -> (u64, u64) {
        let layout = &self.spec.layout;
        let arm = Arm::from(layout.ltop(lbn));
        let bpt = u64::from(layout.zone_of_lbn(lbn).blocks_per_track);
        let lo = lbn.saturating_sub(bpt);
        let hi = (lbn + bpt).min(layout.blocks - 1);
        let mut first = lbn;
        while first > lo && Arm::from(layout.ltop(first - 1)) == arm {
            first -= 1;
        }
        let mut last = lbn;
        while last < hi && Arm::from(layout.ltop(last + 1)) == arm {
            last += 1;
        }
        (first, last)
    }

    /// Starts read-ahead into segment `seg` from `from_lbn` to `to`, with
    /// the mechanism free at `at`.
    fn start_prefetch(&mut self, seg: usize, at: f64, from_lbn: u64, to: u64) {
        if to <= from_lbn {
            return;
        }
        let count = (to - from_lbn) as u32;
        let run = self.media(
            Access {
                start: at,
                lbn: from_lbn,
                count,
                write: false,
                min_seek: 0.0,
            },
            &|_| f64::NEG_INFINITY,
        );
        let last = *run.done.last().expect("read-ahead of at least a sector");
        self.mech_free = last;
        self.arm = *run.arms.last().unwrap();
        self.segments[seg].end = to;
        self.prefetch = Some(Prefetch {
            seg,
            lbn0: from_lbn,
            ready: run.done,
            arms: run.arms,
        });
    }

    fn serve(&mut self, t0: f64, cmd: Command) -> Served {
        // A read of a sector that read-ahead is bringing in lets the
        // read-ahead run on (DiskSim's "sneaky" hit on a prefetch in
        // progress): its data go out as they arrive, and what lies past
        // the read-ahead is read next, without losing a revolution.
        let rides_prefetch = cmd.kind == Kind::Read
            && self
                .prefetch
                .as_ref()
                .is_some_and(|pf| pf.lbn0 <= cmd.lbn && cmd.lbn < pf.lbn0 + pf.ready.len() as u64);
        if rides_prefetch {
            self.scroll_prefetch(t0);
        } else {
            self.stop_prefetch(t0);
        }
        let served = match cmd.kind {
            Kind::Read => self.serve_read(t0, cmd),
            Kind::Write => self.serve_write(t0, cmd),
            Kind::Flush => {
                let done = t0.max(self.mech_free) + self.spec.overheads.write_completion;
                Served {
                    token: cmd.token,
                    start_ms: t0,
                    done_ms: done.max(t0 + 1e-6),
                    hit: Hit::Whole,
                    seek_cyls: 0,
                }
            }
        };
        if cmd.kind != Kind::Flush {
            self.last_was_read = cmd.kind == Kind::Read;
        }
        served
    }

    fn serve_read(&mut self, t0: f64, cmd: Command) -> Served {
        let r = self.meet_cache(t0, cmd);
        if r.hit == Hit::Whole {
            self.serve_read_hit(&r)
        } else {
            self.serve_read_media(&r)
        }
    }

    /// How much of a read the buffer holds (or read-ahead in progress is
    /// bringing in), and the overheads that apply.
    fn meet_cache(&self, t0: f64, cmd: Command) -> ReadAtCache {
        let o = &self.spec.overheads;
        let end = cmd.lbn + u64::from(cmd.count);
        let t0 = t0 + o.per_request;
        // Whole or partial hit?
        let mut hit = Hit::Miss;
        let mut cached_prefix = 0u32;
        let mut prefix_seg = None;
        if self.spec.cache.enabled {
            for (i, s) in self.segments.iter().enumerate() {
                if self.serves_reads(i) && s.start <= cmd.lbn && cmd.lbn < s.end {
                    let k = (s.end.min(end) - cmd.lbn) as u32;
                    if k > cached_prefix {
                        cached_prefix = k;
                        prefix_seg = Some(i);
                    }
                }
            }
            if cached_prefix == cmd.count {
                hit = Hit::Whole;
            } else if cached_prefix > 0 {
                hit = Hit::Partial;
            }
        }
        let (hit_ovh, miss_ovh, disc_ovh) = if self.last_was_read {
            (
                o.read_hit_after_read,
                o.read_miss_after_read,
                o.read_disconnect_after_read,
            )
        } else {
            (
                o.read_hit_after_write,
                o.read_miss_after_write,
                o.read_disconnect_after_write,
            )
        };
        // When each cached sector is in the buffer: now, or when the
        // read-ahead in progress brings it in.
        let cached_at: Vec<f64> = (0..cached_prefix)
            .map(|i| self.prefetch_ready(cmd.lbn + u64::from(i)).max(t0))
            .collect();
        ReadAtCache {
            t0,
            cmd,
            end,
            hit,
            cached_prefix,
            prefix_seg,
            cached_at,
            hit_ovh,
            miss_ovh,
            disc_ovh,
        }
    }

    /// A read the buffer holds whole: no media access, though a hit may
    /// move read-ahead on.
    fn serve_read_hit(&mut self, r: &ReadAtCache) -> Served {
        let o = self.spec.overheads.clone();
        let c = self.spec.cache.clone();
        let (t0, cmd, end) = (r.t0, r.cmd, r.end);
        let seg = r.prefix_seg.expect("a whole hit has its segment");
        self.touch(seg);
        let mut b = t0 + r.hit_ovh + o.data_prep;
        for &at in &r.cached_at {
            b = b.max(at) + self.spec.bus_read_ms;
        }
        let done = b + o.read_completion;
        // A hit on read-ahead still running moves its end on, as a
        // read that came from the media would have.
        let active = self
            .prefetch
            .as_ref()
            .is_some_and(|pf| pf.ready.last().is_some_and(|&at| at > t0));
        if active && c.read_ahead != ReadAhead::None {
            let to = self.read_ahead_end(self.segments[seg].start, cmd.lbn, end);
            self.extend_prefetch(to);
        }
        if c.read_ahead_on_idle_hit && c.read_ahead != ReadAhead::None && self.prefetch.is_none() {
            let s_end = self.segments[seg].end;
            let s_start = self.segments[seg].start;
            let to = self.read_ahead_end(s_start, cmd.lbn, end);
            if to > s_end {
                let at = (t0 + r.hit_ovh).max(self.mech_free);
                self.start_prefetch(seg, at, s_end, to);
            }
        }
        Served {
            token: cmd.token,
            start_ms: t0,
            done_ms: done,
            hit: r.hit,
            seek_cyls: 0,
        }
    }

    /// A miss, or a partial hit: the cached prefix goes out at once, the
    /// rest comes from the media into a segment, and read-ahead follows.
    fn serve_read_media(&mut self, r: &ReadAtCache) -> Served {
        let (t0, cmd, end, hit) = (r.t0, r.cmd, r.end, r.hit);
        let first_media = cmd.lbn + u64::from(r.cached_prefix);
        // A partial hit reads the rest into the segment holding the
        // start, as DiskSim ranks a partial hit above any free segment.
        let seg = match r.prefix_seg {
            Some(i) if hit == Hit::Partial => i,
            _ => self.read_segment(t0),
        };
        self.touch(seg);
        let overhead_done = t0 + r.miss_ovh;
        // A partial hit on read-ahead still running goes on reading from
        // where the read-ahead ends, as the same media access (DiskSim
        // moves to the next track at once); otherwise the mechanism
        // waits for the command's overhead.
        let carries_on = hit == Hit::Partial
            && self.mech_free > t0
            && self
                .prefetch
                .as_ref()
                .is_some_and(|pf| pf.lbn0 + pf.ready.len() as u64 == first_media);
        let mech_start = if carries_on {
            self.mech_free
        } else {
            overhead_done.max(self.mech_free)
        };
        let run = self.media(
            Access {
                start: mech_start,
                lbn: first_media,
                count: cmd.count - r.cached_prefix,
                write: false,
                min_seek: 0.0,
            },
            &|_| f64::NEG_INFINITY,
        );
        let done = self.read_bus_done(r, &run);
        // The segment now holds the request; read-ahead follows.
        let media_end = *run.done.last().unwrap();
        self.mech_free = media_end;
        self.arm = *run.arms.last().unwrap();
        let c = self.spec.cache.clone();
        {
            let s = &mut self.segments[seg];
            if hit != Hit::Partial {
                s.start = cmd.lbn;
            }
            s.end = end;
            s.write = false;
            s.clean_at_ms = 0.0;
            let size = u64::from(c.segment_blocks);
            s.start = s.start.max(end.saturating_sub(size));
        }
        if c.enabled && c.read_ahead != ReadAhead::None {
            let to = self.read_ahead_end(self.segments[seg].start, cmd.lbn, end);
            self.start_prefetch(seg, media_end, end, to);
        }
        Served {
            token: cmd.token,
            start_ms: t0,
            done_ms: done,
            hit,
            seek_cyls: run.seek_cyls,
        }
    }

    /// When a read that went to the media is done: the bus carries each
    /// sector once it is in the buffer. A partial hit keeps the bus; a
    /// miss disconnects and reconnects once enough data are in the buffer.
    fn read_bus_done(&self, r: &ReadAtCache, run: &MediaRun) -> f64 {
        let o = &self.spec.overheads;
        let c = &self.spec.cache;
        let (t0, n, hit) = (r.t0, r.cmd.count, r.hit);
        let bus = self.spec.bus_read_ms;
        let ready = |i: u32| -> f64 {
            if i < r.cached_prefix {
                r.cached_at[i as usize]
            } else {
                run.done[(i - r.cached_prefix) as usize]
            }
        };
        let mut b;
        if hit == Hit::Partial {
            b = t0 + r.hit_ovh + o.data_prep;
        } else {
            let water = if c.water_by_request {
                ((f64::from(n.min(c.segment_blocks)) * c.read_water) as u32).max(1)
            } else {
                ((f64::from(c.segment_blocks) * c.read_water + 0.9999999999) as u32).max(1)
            }
            .min(n);
            b = (t0 + r.miss_ovh + r.disc_ovh).max(ready(water - 1))
                + o.first_reselect
                + o.data_prep;
        }
        for i in 0..n {
            let at = ready(i);
            if at > b + EPS && !self.spec.hold_bus_read && hit == Hit::Miss && i > 0 {
                b = at + o.other_reselect;
            }
            b = b.max(at) + bus;
        }
        b + o.read_completion
    }

    fn serve_write(&mut self, t0: f64, cmd: Command) -> Served {
        let o = self.spec.overheads.clone();
        let c = self.spec.cache.clone();
        let n = cmd.count;
        let end = cmd.lbn + u64::from(n);
        let after_read = self.last_was_read;
        let bus = self.spec.bus_write_ms;
        let mut t0 = t0 + o.per_request;
        let write_back = c.enabled && c.write_back == WriteBack::On;
        // Sequential to the last write's data: no minimum seek delay.
        let sequential = self
            .segments
            .iter()
            .any(|s| s.write && s.end == cmd.lbn && s.end > s.start);
        if write_back {
            // With every write segment dirty, wait for the destages.
            let dirty = self
                .segments
                .iter()
                .filter(|s| s.write && s.clean_at_ms > t0)
                .count() as u32;
            if dirty >= c.write_segments.max(1) {
                t0 = t0.max(self.mech_free);
            }
        }
        let ovh = match (write_back, after_read) {
            (true, true) => o.write_hit_after_read,
            (true, false) => o.write_hit_after_write,
            (false, true) => o.write_miss_after_read,
            (false, false) => o.write_miss_after_write,
        };
        let (overhead_done, bus_start) = match (&o.extra_write_disconnect, write_back) {
            (Some(x), false) => (
                t0 + x.command + x.seek_delta,
                t0 + x.command + x.disconnect + x.inter_disconnect + o.first_reselect + o.data_prep,
            ),
            _ => (t0 + ovh, t0 + ovh + o.data_prep),
        };
        let data_ready = |i: u32| bus_start + f64::from(i + 1) * bus;
        let bus_end = data_ready(n - 1);
        let mech_start = overhead_done.max(self.mech_free);
        let min_seek = if sequential { 0.0 } else { o.min_seek_delay };
        let run = self.media(
            Access {
                start: mech_start,
                lbn: cmd.lbn,
                count: n,
                write: true,
                min_seek,
            },
            &data_ready,
        );
        let media_end = *run.done.last().unwrap();
        self.mech_free = media_end;
        self.arm = *run.arms.last().unwrap();
        let done = if write_back {
            bus_end + o.write_completion
        } else {
            let reselect = if o.extra_write_disconnect.is_some() {
                o.other_reselect
            } else {
                o.first_reselect
            };
            media_end.max(bus_end) + reselect + o.write_completion
        };
        if c.enabled {
            let seg = self.write_segment(cmd.lbn);
            self.invalidate(cmd.lbn, end, seg);
            self.touch(seg);
            let s = &mut self.segments[seg];
            if !(s.write && s.end == cmd.lbn && s.end > s.start) {
                s.start = cmd.lbn;
            }
            s.end = end;
            s.start = s.start.max(end.saturating_sub(u64::from(c.segment_blocks)));
            s.write = true;
            s.clean_at_ms = media_end;
            if !c.read_hits_on_write_data {
                // Written data are not kept for reads.
                s.end = s.start;
            }
        }
        Served {
            token: cmd.token,
            start_ms: t0,
            done_ms: done,
            hit: if write_back { Hit::Whole } else { Hit::Miss },
            seek_cyls: run.seek_cyls,
        }
    }
}
