//! Block-device members (loop devices over the member files): served with
//! `O_DIRECT` by default and through io_uring where the kernel allows it,
//! with the page cache on request (`--no-direct`), the data the same
//! either way.
//!
//! Needs root, loop devices, losetup and qemu-io; skips with the reason
//! otherwise, and fails under CI=true.

mod e2e_support;

use std::fs;
use std::path::Path;

use e2e_support::*;

/// The open flags of the server's descriptors for `dev`
/// (`/proc/PID/fdinfo`, octal).
fn open_flags_of(pid: u32, dev: &str) -> Vec<u32> {
    let mut flags = Vec::new();
    for fd in fs::read_dir(format!("/proc/{pid}/fd")).expect("/proc fd") {
        let fd = fd.unwrap();
        let Ok(target) = fs::read_link(fd.path()) else {
            continue;
        };
        if target != Path::new(dev) {
            continue;
        }
        let info = fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            fd.file_name().to_str().unwrap()
        ))
        .expect("fdinfo");
        let octal = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .expect("a flags line")
            .trim();
        flags.push(u32::from_str_radix(octal, 8).expect("octal flags"));
    }
    flags
}

fn octal(flags: &[u32]) -> Vec<String> {
    flags.iter().map(|f| format!("{f:o}")).collect()
}

const O_DIRECT: u32 = libc_o_direct();

/// `O_DIRECT` on x86_64 and aarch64 Linux.
const fn libc_o_direct() -> u32 {
    if cfg!(any(target_arch = "aarch64", target_arch = "arm")) {
        0o200000
    } else {
        0o40000
    }
}

#[test]
fn block_device_members_are_served_with_o_direct_by_default() {
    let test = "block_device_members_are_served_with_o_direct_by_default";
    if !is_root() || !Path::new("/dev/loop-control").exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: CI runs as root with loop devices"
        );
        platter_testkit::skips::skipped(test, "needs root and loop devices");
        return;
    }
    let Some(t) = required_tools(test, &["losetup", "qemu-io"]) else {
        return;
    };
    let mut volume = Volume::create(Spec::new("raid5", 4, "64k"), 16 * MIB);
    let loops: Vec<Loop> = volume
        .members
        .iter()
        .map(|m| Loop::attach(&t, Path::new(m)))
        .collect();
    volume.members = loops.iter().map(|l| l.dev.clone()).collect();
    let il = volume.interleave_bytes;
    // A full stripe (aligned: the ring's O_DIRECT path) and a small write
    // off the 4 KiB grid (the member's own read-modify-write).
    let writes = vec![
        format!("write -P 0x5a 0 {}", 3 * il),
        format!("write -P 0xc3 {} 512", 3 * il + 512),
    ];
    let reads = vec![
        format!("read -P 0x5a 0 {}", 3 * il),
        format!("read -P 0xc3 {} 512", 3 * il + 512),
        format!("read -P 0 {} 512", 3 * il),
    ];

    let mut s = Server::start(volume);
    qemu_io(&t, s.uri(), &writes, "writes on loop devices");
    qemu_io(&t, s.uri(), &reads, "reads on loop devices");
    for dev in &s.volume.members {
        let flags = open_flags_of(s.pid(), dev);
        assert!(!flags.is_empty(), "the server holds {dev} open");
        assert!(
            flags.iter().all(|f| f & O_DIRECT != 0),
            "{dev} opened without O_DIRECT: flags {:?}",
            octal(&flags)
        );
    }
    let stats = s.live("stats");
    let forced = std::env::var("PLATTER_IO_BACKEND").unwrap_or_default();
    if forced == "threads" {
        assert_eq!(stats["io_backend"], "threads", "{stats}");
    } else if std::env::var("CI").as_deref() == Ok("true") {
        assert_eq!(stats["io_backend"], "io-uring", "{stats}");
    }
    s.stop();

    // Through the page cache when asked: the same bytes come back.
    s.options.extra_args = vec!["--no-direct".into()];
    s.start_again();
    qemu_io(&t, s.uri(), &reads, "reads through the page cache");
    for dev in &s.volume.members {
        let flags = open_flags_of(s.pid(), dev);
        assert!(
            !flags.is_empty() && flags.iter().all(|f| f & O_DIRECT == 0),
            "{dev} with --no-direct: flags {:?}",
            octal(&flags)
        );
    }
    s.stop();
    drop(s);
    for l in loops {
        l.detach();
    }
}
