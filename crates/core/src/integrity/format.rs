//! The checksum area's format (`docs/on-disk-format.md`, "The checksum
//! area").
//!
//! A block's entry is a hash of the block's bytes *and its place on the
//! member* (its block number), so a write that landed at the wrong offset
//! (a misdirected write) fails the check at both places. A hash that comes
//! out 0 is stored as 1: entry 0 is reserved.
//!
//! Two page formats (the label's `checksum_format`):
//!
//! - **bare** (volumes made before sealed pages): a page is 1024 entries
//!   and nothing else; entry 0 means "not written since the volume was
//!   created", and such a block must read as zeros. A zeroed page with
//!   zeroed data therefore passes every check: a discarded member reads
//!   as zeros without a word.
//! - **sealed**: a page starts with a header that names the volume, the
//!   slot, the page's index and a generation, and carries its own CRC, so a
//!   zeroed, discarded, torn or misplaced page fails as a whole; entry 0
//!   means "not vouched for" and matches nothing. `platter create` writes
//!   every page, with the entries of zeroed blocks. With *write records*,
//!   each member also keeps, for the member in the slot before it, the
//!   generation at which each of that member's pages was last made
//!   durable ([`RecordPage`]): a page found older than its record lost a
//!   write the member acknowledged, and its blocks are not vouched for.
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
/// Entries in one bare page: a page covers 512 KiB of data.
pub const ENTRIES_PER_PAGE: u64 = PAGE_BYTES / ENTRY_BYTES;
/// Data bytes one bare page of entries covers.
pub const PAGE_DATA_BYTES: u64 = ENTRIES_PER_PAGE * BLOCK_BYTES;
/// Bytes of a sealed page's header, before its entries.
pub const SEALED_HEADER_BYTES: u64 = 64;
/// Entries in one sealed page: 504 KiB of data.
pub const SEALED_ENTRIES_PER_PAGE: u64 = (PAGE_BYTES - SEALED_HEADER_BYTES) / ENTRY_BYTES;
/// Generations in one record page.
pub const RECORDS_PER_PAGE: u64 = (PAGE_BYTES - SEALED_HEADER_BYTES) / 8;

/// A sealed checksum page's magic.
pub const SEALED_MAGIC: [u8; 8] = *b"PLTRSUMS";
/// A record page's magic.
pub const RECORD_MAGIC: [u8; 8] = *b"PLTRSUMR";
/// The sealed formats' version field.
pub const SEALED_VERSION: u32 = 1;

const _: () = assert!(PAGE_BYTES.is_multiple_of(ENTRY_BYTES));
const _: () = assert!(PAGE_DATA_BYTES == 512 * 1024);
const _: () = assert!(SEALED_ENTRIES_PER_PAGE == 1008);
const _: () = assert!(RECORDS_PER_PAGE == 504);

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
}

/// The entry of a bare page's block not written since the volume was
/// created (or trimmed since): the block reads as zeros. In a sealed page
/// the same value says the block is not vouched for.
pub const UNWRITTEN: u32 = 0;

/// How a volume's checksum pages are laid out; the label's
/// `checksum_format` code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageFormat {
    /// 1024 entries a page, entry 0 = zeros (code 0).
    Bare,
    /// A header and 1008 entries a page, entry 0 = not vouched for
    /// (code 1); `records`: with the write records on the next member
    /// (code 2).
    Sealed { records: bool },
}

impl PageFormat {
    pub fn code(self) -> u8 {
        match self {
            PageFormat::Bare => 0,
            PageFormat::Sealed { records: false } => 1,
            PageFormat::Sealed { records: true } => 2,
        }
    }

    pub fn from_code(code: u8) -> Option<PageFormat> {
        match code {
            0 => Some(PageFormat::Bare),
            1 => Some(PageFormat::Sealed { records: false }),
            2 => Some(PageFormat::Sealed { records: true }),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PageFormat::Bare => "bare",
            PageFormat::Sealed { records: false } => "sealed",
            PageFormat::Sealed { records: true } => "sealed+records",
        }
    }

    pub fn is_sealed(self) -> bool {
        matches!(self, PageFormat::Sealed { .. })
    }

    pub fn has_records(self) -> bool {
        self == PageFormat::Sealed { records: true }
    }

    /// Entries in one page.
    pub fn entries_per_page(self) -> u64 {
        match self {
            PageFormat::Bare => ENTRIES_PER_PAGE,
            PageFormat::Sealed { .. } => SEALED_ENTRIES_PER_PAGE,
        }
    }

    /// Where a page's entries start within it.
    pub fn entries_at(self) -> usize {
        match self {
            PageFormat::Bare => 0,
            PageFormat::Sealed { .. } => SEALED_HEADER_BYTES as usize,
        }
    }

    /// Whether `data` is what `entry` says block `block` holds.
    pub fn matches(self, alg: Algorithm, block: u64, data: &[u8], entry: u32) -> bool {
        match (self, entry) {
            (PageFormat::Bare, UNWRITTEN) => data.iter().all(|&b| b == 0),
            (PageFormat::Sealed { .. }, UNWRITTEN) => false,
            _ => alg.entry(block, data) == entry,
        }
    }

    /// Checksum pages for a data area of `data_size_bytes`.
    pub fn pages(self, data_size_bytes: u64) -> u64 {
        data_size_bytes
            .div_ceil(BLOCK_BYTES)
            .div_ceil(self.entries_per_page())
    }

    /// Record pages (on the next member) for a data area of
    /// `data_size_bytes`; 0 without records.
    pub fn record_pages(self, data_size_bytes: u64) -> u64 {
        if !self.has_records() {
            return 0;
        }
        self.pages(data_size_bytes).div_ceil(RECORDS_PER_PAGE)
    }

    /// Bytes of checksum area (its pages, then any record pages) a data
    /// area of `data_size_bytes` needs.
    pub fn area_bytes(self, data_size_bytes: u64) -> u64 {
        (self.pages(data_size_bytes) + self.record_pages(data_size_bytes)) * PAGE_BYTES
    }
}

/// Bytes of bare checksum area a data area of `data_size_bytes` needs:
/// whole pages.
pub fn area_bytes(data_size_bytes: u64) -> u64 {
    PageFormat::Bare.area_bytes(data_size_bytes)
}

/// Who a sealed page or record page belongs to: a page of another volume
/// or slot, or at another index, is not this one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageId {
    pub volume_uuid: [u8; 16],
    /// The slot whose blocks the page covers (for a record page: whose
    /// pages it records).
    pub slot: u32,
    pub index: u64,
}

/// Why a sealed page or record page was refused: kept apart because a
/// resync after a crash may take a torn page's blocks as they stand, and
/// never a blank one's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// No magic: zeroed, discarded, never written, or not ours.
    Blank,
    /// The magic, with a CRC, version or identity that is wrong: torn by
    /// a crash, damaged, or written for another place.
    Damaged,
}

// Header fields, shared by checksum pages and record pages.
const AT_MAGIC: usize = 0x00;
const AT_VERSION: usize = 0x08;
const AT_CRC: usize = 0x0C;
const AT_VOLUME: usize = 0x10;
const AT_SLOT: usize = 0x20;
const AT_INDEX: usize = 0x28;
const AT_GENERATION: usize = 0x30;
const AT_RESERVED: usize = 0x38;

fn seal(page: &mut [u8], magic: [u8; 8], id: PageId, generation: u64) {
    assert_eq!(page.len() as u64, PAGE_BYTES, "a whole page");
    page[..SEALED_HEADER_BYTES as usize].fill(0);
    page[AT_MAGIC..AT_MAGIC + 8].copy_from_slice(&magic);
    page[AT_VERSION..AT_VERSION + 4].copy_from_slice(&SEALED_VERSION.to_le_bytes());
    page[AT_VOLUME..AT_VOLUME + 16].copy_from_slice(&id.volume_uuid);
    page[AT_SLOT..AT_SLOT + 4].copy_from_slice(&id.slot.to_le_bytes());
    page[AT_INDEX..AT_INDEX + 8].copy_from_slice(&id.index.to_le_bytes());
    page[AT_GENERATION..AT_GENERATION + 8].copy_from_slice(&generation.to_le_bytes());
    let crc = crc32c::crc32c(page);
    page[AT_CRC..AT_CRC + 4].copy_from_slice(&crc.to_le_bytes());
}

/// The generation of a sealed page of `magic` that belongs to `id`.
fn unseal(page: &[u8], magic: [u8; 8], id: PageId) -> Result<u64, Refused> {
    if page.len() as u64 != PAGE_BYTES || page[AT_MAGIC..AT_MAGIC + 8] != magic {
        return Err(Refused::Blank);
    }
    let u32_at = |at: usize| u32::from_le_bytes(page[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(page[at..at + 8].try_into().expect("8 bytes"));
    let stored = u32_at(AT_CRC);
    let crc = crc32c::crc32c_append(
        crc32c::crc32c_append(crc32c::crc32c(&page[..AT_CRC]), &[0; 4]),
        &page[AT_CRC + 4..],
    );
    let ours = page[AT_VOLUME..AT_VOLUME + 16] == id.volume_uuid
        && u32_at(AT_SLOT) == id.slot
        && u64_at(AT_INDEX) == id.index;
    let canonical = u32_at(AT_VERSION) == SEALED_VERSION
        && page[AT_SLOT + 4..AT_INDEX].iter().all(|&b| b == 0)
        && page[AT_RESERVED..SEALED_HEADER_BYTES as usize]
            .iter()
            .all(|&b| b == 0);
    if stored != crc || !ours || !canonical {
        return Err(Refused::Damaged);
    }
    Ok(u64_at(AT_GENERATION))
}

/// A sealed checksum page: [`SEALED_ENTRIES_PER_PAGE`] entries after a
/// header naming the page and its generation.
pub struct SealedPage;

impl SealedPage {
    /// Writes the header of `page` (entries already in place) for `id` at
    /// `generation`.
    pub fn seal(page: &mut [u8], id: PageId, generation: u64) {
        seal(page, SEALED_MAGIC, id, generation);
    }

    /// The page's generation, if it is a sealed page of `id`.
    pub fn open(page: &[u8], id: PageId) -> Result<u64, Refused> {
        unseal(page, SEALED_MAGIC, id)
    }

    /// A new volume's page `index`: every entry that of a zeroed block
    /// (blocks past `blocks`, the data area's end, stay 0), generation 1.
    pub fn zeroed(alg: Algorithm, id: PageId, blocks: u64) -> Vec<u8> {
        let mut page = vec![0u8; PAGE_BYTES as usize];
        let first = id.index * SEALED_ENTRIES_PER_PAGE;
        let zeros = ZeroEntries::new(alg);
        for i in 0..SEALED_ENTRIES_PER_PAGE {
            let b = first + i;
            if b >= blocks {
                break;
            }
            let at = SEALED_HEADER_BYTES as usize + (i * ENTRY_BYTES) as usize;
            page[at..at + 4].copy_from_slice(&zeros.entry(b).to_le_bytes());
        }
        SealedPage::seal(&mut page, id, 1);
        page
    }
}

/// A record page: for the member in slot `id.slot`, the generation at
/// which each of its checksum pages `[504 * id.index, + 504)` was last
/// made durable (0: none recorded).
pub struct RecordPage;

impl RecordPage {
    pub fn seal(page: &mut [u8], id: PageId) {
        seal(page, RECORD_MAGIC, id, 0);
    }

    /// The generations a record page of `id` holds; all 0 for a page that
    /// is not one (records are a second line: missing ones vouch for
    /// nothing and refuse nothing).
    pub fn open(page: &[u8], id: PageId) -> Result<Vec<u64>, Refused> {
        let gen = unseal(page, RECORD_MAGIC, id)?;
        if gen != 0 {
            return Err(Refused::Damaged);
        }
        Ok(page[SEALED_HEADER_BYTES as usize..]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect())
    }

    /// A record page holding `generations` ([`RECORDS_PER_PAGE`] of them).
    pub fn encode(generations: &[u64], id: PageId) -> Vec<u8> {
        assert_eq!(generations.len() as u64, RECORDS_PER_PAGE);
        let mut page = vec![0u8; PAGE_BYTES as usize];
        for (i, g) in generations.iter().enumerate() {
            let at = SEALED_HEADER_BYTES as usize + 8 * i;
            page[at..at + 8].copy_from_slice(&g.to_le_bytes());
        }
        RecordPage::seal(&mut page, id);
        page
    }
}

/// The entries of zeroed blocks, fast: `platter create` writes one for
/// every block of every member. CRC32C of the block number followed by
/// 512 zeros is affine in the number's bits, so it is a constant XOR-ed
/// with one precomputed value per bit set (64 XORs, against hashing 520
/// bytes); XXH3 has no such shape and is hashed.
pub struct ZeroEntries {
    alg: Algorithm,
    constant: u32,
    per_bit: [u32; 64],
}

impl ZeroEntries {
    pub fn new(alg: Algorithm) -> ZeroEntries {
        let raw = |b: u64| {
            crc32c::crc32c_append(
                crc32c::crc32c(&b.to_le_bytes()),
                &[0u8; BLOCK_BYTES as usize],
            )
        };
        let constant = raw(0);
        let mut per_bit = [0u32; 64];
        for (i, v) in per_bit.iter_mut().enumerate() {
            *v = raw(1 << i) ^ constant;
        }
        ZeroEntries {
            alg,
            constant,
            per_bit,
        }
    }

    /// [`Algorithm::entry`] of block `block` holding zeros.
    pub fn entry(&self, block: u64) -> u32 {
        match self.alg {
            Algorithm::Crc32c => {
                let mut h = self.constant;
                let mut bits = block;
                while bits != 0 {
                    h ^= self.per_bit[bits.trailing_zeros() as usize];
                    bits &= bits - 1;
                }
                h.max(1)
            }
            Algorithm::Xxh3 => self.alg.entry(block, &[0u8; BLOCK_BYTES as usize]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: PageId = PageId {
        volume_uuid: *b"0123456789abcdef",
        slot: 3,
        index: 77,
    };

    #[test]
    fn an_entry_names_the_block_and_its_place() {
        for alg in [Algorithm::Crc32c, Algorithm::Xxh3] {
            let a = vec![7u8; 512];
            let mut b = a.clone();
            b[100] ^= 1;
            assert_ne!(alg.entry(3, &a), alg.entry(3, &b), "{alg:?}: a flipped bit");
            // The same bytes at another place: a misdirected write.
            assert_ne!(alg.entry(3, &a), alg.entry(4, &a), "{alg:?}: block number");
            for f in [PageFormat::Bare, PageFormat::Sealed { records: true }] {
                assert!(f.matches(alg, 3, &a, alg.entry(3, &a)));
                assert!(!f.matches(alg, 4, &a, alg.entry(3, &a)));
            }
            // Zeros written by a client get a real entry; in a bare page
            // the reserved one still accepts zeros only, and in a sealed
            // page nothing.
            let z = vec![0u8; 512];
            assert_ne!(alg.entry(9, &z), UNWRITTEN);
            assert!(PageFormat::Bare.matches(alg, 9, &z, UNWRITTEN));
            assert!(!PageFormat::Bare.matches(alg, 9, &a, UNWRITTEN));
            let sealed = PageFormat::Sealed { records: false };
            assert!(!sealed.matches(alg, 9, &z, UNWRITTEN));
            assert!(sealed.matches(alg, 9, &z, alg.entry(9, &z)));
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
    fn zero_entries_are_the_entries_of_zeroed_blocks() {
        let z = [0u8; 512];
        for alg in [Algorithm::Crc32c, Algorithm::Xxh3] {
            let fast = ZeroEntries::new(alg);
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            for b in (0..2000).chain([u64::MAX, 1 << 40, (1 << 41) - 1]) {
                assert_eq!(fast.entry(b), alg.entry(b, &z), "{alg:?} block {b}");
                x = x.rotate_left(17).wrapping_mul(0x2545_f491_4f6c_dd1d);
                assert_eq!(fast.entry(x), alg.entry(x, &z), "{alg:?} block {x}");
            }
        }
    }

    #[test]
    fn codes_round_trip_and_unknown_codes_are_refused() {
        for alg in [Algorithm::Crc32c, Algorithm::Xxh3] {
            assert_eq!(Algorithm::from_code(alg.code()), Ok(Some(alg)));
            assert_eq!(Algorithm::parse(alg.name()), Some(alg));
        }
        assert_eq!(Algorithm::from_code(0), Ok(None));
        assert_eq!(Algorithm::from_code(3), Err(3));
        for f in [
            PageFormat::Bare,
            PageFormat::Sealed { records: false },
            PageFormat::Sealed { records: true },
        ] {
            assert_eq!(PageFormat::from_code(f.code()), Some(f));
        }
        assert_eq!(PageFormat::from_code(3), None);
    }

    #[test]
    fn the_area_is_whole_pages_of_four_bytes_per_block() {
        assert_eq!(area_bytes(0), 0);
        assert_eq!(area_bytes(512), 4096);
        assert_eq!(area_bytes(512 * 1024), 4096);
        assert_eq!(area_bytes(512 * 1024 + 512), 8192);
        // 1 TiB of data: 8 GiB of entries (0.78%).
        assert_eq!(area_bytes(1 << 40), 1 << 33);
        let sealed = PageFormat::Sealed { records: false };
        assert_eq!(sealed.area_bytes(1008 * 512), 4096);
        assert_eq!(sealed.area_bytes(1008 * 512 + 1), 8192);
        // Records: one page per 504 checksum pages, after them.
        let rec = PageFormat::Sealed { records: true };
        assert_eq!(rec.area_bytes(1008 * 512), 2 * 4096);
        assert_eq!(rec.pages(504 * 1008 * 512), 504);
        assert_eq!(rec.area_bytes(504 * 1008 * 512), 505 * 4096);
        assert_eq!(rec.area_bytes(504 * 1008 * 512 + 512), 507 * 4096);
    }

    #[test]
    fn a_sealed_page_opens_only_as_itself() {
        let mut page = SealedPage::zeroed(Algorithm::Crc32c, ID, u64::MAX);
        assert_eq!(SealedPage::open(&page, ID), Ok(1));
        SealedPage::seal(&mut page, ID, 42);
        assert_eq!(SealedPage::open(&page, ID), Ok(42));
        // Zeroed: blank. Any byte changed, another place: damaged.
        assert_eq!(
            SealedPage::open(&[0u8; 4096], ID),
            Err(Refused::Blank),
            "a zeroed page"
        );
        for at in [0x09, 0x0C, 0x10, 0x20, 0x24, 0x28, 0x30, 0x38, 0x40, 4095] {
            let mut p = page.clone();
            p[at] ^= 0x10;
            assert_eq!(SealedPage::open(&p, ID), Err(Refused::Damaged), "byte {at}");
        }
        for other in [
            PageId { slot: 2, ..ID },
            PageId { index: 78, ..ID },
            PageId {
                volume_uuid: [9; 16],
                ..ID
            },
        ] {
            assert_eq!(SealedPage::open(&page, other), Err(Refused::Damaged));
        }
        // A record page is not a checksum page, nor the reverse.
        let rec = RecordPage::encode(&[5; RECORDS_PER_PAGE as usize], ID);
        assert_eq!(SealedPage::open(&rec, ID), Err(Refused::Blank));
        assert_eq!(RecordPage::open(&page, ID), Err(Refused::Blank));
        assert_eq!(RecordPage::open(&rec, ID), Ok(vec![5; 504]));
    }

    /// docs/on-disk-format.md, "Sealed pages": the header's fields at their
    /// documented offsets, the CRC over the page with its own field zero.
    #[test]
    fn a_sealed_page_is_the_documented_bytes() {
        let mut page = vec![0u8; 4096];
        page[0x40..0x44].copy_from_slice(&0xDEAD_BEEFu32.to_le_bytes());
        SealedPage::seal(&mut page, ID, 0x0102_0304_0506_0708);
        assert_eq!(&page[0x00..0x08], b"PLTRSUMS");
        assert_eq!(page[0x08..0x0C], 1u32.to_le_bytes());
        assert_eq!(&page[0x10..0x20], &ID.volume_uuid);
        assert_eq!(page[0x20..0x24], 3u32.to_le_bytes());
        assert_eq!(page[0x24..0x28], [0; 4]);
        assert_eq!(page[0x28..0x30], 77u64.to_le_bytes());
        assert_eq!(page[0x30..0x38], 0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(page[0x38..0x40], [0; 8]);
        assert_eq!(page[0x40..0x44], 0xDEAD_BEEFu32.to_le_bytes(), "entry 0");
        let mut zeroed = page.clone();
        zeroed[0x0C..0x10].fill(0);
        assert_eq!(page[0x0C..0x10], crc32c::crc32c(&zeroed).to_le_bytes());
        let rec = RecordPage::encode(&[9; RECORDS_PER_PAGE as usize], ID);
        assert_eq!(&rec[0x00..0x08], b"PLTRSUMR");
        assert_eq!(rec[0x30..0x38], [0; 8], "a record page's generation");
        assert_eq!(rec[0x40..0x48], 9u64.to_le_bytes(), "record 0");
        assert_eq!(rec[4088..4096], 9u64.to_le_bytes(), "record 503");
    }

    #[test]
    fn a_new_page_holds_the_entries_of_zeroed_blocks_up_to_the_end() {
        let alg = Algorithm::Xxh3;
        let id = PageId { index: 2, ..ID };
        let end = 2 * 1008 + 10;
        let page = SealedPage::zeroed(alg, id, end);
        let entry = |i: usize| u32::from_le_bytes(page[64 + 4 * i..68 + 4 * i].try_into().unwrap());
        assert_eq!(entry(0), alg.entry(2 * 1008, &[0; 512]));
        assert_eq!(entry(9), alg.entry(2 * 1008 + 9, &[0; 512]));
        assert_eq!(entry(10), 0, "past the data area");
        assert_eq!(entry(1007), 0);
    }
}
