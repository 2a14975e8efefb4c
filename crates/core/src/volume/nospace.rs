//! A member with no room for a write (`ENOSPC`: a sparse file on a full
//! file system, a thin device out of blocks) is full, not broken: the bytes
//! it holds are as good as before. The write fails with
//! [`ErrorKind::NoSpace`] and every member stays in use, so reads and the
//! writes that find room go on. The write may have landed on some members
//! and not others, leaving its stripes' parity or copies in disagreement:
//! they are owed a resync. With a write-intent bitmap their regions stay
//! marked (across sweeps and restarts) until the resync repairs them;
//! without one, [`Volume::resync_owed`] says the whole volume is (the
//! server then leaves the label dirty, and the next start resyncs every
//! stripe, as after a crash).

use super::{
    ErrorKind, Event, FailurePolicy, IoError, Maintenance, Op, Request, RequestId, Stage, Volume,
    VolumeError,
};

impl Volume {
    /// Whether `e` is a write refused for space that leaves the member in
    /// use: a data, parity or copy write (or trim) of a client write, a
    /// destage or a repair. A rebuild's write fails its new member as
    /// before (it holds nothing the volume needs yet); so do flushes and
    /// bitmap writes: after a failed writeback the kernel may have dropped
    /// the pages, so what the member holds is no longer known.
    pub(super) fn is_refused_for_space(op: &Op, e: &IoError) -> bool {
        e.kind.policy() == FailurePolicy::FailRequest
            && matches!(op.stage, Stage::Writing(_))
            && !matches!(
                op.req,
                Request::Maintain {
                    action: Maintenance::Rebuild,
                    ..
                }
            )
    }

    /// `member` had no room for a write of request `id`.
    pub(super) fn refused_for_space(&mut self, id: RequestId, member: u32, reason: String) {
        if let Some(span) = self.span_of(&self.ops[&id].req) {
            if !self.intent_keep_unsynced(span.first_stripe, span.last_stripe) {
                self.resync_all_owed = true;
            }
        }
        self.events.push_back(Event::NoSpace { member, reason });
    }

    /// Whether stripes whose writes were refused for space still wait for
    /// a resync: regions the bitmap keeps marked, or (no bitmap) the whole
    /// volume. A clean stop must not call the volume clean while this holds.
    pub fn resync_owed(&self) -> bool {
        self.resync_all_owed || self.unsynced_from(0).is_some()
    }

    pub(super) fn no_space_error(&self, op: &Op) -> VolumeError {
        let (offset_bytes, len_bytes) = op.req.range();
        VolumeError::new(
            ErrorKind::NoSpace,
            format!(
                "{} at offset {offset_bytes} ({len_bytes} bytes): no space left on a member \
                 (the members stay in use)",
                op.req.name()
            ),
        )
    }
}
