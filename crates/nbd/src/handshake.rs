//! Server side of the fixed-newstyle handshake, sans I/O.
//!
//! The state machine never reads or writes a socket. [`ServerHandshake::new`]
//! queues the greeting; the caller writes [`ServerHandshake::take_output`] to
//! the client, reads whatever arrives and hands it to
//! [`ServerHandshake::feed`], and repeats until [`ServerHandshake::state`] is
//! no longer [`HandshakeState::Negotiating`]. Output must be written after
//! every `feed` (and before closing, when the state is `Closed`: an
//! `NBD_OPT_ABORT` is answered with an ACK first).
//!
//! Messages are processed whole and in order, so the result does not depend
//! on how the client's bytes are split into reads. Memory is bounded: at most
//! one option (16-byte header plus `max_option_bytes` of data) is buffered,
//! and the connection is closed after `max_options` options.
//!
//! Choices where the protocol leaves one (proto.md, "Fixed newstyle
//! negotiation" and "Option types"):
//!
//! - A client that does not set `NBD_FLAG_C_FIXED_NEWSTYLE` is still answered
//!   in fixed newstyle (the protocol lets servers honour it); unknown client
//!   flag bits close the connection, as the protocol requires.
//! - An option whose declared length exceeds `max_option_bytes` closes the
//!   connection ([`CloseReason::OptionTooLarge`]) instead of being skipped
//!   with `NBD_REP_ERR_TOO_BIG`: nbdkit does the same, and it bounds both
//!   memory and the bytes a client can make us read for nothing.
//! - Option data that the option does not take (`NBD_OPT_LIST`,
//!   `NBD_OPT_STARTTLS`, `NBD_OPT_STRUCTURED_REPLY`) gets
//!   `NBD_REP_ERR_INVALID`; `NBD_OPT_ABORT` ignores its data, as the protocol
//!   asks.
//! - A second `NBD_OPT_STRUCTURED_REPLY` gets `NBD_REP_ERR_INVALID` (structured
//!   replies stay on), as nbdkit does.
//! - `NBD_OPT_LIST_META_CONTEXT` is answered even before structured replies
//!   are negotiated (the protocol only allows refusing it);
//!   `NBD_OPT_SET_META_CONTEXT` is refused with `NBD_REP_ERR_INVALID` before
//!   them. Both answer `NBD_REP_ERR_UNKNOWN` for an unknown export.
//! - Lengths inside INFO/GO and META_CONTEXT data must add up exactly to the
//!   option length (no trailing bytes); strings must be at most 4096 bytes,
//!   without NUL, valid UTF-8. Anything else is `NBD_REP_ERR_INVALID`, checked
//!   before any reply to that option is sent.
//! - The contexts selected by `NBD_OPT_SET_META_CONTEXT` survive into
//!   transmission only when its export name resolves to the same export as
//!   the final GO / EXPORT_NAME (so `""` and the default export's name match).
//!   A SET that fails still clears the previous selection.
//! - INFO/GO always reply `NBD_INFO_EXPORT` then `NBD_INFO_BLOCK_SIZE`, then
//!   `NBD_INFO_NAME` and `NBD_INFO_DESCRIPTION` if requested (in that order,
//!   each once; the description only when it is not empty), then the ACK.
//! - `NBD_REP_SERVER` replies to LIST carry the description after the name.
//! - Error replies carry a short human-readable message.
//! - The transmission flags sent are [`effective_transmission_flags`] of the
//!   export: `NBD_FLAG_SEND_DF` is dropped without structured replies, and
//!   `NBD_FLAG_SEND_FAST_ZERO` without `NBD_FLAG_SEND_WRITE_ZEROES` (both are
//!   protocol MUSTs).

use thiserror::Error;

use crate::consts::*;
use crate::transmission::Session;
use crate::wire::{clip, protocol_str, put_u16, put_u32, put_u64, Reader};

/// Options accepted before the connection is closed, unless configured.
pub const DEFAULT_MAX_OPTIONS: u32 = 64;
/// Largest option data accepted, unless configured.
pub const DEFAULT_MAX_OPTION_BYTES: u32 = 64 * 1024;
/// Bytes of the server greeting: `NBDMAGIC`, `IHAVEOPT`, handshake flags.
pub const GREETING_BYTES: usize = 18;
/// Bytes of an option header: `IHAVEOPT`, option, length.
pub const OPTION_HEADER_BYTES: usize = 16;
/// Zero bytes after the `NBD_OPT_EXPORT_NAME` reply unless the client set
/// `NBD_FLAG_C_NO_ZEROES`.
pub const EXPORT_NAME_ZEROES: usize = 124;
/// The one metadata context this server offers.
pub const BASE_ALLOCATION: &str = "base:allocation";
/// The id `NBD_OPT_SET_META_CONTEXT` gives `base:allocation`.
pub const BASE_ALLOCATION_ID: u32 = 1;

const CLIENT_FLAGS_BYTES: usize = 4;
const SERVER_HANDSHAKE_FLAGS: u16 = NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES;
const KNOWN_CLIENT_FLAGS: u32 = NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES;
/// Transmission flags whose features this codec implements; anything else
/// the configuration sets is not advertised.
const IMPLEMENTED_TRANSMISSION_FLAGS: u16 = NBD_FLAG_HAS_FLAGS
    | NBD_FLAG_READ_ONLY
    | NBD_FLAG_SEND_FLUSH
    | NBD_FLAG_SEND_FUA
    | NBD_FLAG_ROTATIONAL
    | NBD_FLAG_SEND_TRIM
    | NBD_FLAG_SEND_WRITE_ZEROES
    | NBD_FLAG_SEND_DF
    | NBD_FLAG_CAN_MULTI_CONN
    | NBD_FLAG_SEND_CACHE
    | NBD_FLAG_SEND_FAST_ZERO;

/// One export as the server describes it to clients.
#[derive(Clone, Debug)]
pub struct ExportInfo {
    /// Name clients select it by; the first export is also the default
    /// (empty name). Names over 4096 bytes cannot be selected.
    pub name: String,
    /// Human-readable description (`NBD_INFO_DESCRIPTION`, `NBD_REP_SERVER`).
    pub description: String,
    /// Export size in bytes.
    pub size_bytes: u64,
    /// `NBD_FLAG_*` transmission flags the server supports for this export
    /// (`NBD_FLAG_READ_ONLY` when read-only); see
    /// [`effective_transmission_flags`] for what is actually sent.
    pub transmission_flags: u16,
    /// `NBD_INFO_BLOCK_SIZE` minimum (a power of two, at most 64 KiB).
    pub block_min_bytes: u32,
    /// `NBD_INFO_BLOCK_SIZE` preferred (a power of two, at least 512 and the
    /// minimum).
    pub block_preferred_bytes: u32,
    /// `NBD_INFO_BLOCK_SIZE` maximum payload (at least the preferred size).
    pub block_max_bytes: u32,
}

/// What the handshake offers and how much it tolerates.
#[derive(Clone, Debug)]
pub struct HandshakeConfig {
    /// The exports; the first is the default export.
    pub exports: Vec<ExportInfo>,
    /// Options accepted; one more closes the connection.
    pub max_options: u32,
    /// Largest option data accepted; a longer one closes the connection.
    pub max_option_bytes: u32,
    /// Whether `NBD_OPT_STARTTLS` is offered, or required first.
    pub tls: TlsPolicy,
}

/// What the server says to TLS (`serve --tls`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TlsPolicy {
    /// `NBD_OPT_STARTTLS` is refused (`NBD_REP_ERR_POLICY`).
    #[default]
    Off,
    /// Offered; a client may also go on in plaintext.
    On,
    /// Every option but STARTTLS and ABORT gets `NBD_REP_ERR_TLS_REQD`
    /// until TLS is up, and `NBD_OPT_EXPORT_NAME` (which has no error
    /// reply) closes the connection: nothing is served in plaintext.
    Require,
}

impl HandshakeConfig {
    /// The exports with the default limits ([`DEFAULT_MAX_OPTIONS`],
    /// [`DEFAULT_MAX_OPTION_BYTES`]).
    pub fn new(exports: Vec<ExportInfo>) -> Self {
        HandshakeConfig {
            exports,
            max_options: DEFAULT_MAX_OPTIONS,
            max_option_bytes: DEFAULT_MAX_OPTION_BYTES,
            tls: TlsPolicy::Off,
        }
    }
}

/// Where the handshake is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandshakeState {
    /// Options are being exchanged; keep feeding.
    Negotiating,
    /// The client's `NBD_OPT_STARTTLS` was acknowledged: write the output,
    /// run the TLS handshake on the socket, then call
    /// [`ServerHandshake::tls_started`]; every later byte is inside TLS.
    StartTls,
    /// The handshake succeeded; every later byte belongs to the transmission
    /// phase.
    Transmission(Negotiated),
    /// The connection must be closed (after writing any pending output).
    Closed(CloseReason),
}

/// The outcome of a successful handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// Index into [`HandshakeConfig::exports`].
    pub export_index: usize,
    /// `NBD_OPT_STRUCTURED_REPLY` was acknowledged.
    pub structured_replies: bool,
    /// The client set `NBD_FLAG_C_NO_ZEROES`.
    pub no_zeroes: bool,
    /// Selected metadata contexts (id, name); ids start at 1. Empty unless
    /// `NBD_OPT_SET_META_CONTEXT` selected contexts on this export.
    pub meta_contexts: Vec<(u32, String)>,
}

impl Negotiated {
    /// The transmission-phase view [`judge`](crate::judge) needs, for the
    /// export this handshake selected.
    pub fn session(&self, export: &ExportInfo) -> Session {
        let flags = effective_transmission_flags(export, self.structured_replies);
        Session {
            size_bytes: export.size_bytes,
            read_only: flags & NBD_FLAG_READ_ONLY != 0,
            structured_replies: self.structured_replies,
            max_block_bytes: export.block_max_bytes,
            transmission_flags: flags,
            meta_contexts: self.meta_contexts.clone(),
        }
    }
}

/// Why the handshake ended without reaching transmission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum CloseReason {
    /// The client sent `NBD_OPT_ABORT` (answered with an ACK).
    #[error("client aborted the negotiation (NBD_OPT_ABORT)")]
    ClientAbort,
    /// An option did not start with `IHAVEOPT`.
    #[error("option without the IHAVEOPT magic")]
    BadMagic,
    /// The client flags had bits this server does not know.
    #[error("client flags with unknown bits")]
    BadClientFlags,
    /// An option declared more data than `max_option_bytes`.
    #[error("option data longer than the limit")]
    OptionTooLarge,
    /// More than `max_options` options.
    #[error("too many options without choosing an export")]
    TooManyOptions,
    /// `NBD_OPT_EXPORT_NAME` named no export (that option has no error reply).
    #[error("NBD_OPT_EXPORT_NAME for an unknown export")]
    UnknownExportName,
    /// A refusing handshake ([`ServerHandshake::refusing`]) got
    /// `NBD_OPT_EXPORT_NAME`, which has no error reply to carry the reason.
    #[error("connection refused (NBD_OPT_EXPORT_NAME cannot be told why)")]
    Refused,
    /// `NBD_OPT_EXPORT_NAME` before TLS on a server that requires it.
    #[error("NBD_OPT_EXPORT_NAME without TLS, which this server requires")]
    TlsRequired,
}

/// The transmission flags sent for `export`: its configured flags with
/// `NBD_FLAG_HAS_FLAGS` set, minus `NBD_FLAG_SEND_DF` when structured replies
/// were not negotiated, minus `NBD_FLAG_SEND_FAST_ZERO` when
/// `NBD_FLAG_SEND_WRITE_ZEROES` is not set, and minus flags of features this
/// codec does not implement (`RESIZE`, `EXTENDED_HEADERS`, unknown bits).
pub fn effective_transmission_flags(export: &ExportInfo, structured_replies: bool) -> u16 {
    let mut flags =
        (export.transmission_flags | NBD_FLAG_HAS_FLAGS) & IMPLEMENTED_TRANSMISSION_FLAGS;
    if !structured_replies {
        flags &= !NBD_FLAG_SEND_DF;
    }
    if flags & NBD_FLAG_SEND_WRITE_ZEROES == 0 {
        flags &= !NBD_FLAG_SEND_FAST_ZERO;
    }
    flags
}

#[derive(Clone, Copy, Debug)]
enum Phase {
    ClientFlags,
    OptionHeader,
    OptionData { option: u32 },
}

#[derive(Clone, Debug)]
struct MetaSelection {
    export_index: usize,
    contexts: Vec<(u32, String)>,
}

/// Sans-I/O server side of the handshake. The caller writes `take_output()`
/// to the socket, reads bytes and `feed`s them, until `state()` is
/// Transmission or Closed.
#[derive(Debug)]
pub struct ServerHandshake {
    config: HandshakeConfig,
    state: HandshakeState,
    phase: Phase,
    /// Bytes the current message needs in total.
    need: usize,
    /// The current message so far (`buf.len() < need` between calls).
    buf: Vec<u8>,
    out: Vec<u8>,
    options: u32,
    client_flags: u32,
    structured_replies: bool,
    meta: Option<MetaSelection>,
    /// Set by [`ServerHandshake::refusing`]: why every option is refused.
    refusal: Option<String>,
    /// TLS is up (after [`ServerHandshake::tls_started`]).
    tls_active: bool,
}

impl ServerHandshake {
    /// A new handshake; the greeting is already queued in the output.
    pub fn new(config: HandshakeConfig) -> Self {
        let mut out = Vec::with_capacity(GREETING_BYTES);
        put_u64(&mut out, NBD_INIT_PASSWD);
        put_u64(&mut out, NBD_IHAVEOPT);
        put_u16(&mut out, SERVER_HANDSHAKE_FLAGS);
        ServerHandshake {
            config,
            state: HandshakeState::Negotiating,
            phase: Phase::ClientFlags,
            need: CLIENT_FLAGS_BYTES,
            buf: Vec::new(),
            out,
            options: 0,
            client_flags: 0,
            structured_replies: false,
            meta: None,
            refusal: None,
            tls_active: false,
        }
    }

    /// The TLS handshake after `NBD_OPT_STARTTLS` succeeded: negotiation
    /// goes on inside TLS. What was negotiated before it is forgotten
    /// (proto.md: the client must not rely on it), so that nothing a
    /// plaintext attacker injected survives.
    pub fn tls_started(&mut self) {
        assert_eq!(
            self.state,
            HandshakeState::StartTls,
            "no STARTTLS was acknowledged"
        );
        self.tls_active = true;
        self.structured_replies = false;
        self.meta = None;
        self.state = HandshakeState::Negotiating;
        self.expect(Phase::OptionHeader, OPTION_HEADER_BYTES);
    }

    /// Whether TLS is up on this connection.
    pub fn tls_active(&self) -> bool {
        self.tls_active
    }

    /// A handshake that only tells the client why it cannot be served:
    /// every option gets `NBD_REP_ERR_POLICY` carrying `message` (clients
    /// show it: libnbd's "server error message"), `NBD_OPT_ABORT` its ACK,
    /// and `NBD_OPT_EXPORT_NAME`, which has no error reply, a close. For a
    /// server at its connection limit: the protocol has no error before
    /// the first option, and a bare close reads as a crash.
    pub fn refusing(config: HandshakeConfig, message: String) -> Self {
        ServerHandshake {
            refusal: Some(message),
            ..ServerHandshake::new(config)
        }
    }

    /// Consumes as much of `input` as forms complete messages; returns bytes
    /// consumed. Partial messages are buffered internally (bounded by
    /// max_option_bytes + 16).
    ///
    /// While the state stays `Negotiating` all of `input` is consumed (a
    /// trailing partial message is buffered). Once the state leaves
    /// `Negotiating`, the bytes after the message that ended negotiation are
    /// not consumed: after `Transmission` they are the first bytes of the
    /// transmission phase. Feeding in any other state consumes nothing.
    pub fn feed(&mut self, input: &[u8]) -> usize {
        let mut used = 0;
        while self.state == HandshakeState::Negotiating {
            if self.buf.len() == self.need {
                self.step();
                continue;
            }
            if used == input.len() {
                break;
            }
            let take = (self.need - self.buf.len()).min(input.len() - used);
            self.buf.extend_from_slice(&input[used..used + take]);
            used += take;
        }
        used
    }

    /// How many more bytes are needed to make progress (a hint for blocking
    /// readers; >= 1 while negotiating, 0 otherwise).
    pub fn wanted_bytes(&self) -> usize {
        match self.state {
            HandshakeState::Negotiating => self.need - self.buf.len(),
            _ => 0,
        }
    }

    /// Everything queued for the client since the last call.
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// Where the handshake is.
    pub fn state(&self) -> &HandshakeState {
        &self.state
    }

    /// The configuration this handshake serves.
    pub fn config(&self) -> &HandshakeConfig {
        &self.config
    }

    fn expect(&mut self, phase: Phase, bytes: usize) {
        self.phase = phase;
        self.need = bytes;
        self.buf = Vec::new();
    }

    fn close(&mut self, reason: CloseReason) {
        self.state = HandshakeState::Closed(reason);
        self.buf = Vec::new();
    }

    /// Processes the complete message in `buf`.
    fn step(&mut self) {
        let msg = std::mem::take(&mut self.buf);
        let mut r = Reader::new(&msg);
        match self.phase {
            Phase::ClientFlags => {
                let flags = r.u32().unwrap_or(u32::MAX);
                if flags & !KNOWN_CLIENT_FLAGS != 0 {
                    return self.close(CloseReason::BadClientFlags);
                }
                self.client_flags = flags;
                self.expect(Phase::OptionHeader, OPTION_HEADER_BYTES);
            }
            Phase::OptionHeader => {
                let magic = r.u64().unwrap_or(0);
                let option = r.u32().unwrap_or(0);
                let len = r.u32().unwrap_or(u32::MAX);
                if magic != NBD_IHAVEOPT {
                    return self.close(CloseReason::BadMagic);
                }
                if self.options >= self.config.max_options {
                    return self.close(CloseReason::TooManyOptions);
                }
                self.options += 1;
                if len > self.config.max_option_bytes {
                    return self.close(CloseReason::OptionTooLarge);
                }
                self.expect(Phase::OptionData { option }, len as usize);
            }
            Phase::OptionData { option } => {
                self.option(option, &msg);
                if self.state == HandshakeState::Negotiating {
                    self.expect(Phase::OptionHeader, OPTION_HEADER_BYTES);
                }
            }
        }
    }

    fn option(&mut self, option: u32, data: &[u8]) {
        if let Some(message) = self.refusal.take() {
            match option {
                NBD_OPT_ABORT => {
                    self.reply(option, NBD_REP_ACK, &[]);
                    self.close(CloseReason::ClientAbort);
                }
                NBD_OPT_EXPORT_NAME => self.close(CloseReason::Refused),
                _ => self.error(option, NBD_REP_ERR_POLICY, &message),
            }
            self.refusal = Some(message);
            return;
        }
        if self.config.tls == TlsPolicy::Require && !self.tls_active {
            match option {
                NBD_OPT_STARTTLS | NBD_OPT_ABORT => {}
                NBD_OPT_EXPORT_NAME => return self.close(CloseReason::TlsRequired),
                _ => {
                    return self.error(
                        option,
                        NBD_REP_ERR_TLS_REQD,
                        "this server requires TLS: upgrade with NBD_OPT_STARTTLS first",
                    )
                }
            }
        }
        match option {
            NBD_OPT_EXPORT_NAME => self.export_name(data),
            NBD_OPT_ABORT => {
                self.reply(option, NBD_REP_ACK, &[]);
                self.close(CloseReason::ClientAbort);
            }
            NBD_OPT_LIST => {
                if !data.is_empty() {
                    return self.error(option, NBD_REP_ERR_INVALID, "NBD_OPT_LIST takes no data");
                }
                for i in 0..self.config.exports.len() {
                    let e = &self.config.exports[i];
                    let name = clip(&e.name, NBD_MAX_STRING);
                    let mut payload = Vec::new();
                    put_u32(&mut payload, name.len() as u32);
                    payload.extend_from_slice(name.as_bytes());
                    payload.extend_from_slice(clip(&e.description, NBD_MAX_STRING).as_bytes());
                    self.reply(option, NBD_REP_SERVER, &payload);
                }
                self.reply(option, NBD_REP_ACK, &[]);
            }
            NBD_OPT_STARTTLS => {
                if !data.is_empty() {
                    return self.error(
                        option,
                        NBD_REP_ERR_INVALID,
                        "NBD_OPT_STARTTLS takes no data",
                    );
                }
                if self.config.tls == TlsPolicy::Off {
                    return self.error(
                        option,
                        NBD_REP_ERR_POLICY,
                        "TLS is not offered by this server (serve --tls on)",
                    );
                }
                if self.tls_active {
                    return self.error(option, NBD_REP_ERR_INVALID, "TLS is already on");
                }
                self.reply(option, NBD_REP_ACK, &[]);
                self.state = HandshakeState::StartTls;
            }
            NBD_OPT_INFO | NBD_OPT_GO => self.info_or_go(option, data),
            NBD_OPT_STRUCTURED_REPLY => {
                if !data.is_empty() {
                    return self.error(
                        option,
                        NBD_REP_ERR_INVALID,
                        "NBD_OPT_STRUCTURED_REPLY takes no data",
                    );
                }
                if self.structured_replies {
                    return self.error(
                        option,
                        NBD_REP_ERR_INVALID,
                        "structured replies are already negotiated",
                    );
                }
                self.structured_replies = true;
                self.reply(option, NBD_REP_ACK, &[]);
            }
            NBD_OPT_LIST_META_CONTEXT | NBD_OPT_SET_META_CONTEXT => self.meta_context(option, data),
            NBD_OPT_EXTENDED_HEADERS => self.error(
                option,
                NBD_REP_ERR_UNSUP,
                "extended headers are not supported",
            ),
            _ => self.error(option, NBD_REP_ERR_UNSUP, "unknown option"),
        }
    }

    fn export_name(&mut self, data: &[u8]) {
        let Some(index) = protocol_str(data).ok().and_then(|name| self.resolve(name)) else {
            return self.close(CloseReason::UnknownExportName);
        };
        let export = &self.config.exports[index];
        put_u64(&mut self.out, export.size_bytes);
        put_u16(
            &mut self.out,
            effective_transmission_flags(export, self.structured_replies),
        );
        if self.client_flags & NBD_FLAG_C_NO_ZEROES == 0 {
            self.out.extend_from_slice(&[0; EXPORT_NAME_ZEROES]);
        }
        self.enter_transmission(index);
    }

    fn info_or_go(&mut self, option: u32, data: &[u8]) {
        // 32-bit name length, name, 16-bit request count, 16-bit requests.
        let mut r = Reader::new(data);
        if data.len() < 6 {
            return self.error(
                option,
                NBD_REP_ERR_INVALID,
                "option data shorter than 6 bytes",
            );
        }
        let name_len = r.u32().unwrap_or(u32::MAX) as usize;
        if name_len > data.len() - 6 {
            return self.error(
                option,
                NBD_REP_ERR_INVALID,
                "export name length exceeds the option length",
            );
        }
        let name = r.bytes(name_len).unwrap_or_default();
        let requests = r.u16().unwrap_or(u16::MAX) as usize;
        if r.remaining() != 2 * requests {
            return self.error(
                option,
                NBD_REP_ERR_INVALID,
                "number of information requests does not match the option length",
            );
        }
        let (mut want_name, mut want_description) = (false, false);
        while let Some(info) = r.u16() {
            match info {
                NBD_INFO_NAME => want_name = true,
                NBD_INFO_DESCRIPTION => want_description = true,
                // NBD_INFO_EXPORT and NBD_INFO_BLOCK_SIZE are always sent;
                // unknown requests must be ignored.
                _ => {}
            }
        }
        let name = match protocol_str(name) {
            Ok(name) => name,
            Err(bad) => {
                let msg = format!("export name {}", bad.describe());
                return self.error(option, NBD_REP_ERR_INVALID, &msg);
            }
        };
        let Some(index) = self.resolve(name) else {
            let msg = format!("no export named {name:?}");
            return self.error(option, NBD_REP_ERR_UNKNOWN, &msg);
        };

        let export = self.config.exports[index].clone();
        let mut info = Vec::with_capacity(14);
        put_u16(&mut info, NBD_INFO_EXPORT);
        put_u64(&mut info, export.size_bytes);
        put_u16(
            &mut info,
            effective_transmission_flags(&export, self.structured_replies),
        );
        self.reply(option, NBD_REP_INFO, &info);

        info.clear();
        put_u16(&mut info, NBD_INFO_BLOCK_SIZE);
        put_u32(&mut info, export.block_min_bytes);
        put_u32(&mut info, export.block_preferred_bytes);
        put_u32(&mut info, export.block_max_bytes);
        self.reply(option, NBD_REP_INFO, &info);

        if want_name {
            info.clear();
            put_u16(&mut info, NBD_INFO_NAME);
            info.extend_from_slice(clip(&export.name, NBD_MAX_STRING).as_bytes());
            self.reply(option, NBD_REP_INFO, &info);
        }
        if want_description && !export.description.is_empty() {
            info.clear();
            put_u16(&mut info, NBD_INFO_DESCRIPTION);
            info.extend_from_slice(clip(&export.description, NBD_MAX_STRING).as_bytes());
            self.reply(option, NBD_REP_INFO, &info);
        }
        self.reply(option, NBD_REP_ACK, &[]);
        if option == NBD_OPT_GO {
            self.enter_transmission(index);
        }
    }

    fn meta_context(&mut self, option: u32, data: &[u8]) {
        let set = option == NBD_OPT_SET_META_CONTEXT;
        if set {
            // "Issuing this command replaces all previously-set metadata
            // contexts (including when this command fails)."
            self.meta = None;
            if !self.structured_replies {
                return self.error(
                    option,
                    NBD_REP_ERR_INVALID,
                    "NBD_OPT_SET_META_CONTEXT needs NBD_OPT_STRUCTURED_REPLY first",
                );
            }
        }
        let (name, queries) = match parse_meta_request(data) {
            Ok(parsed) => parsed,
            Err(msg) => return self.error(option, NBD_REP_ERR_INVALID, &msg),
        };
        let Some(index) = self.resolve(name) else {
            let msg = format!("no export named {name:?}");
            return self.error(option, NBD_REP_ERR_UNKNOWN, &msg);
        };
        // Only the base: namespace is known; queries of other namespaces are
        // ignored, as the protocol requires.
        let base_allocation = if set {
            // "base:" selects nothing in SET.
            queries.contains(&BASE_ALLOCATION)
        } else {
            queries.is_empty()
                || queries
                    .iter()
                    .any(|q| *q == "base:" || *q == BASE_ALLOCATION)
        };
        let mut contexts = Vec::new();
        if base_allocation {
            // LIST replies carry id 0 ("reserved, SHOULD be set to zero").
            let id = if set { BASE_ALLOCATION_ID } else { 0 };
            let mut payload = Vec::new();
            put_u32(&mut payload, id);
            payload.extend_from_slice(BASE_ALLOCATION.as_bytes());
            self.reply(option, NBD_REP_META_CONTEXT, &payload);
            contexts.push((BASE_ALLOCATION_ID, BASE_ALLOCATION.to_string()));
        }
        if set {
            self.meta = Some(MetaSelection {
                export_index: index,
                contexts,
            });
        }
        self.reply(option, NBD_REP_ACK, &[]);
    }

    fn enter_transmission(&mut self, export_index: usize) {
        let meta_contexts = match &self.meta {
            Some(m) if m.export_index == export_index && self.structured_replies => {
                m.contexts.clone()
            }
            _ => Vec::new(),
        };
        self.state = HandshakeState::Transmission(Negotiated {
            export_index,
            structured_replies: self.structured_replies,
            no_zeroes: self.client_flags & NBD_FLAG_C_NO_ZEROES != 0,
            meta_contexts,
        });
    }

    /// The export a client's name selects: the empty name is the default
    /// (first) export.
    fn resolve(&self, name: &str) -> Option<usize> {
        if name.is_empty() {
            return (!self.config.exports.is_empty()).then_some(0);
        }
        self.config.exports.iter().position(|e| e.name == name)
    }

    fn reply(&mut self, option: u32, kind: u32, payload: &[u8]) {
        put_u64(&mut self.out, NBD_REP_MAGIC);
        put_u32(&mut self.out, option);
        put_u32(&mut self.out, kind);
        put_u32(&mut self.out, payload.len() as u32);
        self.out.extend_from_slice(payload);
    }

    fn error(&mut self, option: u32, kind: u32, message: &str) {
        self.reply(option, kind, clip(message, NBD_MAX_STRING).as_bytes());
    }
}

/// Parses LIST/SET_META_CONTEXT data: 32-bit name length, name, 32-bit query
/// count, then per query a 32-bit length and the query. Every length must fit
/// and the queries must end exactly at the end of the data.
fn parse_meta_request(data: &[u8]) -> Result<(&str, Vec<&str>), String> {
    let mut r = Reader::new(data);
    let name_len = r
        .u32()
        .ok_or("option data too short for the export name length")?;
    let name = r
        .bytes(name_len as usize)
        .ok_or("export name length exceeds the option length")?;
    let count = r
        .u32()
        .ok_or("option data too short for the number of queries")?;
    let name = protocol_str(name).map_err(|bad| format!("export name {}", bad.describe()))?;
    let mut queries = Vec::new();
    // Each query needs at least 4 bytes, so a huge count fails within
    // data.len() / 4 rounds.
    for _ in 0..count {
        let len = r.u32().ok_or("number of queries exceeds the option data")?;
        let query = r
            .bytes(len as usize)
            .ok_or("query length exceeds the option length")?;
        let query = protocol_str(query).map_err(|bad| format!("query {}", bad.describe()))?;
        queries.push(query);
    }
    if r.remaining() != 0 {
        return Err("option data continues after the last query".to_string());
    }
    Ok((name, queries))
}
