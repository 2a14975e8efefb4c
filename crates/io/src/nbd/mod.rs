//! A member that is an export of an NBD server (`nbd://host[:port]/name`,
//! `nbd+unix:///name?socket=PATH`): nbdkit, qemu-nbd, nbd-server, or
//! another platter.
//!
//! The [`Member`] calls block their caller until the server answers, and
//! the I/O layer calls them from several threads at once, so that many
//! requests are in flight on the one connection ([`conn`]). What the
//! server negotiated shapes every request:
//! - a request longer than the server takes at once is split, and the
//!   pieces are all sent before any answer is awaited;
//! - bytes not aligned to the server's minimum block are read around and,
//!   for a write, merged into the whole blocks (one such merge at a time,
//!   so that two writes sharing a block do not undo each other);
//! - [`Member::trim`] promises zeros afterwards, which `NBD_CMD_TRIM` does
//!   not: it is `NBD_CMD_WRITE_ZEROES` where the server offers it, else
//!   written zeroes;
//! - [`Member::flush`] is `NBD_CMD_FLUSH`; a server that does not offer it
//!   says it has no volatile cache, and a flush has nothing to do.
//!
//! A lost connection fails every I/O with [`MemberErrorKind::Gone`].

mod conn;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use platter_nbd::consts::{
    NBD_ENOSPC, NBD_EOVERFLOW, NBD_EPERM, NBD_ESHUTDOWN, NBD_FLAG_CAN_MULTI_CONN,
    NBD_FLAG_READ_ONLY, NBD_FLAG_ROTATIONAL, NBD_FLAG_SEND_FLUSH, NBD_FLAG_SEND_WRITE_ZEROES,
};
use platter_nbd::{ClientConfig, ClientRequest, Endpoint, Export, NbdUri};

use crate::error::{MemberError, MemberErrorKind, Op};
use crate::member::{check_range, Member, MemberDone};
use conn::{CallError, ConnectError, Connection};
use platter_core::volume::MemberOp;

/// How long connecting and the handshake may take, at most (less when the
/// opener's request deadline is shorter).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request waits for its reply before the connection counts as
/// lost, unless the opener says otherwise (`serve --remote-timeout`).
pub const REPLY_DEADLINE: Duration = Duration::from_secs(60);
/// Connections over TCP to a server that offers multi-conn, unless told
/// otherwise: libnbd's nbdcopy uses as many.
pub const MULTI_CONN: usize = 4;

/// Connections to open to a server that offers multi-conn when the user
/// named no number: several either way (the server allows them, and
/// requests then spread over as many server threads and our readers).
/// Over TCP, [`MULTI_CONN`]: more streams spread the traffic over the
/// network's queues and the far host's cores. Over a Unix socket, two:
/// the server is on this host, and each connection is another reader
/// thread woken once per reply on the CPUs the server needs too
/// (`bench/remote.sh`, 4k random reads at depth 32 from a mirror of two
/// local exports with 1 ms latency, 2 cores: about 22,000 IOPS with two
/// connections each, 19,000-21,500 with four, 23,000-24,000 with one).
pub fn default_connections(endpoint: &Endpoint) -> usize {
    match endpoint {
        Endpoint::Tcp { .. } => MULTI_CONN,
        Endpoint::Unix { .. } => LOCAL_CONNECTIONS,
    }
}

/// Connections over a Unix socket to a server that offers multi-conn,
/// unless told otherwise ([`default_connections`]).
pub const LOCAL_CONNECTIONS: usize = 2;

/// Zeroes written at once where the server has no WRITE_ZEROES.
const ZERO_CHUNK_BYTES: u64 = 1 << 20;

/// An NBD export in use as a member.
pub struct NbdMember {
    uri: String,
    /// One, or several where the server says connections see each
    /// other's writes (`NBD_FLAG_CAN_MULTI_CONN`): each request
    /// takes the next in turn.
    conns: Vec<Connection>,
    next_conn: AtomicUsize,
    export: Export,
    size_bytes: u64,
    /// The server's minimum block: offsets and lengths it accepts are
    /// multiples of it.
    block_bytes: u64,
    /// The largest read or write payload, a multiple of `block_bytes`.
    max_bytes: u64,
    read_only: bool,
    /// Handles that drop each connection, for the error mapping of
    /// started requests (an ESHUTDOWN answer drops them all).
    killers: std::sync::Arc<Vec<conn::Killer>>,
    /// Held across a read-merge-write of partial blocks.
    merging: Mutex<()>,
}

impl NbdMember {
    /// Connects to the export `parsed` names (`uri` as the user wrote it).
    pub fn open(
        uri: &str,
        parsed: &NbdUri,
        read_only: bool,
        reply_deadline: Duration,
        connections: u32,
    ) -> Result<NbdMember, MemberError> {
        let open_err =
            |kind, message: String| MemberError::with_message(kind, uri, Op::Open, 0, 0, message);
        let tls = if parsed.tls {
            Some(client_tls(parsed).map_err(|e| open_err(MemberErrorKind::NotAMember, e))?)
        } else {
            None
        };
        // A host that cannot connect within a request's deadline is not
        // back (a reconnect try must not wait longer than a request would).
        let connect_timeout = CONNECT_TIMEOUT.min(reply_deadline);
        let connect = || {
            let mut stream = conn::dial(&parsed.endpoint, connect_timeout)
                .map_err(|e| open_err(connect_kind(&e), e.to_string()))?;
            let config = ClientConfig {
                export_name: parsed.export_name.clone(),
                tls: parsed.tls,
            };
            let export = conn::handshake(&mut stream, config, connect_timeout, tls.as_ref())
                .map_err(|e| open_err(connect_kind(&e), e.to_string()))?;
            Ok::<_, MemberError>((stream, export))
        };
        let (stream, export) = connect()?;
        let block_bytes = u64::from(export.block_size.map_or(1, |b| b.minimum_bytes.max(1)));
        if !block_bytes.is_power_of_two() || block_bytes > 64 * 1024 {
            return Err(open_err(
                MemberErrorKind::NotAMember,
                format!("the server's minimum block of {block_bytes} bytes is not a power of two up to 64 KiB"),
            ));
        }
        if !read_only && export.has(NBD_FLAG_READ_ONLY) {
            return Err(open_err(
                MemberErrorKind::PermissionDenied,
                "the server exports it read-only".to_owned(),
            ));
        }
        if !export.has(NBD_FLAG_SEND_FLUSH) && !read_only {
            tracing::warn!(
                "member {uri}: the server offers no flush; platter takes it that writes are \
                 durable when acknowledged"
            );
        }
        let start = |stream, export: &Export| {
            Connection::start(stream, export.clone(), reply_deadline, uri)
                .map_err(|e| open_err(MemberErrorKind::Io, format!("cannot start its reader: {e}")))
        };
        let mut conns = vec![start(stream, &export)?];
        let wanted = match connections {
            0 if export.has(NBD_FLAG_CAN_MULTI_CONN) => default_connections(&parsed.endpoint),
            0 => 1,
            n if export.has(NBD_FLAG_CAN_MULTI_CONN) => n as usize,
            _ => 1,
        };
        while conns.len() < wanted {
            let (stream, more) = connect()?;
            if more.size_bytes != export.size_bytes
                || more.transmission_flags != export.transmission_flags
            {
                return Err(open_err(
                    MemberErrorKind::NotAMember,
                    "a second connection saw another export (size or flags)".to_owned(),
                ));
            }
            conns.push(start(stream, &more)?);
        }
        let max_bytes = conns
            .iter()
            .map(|c| u64::from(c.max_payload_bytes()))
            .min()
            .expect("a connection")
            / block_bytes
            * block_bytes;
        // The last partial block cannot be addressed.
        let size_bytes = export.size_bytes / block_bytes * block_bytes;
        let killers = std::sync::Arc::new(conns.iter().map(Connection::killer).collect());
        Ok(NbdMember {
            uri: uri.to_owned(),
            killers,
            conns,
            next_conn: AtomicUsize::new(0),
            export,
            size_bytes,
            block_bytes,
            max_bytes: max_bytes.max(block_bytes),
            read_only,
            merging: Mutex::new(()),
        })
    }

    /// The connection the next request goes on.
    fn conn(&self) -> &Connection {
        let i = self.next_conn.fetch_add(1, Ordering::Relaxed);
        &self.conns[i % self.conns.len()]
    }

    /// Connections to the server (several with multi-conn).
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    fn err(&self, op: Op, offset_bytes: u64, len_bytes: u64, e: CallError) -> MemberError {
        call_error(&self.uri, &self.killers, op, offset_bytes, len_bytes, e)
    }

    /// Whether `len_bytes` at `offset_bytes`, in `parts` pieces, can go
    /// to the server as one request: whole blocks, at most its maximum,
    /// and a bounded number of pieces to send where they lie.
    fn fits_one_request(&self, offset_bytes: u64, len_bytes: u64, parts: usize) -> bool {
        let b = self.block_bytes;
        len_bytes > 0
            && offset_bytes.is_multiple_of(b)
            && len_bytes.is_multiple_of(b)
            && len_bytes <= self.max_bytes
            && parts < conn::MAX_PAYLOAD_PARTS
    }

    /// Starts `op` on the next connection if it is one request: an aligned
    /// read or write (in any number of parts) of at most the server's
    /// maximum, or a flush. `None` when it is not (the caller performs it
    /// the blocking way, which splits and merges).
    fn start_one<'o>(&self, op: &'o MemberOp) -> Option<OneRequest<'o>> {
        let fits = |at: u64, len: u64| self.fits_one_request(at, len, 1);
        match op {
            MemberOp::Read {
                offset_bytes,
                len_bytes,
            } if fits(*offset_bytes, *len_bytes)
                && self.check(Op::Read, *offset_bytes, *len_bytes).is_ok() =>
            {
                Some(OneRequest {
                    req: ClientRequest::Read {
                        offset_bytes: *offset_bytes,
                        len_bytes: *len_bytes as u32,
                    },
                    payload: Vec::new(),
                    op: Op::Read,
                    offset_bytes: *offset_bytes,
                    len_bytes: *len_bytes,
                })
            }
            // A write in several parts (the engine's pieces back to back on
            // the member) goes out as one request, its parts where they
            // lie: gathering them would cost a copy and the blocking path.
            MemberOp::Write { offset_bytes, data }
                if self.fits_one_request(*offset_bytes, data.len() as u64, data.parts().len())
                    && self
                        .check(Op::Write, *offset_bytes, data.len() as u64)
                        .is_ok() =>
            {
                Some(OneRequest {
                    req: ClientRequest::Write {
                        offset_bytes: *offset_bytes,
                        len_bytes: data.len() as u32,
                        fua: false,
                    },
                    payload: data.parts().iter().map(|b| &b[..]).collect(),
                    op: Op::Write,
                    offset_bytes: *offset_bytes,
                    len_bytes: data.len() as u64,
                })
            }
            MemberOp::Flush if !self.read_only && self.export.has(NBD_FLAG_SEND_FLUSH) => {
                Some(OneRequest {
                    req: ClientRequest::Flush,
                    payload: Vec::new(),
                    op: Op::Flush,
                    offset_bytes: 0,
                    len_bytes: 0,
                })
            }
            _ => None,
        }
    }
}

/// A member I/O that goes out as one NBD request: the request, a write's
/// payload (its parts back to back), and what it covers for errors.
struct OneRequest<'o> {
    req: ClientRequest,
    payload: Vec<&'o [u8]>,
    op: Op,
    offset_bytes: u64,
    len_bytes: u64,
}

/// A failed request as a member error: the server's errno by kind; an
/// `ESHUTDOWN` answer (the server going away) drops every connection, so
/// that the member is disconnected from this answer on.
fn call_error(
    uri: &str,
    killers: &[conn::Killer],
    op: Op,
    offset_bytes: u64,
    len_bytes: u64,
    e: CallError,
) -> MemberError {
    let kind = match &e {
        CallError::Lost(_) => MemberErrorKind::Gone,
        CallError::Refused(_) => MemberErrorKind::Io,
        CallError::Reply(r) => match r.errno {
            NBD_ENOSPC => MemberErrorKind::NoSpace,
            NBD_EPERM => MemberErrorKind::PermissionDenied,
            NBD_ESHUTDOWN => {
                // The server is going away: the member is disconnected
                // from this answer on, not only once the socket closes.
                for k in killers {
                    k.abandon("the server is shutting down (ESHUTDOWN)".to_owned());
                }
                MemberErrorKind::Gone
            }
            NBD_EOVERFLOW => MemberErrorKind::OutOfRange,
            // EIO, ENOMEM, EINVAL, ENOTSUP and any other.
            _ => MemberErrorKind::Io,
        },
    };
    MemberError::with_message(kind, uri, op, offset_bytes, len_bytes, e.to_string())
}

impl NbdMember {
    /// The requests for `[offset, offset + len)`, aligned, each at most
    /// the server's maximum.
    fn pieces(&self, offset_bytes: u64, len_bytes: u64) -> impl Iterator<Item = (u64, u32)> + '_ {
        assert_eq!(offset_bytes % self.block_bytes, 0);
        assert_eq!(len_bytes % self.block_bytes, 0);
        let end = offset_bytes + len_bytes;
        let step = self.max_bytes;
        (offset_bytes..end)
            .step_by(step as usize)
            .map(move |at| (at, (end - at).min(step) as u32))
    }

    /// Reads the aligned range into `buf`.
    fn read_aligned(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), MemberError> {
        let reqs: Vec<(ClientRequest, &[u8])> = self
            .pieces(offset_bytes, buf.len() as u64)
            .map(|(at, len)| {
                (
                    ClientRequest::Read {
                        offset_bytes: at,
                        len_bytes: len,
                    },
                    &[][..],
                )
            })
            .collect();
        for ((req, _), r) in reqs.iter().zip(self.conn().call_all(&reqs)) {
            let (at, len) = span(req);
            let data = r
                .map_err(|e| self.err(Op::Read, at, len, e))?
                .expect("a read returns bytes");
            let from = (at - offset_bytes) as usize;
            buf[from..from + len as usize].copy_from_slice(&data);
        }
        Ok(())
    }

    fn write_aligned(&self, offset_bytes: u64, data: &[u8]) -> Result<(), MemberError> {
        let reqs: Vec<(ClientRequest, &[u8])> = self
            .pieces(offset_bytes, data.len() as u64)
            .map(|(at, len)| {
                let from = (at - offset_bytes) as usize;
                (
                    ClientRequest::Write {
                        offset_bytes: at,
                        len_bytes: len,
                        fua: false,
                    },
                    &data[from..from + len as usize],
                )
            })
            .collect();
        self.all_done(Op::Write, &reqs)
    }

    fn all_done(&self, op: Op, reqs: &[(ClientRequest, &[u8])]) -> Result<(), MemberError> {
        for ((req, _), r) in reqs.iter().zip(self.conn().call_all(reqs)) {
            if let Err(e) = r {
                let (at, len) = span(req);
                return Err(self.err(op, at, len, e));
            }
        }
        Ok(())
    }

    fn check(&self, op: Op, offset_bytes: u64, len_bytes: u64) -> Result<(), MemberError> {
        check_range(&self.uri, self.size_bytes, op, offset_bytes, len_bytes)?;
        if self.read_only && op != Op::Read {
            return Err(MemberError::with_message(
                MemberErrorKind::PermissionDenied,
                &self.uri,
                op,
                offset_bytes,
                len_bytes,
                "opened read-only",
            ));
        }
        Ok(())
    }

    /// `[offset, offset + len)` widened to whole blocks.
    fn around(&self, offset_bytes: u64, len_bytes: u64) -> (u64, u64) {
        let b = self.block_bytes;
        let lo = offset_bytes / b * b;
        let hi = (offset_bytes + len_bytes).div_ceil(b) * b;
        (lo, hi)
    }

    /// Writes `data` at `offset_bytes` whatever its alignment: partial
    /// blocks are read, merged and written whole.
    fn write_merged(&self, offset_bytes: u64, data: &[u8]) -> Result<(), MemberError> {
        let (lo, hi) = self.around(offset_bytes, data.len() as u64);
        if lo == offset_bytes && hi == offset_bytes + data.len() as u64 {
            return self.write_aligned(offset_bytes, data);
        }
        let _merging = self.merging.lock().unwrap_or_else(|e| e.into_inner());
        let mut whole = vec![0u8; (hi - lo) as usize];
        self.read_aligned(lo, &mut whole)?;
        let at = (offset_bytes - lo) as usize;
        whole[at..at + data.len()].copy_from_slice(data);
        self.write_aligned(lo, &whole)
    }
}

/// The member bytes `req` covers (none for a flush).
fn span(req: &ClientRequest) -> (u64, u64) {
    match *req {
        ClientRequest::Read {
            offset_bytes,
            len_bytes,
        }
        | ClientRequest::Write {
            offset_bytes,
            len_bytes,
            ..
        }
        | ClientRequest::Trim {
            offset_bytes,
            len_bytes,
        }
        | ClientRequest::WriteZeroes {
            offset_bytes,
            len_bytes,
            ..
        } => (offset_bytes, u64::from(len_bytes)),
        ClientRequest::Flush => (0, 0),
    }
}

fn connect_kind(e: &ConnectError) -> MemberErrorKind {
    match e {
        ConnectError::Dial(_) | ConnectError::Io(_) => MemberErrorKind::Gone,
        ConnectError::Handshake(platter_nbd::ClientError::NoSuchExport { .. }) => {
            MemberErrorKind::NotFound
        }
        // A wrong key or certificate is not a host away: it is refused.
        ConnectError::Handshake(_) => MemberErrorKind::NotAMember,
        ConnectError::Tls(platter_tls::TlsError::Io(_)) => MemberErrorKind::Gone,
        ConnectError::Tls(_) => MemberErrorKind::PermissionDenied,
    }
}

/// The client's TLS for an nbds:// URI: the PSK file's key for the URI's
/// user (its first key without one), or certificates from
/// `tls-certificates=DIR` (the system's CAs without it), checking the
/// server's name (`tls-hostname=`, else the host; `localhost` over a Unix
/// socket) unless `tls-verify-peer=false`.
fn client_tls(parsed: &NbdUri) -> Result<conn::Tls, String> {
    use platter_tls::{ClientTls, Credentials, PskKeys};
    let creds = match (&parsed.tls_psk_file, &parsed.tls_certificates) {
        (Some(file), _) => {
            let keys = PskKeys::load(std::path::Path::new(file)).map_err(|e| e.to_string())?;
            if let Some(user) = &parsed.username {
                if keys.key_of(user.as_bytes()).is_none() {
                    return Err(format!("{file} has no key for user {user:?}"));
                }
            }
            Some(Credentials::Psk(keys))
        }
        (None, Some(dir)) => Some(Credentials::X509 { dir: dir.into() }),
        (None, None) => None,
    };
    let client = ClientTls::new(
        creds.as_ref(),
        parsed.tls_verify_peer,
        parsed.username.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    let host = parsed
        .tls_hostname
        .clone()
        .unwrap_or_else(|| match &parsed.endpoint {
            platter_nbd::Endpoint::Tcp { host, .. } => host.clone(),
            platter_nbd::Endpoint::Unix { .. } => "localhost".to_owned(),
        });
    Ok(conn::Tls { client, host })
}

impl Member for NbdMember {
    fn describe(&self) -> &str {
        &self.uri
    }

    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn logical_block_bytes(&self) -> u32 {
        self.block_bytes.max(512) as u32
    }

    fn rotational(&self) -> Option<bool> {
        Some(self.export.has(NBD_FLAG_ROTATIONAL))
    }

    /// Any connection lost: the member is (the others are dropped with it).
    fn connection_lost(&self) -> bool {
        self.conns.iter().any(Connection::lost)
    }

    fn abandon(&self, why: &str) {
        for c in &self.conns {
            c.abandon(why.to_owned());
        }
    }

    fn close_connections(&self) {
        for c in &self.conns {
            c.close();
        }
    }

    fn starts_requests(&self) -> bool {
        true
    }

    fn start(&self, op: &MemberOp, done: MemberDone) -> Result<(), MemberDone> {
        // Not from a reader thread: see `conn::on_reader_thread`.
        if conn::on_reader_thread() {
            return Err(done);
        }
        let Some(OneRequest {
            req,
            payload,
            op: kind,
            offset_bytes: at,
            len_bytes: len,
        }) = self.start_one(op)
        else {
            return Err(done);
        };
        let (uri, killers) = (self.uri.clone(), std::sync::Arc::clone(&self.killers));
        // `done` goes into the callback only once the request is sure to
        // be sent; otherwise it comes back for the blocking path.
        let mut done = Some(done);
        let sent = self.conn().start_request(req, &payload, || {
            let done = done.take().expect("made once");
            Box::new(move |r| {
                done(match r {
                    Ok(data) => Ok(data.map(bytes::Bytes::from)),
                    Err(e) => Err(call_error(&uri, &killers, kind, at, len, e)),
                })
            })
        });
        match sent {
            Ok(()) => Ok(()),
            Err(()) => Err(done.take().expect("not made: the request was not sent")),
        }
    }

    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), MemberError> {
        let len = buf.len() as u64;
        self.check(Op::Read, offset_bytes, len)?;
        if len == 0 {
            return Ok(());
        }
        let (lo, hi) = self.around(offset_bytes, len);
        if lo == offset_bytes && hi == offset_bytes + len {
            return self.read_aligned(offset_bytes, buf);
        }
        let mut whole = vec![0u8; (hi - lo) as usize];
        self.read_aligned(lo, &mut whole)?;
        let at = (offset_bytes - lo) as usize;
        buf.copy_from_slice(&whole[at..at + buf.len()]);
        Ok(())
    }

    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> Result<(), MemberError> {
        self.check(Op::Write, offset_bytes, data.len() as u64)?;
        if data.is_empty() {
            return Ok(());
        }
        self.write_merged(offset_bytes, data)
    }

    fn write_parts_at(&self, offset_bytes: u64, parts: &[&[u8]]) -> Result<(), MemberError> {
        let len_bytes = parts.iter().map(|p| p.len() as u64).sum::<u64>();
        if !self.fits_one_request(offset_bytes, len_bytes, parts.len()) {
            return self.write_at(offset_bytes, &parts.concat());
        }
        self.check(Op::Write, offset_bytes, len_bytes)?;
        // The parts go out where they lie, as the started path sends them.
        let req = ClientRequest::Write {
            offset_bytes,
            len_bytes: len_bytes as u32,
            fua: false,
        };
        self.conn()
            .call_parts(req, parts)
            .map_err(|e| self.err(Op::Write, offset_bytes, len_bytes, e))
    }

    fn flush(&self) -> Result<(), MemberError> {
        if self.read_only || !self.export.has(NBD_FLAG_SEND_FLUSH) {
            return Ok(());
        }
        self.all_done(Op::Flush, &[(ClientRequest::Flush, &[][..])])
    }

    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), MemberError> {
        self.check(Op::Trim, offset_bytes, len_bytes)?;
        if len_bytes == 0 {
            return Ok(());
        }
        let end = offset_bytes + len_bytes;
        let b = self.block_bytes;
        // Whole blocks inside the range; the partial ends are written.
        let (lo, hi) = (offset_bytes.div_ceil(b) * b, end / b * b);
        if lo >= hi {
            return self.write_merged(offset_bytes, &vec![0u8; len_bytes as usize]);
        }
        if lo > offset_bytes {
            self.write_merged(offset_bytes, &vec![0u8; (lo - offset_bytes) as usize])?;
        }
        if hi < end {
            self.write_merged(hi, &vec![0u8; (end - hi) as usize])?;
        }
        if self.export.has(NBD_FLAG_SEND_WRITE_ZEROES) {
            // WRITE_ZEROES carries no payload: its length is not bounded
            // by the maximum payload, only by the u32 field.
            let step = u64::from(u32::MAX) / b * b;
            let reqs: Vec<(ClientRequest, &[u8])> = (lo..hi)
                .step_by(step as usize)
                .map(|at| {
                    (
                        ClientRequest::WriteZeroes {
                            offset_bytes: at,
                            len_bytes: (hi - at).min(step) as u32,
                            fua: false,
                            no_hole: false,
                        },
                        &[][..],
                    )
                })
                .collect();
            return self.all_done(Op::Trim, &reqs);
        }
        let zeros = vec![0u8; ZERO_CHUNK_BYTES.min(hi - lo) as usize];
        let mut at = lo;
        while at < hi {
            let n = (hi - at).min(zeros.len() as u64);
            self.write_aligned(at, &zeros[..n as usize])
                .map_err(|e| MemberError { op: Op::Trim, ..e })?;
            at += n;
        }
        Ok(())
    }
}
