//! Client side of transmission, sans I/O: requests checked against what the
//! server negotiated and given fresh cookies; replies, simple or
//! structured, matched to them; reads reassembled from their chunks.
//!
//! [`ClientSession::request`] returns the 28-byte header to send (a write's
//! payload follows it, sent by the caller). [`ClientSession::feed`] takes
//! every byte the server sends, in any split, and queues a [`Completion`]
//! per finished request ([`ClientSession::next_completion`]).
//!
//! A reply the protocol forbids (an unknown cookie, a chunk outside its
//! read or over another, a simple reply to a read when structured replies
//! were negotiated, a chunk type not valid for the request) is a
//! [`SessionError`]: the server cannot be trusted with the stream any
//! more, and the caller must drop the connection (a hard disconnect, as
//! proto.md asks) and fail every request still in flight. Such a reply
//! never completes a request: no read returns bytes it was not sent.

use std::collections::{BTreeMap, HashMap, VecDeque};

use thiserror::Error;

use crate::client_handshake::Export;
use crate::consts::*;
use crate::transmission::{RequestHeader, REQUEST_HEADER_BYTES};

/// The largest payload of one request when the server gave no block sizes
/// (proto.md: 32 MiB is never a denial of service).
pub const DEFAULT_MAX_PAYLOAD_BYTES: u32 = 1 << 25;
const SIMPLE_REPLY_BYTES: usize = 16;
const STRUCTURED_HEADER_BYTES: usize = 20;
/// The largest structured chunk payload held whole (errors, holes, NONE):
/// an error's message is at most 4096 bytes.
const MAX_SMALL_CHUNK_BYTES: usize = 64 * 1024;

/// One request to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientRequest {
    Read {
        offset_bytes: u64,
        len_bytes: u32,
    },
    /// The caller sends `len_bytes` of payload right after the header.
    Write {
        offset_bytes: u64,
        len_bytes: u32,
        fua: bool,
    },
    Flush,
    Trim {
        offset_bytes: u64,
        len_bytes: u32,
    },
    /// `no_hole`: the zeroes must be allocated, not a hole.
    WriteZeroes {
        offset_bytes: u64,
        len_bytes: u32,
        fua: bool,
        no_hole: bool,
    },
}

/// A request this session will not send: the server did not offer it, or
/// it breaks the export's bounds or block sizes.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum RequestError {
    #[error("the server does not offer {0}")]
    NotOffered(&'static str),
    #[error("the export is read-only")]
    ReadOnly,
    #[error("bytes {offset_bytes}..{end} are past the export's end ({size_bytes} bytes)")]
    OutOfRange {
        offset_bytes: u64,
        end: u64,
        size_bytes: u64,
    },
    #[error("{len_bytes} bytes at {offset_bytes} are not aligned to the server's {block_bytes}-byte blocks")]
    Unaligned {
        offset_bytes: u64,
        len_bytes: u32,
        block_bytes: u32,
    },
    #[error("{len_bytes} bytes is more than the server takes in one request ({max_bytes})")]
    TooLarge { len_bytes: u32, max_bytes: u32 },
    #[error("an empty request")]
    Empty,
}

/// The server answered a request with an error.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{} from the server{}", errno_name(*errno), if message.is_empty() { String::new() } else { format!(": {message}") })]
pub struct ReplyError {
    /// `NBD_E*`.
    pub errno: u32,
    /// The server's words, if it sent any (structured replies).
    pub message: String,
}

/// A finished request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    pub cookie: u64,
    /// A read's bytes, or nothing for the rest.
    pub result: Result<Option<Vec<u8>>, ReplyError>,
}

/// The server broke the protocol: drop the connection.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("the server broke the protocol: {0}")]
pub struct SessionError(pub String);

/// A request in flight.
struct InFlight {
    kind: u16,
    offset_bytes: u64,
    len_bytes: u32,
    /// A read's bytes as they arrive (zero where holes are).
    data: Vec<u8>,
    /// A structured read's chunks so far, start → end relative to the
    /// request: none may overlap, and a successful read covers it all.
    chunks: BTreeMap<u64, u64>,
    error: Option<ReplyError>,
}

/// Where the parser is in the server's byte stream.
enum Parse {
    /// A reply's header: `need` bytes in all (16 simple, 20 structured,
    /// decided by the magic's first 4).
    Header,
    /// A simple reply's read data: the rest of `cookie`'s bytes.
    SimpleData { cookie: u64, at: usize },
    /// An `NBD_REPLY_TYPE_OFFSET_DATA` chunk: its offset, then the data.
    OffsetData {
        cookie: u64,
        flags: u16,
        len: usize,
        at: Option<usize>,
        got: usize,
    },
    /// Any other chunk, held whole (bounded).
    Chunk {
        cookie: u64,
        flags: u16,
        typ: u16,
        len: usize,
    },
}

pub struct ClientSession {
    export: Export,
    next_cookie: u64,
    in_flight: HashMap<u64, InFlight>,
    completions: VecDeque<Completion>,
    parse: Parse,
    /// The header or small chunk being gathered.
    buf: Vec<u8>,
    failed: Option<SessionError>,
}

impl ClientSession {
    pub fn new(export: Export) -> Self {
        ClientSession {
            export,
            next_cookie: 1,
            in_flight: HashMap::new(),
            completions: VecDeque::new(),
            parse: Parse::Header,
            buf: Vec::with_capacity(STRUCTURED_HEADER_BYTES),
            failed: None,
        }
    }

    pub fn export(&self) -> &Export {
        &self.export
    }

    /// Requests sent and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// The largest payload of one read or write.
    pub fn max_payload_bytes(&self) -> u32 {
        self.export
            .block_size
            .map_or(DEFAULT_MAX_PAYLOAD_BYTES, |b| {
                b.maximum_bytes.min(DEFAULT_MAX_PAYLOAD_BYTES)
            })
    }

    /// Checks `req`, gives it a cookie, and returns the header to send.
    pub fn request(
        &mut self,
        req: ClientRequest,
    ) -> Result<(u64, [u8; REQUEST_HEADER_BYTES]), RequestError> {
        let e = &self.export;
        let writes = !matches!(req, ClientRequest::Read { .. } | ClientRequest::Flush);
        if writes && e.has(NBD_FLAG_READ_ONLY) {
            return Err(RequestError::ReadOnly);
        }
        let (kind, offset_bytes, len_bytes, flags) = match req {
            ClientRequest::Read {
                offset_bytes,
                len_bytes,
            } => (NBD_CMD_READ, offset_bytes, len_bytes, 0),
            ClientRequest::Write {
                offset_bytes,
                len_bytes,
                fua,
            } => (
                NBD_CMD_WRITE,
                offset_bytes,
                len_bytes,
                if fua { NBD_CMD_FLAG_FUA } else { 0 },
            ),
            ClientRequest::Flush => {
                if !e.has(NBD_FLAG_SEND_FLUSH) {
                    return Err(RequestError::NotOffered("NBD_CMD_FLUSH"));
                }
                (NBD_CMD_FLUSH, 0, 0, 0)
            }
            ClientRequest::Trim {
                offset_bytes,
                len_bytes,
            } => {
                if !e.has(NBD_FLAG_SEND_TRIM) {
                    return Err(RequestError::NotOffered("NBD_CMD_TRIM"));
                }
                (NBD_CMD_TRIM, offset_bytes, len_bytes, 0)
            }
            ClientRequest::WriteZeroes {
                offset_bytes,
                len_bytes,
                fua,
                no_hole,
            } => {
                if !e.has(NBD_FLAG_SEND_WRITE_ZEROES) {
                    return Err(RequestError::NotOffered("NBD_CMD_WRITE_ZEROES"));
                }
                let mut f = if fua { NBD_CMD_FLAG_FUA } else { 0 };
                if no_hole {
                    f |= NBD_CMD_FLAG_NO_HOLE;
                }
                (NBD_CMD_WRITE_ZEROES, offset_bytes, len_bytes, f)
            }
        };
        if flags & NBD_CMD_FLAG_FUA != 0 && !e.has(NBD_FLAG_SEND_FUA) {
            // Without FUA a flush after the write gives the same promise;
            // the caller decides (the member layer issues one).
            return Err(RequestError::NotOffered("NBD_CMD_FLAG_FUA"));
        }
        if kind != NBD_CMD_FLUSH {
            if len_bytes == 0 {
                return Err(RequestError::Empty);
            }
            let end = offset_bytes.checked_add(u64::from(len_bytes));
            match end {
                Some(end) if end <= e.size_bytes => {}
                _ => {
                    return Err(RequestError::OutOfRange {
                        offset_bytes,
                        end: end.unwrap_or(u64::MAX),
                        size_bytes: e.size_bytes,
                    })
                }
            }
            if let Some(b) = e.block_size {
                let block = u64::from(b.minimum_bytes);
                if offset_bytes % block != 0 || u64::from(len_bytes) % block != 0 {
                    return Err(RequestError::Unaligned {
                        offset_bytes,
                        len_bytes,
                        block_bytes: b.minimum_bytes,
                    });
                }
            }
            let max_bytes = self.max_payload_bytes();
            if matches!(kind, NBD_CMD_READ | NBD_CMD_WRITE) && len_bytes > max_bytes {
                return Err(RequestError::TooLarge {
                    len_bytes,
                    max_bytes,
                });
            }
        }
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        let data = if kind == NBD_CMD_READ {
            vec![0u8; len_bytes as usize]
        } else {
            Vec::new()
        };
        self.in_flight.insert(
            cookie,
            InFlight {
                kind,
                offset_bytes,
                len_bytes,
                data,
                chunks: BTreeMap::new(),
                error: None,
            },
        );
        let header = RequestHeader {
            flags,
            kind,
            cookie,
            offset_bytes,
            length_bytes: len_bytes,
        };
        Ok((cookie, header.encode()))
    }

    /// The header of `NBD_CMD_DISC`, the polite goodbye (no reply comes).
    pub fn disconnect(&mut self) -> [u8; REQUEST_HEADER_BYTES] {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        RequestHeader {
            flags: 0,
            kind: NBD_CMD_DISC,
            cookie,
            offset_bytes: 0,
            length_bytes: 0,
        }
        .encode()
    }

    pub fn next_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// Takes bytes from the server. After an error nothing more is taken:
    /// the caller drops the connection.
    pub fn feed(&mut self, mut input: &[u8]) -> Result<(), SessionError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        while !input.is_empty() {
            let used = match self.step(input) {
                Ok(used) => used,
                Err(e) => {
                    self.failed = Some(e.clone());
                    return Err(e);
                }
            };
            input = &input[used..];
        }
        Ok(())
    }

    /// Consumes some of `input` (at least one byte).
    fn step(&mut self, input: &[u8]) -> Result<usize, SessionError> {
        match &mut self.parse {
            Parse::Header => {
                let need = if self.buf.len() < 4 {
                    4
                } else {
                    match u32::from_be_bytes(self.buf[..4].try_into().expect("4 bytes")) {
                        NBD_SIMPLE_REPLY_MAGIC => SIMPLE_REPLY_BYTES,
                        NBD_STRUCTURED_REPLY_MAGIC => STRUCTURED_HEADER_BYTES,
                        magic => {
                            return Err(SessionError(format!("a reply with magic {magic:#010x}")))
                        }
                    }
                };
                let n = (need - self.buf.len()).min(input.len());
                self.buf.extend_from_slice(&input[..n]);
                // At 4 bytes the magic says how long the header is.
                if self.buf.len() == need && need > 4 {
                    self.on_header()?;
                }
                Ok(n)
            }
            Parse::SimpleData { cookie, at } => {
                let (cookie, at0) = (*cookie, *at);
                let f = self
                    .in_flight
                    .get_mut(&cookie)
                    .expect("checked at the header");
                let n = (f.data.len() - at0).min(input.len());
                f.data[at0..at0 + n].copy_from_slice(&input[..n]);
                if at0 + n == f.data.len() {
                    self.parse = Parse::Header;
                    self.complete(cookie);
                } else {
                    self.parse = Parse::SimpleData {
                        cookie,
                        at: at0 + n,
                    };
                }
                Ok(n)
            }
            Parse::OffsetData {
                cookie,
                flags,
                len,
                at,
                got,
            } => {
                let (cookie, flags, len) = (*cookie, *flags, *len);
                let Some(start) = *at else {
                    // The 8-byte offset first.
                    let n = (8 - self.buf.len()).min(input.len());
                    self.buf.extend_from_slice(&input[..n]);
                    if self.buf.len() == 8 {
                        let offset = u64::from_be_bytes(self.buf[..8].try_into().expect("8 bytes"));
                        self.buf.clear();
                        let start = self.claim(cookie, offset, (len - 8) as u64)?;
                        self.parse = Parse::OffsetData {
                            cookie,
                            flags,
                            len,
                            at: Some(start),
                            got: 0,
                        };
                    }
                    return Ok(n);
                };
                let got0 = *got;
                let f = self
                    .in_flight
                    .get_mut(&cookie)
                    .expect("checked at the header");
                let n = (len - 8 - got0).min(input.len());
                f.data[start + got0..start + got0 + n].copy_from_slice(&input[..n]);
                if got0 + n == len - 8 {
                    self.parse = Parse::Header;
                    if flags & NBD_REPLY_FLAG_DONE != 0 {
                        self.finish_structured(cookie)?;
                    }
                } else {
                    self.parse = Parse::OffsetData {
                        cookie,
                        flags,
                        len,
                        at: Some(start),
                        got: got0 + n,
                    };
                }
                Ok(n)
            }
            Parse::Chunk { len, .. } => {
                let n = (*len - self.buf.len()).min(input.len());
                self.buf.extend_from_slice(&input[..n]);
                if self.buf.len() == *len {
                    self.on_chunk()?;
                }
                Ok(n)
            }
        }
    }

    fn on_header(&mut self) -> Result<(), SessionError> {
        let h = std::mem::take(&mut self.buf);
        let u16_at = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
        let u32_at = |i: usize| u32::from_be_bytes(h[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_be_bytes(h[i..i + 8].try_into().expect("8 bytes"));
        let magic = u32_at(0);
        if magic == NBD_SIMPLE_REPLY_MAGIC {
            let errno = u32_at(4);
            let cookie = u64_at(8);
            let f = self
                .in_flight
                .get_mut(&cookie)
                .ok_or_else(|| unknown(cookie))?;
            if f.kind == NBD_CMD_READ && self.export.structured_replies {
                return Err(SessionError(format!(
                    "a simple reply to read {cookie} after structured replies were agreed"
                )));
            }
            if errno != 0 {
                f.error = Some(ReplyError {
                    errno,
                    message: String::new(),
                });
                self.complete(cookie);
            } else if f.kind == NBD_CMD_READ {
                self.parse = Parse::SimpleData { cookie, at: 0 };
            } else {
                self.complete(cookie);
            }
            return Ok(());
        }
        assert_eq!(magic, NBD_STRUCTURED_REPLY_MAGIC, "checked at 4 bytes");
        if !self.export.structured_replies {
            return Err(SessionError(
                "a structured reply that was not agreed".into(),
            ));
        }
        let flags = u16_at(4);
        let typ = u16_at(6);
        let cookie = u64_at(8);
        let len = u32_at(16) as usize;
        let f = self.in_flight.get(&cookie).ok_or_else(|| unknown(cookie))?;
        if typ == NBD_REPLY_TYPE_OFFSET_DATA {
            if f.kind != NBD_CMD_READ || len < 9 {
                return Err(SessionError(format!(
                    "a data chunk of {len} bytes for {} {cookie}",
                    command_name(f.kind)
                )));
            }
            self.parse = Parse::OffsetData {
                cookie,
                flags,
                len,
                at: None,
                got: 0,
            };
            return Ok(());
        }
        if len > MAX_SMALL_CHUNK_BYTES {
            return Err(SessionError(format!(
                "a chunk of type {typ} with {len} bytes"
            )));
        }
        self.parse = Parse::Chunk {
            cookie,
            flags,
            typ,
            len,
        };
        if len == 0 {
            self.on_chunk()?;
        }
        Ok(())
    }

    /// A whole small chunk is in `buf`.
    fn on_chunk(&mut self) -> Result<(), SessionError> {
        let Parse::Chunk {
            cookie,
            flags,
            typ,
            len,
        } = self.parse
        else {
            unreachable!("on_chunk outside a chunk")
        };
        let p = std::mem::take(&mut self.buf);
        self.parse = Parse::Header;
        let u16_at = |i: usize| u16::from_be_bytes([p[i], p[i + 1]]);
        let u32_at = |i: usize| u32::from_be_bytes(p[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_be_bytes(p[i..i + 8].try_into().expect("8 bytes"));
        let kind = self.in_flight[&cookie].kind;
        match typ {
            NBD_REPLY_TYPE_NONE => {
                if len != 0 || flags & NBD_REPLY_FLAG_DONE == 0 {
                    return Err(SessionError(format!(
                        "an NBD_REPLY_TYPE_NONE of {len} bytes, flags {flags:#x}"
                    )));
                }
            }
            NBD_REPLY_TYPE_OFFSET_HOLE => {
                if kind != NBD_CMD_READ || len != 12 {
                    return Err(SessionError(format!(
                        "a hole chunk of {len} bytes for {} {cookie}",
                        command_name(kind)
                    )));
                }
                let (offset, size) = (u64_at(0), u32_at(8));
                if size == 0 {
                    return Err(SessionError(format!("an empty hole for read {cookie}")));
                }
                // The buffer starts zeroed: a hole needs no bytes.
                self.claim(cookie, offset, u64::from(size))?;
            }
            t if t & NBD_REPLY_TYPE_FLAG_ERROR != 0 => {
                if len < 6 {
                    return Err(SessionError(format!("an error chunk of {len} bytes")));
                }
                let errno = u32_at(0);
                let mlen = usize::from(u16_at(4));
                let fixed = if t == NBD_REPLY_TYPE_ERROR_OFFSET {
                    8
                } else {
                    0
                };
                if 6 + mlen + fixed > len || (t == NBD_REPLY_TYPE_ERROR && 6 + mlen != len) {
                    return Err(SessionError(format!(
                        "an error chunk of {len} bytes with a {mlen}-byte message"
                    )));
                }
                if errno == 0 {
                    return Err(SessionError(format!(
                        "an error chunk without an error for {cookie}"
                    )));
                }
                let message = String::from_utf8_lossy(&p[6..6 + mlen]).into_owned();
                let f = self
                    .in_flight
                    .get_mut(&cookie)
                    .expect("checked at the header");
                // The first error stands; the rest of the reply still comes.
                f.error.get_or_insert(ReplyError { errno, message });
            }
            _ => {
                return Err(SessionError(format!(
                    "a chunk of type {typ} for {} {cookie}",
                    command_name(kind)
                )))
            }
        }
        if flags & NBD_REPLY_FLAG_DONE != 0 {
            self.finish_structured(cookie)?;
        }
        Ok(())
    }

    /// Records bytes `[offset, offset + len)` of the export as delivered to
    /// read `cookie`; returns where they start in its buffer.
    fn claim(&mut self, cookie: u64, offset: u64, len: u64) -> Result<usize, SessionError> {
        let f = self
            .in_flight
            .get_mut(&cookie)
            .expect("checked at the header");
        let end = offset.checked_add(len);
        let req_end = f.offset_bytes + u64::from(f.len_bytes);
        let (lo, hi) = match end {
            Some(end) if offset >= f.offset_bytes && end <= req_end => {
                (offset - f.offset_bytes, end - f.offset_bytes)
            }
            _ => {
                return Err(SessionError(format!(
                    "read {cookie} of {}..{req_end} got bytes {offset}..+{len}",
                    f.offset_bytes
                )))
            }
        };
        let before = f.chunks.range(..hi).next_back();
        if before.is_some_and(|(_, &e)| e > lo) {
            return Err(SessionError(format!(
                "read {cookie} got bytes {offset}..+{len} twice"
            )));
        }
        f.chunks.insert(lo, hi);
        Ok(lo as usize)
    }

    fn finish_structured(&mut self, cookie: u64) -> Result<(), SessionError> {
        let f = &self.in_flight[&cookie];
        if f.kind == NBD_CMD_READ && f.error.is_none() {
            let covered: u64 = f.chunks.iter().map(|(s, e)| e - s).sum();
            if covered != u64::from(f.len_bytes) {
                return Err(SessionError(format!(
                    "read {cookie} of {} bytes ended after {covered}",
                    f.len_bytes
                )));
            }
        }
        self.complete(cookie);
        Ok(())
    }

    fn complete(&mut self, cookie: u64) {
        let f = self
            .in_flight
            .remove(&cookie)
            .expect("completing a request in flight");
        let result = match f.error {
            Some(e) => Err(e),
            None if f.kind == NBD_CMD_READ => Ok(Some(f.data)),
            None => Ok(None),
        };
        self.completions.push_back(Completion { cookie, result });
    }
}

fn unknown(cookie: u64) -> SessionError {
    SessionError(format!(
        "a reply to cookie {cookie}, which is not in flight"
    ))
}
