//! The server's sockets: the NBD listeners (Unix and TCP), the control
//! socket and the metrics port, bound before the volume is marked in use;
//! the accept loops, and the connection limit.

use crate::network::conn::{self, Shared};
use crate::network::stream::Stream;
use crate::server::{io_err, ServeConfig, ServeError};
use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Clients over the connection limit told why at once; more than this are
/// just closed, so a flood of them cannot take a thread each.
const REFUSING_MAX: usize = 8;

/// Every socket the server serves on, bound.
pub(crate) struct Bound {
    pub listeners: Vec<Listener>,
    /// Where clients reach the export, for the operator.
    pub uris: Vec<String>,
    pub control: Option<UnixListener>,
    /// Where the control socket is, if it has a path (for the run
    /// directory's link, `registry.rs`).
    pub control_path: Option<PathBuf>,
    pub metrics: Option<(TcpListener, SocketAddr)>,
    /// Socket files this server made, removed when it stops (not those
    /// systemd passed: the socket unit owns them).
    pub ours: Vec<PathBuf>,
}

/// Binds the NBD listeners, the control socket (given, or beside the NBD
/// socket) and the metrics port; refuses a server with nothing to listen on.
pub(crate) fn bind(config: &ServeConfig, export_name: &str) -> Result<Bound, ServeError> {
    let mut listeners: Vec<Listener> = Vec::new();
    let mut uris = Vec::new();
    let mut ours = Vec::new();
    let inherited = config.inherited.take().unwrap_or_default();
    let mut passed = Vec::new();
    for l in inherited.unix {
        let path = l
            .local_addr()
            .ok()
            .and_then(|a| a.as_pathname().map(PathBuf::from));
        uris.push(match &path {
            Some(p) => format!("nbd+unix:///{export_name}?socket={}", p.display()),
            None => format!("nbd+unix:///{export_name} (an unnamed socket from systemd)"),
        });
        passed.extend(path);
        listeners.push(Listener::Unix(l));
    }
    for l in inherited.tcp {
        let local = l.local_addr().map_err(io_err("local address"))?;
        listeners.push(Listener::Tcp(l));
        uris.push(format!("nbd://{local}/{export_name}"));
    }
    // The volumes file may name the socket its socket unit listens on, so
    // that one file serves both by hand and under systemd: that socket is
    // served already (binding it again would find it answering, and refuse).
    let socket = config
        .socket
        .as_ref()
        .filter(|p| !passed.iter().any(|q| same_file(p, q)));
    if let Some(path) = socket {
        listeners.push(Listener::Unix(bind_unix(path, "socket")?));
        ours.push(path.clone());
        uris.push(format!(
            "nbd+unix:///{export_name}?socket={}",
            path.display()
        ));
    }
    if let Some(addr) = &config.listen {
        let l = TcpListener::bind(addr).map_err(io_err(format!("cannot listen on {addr}")))?;
        let local = l.local_addr().map_err(io_err("local address"))?;
        listeners.push(Listener::Tcp(l));
        uris.push(format!("nbd://{local}/{export_name}"));
    }
    if listeners.is_empty() && !config.stdio {
        return Err(ServeError::Refused(
            "nothing to listen on: give --socket or --listen".into(),
        ));
    }
    let mut control_path = None;
    let control = match inherited.control {
        Some(l) => {
            control_path = l
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(PathBuf::from));
            Some(l)
        }
        None => match self::control_path(config) {
            Some(p) => {
                let l = bind_unix(&p, "control socket")?;
                control_path = Some(p.clone());
                ours.push(p);
                Some(l)
            }
            None => {
                tracing::info!(
                    "no control socket: `platter status --control` and the other management \
                     commands cannot reach this volume; give --control PATH (`control` in a \
                     volumes file's options), or --socket PATH for PATH.ctl"
                );
                None
            }
        },
    };
    let metrics = match (inherited.metrics, &config.metrics) {
        (Some(l), _) => {
            let local = l.local_addr().map_err(io_err("local address"))?;
            Some((l, local))
        }
        (None, Some(addr)) => {
            let l = TcpListener::bind(addr)
                .map_err(io_err(format!("cannot serve metrics on {addr}")))?;
            let local = l.local_addr().map_err(io_err("local address"))?;
            Some((l, local))
        }
        (None, None) => None,
    };
    Ok(Bound {
        listeners,
        uris,
        control,
        control_path,
        metrics,
        ours,
    })
}

/// The control socket's path: given, or beside the NBD socket.
fn control_path(config: &ServeConfig) -> Option<PathBuf> {
    config.control.clone().or_else(|| {
        config.socket.as_ref().map(|p| {
            let mut s = p.as_os_str().to_owned();
            s.push(".ctl");
            PathBuf::from(s)
        })
    })
}

/// Whether two paths name one file (a relative and an absolute name of
/// one socket, say).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// The connections being served, and the clients being refused.
pub(crate) struct Conns {
    next: AtomicU64,
    pub open: Mutex<Vec<(u64, Stream, JoinHandle<()>)>>,
    /// Clients over the limit being told so (see [`conn::refuse`]).
    refusing: Arc<AtomicUsize>,
}

impl Conns {
    pub fn new() -> Conns {
        Conns {
            next: AtomicU64::new(0),
            open: Mutex::new(Vec::new()),
            refusing: Arc::new(AtomicUsize::new(0)),
        }
    }
}

pub(crate) enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

/// Binds the NBD or the control socket (`what` names which, for errors).
pub(crate) fn bind_unix(path: &Path, what: &str) -> Result<UnixListener, ServeError> {
    if std::fs::symlink_metadata(path).is_ok() {
        // Only a socket is ever replaced: anything else at PATH (a typo
        // naming a member file, say) is the user's, not a stale socket.
        if !is_socket(path) {
            return Err(ServeError::Refused(format!(
                "{} exists and is not a socket; not replacing it ({what})",
                path.display()
            )));
        }
        // A socket nobody answers on is left over from a crash; one that
        // answers belongs to a running server.
        if UnixStream::connect(path).is_ok() {
            return Err(ServeError::Refused(format!(
                "{what} {} is in use by a running server",
                path.display()
            )));
        }
        std::fs::remove_file(path).map_err(io_err(format!(
            "cannot remove stale {what} {}",
            path.display()
        )))?;
    }
    UnixListener::bind(path).map_err(io_err(format!("cannot listen on {}", path.display())))
}

fn is_socket(path: &Path) -> bool {
    std::fs::symlink_metadata(path)
        .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
}

/// Removes a socket the server made; whatever has taken its path since
/// (a file put there while the server ran) is left alone.
pub(crate) fn remove_socket(path: &Path) {
    if is_socket(path) {
        let _ = std::fs::remove_file(path);
    }
}

pub(crate) fn accept_loop(
    l: Listener,
    stop: &AtomicBool,
    shared: &Arc<Shared>,
    conns: &Arc<Conns>,
    max: usize,
) {
    let fd = match &l {
        Listener::Unix(u) => u.as_raw_fd(),
        Listener::Tcp(t) => t.as_raw_fd(),
    };
    while !stop.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd that lives across the call.
        let ready = unsafe { libc::poll(&mut pfd, 1, 200) };
        if ready <= 0 {
            continue;
        }
        let accepted = match &l {
            Listener::Unix(u) => u
                .accept()
                .map(|(s, _)| (Stream::Unix(s), "unix".to_string())),
            Listener::Tcp(t) => t.accept().map(|(s, a)| {
                let _ = s.set_nodelay(true);
                (Stream::Tcp(s), a.to_string())
            }),
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                continue;
            }
        };
        // Connections that ended since the main loop last reaped must not
        // count against the limit.
        reap(conns);
        let mut open = conns.open.lock().expect("connections lock");
        if open.len() >= max {
            drop(open);
            refuse(stream, peer, shared, conns, max);
            continue;
        }
        let Ok(keep) = stream.try_clone() else {
            continue;
        };
        let id = conns.next.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::clone(shared);
        let handle = std::thread::Builder::new()
            .name(format!("platter-conn-{id}"))
            .spawn(move || conn::serve(stream, shared, peer))
            .expect("spawn connection thread");
        open.push((id, keep, handle));
    }
}

/// Answers a client over the connection limit, on a thread of its own
/// (bounded in number and time), with the reason in the handshake.
fn refuse(stream: Stream, peer: String, shared: &Arc<Shared>, conns: &Conns, max: usize) {
    tracing::warn!(%peer, max, "too many connections; refusing");
    shared.note_turned_away();
    let refusing = Arc::clone(&conns.refusing);
    if refusing.fetch_add(1, Ordering::SeqCst) >= REFUSING_MAX {
        refusing.fetch_sub(1, Ordering::SeqCst);
        stream.shutdown(Shutdown::Both);
        return;
    }
    let shared = Arc::clone(shared);
    let message = format!(
        "too many connections: this server serves {max} at once (--max-connections); try again later"
    );
    let spawned = std::thread::Builder::new()
        .name("platter-refuse".into())
        .spawn(move || {
            conn::refuse(stream, &shared, &peer, message);
            refusing.fetch_sub(1, Ordering::SeqCst);
        });
    if let Err(e) = spawned {
        // The closure, the stream in it and the count's share are gone.
        tracing::warn!(error = %e, "cannot start a thread to refuse a client");
        conns.refusing.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How long a client may leave what the server sent it unread (its
/// replies, or the handshake's answers) while another client is turned
/// away for want of a slot. A client that reads
/// its replies never leaves them this long; one that has stopped reading
/// would otherwise keep its slot for `--idle-timeout` (it is not idle: its
/// replies count as work in flight), and a well-behaved client turned away
/// waited 289 s for one.
pub(crate) const UNREAD_WHILE_WANTED: Duration = Duration::from_secs(30);

/// Connections whose client has left bytes unread, with the count last
/// seen and since when it has not moved (`Stream::unread_bytes`).
#[derive(Default)]
pub(crate) struct UnreadWatch {
    seen: HashMap<u64, (u64, Instant)>,
}

impl UnreadWatch {
    /// Called by the server's loop every 100 ms: a connection whose client
    /// has taken none of the bytes waiting for it for
    /// [`UNREAD_WHILE_WANTED`] is shut down once another client has been
    /// turned away for its slot (within the last minute). Its replies are
    /// dropped with it, as for a client that takes none of them for
    /// `--idle-timeout`. A client with nothing left unread is not looked
    /// at here: the idle rule (`conn.rs`) keeps a quiet one in good
    /// standing its slot for `--idle-timeout`. Off with an `--idle-timeout`
    /// of [`UNREAD_WHILE_WANTED`] or less (0: never): the idle rule and the
    /// reply writer's (`client takes none of its replies`) close such a
    /// client within it already.
    pub(crate) fn tick(&mut self, conns: &Conns, shared: &Shared) {
        if shared.idle_timeout.is_none_or(|t| t <= UNREAD_WHILE_WANTED) {
            return;
        }
        let limit = UNREAD_WHILE_WANTED;
        let wanted = shared.slot_wanted_within(limit.max(conn::SLOT_WANTED_WINDOW));
        let open = conns.open.lock().expect("connections lock");
        let now = Instant::now();
        self.seen
            .retain(|id, _| open.iter().any(|(i, _, _)| i == id));
        for (id, stream, _) in open.iter() {
            let unread = stream.unread_bytes();
            if unread == 0 {
                self.seen.remove(id);
                continue;
            }
            let (count, since) = self.seen.entry(*id).or_insert((unread, now));
            if *count != unread {
                // The client read some, or more was sent: it is alive.
                (*count, *since) = (unread, now);
            } else if wanted && now.duration_since(*since) >= limit {
                tracing::info!(
                    connection = id,
                    unread_bytes = unread,
                    unread_seconds = limit.as_secs(),
                    "closing a connection whose client reads nothing: another client wants its slot"
                );
                stream.shutdown(Shutdown::Both);
                self.seen.remove(id);
            }
        }
    }
}

/// Forgets connections whose threads have ended; returns how many.
pub(crate) fn reap(conns: &Conns) -> usize {
    let mut open = conns.open.lock().expect("connections lock");
    let mut i = 0;
    let mut ended = 0;
    while i < open.len() {
        if open[i].2.is_finished() {
            let (_, _, h) = open.swap_remove(i);
            let _ = h.join();
            ended += 1;
        } else {
            i += 1;
        }
    }
    ended
}

/// `serve --stdio`: the one client is on standard input and output, a
/// socket both (as libnbd's `nbd_connect_command`, `nbdinfo [ CMD ]` and
/// `nbdcopy -- [ CMD ]` give the server they start).
pub(crate) fn stdio_connection(shared: &Arc<Shared>, conns: &Arc<Conns>) -> Result<(), ServeError> {
    use std::os::fd::FromRawFd;
    check_stdio().map_err(ServeError::Refused)?;
    // SAFETY: fd 0 is an open stream socket (checked above) that nothing
    // else in this process reads or writes: the banner goes to stderr
    // under --stdio, and the process owns fd 0 from here on.
    let s = unsafe { UnixStream::from_raw_fd(0) };
    let stream = Stream::Unix(s);
    let keep = stream
        .try_clone()
        .map_err(io_err("cannot use standard input"))?;
    let id = conns.next.fetch_add(1, Ordering::Relaxed);
    let shared = Arc::clone(shared);
    let handle = std::thread::Builder::new()
        .name(format!("platter-conn-{id}"))
        .spawn(move || conn::serve(stream, shared, "stdio".to_string()))
        .map_err(io_err("cannot start the connection thread"))?;
    conns
        .open
        .lock()
        .expect("connections lock")
        .push((id, keep, handle));
    Ok(())
}

/// Whether standard input is a stream socket, as `--stdio` needs: a pipe
/// pair cannot carry NBD both ways on one stream. Checked by the command
/// line before anything is opened, and again here.
pub fn check_stdio() -> Result<(), String> {
    let mut kind: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: kind and len are valid for writes of the sizes given.
    let r = unsafe {
        libc::getsockopt(
            0,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&mut kind as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r != 0 || kind != libc::SOCK_STREAM {
        return Err(
            "--stdio: standard input is not a stream socket (start platter from a client that \
             gives it one: nbdinfo [ CMD ], nbdcopy -- [ CMD ], libnbd's nbd_connect_command)"
                .into(),
        );
    }
    Ok(())
}
