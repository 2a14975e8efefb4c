//! Filesystem alignment: the stripe unit and width mkfs should be told
//! for a volume, and the commands that tell it. A filesystem made on a
//! platter export through a loop device or NBD sees no RAID geometry, so
//! XFS and ext4 cannot find it themselves; misaligned, every full-stripe
//! write of theirs becomes two partial ones (read-modify-write on parity
//! levels).

use crate::geometry::Geometry;
use crate::level::Level;

/// ext4's block size, which its stride is counted in.
const EXT4_BLOCK_BYTES: u64 = 4096;
/// XFS's log stripe unit limit (mkfs.xfs refuses a larger one and falls
/// back to 32 KiB).
const XFS_LOG_SU_MAX_BYTES: u64 = 256 << 10;

/// What to tell mkfs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FsAlignment {
    /// A striped volume: `units` stripe units of `unit_bytes` of data to a
    /// full stripe.
    Striped {
        unit_bytes: u64,
        units: u64,
        xfs: String,
        ext4: String,
    },
    /// Nothing to align to, or nothing a filesystem can align to; why.
    None(String),
}

/// The alignment for `g`.
pub fn alignment(g: &Geometry) -> FsAlignment {
    let unit_bytes = g.interleave_bytes();
    let units = g.stripe_data_bytes() / unit_bytes;
    if g.level() == Level::Concat || units < 2 {
        return FsAlignment::None(format!(
            "{} has no stripes of several chunks: nothing to align to",
            g.level().name()
        ));
    }
    if !unit_bytes.is_multiple_of(EXT4_BLOCK_BYTES) {
        return FsAlignment::None(format!(
            "the interleave ({} bytes) is not a multiple of 4 KiB, which XFS and ext4 need \
             (recreate with --interleave 64k, say, to align a filesystem)",
            unit_bytes
        ));
    }
    let su = size_text(unit_bytes);
    let log = if unit_bytes <= XFS_LOG_SU_MAX_BYTES {
        format!(" -l su={su}")
    } else {
        String::new()
    };
    let stride = unit_bytes / EXT4_BLOCK_BYTES;
    FsAlignment::Striped {
        unit_bytes,
        units,
        xfs: format!("mkfs.xfs -d su={su},sw={units}{log}"),
        ext4: format!(
            "mkfs.ext4 -b 4096 -E stride={stride},stripe_width={}",
            stride * units
        ),
    }
}

impl FsAlignment {
    /// The `status` line(s).
    pub fn lines(&self) -> Vec<String> {
        match self {
            FsAlignment::Striped { xfs, ext4, .. } => vec![xfs.clone(), ext4.clone()],
            FsAlignment::None(why) => vec![format!("no alignment: {why}")],
        }
    }
}

/// `64k`, `1m`: the size as mkfs.xfs takes it (whole KiB here).
fn size_text(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{}m", bytes >> 20)
    } else {
        format!("{}k", bytes >> 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::GeometrySpec;
    use crate::level::ParityLayout;

    fn geometry(level: Level, members: usize, copies: u32, interleave_bytes: u64) -> Geometry {
        Geometry::new(GeometrySpec {
            level,
            parity_layout: ParityLayout::DEFAULT,
            copies,
            interleave_bytes,
            data_offset_bytes: 0,
            member_data_bytes: vec![64 << 20; members],
        })
        .unwrap()
    }

    #[test]
    fn striped_levels_get_unit_and_width_of_their_data_chunks() {
        let cases = [
            (
                Level::Raid5,
                4,
                1,
                64 << 10,
                "mkfs.xfs -d su=64k,sw=3 -l su=64k",
                "stride=16,stripe_width=48",
            ),
            (
                Level::Raid6,
                6,
                1,
                512 << 10,
                "mkfs.xfs -d su=512k,sw=4",
                "stride=128,stripe_width=512",
            ),
            (
                Level::Stripe,
                4,
                1,
                1 << 20,
                "mkfs.xfs -d su=1m,sw=4",
                "stride=256,stripe_width=1024",
            ),
            (
                Level::Raid10,
                4,
                2,
                64 << 10,
                "mkfs.xfs -d su=64k,sw=2 -l su=64k",
                "stride=16,stripe_width=32",
            ),
        ];
        for (level, n, copies, il, xfs_want, ext4_want) in cases {
            match alignment(&geometry(level, n, copies, il)) {
                FsAlignment::Striped { xfs, ext4, .. } => {
                    assert_eq!(xfs, xfs_want, "{level:?}");
                    assert!(ext4.ends_with(ext4_want), "{level:?}: {ext4}");
                }
                other => panic!("{level:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn mirrors_concats_and_odd_interleaves_get_a_reason() {
        for g in [
            geometry(Level::Mirror, 2, 2, 64 << 10),
            geometry(Level::Concat, 3, 1, 64 << 10),
            geometry(Level::Raid5, 4, 1, 126 * 512),
        ] {
            assert!(
                matches!(alignment(&g), FsAlignment::None(_)),
                "{:?}",
                g.level()
            );
        }
    }
}
