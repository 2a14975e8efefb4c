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
    let n = members;
    let k = n - level.parity_members();
    let rot = (stripe % u64::from(n)) as u32;
    let mut data = Vec::with_capacity(k as usize);
    let (p, q) = match level {
        Level::Raid5 => {
            let p = match layout {
                ParityLayout::LeftAsymmetric | ParityLayout::LeftSymmetric => k - rot,
                ParityLayout::RightAsymmetric | ParityLayout::RightSymmetric => rot,
            };
            for d in 0..k {
                data.push(match layout {
                    ParityLayout::LeftAsymmetric | ParityLayout::RightAsymmetric => {
                        if d >= p {
                            d + 1
                        } else {
                            d
                        }
                    }
                    ParityLayout::LeftSymmetric | ParityLayout::RightSymmetric => (p + 1 + d) % n,
                });
            }
            (p, None)
        }
        Level::Raid6 => {
            let p = match layout {
                ParityLayout::LeftAsymmetric | ParityLayout::LeftSymmetric => n - 1 - rot,
                ParityLayout::RightAsymmetric | ParityLayout::RightSymmetric => rot,
            };
            let q = match layout {
                ParityLayout::LeftAsymmetric | ParityLayout::RightAsymmetric => {
                    if p == n - 1 {
                        0
                    } else {
                        p + 1
                    }
                }
                ParityLayout::LeftSymmetric | ParityLayout::RightSymmetric => (p + 1) % n,
            };
            for d in 0..k {
                data.push(match layout {
                    ParityLayout::LeftAsymmetric | ParityLayout::RightAsymmetric => {
                        if p == n - 1 {
                            d + 1
                        } else if d >= p {
                            d + 2
                        } else {
                            d
                        }
                    }
                    ParityLayout::LeftSymmetric | ParityLayout::RightSymmetric => (p + 2 + d) % n,
                });
            }
            (p, Some(q))
        }
        _ => unreachable!("parity roles asked of {level}"),
    };
    let q_slot = match q {
        None => (0..k).collect(),
        Some(q) => {
            // md's raid6_d0 + raid6_idx_to_slot: walk from the disk after Q
            // (md writes `q == n - 1 ? 0 : q + 1`; the same, and a mutation
            // of its `n - 1` could not be told from the original).
            let d0 = (q + 1) % n;
            let mut slot_of_member = vec![u32::MAX; n as usize];
            let mut slot = 0;
            for i in 0..n {
                let m = (d0 + i) % n;
                if m != p && m != q {
                    slot_of_member[m as usize] = slot;
                    slot += 1;
                }
            }
            data.iter().map(|&m| slot_of_member[m as usize]).collect()
        }
    };
    StripeRoles { data, p, q, q_slot }
}
