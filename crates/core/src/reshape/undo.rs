//! The undo record: the before-image of the member bytes a window that
//! cannot be made safe is about to overwrite (docs/reshape.md, "The undo
//! record"). A restart whose labels stand at the record's position puts
//! the image back and copies the window again; a record for any other
//! position, reshape or volume, or one torn by a crash, is ignored.
//!
//! | Offset | Size | Field |
//! |---|---|---|
//! | 0x00 | 8 | magic `PLTRUNDO` |
//! | 0x08 | 4 | version, u32 1 |
//! | 0x10 | 16 | volume uuid |
//! | 0x20 | 8 | reshape id (the labels' event counter when it began) |
//! | 0x28 | 8 | position: the window's first volume byte |
//! | 0x30 | 8 | span start, member bytes from the data offset |
//! | 0x38 | 8 | span end |
//! | 0x40 | 4 | members imaged (slots `first..first + members`) |
//! | 0x44 | 4 | CRC32C of the images |
//! | 0x48 | 4 | `first`: the first slot imaged (0 in a grow's one record; each member's own slot in a record kept in its reserved area) |
//! | 0xFFC | 4 | CRC32C of bytes `[0, 0xFFC)` |
//!
//! The images follow the 4 KiB header, slot by slot, each `end - start`
//! bytes. All integers little-endian; every other byte zero.

use super::Span;
use std::fmt;

/// Bytes of the record's header.
pub const UNDO_HEADER_BYTES: u64 = 4096;
const MAGIC: &[u8; 8] = b"PLTRUNDO";
const VERSION: u32 = 1;
const CRC_AT: usize = 0xFFC;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UndoRecord {
    pub volume_uuid: [u8; 16],
    pub reshape_id: u64,
    pub position_bytes: u64,
    pub span: Span,
    /// The slot of `images[0]`.
    pub first_slot: u32,
    /// The span's bytes on slots `first_slot..`, one image each.
    pub images: Vec<Vec<u8>>,
}

/// Why bytes are not a usable record (after a crash, usually torn: the
/// restart then ignores them, as it should).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UndoError {
    Short,
    NotARecord,
    Damaged(&'static str),
}

impl fmt::Display for UndoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UndoError::Short => f.write_str("shorter than its header says"),
            UndoError::NotARecord => f.write_str("no undo record"),
            UndoError::Damaged(what) => write!(f, "damaged undo record: {what}"),
        }
    }
}

impl std::error::Error for UndoError {}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

impl UndoRecord {
    /// Whether a restart whose labels stand at `position_bytes` of reshape
    /// `reshape_id` of volume `volume_uuid` puts this record back: only
    /// then was its window cut short. Any other record is left alone.
    pub fn is_for(&self, volume_uuid: [u8; 16], reshape_id: u64, position_bytes: u64) -> bool {
        self.volume_uuid == volume_uuid
            && self.reshape_id == reshape_id
            && self.position_bytes == position_bytes
    }

    /// Each image with the slot it belongs to.
    pub fn slot_images(&self) -> impl Iterator<Item = (u32, &[u8])> {
        (self.first_slot..).zip(self.images.iter().map(Vec::as_slice))
    }

    /// Bytes the whole record takes.
    pub fn len_bytes(&self) -> u64 {
        UNDO_HEADER_BYTES + self.images.iter().map(|i| i.len() as u64).sum::<u64>()
    }

    pub fn encode(&self) -> Vec<u8> {
        let image = (self.span.end_bytes - self.span.start_bytes) as usize;
        assert!(self.images.iter().all(|i| i.len() == image));
        let mut b = vec![0u8; UNDO_HEADER_BYTES as usize];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[0x10..0x20].copy_from_slice(&self.volume_uuid);
        b[0x20..0x28].copy_from_slice(&self.reshape_id.to_le_bytes());
        b[0x28..0x30].copy_from_slice(&self.position_bytes.to_le_bytes());
        b[0x30..0x38].copy_from_slice(&self.span.start_bytes.to_le_bytes());
        b[0x38..0x40].copy_from_slice(&self.span.end_bytes.to_le_bytes());
        b[0x40..0x44].copy_from_slice(&(self.images.len() as u32).to_le_bytes());
        let mut crc = 0;
        for i in &self.images {
            crc = crc32c::crc32c_append(crc, i);
        }
        b[0x44..0x48].copy_from_slice(&crc.to_le_bytes());
        b[0x48..0x4C].copy_from_slice(&self.first_slot.to_le_bytes());
        let head = crc32c::crc32c(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&head.to_le_bytes());
        for i in &self.images {
            b.extend_from_slice(i);
        }
        b
    }

    /// The whole record's length from its header, to know how much to
    /// read; checks the header's own CRC.
    pub fn len_from_header(header: &[u8]) -> Result<u64, UndoError> {
        if header.len() < UNDO_HEADER_BYTES as usize {
            return Err(UndoError::Short);
        }
        if &header[0..8] != MAGIC {
            return Err(UndoError::NotARecord);
        }
        if crc32c::crc32c(&header[..CRC_AT]) != u32_at(header, CRC_AT) {
            return Err(UndoError::Damaged("header checksum"));
        }
        if u32_at(header, 8) != VERSION {
            return Err(UndoError::Damaged("unknown version"));
        }
        let (start, end) = (u64_at(header, 0x30), u64_at(header, 0x38));
        let members = u64::from(u32_at(header, 0x40));
        end.checked_sub(start)
            .and_then(|i| i.checked_mul(members))
            .and_then(|i| i.checked_add(UNDO_HEADER_BYTES))
            .ok_or(UndoError::Damaged("span"))
    }

    pub fn decode(b: &[u8]) -> Result<UndoRecord, UndoError> {
        let len = Self::len_from_header(b)?;
        if (b.len() as u64) < len {
            return Err(UndoError::Short);
        }
        let span = Span {
            start_bytes: u64_at(b, 0x30),
            end_bytes: u64_at(b, 0x38),
        };
        let image = (span.end_bytes - span.start_bytes) as usize;
        let members = u32_at(b, 0x40) as usize;
        let body = &b[UNDO_HEADER_BYTES as usize..len as usize];
        if crc32c::crc32c(body) != u32_at(b, 0x44) {
            return Err(UndoError::Damaged("image checksum"));
        }
        Ok(UndoRecord {
            volume_uuid: b[0x10..0x20].try_into().expect("16 bytes"),
            reshape_id: u64_at(b, 0x20),
            position_bytes: u64_at(b, 0x28),
            span,
            first_slot: u32_at(b, 0x48),
            images: (0..members)
                .map(|m| body[m * image..(m + 1) * image].to_vec())
                .collect(),
        })
    }
}
