//! Any bytes as a member's partial parity log: `ppl::parse_area` must not
//! panic, whatever it accepts must encode back to the bytes it came from
//! (a record recovery applies is exactly one the engine could have
//! written), and `ppl::recover` over what it accepts must not panic either
//! (a record naming a stripe or data index past the volume is an error,
//! not a write).

#![no_main]

use libfuzzer_sys::fuzz_target;
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::ppl::{parse_area, recover, BLOCK_BYTES, RECORD_MAGIC};
use platter_core::{Level, ParityLayout};

const UUID: [u8; 16] = [9; 16];
const CHUNK: u64 = 4096;

fuzz_target!(|data: &[u8]| {
    // Random bytes almost never carry the magic, the uuid and two
    // matching CRC32Cs: when the first byte is odd, the rest gets the magic
    // and uuid at each block (the CRCs stay the fuzzer's to find through
    // the seeds in its corpus), so time goes into the fields' checks.
    let mut area = data.get(1..).unwrap_or_default().to_vec();
    if data.first().is_some_and(|b| b & 1 == 1) {
        for block in area.chunks_mut(BLOCK_BYTES as usize) {
            if block.len() >= 0x20 {
                block[..8].copy_from_slice(&RECORD_MAGIC);
                block[0x10..0x20].copy_from_slice(&UUID);
            }
        }
    }
    let records = parse_area(&area, &UUID, CHUNK);
    for r in &records {
        let bytes = r.encode(&UUID);
        assert_eq!(parse_area(&bytes, &UUID, CHUNK), vec![r.clone()]);
    }
    let g = Geometry::new(GeometrySpec {
        level: Level::Raid6,
        parity_layout: ParityLayout::LeftSymmetric,
        copies: 1,
        interleave_bytes: CHUNK,
        data_offset_bytes: 0,
        member_data_bytes: vec![8 * CHUNK; 5],
    })
    .expect("valid geometry");
    let members = vec![vec![0u8; (8 * CHUNK) as usize]; 5];
    let _ = recover(&g, &[true, false, true, true, true], records, &mut |m, at, len| {
        Ok(members[m as usize][at as usize..(at + len) as usize].to_vec())
    });
});
