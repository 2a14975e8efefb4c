//! The volume's side of per-block checksums (`crate::integrity`): turning
//! them on, and which reads set them instead of checking them.

use super::{IoId, IoResult, Maintenance, MemberIo, Request, RequestId, Volume};
use crate::integrity::{Integrity, IntegrityStats, Layout, Limits};

impl Volume {
    /// Keeps and checks the members' checksums from now on: every member
    /// I/O goes through the layer. Needs the write-intent bitmap (enabled
    /// first), which says where a crash may have left bytes and checksums
    /// out of step.
    pub fn enable_checksums(&mut self, layout: Layout, limits: Limits) {
        assert!(self.is_idle(), "checksums are enabled before any request");
        assert!(
            self.intent.is_some() || self.geometry.redundancy() == 0,
            "checksums on a redundant level need the write-intent bitmap"
        );
        let mut integrity = Integrity::new(layout, self.geometry.members(), limits);
        for m in 0..self.geometry.members() {
            integrity.set_in_use(m, self.in_use(m));
        }
        self.integrity = Some(integrity);
    }

    /// Tells the checksum layer whether `member` is in use now: it sends
    /// its own I/O (write records) to members in use only.
    pub(super) fn integrity_note_use(&mut self, member: u32) {
        let in_use = self.in_use(member);
        if let Some(i) = self.integrity.as_mut() {
            i.set_in_use(member, in_use);
        }
    }

    /// Per member, when checksums are on.
    pub fn checksum_stats(&self, member: u32) -> Option<&IntegrityStats> {
        Some(self.integrity.as_ref()?.stats(member))
    }

    /// Whether the reads of `request` set the checksums from the bytes
    /// instead of checking them: a resync, and anything touching a region
    /// still owed the resync after a crash (a write in flight then may
    /// have landed without its checksums, or they without it; the data as
    /// it stands wins, as it does for parity and copies).
    pub(super) fn trusts(&self, request: RequestId) -> bool {
        let Some(op) = self.ops.get(&request) else {
            return false;
        };
        if matches!(
            op.req,
            Request::Maintain {
                action: Maintenance::Resync,
                ..
            }
        ) {
            return true;
        }
        self.span_of(&op.req)
            .is_some_and(|span| self.span_unsynced(span.first_stripe, span.last_stripe))
    }

    /// Hands a member I/O to the checksum layer or straight out.
    pub(super) fn send_io(&mut self, io: MemberIo, request: RequestId) {
        if self.integrity.is_none() {
            return self.io_queue.push_back(io);
        }
        let trust = self.trusts(request);
        self.integrity.as_mut().expect("checked").submit(io, trust);
    }

    /// The member I/O results the checksum layer has finished.
    pub(super) fn checked_results(&mut self) -> Option<(IoId, IoResult)> {
        self.integrity.as_mut()?.next_done()
    }
}
