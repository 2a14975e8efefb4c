//! Modelled hard disks for the simulator: zoned layout ([`layout`]), seek
//! curves ([`seek`]), and the drive ([`drive`]: mechanism, bus, cache,
//! on-board queue). [`DiskModel`] puts one drive behind each member and a
//! host model in front (largest transfer, queue depth) as a
//! [`ServiceModel`].

pub mod drive;
pub mod layout;
pub mod parametric;
pub mod seek;

use crate::members::ServiceModel;
use crate::rng::Rng;
use drive::{Command, Drive, DriveSpec, Kind};
use platter_core::volume::MemberOp;
use std::collections::{BTreeMap, VecDeque};

pub const SECTOR_BYTES: u64 = 512;

/// What the host does in front of each disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostModel {
    /// Largest command (MAXPHYS); longer member I/O is split.
    pub max_transfer_bytes: u64,
    /// Commands outstanding at one disk (tagged queue depth); 1 serves
    /// them one at a time in arrival order at the host.
    pub queue_depth: u32,
}

impl Default for HostModel {
    fn default() -> Self {
        HostModel {
            max_transfer_bytes: 128 * 1024,
            queue_depth: 1,
        }
    }
}

struct PendingOp {
    member: u32,
    /// Commands not yet completed.
    left: u32,
}

struct Member {
    drive: Drive,
    /// Commands waiting at the host for a queue slot.
    host_queue: VecDeque<Command>,
}

/// Disks behind the members, in virtual time (ns outside, ms inside).
pub struct DiskModel {
    members: Vec<Member>,
    host: HostModel,
    ops: BTreeMap<u64, PendingOp>,
    /// Command token -> op token.
    commands: BTreeMap<u64, u64>,
    next_command: u64,
    done: Vec<u64>,
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// A drive time to virtual ns, rounded up (and never before `floor`).
fn ns(ms: f64, floor: u64) -> u64 {
    ((ms * 1e6).ceil() as u64).max(floor)
}

impl DiskModel {
    /// `members` copies of one drive.
    pub fn new(spec: &DriveSpec, members: u32, host: HostModel) -> DiskModel {
        assert!(host.queue_depth > 0, "a queue depth of at least 1");
        assert!(
            host.max_transfer_bytes >= SECTOR_BYTES,
            "MAXPHYS below a sector"
        );
        DiskModel {
            members: (0..members)
                .map(|_| Member {
                    drive: Drive::new(spec.clone()),
                    host_queue: VecDeque::new(),
                })
                .collect(),
            host,
            ops: BTreeMap::new(),
            commands: BTreeMap::new(),
            next_command: 0,
            done: Vec::new(),
        }
    }

    pub fn drive(&self, member: u32) -> &Drive {
        &self.members[member as usize].drive
    }

    fn dispatch(&mut self, member: u32, now: f64) {
        let depth = self.host.queue_depth as usize;
        let m = &mut self.members[member as usize];
        while m.drive.outstanding() < depth {
            let Some(cmd) = m.host_queue.pop_front() else {
                break;
            };
            m.drive.submit(now, cmd);
        }
    }
}

impl ServiceModel for DiskModel {
    fn submit(&mut self, now_ns: u64, member: u32, token: u64, op: &MemberOp, _rng: &mut Rng) {
        let (kind, off, len) = match op {
            MemberOp::Read {
                offset_bytes,
                len_bytes,
            } => (Kind::Read, *offset_bytes, *len_bytes),
            MemberOp::Write { offset_bytes, data } => {
                (Kind::Write, *offset_bytes, data.len() as u64)
            }
            // A trim costs what a tiny write costs on a disk that has no
            // trim: the command and nothing more is modelled as a flush.
            MemberOp::Trim { .. } | MemberOp::Flush => (Kind::Flush, 0, 0),
        };
        let m = &mut self.members[member as usize];
        let blocks = m.drive.blocks();
        let mut cmds = Vec::new();
        if kind == Kind::Flush || len == 0 {
            cmds.push((Kind::Flush, 0, 0));
        } else {
            let first = off / SECTOR_BYTES;
            let last = (off + len - 1) / SECTOR_BYTES;
            let per = (self.host.max_transfer_bytes / SECTOR_BYTES).max(1);
            let mut lbn = first;
            while lbn <= last {
                let count = (last + 1 - lbn).min(per);
                // Members larger than the modelled disk wrap around it.
                let count = count.min(blocks);
                let at = lbn % (blocks - count + 1);
                cmds.push((kind, at, count as u32));
                lbn += count;
            }
        }
        let prev = self.ops.insert(
            token,
            PendingOp {
                member,
                left: cmds.len() as u32,
            },
        );
        assert!(prev.is_none(), "token {token} reused");
        for (kind, lbn, count) in cmds {
            let t = self.next_command;
            self.next_command += 1;
            self.commands.insert(t, token);
            self.members[member as usize].host_queue.push_back(Command {
                token: t,
                kind,
                lbn,
                count,
            });
        }
        self.dispatch(member, ms(now_ns));
    }

    fn next_event_ns(&self) -> Option<u64> {
        self.members
            .iter()
            .filter_map(|m| m.drive.next_event_ms())
            .map(|t| ns(t, 0))
            .min()
    }

    fn advance(&mut self, now_ns: u64, _rng: &mut Rng) -> Vec<u64> {
        // A hair past `now_ns`: the ns of an event is rounded up from the
        // drive's ms, so the drive must see its command as due.
        let now = ms(now_ns) + 1e-9;
        for member in 0..self.members.len() as u32 {
            loop {
                let served = self.members[member as usize].drive.advance(now);
                let Some(last) = served.last().map(|s| s.done_ms) else {
                    break;
                };
                for s in served {
                    let op = self.commands.remove(&s.token).expect("known command");
                    let p = self.ops.get_mut(&op).expect("known op");
                    p.left -= 1;
                    if p.left == 0 {
                        assert_eq!(p.member, member);
                        self.ops.remove(&op);
                        self.done.push(op);
                    }
                }
                self.dispatch(member, last);
            }
        }
        std::mem::take(&mut self.done)
    }

    fn power_fail(&mut self, now_ns: u64) {
        for m in &mut self.members {
            m.drive.power_fail(ms(now_ns));
            m.host_queue.clear();
        }
        self.ops.clear();
        self.commands.clear();
        self.done.clear();
    }
}
