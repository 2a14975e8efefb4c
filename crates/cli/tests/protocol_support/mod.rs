//! A deliberately small NBD client over a Unix socket, written from
//! `doc/proto.md` of the NetworkBlockDevice/nbd repository, plus a fixture
//! that runs `platter serve` and keeps a well-behaved "witness" connection
//! open beside whatever a test does.
//!
//! The client is raw on purpose: it can send anything (bad magic, lengths
//! that lie, half a payload) and it reads every reply with a timeout, so a
//! server that hangs fails the test instead of hanging it.

// Shared by several test binaries, each of which uses part of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use platter_testkit::serve::ServeProcess;
use tempfile::TempDir;

// ---------------------------------------------------------------------------
// Protocol numbers (proto.md "Values"); written out here so the test does
// not trust the codec it tests.
// ---------------------------------------------------------------------------

pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
pub const REP_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

pub const FLAG_FIXED_NEWSTYLE: u16 = 1;
pub const FLAG_NO_ZEROES: u16 = 2;
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1;
pub const FLAG_C_NO_ZEROES: u32 = 2;

pub const TF_HAS_FLAGS: u16 = 1 << 0;
pub const TF_READ_ONLY: u16 = 1 << 1;
pub const TF_SEND_FLUSH: u16 = 1 << 2;
pub const TF_SEND_FUA: u16 = 1 << 3;
pub const TF_SEND_TRIM: u16 = 1 << 5;
pub const TF_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const TF_SEND_DF: u16 = 1 << 7;
pub const TF_SEND_FAST_ZERO: u16 = 1 << 11;

pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_SET_META_CONTEXT: u32 = 10;

pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
pub const REP_ERR_UNSUP: u32 = (1 << 31) | 1;
pub const REP_ERR_POLICY: u32 = (1 << 31) | 2;
pub const REP_ERR_INVALID: u32 = (1 << 31) | 3;
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) | 6;
pub const REP_ERR_TOO_BIG: u32 = (1 << 31) | 9;

pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;

pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;

pub const REPLY_FLAG_DONE: u16 = 1;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) | 1;
pub const REPLY_TYPE_ERROR_OFFSET: u16 = (1 << 15) | 2;

pub const EPERM: u32 = 1;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;
pub const ESHUTDOWN: u32 = 108;

pub const MIB: u64 = 1 << 20;
/// The maximum payload the server advertises (DESIGN.md, "NBD export").
pub const MAX_PAYLOAD: u64 = 32 * MIB;
/// How long any single read from the server may take before the test calls
/// the server hung.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The export every fixture serves.
pub const EXPORT: &str = "faults";

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes(b[..2].try_into().unwrap())
}
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().unwrap())
}
fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().unwrap())
}

/// Bytes a pseudo-random generator makes from `seed` (xorshift64*), so that
/// every write is distinguishable from every other.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A small deterministic random number generator for the tests.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 17
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

// ---------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------

/// How a read from the server ended when it did not deliver every byte.
#[derive(Debug)]
pub enum End {
    /// The server closed the connection (orderly EOF or a reset).
    Closed { got: usize },
    /// Nothing arrived within [`TIMEOUT`]: the server hangs.
    Timeout { got: usize },
}

/// One option reply (fixed newstyle).
#[derive(Debug, Clone)]
pub struct OptReply {
    pub option: u32,
    pub kind: u32,
    pub data: Vec<u8>,
}

/// What `NBD_OPT_INFO` / `NBD_OPT_GO` told about the export.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Export {
    pub size: u64,
    pub flags: u16,
    /// (minimum, preferred, maximum), if sent.
    pub block: Option<(u32, u32, u32)>,
    pub name: Option<String>,
    pub description: Option<String>,
}

/// How a test connection negotiates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Simple replies only.
    Simple,
    /// `NBD_OPT_STRUCTURED_REPLY`.
    Structured,
    /// Structured replies and `base:allocation`.
    Meta,
}

impl Mode {
    pub const BOTH: [Mode; 2] = [Mode::Simple, Mode::Structured];
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    kind: u16,
    offset: u64,
    len: u32,
}

/// One complete answer to one request.
#[derive(Debug, Default)]
pub struct Reply {
    pub cookie: u64,
    /// Every error the reply carried (simple: at most one).
    pub errors: Vec<u32>,
    /// Read data, reassembled over the request's range (holes as zeros).
    pub data: Vec<u8>,
    /// Bytes of the read range covered by data or hole chunks.
    pub covered: u64,
    /// `(context id, [(length, flags)])` per block status chunk.
    pub block_status: Vec<(u32, Vec<(u32, u32)>)>,
    /// Whether it came as structured chunks.
    pub structured: bool,
}

impl Reply {
    /// The single error, or 0.
    pub fn errno(&self) -> u32 {
        assert!(
            self.errors.len() <= 1,
            "cookie {}: several errors {:?}",
            self.cookie,
            self.errors
        );
        self.errors.first().copied().unwrap_or(0)
    }
}

#[derive(Default)]
struct Partial {
    reply: Reply,
}

pub struct Client {
    s: UnixStream,
    pub structured: bool,
    pending: HashMap<u64, Pending>,
    partial: HashMap<u64, Partial>,
    next_cookie: u64,
    pub export: Export,
}

impl Client {
    /// Connects; every read and write on the socket has [`TIMEOUT`].
    pub fn connect(path: &Path) -> Client {
        let s = UnixStream::connect(path)
            .unwrap_or_else(|e| panic!("connect to {}: {e}", path.display()));
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        s.set_write_timeout(Some(TIMEOUT)).unwrap();
        Client {
            s,
            structured: false,
            pending: HashMap::new(),
            partial: HashMap::new(),
            next_cookie: 0x1000,
            export: Export::default(),
        }
    }

    /// Connects and negotiates `mode`, then `NBD_OPT_GO` with every
    /// information request; panics unless transmission starts.
    pub fn open(path: &Path, mode: Mode) -> Client {
        Client::open_export(path, mode, EXPORT)
    }

    /// [`Client::open`] of the export named `name` (`""`: the default
    /// export, the only one a `platter serve` has, whatever its name).
    pub fn open_export(path: &Path, mode: Mode, name: &str) -> Client {
        Client::try_open_export(path, mode, name).unwrap_or_else(|| {
            panic!("the server closed the connection instead of greeting (refused?)")
        })
    }

    /// [`Client::open`], but `None` if the server refuses the connection:
    /// answers its options with `NBD_REP_ERR_POLICY` (over the connection
    /// limit), or closes it before its greeting.
    pub fn try_open(path: &Path, mode: Mode) -> Option<Client> {
        Client::try_open_export(path, mode, EXPORT)
    }

    /// [`Client::try_open`] of the export named `name`.
    pub fn try_open_export(path: &Path, mode: Mode, name: &str) -> Option<Client> {
        let mut c = Client::connect(path);
        let mut g = [0u8; 18];
        match c.fill(&mut g) {
            Ok(()) => {}
            Err(End::Closed { got: 0 }) => return None,
            Err(e) => panic!("greeting: {e:?}"),
        }
        let hflags = Client::check_greeting(&g);
        assert_ne!(
            hflags & FLAG_FIXED_NEWSTYLE,
            0,
            "server is not fixed newstyle"
        );
        c.client_flags(FLAG_C_FIXED_NEWSTYLE | (u32::from(hflags & FLAG_NO_ZEROES)));
        if mode != Mode::Simple {
            match c.structured_reply(&[]) {
                REP_ERR_POLICY => return None,
                r => assert_eq!(r, REP_ACK, "NBD_OPT_STRUCTURED_REPLY"),
            }
        }
        if mode == Mode::Meta {
            let ctx = c
                .set_meta_context(name, &["base:allocation"])
                .unwrap_or_else(|e| panic!("SET_META_CONTEXT refused: {e:#x}"));
            assert_eq!(ctx.len(), 1, "one context for base:allocation: {ctx:?}");
            assert_eq!(ctx[0].1, "base:allocation");
        }
        let infos = [INFO_EXPORT, INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE];
        match c.go(name, &infos) {
            Ok(_) => Some(c),
            Err(REP_ERR_POLICY) => None,
            Err(e) => panic!("NBD_OPT_GO refused: {e:#x}"),
        }
    }

    // --- bytes -------------------------------------------------------------

    /// Sends bytes; `Err` if the server has gone (or stopped reading for
    /// [`TIMEOUT`]).
    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.s.write_all(bytes)
    }

    /// Sends bytes that must be taken.
    pub fn put(&mut self, bytes: &[u8]) {
        self.send(bytes)
            .unwrap_or_else(|e| panic!("send {} bytes: {e}", bytes.len()));
    }

    /// Fills `buf`, or says why not.
    pub fn fill(&mut self, buf: &mut [u8]) -> Result<(), End> {
        let mut got = 0;
        while got < buf.len() {
            match self.s.read(&mut buf[got..]) {
                Ok(0) => return Err(End::Closed { got }),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut =>
                {
                    return Err(End::Timeout { got })
                }
                Err(_) => return Err(End::Closed { got }),
            }
        }
        Ok(())
    }

    /// Reads exactly `n` bytes; panics if the server closes or hangs.
    pub fn take(&mut self, n: usize, what: &str) -> Vec<u8> {
        let mut buf = vec![0u8; n];
        match self.fill(&mut buf) {
            Ok(()) => buf,
            Err(End::Closed { got }) => {
                panic!("{what}: server closed the connection after {got} of {n} bytes")
            }
            Err(End::Timeout { got }) => panic!(
                "{what}: server hung: {got} of {n} bytes in {} s",
                TIMEOUT.as_secs()
            ),
        }
    }

    /// Reads until the server closes; returns what came before the end.
    /// Panics if the server neither closes nor sends within [`TIMEOUT`], or
    /// sends more than `limit` bytes.
    pub fn until_closed(&mut self, limit: usize, what: &str) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match self.s.read(&mut buf) {
                Ok(0) => return out,
                Ok(n) => {
                    out.extend_from_slice(&buf[..n]);
                    assert!(
                        out.len() <= limit,
                        "{what}: server sent more than {limit} bytes instead of closing"
                    );
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut =>
                {
                    panic!(
                        "{what}: server hung: neither closed nor answered in {} s (got {} bytes)",
                        TIMEOUT.as_secs(),
                        out.len()
                    )
                }
                // A reset is a close too.
                Err(_) => return out,
            }
        }
    }

    /// Asserts the server closes the connection without sending anything.
    pub fn expect_closed(&mut self, what: &str) {
        let got = self.until_closed(1 << 20, what);
        assert!(
            got.is_empty(),
            "{what}: want a plain disconnect, got {} bytes first: {:02x?}",
            got.len(),
            &got[..got.len().min(64)]
        );
    }

    // --- handshake ---------------------------------------------------------

    /// Reads `NBDMAGIC`, `IHAVEOPT` and the handshake flags.
    pub fn greeting(&mut self) -> u16 {
        let g = self.take(18, "greeting");
        Client::check_greeting(&g)
    }

    fn check_greeting(g: &[u8]) -> u16 {
        assert_eq!(be64(g), NBDMAGIC, "greeting: NBDMAGIC");
        assert_eq!(
            be64(&g[8..]),
            IHAVEOPT,
            "greeting: IHAVEOPT (fixed newstyle)"
        );
        let flags = be16(&g[16..]);
        assert_eq!(
            flags & !(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES),
            0,
            "greeting: unknown handshake flags {flags:#x}"
        );
        flags
    }

    pub fn client_flags(&mut self, flags: u32) {
        self.put(&flags.to_be_bytes());
    }

    /// An option header with an arbitrary magic and declared length, and
    /// only `data` after it.
    pub fn raw_option(&mut self, magic: u64, option: u32, declared: u32, data: &[u8]) {
        let mut m = Vec::with_capacity(16 + data.len());
        m.extend_from_slice(&magic.to_be_bytes());
        m.extend_from_slice(&option.to_be_bytes());
        m.extend_from_slice(&declared.to_be_bytes());
        m.extend_from_slice(data);
        self.put(&m);
    }

    pub fn option(&mut self, option: u32, data: &[u8]) {
        self.raw_option(IHAVEOPT, option, data.len() as u32, data);
    }

    /// Reads one option reply; panics on a bad magic.
    pub fn option_reply(&mut self, what: &str) -> OptReply {
        let h = self.take(20, what);
        assert_eq!(be64(&h), REP_MAGIC, "{what}: option reply magic");
        let len = be32(&h[16..]) as usize;
        assert!(len <= 1 << 20, "{what}: option reply of {len} bytes");
        OptReply {
            option: be32(&h[8..]),
            kind: be32(&h[12..]),
            data: self.take(len, what),
        }
    }

    /// Like [`Client::option_reply`] but `None` if the server closed first.
    pub fn option_reply_or_close(&mut self, what: &str) -> Option<OptReply> {
        let mut h = [0u8; 20];
        match self.fill(&mut h) {
            Ok(()) => {}
            Err(End::Closed { got: 0 }) => return None,
            Err(e) => panic!("{what}: {e:?} in an option reply header"),
        }
        assert_eq!(be64(&h), REP_MAGIC, "{what}: option reply magic");
        let len = be32(&h[16..]) as usize;
        assert!(len <= 1 << 20, "{what}: option reply of {len} bytes");
        Some(OptReply {
            option: be32(&h[8..]),
            kind: be32(&h[12..]),
            data: self.take(len, what),
        })
    }

    /// Sends `NBD_OPT_STRUCTURED_REPLY` (with `payload`, normally empty) and
    /// returns the reply type.
    pub fn structured_reply(&mut self, payload: &[u8]) -> u32 {
        self.option(OPT_STRUCTURED_REPLY, payload);
        let r = self.option_reply("STRUCTURED_REPLY");
        assert_eq!(r.option, OPT_STRUCTURED_REPLY);
        if r.kind == REP_ACK {
            assert!(r.data.is_empty(), "ACK with data");
            self.structured = true;
        }
        r.kind
    }

    /// `NBD_OPT_SET_META_CONTEXT`: the contexts, or the error reply type.
    pub fn set_meta_context(
        &mut self,
        name: &str,
        queries: &[&str],
    ) -> Result<Vec<(u32, String)>, u32> {
        let mut d = Vec::new();
        d.extend_from_slice(&(name.len() as u32).to_be_bytes());
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
        for q in queries {
            d.extend_from_slice(&(q.len() as u32).to_be_bytes());
            d.extend_from_slice(q.as_bytes());
        }
        self.option(OPT_SET_META_CONTEXT, &d);
        let mut out = Vec::new();
        loop {
            let r = self.option_reply("SET_META_CONTEXT");
            assert_eq!(r.option, OPT_SET_META_CONTEXT, "reply names the option");
            match r.kind {
                REP_META_CONTEXT => {
                    assert!(r.data.len() > 4, "META_CONTEXT reply too short");
                    let name = String::from_utf8(r.data[4..].to_vec()).expect("UTF-8 name");
                    out.push((be32(&r.data), name));
                }
                REP_ACK => return Ok(out),
                k if k & (1 << 31) != 0 => return Err(k),
                k => panic!("SET_META_CONTEXT: unexpected reply type {k:#x}"),
            }
        }
    }

    fn info_request(name: &str, infos: &[u16]) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend_from_slice(&(name.len() as u32).to_be_bytes());
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
        for i in infos {
            d.extend_from_slice(&i.to_be_bytes());
        }
        d
    }

    /// Sends `NBD_OPT_INFO` or `NBD_OPT_GO` and reads the replies: the
    /// export, or the final error type. Checks every info reply's length.
    pub fn info_or_go(&mut self, option: u32, name: &str, infos: &[u16]) -> Result<Export, u32> {
        self.option(option, &Client::info_request(name, infos));
        let mut e = Export::default();
        let mut have_export = false;
        loop {
            let r = self.option_reply("INFO/GO");
            assert_eq!(r.option, option, "reply names the option");
            match r.kind {
                REP_INFO => {
                    assert!(r.data.len() >= 2, "REP_INFO too short");
                    let d = &r.data;
                    match be16(d) {
                        INFO_EXPORT => {
                            assert_eq!(d.len(), 12, "NBD_INFO_EXPORT length");
                            e.size = be64(&d[2..]);
                            e.flags = be16(&d[10..]);
                            have_export = true;
                        }
                        INFO_NAME => {
                            e.name = Some(String::from_utf8(d[2..].to_vec()).expect("UTF-8"))
                        }
                        INFO_DESCRIPTION => {
                            e.description = Some(String::from_utf8(d[2..].to_vec()).expect("UTF-8"))
                        }
                        INFO_BLOCK_SIZE => {
                            assert_eq!(d.len(), 14, "NBD_INFO_BLOCK_SIZE length");
                            e.block = Some((be32(&d[2..]), be32(&d[6..]), be32(&d[10..])));
                        }
                        _ => {} // MUST be ignored
                    }
                }
                REP_ACK => {
                    assert!(have_export, "ACK without NBD_INFO_EXPORT");
                    if option == OPT_GO {
                        self.export = e.clone();
                    }
                    return Ok(e);
                }
                k if k & (1 << 31) != 0 => return Err(k),
                k => panic!("INFO/GO: unexpected reply type {k:#x}"),
            }
        }
    }

    pub fn go(&mut self, name: &str, infos: &[u16]) -> Result<Export, u32> {
        self.info_or_go(OPT_GO, name, infos)
    }

    pub fn info(&mut self, name: &str, infos: &[u16]) -> Result<Export, u32> {
        self.info_or_go(OPT_INFO, name, infos)
    }

    /// `NBD_OPT_LIST`: the export names, or the error type. `None` if the
    /// server closed the connection instead of answering.
    pub fn list(&mut self) -> Option<Result<Vec<String>, u32>> {
        if self
            .send(&{
                let mut m = IHAVEOPT.to_be_bytes().to_vec();
                m.extend_from_slice(&OPT_LIST.to_be_bytes());
                m.extend_from_slice(&0u32.to_be_bytes());
                m
            })
            .is_err()
        {
            return None;
        }
        let mut names = Vec::new();
        loop {
            let r = self.option_reply_or_close("LIST")?;
            assert_eq!(r.option, OPT_LIST, "reply names the option");
            match r.kind {
                REP_SERVER => {
                    assert!(r.data.len() >= 4, "REP_SERVER too short");
                    let n = be32(&r.data) as usize;
                    assert!(n <= r.data.len() - 4, "REP_SERVER name length");
                    names.push(String::from_utf8(r.data[4..4 + n].to_vec()).expect("UTF-8"));
                }
                REP_ACK => return Some(Ok(names)),
                k if k & (1 << 31) != 0 => return Some(Err(k)),
                k => panic!("LIST: unexpected reply type {k:#x}"),
            }
        }
    }

    // --- transmission ------------------------------------------------------

    pub fn cookie(&mut self) -> u64 {
        self.next_cookie += 1;
        self.next_cookie
    }

    /// A request header with anything in it.
    pub fn header(
        magic: u32,
        flags: u16,
        kind: u16,
        cookie: u64,
        offset: u64,
        len: u32,
    ) -> Vec<u8> {
        let mut m = Vec::with_capacity(28);
        m.extend_from_slice(&magic.to_be_bytes());
        m.extend_from_slice(&flags.to_be_bytes());
        m.extend_from_slice(&kind.to_be_bytes());
        m.extend_from_slice(&cookie.to_be_bytes());
        m.extend_from_slice(&offset.to_be_bytes());
        m.extend_from_slice(&len.to_be_bytes());
        m
    }

    /// Sends one request (and `payload` after it, which need not match
    /// `len`), remembering what a reply to it looks like. Returns the cookie.
    pub fn request(&mut self, flags: u16, kind: u16, offset: u64, len: u32, payload: &[u8]) -> u64 {
        let cookie = self.cookie();
        let mut m = Client::header(REQUEST_MAGIC, flags, kind, cookie, offset, len);
        m.extend_from_slice(payload);
        self.put(&m);
        self.pending.insert(cookie, Pending { kind, offset, len });
        cookie
    }

    /// [`Client::request`], but a server that has gone (or stopped reading
    /// for [`TIMEOUT`]) is an `Err`, not a panic; the request is then not
    /// expected to be answered.
    pub fn try_request(
        &mut self,
        flags: u16,
        kind: u16,
        offset: u64,
        len: u32,
        payload: &[u8],
    ) -> io::Result<u64> {
        let cookie = self.cookie();
        let mut m = Client::header(REQUEST_MAGIC, flags, kind, cookie, offset, len);
        m.extend_from_slice(payload);
        self.send(&m)?;
        self.pending.insert(cookie, Pending { kind, offset, len });
        Ok(cookie)
    }

    /// Sends several requests (kind, offset, len, payload) in one write, as
    /// a client at depth does; returns their cookies.
    pub fn burst(&mut self, requests: &[(u16, u64, u32, &[u8])]) -> Vec<u64> {
        let mut m = Vec::new();
        let mut cookies = Vec::with_capacity(requests.len());
        for &(kind, offset, len, payload) in requests {
            let cookie = self.cookie();
            m.extend_from_slice(&Client::header(REQUEST_MAGIC, 0, kind, cookie, offset, len));
            m.extend_from_slice(payload);
            self.pending.insert(cookie, Pending { kind, offset, len });
            cookies.push(cookie);
        }
        self.put(&m);
        cookies
    }

    /// Reads the next complete reply (chunks of other replies in between are
    /// kept for later). Every chunk is checked against proto.md. Panics if
    /// the server closes or hangs.
    pub fn reply(&mut self) -> Reply {
        self.try_reply().unwrap_or_else(|e| match e {
            End::Closed { got } => {
                panic!("reply: server closed the connection ({got} bytes into a reply's message)")
            }
            End::Timeout { got } => panic!(
                "reply: server hung: nothing more in {} s ({got} bytes into a reply's message)",
                TIMEOUT.as_secs()
            ),
        })
    }

    /// Reads exactly `n` bytes, or says why not.
    fn get(&mut self, n: usize) -> Result<Vec<u8>, End> {
        let mut buf = vec![0u8; n];
        self.fill(&mut buf).map(|()| buf)
    }

    /// [`Client::reply`], but the end of the connection is an answer too:
    /// `Err(End::Closed { got: 0 })` when the server closed between
    /// messages (with simple replies, between replies), `Err(End::Closed
    /// { got })` with `got > 0` when it closed inside one, `Err(End::Timeout
    /// { .. })` when nothing came for [`TIMEOUT`].
    pub fn try_reply(&mut self) -> Result<Reply, End> {
        // Inside a message, a close is counted as one byte in at least.
        let inside = |e: End| match e {
            End::Closed { got } => End::Closed { got: got.max(1) },
            e => e,
        };
        loop {
            // Between chunks of a structured reply is inside a message too.
            let mid_reply = !self.partial.is_empty();
            let h = self
                .get(4)
                .map_err(|e| if mid_reply { inside(e) } else { e })?;
            match be32(&h) {
                SIMPLE_REPLY_MAGIC => {
                    let rest = self.get(12).map_err(inside)?;
                    let (errno, cookie) = (be32(&rest), be64(&rest[4..]));
                    let p = self.pending.remove(&cookie).unwrap_or_else(|| {
                        panic!("simple reply for unknown cookie {cookie:#x} (errno {errno})")
                    });
                    if self.structured {
                        assert_ne!(
                            p.kind, CMD_READ,
                            "simple reply to NBD_CMD_READ after structured replies were negotiated"
                        );
                    }
                    let mut r = Reply {
                        cookie,
                        ..Reply::default()
                    };
                    if errno != 0 {
                        r.errors.push(errno);
                    } else if p.kind == CMD_READ {
                        r.data = self.get(p.len as usize).map_err(inside)?;
                        r.covered = u64::from(p.len);
                    }
                    return Ok(r);
                }
                STRUCTURED_REPLY_MAGIC => {
                    assert!(
                        self.structured,
                        "structured reply chunk without negotiation"
                    );
                    let rest = self.get(16).map_err(inside)?;
                    let (flags, kind) = (be16(&rest), be16(&rest[2..]));
                    let cookie = be64(&rest[4..]);
                    let len = be32(&rest[12..]) as usize;
                    assert!(
                        len as u64 <= MAX_PAYLOAD + 64,
                        "structured chunk of {len} bytes"
                    );
                    let payload = self.get(len).map_err(inside)?;
                    let p = *self.pending.get(&cookie).unwrap_or_else(|| {
                        panic!("structured chunk for unknown cookie {cookie:#x}")
                    });
                    let part = self.partial.entry(cookie).or_default();
                    let r = &mut part.reply;
                    r.cookie = cookie;
                    r.structured = true;
                    if p.kind == CMD_READ && r.data.len() != p.len as usize {
                        r.data = vec![0u8; p.len as usize];
                    }
                    let in_range = |off: u64, n: u64| {
                        off >= p.offset && off + n <= p.offset + u64::from(p.len)
                    };
                    match kind {
                        REPLY_TYPE_NONE => {
                            assert_eq!(len, 0, "NONE chunk with payload");
                            assert_ne!(flags & REPLY_FLAG_DONE, 0, "NONE chunk without DONE");
                        }
                        REPLY_TYPE_OFFSET_DATA => {
                            assert_eq!(p.kind, CMD_READ, "data chunk for a non-read");
                            assert!(len >= 9, "OFFSET_DATA chunk of {len} bytes");
                            let off = be64(&payload);
                            let n = (len - 8) as u64;
                            assert!(in_range(off, n), "data chunk outside the request");
                            let at = (off - p.offset) as usize;
                            r.data[at..at + n as usize].copy_from_slice(&payload[8..]);
                            r.covered += n;
                        }
                        REPLY_TYPE_OFFSET_HOLE => {
                            assert_eq!(p.kind, CMD_READ, "hole chunk for a non-read");
                            assert_eq!(len, 12, "OFFSET_HOLE length");
                            let (off, n) = (be64(&payload), u64::from(be32(&payload[8..])));
                            assert!(n > 0 && in_range(off, n), "hole chunk outside the request");
                            let at = (off - p.offset) as usize;
                            r.data[at..at + n as usize].fill(0);
                            r.covered += n;
                        }
                        REPLY_TYPE_BLOCK_STATUS => {
                            assert_eq!(p.kind, CMD_BLOCK_STATUS, "status chunk for {}", p.kind);
                            assert!(
                                len >= 12 && (len - 4).is_multiple_of(8),
                                "BLOCK_STATUS length {len}"
                            );
                            let ctx = be32(&payload);
                            let ext = payload[4..]
                                .chunks(8)
                                .map(|c| (be32(c), be32(&c[4..])))
                                .collect();
                            r.block_status.push((ctx, ext));
                        }
                        REPLY_TYPE_ERROR | REPLY_TYPE_ERROR_OFFSET => {
                            assert!(len >= 6, "error chunk length {len}");
                            let errno = be32(&payload);
                            let mlen = be16(&payload[4..]) as usize;
                            assert_ne!(errno, 0, "error chunk with error 0");
                            assert!(mlen + 6 <= len, "error message longer than the chunk");
                            if kind == REPLY_TYPE_ERROR_OFFSET {
                                assert_eq!(len, mlen + 14, "ERROR_OFFSET length");
                            }
                            r.errors.push(errno);
                        }
                        k if k & (1 << 15) != 0 => {
                            // Unknown error chunk: an error all the same.
                            assert!(len >= 6, "error chunk length {len}");
                            r.errors.push(be32(&payload));
                        }
                        k => panic!("unknown structured chunk type {k:#x}"),
                    }
                    if flags & REPLY_FLAG_DONE != 0 {
                        self.pending.remove(&cookie);
                        return Ok(self.partial.remove(&cookie).unwrap().reply);
                    }
                }
                m => panic!("bad reply magic {m:#010x}"),
            }
        }
    }

    /// The reply to `cookie`, which must be the next one to complete.
    pub fn reply_to(&mut self, cookie: u64, what: &str) -> Reply {
        let r = self.reply();
        assert_eq!(r.cookie, cookie, "{what}: reply for another request");
        r
    }

    /// Runs one request and returns its error (0 on success).
    pub fn errno_of(
        &mut self,
        flags: u16,
        kind: u16,
        offset: u64,
        len: u32,
        payload: &[u8],
    ) -> u32 {
        let c = self.request(flags, kind, offset, len, payload);
        self.reply_to(c, "request").errno()
    }

    pub fn read_at(&mut self, offset: u64, len: u32) -> Result<Vec<u8>, u32> {
        let c = self.request(0, CMD_READ, offset, len, &[]);
        let r = self.reply_to(c, "read");
        match r.errno() {
            0 => {
                assert_eq!(r.covered, u64::from(len), "read reply covers the range");
                Ok(r.data)
            }
            e => Err(e),
        }
    }

    pub fn write_at(&mut self, offset: u64, data: &[u8], flags: u16) -> Result<(), u32> {
        let c = self.request(flags, CMD_WRITE, offset, data.len() as u32, data);
        match self.reply_to(c, "write").errno() {
            0 => Ok(()),
            e => Err(e),
        }
    }

    /// Writes `data` and reads it back; panics on any difference.
    pub fn write_read(&mut self, offset: u64, data: &[u8], what: &str) {
        self.write_at(offset, data, 0)
            .unwrap_or_else(|e| panic!("{what}: write at {offset} failed with {e}"));
        let back = self
            .read_at(offset, data.len() as u32)
            .unwrap_or_else(|e| panic!("{what}: read at {offset} failed with {e}"));
        assert!(back == data, "{what}: read back differs at {offset}");
    }

    /// `NBD_CMD_DISC`, if the server still takes it.
    pub fn disconnect_quietly(&mut self) {
        let c = self.cookie();
        let _ = self.send(&Client::header(REQUEST_MAGIC, 0, CMD_DISC, c, 0, 0));
    }

    /// `NBD_CMD_DISC`.
    pub fn disconnect(&mut self) {
        let c = self.cookie();
        self.put(&Client::header(REQUEST_MAGIC, 0, CMD_DISC, c, 0, 0));
    }
}

// ---------------------------------------------------------------------------
// A pipelined load
// ---------------------------------------------------------------------------

/// The size of [`pipelined_load`]'s requests.
pub const LOAD_BLOCK: u64 = 4096;
/// Requests [`pipelined_load`] keeps outstanding on its connection: the
/// server takes 64 (`CONN_MAX_REQUESTS`), the rest wait in the socket.
pub const LOAD_DEPTH: usize = 72;

/// The bytes of volume block `block` (of [`LOAD_BLOCK`] bytes) when
/// [`pipelined_load`] writes it.
pub fn load_block_data(block: u64) -> Vec<u8> {
    pattern(0xb10c_0000 + block, LOAD_BLOCK as usize)
}

/// What one connection of [`pipelined_load`] saw.
#[derive(Debug, Default)]
pub struct LoadSeen {
    /// Blocks whose write was acknowledged.
    pub acked: Vec<u64>,
    /// How many of `acked` (the first ones) were acknowledged before a
    /// FLUSH that then succeeded was sent.
    pub flushed: usize,
    /// Blocks whose write was answered ESHUTDOWN: never submitted, so
    /// never written.
    pub refused: Vec<u64>,
    /// Replies of every kind.
    pub replies: u64,
    /// Requests still unanswered when the server closed the connection.
    pub unanswered: usize,
    /// Anything wrong: an error other than ESHUTDOWN, wrong read data, a
    /// close inside a reply, a hang.
    pub wrong: Vec<String>,
}

/// One connection's load on `blocks` blocks of [`LOAD_BLOCK`] bytes from
/// block `first`, each written at most once (so it reads back as that
/// write or as zeros): writes of fresh blocks in a random order (from
/// `seed`), reads of blocks already acknowledged (checked), a FLUSH every
/// 32 requests, [`LOAD_DEPTH`] requests outstanding. It runs until the
/// server closes the connection, or until `stop` is set (then it sends no
/// more, takes the replies to what it sent and disconnects); every reply
/// is accounted for. It never panics on the server's account: what went
/// wrong is in [`LoadSeen::wrong`].
pub fn pipelined_load(
    socket: &Path,
    first: u64,
    blocks: u64,
    seed: u64,
    stop: &std::sync::atomic::AtomicBool,
) -> LoadSeen {
    use std::sync::atomic::Ordering;
    let mut c = Client::open_export(socket, Mode::Simple, "");
    let mut rng = Rng(seed);
    let mut fresh: Vec<u64> = (first..first + blocks).collect();
    for i in (1..fresh.len()).rev() {
        fresh.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut seen = LoadSeen::default();
    // cookie -> (kind, the block, or for a flush acked.len() when sent)
    let mut out: HashMap<u64, (u16, u64)> = HashMap::new();
    let mut sending = true;
    let mut sent = 0u64;
    loop {
        if stop.load(Ordering::SeqCst) {
            sending = false;
        }
        while sending && out.len() < LOAD_DEPTH {
            sent += 1;
            let (kind, block) = if sent.is_multiple_of(32) {
                (CMD_FLUSH, seen.acked.len() as u64)
            } else if !seen.acked.is_empty() && (fresh.is_empty() || rng.below(4) == 0) {
                let i = rng.below(seen.acked.len() as u64) as usize;
                (CMD_READ, seen.acked[i])
            } else if let Some(b) = fresh.pop() {
                (CMD_WRITE, b)
            } else {
                (CMD_FLUSH, seen.acked.len() as u64)
            };
            let (off, len) = (block * LOAD_BLOCK, LOAD_BLOCK as u32);
            let result = match kind {
                CMD_WRITE => c.try_request(0, kind, off, len, &load_block_data(block)),
                CMD_READ => c.try_request(0, kind, off, len, &[]),
                _ => c.try_request(0, kind, 0, 0, &[]),
            };
            match result {
                Ok(cookie) => {
                    out.insert(cookie, (kind, block));
                }
                // The server has closed: what was sent is still answered
                // or ended below.
                Err(_) => sending = false,
            }
        }
        if out.is_empty() {
            if !sending {
                c.disconnect_quietly();
            }
            return seen;
        }
        let r = match c.try_reply() {
            Ok(r) => r,
            Err(End::Closed { got: 0 }) => {
                seen.unanswered = out.len();
                return seen;
            }
            Err(e) => {
                seen.wrong
                    .push(format!("{e:?} with {} requests unanswered", out.len()));
                return seen;
            }
        };
        seen.replies += 1;
        let (kind, block) = out.remove(&r.cookie).expect("a reply to a request sent");
        let errno = r.errors.first().copied().unwrap_or(0);
        match (kind, errno) {
            (CMD_WRITE, 0) => seen.acked.push(block),
            (CMD_WRITE, ESHUTDOWN) => seen.refused.push(block),
            (CMD_READ, 0) if r.data != load_block_data(block) => {
                seen.wrong.push(format!("block {block} read back wrong"))
            }
            (CMD_FLUSH, 0) => seen.flushed = seen.flushed.max(block as usize),
            (_, 0 | ESHUTDOWN) => {}
            (k, e) => seen
                .wrong
                .push(format!("request kind {k} failed with errno {e}")),
        }
        if errno == ESHUTDOWN {
            // The server is stopping: no more requests, the rest answered.
            sending = false;
        }
    }
}

// ---------------------------------------------------------------------------
// The server process
// ---------------------------------------------------------------------------

pub fn platter_ok(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_platter"))
        .args(args)
        .env_remove("PLATTER_LOG")
        .output()
        .expect("run platter");
    assert!(
        out.status.success(),
        "platter {args:?}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn temp_dir() -> TempDir {
    platter_testkit::temp_dir!("platter-faults-")
}

/// A running `platter serve` (run by the test kit's launcher, which
/// collects its log and kills it on drop).
pub struct Server {
    process: ServeProcess,
    pub pid: u32,
    pub socket: PathBuf,
}

impl Server {
    /// Starts `platter serve --socket SOCK [extra...] MEMBERS` and waits for
    /// its `serving '` line.
    pub fn start(dir: &Path, members: &[String], extra: &[&str]) -> Server {
        let socket = dir.join("sock");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_platter"));
        cmd.arg("serve")
            .arg("--socket")
            .arg(&socket)
            .args(extra)
            .args(members);
        let mut process = ServeProcess::spawn(&mut cmd, Default::default(), Default::default());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match process.next_line(deadline) {
                Ok(line) if line.starts_with("serving '") => break,
                Ok(_) => {}
                Err(_) => {
                    let status = process.try_wait();
                    panic!(
                        "platter serve did not say 'serving' in 30 s ({status:?}); log:\n{}",
                        process.log()
                    );
                }
            }
        }
        Server {
            pid: process.pid(),
            process,
            socket,
        }
    }

    pub fn log_text(&self) -> String {
        self.process.log()
    }

    /// Asserts the process runs and has not panicked.
    pub fn assert_alive(&mut self, what: &str) {
        let status = self.process.try_wait();
        assert!(
            status.is_none(),
            "{what}: server exited ({status:?}); log:\n{}",
            self.log_text()
        );
        let log = self.log_text();
        assert!(!log.contains("panicked"), "{what}: server panicked:\n{log}");
    }

    /// Threads of the server process.
    /// The thread count once it has held still for a while: a connection's
    /// workers start while its first requests are already being served.
    pub fn settled_threads(&self) -> usize {
        let mut last = self.threads();
        let mut steady = 0;
        for _ in 0..100 {
            std::thread::sleep(Duration::from_millis(20));
            let now = self.threads();
            steady = if now == last { steady + 1 } else { 0 };
            last = now;
            if steady >= 10 {
                break;
            }
        }
        last
    }

    /// The server's own threads. The kernel's io_uring workers
    /// (`iou-wrk-*`, started for I/O the ring punts, gone after seconds
    /// idle, at most the bound the ring sets) are the kernel's, not a
    /// connection the server failed to let go.
    pub fn threads(&self) -> usize {
        let Ok(tasks) = fs::read_dir(format!("/proc/{}/task", self.pid)) else {
            return 0;
        };
        tasks
            .filter_map(Result::ok)
            .filter(|t| {
                fs::read_to_string(t.path().join("comm"))
                    .map(|c| !c.starts_with("iou-"))
                    .unwrap_or(false)
            })
            .count()
    }

    /// Resident memory of the server process, in bytes.
    pub fn rss_bytes(&self) -> u64 {
        self.proc_status_bytes("VmRSS:")
    }

    /// The most resident memory the server process has had, in bytes.
    pub fn peak_rss_bytes(&self) -> u64 {
        self.proc_status_bytes("VmHWM:")
    }

    fn proc_status_bytes(&self, key: &str) -> u64 {
        let s = fs::read_to_string(format!("/proc/{}/status", self.pid)).expect("/proc status");
        let line = s
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("{key} line"));
        let kb: u64 = line
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{key} value"));
        kb * 1024
    }

    /// SIGTERM; asserts a clean exit (status 0, no panic) within 30 s.
    pub fn stop(self) {
        self.stop_within(Duration::from_secs(30));
    }

    /// SIGTERM; asserts a clean exit (status 0, no panic) within `limit`.
    pub fn stop_within(mut self, limit: Duration) {
        let Some((status, _)) = self.process.stop("TERM", limit) else {
            panic!(
                "server did not stop within {limit:?} of SIGTERM; log:\n{}",
                self.log_text()
            );
        };
        let log = self.log_text();
        assert!(
            status.success(),
            "server exit after SIGTERM: {status:?}; log:\n{log}"
        );
        assert!(!log.contains("panicked"), "server panicked:\n{log}");
        assert!(
            !self.socket.exists(),
            "socket left behind after a clean stop"
        );
    }
}

// ---------------------------------------------------------------------------
// The fixture
// ---------------------------------------------------------------------------

/// Creates the fixture's volume in `dir`: a stripe over four sparse 17 MiB
/// files at 64 KiB interleave, exported as [`EXPORT`]. Returns the members.
pub fn create_stripe(dir: &Path) -> Vec<String> {
    let members: Vec<String> = (0..4)
        .map(|i| dir.join(format!("m{i}")).to_str().unwrap().to_string())
        .collect();
    let mut args = vec![
        "create",
        "--level",
        "stripe",
        "--interleave",
        "64k",
        "--member-size",
        "17M",
        "--name",
        EXPORT,
    ];
    args.extend(members.iter().map(String::as_str));
    platter_ok(&args);
    members
}

/// A stripe volume over four sparse files, served, with a witness
/// connection that must keep working whatever another connection does.
pub struct Fixture {
    pub server: Server,
    pub size: u64,
    pub read_only: bool,
    witness: Client,
    witness_round: u64,
    baseline_threads: usize,
    // Dropped last: the members live here.
    _dir: TempDir,
}

/// Bytes at the end of the volume kept for the witness connection; tests
/// stay below `size - WITNESS_BYTES`.
pub const WITNESS_BYTES: u64 = MIB;

impl Fixture {
    /// 4 × 16 MiB data (64 MiB), 64 KiB interleave.
    pub fn new() -> Fixture {
        Fixture::with_args(&[])
    }

    pub fn read_only() -> Fixture {
        Fixture::with_args(&["--read-only"])
    }

    /// The fixture with `extra` arguments to `platter serve`.
    pub fn with_args(extra: &[&str]) -> Fixture {
        let read_only = extra.contains(&"--read-only");
        let dir = temp_dir();
        let members = create_stripe(dir.path());
        let server = Server::start(dir.path(), &members, extra);
        let witness = Client::open(&server.socket, Mode::Structured);
        let size = witness.export.size;
        assert!(size >= 64 * MIB, "volume of {size} bytes");
        let mut f = Fixture {
            server,
            size,
            read_only,
            witness,
            witness_round: 0,
            baseline_threads: 0,
            _dir: dir,
        };
        f.check("fixture start");
        f.baseline_threads = f.server.settled_threads();
        f
    }

    pub fn socket(&self) -> PathBuf {
        self.server.socket.clone()
    }

    /// A raw connection (nothing negotiated).
    pub fn connect(&self) -> Client {
        Client::connect(&self.server.socket)
    }

    /// A connection in transmission.
    pub fn open(&self, mode: Mode) -> Client {
        Client::open(&self.server.socket, mode)
    }

    /// The server is alive and the witness connection, opened before the
    /// case, still writes and reads correctly.
    pub fn check(&mut self, what: &str) {
        self.server.assert_alive(what);
        self.witness_round += 1;
        let off = self.size - WITNESS_BYTES + (self.witness_round % 16) * 64 * 1024;
        if self.read_only {
            let got = self
                .witness
                .read_at(off, 64 * 1024)
                .unwrap_or_else(|e| panic!("{what}: witness read failed with {e}"));
            assert!(got.iter().all(|&b| b == 0), "{what}: witness read non-zero");
        } else {
            let data = pattern(0xface_0000 + self.witness_round, 64 * 1024);
            self.witness
                .write_read(off, &data, &format!("{what}: witness"));
        }
        self.server.assert_alive(what);
    }

    /// [`Fixture::check`], and the server's thread count comes back to what
    /// it was with only the witness connected (no connection is leaked).
    pub fn check_settled(&mut self, what: &str) {
        self.check(what);
        let start = Instant::now();
        loop {
            let now = self.server.threads();
            if now <= self.baseline_threads {
                break;
            }
            assert!(
                start.elapsed() < TIMEOUT,
                "{what}: server still has {now} threads, {} with the witness alone: a connection was not let go",
                self.baseline_threads
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM now, whatever other clients are doing: a clean exit within
    /// 15 s.
    pub fn stop_now(self) {
        let Fixture {
            server, witness, ..
        } = self;
        server.stop_within(Duration::from_secs(15));
        drop(witness);
    }

    /// Checks once more and stops the server cleanly.
    pub fn finish(mut self, what: &str) {
        self.check_settled(what);
        let Fixture {
            server, witness, ..
        } = self;
        // The witness stays connected through SIGTERM: a clean stop must not
        // wait for idle clients to leave.
        server.stop();
        drop(witness);
    }
}
