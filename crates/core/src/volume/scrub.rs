//! Scrub: read whole stripes and check that parity matches the data (RAID-5,
//! RAID-6) or that every copy of a chunk is the same (mirror, RAID-10), and
//! on request rewrite what disagrees.
//!
//! Where the redundancy can say *which* member is wrong, the repair mends
//! that member: RAID-6 reads the culprit off the P and Q syndromes, page by
//! page (mdadm's `raid6check`; `platter_parity::locate`), and corrects a
//! data block, P or Q; three or more copies repair by majority. Where it
//! cannot (RAID-5's one syndrome, two copies, no majority, several wrong
//! blocks in one RAID-6 page) the stripe is reported *unlocated* and the
//! repair does what md's does: parity recomputed from the data, or the
//! first readable copy copied over the others.
//!
//! Stripes with a lost member are counted as unchecked: with nothing to
//! compare against, any content would pass.

use super::plan::{ReadPiece, ReadPieces, Target, WriteKind, WritePiece, WritePieces};
use super::write::Strategy;
use super::{Maintenance, Plan, Request, RequestId, StripeJob, Volume};
use crate::buf::AlignedBuf;
use bytes::Bytes;
use platter_parity::Culprit;

/// What a check found in its stripes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    pub first_stripe: u64,
    pub stripe_count: u64,
    /// Stripes whose parity or copies disagreed (and, for a repair, were
    /// rewritten).
    pub mismatched_stripes: Vec<u64>,
    /// Stripes skipped because a member was not usable.
    pub unchecked_stripes: u64,
    /// `(stripe, member)`: the member found wrong in a mismatched stripe
    /// (by RAID-6's syndromes or a majority of copies) and, for a repair,
    /// the one rewritten. In stripe order, a member at most once per stripe.
    pub wrong_members: Vec<(u64, u32)>,
    /// Mismatched stripes where the redundancy cannot say which member is
    /// wrong (RAID-5, two copies, no majority, several wrong blocks): a
    /// repair makes them agree, not necessarily right.
    pub unlocated_stripes: Vec<u64>,
}

impl CheckReport {
    /// The members named wrong in `stripe` (`wrong_members` is in stripe
    /// order, also when reports of consecutive steps are appended).
    pub fn wrong_members_of(&self, stripe: u64) -> impl Iterator<Item = u32> + '_ {
        let from = self.wrong_members.partition_point(|w| w.0 < stripe);
        self.wrong_members[from..]
            .iter()
            .take_while(move |w| w.0 == stripe)
            .map(|w| w.1)
    }
}

/// RAID-6 locates the wrong block page by page, as `raid6check` does: two
/// members wrong in different pages of one chunk are each found.
const LOCATE_PAGE_BYTES: usize = 4096;

impl Volume {
    pub(super) fn plan_scrub(&mut self, req: &Request, plan: &mut Plan) -> ReadPieces {
        let Request::Maintain {
            first_stripe,
            stripe_count,
            action,
        } = *req
        else {
            unreachable!("planning a scrub of another request")
        };
        assert!(matches!(
            action,
            Maintenance::Check | Maintenance::Repair | Maintenance::Resync
        ));
        assert!(
            stripe_count > 0 && first_stripe + stripe_count <= self.geometry.stripes(),
            "a scrub step of stripes {first_stripe}+{stripe_count} lies in the volume"
        );
        // The resync after a crash, with checksums: a stripe it cannot make
        // agree (a member missing) is still read on the members present,
        // so that their checksums are set from what they hold (the data
        // wins); otherwise a block whose write was cut short would fail
        // its checksum once the region counts as resynced.
        let refresh = action == Maintenance::Resync && self.integrity.is_some();
        let g = self.geometry.clone();
        let il = g.interleave_bytes();
        let k = g.data_per_stripe();
        let n = g.members();
        let mut pieces = ReadPieces::new();
        // Planned afresh after a failed read: the report starts over too.
        let mut report = CheckReport {
            first_stripe,
            stripe_count,
            ..CheckReport::default()
        };
        for stripe in first_stripe..first_stripe + stripe_count {
            if !(0..n).all(|m| self.usable(m, stripe)) {
                report.unchecked_stripes += 1;
                if refresh {
                    self.plan_refresh(stripe, plan, &mut pieces);
                }
                continue;
            }
            let j = plan.jobs.len() as u32;
            // The strategy is unused by scrubs.
            let mut job =
                StripeJob::new(stripe, 0, il, g.parity_roles(stripe), Strategy::Reconstruct);
            if g.level().is_parity() {
                self.plan_hull_reads(j, &mut job, &mut pieces, |_| false)
                    .expect("every member is usable");
            } else {
                job.bufs = (0..n)
                    .map(|_| AlignedBuf::zeroed((u64::from(k) * il) as usize))
                    .collect();
                for d in 0..k {
                    let chunk = stripe * u64::from(k) + u64::from(d);
                    if chunk * il >= g.volume_size_bytes() {
                        break;
                    }
                    for loc in g.data_locations(stripe, d) {
                        let at_bytes = u64::from(d) * il;
                        pieces.push(ReadPiece {
                            member: loc.member,
                            offset_bytes: g.member_offset_bytes(loc.row, 0),
                            len_bytes: il,
                            target: Target::Job {
                                job: j,
                                member: loc.member,
                                at_bytes,
                            },
                        });
                        job.wants
                            .push((d, loc.row, u64::from(loc.member), at_bytes));
                    }
                }
            }
            plan.jobs.push(job);
        }
        // One job per stripe compared or refreshed, in stripe order: the
        // report and `compute_scrub` walk them together.
        assert_eq!(
            plan.jobs.len() as u64,
            stripe_count - if refresh { 0 } else { report.unchecked_stripes }
        );
        assert!(plan.jobs.windows(2).all(|w| w[0].stripe < w[1].stripe));
        plan.report = Some(report);
        pieces
    }

    /// Reads of the usable members' chunks of `stripe` into a job that
    /// nothing compares (see `refresh` in [`Volume::plan_scrub`]).
    fn plan_refresh(&self, stripe: u64, plan: &mut Plan, pieces: &mut ReadPieces) {
        let g = &self.geometry;
        let il = g.interleave_bytes();
        let n = g.members();
        let j = plan.jobs.len() as u32;
        let mut job = StripeJob::new(stripe, 0, il, g.parity_roles(stripe), Strategy::Reconstruct);
        job.refresh_only = true;
        let k = u64::from(g.data_per_stripe());
        job.bufs = (0..n)
            .map(|_| AlignedBuf::zeroed((k * il) as usize))
            .collect();
        assert!(
            (0..n).any(|m| !self.usable(m, stripe)),
            "a stripe with every member usable is compared, not refreshed"
        );
        let mut rows: Vec<(u32, u64, u64)> = Vec::new();
        if g.level().is_parity() {
            rows.extend((0..n).map(|m| (m, stripe, 0)));
        } else {
            for d in 0..g.data_per_stripe() {
                let chunk = stripe * k + u64::from(d);
                if chunk * il >= g.volume_size_bytes() {
                    break;
                }
                for loc in g.data_locations(stripe, d) {
                    rows.push((loc.member, loc.row, u64::from(d) * il));
                }
            }
        }
        for (member, row, at_bytes) in rows {
            if !self.usable(member, stripe) {
                continue;
            }
            pieces.push(ReadPiece {
                member,
                offset_bytes: g.member_offset_bytes(row, 0),
                len_bytes: il,
                target: Target::Job {
                    job: j,
                    member,
                    at_bytes,
                },
            });
        }
        plan.jobs.push(job);
    }

    /// After a scrub's reads: compare, and list the rewrites of a repair.
    pub(super) fn compute_scrub(&mut self, id: RequestId) -> (CheckReport, WritePieces) {
        // The jobs and the report are this step's to consume; the request
        // stays in the table.
        let op = self.ops.get_mut(&id).expect("live request");
        let Request::Maintain { action, .. } = op.req else {
            unreachable!("a scrub")
        };
        let mut jobs = std::mem::take(&mut op.plan.jobs);
        let repair = matches!(action, Maintenance::Repair | Maintenance::Resync);
        // Naming a wrong member is for silent corruption; after a crash a
        // mismatch is a write cut short, and the data as it stands wins.
        let locate = action != Maintenance::Resync;
        let mut report = op.plan.report.take().expect("planned with its report");
        let mut writes = WritePieces::new();
        for job in &mut jobs {
            if job.refresh_only {
                continue;
            }
            let Ok(mended) = self.mend_suspects(job) else {
                // Too many to rebuild: nothing here can be trusted to
                // write from.
                report.mismatched_stripes.push(job.stripe);
                report.unlocated_stripes.push(job.stripe);
                continue;
            };
            let verdict = self.compare(job, locate);
            let verdict = match (mended, verdict) {
                (None, v) => v,
                (Some(m), None) => Some(m),
                (Some(mut m), Some(v)) => {
                    m.rewrite.extend(v.rewrite);
                    m.located &= v.located;
                    Some(m)
                }
            };
            let Some(verdict) = verdict else { continue };
            self.record_verdict(
                &mut report,
                job.stripe,
                verdict,
                repair.then_some(&mut writes),
            );
        }
        if action != Maintenance::Resync {
            self.count_scrub(&report, repair);
        }
        assert!(repair || writes.is_empty(), "a check writes nothing");
        assert!(report.unlocated_stripes.len() <= report.mismatched_stripes.len());
        (report, writes)
    }

    /// Members whose reads failed their checksums are wrong here: their
    /// chunks are rebuilt from the rest before comparing, and rewritten.
    /// `Err` when there are more than the redundancy rebuilds.
    fn mend_suspects(&self, job: &mut StripeJob) -> Result<Option<Verdict>, ()> {
        let g = &self.geometry;
        if job.suspects.is_empty() {
            return Ok(None);
        }
        if !g.level().is_parity() {
            return Ok(mend_copies(job, g.interleave_bytes() as usize));
        }
        if job.suspects.len() as u32 > g.redundancy() {
            return Err(());
        }
        assert!(job.suspects.iter().all(|&m| job.present[m as usize]));
        for &m in &job.suspects {
            job.present[m as usize] = false;
        }
        self.reconstruct(job);
        Ok(Some(Verdict {
            rewrite: job
                .suspects
                .iter()
                .map(|&m| Rewrite {
                    member: m,
                    row: job.stripe,
                    bytes: Bytes::copy_from_slice(&job.bufs[m as usize]),
                })
                .collect(),
            located: true,
        }))
    }

    /// The stripe's copies or parity compared: `None` when they agree.
    fn compare(&self, job: &mut StripeJob, locate: bool) -> Option<Verdict> {
        let g = &self.geometry;
        if g.level().is_parity() {
            scrub_parity(job, locate)
        } else {
            scrub_copies(
                job,
                g.data_per_stripe(),
                g.interleave_bytes() as usize,
                locate,
            )
        }
    }

    /// A mismatched stripe in the report (its wrong members, or unlocated),
    /// and its rewrites in `writes` when the scrub repairs.
    fn record_verdict(
        &self,
        report: &mut CheckReport,
        stripe: u64,
        verdict: Verdict,
        writes: Option<&mut WritePieces>,
    ) {
        assert!(
            !verdict.located || !verdict.rewrite.is_empty(),
            "stripe {stripe}: located, yet no member named wrong"
        );
        report.mismatched_stripes.push(stripe);
        if verdict.located {
            let mut wrong: Vec<u32> = verdict.rewrite.iter().map(|r| r.member).collect();
            wrong.sort_unstable();
            wrong.dedup();
            report
                .wrong_members
                .extend(wrong.into_iter().map(|m| (stripe, m)));
        } else {
            report.unlocated_stripes.push(stripe);
        }
        if let Some(writes) = writes {
            let g = &self.geometry;
            writes.extend(verdict.rewrite.into_iter().map(|r| WritePiece {
                member: r.member,
                offset_bytes: g.member_offset_bytes(r.row, 0),
                kind: WriteKind::Data(r.bytes),
            }));
        }
    }

    /// A check or repair's findings in the volume's scrub counters.
    fn count_scrub(&mut self, report: &CheckReport, repair: bool) {
        let s = &mut self.stats.scrub;
        s.checked_stripes += report.stripe_count - report.unchecked_stripes;
        s.mismatched_stripes += report.mismatched_stripes.len() as u64;
        s.wrong_members += report.wrong_members.len() as u64;
        s.unlocated_stripes += report.unlocated_stripes.len() as u64;
        if repair {
            s.repaired_stripes += report.mismatched_stripes.len() as u64;
        }
    }
}

/// A mismatched stripe: what a repair writes, and whether the redundancy
/// named the wrong members (`located`) or only made the stripe agree.
struct Verdict {
    rewrite: Vec<Rewrite>,
    located: bool,
}

/// One member's chunk, as a repair writes it.
struct Rewrite {
    member: u32,
    row: u64,
    bytes: Bytes,
}

/// A parity stripe as read (`job.bufs`, each member's whole chunk): `None`
/// when parity agrees. RAID-6 corrects the located block in place, page
/// by page; RAID-5, or a RAID-6 page with several wrong blocks, gets its
/// parity recomputed from the data.
fn scrub_parity(job: &mut StripeJob, locate: bool) -> Option<Verdict> {
    let roles = job.roles.clone();
    assert_eq!(job.bufs.len(), job.present.len(), "one buffer per member");
    let mut fresh = StripeJob::new(
        job.stripe,
        job.lo_bytes,
        job.hi_bytes,
        Some(roles.clone()),
        job.strategy,
    );
    fresh.bufs = job.bufs.clone();
    Volume::generate_parity(&mut fresh);
    let parity = std::iter::once(roles.p).chain(roles.q);
    if parity
        .clone()
        .all(|m| fresh.bufs[m as usize] == job.bufs[m as usize])
    {
        return None;
    }
    let n = job.bufs.len();
    let mut touched = vec![false; n];
    let mut located = true;
    match roles.q.filter(|_| locate) {
        None => {
            located = false;
            for m in parity.map(|m| m as usize) {
                if fresh.bufs[m] != job.bufs[m] {
                    touched[m] = true;
                    job.bufs[m] = fresh.bufs[m].clone();
                }
            }
        }
        Some(q) => {
            let (p, q) = (roles.p as usize, q as usize);
            let k = roles.data.len();
            // Data members in syndrome order.
            let mut by_slot = vec![0usize; k];
            for (d, &m) in roles.data.iter().enumerate() {
                by_slot[roles.q_slot[d] as usize] = m as usize;
            }
            // The syndromes, from the parity the data computes to (`fresh`).
            let syndrome = |m: usize| -> Vec<u8> {
                let mut s = fresh.bufs[m].to_vec();
                platter_parity::xor_into(&mut s, &job.bufs[m]);
                s
            };
            let (sp, sq) = (syndrome(p), syndrome(q));
            let len = sp.len();
            let mut from = 0;
            while from < len {
                let to = (from + LOCATE_PAGE_BYTES).min(len);
                match platter_parity::culprit(&sp[from..to], &sq[from..to], k) {
                    Culprit::Consistent => {}
                    Culprit::Data(z) => {
                        let m = by_slot[z];
                        platter_parity::correct_data(&mut job.bufs[m][from..to], &sp[from..to]);
                        touched[m] = true;
                    }
                    Culprit::P => {
                        let fresh_p = &fresh.bufs[p][from..to];
                        job.bufs[p][from..to].copy_from_slice(fresh_p);
                        touched[p] = true;
                    }
                    Culprit::Q => {
                        let fresh_q = &fresh.bufs[q][from..to];
                        job.bufs[q][from..to].copy_from_slice(fresh_q);
                        touched[q] = true;
                    }
                    Culprit::Several => {
                        located = false;
                        for m in [p, q] {
                            let fresh_m = &fresh.bufs[m][from..to];
                            job.bufs[m][from..to].copy_from_slice(fresh_m);
                            touched[m] = true;
                        }
                    }
                }
                from = to;
            }
        }
    }
    assert!(touched.iter().any(|&t| t), "a mismatch rewrites something");
    let rewrite = (0..n)
        .filter(|&m| touched[m])
        .map(|m| Rewrite {
            member: m as u32,
            row: job.stripe,
            bytes: std::mem::take(&mut job.bufs[m]).into_bytes(),
        })
        .collect();
    Some(Verdict { rewrite, located })
}

/// A mirror or RAID-10 stripe as read: each data chunk's copies (`job.wants`:
/// data index, row, member, offset in the buffers). `None` when every
/// chunk's copies agree. A chunk whose copies disagree is mended from the
/// content a strict majority of its copies hold; with no majority (two
/// copies, or a tie) from its first copy, unlocated.
fn scrub_copies(job: &StripeJob, k: u32, il: usize, locate: bool) -> Option<Verdict> {
    assert!(job.bufs.iter().all(|b| b.len() >= k as usize * il));
    let mut rewrite = Vec::new();
    let mut located = true;
    let mut bad = false;
    for d in 0..k {
        let copies: Vec<(u64, u32, &[u8])> = job
            .wants
            .iter()
            .filter(|w| w.0 == d)
            .map(|&(_, row, member, at)| {
                let at = at as usize;
                (row, member as u32, &job.bufs[member as usize][at..at + il])
            })
            .collect();
        let Some(&(_, _, first)) = copies.first() else {
            continue;
        };
        if copies.iter().all(|c| c.2 == first) {
            continue;
        }
        bad = true;
        let held_by = |bytes: &[u8]| copies.iter().filter(|c| c.2 == bytes).count();
        let majority = copies
            .iter()
            .map(|c| c.2)
            .find(|b| locate && 2 * held_by(b) > copies.len());
        let good = majority.unwrap_or_else(|| {
            located = false;
            first
        });
        for &(row, member, bytes) in &copies {
            if bytes != good {
                rewrite.push(Rewrite {
                    member,
                    row,
                    bytes: Bytes::copy_from_slice(good),
                });
            }
        }
    }
    assert!(bad || rewrite.is_empty());
    bad.then_some(Verdict { rewrite, located })
}

/// Whether `op` is a check or repair reading its stripes (where a checksum
/// mismatch names a wrong member instead of failing the read).
///
/// The resync after a crash too: it takes blocks as they stand, but not
/// those no sealed checksum page vouches for (a zeroed or discarded
/// member, or one that dropped writes: `crate::integrity`); those are
/// rebuilt from the rest of the stripe like a scrub's wrong blocks.
pub(super) fn scrubbing(op: &super::Op) -> bool {
    matches!(op.stage, super::Stage::Reading(_))
        && matches!(
            op.req,
            Request::Maintain {
                action: Maintenance::Check | Maintenance::Repair | Maintenance::Resync,
                ..
            }
        )
}

/// A scrub read of `dests` failed its checksums: its member is wrong for
/// the stripes whose bytes fall in the blocks that failed (all of them
/// when the read's bytes did not come back); the rest are taken as read.
pub(super) fn suspect(
    op: &mut super::Op,
    dests: &[super::plan::Dest],
    unverified: Option<&crate::member_io::Unverified>,
) {
    for d in dests {
        let (lo, hi) = (d.io_at_bytes, d.io_at_bytes + d.len_bytes);
        if let Some(u) = unverified {
            if !u.bad.iter().any(|&(a, b)| a < hi && lo < b) {
                let clean = super::plan::Dest {
                    io_at_bytes: 0,
                    ..*d
                };
                Volume::route(op, &[clean], u.data.slice(lo as usize..hi as usize));
                continue;
            }
        }
        if let Target::Job { job, member, .. } = d.target {
            assert!(scrubbing(op), "only a scrub's reads name suspects");
            let s = &mut op.plan.jobs[job as usize].suspects;
            if !s.contains(&member) {
                s.push(member);
            }
        }
    }
}

/// A mirror or RAID-10 stripe whose suspects' copies are replaced by a
/// copy that read clean; each replaced copy is a rewrite. Chunks with no
/// clean copy are left as read.
fn mend_copies(job: &mut StripeJob, il: usize) -> Option<Verdict> {
    assert!(!job.suspects.is_empty());
    let mut rewrite = Vec::new();
    let suspects = job.suspects.clone();
    for &(d, row, member, at) in &job.wants.clone() {
        let member = member as u32;
        if !suspects.contains(&member) {
            continue;
        }
        let Some(&(_, _, good, good_at)) = job
            .wants
            .iter()
            .find(|w| w.0 == d && !suspects.contains(&(w.2 as u32)))
        else {
            continue;
        };
        assert_ne!(good, member as u64, "a suspect copy mends from another");
        let (at, good_at) = (at as usize, good_at as usize);
        let bytes = Bytes::copy_from_slice(&job.bufs[good as usize][good_at..good_at + il]);
        job.bufs[member as usize][at..at + il].copy_from_slice(&bytes);
        rewrite.push(Rewrite { member, row, bytes });
    }
    (!rewrite.is_empty()).then_some(Verdict {
        rewrite,
        located: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The members named wrong in one stripe, from a report whose list is
    /// in stripe order: none before or after it. Mutation testing found the
    /// lookup unexamined in core (the server and the simulator call it).
    #[test]
    fn wrong_members_of_names_that_stripes_members_only() {
        let report = CheckReport {
            wrong_members: vec![(1, 2), (3, 0), (3, 4), (5, 1)],
            ..CheckReport::default()
        };
        let of = |s| report.wrong_members_of(s).collect::<Vec<_>>();
        assert_eq!(of(0), [0u32; 0]);
        assert_eq!(of(1), [2]);
        assert_eq!(of(2), [0u32; 0]);
        assert_eq!(of(3), [0, 4]);
        assert_eq!(of(5), [1]);
        assert_eq!(of(6), [0u32; 0]);
    }
}
