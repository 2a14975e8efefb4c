//! Replies held back ("corked") while more requests are buffered behind
//! them, so that a client at depth gets them in one `sendmsg`
//! (`crates/server/src/network/conn.rs`, `work`).
//!
//! Holding a reply back is only safe if it is always sent before the server
//! waits for anything: a client that sent a burst waits for its replies
//! before it sends more, so a reply left in the queue while the worker
//! waits in `recv` would stall the connection (until the 1 s read tick).
//! And it is only worth it while member I/O takes microseconds: on a disk,
//! a reply must not wait for the next request's seek.

mod protocol_support;

use protocol_support::*;
use std::time::{Duration, Instant};

/// Bursts of 1 to 48 requests in one write, reads and 4 KiB writes mixed,
/// each answered whole before the next is sent: every burst's replies
/// arrive promptly and reads return what was written. A corked reply left
/// behind shows as a burst that takes a read tick (1 s) or never ends (the
/// client's read timeout fails the test).
#[test]
fn pipelined_bursts_are_answered_promptly_and_correctly() {
    for threads in ["1", "8"] {
        let dir = temp_dir();
        let members = create_stripe(dir.path());
        let server = Server::start(dir.path(), &members, &["--threads", threads]);
        let mut c = Client::open(&server.socket, Mode::Structured);
        const BLOCK: u64 = 4096;
        let blocks = 4096; // the first 16 MiB
        let mut model: Vec<u64> = vec![0; blocks]; // seed written per block, 0: zeros
        let mut rng = Rng(7);
        let mut slowest = Duration::ZERO;
        for round in 0..400u64 {
            let n = 1 + rng.below(48) as usize;
            let mut reqs: Vec<(u16, u64, Vec<u8>)> = Vec::with_capacity(n);
            let mut touched = std::collections::HashSet::new();
            for i in 0..n {
                let b = rng.below(blocks as u64);
                // One request per block in a burst: their order is not defined.
                if !touched.insert(b) {
                    continue;
                }
                if rng.below(2) == 0 {
                    let seed = round * 1000 + i as u64 + 1;
                    model[b as usize] = seed;
                    reqs.push((CMD_WRITE, b * BLOCK, pattern(seed, BLOCK as usize)));
                } else {
                    reqs.push((CMD_READ, b * BLOCK, Vec::new()));
                }
            }
            let expected: Vec<Option<Vec<u8>>> = reqs
                .iter()
                .map(|(kind, off, _)| {
                    (*kind == CMD_READ).then(|| match model[(off / BLOCK) as usize] {
                        0 => vec![0u8; BLOCK as usize],
                        seed => pattern(seed, BLOCK as usize),
                    })
                })
                .collect();
            let burst: Vec<(u16, u64, u32, &[u8])> = reqs
                .iter()
                .map(|(kind, off, data)| (*kind, *off, BLOCK as u32, &data[..]))
                .collect();
            let start = Instant::now();
            let cookies = c.burst(&burst);
            let mut replies = std::collections::HashMap::new();
            for _ in 0..cookies.len() {
                let r = c.reply();
                replies.insert(r.cookie, r);
            }
            slowest = slowest.max(start.elapsed());
            for ((cookie, want), (kind, off, _)) in cookies.iter().zip(&expected).zip(&reqs) {
                let r = &replies[cookie];
                assert!(
                    r.errors.is_empty(),
                    "request {kind} at {off}: {:?}",
                    r.errors
                );
                if let Some(want) = want {
                    assert!(
                        r.data == *want,
                        "read at {off} in round {round} returned other bytes"
                    );
                }
            }
        }
        println!("--threads {threads}: slowest burst {slowest:?}");
        assert!(
            slowest < Duration::from_millis(500),
            "--threads {threads}: a burst took {slowest:?}: a reply waited for a read tick"
        );
        drop(c);
        server.stop();
    }
}

/// With one worker and members that take 150 ms per I/O, two reads sent
/// together: the first reply leaves when its read ends, not with the
/// second's. Corking it would hold it for the second read's whole
/// latency. Both reads go to one member served one I/O at a time
/// (`--member-queue-depth 1`), so that the second does end a whole member
/// I/O after the first: on two members, or at a greater depth, they would
/// run at once and end together however the replies were sent.
#[test]
fn a_reply_does_not_wait_for_the_next_request_on_slow_members() {
    let dir = temp_dir();
    let members = create_stripe(dir.path());
    let injects: Vec<String> = members
        .iter()
        .map(|m| format!("{m}=latency=150ms"))
        .collect();
    let mut extra = vec!["--threads", "1", "--member-queue-depth", "1"];
    for i in &injects {
        extra.extend(["--inject", i.as_str()]);
    }
    let server = Server::start(dir.path(), &members, &extra);
    let mut c = Client::open(&server.socket, Mode::Structured);
    let mut gaps = Vec::new();
    for round in 0..3u64 {
        // Member 0 both times (4 members at 64 KiB interleave), in
        // different chunks, so the engine does not merge them.
        let a = round * 8 * 65536;
        let b = a + 4 * 65536;
        let cookies = c.burst(&[(CMD_READ, a, 4096, &[]), (CMD_READ, b, 4096, &[])]);
        let start = Instant::now();
        let first = c.reply();
        let t1 = start.elapsed();
        let second = c.reply();
        let t2 = start.elapsed();
        assert!(first.errors.is_empty() && second.errors.is_empty());
        assert_eq!(first.cookie, cookies[0], "one member serves them in order");
        gaps.push(t2.saturating_sub(t1));
    }
    println!("gaps between the two replies: {gaps:?}");
    // With the first reply corked, both arrive together (gap ~0); sent at
    // once, the second follows a whole member I/O later (~150 ms).
    for gap in &gaps {
        assert!(
            *gap >= Duration::from_millis(75),
            "the first reply waited for the second read: gaps {gaps:?}"
        );
    }
    drop(c);
    server.stop();
}
