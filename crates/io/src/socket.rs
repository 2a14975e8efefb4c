//! Waiting for a stream socket's input without being woken for its output.
//!
//! A thread blocked in `recv` on a socket sleeps on the socket's one wait
//! queue, and the kernel wakes every sleeper there, unasked, each time the
//! peer takes in bytes this side sent ("there is room to write" on a Unix
//! socket, whatever the sleeper waits for). A thread that only reads
//! replies on a socket other threads write requests to is then woken for
//! each request the peer reads, and many times over while the peer reads a
//! large write, to find nothing and sleep again. `poll` wakes only for the
//! events it asks for, which saves about a third of the thread switches
//! per request on a remote mirror (`bench/remote.sh` prints them; the
//! measurement is in bench/README.md, "Ninth session").

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// Receives what has arrived on `fd` (a stream socket), waiting at most
/// `wait` for the first byte. `Ok(0)` is the end of the stream.
///
/// Errors: `TimedOut` when nothing came within `wait`; `WouldBlock` when
/// `poll` saw input that another reader took first; `Interrupted` from a
/// signal; anything else is the socket's own error. The first three mean
/// "nothing yet": callers loop.
///
/// On `Ok(n)`, the first `n` bytes of `buf` are written (initialised).
pub fn recv_when_readable(
    fd: BorrowedFd<'_>,
    buf: &mut [MaybeUninit<u8>],
    wait: Duration,
) -> io::Result<usize> {
    if let Some(n) = recv_now(fd, buf)? {
        return Ok(n);
    }
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // Rounded up: a wait under 1 ms must not become a poll that returns at
    // once (a caller looping on `TimedOut` would spin).
    let wait_ms =
        libc::c_int::try_from(wait.as_nanos().div_ceil(1_000_000)).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid `pollfd`, and the count says one.
    match unsafe { libc::poll(&mut pfd, 1, wait_ms) } {
        0 => Err(io::ErrorKind::TimedOut.into()),
        n if n < 0 => Err(io::Error::last_os_error()),
        // Input, the end of the stream or an error: `recv` says which.
        _ => recv_now(fd, buf)?.ok_or_else(|| io::ErrorKind::WouldBlock.into()),
    }
}

/// [`recv_when_readable`] into initialised memory.
pub fn recv_into_when_readable(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    wait: Duration,
) -> io::Result<usize> {
    // SAFETY: `[u8]` and `[MaybeUninit<u8>]` have the same layout, and
    // only initialised bytes are written through it.
    let raw = unsafe { &mut *(buf as *mut [u8] as *mut [MaybeUninit<u8>]) };
    recv_when_readable(fd, raw, wait)
}

/// One `recv` that does not wait: `None` when nothing has arrived.
fn recv_now(fd: BorrowedFd<'_>, buf: &mut [MaybeUninit<u8>]) -> io::Result<Option<usize>> {
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes, and `recv`
    // writes only initialised bytes into it.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n >= 0 {
        return Ok(Some(n as usize));
    }
    let e = io::Error::last_os_error();
    match e.kind() {
        io::ErrorKind::WouldBlock => Ok(None),
        _ => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    use std::time::Instant;

    fn recv(s: &UnixStream, buf: &mut [u8], wait: Duration) -> io::Result<usize> {
        recv_into_when_readable(s.as_fd(), buf, wait)
    }

    #[test]
    fn waits_for_input_then_reads_it() {
        let (mut a, b) = UnixStream::pair().expect("pair");
        let mut buf = [0u8; 8];
        let t = Instant::now();
        let e = recv(&b, &mut buf, Duration::from_millis(50)).expect_err("nothing sent");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(t.elapsed() >= Duration::from_millis(45), "it waited");
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            a.write_all(b"hello").expect("write");
            a
        });
        let n = recv(&b, &mut buf, Duration::from_secs(10)).expect("input");
        assert_eq!(&buf[..n], b"hello");
        drop(writer.join().expect("writer"));
        assert_eq!(recv(&b, &mut buf, Duration::from_secs(10)).expect("end"), 0);
    }

    /// This thread's voluntary context switches so far.
    fn switches() -> u64 {
        let status = std::fs::read_to_string("/proc/thread-self/status").expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("voluntary_ctxt_switches")
    }

    /// Waits on one end of a socket pair for input that never comes, while
    /// a writer thread streams bytes out of the same end and a reader
    /// thread takes them in at the other in 4 KiB reads, until the wait is
    /// over. Returns the waiting thread's voluntary context switches.
    fn switches_while_the_peer_reads(wait: impl FnOnce(&UnixStream)) -> u64 {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let (mut a, b) = UnixStream::pair().expect("pair");
        let mut w = b.try_clone().expect("clone");
        let stop = Arc::new(AtomicBool::new(false));
        let writer = std::thread::spawn({
            let stop = Arc::clone(&stop);
            move || {
                let chunk = vec![7u8; 64 << 10];
                while !stop.load(Ordering::SeqCst) {
                    w.write_all(&chunk).expect("write");
                }
                // The reader sees the end once it has read everything.
                w.shutdown(std::net::Shutdown::Write).expect("shutdown");
            }
        });
        let reader = std::thread::spawn(move || {
            let mut sink = [0u8; 4096];
            let mut total = 0u64;
            loop {
                match std::io::Read::read(&mut a, &mut sink).expect("read") {
                    0 => return total,
                    n => total += n as u64,
                }
            }
        });
        let before = switches();
        wait(&b);
        let after = switches();
        stop.store(true, Ordering::SeqCst);
        writer.join().expect("writer");
        let moved = reader.join().expect("reader");
        assert!(
            moved >= 1 << 20,
            "the peer read only {moved} bytes meanwhile"
        );
        after - before
    }

    /// The reason this exists. How the bug showed: an NBD member's reply
    /// reader, blocked in `recv`, was woken about ten times for each 1 MiB
    /// write its connection sent (each time the server read some of it)
    /// and slept again, costing CPU on a busy 2-core box. Waiting here the
    /// thread sleeps once, however much the peer reads meanwhile.
    #[test]
    fn the_peer_reading_does_not_wake_the_wait() {
        let waited = switches_while_the_peer_reads(|b| {
            let mut buf = [0u8; 8];
            let t = Instant::now();
            let e = recv(b, &mut buf, Duration::from_millis(300)).expect_err("nothing comes");
            assert_eq!(e.kind(), io::ErrorKind::TimedOut);
            assert!(t.elapsed() >= Duration::from_millis(295));
        });
        // For comparison (not asserted: it is the kernel's behaviour):
        // the same wait as a blocking `recv` with a timeout.
        let blocking = switches_while_the_peer_reads(|b| {
            b.set_read_timeout(Some(Duration::from_millis(300)))
                .expect("timeout");
            let mut buf = [0u8; 8];
            let _ = std::io::Read::read(&mut &*b, &mut buf);
        });
        eprintln!("context switches while waiting: poll {waited}, blocking recv {blocking}");
        assert!(
            waited <= 3,
            "the wait was woken {waited} times (a blocking recv: {blocking})"
        );
    }
}
