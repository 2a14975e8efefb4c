//! Property tests of the codec:
//!
//! 1. Any byte stream, in any chunking, never panics the handshake, keeps its
//!    output bounded, and gives the same result as feeding it whole.
//! 2. Any 28-byte header never panics `parse_request_header` + `judge`, and
//!    every verdict keeps the stream in sync (a rejected write discards
//!    exactly its payload; only oversized writes disconnect).
//! 3. Valid option sequences ending in `NBD_OPT_GO` always reach transmission
//!    on the right export, with what a model of the options predicts.

mod support;

use platter_nbd::consts::*;
use platter_nbd::{
    effective_transmission_flags, judge, parse_request_header, Command, ExportInfo,
    HandshakeConfig, HandshakeState, Negotiated, RequestHeader, Session, Verdict, BASE_ALLOCATION,
    REQUEST_HEADER_BYTES, WRITE_DISCARD_LIMIT_BYTES,
};
use proptest::prelude::*;
use proptest::sample::select;
use support::*;

/// Options that keep negotiating; `NBD_OPT_ABORT`, `NBD_OPT_EXPORT_NAME` and
/// `NBD_OPT_GO` end it and are drawn less often.
const CONTINUING_OPTIONS: [u32; 9] = [
    NBD_OPT_LIST,
    NBD_OPT_PEEK_EXPORT,
    NBD_OPT_STARTTLS,
    NBD_OPT_INFO,
    NBD_OPT_STRUCTURED_REPLY,
    NBD_OPT_LIST_META_CONTEXT,
    NBD_OPT_SET_META_CONTEXT,
    NBD_OPT_EXTENDED_HEADERS,
    0,
];
const ENDING_OPTIONS: [u32; 3] = [NBD_OPT_EXPORT_NAME, NBD_OPT_ABORT, NBD_OPT_GO];

// ---------------------------------------------------------------------------
// 1. Arbitrary streams
// ---------------------------------------------------------------------------

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        select(vec!["vol0", "vol1", "nope"]).prop_map(String::from)
    ]
}

fn query() -> impl Strategy<Value = String> {
    prop_oneof![
        select(vec!["base:", "base:allocation", "x-a:b", "nocolon"]).prop_map(String::from),
        "[a-z:]{0,12}",
    ]
}

/// Option data: usually well formed for some option, sometimes random.
fn option_data() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..48),
        (name(), prop::collection::vec(0u16..6, 0..5)).prop_map(|(n, i)| info_data(&n, &i)),
        (name(), prop::collection::vec(query(), 0..4)).prop_map(|(n, q)| {
            let q: Vec<&str> = q.iter().map(String::as_str).collect();
            meta_data(&n, &q)
        }),
        name().prop_map(String::into_bytes),
    ]
}

fn option_bytes() -> impl Strategy<Value = Vec<u8>> {
    let option = prop_oneof![
        12 => select(CONTINUING_OPTIONS.to_vec()),
        1 => select(ENDING_OPTIONS.to_vec()),
        2 => any::<u32>(),
    ];
    let info = (name(), prop::collection::vec(0u16..6, 0..5));
    let meta = (name(), prop::collection::vec(query(), 0..4));
    prop_oneof![
        6 => (option, option_data()).prop_map(|(o, d)| opt(o, &d)),
        // Well-formed options, to get past validation into the replies.
        2 => (select(vec![NBD_OPT_INFO, NBD_OPT_INFO, NBD_OPT_GO]), info)
            .prop_map(|(o, (n, i))| opt(o, &info_data(&n, &i))),
        2 => (select(vec![NBD_OPT_LIST_META_CONTEXT, NBD_OPT_SET_META_CONTEXT]), meta)
            .prop_map(|(o, (n, q))| {
                let q: Vec<&str> = q.iter().map(String::as_str).collect();
                opt(o, &meta_data(&n, &q))
            }),
        1 => Just(opt(NBD_OPT_STRUCTURED_REPLY, &[])),
    ]
}

/// A client stream: random bytes, or flags and options with occasional
/// damage (a flipped byte, a truncation).
fn client_stream() -> impl Strategy<Value = Vec<u8>> {
    let framed = (
        prop_oneof![9 => 0u32..4, 1 => any::<u32>()],
        prop::collection::vec(option_bytes(), 0..24),
        prop::option::of((any::<prop::sample::Index>(), any::<u8>())),
        prop::option::of(any::<prop::sample::Index>()),
    )
        .prop_map(|(flags, options, flip, cut)| {
            let mut v = client_flags(flags);
            for o in options {
                v.extend(o);
            }
            if let Some((at, byte)) = flip {
                let i = at.index(v.len());
                v[i] ^= byte;
            }
            if let Some(at) = cut {
                v.truncate(at.index(v.len() + 1));
            }
            v
        });
    prop_oneof![1 => prop::collection::vec(any::<u8>(), 0..2048), 4 => framed]
}

fn handshake_config() -> impl Strategy<Value = HandshakeConfig> {
    (
        1u32..80,
        prop_oneof![1 => select(vec![0u32, 6, 40, 100]), 3 => Just(64 * 1024)],
        0usize..3,
    )
        .prop_map(|(max_options, max_option_bytes, exports)| {
            let mut cfg = config();
            cfg.exports.truncate(exports);
            cfg.max_options = max_options;
            cfg.max_option_bytes = max_option_bytes;
            cfg
        })
}

fn chunking() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..40, 1..8)
        .prop_filter("some chunk is nonempty", |c| c.iter().any(|&n| n > 0))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn any_stream_in_any_chunking_gives_one_bounded_result(
        cfg in handshake_config(),
        input in client_stream(),
        chunks in chunking(),
    ) {
        let whole = run(cfg.clone(), &input);
        let (out, state, consumed) = &whole;
        prop_assert!(input.len() < 64 * 1024);
        prop_assert!(out.len() < 1 << 20, "{} bytes of output", out.len());
        prop_assert_eq!(&out[..18], &greeting()[..]);
        prop_assert!(*consumed <= input.len());
        if *state == HandshakeState::Negotiating {
            prop_assert_eq!(*consumed, input.len());
        }
        if let HandshakeState::Transmission(n) = state {
            prop_assert!(n.export_index < cfg.exports.len());
            prop_assert!(n.meta_contexts.is_empty() || n.structured_replies);
        }
        // Every option reply is well framed unless EXPORT_NAME's reply ends it.
        let ended_by_export_name = matches!(state, HandshakeState::Transmission(_))
            && parse_replies(&out[18..]).is_err();
        if !ended_by_export_name {
            prop_assert!(parse_replies(&out[18..]).is_ok());
        }
        prop_assert_eq!(run_chunked(cfg.clone(), &input, &chunks), whole.clone());
        prop_assert_eq!(run_chunked(cfg, &input, &[1]), whole);
    }
}

// ---------------------------------------------------------------------------
// 2. Arbitrary request headers
// ---------------------------------------------------------------------------

fn header_bytes() -> impl Strategy<Value = [u8; REQUEST_HEADER_BYTES]> {
    let structured = (
        prop_oneof![4 => 0u16..10, 1 => any::<u16>()],
        prop_oneof![4 => 0u16..32, 1 => any::<u16>()],
        any::<u64>(),
        prop_oneof![2 => 0u64..(1 << 21), 1 => any::<u64>()],
        prop_oneof![
            2 => 0u32..(1 << 17),
            1 => select(vec![0, 1, 65536, 65537, 1 << 25, (1 << 25) + 1, u32::MAX]),
            1 => any::<u32>(),
        ],
    )
        .prop_map(|(kind, flags, cookie, offset, length)| {
            RequestHeader {
                flags,
                kind,
                cookie,
                offset_bytes: offset,
                length_bytes: length,
            }
            .encode()
        });
    prop_oneof![1 => any::<[u8; REQUEST_HEADER_BYTES]>(), 4 => structured]
}

fn any_session() -> impl Strategy<Value = Session> {
    (
        prop_oneof![2 => 0u64..(1 << 21), 1 => any::<u64>()],
        any::<bool>(),
        any::<bool>(),
        prop_oneof![2 => select(vec![0, 512, 65536, 1 << 25, 1 << 26]), 1 => any::<u32>()],
        any::<u16>(),
        any::<bool>(),
    )
        .prop_map(|(size, read_only, sr, max_block, flags, meta)| Session {
            size_bytes: size,
            read_only,
            structured_replies: sr,
            max_block_bytes: max_block,
            transmission_flags: flags,
            meta_contexts: if meta {
                vec![(1, BASE_ALLOCATION.to_string())]
            } else {
                vec![]
            },
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8192))]

    #[test]
    fn any_header_gets_a_verdict_that_keeps_the_stream_in_sync(
        bytes in header_bytes(),
        s in any_session(),
    ) {
        let Ok(h) = parse_request_header(&bytes) else {
            prop_assert_ne!(&bytes[..4], &NBD_REQUEST_MAGIC.to_be_bytes()[..]);
            return Ok(());
        };
        prop_assert_eq!(h.encode(), bytes);
        let verdict = judge(&h, &s);
        prop_assert_eq!(&judge(&h, &s), &verdict, "deterministic");
        let len = h.length_bytes;
        let is_write = h.kind == NBD_CMD_WRITE;
        let advertised = |f: u16| s.transmission_flags & f != 0;
        let read_only = s.read_only || advertised(NBD_FLAG_READ_ONLY);
        let in_range = h.offset_bytes.checked_add(u64::from(len)).is_some_and(|e| e <= s.size_bytes);
        let fua = h.flags & NBD_CMD_FLAG_FUA != 0;
        match &verdict {
            Verdict::Run(cmd) => {
                // DISC is obeyed whatever its flags; everything else checks FUA.
                prop_assert!(!fua || advertised(NBD_FLAG_SEND_FUA) || *cmd == Command::Disconnect);
                match *cmd {
                    Command::Disconnect => prop_assert_eq!(h.kind, NBD_CMD_DISC),
                    Command::Flush => {
                        prop_assert!(advertised(NBD_FLAG_SEND_FLUSH));
                        prop_assert_eq!((h.offset_bytes, len), (0, 0));
                    }
                    other => {
                        // Every ranged command is nonempty and inside the export.
                        prop_assert!(len > 0 && in_range, "{:?} {:?}", other, h);
                        match other {
                            Command::Read => prop_assert!(len <= s.max_block_bytes),
                            Command::Write { fua: f } => {
                                prop_assert!(len <= s.max_block_bytes && !read_only);
                                prop_assert_eq!(f, fua);
                            }
                            Command::Trim { .. } => {
                                prop_assert!(!read_only && advertised(NBD_FLAG_SEND_TRIM));
                            }
                            Command::WriteZeroes { fast_zero, .. } => {
                                prop_assert!(!read_only && advertised(NBD_FLAG_SEND_WRITE_ZEROES));
                                prop_assert!(!fast_zero || advertised(NBD_FLAG_SEND_FAST_ZERO));
                            }
                            Command::BlockStatus { .. } => {
                                prop_assert!(s.structured_replies && !s.meta_contexts.is_empty());
                            }
                            Command::Cache => prop_assert_eq!(h.kind, NBD_CMD_CACHE),
                            Command::Flush | Command::Disconnect => unreachable!(),
                        }
                    }
                }
            }
            Verdict::Reject { errno, discard_bytes, message } => {
                prop_assert!([NBD_EINVAL, NBD_EPERM, NBD_ENOSPC].contains(errno));
                prop_assert!(!message.is_empty());
                if is_write {
                    prop_assert_eq!(*discard_bytes, len);
                    prop_assert!(len <= s.max_block_bytes.max(WRITE_DISCARD_LIMIT_BYTES));
                } else {
                    prop_assert_eq!(*discard_bytes, 0);
                }
            }
            Verdict::Disconnect { .. } => {
                prop_assert!(is_write);
                prop_assert!(len > s.max_block_bytes.max(WRITE_DISCARD_LIMIT_BYTES));
            }
        }
    }
}

// ---------------------------------------------------------------------------
// 3. Valid sessions ending in NBD_OPT_GO
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Pre {
    List,
    Info(Option<usize>),
    InfoUnknown,
    StructuredReply,
    /// Export (None: the default, by empty name), select base:allocation?
    SetMeta(Option<usize>, bool),
    ListMeta(Option<usize>),
    StartTls,
    Unknown(u32, Vec<u8>),
}

fn exports() -> impl Strategy<Value = Vec<ExportInfo>> {
    prop::collection::vec(
        (
            "[a-z]{1,6}",
            "[ -~]{0,16}",
            any::<u64>(),
            any::<u16>(),
            9u32..13,
            0u32..4,
            0u32..30,
        ),
        1..5,
    )
    .prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(
                |(i, (name, description, size, flags, min_shift, pref_extra, max_extra))| {
                    let min = 1 << min_shift;
                    let preferred = min << pref_extra;
                    ExportInfo {
                        name: format!("{name}{i}"), // distinct
                        description,
                        size_bytes: size,
                        transmission_flags: flags,
                        block_min_bytes: min,
                        block_preferred_bytes: preferred,
                        block_max_bytes: preferred.saturating_add(max_extra << 20),
                    }
                },
            )
            .collect()
    })
}

fn pre_option(exports: usize) -> impl Strategy<Value = Pre> {
    let target = prop::option::of(0..exports);
    prop_oneof![
        Just(Pre::List),
        target.clone().prop_map(Pre::Info),
        Just(Pre::InfoUnknown),
        Just(Pre::StructuredReply),
        (target.clone(), any::<bool>()).prop_map(|(t, b)| Pre::SetMeta(t, b)),
        target.clone().prop_map(Pre::ListMeta),
        Just(Pre::StartTls),
        (12u32..1000, prop::collection::vec(any::<u8>(), 0..16))
            .prop_map(|(o, d)| Pre::Unknown(o, d)),
    ]
}

fn go_session() -> impl Strategy<Value = (Vec<ExportInfo>, u32, Vec<Pre>, Option<usize>, Vec<u16>)>
{
    exports().prop_flat_map(|exports| {
        let n = exports.len();
        (
            Just(exports),
            0u32..4,
            prop::collection::vec(pre_option(n), 0..30),
            prop::option::of(0..n),
            prop::collection::vec(0u16..8, 0..6),
        )
    })
}

fn export_name(exports: &[ExportInfo], target: Option<usize>) -> &str {
    target.map_or("", |i| exports[i].name.as_str())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn valid_go_sessions_reach_transmission_on_the_chosen_export(
        (exports, flags, pre, target, infos) in go_session(),
    ) {
        let cfg = HandshakeConfig::new(exports.clone());
        let mut input = client_flags(flags);
        // Model of what the server should end with.
        let mut structured = false;
        let mut meta: Option<(usize, bool)> = None;
        let mut final_replies = 0; // each option ends with one ACK or error
        for p in &pre {
            let o = match p {
                Pre::List => opt(NBD_OPT_LIST, &[]),
                Pre::Info(t) => opt(NBD_OPT_INFO, &info_data(export_name(&exports, *t), &[1, 2, 3])),
                Pre::InfoUnknown => opt(NBD_OPT_INFO, &info_data("?", &[])),
                Pre::StructuredReply => {
                    structured = true;
                    opt(NBD_OPT_STRUCTURED_REPLY, &[])
                }
                Pre::SetMeta(t, select) => {
                    meta = structured.then_some((t.unwrap_or(0), *select));
                    let q: &[&str] = if *select { &["base:", BASE_ALLOCATION] } else { &["base:"] };
                    opt(NBD_OPT_SET_META_CONTEXT, &meta_data(export_name(&exports, *t), q))
                }
                Pre::ListMeta(t) => {
                    opt(NBD_OPT_LIST_META_CONTEXT, &meta_data(export_name(&exports, *t), &[]))
                }
                Pre::StartTls => opt(NBD_OPT_STARTTLS, &[]),
                Pre::Unknown(o, d) => opt(*o, d),
            };
            input.extend(o);
            final_replies += 1;
        }
        input.extend(opt(NBD_OPT_GO, &info_data(export_name(&exports, target), &infos)));
        final_replies += 1;

        let (out, state, consumed) = run(cfg, &input);
        prop_assert_eq!(consumed, input.len());
        let index = target.unwrap_or(0);
        let meta_contexts = match meta {
            Some((i, true)) if i == index => vec![(1, BASE_ALLOCATION.to_string())],
            _ => vec![],
        };
        let want = Negotiated {
            export_index: index,
            structured_replies: structured,
            no_zeroes: flags & NBD_FLAG_C_NO_ZEROES != 0,
            meta_contexts,
        };
        prop_assert_eq!(state, HandshakeState::Transmission(want));

        // The client's view of the replies.
        prop_assert_eq!(&out[..18], &greeting()[..]);
        let replies = parse_replies(&out[18..]).map_err(TestCaseError::fail)?;
        let finals = replies
            .iter()
            .filter(|r| r.kind == NBD_REP_ACK || r.kind & NBD_REP_FLAG_ERROR != 0)
            .count();
        prop_assert_eq!(finals, final_replies);
        let go: Vec<_> = replies.iter().rev().take_while(|r| r.option == NBD_OPT_GO).collect();
        prop_assert_eq!(go[0].kind, NBD_REP_ACK);
        let e = &exports[index];
        let infos_sent: Vec<&[u8]> = go.iter().rev().filter(|r| r.kind == NBD_REP_INFO)
            .map(|r| &r.payload[..]).collect();
        prop_assert_eq!(
            infos_sent[0],
            &info_export(e.size_bytes, effective_transmission_flags(e, structured))[..]
        );
        prop_assert_eq!(
            infos_sent[1],
            &info_block_size(e.block_min_bytes, e.block_preferred_bytes, e.block_max_bytes)[..]
        );
        let name_sent = infos_sent.iter().any(|p| p[..2] == be16(NBD_INFO_NAME));
        prop_assert_eq!(name_sent, infos.contains(&NBD_INFO_NAME));
        let flags_sent = effective_transmission_flags(e, structured);
        prop_assert!(flags_sent & NBD_FLAG_HAS_FLAGS != 0);
        prop_assert!(structured || flags_sent & NBD_FLAG_SEND_DF == 0);
    }
}
