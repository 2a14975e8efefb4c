use super::*;
use crate::aio::{Completed, IoLayer, MemberQueue};
use crate::fault::{FaultSpec, FaultyMember};
use crate::memory::MemoryMember;
use platter_core::volume::MemberOp;
use std::sync::mpsc;
use std::time::Instant;

fn slow(latency_ms: u64) -> (Arc<dyn Member>, Arc<crate::FaultControls>) {
    let m = FaultyMember::new(
        MemoryMember::new("slow", 1 << 20),
        FaultSpec {
            latency_us: latency_ms * 1000,
            ..FaultSpec::default()
        },
    );
    let controls = m.controls();
    (Arc::new(m), controls)
}

fn read(offset_bytes: u64) -> MemberOp {
    MemberOp::Read {
        offset_bytes,
        len_bytes: 4096,
    }
}

/// Submits `n` reads and returns a receiver of their outcomes (tagged by
/// their number) and when each arrived.
fn submit_reads(q: &dyn MemberQueue, n: u64) -> mpsc::Receiver<(u64, Completed, Instant)> {
    let (tx, rx) = mpsc::channel();
    for i in 0..n {
        let tx = tx.clone();
        q.submit(
            read(i * 4096),
            Box::new(move |c| {
                let _ = tx.send((i, c, Instant::now()));
            }),
            true,
        );
    }
    rx
}

#[test]
fn ios_on_one_member_run_at_once_up_to_the_depth() {
    let pool = Layer::threads(LayerConfig {
        queue_depth: 4,
        timeout: Duration::from_secs(30),
        ..LayerConfig::default()
    });
    let (device, _) = slow(100);
    let q = pool.queue(device);
    let start = Instant::now();
    let rx = submit_reads(q.as_ref(), 8);
    assert_eq!(q.load().outstanding, 8);
    assert_eq!(q.load().depth, 4);
    let mut ends: Vec<Duration> = (0..8)
        .map(|_| {
            let (_, c, at) = rx.recv().expect("every I/O completes");
            assert!(c.result.is_ok() && !c.timed_out);
            assert!(c.device_ns >= 100_000_000);
            at - start
        })
        .collect();
    ends.sort();
    // Four at a time: the first four end after one latency, the rest after
    // two. One at a time they would take eight; unbounded, one.
    assert!(ends[3] < Duration::from_millis(190), "{ends:?}");
    assert!(ends[4] >= Duration::from_millis(200), "{ends:?}");
    assert!(ends[7] < Duration::from_millis(390), "{ends:?}");
    assert_eq!(q.load().outstanding, 0);
}

#[test]
fn an_io_past_the_timeout_fails_once_and_its_late_answer_is_dropped() {
    let pool = Layer::threads(LayerConfig {
        queue_depth: 1,
        timeout: Duration::from_millis(200),
        ..LayerConfig::default()
    });
    let (device, controls) = slow(500);
    let q = pool.queue(device);
    let start = Instant::now();
    // Depth 1: the second read waits behind the first and times out
    // before its turn; it must never reach the device.
    let rx = submit_reads(q.as_ref(), 2);
    for _ in 0..2 {
        let (_, c, at) = rx.recv().expect("both complete");
        assert!(c.timed_out);
        let message = c.result.expect_err("a timeout is an error").message;
        assert!(message.contains("not answered within 0.2 s"), "{message}");
        assert!(message.contains("read of 4096 bytes"), "{message}");
        assert!(at - start < Duration::from_millis(450), "{:?}", at - start);
    }
    assert_eq!(q.load().outstanding, 0);
    // The first read's answer arrives at 500 ms and is dropped: no second
    // completion for it, and the queued read was never performed.
    std::thread::sleep(Duration::from_millis(700));
    assert!(rx.try_recv().is_err(), "a late answer was delivered");
    assert_eq!(
        controls.io_count(),
        1,
        "the read that timed out waiting ran"
    );
}

#[test]
fn a_stalled_member_does_not_hold_up_another() {
    let pool = Layer::threads(LayerConfig {
        queue_depth: 2,
        timeout: Duration::from_secs(30),
        ..LayerConfig::default()
    });
    let (stalled, _) = slow(60_000);
    let (fine, _) = slow(10);
    let stalled = pool.queue(stalled);
    let fine = pool.queue(fine);
    let _stuck = submit_reads(stalled.as_ref(), 4);
    let start = Instant::now();
    let rx = submit_reads(fine.as_ref(), 4);
    for _ in 0..4 {
        assert!(rx.recv().expect("completes").1.result.is_ok());
    }
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[test]
fn an_io_performed_here_runs_on_the_caller_and_counts_in_the_queue() {
    let pool = Layer::threads(LayerConfig::default());
    let (device, controls) = slow(0);
    let q = pool.queue(device);
    assert_eq!(q.pace().recent_ns, crate::aio::RECENT_NS_START);
    let caller = std::thread::current().id();
    let q2 = Arc::clone(&q);
    // Seen from another thread while the I/O is in the device: counted.
    controls.set(FaultSpec {
        latency_us: 100_000,
        ..FaultSpec::default()
    });
    let watcher = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        (q2.load().outstanding, q2.pace())
    });
    let c = q
        .perform_here(read(0), Box::new(|_| panic!("not timed out: not called")))
        .expect("in time");
    assert!(c.result.is_ok() && !c.timed_out);
    assert_eq!(std::thread::current().id(), caller);
    let (outstanding, pace) = watcher.join().expect("watcher");
    assert_eq!(outstanding, 1);
    assert_eq!(pace.here_now, 1);
    assert!(pace.oldest_out_ns >= 40_000_000, "{pace:?}");
    assert_eq!(q.load().outstanding, 0);
    assert_eq!(q.pace().here_now, 0);
    assert_eq!(q.pace().recent_bytes, 4096 / 8);
}

/// How a device that answers shows in its pace: the age of the I/O on it
/// now, not of those queued behind it. The age once counted from each
/// I/O's submission, so that on a server pinned to one busy CPU the I/Os
/// a tmpfs member's queue held (waiting for its threads to run, not for
/// the device) made the member look stalled: its writes were all handed
/// to the queue's threads, which kept the queue full, and 4k random
/// writes ran at 0.7 of the IOPS (`bench/cost_table.sh`).
#[test]
fn an_ios_wait_for_a_slot_does_not_age_the_device() {
    let pool = Layer::threads(LayerConfig {
        queue_depth: 1,
        timeout: Duration::from_secs(30),
        ..LayerConfig::default()
    });
    let (device, _) = slow(100);
    let q = pool.queue(device);
    let start = Instant::now();
    let rx = submit_reads(q.as_ref(), 3);
    assert!(rx.recv().expect("the first completes").1.result.is_ok());
    std::thread::sleep(Duration::from_millis(30));
    let pace = q.pace();
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(130), "{waited:?}");
    // The second read has been on the device about 30 ms, the third
    // waits for its slot since the start: the device is as old as the
    // second, the answer it gave 30 ms ago.
    assert!(
        pace.oldest_out_ns >= 25_000_000 && pace.oldest_out_ns < 90_000_000,
        "{pace:?} after {waited:?}"
    );
    for _ in 0..2 {
        assert!(rx.recv().expect("completes").1.result.is_ok());
    }
    assert_eq!(q.pace().oldest_out_ns, 0);
}

#[test]
fn an_io_performed_here_past_the_timeout_fails_the_member_through_done() {
    // A fast member that stops answering in an I/O its caller performs
    // itself: the caller stays in the device (a blocking call cannot be
    // taken back), but the watchdog completes the I/O as timed out on
    // time, and the caller, once the device answers, drops the answer.
    let pool = Layer::threads(LayerConfig {
        queue_depth: 1,
        timeout: Duration::from_millis(200),
        ..LayerConfig::default()
    });
    let (device, _) = slow(600);
    let q = pool.queue(device);
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();
    let out = q.perform_here(
        read(0),
        Box::new(move |c| {
            let _ = tx.send((c, Instant::now(), std::thread::current().id()));
        }),
    );
    assert!(out.is_none(), "a late answer was returned");
    assert!(start.elapsed() >= Duration::from_millis(600));
    let (c, at, thread) = rx.try_recv().expect("timed out through done");
    assert!(c.timed_out);
    assert!(at - start < Duration::from_millis(500), "{:?}", at - start);
    assert_ne!(thread, std::thread::current().id());
    assert_eq!(q.load().outstanding, 0);
}

#[test]
fn the_recent_average_shrugs_off_one_stretched_io_and_follows_a_slowed_device() {
    let mut avg_ns = 2_000;
    // One read stretched to 10 ms by the scheduler.
    avg_ns = crate::aio::average_step(avg_ns, 10_000_000);
    assert!(avg_ns < 4_000, "{avg_ns}");
    // The device now takes 2 ms per I/O: past 40 µs within 20 I/Os.
    let steps = (1..=20)
        .find(|_| {
            avg_ns = crate::aio::average_step(avg_ns, 2_000_000);
            avg_ns > 40_000
        })
        .expect("within 20 I/Os");
    assert!(steps >= 5, "{steps}");
}

/// A member that starts requests itself (as a remote one does), noting the
/// thread each start ran on and answering at once from it.
struct Starter {
    inner: MemoryMember,
    started_on: std::sync::Mutex<Vec<std::thread::ThreadId>>,
}

impl Member for Starter {
    fn describe(&self) -> &str {
        self.inner.describe()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), crate::MemberError> {
        self.inner.read_at(offset_bytes, buf)
    }
    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> Result<(), crate::MemberError> {
        self.inner.write_at(offset_bytes, data)
    }
    fn flush(&self) -> Result<(), crate::MemberError> {
        self.inner.flush()
    }
    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), crate::MemberError> {
        self.inner.trim(offset_bytes, len_bytes)
    }
    fn starts_requests(&self) -> bool {
        true
    }
    fn start(&self, op: &MemberOp, done: crate::MemberDone) -> Result<(), crate::MemberDone> {
        let MemberOp::Read { len_bytes, .. } = op else {
            return Err(done);
        };
        self.started_on
            .lock()
            .unwrap()
            .push(std::thread::current().id());
        done(Ok(Some(bytes::Bytes::from(vec![0u8; *len_bytes as usize]))));
        Ok(())
    }
}

/// The queue once asked a thread-local whether its caller was an NBD
/// reader thread (a generic layer knowing one member type); now the caller
/// says. A caller that may not send (a completion on a remote member's
/// reader) must never have the request started on its own thread: there
/// it could block sending to a server whose replies wait for that thread.
#[test]
fn a_caller_that_may_not_send_never_starts_a_request_itself() {
    let pool = Layer::threads(LayerConfig::default());
    let device = Arc::new(Starter {
        inner: MemoryMember::new("starter", 1 << 20),
        started_on: std::sync::Mutex::new(Vec::new()),
    });
    let q = pool.queue(Arc::clone(&device) as Arc<dyn Member>);
    let me = std::thread::current().id();
    for may_send in [true, false] {
        let (tx, rx) = mpsc::channel();
        q.submit(read(0), Box::new(move |c| drop(tx.send(c))), may_send);
        let c = rx.recv_timeout(Duration::from_secs(10)).expect("completes");
        assert!(c.result.is_ok());
        let on = device.started_on.lock().unwrap().pop();
        if may_send {
            assert_eq!(on, Some(me), "a caller that may send starts it itself");
            assert!(!c.may_send, "answered on the device's own thread");
        } else {
            assert_ne!(on, Some(me), "started on the caller's thread");
        }
    }
}
