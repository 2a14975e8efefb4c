//! Writes, write-zeroes and trims.
//!
//! Mirrors and stripes write each chunk to every online copy. Parity stripes
//! pick, per stripe, the cheapest way to keep parity right:
//! - read-modify-write: read the old data being replaced and the parity,
//!   fold the difference into the parity;
//! - reconstruct-write: read the rest of the stripe's data and compute parity
//!   afresh (a full-stripe write reads nothing);
//! - reconstruct: when lost members rule out both, read every survivor,
//!   rebuild the lost chunks, then compute parity afresh.
//!
//! Write-zeroes and trim release whole stripes on every member (members read
//! back zeros afterwards, and zeros are their own parity); write-zeroes writes
//! real zeros at partial stripes, trim leaves them alone.

use super::plan::{ReadPiece, ReadPieces, Target, WriteKind, WritePiece, WritePieces};
use super::{Op, Request, RequestId, StripeJob, Volume, VolumeError};
use bytes::Bytes;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    ReadModifyWrite,
    ReconstructWrite,
    Reconstruct,
}

impl Volume {
    pub(super) fn plan_write(&mut self, op: &mut Op) -> Result<ReadPieces, VolumeError> {
        op.planned.clear();
        let (offset_bytes, len_bytes) = op.req.range();
        let g = &self.geometry;
        let il = g.interleave_bytes();
        let data = match &op.req {
            Request::Write { data, .. } => Some(data.clone()),
            _ => None,
        };
        let zeros = matches!(op.req, Request::WriteZeroes { .. });
        if !g.level().is_parity() {
            for e in g.extents(offset_bytes, len_bytes) {
                let at = (e.volume_offset_bytes - offset_bytes) as usize;
                let mut any = false;
                for loc in g.data_locations(e.stripe, e.data_index) {
                    if !self.usable(loc.member, e.stripe) {
                        continue;
                    }
                    any = true;
                    let kind = match &data {
                        Some(d) => WriteKind::Data(d.slice(at..at + e.len_bytes as usize)),
                        None => WriteKind::Trim(e.len_bytes),
                    };
                    op.planned.push(WritePiece {
                        member: loc.member,
                        offset_bytes: g.member_offset_bytes(loc.row, e.within_bytes),
                        kind,
                    });
                }
                if !any {
                    return Err(self.lost_error(op.req.name(), e.volume_offset_bytes, e.len_bytes));
                }
            }
            return Ok(ReadPieces::new());
        }

        // Parity levels: whole stripes of zeros are trims on every member.
        let stripe_bytes = g.stripe_data_bytes();
        let end_bytes = offset_bytes + len_bytes;
        let mut partial: Vec<(u64, u64)> = vec![(offset_bytes, len_bytes)];
        if data.is_none() {
            let first_full = offset_bytes.div_ceil(stripe_bytes);
            let end_full = end_bytes / stripe_bytes;
            partial.clear();
            if first_full < end_full {
                for m in 0..g.members() {
                    // A member being rebuilt is trimmed only below its
                    // cursor; the rebuild brings the zeros past it.
                    let end = self.usable_until(m, end_full);
                    if end > first_full {
                        op.planned.push(WritePiece {
                            member: m,
                            offset_bytes: g.member_offset_bytes(first_full, 0),
                            kind: WriteKind::Trim((end - first_full) * il),
                        });
                    }
                }
                if zeros {
                    partial.push((offset_bytes, first_full * stripe_bytes - offset_bytes));
                    partial.push((end_full * stripe_bytes, end_bytes - end_full * stripe_bytes));
                }
            } else if zeros {
                partial.push((offset_bytes, len_bytes));
            }
            partial.retain(|(_, len)| *len > 0);
        }
        let zero_chunk = Bytes::from(vec![0u8; if data.is_none() { il as usize } else { 0 }]);
        for (start, len) in partial {
            for e in g.extents(start, len) {
                let new = match &data {
                    Some(d) => {
                        let at = (e.volume_offset_bytes - offset_bytes) as usize;
                        d.slice(at..at + e.len_bytes as usize)
                    }
                    None => zero_chunk.slice(..e.len_bytes as usize),
                };
                if op.jobs.last().is_none_or(|j| j.stripe != e.stripe) {
                    let roles = g.parity_roles(e.stripe).expect("parity level");
                    op.jobs.push(StripeJob::new(
                        e.stripe,
                        e.within_bytes,
                        e.within_bytes + e.len_bytes,
                        Some(roles),
                        Strategy::ReconstructWrite,
                    ));
                }
                let job = op.jobs.last_mut().expect("just pushed");
                job.lo_bytes = job.lo_bytes.min(e.within_bytes);
                job.hi_bytes = job.hi_bytes.max(e.within_bytes + e.len_bytes);
                job.new_data.push((e.data_index, e.within_bytes, new));
            }
        }
        let mut reads = ReadPieces::new();
        let mut jobs = std::mem::take(&mut op.jobs);
        for (j, job) in jobs.iter_mut().enumerate() {
            self.plan_stripe_write(j as u32, job, &mut reads)
                .map_err(|_| {
                    let v = job.stripe * stripe_bytes;
                    self.lost_error(op.req.name(), v, stripe_bytes)
                })?;
        }
        op.jobs = jobs;
        Ok(reads)
    }

    /// Chooses how to keep one stripe's parity right and plans its reads.
    fn plan_stripe_write(
        &self,
        j: u32,
        job: &mut StripeJob,
        reads: &mut ReadPieces,
    ) -> Result<(), ()> {
        let g = &self.geometry;
        let stripe = job.stripe;
        let lost = (0..g.members())
            .filter(|&m| !self.usable(m, stripe))
            .count() as u32;
        if lost > g.redundancy() {
            // Past the budget the stripe cannot hold what is written to it.
            return Err(());
        }
        let (lo, hi) = (job.lo_bytes, job.hi_bytes);
        let hull = hi - lo;
        let roles = &job.roles;
        let k = roles.data.len() as u32;
        let touched = |d: u32| job.new_data.iter().find(|(dd, _, _)| *dd == d);
        let parity: Vec<u32> = std::iter::once(roles.p).chain(roles.q).collect();
        let parity_online = parity.iter().filter(|&&m| self.usable(m, stripe)).count();

        let rmw_ok = job
            .new_data
            .iter()
            .all(|(d, _, _)| self.usable(roles.data[*d as usize], stripe));
        let gaps = |d: u32| -> Vec<(u64, u64)> {
            match touched(d) {
                None => vec![(lo, hi)],
                Some((_, w, b)) => {
                    let end = w + b.len() as u64;
                    [(lo, *w), (end, hi)]
                        .into_iter()
                        .filter(|(a, b)| a < b)
                        .collect()
                }
            }
        };
        let rcw_ok =
            (0..k).all(|d| gaps(d).is_empty() || self.usable(roles.data[d as usize], stripe));
        let rmw_reads = job.new_data.len() + parity_online;
        let rcw_reads: usize = (0..k).map(|d| gaps(d).len()).sum();
        job.strategy = if parity_online == 0 {
            // No parity to keep: the data is all there is to write.
            Strategy::ReadModifyWrite
        } else {
            match (rmw_ok, rcw_ok) {
                (true, true) if rcw_reads <= rmw_reads => Strategy::ReconstructWrite,
                (true, _) => Strategy::ReadModifyWrite,
                (false, true) => Strategy::ReconstructWrite,
                (false, false) => Strategy::Reconstruct,
            }
        };
        if job.strategy == Strategy::Reconstruct {
            return self.plan_hull_reads(j, job, reads);
        }
        job.bufs = (0..g.members()).map(|_| vec![0u8; hull as usize]).collect();
        let mut read = |member: u32, from: u64, to: u64| {
            reads.push(ReadPiece {
                member,
                offset_bytes: g.member_offset_bytes(job.stripe, from),
                len_bytes: to - from,
                target: Target::Job {
                    job: j,
                    member,
                    at_bytes: from - lo,
                },
            })
        };
        match job.strategy {
            Strategy::ReadModifyWrite if parity_online > 0 => {
                for (d, w, b) in &job.new_data {
                    read(roles.data[*d as usize], *w, w + b.len() as u64);
                }
                for &m in parity.iter().filter(|&&m| self.usable(m, stripe)) {
                    read(m, lo, hi);
                }
            }
            Strategy::ReadModifyWrite => {}
            Strategy::ReconstructWrite => {
                for d in 0..k {
                    for (a, b) in gaps(d) {
                        read(roles.data[d as usize], a, b);
                    }
                }
            }
            Strategy::Reconstruct => unreachable!(),
        }
        Ok(())
    }

    /// After the read phase: compute parity and list every member write.
    pub(super) fn compute_writes(&mut self, id: RequestId) -> WritePieces {
        let mut op = self.ops.remove(&id).expect("live request");
        let mut writes = std::mem::take(&mut op.planned);
        let mut jobs = std::mem::take(&mut op.jobs);
        for job in &mut jobs {
            self.compute_stripe(job, &mut writes);
        }
        self.ops.insert(id, op);
        writes
    }

    fn compute_stripe(&self, job: &mut StripeJob, writes: &mut WritePieces) {
        let g = &self.geometry;
        let lo = job.lo_bytes;
        let roles = job.roles.clone();
        let parity: Vec<u32> = std::iter::once(roles.p).chain(roles.q).collect();
        let stripe = job.stripe;
        let parity_online = parity.iter().any(|&m| self.usable(m, stripe));
        if parity_online {
            match job.strategy {
                Strategy::ReadModifyWrite => {
                    for (d, w, new) in &job.new_data {
                        let m = roles.data[*d as usize] as usize;
                        let at = (w - lo) as usize;
                        let len = new.len();
                        // old ^ new: the change, folded into P and (scaled) Q.
                        platter_parity::xor_into(&mut job.bufs[m][at..at + len], new);
                        let delta = job.bufs[m][at..at + len].to_vec();
                        if self.usable(roles.p, stripe) {
                            let p = &mut job.bufs[roles.p as usize][at..at + len];
                            platter_parity::xor_into(p, &delta);
                        }
                        if let Some(q) = roles.q.filter(|&q| self.usable(q, stripe)) {
                            let coef = platter_parity::gf_exp2(roles.q_slot[*d as usize]);
                            let qb = &mut job.bufs[q as usize][at..at + len];
                            platter_parity::mul_xor_into(coef, &delta, qb);
                        }
                    }
                }
                Strategy::ReconstructWrite | Strategy::Reconstruct => {
                    if job.strategy == Strategy::Reconstruct {
                        self.reconstruct(job);
                    }
                    for (d, w, new) in &job.new_data {
                        let m = roles.data[*d as usize] as usize;
                        let at = (w - lo) as usize;
                        job.bufs[m][at..at + new.len()].copy_from_slice(new);
                    }
                    Self::generate_parity(job);
                }
            }
        }
        for (d, w, new) in &job.new_data {
            let m = roles.data[*d as usize];
            if self.usable(m, stripe) {
                writes.push(WritePiece {
                    member: m,
                    offset_bytes: g.member_offset_bytes(job.stripe, *w),
                    kind: WriteKind::Data(new.clone()),
                });
            }
        }
        for &m in parity.iter().filter(|&&m| self.usable(m, stripe)) {
            writes.push(WritePiece {
                member: m,
                offset_bytes: g.member_offset_bytes(job.stripe, lo),
                kind: WriteKind::Data(Bytes::from(std::mem::take(&mut job.bufs[m as usize]))),
            });
        }
    }

    /// P (and Q) of the job's data buffers, in md's syndrome order.
    pub(super) fn generate_parity(job: &mut StripeJob) {
        let roles = &job.roles;
        let k = roles.data.len();
        let mut p = std::mem::take(&mut job.bufs[roles.p as usize]);
        let mut q = roles.q.map(|q| std::mem::take(&mut job.bufs[q as usize]));
        {
            let mut data: Vec<&[u8]> = vec![&[]; k];
            for (d, &m) in roles.data.iter().enumerate() {
                data[roles.q_slot[d] as usize] = &job.bufs[m as usize];
            }
            match &mut q {
                Some(q) => platter_parity::gen_pq(&data, &mut p, q),
                None => platter_parity::gen_p(&data, &mut p),
            }
        }
        job.bufs[roles.p as usize] = p;
        if let (Some(qm), Some(q)) = (roles.q, q) {
            job.bufs[qm as usize] = q;
        }
    }
}
