//! Where every volume byte lives: pure arithmetic from volume offsets to
//! member offsets, for every level.
//!
//! The volume is cut into chunks of `interleave_bytes`. Chunk `c` is data
//! index `c % k` of stripe `c / k`, where `k` is the number of data chunks per
//! stripe. Each data chunk has one or more copies, each a `(member, row)`: the
//! bytes live at `data_offset_bytes + row * interleave_bytes + within` on that
//! member. Parity levels add P (and Q) chunks at row `stripe` on other members.
//!
//! No power-of-two shortcuts: an interleave of 126 sectors is as valid as 128.
//!
//! Volume size: concat uses every member's full data area (each floored to a
//! whole interleave). Every other level cuts each member to the smallest one
//! (floored to a whole interleave); the excess on larger members is unused.
//! md's RAID-0 zones are not implemented: one predictable rule for every level.

mod parity;

pub use parity::{Role, StripeRoles};

use crate::level::{Level, ParityLayout};
use crate::units::SECTOR_BYTES;
use std::fmt;

/// Everything needed to map a volume; stored in (and rebuilt from) the labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeometrySpec {
    pub level: Level,
    pub parity_layout: ParityLayout,
    /// Mirror: ignored (every member is a copy). RAID-10: near copies. Else 1.
    pub copies: u32,
    pub interleave_bytes: u64,
    pub data_offset_bytes: u64,
    /// Usable bytes after `data_offset_bytes` on each member, by slot.
    pub member_data_bytes: Vec<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeometryError(pub String);

impl fmt::Display for GeometryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GeometryError {}

/// One copy of a data chunk: which member, and which interleave-sized row on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Location {
    pub member: u32,
    pub row: u64,
}

/// A piece of a volume range that lies inside one chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub volume_offset_bytes: u64,
    pub stripe: u64,
    pub data_index: u32,
    /// Offset inside the chunk.
    pub within_bytes: u64,
    pub len_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    spec: GeometrySpec,
    copies: u32,
    /// Data chunks per stripe (`k`).
    data_per_stripe: u32,
    /// Rows (chunks) used on each member; for concat, per member.
    rows: Vec<u64>,
    /// Concat only: the first volume chunk on each member, plus a final total.
    concat_first_chunk: Vec<u64>,
    volume_chunks: u64,
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The rows of `[lo, hi)` that `spans`, sorted by start, leave uncovered,
/// in order. The spans may overlap and reach outside `[lo, hi)`.
pub(crate) fn uncovered_rows(
    lo: u64,
    hi: u64,
    spans: impl IntoIterator<Item = (u64, u64)>,
) -> impl Iterator<Item = (u64, u64)> {
    let mut spans = spans.into_iter();
    let mut at = lo;
    std::iter::from_fn(move || {
        for (a, b) in spans.by_ref() {
            let (a, b) = (a.clamp(lo, hi), b.clamp(lo, hi));
            let gap = (a > at).then_some((at, a));
            at = at.max(b);
            if gap.is_some() {
                return gap;
            }
        }
        let tail = (at < hi).then_some((at, hi));
        at = hi;
        tail
    })
}

/// The member count, interleave, parity layout and copies the level
/// allows; returns the copies each chunk has.
fn check_spec(spec: &GeometrySpec) -> Result<u32, GeometryError> {
    let err = |s: String| Err(GeometryError(s));
    let n = spec.member_data_bytes.len() as u64;
    let level = spec.level;
    if n < u64::from(level.min_members()) {
        return err(format!(
            "{level} needs at least {} members, got {n}",
            level.min_members()
        ));
    }
    if n > 255 {
        return err(format!("at most 255 members, got {n}"));
    }
    let il = spec.interleave_bytes;
    if il == 0 || !il.is_multiple_of(SECTOR_BYTES) {
        return err(format!(
            "interleave must be a positive multiple of 512 bytes, got {il}"
        ));
    }
    if spec.parity_layout.raid5_part().is_some() && level != Level::Raid6 {
        return err(format!(
            "the {} layout is RAID-6's (Q on the last member), not {level}'s",
            spec.parity_layout
        ));
    }
    match level {
        Level::Mirror => Ok(n as u32),
        Level::Raid10 => {
            if spec.copies < 2 || u64::from(spec.copies) > n {
                return err(format!(
                    "raid10 needs 2 to {n} copies over {n} members, got {}",
                    spec.copies
                ));
            }
            Ok(spec.copies)
        }
        _ => Ok(1),
    }
}

/// Data chunks per stripe and in the volume, from the chunks (`rows`)
/// each member holds; refused when the volume holds none, or a byte count
/// derived from these would pass 2^64.
fn capacity(spec: &GeometrySpec, copies: u32, rows: &[u64]) -> Result<(u32, u64), GeometryError> {
    let (level, il) = (spec.level, spec.interleave_bytes);
    let n = rows.len() as u64;
    let min_rows = *rows.iter().min().expect("at least one member");
    let too_large = || {
        GeometryError(format!(
            "the volume would hold more than 2^64 bytes (interleave {il} bytes); \
             use smaller members or a smaller interleave"
        ))
    };
    let (data_per_stripe, volume_chunks) = match level {
        Level::Concat => (
            1,
            rows.iter()
                .try_fold(0u64, |acc, r| acc.checked_add(*r))
                .ok_or_else(too_large)?,
        ),
        Level::Stripe => (n as u32, min_rows.checked_mul(n).ok_or_else(too_large)?),
        Level::Mirror => (1, min_rows),
        Level::Raid10 => {
            // The layout repeats every lcm(n, copies) chunk slots, which
            // holds lcm / copies data chunks: that is one stripe.
            let c = u64::from(copies);
            let lcm = n / gcd(n, c) * c;
            let slots = min_rows.checked_mul(n).ok_or_else(too_large)?;
            ((lcm / c) as u32, slots / c)
        }
        Level::Raid5 | Level::Raid6 => {
            let k = n - u64::from(level.parity_members());
            (k as u32, min_rows.checked_mul(k).ok_or_else(too_large)?)
        }
    };
    if volume_chunks == 0 {
        return Err(GeometryError(format!(
            "members too small: each needs at least one interleave ({il} bytes) of data"
        )));
    }
    // Every byte count derived later (volume, stripe, member offsets)
    // is at most one of these two.
    volume_chunks.checked_mul(il).ok_or_else(too_large)?;
    u64::from(data_per_stripe).checked_mul(il).ok_or_else(|| {
        GeometryError(format!(
            "a stripe of {data_per_stripe} interleaves of {il} bytes is more than \
                 2^64 bytes; use a smaller interleave"
        ))
    })?;
    Ok((data_per_stripe, volume_chunks))
}

impl Geometry {
    pub fn new(spec: GeometrySpec) -> Result<Geometry, GeometryError> {
        let copies = check_spec(&spec)?;
        let level = spec.level;
        let n = spec.member_data_bytes.len() as u64;
        let rows: Vec<u64> = spec
            .member_data_bytes
            .iter()
            .map(|b| b / spec.interleave_bytes)
            .collect();
        let min_rows = *rows.iter().min().expect("at least one member");
        let (data_per_stripe, volume_chunks) = capacity(&spec, copies, &rows)?;
        assert!(data_per_stripe >= 1 && volume_chunks >= 1);
        let mut concat_first_chunk = Vec::new();
        if level == Level::Concat {
            let mut acc = 0;
            for r in &rows {
                concat_first_chunk.push(acc);
                acc += r;
            }
            concat_first_chunk.push(acc);
            assert_eq!(acc, volume_chunks, "a concat holds every member's chunks");
        }
        let rows = match level {
            Level::Concat => rows,
            _ => vec![min_rows; n as usize],
        };
        Ok(Geometry {
            spec,
            copies,
            data_per_stripe,
            rows,
            concat_first_chunk,
            volume_chunks,
        })
    }

    pub fn spec(&self) -> &GeometrySpec {
        &self.spec
    }
    pub fn level(&self) -> Level {
        self.spec.level
    }
    pub fn members(&self) -> u32 {
        self.spec.member_data_bytes.len() as u32
    }
    pub fn interleave_bytes(&self) -> u64 {
        self.spec.interleave_bytes
    }
    pub fn copies(&self) -> u32 {
        self.copies
    }
    pub fn data_per_stripe(&self) -> u32 {
        self.data_per_stripe
    }
    pub fn stripe_data_bytes(&self) -> u64 {
        u64::from(self.data_per_stripe) * self.spec.interleave_bytes
    }
    pub fn volume_size_bytes(&self) -> u64 {
        self.volume_chunks * self.spec.interleave_bytes
    }
    pub fn stripes(&self) -> u64 {
        self.volume_chunks.div_ceil(u64::from(self.data_per_stripe))
    }
    /// Data bytes of `member` that the volume uses.
    pub fn member_used_bytes(&self, member: u32) -> u64 {
        assert!(member < self.members(), "no member {member}");
        self.rows[member as usize] * self.spec.interleave_bytes
    }
    /// How many member failures the level survives in every stripe.
    pub fn redundancy(&self) -> u32 {
        match self.spec.level {
            Level::Concat | Level::Stripe => 0,
            Level::Mirror | Level::Raid10 => self.copies - 1,
            Level::Raid5 | Level::Raid6 => self.spec.level.parity_members(),
        }
    }

    /// Whether the members for which `usable` says yes hold every byte of
    /// the volume: a copy of every chunk, or enough of every parity stripe
    /// to rebuild the rest. Unlike a count against [`redundancy`], this
    /// knows that raid10 survives the loss of members holding no common
    /// chunk.
    ///
    /// [`redundancy`]: Geometry::redundancy
    pub fn serves_all(&self, usable: impl Fn(u32) -> bool) -> bool {
        let lost = (0..self.members()).filter(|&m| !usable(m)).count() as u32;
        match self.spec.level {
            Level::Concat | Level::Stripe | Level::Raid5 | Level::Raid6 => {
                lost <= self.redundancy()
            }
            Level::Mirror | Level::Raid10 => {
                // Chunk c's copies start at slot c * copies mod members: the
                // first `members` chunks show every group of slots there is.
                (0..self.volume_chunks.min(u64::from(self.members()))).all(|chunk| {
                    let (stripe, index) = self.chunk_position(chunk);
                    self.data_locations(stripe, index).any(|l| usable(l.member))
                })
            }
        }
    }

    /// Byte offset on the member device of `within` bytes into `row`.
    pub fn member_offset_bytes(&self, row: u64, within_bytes: u64) -> u64 {
        // Past the chunk would land in the next row, on another stripe's
        // bytes: a layout error, so this stays on in release.
        assert!(
            within_bytes <= self.spec.interleave_bytes,
            "{within_bytes} bytes into a chunk of {}",
            self.spec.interleave_bytes
        );
        let offset_bytes =
            self.spec.data_offset_bytes + row * self.spec.interleave_bytes + within_bytes;
        // Within the member's data (its last row ends where it does).
        debug_assert!(
            offset_bytes - self.spec.data_offset_bytes
                <= self
                    .spec
                    .member_data_bytes
                    .iter()
                    .copied()
                    .max()
                    .unwrap_or(0)
        );
        offset_bytes
    }

    /// Splits `[offset, offset + len)` into per-chunk extents, in order.
    /// The range must lie inside the volume (a caller bug otherwise).
    pub fn extents(&self, offset_bytes: u64, len_bytes: u64) -> Extents<'_> {
        assert!(
            offset_bytes
                .checked_add(len_bytes)
                .is_some_and(|end| end <= self.volume_size_bytes()),
            "range {offset_bytes}+{len_bytes} outside volume of {}",
            self.volume_size_bytes()
        );
        Extents {
            geometry: self,
            offset_bytes,
            end_bytes: offset_bytes + len_bytes,
        }
    }

    /// The stripe and data index of volume chunk `chunk`.
    pub fn chunk_position(&self, chunk: u64) -> (u64, u32) {
        debug_assert!(chunk < self.volume_chunks, "chunk {chunk} past the volume");
        let k = u64::from(self.data_per_stripe);
        (chunk / k, (chunk % k) as u32)
    }

    /// Every copy of data chunk `data_index` of `stripe`, first copy first.
    pub fn data_locations(&self, stripe: u64, data_index: u32) -> CopyIter {
        let k = u64::from(self.data_per_stripe);
        assert!(data_index < self.data_per_stripe);
        let chunk = stripe * k + u64::from(data_index);
        assert!(chunk < self.volume_chunks, "chunk {chunk} past the volume");
        let n = u64::from(self.members());
        let one = |member: u64, row: u64| CopyIter {
            first_slot: 0,
            members: 1,
            copies: 1,
            next: 0,
            fixed: Some(Location {
                member: member as u32,
                row,
            }),
        };
        match self.spec.level {
            Level::Concat => {
                // The last member starting at or before `chunk` holds it: a
                // member with no rows starts where its successor does.
                let firsts = &self.concat_first_chunk[..self.members() as usize];
                let m = firsts.partition_point(|&f| f <= chunk) - 1;
                one(m as u64, chunk - firsts[m])
            }
            Level::Stripe => one(chunk % n, chunk / n),
            Level::Mirror => CopyIter {
                first_slot: chunk * n,
                members: n,
                copies: self.copies,
                next: 0,
                fixed: None,
            },
            Level::Raid10 => CopyIter {
                first_slot: chunk * u64::from(self.copies),
                members: n,
                copies: self.copies,
                next: 0,
                fixed: None,
            },
            Level::Raid5 | Level::Raid6 => {
                let roles = self.stripe_roles(stripe);
                one(u64::from(roles.data[data_index as usize]), stripe)
            }
        }
    }

    /// Which member holds which role in a parity stripe (None for other levels).
    pub fn parity_roles(&self, stripe: u64) -> Option<StripeRoles> {
        self.spec
            .level
            .is_parity()
            .then(|| self.stripe_roles(stripe))
    }

    fn stripe_roles(&self, stripe: u64) -> StripeRoles {
        let roles = parity::stripe_roles(
            self.spec.level,
            self.spec.parity_layout,
            self.members(),
            stripe,
        );
        debug_assert_eq!(roles.data.len() as u32, self.data_per_stripe);
        roles
    }
}

/// The copies of one data chunk. Mirror and RAID-10 copies are consecutive
/// "slots" laid across the members row by row (md's near layout; a mirror is
/// the case copies == members).
#[derive(Clone, Debug)]
pub struct CopyIter {
    first_slot: u64,
    members: u64,
    copies: u32,
    next: u32,
    fixed: Option<Location>,
}

impl Iterator for CopyIter {
    type Item = Location;
    fn next(&mut self) -> Option<Location> {
        if self.next >= self.copies {
            return None;
        }
        self.next += 1;
        if let Some(loc) = self.fixed {
            debug_assert_eq!(self.copies, 1, "a fixed location is the one copy");
            return Some(loc);
        }
        let slot = self.first_slot + u64::from(self.next - 1);
        Some(Location {
            member: (slot % self.members) as u32,
            row: slot / self.members,
        })
    }
}

pub struct Extents<'a> {
    geometry: &'a Geometry,
    offset_bytes: u64,
    end_bytes: u64,
}

impl Iterator for Extents<'_> {
    type Item = Extent;
    fn next(&mut self) -> Option<Extent> {
        if self.offset_bytes >= self.end_bytes {
            return None;
        }
        let il = self.geometry.spec.interleave_bytes;
        let chunk = self.offset_bytes / il;
        let within_bytes = self.offset_bytes % il;
        let len_bytes = (il - within_bytes).min(self.end_bytes - self.offset_bytes);
        let (stripe, data_index) = self.geometry.chunk_position(chunk);
        debug_assert!(len_bytes > 0 && within_bytes + len_bytes <= il);
        let e = Extent {
            volume_offset_bytes: self.offset_bytes,
            stripe,
            data_index,
            within_bytes,
            len_bytes,
        };
        self.offset_bytes += len_bytes;
        Some(e)
    }
}

#[cfg(test)]
mod tests;
