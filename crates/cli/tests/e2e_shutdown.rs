//! Stopping `platter serve` under a running write load (issue #3, item 6).
//!
//! Data written and flushed before the signal is written with qemu-io;
//! then fio (nbd engine, two connections) and a loop of qemu-io bursts of
//! asynchronous writes hammer the rest of the volume; then SIGTERM (or
//! SIGINT). The server must exit 0 within a few seconds with the labels
//! "clean"; after a restart the flushed data reads back; and "clean" must
//! be true: serving the volume read-only with one member left out (and for
//! RAID-6 every pair), every byte reconstructed from parity equals what the
//! whole volume reads.
//!
//! And with thousands of member I/Os in flight on slow members (issue 13):
//! every request answered or its connection closed between replies, a
//! clean stop, and every acknowledged write kept.

mod e2e_support;
mod protocol_support;

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use e2e_support::*;
use protocol_support::{load_block_data, pipelined_load, LoadSeen, LOAD_BLOCK};

/// A clean stop under load must take no longer than this.
const STOP_WITHIN: Duration = Duration::from_secs(10);

/// The flushed patterns: (offset, length, byte), all below 16 MiB.
const FLUSHED: [(u64, u64, u8); 5] = [
    (0, 8 * MIB, 0xa1),
    (8 * MIB + 1234, 3 * MIB, 0xa2),
    (12 * MIB - 777, 200_000, 0xa3),
    (13 * MIB + 4096, 65_536, 0xa4),
    (15 * MIB + 100, 900_000, 0xa5),
];
/// qemu-io bursts write in [16 MiB, 24 MiB); fio above 24 MiB.
const BURST_AT: u64 = 16 * MIB;
const FIO_AT: u64 = 24 * MIB;

#[test]
fn sigterm_under_write_load_raid5_stops_clean_and_keeps_flushed_data() {
    shutdown_under_load(
        "sigterm_under_write_load_raid5_stops_clean_and_keeps_flushed_data",
        Spec::new("raid5", 4, "64k"),
        "TERM",
    );
}

#[test]
fn sigint_under_write_load_raid6_stops_clean_and_keeps_flushed_data() {
    shutdown_under_load(
        "sigint_under_write_load_raid6_stops_clean_and_keeps_flushed_data",
        Spec::new("raid6", 5, "126s"),
        "INT",
    );
}

/// qemu-io processes, one after another, each a burst of 128 asynchronous
/// writes in [BURST_AT, FIO_AT), until told to stop or the server goes.
struct Bursts {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU32>,
    handle: Option<JoinHandle<()>>,
}

impl Bursts {
    fn start(qemu_io: std::path::PathBuf, uri: String) -> Bursts {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU32::new(0));
        let (stop2, done2) = (Arc::clone(&stop), Arc::clone(&done));
        let handle = std::thread::spawn(move || {
            let mut rng = Rng::new(7);
            while !stop2.load(Ordering::SeqCst) {
                let mut cmd = Command::new(&qemu_io);
                cmd.args(["-f", "raw", &uri]);
                for _ in 0..128 {
                    let len = 512 + rng.below(200_000);
                    let off = BURST_AT + rng.below(FIO_AT - BURST_AT - len);
                    let flags = if rng.below(4) == 0 { "-f " } else { "" };
                    cmd.arg("-c").arg(format!(
                        "aio_write {flags}-P 0x{:02x} {off} {len}",
                        rng.below(256)
                    ));
                }
                cmd.args(["-c", "aio_flush"]);
                match try_run(&mut cmd, Duration::from_secs(60)) {
                    Ok(out) if out.status.success() => {
                        done2.fetch_add(1, Ordering::SeqCst);
                    }
                    // The server stopped under it: the end of the load.
                    _ => return,
                }
            }
        });
        Bursts {
            stop,
            done,
            handle: Some(handle),
        }
    }

    /// Stops the loop and says how many bursts completed.
    fn finish(&mut self) -> u32 {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.done.load(Ordering::SeqCst)
    }
}

impl Drop for Bursts {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn shutdown_under_load(test: &str, spec: Spec, signal: &str) {
    let Some(t) = tools(test, &["qemu-io", "qemu-img", "fio"]) else {
        return;
    };
    if !fio_has_nbd(&t) {
        platter_testkit::skips::skipped(test, "fio has no nbd engine (`fio --enghelp`)");
        return;
    }
    let mut s = Server::start(Volume::create(spec, 96 * MIB));
    let size = s.volume.size_bytes;
    let uri = s.uri().to_string();

    // 1. Data written and flushed before the signal.
    let mut cmds: Vec<String> = FLUSHED
        .iter()
        .map(|(off, len, b)| format!("write -P 0x{b:02x} {off} {len}"))
        .collect();
    cmds.push("flush".into());
    qemu_io(&t, &uri, &cmds, &format!("{test}: flushed patterns"));
    let checks: Vec<String> = FLUSHED
        .iter()
        .map(|(off, len, b)| format!("read -P 0x{b:02x} {off} {len}"))
        .collect();
    qemu_io(&t, &uri, &checks, &format!("{test}: flushed patterns read"));

    // 2. The load: fio on two connections, and qemu-io bursts.
    let fio_len = (size - FIO_AT) / (256 * KIB) * (256 * KIB);
    let mut fio = Background::spawn(
        t.cmd("fio")
            .args([
                "--name=load",
                "--thread",
                "--ioengine=nbd",
                "--rw=randwrite",
                "--bsrange=4k-256k",
                "--iodepth=16",
                "--numjobs=2",
                "--time_based",
                "--runtime=60",
                "--group_reporting",
            ])
            .arg(format!("--uri={uri}"))
            .arg(format!("--offset={FIO_AT}"))
            .arg(format!("--size={fio_len}")),
        "fio load",
    );
    let mut bursts = Bursts::start(
        find_tool("qemu-io").expect("qemu-io was found"),
        uri.clone(),
    );
    // Until fio reports its connections (or has had 3 s to make them; its
    // output may be buffered) and a burst has completed.
    let started = Instant::now();
    let deadline = started + Duration::from_secs(20);
    while (fio.stdout().matches("connected to NBD server").count() < 2
        && started.elapsed() < Duration::from_secs(3))
        || bursts.done.load(Ordering::SeqCst) < 1
    {
        assert!(
            fio.is_running(),
            "{test}: fio ended before the signal:\n{}\n{}",
            fio.stdout(),
            fio.stderr()
        );
        assert!(
            Instant::now() < deadline,
            "{test}: the load did not start within 20 s:\n{}\n{}",
            fio.stdout(),
            fio.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        fio.is_running(),
        "{test}: fio is still writing at the signal"
    );

    // 3. The signal.
    let took = s.stop_with(signal);
    eprintln!("{test}: SIG{signal} under load: server exited 0 after {took:.2?}");
    assert!(
        took < STOP_WITHIN,
        "{test}: SIG{signal} under load took {took:?} (more than {STOP_WITHIN:?})"
    );
    let status = fio.wait(Duration::from_secs(30));
    let n = bursts.finish();
    eprintln!("{test}: fio ended with {status}; {n} qemu-io bursts completed");
    assert_eq!(
        s.volume.state(),
        "clean",
        "{test}: labels after SIG{signal}"
    );

    // 4. Restarted, the flushed data reads back; the volume as a whole is
    // kept for the parity check.
    s.start_again();
    qemu_io(
        &t,
        s.uri(),
        &checks,
        &format!("{test}: flushed patterns after restart"),
    );
    let whole = save_whole_volume(&t, &s, test);
    s.stop();

    // 5. "clean" is true: each degraded assembly reads the same bytes.
    for leave_out in degraded_assemblies(&spec) {
        s.start_again_degraded_read_only(&leave_out);
        assert_images_identical(
            &t,
            &whole,
            s.uri(),
            &format!("{test}: parity after SIG{signal}: members {leave_out:?} left out"),
        );
        s.stop();
    }
    assert_eq!(
        s.volume.state(),
        "clean",
        "{test}: read-only degraded serving leaves the labels alone"
    );
}

/// An idle client (connected, between requests) and a client stuck in the
/// handshake do not hold the server up: SIGTERM ends it promptly, exit 0,
/// labels clean, and a write the idle client had acknowledged (never
/// flushed by the client) is kept by the server's final flush.
#[test]
fn sigterm_with_idle_and_half_open_clients_exits_promptly() {
    let test = "sigterm_with_idle_and_half_open_clients_exits_promptly";
    let Some(t) = tools(test, &["qemu-io"]) else {
        return;
    };
    let mut s = Server::start(Volume::create(Spec::new("raid5", 4, "126s"), 16 * MIB));
    let mut idle = Background::spawn(
        t.cmd("qemu-io").args([
            "-f",
            "raw",
            s.uri(),
            "-c",
            "write -P 0x42 1000 65536",
            "-c",
            "sleep 60000",
        ]),
        "idle qemu-io",
    );
    // Greeted, never answering: the server waits in the handshake.
    let half_open = std::os::unix::net::UnixStream::connect(s.socket()).expect("connect");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(idle.is_running(), "{test}: qemu-io is idle, connected");
    let took = s.stop_with("TERM");
    eprintln!("{test}: exited 0 after {took:.2?}");
    assert!(
        took < Duration::from_secs(5),
        "{test}: SIGTERM with idle clients took {took:?}"
    );
    assert_eq!(s.volume.state(), "clean", "{test}: labels");
    idle.kill();
    drop(half_open);
    s.start_again();
    qemu_io(
        &t,
        s.uri(),
        &["read -P 0x42 1000 65536".into()],
        &format!("{test}: the idle client's write after a restart"),
    );
    s.stop();
}

/// `platter serve` with MEMBER... as given to `volume`, on `socket`; for
/// runs that must be refused.
fn serve_refused(volume: &Volume, socket: &std::path::Path, what: &str) -> Out {
    serve_refused_with(volume, socket, &[], what)
}

/// `serve_refused` with `options` (such as `--control PATH`) before the members.
fn serve_refused_with(
    volume: &Volume,
    socket: &std::path::Path,
    options: &[&std::ffi::OsStr],
    what: &str,
) -> Out {
    let out = run(
        Command::new(env!("CARGO_BIN_EXE_platter"))
            .arg("serve")
            .arg("--socket")
            .arg(socket)
            .args(options)
            .args(&volume.members),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(1), "{}", out.describe(what));
    assert!(out.stdout.is_empty(), "{}", out.describe(what));
    assert!(
        out.stderr.contains("platter: error: ") && !out.stderr.contains("panicked"),
        "{}",
        out.describe(what)
    );
    out
}

/// Something at the socket path that is not a socket (a mistyped member
/// file, say) is neither removed nor replaced, and the refused run leaves
/// the labels as they were.
#[test]
fn serve_refuses_a_socket_path_that_is_not_a_socket() {
    let test = "serve_refuses_a_socket_path_that_is_not_a_socket";
    let volume = Volume::create(Spec::new("raid5", 4, "64k"), 8 * MIB);
    let events = volume.status()["event_counter"].as_u64();
    let path = volume.path().join("precious.txt");
    std::fs::write(&path, "not a socket\n").unwrap();
    let out = serve_refused(&volume, &path, test);
    assert!(
        out.stderr.contains("not a socket"),
        "{}",
        out.describe(test)
    );
    assert_eq!(
        std::fs::read_to_string(&path).ok().as_deref(),
        Some("not a socket\n"),
        "{test}: the file at the socket path is untouched"
    );
    // The very common slip: a member named as the socket.
    let out = serve_refused(&volume, std::path::Path::new(&volume.members[0]), test);
    assert!(
        out.stderr.contains("not a socket"),
        "{}",
        out.describe(test)
    );
    let s = volume.status();
    assert_eq!(s["state"], "clean", "{test}: labels after refused runs");
    assert_eq!(
        s["event_counter"].as_u64(),
        events,
        "{test}: labels untouched"
    );
    assert_eq!(
        s["members_online"].as_u64(),
        Some(4),
        "{test}: members intact"
    );
}

/// A member named as the control socket was deleted: `serve --control
/// d/m1 d/m0 d/m1` checked only that nothing answered at d/m1, removed the
/// member file to bind the control socket there, served on the unlinked
/// file, and removed the control socket at the stop, so m1 was gone. The
/// control socket path is judged like the NBD socket's now.
#[test]
fn serve_refuses_a_control_path_that_is_not_a_socket() {
    let test = "serve_refuses_a_control_path_that_is_not_a_socket";
    let volume = Volume::create(Spec::new("mirror", 2, "64k"), 8 * MIB);
    let events = volume.status()["event_counter"].as_u64();
    let member = std::path::Path::new(&volume.members[1]);
    let before = std::fs::read(member).unwrap();
    let socket = volume.path().join("s.sock");
    let out = serve_refused_with(
        &volume,
        &socket,
        &["--control".as_ref(), member.as_os_str()],
        test,
    );
    assert!(
        out.stderr.contains("not a socket") && out.stderr.contains("control socket"),
        "{}",
        out.describe(test)
    );
    assert!(
        std::fs::read(member).is_ok_and(|now| now == before),
        "{test}: the member named as the control socket is untouched"
    );
    let s = volume.status();
    assert_eq!(s["state"], "clean", "{test}: labels after the refused run");
    assert_eq!(
        s["event_counter"].as_u64(),
        events,
        "{test}: labels untouched"
    );
}

/// A socket a running server answers on is refused to a second server
/// (which leaves the labels alone); after a crash (SIGKILL) the stale socket
/// is replaced, the volume is "dirty" until the next clean stop, and data
/// flushed before the crash reads back.
#[test]
fn a_live_socket_is_refused_and_a_stale_one_replaced_after_a_crash() {
    let test = "a_live_socket_is_refused_and_a_stale_one_replaced_after_a_crash";
    let Some(t) = tools(test, &["qemu-io"]) else {
        return;
    };
    let mut s = Server::start(Volume::create(Spec::new("raid6", 5, "126s"), 16 * MIB));
    qemu_io(
        &t,
        s.uri(),
        &["write -P 0x5e 4000 300000".into(), "flush".into()],
        &format!("{test}: write and flush"),
    );
    let events = s.volume.status()["event_counter"].as_u64();
    let out = serve_refused(&s.volume, s.socket(), test);
    assert!(out.stderr.contains("in use"), "{}", out.describe(test));
    assert_eq!(
        s.volume.status()["event_counter"].as_u64(),
        events,
        "{test}: the refused server left the labels alone"
    );
    qemu_io(
        &t,
        s.uri(),
        &["read -P 0x5e 4000 300000".into()],
        &format!("{test}: the first server still serves"),
    );

    s.crash();
    assert!(s.socket().exists(), "{test}: a crash leaves the socket");
    assert_eq!(s.volume.state(), "dirty", "{test}: labels after a crash");
    s.start_again();
    assert!(
        s.log().contains("not shut down cleanly"),
        "{test}: the restart warns of the crash:\n{}",
        s.log()
    );
    qemu_io(
        &t,
        s.uri(),
        &["read -P 0x5e 4000 300000".into()],
        &format!("{test}: flushed data after a crash"),
    );
    s.stop();
}

/// Two servers must never drive the same members: each keeps its own
/// stripe locks and parity, so concurrent writers through both corrupt
/// parity. A second `platter serve` of members in use (on another socket)
/// must be refused.
#[test]
fn a_second_server_of_the_same_members_is_refused() {
    let test = "a_second_server_of_the_same_members_is_refused";
    let mut s = Server::start(Volume::create(Spec::new("raid5", 4, "64k"), 8 * MIB));
    let other = s.volume.path().join("other.sock");
    let mut second = Background::spawn(
        Command::new(env!("CARGO_BIN_EXE_platter"))
            .arg("serve")
            .arg("--socket")
            .arg(&other)
            .args(&s.volume.members),
        "a second server",
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while second.is_running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let serving = second.is_running();
    second.kill();
    assert!(
        !serving,
        "{test}: a second server serves members in use:\n{}",
        second.stdout()
    );
    s.stop();
}

/// `platter serve ARGS.. MEMBERS` on another socket, given 10 s: whether it
/// was still serving then (it is stopped either way), and its stderr.
fn second_server(s: &Server, args: &[&str], name: &str) -> (bool, String) {
    let other = s.volume.path().join(name);
    let mut second = Background::spawn(
        Command::new(env!("CARGO_BIN_EXE_platter"))
            .arg("serve")
            .args(args)
            .arg("--socket")
            .arg(&other)
            .args(&s.volume.members),
        "a second server",
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while second.is_running() && !other.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let serving = second.is_running();
    second.kill();
    // Its stderr is collected by a thread: give it time to reach the end.
    let deadline = Instant::now() + Duration::from_secs(2);
    while second.stderr().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    (serving, second.stderr())
}

/// The story: `serve --read-only` started on members a read-write server
/// held, although the docs say a second serve of members in use fails at
/// once; its clients then read a volume changing under a server that does
/// not see the changes (stale stripe cache, parity mid-update). Now a
/// read-only server takes a shared claim: refused beside a writer, it
/// keeps a writer from starting beside it, and read-only servers still
/// share members.
#[test]
fn a_read_only_server_and_a_writer_never_share_members() {
    let test = "a_read_only_server_and_a_writer_never_share_members";
    let mut s = Server::start(Volume::create(Spec::new("raid5", 4, "64k"), 8 * MIB));
    let (serving, err) = second_server(&s, &["--read-only"], "ro.sock");
    assert!(
        !serving,
        "{test}: a read-only server started beside a writer"
    );
    assert!(err.contains("in use"), "{test}: {err}");
    s.stop();

    s.options.read_only = true;
    s.start_again();
    let (serving, err) = second_server(&s, &[], "rw.sock");
    assert!(
        !serving,
        "{test}: a writer started beside a read-only server"
    );
    assert!(err.contains("in use"), "{test}: {err}");
    let (serving, err) = second_server(&s, &["--read-only"], "ro2.sock");
    assert!(
        serving,
        "{test}: two read-only servers cannot share members: {err}"
    );
    s.stop();
}

// ---------------------------------------------------------------------------
// A stop with thousands of requests in flight

/// Connections of the in-flight stop, each with the server's 64 requests
/// in flight (and a few more waiting in its socket).
const INFLIGHT_CONNS: usize = 48;
/// Each connection's own part of the volume (many stripes, so that its
/// writes seldom wait for one another's stripe locks).
const INFLIGHT_REGION: u64 = 8 * MIB;
/// Member I/Os waiting in or running on the members' queues, and requests
/// in the volume, as `platter stats --json` says.
fn in_flight(s: &Server) -> (u64, u64) {
    let stats = s.live("stats");
    let ios = stats["member_queues"]
        .as_array()
        .expect("member_queues")
        .iter()
        .map(|q| q["outstanding"].as_u64().unwrap_or(0))
        .sum();
    let requests = stats["volume"]["outstanding"].as_u64().unwrap_or(0);
    (ios, requests)
}

/// Guards the stop with thousands of I/Os in flight (issue 13): a RAID-5
/// whose every member takes 200 ms per I/O, `--member-queue-depth 4096`,
/// 48 connections of the in-project client keeping 72 requests each
/// outstanding (the server takes 64 per connection). Once thousands of
/// member I/Os are in flight, SIGTERM: the server must exit 0 within a
/// bound with the labels clean; every client must get each of its
/// requests answered (acknowledged, or ESHUTDOWN for those read after the
/// signal) or its connection closed between replies, without an error, a
/// hang or a wrong read; the next start must find the volume clean (no
/// resync); and every write acknowledged (a fortiori every one a FLUSH
/// covered) must read back, every write refused with ESHUTDOWN must not
/// have been written.
#[test]
fn sigterm_with_thousands_of_ios_in_flight_answers_every_request_and_stops_clean() {
    let test = "sigterm_with_thousands_of_ios_in_flight_answers_every_request_and_stops_clean";
    let volume = Volume::create(
        Spec::new("raid5", 4, "64k"),
        INFLIGHT_CONNS as u64 * INFLIGHT_REGION,
    );
    // The I/O layer's timer serves the latency: thousands of member I/Os
    // wait on it, not on threads (latency-from would put the sleep back
    // into the member's calls, on at most 64 threads per member).
    let inject = inject_every_member(&volume, "latency=200ms");
    let mut s = Server::start_with(
        volume,
        ServeOptions {
            inject,
            extra_args: vec!["--member-queue-depth".into(), "4096".into()],
            ..ServeOptions::default()
        },
    );
    let socket = s.socket().to_path_buf();
    let never = Arc::new(AtomicBool::new(false));
    let blocks = INFLIGHT_REGION / LOAD_BLOCK;
    let clients: Vec<JoinHandle<LoadSeen>> = (0..INFLIGHT_CONNS)
        .map(|i| {
            let (socket, never) = (socket.clone(), Arc::clone(&never));
            std::thread::spawn(move || {
                pipelined_load(&socket, i as u64 * blocks, blocks, 0x1f1 + i as u64, &never)
            })
        })
        .collect();

    // Thousands of requests and member I/Os (each 200 ms) in flight, then
    // the signal.
    let start = Instant::now();
    let mut most = (0, 0);
    let now = loop {
        let now = in_flight(&s);
        most = (most.0.max(now.0), most.1.max(now.1));
        if now.0 >= 1000 && now.1 >= 2500 {
            break now;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{test}: no more than {} member I/Os and {} requests in flight within 20 s",
            most.0,
            most.1
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!(
        "{test}: SIGTERM with {} member I/Os and {} requests in flight",
        now.0, now.1
    );
    let signalled = Instant::now();
    let took = s.stop();
    eprintln!("{test}: the server exited 0 after {took:.2?}, labels clean");
    // The requests in flight finish (a RAID-5 write is two phases of
    // 200 ms, and the writes to one stripe take turns: about 4 s here),
    // then a flush, the bitmap's sweep and the labels, member by member
    // (2 x 200 ms each): about 7 s in all; a hang would be for ever.
    assert!(
        took < Duration::from_secs(20),
        "{test}: the stop took {took:?} with 200 ms members"
    );
    let mut seen = Vec::new();
    for (i, h) in clients.into_iter().enumerate() {
        seen.push(
            h.join()
                .unwrap_or_else(|_| panic!("{test}: client {i} panicked")),
        );
    }
    let ended = signalled.elapsed();
    assert!(
        ended < Duration::from_secs(25),
        "{test}: the clients ended {ended:?} after the signal"
    );
    let wrong: Vec<String> = seen
        .iter()
        .enumerate()
        .flat_map(|(i, s)| s.wrong.iter().map(move |w| format!("connection {i}: {w}")))
        .collect();
    assert!(wrong.is_empty(), "{test}: {wrong:#?}");
    let sum = |f: &dyn Fn(&LoadSeen) -> usize| seen.iter().map(f).sum::<usize>();
    let (acked, flushed, refused, unanswered) = (
        sum(&|s| s.acked.len()),
        sum(&|s| s.flushed),
        sum(&|s| s.refused.len()),
        sum(&|s| s.unanswered),
    );
    let replies: u64 = seen.iter().map(|s| s.replies).sum();
    eprintln!(
        "{test}: {replies} replies; {acked} writes acknowledged ({flushed} covered by a \
         FLUSH), {refused} refused with ESHUTDOWN; {unanswered} requests unanswered at the \
         close (sent after the server stopped reading)"
    );
    assert!(
        flushed > 0 && acked > flushed,
        "{test}: the load did not get flushed and unflushed writes acknowledged"
    );

    // The next start finds the volume clean: no resync.
    s.options = ServeOptions::default();
    s.start_again();
    let log = s.log();
    let second = &log[log.rfind("=== start 2").expect("the second start")..];
    assert!(
        !second.contains("not shut down cleanly") && !second.contains("resync"),
        "{test}: the start after the stop:\n{second}"
    );
    let mut c =
        protocol_support::Client::open_export(s.socket(), protocol_support::Mode::Structured, "");
    for (i, seen) in seen.iter().enumerate() {
        let region = c
            .read_at(i as u64 * INFLIGHT_REGION, INFLIGHT_REGION as u32)
            .unwrap_or_else(|e| panic!("{test}: read region {i}: errno {e}"));
        let at = |b: u64| {
            let off = (b * LOAD_BLOCK - i as u64 * INFLIGHT_REGION) as usize;
            &region[off..off + LOAD_BLOCK as usize]
        };
        for &b in &seen.acked {
            assert!(
                at(b) == load_block_data(b).as_slice(),
                "{test}: block {b}, acknowledged before the stop, reads back wrong"
            );
        }
        for &b in &seen.refused {
            assert!(
                at(b).iter().all(|&x| x == 0),
                "{test}: block {b}, refused with ESHUTDOWN, was written"
            );
        }
    }
    drop(c);
    s.stop();
}

/// A member that fails during the stop itself: its final flush, or the
/// label write that records the stop.
///
/// How it showed: with the label write of a concat's first member failing
/// at the stop, the server logged "cannot write the label", then "volume
/// flushed and marked clean", and exited 0; the next start found that
/// member stale and refused the volume, with nothing on the way out to
/// say why or what to do. A failed final flush did exit 1, but said the
/// volume "will be resynced at the next start" of a concat that could
/// not start at all.
///
/// Swept over which member I/O starts failing (label read, label write,
/// the client's write and flush, the final flush, the final label), each
/// run must: refuse to start in one error line, or stop with exit 0 and
/// clean labels, or exit 1 naming the failed step and `--force`; and a
/// write the client was told succeeded reads back after `serve --force`.
#[test]
fn a_member_failing_during_the_stop_is_reported_and_loses_no_data() {
    let test = "a_member_failing_during_the_stop_is_reported_and_loses_no_data";
    let Some(t) = tools(test, &["qemu-io"]) else {
        return;
    };
    let (mut final_flush, mut final_label, mut clean) = (0, 0, 0);
    for from in 1..=10 {
        let what = format!("{test}: m0 failing from its I/O {from}");
        let volume = Volume::create(Spec::new("concat", 2, "64k"), 8 * MIB);
        let socket = volume.path().join("sock");
        let mut server = Background::spawn(
            Command::new(env!("CARGO_BIN_EXE_platter"))
                .arg("serve")
                .arg("--socket")
                .arg(&socket)
                .arg("--inject")
                .arg(format!("{}=fail-from={from}", volume.members[0]))
                .args(&volume.members)
                .env("PLATTER_LOG", "info")
                .env("NO_COLOR", "1"),
            &what,
        );
        let deadline = Instant::now() + CMD_TIMEOUT;
        while !socket.exists() && server.is_running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if !server.is_running() {
            let status = server.wait(CMD_TIMEOUT);
            let err = server.stderr();
            assert_eq!(status.code(), Some(1), "{what}: refused to start\n{err}");
            assert!(err.contains("platter: error: "), "{what}\n{err}");
            continue;
        }
        let uri = format!("nbd+unix:///?socket={}", socket.display());
        let wrote = run(
            t.cmd("qemu-io")
                .args(["-f", "raw", &uri, "-c", "write -P 0x5a 4096 65536"]),
            CMD_TIMEOUT,
        );
        let acknowledged = wrote.status.success()
            && !wrote.stderr.contains("failed")
            && !wrote.stdout.contains("failed");
        send_signal(server.pid(), "TERM");
        let status = server.wait(STOP_WITHIN);
        let err = server.stderr();
        assert!(!err.contains("panicked"), "{what}\n{err}");
        // The error line is the main thread's last word. The story this
        // guards against misreading: a run failed once with "exit 1
        // without saying which step failed" because the I/O thread's
        // `member-failed` WARN reached stderr just after the main thread's
        // "final flush failed" line; the two threads share stderr, so the
        // error is looked for as the last error line, not the last line.
        let last = err
            .lines()
            .rev()
            .find(|l| l.starts_with("platter: error:"))
            .unwrap_or("");
        if status.success() {
            clean += 1;
            // A label write that fails while serving fails its member
            // (which the run reports then); one that fails at the stop has
            // no I/O after it to do so.
            let stop = err.split("shutting down").nth(1).unwrap_or("");
            assert!(
                !stop.contains("cannot write the label"),
                "{what}: a label write failed at the stop, yet it reported success\n{err}"
            );
            if acknowledged && !err.contains("marked faulty") {
                assert_eq!(volume.state(), "clean", "{what}\n{err}");
            }
        } else {
            assert_eq!(status.code(), Some(1), "{what}\n{err}");
            if last.starts_with("platter: error: final flush failed") {
                final_flush += 1;
            } else if last.starts_with("platter: error: final label write failed") {
                final_label += 1;
            } else {
                panic!("{what}: exit 1 without saying which step failed\n{err}");
            }
            // A concat cannot do without the member: the message says how
            // to bring it back.
            assert!(last.contains("platter serve --force"), "{what}\n{err}");
        }
        if acknowledged {
            let mut again = Server::start_with(
                volume,
                ServeOptions {
                    extra_args: vec!["--force".into()],
                    ..ServeOptions::default()
                },
            );
            qemu_io(
                &t,
                again.uri(),
                &["read -P 0x5a 4096 65536".into()],
                &format!("{what}: the acknowledged write after serve --force"),
            );
            again.stop_expecting_errors("TERM", &[]);
        }
    }
    eprintln!("{test}: {clean} clean stops, {final_flush} failed final flushes, {final_label} failed final label writes");
    assert!(final_flush > 0, "{test}: no run failed its final flush");
    assert!(
        final_label > 0,
        "{test}: no run failed its final label write"
    );
}
