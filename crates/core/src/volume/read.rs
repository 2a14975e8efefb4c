//! Reads: straight from a data chunk's member when it is online, or rebuilt
//! from the rest of the stripe (parity levels) or from another copy.

use super::cache::ChunkRun;
use super::plan::{ReadPiece, ReadPieces, Target};
use super::write::Strategy;
use super::{ErrorKind, Plan, ReadData, Reply, Request, RequestId, StripeJob, Volume, VolumeError};
use crate::buf::AlignedBuf;
use bytes::Bytes;

impl Volume {
    pub(super) fn plan_read(
        &mut self,
        id: RequestId,
        req: &Request,
        plan: &mut Plan,
    ) -> Result<ReadPieces, VolumeError> {
        let (offset_bytes, len_bytes) = req.range();
        assert!(matches!(req, Request::Read { .. }));
        assert!(
            offset_bytes + len_bytes <= self.size_bytes(),
            "a read past the end was admitted"
        );
        // A replan starts from nothing: `begin` and `advance` cleared both.
        assert!(plan.jobs.is_empty() && plan.segments.is_empty());
        let parity = self.geometry.level().is_parity();
        // Copy levels: the read balancer chooses (`read_placement.rs`).
        let mut choice = (!parity).then(|| self.begin_read_choice(offset_bytes, len_bytes));
        let g = &self.geometry;
        let mut pieces = ReadPieces::new();
        let mut roles_cache: Option<(u64, crate::geometry::StripeRoles)> = None;
        // Copies that already failed this request (usually none).
        let failed = self.read_failures(id);
        for e in g.extents(offset_bytes, len_bytes) {
            let at_bytes = e.volume_offset_bytes - offset_bytes;
            if parity {
                if roles_cache.as_ref().is_none_or(|(s, _)| *s != e.stripe) {
                    let roles = g.parity_roles(e.stripe).expect("parity level");
                    roles_cache = Some((e.stripe, roles));
                }
                let roles = &roles_cache.as_ref().expect("just set").1;
                self.plan_parity_extent(&e, at_bytes, roles, failed, plan, &mut pieces);
            } else {
                let choice = choice.as_mut().expect("begun for copy levels");
                if !self.place_read_extent(choice, &e, at_bytes, failed, &mut pieces) {
                    return Err(self.read_lost(id, e.volume_offset_bytes, e.len_bytes));
                }
            }
        }
        self.plan_degraded_stripes(id, offset_bytes, plan, &mut pieces)?;
        assert_eq!(
            planned_read_bytes(&pieces, plan),
            len_bytes,
            "a read's plan covers its bytes exactly once"
        );
        Ok(pieces)
    }

    /// One extent of a parity level's read: bytes the stripe cache holds
    /// from there, the rest from the extent's member, or, where the member
    /// cannot serve them (out of use, or its read failed already), a
    /// reconstruction job for the stripe.
    fn plan_parity_extent(
        &self,
        e: &crate::geometry::Extent,
        at_bytes: u64,
        roles: &crate::geometry::StripeRoles,
        failed: Option<&[super::repair::Failure]>,
        plan: &mut Plan,
        pieces: &mut ReadPieces,
    ) {
        let m = roles.data[e.data_index as usize];
        // Bytes in the stripe cache come from there; the rest from
        // the members (which hold no part of a cached write).
        let runs = self
            .cached_runs(e.stripe, e.data_index, e.within_bytes, e.len_bytes)
            .unwrap_or_else(|| {
                vec![ChunkRun::Members {
                    within_bytes: e.within_bytes,
                    len_bytes: e.len_bytes,
                }]
            });
        for run in runs {
            let within = run.within_bytes();
            let at_bytes = at_bytes + (within - e.within_bytes);
            let len = match run {
                ChunkRun::Cached { bytes, .. } => {
                    plan.segments.push((at_bytes, bytes));
                    continue;
                }
                ChunkRun::Members { len_bytes, .. } => len_bytes,
            };
            if self.usable(m, e.stripe) && !Self::read_failed_on(failed, m, at_bytes, len) {
                pieces.push(ReadPiece {
                    member: m,
                    offset_bytes: self.geometry.member_offset_bytes(e.stripe, within),
                    len_bytes: len,
                    target: Target::Out { at_bytes },
                });
                continue;
            }
            if plan.jobs.last().is_none_or(|j| j.stripe != e.stripe) {
                plan.jobs.push(StripeJob::new(
                    e.stripe,
                    within,
                    within + len,
                    Some(roles.clone()),
                    Strategy::Reconstruct,
                ));
            }
            let job = plan.jobs.last_mut().expect("just pushed");
            job.lo_bytes = job.lo_bytes.min(within);
            job.hi_bytes = job.hi_bytes.max(within + len);
            job.wants.push((e.data_index, within, len, at_bytes));
        }
    }

    /// Degraded stripes: the hull read from every surviving member (but
    /// one whose bytes of the stripe failed this read already). A stripe
    /// that cannot be reconstructed fails the read, as on copy levels: the
    /// members whose reads failed could not be corrected, and are failed.
    fn plan_degraded_stripes(
        &mut self,
        id: RequestId,
        offset_bytes: u64,
        plan: &mut Plan,
        pieces: &mut ReadPieces,
    ) -> Result<(), VolumeError> {
        let stripe_bytes = self.geometry.stripe_data_bytes();
        let failed = self.read_failures(id);
        let mut lost = None;
        for (j, job) in plan.jobs.iter_mut().enumerate() {
            let lo = (job.stripe * stripe_bytes).saturating_sub(offset_bytes);
            let failed_here = |m: u32| Self::read_failed_on(failed, m, lo, stripe_bytes);
            if self
                .plan_hull_reads(j as u32, job, pieces, failed_here)
                .is_err()
            {
                lost = Some(job.stripe);
                break;
            }
        }
        match lost {
            Some(stripe) => Err(self.read_lost(id, stripe * stripe_bytes, stripe_bytes)),
            None => Ok(()),
        }
    }

    /// Plans reads of `[lo, hi)` of every online member of a parity stripe,
    /// for a reconstruction; fails if more members are lost than parity covers.
    pub(super) fn plan_hull_reads(
        &self,
        j: u32,
        job: &mut StripeJob,
        pieces: &mut ReadPieces,
        failed: impl Fn(u32) -> bool,
    ) -> Result<(), ()> {
        let g = &self.geometry;
        let n = g.members();
        let present: Vec<bool> = (0..n)
            .map(|m| self.usable(m, job.stripe) && !failed(m))
            .collect();
        let lost = present.iter().filter(|&&p| !p).count() as u32;
        if lost > g.redundancy() {
            return Err(());
        }
        assert!(
            job.lo_bytes < job.hi_bytes && job.hi_bytes <= g.interleave_bytes(),
            "a hull lies in one chunk"
        );
        let hull = job.hi_bytes - job.lo_bytes;
        job.bufs = (0..n).map(|_| AlignedBuf::zeroed(hull as usize)).collect();
        job.present = present;
        for m in (0..n).filter(|&m| job.present[m as usize]) {
            pieces.push(ReadPiece {
                member: m,
                offset_bytes: g.member_offset_bytes(job.stripe, job.lo_bytes),
                len_bytes: hull,
                target: Target::Job {
                    job: j,
                    member: m,
                    at_bytes: 0,
                },
            });
        }
        Ok(())
    }

    /// Rebuilds the lost members' bytes of a job's hull from the others.
    pub(super) fn reconstruct(&self, job: &mut StripeJob) {
        let roles = &job.roles;
        let k = roles.data.len();
        let mut order: Vec<u32> = vec![u32::MAX; k];
        for (d, &m) in roles.data.iter().enumerate() {
            order[roles.q_slot[d] as usize] = m;
        }
        order.push(roles.p);
        order.extend(roles.q);
        let missing: Vec<usize> = order
            .iter()
            .enumerate()
            // Decided by what was read, not by health now: a member that
            // failed after its read still gave good bytes, and counting it
            // lost could exceed what parity covers.
            .filter(|(_, &m)| !job.present[m as usize])
            .map(|(i, _)| i)
            .collect();
        if missing.is_empty() {
            return;
        }
        assert!(
            missing.len() <= 1 + usize::from(roles.q.is_some()),
            "stripe {}: {} lost, more than parity covers",
            job.stripe,
            missing.len()
        );
        assert_eq!(job.bufs.len(), order.len(), "one buffer per member");
        let mut bufs = std::mem::take(&mut job.bufs);
        {
            let mut by_member: Vec<Option<&mut [u8]>> =
                bufs.iter_mut().map(|b| Some(&mut b[..])).collect();
            let mut blocks: Vec<&mut [u8]> = order
                .iter()
                .map(|&m| by_member[m as usize].take().expect("each member once"))
                .collect();
            platter_parity::recover(&mut blocks, k, &missing)
                .expect("losses within parity were checked when planning");
        }
        job.bufs = bufs;
    }

    pub(super) fn finish_read(&mut self, id: RequestId) -> Result<Reply, VolumeError> {
        self.settle_jobs(id);
        // The segments gathered are this step's to consume; the request
        // stays in the table.
        let op = self.ops.get_mut(&id).expect("live request");
        let segments = std::mem::take(&mut op.plan.segments);
        let len_bytes = op.req.range().1;
        assert!(op.plan.jobs.is_empty(), "settled jobs are consumed");
        Ok(Reply::Data(ReadData::assemble(segments, len_bytes)))
    }

    /// Rebuilds the bytes a read's degraded stripes owe it and adds them
    /// to its segments.
    pub(super) fn settle_jobs(&mut self, id: RequestId) {
        let op = self.ops.get_mut(&id).expect("live request");
        let mut jobs = std::mem::take(&mut op.plan.jobs);
        let mut segments = std::mem::take(&mut op.plan.segments);
        for job in &mut jobs {
            self.reconstruct(job);
            let bufs: Vec<Bytes> = std::mem::take(&mut job.bufs)
                .into_iter()
                .map(AlignedBuf::into_bytes)
                .collect();
            for &(d, within, len, at) in &job.wants {
                let m = job.roles.data[d as usize] as usize;
                assert!(
                    job.lo_bytes <= within && within + len <= job.hi_bytes,
                    "a wanted range lies in its job's hull"
                );
                let from = (within - job.lo_bytes) as usize;
                segments.push((at, bufs[m].slice(from..from + len as usize)));
            }
        }
        let op = self.ops.get_mut(&id).expect("live request");
        assert!(op.plan.segments.is_empty(), "nothing added while settling");
        op.plan.segments = segments;
    }

    pub(super) fn lost_error(&self, what: &str, offset_bytes: u64, len_bytes: u64) -> VolumeError {
        let lost: Vec<String> = self
            .health
            .iter()
            .enumerate()
            .filter(|(_, h)| **h != super::Health::Online)
            .map(|(m, h)| format!("member {m} {h:?}").to_lowercase())
            .collect();
        VolumeError::new(
            ErrorKind::Io,
            format!(
                "cannot {what} volume bytes {offset_bytes}..{}: too many members lost ({})",
                offset_bytes + len_bytes,
                lost.join(", ")
            ),
        )
    }
}

/// Bytes a read's plan delivers: member pieces read straight into the
/// reply, cached segments, and the bytes its degraded stripes rebuild.
fn planned_read_bytes(pieces: &ReadPieces, plan: &Plan) -> u64 {
    let direct: u64 = pieces
        .iter()
        .filter(|p| matches!(p.target, Target::Out { .. }))
        .map(|p| p.len_bytes)
        .sum();
    let cached: u64 = plan.segments.iter().map(|(_, b)| b.len() as u64).sum();
    let rebuilt: u64 = plan
        .jobs
        .iter()
        .flat_map(|j| j.wants.iter())
        .map(|w| w.2)
        .sum();
    direct + cached + rebuilt
}
