//! Rebuilding a member: a fresh device takes a lost member's slot and is
//! filled stripe by stripe, in order, from the others.
//!
//! The member is usable for the stripes below its cursor and lost above it,
//! so client requests stay correct whichever side they fall on: below, the
//! member is read and written like any other; above, it is left alone and
//! the rebuild writes what the others say when it gets there. Each step
//! holds the exclusive lock of its stripes, so no write slips between the
//! rebuild's reads and its writes. The executor decides when to step (rate
//! limits live there: the engine has no clock), and records the cursor as a
//! checkpoint so a restart resumes instead of starting over.

mod state;

use super::plan::{ReadPiece, ReadPieces, Target, WriteKind, WritePiece, WritePieces};
use super::write::Strategy;
use super::{Event, Health, Maintenance, Plan, Request, RequestId, StripeJob, Volume, VolumeError};
use crate::buf::AlignedBuf;
use crate::volume::ErrorKind;
pub(super) use state::RebuildState;

/// Where a rebuild stands, for status and checkpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RebuildProgress {
    pub member: u32,
    pub cursor_stripe: u64,
    pub stripes: u64,
}

impl Volume {
    /// Starts filling `member` (a fresh device now in its slot) from the
    /// others, resuming at `from_stripe` (a checkpoint; 0 for a new device).
    pub fn start_rebuild(&mut self, member: u32, from_stripe: u64) -> Result<(), VolumeError> {
        self.begin_rebuild(member, from_stripe, false)
    }

    /// Brings back `member`, which left the volume holding what it held
    /// then (a disconnected remote member, a device re-added): only the
    /// regions the bitmap kept for it ([`Volume::region_missed`]) and those
    /// owed a resync are rebuilt; the cursor passes the others, whose
    /// bytes the member still has. Resumes at `from_stripe`.
    ///
    /// The caller vouches that the member left no earlier than the bitmap
    /// started keeping its regions (its label's event count): a member
    /// that missed writes from before would be left wrong where the bitmap
    /// has no bit. Refused without a bitmap.
    pub fn start_partial_rebuild(
        &mut self,
        member: u32,
        from_stripe: u64,
    ) -> Result<(), VolumeError> {
        if self.intent.is_none() {
            return Err(VolumeError::new(
                ErrorKind::Io,
                "no write-intent bitmap: a member that comes back is rebuilt whole".to_owned(),
            ));
        }
        self.begin_rebuild(member, from_stripe, true)
    }

    fn begin_rebuild(
        &mut self,
        member: u32,
        from_stripe: u64,
        partial: bool,
    ) -> Result<(), VolumeError> {
        let refuse = |m: String| Err(VolumeError::new(ErrorKind::Io, m));
        if self.geometry.redundancy() == 0 {
            return refuse(format!(
                "a {} volume has no redundancy to rebuild from",
                self.geometry.level()
            ));
        }
        if let Some(r) = &self.rebuild {
            return refuse(format!("member {} is already being rebuilt", r.member()));
        }
        if member >= self.geometry.members() {
            return refuse(format!("no member {member}"));
        }
        if self.health[member as usize] == Health::Online {
            return refuse(format!("member {member} is online; nothing to rebuild"));
        }
        self.health[member as usize] = Health::Rebuilding;
        self.integrity_note_use(member);
        self.intent_member_joined();
        let stripes = self.geometry.stripes();
        self.rebuild = Some(RebuildState::new(member, from_stripe, stripes, partial));
        Ok(())
    }

    pub fn rebuild_progress(&self) -> Option<RebuildProgress> {
        self.rebuild.as_ref().map(|r| RebuildProgress {
            member: r.member(),
            cursor_stripe: r.cursor_stripe(),
            stripes: self.geometry.stripes(),
        })
    }

    /// Submits the next step of the rebuild: up to `stripe_count` stripes
    /// after the cursor. `None` when no rebuild runs or a step is in flight.
    ///
    /// A partial rebuild first moves the cursor past the regions the member
    /// did not miss, and a step ends with its region; when no missed region
    /// is left the rebuild ends here, with no step.
    pub fn rebuild_step(&mut self, stripe_count: u64) -> Option<RequestId> {
        let r = self.rebuild.as_ref()?;
        if r.step_in_flight() {
            return None;
        }
        let total = self.geometry.stripes();
        let (first_stripe, end) = if r.partial() {
            self.intent_next_missed_run(r.cursor_stripe())
        } else {
            (r.cursor_stripe(), total)
        };
        let id = self.next_request_id();
        let r = self.rebuild.as_mut().expect("checked");
        if first_stripe >= total {
            // Nothing left (a partial rebuild past its last missed region,
            // or a checkpoint at the end): done without a step.
            r.skip_to_end(first_stripe);
            self.rebuild_finished();
            return None;
        }
        let count = stripe_count.max(1).min(end - first_stripe);
        r.begin_step(first_stripe, id);
        let submitted = self.submit(Request::Maintain {
            first_stripe,
            stripe_count: count,
            action: Maintenance::Rebuild,
        });
        assert_eq!(submitted, id, "the step has the id it was given");
        Some(id)
    }

    /// Whether `id` is the step of the rebuild that runs now: a step whose
    /// rebuild stopped (its member failed) is no one's.
    pub(super) fn rebuild_owns(&self, id: RequestId) -> bool {
        self.rebuild.as_ref().is_some_and(|r| r.owns(id))
    }

    /// The rebuild stopped while step `id` read its sources: it ends
    /// failed, writing nothing.
    pub(super) fn rebuild_step_orphaned(&mut self, id: RequestId) {
        assert!(!self.rebuild_owns(id));
        let message = "the rebuild stopped (its member failed) during this step";
        self.finish(id, Err(VolumeError::new(ErrorKind::Io, message)));
    }

    pub(super) fn plan_rebuild(
        &mut self,
        id: RequestId,
        req: &Request,
        plan: &mut Plan,
    ) -> Result<ReadPieces, VolumeError> {
        let Request::Maintain {
            first_stripe,
            stripe_count,
            ..
        } = *req
        else {
            unreachable!("planning a rebuild of another request")
        };
        let target = match &self.rebuild {
            Some(r) if r.cursor_stripe() == first_stripe && r.owns(id) => r.member(),
            _ => {
                return Err(VolumeError::new(
                    ErrorKind::Io,
                    "rebuild step out of order or rebuild stopped",
                ))
            }
        };
        let g = &self.geometry;
        let il = g.interleave_bytes();
        let k = g.data_per_stripe();
        let mut pieces = ReadPieces::new();
        for stripe in first_stripe..first_stripe + stripe_count {
            let j = plan.jobs.len() as u32;
            let mut job =
                StripeJob::new(stripe, 0, il, g.parity_roles(stripe), Strategy::Reconstruct);
            if g.level().is_parity() {
                self.plan_hull_reads(j, &mut job, &mut pieces, |_| false)
                    .map_err(|_| self.lost_error("rebuild", stripe * g.stripe_data_bytes(), il))?;
            } else {
                // Copy each chunk that has a copy on the target from one
                // that is usable.
                job.bufs = (0..g.members()).map(|_| AlignedBuf::default()).collect();
                job.bufs[target as usize] = AlignedBuf::zeroed((u64::from(k) * il) as usize);
                for d in 0..k {
                    let chunk = stripe * u64::from(k) + u64::from(d);
                    if chunk * il >= g.volume_size_bytes() {
                        break;
                    }
                    let Some(dst) = g.data_locations(stripe, d).find(|l| l.member == target) else {
                        continue;
                    };
                    let Some(src) = g
                        .data_locations(stripe, d)
                        .find(|l| l.member != target && self.usable(l.member, stripe))
                    else {
                        return Err(self.lost_error("rebuild", chunk * il, il));
                    };
                    let at_bytes = u64::from(d) * il;
                    pieces.push(ReadPiece {
                        member: src.member,
                        offset_bytes: g.member_offset_bytes(src.row, 0),
                        len_bytes: il,
                        target: Target::Job {
                            job: j,
                            member: target,
                            at_bytes,
                        },
                    });
                    job.wants.push((d, dst.row, il, at_bytes));
                }
            }
            plan.jobs.push(job);
        }
        Ok(pieces)
    }

    /// After the rebuild's reads: the target member's chunks, to write.
    pub(super) fn compute_rebuild_writes(&mut self, id: RequestId) -> WritePieces {
        assert!(
            self.rebuild_owns(id),
            "{id:?} computes writes of a stopped rebuild"
        );
        // The jobs are this step's to consume; the request stays in the
        // table.
        let mut jobs = std::mem::take(&mut self.ops.get_mut(&id).expect("live request").plan.jobs);
        let target = self.rebuild.as_ref().expect("checked").member();
        assert!(
            jobs.iter()
                .all(|j| j.bufs.len() == self.geometry.members() as usize),
            "every job holds a buffer per member"
        );
        let mut writes = WritePieces::new();
        let g = self.geometry.clone();
        for job in &mut jobs {
            if g.level().is_parity() {
                self.reconstruct(job);
                let data = std::mem::take(&mut job.bufs[target as usize]);
                writes.push(WritePiece {
                    member: target,
                    offset_bytes: g.member_offset_bytes(job.stripe, 0),
                    kind: WriteKind::Data(data.into_bytes()),
                });
            } else {
                let buf = std::mem::take(&mut job.bufs[target as usize]).into_bytes();
                for &(_, row, len, at) in &job.wants {
                    writes.push(WritePiece {
                        member: target,
                        offset_bytes: g.member_offset_bytes(row, 0),
                        kind: WriteKind::Data(buf.slice(at as usize..(at + len) as usize)),
                    });
                }
            }
        }
        writes
    }

    /// A rebuild step ended: move the cursor on success, finish at the end.
    /// A step of a rebuild that stopped changes nothing.
    pub(super) fn rebuild_step_done(
        &mut self,
        id: RequestId,
        first_stripe: u64,
        stripe_count: u64,
        ok: bool,
    ) {
        let total = self.geometry.stripes();
        if !self.rebuild_owns(id) {
            return;
        }
        let r = self.rebuild.as_mut().expect("checked");
        if r.step_done(first_stripe, stripe_count, ok, total) {
            self.rebuild_finished();
        }
    }

    fn rebuild_finished(&mut self) {
        let stripes = self.geometry.stripes();
        let member = self.rebuild.take().expect("a rebuild").finish(stripes);
        self.health[member as usize] = Health::Online;
        if self.all_in_use() {
            self.intent_all_back();
        }
        self.events.push_back(Event::RebuildDone { member });
    }
}
