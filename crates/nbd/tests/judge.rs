//! `parse_request_header` and `judge`: a table covering each rule.

mod support;

use platter_nbd::consts::*;
use platter_nbd::{
    judge, parse_request_header, BadMagic, Command, RequestHeader, Session, Verdict,
    BASE_ALLOCATION, REQUEST_HEADER_BYTES,
};

const MIB: u32 = 1 << 20;
const SIZE: u64 = 1 << 20;
const MAX: u32 = 64 * 1024;

/// Every transmission flag a read-write export offers.
const ALL_FLAGS: u16 = support::RW_FLAGS;

#[derive(Clone, Copy, Debug)]
enum S {
    /// Everything advertised and negotiated, 1 MiB export, 64 KiB payloads.
    Full,
    /// Full, read-only (both the field and the flag).
    ReadOnly,
    /// Full with READ_ONLY only in the flags.
    ReadOnlyFlag,
    /// Only HAS_FLAGS; no structured replies, no contexts.
    Minimal,
    /// Structured replies but no metadata context.
    NoMeta,
    /// SEND_DF advertised but structured replies off (inconsistent server).
    DfWithoutSr,
    /// WRITE_ZEROES without FAST_ZERO.
    NoFastZero,
    /// 64 MiB payloads, 1 TiB export.
    Big,
}

fn session(s: S) -> Session {
    let mut session = Session {
        size_bytes: SIZE,
        read_only: false,
        structured_replies: true,
        max_block_bytes: MAX,
        transmission_flags: ALL_FLAGS,
        meta_contexts: vec![(1, BASE_ALLOCATION.to_string())],
    };
    match s {
        S::Full => {}
        S::ReadOnly => {
            session.read_only = true;
            session.transmission_flags |= NBD_FLAG_READ_ONLY;
        }
        S::ReadOnlyFlag => session.transmission_flags |= NBD_FLAG_READ_ONLY,
        S::Minimal => {
            session.transmission_flags = NBD_FLAG_HAS_FLAGS;
            session.structured_replies = false;
            session.meta_contexts.clear();
        }
        S::NoMeta => session.meta_contexts.clear(),
        S::DfWithoutSr => {
            session.structured_replies = false;
            session.meta_contexts.clear();
        }
        S::NoFastZero => session.transmission_flags &= !NBD_FLAG_SEND_FAST_ZERO,
        S::Big => {
            session.max_block_bytes = 64 * MIB;
            session.size_bytes = 1 << 40;
        }
    }
    session
}

/// Expected verdict, without the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum V {
    Run(Command),
    Reject(u32, u32),
    Disconnect,
}

fn verdict(v: &Verdict) -> V {
    match v {
        Verdict::Run(c) => V::Run(*c),
        Verdict::Reject {
            errno,
            discard_bytes,
            message,
        } => {
            assert!(!message.is_empty());
            V::Reject(*errno, *discard_bytes)
        }
        Verdict::Disconnect { message } => {
            assert!(!message.is_empty());
            V::Disconnect
        }
    }
}

const READ: u16 = NBD_CMD_READ;
const WRITE: u16 = NBD_CMD_WRITE;
const FLUSH: u16 = NBD_CMD_FLUSH;
const TRIM: u16 = NBD_CMD_TRIM;
const ZEROES: u16 = NBD_CMD_WRITE_ZEROES;
const STATUS: u16 = NBD_CMD_BLOCK_STATUS;
const CACHE: u16 = NBD_CMD_CACHE;
const DISC: u16 = NBD_CMD_DISC;
const FUA: u16 = NBD_CMD_FLAG_FUA;
const NO_HOLE: u16 = NBD_CMD_FLAG_NO_HOLE;
const DF: u16 = NBD_CMD_FLAG_DF;
const REQ_ONE: u16 = NBD_CMD_FLAG_REQ_ONE;
const FAST_ZERO: u16 = NBD_CMD_FLAG_FAST_ZERO;
const EINVAL: u32 = NBD_EINVAL;

fn w(fua: bool) -> V {
    V::Run(Command::Write { fua })
}
fn z(fua: bool, no_hole: bool, fast_zero: bool) -> V {
    V::Run(Command::WriteZeroes {
        fua,
        no_hole,
        fast_zero,
    })
}

#[rustfmt::skip]
fn cases() -> Vec<(&'static str, S, u16, u16, u64, u32, V)> {
    use S::*;
    vec![
        // what, session, kind, flags, offset, length, verdict
        // --- unknown commands: EINVAL, no payload assumed
        ("resize is unknown", Full, NBD_CMD_RESIZE, 0, 0, 512, V::Reject(EINVAL, 0)),
        ("command 9", Full, 9, 0, 0, 0, V::Reject(EINVAL, 0)),
        ("command 0xffff", Full, 0xffff, FUA, 0, 4096, V::Reject(EINVAL, 0)),
        // --- disconnect
        ("disc", Full, DISC, 0, 0, 0, V::Run(Command::Disconnect)),
        ("disc with junk", Minimal, DISC, 0xffff, 7, 9, V::Run(Command::Disconnect)),
        // --- read
        ("read", Full, READ, 0, 0, 4096, V::Run(Command::Read)),
        ("read to the end", Full, READ, 0, SIZE - MAX as u64, MAX, V::Run(Command::Read)),
        ("read with FUA", Full, READ, FUA, 0, 512, V::Run(Command::Read)),
        ("read with DF", Full, READ, DF, 0, 512, V::Run(Command::Read)),
        ("read, FUA not advertised", Minimal, READ, FUA, 0, 512, V::Reject(EINVAL, 0)),
        ("read, DF not advertised", Minimal, READ, DF, 0, 512, V::Reject(EINVAL, 0)),
        ("read, DF without structured replies", DfWithoutSr, READ, DF, 0, 512, V::Reject(EINVAL, 0)),
        ("read with NO_HOLE", Full, READ, NO_HOLE, 0, 512, V::Reject(EINVAL, 0)),
        ("read with REQ_ONE", Full, READ, REQ_ONE, 0, 512, V::Reject(EINVAL, 0)),
        ("read with FAST_ZERO", Full, READ, FAST_ZERO, 0, 512, V::Reject(EINVAL, 0)),
        ("read with PAYLOAD_LEN", Full, READ, NBD_CMD_FLAG_PAYLOAD_LEN, 0, 512, V::Reject(EINVAL, 0)),
        ("read with bit 15", Full, READ, 1 << 15, 0, 512, V::Reject(EINVAL, 0)),
        ("read of zero bytes", Full, READ, 0, 0, 0, V::Reject(EINVAL, 0)),
        ("read at max payload", Full, READ, 0, 0, MAX, V::Run(Command::Read)),
        ("read over max payload", Full, READ, 0, 0, MAX + 1, V::Reject(EINVAL, 0)),
        ("read past the end", Full, READ, 0, SIZE - 512, 1024, V::Reject(EINVAL, 0)),
        ("read at the end", Full, READ, 0, SIZE, 1, V::Reject(EINVAL, 0)),
        ("read offset overflow", Full, READ, 0, u64::MAX, 1, V::Reject(EINVAL, 0)),
        ("read on read-only", ReadOnly, READ, 0, 0, 512, V::Run(Command::Read)),
        ("read, minimal", Minimal, READ, 0, 0, 512, V::Run(Command::Read)),
        // --- write: every reject discards the payload
        ("write", Full, WRITE, 0, 0, 4096, w(false)),
        ("write with FUA", Full, WRITE, FUA, 4096, 4096, w(true)),
        ("write, minimal", Minimal, WRITE, 0, 0, 512, w(false)),
        ("write, FUA not advertised", Minimal, WRITE, FUA, 0, 512, V::Reject(EINVAL, 512)),
        ("write with DF", Full, WRITE, DF, 0, 512, V::Reject(EINVAL, 512)),
        ("write with NO_HOLE", Full, WRITE, NO_HOLE, 0, 512, V::Reject(EINVAL, 512)),
        ("write with FAST_ZERO", Full, WRITE, FAST_ZERO, 0, 512, V::Reject(EINVAL, 512)),
        ("write with REQ_ONE", Full, WRITE, REQ_ONE, 0, 512, V::Reject(EINVAL, 512)),
        ("write of zero bytes", Full, WRITE, 0, 0, 0, V::Reject(EINVAL, 0)),
        ("write at max payload", Full, WRITE, 0, 0, MAX, w(false)),
        ("write over max payload", Full, WRITE, 0, 0, MAX + 1, V::Reject(EINVAL, MAX + 1)),
        ("write of 32 MiB over max", Full, WRITE, 0, 0, 32 * MIB, V::Reject(EINVAL, 32 * MIB)),
        ("write over 32 MiB and max", Full, WRITE, 0, 0, 32 * MIB + 1, V::Disconnect),
        ("write of 4 GiB", Full, WRITE, 0, 0, u32::MAX, V::Disconnect),
        ("write of 4 GiB with bad flags", Full, WRITE, 0xffff, 0, u32::MAX, V::Disconnect),
        ("write of 48 MiB, 64 MiB max", Big, WRITE, 0, 0, 48 * MIB, w(false)),
        ("write over 64 MiB max", Big, WRITE, 0, 0, 64 * MIB + 1, V::Disconnect),
        ("write on read-only", ReadOnly, WRITE, 0, 0, 512, V::Reject(NBD_EPERM, 512)),
        ("write on read-only flag", ReadOnlyFlag, WRITE, 0, 0, 512, V::Reject(NBD_EPERM, 512)),
        ("huge write on read-only", ReadOnly, WRITE, 0, 0, 40 * MIB, V::Disconnect),
        ("write past the end", Full, WRITE, 0, SIZE - 512, 1024, V::Reject(NBD_ENOSPC, 1024)),
        ("write offset overflow", Full, WRITE, 0, u64::MAX - 10, 512, V::Reject(NBD_ENOSPC, 512)),
        ("write ending at the end", Full, WRITE, 0, SIZE - 512, 512, w(false)),
        // --- flush
        ("flush", Full, FLUSH, 0, 0, 0, V::Run(Command::Flush)),
        ("flush with FUA", Full, FLUSH, FUA, 0, 0, V::Run(Command::Flush)),
        ("flush on read-only", ReadOnly, FLUSH, 0, 0, 0, V::Run(Command::Flush)),
        ("flush not advertised", Minimal, FLUSH, 0, 0, 0, V::Reject(EINVAL, 0)),
        ("flush with an offset", Full, FLUSH, 0, 512, 0, V::Reject(EINVAL, 0)),
        ("flush with a length", Full, FLUSH, 0, 0, 512, V::Reject(EINVAL, 0)),
        ("flush with NO_HOLE", Full, FLUSH, NO_HOLE, 0, 0, V::Reject(EINVAL, 0)),
        // --- trim
        ("trim", Full, TRIM, 0, 0, 4096, V::Run(Command::Trim { fua: false })),
        ("trim with FUA", Full, TRIM, FUA, 0, 4096, V::Run(Command::Trim { fua: true })),
        ("trim of the whole export", Full, TRIM, 0, 0, SIZE as u32, V::Run(Command::Trim { fua: false })),
        ("trim not advertised", Minimal, TRIM, 0, 0, 4096, V::Reject(EINVAL, 0)),
        ("trim on read-only", ReadOnly, TRIM, 0, 0, 4096, V::Reject(NBD_EPERM, 0)),
        ("trim past the end", Full, TRIM, 0, SIZE, 512, V::Reject(EINVAL, 0)),
        ("trim of zero bytes", Full, TRIM, 0, 0, 0, V::Reject(EINVAL, 0)),
        ("trim with NO_HOLE", Full, TRIM, NO_HOLE, 0, 512, V::Reject(EINVAL, 0)),
        // --- write zeroes
        ("zeroes", Full, ZEROES, 0, 0, 4096, z(false, false, false)),
        ("zeroes with all flags", Full, ZEROES, FUA | NO_HOLE | FAST_ZERO, 0, 4096, z(true, true, true)),
        ("zeroes of the whole export", Full, ZEROES, NO_HOLE, 0, SIZE as u32, z(false, true, false)),
        ("zeroes not advertised", Minimal, ZEROES, 0, 0, 4096, V::Reject(EINVAL, 0)),
        ("zeroes, FAST_ZERO not advertised", NoFastZero, ZEROES, FAST_ZERO, 0, 4096, V::Reject(EINVAL, 0)),
        ("zeroes, no FAST_ZERO", NoFastZero, ZEROES, NO_HOLE, 0, 4096, z(false, true, false)),
        ("zeroes on read-only", ReadOnly, ZEROES, 0, 0, 4096, V::Reject(NBD_EPERM, 0)),
        ("zeroes past the end", Full, ZEROES, 0, SIZE - 512, 4096, V::Reject(NBD_ENOSPC, 0)),
        ("zeroes of zero bytes", Full, ZEROES, 0, 0, 0, V::Reject(EINVAL, 0)),
        ("zeroes with DF", Full, ZEROES, DF, 0, 512, V::Reject(EINVAL, 0)),
        // --- block status
        ("status", Full, STATUS, 0, 0, 4096, V::Run(Command::BlockStatus { req_one: false })),
        ("status with REQ_ONE", Full, STATUS, REQ_ONE, 0, 4096, V::Run(Command::BlockStatus { req_one: true })),
        ("status over max payload", Full, STATUS, REQ_ONE, 0, SIZE as u32, V::Run(Command::BlockStatus { req_one: true })),
        ("status without structured replies", Minimal, STATUS, 0, 0, 4096, V::Reject(EINVAL, 0)),
        ("status without a context", NoMeta, STATUS, 0, 0, 4096, V::Reject(EINVAL, 0)),
        ("status past the end", Full, STATUS, 0, SIZE - 512, 1024, V::Reject(EINVAL, 0)),
        ("status of zero bytes", Full, STATUS, 0, 0, 0, V::Reject(EINVAL, 0)),
        ("status with NO_HOLE", Full, STATUS, NO_HOLE, 0, 512, V::Reject(EINVAL, 0)),
        ("status with DF", Full, STATUS, DF, 0, 512, V::Reject(EINVAL, 0)),
        ("status on read-only", ReadOnly, STATUS, 0, 0, 512, V::Run(Command::BlockStatus { req_one: false })),
        // --- cache: accepted without NBD_FLAG_SEND_CACHE
        ("cache", Full, CACHE, 0, 0, 4096, V::Run(Command::Cache)),
        ("cache, minimal", Minimal, CACHE, 0, 0, 4096, V::Run(Command::Cache)),
        ("cache with FUA", Full, CACHE, FUA, 0, 4096, V::Run(Command::Cache)),
        ("cache with NO_HOLE", Full, CACHE, NO_HOLE, 0, 4096, V::Reject(EINVAL, 0)),
        ("cache past the end", Full, CACHE, 0, SIZE, 4096, V::Reject(EINVAL, 0)),
        ("cache of zero bytes", Full, CACHE, 0, 0, 0, V::Reject(EINVAL, 0)),
    ]
}

#[test]
fn judge_follows_the_table() {
    let mut failures = Vec::new();
    for (what, s, kind, flags, offset, length, want) in cases() {
        let header = RequestHeader {
            flags,
            kind,
            cookie: 7,
            offset_bytes: offset,
            length_bytes: length,
        };
        let got = verdict(&judge(&header, &session(s)));
        if got != want {
            failures.push(format!("{what}: got {got:?}, want {want:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_rejected_write_discards_its_payload() {
    for (what, s, kind, flags, offset, length, _) in cases() {
        if kind != WRITE {
            continue;
        }
        let header = RequestHeader {
            flags,
            kind,
            cookie: 1,
            offset_bytes: offset,
            length_bytes: length,
        };
        if let Verdict::Reject { discard_bytes, .. } = judge(&header, &session(s)) {
            assert_eq!(discard_bytes, length, "{what}");
        }
    }
}

#[test]
fn parse_request_header_reads_every_field() {
    #[rustfmt::skip]
    let bytes: [u8; REQUEST_HEADER_BYTES] = [
        0x25, 0x60, 0x95, 0x13, // magic
        0x00, 0x01,             // flags: FUA
        0x00, 0x01,             // type: WRITE
        1, 2, 3, 4, 5, 6, 7, 8, // cookie
        0, 0, 0, 0, 0, 0, 0x10, 0x00, // offset 4096
        0, 0, 0x02, 0x00,       // length 512
    ];
    let h = parse_request_header(&bytes).unwrap();
    assert_eq!(
        h,
        RequestHeader {
            flags: NBD_CMD_FLAG_FUA,
            kind: NBD_CMD_WRITE,
            cookie: 0x0102_0304_0506_0708,
            offset_bytes: 4096,
            length_bytes: 512,
        }
    );
    assert_eq!(h.encode(), bytes);
    let mut bad = bytes;
    bad[3] = 0x14;
    assert_eq!(parse_request_header(&bad), Err(BadMagic));
    // The extended-header magic is not accepted either.
    bad[..4].copy_from_slice(&NBD_EXTENDED_REQUEST_MAGIC.to_be_bytes());
    assert_eq!(parse_request_header(&bad), Err(BadMagic));
}
