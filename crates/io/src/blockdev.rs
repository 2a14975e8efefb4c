//! What Linux tells us about block devices: a few ioctls from `<linux/fs.h>`
//! and the `rotational` flag in sysfs.

use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// The `_IOC` encoding of `<asm-generic/ioctl.h>`. A few architectures use
/// other direction bits and a 13-bit size field; libc lacks `BLKGETSIZE64` and
/// `BLKZEROOUT`, so the numbers are built here the way the kernel builds them.
mod ioc {
    /// The architectures with other direction bits and a 13-bit size.
    const OTHER_ENCODING: bool = cfg!(any(
        target_arch = "powerpc",
        target_arch = "powerpc64",
        target_arch = "mips",
        target_arch = "mips64",
        target_arch = "sparc",
        target_arch = "sparc64"
    ));
    const NONE: u64 = if OTHER_ENCODING { 1 } else { 0 };
    const READ: u64 = 2;
    const SIZE_BITS: u32 = if OTHER_ENCODING { 13 } else { 14 };

    const fn ioc(dir: u64, ty: u64, nr: u64, size: usize) -> libc::Ioctl {
        ((dir << (16 + SIZE_BITS)) | ((size as u64) << 16) | (ty << 8) | nr) as libc::Ioctl
    }

    /// `_IO(0x12, 104)`: logical block size, written to an `int`.
    pub const BLKSSZGET: libc::Ioctl = ioc(NONE, 0x12, 104, 0);
    /// `_IOR(0x12, 114, size_t)`: size in bytes, written to a `u64` (the
    /// number says `size_t`, the kernel writes 64 bits on every arch).
    pub const BLKGETSIZE64: libc::Ioctl = ioc(READ, 0x12, 114, size_of::<usize>());
    /// `_IO(0x12, 127)`: zero a range given as `u64[2] = {start, len}`.
    pub const BLKZEROOUT: libc::Ioctl = ioc(NONE, 0x12, 127, 0);

    #[cfg(all(test, target_arch = "x86_64"))]
    #[test]
    fn numbers_match_the_kernel_headers() {
        assert_eq!(BLKSSZGET, 0x1268);
        assert_eq!(BLKGETSIZE64, 0x8008_1272);
        assert_eq!(BLKZEROOUT, 0x127f);
    }
}

use ioc::{BLKGETSIZE64, BLKSSZGET, BLKZEROOUT};

/// The size of the block device open as `file`.
pub(crate) fn size_bytes(file: &File) -> io::Result<u64> {
    let mut size_bytes: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points to
    // a live, writable u64; the fd is valid for the life of `file`.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size_bytes as *mut u64) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size_bytes)
}

/// The logical block size: the smallest unit the device addresses, and the
/// alignment `O_DIRECT` and `BLKZEROOUT` need.
pub(crate) fn logical_block_bytes(file: &File) -> io::Result<u32> {
    let mut block_bytes: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int through the pointer, which points to a
    // live, writable c_int; the fd is valid for the life of `file`.
    let rc = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            BLKSSZGET,
            &mut block_bytes as *mut libc::c_int,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(block_bytes)
        .ok()
        .filter(|b| b.is_power_of_two())
        .ok_or_else(|| io::Error::other(format!("BLKSSZGET returned {block_bytes}")))
}

/// Zeroes `[offset_bytes, offset_bytes + len_bytes)`, which must be aligned to
/// the logical block size. The kernel drops the page cache for the range and
/// falls back to writing zero pages itself where the device has no
/// write-zeroes command, so the range reads as zeros afterwards whatever the
/// device.
pub(crate) fn zero_out(file: &File, offset_bytes: u64, len_bytes: u64) -> io::Result<()> {
    let range: [u64; 2] = [offset_bytes, len_bytes];
    // SAFETY: BLKZEROOUT reads two u64s through the pointer, which points to a
    // live [u64; 2]; the fd is valid for the life of `file`.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKZEROOUT, range.as_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the block device with number `dev` (an `st_rdev`, or the `st_dev`
/// of a file to ask about the disk under its file system) spins. `None` when
/// sysfs does not say: no sysfs, a virtual file system, a network file system.
pub(crate) fn rotational(dev: u64) -> Option<bool> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let device = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    // A partition has no queue of its own; its disk's is one level up.
    [
        device.join("queue/rotational"),
        device.join("../queue/rotational"),
    ]
    .iter()
    .find_map(|path| match fs::read_to_string(path).ok()?.trim() {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    })
}
