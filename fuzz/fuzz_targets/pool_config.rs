//! Any bytes: the pool area's decoder (`pool::area::decode`) and the
//! configuration's text reader must not panic, and whatever they accept
//! is a pool that keeps every rule (`Pool::check`) and that rendering and
//! reading again gives back unchanged.

#![no_main]

use libfuzzer_sys::fuzz_target;
use platter_core::pool::area::{self, at, HEADER_BYTES, POOL_MAGIC};
use platter_core::pool::text::{self, Strictness};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        // The text alone, as `pool create --config` and the slot read it.
        0 => {
            let Ok(s) = std::str::from_utf8(rest) else { return };
            let _ = text::parse(s, Strictness::Template);
            if let Ok(pool) = text::parse(s, Strictness::Stored) {
                assert_eq!(pool.check(), Ok(()));
                let again = text::parse(&text::render(&pool), Strictness::Stored);
                assert_eq!(again.as_ref(), Ok(&pool));
            }
        }
        // A slot whose header is made valid around the text, so that the
        // fuzzer's time goes to the text and the header's cross-checks.
        1 => {
            let mut slot = vec![0u8; HEADER_BYTES];
            slot[at::MAGIC..at::MAGIC + 8].copy_from_slice(&POOL_MAGIC);
            slot[at::VERSION..at::VERSION + 4].copy_from_slice(&1u32.to_le_bytes());
            slot[at::GENERATION..at::GENERATION + 8].copy_from_slice(&1u64.to_le_bytes());
            let n = rest.len() as u32;
            slot[at::TEXT_BYTES..at::TEXT_BYTES + 4].copy_from_slice(&n.to_le_bytes());
            let crc = crc32c::crc32c(rest).to_le_bytes();
            slot[at::TEXT_CRC..at::TEXT_CRC + 4].copy_from_slice(&crc);
            let sum = crc32c::crc32c(&slot[..at::CHECKSUM]).to_le_bytes();
            slot[at::CHECKSUM..HEADER_BYTES].copy_from_slice(&sum);
            slot.extend_from_slice(rest);
            check_slot(&slot);
        }
        _ => check_slot(rest),
    }
});

fn check_slot(bytes: &[u8]) {
    if let Ok((header, pool)) = area::decode(bytes, 0) {
        assert_eq!(pool.check(), Ok(()));
        let again = area::encode(&pool, header.drive_uuid, 0, header.written_unix_seconds);
        assert_eq!(area::decode(&again, 0).map(|(_, p)| p).as_ref(), Ok(&pool));
    }
}
