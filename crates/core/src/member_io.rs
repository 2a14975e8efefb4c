//! The engine's vocabulary with its members: a member I/O request, its
//! payload and its result, and the id-keyed maps the engine and its layers
//! (balancing, checksums, statistics) keep them in. Everything in
//! `volume/`, `balance`, `integrity` and `stats` takes these from here, and
//! this module takes nothing from them: it is the bottom layer the others
//! stand on (`tests/layers.rs` holds the order).

use bytes::Bytes;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

/// Names one member I/O; chosen by the volume, echoed back by the executor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IoId(pub u64);

/// A request for one member. Offsets are absolute on the member device
/// (the data offset is already added).
#[derive(Clone, Debug)]
pub struct MemberIo {
    pub id: IoId,
    pub member: u32,
    pub op: MemberOp,
}

#[derive(Clone, Debug)]
pub enum MemberOp {
    Read {
        offset_bytes: u64,
        len_bytes: u64,
    },
    Write {
        offset_bytes: u64,
        data: Payload,
    },
    /// Afterwards the range reads as zeros (the member contract).
    Trim {
        offset_bytes: u64,
        len_bytes: u64,
    },
    Flush,
}

/// The bytes of a member write, in order: one buffer, or several when the
/// engine merged pieces that lie back to back on the member but not in
/// memory (a striped write's chunks for one member, a stripe's parity and
/// the next one's). The executor writes them with one vectored write; they
/// are never copied together on the way.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Payload {
    parts: SmallVec<[Bytes; 1]>,
    len: usize,
}

impl Payload {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The buffers, to be written back to back.
    pub fn parts(&self) -> &[Bytes] {
        &self.parts
    }

    /// Appends `b` after the bytes already here.
    pub fn push(&mut self, b: Bytes) {
        self.len += b.len();
        self.parts.push(b);
    }

    /// The bytes as one buffer: free for one part, a copy for several.
    pub fn to_bytes(&self) -> Bytes {
        match self.parts.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => {
                let mut flat = Vec::with_capacity(self.len);
                for b in many {
                    flat.extend_from_slice(b);
                }
                Bytes::from(flat)
            }
        }
    }
}

impl From<Bytes> for Payload {
    fn from(b: Bytes) -> Payload {
        Payload {
            len: b.len(),
            parts: smallvec::smallvec![b],
        }
    }
}

impl From<Vec<u8>> for Payload {
    fn from(v: Vec<u8>) -> Payload {
        Payload::from(Bytes::from(v))
    }
}

impl MemberOp {
    /// `(offset, length)` on the member; `(0, 0)` for a flush.
    pub fn range(&self) -> (u64, u64) {
        match self {
            MemberOp::Read {
                offset_bytes,
                len_bytes,
            }
            | MemberOp::Trim {
                offset_bytes,
                len_bytes,
            } => (*offset_bytes, *len_bytes),
            MemberOp::Write { offset_bytes, data } => (*offset_bytes, data.len() as u64),
            MemberOp::Flush => (0, 0),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            MemberOp::Read { .. } => "read",
            MemberOp::Write { .. } => "write",
            MemberOp::Trim { .. } => "trim",
            MemberOp::Flush => "flush",
        }
    }
}

/// What the executor reports for a member I/O: data for reads, nothing for
/// the rest, or why it failed.
pub type IoResult = Result<Option<Bytes>, IoError>;

/// The classes of member failure. Plain data: the executor maps the OS
/// error (errno) or the I/O layer's own verdict onto them. What the engine
/// does with each is [`IoErrorKind::policy`]; docs/failures.md has the
/// table. Transient conditions (`EINTR`, `EAGAIN`, a short transfer) never
/// get here: the I/O layer retries them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoErrorKind {
    /// The device reported an error for these bytes (`EIO`, a bad sector,
    /// a short read at a place the member has). The rest of the device may
    /// be fine: a read is corrected from another copy where there is one.
    Media,
    /// The member (a sparse file, a thin device) had no room for a write.
    /// Nothing is wrong with the bytes it holds.
    NoSpace,
    /// The device went away (`ENXIO`, `ENODEV`, an unplugged disk, a
    /// detached loop device, a closed remote connection) or its file was
    /// deleted while in use.
    Gone,
    /// The member is smaller than it was: bytes past its new end are lost.
    Shrunk,
    /// No answer within the member timeout.
    Timeout,
    /// The member refuses writes (`EROFS`, `EPERM`, `EACCES`).
    ReadOnly,
    /// A request past the member's end, refused before the device was
    /// touched: the member is not the size the volume was assembled with.
    OutOfRange,
    /// The device returned bytes that do not match their checksums
    /// (`platter create --checksums`): bit rot, a misdirected or lost
    /// write, a member overwritten behind the volume's back. The device
    /// itself answered: the bytes are rewritten from another copy or from
    /// parity, and the member stays in use.
    Checksum,
}

/// What the engine does about a failed member I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePolicy {
    /// The member is marked faulty and not used again; the request goes on
    /// without it where redundancy allows, else fails with `EIO`.
    FailMember,
    /// A client read on a redundant level is served from another copy or
    /// rebuilt from parity, and the bad bytes are rewritten (md's read
    /// error correction); a member whose rewrite fails, or that needed too
    /// many, is failed. Anything else: as [`FailurePolicy::FailMember`].
    CorrectRead,
    /// The request fails with `ENOSPC`; the member stays in use, and the
    /// stripes the write touched are resynced once there is room.
    FailRequest,
}

impl IoErrorKind {
    pub fn policy(self) -> FailurePolicy {
        match self {
            IoErrorKind::Media | IoErrorKind::Checksum => FailurePolicy::CorrectRead,
            IoErrorKind::NoSpace => FailurePolicy::FailRequest,
            // A device that is gone, cut short, silent or read-only will not
            // take the rewrite a correction needs.
            IoErrorKind::Gone
            | IoErrorKind::Shrunk
            | IoErrorKind::Timeout
            | IoErrorKind::ReadOnly
            | IoErrorKind::OutOfRange => FailurePolicy::FailMember,
        }
    }
}

/// A failed member I/O: its class and, in words, why (for the operator).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoError {
    pub kind: IoErrorKind,
    pub message: String,
    /// A read that failed its checksums in some blocks only: the bytes as
    /// read, and which of them failed. A scrub then suspects the member
    /// only where they fall, not in every stripe the read spanned.
    pub unverified: Option<Box<Unverified>>,
}

/// The bytes of a read some of whose blocks failed their checksums.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unverified {
    /// Every byte the read asked for, as the member returned them.
    pub data: Bytes,
    /// The ranges of `data` (offsets into it, half-open, in order) in
    /// blocks that do not match their checksums.
    pub bad: Vec<(u64, u64)>,
}

impl IoError {
    pub fn new(kind: IoErrorKind, message: impl Into<String>) -> IoError {
        IoError {
            kind,
            message: message.into(),
            unverified: None,
        }
    }

    /// A checksum failure of a read whose bytes came back: see
    /// [`IoError::unverified`].
    pub fn unverified(message: impl Into<String>, data: Bytes, bad: Vec<(u64, u64)>) -> IoError {
        assert!(
            bad.iter().all(|&(a, b)| a < b && b <= data.len() as u64),
            "bad ranges within the bytes read"
        );
        assert!(!bad.is_empty(), "a checksum failure names its blocks");
        IoError {
            kind: IoErrorKind::Checksum,
            message: message.into(),
            unverified: Some(Box::new(Unverified { data, bad })),
        }
    }
}

/// A failure told only in words is a media error.
impl From<String> for IoError {
    fn from(message: String) -> IoError {
        IoError::new(IoErrorKind::Media, message)
    }
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

// Hashing for the id-keyed maps. Ids are sequential counters the engine
// hands out itself, so a multiplicative hash spreads them well and there is
// no adversary to defend against (SipHash's reason to exist).
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        // Fibonacci hashing: the high bits, which hashbrown uses, vary.
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A payload is empty until it holds a byte; empty parts add none.
    /// Mutation testing found `is_empty` unseen (the engine asks `len`).
    #[test]
    fn a_payload_is_empty_until_it_holds_a_byte() {
        let mut p = Payload::default();
        assert!(p.is_empty());
        p.push(Bytes::new());
        assert!(p.is_empty());
        assert_eq!(p.len(), 0);
        p.push(Bytes::from_static(b"x"));
        assert!(!p.is_empty());
    }
}
