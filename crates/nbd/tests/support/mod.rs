//! A hand-written NBD client side for the tests: builds what a client sends
//! and parses what the server answers, independently of the crate's encoders.

#![allow(dead_code)]

use platter_nbd::consts::*;
use platter_nbd::{ExportInfo, HandshakeConfig, HandshakeState, ServerHandshake};

pub const MIB: u32 = 1 << 20;

/// The 18 greeting bytes, spelled out.
pub fn greeting() -> Vec<u8> {
    let mut g = b"NBDMAGICIHAVEOPT".to_vec();
    g.extend_from_slice(&[0x00, 0x03]); // FIXED_NEWSTYLE | NO_ZEROES
    g
}

pub fn export(
    name: &str,
    description: &str,
    size_bytes: u64,
    transmission_flags: u16,
) -> ExportInfo {
    ExportInfo {
        name: name.to_string(),
        description: description.to_string(),
        size_bytes,
        transmission_flags,
        block_min_bytes: 512,
        block_preferred_bytes: 192 * 1024,
        block_max_bytes: 32 * MIB,
    }
}

pub const RW_FLAGS: u16 = NBD_FLAG_HAS_FLAGS
    | NBD_FLAG_SEND_FLUSH
    | NBD_FLAG_SEND_FUA
    | NBD_FLAG_SEND_TRIM
    | NBD_FLAG_SEND_WRITE_ZEROES
    | NBD_FLAG_SEND_FAST_ZERO
    | NBD_FLAG_SEND_DF
    | NBD_FLAG_CAN_MULTI_CONN;

/// Two exports: "vol0" (read-write, with a description) and "vol1"
/// (read-only, no description).
pub fn config() -> HandshakeConfig {
    HandshakeConfig::new(vec![
        export("vol0", "first volume", 1 << 30, RW_FLAGS),
        export(
            "vol1",
            "",
            3 * 4096,
            NBD_FLAG_HAS_FLAGS | NBD_FLAG_READ_ONLY | NBD_FLAG_SEND_FLUSH,
        ),
    ])
}

pub fn be16(v: u16) -> [u8; 2] {
    v.to_be_bytes()
}
pub fn be32(v: u32) -> [u8; 4] {
    v.to_be_bytes()
}
pub fn be64(v: u64) -> [u8; 8] {
    v.to_be_bytes()
}

pub fn client_flags(flags: u32) -> Vec<u8> {
    be32(flags).to_vec()
}

/// An option as the client sends it.
pub fn opt(option: u32, data: &[u8]) -> Vec<u8> {
    let mut v = b"IHAVEOPT".to_vec();
    v.extend_from_slice(&be32(option));
    v.extend_from_slice(&be32(data.len() as u32));
    v.extend_from_slice(data);
    v
}

/// INFO/GO data.
pub fn info_data(name: &str, infos: &[u16]) -> Vec<u8> {
    let mut v = be32(name.len() as u32).to_vec();
    v.extend_from_slice(name.as_bytes());
    v.extend_from_slice(&be16(infos.len() as u16));
    for i in infos {
        v.extend_from_slice(&be16(*i));
    }
    v
}

/// LIST/SET_META_CONTEXT data.
pub fn meta_data(name: &str, queries: &[&str]) -> Vec<u8> {
    let mut v = be32(name.len() as u32).to_vec();
    v.extend_from_slice(name.as_bytes());
    v.extend_from_slice(&be32(queries.len() as u32));
    for q in queries {
        v.extend_from_slice(&be32(q.len() as u32));
        v.extend_from_slice(q.as_bytes());
    }
    v
}

/// An option reply as the server should send it.
pub fn rep(option: u32, kind: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0x00, 0x03, 0xe8, 0x89, 0x04, 0x55, 0x65, 0xa9];
    v.extend_from_slice(&be32(option));
    v.extend_from_slice(&be32(kind));
    v.extend_from_slice(&be32(payload.len() as u32));
    v.extend_from_slice(payload);
    v
}

pub fn info_export(size: u64, flags: u16) -> Vec<u8> {
    let mut v = be16(NBD_INFO_EXPORT).to_vec();
    v.extend_from_slice(&be64(size));
    v.extend_from_slice(&be16(flags));
    v
}

pub fn info_block_size(min: u32, preferred: u32, max: u32) -> Vec<u8> {
    let mut v = be16(NBD_INFO_BLOCK_SIZE).to_vec();
    v.extend_from_slice(&be32(min));
    v.extend_from_slice(&be32(preferred));
    v.extend_from_slice(&be32(max));
    v
}

pub fn info_string(kind: u16, s: &str) -> Vec<u8> {
    let mut v = be16(kind).to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

pub fn meta_context(id: u32, name: &str) -> Vec<u8> {
    let mut v = be32(id).to_vec();
    v.extend_from_slice(name.as_bytes());
    v
}

/// Everything the server wrote, its final state and the bytes it consumed,
/// feeding `input` in one call.
pub fn run(config: HandshakeConfig, input: &[u8]) -> (Vec<u8>, HandshakeState, usize) {
    run_chunked(config, input, &[usize::MAX])
}

/// Like [`run`], feeding chunks of the given sizes in turn (cycling; a zero
/// size feeds an empty slice), and collecting output after every call.
pub fn run_chunked(
    config: HandshakeConfig,
    input: &[u8],
    chunks: &[usize],
) -> (Vec<u8>, HandshakeState, usize) {
    let mut hs = ServerHandshake::new(config);
    let mut out = hs.take_output();
    let mut pos = 0;
    let mut consumed = 0;
    let mut sizes = chunks.iter().cycle();
    let mut empty_feeds = 0;
    while pos < input.len() && *hs.state() == HandshakeState::Negotiating {
        let size = *sizes.next().expect("chunk sizes");
        let end = pos.saturating_add(size).min(input.len());
        let used = hs.feed(&input[pos..end]);
        assert!(used <= end - pos);
        if *hs.state() == HandshakeState::Negotiating {
            assert_eq!(used, end - pos, "all input is consumed while negotiating");
            assert!(hs.wanted_bytes() >= 1);
        } else {
            assert_eq!(hs.wanted_bytes(), 0);
        }
        consumed += used;
        out.extend(hs.take_output());
        if end == pos {
            empty_feeds += 1;
            assert!(empty_feeds < 1000, "chunk sizes must not all be zero");
        }
        pos = end;
    }
    // Feeding after the end of negotiation consumes nothing.
    if *hs.state() != HandshakeState::Negotiating {
        assert_eq!(hs.feed(b"more bytes"), 0);
        assert!(hs.take_output().is_empty());
    }
    (out, hs.state().clone(), consumed)
}

/// One option reply, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub option: u32,
    pub kind: u32,
    pub payload: Vec<u8>,
}

/// Parses server output after the greeting as a sequence of option replies.
pub fn parse_replies(mut bytes: &[u8]) -> Result<Vec<Reply>, String> {
    let mut replies = Vec::new();
    while !bytes.is_empty() {
        if bytes.len() < 20 {
            return Err(format!("truncated reply header: {} bytes", bytes.len()));
        }
        let magic = u64::from_be_bytes(bytes[0..8].try_into().unwrap());
        if magic != 0x3e889045565a9 {
            return Err(format!("bad reply magic {magic:#x}"));
        }
        let option = u32::from_be_bytes(bytes[8..12].try_into().unwrap());
        let kind = u32::from_be_bytes(bytes[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(bytes[16..20].try_into().unwrap()) as usize;
        if bytes.len() < 20 + len {
            return Err("truncated reply payload".to_string());
        }
        replies.push(Reply {
            option,
            kind,
            payload: bytes[20..20 + len].to_vec(),
        });
        bytes = &bytes[20 + len..];
    }
    Ok(replies)
}
