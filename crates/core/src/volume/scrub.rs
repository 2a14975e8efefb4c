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
use super::{Maintenance, Op, Request, RequestId, StripeJob, Volume};
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
    pub(super) fn plan_scrub(&mut self, op: &mut Op) -> ReadPieces {
        let Request::Maintain {
            first_stripe,
            stripe_count,
            ..
        } = op.req
        else {
            unreachable!("planning a scrub of another request")
        };
        let g = self.geometry.clone();
        let il = g.interleave_bytes();
        let k = g.data_per_stripe();
        let n = g.members();
        let mut pieces = ReadPieces::new();
        for stripe in first_stripe..first_stripe + stripe_count {
            let whole = (0..n).all(|m| self.usable(m, stripe));
            let j = op.jobs.len() as u32;
            let mut job = StripeJob {
                stripe,
                lo_bytes: 0,
                hi_bytes: il,
                roles: g
                    .parity_roles(stripe)
                    .unwrap_or_else(|| crate::geometry::StripeRoles {
                        data: Vec::new(),
                        p: u32::MAX,
                        q: None,
                        q_slot: Vec::new(),
                    }),
                bufs: Vec::new(),
                present: Vec::new(),
                wants: Vec::new(),
                new_data: Vec::new(),
                // Unused by scrubs; `wants` marks a stripe left unchecked.
                strategy: Strategy::Reconstruct,
            };
            if !whole {
                job.wants.push((u32::MAX, 0, 0, 0));
                op.jobs.push(job);
                continue;
            }
            if g.level().is_parity() {
                self.plan_hull_reads(j, &mut job, &mut pieces)
                    .expect("every member is usable");
            } else {
                job.bufs = (0..n)
                    .map(|_| vec![0u8; (u64::from(k) * il) as usize])
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
            op.jobs.push(job);
        }
        pieces
    }

    /// After a scrub's reads: compare, and list the rewrites of a repair.
    pub(super) fn compute_scrub(&mut self, id: RequestId) -> (CheckReport, WritePieces) {
        let mut op = self.ops.remove(&id).expect("live request");
        let Request::Maintain {
            first_stripe,
            stripe_count,
            action,
        } = op.req
        else {
            unreachable!("a scrub")
        };
        let repair = action == Maintenance::Repair;
        let g = self.geometry.clone();
        let il = g.interleave_bytes() as usize;
        let mut report = CheckReport {
            first_stripe,
            stripe_count,
            ..CheckReport::default()
        };
        let mut writes = WritePieces::new();
        for job in &mut op.jobs {
            if job.wants.first().is_some_and(|w| w.0 == u32::MAX) {
                report.unchecked_stripes += 1;
                continue;
            }
            let mut bad = false;
            if g.level().is_parity() {
                let roles = job.roles.clone();
                let mut fresh = StripeJob {
                    bufs: job.bufs.clone(),
                    present: Vec::new(),
                    roles: roles.clone(),
                    new_data: Vec::new(),
                    wants: Vec::new(),
                    ..*job
                };
                Self::generate_parity(&mut fresh);
                for m in std::iter::once(roles.p).chain(roles.q) {
                    if fresh.bufs[m as usize] != job.bufs[m as usize] {
                        bad = true;
                        if repair {
                            writes.push(WritePiece {
                                member: m,
                                offset_bytes: g.member_offset_bytes(job.stripe, 0),
                                kind: WriteKind::Data(Bytes::from(std::mem::take(
                                    &mut fresh.bufs[m as usize],
                                ))),
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
        op.jobs.clear();
        self.ops.insert(id, op);
        (report, writes)
    }
}
