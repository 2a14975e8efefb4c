//! Positioned reads and writes on a file descriptor, with errors that say
//! what happened.

use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::unix::fs::FileExt;

/// Fills `buf` from `offset_bytes`. Reaching end of file before `buf` is full
/// is an error, never a silent zero fill: inside the member's reported size it
/// means the file shrank underneath us.
pub(crate) fn read_exact_at(file: &File, buf: &mut [u8], offset_bytes: u64) -> io::Result<()> {
    // SAFETY: `MaybeUninit<u8>` has the layout of `u8`, and the reader
    // writes only initialised bytes through it.
    let raw = unsafe { &mut *(buf as *mut [u8] as *mut [MaybeUninit<u8>]) };
    read_exact_uninit_at(file, raw, offset_bytes).map(|_| ())
}

/// [`read_exact_at`] into memory not yet initialised: on success every
/// byte of `buf` was written by `pread`, and is returned.
pub(crate) fn read_exact_uninit_at<'a>(
    file: &File,
    buf: &'a mut [MaybeUninit<u8>],
    offset_bytes: u64,
) -> io::Result<&'a mut [u8]> {
    use std::os::fd::AsRawFd;
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is valid for writes of `rest.len()` bytes, and
        // pread writes only initialised bytes into it.
        let n = unsafe {
            libc::pread(
                file.as_raw_fd(),
                rest.as_mut_ptr().cast(),
                rest.len(),
                (offset_bytes + done as u64) as libc::off_t,
            )
        };
        match n {
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "short read: end of file at byte {} (the member is smaller than \
                         when it was opened; was it truncated?)",
                        offset_bytes + done as u64
                    ),
                ))
            }
            n if n > 0 => done += n as usize,
            _ => {
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
        }
    }
    // SAFETY: pread wrote all `buf.len()` bytes above.
    Ok(unsafe { &mut *(buf as *mut [MaybeUninit<u8>] as *mut [u8]) })
}

/// Writes all of `data` at `offset_bytes`.
pub(crate) fn write_all_at(file: &File, data: &[u8], offset_bytes: u64) -> io::Result<()> {
    // std retries EINTR and turns a zero-length write into WriteZero.
    file.write_all_at(data, offset_bytes)
}

/// Writes `parts` back to back from `offset_bytes` with `pwritev`: one
/// system call for pieces that lie apart in memory, none of them copied.
pub(crate) fn write_all_vectored_at(
    file: &File,
    parts: &[&[u8]],
    offset_bytes: u64,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // At most IOV_MAX (1024 on Linux) buffers per call.
    const MAX_IOVECS: usize = 1024;
    let mut first = 0; // the part to write next
    let mut skip = 0; // bytes of it already written
    let mut at = offset_bytes;
    while first < parts.len() {
        if parts[first].len() == skip {
            first += 1;
            skip = 0;
            continue;
        }
        let iov: Vec<libc::iovec> = parts[first..]
            .iter()
            .take(MAX_IOVECS)
            .enumerate()
            .map(|(i, p)| {
                let p = if i == 0 { &p[skip..] } else { p };
                libc::iovec {
                    iov_base: p.as_ptr() as *mut libc::c_void,
                    iov_len: p.len(),
                }
            })
            .collect();
        // SAFETY: every iovec points into a live slice of `parts` for the
        // length of that slice, and pwritev only reads them.
        let n = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                iov.as_ptr(),
                iov.len() as libc::c_int,
                at as libc::off_t,
            )
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "failed to write whole buffer",
            ));
        }
        let mut n = n as usize;
        at += n as u64;
        while n > 0 {
            let left = parts[first].len() - skip;
            if n >= left {
                n -= left;
                first += 1;
                skip = 0;
            } else {
                skip += n;
                n = 0;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectored_write_lands_every_part_in_order() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("v"))
            .expect("open");
        // More parts than one pwritev takes, some empty, uneven sizes.
        let owned: Vec<Vec<u8>> = (0..2500u32)
            .map(|i| vec![(i % 251) as u8; (i % 7) as usize])
            .collect();
        let parts: Vec<&[u8]> = owned.iter().map(|v| &v[..]).collect();
        write_all_vectored_at(&file, &parts, 100).expect("write");
        let expected = parts.concat();
        let mut got = vec![0u8; expected.len()];
        read_exact_at(&file, &mut got, 100).expect("read");
        assert_eq!(got, expected);
    }
}
