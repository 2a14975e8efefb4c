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
use super::{Plan, Request, RequestId, StripeJob, Volume, VolumeError};
use crate::buf::AlignedBuf;
use crate::geometry::uncovered_rows;
use bytes::Bytes;
use smallvec::SmallVec;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    ReadModifyWrite,
    ReconstructWrite,
    Reconstruct,
}

impl Volume {
    pub(super) fn plan_write(
        &mut self,
        req: &Request,
        plan: &mut Plan,
    ) -> Result<ReadPieces, VolumeError> {
        plan.planned.clear();
        plan.log = self.log.as_ref().map(|_| super::ppl::OpLog::default());
        let data = match req {
            Request::Write { data, .. } => Some(data.clone()),
            _ => None,
        };
        if !self.geometry.level().is_parity() {
            self.plan_copies_write(req, data.as_ref(), plan)?;
            return Ok(ReadPieces::new());
        }
        self.cache_absorb(req, plan);
        let partial = match data {
            Some(_) => vec![req.range()],
            None => self.plan_release(req, plan),
        };
        let mut jobs = self.stripe_jobs(req, data.as_ref(), &partial, plan);
        self.check_stripe_jobs(&jobs);
        let stripe_bytes = self.geometry.stripe_data_bytes();
        let mut reads = ReadPieces::new();
        for (j, job) in jobs.iter_mut().enumerate() {
            self.plan_stripe_write(j as u32, job, &mut reads)
                .map_err(|_| {
                    let v = job.stripe * stripe_bytes;
                    self.lost_error(req.name(), v, stripe_bytes)
                })?;
        }
        plan.jobs = jobs;
        Ok(reads)
    }

    /// Mirrors, stripes and concats: each chunk goes to every usable copy
    /// (`data` is `None` for write-zeroes and trim, which trim the copies).
    fn plan_copies_write(
        &self,
        req: &Request,
        data: Option<&Bytes>,
        plan: &mut Plan,
    ) -> Result<(), VolumeError> {
        let (offset_bytes, len_bytes) = req.range();
        let g = &self.geometry;
        debug_assert!(!g.level().is_parity());
        for e in g.extents(offset_bytes, len_bytes) {
            let at = (e.volume_offset_bytes - offset_bytes) as usize;
            let mut any = false;
            for loc in g.data_locations(e.stripe, e.data_index) {
                if !self.usable(loc.member, e.stripe) {
                    continue;
                }
                any = true;
                let kind = match data {
                    Some(d) => WriteKind::Data(d.slice(at..at + e.len_bytes as usize)),
                    None => WriteKind::Trim(e.len_bytes),
                };
                plan.planned.push(WritePiece {
                    member: loc.member,
                    offset_bytes: g.member_offset_bytes(loc.row, e.within_bytes),
                    kind,
                });
            }
            if !any {
                return Err(self.lost_error(req.name(), e.volume_offset_bytes, e.len_bytes));
            }
        }
        Ok(())
    }

    /// Write-zeroes and trim on a parity level: whole stripes of zeros are
    /// trims on every member. Returns the partial ranges left to write as
    /// stripe jobs (write-zeroes' ends; trim leaves partial stripes alone).
    fn plan_release(&mut self, req: &Request, plan: &mut Plan) -> Vec<(u64, u64)> {
        let (offset_bytes, len_bytes) = req.range();
        let zeros = matches!(req, Request::WriteZeroes { .. });
        let g = &self.geometry;
        let il = g.interleave_bytes();
        let stripe_bytes = g.stripe_data_bytes();
        let end_bytes = offset_bytes + len_bytes;
        let first_full = offset_bytes.div_ceil(stripe_bytes);
        let end_full = end_bytes / stripe_bytes;
        let mut partial = Vec::new();
        if first_full >= end_full {
            if zeros {
                partial.push((offset_bytes, len_bytes));
            }
            return partial;
        }
        for m in 0..g.members() {
            // A member being rebuilt is trimmed only below its cursor; the
            // rebuild brings the zeros past it.
            let end = self.usable_until(m, end_full);
            if end > first_full {
                plan.planned.push(WritePiece {
                    member: m,
                    offset_bytes: g.member_offset_bytes(first_full, 0),
                    kind: WriteKind::Trim((end - first_full) * il),
                });
            }
        }
        if let Some(ol) = plan.log.as_mut() {
            self.log_released(first_full, end_full, ol.whole_stripes_mut());
        }
        if zeros {
            // An empty end (the range began or ended on a stripe) has no
            // extents: nothing is planned for it.
            partial.push((offset_bytes, first_full * stripe_bytes - offset_bytes));
            partial.push((end_full * stripe_bytes, end_bytes - end_full * stripe_bytes));
        }
        partial
    }

    /// One job per stripe touched: the request's `partial` ranges (less the
    /// stripes the cache took) and the cache's outgoing data, in order.
    fn stripe_jobs(
        &self,
        req: &Request,
        data: Option<&Bytes>,
        partial: &[(u64, u64)],
        plan: &Plan,
    ) -> Vec<StripeJob> {
        let g = &self.geometry;
        let il = g.interleave_bytes();
        let offset_bytes = req.range().0;
        let zero_chunk = Bytes::from(vec![0u8; if data.is_none() { il as usize } else { 0 }]);
        // Stripes the cache took (cached, or merged into its write-outs).
        let skip: &[u64] = plan.cache.as_ref().map_or(&[], |w| &w.skip);
        let mut jobs: Vec<StripeJob> = Vec::new();
        for &(start, len) in partial {
            for e in g.extents(start, len) {
                if skip.binary_search(&e.stripe).is_ok() {
                    continue;
                }
                let new = match data {
                    Some(d) => {
                        let at = (e.volume_offset_bytes - offset_bytes) as usize;
                        d.slice(at..at + e.len_bytes as usize)
                    }
                    None => zero_chunk.slice(..e.len_bytes as usize),
                };
                self.add_to_job(&mut jobs, e.stripe, e.data_index, e.within_bytes, new);
            }
        }
        // Cached data going out: each range split at chunk boundaries.
        for out in plan.cache.as_ref().map_or(&[][..], |w| &w.outgoing) {
            for &(a, b) in &out.ranges {
                let mut at = a;
                while at < b {
                    let d = at / il;
                    let end = b.min((d + 1) * il);
                    let new = out.data.slice(at as usize..end as usize);
                    self.add_to_job(&mut jobs, out.stripe, d as u32, at - d * il, new);
                    at = end;
                }
            }
        }
        jobs
    }

    /// Adds new bytes for data cell `d` of `stripe` at `within` bytes into
    /// its chunk: to the last job if it is that stripe's, else to a new one.
    fn add_to_job(&self, jobs: &mut Vec<StripeJob>, stripe: u64, d: u32, within: u64, new: Bytes) {
        if jobs.last().is_none_or(|j| j.stripe != stripe) {
            let roles = self.geometry.parity_roles(stripe).expect("parity level");
            jobs.push(StripeJob::new(
                stripe,
                within,
                within + new.len() as u64,
                Some(roles),
                Strategy::ReconstructWrite,
            ));
        }
        let job = jobs.last_mut().expect("just pushed");
        job.lo_bytes = job.lo_bytes.min(within);
        job.hi_bytes = job.hi_bytes.max(within + new.len() as u64);
        job.new_data.push((d, within, new));
    }

    /// Each job covers a non-empty part of its chunks, and its pieces lie
    /// in it: the parity kernels and member offsets rely on both.
    fn check_stripe_jobs(&self, jobs: &[StripeJob]) {
        let il = self.geometry.interleave_bytes();
        for job in jobs {
            assert!(
                job.lo_bytes < job.hi_bytes && job.hi_bytes <= il,
                "a stripe job's hull"
            );
            assert!(job.new_data.iter().all(|(d, w, b)| {
                (*d as usize) < job.roles.data.len()
                    && job.lo_bytes <= *w
                    && w + b.len() as u64 <= job.hi_bytes
            }));
        }
    }

    /// Chooses how to keep one stripe's parity right and plans its reads.
    ///
    /// Read-modify-write and reconstruct-write are compared by member I/Os,
    /// reads plus writes. The writes are the same either way (each new
    /// piece of data, and P and Q), so the reads decide, each counted as
    /// one I/O: read-modify-write reads every piece's old bytes and the
    /// parity; reconstruct-write reads, on every data member, the parts of
    /// the stripe's hull that are not being written (two I/Os for a member
    /// written in the middle of its hull, none at all for a full stripe).
    /// A tie goes to reconstruct-write, which leaves the parity unread.
    fn plan_stripe_write(
        &self,
        j: u32,
        job: &mut StripeJob,
        reads: &mut ReadPieces,
    ) -> Result<(), ()> {
        let g = &self.geometry;
        let stripe = job.stripe;
        if self.stripe_lost_members(stripe) > g.redundancy() {
            // Past the budget the stripe cannot hold what is written to it.
            return Err(());
        }
        let (lo, hi) = (job.lo_bytes, job.hi_bytes);
        let hull = hi - lo;
        let roles = &job.roles;
        let k = roles.data.len() as u32;
        let parity: Vec<u32> = std::iter::once(roles.p).chain(roles.q).collect();
        let parity_online = parity.iter().filter(|&&m| self.usable(m, stripe)).count();

        let rmw_ok = job
            .new_data
            .iter()
            .all(|(d, _, _)| self.usable(roles.data[*d as usize], stripe));
        // The parts of `[lo, hi)` of data chunk `d` not being written. A
        // chunk may have several pieces (cached data going out).
        let gaps = |d: u32| -> SmallVec<[(u64, u64); 2]> {
            let mut pieces: SmallVec<[(u64, u64); 2]> = job
                .new_data
                .iter()
                .filter(|(dd, _, _)| *dd == d)
                .map(|(_, w, b)| (*w, w + b.len() as u64))
                .collect();
            pieces.sort_unstable();
            uncovered_rows(lo, hi, pieces).collect()
        };
        let rcw_ok =
            (0..k).all(|d| gaps(d).is_empty() || self.usable(roles.data[d as usize], stripe));
        // Both write the same pieces: the reads decide.
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
            return self.plan_hull_reads(j, job, reads, |_| false);
        }
        // Buffers only where something is read; compute_stripe makes the
        // rest as it needs them.
        job.bufs = (0..g.members()).map(|_| AlignedBuf::default()).collect();
        let bufs = &mut job.bufs;
        let mut read = |member: u32, from: u64, to: u64| {
            if bufs[member as usize].is_empty() {
                bufs[member as usize] = AlignedBuf::zeroed(hull as usize);
            }
            reads.push(ReadPiece {
                member,
                offset_bytes: g.member_offset_bytes(stripe, from),
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
        // The writes and jobs are this step's to consume; the request
        // stays in the table.
        let op = self.ops.get_mut(&id).expect("live request");
        let mut writes = std::mem::take(&mut op.plan.planned);
        let mut jobs = std::mem::take(&mut op.plan.jobs);
        let mut log = op.plan.log.take();
        for job in &mut jobs {
            self.compute_stripe(job, &mut writes, log.as_mut());
        }
        self.ops.get_mut(&id).expect("live request").plan.log = log;
        writes
    }

    fn compute_stripe(
        &self,
        job: &mut StripeJob,
        writes: &mut WritePieces,
        log: Option<&mut super::ppl::OpLog>,
    ) {
        let g = &self.geometry;
        assert_eq!(
            job.bufs.len(),
            g.members() as usize,
            "a planned job has a buffer per member"
        );
        let lo = job.lo_bytes;
        let roles = job.roles.clone();
        let parity: Vec<u32> = std::iter::once(roles.p).chain(roles.q).collect();
        let stripe = job.stripe;
        let parity_online = parity.iter().any(|&m| self.usable(m, stripe));
        if parity_online {
            // The record, if any, from the buffers as read (and, for a
            // reconstruction, with the lost chunks rebuilt).
            if job.strategy == Strategy::Reconstruct {
                self.reconstruct(job);
            }
            if let Some(log) = log {
                log.wrote(stripe);
                log.add(self.log_record(job));
            }
            match job.strategy {
                Strategy::ReadModifyWrite => self.fold_changes(job),
                Strategy::ReconstructWrite | Strategy::Reconstruct => {
                    Self::parity_from_new_data(job);
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
        let hull = job.hi_bytes - lo;
        for &m in parity.iter().filter(|&&m| self.usable(m, stripe)) {
            let p = std::mem::take(&mut job.bufs[m as usize]);
            // Parity covers the whole hull, whatever the strategy.
            assert_eq!(p.len() as u64, hull, "parity of member {m} over the hull");
            writes.push(WritePiece {
                member: m,
                offset_bytes: g.member_offset_bytes(job.stripe, lo),
                kind: WriteKind::Data(p.into_bytes()),
            });
        }
    }

    /// Read-modify-write: fold each piece's change (old ^ new) into P and
    /// (scaled) Q. RAID-5 makes the new P in one pass over the three
    /// blocks; RAID-6 first makes the change, which Q needs too. The XORs
    /// write a separate buffer (ISA-L's `xor_gen`; an in-place XOR is a
    /// plain loop, about a third as fast: `bench/parity.sh`, rmw rows).
    fn fold_changes(&self, job: &mut StripeJob) {
        let roles = job.roles.clone();
        let stripe = job.stripe;
        let hull = (job.hi_bytes - job.lo_bytes) as usize;
        let p_live = self.usable(roles.p, stripe);
        let q_live = roles.q.filter(|&q| self.usable(q, stripe));
        let p = roles.p as usize;
        for (d, w, new) in &job.new_data {
            let m = roles.data[*d as usize] as usize;
            let at = (w - job.lo_bytes) as usize;
            let len = new.len();
            let old = &job.bufs[m][at..at + len];
            let mut new_p = AlignedBuf::zeroed(if p_live { len } else { 0 });
            match q_live {
                None => {
                    platter_parity::gen_p(&[&job.bufs[p][at..at + len], old, new], &mut new_p);
                }
                Some(q) => {
                    let mut delta = AlignedBuf::zeroed(len);
                    platter_parity::xor2(old, new, &mut delta);
                    let coef = platter_parity::gf_exp2(roles.q_slot[*d as usize]);
                    let qb = &mut job.bufs[q as usize][at..at + len];
                    platter_parity::mul_xor_into(coef, &delta, qb);
                    if p_live {
                        platter_parity::xor2(&job.bufs[p][at..at + len], &delta, &mut new_p);
                    }
                }
            }
            if !p_live {
                continue;
            }
            if at == 0 && len == hull {
                job.bufs[p] = new_p;
            } else {
                job.bufs[p][at..at + len].copy_from_slice(&new_p);
            }
        }
    }

    /// Reconstruct-write (and full-stripe write): P and Q afresh from the
    /// stripe's data. A data chunk written whole over the hull by one
    /// aligned piece is used where it lies, with no copy (a full stripe of
    /// aligned client data is never copied); any other chunk is assembled
    /// in an aligned buffer from what was read and the new pieces.
    fn parity_from_new_data(job: &mut StripeJob) {
        let roles = &job.roles;
        let (lo, hi) = (job.lo_bytes, job.hi_bytes);
        let hull = (hi - lo) as usize;
        // Per data index: the piece to use in place, if there is one.
        let k = roles.data.len();
        let mut direct: Vec<Option<usize>> = vec![None; k];
        for (d, slot) in direct.iter_mut().enumerate() {
            let mut pieces = job
                .new_data
                .iter()
                .enumerate()
                .filter(|(_, (dd, _, _))| *dd as usize == d);
            if let (Some((i, (_, w, b))), None) = (pieces.next(), pieces.next()) {
                // Pieces lie in the hull (asserted in `plan_write`): one
                // as long as the hull starts where it does.
                if b.len() == hull && crate::buf::aligned32(b) {
                    assert_eq!(*w, lo, "a piece over the whole hull starts at it");
                    *slot = Some(i);
                }
            }
        }
        for (d, &m) in roles.data.iter().enumerate() {
            if direct[d].is_some() {
                continue;
            }
            let buf = &mut job.bufs[m as usize];
            if buf.is_empty() {
                *buf = AlignedBuf::zeroed(hull);
            }
        }
        for (i, (d, w, new)) in job.new_data.iter().enumerate() {
            if direct[*d as usize] == Some(i) {
                continue;
            }
            let m = roles.data[*d as usize] as usize;
            let at = (w - lo) as usize;
            job.bufs[m][at..at + new.len()].copy_from_slice(new);
        }
        // P and Q are written whole by the kernels: not zeroed first.
        let mut q = None;
        let p = {
            let mut data: Vec<&[u8]> = vec![&[]; k];
            for (d, &m) in roles.data.iter().enumerate() {
                data[roles.q_slot[d] as usize] = match direct[d] {
                    Some(i) => &job.new_data[i].2,
                    None => &job.bufs[m as usize],
                };
            }
            match roles.q {
                None => AlignedBuf::init_with(hull, |p| platter_parity::gen_p_uninit(&data, p)),
                Some(_) => AlignedBuf::init_with(hull, |p| {
                    let mut p_done = None;
                    q = Some(AlignedBuf::init_with(hull, |q| {
                        let (p, q) = platter_parity::gen_pq_uninit(&data, p, q);
                        p_done = Some(p);
                        q
                    }));
                    p_done.expect("P is written with Q")
                }),
            }
        };
        job.bufs[roles.p as usize] = p;
        if let (Some(qm), Some(q)) = (roles.q, q) {
            job.bufs[qm as usize] = q;
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
