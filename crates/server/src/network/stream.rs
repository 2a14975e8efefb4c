//! A client connection over a Unix or TCP socket.

use platter_io::socket::{recv_into_when_readable, recv_when_readable};
use std::io::{self, IoSlice, Read, Write};
use std::mem::MaybeUninit;
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

pub enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
        })
    }

    pub fn shutdown(&self, how: Shutdown) {
        // Already-closed sockets are fine: the point is that the peer and any
        // blocked reader see the end.
        let _ = match self {
            Stream::Unix(s) => s.shutdown(how),
            Stream::Tcp(s) => s.shutdown(how),
        };
    }

    /// Bytes sent that the peer has not taken yet (`SIOCOUTQ`): on a Unix
    /// socket, what its client has not read; on TCP, what its host has not
    /// acknowledged (which a client that does not read holds up only once
    /// its receive window is full). 0 if the kernel will not say.
    pub fn unread_bytes(&self) -> u64 {
        let mut n: libc::c_int = 0;
        // SAFETY: TIOCOUTQ (SIOCOUTQ) writes one int through the pointer,
        // which is valid for it; the descriptor is this stream's own.
        let r = unsafe { libc::ioctl(self.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
        if r == 0 {
            u64::try_from(n).unwrap_or(0)
        } else {
            0
        }
    }

    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(t),
            Stream::Tcp(s) => s.set_read_timeout(t),
        }
    }

    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(t),
            Stream::Tcp(s) => s.set_write_timeout(t),
        }
    }

    /// Writes every byte of every part, in order, with as few system calls
    /// as the kernel allows.
    pub fn write_parts(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        let mut idx = 0;
        let mut off = 0;
        // Each round writes at least one byte or fails, so it ends.
        while idx < parts.len() {
            if off == parts[idx].len() {
                idx += 1;
                off = 0;
                continue;
            }
            let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(parts.len() - idx);
            slices.push(IoSlice::new(&parts[idx][off..]));
            for p in &parts[idx + 1..] {
                slices.push(IoSlice::new(p));
            }
            let mut n = match self.write_vectored(&slices) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            while n > 0 && idx < parts.len() {
                let left = parts[idx].len() - off;
                if n >= left {
                    n -= left;
                    idx += 1;
                    off = 0;
                } else {
                    off += n;
                    n = 0;
                }
            }
        }
        Ok(())
    }
}

impl Stream {
    /// Receives what has arrived into memory that need not be
    /// initialised, waiting at most `wait` for the first byte
    /// ([`recv_when_readable`]: a `poll` for input, so a worker waiting
    /// for the next request is not woken each time the client reads a
    /// reply). `TimedOut`, `WouldBlock` or `Interrupted`: nothing yet.
    pub fn recv_waiting(&self, buf: &mut [MaybeUninit<u8>], wait: Duration) -> io::Result<usize> {
        recv_when_readable(self.as_fd(), buf, wait)
    }

    /// [`Stream::recv_waiting`] into initialised memory.
    pub fn recv_into_waiting(&self, buf: &mut [u8], wait: Duration) -> io::Result<usize> {
        recv_into_when_readable(self.as_fd(), buf, wait)
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write_vectored(bufs),
            Stream::Tcp(s) => s.write_vectored(bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsFd for Stream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Unix(s) => s.as_fd(),
            Stream::Tcp(s) => s.as_fd(),
        }
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}
