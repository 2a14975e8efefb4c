//! A member that stops answering, end to end (issue 13, "Bad input and
//! faults"): `platter serve --member-timeout SECS` with one member given
//! 30 s of latency per I/O (`--inject M=latency=30s,latency-from=N`, slow
//! from its Nth I/O on, so the labels are read at the start without it).
//! The member must be failed like one that returned an error, logged
//! once with its slot, path and the timeout, and no request may wait for
//! it longer than the timeout: the other members serve on, and a stop
//! does not wait for the device either.

mod e2e_support;
mod protocol_support;

use std::os::unix::fs::FileExt;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use e2e_support::*;
use protocol_support::{Client, Mode};

/// The server's log line for a member I/O past the timeout.
const TIMED_OUT: &str = "member I/O timed out; failing the member";
/// What an injected I/O of the slow member takes: far beyond any timeout
/// here, so a request that waited for it would show.
const SLOW: &str = "latency=30s";

/// The timeout's log lines, checked: exactly one (the I/Os queued behind
/// the first time out with it, unlogged), naming the slot, the member's
/// path and the timeout.
fn assert_one_timeout_line(s: &Server, test: &str, slot: usize, path: &str, secs: u64) {
    let log = s.log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(TIMED_OUT)).collect();
    assert_eq!(lines.len(), 1, "{test}: want one timeout line:\n{log}");
    let l = lines[0];
    for want in [
        format!("member={slot} "),
        format!(" on {path} "),
        format!("not answered within {secs} s (--member-timeout)"),
    ] {
        assert!(l.contains(&want), "{test}: {want:?} missing from: {l}");
    }
}

/// After the stop, offline `status` says the volume is degraded and
/// `slot` out of use: its own label, not written since it failed, is
/// older than the others' ("stale"), whose slot table says "faulty".
fn assert_out_of_use_in_labels(s: &Server, test: &str, slot: usize) {
    let labels = s.volume.status();
    assert_eq!(labels["state"], "degraded", "{test}: labels after the stop");
    let state = labels["members"][slot]["state"]
        .as_str()
        .unwrap_or_default();
    assert!(
        state.starts_with("faulty") || state.starts_with("stale"),
        "{test}: slot {slot} is {state:?} in the labels after its failure"
    );
}

/// Guards `--member-timeout` on a mirror: a member whose I/Os take 30 s is
/// failed after 1 s like an I/O error; qemu-io's writes, flush and reads
/// complete from the other copy within a few seconds; `status` shows it
/// faulty (live, and in the labels after the stop); the data reads back
/// right, also after a restart without the injection (the slot stays
/// out); and SIGTERM does not wait for the device's 30 s.
#[test]
fn a_member_past_the_timeout_is_failed_and_the_mirror_serves_on() {
    let test = "a_member_past_the_timeout_is_failed_and_the_mirror_serves_on";
    let Some(t) = required_tools(test, &["qemu-io"]) else {
        return;
    };
    let volume = Volume::create(Spec::new("mirror", 2, "64k"), 16 * MIB);
    let slow = volume.members[1].clone();
    let mut s = Server::start_with(
        volume,
        ServeOptions {
            // Slow from I/O 10 on: the start reads and writes each label a
            // few times; the first writes below reach it.
            inject: vec![format!("{slow}={SLOW},latency-from=10")],
            extra_args: vec!["--member-timeout".into(), "1".into()],
            ..ServeOptions::default()
        },
    );
    let patterns: Vec<(u64, u64, u8)> = (0..16u64)
        .map(|i| (i * 700 * KIB + 3 * 512, 64 * KIB + i * 4096, 0x40 + i as u8))
        .collect();
    let mut cmds: Vec<String> = patterns
        .iter()
        .map(|(off, len, b)| format!("write -P 0x{b:02x} {off} {len}"))
        .collect();
    cmds.push("flush".into());
    let reads: Vec<String> = patterns
        .iter()
        .map(|(off, len, b)| format!("read -P 0x{b:02x} {off} {len}"))
        .collect();
    cmds.extend(reads.iter().cloned());
    let out = qemu_io(
        &t,
        s.uri(),
        &cmds,
        &format!("{test}: writes past the slow member"),
    );
    eprintln!("{test}: writes, flush and reads took {:.2?}", out.elapsed);
    // One member timeout (1 s) and the rest: never the member's 30 s.
    assert!(
        out.elapsed < Duration::from_secs(8),
        "{test}: qemu-io took {:?}: a request waited for the slow member",
        out.elapsed
    );
    assert_eq!(
        s.member_states(),
        ["active", "faulty"],
        "{test}: live status after the timeout"
    );
    let stats = s.live("stats");
    assert_eq!(
        stats["member_queues"][1]["outstanding"], 0,
        "{test}: the timed-out I/O left the member's queue: {}",
        stats["member_queues"]
    );
    // One timed-out I/O (and any queued behind it) on the slow member.
    let errors = |m: usize| stats["members"][m]["errors"].as_u64().unwrap_or(0);
    assert!(
        errors(0) == 0 && errors(1) >= 1,
        "{test}: stats count the timed-out I/O as the slow member's error: {}",
        stats["members"]
    );
    assert_eq!(
        stats["volume"]["errors"], 0,
        "{test}: no client request failed"
    );
    assert_one_timeout_line(&s, test, 1, &slow, 1);
    qemu_io(&t, s.uri(), &reads, &format!("{test}: reads again"));

    // A thread is still in the device's 30 s: the stop does not wait.
    let took = s.stop_expecting_errors("TERM", &[TIMED_OUT]);
    assert!(
        took < Duration::from_secs(5),
        "{test}: SIGTERM took {took:?} with the member's I/O outstanding"
    );
    assert_out_of_use_in_labels(&s, test, 1);
    s.options.inject.clear();
    s.start_again_unchecked();
    assert_eq!(
        s.member_states(),
        ["active", "faulty"],
        "{test}: a failed slot stays out after a restart"
    );
    qemu_io(
        &t,
        s.uri(),
        &reads,
        &format!("{test}: reads after a restart"),
    );
    // (The log holds both runs.)
    s.stop_expecting_errors("TERM", &[TIMED_OUT]);
}

/// One timed read: when it started (since the test's epoch), how long it
/// took.
#[derive(Clone, Copy, Debug)]
struct Timed {
    start: Duration,
    took: Duration,
}

/// Reads 4 KiB at `offsets` in turn, each checked against `expect`, until
/// `until` says stop (after each read); the reads' times.
fn timed_reads(
    c: &mut Client,
    epoch: Instant,
    offsets: &[u64],
    expect: &dyn Fn(u64) -> Vec<u8>,
    mut until: impl FnMut(&[Timed]) -> bool,
    what: &str,
) -> Vec<Timed> {
    let mut times = Vec::new();
    for i in 0.. {
        let off = offsets[i % offsets.len()];
        let start = Instant::now();
        let got = c
            .read_at(off, 4096)
            .unwrap_or_else(|e| panic!("{what}: read at {off} failed with errno {e}"));
        times.push(Timed {
            start: start - epoch,
            took: start.elapsed(),
        });
        assert!(got == expect(off), "{what}: wrong data at {off}");
        if until(&times) {
            break;
        }
    }
    times
}

/// Guards that a slow member stalls nothing but its own I/O, on RAID-5,
/// and the stop with its I/O stuck. One connection reads the slow member's
/// chunk (fast at first, so its reads are performed on the connection's
/// own worker threads), until one read meets the latency: it must come
/// back after the 2 s timeout, rebuilt from parity, right. Meanwhile a
/// second connection reads the other members' chunks: every read it
/// started while the first waited must finish in well under a second.
///
/// The stop is the regression: the slow read was performed on a
/// connection's worker, which stays in the device for its 30 s, and
/// SIGTERM joined every connection's threads, so the server took until
/// the device answered to exit (27 s here; for ever with a hung disk).
/// Now it waits at most 2 s for them and says so.
#[test]
fn a_slow_member_stalls_no_other_request_and_not_the_stop_raid5() {
    let test = "a_slow_member_stalls_no_other_request_and_not_the_stop_raid5";
    let volume = Volume::create(Spec::new("raid5", 4, "64k"), 8 * MIB);
    let chunk = volume.interleave_bytes;
    let data_of = move |c: u64, off: u64| -> Vec<u8> {
        let within = off - c * chunk;
        protocol_support::pattern(0x5100 + c, chunk as usize)[within as usize..][..4096].to_vec()
    };
    // Stripe 0's three data chunks, written through a server without the
    // fault; the member files say which member holds which.
    let mut s = Server::start(volume);
    {
        let mut c = Client::open_export(s.socket(), Mode::Structured, "");
        for k in 0..3 {
            let data = protocol_support::pattern(0x5100 + k, chunk as usize);
            c.write_at(k * chunk, &data, 0)
                .unwrap_or_else(|e| panic!("{test}: write chunk {k}: errno {e}"));
        }
    }
    s.stop();
    let status = s.volume.status();
    let data_offset = s.volume.member_size_bytes
        - status["members"][0]["data_size_bytes"]
            .as_u64()
            .expect("data_size_bytes");
    let holder = |k: u64| -> usize {
        let want = protocol_support::pattern(0x5100 + k, 4096);
        (0..4)
            .find(|&m| {
                let f = std::fs::File::open(&s.volume.members[m]).expect("a member");
                let mut got = vec![0u8; 4096];
                f.read_exact_at(&mut got, data_offset)
                    .expect("read a member");
                got == want
            })
            .unwrap_or_else(|| panic!("{test}: no member holds chunk {k} at {data_offset}"))
    };
    let slow_slot = holder(1);
    let (c0, c2) = (0, 2);
    let slow_path = s.volume.members[slow_slot].clone();

    // 300 I/Os fast (the start's label I/Os among them), then 30 s each.
    s.options.inject = vec![format!("{slow_path}={SLOW},latency-from=300")];
    s.options.extra_args = vec!["--member-timeout".into(), "2".into()];
    s.start_again();
    let epoch = Instant::now();
    let mut a = Client::open_export(s.socket(), Mode::Structured, "");
    let mut b = Client::open_export(s.socket(), Mode::Structured, "");
    let (tx, rx) = mpsc::channel();
    let slow_reader = std::thread::spawn(move || {
        // Reads of the slow member's chunk, until 10 after the one that
        // met the latency (at most 1000).
        let offsets: Vec<u64> = (0..16).map(|i| chunk + i * 4096).collect();
        let times = timed_reads(
            &mut a,
            epoch,
            &offsets,
            &|off| data_of(1, off),
            |t| {
                let slow_at = t.iter().position(|r| r.took > Duration::from_secs(1));
                t.len() >= 1000 || slow_at.is_some_and(|i| t.len() > i + 10)
            },
            "reads of the slow member's chunk",
        );
        let _ = tx.send(());
        (a, times)
    });
    let offsets: Vec<u64> = (0..16)
        .flat_map(|i| [c0 * chunk + i * 4096, c2 * chunk + i * 4096])
        .collect();
    let others = timed_reads(
        &mut b,
        epoch,
        &offsets,
        &|off| data_of(off / chunk, off),
        |t| {
            // Paced, so that a failure's numbers stay readable.
            std::thread::sleep(Duration::from_millis(5));
            rx.try_recv().is_ok() || t.len() > 20_000
        },
        "reads of the other members' chunks",
    );
    let (a, slow_times) = slow_reader.join().expect("the slow member's reader");

    let slow: Vec<&Timed> = slow_times
        .iter()
        .filter(|r| r.took > Duration::from_secs(1))
        .collect();
    assert_eq!(
        slow.len(),
        1,
        "{test}: want one read that met the member's latency, got {slow:?} in {} reads",
        slow_times.len()
    );
    let slow = *slow[0];
    eprintln!(
        "{test}: the slow member's read took {:.2?}; {} other reads",
        slow.took,
        others.len()
    );
    assert!(
        slow.took >= Duration::from_millis(1900) && slow.took < Duration::from_secs(8),
        "{test}: the read waiting for the slow member took {:?}, want the 2 s timeout",
        slow.took
    );
    let during: Vec<&Timed> = others
        .iter()
        .filter(|r| r.start >= slow.start && r.start + r.took <= slow.start + slow.took)
        .collect();
    let longest = during.iter().map(|r| r.took).max().unwrap_or_default();
    eprintln!(
        "{test}: {} reads of other members while it waited, the longest {longest:.2?}",
        during.len()
    );
    assert!(
        during.len() >= 20,
        "{test}: only {} reads of the other members completed during the {:?} wait",
        during.len(),
        slow.took
    );
    assert!(
        longest < Duration::from_millis(800),
        "{test}: a read of another member took {longest:?} while the slow one waited"
    );
    assert_eq!(
        s.member_states()[slow_slot],
        "faulty",
        "{test}: the slow member after its timeout"
    );
    assert_one_timeout_line(&s, test, slow_slot, &slow_path, 2);

    // The stop, with a worker of the first connection in the device.
    drop(a);
    drop(b);
    let took = s.stop_expecting_errors("TERM", &[TIMED_OUT]);
    eprintln!("{test}: SIGTERM took {took:.2?}");
    assert!(
        took < Duration::from_secs(6),
        "{test}: SIGTERM took {took:?}: the stop waited for the slow member"
    );
    assert!(
        s.log()
            .contains("connections still inside a member I/O that timed out"),
        "{test}: the slow read was not performed on a connection's worker (the \
         member was not fast before it became slow?), so the stop was not tried \
         with a worker in the device:\n{}",
        s.log()
    );
    assert_out_of_use_in_labels(&s, test, slow_slot);
}
