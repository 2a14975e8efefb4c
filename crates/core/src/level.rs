//! RAID levels and parity placements, with the names the CLI and the label use.

use std::fmt;
use std::str::FromStr;

/// How a volume combines its members.
///
/// The numeric codes are stored in the label (`docs/on-disk-format.md`); never
/// renumber them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Level {
    Concat,
    Stripe,
    Mirror,
    Raid10,
    Raid5,
    Raid6,
}

impl Level {
    pub const ALL: [Level; 6] = [
        Level::Concat,
        Level::Stripe,
        Level::Mirror,
        Level::Raid10,
        Level::Raid5,
        Level::Raid6,
    ];

    pub fn code(self) -> u8 {
        match self {
            Level::Concat => 1,
            Level::Stripe => 2,
            Level::Mirror => 3,
            Level::Raid10 => 4,
            Level::Raid5 => 5,
            Level::Raid6 => 6,
        }
    }

    pub fn from_code(code: u8) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.code() == code)
    }

    pub fn name(self) -> &'static str {
        match self {
            Level::Concat => "concat",
            Level::Stripe => "stripe",
            Level::Mirror => "mirror",
            Level::Raid10 => "raid10",
            Level::Raid5 => "raid5",
            Level::Raid6 => "raid6",
        }
    }

    /// Members per stripe that hold parity.
    pub fn parity_members(self) -> u32 {
        match self {
            Level::Raid5 => 1,
            Level::Raid6 => 2,
            _ => 0,
        }
    }

    pub fn is_parity(self) -> bool {
        self.parity_members() > 0
    }

    /// The fewest members the level can be built from.
    pub fn min_members(self) -> u32 {
        match self {
            Level::Concat | Level::Stripe => 1,
            Level::Mirror | Level::Raid10 => 2,
            Level::Raid5 => 3,
            Level::Raid6 => 4,
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.to_ascii_lowercase();
        let alias = match s.as_str() {
            "raid0" => "stripe",
            "raid1" => "mirror",
            "linear" => "concat",
            other => other,
        };
        Level::ALL
            .into_iter()
            .find(|l| l.name() == alias)
            .ok_or_else(|| {
                format!(
                    "unknown level '{s}' (expected concat, stripe, mirror, raid10, raid5 or raid6)"
                )
            })
    }
}

/// Where parity goes in each stripe of a RAID-5 or RAID-6 volume: Linux md's
/// four algorithms, with md's numbering (`ALGORITHM_LEFT_ASYMMETRIC` = 0 ...),
/// and for RAID-6 only md's `_6` variants (`ALGORITHM_LEFT_ASYMMETRIC_6` =
/// 16 ...): the RAID-5 layout over all members but the last, with Q always
/// on the last. A RAID-5 of n members becomes a RAID-6 of n + 1 in the
/// `_6` layout without moving a byte: only Q is written, on the added
/// member (md's `--grow --level=6 --layout=preserve`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParityLayout {
    LeftAsymmetric,
    RightAsymmetric,
    LeftSymmetric,
    RightSymmetric,
    LeftAsymmetric6,
    RightAsymmetric6,
    LeftSymmetric6,
    RightSymmetric6,
}

impl ParityLayout {
    /// The layouts of both levels.
    pub const ALL: [ParityLayout; 4] = [
        ParityLayout::LeftAsymmetric,
        ParityLayout::RightAsymmetric,
        ParityLayout::LeftSymmetric,
        ParityLayout::RightSymmetric,
    ];

    /// RAID-6's alone: a RAID-5 layout with Q on the last member.
    pub const RAID6_ONLY: [ParityLayout; 4] = [
        ParityLayout::LeftAsymmetric6,
        ParityLayout::RightAsymmetric6,
        ParityLayout::LeftSymmetric6,
        ParityLayout::RightSymmetric6,
    ];

    /// md's default, and ours.
    pub const DEFAULT: ParityLayout = ParityLayout::LeftSymmetric;

    pub fn code(self) -> u8 {
        match self {
            ParityLayout::LeftAsymmetric => 0,
            ParityLayout::RightAsymmetric => 1,
            ParityLayout::LeftSymmetric => 2,
            ParityLayout::RightSymmetric => 3,
            ParityLayout::LeftAsymmetric6 => 16,
            ParityLayout::RightAsymmetric6 => 17,
            ParityLayout::LeftSymmetric6 => 18,
            ParityLayout::RightSymmetric6 => 19,
        }
    }

    pub fn from_code(code: u8) -> Option<ParityLayout> {
        ParityLayout::ALL
            .into_iter()
            .chain(ParityLayout::RAID6_ONLY)
            .find(|l| l.code() == code)
    }

    pub fn name(self) -> &'static str {
        match self {
            ParityLayout::LeftAsymmetric => "left-asymmetric",
            ParityLayout::RightAsymmetric => "right-asymmetric",
            ParityLayout::LeftSymmetric => "left-symmetric",
            ParityLayout::RightSymmetric => "right-symmetric",
            ParityLayout::LeftAsymmetric6 => "left-asymmetric-6",
            ParityLayout::RightAsymmetric6 => "right-asymmetric-6",
            ParityLayout::LeftSymmetric6 => "left-symmetric-6",
            ParityLayout::RightSymmetric6 => "right-symmetric-6",
        }
    }

    /// For a `_6` layout, the RAID-5 layout of its members but the last.
    pub fn raid5_part(self) -> Option<ParityLayout> {
        match self {
            ParityLayout::LeftAsymmetric6 => Some(ParityLayout::LeftAsymmetric),
            ParityLayout::RightAsymmetric6 => Some(ParityLayout::RightAsymmetric),
            ParityLayout::LeftSymmetric6 => Some(ParityLayout::LeftSymmetric),
            ParityLayout::RightSymmetric6 => Some(ParityLayout::RightSymmetric),
            _ => None,
        }
    }

    /// The `_6` layout whose RAID-5 part is this one.
    pub fn with_q_last(self) -> Option<ParityLayout> {
        ParityLayout::RAID6_ONLY
            .into_iter()
            .find(|l| l.raid5_part() == Some(self))
    }
}

impl fmt::Display for ParityLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ParityLayout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.to_ascii_lowercase();
        let alias = match s.as_str() {
            "ls" => "left-symmetric",
            "la" => "left-asymmetric",
            "rs" => "right-symmetric",
            "ra" => "right-asymmetric",
            other => other,
        };
        ParityLayout::ALL
            .into_iter()
            .chain(ParityLayout::RAID6_ONLY)
            .find(|l| l.name() == alias)
            .ok_or_else(|| {
                format!(
                    "unknown layout '{s}' (expected left-symmetric, left-asymmetric, \
                     right-symmetric or right-asymmetric, or for raid6 the same with -6: \
                     Q on the last member)"
                )
            })
    }
}
