//! Output to a reader that has gone away (`platter status | head -1`):
//! every command ends quietly or finishes its work, and a command that
//! changes state never stops half-way because its stdout closed.
//!
//! How it showed: `platter status --control X.ctl | head -1` printed
//! "failed printing to stdout: Broken pipe" with a backtrace and exited
//! 101, and `platter reshape --add ... | head -1` died the same way after
//! printing its plan (before writing the labels only by the luck of the
//! order). Here stdout is a pipe whose reader closed before the command
//! started, so the very first write fails: no race with `head`.

mod e2e_support;

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use e2e_support::*;

/// 128 + SIGPIPE: what the command line exits with when stdout closed.
const CLOSED: i32 = 141;

/// A pipe's writing end whose reader is already closed.
fn closed_pipe() -> std::io::PipeWriter {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    writer
}

/// `platter ARGS` with stdout (and, with `close_stderr`, stderr too) a
/// pipe nobody reads; stderr otherwise collected. Killed past `timeout`.
fn run_closed(args: &[&str], close_stderr: bool, timeout: Duration) -> (ExitStatus, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_platter"));
    cmd.args(args)
        .env_remove("PLATTER_LOG")
        .stdout(closed_pipe())
        .stderr(Stdio::piped());
    if close_stderr {
        cmd.stderr(closed_pipe());
    }
    run_as_set(&mut cmd, timeout)
}

/// Runs `cmd` with the stdout and stderr it was given (stdin closed);
/// answers the exit and what a piped stderr said. Killed past `timeout`.
fn run_as_set(cmd: &mut Command, timeout: Duration) -> (ExitStatus, String) {
    cmd.env("RUST_BACKTRACE", "1").stdin(Stdio::null());
    let what = format!("{cmd:?}");
    let mut child = cmd.spawn().expect("platter runs");
    let err = child.stderr.take().map(|mut e| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut e, &mut s);
            s
        })
    });
    let status = wait_for(&mut child, timeout, &what);
    let stderr = err
        .map(|h| h.join().expect("stderr reader"))
        .unwrap_or_default();
    (status, stderr)
}

fn wait_for(child: &mut Child, timeout: Duration, what: &str) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {timeout:?}; killed");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A read-only command: it ends at once with status 141 (or 0 where clap
/// prints help), says nothing on stderr, and above all does not panic.
fn assert_quiet_end(args: &[&str], want: i32) {
    let (status, stderr) = run_closed(args, false, CMD_TIMEOUT);
    let what = format!("platter {}", args.join(" "));
    assert!(
        !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
        "{what}: {status}, stderr:\n{stderr}"
    );
    assert_eq!(
        status.code(),
        Some(want),
        "{what}: exit status with stdout closed ({status}); stderr:\n{stderr}"
    );
    assert!(stderr.is_empty(), "{what}: stderr:\n{stderr}");
}

#[test]
fn read_only_commands_end_quietly_when_stdout_closes() {
    let v = Volume::create(Spec::new("raid5", 3, "64k"), 8 * MIB);
    let members: Vec<&str> = v.members.iter().map(String::as_str).collect();
    let dir = v.path().to_str().unwrap().to_string();
    for args in [
        [&["status"][..], &members].concat(),
        [&["status", "--json"][..], &members].concat(),
        vec!["scan", &dir],
        vec!["scan", "--json", &dir],
        vec!["man"],
        vec!["completions", "bash"],
    ] {
        assert_quiet_end(&args, CLOSED);
    }
    // clap prints help and versions itself (and ignores a closed pipe).
    for args in [
        vec!["--help"],
        vec!["status", "--help"],
        vec!["help", "reshape"],
        vec!["--version"],
    ] {
        assert_quiet_end(&args, 0);
    }
}

#[test]
fn live_commands_end_quietly_when_stdout_closes() {
    let volume = Volume::create(Spec::new("mirror", 2, "64k"), 8 * MIB);
    let s = Server::start(volume);
    let ctl = s.control();
    for args in [
        vec!["status", "--control", &ctl],
        vec!["status", "--json", "--control", &ctl],
        // Nothing runs: it says so, and that line meets the closed pipe.
        vec!["status", "--watch", "--control", &ctl],
        vec!["stats", "--control", &ctl],
        vec!["stats", "--json", "--control", &ctl],
        // A loop that prints each refresh must not go on printing into
        // nothing (or stop only when killed).
        vec!["stats", "--watch", "0.1", "--control", &ctl],
        vec!["read-policy", "--control", &ctl],
    ] {
        assert_quiet_end(&args, CLOSED);
    }
    // A change through the server: it is made, then the answer meets the
    // closed pipe.
    assert_quiet_end(&["read-policy", "--control", &ctl, "round-robin"], CLOSED);
    assert_eq!(
        live_status(&s)["read_policy"]["policy"],
        "round-robin",
        "the change the server was asked for is made"
    );
}

#[test]
fn create_finishes_its_volume_when_stdout_closes() {
    let dir = temp_dir();
    let members = member_paths(dir.path(), 3);
    let mut args = vec!["create", "--level", "raid5", "--member-size", "8M"];
    args.extend(members.iter().map(String::as_str));
    let (status, stderr) = run_closed(&args, false, CMD_TIMEOUT);
    assert!(!stderr.contains("panicked"), "create: {status}:\n{stderr}");
    assert_eq!(
        status.code(),
        Some(0),
        "create: {status}; stderr:\n{stderr}"
    );
    let st = status_json(&members);
    assert_eq!(st["member_count"], 3, "{st}");
    assert_eq!(st["members_online"], 3, "{st}");
    assert_eq!(st["state"], "clean", "{st}");
}

#[test]
fn reshape_writes_every_label_or_none_when_stdout_closes() {
    let v = Volume::create(Spec::new("raid5", 3, "64k"), 8 * MIB);
    let added = v.path().join("m3").to_str().unwrap().to_string();
    let size = v.member_size_bytes.to_string();
    let mut args = vec!["reshape", "--add", &added, "--member-size", &size];
    args.extend(v.members.iter().map(String::as_str));
    // stderr closed too (`2>&1 | head`): nothing it says may stop it.
    let (status, _) = run_closed(&args, true, CMD_TIMEOUT);
    // It printed its plan into the closed pipe and went on: every label,
    // the added member's included, names the new layout.
    assert_eq!(
        status.code(),
        Some(0),
        "reshape with stdout closed: {status}"
    );
    let mut all = v.members.clone();
    all.push(added);
    let st = status_json(&all);
    assert_eq!(st["member_count"], 4, "{st}");
    assert_eq!(st["members_online"], 4, "every label agrees: {st}");
    assert_eq!(st["reshape"]["from"]["members"], 3, "{st}");
    assert_eq!(st["reshape"]["position_bytes"], 0, "{st}");
}

#[test]
fn serve_goes_on_serving_when_its_stdout_and_stderr_close() {
    let v = Volume::create(Spec::new("mirror", 2, "64k"), 8 * MIB);
    let socket = v.path().join("sock");
    let ctl = format!("{}.ctl", socket.display());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_platter"));
    cmd.arg("serve")
        .arg("--socket")
        .arg(&socket)
        .args(&v.members)
        .env("RUST_BACKTRACE", "1")
        .env("PLATTER_LOG", "info")
        .stdin(Stdio::null())
        .stdout(closed_pipe())
        .stderr(closed_pipe());
    let mut child = KillOnDrop(cmd.spawn().expect("platter serve runs"));
    // Its banner and its log lines all meet closed pipes; it serves.
    let deadline = Instant::now() + READY_TIMEOUT;
    let st = loop {
        if let Some(status) = child.0.try_wait().expect("wait") {
            panic!("serve ended with its stdout and stderr closed: {status}");
        }
        let out = run(
            &mut platter(&["status", "--json", "--control", &ctl]),
            CMD_TIMEOUT,
        );
        if out.status.success() {
            break serde_json::from_str::<serde_json::Value>(&out.stdout).expect("status JSON");
        }
        assert!(
            Instant::now() < deadline,
            "serve did not answer: {}",
            out.stderr
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    for m in st["members"].as_array().expect("members") {
        assert_eq!(m["state"], "active", "{st}");
    }
    send_signal(child.0.id(), "TERM");
    let status = wait_for(&mut child.0, STOP_TIMEOUT, "serve after SIGTERM");
    assert_eq!(status.code(), Some(0), "serve's exit: {status}");
    assert_eq!(status.signal(), None);
    assert_eq!(v.state(), "clean", "stopped cleanly");
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `platter status --json MEMBERS`, parsed.
fn status_json(members: &[String]) -> serde_json::Value {
    let out = run_ok(
        platter(&["status", "--json"]).args(members),
        CMD_TIMEOUT,
        "status --json",
    );
    serde_json::from_str(&out.stdout).expect("status JSON")
}

/// Every print of the command line goes through `out.rs`, which handles a
/// closed stdout; a `println!` anywhere else would panic on one again.
#[test]
fn the_command_line_prints_only_through_its_output_module() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = platter_testkit::check::rust_sources(&src);
    assert!(files.len() > 10, "found {} sources", files.len());
    let forbidden = [
        "println!",
        "print!",
        "eprintln!",
        "eprint!",
        "dbg!",
        "io::stdout",
    ];
    for f in files.iter().filter(|f| !f.ends_with("out.rs")) {
        let text = std::fs::read_to_string(f).expect("readable source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for word in forbidden {
                let used = code.match_indices(word).any(|(at, _)| {
                    // `print!` inside `eprint!` is not a use of `print!`.
                    !code[..at]
                        .chars()
                        .next_back()
                        .is_some_and(|c| c.is_alphanumeric() || c == '_')
                });
                assert!(
                    !used,
                    "{}:{}: {word} (print through crate::out: outln!, out!, errln!)",
                    f.display(),
                    n + 1
                );
            }
        }
    }
}

/// A stdout that fails otherwise (`> /dev/full`: no space) is said in one
/// line: a read-only command ends with status 1, one that changes state
/// finishes (its volume made) and exits with its own status.
#[test]
fn a_full_stdout_is_said_in_one_line() {
    let test = "a_full_stdout_is_said_in_one_line";
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        platter_testkit::skips::skipped(test, "no /dev/full here");
        return;
    };
    let dir = temp_dir();
    let members = member_paths(dir.path(), 2);
    let mut create = Command::new(env!("CARGO_BIN_EXE_platter"));
    create
        .args(["create", "--level", "mirror", "--member-size", "8M"])
        .args(&members)
        .stdout(full.try_clone().expect("a second handle"))
        .stderr(Stdio::piped());
    let (status, stderr) = run_as_set(&mut create, CMD_TIMEOUT);
    assert_eq!(status.code(), Some(0), "{test}: create: {status}\n{stderr}");
    assert!(
        stderr.trim_end().lines().count() == 1
            && stderr.contains("cannot write to standard output")
            && !stderr.contains("panicked"),
        "{test}: create: {stderr}"
    );
    assert_eq!(status_json(&members)["members_online"], 2);
    let mut st = Command::new(env!("CARGO_BIN_EXE_platter"));
    st.arg("status")
        .args(&members)
        .stdout(full)
        .stderr(Stdio::piped());
    let (status, stderr) = run_as_set(&mut st, CMD_TIMEOUT);
    assert_eq!(status.code(), Some(1), "{test}: status: {status}\n{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "platter: error: cannot write to standard output: No space left on device (os error 28)",
        "{test}: status"
    );
}
