//! Replies on the wire: a request's outcome encoded as a simple or
//! structured reply (its errno from the engine's error kind), and the
//! block status answer, queued on the connection's replies.

use super::Conn;
use crate::network::replies::Chunk;
use platter_core::volume::{ErrorKind, Reply, VolumeError};
use platter_nbd::consts::*;
use smallvec::SmallVec;

fn errno_of(e: &VolumeError) -> u32 {
    match e.kind {
        ErrorKind::Io => NBD_EIO,
        ErrorKind::OutOfRange => NBD_EINVAL,
        ErrorKind::Busy => NBD_ENOMEM,
        ErrorKind::NoSpace => NBD_ENOSPC,
    }
}

impl Conn {
    pub(super) fn reply_error(&self, cookie: u64, errno: u32, message: &str, release_bytes: u64) {
        let head = if self.structured {
            SmallVec::from_vec(platter_nbd::structured_error(cookie, errno, message))
        } else {
            SmallVec::from_slice(&platter_nbd::simple_reply(cookie, errno))
        };
        self.replies.push(
            Chunk {
                head,
                data: SmallVec::new(),
                release_bytes,
            },
            self.corked_here(),
        );
    }

    pub(super) fn reply(
        &self,
        cookie: u64,
        offset_bytes: u64,
        result: Result<Reply, VolumeError>,
        release_bytes: u64,
    ) {
        let (head, data) = match result {
            Err(e) => return self.reply_error(cookie, errno_of(&e), &e.message, release_bytes),
            // Clients never send maintenance requests.
            Ok(Reply::Done | Reply::Checked(_)) if self.structured => (
                SmallVec::from_slice(&platter_nbd::structured_none(cookie)),
                SmallVec::new(),
            ),
            Ok(Reply::Done | Reply::Checked(_)) => (
                SmallVec::from_slice(&platter_nbd::simple_reply(cookie, 0)),
                SmallVec::new(),
            ),
            Ok(Reply::Data(d)) if self.structured => (
                SmallVec::from_slice(&platter_nbd::structured_offset_data_header(
                    cookie,
                    offset_bytes,
                    d.len() as u32,
                    true,
                )),
                d.into_segments(),
            ),
            Ok(Reply::Data(d)) => (
                SmallVec::from_slice(&platter_nbd::simple_reply(cookie, 0)),
                d.into_segments(),
            ),
        };
        self.replies.push(
            Chunk {
                head,
                data,
                release_bytes,
            },
            self.corked_here(),
        );
    }
}

pub(super) fn block_status(conn: &Conn, cookie: u64, offset_bytes: u64, len: u64) {
    // Everything reads back as data: no allocation map is kept.
    let len = len.min(conn.session.size_bytes - offset_bytes) as u32;
    let contexts = &conn.session.meta_contexts;
    let mut head = SmallVec::new();
    for (i, (id, _)) in contexts.iter().enumerate() {
        let last = i + 1 == contexts.len();
        head.extend_from_slice(&platter_nbd::structured_block_status(
            cookie,
            *id,
            &[(len, 0)],
            last,
        ));
    }
    conn.replies.push(
        Chunk {
            head,
            data: SmallVec::new(),
            release_bytes: 0,
        },
        conn.corked_here(),
    );
}
