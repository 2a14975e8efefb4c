//! Alerts without a metrics stack (issue 17): `serve --on-event PROGRAM`
//! runs PROGRAM for each event that needs a person, with the event as
//! arguments and environment, as `mdadm --monitor --program` does. A
//! recording script shows what it was given: the start degraded, a member
//! failed and removed, a spare taking over and its rebuild done, members
//! forced into use; a slow program holds up no I/O; a program that cannot
//! run is refused at start.

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
