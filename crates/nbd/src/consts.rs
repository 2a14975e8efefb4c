//! Every number of the NBD protocol, named as in `doc/proto.md` of the
//! NetworkBlockDevice/nbd repository.
//!
//! All of them travel in network byte order (big-endian). Widths follow the
//! wire: handshake flags and transmission flags are 16 bits, client flags 32,
//! option and option-reply codes 32, info types 16, command types and command
//! flags 16, structured reply flags and types 16, errors 32.
//!
//! Constants marked *experimental* belong to extensions this crate does not
//! implement (`EXTENDED_HEADERS`, `RESIZE`); they are here so that logs and
//! tests can name what a client sent.

// ---------------------------------------------------------------------------
// Magic numbers
// ---------------------------------------------------------------------------

/// First 8 bytes the server sends: ASCII `NBDMAGIC` (the `INIT_PASSWD`).
pub const NBD_INIT_PASSWD: u64 = 0x4e42_444d_4147_4943;
/// Alias of [`NBD_INIT_PASSWD`] (the name the kernel header uses).
pub const NBD_MAGIC: u64 = NBD_INIT_PASSWD;
/// ASCII `IHAVEOPT`: the newstyle magic after `NBDMAGIC`, and the magic that
/// starts every option the client sends.
pub const NBD_IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Alias of [`NBD_IHAVEOPT`] (nbdkit calls it `NBD_NEW_VERSION`).
pub const NBD_OPTS_MAGIC: u64 = NBD_IHAVEOPT;
/// Oldstyle `cliserv_magic` (oldstyle negotiation is not implemented).
pub const NBD_CLISERV_MAGIC: u64 = 0x0000_4202_8186_1253;
/// Magic starting every fixed-newstyle option reply.
pub const NBD_REP_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic starting every transmission request.
pub const NBD_REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic starting a simple reply (formerly `NBD_REPLY_MAGIC`).
pub const NBD_SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic starting a structured reply chunk.
pub const NBD_STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;
/// *Experimental* (`EXTENDED_HEADERS`): extended request magic.
pub const NBD_EXTENDED_REQUEST_MAGIC: u32 = 0x21e4_1c71;
/// *Experimental* (`EXTENDED_HEADERS`): extended reply magic.
pub const NBD_EXTENDED_REPLY_MAGIC: u32 = 0x6e8a_278c;

// ---------------------------------------------------------------------------
// Handshake phase: flags
// ---------------------------------------------------------------------------

/// Handshake flag (server, 16 bits): the server speaks fixed newstyle.
pub const NBD_FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Handshake flag (server, 16 bits): the server can omit the 124 zero bytes
/// after `NBD_OPT_EXPORT_NAME`.
pub const NBD_FLAG_NO_ZEROES: u16 = 1 << 1;

/// Client flag (32 bits): the client speaks fixed newstyle.
pub const NBD_FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
/// Client flag (32 bits): omit the 124 zero bytes after `NBD_OPT_EXPORT_NAME`.
pub const NBD_FLAG_C_NO_ZEROES: u32 = 1 << 1;

// ---------------------------------------------------------------------------
// Transmission flags (16 bits, sent with the export size)
// ---------------------------------------------------------------------------

/// MUST always be set.
pub const NBD_FLAG_HAS_FLAGS: u16 = 1 << 0;
/// The export is read-only; writes, trims and zeroes fail with `NBD_EPERM`.
pub const NBD_FLAG_READ_ONLY: u16 = 1 << 1;
/// Exposes `NBD_CMD_FLUSH`.
pub const NBD_FLAG_SEND_FLUSH: u16 = 1 << 2;
/// Exposes `NBD_CMD_FLAG_FUA`.
pub const NBD_FLAG_SEND_FUA: u16 = 1 << 3;
/// The export behaves like a rotational medium (a scheduling hint).
pub const NBD_FLAG_ROTATIONAL: u16 = 1 << 4;
/// Exposes `NBD_CMD_TRIM`.
pub const NBD_FLAG_SEND_TRIM: u16 = 1 << 5;
/// Exposes `NBD_CMD_WRITE_ZEROES` and `NBD_CMD_FLAG_NO_HOLE`.
pub const NBD_FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
/// Exposes `NBD_CMD_FLAG_DF`; only with structured replies.
pub const NBD_FLAG_SEND_DF: u16 = 1 << 7;
/// Flush and FUA are visible across all connections to the export.
pub const NBD_FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
/// *Experimental* (`RESIZE`).
pub const NBD_FLAG_SEND_RESIZE: u16 = 1 << 9;
/// Documents that the server understands `NBD_CMD_CACHE`.
pub const NBD_FLAG_SEND_CACHE: u16 = 1 << 10;
/// Exposes `NBD_CMD_FLAG_FAST_ZERO`; only with `NBD_FLAG_SEND_WRITE_ZEROES`.
pub const NBD_FLAG_SEND_FAST_ZERO: u16 = 1 << 11;
/// *Experimental* (`EXTENDED_HEADERS`).
pub const NBD_FLAG_BLOCK_STATUS_PAYLOAD: u16 = 1 << 12;

// ---------------------------------------------------------------------------
// Options (32 bits)
// ---------------------------------------------------------------------------

/// Choose an export and enter transmission; has no error reply.
pub const NBD_OPT_EXPORT_NAME: u32 = 1;
/// Soft disconnect during negotiation.
pub const NBD_OPT_ABORT: u32 = 2;
/// List the exports.
pub const NBD_OPT_LIST: u32 = 3;
/// Withdrawn `PEEK_EXPORT` extension; not in use.
pub const NBD_OPT_PEEK_EXPORT: u32 = 4;
/// Upgrade to TLS.
pub const NBD_OPT_STARTTLS: u32 = 5;
/// Describe an export without entering transmission.
pub const NBD_OPT_INFO: u32 = 6;
/// Describe an export and enter transmission.
pub const NBD_OPT_GO: u32 = 7;
/// Use structured replies in transmission.
pub const NBD_OPT_STRUCTURED_REPLY: u32 = 8;
/// List metadata contexts.
pub const NBD_OPT_LIST_META_CONTEXT: u32 = 9;
/// Select metadata contexts for `NBD_CMD_BLOCK_STATUS`.
pub const NBD_OPT_SET_META_CONTEXT: u32 = 10;
/// *Experimental* (`EXTENDED_HEADERS`).
pub const NBD_OPT_EXTENDED_HEADERS: u32 = 11;

// ---------------------------------------------------------------------------
// Option reply types (32 bits)
// ---------------------------------------------------------------------------

/// Option accepted / list finished.
pub const NBD_REP_ACK: u32 = 1;
/// One export in reply to `NBD_OPT_LIST`.
pub const NBD_REP_SERVER: u32 = 2;
/// One piece of information in reply to `NBD_OPT_INFO` / `NBD_OPT_GO`.
pub const NBD_REP_INFO: u32 = 3;
/// One metadata context.
pub const NBD_REP_META_CONTEXT: u32 = 4;
/// Bit 31: set in every error reply type.
pub const NBD_REP_FLAG_ERROR: u32 = 1 << 31;
/// The option is unknown to this server.
pub const NBD_REP_ERR_UNSUP: u32 = NBD_REP_FLAG_ERROR | 1;
/// Known and well formed, but forbidden by policy.
pub const NBD_REP_ERR_POLICY: u32 = NBD_REP_FLAG_ERROR | 2;
/// Syntactically or semantically invalid.
pub const NBD_REP_ERR_INVALID: u32 = NBD_REP_FLAG_ERROR | 3;
/// Not supported on this platform.
pub const NBD_REP_ERR_PLATFORM: u32 = NBD_REP_FLAG_ERROR | 4;
/// TLS must be initiated first.
pub const NBD_REP_ERR_TLS_REQD: u32 = NBD_REP_FLAG_ERROR | 5;
/// The requested export is not available.
pub const NBD_REP_ERR_UNKNOWN: u32 = NBD_REP_FLAG_ERROR | 6;
/// The server is shutting down.
pub const NBD_REP_ERR_SHUTDOWN: u32 = NBD_REP_FLAG_ERROR | 7;
/// The client must request `NBD_INFO_BLOCK_SIZE` first.
pub const NBD_REP_ERR_BLOCK_SIZE_REQD: u32 = NBD_REP_FLAG_ERROR | 8;
/// The request or the reply is too large.
pub const NBD_REP_ERR_TOO_BIG: u32 = NBD_REP_FLAG_ERROR | 9;
/// *Experimental* (`EXTENDED_HEADERS`).
pub const NBD_REP_ERR_EXT_HEADER_REQD: u32 = NBD_REP_FLAG_ERROR | 10;

// ---------------------------------------------------------------------------
// Information types (16 bits) for NBD_OPT_INFO / NBD_OPT_GO
// ---------------------------------------------------------------------------

/// Size (64 bits) and transmission flags (16 bits); mandatory before ACK.
pub const NBD_INFO_EXPORT: u16 = 0;
/// Canonical export name.
pub const NBD_INFO_NAME: u16 = 1;
/// Human-readable description.
pub const NBD_INFO_DESCRIPTION: u16 = 2;
/// Minimum, preferred and maximum block sizes (3 × 32 bits).
pub const NBD_INFO_BLOCK_SIZE: u16 = 3;

// ---------------------------------------------------------------------------
// Commands (16 bits)
// ---------------------------------------------------------------------------

/// Read `length` bytes at `offset`.
pub const NBD_CMD_READ: u16 = 0;
/// Write the `length` payload bytes that follow the header.
pub const NBD_CMD_WRITE: u16 = 1;
/// Soft disconnect; no reply.
pub const NBD_CMD_DISC: u16 = 2;
/// Persist completed writes.
pub const NBD_CMD_FLUSH: u16 = 3;
/// Discard hint.
pub const NBD_CMD_TRIM: u16 = 4;
/// Prefetch hint.
pub const NBD_CMD_CACHE: u16 = 5;
/// Zero a range without a payload.
pub const NBD_CMD_WRITE_ZEROES: u16 = 6;
/// Query metadata contexts over a range.
pub const NBD_CMD_BLOCK_STATUS: u16 = 7;
/// *Experimental* (`RESIZE`).
pub const NBD_CMD_RESIZE: u16 = 8;

// ---------------------------------------------------------------------------
// Command flags (16 bits)
// ---------------------------------------------------------------------------

/// Force unit access; valid on every command once `NBD_FLAG_SEND_FUA` is set.
pub const NBD_CMD_FLAG_FUA: u16 = 1 << 0;
/// `NBD_CMD_WRITE_ZEROES` only: do not punch a hole.
pub const NBD_CMD_FLAG_NO_HOLE: u16 = 1 << 1;
/// `NBD_CMD_READ` only: at most one content chunk (needs `NBD_FLAG_SEND_DF`).
pub const NBD_CMD_FLAG_DF: u16 = 1 << 2;
/// `NBD_CMD_BLOCK_STATUS` only: one extent per context.
pub const NBD_CMD_FLAG_REQ_ONE: u16 = 1 << 3;
/// `NBD_CMD_WRITE_ZEROES` only: fail with `NBD_ENOTSUP` unless fast.
pub const NBD_CMD_FLAG_FAST_ZERO: u16 = 1 << 4;
/// *Experimental* (`EXTENDED_HEADERS`).
pub const NBD_CMD_FLAG_PAYLOAD_LEN: u16 = 1 << 5;

// ---------------------------------------------------------------------------
// Structured replies
// ---------------------------------------------------------------------------

/// Structured reply flag: this is the final chunk of the reply.
pub const NBD_REPLY_FLAG_DONE: u16 = 1 << 0;

/// Final chunk without payload.
pub const NBD_REPLY_TYPE_NONE: u16 = 0;
/// 64-bit offset followed by data.
pub const NBD_REPLY_TYPE_OFFSET_DATA: u16 = 1;
/// 64-bit offset and 32-bit length of a range that reads as zeroes.
pub const NBD_REPLY_TYPE_OFFSET_HOLE: u16 = 2;
/// 32-bit context id followed by (length, flags) descriptors.
pub const NBD_REPLY_TYPE_BLOCK_STATUS: u16 = 5;
/// *Experimental* (`EXTENDED_HEADERS`).
pub const NBD_REPLY_TYPE_BLOCK_STATUS_EXT: u16 = 6;
/// Bit 15: set in every error chunk type.
pub const NBD_REPLY_TYPE_FLAG_ERROR: u16 = 1 << 15;
/// Error without an offset.
pub const NBD_REPLY_TYPE_ERROR: u16 = NBD_REPLY_TYPE_FLAG_ERROR | 1;
/// Error at an offset.
pub const NBD_REPLY_TYPE_ERROR_OFFSET: u16 = NBD_REPLY_TYPE_FLAG_ERROR | 2;

// ---------------------------------------------------------------------------
// base:allocation status flags (32 bits)
// ---------------------------------------------------------------------------

/// The extent is not allocated.
pub const NBD_STATE_HOLE: u32 = 1 << 0;
/// The extent reads as zeroes.
pub const NBD_STATE_ZERO: u32 = 1 << 1;

// ---------------------------------------------------------------------------
// Errors (32 bits)
// ---------------------------------------------------------------------------

/// No error.
pub const NBD_SUCCESS: u32 = 0;
/// Operation not permitted (writes to a read-only export).
pub const NBD_EPERM: u32 = 1;
/// Input/output error.
pub const NBD_EIO: u32 = 5;
/// Cannot allocate memory (avoid).
pub const NBD_ENOMEM: u32 = 12;
/// Invalid argument.
pub const NBD_EINVAL: u32 = 22;
/// No space left on device (writes past the end).
pub const NBD_ENOSPC: u32 = 28;
/// Value too large.
pub const NBD_EOVERFLOW: u32 = 75;
/// Operation not supported (fast zero only).
pub const NBD_ENOTSUP: u32 = 95;
/// Server shutting down.
pub const NBD_ESHUTDOWN: u32 = 108;

// ---------------------------------------------------------------------------
// Limits
// ---------------------------------------------------------------------------

/// Longest string (export name, query, error message) the protocol allows.
pub const NBD_MAX_STRING: usize = 4096;

/// Name of an option code, for logs (`"NBD_OPT_?"` when unknown).
pub fn option_name(option: u32) -> &'static str {
    match option {
        NBD_OPT_EXPORT_NAME => "NBD_OPT_EXPORT_NAME",
        NBD_OPT_ABORT => "NBD_OPT_ABORT",
        NBD_OPT_LIST => "NBD_OPT_LIST",
        NBD_OPT_PEEK_EXPORT => "NBD_OPT_PEEK_EXPORT",
        NBD_OPT_STARTTLS => "NBD_OPT_STARTTLS",
        NBD_OPT_INFO => "NBD_OPT_INFO",
        NBD_OPT_GO => "NBD_OPT_GO",
        NBD_OPT_STRUCTURED_REPLY => "NBD_OPT_STRUCTURED_REPLY",
        NBD_OPT_LIST_META_CONTEXT => "NBD_OPT_LIST_META_CONTEXT",
        NBD_OPT_SET_META_CONTEXT => "NBD_OPT_SET_META_CONTEXT",
        NBD_OPT_EXTENDED_HEADERS => "NBD_OPT_EXTENDED_HEADERS",
        _ => "NBD_OPT_?",
    }
}

/// Name of a command type, for logs (`"NBD_CMD_?"` when unknown).
pub fn command_name(kind: u16) -> &'static str {
    match kind {
        NBD_CMD_READ => "NBD_CMD_READ",
        NBD_CMD_WRITE => "NBD_CMD_WRITE",
        NBD_CMD_DISC => "NBD_CMD_DISC",
        NBD_CMD_FLUSH => "NBD_CMD_FLUSH",
        NBD_CMD_TRIM => "NBD_CMD_TRIM",
        NBD_CMD_CACHE => "NBD_CMD_CACHE",
        NBD_CMD_WRITE_ZEROES => "NBD_CMD_WRITE_ZEROES",
        NBD_CMD_BLOCK_STATUS => "NBD_CMD_BLOCK_STATUS",
        NBD_CMD_RESIZE => "NBD_CMD_RESIZE",
        _ => "NBD_CMD_?",
    }
}

/// Name of an error value, for logs (`"NBD_E?"` when unknown).
pub fn errno_name(errno: u32) -> &'static str {
    match errno {
        NBD_SUCCESS => "NBD_SUCCESS",
        NBD_EPERM => "NBD_EPERM",
        NBD_EIO => "NBD_EIO",
        NBD_ENOMEM => "NBD_ENOMEM",
        NBD_EINVAL => "NBD_EINVAL",
        NBD_ENOSPC => "NBD_ENOSPC",
        NBD_EOVERFLOW => "NBD_EOVERFLOW",
        NBD_ENOTSUP => "NBD_ENOTSUP",
        NBD_ESHUTDOWN => "NBD_ESHUTDOWN",
        _ => "NBD_E?",
    }
}
