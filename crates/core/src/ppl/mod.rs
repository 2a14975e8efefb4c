//! The partial parity log (PPL): what closes the RAID-5/6 write hole.
//!
//! A write to part of a parity stripe changes data and parity with
//! separate member writes; a crash between them leaves the stripe's parity
//! out of step with its data, and a member lost before anything fixes it
//! is rebuilt wrong, including chunks nobody was writing. Before such a
//! write touches a member, the engine writes a *record* to the log area of
//! each of the stripe's parity members and flushes it: the stripe, the
//! rows `[lo, hi)` of its chunks the write covers, which cells (data index,
//! rows) it modifies, and the *partial parity*: P (and for RAID-6 Q) of the
//! cells it does not modify, as they are on the members. After a crash the
//! parity of every logged stripe is made from the log and the data the
//! members hold now ([`recover`]): P = PP ^ (the modified cells), so it
//! agrees with whatever of the write landed, and a member lost afterwards
//! is rebuilt right everywhere except in the cells being written, which
//! read back as some mix (they were never flushed). This is md's PPL
//! (`Documentation/driver-api/md/raid5-ppl.rst`), extended to Q.
//!
//! The format (`docs/on-disk-format.md`, "The partial parity log") is
//! one record per stripe and parity member, laid back to back in a ring
//! in each member's log area, each self-describing and checksummed; this
//! module encodes, finds and applies them, with no I/O of its own.

mod pieces;
mod recover;

pub(crate) use pieces::merged_pieces;
pub use recover::{recover, Fix, Recovered};

use crate::format::{get_u32, get_u64, put_u32, put_u64};
use bytes::Bytes;

/// The unit of the log area: records start on, and are padded to, it.
pub const BLOCK_BYTES: u64 = 4096;

/// The first bytes of a record.
pub const RECORD_MAGIC: [u8; 8] = *b"PLTRPPL\x01";

/// The record format this build writes and reads.
pub const RECORD_FORMAT: u32 = 1;

/// Byte offsets of a record's header fields (`docs/on-disk-format.md`).
pub mod at {
    pub const MAGIC: usize = 0x00;
    pub const FORMAT: usize = 0x08;
    pub const HEADER_BLOCKS: usize = 0x0C;
    pub const VOLUME_UUID: usize = 0x10;
    pub const SEQ: usize = 0x20;
    pub const STRIPE: usize = 0x28;
    pub const LO_BYTES: usize = 0x30;
    pub const HI_BYTES: usize = 0x38;
    pub const FLAGS: usize = 0x40;
    pub const PIECE_COUNT: usize = 0x44;
    pub const PAYLOAD_CRC: usize = 0x48;
    pub const HEADER_CRC: usize = 0x4C;
    /// Stripes the record speaks for: 1, or (a whole record) more, listed
    /// after the pieces as u64s.
    pub const STRIPE_COUNT: usize = 0x50;
    pub const PIECES: usize = 0x58;
    /// One piece: data index u32, zero u32, within_bytes u64, len_bytes u64.
    pub const PIECE_BYTES: usize = 24;
}

/// The record carries P's partial parity.
pub const FLAG_PP: u32 = 1;
/// The record carries Q's partial parity.
pub const FLAG_PQ: u32 = 2;
/// The write covers every cell of the rows (a full-stripe write, a trim):
/// the partial parity is zero and not stored. Logged only to supersede an
/// older record of the stripe that recovery would otherwise apply.
pub const FLAG_WHOLE: u32 = 4;

/// A header past this many blocks is damage, not a record.
const MAX_HEADER_BLOCKS: u64 = 64;

/// The most pieces a record lists: the engine widens the pieces of a
/// write more fragmented than that (treating a few unwritten bytes as
/// modified keeps the parity right; see `volume/ppl.rs`).
pub const MAX_PIECES: usize = 1024;

/// The most stripes a whole record lists.
pub const MAX_STRIPES: usize = 4096;

/// Where the log is on every member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Member offset of the log area: whole blocks, before the data area.
    pub offset_bytes: u64,
    pub len_bytes: u64,
}

/// Cells of a stripe a write modifies: `len` bytes of data chunk
/// `data_index` from `within` bytes into the chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub data_index: u32,
    pub within_bytes: u64,
    pub len_bytes: u64,
}

/// One stripe's entry in the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Orders records of the same stripe: a later one supersedes an
    /// earlier one's rows.
    pub seq: u64,
    /// The stripe; a whole record may list several, each with the same
    /// rows and pieces.
    pub stripes: Vec<u64>,
    /// The rows of the stripe's chunks the record speaks for.
    pub lo_bytes: u64,
    pub hi_bytes: u64,
    /// What the write modifies (sorted, disjoint within a data index).
    /// No pieces with no partial parity: a write of whole rows.
    pub pieces: Vec<Piece>,
    /// P and Q of the cells in `[lo, hi)` the write does not modify, as the
    /// members held them; `hi - lo` bytes each.
    pub pp: Option<Bytes>,
    pub pq: Option<Bytes>,
    /// Every cell of the rows is modified (pieces cover them all); no
    /// partial parity is stored, it is zero.
    pub whole: bool,
}

impl Record {
    fn header_blocks(&self) -> u64 {
        let bytes = at::PIECES + self.pieces.len() * at::PIECE_BYTES + self.stripes.len() * 8;
        (bytes as u64).div_ceil(BLOCK_BYTES)
    }

    fn payload_bytes(&self) -> u64 {
        let hull = self.hi_bytes - self.lo_bytes;
        hull * (u64::from(self.pp.is_some()) + u64::from(self.pq.is_some()))
    }

    /// Bytes the record takes in the ring: whole blocks.
    pub fn encoded_bytes(&self) -> u64 {
        self.header_blocks() * BLOCK_BYTES
            + self.payload_bytes().div_ceil(BLOCK_BYTES) * BLOCK_BYTES
    }

    /// The record's bytes as they go into the log.
    pub fn encode(&self, volume_uuid: &[u8; 16]) -> Vec<u8> {
        let hull = self.hi_bytes - self.lo_bytes;
        assert!(self.lo_bytes < self.hi_bytes, "a record covers some rows");
        assert!(
            self.stripes.len() == 1 || (self.whole && self.stripes.len() <= MAX_STRIPES),
            "only a whole record lists several stripes"
        );
        assert!(
            self.pieces.len() <= MAX_PIECES,
            "pieces widened to the limit"
        );
        for part in [&self.pp, &self.pq].into_iter().flatten() {
            assert_eq!(part.len() as u64, hull, "partial parity spans the rows");
        }
        let header = (self.header_blocks() * BLOCK_BYTES) as usize;
        let mut b = vec![0u8; self.encoded_bytes() as usize];
        b[at::MAGIC..at::MAGIC + 8].copy_from_slice(&RECORD_MAGIC);
        put_u32(&mut b, at::FORMAT, RECORD_FORMAT);
        put_u32(&mut b, at::HEADER_BLOCKS, self.header_blocks() as u32);
        b[at::VOLUME_UUID..at::VOLUME_UUID + 16].copy_from_slice(volume_uuid);
        put_u64(&mut b, at::SEQ, self.seq);
        put_u64(&mut b, at::STRIPE, self.stripes[0]);
        put_u32(&mut b, at::STRIPE_COUNT, self.stripes.len() as u32);
        put_u64(&mut b, at::LO_BYTES, self.lo_bytes);
        put_u64(&mut b, at::HI_BYTES, self.hi_bytes);
        assert!(
            !self.whole || (self.pp.is_none() && self.pq.is_none()),
            "a whole record stores no partial parity"
        );
        let flags = if self.pp.is_some() { FLAG_PP } else { 0 }
            | if self.pq.is_some() { FLAG_PQ } else { 0 }
            | if self.whole { FLAG_WHOLE } else { 0 };
        put_u32(&mut b, at::FLAGS, flags);
        put_u32(&mut b, at::PIECE_COUNT, self.pieces.len() as u32);
        for (i, p) in self.pieces.iter().enumerate() {
            let e = at::PIECES + i * at::PIECE_BYTES;
            put_u32(&mut b, e, p.data_index);
            put_u64(&mut b, e + 8, p.within_bytes);
            put_u64(&mut b, e + 16, p.len_bytes);
        }
        let list = at::PIECES + self.pieces.len() * at::PIECE_BYTES;
        for (i, &s) in self.stripes.iter().enumerate().skip(1) {
            put_u64(&mut b, list + (i - 1) * 8, s);
        }
        let mut at_payload = header;
        for part in [&self.pp, &self.pq].into_iter().flatten() {
            b[at_payload..at_payload + part.len()].copy_from_slice(part);
            at_payload += part.len();
        }
        debug_assert!(at_payload <= b.len());
        // The padding too: a later record that overlaps only this one's
        // padding must still break it (its space was reused), and the
        // engine counts it as gone.
        let payload_crc = crc32c::crc32c(&b[header..]);
        put_u32(&mut b, at::PAYLOAD_CRC, payload_crc);
        let header_crc = crc32c::crc32c(&b[..header]);
        put_u32(&mut b, at::HEADER_CRC, header_crc);
        b
    }
}

/// Every intact record of `volume_uuid` in a member's log area. Anything
/// else (zeros, a torn record, another volume's) is passed over: a record
/// whose write did not complete was never followed by the member writes
/// it speaks for.
pub fn parse_area(area: &[u8], volume_uuid: &[u8; 16], interleave_bytes: u64) -> Vec<Record> {
    parse_area_checked(area, volume_uuid, interleave_bytes).records
}

/// What a member's log area holds.
#[derive(Debug, Default)]
pub struct Parsed {
    /// The intact records, in the area's order.
    pub records: Vec<Record>,
    /// Byte offsets into the area of headers of this volume that were
    /// passed over, their checksums or bounds broken: a record torn by a
    /// crash, or partly written over by a later one. Nothing is applied
    /// from them; a start says how many and where.
    pub damaged_at_bytes: Vec<u64>,
}

/// [`parse_area`], also naming where damaged records of the volume lie.
pub fn parse_area_checked(area: &[u8], volume_uuid: &[u8; 16], interleave_bytes: u64) -> Parsed {
    let mut out = Parsed::default();
    let block = BLOCK_BYTES as usize;
    let mut at_bytes = 0usize;
    while at_bytes + block <= area.len() {
        let b = &area[at_bytes..];
        match parse_one(b, volume_uuid, interleave_bytes) {
            Some(r) => {
                at_bytes += r.encoded_bytes() as usize;
                out.records.push(r);
                continue;
            }
            None if is_own_header(b, volume_uuid) => out.damaged_at_bytes.push(at_bytes as u64),
            None => {}
        }
        at_bytes += block;
    }
    out
}

/// Whether `b` starts with a record header of `volume_uuid`, intact or not.
fn is_own_header(b: &[u8], volume_uuid: &[u8; 16]) -> bool {
    b[at::MAGIC..at::MAGIC + 8] == RECORD_MAGIC
        && b[at::VOLUME_UUID..at::VOLUME_UUID + 16] == volume_uuid[..]
}

fn parse_one(b: &[u8], volume_uuid: &[u8; 16], interleave_bytes: u64) -> Option<Record> {
    if b[at::MAGIC..at::MAGIC + 8] != RECORD_MAGIC
        || get_u32(b, at::FORMAT) != RECORD_FORMAT
        || b[at::VOLUME_UUID..at::VOLUME_UUID + 16] != volume_uuid[..]
    {
        return None;
    }
    let header_blocks = u64::from(get_u32(b, at::HEADER_BLOCKS));
    if header_blocks == 0 || header_blocks > MAX_HEADER_BLOCKS {
        return None;
    }
    let header = usize::try_from(header_blocks * BLOCK_BYTES).ok()?;
    if header > b.len() {
        return None;
    }
    let mut h = b[..header].to_vec();
    put_u32(&mut h, at::HEADER_CRC, 0);
    if crc32c::crc32c(&h) != get_u32(b, at::HEADER_CRC) {
        return None;
    }
    let (lo_bytes, hi_bytes) = (get_u64(b, at::LO_BYTES), get_u64(b, at::HI_BYTES));
    if lo_bytes >= hi_bytes || hi_bytes > interleave_bytes {
        return None;
    }
    let flags = get_u32(b, at::FLAGS);
    let count = get_u32(b, at::PIECE_COUNT) as usize;
    let stripe_count = get_u32(b, at::STRIPE_COUNT) as usize;
    if count > MAX_PIECES
        || stripe_count == 0
        || stripe_count > MAX_STRIPES
        || (stripe_count > 1 && flags & FLAG_WHOLE == 0)
    {
        return None;
    }
    let whole = flags & FLAG_WHOLE != 0;
    if flags & !(FLAG_PP | FLAG_PQ | FLAG_WHOLE) != 0
        || (whole && flags & (FLAG_PP | FLAG_PQ) != 0)
        || at::PIECES + count * at::PIECE_BYTES + (stripe_count - 1) * 8 > header
    {
        return None;
    }
    let mut pieces = Vec::with_capacity(count);
    for i in 0..count {
        let e = at::PIECES + i * at::PIECE_BYTES;
        let p = Piece {
            data_index: get_u32(b, e),
            within_bytes: get_u64(b, e + 8),
            len_bytes: get_u64(b, e + 16),
        };
        let end = p.within_bytes.checked_add(p.len_bytes)?;
        if p.len_bytes == 0 || p.within_bytes < lo_bytes || end > hi_bytes {
            return None;
        }
        pieces.push(p);
    }
    let list = at::PIECES + count * at::PIECE_BYTES;
    let mut stripes = vec![get_u64(b, at::STRIPE)];
    stripes.extend((1..stripe_count).map(|i| get_u64(b, list + (i - 1) * 8)));
    let hull = (hi_bytes - lo_bytes) as usize;
    let parts = (flags & FLAG_PP != 0) as usize + (flags & FLAG_PQ != 0) as usize;
    let payload_end = header + (parts * hull).div_ceil(BLOCK_BYTES as usize) * BLOCK_BYTES as usize;
    if payload_end > b.len()
        || crc32c::crc32c(&b[header..payload_end]) != get_u32(b, at::PAYLOAD_CRC)
    {
        return None;
    }
    let mut next = header;
    let mut part = |present: bool| {
        present.then(|| {
            let p = Bytes::copy_from_slice(&b[next..next + hull]);
            next += hull;
            p
        })
    };
    let pp = part(flags & FLAG_PP != 0);
    let pq = part(flags & FLAG_PQ != 0);
    Some(Record {
        seq: get_u64(b, at::SEQ),
        stripes,
        lo_bytes,
        hi_bytes,
        pieces,
        pp,
        pq,
        whole,
    })
}

/// The log area a volume of this interleave needs on every member: room
/// for several records of a whole chunk's P and Q with the most pieces a
/// chunk can have, and at least 4 MiB.
///
/// A request logs at most two records with partial parity (the stripes
/// at its ends), two whole records of part of a stripe, and one whole
/// record listing stripes: it always fits in a ring with nothing else
/// live, so a write waits for space but never forever.
pub fn area_bytes_for(interleave_bytes: u64) -> u64 {
    let mib = 1u64 << 20;
    ring_bytes_min(interleave_bytes)
        .max(4 * mib)
        .div_ceil(mib)
        .saturating_mul(mib)
}

/// The smallest log area the engine accepts for an interleave (saturating:
/// no area is large enough for an absurd interleave).
pub fn ring_bytes_min(interleave_bytes: u64) -> u64 {
    max_record_bytes(interleave_bytes)
        .saturating_mul(4)
        .saturating_add(MAX_HEADER_BLOCKS * BLOCK_BYTES)
}

/// The largest record of one stripe: the most pieces, P and Q of a chunk.
pub fn max_record_bytes(interleave_bytes: u64) -> u64 {
    let header = (at::PIECES + MAX_PIECES * at::PIECE_BYTES) as u64;
    let parity = interleave_bytes
        .saturating_mul(2)
        .div_ceil(BLOCK_BYTES)
        .saturating_mul(BLOCK_BYTES);
    (header.div_ceil(BLOCK_BYTES) * BLOCK_BYTES).saturating_add(parity)
}

#[cfg(test)]
mod tests;
