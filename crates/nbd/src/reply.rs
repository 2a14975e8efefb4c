//! Transmission-phase replies: the simple reply and structured reply chunks
//! (proto.md, "Simple reply message", "Structured reply chunk message",
//! "Structured reply types").
//!
//! Headers are returned as fixed-size arrays so that the caller can write
//! them next to a data buffer without copying the data.

use crate::consts::*;
use crate::wire::{clip, put_u16, put_u32};

/// Bytes of a simple reply (magic, error, cookie).
pub const SIMPLE_REPLY_BYTES: usize = 16;
/// Bytes of a structured reply chunk header (magic, flags, type, cookie,
/// length).
pub const STRUCTURED_HEADER_BYTES: usize = 20;

/// A simple reply. For a successful `NBD_CMD_READ` (without structured
/// replies) the data follows it.
pub fn simple_reply(cookie: u64, errno: u32) -> [u8; SIMPLE_REPLY_BYTES] {
    let mut b = [0u8; SIMPLE_REPLY_BYTES];
    b[0..4].copy_from_slice(&NBD_SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&errno.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b
}

/// A structured reply chunk header; `length` payload bytes follow.
pub fn structured_header(
    flags: u16,
    kind: u16,
    cookie: u64,
    length: u32,
) -> [u8; STRUCTURED_HEADER_BYTES] {
    let mut b = [0u8; STRUCTURED_HEADER_BYTES];
    b[0..4].copy_from_slice(&NBD_STRUCTURED_REPLY_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&kind.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b[16..20].copy_from_slice(&length.to_be_bytes());
    b
}

fn done_flag(done: bool) -> u16 {
    if done {
        NBD_REPLY_FLAG_DONE
    } else {
        0
    }
}

/// Header and offset of an `NBD_REPLY_TYPE_OFFSET_DATA` chunk; `data_len`
/// bytes of data follow.
///
/// # Panics
/// If `data_len` is zero or above `u32::MAX - 8` (the chunk length would not
/// fit); the server's own read size decides it, never the client.
pub fn structured_offset_data_header(
    cookie: u64,
    offset_bytes: u64,
    data_len: u32,
    done: bool,
) -> [u8; 28] {
    assert!(
        data_len > 0,
        "an OFFSET_DATA chunk carries at least one byte"
    );
    let length = data_len
        .checked_add(8)
        .expect("OFFSET_DATA chunk length fits in 32 bits");
    let mut b = [0u8; 28];
    b[..STRUCTURED_HEADER_BYTES].copy_from_slice(&structured_header(
        done_flag(done),
        NBD_REPLY_TYPE_OFFSET_DATA,
        cookie,
        length,
    ));
    b[20..28].copy_from_slice(&offset_bytes.to_be_bytes());
    b
}

/// A complete `NBD_REPLY_TYPE_OFFSET_HOLE` chunk: `hole_len` bytes at
/// `offset_bytes` read as zeroes.
///
/// # Panics
/// If `hole_len` is zero (the protocol requires a nonzero hole size).
pub fn structured_offset_hole(
    cookie: u64,
    offset_bytes: u64,
    hole_len: u32,
    done: bool,
) -> [u8; 32] {
    assert!(
        hole_len > 0,
        "an OFFSET_HOLE chunk covers at least one byte"
    );
    let mut b = [0u8; 32];
    b[..STRUCTURED_HEADER_BYTES].copy_from_slice(&structured_header(
        done_flag(done),
        NBD_REPLY_TYPE_OFFSET_HOLE,
        cookie,
        12,
    ));
    b[20..28].copy_from_slice(&offset_bytes.to_be_bytes());
    b[28..32].copy_from_slice(&hole_len.to_be_bytes());
    b
}

/// A complete, final `NBD_REPLY_TYPE_ERROR` chunk (flag `NBD_REPLY_FLAG_DONE`)
/// with a human-readable message, cut to 4096 bytes at a character boundary.
/// The error of such a chunk MUST be nonzero: `errno` 0 is sent as
/// `NBD_EINVAL`.
pub fn structured_error(cookie: u64, errno: u32, message: &str) -> Vec<u8> {
    let errno = if errno == NBD_SUCCESS {
        NBD_EINVAL
    } else {
        errno
    };
    let message = clip(message, NBD_MAX_STRING);
    let length = 6 + message.len() as u32;
    let mut out = Vec::with_capacity(STRUCTURED_HEADER_BYTES + length as usize);
    out.extend_from_slice(&structured_header(
        NBD_REPLY_FLAG_DONE,
        NBD_REPLY_TYPE_ERROR,
        cookie,
        length,
    ));
    put_u32(&mut out, errno);
    put_u16(&mut out, message.len() as u16);
    out.extend_from_slice(message.as_bytes());
    out
}

/// A final `NBD_REPLY_TYPE_NONE` chunk (flag `NBD_REPLY_FLAG_DONE`).
pub fn structured_none(cookie: u64) -> [u8; STRUCTURED_HEADER_BYTES] {
    structured_header(NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_NONE, cookie, 0)
}

/// A complete `NBD_REPLY_TYPE_BLOCK_STATUS` chunk for one context: the
/// context id, then one (length, flags) descriptor per extent.
///
/// # Panics
/// If `extents` is empty or has more than 2^20 entries (the protocol requires
/// at least one descriptor and says a chunk SHOULD NOT carry more), or if an
/// extent has length zero.
pub fn structured_block_status(
    cookie: u64,
    context_id: u32,
    extents: &[(u32, u32)],
    done: bool,
) -> Vec<u8> {
    assert!(
        !extents.is_empty(),
        "a BLOCK_STATUS chunk carries at least one extent"
    );
    assert!(
        extents.len() <= 1 << 20,
        "a BLOCK_STATUS chunk carries at most 2^20 extents"
    );
    let length = 4 + 8 * extents.len() as u32;
    let mut out = Vec::with_capacity(STRUCTURED_HEADER_BYTES + length as usize);
    out.extend_from_slice(&structured_header(
        done_flag(done),
        NBD_REPLY_TYPE_BLOCK_STATUS,
        cookie,
        length,
    ));
    put_u32(&mut out, context_id);
    for &(len, flags) in extents {
        assert!(len > 0, "block status extents have nonzero length");
        put_u32(&mut out, len);
        put_u32(&mut out, flags);
    }
    out
}
