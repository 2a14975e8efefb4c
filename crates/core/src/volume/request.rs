//! What goes in and out of a [`super::Volume`]: client requests and their
//! completions, and the events the host must act on. Member I/O requests
//! and their results are [`crate::member_io`]'s.

use bytes::Bytes;
use smallvec::SmallVec;
use std::fmt;

/// Names a client request for its whole life; chosen by the volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// A client operation on the volume's flat byte space. Any byte offset and
/// length inside the volume is accepted: partial sectors are read-modify-written.
#[derive(Clone, Debug)]
pub enum Request {
    Read {
        offset_bytes: u64,
        len_bytes: u64,
    },
    /// `fua`: the data is durable on every copy before completion.
    Write {
        offset_bytes: u64,
        data: Bytes,
        fua: bool,
    },
    WriteZeroes {
        offset_bytes: u64,
        len_bytes: u64,
        fua: bool,
    },
    /// Advisory: whole chunks (whole stripes on parity levels) are released
    /// on the members and read back as zeros; partial ones are left alone.
    Trim {
        offset_bytes: u64,
        len_bytes: u64,
    },
    /// Makes every completed write durable on every member.
    Flush,
    /// Volume upkeep, not a client's request: see [`Maintenance`]. Covers
    /// whole stripes `[first_stripe, first_stripe + stripe_count)`.
    Maintain {
        first_stripe: u64,
        stripe_count: u64,
        action: Maintenance,
    },
    /// Clears the write-intent bits of regions not written since the last
    /// sweep (`all`: of every region with no write in flight), flushing the
    /// members first. The executor sends one every few seconds; a no-op
    /// without a bitmap.
    Sweep {
        all: bool,
    },
    /// The stripe cache's clock ([`super::Volume::enable_stripe_cache`]):
    /// entries not written since the previous tick (every entry with
    /// `all`) are written out to the members. The executor sends one every
    /// few tens of milliseconds, so a stripe waits that long for the writes
    /// that would complete it; it completes at once (the write-outs run on
    /// as the volume's own requests). A no-op without a cache.
    CacheTick {
        all: bool,
    },
}

/// What a [`Request::Maintain`] does to its stripes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Maintenance {
    /// Write the member being rebuilt from the others (the next stripes
    /// after its cursor; see [`super::Volume::rebuild_step`]).
    Rebuild,
    /// Report stripes whose parity or copies disagree.
    Check,
    /// Report them and rewrite the member found wrong (RAID-6's
    /// syndromes, a majority of three or more copies); where none can be
    /// named, as [`Maintenance::Resync`]. For silent corruption.
    Repair,
    /// Make the stripes agree as md's resync does: parity from the data,
    /// copies from the first readable copy. After an unclean stop, where a
    /// mismatch is a write cut short, not a wrong member: the data as it
    /// stands wins, whichever member it is on.
    Resync,
    /// Write a stripe's cached data to the members (internal: the volume
    /// submits these itself; see `cache.rs`).
    Destage,
}

impl Request {
    /// The histogram this request's latency goes to; `None` for the
    /// volume's own work (maintenance, sweeps).
    pub fn latency_of(&self) -> Option<crate::stats::LatencyOf> {
        use crate::stats::LatencyOf;
        match self {
            Request::Read { .. } => Some(LatencyOf::Read),
            Request::Write { .. } | Request::WriteZeroes { .. } => Some(LatencyOf::Write),
            Request::Trim { .. } | Request::Flush => Some(LatencyOf::Other),
            Request::Maintain { .. } | Request::Sweep { .. } | Request::CacheTick { .. } => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Request::Read { .. } => "read",
            Request::Write { .. } => "write",
            Request::WriteZeroes { .. } => "write-zeroes",
            Request::Trim { .. } => "trim",
            Request::Flush => "flush",
            Request::Maintain { .. } => "maintenance",
            Request::Sweep { .. } => "sweep",
            Request::CacheTick { .. } => "destage",
        }
    }

    /// The byte range the request touches (empty for flush).
    pub fn range(&self) -> (u64, u64) {
        match self {
            Request::Read {
                offset_bytes,
                len_bytes,
            }
            | Request::WriteZeroes {
                offset_bytes,
                len_bytes,
                ..
            }
            | Request::Trim {
                offset_bytes,
                len_bytes,
            } => (*offset_bytes, *len_bytes),
            Request::Write {
                offset_bytes, data, ..
            } => (*offset_bytes, data.len() as u64),
            Request::Flush | Request::Sweep { .. } | Request::CacheTick { .. } => (0, 0),
            // Stripes in volume bytes; the volume clips the last one.
            Request::Maintain { .. } => (0, 0),
        }
    }

    /// Why a client request is refused before it starts, if it is: its
    /// range is past the end of a volume of `size_bytes`, or `in_flight`
    /// client requests already take every slot. A volume and a reshape
    /// (which serves two) admit alike.
    pub(crate) fn refusal(
        &self,
        size_bytes: u64,
        in_flight: usize,
        max_requests: usize,
    ) -> Option<VolumeError> {
        let (offset_bytes, len_bytes) = self.range();
        if offset_bytes
            .checked_add(len_bytes)
            .is_none_or(|end| end > size_bytes)
        {
            let msg = format!(
                "{} of {len_bytes} bytes at offset {offset_bytes} is past the end of the volume ({size_bytes} bytes)",
                self.name()
            );
            return Some(VolumeError::new(ErrorKind::OutOfRange, msg));
        }
        (in_flight >= max_requests).then(|| {
            let msg = format!("volume busy: {in_flight} requests in flight");
            VolumeError::new(ErrorKind::Busy, msg)
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Done,
    Data(ReadData),
    /// The result of a [`Maintenance::Check`] or [`Maintenance::Repair`].
    Checked(super::scrub::CheckReport),
}

/// The bytes of a read, in order, as slices of the member reads that
/// produced them: a striped read is sent to the client without being copied
/// into one buffer first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadData {
    segments: SmallVec<[Bytes; 2]>,
    len_bytes: u64,
}

/// More segments than this are gathered into one buffer: a reply must fit
/// a bounded number of iovecs, and tiny interleaves make many tiny pieces.
pub const READ_SEGMENTS_MAX: usize = 64;

impl ReadData {
    /// Orders `(offset, bytes)` pieces that tile `[0, len_bytes)` exactly.
    pub fn assemble(mut pieces: SmallVec<[(u64, Bytes); 2]>, len_bytes: u64) -> ReadData {
        pieces.sort_by_key(|(at, _)| *at);
        let mut next = 0;
        for (at, b) in &pieces {
            assert_eq!(*at, next, "read pieces must tile the request");
            next += b.len() as u64;
        }
        assert_eq!(next, len_bytes, "read pieces must cover the request");
        let mut segments: SmallVec<[Bytes; 2]> = pieces.into_iter().map(|(_, b)| b).collect();
        if segments.len() > READ_SEGMENTS_MAX {
            let mut flat = Vec::with_capacity(len_bytes as usize);
            for s in &segments {
                flat.extend_from_slice(s);
            }
            segments = smallvec::smallvec![Bytes::from(flat)];
        }
        ReadData {
            segments,
            len_bytes,
        }
    }

    pub fn len(&self) -> u64 {
        self.len_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.len_bytes == 0
    }

    pub fn segments(&self) -> &[Bytes] {
        &self.segments
    }

    pub fn into_segments(self) -> SmallVec<[Bytes; 2]> {
        self.segments
    }

    /// One contiguous copy (free when there is a single segment).
    pub fn to_bytes(&self) -> Bytes {
        match self.segments.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => {
                let mut flat = Vec::with_capacity(self.len_bytes as usize);
                for s in many {
                    flat.extend_from_slice(s);
                }
                Bytes::from(flat)
            }
        }
    }

    pub fn to_vec(&self) -> Vec<u8> {
        self.to_bytes().to_vec()
    }
}

#[derive(Clone, Debug)]
pub struct Completion {
    pub id: RequestId,
    pub result: Result<Reply, VolumeError>,
}

/// Stable error kinds; the NBD server maps them to protocol errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Data could not be read or written on enough members (EIO).
    Io,
    /// The range is not inside the volume (EINVAL).
    OutOfRange,
    /// The volume's request table is full; the caller bounds its queue.
    Busy,
    /// A member had no room for a write (ENOSPC): the write did not
    /// complete, the members stay in use (ENOSPC).
    NoSpace,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeError {
    pub kind: ErrorKind,
    pub message: String,
}

impl VolumeError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        VolumeError {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for VolumeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for VolumeError {}

/// Things the operator and the executor must know about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The member returned an error and is no longer used. The host must
    /// record the failure in the labels of the members in use and then call
    /// [`super::Volume::failure_recorded`]: until it does, completions of
    /// writes, trims and flushes are held back.
    MemberFaulty { member: u32, reason: String },
    /// The member had no room for a write. It stays in use; the write
    /// failed with [`ErrorKind::NoSpace`] and its stripes are owed a resync
    /// ([`super::Volume::resync_owed`]).
    NoSpace { member: u32, reason: String },
    /// The member's rebuild reached the end; it is online.
    RebuildDone { member: u32 },
    /// A client read failed on this member and was served from another
    /// copy; the good bytes were written over the failed range and read
    /// back. `offset_bytes` is on the member device, as in [`MemberIo`].
    /// The member stays in use (see [`super::MAX_CORRECTED_READ_ERRORS`]).
    ReadErrorCorrected {
        member: u32,
        offset_bytes: u64,
        len_bytes: u64,
    },
}
