//! Any 28-byte request header and session through
//! `platter_nbd::parse_request_header` and `platter_nbd::judge`: no panic, and
//! every verdict keeps the stream in sync. A rejected write discards exactly
//! its payload, only a write too large to skip disconnects, and every request
//! allowed to run is inside the export and was advertised.
//!
//! Layout: 28 header bytes, then 8 bytes of export size, 4 of maximum
//! payload, 2 of transmission flags and 1 byte of switches (bit 0 read-only,
//! bit 1 structured replies, bit 2 a metadata context, bit 3 force the request
//! magic so that mutations reach `judge`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use platter_nbd::consts::*;
use platter_nbd::{
    judge, parse_request_header, Command, Session, Verdict, BASE_ALLOCATION, REQUEST_HEADER_BYTES,
    WRITE_DISCARD_LIMIT_BYTES,
};

fuzz_target!(|data: &[u8]| {
    if data.len() < REQUEST_HEADER_BYTES + 15 {
        return;
    }
    let mut bytes = [0u8; REQUEST_HEADER_BYTES];
    bytes.copy_from_slice(&data[..REQUEST_HEADER_BYTES]);
    let p = &data[REQUEST_HEADER_BYTES..];
    let switches = p[14];
    if switches & 8 != 0 {
        bytes[..4].copy_from_slice(&NBD_REQUEST_MAGIC.to_be_bytes());
    }
    let s = Session {
        size_bytes: u64::from_be_bytes(p[0..8].try_into().unwrap()),
        max_block_bytes: u32::from_be_bytes(p[8..12].try_into().unwrap()),
        transmission_flags: u16::from_be_bytes([p[12], p[13]]),
        read_only: switches & 1 != 0,
        structured_replies: switches & 2 != 0,
        meta_contexts: if switches & 4 != 0 {
            vec![(1, BASE_ALLOCATION.to_string())]
        } else {
            vec![]
        },
    };

    let Ok(h) = parse_request_header(&bytes) else {
        assert_ne!(bytes[..4], NBD_REQUEST_MAGIC.to_be_bytes());
        return;
    };
    assert_eq!(h.encode(), bytes);
    let verdict = judge(&h, &s);
    assert_eq!(judge(&h, &s), verdict);

    let len = h.length_bytes;
    let advertised = |f: u16| s.transmission_flags & f != 0;
    let read_only = s.read_only || advertised(NBD_FLAG_READ_ONLY);
    let in_range = h
        .offset_bytes
        .checked_add(u64::from(len))
        .is_some_and(|end| end <= s.size_bytes);
    let skip_limit = s.max_block_bytes.max(WRITE_DISCARD_LIMIT_BYTES);
    match verdict {
        Verdict::Run(Command::Disconnect) => assert_eq!(h.kind, NBD_CMD_DISC),
        Verdict::Run(Command::Flush) => {
            assert!(advertised(NBD_FLAG_SEND_FLUSH));
            assert_eq!((h.offset_bytes, len), (0, 0));
        }
        Verdict::Run(cmd) => {
            assert!(len > 0 && in_range);
            assert!(h.flags & NBD_CMD_FLAG_FUA == 0 || advertised(NBD_FLAG_SEND_FUA));
            match cmd {
                Command::Read => assert!(len <= s.max_block_bytes),
                Command::Write { .. } => assert!(len <= s.max_block_bytes && !read_only),
                Command::Trim { .. } => assert!(!read_only && advertised(NBD_FLAG_SEND_TRIM)),
                Command::WriteZeroes { fast_zero, .. } => {
                    assert!(!read_only && advertised(NBD_FLAG_SEND_WRITE_ZEROES));
                    assert!(!fast_zero || advertised(NBD_FLAG_SEND_FAST_ZERO));
                }
                Command::BlockStatus { .. } => {
                    assert!(s.structured_replies && !s.meta_contexts.is_empty())
                }
                Command::Cache => assert_eq!(h.kind, NBD_CMD_CACHE),
                Command::Flush | Command::Disconnect => unreachable!(),
            }
        }
        Verdict::Reject {
            errno,
            discard_bytes,
            ..
        } => {
            assert!([NBD_EINVAL, NBD_EPERM, NBD_ENOSPC].contains(&errno));
            if h.kind == NBD_CMD_WRITE {
                assert_eq!(discard_bytes, len);
                assert!(len <= skip_limit);
            } else {
                assert_eq!(discard_bytes, 0);
            }
        }
        Verdict::Disconnect { .. } => {
            assert_eq!(h.kind, NBD_CMD_WRITE);
            assert!(len > skip_limit);
        }
    }
});
