//! Parity placement for RAID-5 and RAID-6: Linux md's `raid5_compute_sector`,
//! so that a volume's members hold their chunks where md would put them.

use crate::level::{Level, ParityLayout};

/// The members of one parity stripe by role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StripeRoles {
    /// The member holding each data index, in volume order.
    pub data: Vec<u32>,
    pub p: u32,
    pub q: Option<u32>,
    /// Each data index's position in Q's syndrome (coefficient g^slot). md
    /// walks the disks from the one after Q, so for the asymmetric layouts
    /// this is not the data index.
    pub q_slot: Vec<u32>,
}

impl StripeRoles {
    /// The role of `member` in this stripe.
    pub fn role_of(&self, member: u32) -> Role {
        if member == self.p {
            Role::P
        } else if Some(member) == self.q {
            Role::Q
        } else {
            let d = self
                .data
                .iter()
                .position(|&m| m == member)
                .expect("every member has a role in a parity stripe");
            Role::Data(d as u32)
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Data(u32),
    P,
    Q,
}

pub(super) fn stripe_roles(
    level: Level,
    layout: ParityLayout,
    members: u32,
    stripe: u64,
) -> StripeRoles {
    if let (Level::Raid6, Some(base)) = (level, layout.raid5_part()) {
        return q_last(base, members, stripe);
    }
    assert!(level.is_parity(), "parity roles asked of {level}");
    let n = members;
    let k = n - level.parity_members();
    let rot = (stripe % u64::from(n)) as u32;
    // md writes `data_disks - rot` for RAID-5 and `raid_disks - 1 - rot`
    // for RAID-6: both are the last disk's number less the rotation.
    let p = if left(layout) { n - 1 - rot } else { rot };
    // md's asymmetric RAID-6 puts Q at `p + 1`, or at 0 when P is the last
    // disk: the same disk as the symmetric layouts' `(p + 1) % n`.
    let q = (level == Level::Raid6).then_some((p + 1) % n);
    let data = (0..k)
        .map(|d| data_member(layout, n, p, q.is_some(), d))
        .collect::<Vec<u32>>();
    let q_slot = match q {
        None => (0..k).collect(),
        Some(q) => {
            // md's raid6_d0 + raid6_idx_to_slot: slots are numbered walking
            // the disks from the one after Q. Q follows P (above), so P and
            // Q are the last two disks of that walk and the data disks take
            // slots 0..k in order: a member's slot is its distance from Q,
            // less one. (Written as md's walk, the skipping of P and Q could
            // be mutated with no test able to tell.)
            data.iter().map(|&m| (m + n - q - 1) % n).collect()
        }
    };
    StripeRoles { data, p, q, q_slot }
}

/// Whether P walks down from the last disk as stripes go on (md's left
/// layouts) rather than up from disk 0.
fn left(layout: ParityLayout) -> bool {
    match layout {
        ParityLayout::LeftAsymmetric
        | ParityLayout::LeftSymmetric
        | ParityLayout::LeftAsymmetric6
        | ParityLayout::LeftSymmetric6 => true,
        ParityLayout::RightAsymmetric
        | ParityLayout::RightSymmetric
        | ParityLayout::RightAsymmetric6
        | ParityLayout::RightSymmetric6 => false,
    }
}

/// The disk of data index `d` in a stripe whose P is on disk `p` (and Q,
/// with `with_q`, on the disk after it), as md's `raid5_compute_sector`
/// places it: the symmetric layouts start the data on the disk after the
/// parity and wrap; the asymmetric ones keep disk order, skipping parity.
fn data_member(layout: ParityLayout, n: u32, p: u32, with_q: bool, d: u32) -> u32 {
    let parity = 1 + u32::from(with_q);
    match layout {
        ParityLayout::LeftSymmetric
        | ParityLayout::RightSymmetric
        | ParityLayout::LeftSymmetric6
        | ParityLayout::RightSymmetric6 => (p + parity + d) % n,
        ParityLayout::LeftAsymmetric
        | ParityLayout::RightAsymmetric
        | ParityLayout::LeftAsymmetric6
        | ParityLayout::RightAsymmetric6 => {
            if with_q && p == n - 1 {
                // Q wrapped to disk 0: Q D D D P
                d + 1
            } else if d >= p {
                d + parity
            } else {
                d
            }
        }
    }
}

/// md's `_6` RAID-6 layouts: RAID-5 layout `base` over the first
/// `members - 1` members (its rotation by their count), Q on the last.
/// md walks the syndrome's disks from disk 0 when Q is the last
/// (`raid6_d0`), so a data member's slot is its order among the data
/// members by disk number.
fn q_last(base: ParityLayout, members: u32, stripe: u64) -> StripeRoles {
    let q = members - 1;
    let r5 = stripe_roles(Level::Raid5, base, q, stripe);
    let q_slot = r5
        .data
        .iter()
        .map(|&m| r5.data.iter().filter(|&&d| d < m).count() as u32)
        .collect();
    StripeRoles {
        data: r5.data,
        p: r5.p,
        q: Some(q),
        q_slot,
    }
}
