//! The write-intent bitmap: what it covers and how it sits on a member.
//!
//! A redundant volume keeps a bit per *region* (a run of whole stripes). A
//! region's bit is set, and made durable on every member in use, before any
//! write to the region is issued; it is cleared lazily once the region has
//! been idle for a while and the members have been flushed. After a crash,
//! only regions whose bit is set can have parity or copies that disagree, so
//! only they need a resync (md's write-intent bitmap). The engine side lives
//! in `volume/intent.rs`; this module is the format.
//!
//! On a member, bit `r` is bit `r % 8` of byte `r / 8` of the bitmap area,
//! which starts at [`INTENT_OFFSET_BYTES`] (right after the label) and is
//! written in whole [`INTENT_PAGE_BYTES`] pages. Every member in use holds a
//! copy; after a crash the copies are OR-ed, since a member that failed or
//! joined part way may miss bits.

use crate::format::LABEL_BYTES;
use crate::geometry::Geometry;

/// Where the bitmap starts on every member: directly after the label.
pub const INTENT_OFFSET_BYTES: u64 = LABEL_BYTES as u64;
/// The unit of bitmap writes.
pub const INTENT_PAGE_BYTES: u64 = 4096;
/// `platter create`'s default region: small enough that a crash resyncs
/// little, large enough that a stream of writes sets few bits.
pub const DEFAULT_REGION_BYTES: u64 = 4 << 20;

/// Which stripes a bit stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntentLayout {
    pub region_stripes: u64,
    pub regions: u64,
    pub stripes: u64,
}

impl IntentLayout {
    /// The layout a label's `intent_region_stripes` gives `geometry`;
    /// `None` for 0 (no bitmap). An error when the bitmap would not fit
    /// between the label and the data area.
    pub fn new(geometry: &Geometry, region_stripes: u64) -> Result<Option<IntentLayout>, String> {
        if region_stripes == 0 {
            return Ok(None);
        }
        let stripes = geometry.stripes();
        let layout = IntentLayout {
            region_stripes,
            regions: stripes.div_ceil(region_stripes).max(1),
            stripes,
        };
        let room = geometry.spec().data_offset_bytes - INTENT_OFFSET_BYTES;
        if layout.area_bytes() > room {
            return Err(format!(
                "a write-intent bitmap of {} regions needs {} bytes; the members have {room} \
                 between the label and the data",
                layout.regions,
                layout.area_bytes()
            ));
        }
        assert!(
            layout
                .regions
                .checked_mul(region_stripes)
                .is_none_or(|covered| covered >= stripes),
            "every stripe has a bit"
        );
        Ok(Some(layout))
    }

    /// The region size for a new volume: `region_bytes` of volume data
    /// rounded up to whole stripes, grown until the bitmap fits in
    /// `room_bytes`. 0 (no bitmap) for levels without redundancy.
    pub fn choose_region_stripes(geometry: &Geometry, region_bytes: u64) -> u64 {
        if geometry.redundancy() == 0 {
            return 0;
        }
        let room_bytes = geometry.spec().data_offset_bytes - INTENT_OFFSET_BYTES;
        // A region larger than the volume is the whole volume; clamped, the
        // region's bytes (stripes times stripe bytes) stay a volume size.
        let mut region_stripes = region_bytes
            .div_ceil(geometry.stripe_data_bytes())
            .clamp(1, geometry.stripes());
        let bits_max = room_bytes / INTENT_PAGE_BYTES * INTENT_PAGE_BYTES * 8;
        // Doubling reaches one region for the whole volume within 64 steps.
        for _ in 0..64 {
            if geometry.stripes().div_ceil(region_stripes) <= bits_max {
                return region_stripes;
            }
            region_stripes = region_stripes.saturating_mul(2);
        }
        unreachable!("one region always fits")
    }

    pub fn region_of(&self, stripe: u64) -> u64 {
        assert!(stripe < self.stripes, "stripe {stripe} past the end");
        stripe / self.region_stripes
    }

    /// The stripes of `region`, clipped to the volume: `(first, count)`.
    pub fn stripes_of(&self, region: u64) -> (u64, u64) {
        assert!(region < self.regions, "region {region} past the last");
        let first = region * self.region_stripes;
        (first, self.region_stripes.min(self.stripes - first))
    }

    pub fn pages(&self) -> u64 {
        self.regions.div_ceil(INTENT_PAGE_BYTES * 8)
    }

    /// Bytes of the bitmap area on each member (whole pages).
    pub fn area_bytes(&self) -> u64 {
        self.pages() * INTENT_PAGE_BYTES
    }
}

/// A set of regions; also the bitmap's bytes on a member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionSet {
    words: Vec<u64>,
}

const PAGE_WORDS: usize = (INTENT_PAGE_BYTES / 8) as usize;
// A page is whole words and whole sectors, and the bitmap starts on a
// sector: pages are written as they are held, with `O_DIRECT` too.
const _: () = assert!(PAGE_WORDS * 8 == INTENT_PAGE_BYTES as usize);
const _: () = assert!(INTENT_PAGE_BYTES.is_multiple_of(crate::units::SECTOR_BYTES));
const _: () = assert!(INTENT_OFFSET_BYTES.is_multiple_of(crate::units::SECTOR_BYTES));

impl RegionSet {
    pub fn new(layout: &IntentLayout) -> RegionSet {
        RegionSet {
            words: vec![0; layout.pages() as usize * PAGE_WORDS],
        }
    }

    /// The set a member's bitmap area holds; bits past the last region
    /// (junk on a reused device) are dropped.
    pub fn from_bytes(layout: &IntentLayout, area: &[u8]) -> RegionSet {
        let mut set = RegionSet::new(layout);
        for (w, chunk) in set.words.iter_mut().zip(area.chunks(8)) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            *w = u64::from_le_bytes(b);
        }
        let total = set.words.len() as u64 * 64;
        for r in layout.regions..total {
            set.remove(r);
        }
        debug_assert!(set.iter().all(|r| r < layout.regions));
        set
    }

    pub fn contains(&self, region: u64) -> bool {
        self.words[(region / 64) as usize] & (1 << (region % 64)) != 0
    }

    pub fn insert(&mut self, region: u64) {
        self.words[(region / 64) as usize] |= 1 << (region % 64);
    }

    pub fn remove(&mut self, region: u64) {
        self.words[(region / 64) as usize] &= !(1 << (region % 64));
    }

    pub fn union_with(&mut self, other: &RegionSet) {
        assert_eq!(self.words.len(), other.words.len(), "sets of one layout");
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
    }

    pub fn len(&self) -> u64 {
        self.words.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// Members, in order. Zero words cost one test each: at terabyte
    /// sizes the set spans millions of regions and holds a handful (the
    /// simulator's invariant check, testing each of 64 bits of every word,
    /// spent 94% of its time here).
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.words
            .iter()
            .enumerate()
            .filter(|&(_, &w)| w != 0)
            .flat_map(|(i, &w)| {
                let base = i as u64 * 64;
                let mut rest = w;
                std::iter::from_fn(move || {
                    if rest == 0 {
                        return None;
                    }
                    let b = u64::from(rest.trailing_zeros());
                    rest &= rest - 1;
                    Some(base + b)
                })
            })
    }

    /// The first member of `self` that `other` lacks, if any.
    pub fn first_not_in(&self, other: &RegionSet) -> Option<u64> {
        assert_eq!(self.words.len(), other.words.len(), "sets of one layout");
        self.words
            .iter()
            .zip(&other.words)
            .position(|(a, b)| a & !b != 0)
            .map(|i| {
                let extra = self.words[i] & !other.words[i];
                i as u64 * 64 + u64::from(extra.trailing_zeros())
            })
    }

    /// The first member at or after `region`.
    pub fn next_from(&self, region: u64) -> Option<u64> {
        let mut i = (region / 64) as usize;
        let mut w = *self.words.get(i)? & (!0u64 << (region % 64));
        loop {
            if w != 0 {
                return Some(i as u64 * 64 + u64::from(w.trailing_zeros()));
            }
            i += 1;
            w = *self.words.get(i)?;
        }
    }

    /// Pages whose bits differ between `self` and `other`.
    pub fn pages_differing(&self, other: &RegionSet) -> Vec<u64> {
        assert_eq!(self.words.len(), other.words.len(), "sets of one layout");
        let mut pages = Vec::new();
        for (p, (a, b)) in self
            .words
            .chunks(PAGE_WORDS)
            .zip(other.words.chunks(PAGE_WORDS))
            .enumerate()
        {
            if a != b {
                pages.push(p as u64);
            }
        }
        pages
    }

    /// The bytes of `page` as written on a member.
    pub fn page_bytes(&self, page: u64) -> Vec<u8> {
        let p = page as usize * PAGE_WORDS;
        assert!(p < self.words.len(), "page {page} past the bitmap");
        self.words[p..p + PAGE_WORDS]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::GeometrySpec;
    use crate::Level;

    fn geometry(level: Level, members: u32, size_bytes: u64) -> Geometry {
        Geometry::new(GeometrySpec {
            level,
            parity_layout: crate::ParityLayout::LeftSymmetric,
            copies: if level == Level::Mirror { members } else { 1 },
            interleave_bytes: 64 << 10,
            data_offset_bytes: 1 << 20,
            member_data_bytes: vec![size_bytes; members as usize],
        })
        .expect("valid geometry")
    }

    #[test]
    fn bytes_round_trip_and_bit_order_is_lsb_first() {
        let g = geometry(Level::Raid5, 4, 1 << 30);
        let l = IntentLayout::new(&g, 1).unwrap().unwrap();
        let mut s = RegionSet::new(&l);
        for r in [0, 9, 63, 64, 4095, l.regions - 1] {
            s.insert(r);
        }
        let bytes: Vec<u8> = (0..l.pages()).flat_map(|p| s.page_bytes(p)).collect();
        assert_eq!(bytes[0], 0b1);
        assert_eq!(bytes[1], 0b10);
        assert_eq!(RegionSet::from_bytes(&l, &bytes), s);
        assert_eq!(
            s.iter().collect::<Vec<_>>(),
            vec![0, 9, 63, 64, 4095, l.regions - 1]
        );
        assert_eq!(s.next_from(10), Some(63));
        assert_eq!(s.next_from(4096), Some(l.regions - 1));
        assert_eq!(s.len(), 6);
    }

    proptest::proptest! {
        /// `iter` skips zero words and pops bits; `first_not_in` compares
        /// whole words: both against the bit-by-bit answer.
        #[test]
        fn iteration_and_subset_match_the_bits(
            a in proptest::collection::btree_set(0u64..16_000, 0..40),
            b in proptest::collection::btree_set(0u64..16_000, 0..40),
        ) {
            let g = geometry(Level::Raid5, 4, 1 << 30);
            let l = IntentLayout::new(&g, 1).unwrap().unwrap();
            proptest::prop_assume!(l.regions > 16_000);
            let (mut sa, mut sb) = (RegionSet::new(&l), RegionSet::new(&l));
            a.iter().for_each(|&r| sa.insert(r));
            b.iter().chain(&a).filter(|&&r| r % 3 != 0).for_each(|&r| sb.insert(r));
            let (sa, sb) = (sa, sb);
            proptest::prop_assert_eq!(sa.iter().collect::<Vec<_>>(), a.iter().copied().collect::<Vec<_>>());
            let naive = (0..l.regions).find(|&r| sa.contains(r) && !sb.contains(r));
            proptest::prop_assert_eq!(sa.first_not_in(&sb), naive);
        }
    }

    #[test]
    fn junk_past_the_last_region_is_ignored() {
        let g = geometry(Level::Mirror, 2, 8 << 20);
        let l = IntentLayout::new(&g, 1).unwrap().unwrap();
        let s = RegionSet::from_bytes(&l, &vec![0xff; l.area_bytes() as usize]);
        assert_eq!(s.len(), l.regions);
    }

    #[test]
    fn chosen_regions_fit_and_are_absent_without_redundancy() {
        for size in [1 << 20, 1 << 30, 1 << 40, 1 << 44] {
            let g = geometry(Level::Raid6, 6, size);
            let rs = IntentLayout::choose_region_stripes(&g, DEFAULT_REGION_BYTES);
            let l = IntentLayout::new(&g, rs).unwrap().unwrap();
            assert!(l.area_bytes() <= (1 << 20) - 4096, "{size}: {l:?}");
            assert!(rs * g.stripe_data_bytes() >= DEFAULT_REGION_BYTES);
        }
        let g = geometry(Level::Stripe, 3, 1 << 30);
        assert_eq!(
            IntentLayout::choose_region_stripes(&g, DEFAULT_REGION_BYTES),
            0
        );
        let g = geometry(Level::Raid5, 3, 1 << 30);
        assert!(IntentLayout::new(&g, 1 << 40).unwrap().is_some());
    }

    #[test]
    fn a_bitmap_that_does_not_fit_is_refused() {
        let g = geometry(Level::Mirror, 2, 1 << 40);
        let e = IntentLayout::new(&g, 1).unwrap_err();
        assert!(e.contains("bitmap"), "{e}");
    }
}
