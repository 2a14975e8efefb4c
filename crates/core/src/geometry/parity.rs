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
    let n = members;
    let k = n - level.parity_members();
    let rot = (stripe % u64::from(n)) as u32;
    let (data, p, q) = match level {
        Level::Raid5 => {
            let (data, p) = raid5_roles(layout, n, k, rot);
            (data, p, None)
        }
        Level::Raid6 => {
            let (data, p, q) = raid6_roles(layout, n, k, rot);
            (data, p, Some(q))
        }
        _ => unreachable!("parity roles asked of {level}"),
    };
    let q_slot = match q {
        None => (0..k).collect(),
        Some(q) => {
            // md's raid6_d0 + raid6_idx_to_slot: slots are numbered walking
            // the disks from the one after Q. In every md layout Q follows
            // P, so P and Q are the last two disks of that walk and the data disks take
            // slots 0..k in order: a member's slot is its distance from Q,
            // less one. (Written as md's walk, the skipping of P and Q could
            // be mutated with no test able to tell.)
            assert_eq!(q, (p + 1) % n, "md's RAID-6 layouts put Q after P");
            data.iter().map(|&m| (m + n - q - 1) % n).collect()
        }
    };
    StripeRoles { data, p, q, q_slot }
}

/// RAID-5 over `n` members, `k` of them data, in rotation `rot`: the data
/// members in volume order, and P.
fn raid5_roles(layout: ParityLayout, n: u32, k: u32, rot: u32) -> (Vec<u32>, u32) {
    let p = match layout {
        ParityLayout::LeftAsymmetric
        | ParityLayout::LeftSymmetric
        | ParityLayout::LeftAsymmetric6
        | ParityLayout::LeftSymmetric6 => k - rot,
        ParityLayout::RightAsymmetric
        | ParityLayout::RightSymmetric
        | ParityLayout::RightAsymmetric6
        | ParityLayout::RightSymmetric6 => rot,
    };
    let mut data = Vec::with_capacity(k as usize);
    for d in 0..k {
        data.push(match layout {
            ParityLayout::LeftAsymmetric
            | ParityLayout::RightAsymmetric
            | ParityLayout::LeftAsymmetric6
            | ParityLayout::RightAsymmetric6 => {
                if d >= p {
                    d + 1
                } else {
                    d
                }
            }
            ParityLayout::LeftSymmetric
            | ParityLayout::RightSymmetric
            | ParityLayout::LeftSymmetric6
            | ParityLayout::RightSymmetric6 => (p + 1 + d) % n,
        });
    }
    (data, p)
}

/// RAID-6 as RAID-5, with Q after P: the data members, P and Q.
fn raid6_roles(layout: ParityLayout, n: u32, k: u32, rot: u32) -> (Vec<u32>, u32, u32) {
    let p = match layout {
        ParityLayout::LeftAsymmetric
        | ParityLayout::LeftSymmetric
        | ParityLayout::LeftAsymmetric6
        | ParityLayout::LeftSymmetric6 => n - 1 - rot,
        ParityLayout::RightAsymmetric
        | ParityLayout::RightSymmetric
        | ParityLayout::RightAsymmetric6
        | ParityLayout::RightSymmetric6 => rot,
    };
    let q = match layout {
        ParityLayout::LeftAsymmetric
        | ParityLayout::RightAsymmetric
        | ParityLayout::LeftAsymmetric6
        | ParityLayout::RightAsymmetric6 => {
            if p == n - 1 {
                0
            } else {
                p + 1
            }
        }
        ParityLayout::LeftSymmetric
        | ParityLayout::RightSymmetric
        | ParityLayout::LeftSymmetric6
        | ParityLayout::RightSymmetric6 => (p + 1) % n,
    };
    let mut data = Vec::with_capacity(k as usize);
    for d in 0..k {
        data.push(match layout {
            ParityLayout::LeftAsymmetric
            | ParityLayout::RightAsymmetric
            | ParityLayout::LeftAsymmetric6
            | ParityLayout::RightAsymmetric6 => {
                if p == n - 1 {
                    d + 1
                } else if d >= p {
                    d + 2
                } else {
                    d
                }
            }
            ParityLayout::LeftSymmetric
            | ParityLayout::RightSymmetric
            | ParityLayout::LeftSymmetric6
            | ParityLayout::RightSymmetric6 => (p + 2 + d) % n,
        });
    }
    (data, p, q)
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
