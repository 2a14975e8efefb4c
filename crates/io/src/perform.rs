//! From the engine's member I/O to a [`Member`] and back: the one place a
//! [`MemberOp`] becomes a call on a member, and a member's error becomes
//! the engine's kind. The server's queues and the test kit's synchronous
//! executor both perform through it.

use platter_core::volume::{IoError, IoErrorKind, IoResult, MemberOp};

use crate::error::MemberErrorKind;
use crate::member::Member;

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
