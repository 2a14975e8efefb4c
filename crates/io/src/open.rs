//! Turning a member as named on the command line into a [`Member`].

use std::io;
use std::time::Duration;

use crate::error::{MemberError, MemberErrorKind, Op};
use crate::file::FileMember;
use crate::member::Member;
use crate::nbd::NbdMember;

/// How to open a member.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// Create a missing regular file of this size (sparse). An existing file
    /// keeps its size whatever this says: growing or shrinking a member is the
    /// caller's decision, not a side effect of opening it.
    pub create_size_bytes: Option<u64>,
    /// Bypass the page cache (`O_DIRECT`). Any alignment still works; see
    /// [`FileMember`] for the cost of unaligned writes.
    pub direct: bool,
    /// `O_DIRECT` for block devices even without `direct` (what `serve`
    /// does by default): the volume caches nothing a device's page cache
    /// would add to, and a flush then has only the device's own cache to
    /// empty. Regular files still follow `direct`.
    pub direct_block_devices: bool,
    /// Open for reading only; writes and trims fail with
    /// [`MemberErrorKind::PermissionDenied`].
    pub read_only: bool,
    /// With `read_only`: claim the member as a read-only server does, so
    /// that the open fails while a writer (a read-write server) holds it,
    /// and a writer cannot open it while this is held. A shared `flock` on
    /// files (read-only servers may share them), `O_EXCL` on block devices
    /// (the kernel's claim has no shared form). Without it a read-only open
    /// claims nothing (`platter status` reads a served volume's labels).
    pub claim: bool,
    /// For a remote member: how long a request may go unanswered before
    /// the connection counts as lost ([`MemberErrorKind::Gone`]); `None`
    /// is [`crate::nbd::REPLY_DEADLINE`]. Local members ignore it.
    pub request_timeout: Option<Duration>,
    /// For a remote member whose server offers multi-conn: connections to
    /// open (0: [`crate::nbd::default_connections`] for its transport);
    /// one where it does not.
    pub connections: u32,
}

/// Opens the member named by `spec`: a path to a regular file or a block
/// device, or a URI.
///
/// A spec is a URI when it starts with a scheme followed by `://`
/// (`nbd://host/export`, `nbd+unix:///export?socket=/run/x.sock`); write
/// `./odd://name` for a file whose name looks like one.
pub fn open_member(spec: &str, opts: OpenOptions) -> Result<Box<dyn Member>, MemberError> {
    let scheme = uri_scheme(spec).map(str::to_ascii_lowercase);
    match scheme.as_deref() {
        None => Ok(Box::new(FileMember::open(spec, opts)?)),
        Some("nbd" | "nbd+unix" | "nbds" | "nbds+unix") => {
            let uri = platter_nbd::parse_nbd_uri(spec).map_err(|e| {
                MemberError::with_message(MemberErrorKind::NotAMember, spec, Op::Open, 0, 0, e.why)
            })?;
            Ok(Box::new(NbdMember::open(
                spec,
                &uri,
                opts.read_only,
                opts.request_timeout.unwrap_or(crate::nbd::REPLY_DEADLINE),
                opts.connections,
            )?))
        }
        Some(other) => Err(unsupported(
            spec,
            format!(
                "unknown URI scheme {other:?}; a member is a file, a block device, \
                 or an nbd:// or nbd+unix:// URI"
            ),
        )),
    }
}

fn unsupported(spec: &str, message: String) -> MemberError {
    MemberError::new(MemberErrorKind::NotAMember, spec, Op::Open, 0, 0)
        .with_source(io::Error::new(io::ErrorKind::Unsupported, message))
}

/// The scheme of `spec` if it is a URI (RFC 3986: a letter, then letters,
/// digits, `+`, `-` or `.`).
fn uri_scheme(spec: &str) -> Option<&str> {
    let (scheme, _) = spec.split_once("://")?;
    let mut chars = scheme.chars();
    let starts_with_letter = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (starts_with_letter && rest_ok).then_some(scheme)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_are_recognised() {
        assert_eq!(uri_scheme("nbd://host:10809/export"), Some("nbd"));
        assert_eq!(uri_scheme("nbd+unix:///e?socket=/s"), Some("nbd+unix"));
        assert_eq!(uri_scheme("/dev/sdb"), None);
        assert_eq!(uri_scheme("member.img"), None);
        assert_eq!(uri_scheme("./odd://name"), None);
        assert_eq!(uri_scheme("/a/b://c"), None);
    }

    /// A malformed NBD URI is refused with what is wrong with it, before
    /// any connection is tried.
    #[test]
    fn a_malformed_nbd_uri_is_refused_clearly() {
        for (spec, why) in [
            ("nbd+unix:///x", "socket"),
            ("nbd://localhost/x?socket=/s", "socket"),
            ("nbd://localhost:99999/x", "port"),
        ] {
            let err = open_member(spec, OpenOptions::default())
                .err()
                .expect("refused");
            assert_eq!(err.kind, MemberErrorKind::NotAMember, "{spec}: {err}");
            assert_eq!(err.member, spec);
            assert!(err.to_string().contains(why), "{spec}: {err}");
        }
    }

    /// Nothing listening: the member is gone, said plainly.
    #[test]
    fn an_nbd_server_that_is_not_there_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let spec = format!("nbd+unix:///x?socket={}/none.sock", dir.path().display());
        let err = open_member(&spec, OpenOptions::default())
            .err()
            .expect("refused");
        assert_eq!(err.kind, MemberErrorKind::Gone, "{err}");
        assert!(err.to_string().contains("cannot connect"), "{err}");
    }

    #[test]
    fn unknown_scheme_is_refused() {
        let err = open_member("iscsi://x/y", OpenOptions::default())
            .err()
            .expect("refused");
        assert_eq!(err.kind, MemberErrorKind::NotAMember);
        assert!(
            err.to_string().contains("unknown URI scheme \"iscsi\""),
            "{err}"
        );
    }
}
