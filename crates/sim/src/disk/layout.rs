//! Zoned layout: logical block (LBN) to physical block (cylinder, head,
//! sector) and the angle at which each physical sector starts, with track
//! and cylinder skew, spare areas and slipped sectors, as DiskSim's
//! first-generation layout (`dm_layout_g1`) defines them.
//!
//! Angles are in sector slots of the zone's track (an integer in
//! `0..blocks_per_track`); a slot is `1 / blocks_per_track` of a
//! revolution, and slot 0 passes under the heads at whole multiples of
//! the rotation period.

/// Where spare sectors sit (DiskSim's "Sparing scheme used").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sparing {
    /// 0: no spares.
    None,
    /// 1: whole spare tracks at the end of each zone; slips are tracks.
    Tracks,
    /// 2: spare sectors at the end of each cylinder.
    PerCylinder,
    /// 3: spare sectors at the end of each track.
    PerTrack,
    /// 8: spare sectors at the end of each range of cylinders.
    PerRange { cylinders: u32 },
    /// 9: spare sectors at the end of each zone.
    PerZone,
}

impl Sparing {
    /// From DiskSim's scheme number; `None` for the schemes not modelled.
    pub fn from_disksim(scheme: i64, rangesize: u32) -> Option<Sparing> {
        Some(match scheme {
            0 => Sparing::None,
            1 => Sparing::Tracks,
            2 => Sparing::PerCylinder,
            3 => Sparing::PerTrack,
            8 => Sparing::PerRange {
                cylinders: rangesize.max(1),
            },
            9 => Sparing::PerZone,
            _ => return None,
        })
    }

    /// DiskSim's scheme number and range size, the inverse of
    /// [`Sparing::from_disksim`].
    pub fn to_disksim(self) -> (i64, u32) {
        match self {
            Sparing::None => (0, 1),
            Sparing::Tracks => (1, 1),
            Sparing::PerCylinder => (2, 1),
            Sparing::PerTrack => (3, 1),
            Sparing::PerRange { cylinders } => (8, cylinders),
            Sparing::PerZone => (9, 1),
        }
    }
}

/// The order in which a cylinder's tracks are filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// 0: heads 0, 1, ... on every cylinder.
    Normal,
    /// 1: odd cylinders (counted from the zone start) run heads downwards.
    SerpentineZone,
    /// 2: odd cylinders (absolute) run heads downwards.
    SerpentineDisk,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Zone {
    pub first_cyl: u32,
    pub last_cyl: u32,
    pub blocks_per_track: u32,
    /// Slot of the first block of the zone (sectors).
    pub first_block_offset: u32,
    /// Physical sectors at the front of the zone not in the mapping.
    pub dead_space: u64,
    /// Skews in sectors.
    pub track_skew: u32,
    pub cyl_skew: u32,
    /// Spare sectors (or tracks, for `Sparing::Tracks`) per sparing unit.
    pub spares: u64,
    /// Slipped sectors (or tracks), zone-relative physical numbers, sorted.
    pub slips: Vec<u64>,
    /// Remapped defects: (defective, spare it moved to), zone-relative
    /// physical sectors (tracks, for `Sparing::Tracks`). A pair naming
    /// one place twice moves nothing (DiskSim's rule).
    pub defects: Vec<(u64, u64)>,
    /// Computed: first LBN and LBN count of the zone.
    pub first_lbn: u64,
    pub lbns: u64,
}

impl Zone {
    pub fn cylinders(&self) -> u32 {
        self.last_cyl - self.first_cyl + 1
    }
}

/// A physical block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pbn {
    pub cyl: u32,
    pub head: u32,
    pub sector: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub surfaces: u32,
    pub sparing: Sparing,
    pub mapping: Mapping,
    pub zones: Vec<Zone>,
    pub blocks: u64,
}

/// Number of sorted `slips` at or below `x + count` (the fixpoint that
/// pushes an LBN past the slipped sectors before it).
fn slips_before(slips: &[u64], base: u64) -> u64 {
    let mut c = 0u64;
    loop {
        let n = slips.partition_point(|&s| s <= base + c) as u64;
        if n == c {
            return c;
        }
        c = n;
    }
}

impl Layout {
    /// Builds a layout; computes each zone's LBN range. Errors name the
    /// zone.
    pub fn new(
        surfaces: u32,
        sparing: Sparing,
        mapping: Mapping,
        mut zones: Vec<Zone>,
    ) -> Result<Layout, String> {
        if surfaces == 0 || zones.is_empty() {
            return Err("a layout needs surfaces and zones".into());
        }
        let mut next = 0u64;
        for (i, z) in zones.iter_mut().enumerate() {
            if z.last_cyl < z.first_cyl || z.blocks_per_track == 0 {
                return Err(format!("zone {i}: empty"));
            }
            z.slips.sort_unstable();
            let cyls = u64::from(z.cylinders());
            let bpt = u64::from(z.blocks_per_track);
            let raw = cyls * bpt * u64::from(surfaces);
            let lost = z.dead_space
                + match sparing {
                    Sparing::None => 0,
                    Sparing::Tracks => z.spares * bpt,
                    Sparing::PerCylinder => z.spares * cyls,
                    Sparing::PerTrack => z.spares * cyls * u64::from(surfaces),
                    Sparing::PerRange { cylinders } => z.spares * (cyls / u64::from(cylinders)),
                    Sparing::PerZone => z.spares,
                };
            if lost >= raw {
                return Err(format!("zone {i}: spares and dead space fill the zone"));
            }
            z.first_lbn = next;
            z.lbns = raw - lost;
            next += z.lbns;
        }
        Ok(Layout {
            surfaces,
            sparing,
            mapping,
            zones,
            blocks: next,
        })
    }

    pub fn zone_of_lbn(&self, lbn: u64) -> &Zone {
        assert!(lbn < self.blocks, "lbn {lbn} beyond {}", self.blocks);
        let i = self.zones.partition_point(|z| z.first_lbn + z.lbns <= lbn);
        &self.zones[i]
    }

    pub fn zone_of_cyl(&self, cyl: u32) -> Option<&Zone> {
        // Zones may leave gaps (spare cylinders): a gap belongs to the
        // zone before it, as in DiskSim's g1_st_pbn.
        let i = self.zones.partition_point(|z| z.first_cyl <= cyl);
        i.checked_sub(1).map(|i| &self.zones[i])
    }

    pub fn cylinders(&self) -> u32 {
        self.zones.iter().map(|z| z.last_cyl).max().unwrap_or(0) + 1
    }

    fn head_on_cyl(&self, z: &Zone, cyl: u32, track_in_cyl: u32) -> u32 {
        let flip = match self.mapping {
            Mapping::Normal => false,
            Mapping::SerpentineZone => (cyl - z.first_cyl) % 2 == 1,
            Mapping::SerpentineDisk => cyl % 2 == 1,
        };
        if flip {
            self.surfaces - 1 - track_in_cyl
        } else {
            track_in_cyl
        }
    }

    /// LBN to physical block, with slips and remapped defects.
    pub fn ltop(&self, lbn: u64) -> Pbn {
        let z = self.zone_of_lbn(lbn);
        let bpt = u64::from(z.blocks_per_track);
        let s = u64::from(self.surfaces);
        let per_cyl = bpt * s;
        let mut l = lbn - z.first_lbn + z.dead_space;
        let (cyl, track_in_cyl, sector) = match self.sparing {
            Sparing::None | Sparing::PerZone => {
                if self.sparing == Sparing::PerZone {
                    l += slips_before(&z.slips, l);
                }
                (l / per_cyl, (l % per_cyl) / bpt, l % bpt)
            }
            Sparing::Tracks => {
                let mut track = l / bpt;
                track += slips_before(&z.slips, track);
                if let Some(&(_, to)) = z.defects.iter().find(|&&(d, to)| d == track && to != d) {
                    track = to;
                }
                (track / s, track % s, l % bpt)
            }
            Sparing::PerCylinder => {
                let per = per_cyl - z.spares;
                let cyl = l / per;
                let mut off = l % per;
                let first = cyl * per_cyl;
                let on_cyl: Vec<u64> = z
                    .slips
                    .iter()
                    .filter(|&&x| x >= first)
                    .map(|&x| x - first)
                    .collect();
                off += slips_before(&on_cyl, off);
                // Slips use the cylinder's spares. (DiskSim wraps at the
                // LBNs per cylinder here, which maps two LBNs to one sector
                // when a cylinder has slips; we keep them on the cylinder.)
                let cyl = cyl + off / per_cyl;
                let off = off % per_cyl;
                (cyl, off / bpt, off % bpt)
            }
            Sparing::PerTrack => {
                let per = bpt - z.spares;
                let track = l / per;
                let mut off = l % per;
                let first = track * bpt;
                let on_track: Vec<u64> = z
                    .slips
                    .iter()
                    .filter(|&&x| x >= first)
                    .map(|&x| x - first)
                    .collect();
                off += slips_before(&on_track, off);
                (track / s, track % s, off.min(bpt - 1))
            }
            Sparing::PerRange { cylinders } => {
                let per_range = per_cyl * u64::from(cylinders);
                let lbns_per_range = per_range - z.spares;
                let range = l / lbns_per_range;
                let mut off = l % lbns_per_range;
                let first = range * per_range;
                let in_range: Vec<u64> = z
                    .slips
                    .iter()
                    .filter(|&&x| x >= first)
                    .map(|&x| x - first)
                    .collect();
                off += slips_before(&in_range, off);
                (
                    range * u64::from(cylinders) + off / per_cyl,
                    (off % per_cyl) / bpt,
                    off % bpt,
                )
            }
        };
        // A remapped defect: the sector lives in its spare.
        let (cyl, track_in_cyl, sector) = if self.sparing == Sparing::Tracks {
            (cyl, track_in_cyl, sector)
        } else {
            let phys = cyl * per_cyl + track_in_cyl * bpt + sector;
            match z.defects.iter().find(|&&(d, to)| d == phys && to != d) {
                Some(&(_, to)) => (to / per_cyl, (to % per_cyl) / bpt, to % bpt),
                None => (cyl, track_in_cyl, sector),
            }
        };
        let cyl = z.first_cyl + cyl as u32;
        Pbn {
            cyl,
            head: self.head_on_cyl(z, cyl, track_in_cyl as u32),
            sector: sector as u32,
        }
    }

    /// The physical block's LBN, or `None` for a spare, slipped or dead
    /// sector. Inverse of [`Layout::ltop`] (searches near the zone's
    /// linear estimate; for tests and tools, not the hot path).
    pub fn ptol(&self, p: Pbn) -> Option<u64> {
        let z = self.zone_of_cyl(p.cyl)?;
        let bpt = u64::from(z.blocks_per_track);
        let track_in_cyl = self.head_on_cyl(z, p.cyl, p.head);
        let phys = (u64::from(p.cyl - z.first_cyl) * u64::from(self.surfaces)
            + u64::from(track_in_cyl))
            * bpt
            + u64::from(p.sector);
        let spt = u64::from(self.surfaces) * bpt;
        let phys = phys.checked_sub(z.dead_space)?;
        // The LBN the sector would hold without slips (an upper bound):
        // whole sparing units before it lose their spares.
        let guess = match self.sparing {
            Sparing::None | Sparing::PerZone | Sparing::Tracks => phys,
            Sparing::PerTrack => (phys / bpt) * (bpt - z.spares) + (phys % bpt).min(bpt - z.spares),
            Sparing::PerCylinder => {
                (phys / spt) * (spt - z.spares) + (phys % spt).min(spt - z.spares)
            }
            Sparing::PerRange { cylinders } => {
                let per = spt * u64::from(cylinders);
                (phys / per) * (per - z.spares) + (phys % per).min(per - z.spares)
            }
        };
        let lo = z.first_lbn;
        let hi = z.first_lbn + z.lbns;
        let start = (lo + guess).min(hi.checked_sub(1)?);
        let window = (z.slips.len() as u64 + 2) * bpt;
        let mut l = start;
        loop {
            if self.ltop(l) == p {
                return Some(l);
            }
            if l == lo || start - l > window {
                return None;
            }
            l -= 1;
        }
    }

    /// The slot (angle in sectors) at which the physical sector starts.
    pub fn slot(&self, p: Pbn) -> u32 {
        let z = self.zone_of_cyl(p.cyl).expect("cylinder in a zone");
        let bpt = u64::from(z.blocks_per_track);
        let cyl_in_zone = u64::from(p.cyl - z.first_cyl);
        let track_in_cyl = u64::from(self.head_on_cyl(z, p.cyl, p.head));
        let switches = track_in_cyl + u64::from(self.surfaces - 1) * cyl_in_zone;
        let mut slot = u64::from(z.first_block_offset)
            + switches * u64::from(z.track_skew)
            + cyl_in_zone * u64::from(z.cyl_skew)
            + u64::from(p.sector);
        // Schemes with per-cylinder or per-track spares push the skew
        // forward by the slips before the track (DiskSim's assumption).
        if matches!(self.sparing, Sparing::PerCylinder | Sparing::PerTrack) {
            let mut tracks = cyl_in_zone * u64::from(self.surfaces);
            if self.sparing == Sparing::PerTrack {
                tracks += u64::from(p.head);
            }
            let cutoff = tracks * bpt;
            slot += z.slips.iter().filter(|&&s| s < cutoff).count() as u64;
        }
        (slot % bpt) as u32
    }

    pub fn blocks_per_track(&self, cyl: u32) -> u32 {
        self.zone_of_cyl(cyl).map_or(1, |z| z.blocks_per_track)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(
        first: u32,
        last: u32,
        bpt: u32,
        skew: (u32, u32),
        spares: u64,
        slips: Vec<u64>,
    ) -> Zone {
        Zone {
            first_cyl: first,
            last_cyl: last,
            blocks_per_track: bpt,
            first_block_offset: 0,
            dead_space: 0,
            track_skew: skew.0,
            cyl_skew: skew.1,
            spares,
            slips,
            defects: Vec::new(),
            first_lbn: 0,
            lbns: 0,
        }
    }

    #[test]
    fn round_trip_every_scheme() {
        for sparing in [
            Sparing::None,
            Sparing::Tracks,
            Sparing::PerCylinder,
            Sparing::PerTrack,
            Sparing::PerRange { cylinders: 2 },
            Sparing::PerZone,
        ] {
            let slips = match sparing {
                Sparing::Tracks => vec![3],
                Sparing::PerTrack => vec![2, 40],
                Sparing::None => vec![],
                _ => vec![5, 6, 90],
            };
            let l = Layout::new(
                3,
                sparing,
                Mapping::Normal,
                vec![
                    zone(0, 9, 20, (3, 5), 3, slips),
                    zone(10, 19, 16, (2, 4), 2, vec![]),
                ],
            )
            .unwrap();
            let mut seen = std::collections::BTreeSet::new();
            for lbn in 0..l.blocks {
                let p = l.ltop(lbn);
                assert!(
                    p.sector < l.blocks_per_track(p.cyl),
                    "{sparing:?} {lbn} {p:?}"
                );
                assert!(seen.insert(p), "{sparing:?}: {p:?} mapped twice");
                assert_eq!(l.ptol(p), Some(lbn), "{sparing:?} {lbn} {p:?}");
            }
        }
    }

    /// DiskSim's scheme 7 (atlas_III, ibm18es), which the loader reads as
    /// spares at the zone's end, as many as its slips: a slip pushes every
    /// later LBN of the zone one sector on, and the zone holds as many
    /// LBNs fewer as it has slips. Loading them failed ("scheme 7 is not
    /// modelled") before.
    #[test]
    fn slips_push_to_the_end_of_the_zone() {
        let l = Layout::new(
            2,
            Sparing::PerZone,
            Mapping::Normal,
            vec![zone(0, 9, 10, (0, 0), 2, vec![15, 47])],
        )
        .unwrap();
        assert_eq!(l.blocks, 2 * 10 * 10 - 2);
        // Sector 15 (cylinder 0, head 1, sector 5) is slipped: LBN 15 is
        // on sector 16, and past sector 47 every LBN is two sectors on.
        assert_eq!(
            l.ltop(14),
            Pbn {
                cyl: 0,
                head: 1,
                sector: 4
            }
        );
        assert_eq!(
            l.ltop(15),
            Pbn {
                cyl: 0,
                head: 1,
                sector: 6
            }
        );
        assert_eq!(
            l.ltop(46),
            Pbn {
                cyl: 2,
                head: 0,
                sector: 8
            }
        );
        assert_eq!(
            l.ltop(197),
            Pbn {
                cyl: 9,
                head: 1,
                sector: 9
            }
        );
    }

    /// A remapped defect (cheetah4LP lists one) reads from its spare; a
    /// pair naming one sector twice moves nothing, as in DiskSim.
    #[test]
    fn a_remapped_defect_lives_in_its_spare() {
        let mut z = zone(0, 9, 10, (0, 0), 1, vec![]);
        // Sector 3 of cylinder 0 is bad; it moved to the cylinder's
        // spare (its last sector, 19); sector 30 names itself.
        z.defects = vec![(3, 19), (30, 30)];
        let l = Layout::new(2, Sparing::PerCylinder, Mapping::Normal, vec![z]).unwrap();
        assert_eq!(
            l.ltop(3),
            Pbn {
                cyl: 0,
                head: 1,
                sector: 9
            }
        );
        assert_eq!(
            l.ltop(4),
            Pbn {
                cyl: 0,
                head: 0,
                sector: 4
            }
        );
        // 19 LBNs per cylinder: LBN 28 is the 10th of cylinder 1.
        assert_eq!(
            l.ltop(28),
            Pbn {
                cyl: 1,
                head: 0,
                sector: 9
            }
        );
        let mut seen = std::collections::BTreeSet::new();
        for lbn in 0..l.blocks {
            assert!(seen.insert(l.ltop(lbn)), "{lbn} shares a sector");
        }
    }
}
