//! Transmission replies, byte for byte against proto.md.

use platter_nbd::consts::*;
use platter_nbd::{
    simple_reply, structured_block_status, structured_error, structured_header, structured_none,
    structured_offset_data_header, structured_offset_hole,
};

const COOKIE: u64 = 0x0102_0304_0506_0708;
const COOKIE_BYTES: [u8; 8] = [1, 2, 3, 4, 5, 6, 7, 8];

/// A structured header spelled out: magic, flags, type, cookie, length.
fn header(flags: u16, kind: u16, length: u32) -> Vec<u8> {
    let mut v = vec![0x66, 0x8e, 0x33, 0xef];
    v.extend_from_slice(&flags.to_be_bytes());
    v.extend_from_slice(&kind.to_be_bytes());
    v.extend_from_slice(&COOKIE_BYTES);
    v.extend_from_slice(&length.to_be_bytes());
    v
}

#[test]
fn simple_reply_is_magic_error_cookie() {
    let mut want = vec![0x67, 0x44, 0x66, 0x98, 0, 0, 0, 22];
    want.extend_from_slice(&COOKIE_BYTES);
    assert_eq!(simple_reply(COOKIE, NBD_EINVAL).to_vec(), want);
    assert_eq!(&simple_reply(COOKIE, 0)[4..8], &[0, 0, 0, 0]);
}

#[test]
fn structured_header_layout() {
    assert_eq!(
        structured_header(0x8001, 0x1234, COOKIE, 0xdead_beef).to_vec(),
        {
            let mut v = vec![0x66, 0x8e, 0x33, 0xef, 0x80, 0x01, 0x12, 0x34];
            v.extend_from_slice(&COOKIE_BYTES);
            v.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
            v
        }
    );
}

#[test]
fn offset_data_header_counts_the_offset_in_the_length() {
    let mut want = header(NBD_REPLY_FLAG_DONE, 1, 8 + 4096);
    want.extend_from_slice(&[0, 0, 0, 0, 0, 0x10, 0, 0]);
    assert_eq!(
        structured_offset_data_header(COOKIE, 0x10_0000, 4096, true).to_vec(),
        want
    );
    let not_done = structured_offset_data_header(COOKIE, 0, 1, false);
    assert_eq!(&not_done[4..6], &[0, 0]);
    assert_eq!(&not_done[16..20], &[0, 0, 0, 9]);
}

#[test]
#[should_panic]
fn offset_data_header_refuses_a_length_that_does_not_fit() {
    structured_offset_data_header(COOKIE, 0, u32::MAX - 7, true);
}

#[test]
fn offset_hole_chunk() {
    let mut want = header(0, 2, 12);
    want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0x02, 0]);
    want.extend_from_slice(&[0, 1, 0, 0]);
    assert_eq!(
        structured_offset_hole(COOKIE, 512, 65536, false).to_vec(),
        want
    );
}

#[test]
fn error_chunk_is_final_with_errno_and_message() {
    let mut want = header(NBD_REPLY_FLAG_DONE, 0x8001, 6 + 5);
    want.extend_from_slice(&[0, 0, 0, 28, 0, 5]);
    want.extend_from_slice(b"full!");
    assert_eq!(structured_error(COOKIE, NBD_ENOSPC, "full!"), want);

    let mut want = header(NBD_REPLY_FLAG_DONE, 0x8001, 6);
    want.extend_from_slice(&[0, 0, 0, 1, 0, 0]);
    assert_eq!(structured_error(COOKIE, NBD_EPERM, ""), want);

    // The error MUST be nonzero.
    assert_eq!(&structured_error(COOKIE, 0, "")[20..24], &[0, 0, 0, 22]);
}

#[test]
fn error_messages_are_cut_to_4096_bytes_on_a_character_boundary() {
    let long = "é".repeat(3000); // 6000 bytes of two-byte characters
    let chunk = structured_error(COOKIE, NBD_EIO, &long);
    let msg_len = u16::from_be_bytes([chunk[24], chunk[25]]) as usize;
    assert_eq!(msg_len, 4096);
    assert_eq!(chunk.len(), 20 + 6 + 4096);
    assert_eq!(
        u32::from_be_bytes(chunk[16..20].try_into().unwrap()),
        6 + 4096
    );
    assert!(std::str::from_utf8(&chunk[26..]).is_ok());

    let odd = format!("a{}", "é".repeat(3000));
    let chunk = structured_error(COOKIE, NBD_EIO, &odd);
    assert_eq!(chunk.len(), 20 + 6 + 4095);
    assert!(std::str::from_utf8(&chunk[26..]).is_ok());
}

#[test]
fn none_chunk_is_final_and_empty() {
    assert_eq!(
        structured_none(COOKIE).to_vec(),
        header(NBD_REPLY_FLAG_DONE, 0, 0)
    );
}

#[test]
fn block_status_chunk_lists_context_and_extents() {
    let extents = [(4096, 0), (8192, NBD_STATE_HOLE | NBD_STATE_ZERO)];
    let mut want = header(NBD_REPLY_FLAG_DONE, 5, 4 + 16);
    want.extend_from_slice(&[0, 0, 0, 1]);
    want.extend_from_slice(&[0, 0, 0x10, 0, 0, 0, 0, 0]);
    want.extend_from_slice(&[0, 0, 0x20, 0, 0, 0, 0, 3]);
    assert_eq!(structured_block_status(COOKIE, 1, &extents, true), want);
    let not_done = structured_block_status(COOKIE, 9, &extents[..1], false);
    assert_eq!(&not_done[4..6], &[0, 0]);
    assert_eq!(not_done.len(), 20 + 12);
}

#[test]
#[should_panic]
fn block_status_needs_an_extent() {
    structured_block_status(COOKIE, 1, &[], true);
}

#[test]
fn constant_names_for_logs() {
    assert_eq!(command_name(NBD_CMD_WRITE_ZEROES), "NBD_CMD_WRITE_ZEROES");
    assert_eq!(command_name(200), "NBD_CMD_?");
    assert_eq!(option_name(NBD_OPT_GO), "NBD_OPT_GO");
    assert_eq!(errno_name(NBD_ENOSPC), "NBD_ENOSPC");
    // Spot checks of values against proto.md.
    assert_eq!(NBD_REP_ERR_TOO_BIG, 0x8000_0009);
    assert_eq!(NBD_REPLY_TYPE_ERROR_OFFSET, 0x8002);
    assert_eq!(NBD_FLAG_SEND_FAST_ZERO, 1 << 11);
    assert_eq!(NBD_INIT_PASSWD.to_be_bytes(), *b"NBDMAGIC");
    assert_eq!(NBD_IHAVEOPT.to_be_bytes(), *b"IHAVEOPT");
    assert_eq!(NBD_REP_MAGIC, 0x3e889045565a9);
}
