//! NBD exports as members, against real servers: nbdkit (memory plugin,
//! with filters that change what it negotiates), and small fake servers
//! in the test that break the protocol on purpose.
//!
//! Needs nbdkit; skips with the reason elsewhere, fails under `CI=true`.

use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use platter_io::{open_member, Member, MemberErrorKind, OpenOptions};
use platter_testkit::Rng;

const SIZE: u64 = 4 << 20;

/// An nbdkit serving a fresh memory disk through `filters`, with the
/// plugin's `extra` arguments.
struct Nbdkit {
    k: platter_testkit::nbdkit::Nbdkit,
    _dir: tempfile::TempDir,
}

impl Nbdkit {
    fn start(test: &str, filters: &[&str], extra: &[&str]) -> Option<Nbdkit> {
        let dir = tempfile::tempdir().unwrap();
        let size = format!("size={SIZE}");
        let plugin: Vec<&str> = ["memory", size.as_str()]
            .into_iter()
            .chain(extra.iter().copied())
            .collect();
        let k = platter_testkit::nbdkit::Nbdkit::start(
            test,
            &dir.path().join("nbdkit.sock"),
            filters,
            &plugin,
        )?;
        Some(Nbdkit { k, _dir: dir })
    }

    fn uri(&self) -> String {
        self.k.uri()
    }
}

fn uri_of(socket: &Path) -> String {
    format!("nbd+unix:///?socket={}", socket.display())
}

fn open(uri: &str) -> Box<dyn Member> {
    open_member(uri, OpenOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

/// Opens with a 1 s reply deadline, for the tests of a server that stops
/// answering: `connections` of them (with multi-conn).
fn open_with_deadline(uri: &str, connections: u32) -> Box<dyn Member> {
    open_member(
        uri,
        OpenOptions {
            request_timeout: Some(Duration::from_secs(1)),
            connections,
            ..OpenOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Random reads, writes and trims at any byte alignment, each checked
/// against a flat model, with flushes among them.
fn exercise(m: &dyn Member, seed: u64, ops: usize) {
    let mut rng = Rng::new(seed);
    let mut model = vec![0u8; SIZE as usize];
    for _ in 0..ops {
        let long = rng.below(4) == 0;
        let len = 1 + rng.below(if long { 200_000 } else { 9000 });
        let at = rng.below(SIZE - len);
        let (a, b) = (at as usize, (at + len) as usize);
        match rng.below(10) {
            0..=3 => {
                let data: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
                m.write_at(at, &data).unwrap_or_else(|e| panic!("{e}"));
                model[a..b].copy_from_slice(&data);
            }
            4 => {
                m.trim(at, len).unwrap_or_else(|e| panic!("{e}"));
                model[a..b].fill(0);
            }
            5 => m.flush().unwrap_or_else(|e| panic!("{e}")),
            _ => {
                let mut buf = vec![0xeeu8; len as usize];
                m.read_at(at, &mut buf).unwrap_or_else(|e| panic!("{e}"));
                assert!(buf == model[a..b], "seed {seed}: bytes {at}+{len} differ");
            }
        }
    }
    let mut all = vec![0u8; SIZE as usize];
    m.read_at(0, &mut all).unwrap();
    assert!(all == model, "seed {seed}: the member differs at the end");
}

/// The plain case: nbdkit's defaults (1-byte blocks, WRITE_ZEROES, FLUSH).
#[test]
fn an_nbdkit_export_reads_back_what_was_written() {
    let Some(k) = Nbdkit::start("an_nbdkit_export_reads_back_what_was_written", &[], &[]) else {
        return;
    };
    let m = open(&k.uri());
    assert_eq!(m.size_bytes(), SIZE);
    assert_eq!(m.describe(), k.uri());
    exercise(&*m, 1, 400);
}

/// A server that takes only whole 4 KiB blocks, at most 64 KiB at once:
/// unaligned bytes are read around and merged, long requests split.
/// Without it, a mirror's byte-granular write would be refused by such a
/// server (qemu-nbd over O_DIRECT, nbdkit's blocksize-policy).
#[test]
fn a_server_with_block_size_constraints_gets_whole_blocks() {
    let Some(k) = Nbdkit::start(
        "a_server_with_block_size_constraints_gets_whole_blocks",
        &["blocksize-policy"],
        &[
            "blocksize-minimum=4096",
            "blocksize-preferred=4096",
            "blocksize-maximum=65536",
            "blocksize-error-policy=error",
        ],
    ) else {
        return;
    };
    let m = open(&k.uri());
    assert_eq!(m.logical_block_bytes(), 4096);
    exercise(&*m, 2, 400);
}

/// No WRITE_ZEROES offered: a trim writes zeroes (the member contract
/// says a trimmed range reads zeros, which NBD's TRIM does not promise).
#[test]
fn without_write_zeroes_a_trim_still_reads_zeros() {
    let Some(k) = Nbdkit::start(
        "without_write_zeroes_a_trim_still_reads_zeros",
        &["nozero"],
        &[],
    ) else {
        return;
    };
    let m = open(&k.uri());
    m.write_at(1000, &vec![7u8; 300_000]).unwrap();
    m.trim(1001, 299_998).unwrap();
    let mut buf = vec![1u8; 300_000];
    m.read_at(1000, &mut buf).unwrap();
    assert_eq!(buf[0], 7);
    assert_eq!(buf[299_999], 7);
    assert!(buf[1..299_999].iter().all(|&b| b == 0));
}

/// Many threads at once on one connection, each in its own range: every
/// reply reaches the thread that asked (cookies matched), none is lost.
#[test]
fn requests_from_many_threads_share_one_connection() {
    let Some(k) = Nbdkit::start("requests_from_many_threads_share_one_connection", &[], &[]) else {
        return;
    };
    let m: Arc<dyn Member> = Arc::from(open(&k.uri()));
    let threads = 8u64;
    let span = SIZE / threads;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let m = Arc::clone(&m);
            std::thread::spawn(move || {
                let mut rng = Rng::new(100 + t);
                let base = t * span;
                for _ in 0..200 {
                    let len = 1 + rng.below(20_000);
                    let at = base + rng.below(span - len);
                    let data: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
                    m.write_at(at, &data).unwrap();
                    let mut back = vec![0u8; len as usize];
                    m.read_at(at, &mut back).unwrap();
                    assert!(back == data, "thread {t}: read back differs");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a thread failed");
    }
}

/// The server goes away: the next I/O fails as Gone (what the volume
/// treats as a lost member), promptly, and so does every later one.
#[test]
fn a_killed_server_makes_the_member_gone() {
    let Some(mut k) = Nbdkit::start("a_killed_server_makes_the_member_gone", &[], &[]) else {
        return;
    };
    let m = open(&k.uri());
    m.write_at(0, b"hello").unwrap();
    k.k.kill();
    let started = Instant::now();
    for _ in 0..2 {
        let mut buf = [0u8; 5];
        let err = m.read_at(0, &mut buf).expect_err("the server is gone");
        assert_eq!(err.kind, MemberErrorKind::Gone, "{err}");
        assert!(err.to_string().contains("connection"), "{err}");
    }
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// The server's errors reach the caller as their kinds: nbdkit's error
/// filter answers every read with EIO and every write with ENOSPC.
#[test]
fn server_errors_keep_their_kind() {
    let Some(k) = Nbdkit::start(
        "server_errors_keep_their_kind",
        &["error"],
        &[
            "error-pread=EIO",
            "error-pread-rate=1",
            "error-pwrite=ENOSPC",
            "error-pwrite-rate=1",
        ],
    ) else {
        return;
    };
    let m = open(&k.uri());
    let mut buf = [0u8; 512];
    let err = m.read_at(4096, &mut buf).expect_err("EIO");
    assert_eq!(err.kind, MemberErrorKind::Io, "{err}");
    assert!(err.to_string().contains("NBD_EIO"), "{err}");
    assert_eq!((err.offset_bytes, err.len_bytes), (4096, 512));
    let err = m.write_at(0, &buf).expect_err("ENOSPC");
    assert_eq!(err.kind, MemberErrorKind::NoSpace, "{err}");
    // The connection survives an error reply.
    m.flush().unwrap();
}

/// Requests past the export's end are refused before the server sees them.
#[test]
fn past_the_end_is_refused_locally() {
    let Some(k) = Nbdkit::start("past_the_end_is_refused_locally", &[], &[]) else {
        return;
    };
    let m = open(&k.uri());
    let err = m.write_at(SIZE - 1, &[1, 2]).expect_err("past the end");
    assert_eq!(err.kind, MemberErrorKind::OutOfRange, "{err}");
    m.write_at(SIZE - 1, &[9]).unwrap();
}

/// A fake server on a Unix socket: each accepted connection is handed to
/// `serve`, on its own thread.
fn fake_server(serve: fn(std::os::unix::net::UnixStream)) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("fake.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            std::thread::spawn(move || serve(s));
        }
    });
    (dir, uri_of(&socket))
}

/// Something that is not an NBD server: a clear error naming what it sent.
#[test]
fn a_server_that_is_not_nbd_is_refused() {
    let (_d, uri) = fake_server(|mut s| {
        let _ = s.write_all(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n");
        std::thread::sleep(Duration::from_millis(200));
    });
    let err = open_member(&uri, OpenOptions::default())
        .err()
        .expect("refused");
    assert_eq!(err.kind, MemberErrorKind::NotAMember, "{err}");
    assert!(err.to_string().contains("not an NBD server"), "{err}");
}

/// A server that hangs up in the middle of the handshake.
#[test]
fn a_server_that_hangs_up_in_the_handshake_is_refused() {
    let (_d, uri) = fake_server(|mut s| {
        let _ = s.write_all(b"NBDMAGIC");
    });
    let err = open_member(&uri, OpenOptions::default())
        .err()
        .expect("refused");
    assert_eq!(err.kind, MemberErrorKind::Gone, "{err}");
    assert!(err.to_string().contains("closed the connection"), "{err}");
}

/// The handshake of a fake server exporting 64 MiB that takes requests of
/// up to 32 MiB; false if the client went away.
fn fake_handshake(s: &mut std::os::unix::net::UnixStream) -> bool {
    use platter_nbd::{ExportInfo, HandshakeConfig, HandshakeState, ServerHandshake};
    let mut hs = ServerHandshake::new(HandshakeConfig::new(vec![ExportInfo {
        name: String::new(),
        description: String::new(),
        size_bytes: 64 << 20,
        transmission_flags: platter_nbd::consts::NBD_FLAG_SEND_FLUSH,
        block_min_bytes: 1,
        block_preferred_bytes: 4096,
        block_max_bytes: 32 << 20,
    }]));
    let mut buf = vec![0u8; 4096];
    loop {
        let out = hs.take_output();
        if !out.is_empty() && s.write_all(&out).is_err() {
            return false;
        }
        if !matches!(hs.state(), HandshakeState::Negotiating) {
            return true;
        }
        let n = match s.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        hs.feed(&buf[..n]);
    }
}

/// The fake server's handshake, then the client's first request header
/// (28 bytes); `None` if the client went away.
fn fake_first_request(s: &mut std::os::unix::net::UnixStream) -> Option<[u8; 28]> {
    let mut req = [0u8; 28];
    (fake_handshake(s) && s.read_exact(&mut req).is_ok()).then_some(req)
}

/// The story: a stalled host whose kernel stops taking bytes (its socket
/// buffers full) held a write inside the socket call with no deadline: the
/// deadline ran only for requests already sent and waiting for a reply,
/// so the member hung (and with it the server's tries to bring it back)
/// until the I/O layer's much longer timeout. Now sending has the same
/// deadline: the write fails as a lost connection within it.
#[test]
fn a_server_that_stops_reading_loses_the_connection_within_the_deadline() {
    let (_d, uri) = fake_server(|mut s| {
        if fake_handshake(&mut s) {
            // Never read again; hold the connection open.
            std::thread::sleep(Duration::from_secs(30));
        }
    });
    let m = open_with_deadline(&uri, OpenOptions::default().connections);
    let data = vec![0x5a_u8; 16 << 20];
    let started = std::time::Instant::now();
    let err = m.write_at(0, &data).expect_err("nobody reads it");
    assert_eq!(err.kind, MemberErrorKind::Gone, "{err}");
    assert!(m.connection_lost(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the write took {:?} to fail",
        started.elapsed()
    );
}

/// A server that starts the reply to a read and hangs up halfway through
/// its data: the read fails as a lost connection, and no byte of the half
/// reply reaches the caller's buffer as if it were data.
#[test]
fn a_server_that_closes_mid_reply_loses_the_connection() {
    let (_d, uri) = fake_server(|mut s| {
        let Some(req) = fake_first_request(&mut s) else {
            return;
        };
        // The client asked for structured replies: one OFFSET_DATA chunk,
        // flagged done, announcing 4096 bytes and sending 2048.
        let mut reply = Vec::new();
        reply.extend_from_slice(&0x668e_33efu32.to_be_bytes());
        reply.extend_from_slice(&1u16.to_be_bytes());
        reply.extend_from_slice(&1u16.to_be_bytes());
        reply.extend_from_slice(&req[8..16]);
        reply.extend_from_slice(&(8u32 + 4096).to_be_bytes());
        reply.extend_from_slice(&0u64.to_be_bytes());
        reply.extend_from_slice(&[0x41; 2048]);
        let _ = s.write_all(&reply);
    });
    let m = open(&uri);
    let mut buf = [0u8; 4096];
    let err = m.read_at(0, &mut buf).expect_err("half a reply");
    assert_eq!(err.kind, MemberErrorKind::Gone, "{err}");
    assert!(m.connection_lost(), "{err}");
    assert!(
        buf.iter().all(|&b| b == 0),
        "half a reply reached the buffer"
    );
    assert!(err.to_string().contains("closed the connection"), "{err}");
}

/// A server that negotiates properly, then answers a read with a reply
/// for a request never made: the connection is dropped and the read fails
/// (never returns bytes the server made up).
#[test]
fn a_reply_to_no_request_drops_the_connection() {
    let (_d, uri) = fake_server(|mut s| {
        // The client's first request: answer with a cookie it never used.
        if fake_first_request(&mut s).is_none() {
            return;
        }
        let mut reply = Vec::new();
        reply.extend_from_slice(&0x6744_6698u32.to_be_bytes());
        reply.extend_from_slice(&0u32.to_be_bytes());
        reply.extend_from_slice(&0xdead_beefu64.to_be_bytes());
        reply.extend_from_slice(&[0x41; 512]);
        let _ = s.write_all(&reply);
        std::thread::sleep(Duration::from_millis(500));
    });
    let m = open(&uri);
    let mut buf = [0u8; 512];
    let err = m.read_at(0, &mut buf).expect_err("the server lied");
    assert_eq!(err.kind, MemberErrorKind::Gone, "{err}");
    assert!(err.to_string().contains("broke the protocol"), "{err}");
}

/// A server that offers multi-conn (nbdkit's memory plugin does) gets as
/// many connections as asked for, requests spread over them (nbdkit's log
/// filter sees requests on every one), and every byte reads back whichever
/// connection carried it; one that does not (the multi-conn filter turning
/// it off) gets one whatever is asked. Unasked, a Unix socket's server
/// gets [`platter_io::nbd::LOCAL_CONNECTIONS`] and a TCP server
/// [`platter_io::nbd::MULTI_CONN`].
#[test]
fn a_multi_conn_server_gets_several_connections() {
    let test = "a_multi_conn_server_gets_several_connections";
    let log = tempfile::NamedTempFile::new().unwrap();
    let logfile = format!("logfile={}", log.path().display());
    let Some(k) = Nbdkit::start(test, &["log"], &[&logfile]) else {
        return;
    };
    let uri = k.uri();
    let parsed = platter_nbd::parse_nbd_uri(&uri).unwrap();
    // Unasked, several either way: LOCAL_CONNECTIONS over a Unix socket
    // (the server is on this host), MULTI_CONN over TCP. Asked for, there
    // are as many.
    let default = platter_io::NbdMember::open(&uri, &parsed, false, Duration::from_secs(30), 0)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(default.connections(), platter_io::nbd::LOCAL_CONNECTIONS);
    assert!(default.connections() > 1);
    drop(default);
    let tcp = platter_nbd::parse_nbd_uri("nbd://192.0.2.1/x").unwrap();
    assert_eq!(
        platter_io::nbd::default_connections(&tcp.endpoint),
        platter_io::nbd::MULTI_CONN
    );
    let m = platter_io::NbdMember::open(
        &uri,
        &parsed,
        false,
        Duration::from_secs(30),
        platter_io::nbd::MULTI_CONN as u32,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.connections(), platter_io::nbd::MULTI_CONN);
    exercise(&m, 7, 200);
    drop(m);
    let text = std::fs::read_to_string(log.path()).unwrap();
    let used: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| l.contains("Write id=") || l.contains("Read id="))
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("connection=")))
        .collect();
    assert_eq!(used.len(), platter_io::nbd::MULTI_CONN, "{used:?}");

    let Some(single) = Nbdkit::start(test, &["multi-conn"], &["multi-conn-mode=disable"]) else {
        return;
    };
    let uri = single.uri();
    let parsed = platter_nbd::parse_nbd_uri(&uri).unwrap();
    let m = platter_io::NbdMember::open(&uri, &parsed, false, Duration::from_secs(30), 4)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.connections(), 1);
}

/// Starts `op` on `m` and waits for its outcome (the test's own channel:
/// `Member::start` calls back on the connection's reader thread).
fn started(
    m: &dyn Member,
    op: platter_core::volume::MemberOp,
) -> Result<Option<bytes::Bytes>, platter_io::MemberError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let caller = std::thread::current().id();
    let done: platter_io::MemberDone = Box::new(move |r| {
        assert_ne!(
            std::thread::current().id(),
            caller,
            "called back inside start"
        );
        tx.send(r).unwrap();
    });
    if m.start(&op, done).is_err() {
        panic!("the NBD member would not start {op:?}");
    }
    rx.recv_timeout(Duration::from_secs(30))
        .expect("an outcome")
}

/// The started path (no thread waits out each I/O, issue 16): aligned
/// reads and writes of up to the server's maximum and flushes go out at
/// once and are answered on the reader thread, byte-exact against the
/// blocking path; anything it cannot send as one request is handed back
/// for the blocking path.
///
/// Writes in several parts: a 1 MiB write to a mirror reaches each member
/// as 16 parts of 64 KiB, and only one-part writes used to be started. The
/// rest went to a member I/O thread, which gathered the parts into a fresh
/// buffer: a copy of every byte and two thread hand-offs per member write
/// (`bench/remote.sh`, 1 MiB writes at 1 ms: 0.34-0.40 of one export,
/// 0.50 once the parts go out where they lie).
#[test]
fn started_requests_read_back_what_was_written() {
    use platter_core::volume::{MemberOp, Payload};
    let test = "started_requests_read_back_what_was_written";
    // Whole 4 KiB blocks, at most 64 KiB: what fits goes out as one
    // request, what does not comes back for the blocking path.
    let Some(k) = Nbdkit::start(
        test,
        &["blocksize-policy"],
        &[
            "blocksize-minimum=4096",
            "blocksize-maximum=65536",
            "blocksize-error-policy=error",
        ],
    ) else {
        return;
    };
    let m = open(&k.uri());
    assert!(m.starts_requests());
    let mut rng = Rng::new(7);
    let mut model = vec![0u8; SIZE as usize];
    for i in 0..300u64 {
        let len = 4096 * (1 + rng.below(16));
        let at = rng.below((SIZE - len) / 4096) * 4096;
        let (a, b) = (at as usize, (at + len) as usize);
        if i % 3 == 0 {
            let data: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
            // In up to four parts, cut anywhere (the engine's pieces back
            // to back on the member): one request still.
            let mut payload = Payload::default();
            let mut from = 0usize;
            for _ in 0..rng.below(4) {
                let to = from + rng.below(len - from as u64) as usize;
                payload.push(bytes::Bytes::copy_from_slice(&data[from..to]));
                from = to;
            }
            payload.push(bytes::Bytes::copy_from_slice(&data[from..]));
            if i % 2 == 0 {
                // The blocking path sends them the same way.
                let parts: Vec<&[u8]> = payload.parts().iter().map(|p| &p[..]).collect();
                m.write_parts_at(at, &parts).unwrap();
                model[a..b].copy_from_slice(&data);
                continue;
            }
            let op = MemberOp::Write {
                offset_bytes: at,
                data: payload,
            };
            assert!(started(&*m, op).unwrap().is_none());
            model[a..b].copy_from_slice(&data);
        } else if i % 7 == 0 {
            assert!(started(&*m, MemberOp::Flush).unwrap().is_none());
        } else {
            let op = MemberOp::Read {
                offset_bytes: at,
                len_bytes: len,
            };
            let got = started(&*m, op).unwrap().expect("a read's bytes");
            assert!(got[..] == model[a..b], "bytes {at}+{len} differ");
            // The blocking path sees the same bytes.
            let mut buf = vec![0u8; len as usize];
            m.read_at(at, &mut buf).unwrap();
            assert!(buf == model[a..b]);
        }
    }
    // Not one request: an unaligned read, one over the maximum, a write
    // in parts over the maximum, a trim. Handed back, uncalled.
    let mut over = Payload::default();
    over.push(bytes::Bytes::from(vec![1u8; 64 << 10]));
    over.push(bytes::Bytes::from(vec![2u8; 4096]));
    for op in [
        MemberOp::Write {
            offset_bytes: 0,
            data: over,
        },
        MemberOp::Read {
            offset_bytes: 512,
            len_bytes: 4096,
        },
        MemberOp::Read {
            offset_bytes: 0,
            len_bytes: 128 << 10,
        },
        MemberOp::Trim {
            offset_bytes: 0,
            len_bytes: 4096,
        },
    ] {
        let done: platter_io::MemberDone = Box::new(|_| panic!("called for an op it gave back"));
        assert!(m.start(&op, done).is_err(), "{op:?} started");
    }
}

/// A write in more pieces than one `sendmsg` takes (IOV_MAX, 1024) and
/// larger than the socket's buffer: the pieces go out over several calls,
/// each resuming inside a piece where the last one stopped, and every
/// byte lands where it belongs (the started path and `write_parts_at`).
#[test]
fn a_write_in_many_pieces_goes_out_whole() {
    use platter_core::volume::{MemberOp, Payload};
    let test = "a_write_in_many_pieces_goes_out_whole";
    let Some(k) = Nbdkit::start(test, &[], &[]) else {
        return;
    };
    let m = open(&k.uri());
    let mut rng = Rng::new(16);
    for (at, len) in [(0u64, 1usize << 20), (2 << 20, 1 << 20)] {
        let data: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
        // 3,000 pieces of odd sizes: three sendmsg calls at least.
        let cuts: Vec<usize> = (0..=3000).map(|i| i * len / 3000).collect();
        let mut payload = Payload::default();
        for w in cuts.windows(2) {
            payload.push(bytes::Bytes::copy_from_slice(&data[w[0]..w[1]]));
        }
        if at == 0 {
            let op = MemberOp::Write {
                offset_bytes: at,
                data: payload,
            };
            assert!(started(&*m, op).unwrap().is_none(), "{test}");
        } else {
            let parts: Vec<&[u8]> = payload.parts().iter().map(|p| &p[..]).collect();
            m.write_parts_at(at, &parts).unwrap();
        }
        let mut back = vec![0u8; len];
        m.read_at(at, &mut back).unwrap();
        assert!(back == data, "{test}: bytes at {at} differ");
    }
}

/// A started request the server never answers: no caller waits with a
/// timeout, so the reader holds it to the deadline itself; the outcome is
/// a lost connection within the deadline (plus the reader's 1 s tick),
/// and the member counts as disconnected.
#[test]
fn a_started_request_never_answered_loses_the_connection_within_the_deadline() {
    use platter_core::volume::MemberOp;
    let (_d, uri) = fake_server(|mut s| {
        if fake_handshake(&mut s) {
            // Read the request, never answer it.
            let _ = fake_first_request(&mut s);
            std::thread::sleep(Duration::from_secs(30));
        }
    });
    let m = open_with_deadline(&uri, OpenOptions::default().connections);
    let begun = Instant::now();
    let op = MemberOp::Read {
        offset_bytes: 0,
        len_bytes: 512,
    };
    let err = started(&*m, op).expect_err("never answered");
    assert_eq!(err.kind, MemberErrorKind::Gone, "{err}");
    assert!(m.connection_lost());
    assert!(
        begun.elapsed() < Duration::from_secs(5),
        "took {:?}",
        begun.elapsed()
    );
}

/// The last reference to a member can be dropped inside a started
/// request's callback, on that connection's own reader thread (a member
/// removed from a volume while its I/O was out). Dropping the member joins
/// the reader: on itself that failed (EDEADLK) and panicked the reader
/// before the callback could finish.
#[test]
fn the_member_can_be_dropped_by_its_own_callback() {
    use platter_core::volume::MemberOp;
    let test = "the_member_can_be_dropped_by_its_own_callback";
    let Some(k) = Nbdkit::start(test, &[], &[]) else {
        return;
    };
    let m: Arc<dyn Member> = Arc::from(open(&k.uri()));
    let (tx, rx) = std::sync::mpsc::channel();
    let last = Arc::clone(&m);
    let done: platter_io::MemberDone = Box::new(move |r| {
        drop(last);
        tx.send(r.is_ok()).unwrap();
    });
    let op = MemberOp::Read {
        offset_bytes: 0,
        len_bytes: 4096,
    };
    assert!(m.start(&op, done).is_ok());
    drop(m);
    let ok = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the callback finished after dropping the member");
    assert!(ok);
}

/// The story: the reader held started requests to the deadline only when
/// the socket went quiet for a tick, so a server that kept answering the
/// other requests but never one of them left that one hanging until the
/// I/O layer's much longer member timeout. The server here ignores the
/// first flush and answers every later one (simple replies): the first,
/// started, fails as a lost connection within the deadline while the
/// others keep coming.
#[test]
fn a_started_request_skipped_by_a_busy_server_loses_the_connection_within_the_deadline() {
    use platter_core::volume::MemberOp;
    let (_d, uri) = fake_server(|mut s| {
        let Some(_ignored) = fake_first_request(&mut s) else {
            return;
        };
        let mut req = [0u8; 28];
        while s.read_exact(&mut req).is_ok() {
            let mut reply = Vec::with_capacity(16);
            reply.extend_from_slice(&0x6744_6698u32.to_be_bytes());
            reply.extend_from_slice(&0u32.to_be_bytes());
            reply.extend_from_slice(&req[8..16]);
            if s.write_all(&reply).is_err() {
                return;
            }
        }
    });
    let m: Arc<dyn Member> = Arc::from(open_with_deadline(&uri, 1));
    let chatter = {
        let m = Arc::clone(&m);
        std::thread::spawn(move || {
            // Answered flushes, one every 50 ms, until the connection goes.
            std::thread::sleep(Duration::from_millis(100));
            let mut answered = 0;
            while m.flush().is_ok() && answered < 200 {
                answered += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            answered
        })
    };
    let begun = Instant::now();
    let err = started(&*m, MemberOp::Flush).expect_err("never answered");
    assert_eq!(err.kind, MemberErrorKind::Gone, "{err}");
    assert!(
        begun.elapsed() < Duration::from_secs(5),
        "took {:?}",
        begun.elapsed()
    );
    let answered = chatter.join().unwrap();
    assert!(
        answered >= 5,
        "the server answered {answered} other flushes meanwhile"
    );
}
