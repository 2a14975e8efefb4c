//! The checksum area's format: one 4-byte entry per 512-byte block of a
//! member's data area (`docs/on-disk-format.md`, "The checksum area").
//!
//! A block's entry is a hash of the block's bytes *and its place on the
//! member* (its block number), so a write that landed at the wrong offset
//! (a misdirected write) fails the check at both places. Entry 0 is
//! reserved: it means "not written since the volume was created", and such a
//! block must read as zeros (`platter create` zeroes the data area and the
//! checksum area, so a new volume needs no checksums written). A hash that
//! comes out 0 is stored as 1.
//!
//! 512 bytes, not a 4 KiB page or a chunk: every member I/O the engine
//! issues is whole 512-byte sectors, so no write ever needs the rest of a
//! block read first to compute its checksum (dm-integrity chose the same
//! default for the same reason).

/// Bytes of data one entry covers.
pub const BLOCK_BYTES: u64 = 512;
/// Bytes of one entry.
pub const ENTRY_BYTES: u64 = 4;
/// The unit the area is read and written in.
pub const PAGE_BYTES: u64 = 4096;
/// Entries in one page: a page covers 512 KiB of data.
pub const ENTRIES_PER_PAGE: u64 = PAGE_BYTES / ENTRY_BYTES;
/// Data bytes one page of entries covers.
pub const PAGE_DATA_BYTES: u64 = ENTRIES_PER_PAGE * BLOCK_BYTES;

const _: () = assert!(PAGE_BYTES.is_multiple_of(ENTRY_BYTES));
const _: () = assert!(PAGE_DATA_BYTES == 512 * 1024);

/// How a block's entry is computed; the label's `checksum_algorithm` code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// CRC32C (Castagnoli) of the block number (u64, little-endian)
    /// followed by the block: hardware-accelerated on x86-64 (SSE4.2) and
    /// arm64.
    Crc32c,
    /// The low 32 bits of XXH3-64 of the block, seeded with the block
    /// number: fast in software where CRC32C has no instruction.
    Xxh3,
}

impl Algorithm {
    /// The label's code for it (0 is "no checksums").
    pub fn code(self) -> u8 {
        match self {
            Algorithm::Crc32c => 1,
            Algorithm::Xxh3 => 2,
        }
    }

    /// `None` for 0 (no checksums); `Err` for a code no build knows.
    pub fn from_code(code: u8) -> Result<Option<Algorithm>, u8> {
        match code {
            0 => Ok(None),
            1 => Ok(Some(Algorithm::Crc32c)),
            2 => Ok(Some(Algorithm::Xxh3)),
            other => Err(other),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Crc32c => "crc32c",
            Algorithm::Xxh3 => "xxh3",
        }
    }

    pub fn parse(name: &str) -> Option<Algorithm> {
        match name {
            "crc32c" => Some(Algorithm::Crc32c),
            "xxh3" => Some(Algorithm::Xxh3),
            _ => None,
        }
    }

    /// The entry for `block` (its number in the data area) holding `data`
    /// (exactly [`BLOCK_BYTES`]). Never 0.
    pub fn entry(self, block: u64, data: &[u8]) -> u32 {
        assert_eq!(data.len() as u64, BLOCK_BYTES, "one whole block");
        let h = match self {
            Algorithm::Crc32c => crc32c::crc32c_append(crc32c::crc32c(&block.to_le_bytes()), data),
            Algorithm::Xxh3 => xxhash_rust::xxh3::xxh3_64_with_seed(data, block) as u32,
        };
        h.max(1)
    }

    /// Whether `data` is what the entry says block `block` holds.
    pub fn matches(self, block: u64, data: &[u8], entry: u32) -> bool {
        if entry == UNWRITTEN {
            return data.iter().all(|&b| b == 0);
        }
        self.entry(block, data) == entry
    }
}

/// The entry of a block not written since the volume was created (or
/// trimmed since): the block reads as zeros.
pub const UNWRITTEN: u32 = 0;

/// Bytes of checksum area a data area of `data_size_bytes` needs: whole
/// pages.
pub fn area_bytes(data_size_bytes: u64) -> u64 {
    data_size_bytes.div_ceil(PAGE_DATA_BYTES) * PAGE_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_names_the_block_and_its_place() {
        for alg in [Algorithm::Crc32c, Algorithm::Xxh3] {
            let a = vec![7u8; 512];
            let mut b = a.clone();
            b[100] ^= 1;
            assert_ne!(alg.entry(3, &a), alg.entry(3, &b), "{alg:?}: a flipped bit");
            // The same bytes at another place: a misdirected write.
            assert_ne!(alg.entry(3, &a), alg.entry(4, &a), "{alg:?}: block number");
            assert!(alg.matches(3, &a, alg.entry(3, &a)));
            assert!(!alg.matches(4, &a, alg.entry(3, &a)));
            // Zeros written by a client get a real entry; the reserved one
            // still accepts zeros only.
            let z = vec![0u8; 512];
            assert_ne!(alg.entry(9, &z), UNWRITTEN);
            assert!(alg.matches(9, &z, UNWRITTEN));
            assert!(!alg.matches(9, &a, UNWRITTEN));
        }
    }

    #[test]
    fn crc32c_entries_are_the_documented_bytes() {
        // docs/on-disk-format.md: CRC32C over the block number (u64 LE)
        // then the block.
        let data = vec![0xA5u8; 512];
        let mut whole = 5u64.to_le_bytes().to_vec();
        whole.extend_from_slice(&data);
        assert_eq!(
            Algorithm::Crc32c.entry(5, &data),
            crc32c::crc32c(&whole).max(1)
        );
    }

    #[test]
    fn codes_round_trip_and_unknown_codes_are_refused() {
        for alg in [Algorithm::Crc32c, Algorithm::Xxh3] {
            assert_eq!(Algorithm::from_code(alg.code()), Ok(Some(alg)));
            assert_eq!(Algorithm::parse(alg.name()), Some(alg));
        }
        assert_eq!(Algorithm::from_code(0), Ok(None));
        assert_eq!(Algorithm::from_code(3), Err(3));
    }

    #[test]
    fn the_area_is_whole_pages_of_four_bytes_per_block() {
        assert_eq!(area_bytes(0), 0);
        assert_eq!(area_bytes(512), 4096);
        assert_eq!(area_bytes(512 * 1024), 4096);
        assert_eq!(area_bytes(512 * 1024 + 512), 8192);
        // 1 TiB of data: 8 GiB of entries (0.78%).
        assert_eq!(area_bytes(1 << 40), 1 << 33);
    }
}
