//! Opening members and the errors people see.

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;

use platter_io::{open_member, FileMember, Member, MemberErrorKind, Op, OpenOptions};

use crate::common::{open_or_skip, pattern, temp_dir};

const CREATE: OpenOptions = OpenOptions {
    create_size_bytes: Some(1 << 20),
    direct: false,
    direct_block_devices: false,
    read_only: false,
    claim: false,
    request_timeout: None,
    connections: 0,
};

#[test]
fn missing_file_without_create_is_not_found_and_names_the_path() {
    let dir = temp_dir();
    let path = dir.path().join("absent.img");
    let err = FileMember::open(&path, OpenOptions::default()).unwrap_err();
    assert_eq!(err.kind, MemberErrorKind::NotFound);
    assert_eq!(err.op, Op::Open);
    let message = err.to_string();
    assert!(message.contains(&*path.to_string_lossy()), "{message}");
    assert!(message.contains("give a member size"), "{message}");
    assert!(!path.exists());
}

#[test]
fn missing_file_is_not_created_read_only() {
    let dir = temp_dir();
    let path = dir.path().join("absent.img");
    let opts = OpenOptions {
        read_only: true,
        ..CREATE
    };
    let err = FileMember::open(&path, opts).unwrap_err();
    assert_eq!(err.kind, MemberErrorKind::NotFound, "{err}");
    assert!(!path.exists());
}

#[test]
fn missing_file_with_create_size_is_created_sparse() {
    let dir = temp_dir();
    let path = dir.path().join("new.img");
    let size_bytes = 1 << 30;
    let opts = OpenOptions {
        create_size_bytes: Some(size_bytes),
        ..CREATE
    };
    let member = FileMember::open(&path, opts).unwrap();
    assert_eq!(member.size_bytes(), size_bytes);
    assert!(!member.is_block_device());
    let metadata = fs::metadata(&path).unwrap();
    assert_eq!(metadata.len(), size_bytes);
    // Sparse: a gibibyte of length, (almost) no blocks.
    assert!(
        metadata.blocks() * 512 < 1 << 20,
        "{} blocks allocated",
        metadata.blocks()
    );
    member.write_at(size_bytes - 4, b"last").unwrap();
    let mut buf = [0; 4];
    member.read_at(size_bytes - 4, &mut buf).unwrap();
    assert_eq!(&buf, b"last");
}

#[test]
fn missing_directory_on_create_is_not_found() {
    let dir = temp_dir();
    let path = dir.path().join("no/such/dir/new.img");
    let err = FileMember::open(&path, CREATE).unwrap_err();
    assert_eq!(err.kind, MemberErrorKind::NotFound, "{err}");
    assert!(err.to_string().contains("cannot create the file"), "{err}");
}

#[test]
fn existing_file_keeps_its_size() {
    let dir = temp_dir();
    let path = dir.path().join("small.img");
    fs::write(&path, pattern(3, 8192)).unwrap();
    let member = FileMember::open(&path, CREATE).unwrap();
    assert_eq!(member.size_bytes(), 8192);
    assert_eq!(fs::metadata(&path).unwrap().len(), 8192);
    let mut buf = vec![0; 8192];
    member.read_at(0, &mut buf).unwrap();
    assert_eq!(
        buf,
        pattern(3, 8192),
        "opening must not change the contents"
    );
}

#[test]
fn directory_is_not_a_member() {
    let dir = temp_dir();
    let err = FileMember::open(dir.path(), CREATE).unwrap_err();
    assert_eq!(err.kind, MemberErrorKind::NotAMember);
    assert!(err.to_string().contains("directory"), "{err}");
}

#[test]
fn character_device_is_not_a_member() {
    let err = FileMember::open("/dev/null", OpenOptions::default()).unwrap_err();
    assert_eq!(err.kind, MemberErrorKind::NotAMember);
    assert!(err.to_string().contains("character device"), "{err}");
}

#[test]
fn fifo_is_refused_without_blocking() {
    let dir = temp_dir();
    let path = dir.path().join("fifo");
    let c_path = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: c_path is a valid NUL-terminated string that outlives the call.
    if unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) } != 0 {
        println!(
            "skipping FIFO test: mkfifo failed: {}",
            std::io::Error::last_os_error()
        );
        return;
    }
    // Opening a FIFO for reading would block until a writer came; the type
    // check must come first.
    let err = FileMember::open(
        &path,
        OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        },
    )
    .unwrap_err();
    assert_eq!(err.kind, MemberErrorKind::NotAMember);
    assert!(err.to_string().contains("FIFO"), "{err}");
}

#[test]
fn read_only_member_refuses_writes_and_trims() {
    let dir = temp_dir();
    let path = dir.path().join("ro.img");
    fs::write(&path, pattern(4, 65_536)).unwrap();
    let opts = OpenOptions {
        read_only: true,
        ..CREATE
    };
    let member = FileMember::open(&path, opts).unwrap();
    assert!(member.is_read_only());

    let err = member.write_at(0, b"x").unwrap_err();
    assert_eq!(err.kind, MemberErrorKind::PermissionDenied);
    assert!(err.to_string().contains("read-only"), "{err}");
    let err = member.trim(0, 4096).unwrap_err();
    assert_eq!(err.kind, MemberErrorKind::PermissionDenied);

    let mut buf = vec![0; 65_536];
    member.read_at(0, &mut buf).unwrap();
    assert_eq!(buf, pattern(4, 65_536));
    member.flush().unwrap();
    assert_eq!(fs::read(&path).unwrap(), pattern(4, 65_536));
}

/// A file shrunk underneath an open member: reading past the new end inside
/// the old size is an I/O error that says so, never zeros.
#[test]
fn truncated_file_read_is_a_short_read_error() {
    for direct in [false, true] {
        let dir = temp_dir();
        let path = dir.path().join("shrinks.img");
        let opts = OpenOptions {
            create_size_bytes: Some(65_536),
            direct,
            direct_block_devices: false,
            read_only: false,
            claim: false,
            request_timeout: None,
            connections: 0,
        };
        let Some(member) = open_or_skip(&path, opts) else {
            continue;
        };
        member.write_at(0, &pattern(6, 65_536)).unwrap();
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(4096)
            .unwrap();

        let mut buf = vec![0; 8192];
        let err = member.read_at(10_000, &mut buf).unwrap_err();
        assert_eq!(err.kind, MemberErrorKind::Shrunk, "direct={direct}: {err}");
        assert_eq!(
            (err.op, err.offset_bytes, err.len_bytes),
            (Op::Read, 10_000, 8192)
        );
        let path = path.display();
        assert_eq!(
            err.to_string(),
            format!(
                "member {path} shrank from 65536 to 4096 bytes (truncated or resized while \
                 in use?) (found by a read of 8192 bytes at offset 10000)"
            ),
            "direct={direct}"
        );
    }
}

/// The outside tester's story: a raid5 member file was truncated to 2 MiB
/// behind the running server, then a full-stripe write re-extended it past
/// the cut with a hole behind, the write "succeeded", and reads of the
/// hole returned zeros as data, with no error and the member still active.
/// A write into a truncated file must fail as `Shrunk` (the member is then
/// failed), and a write that would re-extend it to its full size must not
/// happen at all.
#[test]
fn write_past_a_truncated_end_is_a_shrink_never_a_silent_re_extension() {
    for direct in [false, true] {
        let dir = temp_dir();
        let path = dir.path().join("cut.img");
        let opts = OpenOptions {
            create_size_bytes: Some(1 << 20),
            direct,
            direct_block_devices: false,
            read_only: false,
            claim: false,
            request_timeout: None,
            connections: 0,
        };
        let Some(member) = open_or_skip(&path, opts) else {
            continue;
        };
        member.write_at(0, &pattern(7, 1 << 20)).unwrap();
        assert!(member.check_size().is_ok(), "direct={direct}");
        let cut = || {
            fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .unwrap()
                .set_len(64 << 10)
                .unwrap()
        };
        cut();

        let err = member.check_size().unwrap_err();
        assert_eq!(err.kind, MemberErrorKind::Shrunk, "direct={direct}: {err}");
        assert!(
            err.to_string()
                .contains("shrank from 1048576 to 65536 bytes"),
            "direct={direct}: {err}"
        );

        // In the middle: it lands (and re-extends the file), but says so.
        let err = member.write_at(512 << 10, &pattern(8, 4096)).unwrap_err();
        assert_eq!(err.kind, MemberErrorKind::Shrunk, "direct={direct}: {err}");
        assert_eq!((err.op, err.offset_bytes), (Op::Write, 512 << 10));

        // At the very end: refused before it is written, so the file does
        // not come back at its full size with a hole inside.
        cut();
        let end = (1 << 20) - 4096;
        for err in [
            member.write_at(end, &pattern(9, 4096)).unwrap_err(),
            member
                .write_parts_at(end, &[&pattern(9, 2048), &pattern(10, 2048)])
                .unwrap_err(),
            member.trim(end, 4096).unwrap_err(),
        ] {
            assert_eq!(err.kind, MemberErrorKind::Shrunk, "direct={direct}: {err}");
        }
        assert_eq!(fs::metadata(&path).unwrap().len(), 64 << 10);
    }
}

#[test]
fn direct_file_of_unaligned_size_is_refused() {
    let dir = temp_dir();
    let path = dir.path().join("odd.img");
    fs::write(&path, vec![0; 4096 + 512]).unwrap();
    let opts = OpenOptions {
        direct: true,
        ..OpenOptions::default()
    };
    match FileMember::open(&path, opts) {
        Ok(_) => panic!("a 4608-byte file opened with O_DIRECT"),
        Err(err)
            if err.source.as_ref().map(|s| s.kind()) == Some(std::io::ErrorKind::Unsupported) =>
        {
            platter_testkit::skips::skipped("an O_DIRECT test", err);
        }
        Err(err) => {
            assert_eq!(err.kind, MemberErrorKind::NotAMember);
            assert!(err.to_string().contains("not a multiple of 4096"), "{err}");
        }
    }
}

#[test]
fn direct_file_reports_its_alignment_as_logical_block() {
    let dir = temp_dir();
    let opts = OpenOptions {
        direct: true,
        ..CREATE
    };
    let Some(member) = open_or_skip(&dir.path().join("d.img"), opts) else {
        return;
    };
    assert!(member.is_direct());
    assert_eq!(member.logical_block_bytes(), 4096);
}

/// Paths open as files; NBD URIs are tried as remote members: with
/// nothing listening, the member is gone, said plainly (it was refused as
/// unsupported before remote members).
#[test]
fn open_member_opens_paths_and_connects_to_nbd_uris() {
    let dir = temp_dir();
    let path = dir.path().join("via-spec.img");
    let member = open_member(path.to_str().unwrap(), CREATE).unwrap();
    assert_eq!(member.size_bytes(), 1 << 20);
    assert_eq!(member.describe(), path.to_str().unwrap());

    let unix = format!(
        "nbd+unix:///export?socket={}",
        dir.path().join("none.sock").display()
    );
    for spec in ["nbd://127.0.0.1:1/export", unix.as_str()] {
        let err = open_member(spec, CREATE)
            .err()
            .expect("nothing listens there");
        assert_eq!(err.kind, MemberErrorKind::Gone, "{err}");
        assert!(
            err.to_string()
                .starts_with(&format!("member {spec}: open: cannot connect")),
            "{err}"
        );
    }
}

#[test]
fn no_space_errno_maps_to_no_space() {
    let err = std::io::Error::from_raw_os_error(libc::ENOSPC);
    assert_eq!(MemberErrorKind::from_io(&err), MemberErrorKind::NoSpace);
    let err = std::io::Error::from_raw_os_error(libc::EDQUOT);
    assert_eq!(MemberErrorKind::from_io(&err), MemberErrorKind::NoSpace);
}

/// A read-only open with `claim` (a read-only server) takes a shared lock:
/// refused while a writer holds the file, it keeps a writer out, and other
/// claimed readers and plain readers (`platter status`) still get in.
#[test]
fn claimed_read_only_file_shares_with_readers_and_excludes_writers() {
    let dir = temp_dir();
    let path = dir.path().join("claimed.img");
    let claim = OpenOptions {
        read_only: true,
        claim: true,
        ..OpenOptions::default()
    };
    let plain = OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    };
    let writer = FileMember::open(&path, CREATE).unwrap();
    let err = FileMember::open(&path, claim).unwrap_err();
    assert!(err.to_string().contains("in use"), "{err}");
    FileMember::open(&path, plain).expect("a plain reader beside a writer");
    drop(writer);

    let first = FileMember::open(&path, claim).unwrap();
    let second = FileMember::open(&path, claim).expect("two claimed readers");
    FileMember::open(&path, plain).expect("a plain reader beside claimed ones");
    let err = FileMember::open(&path, CREATE).unwrap_err();
    assert!(err.to_string().contains("in use"), "{err}");
    drop((first, second));
    FileMember::open(&path, CREATE).expect("the claims end when the readers close");
}
