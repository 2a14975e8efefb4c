//! The client's transmission phase against replies built with this crate's
//! own server encoders: reads reassembled from chunks in any order and any
//! byte split, errors carried with the server's words, and every reply the
//! protocol forbids refused before it can complete a request.

use platter_nbd::consts::*;
use platter_nbd::{
    simple_reply, structured_error, structured_header, structured_none,
    structured_offset_data_header, structured_offset_hole, BlockSize, ClientRequest, ClientSession,
    Completion, Export, ReplyError, RequestError, REQUEST_HEADER_BYTES,
};
use proptest::prelude::*;

const ALL: u16 = NBD_FLAG_HAS_FLAGS
    | NBD_FLAG_SEND_FLUSH
    | NBD_FLAG_SEND_FUA
    | NBD_FLAG_SEND_TRIM
    | NBD_FLAG_SEND_WRITE_ZEROES;

fn session(structured: bool, flags: u16) -> ClientSession {
    ClientSession::new(Export {
        size_bytes: 1 << 20,
        transmission_flags: flags,
        structured_replies: structured,
        block_size: Some(BlockSize {
            minimum_bytes: 512,
            preferred_bytes: 4096,
            maximum_bytes: 64 * 1024,
        }),
    })
}

fn read(s: &mut ClientSession, offset_bytes: u64, len_bytes: u32) -> u64 {
    s.request(ClientRequest::Read {
        offset_bytes,
        len_bytes,
    })
    .unwrap()
    .0
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

fn completions(s: &mut ClientSession) -> Vec<Completion> {
    std::iter::from_fn(|| s.next_completion()).collect()
}

#[test]
fn requests_carry_the_protocols_header() {
    let mut s = session(true, ALL);
    let (cookie, h) = s
        .request(ClientRequest::WriteZeroes {
            offset_bytes: 4096,
            len_bytes: 8192,
            fua: true,
            no_hole: true,
        })
        .unwrap();
    assert_eq!(h.len(), REQUEST_HEADER_BYTES);
    assert_eq!(&h[0..4], &NBD_REQUEST_MAGIC.to_be_bytes());
    assert_eq!(
        u16::from_be_bytes([h[4], h[5]]),
        NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE
    );
    assert_eq!(u16::from_be_bytes([h[6], h[7]]), NBD_CMD_WRITE_ZEROES);
    assert_eq!(&h[8..16], &cookie.to_be_bytes());
    assert_eq!(&h[16..24], &4096u64.to_be_bytes());
    assert_eq!(&h[24..28], &8192u32.to_be_bytes());
    let (second, _) = s.request(ClientRequest::Flush).unwrap();
    assert_ne!(cookie, second, "cookies are not reused while in flight");
    assert_eq!(s.in_flight(), 2);
    let disc = s.disconnect();
    assert_eq!(u16::from_be_bytes([disc[6], disc[7]]), NBD_CMD_DISC);
}

/// A request the server did not offer, or outside the export's bounds and
/// block sizes, is refused here, before anything is sent.
#[test]
fn requests_the_server_cannot_take_are_refused_before_sending() {
    let mut bare = session(true, NBD_FLAG_HAS_FLAGS);
    for (req, want) in [
        (
            ClientRequest::Flush,
            RequestError::NotOffered("NBD_CMD_FLUSH"),
        ),
        (
            ClientRequest::Trim {
                offset_bytes: 0,
                len_bytes: 512,
            },
            RequestError::NotOffered("NBD_CMD_TRIM"),
        ),
        (
            ClientRequest::Write {
                offset_bytes: 0,
                len_bytes: 512,
                fua: true,
            },
            RequestError::NotOffered("NBD_CMD_FLAG_FUA"),
        ),
    ] {
        assert_eq!(bare.request(req), Err(want));
    }
    let mut ro = session(true, ALL | NBD_FLAG_READ_ONLY);
    let w = ClientRequest::Write {
        offset_bytes: 0,
        len_bytes: 512,
        fua: false,
    };
    assert_eq!(ro.request(w), Err(RequestError::ReadOnly));
    let mut s = session(true, ALL);
    let r = |offset_bytes, len_bytes| ClientRequest::Read {
        offset_bytes,
        len_bytes,
    };
    assert!(matches!(
        s.request(r((1 << 20) - 512, 1024)),
        Err(RequestError::OutOfRange { .. })
    ));
    assert!(matches!(
        s.request(r(u64::MAX - 100, 512)),
        Err(RequestError::OutOfRange { .. })
    ));
    assert!(matches!(
        s.request(r(100, 512)),
        Err(RequestError::Unaligned { .. })
    ));
    assert_eq!(
        s.request(r(0, 128 * 1024)),
        Err(RequestError::TooLarge {
            len_bytes: 128 * 1024,
            max_bytes: 64 * 1024
        })
    );
    assert_eq!(s.request(r(0, 0)), Err(RequestError::Empty));
    assert_eq!(s.in_flight(), 0, "nothing refused is in flight");
}

#[test]
fn simple_replies_complete_reads_writes_and_errors() {
    let mut s = session(false, ALL);
    let a = read(&mut s, 0, 1024);
    let (b, _) = s
        .request(ClientRequest::Write {
            offset_bytes: 0,
            len_bytes: 512,
            fua: false,
        })
        .unwrap();
    let c = read(&mut s, 4096, 512);
    let data = pattern(1024, 7);
    let mut wire = simple_reply(b, 0).to_vec();
    wire.extend_from_slice(&simple_reply(c, NBD_EIO));
    wire.extend_from_slice(&simple_reply(a, 0));
    wire.extend_from_slice(&data);
    for piece in wire.chunks(5) {
        s.feed(piece).unwrap();
    }
    assert_eq!(
        completions(&mut s),
        vec![
            Completion {
                cookie: b,
                result: Ok(None)
            },
            Completion {
                cookie: c,
                result: Err(ReplyError {
                    errno: NBD_EIO,
                    message: String::new()
                })
            },
            Completion {
                cookie: a,
                result: Ok(Some(data))
            },
        ]
    );
    assert_eq!(s.in_flight(), 0);
}

#[test]
fn a_structured_error_carries_the_servers_words() {
    let mut s = session(true, ALL);
    let a = read(&mut s, 0, 4096);
    let mut wire = structured_offset_data_header(a, 0, 512, false).to_vec();
    wire.extend_from_slice(&pattern(512, 1));
    wire.extend_from_slice(&structured_error(a, NBD_EIO, "bad sector at 512"));
    s.feed(&wire).unwrap();
    let c = completions(&mut s);
    let Err(e) = &c[0].result else {
        panic!("{c:?}")
    };
    assert_eq!(e.errno, NBD_EIO);
    assert_eq!(e.to_string(), "NBD_EIO from the server: bad sector at 512");
}

/// Each reply the protocol forbids stops the session, and completes
/// nothing: a read never returns bytes the server did not send it.
#[test]
fn forbidden_replies_end_the_session_and_complete_nothing() {
    // (structured replies agreed, the reply to read cookie `a`, the error)
    type Case = (bool, Box<dyn Fn(u64) -> Vec<u8>>, &'static str);
    let cases: Vec<Case> = vec![
        (
            true,
            Box::new(|_| simple_reply(99, 0).to_vec()),
            "not in flight",
        ),
        (
            true,
            Box::new(|a| simple_reply(a, 0).to_vec()),
            "simple reply to read",
        ),
        (
            false,
            Box::new(|a| structured_none(a).to_vec()),
            "not agreed",
        ),
        (
            true,
            Box::new(|a| structured_none(a).to_vec()),
            "ended after 0",
        ),
        (
            true,
            Box::new(|a| {
                let mut v = structured_offset_data_header(a, 4096, 512, true).to_vec();
                v.extend_from_slice(&[0; 512]);
                v
            }),
            "got bytes 4096",
        ),
        (
            true,
            Box::new(|a| {
                let mut v = structured_offset_hole(a, 0, 1024, false).to_vec();
                v.extend_from_slice(&structured_offset_hole(a, 512, 512, true));
                v
            }),
            "twice",
        ),
        (
            true,
            Box::new(|a| structured_header(NBD_REPLY_FLAG_DONE, 77, a, 0).to_vec()),
            "type 77",
        ),
        (
            true,
            Box::new(|a| structured_header(0, NBD_REPLY_TYPE_NONE, a, 0).to_vec()),
            "NBD_REPLY_TYPE_NONE",
        ),
        (
            true,
            Box::new(|_| b"HTTP/1.1 200 OK\r\n\r\n".to_vec()),
            "magic",
        ),
    ];
    for (structured, wire, says) in cases {
        let mut s = session(structured, ALL);
        let a = read(&mut s, 0, 1024);
        let e = s.feed(&wire(a)).expect_err(says);
        assert!(e.to_string().contains(says), "{e} does not say {says:?}");
        assert!(s.next_completion().is_none(), "{says}: completed");
        assert!(s.feed(&[0]).is_err(), "nothing is taken after an error");
    }
}

proptest! {
    /// A read answered by data and hole chunks in any order, split into
    /// any pieces, interleaved with another request's reply, reassembles
    /// to exactly the bytes sent.
    #[test]
    fn chunked_reads_reassemble(
        cuts in proptest::collection::btree_set(1u32..16, 0..6),
        holes in proptest::collection::vec(any::<bool>(), 16),
        order in Just(()).prop_perturb(|_, mut rng| rng.next_u64()),
        split in 1usize..200,
    ) {
        let mut s = session(true, ALL);
        let len = 16 * 512u32;
        let a = read(&mut s, 8192, len);
        let (f, _) = s.request(ClientRequest::Flush).unwrap();
        let data = pattern(len as usize, 3);
        let mut want = data.clone();
        let mut bounds: Vec<u32> = vec![0];
        bounds.extend(cuts.iter().map(|c| c * 512));
        bounds.push(len);
        let mut chunks: Vec<Vec<u8>> = bounds
            .windows(2)
            .enumerate()
            .map(|(i, w)| {
                let (lo, hi) = (w[0], w[1]);
                if holes[i] {
                    want[lo as usize..hi as usize].fill(0);
                    structured_offset_hole(a, 8192 + u64::from(lo), hi - lo, false).to_vec()
                } else {
                    let mut v = structured_offset_data_header(a, 8192 + u64::from(lo), hi - lo, false).to_vec();
                    v.extend_from_slice(&data[lo as usize..hi as usize]);
                    v
                }
            })
            .collect();
        // Shuffle with the drawn seed, and put the flush's reply among them.
        let mut x = order | 1;
        for i in (1..chunks.len()).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            chunks.swap(i, (x % (i as u64 + 1)) as usize);
        }
        chunks.insert((x % (chunks.len() as u64 + 1)) as usize, simple_reply(f, 0).to_vec());
        chunks.push(structured_none(a).to_vec());
        let wire: Vec<u8> = chunks.concat();
        for piece in wire.chunks(split) {
            s.feed(piece).unwrap();
        }
        let mut got = completions(&mut s);
        got.sort_by_key(|c| c.cookie);
        prop_assert_eq!(got, vec![
            Completion { cookie: a, result: Ok(Some(want)) },
            Completion { cookie: f, result: Ok(None) },
        ]);
    }

    /// Whatever the server sends, the session never panics, and a read
    /// that completes has exactly its length.
    #[test]
    fn any_server_bytes_are_handled(
        structured in any::<bool>(),
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
        split in 1usize..64,
    ) {
        let mut s = session(structured, ALL);
        read(&mut s, 0, 512);
        for piece in bytes.chunks(split) {
            if s.feed(piece).is_err() {
                break;
            }
        }
        while let Some(c) = s.next_completion() {
            if let Ok(Some(d)) = c.result {
                prop_assert_eq!(d.len(), 512);
            }
        }
    }
}
