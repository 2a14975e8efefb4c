//! Positioned reads and writes on a file descriptor, with errors that say
//! what happened.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Fills `buf` from `offset_bytes`. Reaching end of file before `buf` is full
/// is an error, never a silent zero fill: inside the member's reported size it
/// means the file shrank underneath us.
pub(crate) fn read_exact_at(file: &File, buf: &mut [u8], offset_bytes: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset_bytes + done as u64) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "short read: end of file at byte {} (the member is smaller than \
                         when it was opened; was it truncated?)",
                        offset_bytes + done as u64
                    ),
                ))
            }
            Ok(n) => done += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// Writes all of `data` at `offset_bytes`.
pub(crate) fn write_all_at(file: &File, data: &[u8], offset_bytes: u64) -> io::Result<()> {
    // std retries EINTR and turns a zero-length write into WriteZero.
    file.write_all_at(data, offset_bytes)
}
