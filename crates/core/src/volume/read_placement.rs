//! The volume's side of read balancing (the policies are in
//! `crate::balance`): the operator's controls, and the placement of a
//! client read's extents on mirror and RAID-10 copies.

use super::plan::{ReadPiece, ReadPieces, Target};
use super::repair::Failure;
use super::Volume;
use crate::balance::{Balancer, Candidate, Candidates, ReadChoice, ReadPolicy};
use crate::geometry::{Extent, Geometry};

/// A new volume reads round-robin, as it always did, until told otherwise
/// (the server sets the label's policy).
pub(super) fn new_balancer(geometry: &Geometry) -> Balancer {
    Balancer::new(geometry.members(), ReadPolicy::RoundRobin)
}

impl Volume {
    /// The read policy as set (`auto` stays `auto`).
    pub fn read_policy(&self) -> ReadPolicy {
        self.balancer.policy()
    }

    /// The policy reads follow now: `auto` resolved for the members'
    /// rotation, defaults filled in.
    pub fn effective_read_policy(&self) -> ReadPolicy {
        self.balancer.effective()
    }

    /// Changes the read policy; reads planned from now on follow it.
    /// Refused where it cannot apply (see [`ReadPolicy::check`]).
    pub fn set_read_policy(&mut self, policy: ReadPolicy) -> Result<(), String> {
        policy.check(
            self.geometry.level(),
            self.geometry.members(),
            self.geometry.copies(),
        )?;
        self.balancer.set_policy(policy);
        Ok(())
    }

    /// Tells `auto` whether `member` spins (`None`: unknown, treated as
    /// possibly spinning).
    pub fn set_rotational(&mut self, member: u32, rotational: Option<bool>) {
        assert!(member < self.geometry.members(), "no member {member}");
        self.balancer.set_rotational(member, rotational);
    }

    /// Tells the balancer `member`'s recent I/O time (0: not known).
    pub fn set_member_latency(&mut self, member: u32, latency_ns: u64) {
        assert!(member < self.geometry.members(), "no member {member}");
        self.balancer.set_latency(member, latency_ns);
    }

    /// Reads go to `member` only when no other usable copy holds the bytes.
    pub fn set_write_mostly(&mut self, member: u32, write_mostly: bool) {
        assert!(member < self.geometry.members(), "no member {member}");
        self.balancer.set_write_mostly(member, write_mostly);
    }

    /// Per member load and position, as the balancer sees them.
    pub fn balancer(&self) -> &Balancer {
        &self.balancer
    }

    /// Starts the copy choices of a client read (levels with copies only).
    pub(super) fn begin_read_choice(&mut self, offset_bytes: u64, len_bytes: u64) -> ReadChoice {
        let g = &self.geometry;
        // Split cuts one piece per copy usable where the read starts.
        let usable = match g.extents(offset_bytes, len_bytes.min(1)).next() {
            Some(e) => {
                let members: smallvec::SmallVec<[u32; 4]> = g
                    .data_locations(e.stripe, e.data_index)
                    .filter(|l| self.usable(l.member, e.stripe))
                    .map(|l| l.member)
                    .collect();
                self.balancer.readable_copies(members.iter().copied())
            }
            None => 0,
        };
        self.balancer.begin(offset_bytes, len_bytes, usable)
    }

    /// Places one extent of client read on its usable copies that have not
    /// failed these bytes; `false` when there is none.
    pub(super) fn place_read_extent(
        &self,
        choice: &mut ReadChoice,
        e: &Extent,
        at_bytes: u64,
        failed: Option<&[Failure]>,
        pieces: &mut ReadPieces,
    ) -> bool {
        let g = &self.geometry;
        let cands: Candidates = g
            .data_locations(e.stripe, e.data_index)
            .enumerate()
            .filter(|(_, l)| {
                self.usable(l.member, e.stripe)
                    && !Self::read_failed_on(failed, l.member, at_bytes, e.len_bytes)
            })
            .map(|(copy, l)| Candidate {
                member: l.member,
                copy: copy as u32,
                offset_bytes: g.member_offset_bytes(l.row, e.within_bytes),
            })
            .collect();
        if cands.is_empty() {
            return false;
        }
        let placed = self.balancer.place(
            choice,
            &cands,
            e.volume_offset_bytes,
            e.len_bytes,
            g.copies(),
        );
        for (skip, len, which) in placed {
            let c = cands[which];
            pieces.push(ReadPiece {
                member: c.member,
                offset_bytes: c.offset_bytes + skip,
                len_bytes: len,
                target: Target::Out {
                    at_bytes: at_bytes + skip,
                },
            });
        }
        true
    }
}
