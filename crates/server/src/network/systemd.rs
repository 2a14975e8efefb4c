//! systemd integration without libsystemd: socket activation (the
//! listening sockets passed as file descriptors 3.. with `LISTEN_FDS`,
//! `LISTEN_PID` and `LISTEN_FDNAMES`, see sd_listen_fds(3)) and readiness
//! notification (`READY=1`, `STATUS=`, `STOPPING=1` sent as datagrams to
//! `NOTIFY_SOCKET`, see sd_notify(3)). Both are plain protocols on the
//! environment; contrib/systemd/ has unit files that use them.

use std::net::TcpListener;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::net::{UnixDatagram, UnixListener};

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
const LISTEN_FDS_START: RawFd = 3;

/// More descriptors than this is not a unit of ours: a bound on the loop.
const LISTEN_FDS_MAX: usize = 64;

/// The descriptor name (`FileDescriptorName=` in the socket unit) that
/// marks the control socket; `metrics` marks the metrics port. Any other
/// name, or none, is an NBD listener.
pub const CONTROL_NAME: &str = "control";
pub const METRICS_NAME: &str = "metrics";

/// Sockets systemd passed to this process.
#[derive(Debug, Default)]
pub struct Activated {
    pub unix: Vec<UnixListener>,
    pub tcp: Vec<TcpListener>,
    pub control: Option<UnixListener>,
    pub metrics: Option<TcpListener>,
}

/// Sockets taken from systemd by the caller (before any thread started),
/// handed to the server's configuration and taken from it once, at bind.
#[derive(Clone, Debug, Default)]
pub struct Inherited(std::sync::Arc<std::sync::Mutex<Option<Activated>>>);

impl Inherited {
    pub fn new(a: Option<Activated>) -> Inherited {
        Inherited(std::sync::Arc::new(std::sync::Mutex::new(a)))
    }

    pub fn take(&self) -> Option<Activated> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    pub fn is_some(&self) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }
}

/// Whether systemd passed this process listening sockets (the variables
/// are for this process, not a parent's): `serve` then needs no --socket.
pub fn activation_pending() -> bool {
    listen_fd_count().is_some_and(|n| n > 0)
}

fn listen_fd_count() -> Option<usize> {
    let pid: u32 = std::env::var("LISTEN_PID").ok()?.trim().parse().ok()?;
    if pid != std::process::id() {
        return None;
    }
    std::env::var("LISTEN_FDS").ok()?.trim().parse().ok()
}

/// Takes the sockets systemd passed, once: the variables are removed so
/// that programs the server starts do not take them too. `Ok(None)`
/// without activation; an error for a descriptor that is not a listening
/// stream socket (a unit file mistake: a datagram socket, `Accept=yes`).
pub fn take_listen_fds() -> Result<Option<Activated>, String> {
    let Some(n) = listen_fd_count() else {
        return Ok(None);
    };
    let names: Vec<String> = std::env::var("LISTEN_FDNAMES")
        .map(|s| s.split(':').map(str::to_string).collect())
        .unwrap_or_default();
    // Call this before starting threads: the environment is not
    // synchronised against other threads reading it.
    std::env::remove_var("LISTEN_PID");
    std::env::remove_var("LISTEN_FDS");
    std::env::remove_var("LISTEN_FDNAMES");
    if n > LISTEN_FDS_MAX {
        return Err(format!(
            "systemd passed {n} sockets (LISTEN_FDS); at most {LISTEN_FDS_MAX} are taken"
        ));
    }
    let mut a = Activated::default();
    for i in 0..n {
        let fd = LISTEN_FDS_START + i as RawFd;
        let name = names.get(i).map(String::as_str).unwrap_or("");
        let family = listening_stream_family(fd)
            .map_err(|e| format!("socket {fd} passed by systemd ({name:?}): {e}"))?;
        // Descriptors the kernel names one of ours, each taken once.
        set_cloexec(fd);
        match (family, name) {
            (libc::AF_UNIX, CONTROL_NAME) => {
                // SAFETY: fd is an open listening Unix stream socket that
                // systemd gave this process, taken once (the variables are
                // gone), so nothing else owns it.
                a.control = Some(unsafe { UnixListener::from_raw_fd(fd) });
            }
            (libc::AF_INET | libc::AF_INET6, METRICS_NAME) => {
                // SAFETY: as above, a listening TCP socket.
                a.metrics = Some(unsafe { TcpListener::from_raw_fd(fd) });
            }
            (libc::AF_UNIX, _) => {
                // SAFETY: as above.
                a.unix.push(unsafe { UnixListener::from_raw_fd(fd) });
            }
            (libc::AF_INET | libc::AF_INET6, _) => {
                // SAFETY: as above.
                a.tcp.push(unsafe { TcpListener::from_raw_fd(fd) });
            }
            (f, _) => {
                return Err(format!(
                    "socket {fd} passed by systemd ({name:?}): address family {f} is neither \
                     Unix nor IP"
                ))
            }
        }
    }
    Ok(Some(a))
}

/// The address family of `fd` if it is a listening stream socket.
fn listening_stream_family(fd: RawFd) -> Result<libc::c_int, String> {
    let int_opt = |opt| -> Result<libc::c_int, String> {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: v and len are valid for writes of the sizes given.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if r != 0 {
            return Err(format!("not a socket: {}", std::io::Error::last_os_error()));
        }
        Ok(v)
    };
    if int_opt(libc::SO_TYPE)? != libc::SOCK_STREAM {
        return Err("not a stream socket (the socket unit needs ListenStream=)".into());
    }
    if int_opt(libc::SO_ACCEPTCONN)? == 0 {
        return Err("not listening (the socket unit needs Accept=no)".into());
    }
    int_opt(libc::SO_DOMAIN)
}

fn set_cloexec(fd: RawFd) {
    // SAFETY: fcntl on a descriptor this process holds; failure leaves
    // the flag as it was, which only matters to programs the server runs.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
}

/// Tells systemd (or whoever set `NOTIFY_SOCKET`) how the server stands.
/// Does nothing without `NOTIFY_SOCKET`; a failure to send is logged, not
/// fatal (the server serves either way).
pub struct Notifier {
    socket: Option<(UnixDatagram, std::os::unix::net::SocketAddr)>,
}

impl Notifier {
    pub fn from_env() -> Notifier {
        let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
            return Notifier { socket: None };
        };
        let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()).to_vec();
        let addr = if let Some(name) = bytes.strip_prefix(b"@") {
            <std::os::unix::net::SocketAddr as std::os::linux::net::SocketAddrExt>::from_abstract_name(name)
        } else {
            std::os::unix::net::SocketAddr::from_pathname(std::path::Path::new(&path))
        };
        let socket = match (addr, UnixDatagram::unbound()) {
            (Ok(a), Ok(s)) => Some((s, a)),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "NOTIFY_SOCKET is set but cannot be used");
                None
            }
        };
        Notifier { socket }
    }

    /// Sends `state` (newline-separated `KEY=VALUE` lines).
    pub fn notify(&self, state: &str) {
        let Some((s, addr)) = &self.socket else {
            return;
        };
        if let Err(e) = s.send_to_addr(state.as_bytes(), addr) {
            tracing::warn!(error = %e, "cannot notify systemd");
        }
    }
}
