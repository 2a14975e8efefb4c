//! A subdisk being moved (`platter subdisk move`, LVM's `pvmove`): a
//! [`Member`] over its old place and its new one while a copy runs.
//!
//! The old place stays the member: every read comes from it, every write
//! and trim lands there first and its errors are the member's. Each write
//! and trim is then made at the new place too, so that a region copied
//! stays equal behind the copy, and flushes flush both. The copy
//! ([`MovingMember::copy`]) takes one range at a time, waiting for the
//! writes in flight over it and holding back new ones until it is done:
//! a copy that read old bytes can never land after a write of new ones.
//!
//! A new place that fails a write, flush or reserve gives the move up
//! ([`MovingMember::given_up`]): from then on only the old place is used,
//! and the volume never sees the new place's error. Once the pool's
//! configuration names the new place, [`MovingMember::switch_to_new`]
//! makes the new place the member: the old one is not touched again.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::error::MemberError;
use crate::member::Member;

/// The ranges in use: those the copy holds (one being read, one being
/// written: [`COPY_HOLDS_MAX`]), and the writes in flight (as many as the
/// member's queue lets in, a bounded few).
#[derive(Default)]
struct Ranges {
    copying: Vec<(u64, u64)>,
    writing: Vec<(u64, u64)>,
}

/// Ranges the copy holds at once: it reads the next while it writes the
/// last, so that a drive's latency is paid once a chunk, not twice.
pub const COPY_HOLDS_MAX: usize = 2;

fn overlap(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// Subdisk `from` on its way to `to` (at least as long).
pub struct MovingMember {
    from: Arc<dyn Member>,
    to: Arc<dyn Member>,
    /// The places as the copy reaches them: `from` and `to`, or the same
    /// behind the latency a server injects into their drives (the
    /// volume's own I/O gets it in the server's I/O layer).
    copy_from: Arc<dyn Member>,
    copy_to: Arc<dyn Member>,
    ranges: Mutex<Ranges>,
    changed: Condvar,
    given_up: AtomicBool,
    why: Mutex<Option<String>>,
    switched: AtomicBool,
    /// The end of the furthest range the copy wrote (or checked), for
    /// progress.
    copied_bytes: AtomicU64,
}

/// What [`MovingMember::check_copy`] found of a range below the copy's
/// checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checked {
    Same,
    /// The new place differed and was written again.
    Mended,
}

impl MovingMember {
    pub fn new(from: Arc<dyn Member>, to: Arc<dyn Member>) -> MovingMember {
        assert!(
            to.size_bytes() >= from.size_bytes(),
            "a subdisk moves to a place at least as long"
        );
        MovingMember {
            copy_from: Arc::clone(&from),
            copy_to: Arc::clone(&to),
            from,
            to,
            ranges: Mutex::new(Ranges::default()),
            changed: Condvar::new(),
            given_up: AtomicBool::new(false),
            why: Mutex::new(None),
            switched: AtomicBool::new(false),
            copied_bytes: AtomicU64::new(0),
        }
    }

    /// The copy reaches the places through `from` and `to` (the same
    /// places: delayed as their drives are).
    pub fn with_copy_paths(mut self, from: Arc<dyn Member>, to: Arc<dyn Member>) -> MovingMember {
        self.copy_from = from;
        self.copy_to = to;
        self
    }

    /// From now on every I/O goes to the new place alone: the pool's
    /// configuration names it (the copy is done and both were flushed).
    pub fn switch_to_new(&self) {
        assert!(
            !self.given_up.load(Ordering::Acquire),
            "a move given up stays"
        );
        self.switched.store(true, Ordering::Release);
    }

    /// The place reads come from and writes land on first.
    fn place(&self) -> &Arc<dyn Member> {
        if self.switched.load(Ordering::Acquire) {
            &self.to
        } else {
            &self.from
        }
    }

    /// The new place.
    pub fn to(&self) -> &Arc<dyn Member> {
        &self.to
    }

    /// The old place.
    pub fn from(&self) -> &Arc<dyn Member> {
        &self.from
    }

    /// How far the copy has come (the end of the furthest range written
    /// or compared), for progress; not a checkpoint.
    pub fn copied_bytes(&self) -> u64 {
        self.copied_bytes.load(Ordering::Acquire)
    }

    fn copied_to(&self, end: u64) {
        self.copied_bytes.fetch_max(end, Ordering::AcqRel);
    }

    /// Why the move was given up (the new place's error), if it was.
    pub fn given_up(&self) -> Option<String> {
        if !self.given_up.load(Ordering::Acquire) {
            return None;
        }
        self.why.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn give_up(&self, e: &MemberError) {
        let mut why = self.why.lock().unwrap_or_else(|e| e.into_inner());
        why.get_or_insert_with(|| e.to_string());
        self.given_up.store(true, Ordering::Release);
    }

    fn lock(&self) -> MutexGuard<'_, Ranges> {
        self.ranges.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Copies `buf.len()` bytes at `offset_bytes` from the old place to
    /// the new. Err: the old place's read failed. A failed write to the
    /// new place gives the move up (Ok, and [`Self::given_up`] says so).
    pub fn copy(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), MemberError> {
        self.read_held(offset_bytes, buf)?.write(buf);
        Ok(())
    }

    /// The first half of a copy: the range held and read from the old
    /// place; [`CopyHold::write`] (on another thread, say, while the next
    /// range is read) writes it to the new place and lets it go.
    pub fn read_held(
        &self,
        offset_bytes: u64,
        buf: &mut [u8],
    ) -> Result<CopyHold<'_>, MemberError> {
        let held = self.hold(offset_bytes, buf.len() as u64);
        self.copy_from.read_at(offset_bytes, buf)?;
        Ok(held)
    }

    /// Compares a range already copied (below a checkpoint a crash may
    /// have left unequal: a write that reached one place and not the
    /// other) and copies it again where it differs. `spare` is a buffer
    /// as long as `buf`.
    pub fn check_copy(
        &self,
        offset_bytes: u64,
        buf: &mut [u8],
        spare: &mut [u8],
    ) -> Result<Checked, MemberError> {
        assert_eq!(buf.len(), spare.len());
        let _held = self.hold(offset_bytes, buf.len() as u64);
        self.copy_from.read_at(offset_bytes, buf)?;
        if self.given_up.load(Ordering::Acquire) {
            return Ok(Checked::Same);
        }
        if let Err(e) = self.copy_to.read_at(offset_bytes, spare) {
            self.give_up(&e);
            return Ok(Checked::Same);
        }
        self.copied_to(offset_bytes + buf.len() as u64);
        if buf == spare {
            return Ok(Checked::Same);
        }
        if let Err(e) = self.copy_to.write_at(offset_bytes, buf) {
            self.give_up(&e);
        }
        Ok(Checked::Mended)
    }

    /// Flushes the new place (before a checkpoint is recorded); a failure
    /// gives the move up.
    pub fn flush_new_place(&self) {
        if self.given_up.load(Ordering::Acquire) {
            return;
        }
        if let Err(e) = self.copy_to.flush() {
            self.give_up(&e);
        }
    }

    /// `op` where the member lies: the new place alone once switched;
    /// else the old place (its error the member's), then the new one
    /// unless the move was given up (its error gives the move up).
    fn on_places(
        &self,
        op: impl Fn(&dyn Member) -> Result<(), MemberError>,
    ) -> Result<(), MemberError> {
        if self.switched.load(Ordering::Acquire) {
            return op(self.to.as_ref());
        }
        op(self.from.as_ref())?;
        if !self.given_up.load(Ordering::Acquire) {
            if let Err(e) = op(self.to.as_ref()) {
                self.give_up(&e);
            }
        }
        Ok(())
    }

    /// Holds `len` bytes at `offset` for the copy: waits for the writes
    /// in flight over them; new ones wait until the guard drops.
    fn hold(&self, offset: u64, len: u64) -> CopyHold<'_> {
        let range = (offset, offset.saturating_add(len));
        let mut r = self.lock();
        assert!(
            r.copying.len() < COPY_HOLDS_MAX,
            "the copy holds two ranges at most"
        );
        assert!(
            r.copying.iter().all(|&c| !overlap(c, range)),
            "the copy's ranges are apart"
        );
        r.copying.push(range);
        while r.writing.iter().any(|&w| overlap(w, range)) {
            r = self.changed.wait(r).unwrap_or_else(|e| e.into_inner());
        }
        CopyHold { m: self, range }
    }

    /// Runs a write or trim of `len` bytes at `offset`: on the old place,
    /// then (unless given up) on the new, never while the copy holds them.
    fn both(
        &self,
        offset: u64,
        len: u64,
        op: impl Fn(&dyn Member) -> Result<(), MemberError>,
    ) -> Result<(), MemberError> {
        if self.switched.load(Ordering::Acquire) {
            return op(self.to.as_ref());
        }
        let range = (offset, offset.saturating_add(len));
        {
            let mut r = self.lock();
            while r.copying.iter().any(|&c| overlap(c, range)) {
                r = self.changed.wait(r).unwrap_or_else(|e| e.into_inner());
            }
            r.writing.push(range);
        }
        let out = self.on_places(op);
        let mut r = self.lock();
        let at = r
            .writing
            .iter()
            .position(|&w| w == range)
            .expect("registered above");
        r.writing.swap_remove(at);
        drop(r);
        self.changed.notify_all();
        out
    }
}

/// The copy's hold on a range, let go on drop.
pub struct CopyHold<'a> {
    m: &'a MovingMember,
    range: (u64, u64),
}

impl CopyHold<'_> {
    /// Where the range held ends.
    pub fn end_bytes(&self) -> u64 {
        self.range.1
    }

    /// Writes `buf` (the range's bytes, read by
    /// [`MovingMember::read_held`]) to the new place, then lets the range
    /// go. A failed write gives the move up.
    pub fn write(self, buf: &[u8]) {
        assert_eq!(buf.len() as u64, self.range.1 - self.range.0);
        if !self.m.given_up.load(Ordering::Acquire) {
            if let Err(e) = self.m.copy_to.write_at(self.range.0, buf) {
                self.m.give_up(&e);
            }
        }
        self.m.copied_to(self.range.1);
    }
}

impl Drop for CopyHold<'_> {
    fn drop(&mut self) {
        let mut r = self.m.lock();
        let at = r
            .copying
            .iter()
            .position(|&c| c == self.range)
            .expect("held");
        r.copying.swap_remove(at);
        drop(r);
        self.m.changed.notify_all();
    }
}

impl Member for MovingMember {
    fn describe(&self) -> &str {
        self.place().describe()
    }

    fn size_bytes(&self) -> u64 {
        self.from.size_bytes()
    }

    fn logical_block_bytes(&self) -> u32 {
        self.from
            .logical_block_bytes()
            .max(self.to.logical_block_bytes())
    }

    fn rotational(&self) -> Option<bool> {
        self.place().rotational()
    }

    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), MemberError> {
        self.place().read_at(offset_bytes, buf)
    }

    fn read_uninit_at<'a>(
        &self,
        offset_bytes: u64,
        buf: &'a mut [MaybeUninit<u8>],
    ) -> Result<&'a mut [u8], MemberError> {
        self.place().read_uninit_at(offset_bytes, buf)
    }

    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> Result<(), MemberError> {
        self.both(offset_bytes, data.len() as u64, |m| {
            m.write_at(offset_bytes, data)
        })
    }

    fn write_parts_at(&self, offset_bytes: u64, parts: &[&[u8]]) -> Result<(), MemberError> {
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        self.both(offset_bytes, len, |m| m.write_parts_at(offset_bytes, parts))
    }

    fn flush(&self) -> Result<(), MemberError> {
        self.on_places(|m| m.flush())
    }

    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), MemberError> {
        self.both(offset_bytes, len_bytes, |m| m.trim(offset_bytes, len_bytes))
    }

    fn check_size(&self) -> Result<(), MemberError> {
        self.on_places(|m| m.check_size())
    }

    fn reserve(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), MemberError> {
        self.on_places(|m| m.reserve(offset_bytes, len_bytes))
    }

    fn connection_lost(&self) -> bool {
        self.place().connection_lost()
    }

    fn abandon(&self, why: &str) {
        self.place().abandon(why);
    }

    fn close_connections(&self) {
        self.from.close_connections();
        self.to.close_connections();
    }
}

#[cfg(test)]
mod tests;
