//! The client handshake: against this crate's own server machine (a pair
//! harness pumping bytes between the two, split at random), and against
//! scripted servers for what ours never does (oldstyle, no GO, TLS, lies).

mod support;

use platter_nbd::consts::*;
use platter_nbd::{
    BlockSize, ClientConfig, ClientError, ClientHandshake, ClientState, Export, HandshakeState,
    ServerHandshake, MAX_OPTION_REPLY_BYTES,
};
use proptest::prelude::*;
use support::*;

fn client(name: &str, tls: bool) -> ClientHandshake {
    ClientHandshake::new(ClientConfig {
        export_name: name.into(),
        tls,
    })
}

/// Pumps bytes both ways, each write split into pieces of at most `chunk`
/// bytes, until neither side has anything to say. Bounded.
fn pump(c: &mut ClientHandshake, s: &mut ServerHandshake, chunk: usize) {
    for _ in 0..1000 {
        let to_client = s.take_output();
        let to_server = c.take_output();
        if to_client.is_empty() && to_server.is_empty() {
            return;
        }
        for piece in to_server.chunks(chunk) {
            assert_eq!(
                s.feed(piece),
                piece.len(),
                "the server takes what it is sent"
            );
        }
        for piece in to_client.chunks(chunk) {
            let used = c.feed(piece);
            assert!(used <= piece.len());
        }
    }
    panic!("the handshake did not settle");
}

#[test]
fn our_client_and_server_agree_on_the_export_however_the_bytes_are_split() {
    for chunk in [1, 3, 7, 64, 4096] {
        for (name, index) in [("vol0", 0), ("", 0), ("vol1", 1)] {
            let mut c = client(name, false);
            let mut s = ServerHandshake::new(config());
            pump(&mut c, &mut s, chunk);
            let e = &config().exports[index];
            let ClientState::Ready(got) = c.state().clone() else {
                panic!("{name:?} chunk {chunk}: {:?}", c.state())
            };
            let HandshakeState::Transmission(n) = s.state().clone() else {
                panic!("{name:?}: server {:?}", s.state())
            };
            assert_eq!(n.export_index, index);
            assert!(n.structured_replies && got.structured_replies);
            assert_eq!(
                got,
                Export {
                    size_bytes: e.size_bytes,
                    transmission_flags: platter_nbd::effective_transmission_flags(e, true),
                    structured_replies: true,
                    block_size: Some(BlockSize {
                        minimum_bytes: e.block_min_bytes,
                        preferred_bytes: e.block_preferred_bytes,
                        maximum_bytes: e.block_max_bytes,
                    }),
                },
                "{name:?} chunk {chunk}"
            );
            assert!(n.no_zeroes, "the client takes NO_ZEROES when offered");
        }
    }
}

#[test]
fn an_unknown_export_is_named_in_the_error() {
    let mut c = client("nope", false);
    let mut s = ServerHandshake::new(config());
    pump(&mut c, &mut s, 64);
    match c.state() {
        ClientState::Failed(e @ ClientError::NoSuchExport { name, .. }) => {
            assert_eq!(name, "nope");
            assert!(e.to_string().contains("\"nope\""), "{e}");
            // Asked after the refusal, the server's list names what it has.
            assert!(
                e.to_string().ends_with("; it offers \"vol0\", \"vol1\""),
                "{e}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// An unknown export on a server that says nothing with its refusal (nbdkit
/// with `exportname-strict=true`): the error has no empty parentheses, and
/// says what the server lists, or that it lists none, or (a list refused)
/// nothing more. How it showed: `the server has no export named "x" ()`.
#[test]
fn an_unknown_export_says_what_the_server_lists() {
    let refused = |message: &[u8], list: &[Vec<u8>]| {
        let mut c = client("x", false);
        let server = scripted(
            NEWSTYLE,
            &[
                ack(NBD_OPT_STRUCTURED_REPLY),
                rep(NBD_OPT_GO, NBD_REP_ERR_UNKNOWN, message),
            ],
        );
        assert_eq!(c.feed(&server), server.len());
        assert!(
            c.take_output().ends_with(&opt(NBD_OPT_LIST, &[])),
            "the list is asked for after the refusal"
        );
        let list = list.concat();
        assert_eq!(c.feed(&list), list.len(), "every reply is read");
        match c.state().clone() {
            ClientState::Failed(e @ ClientError::NoSuchExport { .. }) => e.to_string(),
            other => panic!("{other:?}"),
        }
    };
    let server = |name: &str| {
        let mut d = be32(name.len() as u32).to_vec();
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(b"a description");
        rep(NBD_OPT_LIST, NBD_REP_SERVER, &d)
    };
    assert_eq!(
        refused(b"", &[ack(NBD_OPT_LIST)]),
        "the server has no export named \"x\"; it lists no exports"
    );
    assert_eq!(
        refused(b"", &[server("a"), server(""), ack(NBD_OPT_LIST)]),
        "the server has no export named \"x\"; it offers \"a\", \"\" (the default export)"
    );
    assert_eq!(
        refused(
            b"export 'x' not present",
            &[rep(NBD_OPT_LIST, NBD_REP_ERR_POLICY, b"")]
        ),
        "the server has no export named \"x\" (export 'x' not present)"
    );
    let many: Vec<Vec<u8>> = (0..100)
        .map(|i| server(&format!("e{i}")))
        .chain([ack(NBD_OPT_LIST)])
        .collect();
    let e = refused(b"", &many);
    assert!(
        e.ends_with("\"e6\", \"e7\" and 92 more"),
        "more exports than the option replies a handshake takes: {e}"
    );
}

/// Our server refuses STARTTLS (`NBD_REP_ERR_POLICY`): a client that must
/// have TLS stops there and never sends the export's name in plaintext.
#[test]
fn a_server_without_tls_is_refused_before_the_export_is_named() {
    let mut c = client("vol0", true);
    let mut s = ServerHandshake::new(config());
    let mut sent = Vec::new();
    for _ in 0..10 {
        let to_server = c.take_output();
        sent.extend_from_slice(&to_server);
        s.feed(&to_server);
        c.feed(&s.take_output());
    }
    assert!(
        matches!(c.state(), ClientState::Failed(ClientError::TlsRefused(m)) if m.contains("NBD_REP_ERR_POLICY")),
        "{:?}",
        c.state()
    );
    assert!(!sent.windows(4).any(|w| w == b"vol0"), "the name went out");
}

/// A scripted server: the greeting (with `flags`), then `replies`.
fn scripted(flags: u16, replies: &[Vec<u8>]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&be64(NBD_MAGIC));
    v.extend_from_slice(&be64(NBD_IHAVEOPT));
    v.extend_from_slice(&be16(flags));
    for r in replies {
        v.extend_from_slice(r);
    }
    v
}

const NEWSTYLE: u16 = NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES;
const FLAGS: u16 = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH;

fn ack(option: u32) -> Vec<u8> {
    rep(option, NBD_REP_ACK, &[])
}

/// Feeds the whole script; returns the state and the bytes used.
fn run_client(name: &str, tls: bool, server: &[u8]) -> (ClientState, usize, Vec<u8>) {
    let mut c = client(name, tls);
    let used = c.feed(server);
    let out = c.take_output();
    (c.state().clone(), used, out)
}

#[test]
fn greetings_that_are_not_fixed_newstyle_are_refused_clearly() {
    let mut oldstyle = be64(NBD_MAGIC).to_vec();
    oldstyle.extend_from_slice(&be64(NBD_CLISERV_MAGIC));
    oldstyle.extend_from_slice(&[0; 2]);
    let http = b"HTTP/1.1 400 Bad Request\r\n".to_vec();
    for (bytes, want) in [
        (oldstyle, ClientError::Oldstyle),
        (scripted(0, &[]), ClientError::NotFixedNewstyle),
        (
            http.clone(),
            ClientError::NotNbd(u64::from_be_bytes(http[..8].try_into().unwrap())),
        ),
    ] {
        let (state, used, out) = run_client("x", false, &bytes);
        assert_eq!(state, ClientState::Failed(want));
        assert_eq!(used, 18, "one greeting is read");
        assert!(out.is_empty(), "nothing is said to a server refused");
    }
}

/// nbd-server before 3.10 and old qemu-nbd have no GO: the client falls
/// back to EXPORT_NAME, whose reply is the export itself (with its 124
/// zero bytes unless NO_ZEROES was agreed).
#[test]
fn a_server_without_go_gets_export_name() {
    for flags in [NBD_FLAG_FIXED_NEWSTYLE, NEWSTYLE] {
        let mut reply = be64(5 << 20).to_vec();
        reply.extend_from_slice(&be16(FLAGS));
        if flags & NBD_FLAG_NO_ZEROES == 0 {
            reply.extend_from_slice(&[0; 124]);
        }
        let server = scripted(
            flags,
            &[
                rep(NBD_OPT_STRUCTURED_REPLY, NBD_REP_ERR_UNSUP, b""),
                rep(NBD_OPT_GO, NBD_REP_ERR_UNSUP, b"what is GO"),
                reply,
            ],
        );
        let (state, used, out) = run_client("disk", false, &server);
        assert_eq!(
            state,
            ClientState::Ready(Export {
                size_bytes: 5 << 20,
                transmission_flags: FLAGS,
                structured_replies: false,
                block_size: None,
            })
        );
        assert_eq!(used, server.len());
        let mut want = be32(if flags & NBD_FLAG_NO_ZEROES != 0 {
            NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES
        } else {
            NBD_FLAG_C_FIXED_NEWSTYLE
        })
        .to_vec();
        want.extend_from_slice(&opt(NBD_OPT_STRUCTURED_REPLY, &[]));
        want.extend_from_slice(&opt(NBD_OPT_GO, &info_data("disk", &[NBD_INFO_BLOCK_SIZE])));
        want.extend_from_slice(&opt(NBD_OPT_EXPORT_NAME, b"disk"));
        assert_eq!(out, want);
    }
}

/// STARTTLS's ACK hands the socket to the caller: `feed` stops there, so
/// the TLS handshake's bytes are not eaten, and negotiation goes on over
/// TLS from scratch.
#[test]
fn starttls_stops_at_the_ack_and_negotiates_afresh_after() {
    let mut server = scripted(NEWSTYLE, &[ack(NBD_OPT_STARTTLS)]);
    let ack_end = server.len();
    server.extend_from_slice(b"\x16\x03\x01 a TLS ServerHello");
    let mut c = client("vol", true);
    assert_eq!(c.feed(&server), ack_end);
    assert_eq!(c.state(), &ClientState::StartTls);
    let mut want = be32(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES).to_vec();
    want.extend_from_slice(&opt(NBD_OPT_STARTTLS, &[]));
    assert_eq!(c.take_output(), want);
    c.tls_started();
    assert_eq!(c.take_output(), opt(NBD_OPT_STRUCTURED_REPLY, &[]));
    let mut after = ack(NBD_OPT_STRUCTURED_REPLY);
    after.extend_from_slice(&rep(NBD_OPT_GO, NBD_REP_INFO, &info_export(1 << 20, FLAGS)));
    after.extend_from_slice(&ack(NBD_OPT_GO));
    assert_eq!(c.feed(&after), after.len());
    assert!(
        matches!(c.state(), ClientState::Ready(e) if e.structured_replies && e.size_bytes == 1 << 20)
    );
}

#[test]
fn a_server_that_requires_tls_says_so() {
    for replies in [
        vec![rep(NBD_OPT_STRUCTURED_REPLY, NBD_REP_ERR_TLS_REQD, b"")],
        vec![
            ack(NBD_OPT_STRUCTURED_REPLY),
            rep(NBD_OPT_GO, NBD_REP_ERR_TLS_REQD, b"tls first"),
        ],
    ] {
        let (state, _, _) = run_client("vol", false, &scripted(NEWSTYLE, &replies));
        assert_eq!(state, ClientState::Failed(ClientError::TlsRequired));
        assert!(ClientError::TlsRequired.to_string().contains("nbds://"));
    }
}

/// Replies a server must not send end the handshake with what was wrong.
#[test]
fn lies_in_replies_are_protocol_errors() {
    let go = |r: Vec<u8>| vec![ack(NBD_OPT_STRUCTURED_REPLY), r, ack(NBD_OPT_GO)];
    let mut long_header = rep(NBD_OPT_GO, NBD_REP_INFO, &[]);
    long_header[16..20].copy_from_slice(&be32(MAX_OPTION_REPLY_BYTES + 1));
    let mut bad_magic = ack(NBD_OPT_STRUCTURED_REPLY);
    bad_magic[0] ^= 1;
    let cases: Vec<(Vec<Vec<u8>>, &str)> = vec![
        (vec![bad_magic], "magic"),
        (vec![ack(NBD_OPT_LIST)], "names option"),
        (
            vec![ack(NBD_OPT_STRUCTURED_REPLY), long_header],
            "bytes (at most",
        ),
        (
            go(rep(NBD_OPT_GO, NBD_REP_INFO, &info_export(1, FLAGS)[..10])),
            "NBD_INFO_EXPORT of 10 bytes",
        ),
        (
            vec![ack(NBD_OPT_STRUCTURED_REPLY), ack(NBD_OPT_GO)],
            "without NBD_INFO_EXPORT",
        ),
        (
            go(rep(
                NBD_OPT_GO,
                NBD_REP_INFO,
                &info_block_size(3, 512, 1 << 20),
            )),
            "minimum block size of 3",
        ),
        (
            go(rep(
                NBD_OPT_GO,
                NBD_REP_INFO,
                &info_block_size(1 << 17, 1 << 17, 1 << 20),
            )),
            "minimum block size of 131072",
        ),
        (
            go(rep(
                NBD_OPT_GO,
                NBD_REP_INFO,
                &info_block_size(4096, 4096, 1024),
            )),
            "maximum payload of 1024",
        ),
        (
            go(rep(NBD_OPT_GO, NBD_REP_INFO, &info_export(4096, 0))),
            "without NBD_FLAG_HAS_FLAGS",
        ),
        (
            vec![rep(NBD_OPT_STRUCTURED_REPLY, NBD_REP_ACK, b"extra")],
            "ACK to NBD_OPT_STRUCTURED_REPLY with 5 bytes",
        ),
        (
            vec![rep(NBD_OPT_STRUCTURED_REPLY, NBD_REP_SERVER, b"")],
            "reply type 2",
        ),
    ];
    for (replies, says) in cases {
        let (state, _, _) = run_client("vol", false, &scripted(NEWSTYLE, &replies));
        match state {
            ClientState::Failed(ClientError::Protocol(m)) => {
                assert!(m.contains(says), "{m:?} does not say {says:?}")
            }
            other => panic!("{says}: {other:?}"),
        }
    }
}

#[test]
fn a_refused_export_carries_the_servers_words() {
    let replies = [
        ack(NBD_OPT_STRUCTURED_REPLY),
        rep(NBD_OPT_GO, NBD_REP_ERR_SHUTDOWN, b"going down"),
    ];
    let (state, _, _) = run_client("vol", false, &scripted(NEWSTYLE, &replies));
    let ClientState::Failed(e) = state else {
        panic!("{state:?}")
    };
    assert_eq!(
        e.to_string(),
        "the server refused export \"vol\": NBD_REP_ERR_SHUTDOWN (going down)"
    );
}

/// Infos nobody asked for (name, description, types from later revisions)
/// are passed over.
#[test]
fn unknown_infos_are_ignored() {
    let replies = [
        ack(NBD_OPT_STRUCTURED_REPLY),
        rep(
            NBD_OPT_GO,
            NBD_REP_INFO,
            &info_string(NBD_INFO_DESCRIPTION, "hello"),
        ),
        rep(NBD_OPT_GO, NBD_REP_INFO, &[0, 99, 1, 2, 3]),
        rep(NBD_OPT_GO, NBD_REP_INFO, &info_export(8192, FLAGS)),
        ack(NBD_OPT_GO),
    ];
    let (state, _, _) = run_client("vol", false, &scripted(NEWSTYLE, &replies));
    assert!(matches!(state, ClientState::Ready(e) if e.size_bytes == 8192));
}

proptest! {
    /// Whatever a server sends, the client never panics, never takes more
    /// than it is given, and ends ready, failed, at STARTTLS or waiting.
    #[test]
    fn any_server_bytes_are_handled(
        tls in any::<bool>(),
        greeting_ok in any::<bool>(),
        rest in proptest::collection::vec(any::<u8>(), 0..300),
        chunk in 1usize..64,
    ) {
        let mut bytes = if greeting_ok { scripted(NEWSTYLE, &[]) } else { Vec::new() };
        bytes.extend_from_slice(&rest);
        let mut c = client("vol", tls);
        for piece in bytes.chunks(chunk) {
            let used = c.feed(piece);
            prop_assert!(used <= piece.len());
            if used < piece.len() {
                prop_assert!(c.state() != &ClientState::Negotiating);
            }
            c.take_output();
        }
    }
}
