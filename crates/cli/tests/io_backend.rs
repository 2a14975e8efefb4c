//! `--io-backend` on a kernel that refuses io_uring, made so for the
//! server's process alone with a seccomp filter (io_uring_setup fails with
//! EPERM, as under Docker's default profile or `kernel.io_uring_disabled`):
//! `io-uring` is refused in one line and leaves the labels alone; `auto`
//! falls back to threads, says why, and serves.

#![cfg(target_arch = "x86_64")]

mod e2e_support;

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use e2e_support::*;

/// After fork, before exec: io_uring_setup returns EPERM in this process
/// (and in nothing else: the filter is the child's own).
fn without_io_uring(cmd: &mut Command) -> &mut Command {
    // SAFETY: the closure runs in the forked child before exec and calls
    // only prctl(2), which is async-signal-safe; the filter program is on
    // the child's stack for the duration of the call that copies it.
    unsafe {
        cmd.pre_exec(|| {
            let stmt = |code: u32, k: u32| libc::sock_filter {
                code: code as u16,
                jt: 0,
                jf: 0,
                k,
            };
            let jump_eq = |k: u32, jt: u8, jf: u8| libc::sock_filter {
                code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
                jt,
                jf,
                k,
            };
            // seccomp_data: nr at offset 0, arch at offset 4.
            let filter = [
                stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 4),
                jump_eq(0xC000_003E, 1, 0), // AUDIT_ARCH_X86_64
                stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
                stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
                jump_eq(libc::SYS_io_uring_setup as u32, 0, 1),
                stmt(
                    libc::BPF_RET | libc::BPF_K,
                    libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
                ),
                stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
            ];
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &prog as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

fn serve(v: &Volume, backend: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_platter"));
    cmd.args(["serve", "--io-backend", backend, "--socket"])
        .arg(v.path().join("sock"))
        .args(&v.members)
        .env("PLATTER_LOG", "info")
        .env("NO_COLOR", "1");
    cmd
}

#[test]
fn io_uring_refused_by_the_kernel_is_reported_and_auto_falls_back() {
    let test = "io_uring_refused_by_the_kernel_is_reported_and_auto_falls_back";
    let v = Volume::create(Spec::new("raid5", 4, "64k"), 4 * MIB);
    let events = v.status()["event_counter"].as_u64();

    // Asked for io_uring and refused: one line, exit 1, labels untouched.
    let out = run(without_io_uring(&mut serve(&v, "io-uring")), CMD_TIMEOUT);
    assert_eq!(out.status.code(), Some(1), "{}", out.describe(test));
    let last = out.stderr.lines().last().unwrap_or("");
    assert!(
        last.starts_with("platter: error: --io-backend io-uring:"),
        "{}",
        out.describe(test)
    );
    assert!(!out.stderr.contains("panicked"), "{}", out.describe(test));
    assert_eq!(v.state(), "clean", "{test}: labels left alone");
    assert_eq!(v.status()["event_counter"].as_u64(), events, "{test}");

    // auto: falls back to threads, says so, and serves.
    let mut server = Background::spawn(without_io_uring(&mut serve(&v, "auto")), test);
    let socket = v.path().join("sock");
    let deadline = Instant::now() + CMD_TIMEOUT;
    while !socket.exists() {
        assert!(
            server.is_running(),
            "{test}: auto exited\n{}",
            server.stderr()
        );
        assert!(Instant::now() < deadline, "{test}: never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = run_ok(
        &mut platter(&[
            "stats",
            "--json",
            "--control",
            &format!("{}.ctl", socket.display()),
        ]),
        CMD_TIMEOUT,
        test,
    );
    let stats: serde_json::Value = serde_json::from_str(&stats.stdout).expect("stats JSON");
    assert_eq!(stats["io_backend"], "threads", "{test}: {stats}");
    send_signal(server.pid(), "TERM");
    assert!(server.wait(CMD_TIMEOUT).success(), "{}", server.stderr());
    let log = server.stderr();
    let fallback = log
        .lines()
        .find(|l| l.contains("member I/O through the portable thread pool"))
        .unwrap_or_else(|| panic!("{test}: the fallback not logged\n{log}"));
    assert!(
        fallback.contains("reason="),
        "{test}: no reason given: {fallback}"
    );
    assert_eq!(v.state(), "clean", "{test}");
}
