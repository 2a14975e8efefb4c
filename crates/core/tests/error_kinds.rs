//! Each class of member error gets the engine's policy for it
//! (`IoErrorKind::policy`, docs/failures.md "What each member error does"):
//! a media error on a read is corrected from the other copy and the member
//! stays; a device that is gone, silent, cut short, read-only or the wrong
//! size is failed at once (a rewrite could not land there); a full member
//! fails only the write; a media error on a write fails the member.
//!
//! Before the kinds, every error but "no space" reached the engine as a
//! media error: a mirror whose disk was unplugged, or timed out, would
//! have tried read-error correction on it (a rewrite to a device that is
//! not there) before failing it.

use bytes::Bytes;
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::volume::{
    ErrorKind, FailurePolicy, Health, IoError, IoErrorKind, Limits, MemberOp, Reply, Request,
    Volume,
};
use platter_core::{Level, ParityLayout};

const MEMBER_BYTES: u64 = 1 << 20;

fn mirror() -> Volume {
    let g = Geometry::new(GeometrySpec {
        level: Level::Mirror,
        parity_layout: ParityLayout::DEFAULT,
        copies: 2,
        interleave_bytes: 64 << 10,
        data_offset_bytes: 0,
        member_data_bytes: vec![MEMBER_BYTES; 2],
    })
    .expect("geometry");
    Volume::new(g, vec![Health::Online; 2], Limits::default())
}

/// What happened after the first member I/O of `req` failed with `kind`.
struct Outcome {
    failed_member: u32,
    /// Member I/Os issued after the failure: (member, operation).
    after: Vec<(u32, &'static str)>,
    result: Result<Reply, ErrorKind>,
    health: Vec<Health>,
}

fn first_io_fails(req: Request, kind: IoErrorKind) -> Outcome {
    let mut v = mirror();
    let id = v.submit(req);
    let mut failed_member = None;
    let mut after = Vec::new();
    for _ in 0..1_000 {
        let Some(io) = v.next_io() else {
            break;
        };
        if failed_member.is_none() {
            failed_member = Some(io.member);
            v.io_done(io.id, Err(IoError::new(kind, "injected")));
            // The host has written the failure into the labels.
            let unrecorded: Vec<u32> = v.unrecorded_failures().collect();
            for m in unrecorded {
                v.failure_recorded(m);
            }
            continue;
        }
        after.push((io.member, io.op.name()));
        let data = match io.op {
            MemberOp::Read { len_bytes, .. } => Some(Bytes::from(vec![0u8; len_bytes as usize])),
            _ => None,
        };
        v.io_done(io.id, Ok(data));
    }
    let c = v.next_completion().expect("the request completed");
    assert_eq!(c.id, id);
    assert!(v.is_idle());
    Outcome {
        failed_member: failed_member.expect("the request issued member I/O"),
        after,
        result: c.result.map_err(|e| e.kind),
        health: v.health().to_vec(),
    }
}

fn read() -> Request {
    Request::Read {
        offset_bytes: 8192,
        len_bytes: 4096,
    }
}

fn write() -> Request {
    Request::Write {
        offset_bytes: 8192,
        data: Bytes::from(vec![7u8; 4096]),
        fua: false,
    }
}

#[test]
fn a_media_error_on_a_read_is_corrected_and_the_member_stays() {
    let o = first_io_fails(read(), IoErrorKind::Media);
    assert!(
        matches!(o.result, Ok(Reply::Data(_))),
        "{:?}",
        o.result.err()
    );
    assert_eq!(o.health, vec![Health::Online; 2]);
    assert!(
        o.after.contains(&(o.failed_member, "write")),
        "the bad bytes were rewritten from the other copy: {:?}",
        o.after
    );
}

#[test]
fn a_device_that_cannot_take_a_rewrite_is_failed_at_once_on_a_read() {
    for kind in [
        IoErrorKind::Gone,
        IoErrorKind::Timeout,
        IoErrorKind::Shrunk,
        IoErrorKind::ReadOnly,
        IoErrorKind::OutOfRange,
    ] {
        assert_eq!(kind.policy(), FailurePolicy::FailMember);
        let o = first_io_fails(read(), kind);
        assert!(
            matches!(o.result, Ok(Reply::Data(_))),
            "{kind:?}: served by the other copy"
        );
        assert_eq!(
            o.health[o.failed_member as usize],
            Health::Faulty,
            "{kind:?}"
        );
        assert!(
            o.after.iter().all(|(m, _)| *m != o.failed_member),
            "{kind:?}: nothing more was sent to the failed member: {:?}",
            o.after
        );
    }
}

#[test]
fn a_full_member_fails_the_write_and_stays() {
    let o = first_io_fails(write(), IoErrorKind::NoSpace);
    assert_eq!(o.result.err(), Some(ErrorKind::NoSpace));
    assert_eq!(o.health, vec![Health::Online; 2]);
}

#[test]
fn a_media_error_on_a_write_fails_the_member_and_the_other_copy_serves() {
    for kind in [IoErrorKind::Media, IoErrorKind::Gone, IoErrorKind::Timeout] {
        let o = first_io_fails(write(), kind);
        assert!(o.result.is_ok(), "{kind:?}: the other copy took the write");
        assert_eq!(
            o.health[o.failed_member as usize],
            Health::Faulty,
            "{kind:?}"
        );
    }
}
