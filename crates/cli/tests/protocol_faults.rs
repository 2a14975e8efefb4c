//! Protocol faults against `platter serve`, with a raw client over the Unix
//! socket (issue #3).
//!
//! Every case asserts the exact answer the protocol (proto.md of the
//! NetworkBlockDevice/nbd repository) or DESIGN.md prescribes, or a clean
//! disconnect: EOF, never a hang (every read has a timeout). After each case
//! a "witness" connection, opened before the case, must still write and read
//! correctly, and the server process must still be alive; the fixture also
//! waits for the server's thread count to come back, so that a connection
//! that is not let go shows. Each test ends with SIGTERM and a clean exit.

mod protocol_support;

use protocol_support::*;
use std::thread;
use std::time::{Duration, Instant};

// ===========================================================================
// Handshake
// ===========================================================================

#[test]
fn handshake_bad_option_magic_disconnects() {
    let f = Fixture::new();
    let mut c = f.connect();
    c.greeting();
    c.client_flags(FLAG_C_FIXED_NEWSTYLE);
    c.raw_option(0x4948_4156_454f_5055, OPT_LIST, 0, &[]);
    c.expect_closed("option with a bad IHAVEOPT magic");
    f.finish("bad option magic");
}

#[test]
fn handshake_unknown_client_flags_disconnect() {
    let mut f = Fixture::new();
    for flags in [1u32 << 31 | FLAG_C_FIXED_NEWSTYLE, 1 << 2, u32::MAX] {
        let mut c = f.connect();
        c.greeting();
        c.client_flags(flags);
        c.expect_closed(&format!("client flags {flags:#x}"));
        f.check(&format!("client flags {flags:#x}"));
    }
    f.finish("unknown client flags");
}

#[test]
fn handshake_unknown_option_is_unsupported_and_negotiation_continues() {
    let f = Fixture::new();
    let mut c = f.connect();
    c.greeting();
    c.client_flags(FLAG_C_FIXED_NEWSTYLE);
    for (option, data) in [(0x4242u32, &b"some data"[..]), (0x7fff_ffff, &[]), (4, &[])] {
        c.option(option, data);
        let r = c.option_reply("unknown option");
        assert_eq!(r.option, option, "the reply names the option");
        assert_eq!(r.kind, REP_ERR_UNSUP, "option {option:#x}");
    }
    let e = c
        .go(EXPORT, &[INFO_BLOCK_SIZE])
        .expect("GO after unknown options");
    assert_eq!(e.size, f.size);
    c.write_read(0, &pattern(1, 4096), "after unknown options");
    drop(c);
    f.finish("unknown option");
}

#[test]
fn handshake_huge_option_length_disconnects_without_memory_growth() {
    let mut f = Fixture::new();
    let before = f.server.rss_bytes();
    for option in [OPT_GO, OPT_LIST, 0x4242] {
        let mut c = f.connect();
        c.greeting();
        c.client_flags(FLAG_C_FIXED_NEWSTYLE);
        c.raw_option(IHAVEOPT, option, 0x7fff_ffff, &[0u8; 4096]);
        // A disconnect, or NBD_REP_ERR_TOO_BIG; never a wait for 2 GiB.
        let got = c.until_closed(4096, "option of 0x7fffffff bytes");
        if !got.is_empty() {
            assert!(got.len() >= 20, "partial option reply {got:02x?}");
            assert_eq!(
                u32::from_be_bytes(got[12..16].try_into().unwrap()),
                REP_ERR_TOO_BIG,
                "the only acceptable answer is ERR_TOO_BIG"
            );
        }
        f.check(&format!("huge option {option:#x}"));
    }
    let after = f.server.rss_bytes();
    assert!(
        after < before + 32 * MIB,
        "RSS grew from {before} to {after} bytes after huge option lengths"
    );
    f.finish("huge option length");
}

#[test]
fn handshake_oversized_option_is_refused_or_disconnects() {
    // 100 KiB of option data really sent: the server may answer
    // ERR_TOO_BIG (and then must go on), or hang up.
    let f = Fixture::new();
    let mut c = f.connect();
    c.greeting();
    c.client_flags(FLAG_C_FIXED_NEWSTYLE);
    let mut m = IHAVEOPT.to_be_bytes().to_vec();
    m.extend_from_slice(&0x4242u32.to_be_bytes());
    m.extend_from_slice(&(100u32 << 10).to_be_bytes());
    m.extend_from_slice(&vec![0x55u8; 100 << 10]);
    let sent = c.send(&m);
    match c.option_reply_or_close("oversized option") {
        None => {}
        Some(r) => {
            assert!(sent.is_ok(), "server answered but did not take the data");
            assert!(
                r.kind == REP_ERR_TOO_BIG || r.kind == REP_ERR_UNSUP,
                "oversized option answered with {:#x}",
                r.kind
            );
            c.go(EXPORT, &[]).expect("GO after an oversized option");
            c.write_read(0, &pattern(2, 4096), "after an oversized option");
        }
    }
    drop(c);
    f.finish("oversized option");
}

#[test]
fn handshake_a_thousand_options_end_in_answers_or_a_disconnect() {
    let f = Fixture::new();
    let mut c = f.connect();
    c.greeting();
    c.client_flags(FLAG_C_FIXED_NEWSTYLE);
    let start = Instant::now();
    let mut answered = 0;
    for _ in 0..1000 {
        match c.list() {
            Some(Ok(names)) => {
                assert_eq!(names, vec![EXPORT.to_string()]);
                answered += 1;
            }
            Some(Err(e)) => panic!("NBD_OPT_LIST refused with {e:#x}"),
            None => break,
        }
    }
    assert!(answered >= 1, "not even one NBD_OPT_LIST was answered");
    if answered < 1000 {
        // It hung up: the connection must really be closed.
        c.expect_closed("after too many options");
    }
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "1000 options took {:?}",
        start.elapsed()
    );
    eprintln!("server answered {answered} of 1000 NBD_OPT_LIST before closing");
    drop(c);
    f.finish("too many options");
}

#[test]
fn handshake_structured_reply_with_payload_is_invalid() {
    let f = Fixture::new();
    let mut c = f.connect();
    c.greeting();
    c.client_flags(FLAG_C_FIXED_NEWSTYLE);
    assert_eq!(c.structured_reply(b"junk"), REP_ERR_INVALID);
    // The refused option changed nothing: replies stay simple (the client
    // panics on a structured chunk it did not negotiate).
    let e = c.go(EXPORT, &[]).expect("GO");
    assert_eq!(
        e.flags & TF_SEND_DF,
        0,
        "SEND_DF without structured replies"
    );
    c.write_read(0, &pattern(3, 8192), "after a refused STRUCTURED_REPLY");
    drop(c);
    f.finish("structured reply with payload");
}

#[test]
fn handshake_meta_context_before_structured_reply_is_invalid() {
    let f = Fixture::new();
    let mut c = f.connect();
    c.greeting();
    c.client_flags(FLAG_C_FIXED_NEWSTYLE);
    assert_eq!(
        c.set_meta_context(EXPORT, &["base:allocation"]),
        Err(REP_ERR_INVALID)
    );
    // Negotiation goes on, and done in the right order it works.
    assert_eq!(c.structured_reply(&[]), REP_ACK);
    let ctx = c
        .set_meta_context(EXPORT, &["base:allocation"])
        .expect("SET_META_CONTEXT");
    assert_eq!(ctx.len(), 1);
    c.go(EXPORT, &[]).expect("GO");
    let cookie = c.request(0, CMD_BLOCK_STATUS, 0, 65536, &[]);
    let r = c.reply_to(cookie, "block status");
    assert_eq!(r.errno(), 0);
    assert_eq!(r.block_status.len(), 1);
    assert_eq!(r.block_status[0].0, ctx[0].0, "the context id SET gave");
    drop(c);
    f.finish("meta context before structured reply");
}

#[test]
fn handshake_go_for_an_unknown_export_is_unknown() {
    let f = Fixture::new();
    let mut c = f.connect();
    c.greeting();
    c.client_flags(FLAG_C_FIXED_NEWSTYLE);
    for name in ["nope", "faults2", "FAULTS"] {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&0u16.to_be_bytes());
        c.option(OPT_GO, &d);
        let r = c.option_reply("GO unknown");
        // "the server SHOULD NOT send NBD_REP_INFO replies"
        assert_eq!(r.option, OPT_GO);
        assert_eq!(r.kind, REP_ERR_UNKNOWN, "GO {name:?}");
    }
    assert_eq!(c.info("nope", &[]), Err(REP_ERR_UNKNOWN));
    // The empty name is the default export.
    let default = c.info("", &[]).expect("INFO for the default export");
    assert_eq!(default.size, f.size);
    c.go(EXPORT, &[]).expect("GO after unknown exports");
    c.write_read(4096, &pattern(4, 4096), "after unknown exports");
    drop(c);
    f.finish("unknown export");
}

#[test]
fn handshake_list_names_the_export() {
    let f = Fixture::new();
    let mut c = f.connect();
    c.greeting();
    c.client_flags(FLAG_C_FIXED_NEWSTYLE);
    let names = c.list().expect("answered").expect("LIST");
    assert_eq!(names, vec![EXPORT.to_string()]);
    // LIST with data is invalid, and negotiation goes on.
    c.option(OPT_LIST, b"x");
    assert_eq!(c.option_reply("LIST with data").kind, REP_ERR_INVALID);
    c.go(EXPORT, &[]).expect("GO after LIST");
    c.write_read(0, &pattern(5, 512), "after LIST");
    drop(c);
    f.finish("list");
}

#[test]
fn handshake_info_then_go_describe_the_same_export() {
    let f = Fixture::new();
    for structured in [false, true] {
        let mut c = f.connect();
        let hflags = c.greeting();
        assert_ne!(hflags & FLAG_NO_ZEROES, 0, "NO_ZEROES is offered");
        c.client_flags(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
        if structured {
            assert_eq!(c.structured_reply(&[]), REP_ACK);
        }
        let all = [
            INFO_EXPORT,
            INFO_NAME,
            INFO_DESCRIPTION,
            INFO_BLOCK_SIZE,
            0x4242,
        ];
        let info = c.info(EXPORT, &all).expect("INFO");
        let go = c.go(EXPORT, &all).expect("GO");
        assert_eq!(info, go, "INFO then GO with the same requests must agree");
        assert_eq!(go.size, f.size);
        assert_eq!(go.name.as_deref(), Some(EXPORT));
        assert!(go.description.as_deref().is_some_and(|d| !d.is_empty()));
        let fl = go.flags;
        assert_ne!(fl & TF_HAS_FLAGS, 0);
        assert_eq!(fl & TF_READ_ONLY, 0);
        for (bit, name) in [
            (TF_SEND_FLUSH, "FLUSH"),
            (TF_SEND_FUA, "FUA"),
            (TF_SEND_TRIM, "TRIM"),
            (TF_SEND_WRITE_ZEROES, "WRITE_ZEROES"),
        ] {
            assert_ne!(fl & bit, 0, "{name} advertised");
        }
        assert_eq!(
            fl & TF_SEND_DF != 0,
            structured,
            "SEND_DF only with structured replies"
        );
        if fl & TF_SEND_FAST_ZERO != 0 {
            assert_ne!(fl & TF_SEND_WRITE_ZEROES, 0, "FAST_ZERO needs WRITE_ZEROES");
        }
        let (min, pref, max) = go.block.expect("NBD_INFO_BLOCK_SIZE");
        assert!(
            min.is_power_of_two() && (512..=65536).contains(&min),
            "minimum {min}"
        );
        assert!(
            pref.is_power_of_two() && pref >= min.max(512),
            "preferred {pref}"
        );
        assert_eq!(u64::from(max), MAX_PAYLOAD, "maximum payload");
        assert!(pref <= max);
        assert_eq!(
            f.size % u64::from(min),
            0,
            "size is a multiple of the minimum"
        );
        c.write_read(0, &pattern(6, 4096), "after INFO and GO");
    }
    f.finish("info then go");
}

#[test]
fn handshake_abort_is_acknowledged_or_closed() {
    let mut f = Fixture::new();
    for data in [&[][..], b"ignored"] {
        let mut c = f.connect();
        c.greeting();
        c.client_flags(FLAG_C_FIXED_NEWSTYLE);
        c.option(OPT_ABORT, data);
        if let Some(r) = c.option_reply_or_close("ABORT") {
            assert_eq!((r.option, r.kind), (OPT_ABORT, REP_ACK));
            assert!(r.data.is_empty(), "ACK with data");
        }
        c.expect_closed("after ABORT");
        f.check("abort");
    }
    f.finish("abort");
}

#[test]
fn handshake_export_name_enters_transmission() {
    let f = Fixture::new();
    for no_zeroes in [true, false] {
        let mut c = f.connect();
        c.greeting();
        let flags = FLAG_C_FIXED_NEWSTYLE | if no_zeroes { FLAG_C_NO_ZEROES } else { 0 };
        c.client_flags(flags);
        c.option(OPT_EXPORT_NAME, EXPORT.as_bytes());
        let h = c.take(10, "EXPORT_NAME reply");
        assert_eq!(u64::from_be_bytes(h[..8].try_into().unwrap()), f.size);
        assert_ne!(u16::from_be_bytes([h[8], h[9]]) & TF_HAS_FLAGS, 0);
        if !no_zeroes {
            assert_eq!(c.take(124, "zeroes"), vec![0u8; 124]);
        }
        c.write_read(8192, &pattern(7, 4096), "after EXPORT_NAME");
    }
    // EXPORT_NAME cannot be refused with an error: an unknown name closes.
    let mut c = f.connect();
    c.greeting();
    c.client_flags(FLAG_C_FIXED_NEWSTYLE);
    c.option(OPT_EXPORT_NAME, b"nope");
    c.expect_closed("EXPORT_NAME of an unknown export");
    drop(c);
    f.finish("export name");
}

// ===========================================================================
// Transmission
// ===========================================================================

/// A region no test writes but this one, below the witness's.
fn region(f: &Fixture, n: u64) -> u64 {
    let r = n * 2 * MIB;
    assert!(r + 2 * MIB <= f.size - WITNESS_BYTES);
    r
}

#[test]
fn transmission_bad_request_magic_disconnects() {
    let mut f = Fixture::new();
    for mode in Mode::BOTH {
        let mut c = f.open(mode);
        c.write_read(0, &pattern(8, 4096), "before the bad magic");
        let mut h = Client::header(0x2560_9514, 0, CMD_READ, 1, 0, 4096);
        h.extend_from_slice(&[0u8; 64]);
        c.put(&h);
        c.expect_closed(&format!("{mode:?}: bad request magic"));
        f.check(&format!("{mode:?}: bad request magic"));
    }
    f.finish("bad request magic");
}

#[test]
fn transmission_unknown_command_is_einval_and_the_connection_stays_usable() {
    let mut f = Fixture::new();
    for mode in Mode::BOTH {
        let mut c = f.open(mode);
        for kind in [8u16, 9, 0x42, 0xffff] {
            assert_eq!(
                c.errno_of(0, kind, 0, 4096, &[]),
                EINVAL,
                "{mode:?}: command {kind}"
            );
        }
        c.write_read(0, &pattern(9, 4096), "after unknown commands");
        f.check(&format!("{mode:?}: unknown command"));
    }
    f.finish("unknown command");
}

#[test]
fn transmission_unknown_command_flags_are_einval() {
    let mut f = Fixture::new();
    for mode in Mode::BOTH {
        let mut c = f.open(mode);
        let base = region(&f, 1);
        for flag in [1u16 << 5, 1 << 7, 1 << 15] {
            assert_eq!(
                c.errno_of(flag, CMD_READ, base, 4096, &[]),
                EINVAL,
                "read flag {flag:#x}"
            );
        }
        // A write with a bad flag: its payload is consumed, nothing written.
        let data = pattern(10, 4096);
        assert_eq!(
            c.errno_of(1 << 9, CMD_WRITE, base, 4096, &data),
            EINVAL,
            "write flag"
        );
        assert_eq!(
            c.read_at(base, 4096).unwrap(),
            vec![0u8; 4096],
            "refused write wrote"
        );
        // Flags defined for another command.
        assert_eq!(
            c.errno_of(CMD_FLAG_REQ_ONE, CMD_READ, base, 4096, &[]),
            EINVAL,
            "REQ_ONE on read"
        );
        assert_eq!(
            c.errno_of(CMD_FLAG_REQ_ONE, CMD_WRITE, base, 512, &data[..512]),
            EINVAL,
            "REQ_ONE on write"
        );
        if mode == Mode::Simple {
            // DF is only valid with structured replies.
            assert_eq!(
                c.errno_of(1 << 2, CMD_READ, base, 4096, &[]),
                EINVAL,
                "DF without structured replies"
            );
        } else {
            let r = c.request(1 << 2, CMD_READ, base, 4096, &[]);
            assert_eq!(
                c.reply_to(r, "DF read").errno(),
                0,
                "DF is advertised and valid"
            );
        }
        c.write_read(base, &data, "after bad flags");
        c.write_at(base, &[0u8; 4096], 0).unwrap();
        f.check(&format!("{mode:?}: unknown flags"));
    }
    f.finish("unknown flags");
}

#[test]
fn transmission_requests_past_the_end_are_refused_and_stay_in_sync() {
    let mut f = Fixture::new();
    let size = f.size;
    for mode in Mode::BOTH {
        let mut c = f.open(mode);
        let data = pattern(11, 8192);
        for (off, len) in [
            (size - 4096, 8192u32),
            (size, 512),
            (size + (1 << 30), 4096),
        ] {
            assert_eq!(
                c.errno_of(0, CMD_READ, off, len, &[]),
                EINVAL,
                "read {off}+{len}"
            );
            assert_eq!(
                c.errno_of(0, CMD_WRITE, off, len, &data[..len as usize]),
                ENOSPC,
                "write {off}+{len}"
            );
            assert_eq!(
                c.errno_of(0, CMD_TRIM, off, len, &[]),
                EINVAL,
                "trim {off}+{len}"
            );
            assert_eq!(
                c.errno_of(0, CMD_WRITE_ZEROES, off, len, &[]),
                ENOSPC,
                "write zeroes {off}+{len}"
            );
            // The refused write's payload was consumed: the stream is in sync.
            c.write_read(region(&f, 2), &data, "after a request past the end");
        }
        // The last block itself is in range (it belongs to the witness, so
        // only read it).
        assert!(c.read_at(size - 512, 512).is_ok(), "the last block reads");
        f.check(&format!("{mode:?}: past the end"));
    }
    f.finish("past the end");
}

#[test]
fn transmission_offset_plus_length_overflow_is_refused() {
    let mut f = Fixture::new();
    for mode in Mode::BOTH {
        let mut c = f.open(mode);
        let data = pattern(12, 4096);
        for off in [u64::MAX - 511, u64::MAX - 4095, u64::MAX, 1 << 63] {
            assert_eq!(
                c.errno_of(0, CMD_READ, off, 4096, &[]),
                EINVAL,
                "read at {off:#x}"
            );
            assert_eq!(
                c.errno_of(0, CMD_WRITE, off, 4096, &data),
                ENOSPC,
                "write at {off:#x}"
            );
            assert_eq!(
                c.errno_of(0, CMD_TRIM, off, 4096, &[]),
                EINVAL,
                "trim at {off:#x}"
            );
            assert_eq!(
                c.errno_of(0, CMD_WRITE_ZEROES, off, 4096, &[]),
                ENOSPC,
                "zero at {off:#x}"
            );
        }
        c.write_read(region(&f, 3), &data, "after overflowing ranges");
        f.check(&format!("{mode:?}: overflow"));
    }
    f.finish("overflow");
}

#[test]
fn transmission_zero_length_requests_are_einval() {
    let mut f = Fixture::new();
    for mode in Mode::BOTH {
        let mut c = f.open(mode);
        let off = region(&f, 4);
        assert_eq!(
            c.errno_of(0, CMD_READ, off, 0, &[]),
            EINVAL,
            "zero-length read"
        );
        assert_eq!(
            c.errno_of(0, CMD_WRITE, off, 0, &[]),
            EINVAL,
            "zero-length write"
        );
        assert_eq!(
            c.errno_of(0, CMD_TRIM, off, 0, &[]),
            EINVAL,
            "zero-length trim"
        );
        assert_eq!(
            c.errno_of(0, CMD_WRITE_ZEROES, off, 0, &[]),
            EINVAL,
            "zero-length zero"
        );
        // FLUSH takes no range at all; one with a range is invalid.
        assert_eq!(c.errno_of(0, CMD_FLUSH, 0, 0, &[]), 0, "flush");
        assert_eq!(
            c.errno_of(0, CMD_FLUSH, 0, 4096, &[]),
            EINVAL,
            "flush with a length"
        );
        c.write_read(off, &pattern(13, 4096), "after zero-length requests");
        f.check(&format!("{mode:?}: zero length"));
    }
    f.finish("zero length");
}

#[test]
fn transmission_read_over_32_mib_is_einval_and_the_stream_stays_in_sync() {
    let mut f = Fixture::new();
    for mode in Mode::BOTH {
        let mut c = f.open(mode);
        let max = MAX_PAYLOAD as u32;
        // Exactly the maximum is fine.
        let whole = c.read_at(0, max).expect("a read of exactly 32 MiB");
        assert_eq!(whole.len(), max as usize);
        for len in [max + 512, max + 1, 48 << 20, u32::MAX] {
            assert_eq!(
                c.errno_of(0, CMD_READ, 0, len, &[]),
                EINVAL,
                "{mode:?}: read of {len}"
            );
        }
        // Pipelined: the refused read sits between two good ones.
        let a = c.request(0, CMD_READ, 0, 4096, &[]);
        let b = c.request(0, CMD_READ, 0, max + 512, &[]);
        let d = c.request(0, CMD_READ, 4096, 4096, &[]);
        let mut seen = std::collections::HashMap::new();
        for _ in 0..3 {
            let r = c.reply();
            seen.insert(r.cookie, r.errno());
        }
        assert_eq!((seen[&a], seen[&b], seen[&d]), (0, EINVAL, 0));
        c.write_read(region(&f, 5), &pattern(14, 4096), "after oversized reads");
        f.check(&format!("{mode:?}: read over 32 MiB"));
    }
    f.finish("read over 32 MiB");
}

#[test]
fn transmission_write_over_32_mib_disconnects() {
    let mut f = Fixture::new();
    for (mode, len) in [
        (Mode::Simple, (32u32 << 20) + 512),
        (Mode::Structured, (32u32 << 20) + 1),
        (Mode::Simple, u32::MAX),
    ] {
        let mut c = f.open(mode);
        let off = region(&f, 6);
        let mut m = Client::header(REQUEST_MAGIC, 0, CMD_WRITE, 77, off, len);
        m.extend_from_slice(&pattern(15, 64 * 1024));
        c.put(&m);
        c.expect_closed(&format!("{mode:?}: write of {len} bytes"));
        f.check(&format!("{mode:?}: write of {len} bytes"));
        // Nothing of it was written.
        let mut o = f.open(Mode::Simple);
        assert_eq!(
            o.read_at(off, 65536).unwrap(),
            vec![0u8; 65536],
            "oversized write wrote"
        );
    }
    // Exactly 32 MiB is a valid write.
    let mut c = f.open(Mode::Structured);
    let big = pattern(16, MAX_PAYLOAD as usize);
    c.write_read(0, &big, "a write of exactly 32 MiB");
    drop(c);
    f.finish("write over 32 MiB");
}

#[test]
fn transmission_writes_to_a_read_only_export_are_eperm() {
    let mut f = Fixture::read_only();
    for mode in Mode::BOTH {
        let mut c = f.open(mode);
        assert_ne!(c.export.flags & TF_READ_ONLY, 0, "READ_ONLY advertised");
        let data = pattern(17, 65536);
        for len in [512u32, 65536] {
            assert_eq!(
                c.errno_of(0, CMD_WRITE, 0, len, &data[..len as usize]),
                EPERM,
                "{mode:?}: write of {len}"
            );
            // The payload was consumed: the next request works.
            assert_eq!(c.read_at(0, len).unwrap(), vec![0u8; len as usize]);
        }
        assert_eq!(
            c.errno_of(CMD_FLAG_FUA, CMD_WRITE, 0, 4096, &data[..4096]),
            EPERM
        );
        assert_eq!(c.errno_of(0, CMD_TRIM, 0, 4096, &[]), EPERM, "trim");
        assert_eq!(
            c.errno_of(0, CMD_WRITE_ZEROES, 0, 4096, &[]),
            EPERM,
            "write zeroes"
        );
        assert_eq!(
            c.errno_of(0, CMD_FLUSH, 0, 0, &[]),
            0,
            "flush on a read-only export"
        );
        assert_eq!(
            c.read_at(0, 65536).unwrap(),
            vec![0u8; 65536],
            "nothing was written"
        );
        f.check(&format!("{mode:?}: read-only"));
    }
    f.finish("read-only");
}

#[test]
fn transmission_fua_writes_and_flush_work() {
    let mut f = Fixture::new();
    for mode in Mode::BOTH {
        let mut c = f.open(mode);
        let off = region(&f, 7);
        let data = pattern(18, 128 * 1024);
        c.write_at(off, &data, CMD_FLAG_FUA).expect("FUA write");
        assert_eq!(c.read_at(off, data.len() as u32).unwrap(), data);
        assert_eq!(c.errno_of(0, CMD_FLUSH, 0, 0, &[]), 0, "flush");
        assert_eq!(
            c.errno_of(CMD_FLAG_FUA, CMD_WRITE_ZEROES, off, 4096, &[]),
            0,
            "FUA zero"
        );
        assert_eq!(
            c.errno_of(CMD_FLAG_FUA, CMD_TRIM, off + 4096, 4096, &[]),
            0,
            "FUA trim"
        );
        // FUA "is valid for all commands": a read with it is accepted.
        let r = c.request(CMD_FLAG_FUA, CMD_READ, off, 4096, &[]);
        let r = c.reply_to(r, "FUA read");
        assert_eq!(r.errno(), 0);
        assert_eq!(r.data, vec![0u8; 4096], "write zeroes zeroed");
        f.check(&format!("{mode:?}: FUA"));
    }
    f.finish("FUA");
}

#[test]
fn transmission_block_status_without_a_context_is_einval() {
    let mut f = Fixture::new();
    for mode in Mode::BOTH {
        let mut c = f.open(mode);
        assert_eq!(
            c.errno_of(0, CMD_BLOCK_STATUS, 0, 65536, &[]),
            EINVAL,
            "{mode:?}"
        );
        c.write_read(region(&f, 8), &pattern(19, 4096), "after BLOCK_STATUS");
        f.check(&format!("{mode:?}: block status without context"));
    }
    // A context selected for another export name is not selected.
    let mut c = f.connect();
    c.greeting();
    c.client_flags(FLAG_C_FIXED_NEWSTYLE);
    assert_eq!(c.structured_reply(&[]), REP_ACK);
    assert_eq!(
        c.set_meta_context("nope", &["base:allocation"]),
        Err(REP_ERR_UNKNOWN)
    );
    // Nor is an unknown one in the base namespace.
    assert_eq!(
        c.set_meta_context(EXPORT, &["base:nothing", "x-other:thing"]),
        Ok(vec![])
    );
    c.go(EXPORT, &[]).expect("GO");
    assert_eq!(
        c.errno_of(0, CMD_BLOCK_STATUS, 0, 65536, &[]),
        EINVAL,
        "no context selected"
    );
    drop(c);
    f.finish("block status without context");
}

#[test]
fn transmission_block_status_with_base_allocation_covers_the_range() {
    let f = Fixture::new();
    let mut c = f.open(Mode::Meta);
    let size = f.size;
    for (off, len) in [
        (0u64, 65536u32),
        (4096, 1 << 20),
        (0, size as u32),
        (size - 512, 512),
    ] {
        for flags in [0, CMD_FLAG_REQ_ONE] {
            let cookie = c.request(flags, CMD_BLOCK_STATUS, off, len, &[]);
            let r = c.reply_to(cookie, "block status");
            assert_eq!(r.errno(), 0, "block status {off}+{len}");
            assert_eq!(r.block_status.len(), 1, "one chunk per selected context");
            let (ctx, ext) = &r.block_status[0];
            assert_eq!(
                *ctx, 1,
                "the id SET_META_CONTEXT gave (1, see Client::open)"
            );
            assert!(!ext.is_empty(), "at least one extent");
            assert!(
                ext.iter().all(|e| e.0 > 0),
                "extents have nonzero length: {ext:?}"
            );
            assert!(
                ext.iter().all(|e| e.1 & !3 == 0),
                "only HOLE and ZERO flags: {ext:?}"
            );
            let total: u64 = ext.iter().map(|e| u64::from(e.0)).sum();
            let but_last: u64 = total - u64::from(ext.last().unwrap().0);
            assert!(
                but_last < u64::from(len),
                "extents before the last stay in the range"
            );
            assert!(off + total <= size, "extents end within the export");
            if flags == CMD_FLAG_REQ_ONE {
                assert_eq!(ext.len(), 1, "REQ_ONE: one extent");
                assert!(total <= u64::from(len), "REQ_ONE: not past the request");
            }
        }
    }
    // Past the end: EINVAL, as the protocol asks.
    assert_eq!(
        c.errno_of(0, CMD_BLOCK_STATUS, size - 512, 1024, &[]),
        EINVAL
    );
    assert_eq!(c.errno_of(0, CMD_BLOCK_STATUS, size, 512, &[]), EINVAL);
    assert_eq!(
        c.errno_of(0, CMD_BLOCK_STATUS, 0, 0, &[]),
        EINVAL,
        "zero length"
    );
    // BLOCK_STATUS is not limited to the 32 MiB payload maximum: the whole
    // 64 MiB export at once was answered above.
    c.write_read(region(&f, 9), &pattern(20, 4096), "after BLOCK_STATUS");
    drop(c);
    f.finish("block status");
}

#[test]
fn transmission_disc_closes_after_answering_earlier_requests() {
    let mut f = Fixture::new();
    for mode in Mode::BOTH {
        let mut c = f.open(mode);
        let off = region(&f, 10);
        let data = pattern(21, 256 * 1024);
        c.write_at(off, &data, 0).unwrap();
        let r1 = c.request(0, CMD_READ, off, data.len() as u32, &[]);
        let r2 = c.request(0, CMD_FLUSH, 0, 0, &[]);
        let r3 = c.request(0, CMD_WRITE, off, 4096, &data[..4096]);
        c.disconnect();
        let mut got = Vec::new();
        for _ in 0..3 {
            let r = c.reply();
            assert_eq!(r.errno(), 0, "{mode:?}: request before DISC");
            if r.cookie == r1 {
                assert!(r.data == data, "read before DISC returned the data");
            }
            got.push(r.cookie);
        }
        got.sort();
        assert_eq!(
            got,
            vec![r1, r2, r3],
            "every request before DISC is answered"
        );
        c.expect_closed(&format!("{mode:?}: after DISC"));
        f.check(&format!("{mode:?}: DISC"));
    }
    f.finish("DISC");
}

#[test]
fn transmission_unaligned_requests_are_refused_or_exact() {
    // The minimum block size is 512 and a client that asked for it MUST
    // obey it; the server may refuse (EINVAL) or serve any byte range. If it
    // serves, it must be exact.
    let f = Fixture::new();
    let mut c = f.open(Mode::Structured);
    let base = region(&f, 11);
    let mut model = vec![0u8; 65536];
    let mut rng = Rng(5);
    for i in 0..40 {
        let off = rng.below(60000);
        let len = 1 + rng.below(5000) as usize;
        let data = pattern(100 + i, len);
        match c.write_at(base + off, &data, 0) {
            Ok(()) => model[off as usize..off as usize + len].copy_from_slice(&data),
            Err(e) => assert_eq!(e, EINVAL, "unaligned write {off}+{len}"),
        }
        let roff = rng.below(60000);
        let rlen = 1 + rng.below(5000) as usize;
        match c.read_at(base + roff, rlen as u32) {
            Ok(got) => assert!(
                got == model[roff as usize..roff as usize + rlen],
                "unaligned read {roff}+{rlen} differs from the model"
            ),
            Err(e) => assert_eq!(e, EINVAL, "unaligned read {roff}+{rlen}"),
        }
    }
    drop(c);
    f.finish("unaligned");
}

// ===========================================================================
// Disconnects at every phase
// ===========================================================================

#[test]
fn disconnect_before_and_right_after_the_greeting() {
    let mut f = Fixture::new();
    for _ in 0..20 {
        drop(f.connect());
    }
    f.check_settled("connect and close");
    for _ in 0..20 {
        let mut c = f.connect();
        c.greeting();
        drop(c);
    }
    f.check_settled("close after the greeting");
    for _ in 0..20 {
        let mut c = f.connect();
        c.greeting();
        c.put(&[0, 0]); // half the client flags
    }
    f.finish("close in the client flags");
}

#[test]
fn disconnect_in_the_middle_of_an_option() {
    let mut f = Fixture::new();
    let go = {
        let mut d = (EXPORT.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(EXPORT.as_bytes());
        d.extend_from_slice(&1u16.to_be_bytes());
        d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        d
    };
    for cut in [4usize, 8, 12, 16, 20, 16 + go.len() - 1] {
        let mut c = f.connect();
        c.greeting();
        c.client_flags(FLAG_C_FIXED_NEWSTYLE);
        let mut m = IHAVEOPT.to_be_bytes().to_vec();
        m.extend_from_slice(&OPT_GO.to_be_bytes());
        m.extend_from_slice(&(go.len() as u32).to_be_bytes());
        m.extend_from_slice(&go);
        c.put(&m[..cut]);
        drop(c);
        f.check(&format!("close after {cut} option bytes"));
    }
    // And after some options were answered.
    let mut c = f.connect();
    c.greeting();
    c.client_flags(FLAG_C_FIXED_NEWSTYLE);
    assert_eq!(c.structured_reply(&[]), REP_ACK);
    c.info(EXPORT, &[]).unwrap();
    c.raw_option(IHAVEOPT, OPT_SET_META_CONTEXT, 100, &[0, 0]);
    drop(c);
    f.finish("close in an option");
}

#[test]
fn disconnect_after_a_request_header_without_its_payload() {
    let mut f = Fixture::new();
    for mode in Mode::BOTH {
        for len in [512u32, 1 << 20, 32 << 20] {
            let mut c = f.open(mode);
            let cookie = c.cookie();
            c.put(&Client::header(REQUEST_MAGIC, 0, CMD_WRITE, cookie, 0, len));
            drop(c);
            f.check(&format!("{mode:?}: write header of {len}, then close"));
        }
        // A partial header.
        let mut c = f.open(mode);
        c.put(&Client::header(REQUEST_MAGIC, 0, CMD_READ, 1, 0, 4096)[..13]);
        drop(c);
    }
    f.finish("close after a header");
}

#[test]
fn disconnect_in_the_middle_of_a_write_payload() {
    let mut f = Fixture::new();
    let off = region(&f, 12);
    for mode in Mode::BOTH {
        for (len, sent) in [
            (4096u32, 1usize),
            (1 << 20, 512 * 1024),
            (32 << 20, 5 << 20),
        ] {
            let mut c = f.open(mode);
            let cookie = c.cookie();
            let mut m = Client::header(REQUEST_MAGIC, 0, CMD_WRITE, cookie, off, len);
            m.extend_from_slice(&pattern(22, sent));
            c.put(&m);
            drop(c);
            f.check(&format!(
                "{mode:?}: {sent} of {len} payload bytes, then close"
            ));
        }
    }
    // A torn write is not applied.
    let mut c = f.open(Mode::Simple);
    assert_eq!(
        c.read_at(off, 4096).unwrap(),
        vec![0u8; 4096],
        "a torn write was written"
    );
    drop(c);
    f.finish("close in a payload");
}

#[test]
fn disconnect_with_replies_pending() {
    let mut f = Fixture::new();
    for mode in Mode::BOTH {
        let mut c = f.open(mode);
        for i in 0..32u64 {
            c.request(0, CMD_READ, (i % 32) * MIB, MIB as u32, &[]);
        }
        drop(c);
        f.check(&format!("{mode:?}: 32 × 1 MiB reads, then close"));
        // Writes too.
        let mut c = f.open(mode);
        let data = pattern(23, MIB as usize);
        for i in 0..8u64 {
            c.request(
                0,
                CMD_WRITE,
                region(&f, 13) + (i % 2) * MIB,
                MIB as u32,
                &data,
            );
        }
        drop(c);
        f.check_settled(&format!("{mode:?}: writes, then close"));
    }
    f.finish("close with replies pending");
}

// ===========================================================================
// Clients that stall
// ===========================================================================

/// A connection that pipelines 64 reads of 1 MiB and then never reads a
/// reply (but stays connected): its replies fill the socket buffers.
fn stalled_reader(f: &Fixture) -> Client {
    let mut a = f.open(Mode::Simple);
    for i in 0..64u64 {
        a.request(0, CMD_READ, (i % 32) * MIB, MIB as u32, &[]);
    }
    thread::sleep(Duration::from_millis(300));
    a
}

/// A connection that announces a 32 MiB write, sends 4 KiB of it and waits.
fn stalled_writer(f: &Fixture, cookie: u64) -> Client {
    let mut a = f.open(Mode::Simple);
    let mut m = Client::header(REQUEST_MAGIC, 0, CMD_WRITE, cookie, 0, 32 << 20);
    m.extend_from_slice(&[0u8; 4096]);
    a.put(&m);
    a
}

#[test]
fn a_client_that_stops_reading_replies_does_not_stall_others() {
    let mut f = Fixture::new();
    let stalled = stalled_reader(&f);
    f.check("while one client does not read its replies");
    let mut other = f.open(Mode::Structured);
    other.write_read(
        region(&f, 14),
        &pattern(24, 65536),
        "a new client meanwhile",
    );
    drop(stalled);
    drop(other);
    f.finish("stalled reader");
}

#[test]
fn clients_stalled_in_the_middle_of_write_payloads_do_not_stall_others() {
    // Nine is enough to hold 288 MiB of announced payload.
    let mut f = Fixture::new();
    let stalled: Vec<Client> = (0..9).map(|i| stalled_writer(&f, i)).collect();
    thread::sleep(Duration::from_millis(300));
    f.check("while 9 clients stall in 32 MiB write payloads");
    let mut other = f.open(Mode::Simple);
    other.write_read(
        region(&f, 15),
        &pattern(25, 65536),
        "a new client meanwhile",
    );
    drop(stalled);
    drop(other);
    f.finish("stalled writers");
}

#[test]
fn sigterm_stops_the_server_despite_a_client_that_does_not_read() {
    let f = Fixture::new();
    let stalled = stalled_reader(&f);
    // Stop with the client still connected and still not reading.
    f.stop_now();
    drop(stalled);
}

#[test]
fn sigterm_stops_the_server_despite_a_client_stalled_in_a_write_payload() {
    let f = Fixture::new();
    let stalled = stalled_writer(&f, 1);
    thread::sleep(Duration::from_millis(200));
    f.stop_now();
    drop(stalled);
}

// ===========================================================================
// Memory stays bounded
// ===========================================================================

#[test]
fn memory_stays_bounded_under_a_storm_of_abandoned_connections() {
    let mut f = Fixture::new();
    let socket = f.socket();
    let baseline = f.server.rss_bytes();
    let start = Instant::now();
    let mode = |i: u64| {
        if i.is_multiple_of(2) {
            Mode::Simple
        } else {
            Mode::Structured
        }
    };
    // 200 connections: a write header and part of its payload, then close.
    let workers: Vec<_> = (0..4u64)
        .map(|w| {
            let socket = socket.clone();
            thread::spawn(move || {
                let mut refused = 0;
                for i in 0..50u64 {
                    let Some(mut c) = Client::try_open(&socket, mode(i)) else {
                        refused += 1;
                        continue;
                    };
                    let len = (1u32 << 20) << (i % 3); // 1, 2 or 4 MiB
                    let mut m = Client::header(REQUEST_MAGIC, 0, CMD_WRITE, w * 100 + i, 0, len);
                    m.extend_from_slice(&vec![0xa5u8; (len / 2) as usize]);
                    let _ = c.send(&m);
                }
                refused
            })
        })
        .collect();
    let refused_writes: u32 = workers
        .into_iter()
        .map(|w| w.join().expect("storm thread"))
        .sum();
    f.check("after 200 abandoned partial writes");
    let mid = f.server.rss_bytes();
    // 50 connections: 64 × 1 MiB reads pipelined, replies never read.
    let workers: Vec<_> = (0..2u64)
        .map(|_| {
            let socket = socket.clone();
            thread::spawn(move || {
                let mut refused = 0;
                for i in 0..25u64 {
                    let Some(mut c) = Client::try_open(&socket, mode(i)) else {
                        refused += 1;
                        continue;
                    };
                    let mut m = Vec::new();
                    for j in 0..64u64 {
                        let off = (j % 48) * MIB;
                        m.extend_from_slice(&Client::header(
                            REQUEST_MAGIC,
                            0,
                            CMD_READ,
                            j,
                            off,
                            MIB as u32,
                        ));
                    }
                    let _ = c.send(&m);
                }
                refused
            })
        })
        .collect();
    let refused_reads: u32 = workers
        .into_iter()
        .map(|w| w.join().expect("storm thread"))
        .sum();
    f.check_settled("after 50 abandoned pipelines");
    // The server gives freed memory back once idle for a second
    // (memory.rs); glibc holds it until then. With member reads completing
    // on the io_uring thread, the storm's buffers were still held when the
    // connections had just gone (268 MiB), and were given back a second
    // later (33 MiB): the bound is on what stays, so wait for the trim.
    let trimmed_by = Instant::now() + Duration::from_secs(5);
    let mut after = f.server.rss_bytes();
    while after >= baseline + 150 * MIB && Instant::now() < trimmed_by {
        thread::sleep(Duration::from_millis(100));
        after = f.server.rss_bytes();
    }
    let peak = f.server.peak_rss_bytes();
    eprintln!(
        "server RSS: baseline {} MiB, after partial writes {} MiB, after pipelines {} MiB, peak {} MiB; \
         storm took {:?}; refused {refused_writes} + {refused_reads} connections",
        baseline >> 20,
        mid >> 20,
        after >> 20,
        peak >> 20,
        start.elapsed()
    );
    assert!(
        after < 300 * MIB,
        "RSS after the storm is {} MiB",
        after >> 20
    );
    assert!(
        after < baseline + 150 * MIB,
        "RSS grew from {} MiB to {} MiB",
        baseline >> 20,
        after >> 20
    );
    assert_eq!(
        (refused_writes, refused_reads),
        (0, 0),
        "connections refused although at most 6 were open at once"
    );
    f.finish("storm");
}

#[test]
fn a_burst_of_short_connections_is_not_refused() {
    // Four clients, each opening one connection at a time and closing it
    // once the server has acknowledged NBD_OPT_ABORT: never more than a few
    // are open, so the connection limit (64 by default) must refuse none.
    let f = Fixture::new();
    let socket = f.socket();
    let start = Instant::now();
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let socket = socket.clone();
            thread::spawn(move || {
                let mut refused = 0;
                for _ in 0..100 {
                    let mut c = Client::connect(&socket);
                    let mut g = [0u8; 18];
                    match c.fill(&mut g) {
                        Ok(()) => {
                            // ABORT and its ACK: the server is done with it.
                            c.client_flags(FLAG_C_FIXED_NEWSTYLE);
                            c.option(OPT_ABORT, &[]);
                            let _ = c.option_reply_or_close("ABORT");
                        }
                        Err(End::Closed { got: 0 }) => refused += 1,
                        Err(e) => panic!("greeting: {e:?}"),
                    }
                }
                refused
            })
        })
        .collect();
    let refused: u32 = workers
        .into_iter()
        .map(|w| w.join().expect("burst thread"))
        .sum();
    eprintln!(
        "400 short connections in {:?}, {refused} refused",
        start.elapsed()
    );
    assert_eq!(refused, 0, "{refused} of 400 short connections refused");
    // A connection the server ends in the handshake is closed at once,
    // not when the server next tidies up (every 100 ms): the median time to
    // EOF after NBD_OPT_ABORT stays far below that.
    let mut waits: Vec<Duration> = (0..21)
        .map(|_| {
            let mut c = f.connect();
            c.greeting();
            c.client_flags(FLAG_C_FIXED_NEWSTYLE);
            c.option(OPT_ABORT, &[]);
            let t = Instant::now();
            let _ = c.until_closed(1024, "ABORT");
            t.elapsed()
        })
        .collect();
    waits.sort();
    assert!(
        waits[10] < Duration::from_millis(30),
        "median EOF {:?} after ABORT (all: {waits:?})",
        waits[10]
    );
    f.finish("burst");
}

// ===========================================================================
// Many connections at once
// ===========================================================================

#[test]
fn sixteen_concurrent_clients_each_verify_their_own_region() {
    let f = Fixture::new();
    let socket = f.socket();
    let region_bytes = 3 * MIB;
    assert!(16 * region_bytes <= f.size - WITNESS_BYTES);
    let threads: Vec<_> = (0..16u64)
        .map(|t| {
            let socket = socket.clone();
            thread::spawn(move || {
                let mode = [Mode::Simple, Mode::Structured, Mode::Meta][t as usize % 3];
                let mut c = Client::open(&socket, mode);
                let base = t * region_bytes;
                let blocks = region_bytes / 4096;
                let mut model = vec![0u8; region_bytes as usize];
                let mut rng = Rng(t + 1);
                for i in 0..200u64 {
                    let b = rng.below(blocks);
                    let data = pattern(t << 32 | i, 4096);
                    let at = (b * 4096) as usize;
                    model[at..at + 4096].copy_from_slice(&data);
                    c.write_at(
                        base + b * 4096,
                        &data,
                        if i % 7 == 0 { CMD_FLAG_FUA } else { 0 },
                    )
                    .unwrap_or_else(|e| panic!("client {t}: write failed with {e}"));
                    let r = rng.below(blocks) as usize * 4096;
                    let got = c
                        .read_at(base + r as u64, 4096)
                        .unwrap_or_else(|e| panic!("client {t}: read failed with {e}"));
                    assert!(
                        got == model[r..r + 4096],
                        "client {t}: block {} differs",
                        r / 4096
                    );
                }
                // And the whole region, in 1 MiB reads.
                for m in 0..region_bytes / MIB {
                    let got = c.read_at(base + m * MIB, MIB as u32).unwrap();
                    let at = (m * MIB) as usize;
                    assert!(
                        got == model[at..at + MIB as usize],
                        "client {t}: MiB {m} differs"
                    );
                }
                c.disconnect();
                c.expect_closed("DISC");
            })
        })
        .collect();
    for (i, t) in threads.into_iter().enumerate() {
        t.join()
            .unwrap_or_else(|_| panic!("client thread {i} failed"));
    }
    f.finish("sixteen clients");
}
