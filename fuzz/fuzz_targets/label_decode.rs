//! Any bytes: `Label::decode` must not panic, and whatever it accepts must be
//! exactly what `encode` writes for the decoded value (the label is canonical,
//! so a write can never silently change something a reader accepted).

#![no_main]

use libfuzzer_sys::fuzz_target;
use platter_core::label::{at, is_blank, Label, LABEL_BYTES, LABEL_MAGIC};

fuzz_target!(|data: &[u8]| {
    // Random bytes almost never carry the magic and a matching CRC32C, so
    // when the first byte is odd the rest gets both (zero-padded to a whole
    // label: the fuzzer starts from short inputs and coverage would never
    // reward it for growing them), and the fuzzer spends its time in field
    // validation instead of the checksum check.
    let mut fixed;
    let bytes = match data.split_first() {
        Some((&mode, rest)) if mode & 1 == 1 => {
            fixed = rest.to_vec();
            fixed.resize(fixed.len().max(LABEL_BYTES), 0);
            fixed[..LABEL_MAGIC.len()].copy_from_slice(&LABEL_MAGIC);
            let crc = crc32c::crc32c(&fixed[..at::CHECKSUM]);
            fixed[at::CHECKSUM..LABEL_BYTES].copy_from_slice(&crc.to_le_bytes());
            &fixed[..]
        }
        _ => data,
    };
    if let Ok(label) = Label::decode(bytes) {
        assert!(!is_blank(bytes));
        assert!(label.validate().is_ok());
        assert_eq!(&label.encode()[..], &bytes[..LABEL_BYTES]);
    }
});
