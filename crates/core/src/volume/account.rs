//! Statistics: the hooks that keep [`crate::stats::Stats`] (definitions in
//! `docs/statistics.md`).
//!
//! The rest of the volume calls in at five places, one line each: a member
//! I/O issued (`new_io`) and done (`io_done`), a read plan issued
//! (`issue_reads`: which plex serves which bytes, and whether any are
//! reconstructed), a parity write's stripes computed (`advance`: the strategy
//! of each), and a request finished (`finish`). Everything else is worked out
//! here from the geometry and the members' health.

use super::plan::{ReadPieces, Target};
use super::{IoResult, Maintenance, MemberOp, Op, Reply, Request, RequestId, Volume, VolumeError};
use crate::geometry::Geometry;
use crate::level::Level;
use crate::stats::{Counters, LatencyOf, Stats};
use smallvec::SmallVec;

/// What a request did, gathered while it runs and counted when it finishes.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// Levels with more than one plex (mirror, RAID-10): the request bytes
    /// each plex delivers, from the latest read plan.
    plex_bytes: SmallVec<[u64; 4]>,
    /// Some read bytes are rebuilt from parity.
    reconstructed: bool,
    /// Parity stripes written: full-stripe, read-modify-write,
    /// reconstruct-write, parityless.
    stripes: [u64; 4],
}

/// Plexes of a geometry: one per copy for mirror and RAID-10, else one.
pub fn plex_count(g: &Geometry) -> u32 {
    match g.level() {
        Level::Mirror | Level::Raid10 => g.copies(),
        _ => 1,
    }
}

/// The plex a member byte belongs to: the copy index of the chunk it holds
/// (near layout: copy `j` of chunk `c` is slot `c * copies + j`, and slot
/// `row * members + member`).
fn plex_of(g: &Geometry, member: u32, member_offset_bytes: u64) -> usize {
    match g.level() {
        Level::Mirror => member as usize,
        Level::Raid10 => {
            assert!(
                member_offset_bytes >= g.spec().data_offset_bytes,
                "a data byte"
            );
            let row = (member_offset_bytes - g.spec().data_offset_bytes) / g.interleave_bytes();
            let slot = row * u64::from(g.members()) + u64::from(member);
            (slot % u64::from(g.copies())) as usize
        }
        _ => 0,
    }
}

/// Whether a client range is a multiblock and a multistripe transfer.
pub fn transfer_shape(g: &Geometry, offset_bytes: u64, len_bytes: u64) -> (bool, bool) {
    if len_bytes == 0 {
        return (false, false);
    }
    let last = offset_bytes + len_bytes - 1;
    assert!(last < g.volume_size_bytes(), "a transfer in the volume");
    let il = g.interleave_bytes();
    match g.level() {
        // Every copy is one contiguous run on one member.
        Level::Mirror => (false, false),
        // More than one member; concat has no stripes.
        Level::Concat => {
            let member = |b: u64| {
                let (stripe, d) = g.chunk_position(b / il);
                g.data_locations(stripe, d).next().expect("one copy").member
            };
            (member(offset_bytes) != member(last), false)
        }
        Level::Stripe | Level::Raid10 | Level::Raid5 | Level::Raid6 => {
            let sb = g.stripe_data_bytes();
            (
                offset_bytes / il != last / il,
                offset_bytes / sb != last / sb,
            )
        }
    }
}

impl Volume {
    /// A snapshot of the counters, with the live gauges filled in.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats.clone();
        let mut outstanding = 0;
        for p in &mut s.plexes {
            p.outstanding = 0;
        }
        for op in self.ops.values() {
            if op.req.latency_of().is_none() {
                continue;
            }
            outstanding += 1;
            // A read counts on the plexes its plan reads; anything else
            // (and a read not planned yet) on every plex.
            let planned = &op.tally.plex_bytes;
            for (p, plex) in s.plexes.iter_mut().enumerate() {
                if planned.is_empty() || planned.get(p).is_some_and(|&b| b > 0) {
                    plex.outstanding += 1;
                }
            }
        }
        assert!(s.plexes.iter().all(|p| p.outstanding <= outstanding));
        s.volume.outstanding = outstanding;
        for m in &mut s.members {
            m.outstanding = 0;
        }
        for io in self.inflight.values() {
            s.members[io.member as usize].outstanding += 1;
        }
        if let Some(i) = self.integrity.as_ref() {
            let mut c = crate::stats::ChecksumStats::default();
            for (m, ms) in s.members.iter_mut().enumerate() {
                let st = i.stats(m as u32);
                ms.checksum_mismatched_blocks = st.blocks_mismatched;
                c.verified_blocks += st.blocks_verified;
                c.mismatched_blocks += st.blocks_mismatched;
                c.trusted_blocks += st.blocks_trusted;
                c.page_reads += st.page_reads;
                c.page_writes += st.page_writes;
                c.pages_refused += st.pages_refused;
                c.pages_stale += st.pages_stale;
                c.repaired_reads += self.checksums_repaired(m as u32);
            }
            s.checksums = Some(c);
        }
        s.ppl = self.ppl_stats();
        s
    }

    /// Zeroes every counter and histogram (not the live gauges, and not
    /// the checksum counters, which count since assembly like the read
    /// errors corrected).
    pub fn reset_stats(&mut self) {
        self.stats.reset();
    }

    /// Records a latency the driver measured: a client request's, from
    /// submit to completion, or a member I/O's, from issue to result.
    pub fn record_latency(&mut self, of: LatencyOf, ns: u64) {
        let v = &mut self.stats.volume;
        match of {
            LatencyOf::Read => v.read_latency.record(ns),
            LatencyOf::Write => v.write_latency.record(ns),
            LatencyOf::Other => v.other_latency.record(ns),
            LatencyOf::Member(m) => {
                if let Some(m) = self.stats.members.get_mut(m as usize) {
                    m.latency.record(ns);
                }
            }
        }
    }

    /// A member I/O was issued.
    pub(super) fn account_issue(&mut self, member: u32, op: &MemberOp) {
        assert!(
            (member as usize) < self.stats.members.len(),
            "no member {member}"
        );
        let m = &mut self.stats.members[member as usize];
        match op {
            MemberOp::Read { len_bytes, .. } => {
                m.reads += 1;
                m.bytes_read += len_bytes;
            }
            MemberOp::Write { data, .. } => {
                m.writes += 1;
                m.bytes_written += data.len() as u64;
            }
            MemberOp::Trim { len_bytes, .. } => {
                m.trims += 1;
                m.bytes_trimmed += len_bytes;
            }
            MemberOp::Flush => m.flushes += 1,
        }
    }

    /// A member I/O's result came back.
    pub(super) fn account_io_result(&mut self, member: u32, result: &IoResult) {
        assert!(
            (member as usize) < self.stats.members.len(),
            "no member {member}"
        );
        if result.is_err() {
            self.stats.members[member as usize].errors += 1;
        }
    }

    /// A read phase is about to be issued: for a client read, note which
    /// plex serves which bytes and whether any are rebuilt from parity.
    pub(super) fn account_reads(&mut self, id: RequestId, reads: &ReadPieces) {
        let g = &self.geometry;
        let plexes = plex_count(g) as usize;
        let op = self.ops.get_mut(&id).expect("live request");
        if !matches!(op.req, Request::Read { .. }) {
            return;
        }
        if g.level().is_parity() {
            op.tally.reconstructed |= reads.iter().any(|p| matches!(p.target, Target::Job { .. }));
            return;
        }
        if plexes > 1 {
            op.tally.plex_bytes.clear();
            op.tally.plex_bytes.resize(plexes, 0);
            for p in reads {
                if matches!(p.target, Target::Out { .. }) {
                    op.tally.plex_bytes[plex_of(g, p.member, p.offset_bytes)] += p.len_bytes;
                }
            }
            // A read phase delivers at most the request's bytes.
            let planned: u64 = op.tally.plex_bytes.iter().sum();
            assert!(planned <= op.req.range().1);
        }
    }

    /// A parity write's stripes are about to be computed: count each by
    /// the way its parity is kept.
    pub(super) fn account_stripe_writes(&mut self, id: RequestId) {
        let g = &self.geometry;
        let stripe_bytes = g.stripe_data_bytes();
        let op = &self.ops[&id];
        let mut counts = [0u64; 4];
        for job in &op.plan.jobs {
            let parity_kept = std::iter::once(job.roles.p)
                .chain(job.roles.q)
                .any(|m| self.usable(m, job.stripe));
            let new_bytes: u64 = job.new_data.iter().map(|(_, _, b)| b.len() as u64).sum();
            let i = match job.strategy {
                _ if !parity_kept => 3,
                super::write::Strategy::ReconstructWrite if new_bytes == stripe_bytes => 0,
                super::write::Strategy::ReadModifyWrite => 1,
                super::write::Strategy::ReconstructWrite | super::write::Strategy::Reconstruct => 2,
            };
            assert!(new_bytes <= stripe_bytes, "a job writes within its stripe");
            counts[i] += 1;
        }
        let op = self.ops.get_mut(&id).expect("live request");
        for (t, c) in op.tally.stripes.iter_mut().zip(counts) {
            *t += c;
        }
    }

    /// A request finished: count it.
    pub(super) fn account_finish(&mut self, op: &Op, result: &Result<Reply, VolumeError>) {
        if let (
            Request::Maintain {
                action: Maintenance::Destage,
                ..
            },
            Ok(_),
        ) = (&op.req, result)
        {
            // The stripe cache writing out client data: its stripes count
            // like those of the writes that filled it (the writes
            // themselves were counted when they completed). An entry the
            // writes made whole goes out with the write that completed it
            // (`cache_absorb`), but if that write-out fails (a member died
            // under it) its bytes go back into the cache whole, uncounted
            // (a failed request counts as an error), and a destage writes
            // them: a full-stripe write. Seed 407749 of the rebuild suite
            // once tripped an assert that said this never happens.
            let s = &op.tally.stripes;
            for c in std::iter::once(&mut self.stats.volume.counters)
                .chain(self.stats.plexes.iter_mut().map(|p| &mut p.counters))
            {
                c.full_stripe_writes += s[0];
                c.read_modify_writes += s[1];
                c.reconstruct_writes += s[2];
                c.parityless_writes += s[3];
            }
            return;
        }
        if op.req.latency_of().is_none() {
            return;
        }
        if result.is_err() {
            self.stats.volume.errors += 1;
            return;
        }
        let (offset_bytes, len_bytes) = op.req.range();
        let g = &self.geometry;
        let (multiblock, multistripe) = transfer_shape(g, offset_bytes, len_bytes);
        let plexes = self.stats.plexes.len();
        // Request bytes per plex, and the plexes that missed some (writes).
        let mut per_plex: SmallVec<[u64; 4]> = SmallVec::from_elem(0, plexes);
        let mut missed: SmallVec<[bool; 4]> = SmallVec::from_elem(false, plexes);
        let mut recovered = false;
        let read = match op.req {
            Request::Read { .. } => true,
            Request::Write { .. } | Request::WriteZeroes { .. } => false,
            Request::Trim { .. } => {
                self.stats.volume.trims += 1;
                self.stats.volume.bytes_trimmed += len_bytes;
                return;
            }
            _ => {
                self.stats.volume.flushes += 1;
                return;
            }
        };
        if read {
            recovered = op.tally.reconstructed || op.trouble.replans > 0;
            if plexes == 1 {
                per_plex[0] = len_bytes;
            } else {
                for (to, from) in per_plex.iter_mut().zip(&op.tally.plex_bytes) {
                    *to = *from;
                }
            }
        } else {
            self.write_reach(offset_bytes, len_bytes, &mut per_plex, &mut missed);
        }
        assert!(
            per_plex.iter().all(|&b| b <= len_bytes),
            "a plex gets at most the request"
        );
        let degraded = missed.contains(&true);
        let add = |c: &mut Counters, bytes: u64| {
            if read {
                c.reads += 1;
                c.bytes_read += bytes;
                c.recovered_reads += u64::from(recovered);
            } else {
                c.writes += 1;
                c.bytes_written += bytes;
                c.full_stripe_writes += op.tally.stripes[0];
                c.read_modify_writes += op.tally.stripes[1];
                c.reconstruct_writes += op.tally.stripes[2];
                c.parityless_writes += op.tally.stripes[3];
            }
            c.multiblock += u64::from(multiblock);
            c.multistripe += u64::from(multistripe);
        };
        add(&mut self.stats.volume.counters, len_bytes);
        self.stats.volume.counters.degraded_writes += u64::from(degraded);
        for (p, plex) in self.stats.plexes.iter_mut().enumerate() {
            if per_plex[p] > 0 {
                add(&mut plex.counters, per_plex[p]);
            }
            plex.counters.degraded_writes += u64::from(missed[p]);
        }
    }

    /// Where a finished write's bytes went: per plex, the request bytes
    /// whose copy (parity levels: data chunk and parity) is on members in
    /// use for that stripe, and whether the plex missed any. A member that
    /// failed during the write is out of use by now, so it counts as missed.
    fn write_reach(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        per_plex: &mut [u64],
        missed: &mut [bool],
    ) {
        let g = &self.geometry;
        assert_eq!(per_plex.len(), missed.len());
        if self.health.iter().all(|h| *h == super::Health::Online) {
            // Every copy of every chunk is one per plex.
            per_plex.fill(len_bytes);
            return;
        }
        if len_bytes == 0 {
            return;
        }
        if g.level().is_parity() {
            per_plex[0] = len_bytes;
            let mut roles: Option<(u64, crate::geometry::StripeRoles)> = None;
            for e in g.extents(offset_bytes, len_bytes) {
                if roles.as_ref().is_none_or(|(s, _)| *s != e.stripe) {
                    let r = g.parity_roles(e.stripe).expect("parity level");
                    if std::iter::once(r.p)
                        .chain(r.q)
                        .any(|m| !self.usable(m, e.stripe))
                    {
                        missed[0] = true;
                        return;
                    }
                    roles = Some((e.stripe, r));
                }
                let r = &roles.as_ref().expect("just set").1;
                if !self.usable(r.data[e.data_index as usize], e.stripe) {
                    missed[0] = true;
                    return;
                }
            }
            return;
        }
        // Copy j of a chunk is plex j (concat and stripe: one copy, one
        // plex).
        for e in g.extents(offset_bytes, len_bytes) {
            for (p, loc) in g.data_locations(e.stripe, e.data_index).enumerate() {
                if self.usable(loc.member, e.stripe) {
                    per_plex[p] += e.len_bytes;
                } else {
                    missed[p] = true;
                }
            }
        }
    }
}
