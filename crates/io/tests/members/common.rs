//! Fixtures shared by the member tests: temporary directories on a real disk,
//! loop devices, and test patterns.

use std::fs;
use std::path::Path;

use platter_io::{FileMember, Member, MemberErrorKind, MemoryMember, OpenOptions};
pub use platter_testkit::dirs::LoopDevice;
use tempfile::TempDir;

/// A temporary directory under the target directory. Not /tmp: that is often
/// tmpfs, where O_DIRECT may be refused and hole punching behaves differently
/// from the disks members live on.
pub fn temp_dir() -> TempDir {
    platter_testkit::temp_dir!("platter-io-")
}

/// Bytes that are never zero, so a zeroed byte always shows.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((seed.wrapping_mul(7919).wrapping_add(i * 131)) % 251 + 1) as u8)
        .collect()
}

/// One member under test plus whatever keeps it alive. Fields drop in order:
/// the member's descriptor closes, then the loop device detaches, then the
/// directory goes.
pub struct Fixture {
    pub member: Box<dyn Member>,
    /// Held for its drop: detaches the loop device.
    pub _loop_device: Option<LoopDevice>,
    /// Held for its drop: removes the directory.
    pub _dir: Option<TempDir>,
}

/// The kinds of member every harness check runs against.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Memory,
    File,
    FileDirect,
    LoopDevice,
    LoopDeviceDirect,
    /// 4096-byte logical sectors: O_DIRECT and BLKZEROOUT alignment is 4096.
    LoopDevice4kDirect,
}

impl Kind {
    /// A zero-filled member of `size_bytes`, or `None` after printing why this
    /// machine cannot provide one.
    pub fn fixture(self, size_bytes: u64) -> Option<Fixture> {
        match self {
            Kind::Memory => Some(Fixture {
                member: Box::new(MemoryMember::new("memory", size_bytes)),
                _loop_device: None,
                _dir: None,
            }),
            Kind::File => file_fixture(size_bytes, false),
            Kind::FileDirect => file_fixture(size_bytes, true),
            Kind::LoopDevice => loop_fixture(size_bytes, 512, false),
            Kind::LoopDeviceDirect => loop_fixture(size_bytes, 512, true),
            Kind::LoopDevice4kDirect => loop_fixture(size_bytes, 4096, true),
        }
    }
}

fn file_fixture(size_bytes: u64, direct: bool) -> Option<Fixture> {
    let dir = temp_dir();
    let opts = OpenOptions {
        create_size_bytes: Some(size_bytes),
        direct,
        direct_block_devices: false,
        read_only: false,
        claim: false,
        request_timeout: None,
        connections: 0,
    };
    let member = open_or_skip(&dir.path().join("member.img"), opts)?;
    Some(Fixture {
        member: Box::new(member),
        _loop_device: None,
        _dir: Some(dir),
    })
}

fn loop_fixture(size_bytes: u64, sector_bytes: u32, direct: bool) -> Option<Fixture> {
    let dir = temp_dir();
    let backing = dir.path().join("backing.img");
    fs::File::create(&backing)
        .and_then(|file| file.set_len(size_bytes))
        .expect("create the loop device's backing file");
    let loop_device = match LoopDevice::attach(&backing, sector_bytes) {
        Ok(loop_device) => loop_device,
        Err(reason) => {
            platter_testkit::skips::skipped("a loop-device test", reason);
            return None;
        }
    };
    let opts = OpenOptions {
        create_size_bytes: None,
        direct,
        direct_block_devices: false,
        read_only: false,
        claim: false,
        request_timeout: None,
        connections: 0,
    };
    let member = open_or_skip(&loop_device.path, opts)?;
    assert_eq!(member.logical_block_bytes(), sector_bytes);
    Some(Fixture {
        member: Box::new(member),
        _loop_device: Some(loop_device),
        _dir: Some(dir),
    })
}

/// Opens a member, treating "this file system has no O_DIRECT" as a reason to
/// skip rather than a failure; any other error fails the test.
pub fn open_or_skip(path: &Path, opts: OpenOptions) -> Option<FileMember> {
    match FileMember::open(path, opts) {
        Ok(member) => Some(member),
        Err(err)
            if opts.direct
                && err.kind == MemberErrorKind::Io
                && err.source.as_ref().map(|s| s.kind())
                    == Some(std::io::ErrorKind::Unsupported) =>
        {
            platter_testkit::skips::skipped("an O_DIRECT test", err);
            None
        }
        Err(err) => panic!("cannot open {}: {err}", path.display()),
    }
}

/// Reads the whole member.
pub fn contents(member: &dyn Member) -> Vec<u8> {
    let mut buf = vec![0; member.size_bytes() as usize];
    member.read_at(0, &mut buf).expect("read the whole member");
    buf
}
