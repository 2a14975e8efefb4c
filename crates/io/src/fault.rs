//! A fault-injecting wrapper around any [`Member`], for tests and for
//! `platter serve --inject`.
//!
//! [`FaultyMember`] fails chosen I/Os (the Nth, every one from the Nth on, a
//! seeded random fraction), adds latency, tears writes at sector boundaries,
//! models bad sectors (reads of them fail until a write covers them), and
//! simulates a crash: with [`FaultSpec::undo_log`] on it remembers what
//! every write and trim since the last successful flush replaced, and
//! [`FaultControls::crash`] puts back all or a seeded subset of it, then
//! fails every I/O until [`FaultControls::revive`].
//!
//! Every setting lives behind the shared [`FaultControls`] handle and may be
//! changed while I/O runs. With nothing configured the wrapper costs one
//! atomic load per call.
//!
//! Injected errors are [`MemberErrorKind::Io`] and their message starts with
//! `injected fault:`.

mod ranges;
mod spec;

pub use spec::{BadRange, FaultSpec, FaultSpecError, Jitter, JITTER_EXP_CAP};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use crate::error::{MemberError, MemberErrorKind, Op};
use crate::member::{check_range, Member};
use ranges::RangeSet;

/// The sector size at which writes tear and bad sectors heal.
pub const SECTOR_BYTES: u64 = 512;

/// How many bytes of replaced data the undo log holds before it refuses
/// writes (256 MiB); see [`FaultControls::set_undo_limit`].
pub const DEFAULT_UNDO_LIMIT_BYTES: u64 = 256 << 20;

/// Wraps any member; every fault is off by default, and all settings can be
/// changed while I/O runs through [`controls`](FaultyMember::controls).
///
/// Passes the [`Member`] contract through: describe, size, block size,
/// rotation and identity are the inner member's, and requests past the end
/// are refused with [`MemberErrorKind::OutOfRange`] before any fault is
/// considered (they are not numbered).
pub struct FaultyMember<M: Member> {
    inner: Arc<M>,
    controls: Arc<FaultControls>,
}

/// The shared handle to a [`FaultyMember`]'s settings and state.
pub struct FaultControls {
    /// Whether anything is configured or the member is crashed: the one
    /// load of the fast path.
    armed: AtomicBool,
    name: String,
    /// The inner member, for the crash to write back through. Weak, so a
    /// handle kept by a test does not keep a device open.
    inner: Weak<dyn Member>,
    state: Mutex<State>,
}

/// How [`FaultControls::crash`] treats the writes since the last flush.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// None of them reached the disk.
    DropAll,
    /// Each reached the disk or not (even odds, seeded from the spec's seed
    /// and the crash's number), independently of the others, as when a
    /// cache writes back out of order; with [`FaultSpec::tear_rate`] above
    /// zero, a write is instead torn with that probability: a prefix of its
    /// sectors (at least one, never all) reached the disk. The result is
    /// always what the kept parts would give applied in their original
    /// order.
    DropSome,
}

/// What happened to one unflushed write or trim in a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Fully on the disk.
    Kept,
    /// Not on the disk at all.
    Dropped,
    /// The first `kept_bytes` are on the disk (a sector boundary), the rest
    /// is not.
    Torn { kept_bytes: u64 },
}

/// One unflushed write or trim as the crash treated it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrashedWrite {
    /// [`Op::Write`] or [`Op::Trim`].
    pub op: Op,
    pub offset_bytes: u64,
    /// The bytes that had landed on the member (less than the request for a
    /// write that tore when it was issued).
    pub len_bytes: u64,
    pub fate: Fate,
}

/// What a crash did, the unflushed writes and trims oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrashReport {
    pub writes: Vec<CrashedWrite>,
}

impl CrashReport {
    pub fn count(&self, pred: impl Fn(&Fate) -> bool) -> usize {
        self.writes.iter().filter(|w| pred(&w.fate)).count()
    }
}

struct State {
    spec: FaultSpec,
    /// I/Os numbered since the spec was set.
    count: u64,
    /// I/Os failed on purpose since the spec was set.
    injected: u64,
    crashed: bool,
    crashes: u64,
    undo: Vec<UndoEntry>,
    undo_bytes: u64,
    undo_limit: u64,
    /// The spec's bad sectors not healed yet.
    bad: RangeSet,
}

/// The bytes one write or trim replaced.
struct UndoEntry {
    op: Op,
    offset_bytes: u64,
    old: Vec<u8>,
}

/// What the locked part of an I/O decided.
enum Verdict {
    Fail(MemberError),
    /// Perform it; `tear` for a write that tears (with its I/O number).
    Go {
        number: u64,
        latency_us: u64,
        undo_log: bool,
        tear: Option<u64>,
    },
}

impl<M: Member + 'static> FaultyMember<M> {
    /// Wraps `inner` with `faults` in force.
    ///
    /// # Panics
    /// If `faults` does not [`validate`](FaultSpec::validate).
    pub fn new(inner: M, faults: FaultSpec) -> Self {
        let inner = Arc::new(inner);
        let weak: Weak<dyn Member> = Arc::downgrade(&inner) as Weak<dyn Member>;
        let controls = Arc::new(FaultControls {
            armed: AtomicBool::new(false),
            name: inner.describe().to_string(),
            inner: weak,
            state: Mutex::new(State {
                spec: FaultSpec::default(),
                count: 0,
                injected: 0,
                crashed: false,
                crashes: 0,
                undo: Vec::new(),
                undo_bytes: 0,
                undo_limit: DEFAULT_UNDO_LIMIT_BYTES,
                bad: RangeSet::default(),
            }),
        });
        controls.set(faults);
        FaultyMember { inner, controls }
    }
}

impl<M: Member> FaultyMember<M> {
    /// The shared handle to the settings; keep it to change them later.
    pub fn controls(&self) -> Arc<FaultControls> {
        Arc::clone(&self.controls)
    }

    /// The wrapped member.
    pub fn inner(&self) -> &M {
        &self.inner
    }

    fn fast(&self) -> bool {
        !self.controls.armed.load(Ordering::Acquire)
    }

    /// Numbers an armed I/O and decides its fate; sleeps the latency
    /// outside the lock.
    fn decide(&self, op: Op, offset_bytes: u64, len_bytes: u64) -> Result<Verdict, MemberError> {
        let size = self.inner.size_bytes();
        if matches!(op, Op::Read | Op::Write | Op::Trim) {
            check_range(&self.controls.name, size, op, offset_bytes, len_bytes)?;
        }
        let verdict =
            self.controls
                .lock()
                .verdict(&self.controls.name, op, offset_bytes, len_bytes);
        if let Verdict::Go { latency_us, .. } = verdict {
            if latency_us > 0 {
                std::thread::sleep(Duration::from_micros(latency_us));
            }
        }
        Ok(verdict)
    }

    /// A write or trim with its undo entry recorded, under the lock.
    fn logged_change(
        &self,
        op: Op,
        number: u64,
        offset_bytes: u64,
        len_bytes: u64,
        apply: impl FnOnce(&M) -> Result<(), MemberError>,
    ) -> Result<(), MemberError> {
        let mut s = self.controls.lock();
        if s.crashed {
            s.injected += 1;
            return Err(crashed_error(
                &self.controls.name,
                op,
                offset_bytes,
                len_bytes,
                number,
            ));
        }
        if !s.spec.undo_log {
            // Turned off since the verdict.
            drop(s);
            return apply(&self.inner);
        }
        if s.undo_bytes + len_bytes > s.undo_limit {
            return Err(MemberError::with_message(
                MemberErrorKind::Io,
                &self.controls.name,
                op,
                offset_bytes,
                len_bytes,
                format!(
                    "fault injection: the undo log is full ({} bytes of unflushed writes \
                     saved, limit {}); flush, or raise it with set_undo_limit",
                    s.undo_bytes, s.undo_limit
                ),
            ));
        }
        let mut old = vec![0u8; len_bytes as usize];
        self.inner.read_at(offset_bytes, &mut old)?;
        let result = apply(&self.inner);
        s.undo_bytes += len_bytes;
        s.undo.push(UndoEntry {
            op,
            offset_bytes,
            old,
        });
        result
    }

    fn write_armed(&self, offset_bytes: u64, data: &[u8]) -> Result<(), MemberError> {
        let len = data.len() as u64;
        let (number, undo_log, tear) = match self.decide(Op::Write, offset_bytes, len)? {
            Verdict::Fail(e) => return Err(e),
            Verdict::Go {
                number,
                undo_log,
                tear,
                ..
            } => (number, undo_log, tear),
        };
        let (landed, torn) = match tear {
            Some(h) => {
                let cuts = sector_cuts(offset_bytes, len);
                // A prefix of 0..pieces-1 whole pieces: possibly none, never all.
                let pieces = cuts.len() as u64;
                let k = (h % pieces) as usize;
                let landed = if k == 0 {
                    0
                } else {
                    cuts[k - 1] - offset_bytes
                };
                (landed, Some((k, pieces)))
            }
            None => (len, None),
        };
        let mut written = Ok(());
        let kept = self.controls.lock().kept(offset_bytes, landed);
        for (at, len) in kept {
            let part = &data[(at - offset_bytes) as usize..(at - offset_bytes + len) as usize];
            written = if undo_log {
                self.logged_change(Op::Write, number, at, len, |m| m.write_at(at, part))
            } else {
                self.inner.write_at(at, part)
            };
            if written.is_err() {
                break;
            }
        }
        if written.is_ok() {
            self.controls.lock().heal(offset_bytes, landed);
        }
        match torn {
            None => written,
            Some((k, pieces)) => {
                written?;
                Err(injected(
                    &self.controls.name,
                    Op::Write,
                    offset_bytes,
                    len,
                    format!(
                        "injected fault: torn write, I/O {number} of member {}: \
                         {k} of {pieces} sectors landed",
                        self.controls.name
                    ),
                ))
            }
        }
    }
}

/// The ends of the absolute 512-byte sectors that `offset..offset+len`
/// touches (the last one is the request's end); one entry for an empty or
/// single-sector request.
fn sector_cuts(offset_bytes: u64, len_bytes: u64) -> Vec<u64> {
    let end = offset_bytes + len_bytes;
    let mut cuts = Vec::new();
    let mut at = (offset_bytes / SECTOR_BYTES + 1) * SECTOR_BYTES;
    while at < end {
        cuts.push(at);
        at += SECTOR_BYTES;
    }
    cuts.push(end);
    cuts
}

fn injected(member: &str, op: Op, offset_bytes: u64, len_bytes: u64, msg: String) -> MemberError {
    MemberError::with_message(
        MemberErrorKind::Io,
        member,
        op,
        offset_bytes,
        len_bytes,
        msg,
    )
}

fn crashed_error(member: &str, op: Op, offset_bytes: u64, len_bytes: u64, n: u64) -> MemberError {
    injected(
        member,
        op,
        offset_bytes,
        len_bytes,
        format!(
            "injected fault: I/O {n} of member {member}: the member has crashed (until revived)"
        ),
    )
}

/// A well-mixed 64-bit hash (splitmix64's finalizer).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A deterministic draw from `seed`, a purpose and a number.
fn draw(seed: u64, purpose: u64, n: u64) -> u64 {
    mix(mix(seed ^ purpose.wrapping_mul(0xd6e8_feb8_6659_fd93)) ^ n)
}

/// A draw as a uniform `[0, 1)`.
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

const PURPOSE_FAIL: u64 = 1;
const PURPOSE_TEAR: u64 = 2;
const PURPOSE_TEAR_LEN: u64 = 3;
const PURPOSE_CRASH: u64 = 4;
const PURPOSE_JITTER: u64 = 5;

impl State {
    /// The sectors that `offset..offset+len` covers whole are bad no more.
    /// The pieces of `offset..offset+len` outside the spec's drop ranges:
    /// what of a write or trim lands (the rest is acknowledged and
    /// dropped). The whole range, in one piece, when nothing is dropped.
    fn kept(&self, offset_bytes: u64, len_bytes: u64) -> Vec<(u64, u64)> {
        let end = offset_bytes + len_bytes;
        let mut drops: Vec<(u64, u64)> = self
            .spec
            .drop_ranges
            .iter()
            .map(|r| (r.offset_bytes.max(offset_bytes), r.end_bytes().min(end)))
            .filter(|(a, b)| a < b)
            .collect();
        if drops.is_empty() {
            return vec![(offset_bytes, len_bytes)];
        }
        drops.sort_unstable();
        let mut kept = Vec::new();
        let mut at = offset_bytes;
        for (a, b) in drops {
            if a > at {
                kept.push((at, a - at));
            }
            at = at.max(b);
        }
        if at < end {
            kept.push((at, end - at));
        }
        kept
    }

    fn heal(&mut self, offset_bytes: u64, len_bytes: u64) {
        let start = offset_bytes.div_ceil(SECTOR_BYTES) * SECTOR_BYTES;
        let end = (offset_bytes + len_bytes) / SECTOR_BYTES * SECTOR_BYTES;
        if start < end {
            self.bad.remove(start..end);
        }
    }

    fn verdict(&mut self, name: &str, op: Op, offset_bytes: u64, len_bytes: u64) -> Verdict {
        self.count += 1;
        let n = self.count;
        let spec = &self.spec;
        let fail = self.crashed
            || spec.fail_nth == Some(n)
            || spec.fail_from_nth.is_some_and(|from| n >= from)
            || (spec.fail_rate > 0.0 && unit(draw(spec.seed, PURPOSE_FAIL, n)) < spec.fail_rate);
        if fail {
            self.injected += 1;
            let err = if self.crashed {
                crashed_error(name, op, offset_bytes, len_bytes, n)
            } else {
                injected(
                    name,
                    op,
                    offset_bytes,
                    len_bytes,
                    format!("injected fault: I/O {n} of member {name}"),
                )
            };
            return Verdict::Fail(err);
        }
        if op == Op::Read {
            if let Some(b) = self
                .bad
                .overlapping(offset_bytes..offset_bytes + len_bytes)
                .first()
            {
                self.injected += 1;
                return Verdict::Fail(injected(
                    name,
                    op,
                    offset_bytes,
                    len_bytes,
                    format!(
                        "injected fault: I/O {n} of member {name}: bad sectors at bytes {}..{} \
                         (bad-range; a write over them heals them)",
                        b.start, b.end
                    ),
                ));
            }
        }
        let tear = (op == Op::Write
            && spec.tear_rate > 0.0
            && unit(draw(spec.seed, PURPOSE_TEAR, n)) < spec.tear_rate)
            .then(|| draw(spec.seed, PURPOSE_TEAR_LEN, n));
        if tear.is_some() {
            self.injected += 1;
        }
        Verdict::Go {
            number: n,
            latency_us: spec.latency_us_of(n),
            undo_log: spec.undo_log,
            tear,
        }
    }
}

impl FaultControls {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held (in an inner member, say) leaves
        // the state consistent enough for a fault injector.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn rearm(&self, s: &State) {
        self.armed
            .store(s.spec.is_active() || s.crashed, Ordering::Release);
    }

    /// Puts `spec` in force from the next I/O on. The I/O numbering starts
    /// again at 1; turning the undo log off forgets it, turning it on starts
    /// an empty one; the bad sectors are exactly the spec's again (healed
    /// ones included).
    ///
    /// # Panics
    /// If `spec` does not [`validate`](FaultSpec::validate).
    pub fn set(&self, spec: FaultSpec) {
        if let Err(e) = spec.validate() {
            panic!("FaultControls::set: {e}");
        }
        let mut s = self.lock();
        if !spec.undo_log {
            s.undo.clear();
            s.undo_bytes = 0;
        }
        s.bad = RangeSet::default();
        for r in &spec.bad_ranges {
            s.bad.insert(r.offset_bytes..r.end_bytes());
        }
        s.spec = spec;
        s.count = 0;
        s.injected = 0;
        self.rearm(&s);
    }

    /// The spec in force.
    pub fn spec(&self) -> FaultSpec {
        self.lock().spec.clone()
    }

    /// I/Os numbered since the spec was set. With nothing configured the
    /// wrapper is a pass-through and does not count.
    pub fn io_count(&self) -> u64 {
        self.lock().count
    }

    /// The bad sectors not healed yet, in member bytes: disjoint, in order,
    /// touching runs merged.
    pub fn bad_sectors(&self) -> Vec<std::ops::Range<u64>> {
        self.lock().bad.iter().collect()
    }

    /// I/Os failed or torn on purpose since the spec was set.
    pub fn injected_count(&self) -> u64 {
        self.lock().injected
    }

    /// Writes and trims since the last successful flush (the undo log).
    pub fn unflushed_writes(&self) -> usize {
        self.lock().undo.len()
    }

    /// Bytes the undo log holds.
    pub fn unflushed_bytes(&self) -> u64 {
        self.lock().undo_bytes
    }

    /// Sets how many bytes the undo log may hold; a write or trim that would
    /// pass it fails (not injected: a test that sees it must flush more or
    /// raise this).
    pub fn set_undo_limit(&self, bytes: u64) {
        self.lock().undo_limit = bytes;
    }

    /// Whether the member is crashed.
    pub fn is_crashed(&self) -> bool {
        self.lock().crashed
    }

    /// Simulates a crash: puts back, newest first, what the unflushed writes
    /// and trims replaced (all of them, or a subset as `mode` says), flushes
    /// the inner member, empties the undo log, and fails every I/O until
    /// [`revive`](Self::revive). Data flushed before stays.
    ///
    /// Errors if the inner member refuses the restoring writes, or is gone.
    ///
    /// # Panics
    /// If the undo log is off ([`FaultSpec::undo_log`]): there would be
    /// nothing to lose, and a test meaning to lose writes would pass without
    /// testing anything.
    pub fn crash(&self, mode: CrashMode) -> Result<CrashReport, MemberError> {
        let mut s = self.lock();
        assert!(
            s.spec.undo_log,
            "FaultControls::crash on member {}: turn on FaultSpec::undo_log before the writes to lose",
            self.name
        );
        let inner = self.inner.upgrade().ok_or_else(|| {
            MemberError::with_message(
                MemberErrorKind::Gone,
                &self.name,
                Op::Write,
                0,
                0,
                "fault injection: the wrapped member was dropped before the crash",
            )
        })?;
        s.crashes += 1;
        let crash_no = s.crashes;
        let seed = s.spec.seed;
        let tear_rate = s.spec.tear_rate;
        let undo = std::mem::take(&mut s.undo);
        s.undo_bytes = 0;
        s.crashed = true;
        self.rearm(&s);

        let mut kept = RangeSet::default();
        let mut fates = Vec::with_capacity(undo.len());
        for (i, e) in undo.iter().enumerate().rev() {
            let len = e.old.len() as u64;
            let start = e.offset_bytes;
            let fate = match mode {
                CrashMode::DropAll => Fate::Dropped,
                CrashMode::DropSome => {
                    let h = |j: u64| draw(seed ^ mix(crash_no), PURPOSE_CRASH, 3 * i as u64 + j);
                    let cuts = sector_cuts(start, len);
                    let pieces = cuts.len() as u64;
                    if tear_rate > 0.0 && pieces > 1 && unit(h(0)) < tear_rate {
                        // 1..pieces-1 pieces kept.
                        let k = 1 + h(1) % (pieces - 1);
                        Fate::Torn {
                            kept_bytes: cuts[k as usize - 1] - start,
                        }
                    } else if h(2) & 1 == 0 {
                        Fate::Dropped
                    } else {
                        Fate::Kept
                    }
                }
            };
            let kept_bytes = match fate {
                Fate::Kept => len,
                Fate::Dropped => 0,
                Fate::Torn { kept_bytes } => kept_bytes,
            };
            // Put back the old bytes of the lost part, except where a newer
            // kept write lies on top.
            for r in kept.uncovered(start + kept_bytes..start + len) {
                let from = (r.start - start) as usize;
                let to = (r.end - start) as usize;
                inner.write_at(r.start, &e.old[from..to])?;
            }
            kept.insert(start..start + kept_bytes);
            fates.push(CrashedWrite {
                op: e.op,
                offset_bytes: start,
                len_bytes: len,
                fate,
            });
        }
        inner.flush()?;
        fates.reverse();
        Ok(CrashReport { writes: fates })
    }

    /// Ends a crash: I/O reaches the member again (what it holds is what the
    /// crash left). The spec in force stays, and the numbering goes on.
    pub fn revive(&self) {
        let mut s = self.lock();
        s.crashed = false;
        self.rearm(&s);
    }
}

impl<M: Member> Member for FaultyMember<M> {
    fn describe(&self) -> &str {
        self.inner.describe()
    }

    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }

    fn logical_block_bytes(&self) -> u32 {
        self.inner.logical_block_bytes()
    }

    fn rotational(&self) -> Option<bool> {
        self.inner.rotational()
    }

    fn identity(&self) -> Option<(u64, u64)> {
        self.inner.identity()
    }

    fn connection_lost(&self) -> bool {
        self.inner.connection_lost()
    }

    fn abandon(&self, why: &str) {
        self.inner.abandon(why)
    }

    fn close_connections(&self) {
        self.inner.close_connections()
    }

    fn check_size(&self) -> Result<(), MemberError> {
        self.inner.check_size()
    }

    fn reserve(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), MemberError> {
        self.inner.reserve(offset_bytes, len_bytes)
    }

    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), MemberError> {
        if self.fast() {
            return self.inner.read_at(offset_bytes, buf);
        }
        match self.decide(Op::Read, offset_bytes, buf.len() as u64)? {
            Verdict::Fail(e) => Err(e),
            Verdict::Go { .. } => self.inner.read_at(offset_bytes, buf),
        }
    }

    fn read_uninit_at<'a>(
        &self,
        offset_bytes: u64,
        buf: &'a mut [std::mem::MaybeUninit<u8>],
    ) -> Result<&'a mut [u8], MemberError> {
        if self.fast() {
            return self.inner.read_uninit_at(offset_bytes, buf);
        }
        // Armed: through `read_at`, where the faults are.
        crate::member::read_zeroed_at(self, offset_bytes, buf)
    }

    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> Result<(), MemberError> {
        if self.fast() {
            return self.inner.write_at(offset_bytes, data);
        }
        self.write_armed(offset_bytes, data)
    }

    fn write_parts_at(&self, offset_bytes: u64, parts: &[&[u8]]) -> Result<(), MemberError> {
        if self.fast() {
            return self.inner.write_parts_at(offset_bytes, parts);
        }
        // Armed faults see one write of the whole range.
        self.write_armed(offset_bytes, &parts.concat())
    }

    fn flush(&self) -> Result<(), MemberError> {
        if self.fast() {
            return self.inner.flush();
        }
        match self.decide(Op::Flush, 0, 0)? {
            Verdict::Fail(e) => Err(e),
            Verdict::Go {
                number, undo_log, ..
            } => {
                if !undo_log {
                    return self.inner.flush();
                }
                // Under the lock, so that no write slips between the flush
                // and the clearing of the log.
                let mut s = self.controls.lock();
                if s.crashed {
                    s.injected += 1;
                    return Err(crashed_error(&self.controls.name, Op::Flush, 0, 0, number));
                }
                self.inner.flush()?;
                s.undo.clear();
                s.undo_bytes = 0;
                Ok(())
            }
        }
    }

    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), MemberError> {
        if self.fast() {
            return self.inner.trim(offset_bytes, len_bytes);
        }
        match self.decide(Op::Trim, offset_bytes, len_bytes)? {
            Verdict::Fail(e) => Err(e),
            Verdict::Go {
                number, undo_log, ..
            } => {
                let kept = self.controls.lock().kept(offset_bytes, len_bytes);
                for (at, len) in kept {
                    if undo_log {
                        self.logged_change(Op::Trim, number, at, len, |m| m.trim(at, len))?;
                    } else {
                        self.inner.trim(at, len)?;
                    }
                }
                Ok(())
            }
        }
    }
}
