//! Client side of the fixed-newstyle handshake, sans I/O: what platter says
//! to an NBD server that holds one of its members.
//!
//! Like the server's machine, this one never touches a socket:
//! [`ClientHandshake::take_output`] gives the bytes to send,
//! [`ClientHandshake::feed`] takes what arrived, until
//! [`ClientHandshake::state`] is no longer [`ClientState::Negotiating`].
//! `feed` takes no byte past the end of the handshake, so whatever follows
//! (a TLS handshake, transmission replies) stays with the caller.
//!
//! The sequence (proto.md, "Fixed newstyle negotiation"):
//!
//! 1. The greeting: `NBDMAGIC`, `IHAVEOPT`, handshake flags. Oldstyle
//!    servers and servers without `NBD_FLAG_FIXED_NEWSTYLE` are refused;
//!    the client flags say `NBD_FLAG_C_FIXED_NEWSTYLE`, and
//!    `NBD_FLAG_C_NO_ZEROES` when the server offers it.
//! 2. With TLS, `NBD_OPT_STARTTLS` first. On its ACK the state becomes
//!    [`ClientState::StartTls`]: the caller runs the TLS handshake on the
//!    socket and calls [`ClientHandshake::tls_started`]. The server keeps no
//!    negotiation state across the upgrade, so everything below follows it.
//!    A refusal fails the handshake: a member named `nbds://` is never
//!    spoken to in plaintext.
//! 3. `NBD_OPT_STRUCTURED_REPLY`; an error reply means simple replies.
//! 4. `NBD_OPT_GO` with `NBD_INFO_BLOCK_SIZE` requested. A server without
//!    GO (`NBD_REP_ERR_UNSUP`) gets `NBD_OPT_EXPORT_NAME`. One that has no
//!    export of that name (`NBD_REP_ERR_UNKNOWN`) is asked for its list
//!    (`NBD_OPT_LIST`), so that the error names what it does offer (or
//!    that it lists none); a refused list leaves the error as it is.
//!
//! Everything the server says is checked: the magics, the option each
//! reply echoes, reply lengths (at most [`MAX_OPTION_REPLY_BYTES`]), the
//! lengths and values of the infos. A violation ends in
//! [`ClientState::Failed`] with a [`ClientError`] saying what the server
//! did; the caller then drops the connection.

use thiserror::Error;

use crate::consts::*;
use crate::handshake::{EXPORT_NAME_ZEROES, GREETING_BYTES};
use crate::wire::{put_u16, put_u32, put_u64, Reader};

/// Largest option reply data accepted: any info, or an error message (a
/// string of at most 4096 bytes), fits many times over.
pub const MAX_OPTION_REPLY_BYTES: u32 = 64 * 1024;
/// Bytes of an option reply's header: magic, option, type, length.
const REPLY_HEADER_BYTES: usize = 20;
/// Bytes of the `NBD_OPT_EXPORT_NAME` reply before its zeroes.
const EXPORT_NAME_REPLY_BYTES: usize = 10;
/// Options a handshake sends at most (STARTTLS, STRUCTURED_REPLY, GO,
/// EXPORT_NAME): with the replies each may get, a bound on the loop.
const MAX_REPLIES: u32 = 64;
/// `NBD_REP_SERVER` replies read at most, one per export the server
/// lists: past it the list is given up (the export is unknown either way).
const MAX_LISTED: u32 = 4096;
/// Export names an unknown export's error quotes at most; the rest are
/// counted.
const LISTED_SHOWN: usize = 8;

/// What the client asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    /// The export's name (the URI's path without its leading `/`).
    pub export_name: String,
    /// Upgrade to TLS before anything else, and fail if the server will
    /// not (an `nbds://` member).
    pub tls: bool,
}

/// The server's size constraints (`NBD_INFO_BLOCK_SIZE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSize {
    pub minimum_bytes: u32,
    pub preferred_bytes: u32,
    /// The largest payload of one request; `u32::MAX` for no limit.
    pub maximum_bytes: u32,
}

/// The export, as negotiated: what transmission may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Export {
    pub size_bytes: u64,
    pub transmission_flags: u16,
    pub structured_replies: bool,
    /// `None` when the server sent none (the protocol's defaults apply:
    /// 1-byte alignment, 32 MiB payloads). An export whose size is not a
    /// multiple of the minimum (the protocol says SHOULD) is not refused:
    /// its last partial block cannot be addressed, and the member is that
    /// much shorter.
    pub block_size: Option<BlockSize>,
}

impl Export {
    /// Whether the server set transmission flag `flag` (`NBD_FLAG_*`).
    pub fn has(&self, flag: u16) -> bool {
        self.transmission_flags & flag != 0
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientState {
    Negotiating,
    /// The server accepted STARTTLS: run the TLS handshake, then call
    /// [`ClientHandshake::tls_started`].
    StartTls,
    /// Transmission may begin.
    Ready(Export),
    Failed(ClientError),
}

/// Why a handshake with a member's server failed, in the operator's terms.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ClientError {
    #[error("not an NBD server: it greeted with {0:#018x}, not NBDMAGIC")]
    NotNbd(u64),
    #[error("the server speaks only the oldstyle handshake; platter needs fixed newstyle")]
    Oldstyle,
    #[error("the server does not offer fixed newstyle negotiation")]
    NotFixedNewstyle,
    #[error("the server refused TLS ({0})")]
    TlsRefused(String),
    #[error("the server requires TLS: name the member with an nbds:// URI")]
    TlsRequired,
    #[error(
        "the server has no export named {name:?}{}{}",
        parenthesised(message),
        offers(exports.as_deref(), *unlisted)
    )]
    NoSuchExport {
        name: String,
        /// The server's own words, if it sent any.
        message: String,
        /// The exports it lists (the first eight); `None` when
        /// it would not list them.
        exports: Option<Vec<String>>,
        /// Exports it listed beyond those.
        unlisted: u32,
    },
    #[error("the server refused export {name:?}: {reply} ({message})")]
    Refused {
        name: String,
        reply: &'static str,
        message: String,
    },
    #[error("the server broke the protocol: {0}")]
    Protocol(String),
}

/// ` (MESSAGE)`, or nothing for a server that said nothing.
fn parenthesised(message: &str) -> String {
    if message.trim().is_empty() {
        String::new()
    } else {
        format!(" ({message})")
    }
}

/// What an unknown export's server offers instead, for its error.
fn offers(exports: Option<&[String]>, unlisted: u32) -> String {
    match exports {
        None => String::new(),
        Some([]) => "; it lists no exports".to_owned(),
        Some(names) => {
            let quoted: Vec<String> = names
                .iter()
                .map(|n| match n.as_str() {
                    "" => "\"\" (the default export)".to_owned(),
                    n => format!("{n:?}"),
                })
                .collect();
            let more = match unlisted {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            format!("; it offers {}{more}", quoted.join(", "))
        }
    }
}

/// What the next bytes from the server are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    Greeting,
    /// An option reply to `option`: its header, then `len` bytes of data
    /// once the header is in.
    Reply {
        option: u32,
        len: Option<usize>,
    },
    ExportNameReply,
    /// Nothing until the caller acts (STARTTLS), or ever (done, failed).
    Nothing,
}

pub struct ClientHandshake {
    config: ClientConfig,
    state: ClientState,
    expect: Expect,
    /// The message being received, never more than one.
    input: Vec<u8>,
    output: Vec<u8>,
    no_zeroes: bool,
    structured_replies: bool,
    /// `NBD_INFO_EXPORT` of the GO being answered: size, flags.
    export: Option<(u64, u16)>,
    block_size: Option<BlockSize>,
    replies: u32,
    /// The server's message refusing the export as unknown, while its
    /// list is read.
    unknown: Option<String>,
    /// Export names its list gave so far (the first [`LISTED_SHOWN`]),
    /// and how many replies it has sent.
    listed: Vec<String>,
    list_replies: u32,
}

impl ClientHandshake {
    pub fn new(config: ClientConfig) -> Self {
        ClientHandshake {
            config,
            state: ClientState::Negotiating,
            expect: Expect::Greeting,
            input: Vec::with_capacity(GREETING_BYTES),
            output: Vec::new(),
            no_zeroes: false,
            structured_replies: false,
            export: None,
            block_size: None,
            replies: 0,
            unknown: None,
            listed: Vec::new(),
            list_replies: 0,
        }
    }

    pub fn state(&self) -> &ClientState {
        &self.state
    }

    /// Bytes to write to the server now.
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.output)
    }

    /// Bytes the current message still needs (0: none is expected).
    pub fn wanted_bytes(&self) -> usize {
        if self.state != ClientState::Negotiating {
            return 0;
        }
        let total = match self.expect {
            Expect::Greeting => GREETING_BYTES,
            Expect::Reply { len, .. } => REPLY_HEADER_BYTES + len.unwrap_or(0),
            Expect::ExportNameReply => {
                EXPORT_NAME_REPLY_BYTES
                    + if self.no_zeroes {
                        0
                    } else {
                        EXPORT_NAME_ZEROES
                    }
            }
            Expect::Nothing => return 0,
        };
        total - self.input.len()
    }

    /// Takes bytes from the server; returns how many it used (it stops at
    /// the end of the handshake, or at STARTTLS's ACK).
    pub fn feed(&mut self, mut input: &[u8]) -> usize {
        let mut used = 0;
        loop {
            let want = self.wanted_bytes();
            if want == 0 || input.is_empty() {
                return used;
            }
            let n = want.min(input.len());
            self.input.extend_from_slice(&input[..n]);
            input = &input[n..];
            used += n;
            if self.wanted_bytes() == 0 {
                self.on_message();
            }
        }
    }

    /// The TLS handshake after STARTTLS succeeded: negotiate the rest over
    /// it.
    pub fn tls_started(&mut self) {
        assert_eq!(
            self.state,
            ClientState::StartTls,
            "no STARTTLS was accepted"
        );
        self.state = ClientState::Negotiating;
        self.send_option(NBD_OPT_STRUCTURED_REPLY, &[]);
    }

    fn fail(&mut self, e: ClientError) {
        self.state = ClientState::Failed(e);
        self.expect = Expect::Nothing;
        self.output.clear();
    }

    fn send_option(&mut self, option: u32, data: &[u8]) {
        put_u64(&mut self.output, NBD_IHAVEOPT);
        put_u32(&mut self.output, option);
        put_u32(&mut self.output, data.len() as u32);
        self.output.extend_from_slice(data);
        self.expect = if option == NBD_OPT_EXPORT_NAME {
            Expect::ExportNameReply
        } else {
            Expect::Reply { option, len: None }
        };
    }

    /// A whole message (or a reply's header) is in `input`.
    fn on_message(&mut self) {
        match self.expect {
            Expect::Greeting => {
                let msg = std::mem::take(&mut self.input);
                self.on_greeting(&msg);
            }
            Expect::Reply { option, len: None } => self.on_reply_header(option),
            Expect::Reply {
                option,
                len: Some(_),
            } => {
                let msg = std::mem::take(&mut self.input);
                let typ = u32::from_be_bytes(msg[12..16].try_into().expect("4 bytes"));
                self.on_reply(option, typ, &msg[REPLY_HEADER_BYTES..]);
            }
            Expect::ExportNameReply => {
                let msg = std::mem::take(&mut self.input);
                let mut r = Reader::new(&msg);
                let size_bytes = r.u64().expect("whole reply");
                let flags = r.u16().expect("whole reply");
                self.ready(size_bytes, flags, None);
            }
            Expect::Nothing => unreachable!("no message is expected"),
        }
    }

    fn on_greeting(&mut self, msg: &[u8]) {
        let mut r = Reader::new(msg);
        let magic = r.u64().expect("whole greeting");
        let second = r.u64().expect("whole greeting");
        let flags = r.u16().expect("whole greeting");
        if magic != NBD_MAGIC {
            return self.fail(ClientError::NotNbd(magic));
        }
        if second == NBD_CLISERV_MAGIC {
            return self.fail(ClientError::Oldstyle);
        }
        if second != NBD_IHAVEOPT {
            return self.fail(ClientError::Protocol(format!(
                "the greeting's second magic is {second:#018x}, not IHAVEOPT"
            )));
        }
        if flags & NBD_FLAG_FIXED_NEWSTYLE == 0 {
            return self.fail(ClientError::NotFixedNewstyle);
        }
        self.no_zeroes = flags & NBD_FLAG_NO_ZEROES != 0;
        let mut client_flags = NBD_FLAG_C_FIXED_NEWSTYLE;
        if self.no_zeroes {
            client_flags |= NBD_FLAG_C_NO_ZEROES;
        }
        put_u32(&mut self.output, client_flags);
        if self.config.tls {
            self.send_option(NBD_OPT_STARTTLS, &[]);
        } else {
            self.send_option(NBD_OPT_STRUCTURED_REPLY, &[]);
        }
    }

    fn on_reply_header(&mut self, option: u32) {
        let mut r = Reader::new(&self.input);
        let magic = r.u64().expect("whole header");
        let echoed = r.u32().expect("whole header");
        let _typ = r.u32().expect("whole header");
        let len = r.u32().expect("whole header");
        // A list's replies, one per export, are bounded on their own.
        if option == NBD_OPT_LIST {
            self.list_replies += 1;
        } else {
            self.replies += 1;
        }
        if self.list_replies > MAX_LISTED {
            return self.no_such_export(None);
        }
        let e = if magic != NBD_REP_MAGIC {
            Some(format!("an option reply's magic is {magic:#018x}"))
        } else if echoed != option {
            Some(format!(
                "the reply to {} names option {}",
                option_name(option),
                option_name(echoed)
            ))
        } else if len > MAX_OPTION_REPLY_BYTES {
            Some(format!(
                "a reply to {} of {len} bytes (at most {MAX_OPTION_REPLY_BYTES})",
                option_name(option)
            ))
        } else if self.replies > MAX_REPLIES {
            Some(format!("more than {MAX_REPLIES} option replies"))
        } else {
            None
        };
        if let Some(e) = e {
            return self.fail(ClientError::Protocol(e));
        }
        self.expect = Expect::Reply {
            option,
            len: Some(len as usize),
        };
        if len == 0 {
            self.on_message();
        }
    }

    fn on_reply(&mut self, option: u32, typ: u32, data: &[u8]) {
        let message =
            || String::from_utf8_lossy(&data[..data.len().min(NBD_MAX_STRING)]).into_owned();
        if typ & NBD_REP_FLAG_ERROR == 0
            && typ != NBD_REP_ACK
            && !(typ == NBD_REP_INFO && option == NBD_OPT_GO)
            && !(typ == NBD_REP_SERVER && option == NBD_OPT_LIST)
        {
            return self.fail(ClientError::Protocol(format!(
                "reply type {typ} to {}",
                option_name(option)
            )));
        }
        if typ == NBD_REP_ACK && !data.is_empty() {
            return self.fail(ClientError::Protocol(format!(
                "an ACK to {} with {} bytes of data",
                option_name(option),
                data.len()
            )));
        }
        match option {
            NBD_OPT_STARTTLS if typ == NBD_REP_ACK => {
                self.state = ClientState::StartTls;
                self.expect = Expect::Nothing;
            }
            NBD_OPT_STARTTLS => self.fail(ClientError::TlsRefused(format!(
                "{}: {}",
                reply_name(typ),
                message()
            ))),
            NBD_OPT_STRUCTURED_REPLY => {
                if typ == NBD_REP_ERR_TLS_REQD {
                    return self.fail(ClientError::TlsRequired);
                }
                self.structured_replies = typ == NBD_REP_ACK;
                let go = go_data(&self.config.export_name);
                self.send_option(NBD_OPT_GO, &go);
            }
            NBD_OPT_GO => self.on_go_reply(typ, data, message),
            NBD_OPT_LIST => self.on_list_reply(typ, data),
            _ => unreachable!("no other option is sent"),
        }
    }

    /// A reply to the `NBD_OPT_LIST` sent after the export was unknown:
    /// an export's name, or the end of the list; an error (the server
    /// will not list) or a malformed name gives up the list, and the
    /// handshake fails for the unknown export either way.
    fn on_list_reply(&mut self, typ: u32, data: &[u8]) {
        match typ {
            NBD_REP_SERVER => {
                let mut r = Reader::new(data);
                let name = r.u32().and_then(|len| r.bytes(usize::try_from(len).ok()?));
                let Some(name) = name else {
                    return self.no_such_export(None);
                };
                if self.listed.len() < LISTED_SHOWN {
                    let name = &name[..name.len().min(NBD_MAX_STRING)];
                    self.listed.push(String::from_utf8_lossy(name).into_owned());
                }
                self.expect = Expect::Reply {
                    option: NBD_OPT_LIST,
                    len: None,
                };
            }
            NBD_REP_ACK => {
                let names = std::mem::take(&mut self.listed);
                self.no_such_export(Some(names));
            }
            _ => self.no_such_export(None),
        }
    }

    /// Fails for the export the server does not have, with what it lists.
    fn no_such_export(&mut self, exports: Option<Vec<String>>) {
        // Every SERVER reply but the ACK, past those quoted.
        let unlisted = match &exports {
            Some(names) => {
                (self.list_replies.saturating_sub(1) as usize).saturating_sub(names.len()) as u32
            }
            None => 0,
        };
        let e = ClientError::NoSuchExport {
            name: self.config.export_name.clone(),
            message: self.unknown.take().unwrap_or_default(),
            exports,
            unlisted,
        };
        self.fail(e);
    }

    fn on_go_reply(&mut self, typ: u32, data: &[u8], message: impl Fn() -> String) {
        let name = self.config.export_name.clone();
        match typ {
            NBD_REP_INFO => {
                if let Err(e) = self.on_info(data) {
                    self.fail(ClientError::Protocol(e));
                } else {
                    self.expect = Expect::Reply {
                        option: NBD_OPT_GO,
                        len: None,
                    };
                }
            }
            NBD_REP_ACK => match self.export {
                Some((size_bytes, flags)) => self.ready(size_bytes, flags, self.block_size),
                None => self.fail(ClientError::Protocol(
                    "GO was acknowledged without NBD_INFO_EXPORT".into(),
                )),
            },
            NBD_REP_ERR_UNSUP => {
                // A server from before GO: the export's name is the whole
                // option, and the reply is the export itself.
                self.export = None;
                self.block_size = None;
                self.send_option(NBD_OPT_EXPORT_NAME, name.as_bytes());
            }
            NBD_REP_ERR_TLS_REQD => self.fail(ClientError::TlsRequired),
            NBD_REP_ERR_UNKNOWN => {
                // Ask what it has, for the error (`on_list_reply`).
                self.unknown = Some(message());
                self.send_option(NBD_OPT_LIST, &[]);
            }
            _ => self.fail(ClientError::Refused {
                name,
                reply: reply_name(typ),
                message: message(),
            }),
        }
    }

    fn on_info(&mut self, data: &[u8]) -> Result<(), String> {
        let mut r = Reader::new(data);
        let info = r.u16().ok_or("an NBD_REP_INFO shorter than its type")?;
        match info {
            NBD_INFO_EXPORT => {
                if data.len() != 12 {
                    return Err(format!("NBD_INFO_EXPORT of {} bytes, not 12", data.len()));
                }
                let size = r.u64().expect("checked length");
                let flags = r.u16().expect("checked length");
                self.export = Some((size, flags));
            }
            NBD_INFO_BLOCK_SIZE => {
                if data.len() != 14 {
                    return Err(format!(
                        "NBD_INFO_BLOCK_SIZE of {} bytes, not 14",
                        data.len()
                    ));
                }
                let b = BlockSize {
                    minimum_bytes: r.u32().expect("checked length"),
                    preferred_bytes: r.u32().expect("checked length"),
                    maximum_bytes: r.u32().expect("checked length"),
                };
                check_block_size(b)?;
                self.block_size = Some(b);
            }
            // Name, description, and types from later revisions: not
            // asked for, and harmless.
            _ => {}
        }
        Ok(())
    }

    fn ready(&mut self, size_bytes: u64, flags: u16, block_size: Option<BlockSize>) {
        if flags & NBD_FLAG_HAS_FLAGS == 0 {
            return self.fail(ClientError::Protocol(format!(
                "transmission flags {flags:#06x} without NBD_FLAG_HAS_FLAGS"
            )));
        }
        self.expect = Expect::Nothing;
        self.state = ClientState::Ready(Export {
            size_bytes,
            transmission_flags: flags,
            structured_replies: self.structured_replies,
            block_size,
        });
    }
}

/// `NBD_OPT_GO`'s data: the name, and one info request (block sizes).
fn go_data(name: &str) -> Vec<u8> {
    let mut d = Vec::with_capacity(8 + name.len());
    put_u32(&mut d, name.len() as u32);
    d.extend_from_slice(name.as_bytes());
    put_u16(&mut d, 1);
    put_u16(&mut d, NBD_INFO_BLOCK_SIZE);
    d
}

/// The protocol's rules for advertised sizes (proto.md, "Size
/// constraints") where they decide what a request may be: the minimum (the
/// alignment) and the maximum payload. The preferred size is a hint; one
/// that breaks the rules (our own server's tests advertise 192 KiB) costs
/// nothing, so it does not refuse a server.
fn check_block_size(b: BlockSize) -> Result<(), String> {
    let BlockSize {
        minimum_bytes: min,
        maximum_bytes: max,
        ..
    } = b;
    if !min.is_power_of_two() || min > 1 << 16 {
        return Err(format!("a minimum block size of {min}"));
    }
    if max < min {
        return Err(format!(
            "a maximum payload of {max} below the minimum block size {min}"
        ));
    }
    Ok(())
}

/// An option reply type's name.
fn reply_name(typ: u32) -> &'static str {
    match typ {
        NBD_REP_ACK => "NBD_REP_ACK",
        NBD_REP_SERVER => "NBD_REP_SERVER",
        NBD_REP_INFO => "NBD_REP_INFO",
        NBD_REP_META_CONTEXT => "NBD_REP_META_CONTEXT",
        NBD_REP_ERR_UNSUP => "NBD_REP_ERR_UNSUP",
        NBD_REP_ERR_POLICY => "NBD_REP_ERR_POLICY",
        NBD_REP_ERR_INVALID => "NBD_REP_ERR_INVALID",
        NBD_REP_ERR_PLATFORM => "NBD_REP_ERR_PLATFORM",
        NBD_REP_ERR_TLS_REQD => "NBD_REP_ERR_TLS_REQD",
        NBD_REP_ERR_UNKNOWN => "NBD_REP_ERR_UNKNOWN",
        NBD_REP_ERR_SHUTDOWN => "NBD_REP_ERR_SHUTDOWN",
        NBD_REP_ERR_BLOCK_SIZE_REQD => "NBD_REP_ERR_BLOCK_SIZE_REQD",
        NBD_REP_ERR_TOO_BIG => "NBD_REP_ERR_TOO_BIG",
        NBD_REP_ERR_EXT_HEADER_REQD => "NBD_REP_ERR_EXT_HEADER_REQD",
        t if t & NBD_REP_FLAG_ERROR != 0 => "an unknown error reply",
        _ => "an unknown reply",
    }
}
