//! A plex as a member: a pool volume of several plexes (vinum's mirror of
//! plexes that need not be alike) is an md-exact RAID-1 whose members are
//! its plexes, each an md-exact array over its own subdisks served by an
//! engine of its own. `PlexMember` is that engine seen as one member of
//! the mirror: the mirror's reads, writes and flushes become requests to
//! the plex's engine, whose own failures (a concat plex whose subdisk is
//! gone) come back as the member's errors, so the mirror fails the plex
//! and serves from the others.
//!
//! Contract, as every `Member`'s: a write that returned is durable after
//! the next flush returns (the plex's flush reaches each of its
//! subdisks); a read returns what the last write there wrote; trim makes
//! the range read zeros (a write of zeros in the plex, which releases
//! whole chunks where it can).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use platter_core::volume::{ErrorKind, Reply, Request, VolumeError};
use platter_io::error::{MemberError, MemberErrorKind, Op};
use platter_io::Member;

use crate::engine::Engine;

/// How long a request the plex's engine refused as busy waits before it
/// is asked again (the mirror's member queue bounds how many wait).
const BUSY_RETRY: Duration = Duration::from_millis(1);

pub struct PlexMember {
    engine: Arc<Engine>,
    name: String,
    /// The plex's size as last seen: a request past it asks the engine
    /// again (the plex grows, before its mirror, when the volume is
    /// extended).
    size_bytes: AtomicU64,
    /// The bytes of the plex this member shows, when fewer than its
    /// engine's (a volume whose array holds more than the volume's size:
    /// a convert by copy copies the volume, not the array).
    limit_bytes: u64,
}

impl PlexMember {
    /// Plex `name` served by `engine`.
    pub fn new(engine: Arc<Engine>, name: impl Into<String>) -> PlexMember {
        let size_bytes = AtomicU64::new(engine.size_bytes());
        PlexMember {
            engine,
            name: name.into(),
            size_bytes,
            limit_bytes: u64::MAX,
        }
    }

    /// [`PlexMember::new`] showing the first `limit_bytes` of the plex
    /// only.
    pub fn bounded(engine: Arc<Engine>, name: impl Into<String>, limit_bytes: u64) -> PlexMember {
        PlexMember {
            limit_bytes,
            ..PlexMember::new(engine, name)
        }
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    fn run(
        &self,
        op: Op,
        offset: u64,
        len: u64,
        make: impl Fn() -> Request,
    ) -> Result<Reply, MemberError> {
        loop {
            match self.engine.run(make()) {
                Err(e) if e.kind == ErrorKind::Busy => std::thread::sleep(BUSY_RETRY),
                Err(e) => return Err(self.error(op, offset, len, &e)),
                Ok(r) => return Ok(r),
            }
        }
    }

    fn error(&self, op: Op, offset: u64, len: u64, e: &VolumeError) -> MemberError {
        let kind = match e.kind {
            ErrorKind::NoSpace => MemberErrorKind::NoSpace,
            ErrorKind::OutOfRange => MemberErrorKind::OutOfRange,
            ErrorKind::Io | ErrorKind::Busy => MemberErrorKind::Io,
        };
        MemberError::with_message(kind, self.name.clone(), op, offset, len, e.message.clone())
    }

    fn check_range(&self, op: Op, offset: u64, len: u64) -> Result<(), MemberError> {
        if offset.checked_add(len).is_none_or(|end| {
            end > self.size_bytes.load(Ordering::Relaxed) && end > self.size_bytes()
        }) {
            return Err(MemberError::new(
                MemberErrorKind::OutOfRange,
                self.name.clone(),
                op,
                offset,
                len,
            ));
        }
        Ok(())
    }
}

impl Member for PlexMember {
    fn describe(&self) -> &str {
        &self.name
    }

    fn size_bytes(&self) -> u64 {
        let now = self.engine.size_bytes().min(self.limit_bytes);
        self.size_bytes.store(now, Ordering::Relaxed);
        now
    }

    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), MemberError> {
        let len = buf.len() as u64;
        self.check_range(Op::Read, offset_bytes, len)?;
        if len == 0 {
            return Ok(());
        }
        let reply = self.run(Op::Read, offset_bytes, len, || Request::Read {
            offset_bytes,
            len_bytes: len,
        })?;
        let Reply::Data(data) = reply else {
            return Err(MemberError::with_message(
                MemberErrorKind::Io,
                self.name.clone(),
                Op::Read,
                offset_bytes,
                len,
                "the plex answered a read without data".to_string(),
            ));
        };
        let mut at = 0;
        for s in data.segments() {
            buf[at..at + s.len()].copy_from_slice(s);
            at += s.len();
        }
        assert_eq!(at as u64, len, "a plex's read covers the request");
        Ok(())
    }

    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> Result<(), MemberError> {
        let len = data.len() as u64;
        self.check_range(Op::Write, offset_bytes, len)?;
        if len == 0 {
            return Ok(());
        }
        let data = Bytes::copy_from_slice(data);
        self.run(Op::Write, offset_bytes, len, || Request::Write {
            offset_bytes,
            data: data.clone(),
            fua: false,
        })?;
        Ok(())
    }

    fn flush(&self) -> Result<(), MemberError> {
        self.run(Op::Flush, 0, 0, || Request::Flush)?;
        Ok(())
    }

    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), MemberError> {
        self.check_range(Op::Trim, offset_bytes, len_bytes)?;
        if len_bytes == 0 {
            return Ok(());
        }
        self.run(Op::Trim, offset_bytes, len_bytes, || Request::WriteZeroes {
            offset_bytes,
            len_bytes,
            fua: false,
        })?;
        Ok(())
    }
}
