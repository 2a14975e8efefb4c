//! Facts only a block device has. Each test makes a loop device over a
//! temporary file and skips, saying why, where that is impossible (no root,
//! no losetup, no /dev/loop-control).

use std::fs;

use platter_io::{FileMember, Member, MemberErrorKind, OpenOptions};

use crate::common::{pattern, temp_dir, LoopDevice};

const SIZE_BYTES: u64 = 4 << 20;

/// A loop device over a fresh backing file of `SIZE_BYTES`, or `None`.
fn attach(dir: &tempfile::TempDir) -> Option<LoopDevice> {
    let backing = dir.path().join("backing.img");
    fs::write(&backing, vec![0; SIZE_BYTES as usize]).unwrap();
    match LoopDevice::attach(&backing, 512) {
        Ok(loop_device) => Some(loop_device),
        Err(reason) => {
            platter_testkit::skips::skipped("a loop-device test", reason);
            None
        }
    }
}

#[test]
fn loop_device_reports_size_block_and_rotational() {
    let dir = temp_dir();
    let Some(loop_device) = attach(&dir) else {
        return;
    };
    let member = FileMember::open(&loop_device.path, OpenOptions::default()).unwrap();
    assert!(member.is_block_device());
    // size_bytes comes from BLKGETSIZE64; sysfs is an independent witness.
    assert_eq!(member.size_bytes(), SIZE_BYTES);
    assert_eq!(member.size_bytes(), loop_device.sysfs_size_bytes());
    assert_eq!(member.logical_block_bytes(), 512);
    assert!(
        member.rotational().is_some(),
        "sysfs has queue/rotational for every loop device"
    );
    assert_eq!(member.describe(), loop_device.path.to_str().unwrap());
}

#[test]
fn loop_device_writes_reach_the_backing_file() {
    let dir = temp_dir();
    let Some(loop_device) = attach(&dir) else {
        return;
    };
    for direct in [false, true] {
        let opts = OpenOptions {
            direct,
            ..OpenOptions::default()
        };
        let member = FileMember::open(&loop_device.path, opts).unwrap();
        let data = pattern(u64::from(direct), 10_000);
        member.write_at(777, &data).unwrap();
        member.flush().unwrap();
        drop(member);
        let backing = fs::read(dir.path().join("backing.img")).unwrap();
        assert_eq!(&backing[777..10_777], &data[..], "direct={direct}");
    }
}

/// A writable block device is claimed exclusively (O_EXCL), so a second
/// writer (or a mount) is refused; readers are still welcome.
#[test]
fn loop_device_is_claimed_exclusively_for_writing() {
    let dir = temp_dir();
    let Some(loop_device) = attach(&dir) else {
        return;
    };
    let writer = FileMember::open(&loop_device.path, OpenOptions::default()).unwrap();
    let err = FileMember::open(&loop_device.path, OpenOptions::default()).unwrap_err();
    assert_eq!(err.kind, MemberErrorKind::Io, "{err}");
    assert!(err.to_string().contains("in use"), "{err}");

    let reader_opts = OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    };
    let reader = FileMember::open(&loop_device.path, reader_opts).unwrap();
    writer.write_at(0, b"label").unwrap();
    writer.flush().unwrap();
    let mut buf = [0; 5];
    reader.read_at(0, &mut buf).unwrap();
    assert_eq!(&buf, b"label");

    drop(writer);
    FileMember::open(&loop_device.path, OpenOptions::default())
        .expect("the claim ends when the writer closes");
}

/// A read-only server claims its block device too (`claim`): refused while
/// a writer holds it, and keeping a writer out while it does.
#[test]
fn loop_device_claimed_read_only_excludes_writers() {
    let dir = temp_dir();
    let Some(loop_device) = attach(&dir) else {
        return;
    };
    let claim = OpenOptions {
        read_only: true,
        claim: true,
        ..OpenOptions::default()
    };
    let writer = FileMember::open(&loop_device.path, OpenOptions::default()).unwrap();
    let err = FileMember::open(&loop_device.path, claim).unwrap_err();
    assert!(err.to_string().contains("in use"), "{err}");
    drop(writer);
    let reader = FileMember::open(&loop_device.path, claim).unwrap();
    let err = FileMember::open(&loop_device.path, OpenOptions::default()).unwrap_err();
    assert!(err.to_string().contains("in use"), "{err}");
    drop(reader);
}
