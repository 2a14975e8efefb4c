//! Remote members (issue 16): volumes whose members are NBD exports served
//! by nbdkit (its file plugin over files in the test's directory), built
//! with `platter create` over nbd+unix:// URIs, served, and written and
//! read by qemu-io.
//!
//! Needs nbdkit and qemu-io; skips with the reason elsewhere, fails under
//! `CI=true`.

mod e2e_support;

use e2e_support::*;
use platter_testkit::nbdkit::{Nbdkit, PauseControl};
use platter_testkit::serve::ServeProcess;

/// `n` member files of `size` bytes in `dir`, each exported by its own
/// nbdkit through `filters` (with their parameters in `params`); the
/// servers and their URIs.
fn exported_members(
    test: &str,
    dir: &std::path::Path,
    n: usize,
    size: u64,
    filters: &[&str],
    params: &[&str],
) -> Option<(Vec<Nbdkit>, Vec<String>)> {
    let mut kits = Vec::new();
    for (i, path) in member_paths(dir, n).iter().enumerate() {
        std::fs::File::create(path)
            .and_then(|f| f.set_len(size))
            .expect("a member file");
        let k = Nbdkit::start(
            test,
            &dir.join(format!("m{i}.sock")),
            filters,
            &[&["file", &format!("file={path}")], params].concat(),
        )?;
        kits.push(k);
    }
    let uris = kits.iter().map(Nbdkit::uri).collect();
    Some((kits, uris))
}

/// Polls `done` every 50 ms for up to a minute.
fn wait_until(test: &str, mut done: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done() {
        assert!(
            std::time::Instant::now() < until,
            "{test}: not done in a minute"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn qemu_io_cmds(cmds: &[&str]) -> Vec<String> {
    cmds.iter().map(|c| c.to_string()).collect()
}

/// A mirror over two hosts' exports: written and read through the volume;
/// one host killed without a goodbye (SIGKILL) leaves the mirror serving
/// from the other copy, with the member out of use.
#[test]
fn a_mirror_over_two_exports_serves_on_when_one_host_dies() {
    let test = "a_mirror_over_two_exports_serves_on_when_one_host_dies";
    let Some(t) = required_tools(test, &["qemu-io"]) else {
        return;
    };
    let dir = temp_dir();
    let Some((mut kits, uris)) = exported_members(test, dir.path(), 2, 32 * MIB, &[], &[]) else {
        return;
    };
    let volume = Volume::create_on(
        Spec::new("mirror", 2, "64k"),
        uris.clone(),
        32 * MIB,
        dir,
        &[],
    );
    assert_eq!(volume.status()["members"][1]["path"], uris[1]);
    let mut s = Server::start(volume);
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&[
            "write -P 0x5a 0 8M",
            "write -P 0x11 1000 3333",
            "read -P 0x5a 0 1000",
            "read -P 0x11 1000 3333",
            "read -P 0x5a 4333 1M",
        ]),
        "write through two remote members",
    );
    kits[1].kill();
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&[
            "write -P 0x77 0 1M",
            "flush",
            "read -P 0x77 0 1M",
            "read -P 0x5a 1M 7M",
        ]),
        "serve on with one host gone",
    );
    // Out of use but expected back: disconnected, not failed for good.
    let live = live_status(&s);
    assert_eq!(
        live["members"][1]["state"], "disconnected",
        "{test}: {live}"
    );
    assert!(
        live["members"][1]["away_seconds"].is_u64(),
        "{test}: {live}"
    );
    s.stop_expecting_errors("TERM", &["nbd+unix", "disconnected"]);
}

/// RAID-5 over exports that take only whole 4 KiB blocks, at most 64 KiB
/// at once (nbdkit's blocksize-policy, erroring on anything else): the
/// volume's partial-block writes are merged and long ones split, so
/// qemu-io's odd offsets read back right, also after a restart.
#[test]
fn raid5_over_exports_with_4k_blocks_reads_back_unaligned_writes() {
    let test = "raid5_over_exports_with_4k_blocks_reads_back_unaligned_writes";
    let Some(t) = required_tools(test, &["qemu-io"]) else {
        return;
    };
    let dir = temp_dir();
    let Some((_kits, uris)) = exported_members(
        test,
        dir.path(),
        3,
        16 * MIB,
        &["blocksize-policy"],
        &[
            "blocksize-minimum=4096",
            "blocksize-maximum=65536",
            "blocksize-error-policy=error",
        ],
    ) else {
        return;
    };
    let volume = Volume::create_on(Spec::new("raid5", 3, "64k"), uris, 16 * MIB, dir, &[]);
    let mut s = Server::start(volume);
    let cmds = [
        "write -P 0x21 0 5M",
        "write -P 0x42 513 70001",
        "write -P 0x63 1048575 3",
        "read -P 0x21 0 513",
        "read -P 0x42 513 70001",
        "read -P 0x21 70514 978061",
        "read -P 0x63 1048575 3",
        "read -P 0x21 1048578 1M",
    ];
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&cmds),
        "unaligned writes over 4k-block exports",
    );
    s.restart();
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&cmds[3..]),
        "read back after a restart",
    );
    s.stop();
}

/// A mirror over two nbdkit exports of files in the test's directory,
/// with 1 MiB bitmap regions, filled with 0x5a; then host 1 goes away
/// (killed, or stalled behind nbdkit's pause filter) once the bitmap is
/// quiet, and 0x77 is written to one region while it is away.
struct HostAway {
    t: Tools,
    s: Server,
    kits: Vec<Nbdkit>,
    uris: Vec<String>,
    /// The files behind the exports.
    files: Vec<String>,
    /// Host 1's pause filter, when it has one.
    pause: Option<PauseControl>,
}

/// What stands between host 1's nbdkit and its file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Host1 {
    Plain,
    /// nbdkit's pause filter, driven through `HostAway::pause`.
    Pausable,
    /// nbdkit's error filter: every write fails with EIO while the file
    /// `fail-writes` exists in the volume's directory.
    FailingWrites,
}

impl HostAway {
    /// Host 1 killed (SIGKILL) under a server given `serve_args`.
    fn start(test: &str, serve_args: &[&str]) -> Option<HostAway> {
        HostAway::killed(test, serve_args, Host1::Plain)
    }

    /// Host 1, set up as `host1`, killed (SIGKILL) under a server given
    /// `serve_args`.
    fn killed(test: &str, serve_args: &[&str], host1: Host1) -> Option<HostAway> {
        let mut h = HostAway::filled(test, serve_args, host1)?;
        h.kits[1].kill();
        let expected = if serve_args.contains(&"--no-reconnect") {
            "faulty"
        } else {
            "disconnected"
        };
        h.write_while_away(test, expected);
        Some(h)
    }

    /// Host 1 stalled: its requests held by the pause filter, not answered.
    fn stalled(test: &str, serve_args: &[&str]) -> Option<HostAway> {
        let h = HostAway::filled(test, serve_args, Host1::Pausable)?;
        h.pause.as_ref().expect("a pause filter").pause();
        h.write_while_away(test, "disconnected");
        Some(h)
    }

    fn filled(test: &str, serve_args: &[&str], host1: Host1) -> Option<HostAway> {
        let t = required_tools(test, &["qemu-io"])?;
        let dir = temp_dir();
        let files = member_paths(dir.path(), 2);
        let pause =
            (host1 == Host1::Pausable).then(|| PauseControl::new(&dir.path().join("pause.sock")));
        let fail_writes = dir.path().join("fail-writes");
        let mut kits = Vec::new();
        for (i, path) in files.iter().enumerate() {
            std::fs::File::create(path)
                .and_then(|f| f.set_len(40 * MIB))
                .expect("a member file");
            let file = format!("file={path}");
            let (filters, mut plugin) = match (&pause, i, host1) {
                (Some(p), 1, _) => (vec!["pause"], vec!["file".to_owned(), file, p.param()]),
                (_, 1, Host1::FailingWrites) => (
                    vec!["error"],
                    vec![
                        "file".to_owned(),
                        file,
                        "error-pwrite=EIO".to_owned(),
                        "error-pwrite-rate=100%".to_owned(),
                        format!("error-pwrite-file={}", fail_writes.display()),
                    ],
                ),
                _ => (vec![], vec!["file".to_owned(), file]),
            };
            plugin.shrink_to_fit();
            let plugin: Vec<&str> = plugin.iter().map(String::as_str).collect();
            kits.push(Nbdkit::start(
                test,
                &dir.path().join(format!("m{i}.sock")),
                &filters,
                &plugin,
            )?);
        }
        let uris: Vec<String> = kits.iter().map(Nbdkit::uri).collect();
        let volume = Volume::create_on(
            Spec::new("mirror", 2, "64k"),
            uris.clone(),
            40 * MIB,
            dir,
            &["--bitmap-region", "1M"],
        );
        let s = Server::start_with(
            volume,
            ServeOptions {
                extra_args: serve_args.iter().map(|a| a.to_string()).collect(),
                ..ServeOptions::default()
            },
        );
        let h = HostAway {
            t,
            s,
            kits,
            uris,
            files,
            pause,
        };
        h.io(&["write -P 0x5a 0 32M", "flush"], "fill");
        // The bitmap's sweeps clear the quiet regions (every 5 s): a member
        // leaving now misses only what is written after.
        wait_until(test, || live_status(&h.s)["bitmap"]["dirty_regions"] == 0);
        Some(h)
    }

    fn write_while_away(&self, test: &str, expected: &str) {
        self.io(
            &["write -P 0x77 4M 1M", "flush"],
            "write while the host is away",
        );
        assert_eq!(self.state(1), expected, "{test}");
    }

    /// The volume's spares, by path.
    fn spares(&self) -> Vec<serde_json::Value> {
        live_status(&self.s)["spares"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// A local file added as a spare.
    fn add_spare(&self) -> String {
        let spare = self.s.volume.path().join("spare");
        let spare = spare.to_str().expect("a UTF-8 path").to_owned();
        run_ok(
            &mut platter(&[
                "add-spare",
                "--member-size",
                &(40 * MIB).to_string(),
                "--control",
                &self.s.control(),
                &spare,
            ]),
            CMD_TIMEOUT,
            "add a spare",
        );
        spare
    }

    fn io(&self, cmds: &[&str], what: &str) {
        qemu_io(&self.t, self.s.uri(), &qemu_io_cmds(cmds), what);
    }

    fn state(&self, slot: usize) -> String {
        live_status(&self.s)["members"][slot]["state"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Bytes the volume has written to `slot` so far (label and bitmap
    /// writes included).
    fn written_to(&self, slot: usize) -> u64 {
        self.s.live("stats")["members"][slot]["bytes_written"]
            .as_u64()
            .unwrap_or(0)
    }

    /// With member 0 failed, every byte reads back right from member 1;
    /// then a clean stop.
    fn member_1_alone_holds_the_volume(self) {
        self.member_1_alone_holds_the_volume_expecting(&[]);
    }

    /// [`HostAway::member_1_alone_holds_the_volume`], with more errors the
    /// test expects the server to have logged.
    fn member_1_alone_holds_the_volume_expecting(mut self, expected: &[&str]) {
        run_ok(
            &mut platter(&["fail", "--force", "--control", &self.s.control(), "0"]),
            CMD_TIMEOUT,
            "fail member 0",
        );
        self.io(
            &[
                "read -P 0x5a 0 4M",
                "read -P 0x77 4M 1M",
                "read -P 0x5a 5M 27M",
            ],
            "read from the returned member alone",
        );
        let expected = [&["nbd+unix", "member"][..], expected].concat();
        self.s.stop_expecting_errors("TERM", &expected);
    }
}

/// The story of a remote member: its host dies under a mirror (the member
/// is failed, the volume serves on), writes land in one region meanwhile,
/// the host comes back with the member's bytes as they were, and `platter
/// re-add` brings it back rebuilding only that region: the member's bytes
/// written by the rebuild are a region's worth, not the whole member, and
/// afterwards the volume reads back right from the returned member alone.
/// A second re-add, of the member now in use, is refused with the reason.
#[test]
fn a_host_that_comes_back_is_re_added_and_gets_only_what_it_missed() {
    let test = "a_host_that_comes_back_is_re_added_and_gets_only_what_it_missed";
    // The operator brings it back here; the next test lets the server.
    let Some(mut h) = HostAway::start(test, &["--no-reconnect"]) else {
        return;
    };
    let live = live_status(&h.s);
    let missed = live["bitmap"]["missed_regions"].as_u64().unwrap_or(0);
    assert!((1..=2).contains(&missed), "{test}: missed regions {live}");

    h.kits[1].restart();
    let before = h.written_to(1);
    let readd = |h: &HostAway| {
        run(
            &mut platter(&["re-add", "--json", "--control", &h.s.control(), &h.uris[1]]),
            CMD_TIMEOUT,
        )
    };
    let out = readd(&h);
    assert!(out.status.success(), "{}", out.stderr);
    let answer: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(answer["re_added"], 1, "{answer}");
    assert_eq!(answer["missed_regions"], missed, "{answer}");
    wait_until(test, || h.state(1) == "active");
    let written = h.written_to(1) - before;
    assert!(
        (MIB..=missed * MIB + 256 * 1024).contains(&written),
        "{test}: the re-add wrote {written} bytes to the member; it missed {missed} MiB"
    );
    assert_eq!(live_status(&h.s)["bitmap"]["missed_regions"], 0);

    let refused = readd(&h);
    assert!(
        !refused.status.success() && refused.stderr.contains("in use"),
        "{}",
        refused.stderr
    );
    h.member_1_alone_holds_the_volume();
}

/// A host that comes back unable to write: the re-add reads the member's
/// label (good) but cannot write the new one. Before the fix the server
/// logged "cannot write the label ... ESHUTDOWN", then "member re-added",
/// answered success and put the member in use with a label that still
/// said it had left. Now the re-add is refused naming the label write, the
/// member stays out of use and the volume reads as written.
#[test]
fn a_returning_member_that_cannot_take_its_label_is_not_re_added() {
    let test = "a_returning_member_that_cannot_take_its_label_is_not_re_added";
    let Some(mut h) = HostAway::killed(test, &["--no-reconnect"], Host1::FailingWrites) else {
        return;
    };
    let fail_writes = h.s.volume.path().join("fail-writes");
    std::fs::write(&fail_writes, b"").expect("the error filter's switch");
    h.kits[1].restart();
    let readd = |h: &HostAway| {
        run(
            &mut platter(&["re-add", "--control", &h.s.control(), &h.uris[1]]),
            CMD_TIMEOUT,
        )
    };
    let refused = readd(&h);
    assert!(
        !refused.status.success() && refused.stderr.contains("could not take its label"),
        "{test}: re-add with the host failing writes: {} {}",
        refused.stdout,
        refused.stderr
    );
    assert_eq!(h.state(1), "faulty", "{test}: {}", live_status(&h.s));
    h.io(
        &[
            "read -P 0x5a 0 4M",
            "read -P 0x77 4M 1M",
            "read -P 0x5a 5M 27M",
        ],
        "read with member 1 refused",
    );

    // The failed try was recorded as the member leaving again, after the
    // last label it holds: once the host takes writes, re-add cannot vouch
    // for it any more, and says to replace it (a whole rebuild).
    std::fs::remove_file(&fail_writes).expect("the switch off");
    let out = readd(&h);
    assert!(
        !out.status.success() && out.stderr.contains("platter replace"),
        "{test}: the second re-add: {}",
        out.stderr
    );
    assert_eq!(h.state(1), "faulty", "{test}");
    h.s.stop_expecting_errors("TERM", &["nbd+unix", "member", "label"]);
}

/// The same host death and return without the operator: the server tries
/// the member's URI again with backoff and, once nbdkit answers, brings it
/// back rebuilding only the region written meanwhile.
#[test]
fn a_host_that_comes_back_is_reconnected_on_its_own() {
    let test = "a_host_that_comes_back_is_reconnected_on_its_own";
    let Some(mut h) = HostAway::start(test, &[]) else {
        return;
    };
    let before = h.written_to(1);
    // Away for a few of the server's tries.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(h.state(1), "disconnected");
    h.kits[1].restart();
    wait_until(test, || h.state(1) == "active");
    let written = h.written_to(1) - before;
    assert!(
        written <= 2 * MIB + 256 * 1024,
        "{test}: the reconnect wrote {written} bytes to the member"
    );
    assert!(
        h.s.log().contains("reconnected; rebuilding what it missed"),
        "{}",
        h.s.log()
    );
    h.member_1_alone_holds_the_volume();
}

/// A split brain: while its host was cut off from the head, member 1 was
/// served on its own there (its label written, a write made). When its
/// export answers again the server must not bring it back on its own (the
/// bitmap knows nothing of the writes made there), it says why once, and
/// `re-add` is refused naming `replace`. The member stays out of use and
/// the volume reads as the head wrote it.
#[test]
fn a_member_written_elsewhere_is_not_brought_back() {
    let test = "a_member_written_elsewhere_is_not_brought_back";
    let Some(mut h) = HostAway::start(test, &[]) else {
        return;
    };
    // Member 1's file served alone (its host's nbdkit is down, so the file
    // is free), written, stopped.
    // Not m1.sock: the killed nbdkit left its socket file there.
    let lone = h.files[1].clone() + ".lone.sock";
    let mut other = ServeProcess::spawn(
        platter(&["serve", "--run", "--socket", &lone, &h.files[1]])
            .stdout(std::process::Stdio::piped()),
        Default::default(),
        Default::default(),
    );
    wait_until(test, || std::path::Path::new(&lone).exists());
    qemu_io(
        &h.t,
        &format!("nbd+unix:///v-mirror-2-64k?socket={lone}"),
        &qemu_io_cmds(&["write -P 0x99 8M 64k", "flush"]),
        "a write on the lone member",
    );
    other
        .stop("TERM", std::time::Duration::from_secs(30))
        .expect("the lone server stops");

    h.kits[1].restart();
    wait_until(test, || {
        h.s.log()
            .contains("the member's host answers again, but it cannot come back on its own")
    });
    assert_eq!(h.state(1), "faulty", "{test}: it cannot come back: failed");
    let refused = run(
        &mut platter(&["re-add", "--control", &h.s.control(), &h.uris[1]]),
        CMD_TIMEOUT,
    );
    assert!(
        !refused.status.success()
            && refused.stderr.contains("written elsewhere")
            && refused.stderr.contains("platter replace"),
        "{}",
        refused.stderr
    );
    h.io(
        &[
            "read -P 0x5a 0 4M",
            "read -P 0x77 4M 1M",
            "read -P 0x5a 5M 27M",
        ],
        "the volume as the head wrote it",
    );
    h.s.stop_expecting_errors("TERM", &["nbd+unix", "member", "cannot come back"]);
}

/// A host that stalls (nbdkit's pause filter holds its requests) for less
/// than --member-timeout: after --remote-timeout its connection is dropped
/// and the volume serves on without it; it is `disconnected`, so the spare
/// waits; its tries fail while it stalls (it takes the connection but
/// answers nothing). Once it answers again it comes back by itself,
/// rebuilding only the region written meanwhile, the spare still a spare,
/// and the volume reads back right from it alone.
#[test]
fn a_stall_shorter_than_the_member_timeout_is_waited_out() {
    let test = "a_stall_shorter_than_the_member_timeout_is_waited_out";
    let args = ["--remote-timeout", "1", "--member-timeout", "60"];
    let Some(h) = HostAway::stalled(test, &args) else {
        return;
    };
    h.add_spare();
    let before = h.written_to(1);
    // Several tries, each taking the connection and timing out on a read.
    std::thread::sleep(std::time::Duration::from_secs(4));
    let live = live_status(&h.s);
    assert_eq!(
        live["members"][1]["state"], "disconnected",
        "{test}: {live}"
    );
    assert!(
        live["members"][1]["away_seconds"].as_u64() >= Some(2),
        "{test}: {live}"
    );
    assert_eq!(h.spares().len(), 1, "{test}: the spare waits: {live}");

    h.pause.as_ref().expect("paused").resume();
    wait_until(test, || h.state(1) == "active");
    assert_eq!(h.spares().len(), 1, "{test}: the spare was not needed");
    assert_eq!(live_status(&h.s)["members"][1]["path"], h.uris[1]);
    let written = h.written_to(1) - before;
    assert!(
        written <= 2 * MIB + 256 * 1024,
        "{test}: coming back wrote {written} bytes to the member"
    );
    h.member_1_alone_holds_the_volume();
}

/// A host that stalls for longer than --member-timeout: disconnected
/// first (the spare waits), then failed for good at the timeout, and the
/// spare takes its place and is rebuilt. When the stalled host answers
/// again it is not brought back (its slot is the spare's now), and the
/// volume reads back right from the spare alone.
#[test]
fn a_stall_longer_than_the_member_timeout_fails_the_member() {
    let test = "a_stall_longer_than_the_member_timeout_fails_the_member";
    let args = ["--remote-timeout", "1", "--member-timeout", "5"];
    let Some(h) = HostAway::stalled(test, &args) else {
        return;
    };
    let spare = h.add_spare();
    assert_eq!(h.state(1), "disconnected", "{test}");
    assert_eq!(h.spares().len(), 1, "{test}: the spare waits");

    wait_until(test, || h.spares().is_empty());
    assert!(
        h.s.log().contains("away longer than --member-timeout"),
        "{test}: {}",
        h.s.log()
    );
    wait_until(test, || h.state(1) == "active");
    assert_eq!(live_status(&h.s)["members"][1]["path"], spare, "{test}");

    h.pause.as_ref().expect("paused").resume();
    std::thread::sleep(std::time::Duration::from_secs(2));
    let live = live_status(&h.s);
    assert_eq!(live["members"][1]["path"], spare, "{test}: {live}");
    assert!(
        !h.s.log().contains("reconnected"),
        "{test}: the stalled member came back: {}",
        h.s.log()
    );
    h.member_1_alone_holds_the_volume();
}

/// A host that stalls past --member-timeout with no spare to take over:
/// the member is failed for good, and platter keeps no connection to its
/// host, so that once the host answers again its nbdkit exits on SIGTERM.
/// How it showed: nbdkit offers multi-conn, platter opens two connections
/// over a Unix socket, and the one idle through the stall stayed open
/// until `platter remove`; the nbdkit, holding it, did not exit on SIGTERM.
/// It showed a second bug once (CI, 2026-12-02): a reconnect try running
/// when the timeout failed the member then re-added it ("member re-added"
/// right after "away longer than --member-timeout: failed"), and the
/// member logged as failed was back, then "disconnected" again.
#[test]
fn a_member_failed_for_a_stall_keeps_no_connection_to_its_host() {
    let test = "a_member_failed_for_a_stall_keeps_no_connection_to_its_host";
    let args = ["--remote-timeout", "1", "--member-timeout", "5"];
    let Some(mut h) = HostAway::stalled(test, &args) else {
        return;
    };
    wait_until(test, || {
        h.s.log().contains("away longer than --member-timeout")
    });
    assert_eq!(h.state(1), "faulty", "{test}");
    // The requests held through the stall are answered (into sockets
    // platter has shut); nothing else keeps the host's nbdkit.
    h.pause.as_ref().expect("paused").resume();
    assert!(
        h.kits[1].terminate(std::time::Duration::from_secs(20)),
        "{test}: the failed member's nbdkit did not exit on SIGTERM within 20 s: \
         platter still holds a connection to it"
    );
    assert_eq!(h.state(1), "faulty", "{test}");
    h.io(&["read -P 0x77 4M 1M"], "read from the other copy");
    h.s.stop_expecting_errors("TERM", &["nbd+unix", "member"]);
}

/// How host 1 leaves in [`an_outage_under_fio_verify`].
#[derive(Clone, Copy, Debug)]
enum Outage {
    /// nbdkit killed (SIGKILL), started again later.
    Kill,
    /// nbdkit's pause filter holds its requests, released later.
    Stall,
}

/// The story the issue asks for: a host leaves (`outage`) while fio
/// writes and verifies 4k blocks over volume bytes 8 MiB to 12 MiB (the
/// bitmap's regions 8 to 11). fio sees no error and every block verifies;
/// the member is disconnected and exactly those 4 regions are missed.
/// When the host is back the member returns on its own and the rebuild
/// writes those 4 MiB to it, no more; `check` finds nothing, and the
/// volume read from the returned member alone has the same sha256 as the
/// volume had before it returned.
fn an_outage_under_fio_verify(test: &str, outage: Outage) {
    let Some(t) = tools_with_fio_nbd(test, &["fio", "nbdcopy", "sha256sum"]) else {
        return;
    };
    let args = ["--remote-timeout", "1", "--member-timeout", "60"];
    let host1 = match outage {
        Outage::Stall => Host1::Pausable,
        _ => Host1::Plain,
    };
    let Some(mut h) = HostAway::filled(test, &args, host1) else {
        return;
    };
    let mut fio = t.cmd("fio");
    fio.args([
        "--name=outage",
        "--thread",
        "--ioengine=nbd",
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=8",
        "--offset=8M",
        "--size=4M",
        // About 2 s of writes: the host leaves in the middle of them.
        "--rate_iops=500",
        "--randrepeat=1",
        "--verify=crc32c",
        "--verify_fatal=1",
        "--verify_state_save=0",
    ])
    .arg(format!("--uri={}", h.s.uri()));
    let what = format!("{test}: fio");
    let load = std::thread::spawn(move || run_ok(&mut fio, CMD_TIMEOUT, &what));
    std::thread::sleep(std::time::Duration::from_millis(500));
    match outage {
        Outage::Kill => h.kits[1].kill(),
        Outage::Stall => h.pause.as_ref().expect("a pause filter").pause(),
    }
    let out = load.join().expect("fio's thread");
    assert!(out.stdout.contains("err= 0"), "{}", out.describe(test));

    let live = live_status(&h.s);
    assert_eq!(
        live["members"][1]["state"], "disconnected",
        "{test}: {live}"
    );
    assert_eq!(live["bitmap"]["missed_regions"], 4, "{test}: {live}");
    let digest = volume_sha256(&t, h.s.uri(), test);
    let before = h.written_to(1);
    match outage {
        Outage::Kill => h.kits[1].restart(),
        Outage::Stall => h.pause.as_ref().expect("a pause filter").resume(),
    }
    wait_until(test, || h.state(1) == "active");
    let written = h.written_to(1) - before;
    assert!(
        (4 * MIB..=4 * MIB + 256 * 1024).contains(&written),
        "{test}: the return wrote {written} bytes to the member; it missed 4 MiB"
    );
    let report = h.s.live("check");
    assert_eq!(report["mismatched_stripes"], 0, "{test}: {report}");
    run_ok(
        &mut platter(&["fail", "--force", "--control", &h.s.control(), "0"]),
        CMD_TIMEOUT,
        "fail member 0",
    );
    assert_eq!(
        volume_sha256(&t, h.s.uri(), test),
        digest,
        "{test}: the returned member alone differs"
    );
    h.s.stop_expecting_errors("TERM", &["nbd+unix", "member"]);
}

#[test]
fn a_host_killed_under_fio_verify_comes_back_with_only_its_dirty_regions() {
    an_outage_under_fio_verify(
        "a_host_killed_under_fio_verify_comes_back_with_only_its_dirty_regions",
        Outage::Kill,
    );
}

#[test]
fn a_host_stalled_under_fio_verify_comes_back_with_only_its_dirty_regions() {
    an_outage_under_fio_verify(
        "a_host_stalled_under_fio_verify_comes_back_with_only_its_dirty_regions",
        Outage::Stall,
    );
}

/// Member reads by slot, as `stats` counts them.
fn member_reads(s: &Server) -> Vec<u64> {
    s.live("stats")["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| m["reads"].as_u64().expect("reads"))
        .collect()
}

/// A mirror with one copy near (an nbdkit export answering at once) and
/// one far (5 ms added to each request by nbdkit's delay filter): with
/// the default read policy and nothing said, 4k random reads one at a
/// time go to the near copy (the balancing weighs each member's measured
/// latency; counting outstanding I/Os alone, both copies are idle at each
/// read and half the reads went to the far one); with `--write-mostly`
/// naming the near copy they all go to the far one, while writes still
/// reach both.
#[test]
fn reads_prefer_the_near_copy_unless_it_is_write_mostly() {
    let test = "reads_prefer_the_near_copy_unless_it_is_write_mostly";
    let Some(t) = tools_with_fio_nbd(test, &["fio", "qemu-io"]) else {
        return;
    };
    let dir = temp_dir();
    let files = member_paths(dir.path(), 2);
    let mut kits = Vec::new();
    for (i, path) in files.iter().enumerate() {
        std::fs::File::create(path)
            .and_then(|f| f.set_len(32 * MIB))
            .expect("a member file");
        let file = format!("file={path}");
        let (filters, plugin): (&[&str], Vec<&str>) = if i == 1 {
            (
                &["delay"],
                vec!["file", &file, "delay-read=5ms", "delay-write=5ms"],
            )
        } else {
            (&[], vec!["file", &file])
        };
        let Some(k) = Nbdkit::start(
            test,
            &dir.path().join(format!("m{i}.sock")),
            filters,
            &plugin,
        ) else {
            return;
        };
        kits.push(k);
    }
    let uris: Vec<String> = kits.iter().map(Nbdkit::uri).collect();
    let volume = Volume::create_on(
        Spec::new("mirror", 2, "64k"),
        uris.clone(),
        32 * MIB,
        dir,
        &[],
    );
    let fio_reads = |s: &Server| {
        let before = member_reads(s);
        run_ok(
            t.cmd("fio")
                .args([
                    "--name=near",
                    "--thread",
                    "--ioengine=nbd",
                    "--rw=randread",
                    "--bs=4k",
                    "--iodepth=1",
                    "--size=16M",
                    "--time_based",
                    "--runtime=3",
                ])
                .arg(format!("--uri={}", s.uri())),
            CMD_TIMEOUT,
            &format!("{test}: fio"),
        );
        let after = member_reads(s);
        [after[0] - before[0], after[1] - before[1]]
    };

    let mut s = Server::start(volume);
    qemu_io(&t, s.uri(), &qemu_io_cmds(&["write -P 0x5a 0 16M"]), "fill");
    let [near, far] = fio_reads(&s);
    let live = live_status(&s);
    assert!(
        near > 0 && far * 10 <= near,
        "{test}: {near} reads on the near copy, {far} on the far one: {}",
        live["read_policy"]
    );
    // The far copy takes 5 ms; the near one a fraction of a millisecond,
    // but on a loaded machine (a CI run beside a 20,000-seed soak) it was
    // measured at 443 us against the far's 3,704: 4 times apart still
    // says which is far, 10 was the quiet machine's margin.
    let latency = &live["read_policy"]["latency_us"];
    assert!(
        latency[1].as_u64() > latency[0].as_u64().map(|l| 4 * l),
        "{test}: measured latencies {latency}"
    );
    s.stop();
    s.options.extra_args = vec!["--write-mostly".into(), uris[0].clone()];
    s.start_again();
    assert_eq!(
        live_status(&s)["read_policy"]["write_mostly"],
        serde_json::json!([0])
    );
    let [near, far] = fio_reads(&s);
    assert!(
        far > 0 && near == 0,
        "{test}: write-mostly near copy read {near} times, far {far}"
    );
    // Writes still reach it: the near copy alone reads back what is written now.
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&["write -P 0x66 0 1M", "flush"]),
        "write",
    );
    run_ok(
        &mut platter(&["fail", "--force", "--control", &s.control(), "1"]),
        CMD_TIMEOUT,
        "fail the far copy",
    );
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&["read -P 0x66 0 1M", "read -P 0x5a 1M 15M"]),
        "read from the near copy alone",
    );
    s.stop_expecting_errors("TERM", &[]);
}

/// A host whose export comes back smaller than the member it held (nbdkit's
/// truncate filter cuts it to half): the server says which member and why,
/// leaves it out, and serves the mirror from the other copy, every byte
/// as written; the shrunken export is not written to.
#[test]
fn an_export_that_shrank_is_left_out_with_the_reason() {
    let test = "an_export_that_shrank_is_left_out_with_the_reason";
    let Some(t) = required_tools(test, &["qemu-io"]) else {
        return;
    };
    let dir = temp_dir();
    let Some((mut kits, uris)) = exported_members(test, dir.path(), 2, 32 * MIB, &[], &[]) else {
        return;
    };
    let files = member_paths(dir.path(), 2);
    let volume = Volume::create_on(
        Spec::new("mirror", 2, "64k"),
        uris.clone(),
        32 * MIB,
        dir,
        &[],
    );
    let mut s = Server::start(volume);
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&["write -P 0x3c 0 16M", "flush"]),
        "fill",
    );
    s.stop();
    let socket = kits[1].socket().to_owned();
    kits[1].kill();
    let before = std::fs::read(&files[1]).expect("member 1's file");
    let Some(small) = Nbdkit::start(
        test,
        &socket,
        &["truncate"],
        &["file", &format!("file={}", files[1]), "truncate=16M"],
    ) else {
        return;
    };
    kits[1] = small;
    s.start_again_unchecked();
    let live = live_status(&s);
    assert_eq!(live["state"], "degraded", "{test}: {live}");
    assert_ne!(live["members"][1]["state"], "active", "{test}: {live}");
    let reason = format!(
        "member {}: device is {} bytes but its label needs",
        uris[1],
        16 * MIB
    );
    wait_until(test, || s.log().contains(&reason));
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&["read -P 0x3c 0 16M", "write -P 0x11 0 64k"]),
        "serve on",
    );
    s.stop_expecting_errors("TERM", &["nbd+unix", "member"]);
    assert!(
        std::fs::read(&files[1]).expect("member 1's file") == before,
        "{test}: the shrunken export was written to"
    );
}

/// Two tiers, platter serving members for platter (docs/remote.md): two
/// "hosts" each serve a one-member concat of a local file, and a head
/// builds a mirror over their exports. Written and read through the head;
/// one host stopped (its server says ESHUTDOWN and closes) leaves the
/// member disconnected and the mirror serving; started again, the host's
/// export comes back on its own with only the region written meanwhile,
/// and then holds every byte alone.
#[test]
fn platter_serves_the_members_of_a_platter_mirror() {
    let test = "platter_serves_the_members_of_a_platter_mirror";
    let Some(t) = required_tools(test, &["qemu-io"]) else {
        return;
    };
    let mut hosts: Vec<Server> = (0..2)
        .map(|_| Server::start(Volume::create(Spec::new("concat", 1, "64k"), 40 * MIB)))
        .collect();
    let uris: Vec<String> = hosts.iter().map(|h| h.uri().to_owned()).collect();
    let head = Volume::create_on(
        Spec::new("mirror", 2, "64k"),
        uris.clone(),
        40 * MIB,
        temp_dir(),
        &["--bitmap-region", "1M"],
    );
    let mut s = Server::start(head);
    let io = |s: &Server, cmds: &[&str], what: &str| {
        qemu_io(&t, s.uri(), &qemu_io_cmds(cmds), &format!("{test}: {what}"))
    };
    io(
        &s,
        &["write -P 0x5a 0 16M", "flush", "read -P 0x5a 0 16M"],
        "fill",
    );
    wait_until(test, || live_status(&s)["bitmap"]["dirty_regions"] == 0);

    hosts[1].stop();
    io(
        &s,
        &["write -P 0x77 4M 1M", "flush"],
        "write while host 1 is down",
    );
    let live = live_status(&s);
    assert_eq!(
        live["members"][1]["state"], "disconnected",
        "{test}: {live}"
    );
    assert_eq!(live["bitmap"]["missed_regions"], 1, "{test}: {live}");

    hosts[1].start_again();
    wait_until(test, || live_status(&s)["members"][1]["state"] == "active");
    assert!(s.log().contains("reconnected; rebuilding what it missed"));
    run_ok(
        &mut platter(&["fail", "--force", "--control", &s.control(), "0"]),
        CMD_TIMEOUT,
        "fail member 0",
    );
    io(
        &s,
        &[
            "read -P 0x5a 0 4M",
            "read -P 0x77 4M 1M",
            "read -P 0x5a 5M 11M",
        ],
        "read from host 1 alone",
    );
    s.stop_expecting_errors("TERM", &["nbd+unix", "member"]);
    for h in &mut hosts {
        h.stop();
    }
}

/// The head restarts while one host is down: the server starts without
/// the unreachable export instead of refusing (`status` lists it under
/// `unreachable`), serves the mirror from the other, and when the host
/// answers it finds the export's slot in its label and brings it back,
/// rebuilding only what was written meanwhile.
#[test]
fn a_host_down_when_the_server_starts_is_taken_back_when_it_answers() {
    let test = "a_host_down_when_the_server_starts_is_taken_back_when_it_answers";
    let Some(mut h) = HostAway::filled(test, &[], Host1::Plain) else {
        return;
    };
    h.s.stop();
    h.kits[1].kill();

    h.s.start_again_unchecked();
    let live = live_status(&h.s);
    assert_eq!(live["unreachable"][0]["uri"], h.uris[1], "{test}: {live}");
    assert_eq!(live["members"][1]["state"], "missing", "{test}: {live}");
    h.io(
        &["write -P 0x77 4M 1M", "flush", "read -P 0x5a 0 4M"],
        "serve without host 1",
    );
    assert_eq!(live_status(&h.s)["bitmap"]["missed_regions"], 1);

    h.kits[1].restart();
    wait_until(test, || h.state(1) == "active");
    let live = live_status(&h.s);
    assert_eq!(live["unreachable"], serde_json::json!([]), "{test}: {live}");
    assert!(h.s.log().contains("reconnected; rebuilding what it missed"));
    h.member_1_alone_holds_the_volume();
}

/// A remote member that starts failing its reads while it is being
/// rebuilt: it is failed, its rebuild stops, the server serves on from
/// the other copy, and every byte reads back right.
///
/// How the bug showed: a mirror over two exports, the first slowed by
/// nbdkit's delay filter and the second behind its error filter; the
/// second's nbdkit was killed, the volume written, nbdkit started again
/// and the member re-added; with clients reading it (`prefer:1`), its
/// reads began to fail. The member was failed while a rebuild step's reads
/// from the slow member were out, and when they came in the engine
/// computed writes for a rebuild that no longer existed: "panicked at
/// crates/core/src/volume/rebuild.rs: rebuild in progress", then "engine
/// lock poisoned"; the server exited 101 and dropped every client, 4 runs
/// of 4. The seeded suite `failures_during_rebuilds_serve_no_wrong_byte`
/// drives the same engine path.
#[test]
fn a_member_failing_reads_during_its_rebuild_is_failed_and_the_server_serves_on() {
    let test = "a_member_failing_reads_during_its_rebuild_is_failed_and_the_server_serves_on";
    let Some(t) = required_tools(test, &["qemu-io"]) else {
        return;
    };
    let dir = temp_dir();
    let trigger = dir.path().join("fail-reads");
    let files = member_paths(dir.path(), 2);
    let mut kits = Vec::new();
    for (i, path) in files.iter().enumerate() {
        std::fs::File::create(path)
            .and_then(|f| f.set_len(40 * MIB))
            .expect("a member file");
        let file = format!("file={path}");
        let error_file = format!("error-pread-file={}", trigger.display());
        // Member 0 slow to read, so that a rebuild step's reads from it
        // are out when member 1 fails; member 1 fails its reads once the
        // trigger file exists.
        let (filters, params): (Vec<&str>, Vec<&str>) = match i {
            0 => (vec!["delay"], vec!["delay-read=300ms"]),
            _ => (
                vec!["error"],
                vec!["error-pread=EIO", "error-pread-rate=1", &error_file],
            ),
        };
        let plugin = [&["file", file.as_str()], params.as_slice()].concat();
        let Some(k) = Nbdkit::start(
            test,
            &dir.path().join(format!("m{i}.sock")),
            &filters,
            &plugin,
        ) else {
            return;
        };
        kits.push(k);
    }
    let uris: Vec<String> = kits.iter().map(Nbdkit::uri).collect();
    let volume = Volume::create_on(
        Spec::new("mirror", 2, "64k"),
        uris.clone(),
        40 * MIB,
        dir,
        &["--bitmap-region", "1M"],
    );
    let mut s = Server::start_with(
        volume,
        ServeOptions {
            extra_args: vec!["--no-reconnect".into()],
            ..ServeOptions::default()
        },
    );
    let uri = s.uri().to_owned();
    let io = |cmds: &[&str], what: &str| {
        qemu_io(&t, &uri, &qemu_io_cmds(cmds), what);
    };
    io(&["write -P 0x5a 0 32M", "flush"], "fill");
    // Member 1 then misses only what is written while it is away (the
    // bitmap's sweeps clear quiet regions every 5 s): its rebuild starts
    // at 4 MiB, and the first 4 MiB are read from it at once.
    wait_until(test, || live_status(&s)["bitmap"]["dirty_regions"] == 0);
    kits[1].kill();
    io(
        &["write -P 0x77 4M 16M", "flush"],
        "write while member 1 is away",
    );
    assert_eq!(s.member_states()[1], "faulty");
    kits[1].restart();
    let control = s.control();
    let cmd = |args: &[&str], what: &str| {
        run_ok(
            &mut platter(&[args, &["--control", &control]].concat()),
            CMD_TIMEOUT,
            what,
        )
    };
    cmd(&["read-policy", "prefer:1"], "prefer member 1");
    cmd(&["re-add", &uris[1]], "re-add member 1");
    // Reads from member 1 below its rebuild cursor, then its reads fail
    // while the rebuild is under way (16 regions at 300 ms a step): the
    // read that fails comes while a step reads from member 0.
    io(&["read -P 0x5a 0 1M"], "read while member 1 is rebuilt");
    let live = live_status(&s);
    assert_eq!(live["members"][1]["state"], "rebuilding", "{test}: {live}");
    assert!(
        live["rebuild"]["cursor_stripe"].as_u64() >= Some(64),
        "{test}: the rebuild passed the first 4 MiB: {live}"
    );
    std::fs::write(&trigger, b"").expect("the trigger file");
    io(
        &[
            "read -P 0x5a 0 4M",
            "read -P 0x77 4M 16M",
            "read -P 0x5a 20M 12M",
        ],
        "read while member 1 fails its reads",
    );
    assert!(s.is_running(), "{test}: the server exited:\n{}", s.log());
    assert_eq!(s.member_states(), ["active", "faulty"], "{test}");
    let log = s.log();
    assert!(!log.contains("panicked"), "{test}: {log}");
    assert!(!log.contains("poisoned"), "{test}: {log}");
    io(
        &["write -P 0x33 8M 1M", "flush", "read -P 0x33 8M 1M"],
        "write after member 1 failed",
    );
    s.stop_expecting_errors("TERM", &["nbd+unix", "member", "rebuild"]);
}

/// A member URI naming an export its server does not have is refused in
/// one line that says what the server offers, or that it lists none; no
/// empty parentheses when the server gave no reason. How it showed:
/// `the server has no export named "x" ()` from an nbdkit that lists no
/// exports and sends no message with its refusal.
#[test]
fn an_unknown_export_is_refused_saying_what_the_server_offers() {
    let test = "an_unknown_export_is_refused_saying_what_the_server_offers";
    let dir = temp_dir();
    let strict = |sock: &str, names: &[&str]| {
        let mut args = vec![
            "memory".to_owned(),
            "16M".to_owned(),
            "exportname-strict=true".to_owned(),
            "exportname-list=explicit".to_owned(),
        ];
        args.extend(names.iter().map(|n| format!("exportname={n}")));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Nbdkit::start(test, &dir.path().join(sock), &["exportname"], &args)
    };
    let Some(none) = strict("none.sock", &[]) else {
        return;
    };
    let Some(two) = strict("two.sock", &["a", "b"]) else {
        return;
    };
    let refusal = |k: &Nbdkit| {
        let uri = format!("nbd+unix:///x?socket={}", k.socket().display());
        let out = run(&mut platter(&["status", &uri]), CMD_TIMEOUT);
        assert!(!out.status.success(), "{}", out.describe(test));
        // nbdkit logs the refusal on its own stderr, not ours.
        let line = out.stderr.trim_end().to_owned();
        assert_eq!(line.lines().count(), 1, "{test}: {line}");
        assert!(!line.contains("()"), "{test}: {line}");
        line
    };
    let line = refusal(&none);
    assert!(
        line.ends_with("the server has no export named \"x\"; it lists no exports"),
        "{test}: {line}"
    );
    let line = refusal(&two);
    assert!(
        line.ends_with("the server has no export named \"x\"; it offers \"a\", \"b\""),
        "{test}: {line}"
    );
}
