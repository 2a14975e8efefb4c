//! The handshake against hand-built client byte streams, checking the exact
//! bytes the server answers.

mod support;

use platter_nbd::consts::*;
use platter_nbd::{
    CloseReason, HandshakeConfig, HandshakeState, Negotiated, ServerHandshake, TlsPolicy,
    BASE_ALLOCATION,
};
use support::*;

const FIXED: u32 = NBD_FLAG_C_FIXED_NEWSTYLE;
const FIXED_NZ: u32 = NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES;

fn stream(flags: u32, options: &[Vec<u8>]) -> Vec<u8> {
    let mut v = client_flags(flags);
    for o in options {
        v.extend_from_slice(o);
    }
    v
}

fn negotiated(export_index: usize, structured: bool, no_zeroes: bool) -> Negotiated {
    Negotiated {
        export_index,
        structured_replies: structured,
        no_zeroes,
        meta_contexts: vec![],
    }
}

/// Output after the greeting, checking the greeting is there.
fn after_greeting(out: &[u8]) -> &[u8] {
    assert_eq!(&out[..18], &greeting()[..], "greeting");
    &out[18..]
}

#[test]
fn new_queues_the_greeting_and_wants_client_flags() {
    let mut hs = ServerHandshake::new(config());
    assert_eq!(hs.take_output(), greeting());
    assert!(hs.take_output().is_empty());
    assert_eq!(*hs.state(), HandshakeState::Negotiating);
    assert_eq!(hs.wanted_bytes(), 4);
    assert_eq!(hs.feed(&[0, 0]), 2);
    assert_eq!(hs.wanted_bytes(), 2);
    assert_eq!(hs.feed(&[0, 1]), 2);
    assert_eq!(hs.wanted_bytes(), 16);
    assert!(hs.take_output().is_empty());
}

#[test]
fn go_replies_export_block_size_name_description_then_ack() {
    let input = stream(
        FIXED_NZ,
        &[opt(
            NBD_OPT_GO,
            // Requests in a scrambled order, one repeated, one unknown.
            &info_data(
                "vol0",
                &[
                    NBD_INFO_DESCRIPTION,
                    99,
                    NBD_INFO_NAME,
                    NBD_INFO_BLOCK_SIZE,
                    NBD_INFO_NAME,
                ],
            ),
        )],
    );
    let (out, state, consumed) = run(config(), &input);
    assert_eq!(consumed, input.len());
    // Without structured replies SEND_DF is not advertised.
    let flags = RW_FLAGS & !NBD_FLAG_SEND_DF;
    let mut want = greeting();
    want.extend(rep(NBD_OPT_GO, NBD_REP_INFO, &info_export(1 << 30, flags)));
    want.extend(rep(
        NBD_OPT_GO,
        NBD_REP_INFO,
        &info_block_size(512, 192 * 1024, 32 * MIB),
    ));
    want.extend(rep(
        NBD_OPT_GO,
        NBD_REP_INFO,
        &info_string(NBD_INFO_NAME, "vol0"),
    ));
    want.extend(rep(
        NBD_OPT_GO,
        NBD_REP_INFO,
        &info_string(NBD_INFO_DESCRIPTION, "first volume"),
    ));
    want.extend(rep(NBD_OPT_GO, NBD_REP_ACK, &[]));
    assert_eq!(out, want);
    assert_eq!(
        state,
        HandshakeState::Transmission(negotiated(0, false, true))
    );
}

#[test]
fn go_reply_bytes_spelled_out() {
    // The same as above for a minimal GO, byte for byte from proto.md.
    let mut hs = ServerHandshake::new(HandshakeConfig::new(vec![export(
        "",
        "",
        0x0102_0304_0506_0708,
        NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH,
    )]));
    hs.take_output();
    let mut input = vec![0, 0, 0, 1];
    input.extend_from_slice(b"IHAVEOPT");
    input.extend_from_slice(&[0, 0, 0, 7, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0]);
    assert_eq!(hs.feed(&input), input.len());
    #[rustfmt::skip]
    let want: Vec<u8> = vec![
        // NBD_REP_INFO, NBD_INFO_EXPORT
        0x00, 0x03, 0xe8, 0x89, 0x04, 0x55, 0x65, 0xa9, 0, 0, 0, 7, 0, 0, 0, 3, 0, 0, 0, 12,
        0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0x00, 0x05,
        // NBD_REP_INFO, NBD_INFO_BLOCK_SIZE 512 / 196608 / 32 MiB
        0x00, 0x03, 0xe8, 0x89, 0x04, 0x55, 0x65, 0xa9, 0, 0, 0, 7, 0, 0, 0, 3, 0, 0, 0, 14,
        0, 3, 0, 0, 0x02, 0x00, 0, 0x03, 0, 0, 0x02, 0, 0, 0,
        // NBD_REP_ACK
        0x00, 0x03, 0xe8, 0x89, 0x04, 0x55, 0x65, 0xa9, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 0,
    ];
    assert_eq!(hs.take_output(), want);
    assert_eq!(
        *hs.state(),
        HandshakeState::Transmission(negotiated(0, false, false))
    );
    assert_eq!(hs.wanted_bytes(), 0);
}

#[test]
fn go_with_empty_name_selects_the_default_export() {
    let input = stream(FIXED, &[opt(NBD_OPT_GO, &info_data("", &[NBD_INFO_NAME]))]);
    let (out, state, _) = run(config(), &input);
    let replies = parse_replies(after_greeting(&out)).unwrap();
    assert_eq!(replies.len(), 4);
    // The canonical name is reported for the default export.
    assert_eq!(replies[2].payload, info_string(NBD_INFO_NAME, "vol0"));
    assert_eq!(
        state,
        HandshakeState::Transmission(negotiated(0, false, false))
    );
}

#[test]
fn go_selects_a_named_export_and_omits_an_empty_description() {
    let input = stream(
        FIXED,
        &[opt(
            NBD_OPT_GO,
            &info_data("vol1", &[NBD_INFO_DESCRIPTION, NBD_INFO_NAME]),
        )],
    );
    let (out, state, _) = run(config(), &input);
    let flags = NBD_FLAG_HAS_FLAGS | NBD_FLAG_READ_ONLY | NBD_FLAG_SEND_FLUSH;
    let mut want = rep(NBD_OPT_GO, NBD_REP_INFO, &info_export(3 * 4096, flags));
    want.extend(rep(
        NBD_OPT_GO,
        NBD_REP_INFO,
        &info_block_size(512, 192 * 1024, 32 * MIB),
    ));
    want.extend(rep(
        NBD_OPT_GO,
        NBD_REP_INFO,
        &info_string(NBD_INFO_NAME, "vol1"),
    ));
    want.extend(rep(NBD_OPT_GO, NBD_REP_ACK, &[]));
    assert_eq!(after_greeting(&out), &want[..]);
    assert_eq!(
        state,
        HandshakeState::Transmission(negotiated(1, false, false))
    );
}

#[test]
fn info_replies_like_go_but_keeps_negotiating() {
    let input = stream(
        FIXED,
        &[opt(NBD_OPT_INFO, &info_data("vol0", &[NBD_INFO_NAME]))],
    );
    let (out, state, consumed) = run(config(), &input);
    assert_eq!(consumed, input.len());
    let replies = parse_replies(after_greeting(&out)).unwrap();
    let kinds: Vec<u32> = replies.iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [NBD_REP_INFO, NBD_REP_INFO, NBD_REP_INFO, NBD_REP_ACK]
    );
    assert!(replies.iter().all(|r| r.option == NBD_OPT_INFO));
    assert_eq!(state, HandshakeState::Negotiating);

    // INFO then GO on the other export.
    let input = stream(
        FIXED,
        &[
            opt(NBD_OPT_INFO, &info_data("vol0", &[])),
            opt(NBD_OPT_GO, &info_data("vol1", &[])),
        ],
    );
    let (_, state, _) = run(config(), &input);
    assert_eq!(
        state,
        HandshakeState::Transmission(negotiated(1, false, false))
    );
}

#[test]
fn go_for_an_unknown_export_is_err_unknown_and_negotiation_goes_on() {
    let input = stream(
        FIXED,
        &[
            opt(NBD_OPT_GO, &info_data("nope", &[])),
            opt(NBD_OPT_GO, &info_data("vol1", &[])),
        ],
    );
    let (out, state, _) = run(config(), &input);
    let replies = parse_replies(after_greeting(&out)).unwrap();
    assert_eq!(replies[0].option, NBD_OPT_GO);
    assert_eq!(replies[0].kind, NBD_REP_ERR_UNKNOWN);
    assert_eq!(replies[1].payload[..2], be16(NBD_INFO_EXPORT));
    assert_eq!(
        state,
        HandshakeState::Transmission(negotiated(1, false, false))
    );

    // No exports at all: even the default is unknown.
    let input = stream(FIXED, &[opt(NBD_OPT_GO, &info_data("", &[]))]);
    let (out, state, _) = run(HandshakeConfig::new(vec![]), &input);
    let replies = parse_replies(after_greeting(&out)).unwrap();
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].kind, NBD_REP_ERR_UNKNOWN);
    assert_eq!(state, HandshakeState::Negotiating);
}

#[test]
fn malformed_info_and_go_data_is_err_invalid() {
    let mut name_too_long = info_data("vol0", &[]);
    name_too_long[..4].copy_from_slice(&be32(3)); // 3 + 6 < 10: counts do not add up
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("five bytes", vec![0, 0, 0, 0, 0]),
        ("name length past the end", {
            let mut d = info_data("vol0", &[]);
            d[..4].copy_from_slice(&be32(5));
            d
        }),
        ("name length u32::MAX", {
            let mut d = info_data("vol0", &[]);
            d[..4].copy_from_slice(&be32(u32::MAX));
            d
        }),
        ("lengths do not add up", name_too_long),
        ("request count too large", {
            let mut d = info_data("vol0", &[NBD_INFO_NAME]);
            let n = d.len();
            d[n - 4..n - 2].copy_from_slice(&be16(2));
            d
        }),
        ("trailing byte", {
            let mut d = info_data("vol0", &[NBD_INFO_NAME]);
            d.push(0);
            d
        }),
        ("name over 4096 bytes", info_data(&"a".repeat(4097), &[])),
        ("name with NUL", info_data("vol\0", &[])),
        ("name not UTF-8", {
            let mut d = info_data("volX", &[]);
            d[7] = 0xff;
            d
        }),
    ];
    for option in [NBD_OPT_INFO, NBD_OPT_GO] {
        for (what, data) in &cases {
            let input = stream(FIXED, &[opt(option, data)]);
            let (out, state, consumed) = run(config(), &input);
            let replies = parse_replies(after_greeting(&out)).unwrap();
            assert_eq!(replies.len(), 1, "{what}");
            assert_eq!(replies[0].option, option, "{what}");
            assert_eq!(replies[0].kind, NBD_REP_ERR_INVALID, "{what}");
            assert_eq!(state, HandshakeState::Negotiating, "{what}");
            assert_eq!(consumed, input.len(), "{what}");
        }
    }
    // A 4096-byte name is well formed (and unknown).
    let input = stream(
        FIXED,
        &[opt(NBD_OPT_GO, &info_data(&"a".repeat(4096), &[]))],
    );
    let (out, _, _) = run(config(), &input);
    assert_eq!(
        parse_replies(after_greeting(&out)).unwrap()[0].kind,
        NBD_REP_ERR_UNKNOWN
    );
}

#[test]
fn list_replies_one_server_per_export_then_ack() {
    let input = stream(FIXED, &[opt(NBD_OPT_LIST, &[])]);
    let (out, state, _) = run(config(), &input);
    let mut want = Vec::new();
    let mut server = be32(4).to_vec();
    server.extend_from_slice(b"vol0first volume");
    want.extend(rep(NBD_OPT_LIST, NBD_REP_SERVER, &server));
    let mut server = be32(4).to_vec();
    server.extend_from_slice(b"vol1");
    want.extend(rep(NBD_OPT_LIST, NBD_REP_SERVER, &server));
    want.extend(rep(NBD_OPT_LIST, NBD_REP_ACK, &[]));
    assert_eq!(after_greeting(&out), &want[..]);
    assert_eq!(state, HandshakeState::Negotiating);

    // Data with LIST is invalid; the data is skipped and the next option read.
    let input = stream(FIXED, &[opt(NBD_OPT_LIST, b"xyz"), opt(NBD_OPT_LIST, &[])]);
    let (out, _, _) = run(config(), &input);
    let replies = parse_replies(after_greeting(&out)).unwrap();
    let kinds: Vec<u32> = replies.iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [
            NBD_REP_ERR_INVALID,
            NBD_REP_SERVER,
            NBD_REP_SERVER,
            NBD_REP_ACK
        ]
    );
}

#[test]
fn export_name_replies_size_flags_and_124_zeroes() {
    let input = stream(FIXED, &[opt(NBD_OPT_EXPORT_NAME, b"vol1")]);
    let (out, state, consumed) = run(config(), &input);
    assert_eq!(consumed, input.len());
    let mut want = be64(3 * 4096).to_vec();
    want.extend(be16(
        NBD_FLAG_HAS_FLAGS | NBD_FLAG_READ_ONLY | NBD_FLAG_SEND_FLUSH,
    ));
    want.extend([0u8; 124]);
    assert_eq!(after_greeting(&out), &want[..]);
    assert_eq!(
        state,
        HandshakeState::Transmission(negotiated(1, false, false))
    );
}

#[test]
fn export_name_with_no_zeroes_omits_the_zeroes() {
    let input = stream(FIXED_NZ, &[opt(NBD_OPT_EXPORT_NAME, b"")]);
    let (out, state, _) = run(config(), &input);
    let mut want = be64(1 << 30).to_vec();
    want.extend(be16(RW_FLAGS & !NBD_FLAG_SEND_DF));
    assert_eq!(after_greeting(&out), &want[..]);
    assert_eq!(
        state,
        HandshakeState::Transmission(negotiated(0, false, true))
    );

    // A client without FIXED_NEWSTYLE (plain newstyle) works the same.
    let input = stream(NBD_FLAG_C_NO_ZEROES, &[opt(NBD_OPT_EXPORT_NAME, b"vol0")]);
    let (out, state, _) = run(config(), &input);
    assert_eq!(after_greeting(&out), &want[..]);
    assert_eq!(
        state,
        HandshakeState::Transmission(negotiated(0, false, true))
    );
}

#[test]
fn export_name_after_structured_reply_advertises_df() {
    let input = stream(
        FIXED_NZ,
        &[
            opt(NBD_OPT_STRUCTURED_REPLY, &[]),
            opt(NBD_OPT_EXPORT_NAME, b"vol0"),
        ],
    );
    let (out, state, _) = run(config(), &input);
    let rest = after_greeting(&out);
    assert_eq!(
        &rest[..20],
        &rep(NBD_OPT_STRUCTURED_REPLY, NBD_REP_ACK, &[])[..]
    );
    let mut want = be64(1 << 30).to_vec();
    want.extend(be16(RW_FLAGS));
    assert_eq!(&rest[20..], &want[..]);
    assert_eq!(
        state,
        HandshakeState::Transmission(negotiated(0, true, true))
    );
}

#[test]
fn export_name_for_an_unknown_export_closes() {
    for name in [&b"nope"[..], b"vol\0", b"\xff\xfe", &[b'a'; 4097][..]] {
        let input = stream(FIXED, &[opt(NBD_OPT_EXPORT_NAME, name)]);
        let (out, state, _) = run(config(), &input);
        assert_eq!(after_greeting(&out), &[] as &[u8]);
        assert_eq!(
            state,
            HandshakeState::Closed(CloseReason::UnknownExportName)
        );
    }
    let input = stream(FIXED, &[opt(NBD_OPT_EXPORT_NAME, b"")]);
    let (_, state, _) = run(HandshakeConfig::new(vec![]), &input);
    assert_eq!(
        state,
        HandshakeState::Closed(CloseReason::UnknownExportName)
    );
}

#[test]
fn abort_is_acked_then_closes() {
    for data in [&b""[..], b"ignored data"] {
        let input = stream(FIXED, &[opt(NBD_OPT_ABORT, data), opt(NBD_OPT_LIST, &[])]);
        let (out, state, consumed) = run(config(), &input);
        assert_eq!(
            after_greeting(&out),
            &rep(NBD_OPT_ABORT, NBD_REP_ACK, &[])[..]
        );
        assert_eq!(state, HandshakeState::Closed(CloseReason::ClientAbort));
        // The LIST after it is not consumed.
        assert_eq!(consumed, 4 + 16 + data.len());
    }
}

#[test]
fn starttls_is_refused_by_policy() {
    let input = stream(
        FIXED,
        &[opt(NBD_OPT_STARTTLS, &[]), opt(NBD_OPT_STARTTLS, b"x")],
    );
    let (out, state, _) = run(config(), &input);
    let replies = parse_replies(after_greeting(&out)).unwrap();
    assert_eq!(replies.len(), 2);
    assert_eq!(
        (replies[0].option, replies[0].kind),
        (NBD_OPT_STARTTLS, NBD_REP_ERR_POLICY)
    );
    assert!(!replies[0].payload.is_empty(), "errors carry a message");
    assert!(std::str::from_utf8(&replies[0].payload).is_ok());
    assert_eq!(
        (replies[1].option, replies[1].kind),
        (NBD_OPT_STARTTLS, NBD_REP_ERR_INVALID)
    );
    assert_eq!(state, HandshakeState::Negotiating);
}

fn tls_config(tls: TlsPolicy) -> HandshakeConfig {
    HandshakeConfig { tls, ..config() }
}

/// Offered: STARTTLS is acknowledged and the handshake stops there (the
/// bytes after it belong to TLS, not consumed); after `tls_started` the
/// negotiation starts afresh, structured replies negotiated in plaintext
/// forgotten, and a second STARTTLS is refused.
#[test]
fn starttls_is_acked_and_negotiation_goes_on_inside_tls() {
    let input = stream(
        FIXED,
        &[
            opt(NBD_OPT_STRUCTURED_REPLY, &[]),
            opt(NBD_OPT_STARTTLS, &[]),
        ],
    );
    let mut hs = ServerHandshake::new(tls_config(TlsPolicy::On));
    hs.take_output();
    let tls_bytes = b"\x16\x03\x01 a TLS client hello";
    let mut all = input.clone();
    all.extend_from_slice(tls_bytes);
    let used = hs.feed(&all);
    assert_eq!(used, input.len(), "the TLS bytes are not consumed");
    assert_eq!(*hs.state(), HandshakeState::StartTls);
    assert_eq!(hs.wanted_bytes(), 0);
    let replies = parse_replies(&hs.take_output()).unwrap();
    assert_eq!(
        (replies[1].option, replies[1].kind),
        (NBD_OPT_STARTTLS, NBD_REP_ACK)
    );
    assert_eq!(hs.feed(b"more"), 0, "nothing is fed until TLS is up");

    hs.tls_started();
    assert!(hs.tls_active());
    let inside = [
        opt(NBD_OPT_STARTTLS, &[]),
        opt(NBD_OPT_GO, &info_data("", &[])),
    ]
    .concat();
    assert_eq!(hs.feed(&inside), inside.len());
    let replies = parse_replies(&hs.take_output()).unwrap();
    assert_eq!(
        (replies[0].option, replies[0].kind),
        (NBD_OPT_STARTTLS, NBD_REP_ERR_INVALID)
    );
    match hs.state() {
        HandshakeState::Transmission(n) => {
            assert!(!n.structured_replies, "negotiated before TLS: forgotten")
        }
        s => panic!("{s:?}"),
    }
}

/// Required: every option before TLS but STARTTLS and ABORT gets
/// `NBD_REP_ERR_TLS_REQD`, and EXPORT_NAME (no error reply) closes; nothing
/// reaches transmission in plaintext.
#[test]
fn tls_required_refuses_everything_before_starttls() {
    let before = [
        opt(NBD_OPT_LIST, &[]),
        opt(NBD_OPT_STRUCTURED_REPLY, &[]),
        opt(NBD_OPT_INFO, &info_data("", &[])),
        opt(NBD_OPT_GO, &info_data("", &[])),
    ];
    let (out, state, _) = run(tls_config(TlsPolicy::Require), &stream(FIXED, &before));
    let replies = parse_replies(after_greeting(&out)).unwrap();
    assert_eq!(replies.len(), 4);
    for r in &replies {
        assert_eq!(r.kind, NBD_REP_ERR_TLS_REQD, "option {}", r.option);
    }
    assert_eq!(state, HandshakeState::Negotiating);
    let (_, state, _) = run(
        tls_config(TlsPolicy::Require),
        &stream(FIXED, &[opt(NBD_OPT_EXPORT_NAME, b"")]),
    );
    assert_eq!(state, HandshakeState::Closed(CloseReason::TlsRequired));
    let (_, state, _) = run(
        tls_config(TlsPolicy::Require),
        &stream(FIXED, &[opt(NBD_OPT_STARTTLS, &[])]),
    );
    assert_eq!(state, HandshakeState::StartTls);
}

#[test]
fn unknown_and_unsupported_options_are_err_unsup_and_skipped() {
    for option in [
        0,
        NBD_OPT_PEEK_EXPORT,
        NBD_OPT_EXTENDED_HEADERS,
        12,
        0xdead_beef,
    ] {
        let input = stream(
            FIXED,
            &[
                opt(option, b"some data to skip"),
                opt(NBD_OPT_GO, &info_data("vol0", &[])),
            ],
        );
        let (out, state, _) = run(config(), &input);
        let replies = parse_replies(after_greeting(&out)).unwrap();
        assert_eq!(
            (replies[0].option, replies[0].kind),
            (option, NBD_REP_ERR_UNSUP)
        );
        assert_eq!(replies.last().unwrap().kind, NBD_REP_ACK);
        assert_eq!(
            state,
            HandshakeState::Transmission(negotiated(0, false, false))
        );
    }
}

#[test]
fn structured_reply_is_acked_once() {
    let input = stream(
        FIXED,
        &[
            opt(NBD_OPT_STRUCTURED_REPLY, b"data"),
            opt(NBD_OPT_STRUCTURED_REPLY, &[]),
            opt(NBD_OPT_STRUCTURED_REPLY, &[]),
            opt(NBD_OPT_GO, &info_data("vol0", &[])),
        ],
    );
    let (out, state, _) = run(config(), &input);
    let replies = parse_replies(after_greeting(&out)).unwrap();
    let kinds: Vec<u32> = replies.iter().map(|r| r.kind).take(3).collect();
    assert_eq!(
        kinds,
        [NBD_REP_ERR_INVALID, NBD_REP_ACK, NBD_REP_ERR_INVALID]
    );
    // With structured replies SEND_DF is advertised.
    assert_eq!(replies[3].payload, info_export(1 << 30, RW_FLAGS));
    assert_eq!(
        state,
        HandshakeState::Transmission(negotiated(0, true, false))
    );
}

#[test]
fn set_meta_context_before_structured_reply_is_err_invalid() {
    let input = stream(
        FIXED,
        &[
            opt(
                NBD_OPT_SET_META_CONTEXT,
                &meta_data("vol0", &[BASE_ALLOCATION]),
            ),
            opt(NBD_OPT_STRUCTURED_REPLY, &[]),
            opt(NBD_OPT_GO, &info_data("vol0", &[])),
        ],
    );
    let (out, state, _) = run(config(), &input);
    let replies = parse_replies(after_greeting(&out)).unwrap();
    assert_eq!(
        (replies[0].option, replies[0].kind),
        (NBD_OPT_SET_META_CONTEXT, NBD_REP_ERR_INVALID)
    );
    // Nothing was selected.
    assert_eq!(
        state,
        HandshakeState::Transmission(negotiated(0, true, false))
    );
}

#[test]
fn set_meta_context_selects_base_allocation_with_id_1() {
    let input = stream(
        FIXED,
        &[
            opt(NBD_OPT_STRUCTURED_REPLY, &[]),
            opt(
                NBD_OPT_SET_META_CONTEXT,
                &meta_data("vol0", &["qemu:dirty-bitmap:x", BASE_ALLOCATION, "base:"]),
            ),
            opt(NBD_OPT_GO, &info_data("vol0", &[])),
        ],
    );
    let (out, state, _) = run(config(), &input);
    let rest = after_greeting(&out);
    let mut want = rep(NBD_OPT_STRUCTURED_REPLY, NBD_REP_ACK, &[]);
    want.extend(rep(
        NBD_OPT_SET_META_CONTEXT,
        NBD_REP_META_CONTEXT,
        &meta_context(1, "base:allocation"),
    ));
    want.extend(rep(NBD_OPT_SET_META_CONTEXT, NBD_REP_ACK, &[]));
    assert_eq!(&rest[..want.len()], &want[..]);
    let HandshakeState::Transmission(n) = state else {
        panic!("not in transmission: {state:?}")
    };
    assert_eq!(n.meta_contexts, vec![(1, "base:allocation".to_string())]);
    assert!(n.structured_replies);
}

#[test]
fn set_meta_context_with_base_wildcard_selects_nothing() {
    let input = stream(
        FIXED,
        &[
            opt(NBD_OPT_STRUCTURED_REPLY, &[]),
            opt(NBD_OPT_SET_META_CONTEXT, &meta_data("", &["base:"])),
            opt(NBD_OPT_GO, &info_data("", &[])),
        ],
    );
    let (out, state, _) = run(config(), &input);
    let replies = parse_replies(after_greeting(&out)).unwrap();
    assert_eq!(
        (replies[1].option, replies[1].kind),
        (NBD_OPT_SET_META_CONTEXT, NBD_REP_ACK)
    );
    assert_eq!(
        state,
        HandshakeState::Transmission(negotiated(0, true, false))
    );
}

#[test]
fn list_meta_context_lists_base_allocation_for_base_queries() {
    let listed = rep(
        NBD_OPT_LIST_META_CONTEXT,
        NBD_REP_META_CONTEXT,
        &meta_context(0, "base:allocation"),
    );
    let ack = rep(NBD_OPT_LIST_META_CONTEXT, NBD_REP_ACK, &[]);
    let cases: [(&[&str], bool); 6] = [
        (&[], true),
        (&["base:"], true),
        (&["base:allocation"], true),
        (&["base:", "base:allocation"], true), // listed once
        (&["x-foo:bar", "base:other"], false),
        (&["no-colon"], false),
    ];
    for (queries, lists) in cases {
        // LIST works with or without structured replies.
        for sr in [false, true] {
            let mut options = Vec::new();
            if sr {
                options.push(opt(NBD_OPT_STRUCTURED_REPLY, &[]));
            }
            options.push(opt(NBD_OPT_LIST_META_CONTEXT, &meta_data("vol1", queries)));
            let (out, state, _) = run(config(), &stream(FIXED, &options));
            let mut rest = after_greeting(&out);
            if sr {
                rest = &rest[20..];
            }
            let mut want = Vec::new();
            if lists {
                want.extend(&listed);
            }
            want.extend(&ack);
            assert_eq!(rest, &want[..], "{queries:?}");
            assert_eq!(state, HandshakeState::Negotiating);
        }
    }
}

#[test]
fn meta_context_for_an_unknown_export_is_err_unknown() {
    for option in [NBD_OPT_LIST_META_CONTEXT, NBD_OPT_SET_META_CONTEXT] {
        let input = stream(
            FIXED,
            &[
                opt(NBD_OPT_STRUCTURED_REPLY, &[]),
                opt(option, &meta_data("nope", &[BASE_ALLOCATION])),
            ],
        );
        let (out, _, _) = run(config(), &input);
        let replies = parse_replies(after_greeting(&out)).unwrap();
        assert_eq!(replies.len(), 2);
        assert_eq!(
            (replies[1].option, replies[1].kind),
            (option, NBD_REP_ERR_UNKNOWN)
        );
    }
}

#[test]
fn malformed_meta_context_data_is_err_invalid() {
    let good = meta_data("vol0", &[BASE_ALLOCATION]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("seven bytes", vec![0; 7]),
        ("name length past the end", {
            let mut d = good.clone();
            d[..4].copy_from_slice(&be32(100));
            d
        }),
        ("query count past the end", {
            let mut d = good.clone();
            d[8..12].copy_from_slice(&be32(2));
            d
        }),
        ("huge query count", {
            let mut d = good.clone();
            d[8..12].copy_from_slice(&be32(u32::MAX));
            d
        }),
        ("query length past the end", {
            let mut d = good.clone();
            d[12..16].copy_from_slice(&be32(16));
            d
        }),
        ("trailing bytes", {
            let mut d = good.clone();
            d.extend_from_slice(b"xx");
            d
        }),
        (
            "query over 4096 bytes",
            meta_data("vol0", &[&"b".repeat(4097)]),
        ),
        ("name over 4096 bytes", meta_data(&"v".repeat(4097), &[])),
        ("query with NUL", meta_data("vol0", &["base:\0"])),
    ];
    for option in [NBD_OPT_LIST_META_CONTEXT, NBD_OPT_SET_META_CONTEXT] {
        for (what, data) in &cases {
            let input = stream(
                FIXED,
                &[opt(NBD_OPT_STRUCTURED_REPLY, &[]), opt(option, data)],
            );
            let (out, state, _) = run(config(), &input);
            let replies = parse_replies(after_greeting(&out)).unwrap();
            assert_eq!(replies.len(), 2, "{what}");
            assert_eq!(
                (replies[1].option, replies[1].kind),
                (option, NBD_REP_ERR_INVALID),
                "{what}"
            );
            assert_eq!(state, HandshakeState::Negotiating, "{what}");
        }
    }
}

#[test]
fn a_failed_set_meta_context_clears_the_selection() {
    let input = stream(
        FIXED,
        &[
            opt(NBD_OPT_STRUCTURED_REPLY, &[]),
            opt(
                NBD_OPT_SET_META_CONTEXT,
                &meta_data("vol0", &[BASE_ALLOCATION]),
            ),
            opt(NBD_OPT_SET_META_CONTEXT, b"bad"),
            opt(NBD_OPT_GO, &info_data("vol0", &[])),
        ],
    );
    let (_, state, _) = run(config(), &input);
    assert_eq!(
        state,
        HandshakeState::Transmission(negotiated(0, true, false))
    );
}

#[test]
fn meta_contexts_are_kept_only_for_the_export_they_were_set_on() {
    let with = |set_on: &str, go_to: &str| {
        let input = stream(
            FIXED,
            &[
                opt(NBD_OPT_STRUCTURED_REPLY, &[]),
                opt(
                    NBD_OPT_SET_META_CONTEXT,
                    &meta_data(set_on, &[BASE_ALLOCATION]),
                ),
                opt(NBD_OPT_GO, &info_data(go_to, &[])),
            ],
        );
        match run(config(), &input).1 {
            HandshakeState::Transmission(n) => n.meta_contexts.len(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(with("vol0", "vol0"), 1);
    assert_eq!(with("", "vol0"), 1, "the empty name is the default export");
    assert_eq!(with("vol1", "vol1"), 1);
    assert_eq!(with("vol0", "vol1"), 0);
    assert_eq!(with("vol1", ""), 0);
}

#[test]
fn bad_option_magic_closes() {
    let mut input = client_flags(FIXED);
    let mut bad = opt(NBD_OPT_LIST, &[]);
    bad[0] = b'i';
    input.extend(bad);
    let (out, state, consumed) = run(config(), &input);
    assert_eq!(out, greeting());
    assert_eq!(state, HandshakeState::Closed(CloseReason::BadMagic));
    assert_eq!(consumed, 20);
}

#[test]
fn unknown_client_flags_close() {
    for flags in [1 << 2, 1 << 31, FIXED_NZ | 1 << 5, u32::MAX] {
        let input = stream(flags, &[opt(NBD_OPT_LIST, &[])]);
        let (out, state, consumed) = run(config(), &input);
        assert_eq!(out, greeting());
        assert_eq!(state, HandshakeState::Closed(CloseReason::BadClientFlags));
        assert_eq!(consumed, 4);
    }
    // Zero flags (plain newstyle) are accepted.
    let (_, state, _) = run(config(), &stream(0, &[opt(NBD_OPT_LIST, &[])]));
    assert_eq!(state, HandshakeState::Negotiating);
}

#[test]
fn an_option_over_the_size_limit_closes_before_its_data() {
    let mut cfg = config();
    cfg.max_option_bytes = 100;
    // At the limit: read and answered.
    let input = stream(FIXED, &[opt(0x4242, &[7; 100])]);
    let (out, state, consumed) = run(cfg.clone(), &input);
    assert_eq!(
        after_greeting(&out),
        &rep(0x4242, NBD_REP_ERR_UNSUP, b"unknown option")[..]
    );
    assert_eq!(state, HandshakeState::Negotiating);
    assert_eq!(consumed, input.len());
    // One byte over: closed as soon as the header is read.
    let input = stream(FIXED, &[opt(NBD_OPT_GO, &[0; 101])]);
    let (out, state, consumed) = run(cfg, &input);
    assert_eq!(out, greeting());
    assert_eq!(state, HandshakeState::Closed(CloseReason::OptionTooLarge));
    assert_eq!(consumed, 4 + 16);
    // The default limit is 64 KiB; a header announcing 4 GiB closes at once.
    let mut input = client_flags(FIXED);
    input.extend_from_slice(b"IHAVEOPT");
    input.extend_from_slice(&be32(NBD_OPT_GO));
    input.extend_from_slice(&be32(u32::MAX));
    let (_, state, _) = run(config(), &input);
    assert_eq!(state, HandshakeState::Closed(CloseReason::OptionTooLarge));
}

#[test]
fn more_options_than_the_limit_close() {
    let mut cfg = config();
    cfg.max_options = 3;
    let list = opt(NBD_OPT_LIST, &[]);
    let input = stream(
        FIXED,
        &[list.clone(), list.clone(), list.clone(), list.clone()],
    );
    let (out, state, consumed) = run(cfg.clone(), &input);
    let replies = parse_replies(after_greeting(&out)).unwrap();
    assert_eq!(replies.len(), 3 * 3);
    assert_eq!(state, HandshakeState::Closed(CloseReason::TooManyOptions));
    assert_eq!(consumed, 4 + 3 * 16 + 16);
    // The third option may still be the GO.
    let input = stream(
        FIXED,
        &[list.clone(), list, opt(NBD_OPT_GO, &info_data("", &[]))],
    );
    let (_, state, _) = run(cfg, &input);
    assert_eq!(
        state,
        HandshakeState::Transmission(negotiated(0, false, false))
    );
    assert_eq!(config().max_options, 64);
    assert_eq!(config().max_option_bytes, 64 * 1024);
}

#[test]
fn bytes_after_go_are_left_for_the_transmission_phase() {
    let mut input = stream(FIXED, &[opt(NBD_OPT_GO, &info_data("vol0", &[]))]);
    let go_end = input.len();
    input.extend_from_slice(&[0x25, 0x60, 0x95, 0x13, 1, 2, 3]);
    for chunks in [&[usize::MAX][..], &[1], &[5, 3]] {
        let (_, state, consumed) = run_chunked(config(), &input, chunks);
        assert!(matches!(state, HandshakeState::Transmission(_)));
        assert_eq!(consumed, go_end, "chunks {chunks:?}");
    }
}

/// A session exercising every kind of option, fed whole, one byte at a time,
/// and in uneven chunks (with empty feeds): the output must be identical.
#[test]
fn one_byte_at_a_time_gives_the_same_output_as_all_at_once() {
    let input = stream(
        FIXED_NZ,
        &[
            opt(NBD_OPT_LIST, &[]),
            opt(NBD_OPT_STARTTLS, &[]),
            opt(0x99, b"unknown"),
            opt(
                NBD_OPT_INFO,
                &info_data("vol1", &[NBD_INFO_NAME, NBD_INFO_DESCRIPTION]),
            ),
            opt(NBD_OPT_LIST_META_CONTEXT, &meta_data("vol0", &["base:"])),
            opt(
                NBD_OPT_SET_META_CONTEXT,
                &meta_data("vol0", &[BASE_ALLOCATION]),
            ),
            opt(NBD_OPT_STRUCTURED_REPLY, &[]),
            opt(
                NBD_OPT_SET_META_CONTEXT,
                &meta_data("vol0", &[BASE_ALLOCATION]),
            ),
            opt(NBD_OPT_GO, &info_data("nope", &[])),
            opt(NBD_OPT_GO, &[1, 2, 3]),
            opt(
                NBD_OPT_GO,
                &info_data("vol0", &[NBD_INFO_BLOCK_SIZE, NBD_INFO_NAME]),
            ),
        ],
    );
    let whole = run(config(), &input);
    assert!(matches!(whole.1, HandshakeState::Transmission(ref n) if n.meta_contexts.len() == 1));
    assert_eq!(run_chunked(config(), &input, &[1]), whole);
    assert_eq!(run_chunked(config(), &input, &[3, 0, 17, 1, 64]), whole);
}

#[test]
fn negotiated_session_reflects_the_export_and_options() {
    let cfg = config();
    let n = Negotiated {
        export_index: 0,
        structured_replies: false,
        no_zeroes: false,
        meta_contexts: vec![],
    };
    let s = n.session(&cfg.exports[0]);
    assert_eq!(s.size_bytes, 1 << 30);
    assert!(!s.read_only);
    assert_eq!(s.max_block_bytes, 32 * MIB);
    assert_eq!(s.transmission_flags, RW_FLAGS & !NBD_FLAG_SEND_DF);
    let n = Negotiated {
        export_index: 1,
        structured_replies: true,
        no_zeroes: false,
        meta_contexts: vec![(1, BASE_ALLOCATION.to_string())],
    };
    let s = n.session(&cfg.exports[1]);
    assert!(s.read_only);
    assert!(s.structured_replies);
    assert_eq!(s.meta_contexts.len(), 1);

    // FAST_ZERO without WRITE_ZEROES, and experimental bits, are dropped.
    let e = export(
        "x",
        "",
        4096,
        NBD_FLAG_SEND_FAST_ZERO | NBD_FLAG_SEND_RESIZE | NBD_FLAG_BLOCK_STATUS_PAYLOAD | 1 << 15,
    );
    assert_eq!(
        platter_nbd::effective_transmission_flags(&e, true),
        NBD_FLAG_HAS_FLAGS
    );
}

/// The story: beyond `--max-connections` the server closed the socket at
/// once, and libnbd reported "server disconnected unexpectedly", as if it
/// had crashed. A refusing handshake answers every option with
/// `NBD_REP_ERR_POLICY` and the reason, acknowledges an abort, and closes
/// on `NBD_OPT_EXPORT_NAME` (which has no error reply).
#[test]
fn a_refusing_handshake_tells_every_option_why() {
    let why = "too many connections";
    let input = stream(
        FIXED_NZ,
        &[
            opt(NBD_OPT_STRUCTURED_REPLY, &[]),
            opt(NBD_OPT_GO, &info_data("vol0", &[])),
            opt(NBD_OPT_LIST, &[]),
            opt(NBD_OPT_ABORT, &[]),
        ],
    );
    let mut hs = ServerHandshake::refusing(config(), why.into());
    let used = hs.feed(&input);
    assert_eq!(used, input.len());
    assert_eq!(
        *hs.state(),
        HandshakeState::Closed(CloseReason::ClientAbort)
    );
    let out = hs.take_output();
    let mut want = Vec::new();
    for o in [NBD_OPT_STRUCTURED_REPLY, NBD_OPT_GO, NBD_OPT_LIST] {
        want.extend(rep(o, NBD_REP_ERR_POLICY, why.as_bytes()));
    }
    want.extend(rep(NBD_OPT_ABORT, NBD_REP_ACK, &[]));
    assert_eq!(after_greeting(&out), &want[..]);

    let input = stream(FIXED, &[opt(NBD_OPT_EXPORT_NAME, b"vol0")]);
    let mut hs = ServerHandshake::refusing(config(), why.into());
    hs.feed(&input);
    assert_eq!(*hs.state(), HandshakeState::Closed(CloseReason::Refused));
    assert_eq!(after_greeting(&hs.take_output()), &[] as &[u8]);
}
