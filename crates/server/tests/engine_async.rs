//! The engine over slow and stalled members, in process: member I/Os run
//! at once (a request waits for its slowest member I/O, not for the sum),
//! a member that stops answering is failed after the member timeout while
//! the others keep serving, and every request in flight at shutdown ends.

use bytes::Bytes;
use platter_core::volume::{Health, Reply, Request, VolumeError};
use platter_core::Level;
use platter_io::aio::layer::LayerConfig;
use platter_io::FaultSpec;
use platter_server::engine::Engine;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

mod support;

use support::{pool, read, write, Rig, Spec, INTERLEAVE_BYTES};

/// `members` memory members of 8 MiB, each I/O taking `latency` inside
/// the member's call.
fn rig(level: Level, members: u32, latency: Duration, layer: LayerConfig) -> Rig {
    support::rig(Spec {
        faults: FaultSpec {
            latency_us: latency.as_micros() as u64,
            ..FaultSpec::default()
        },
        layer,
        ..Spec::new(level, members)
    })
}

fn pattern(seed: u64, len: u64) -> Vec<u8> {
    (0..len).map(|i| (i as u8) ^ (seed as u8)).collect()
}

/// A 256 KiB read or write over a stripe of 4 members at 64 KiB touches
/// each member once; run one after another, its member I/Os would take
/// four member latencies (how `Engine::pump` did it), at once they take
/// one. Four threads submit at the same time, so the member I/Os of
/// different requests must overlap too.
#[test]
fn a_request_over_four_slow_members_takes_about_one_member_latency() {
    let latency = Duration::from_millis(100);
    let r = rig(Level::Stripe, 4, latency, pool(32, Duration::from_secs(30)));
    let stripe_bytes = 4 * INTERLEAVE_BYTES;
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let engine = Arc::clone(&r.engine);
            std::thread::spawn(move || {
                let at = t * stripe_bytes;
                let start = Instant::now();
                write(&engine, at, pattern(t, stripe_bytes)).expect("write");
                let wrote = start.elapsed();
                let start = Instant::now();
                let back = read(&engine, at, stripe_bytes).expect("read");
                let read = start.elapsed();
                assert!(
                    back[..] == pattern(t, stripe_bytes)[..],
                    "read back thread {t}"
                );
                (wrote, read)
            })
        })
        .collect();
    let times: Vec<(Duration, Duration)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    println!("per thread (write, read): {times:?}");
    for (wrote, read) in &times {
        assert!(*wrote >= latency && *read >= latency, "{times:?}");
        // One at a time: 400 ms. The margin is for a loaded machine.
        assert!(
            *wrote < latency * 2 && *read < latency * 2,
            "a request took more than two member latencies: {times:?}"
        );
    }
}

/// Member 3 of a stripe stops answering (its I/Os take far longer than the
/// member timeout). Reads of the other members' chunks are served at once
/// meanwhile; the read that touches member 3 fails once the timeout
/// passes, member 3 is marked faulty, and when its answer finally comes it
/// is dropped: the engine goes on serving.
#[test]
fn a_member_that_stops_answering_is_failed_after_the_timeout_and_the_others_serve() {
    let timeout = Duration::from_millis(500);
    let r = rig(Level::Stripe, 4, Duration::ZERO, pool(4, timeout));
    let stalled_for = Duration::from_millis(1500);
    r.controls[3].set(FaultSpec {
        latency_us: stalled_for.as_micros() as u64,
        ..FaultSpec::default()
    });
    let (tx, rx) = mpsc::channel();
    let started = Instant::now();
    {
        let engine = Arc::clone(&r.engine);
        std::thread::spawn(move || {
            let result = read(&engine, 3 * INTERLEAVE_BYTES, 4096);
            let _ = tx.send((result, Instant::now()));
        });
    }
    // Meanwhile members 0 to 2 answer at memory speed.
    std::thread::sleep(Duration::from_millis(50));
    for round in 0..20u64 {
        for member in 0..3u64 {
            let at = (round * 4 + member) * INTERLEAVE_BYTES;
            let t = Instant::now();
            read(&r.engine, at, 4096).expect("a read of a member that answers");
            assert!(
                t.elapsed() < timeout / 2,
                "a read of member {member} waited for the stalled member: {:?}",
                t.elapsed()
            );
        }
    }
    let (result, ended) = rx.recv().expect("the stalled read ends");
    let took = ended - started;
    let err = result.expect_err("a stripe cannot serve a read of a failed member");
    assert!(took >= timeout, "failed before the timeout: {took:?}");
    assert!(
        took < stalled_for,
        "waited for the stalled member: {took:?}"
    );
    assert_eq!(r.engine.health()[3], Health::Faulty, "{err}");
    assert_eq!(r.engine.health()[..3], [Health::Online; 3]);
    // The stalled I/O is still on member 3's queue until it returns.
    let queues = r.engine.member_queues();
    assert_eq!(queues[3].map(|q| q.depth), Some(4));
    // Past the stalled I/O's late answer, which must be dropped (a second
    // completion of one I/O would poison the engine lock).
    std::thread::sleep(stalled_for.saturating_sub(started.elapsed()) + Duration::from_millis(200));
    read(&r.engine, 0, 4096).expect("the engine serves after a late answer");
    assert!(r
        .engine
        .member_queues()
        .iter()
        .all(|q| q.is_some_and(|q| q.outstanding == 0)));
}

/// Many submitting threads keep hundreds of requests in flight on slow
/// members with a small queue depth, then the engine is closed to clients
/// as a SIGTERM does: every request submitted before ends (with its
/// result), every one after is handed back, and the final flush works.
#[test]
fn every_request_in_flight_at_shutdown_ends() {
    let r = rig(
        Level::Mirror,
        2,
        Duration::from_millis(5),
        pool(2, Duration::from_secs(30)),
    );
    let ended = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let accepted = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let (engine, ended, refused, accepted) = (
                Arc::clone(&r.engine),
                Arc::clone(&ended),
                Arc::clone(&refused),
                Arc::clone(&accepted),
            );
            std::thread::spawn(move || {
                for i in 0..100u64 {
                    let at = ((t * 100 + i) % 128) * 4096;
                    let req = if i % 2 == 0 {
                        Request::Write {
                            offset_bytes: at,
                            data: Bytes::from(pattern(i, 4096)),
                            fua: false,
                        }
                    } else {
                        Request::Read {
                            offset_bytes: at,
                            len_bytes: 4096,
                        }
                    };
                    let ended = Arc::clone(&ended);
                    let done = Box::new(move |r: Result<Reply, VolumeError>| {
                        r.expect("no member fails");
                        ended.fetch_add(1, Ordering::SeqCst);
                    });
                    match engine.submit_client(req, done) {
                        Ok(work) => {
                            work.run();
                            accepted.fetch_add(1, Ordering::SeqCst)
                        }
                        Err(_) => refused.fetch_add(1, Ordering::SeqCst),
                    };
                    // Submitting takes microseconds: spread out, some of
                    // the requests come after the close.
                    std::thread::sleep(Duration::from_micros(500));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    r.engine.close_to_clients();
    let in_flight_at_close = accepted.load(Ordering::SeqCst) - ended.load(Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    r.engine.wait_idle();
    r.engine.run(Request::Flush).expect("the final flush");
    println!(
        "accepted {}, in flight at close about {in_flight_at_close}, refused {}",
        accepted.load(Ordering::SeqCst),
        refused.load(Ordering::SeqCst)
    );
    assert!(
        in_flight_at_close > 10,
        "too few in flight to show anything"
    );
    assert!(
        refused.load(Ordering::SeqCst) > 0,
        "none came after the close"
    );
    assert_eq!(
        accepted.load(Ordering::SeqCst) + refused.load(Ordering::SeqCst),
        800
    );
    // wait_idle returns once the volume is idle; the last completions are
    // handed to their callbacks just after, outside the lock.
    let deadline = Instant::now() + Duration::from_secs(5);
    while ended.load(Ordering::SeqCst) < accepted.load(Ordering::SeqCst)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        ended.load(Ordering::SeqCst),
        accepted.load(Ordering::SeqCst)
    );
}

/// Which thread a request's completion ran on, for a 256 KiB read over 4
/// members submitted on this one.
fn read_completes_here(engine: &Engine) -> bool {
    let (req, done, rx) = read_over_four();
    engine.submit(req, done);
    rx.recv().expect("completes") == std::thread::current().id()
}

/// A 256 KiB read over 4 members whose completion sends the thread it ran
/// on.
fn read_over_four() -> (
    Request,
    platter_server::engine::Done,
    mpsc::Receiver<std::thread::ThreadId>,
) {
    let (tx, rx) = mpsc::channel();
    let req = Request::Read {
        offset_bytes: 0,
        len_bytes: 4 * INTERLEAVE_BYTES,
    };
    let done = Box::new(move |r: Result<Reply, VolumeError>| {
        assert!(r.is_ok());
        let _ = tx.send(std::thread::current().id());
    });
    (req, done, rx)
}

/// On tmpfs, handing every member I/O to a member I/O thread and back made
/// 4k random I/O at depth 32 several times slower than the old pump, which
/// did it on the submitting thread (and reply corking, which needs the
/// reply pushed there, stopped working). Members whose I/O takes
/// microseconds are served on the submitting thread again, once their
/// first I/Os have shown it; slow members still go to their queues, and a
/// member that becomes slow goes back to its queue.
#[test]
fn fast_members_are_served_on_the_submitting_thread_and_slow_ones_are_not() {
    let fast = rig(
        Level::Stripe,
        4,
        Duration::ZERO,
        pool(32, Duration::from_secs(30)),
    );
    // The queues start by assuming a slow device.
    assert!(!read_completes_here(&fast.engine));
    for _ in 0..64 {
        read_completes_here(&fast.engine);
    }
    assert!(
        read_completes_here(&fast.engine),
        "fast members are handed over"
    );
    for c in &fast.controls {
        c.set(FaultSpec {
            latency_us: 2_000,
            ..FaultSpec::default()
        });
    }
    let switched = (0..40).find(|_| !read_completes_here(&fast.engine));
    assert!(
        switched.is_some(),
        "a member now slow is still served inline"
    );
    assert!(!read_completes_here(&fast.engine));
    // Slow from the start: never inline.
    let slow = rig(
        Level::Stripe,
        4,
        Duration::from_millis(1),
        pool(32, Duration::from_secs(30)),
    );
    for _ in 0..20 {
        assert!(!read_completes_here(&slow.engine));
    }
}

/// A 256 KiB read over 4 members through `submit_client`: whether the
/// submission left I/O for this thread, and whether the request had ended
/// when `submit_client` returned.
fn client_read(
    engine: &Engine,
    finish: impl FnOnce(platter_server::engine::InlineIos<'_>),
) -> (bool, bool, mpsc::Receiver<std::thread::ThreadId>) {
    let (req, done, rx) = read_over_four();
    let work = engine
        .submit_client(req, done)
        .unwrap_or_else(|_| panic!("open to clients"));
    let left = !work.is_empty();
    let ended = rx.try_recv().is_ok();
    finish(work);
    (left, ended, rx)
}

/// A connection worker keeps the client's socket through a submission
/// whose `InlineIos` is empty, and hands it on before running one that is
/// not (conn.rs, `work`). That is sound only if an empty one means every
/// member I/O is with its member, and a non-empty one's I/O is not done
/// until it runs (or is dropped: none may be lost).
#[test]
fn a_client_submission_leaves_fast_members_io_to_its_caller() {
    let fast = rig(
        Level::Stripe,
        4,
        Duration::ZERO,
        pool(32, Duration::from_secs(30)),
    );
    for _ in 0..64 {
        read_completes_here(&fast.engine);
    }
    assert!(read_completes_here(&fast.engine), "the members look fast");
    let me = std::thread::current().id();
    let (left, ended, rx) = client_read(&fast.engine, |work| work.run());
    assert!(left, "a fast member's I/O is left to the caller");
    assert!(!ended, "nothing ran before the caller ran it");
    assert_eq!(rx.try_recv().expect("ended in run"), me);
    // Dropped unrun, it still runs.
    let (left, ended, rx) = client_read(&fast.engine, |work| drop(work));
    assert!(left && !ended);
    assert_eq!(rx.try_recv().expect("ended in drop"), me);

    let slow = rig(
        Level::Stripe,
        4,
        Duration::from_millis(1),
        pool(32, Duration::from_secs(30)),
    );
    for _ in 0..10 {
        let (left, _, rx) = client_read(&slow.engine, |work| work.run());
        assert!(!left, "slow members' I/O is with their queues");
        let on = rx.recv_timeout(Duration::from_secs(10)).expect("ends");
        assert_ne!(on, me, "completed by the I/O layer, not here");
    }
}
