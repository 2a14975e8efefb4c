//! Alerts without a metrics stack (issue 17): `serve --on-event PROGRAM`
//! runs PROGRAM for each event that needs a person, with the event as
//! arguments and environment, as `mdadm --monitor --program` does. A
//! recording script shows what it was given: the start degraded, a member
//! failed and removed, a spare taking over and its rebuild done, members
//! forced into use, a reshape done; a slow program holds up no I/O; a
//! program that cannot run is refused at start. The example program
//! shipped in contrib/ mails an event through a sendmail on PATH, and
//! logs it without one.

mod e2e_support;

use e2e_support::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const RAID5: Spec = Spec::new("raid5", 3, "64k");

/// A program that appends one line per run: its arguments, then the
/// PLATTER_ variables, `|`-separated; sleeps `sleep_secs` first.
fn recorder(dir: &Path, sleep_secs: u32) -> (PathBuf, PathBuf) {
    let log = dir.join("events.log");
    let program = dir.join("record-event");
    fs::write(
        &program,
        format!(
            "#!/bin/sh\nsleep {sleep_secs}\n\
             echo \"$*|event=$PLATTER_EVENT|volume=$PLATTER_VOLUME|uuid=$PLATTER_VOLUME_UUID|\
             slot=$PLATTER_SLOT|member=$PLATTER_MEMBER|detail=$PLATTER_DETAIL|time=$PLATTER_TIME\" \
             >> '{}'\n",
            log.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).unwrap();
    (program, log)
}

fn lines(log: &Path) -> Vec<String> {
    fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Waits until a recorded line starts with `event` and returns it.
fn wait_event(log: &Path, event: &str, s: &Server) -> String {
    let start = Instant::now();
    loop {
        if let Some(l) = lines(log)
            .into_iter()
            .find(|l| l.starts_with(&format!("{event} ")))
        {
            return l;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no {event} in {:?}; log:\n{}",
            lines(log),
            tail(&s.log(), 4000)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn control(s: &Server, cmd: &str, args: &[&str]) {
    run_ok(
        platter(&[cmd, "--control", &s.control()]).args(args),
        CMD_TIMEOUT,
        &format!("platter {cmd}"),
    );
}

#[test]
fn each_event_runs_the_program_with_what_happened() {
    let volume = Volume::create(RAID5, 8 * MIB);
    let (program, log) = recorder(volume.path(), 0);
    let name = volume.name.clone();
    let mut s = Server::start_with(
        volume,
        ServeOptions {
            leave_out: vec![2],
            extra_args: vec!["--on-event".into(), program.display().to_string()],
            ..ServeOptions::default()
        },
    );
    // Started without slot 2: one event, no member.
    let l = wait_event(&log, "started-degraded", &s);
    assert!(l.starts_with(&format!("started-degraded {name}|")), "{l}");
    assert!(
        l.contains("|event=started-degraded|") && l.contains(&format!("|volume={name}|")),
        "{l}"
    );
    assert!(
        l.contains("|slot=|member=|") && l.contains("1 of 3 members"),
        "{l}"
    );
    let uuid = s.live("status")["uuid"].as_str().unwrap().to_string();
    assert!(l.contains(&format!("|uuid={uuid}|")), "{l}");
    s.stop();

    // Another volume, whole: a member failed by hand, then removed.
    let volume = Volume::create(RAID5, 8 * MIB);
    let (program, log) = recorder(volume.path(), 0);
    let (name, members) = (volume.name.clone(), volume.members.clone());
    let spare = volume.path().join("spare").display().to_string();
    let s = Server::start_with(
        volume,
        ServeOptions {
            extra_args: vec!["--on-event".into(), program.display().to_string()],
            ..ServeOptions::default()
        },
    );
    control(&s, "fail", &["1"]);
    let l = wait_event(&log, "member-failed", &s);
    assert!(
        l.starts_with(&format!("member-failed {name} {}|", members[1])),
        "{l}"
    );
    assert!(
        l.contains(&format!("|slot=1|member={}|", members[1])),
        "{l}"
    );
    control(&s, "remove", &["1"]);
    let l = wait_event(&log, "member-removed", &s);
    assert!(l.contains("|slot=1|"), "{l}");
    // A spare takes the slot; its rebuild ends.
    control(&s, "add-spare", &["--member-size", "8M", &spare]);
    let l = wait_event(&log, "spare-active", &s);
    assert!(l.contains(&format!("|slot=1|member={spare}|")), "{l}");
    let l = wait_event(&log, "rebuild-done", &s);
    assert!(l.contains("|slot=1|"), "{l}");
    assert!(
        !lines(&log)
            .iter()
            .any(|l| l.starts_with("started-degraded")),
        "a whole start raises nothing: {:?}",
        lines(&log)
    );
    // Every event is in the log too, by name.
    assert!(
        s.log().contains("event=\"member-failed\"") || s.log().contains("event=member-failed"),
        "{}",
        s.log()
    );
}

/// A grow of a running volume ends with `reshape-done`, its detail the
/// size new connections see.
#[test]
fn a_finished_reshape_is_an_event() {
    let volume = Volume::create(RAID5, 8 * MIB);
    let (program, log) = recorder(volume.path(), 0);
    let new = volume.path().join("m3").display().to_string();
    let s = Server::start_with(
        volume,
        ServeOptions {
            extra_args: vec!["--on-event".into(), program.display().to_string()],
            ..ServeOptions::default()
        },
    );
    let size = s.volume.member_size_bytes.to_string();
    control(&s, "reshape", &["--member-size", &size, "--add", &new]);
    let l = wait_event(&log, "reshape-done", &s);
    let grown = s.live("status")["size_bytes"].as_u64().unwrap();
    assert!(grown > s.volume.size_bytes, "{l}");
    assert!(l.contains(&format!("see {grown} bytes")), "{l}");
    assert!(l.contains("|slot=|member=|"), "{l}");
}

#[test]
fn members_forced_into_use_are_an_event() {
    let volume = Volume::create(RAID5, 8 * MIB);
    let (program, log) = recorder(volume.path(), 0);
    let members = volume.members.clone();
    let mut s = Server::start(volume);
    control(&s, "fail", &["0"]);
    s.stop_with("TERM");
    s.options.extra_args = vec![
        "--force".into(),
        "--on-event".into(),
        program.display().to_string(),
    ];
    s.start_again_unchecked();
    let l = wait_event(&log, "forced-assembly", &s);
    assert!(
        l.contains(&format!("|slot=0|member={}|", members[0])),
        "{l}"
    );
}

/// The program runs on a thread of its own: one that takes seconds holds
/// up no request.
#[test]
fn a_slow_program_holds_up_no_io() {
    let test = "a_slow_program_holds_up_no_io";
    let Some(t) = required_tools(test, &["qemu-io"]) else {
        return;
    };
    let volume = Volume::create(RAID5, 8 * MIB);
    let (program, log) = recorder(volume.path(), 5);
    let s = Server::start_with(
        volume,
        ServeOptions {
            leave_out: vec![0],
            extra_args: vec!["--on-event".into(), program.display().to_string()],
            ..ServeOptions::default()
        },
    );
    // started-degraded is running (sleeping 5 s) now.
    let start = Instant::now();
    qemu_io(
        &t,
        s.uri(),
        &["write -P 7 0 1M".into(), "read -P 7 0 1M".into()],
        "I/O while the program runs",
    );
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "I/O waited for the program: {:?}",
        start.elapsed()
    );
    assert!(lines(&log).is_empty(), "the program has not finished yet");
    wait_event(&log, "started-degraded", &s);
}

#[test]
fn a_program_that_cannot_run_is_refused_at_start() {
    let volume = Volume::create(RAID5, 8 * MIB);
    let not_executable = volume.path().join("not-executable");
    fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    for program in [
        volume.path().join("no-such-program").display().to_string(),
        not_executable.display().to_string(),
        "no-such-program-on-path".to_string(),
    ] {
        let out = run(
            platter(&["serve", "--socket"])
                .arg(volume.path().join("sock"))
                .args(["--on-event", &program])
                .args(&volume.members),
            CMD_TIMEOUT,
        );
        assert_eq!(out.status.code(), Some(1), "{}", out.describe("serve"));
        assert!(
            out.stderr.contains("--on-event") && out.stderr.contains("not an executable"),
            "{}",
            out.stderr
        );
    }
}

/// Under systemd (stderr is the stream `JOURNAL_STREAM` names) the log
/// goes to the journal natively, each field its own: an event arrives as
/// `PLATTER_EVENT=...`, which `journalctl PLATTER_EVENT=member-failed`
/// filters on. The journal's socket is played by the test.
#[test]
fn under_systemd_events_reach_the_journal_as_fields() {
    let test = "under_systemd_events_reach_the_journal_as_fields";
    let socket = Path::new("/run/systemd/journal/socket");
    if !is_root() {
        platter_testkit::skips::skipped(test, "needs root (it plays journald's socket)");
        return;
    }
    if socket.exists() {
        platter_testkit::skips::skipped(
            test,
            "a journald runs here: its socket is not ours to take",
        );
        return;
    }
    fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let journal = std::os::unix::net::UnixDatagram::bind(socket).unwrap();
    journal
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    struct RemoveOnDrop<'a>(&'a Path);
    impl Drop for RemoveOnDrop<'_> {
        fn drop(&mut self) {
            let _ = fs::remove_file(self.0);
        }
    }
    let _cleanup = RemoveOnDrop(socket);

    let volume = Volume::create(RAID5, 8 * MIB);
    let stderr_path = volume.path().join("stderr");
    let stderr = fs::File::create(&stderr_path).unwrap();
    let stream = {
        use std::os::unix::fs::MetadataExt;
        let m = stderr.metadata().unwrap();
        format!("{}:{}", m.dev(), m.ino())
    };
    let mut serve = platter(&["serve", "--socket"]);
    serve
        .arg(volume.path().join("sock"))
        // A degraded start, asked for.
        .arg("--run")
        .args(&volume.members[..2])
        .env("JOURNAL_STREAM", &stream)
        .stdout(std::process::Stdio::null())
        .stderr(stderr);
    // Spawned as is: the harness's Background would pipe stderr.
    let mut child = serve.spawn().expect("serve starts");
    let mut buf = vec![0u8; 64 * 1024];
    let mut seen = Vec::new();
    let event = loop {
        let n = journal
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("no event in the journal ({e}); got {seen:?}"));
        let entry = journal_fields(&buf[..n]);
        if entry.get("PLATTER_EVENT").map(String::as_str) == Some("started-degraded") {
            break entry;
        }
        seen.push(entry);
    };
    assert_eq!(event["PLATTER_VOLUME"], volume.name, "{event:?}");
    assert_eq!(event["SYSLOG_IDENTIFIER"], "platter", "{event:?}");
    assert_eq!(event["PRIORITY"], "4", "a warning: {event:?}");
    assert!(event["PLATTER_DETAIL"].contains("1 of 3"), "{event:?}");
    send_signal(child.id(), "TERM");
    assert!(child.wait().unwrap().success());
    // Nothing went to stderr: the journal had it all.
    assert_eq!(fs::read_to_string(&stderr_path).unwrap(), "");
}

/// The fields of one entry in journald's native protocol: `KEY=value\n`,
/// or `KEY\n`, a 64-bit little-endian length, the value and `\n`.
fn journal_fields(mut b: &[u8]) -> std::collections::BTreeMap<String, String> {
    let mut fields = std::collections::BTreeMap::new();
    while let Some(end) = b.iter().position(|&c| c == b'\n' || c == b'=') {
        let key = String::from_utf8_lossy(&b[..end]).into_owned();
        if b[end] == b'=' {
            let rest = &b[end + 1..];
            let nl = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            fields.insert(key, String::from_utf8_lossy(&rest[..nl]).into_owned());
            b = &rest[(nl + 1).min(rest.len())..];
        } else {
            let rest = &b[end + 1..];
            let len = u64::from_le_bytes(rest[..8].try_into().unwrap()) as usize;
            let value = &rest[8..8 + len];
            fields.insert(key, String::from_utf8_lossy(value).into_owned());
            b = &rest[(8 + len + 1).min(rest.len())..];
        }
    }
    fields
}

/// A reshape that cannot go on stops where it is, says why (an event, and
/// `platter status` in words and JSON), and goes on from the labels once
/// the cause is gone. Here a stripe's member hits a bad sector where the
/// move has not reached: a stripe cannot read around it, the member is
/// failed, and the move stops. Before `stuck` was in the status, `status`
/// showed the stopped move at 0 B/s with an ETA of 0 s and `--watch`
/// waited on it for ever.
#[test]
fn a_stopped_reshape_is_an_event_and_goes_on_after_a_restart() {
    let test = "a_stopped_reshape_is_an_event_and_goes_on_after_a_restart";
    let Some(t) = tools(test, &["nbdcopy", "qemu-img"]) else {
        return;
    };
    let volume = Volume::create(Spec::new("stripe", 3, "64k"), 16 * MIB);
    let (program, log) = recorder(volume.path(), 0);
    let mut s = Server::start(volume);
    let image = s.volume.path().join("before.raw");
    write_random_image(&image, s.volume.size_bytes, 0x57c);
    run_ok(
        t.cmd("nbdcopy").arg(&image).arg(s.uri()),
        CMD_TIMEOUT,
        &format!("{test}: fill"),
    );
    s.stop();
    let added = s.volume.path().join("m3").display().to_string();
    let size = s.volume.member_size_bytes.to_string();
    let mut grow = platter(&["grow", "--member-size", &size, "--add", &added]);
    grow.args(&s.volume.members);
    run_ok(&mut grow, CMD_TIMEOUT, &format!("{test}: platter grow"));
    s.volume.members.push(added);
    // 4 MiB into member 1's 6 MiB of data: two thirds of the way through
    // the move.
    let m1 = s.volume.members[1].clone();
    s.options.inject = vec![format!("{m1}=bad-range=5M+4k")];
    s.options.extra_args = vec!["--on-event".into(), program.display().to_string()];
    s.start_again_unchecked();
    let l = wait_event(&log, "reshape-stuck", &s);
    assert!(l.contains("the old layout could not be read"), "{l}");
    let r = &live_status(&s)["reshape"];
    let why = r["stuck"].as_str().unwrap_or_else(|| panic!("{test}: {r}"));
    assert!(why.contains("member 1"), "{test}: {why}");
    let position = r["position_bytes"].as_u64().unwrap();
    assert!(
        position > 0 && position < r["total_bytes"].as_u64().unwrap(),
        "{test}: {r}"
    );
    let text = run_ok(
        &mut platter(&["status", "--control", &s.control()]),
        CMD_TIMEOUT,
        &format!("{test}: status"),
    );
    assert!(
        text.stdout.contains("STOPPED") && text.stdout.contains(why),
        "{test}: {}",
        text.stdout
    );
    // --watch does not wait on it: it ends at once, failing, and says why.
    let watch = run(
        &mut platter(&["status", "--watch", "--control", &s.control()]),
        CMD_TIMEOUT,
    );
    assert!(
        !watch.status.success() && watch.stderr.contains(why),
        "{test}: --watch on a stopped move: {} {}",
        watch.status,
        watch.stderr
    );
    // The sector reads again; the failed member is forced back into use
    // (a stripe has no other copy of its data) and the move goes on.
    s.stop_expecting_errors("TERM", &["bad sectors", "could not be read"]);
    s.options.inject.clear();
    s.options.extra_args.push("--force".into());
    s.start_again_unchecked();
    wait_event(&log, "reshape-done", &s);
    assert_images_identical(&t, &image, s.uri(), &format!("{test}: after the move"));
}

/// contrib/platter-event-mail, the event program the example volumes
/// file names (mdadm --monitor --mail's habit).
fn shipped_mail_program() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../contrib/platter-event-mail")
        .display()
        .to_string()
}

/// Waits until `file` holds `want`; returns its text.
fn wait_for_text(file: &Path, want: &str, s: &Server) -> String {
    let start = Instant::now();
    loop {
        let text = fs::read_to_string(file).unwrap_or_default();
        if text.contains(want) {
            return text;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no {want:?} in {}: {text:?}; log:\n{}",
            file.display(),
            tail(&s.log(), 4000)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The shipped mail program, run by a real event (a member failed by
/// hand), with a sendmail on PATH that keeps what it is given: one mail
/// to PLATTER_MAIL_TO, for `sendmail -t`, naming the event, the volume,
/// the slot and the member.
#[test]
fn the_shipped_mail_program_mails_an_event_through_sendmail() {
    let volume = Volume::create(RAID5, 8 * MIB);
    let (name, members) = (volume.name.clone(), volume.members.clone());
    let bin = volume.path().join("bin");
    fs::create_dir(&bin).unwrap();
    let mail = volume.path().join("mail.txt");
    let sendmail = bin.join("sendmail");
    fs::write(
        &sendmail,
        format!(
            "#!/bin/sh\n{{ echo \"args: $*\"; cat; }} >> '{}'\n",
            mail.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&sendmail, fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let s = Server::start_with(
        volume,
        ServeOptions {
            extra_args: vec!["--on-event".into(), shipped_mail_program()],
            env: vec![
                ("PATH".into(), path),
                ("PLATTER_MAIL_TO".into(), "ops@example.com".into()),
            ],
            ..ServeOptions::default()
        },
    );
    control(&s, "fail", &["1"]);
    let text = wait_for_text(&mail, "Detail:", &s);
    for want in [
        "args: -t -i".to_string(),
        "To: ops@example.com".to_string(),
        format!("Subject: platter: member-failed on volume '{name}'"),
        "Slot:    1".to_string(),
        format!("Member:  {}", members[1]),
    ] {
        assert!(text.contains(&want), "{want:?} not in the mail:\n{text}");
    }
}

/// Without a sendmail the shipped mail program says what it could not
/// mail in one line on stderr, which the server's log keeps.
#[test]
fn without_sendmail_the_shipped_mail_program_logs_the_event() {
    let test = "without_sendmail_the_shipped_mail_program_logs_the_event";
    // A PATH of only what the program uses besides sendmail.
    let Some(t) = required_tools(test, &["uname", "date"]) else {
        return;
    };
    let volume = Volume::create(RAID5, 8 * MIB);
    let (name, members) = (volume.name.clone(), volume.members.clone());
    let bin = volume.path().join("bin");
    fs::create_dir(&bin).unwrap();
    for tool in ["uname", "date"] {
        std::os::unix::fs::symlink(t.path(tool), bin.join(tool)).unwrap();
    }
    let s = Server::start_with(
        volume,
        ServeOptions {
            extra_args: vec!["--on-event".into(), shipped_mail_program()],
            env: vec![("PATH".into(), bin.display().to_string())],
            ..ServeOptions::default()
        },
    );
    control(&s, "fail", &["1"]);
    let want = format!(
        "platter-event-mail: no sendmail on PATH, not mailed to root: member-failed on volume \
         '{name}' member {}:",
        members[1]
    );
    let start = Instant::now();
    while !s.log().contains(&want) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no {want:?} in the log:\n{}",
            tail(&s.log(), 4000)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
