//! The one error type every member returns: a small, stable kind that the
//! volume acts on (mark the member faulty, refuse the request, ...) plus the
//! context a person needs (which member, which operation, where).

use std::fmt;
use std::io;

/// The operation that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Open,
    Read,
    Write,
    Flush,
    Trim,
    /// Finding out how big the member is (metadata, `BLKGETSIZE64`, ...).
    Size,
}

impl Op {
    /// Whether `offset_bytes` and `len_bytes` mean something for this operation.
    fn has_range(self) -> bool {
        matches!(self, Op::Read | Op::Write | Op::Trim)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Open => "open",
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Trim => "trim",
            Op::Size => "size query",
        })
    }
}

/// What went wrong, in the few classes a caller acts on differently.
///
/// Stable: callers match on it, and later back ends (NBD, fault injection)
/// map their failures onto the same classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemberErrorKind {
    /// Any other I/O failure, including a short read.
    Io,
    /// The request reaches past the end of the member. Detected before the
    /// device is touched, so nothing has changed.
    OutOfRange,
    /// The device or file system is full (`ENOSPC`, `EDQUOT`): a sparse file
    /// member could not allocate.
    NoSpace,
    NotFound,
    /// Includes writes to a member opened read-only and read-only file systems.
    PermissionDenied,
    /// The path is neither a regular file nor a block device, or the member
    /// type is not supported.
    NotAMember,
    /// The device disappeared (`ENXIO`, `ENODEV`): unplugged, detached loop
    /// device, closed NBD connection.
    Gone,
    /// The member is smaller than when it was opened: a file truncated (or a
    /// device shrunk) behind the server's back. Its bytes past the new end
    /// are gone, and a file re-extended by a later write reads zeros there,
    /// so the member must never be read as data again.
    Shrunk,
    /// The member's file was deleted while in use: writes still land in the
    /// open inode, which vanishes when the server closes it, taking every
    /// byte with it.
    Unlinked,
}

impl MemberErrorKind {
    /// Classifies an OS error. The errno decides where there is one; errors
    /// built without an errno fall back to their [`io::ErrorKind`].
    pub fn from_io(err: &io::Error) -> MemberErrorKind {
        if let Some(errno) = err.raw_os_error() {
            return match errno {
                libc::ENOSPC | libc::EDQUOT => MemberErrorKind::NoSpace,
                libc::ENOENT => MemberErrorKind::NotFound,
                libc::EACCES | libc::EPERM | libc::EROFS => MemberErrorKind::PermissionDenied,
                libc::ENXIO | libc::ENODEV => MemberErrorKind::Gone,
                libc::EISDIR | libc::ENOTBLK => MemberErrorKind::NotAMember,
                _ => MemberErrorKind::Io,
            };
        }
        match err.kind() {
            io::ErrorKind::NotFound => MemberErrorKind::NotFound,
            io::ErrorKind::PermissionDenied => MemberErrorKind::PermissionDenied,
            _ => MemberErrorKind::Io,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            MemberErrorKind::Io => "I/O error",
            MemberErrorKind::OutOfRange => "past the end of the member",
            MemberErrorKind::NoSpace => "no space left",
            MemberErrorKind::NotFound => "not found",
            MemberErrorKind::PermissionDenied => "permission denied",
            MemberErrorKind::NotAMember => "not a regular file or block device",
            MemberErrorKind::Gone => "the device has gone away",
            MemberErrorKind::Shrunk => "the member shrank",
            MemberErrorKind::Unlinked => "the member's file was deleted while in use",
        }
    }
}

impl fmt::Display for MemberErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// A failed member operation.
///
/// Displays as one line, for example
/// `member /tmp/a.img: write of 4096 bytes at offset 1048576: No space left on device (os error 28)`.
/// The line already contains the source's text, so print it with `{}` and
/// do not also walk [`std::error::Error::source`] (it would repeat).
#[derive(Debug, thiserror::Error)]
#[error("member {member}{}", self.detail())]
pub struct MemberError {
    pub kind: MemberErrorKind,
    /// [`crate::Member::describe`] of the member: its path or URI.
    pub member: String,
    pub op: Op,
    /// Meaningful for reads, writes and trims; 0 otherwise.
    pub offset_bytes: u64,
    /// Meaningful for reads, writes and trims; 0 otherwise.
    pub len_bytes: u64,
    /// The OS error, or a message explaining an error found by platter itself.
    pub source: Option<io::Error>,
}

impl MemberError {
    /// An error of `kind` with no further explanation than the kind.
    pub fn new(
        kind: MemberErrorKind,
        member: impl Into<String>,
        op: Op,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> MemberError {
        MemberError {
            kind,
            member: member.into(),
            op,
            offset_bytes,
            len_bytes,
            source: None,
        }
    }

    /// An error classified from the OS error `err`.
    pub fn from_io(
        err: io::Error,
        member: impl Into<String>,
        op: Op,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> MemberError {
        MemberError {
            kind: MemberErrorKind::from_io(&err),
            source: Some(err),
            ..MemberError::new(MemberErrorKind::Io, member, op, offset_bytes, len_bytes)
        }
    }

    /// An error of `kind` found by platter itself, explained by `message`.
    pub fn with_message(
        kind: MemberErrorKind,
        member: impl Into<String>,
        op: Op,
        offset_bytes: u64,
        len_bytes: u64,
        message: impl Into<String>,
    ) -> MemberError {
        MemberError {
            source: Some(io::Error::other(message.into())),
            ..MemberError::new(kind, member, op, offset_bytes, len_bytes)
        }
    }

    /// Replaces the source, keeping the kind.
    pub fn with_source(mut self, source: io::Error) -> MemberError {
        self.source = Some(source);
        self
    }

    /// A shrunk member leads with what happened to it ("member PATH shrank
    /// from X to Y bytes"), then the operation that found out.
    fn detail(&self) -> String {
        match self.kind {
            MemberErrorKind::Shrunk => format!(" {} (found by a {})", self.reason(), self.what()),
            _ => format!(": {}: {}", self.what(), self.reason()),
        }
    }

    fn what(&self) -> String {
        if self.op.has_range() {
            format!(
                "{} of {} bytes at offset {}",
                self.op, self.len_bytes, self.offset_bytes
            )
        } else {
            self.op.to_string()
        }
    }

    fn reason(&self) -> String {
        match &self.source {
            Some(err) => err.to_string(),
            None => self.kind.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_io_maps_errnos() {
        let cases = [
            (libc::ENOSPC, MemberErrorKind::NoSpace),
            (libc::EDQUOT, MemberErrorKind::NoSpace),
            (libc::ENOENT, MemberErrorKind::NotFound),
            (libc::EACCES, MemberErrorKind::PermissionDenied),
            (libc::EPERM, MemberErrorKind::PermissionDenied),
            (libc::EROFS, MemberErrorKind::PermissionDenied),
            (libc::ENXIO, MemberErrorKind::Gone),
            (libc::ENODEV, MemberErrorKind::Gone),
            (libc::EISDIR, MemberErrorKind::NotAMember),
            (libc::EIO, MemberErrorKind::Io),
            (libc::EINVAL, MemberErrorKind::Io),
        ];
        for (errno, kind) in cases {
            let err = io::Error::from_raw_os_error(errno);
            assert_eq!(MemberErrorKind::from_io(&err), kind, "errno {errno}: {err}");
        }
    }

    #[test]
    fn from_io_without_errno_uses_error_kind() {
        let missing = io::Error::new(io::ErrorKind::NotFound, "gone");
        assert_eq!(
            MemberErrorKind::from_io(&missing),
            MemberErrorKind::NotFound
        );
        let eof = io::Error::from(io::ErrorKind::UnexpectedEof);
        assert_eq!(MemberErrorKind::from_io(&eof), MemberErrorKind::Io);
    }

    #[test]
    fn display_names_member_op_range_and_cause() {
        let err = MemberError::from_io(
            io::Error::from_raw_os_error(libc::ENOSPC),
            "/tmp/a.img",
            Op::Write,
            1_048_576,
            4096,
        );
        assert_eq!(err.kind, MemberErrorKind::NoSpace);
        assert_eq!(
            err.to_string(),
            "member /tmp/a.img: write of 4096 bytes at offset 1048576: \
             No space left on device (os error 28)"
        );
    }

    #[test]
    fn display_without_range_or_source() {
        let err = MemberError::new(MemberErrorKind::Gone, "/dev/loop9", Op::Flush, 0, 0);
        assert_eq!(
            err.to_string(),
            "member /dev/loop9: flush: the device has gone away"
        );
        let err = MemberError::with_message(
            MemberErrorKind::NotFound,
            "/x",
            Op::Open,
            0,
            0,
            "no such file",
        );
        assert_eq!(err.to_string(), "member /x: open: no such file");
    }
}
