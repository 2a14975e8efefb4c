//! Any bytes as a sealed checksum page and as a write-record page:
//! `SealedPage::open` and `RecordPage::open` must not panic, and whatever
//! they accept must be a page that sealing its contents again reproduces
//! byte for byte (a page is refused rather than half-read).

#![no_main]

use libfuzzer_sys::fuzz_target;
use platter_core::integrity::format::{
    PageId, RecordPage, SealedPage, PAGE_BYTES, RECORDS_PER_PAGE, RECORD_MAGIC, SEALED_MAGIC,
};

const ID: PageId = PageId {
    volume_uuid: *b"fuzz-volume-uuid",
    slot: 1,
    index: 2,
};

fuzz_target!(|data: &[u8]| {
    // Random bytes almost never carry a magic, the page's identity and a
    // matching CRC: when the first byte asks for it, the rest gets them, so
    // the fuzzer spends its time past the checks of the header.
    let mut page = data.get(1..).unwrap_or_default().to_vec();
    page.resize(PAGE_BYTES as usize, 0);
    let mode = data.first().copied().unwrap_or(0);
    if mode & 1 == 1 {
        let magic = if mode & 2 == 0 { SEALED_MAGIC } else { RECORD_MAGIC };
        page[..8].copy_from_slice(&magic);
        page[0x10..0x20].copy_from_slice(&ID.volume_uuid);
        page[0x20..0x24].copy_from_slice(&ID.slot.to_le_bytes());
        page[0x28..0x30].copy_from_slice(&ID.index.to_le_bytes());
        let generation = u64::from_le_bytes(page[0x30..0x38].try_into().unwrap());
        if mode & 4 == 0 {
            if mode & 2 == 0 {
                SealedPage::seal(&mut page, ID, generation);
            } else {
                RecordPage::seal(&mut page, ID);
            }
        }
    }
    if let Ok(generation) = SealedPage::open(&page, ID) {
        let mut again = page.clone();
        SealedPage::seal(&mut again, ID, generation);
        assert_eq!(again, page);
    }
    if let Ok(gens) = RecordPage::open(&page, ID) {
        assert_eq!(gens.len() as u64, RECORDS_PER_PAGE);
        assert_eq!(RecordPage::encode(&gens, ID), page);
    }
    // Short or long input: refused, never read past.
    let _ = SealedPage::open(data, ID);
    let _ = RecordPage::open(data, ID);
});
