//! Scrub: read whole stripes and check that parity matches the data (RAID-5,
//! RAID-6) or that every copy of a chunk is the same (mirror, RAID-10), and
//! on request rewrite what disagrees. Parity is recomputed from the data;
//! for copies, the first readable copy wins (md's rule: with two copies
//! there is no majority to ask).
//!
//! Stripes with a lost member are counted as unchecked: with nothing to
//! compare against, any content would pass.

use super::plan::{ReadPiece, ReadPieces, Target, WriteKind, WritePiece, WritePieces};
use super::write::Strategy;
use super::{Maintenance, Plan, Request, RequestId, StripeJob, Volume};
use crate::buf::AlignedBuf;
use bytes::Bytes;

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
}

impl Volume {
    pub(super) fn plan_scrub(&mut self, req: &Request, plan: &mut Plan) -> ReadPieces {
        let Request::Maintain {
            first_stripe,
            stripe_count,
            ..
        } = *req
        else {
            unreachable!("planning a scrub of another request")
        };
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
                continue;
            }
            let j = plan.jobs.len() as u32;
            // The strategy is unused by scrubs.
            let mut job =
                StripeJob::new(stripe, 0, il, g.parity_roles(stripe), Strategy::Reconstruct);
            if g.level().is_parity() {
                self.plan_hull_reads(j, &mut job, &mut pieces)
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
        plan.report = Some(report);
        pieces
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
        let repair = action == Maintenance::Repair;
        let g = self.geometry.clone();
        let il = g.interleave_bytes() as usize;
        let mut report = op.plan.report.take().expect("planned with its report");
        let mut writes = WritePieces::new();
        for job in &mut jobs {
            let mut bad = false;
            if g.level().is_parity() {
                let roles = job.roles.clone();
                // Parity as the data says it should be, beside what was read.
                let mut fresh =
                    StripeJob::new(job.stripe, 0, il as u64, Some(roles.clone()), job.strategy);
                fresh.bufs = job.bufs.clone();
                Self::generate_parity(&mut fresh);
                for m in std::iter::once(roles.p).chain(roles.q) {
                    if fresh.bufs[m as usize] != job.bufs[m as usize] {
                        bad = true;
                        if repair {
                            writes.push(WritePiece {
                                member: m,
                                offset_bytes: g.member_offset_bytes(job.stripe, 0),
                                kind: WriteKind::Data(
                                    std::mem::take(&mut fresh.bufs[m as usize]).into_bytes(),
                                ),
                            });
                        }
                    }
                }
            } else {
                // wants: (data index, row, member, offset in the buffers).
                let mut first_of: Vec<Option<(u64, u64)>> =
                    vec![None; g.data_per_stripe() as usize];
                for &(d, row, member, at) in &job.wants {
                    let a = at as usize;
                    match first_of[d as usize] {
                        None => first_of[d as usize] = Some((member, at)),
                        Some((m0, at0)) => {
                            let a0 = at0 as usize;
                            let same = job.bufs[m0 as usize][a0..a0 + il]
                                == job.bufs[member as usize][a..a + il];
                            if !same {
                                bad = true;
                                if repair {
                                    let good =
                                        Bytes::copy_from_slice(&job.bufs[m0 as usize][a0..a0 + il]);
                                    writes.push(WritePiece {
                                        member: member as u32,
                                        offset_bytes: g.member_offset_bytes(row, 0),
                                        kind: WriteKind::Data(good),
                                    });
                                }
                            }
                        }
                    }
                }
            }
            if bad {
                report.mismatched_stripes.push(job.stripe);
            }
        }
        (report, writes)
    }
}
