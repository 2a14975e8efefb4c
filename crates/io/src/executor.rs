//! A synchronous executor: drives a [`Volume`] with real member I/O on the
//! calling thread. Management commands and tests use it; the NBD server uses
//! a concurrent one built on the same engine.

use std::sync::Arc;

use bytes::Bytes;
use platter_core::volume::{
    Completion, Event, IoError, IoErrorKind, IoResult, MemberIo, MemberOp, Reply, Request, Volume,
    VolumeError,
};

use crate::error::MemberErrorKind;
use crate::member::Member;

pub struct SyncExecutor {
    volume: Volume,
    /// By slot; `None` for a member that is not present.
    members: Vec<Option<Arc<dyn Member>>>,
    events: Vec<Event>,
}

impl SyncExecutor {
    pub fn new(volume: Volume, members: Vec<Option<Arc<dyn Member>>>) -> SyncExecutor {
        assert_eq!(members.len(), volume.geometry().members() as usize);
        SyncExecutor {
            volume,
            members,
            events: Vec::new(),
        }
    }

    pub fn volume(&self) -> &Volume {
        &self.volume
    }

    /// Events (members marked faulty) seen so far, oldest first.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// Runs one request to completion.
    pub fn run(&mut self, req: Request) -> Result<Reply, VolumeError> {
        let id = self.volume.submit(req);
        let mut mine = None;
        // Every I/O the engine emits for one request is bounded by its plan;
        // the loop ends when the engine has nothing left to ask.
        loop {
            while let Some(Completion { id: done, result }) = self.volume.next_completion() {
                assert_eq!(done, id, "only one request is in flight");
                mine = Some(result);
            }
            while let Some(e) = self.volume.next_event() {
                // This executor keeps no labels: a failure is as recorded
                // as it will ever be once its event is seen.
                if let Event::MemberFaulty { member, .. } = &e {
                    self.volume.failure_recorded(*member);
                }
                self.events.push(e);
            }
            let Some(io) = self.volume.next_io() else {
                break;
            };
            let result = self.perform(&io);
            self.volume.io_done(io.id, result);
        }
        mine.expect("the engine completes every request it accepts")
    }

    pub fn read(&mut self, offset_bytes: u64, len_bytes: u64) -> Result<Bytes, VolumeError> {
        match self.run(Request::Read {
            offset_bytes,
            len_bytes,
        })? {
            Reply::Data(d) => Ok(d.to_bytes()),
            Reply::Done | Reply::Checked(_) => unreachable!("reads complete with data"),
        }
    }

    pub fn write(&mut self, offset_bytes: u64, data: Bytes) -> Result<(), VolumeError> {
        self.run(Request::Write {
            offset_bytes,
            data,
            fua: false,
        })
        .map(|_| ())
    }

    pub fn flush(&mut self) -> Result<(), VolumeError> {
        self.run(Request::Flush).map(|_| ())
    }

    fn perform(&self, io: &MemberIo) -> IoResult {
        let member = self.members[io.member as usize]
            .as_ref()
            .expect("the engine never addresses a member that is not present");
        perform(member.as_ref(), &io.op)
    }
}

/// Performs one member I/O as the engine asked: the one place that turns a
/// [`MemberOp`] into a call on a [`Member`].
pub fn perform(member: &dyn Member, op: &MemberOp) -> IoResult {
    let r = match op {
        MemberOp::Read {
            offset_bytes,
            len_bytes,
        } => crate::buffers::read_into_uninit(*len_bytes as usize, |buf| {
            member.read_uninit_at(*offset_bytes, buf)
        })
        .map(Some),
        MemberOp::Write { offset_bytes, data } => match data.parts() {
            [one] => member.write_at(*offset_bytes, one),
            parts => {
                let parts: Vec<&[u8]> = parts.iter().map(|b| &b[..]).collect();
                member.write_parts_at(*offset_bytes, &parts)
            }
        }
        .map(|()| None),
        MemberOp::Trim {
            offset_bytes,
            len_bytes,
        } => member.trim(*offset_bytes, *len_bytes).map(|()| None),
        MemberOp::Flush => member.flush().map(|()| None),
    };
    r.map_err(io_error)
}

/// A member's error as the engine sees it: a full disk is not a dead one,
/// and a bad sector is not a device that went away (the engine's policy
/// per kind: [`IoErrorKind::policy`]).
pub fn io_error(e: crate::error::MemberError) -> IoError {
    IoError::new(io_error_kind(e.kind), e.to_string())
}

pub fn io_error_kind(kind: MemberErrorKind) -> IoErrorKind {
    match kind {
        MemberErrorKind::NoSpace => IoErrorKind::NoSpace,
        MemberErrorKind::Gone | MemberErrorKind::Unlinked | MemberErrorKind::NotFound => {
            IoErrorKind::Gone
        }
        MemberErrorKind::Shrunk => IoErrorKind::Shrunk,
        MemberErrorKind::PermissionDenied => IoErrorKind::ReadOnly,
        MemberErrorKind::OutOfRange => IoErrorKind::OutOfRange,
        MemberErrorKind::Io | MemberErrorKind::NotAMember => IoErrorKind::Media,
    }
}

#[cfg(test)]
mod kind_tests {
    use super::*;
    use platter_core::volume::FailurePolicy;

    /// From the OS's errno to what the engine does: the table in
    /// docs/failures.md, "What each member error does".
    #[test]
    fn errnos_reach_the_engine_as_their_kind() {
        let cases = [
            (libc::EIO, IoErrorKind::Media, FailurePolicy::CorrectRead),
            (
                libc::ENOSPC,
                IoErrorKind::NoSpace,
                FailurePolicy::FailRequest,
            ),
            (
                libc::EDQUOT,
                IoErrorKind::NoSpace,
                FailurePolicy::FailRequest,
            ),
            (libc::ENXIO, IoErrorKind::Gone, FailurePolicy::FailMember),
            (libc::ENODEV, IoErrorKind::Gone, FailurePolicy::FailMember),
            (
                libc::EROFS,
                IoErrorKind::ReadOnly,
                FailurePolicy::FailMember,
            ),
            (
                libc::EACCES,
                IoErrorKind::ReadOnly,
                FailurePolicy::FailMember,
            ),
        ];
        for (errno, kind, policy) in cases {
            let member_kind = MemberErrorKind::from_io(&std::io::Error::from_raw_os_error(errno));
            assert_eq!(io_error_kind(member_kind), kind, "errno {errno}");
            assert_eq!(kind.policy(), policy, "errno {errno}");
        }
        for (member_kind, kind) in [
            (MemberErrorKind::Shrunk, IoErrorKind::Shrunk),
            (MemberErrorKind::Unlinked, IoErrorKind::Gone),
            (MemberErrorKind::OutOfRange, IoErrorKind::OutOfRange),
        ] {
            assert_eq!(io_error_kind(member_kind), kind);
            assert_eq!(kind.policy(), FailurePolicy::FailMember);
        }
    }
}
