//! Member I/O plans: pieces of work on one member, merged where they touch.

use crate::member_io::{MemberOp, Payload};
use bytes::Bytes;
use smallvec::SmallVec;

/// Where the bytes of a member read go.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    /// Into the client's read buffer at this offset.
    Out { at_bytes: u64 },
    /// Into a stripe job's per-member buffer at this offset.
    Job {
        job: u32,
        member: u32,
        at_bytes: u64,
    },
}

#[derive(Clone, Copy, Debug)]
pub struct ReadPiece {
    pub member: u32,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    pub target: Target,
}

/// A request's planned reads and writes: a few, usually.
pub type ReadPieces = SmallVec<[ReadPiece; 2]>;
pub type WritePieces = SmallVec<[WritePiece; 2]>;

/// Where the parts of one member read go; most reads have one.
pub type Dests = SmallVec<[Dest; 1]>;

/// Part of one merged member read and where it goes.
#[derive(Clone, Copy, Debug)]
pub struct Dest {
    pub io_at_bytes: u64,
    pub len_bytes: u64,
    pub target: Target,
}

#[derive(Clone, Debug)]
pub enum WriteKind {
    Data(Bytes),
    Trim(u64),
}

#[derive(Clone, Debug)]
pub struct WritePiece {
    pub member: u32,
    pub offset_bytes: u64,
    pub kind: WriteKind,
}

impl WritePiece {
    fn len_bytes(&self) -> u64 {
        match &self.kind {
            WriteKind::Data(b) => b.len() as u64,
            WriteKind::Trim(len) => *len,
        }
    }
}

/// Merges reads that are contiguous on a member into one I/O each.
pub fn merge_reads(mut pieces: ReadPieces) -> SmallVec<[(u32, MemberOp, Dests); 2]> {
    if pieces.len() > 1 {
        pieces.sort_by_key(|p| (p.member, p.offset_bytes));
    }
    let mut out: SmallVec<[(u32, MemberOp, Dests); 2]> = SmallVec::new();
    for p in pieces {
        if let Some((
            member,
            MemberOp::Read {
                offset_bytes,
                len_bytes,
            },
            dests,
        )) = out.last_mut()
        {
            if *member == p.member && *offset_bytes + *len_bytes == p.offset_bytes {
                dests.push(Dest {
                    io_at_bytes: *len_bytes,
                    len_bytes: p.len_bytes,
                    target: p.target,
                });
                *len_bytes += p.len_bytes;
                continue;
            }
            // Overlapping reads of one member (e.g. a degraded stripe's hull
            // and a direct extent) stay separate I/Os.
        }
        out.push((
            p.member,
            MemberOp::Read {
                offset_bytes: p.offset_bytes,
                len_bytes: p.len_bytes,
            },
            smallvec::smallvec![Dest {
                io_at_bytes: 0,
                len_bytes: p.len_bytes,
                target: p.target,
            }],
        ));
    }
    out
}

/// Merges writes (and trims) that are contiguous on a member.
pub fn merge_writes(mut pieces: WritePieces) -> SmallVec<[(u32, MemberOp); 2]> {
    if pieces.len() == 1 {
        // One piece (a small write on a stripe): nothing to merge.
        let p = pieces.pop().expect("one piece");
        let op = match p.kind {
            WriteKind::Data(b) => MemberOp::Write {
                offset_bytes: p.offset_bytes,
                data: b.into(),
            },
            WriteKind::Trim(len_bytes) => MemberOp::Trim {
                offset_bytes: p.offset_bytes,
                len_bytes,
            },
        };
        return smallvec::smallvec![(p.member, op)];
    }
    if pieces.len() > 1 {
        pieces.sort_by_key(|p| (p.member, p.offset_bytes));
    }
    // The group being built: member, offset, length, and its data pieces
    // (none for a trim).
    struct Group {
        member: u32,
        offset_bytes: u64,
        len_bytes: u64,
        trim: bool,
        data: Payload,
    }
    fn close(g: Group) -> (u32, MemberOp) {
        let op = if g.trim {
            MemberOp::Trim {
                offset_bytes: g.offset_bytes,
                len_bytes: g.len_bytes,
            }
        } else {
            // Pieces back to back on the member go out as one vectored
            // write, not copied into one buffer.
            MemberOp::Write {
                offset_bytes: g.offset_bytes,
                data: g.data,
            }
        };
        (g.member, op)
    }
    let mut out = SmallVec::new();
    let mut current: Option<Group> = None;
    for p in pieces {
        let len = p.len_bytes();
        let trim = matches!(p.kind, WriteKind::Trim(_));
        if let Some(g) = &mut current {
            assert!(
                g.member != p.member || g.offset_bytes + g.len_bytes <= p.offset_bytes,
                "overlapping member writes in one plan"
            );
            if g.member == p.member
                && g.trim == trim
                && g.offset_bytes + g.len_bytes == p.offset_bytes
            {
                g.len_bytes += len;
                if let WriteKind::Data(b) = p.kind {
                    g.data.push(b);
                }
                continue;
            }
        }
        if let Some(g) = current.take() {
            out.push(close(g));
        }
        let mut data = Payload::default();
        if let WriteKind::Data(b) = p.kind {
            data.push(b);
        }
        current = Some(Group {
            member: p.member,
            offset_bytes: p.offset_bytes,
            len_bytes: len,
            trim,
            data,
        });
    }
    if let Some(g) = current {
        out.push(close(g));
    }
    out
}
