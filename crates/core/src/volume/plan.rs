//! Member I/O plans: pieces of work on one member, merged where they touch.

use super::request::MemberOp;
use bytes::{Bytes, BytesMut};

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
pub fn merge_reads(mut pieces: Vec<ReadPiece>) -> Vec<(u32, MemberOp, Vec<Dest>)> {
    pieces.sort_by_key(|p| (p.member, p.offset_bytes));
    let mut out: Vec<(u32, MemberOp, Vec<Dest>)> = Vec::new();
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
            vec![Dest {
                io_at_bytes: 0,
                len_bytes: p.len_bytes,
                target: p.target,
            }],
        ));
    }
    out
}

/// Merges writes (and trims) that are contiguous on a member.
pub fn merge_writes(mut pieces: Vec<WritePiece>) -> Vec<(u32, MemberOp)> {
    pieces.sort_by_key(|p| (p.member, p.offset_bytes));
    let mut groups: Vec<Vec<WritePiece>> = Vec::new();
    for p in pieces {
        if let Some(g) = groups.last_mut() {
            let last = g.last().expect("groups are never empty");
            let same_kind = matches!(
                (&last.kind, &p.kind),
                (WriteKind::Data(_), WriteKind::Data(_)) | (WriteKind::Trim(_), WriteKind::Trim(_))
            );
            assert!(
                last.member != p.member || last.offset_bytes + last.len_bytes() <= p.offset_bytes,
                "overlapping member writes in one plan"
            );
            if same_kind
                && last.member == p.member
                && last.offset_bytes + last.len_bytes() == p.offset_bytes
            {
                g.push(p);
                continue;
            }
        }
        groups.push(vec![p]);
    }
    groups
        .into_iter()
        .map(|g| {
            let member = g[0].member;
            let offset_bytes = g[0].offset_bytes;
            let op = match &g[0].kind {
                WriteKind::Trim(_) => MemberOp::Trim {
                    offset_bytes,
                    len_bytes: g.iter().map(WritePiece::len_bytes).sum(),
                },
                WriteKind::Data(first) if g.len() == 1 => MemberOp::Write {
                    offset_bytes,
                    data: first.clone(),
                },
                WriteKind::Data(_) => {
                    let total: u64 = g.iter().map(WritePiece::len_bytes).sum();
                    let mut buf = BytesMut::with_capacity(total as usize);
                    for p in &g {
                        if let WriteKind::Data(b) = &p.kind {
                            buf.extend_from_slice(b);
                        }
                    }
                    MemberOp::Write {
                        offset_bytes,
                        data: buf.freeze(),
                    }
                }
            };
            (member, op)
        })
        .collect()
}
