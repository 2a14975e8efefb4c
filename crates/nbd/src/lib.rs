//! The NBD wire codec: pure code, no I/O.
//!
//! No sockets, threads, files or clock: bytes in, bytes and decisions out, so
//! that every part can be fuzzed and property-tested, and the server
//! (`platter serve`) only moves bytes between a socket and these functions.
//! The protocol is `doc/proto.md` of the NetworkBlockDevice/nbd repository;
//! the names in [`consts`] are its names.
//!
//! Four parts:
//!
//! - [`ServerHandshake`]: the server side of the fixed-newstyle handshake as a
//!   state machine. Feed it what the client sends, write what it queues, until
//!   [`HandshakeState::Transmission`] or [`HandshakeState::Closed`].
//! - [`parse_request_header`] and [`judge`]: what to do with one transmission
//!   request, decided from its 28-byte header and the [`Session`] alone
//!   ([`Verdict`]), including how many payload bytes keep the stream in sync.
//! - Reply encoders: [`simple_reply`] and the structured reply chunks
//!   ([`structured_header`], [`structured_offset_data_header`],
//!   [`structured_offset_hole`], [`structured_error`], [`structured_none`],
//!   [`structured_block_status`]).
//!
//! - [`ClientHandshake`]: the client side, for members served by other NBD
//!   servers: fixed newstyle, STARTTLS when asked, structured replies, GO
//!   with block sizes (EXPORT_NAME for servers without GO); then
//!   [`ClientSession`]: requests checked against what was negotiated,
//!   replies matched by cookie, reads reassembled from their chunks; and
//!   [`parse_nbd_uri`], the NBD URI that names such a member.
//!
//! Only fixed newstyle is spoken: no oldstyle, no TLS (`NBD_OPT_STARTTLS` gets
//! `NBD_REP_ERR_POLICY`), no extended headers (`NBD_OPT_EXTENDED_HEADERS` gets
//! `NBD_REP_ERR_UNSUP`). The only metadata context is `base:allocation`.

mod client_handshake;
mod client_session;
pub mod consts;
mod handshake;
mod reply;
mod transmission;
mod uri;
mod wire;

pub use client_handshake::{
    BlockSize, ClientConfig, ClientError, ClientHandshake, ClientState, Export,
    MAX_OPTION_REPLY_BYTES,
};
pub use client_session::{
    ClientRequest, ClientSession, Completion, ReplyError, RequestError, SessionError,
    DEFAULT_MAX_PAYLOAD_BYTES,
};
pub use handshake::{
    effective_transmission_flags, CloseReason, ExportInfo, HandshakeConfig, HandshakeState,
    Negotiated, ServerHandshake, TlsPolicy, BASE_ALLOCATION, BASE_ALLOCATION_ID,
    DEFAULT_MAX_OPTIONS, DEFAULT_MAX_OPTION_BYTES, EXPORT_NAME_ZEROES, GREETING_BYTES,
    OPTION_HEADER_BYTES,
};
pub use reply::{
    simple_reply, structured_block_status, structured_error, structured_header, structured_none,
    structured_offset_data_header, structured_offset_hole, SIMPLE_REPLY_BYTES,
    STRUCTURED_HEADER_BYTES,
};
pub use transmission::{
    judge, parse_request_header, BadMagic, Command, RequestHeader, Session, Verdict,
    REQUEST_HEADER_BYTES, WRITE_DISCARD_LIMIT_BYTES,
};
pub use uri::{is_nbd_uri, parse_nbd_uri, Endpoint, NbdUri, UriError, NBD_DEFAULT_PORT};
