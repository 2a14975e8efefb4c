//! Transmission phase: request headers and what to do with them.
//!
//! [`judge`] decides from the header and the [`Session`] alone, before any
//! payload is read, so that the caller always knows how many bytes follow:
//! only `NBD_CMD_WRITE` carries a payload, of exactly `length` bytes, and
//! every verdict about a write says whether to read, discard, or give up on
//! them.
//!
//! Checks, in order; the first failing one decides (proto.md "Request types"
//! and "Error values"; nbdkit's `validate_request` for the order and errnos):
//!
//! 1. Unknown command (including the experimental `NBD_CMD_RESIZE`):
//!    `NBD_EINVAL`. Unknown commands are taken to have no payload.
//! 2. `NBD_CMD_DISC`: [`Command::Disconnect`], whatever its other fields.
//! 3. `NBD_CMD_WRITE` longer than both the maximum payload and
//!    [`WRITE_DISCARD_LIMIT_BYTES`] (32 MiB): [`Verdict::Disconnect`]. A write
//!    over the maximum payload but within 32 MiB is rejected with
//!    `NBD_EINVAL` and its payload discarded, because the protocol says a
//!    payload up to 32 MiB "SHOULD NOT be considered a denial of service
//!    attack". With the 32 MiB maximum of DESIGN.md the two limits coincide.
//! 4. WRITE, TRIM or WRITE_ZEROES on a read-only export: `NBD_EPERM`.
//! 5. Flags: bits not defined for the command (FUA is defined for every
//!    command, NO_HOLE and FAST_ZERO for WRITE_ZEROES, DF for READ, REQ_ONE
//!    for BLOCK_STATUS, the experimental PAYLOAD_LEN for none), or defined but
//!    not advertised (FUA without `NBD_FLAG_SEND_FUA`, DF without
//!    `NBD_FLAG_SEND_DF` and structured replies, FAST_ZERO without
//!    `NBD_FLAG_SEND_FAST_ZERO`): `NBD_EINVAL`.
//! 6. Command not advertised (FLUSH, TRIM, WRITE_ZEROES without their
//!    `NBD_FLAG_SEND_*`), or BLOCK_STATUS without structured replies and a
//!    selected metadata context: `NBD_EINVAL`. CACHE is accepted whether or
//!    not `NBD_FLAG_SEND_CACHE` is set (the protocol notes clients that send
//!    it regardless); the server may treat it as a no-op.
//! 7. FLUSH with a nonzero offset or length: `NBD_EINVAL` (both are reserved
//!    and MUST be zero).
//! 8. Zero length on READ, WRITE, TRIM, WRITE_ZEROES, BLOCK_STATUS, CACHE:
//!    `NBD_EINVAL` (the protocol leaves it unspecified; a BLOCK_STATUS reply
//!    could not even be well formed).
//! 9. READ or WRITE longer than the maximum payload: `NBD_EINVAL` (see 3 for
//!    writes). TRIM, WRITE_ZEROES and BLOCK_STATUS have no payload and are
//!    not limited: BLOCK_STATUS length is a hint, and qemu asks for up to
//!    2 GiB.
//! 10. Offset + length past the export size or overflowing 64 bits:
//!     `NBD_ENOSPC` for WRITE and WRITE_ZEROES, `NBD_EINVAL` for the rest, as
//!     the protocol recommends and nbdkit does.
//!
//! The minimum block size is not checked: [`Session`] does not carry it, and
//! the server may accept unaligned requests (the protocol only says SHOULD).

use thiserror::Error;

use crate::consts::*;

/// Bytes of a (compact) request header.
pub const REQUEST_HEADER_BYTES: usize = 28;

/// The largest write payload that is read and discarded when the write is
/// rejected, even above the advertised maximum (proto.md, "Size
/// constraints": payloads up to 2^25 bytes are not a denial of service).
pub const WRITE_DISCARD_LIMIT_BYTES: u32 = 1 << 25;

/// A request header as sent by the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    /// `NBD_CMD_FLAG_*` bits.
    pub flags: u16,
    /// `NBD_CMD_*` type.
    pub kind: u16,
    /// Opaque cookie (formerly "handle") to echo in the reply.
    pub cookie: u64,
    /// Offset in the export.
    pub offset_bytes: u64,
    /// Length of the request (and of the payload for `NBD_CMD_WRITE`).
    pub length_bytes: u32,
}

impl RequestHeader {
    /// The 28 bytes a client sends for this header.
    pub fn encode(&self) -> [u8; REQUEST_HEADER_BYTES] {
        let mut b = [0u8; REQUEST_HEADER_BYTES];
        b[0..4].copy_from_slice(&NBD_REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.kind.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset_bytes.to_be_bytes());
        b[24..28].copy_from_slice(&self.length_bytes.to_be_bytes());
        b
    }
}

/// The header did not start with `NBD_REQUEST_MAGIC`; the stream cannot be
/// trusted any more and the connection must be closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error("request header without NBD_REQUEST_MAGIC")]
pub struct BadMagic;

/// Splits a request header into its fields.
pub fn parse_request_header(buf: &[u8; REQUEST_HEADER_BYTES]) -> Result<RequestHeader, BadMagic> {
    let u16_at = |i: usize| u16::from_be_bytes([buf[i], buf[i + 1]]);
    let u32_at = |i: usize| u32::from_be_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
    let u64_at = |i: usize| (u64::from(u32_at(i)) << 32) | u64::from(u32_at(i + 4));
    if u32_at(0) != NBD_REQUEST_MAGIC {
        return Err(BadMagic);
    }
    Ok(RequestHeader {
        flags: u16_at(4),
        kind: u16_at(6),
        cookie: u64_at(8),
        offset_bytes: u64_at(16),
        length_bytes: u32_at(24),
    })
}

/// A valid request, with the flags that matter to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// `NBD_CMD_READ`. A DF flag, when allowed, needs nothing from a server
    /// that always answers with a single data chunk.
    Read,
    /// `NBD_CMD_WRITE`: read `length` payload bytes first.
    Write { fua: bool },
    /// `NBD_CMD_FLUSH`.
    Flush,
    /// `NBD_CMD_TRIM`.
    Trim { fua: bool },
    /// `NBD_CMD_WRITE_ZEROES`; `no_hole`: must not deallocate; `fast_zero`:
    /// fail with `NBD_ENOTSUP` unless faster than writing zeroes.
    WriteZeroes {
        fua: bool,
        no_hole: bool,
        fast_zero: bool,
    },
    /// `NBD_CMD_BLOCK_STATUS` for every selected context; `req_one`: one
    /// extent per context, not longer than the request.
    BlockStatus { req_one: bool },
    /// `NBD_CMD_CACHE`: a hint; succeeding without doing anything is fine.
    Cache,
    /// `NBD_CMD_DISC`: finish outstanding requests, then close. No reply.
    Disconnect,
}

/// What the server must do with a parsed header, decided purely from the
/// header and the export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Valid: run it. For writes, read `length` payload bytes first.
    Run(Command),
    /// Invalid but the stream stays in sync: read and discard `discard_bytes`
    /// payload bytes (writes), then reply with this errno (NBD_EINVAL,
    /// NBD_EPERM, NBD_ENOSPC...). With structured replies, a rejected READ
    /// must still be answered with a structured error chunk.
    Reject {
        errno: u32,
        discard_bytes: u32,
        message: String,
    },
    /// Cannot stay in sync (a write payload too large to skip): close.
    Disconnect { message: String },
}

/// What the transmission phase needs to know to judge requests; see
/// [`Negotiated::session`](crate::Negotiated::session).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    /// Export size in bytes.
    pub size_bytes: u64,
    /// Refuse WRITE, TRIM and WRITE_ZEROES with `NBD_EPERM` (also implied by
    /// `NBD_FLAG_READ_ONLY` in `transmission_flags`).
    pub read_only: bool,
    /// Structured replies were negotiated.
    pub structured_replies: bool,
    /// Advertised maximum payload (`NBD_INFO_BLOCK_SIZE`).
    pub max_block_bytes: u32,
    /// The transmission flags sent to the client.
    pub transmission_flags: u16,
    /// Selected metadata contexts (id, name).
    pub meta_contexts: Vec<(u32, String)>,
}

/// Decides what to do with a request; see the module documentation for the
/// rules and their order.
pub fn judge(header: &RequestHeader, session: &Session) -> Verdict {
    let kind = header.kind;
    let length = header.length_bytes;

    // 1. Unknown command.
    let defined_flags = match kind {
        NBD_CMD_READ => NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_DF,
        NBD_CMD_WRITE | NBD_CMD_FLUSH | NBD_CMD_TRIM | NBD_CMD_CACHE => NBD_CMD_FLAG_FUA,
        NBD_CMD_WRITE_ZEROES => NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO,
        NBD_CMD_BLOCK_STATUS => NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_REQ_ONE,
        // 2. Disconnect: no reply, nothing to check.
        NBD_CMD_DISC => return Verdict::Run(Command::Disconnect),
        _ => {
            return reject(NBD_EINVAL, 0, format!("unknown command {kind}"));
        }
    };

    let is_write = kind == NBD_CMD_WRITE;
    // 3. A write whose payload we will not read.
    if is_write && length > session.max_block_bytes && length > WRITE_DISCARD_LIMIT_BYTES {
        return Verdict::Disconnect {
            message: format!(
                "NBD_CMD_WRITE of {length} bytes exceeds the maximum payload of {} bytes",
                session.max_block_bytes
            ),
        };
    }
    let judged = Judged {
        header,
        session,
        name: command_name(kind),
        discard: if is_write { length } else { 0 },
    };
    match judged.run(defined_flags) {
        Ok(command) => Verdict::Run(command),
        Err(verdict) => verdict,
    }
}

/// A request past rules 1 to 3: its payload, if any, will be read or
/// discarded, so every verdict from here keeps the stream in sync.
struct Judged<'a> {
    header: &'a RequestHeader,
    session: &'a Session,
    name: &'static str,
    /// Payload bytes to discard when the request is rejected.
    discard: u32,
}

impl Judged<'_> {
    /// Rules 4 to 10, in order; `Err` is the first that fails.
    fn run(&self, defined_flags: u16) -> Result<Command, Verdict> {
        self.writable()?;
        self.flags_allowed(defined_flags)?;
        self.negotiated()?;
        if self.header.kind == NBD_CMD_FLUSH {
            return self.flush();
        }
        self.length_allowed()?;
        self.in_range()?;
        Ok(self.command())
    }

    fn advertised(&self, flag: u16) -> bool {
        self.session.transmission_flags & flag != 0
    }

    fn reject(&self, errno: u32, message: String) -> Result<(), Verdict> {
        Err(reject(errno, self.discard, message))
    }

    /// 4. Read-only export.
    fn writable(&self) -> Result<(), Verdict> {
        let modifies = matches!(
            self.header.kind,
            NBD_CMD_WRITE | NBD_CMD_TRIM | NBD_CMD_WRITE_ZEROES
        );
        if modifies && (self.session.read_only || self.advertised(NBD_FLAG_READ_ONLY)) {
            return self.reject(NBD_EPERM, format!("{} on a read-only export", self.name));
        }
        Ok(())
    }

    /// 5. Flags.
    fn flags_allowed(&self, defined_flags: u16) -> Result<(), Verdict> {
        let (name, flags) = (self.name, self.header.flags);
        if flags & !defined_flags != 0 {
            return self.reject(
                NBD_EINVAL,
                format!("{name} with undefined flags {:#x}", flags & !defined_flags),
            );
        }
        if flags & NBD_CMD_FLAG_FUA != 0 && !self.advertised(NBD_FLAG_SEND_FUA) {
            return self.reject(
                NBD_EINVAL,
                format!("{name} with FUA, which was not advertised"),
            );
        }
        if flags & NBD_CMD_FLAG_DF != 0
            && !(self.advertised(NBD_FLAG_SEND_DF) && self.session.structured_replies)
        {
            return self.reject(
                NBD_EINVAL,
                format!("{name} with DF, which was not advertised"),
            );
        }
        if flags & NBD_CMD_FLAG_FAST_ZERO != 0 && !self.advertised(NBD_FLAG_SEND_FAST_ZERO) {
            return self.reject(
                NBD_EINVAL,
                format!("{name} with FAST_ZERO, which was not advertised"),
            );
        }
        Ok(())
    }

    /// 6. Command not advertised / not negotiated.
    fn negotiated(&self) -> Result<(), Verdict> {
        let (name, kind) = (self.name, self.header.kind);
        let needed = match kind {
            NBD_CMD_FLUSH => Some(NBD_FLAG_SEND_FLUSH),
            NBD_CMD_TRIM => Some(NBD_FLAG_SEND_TRIM),
            NBD_CMD_WRITE_ZEROES => Some(NBD_FLAG_SEND_WRITE_ZEROES),
            _ => None,
        };
        if let Some(flag) = needed {
            if !self.advertised(flag) {
                return self.reject(NBD_EINVAL, format!("{name} was not advertised"));
            }
        }
        if kind == NBD_CMD_BLOCK_STATUS {
            if !self.session.structured_replies {
                return Err(reject(
                    NBD_EINVAL,
                    0,
                    format!("{name} without structured replies"),
                ));
            }
            if self.session.meta_contexts.is_empty() {
                return Err(reject(
                    NBD_EINVAL,
                    0,
                    format!("{name} without a selected metadata context"),
                ));
            }
        }
        Ok(())
    }

    /// 7. Flush takes no range.
    fn flush(&self) -> Result<Command, Verdict> {
        if self.header.offset_bytes != 0 || self.header.length_bytes != 0 {
            return Err(reject(
                NBD_EINVAL,
                0,
                format!("{} with a nonzero offset or length", self.name),
            ));
        }
        Ok(Command::Flush)
    }

    /// Rules 8 (zero length) and 9 (reads the reply could not carry;
    /// writes: rule 3 and here).
    fn length_allowed(&self) -> Result<(), Verdict> {
        let (name, kind, length) = (self.name, self.header.kind, self.header.length_bytes);
        if length == 0 {
            return self.reject(NBD_EINVAL, format!("{name} of zero bytes"));
        }
        if (kind == NBD_CMD_READ || kind == NBD_CMD_WRITE) && length > self.session.max_block_bytes
        {
            return self.reject(
                NBD_EINVAL,
                format!(
                    "{name} of {length} bytes exceeds the maximum payload of {} bytes",
                    self.session.max_block_bytes
                ),
            );
        }
        Ok(())
    }

    /// 10. Range.
    fn in_range(&self) -> Result<(), Verdict> {
        let (name, kind) = (self.name, self.header.kind);
        let (offset, length) = (self.header.offset_bytes, self.header.length_bytes);
        let in_range = offset
            .checked_add(u64::from(length))
            .is_some_and(|end| end <= self.session.size_bytes);
        if !in_range {
            let errno = if matches!(kind, NBD_CMD_WRITE | NBD_CMD_WRITE_ZEROES) {
                NBD_ENOSPC
            } else {
                NBD_EINVAL
            };
            return self.reject(
                errno,
                format!(
                    "{name} of {length} bytes at offset {offset} is beyond the export size of {} bytes",
                    self.session.size_bytes
                ),
            );
        }
        Ok(())
    }

    /// The command, with the flags that matter to the server.
    fn command(&self) -> Command {
        let flags = self.header.flags;
        let fua = flags & NBD_CMD_FLAG_FUA != 0;
        match self.header.kind {
            NBD_CMD_READ => Command::Read,
            NBD_CMD_WRITE => Command::Write { fua },
            NBD_CMD_TRIM => Command::Trim { fua },
            NBD_CMD_WRITE_ZEROES => Command::WriteZeroes {
                fua,
                no_hole: flags & NBD_CMD_FLAG_NO_HOLE != 0,
                fast_zero: flags & NBD_CMD_FLAG_FAST_ZERO != 0,
            },
            NBD_CMD_BLOCK_STATUS => Command::BlockStatus {
                req_one: flags & NBD_CMD_FLAG_REQ_ONE != 0,
            },
            _ => Command::Cache,
        }
    }
}

fn reject(errno: u32, discard_bytes: u32, message: String) -> Verdict {
    Verdict::Reject {
        errno,
        discard_bytes,
        message,
    }
}
