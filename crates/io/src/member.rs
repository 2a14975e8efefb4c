//! The [`Member`] trait: what the executor needs from a device.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::sync::Arc;

use crate::error::{MemberError, MemberErrorKind, Op};

/// A device that holds part of a volume: a regular file, a block device, an
/// NBD export, memory.
///
/// # Contract
///
/// Every implementation keeps these promises; the volume's correctness rests
/// on them, and wrappers (fault injection, statistics) must pass them through.
///
/// - **Positioned I/O.** Every call names its byte offset; there is no file
///   position, so calls do not interfere with each other.
/// - **Thread-safe.** All methods take `&self` and may be called from several
///   threads at once. Concurrent writes to *disjoint* byte ranges never affect
///   each other, even when they share a sector. Concurrent requests that
///   overlap have no defined outcome beyond this: a read of bytes being
///   written may see old bytes, new bytes or a mix, and overlapping writes may
///   interleave. The volume never issues overlapping requests at once.
/// - **Units.** Offsets and lengths are bytes. Any alignment works unless the
///   member says otherwise in its own documentation;
///   [`logical_block_bytes`](Member::logical_block_bytes) is the granularity
///   that is handled without read-modify-write.
/// - **Bounds.** A request that reaches past [`size_bytes`](Member::size_bytes)
///   fails with [`MemberErrorKind::OutOfRange`] before the device is touched,
///   so it changes nothing. A zero-length request at any offset up to the end
///   succeeds and does nothing.
/// - **Unwritten reads zero.** A range never written (or trimmed) reads as
///   zeros.
/// - **Durability.** [`write_at`](Member::write_at) returns once the bytes are
///   in the member's cache: later reads see them, but a crash may lose them.
///   They are durable once a later [`flush`](Member::flush) returns.
/// - **Trim.** After [`trim`](Member::trim) returns, the range reads as zeros
///   (it is "write zeroes", not an advisory discard). Whether space is freed
///   depends on the member.
/// - **Errors.** A failed read leaves `buf` unspecified. A failed write or
///   trim leaves the range unspecified (some of it may be written). Members
///   never retry an I/O error; the volume decides.
pub trait Member: Send + Sync {
    /// The path or URI of the member, for messages.
    fn describe(&self) -> &str;

    /// The usable size. Fixed for the life of the handle.
    fn size_bytes(&self) -> u64;

    /// The smallest I/O granularity handled without read-modify-write.
    fn logical_block_bytes(&self) -> u32 {
        512
    }

    /// Whether the member is a spinning disk; `None` when unknown. Read
    /// balancing uses it to choose between proximity and load.
    fn rotational(&self) -> Option<bool> {
        None
    }

    /// What makes two handles the same device whatever they are called
    /// (`a` and `./a`, `/dev/sda` and its by-id link); `None` when unknown.
    fn identity(&self) -> Option<(u64, u64)> {
        None
    }

    /// Fills `buf` with the bytes at `offset_bytes`.
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), MemberError>;

    /// [`read_at`](Member::read_at) into memory not yet initialised (a
    /// fresh read buffer: zeroing it first would be a wasted pass). On
    /// success every byte of `buf` is written and returned as the result,
    /// which must be `buf` itself. By default `buf` is zeroed and read
    /// with `read_at`; a member that can read into it directly does.
    fn read_uninit_at<'a>(
        &self,
        offset_bytes: u64,
        buf: &'a mut [MaybeUninit<u8>],
    ) -> Result<&'a mut [u8], MemberError> {
        read_zeroed_at(self, offset_bytes, buf)
    }

    /// Writes `data` at `offset_bytes`; see the durability rule above.
    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> Result<(), MemberError>;

    /// Writes `parts` back to back from `offset_bytes`, as one write (the
    /// same rules as [`write_at`](Member::write_at)). By default they are
    /// gathered into one buffer; a member that can write them where they
    /// lie (`pwritev`) does.
    fn write_parts_at(&self, offset_bytes: u64, parts: &[&[u8]]) -> Result<(), MemberError> {
        match parts {
            [one] => self.write_at(offset_bytes, one),
            _ => self.write_at(offset_bytes, &parts.concat()),
        }
    }

    /// Makes every write that returned before this call durable.
    fn flush(&self) -> Result<(), MemberError>;

    /// Makes the range read as zeros, freeing space where the member can.
    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), MemberError>;

    /// Fails with [`MemberErrorKind::Shrunk`] when the member is smaller
    /// now than [`size_bytes`](Member::size_bytes): its bytes past the new
    /// end are gone. Cheap (one system call); the server asks every member
    /// in use about once a second. Members that cannot shrink say Ok.
    fn check_size(&self) -> Result<(), MemberError> {
        Ok(())
    }

    /// Makes sure later writes to the range find room. The server reserves
    /// the write-intent bitmap area, which a client write waits on: a
    /// bitmap write refused for space fails the member, and on a full file
    /// system every member at once. A regular file allocates the range (a
    /// sparse copy, `cp --sparse=always`, leaves the zeroed bitmap a hole);
    /// members whose blocks are fixed say Ok.
    fn reserve(&self, _offset_bytes: u64, _len_bytes: u64) -> Result<(), MemberError> {
        Ok(())
    }

    /// The member's descriptor and checks, for an I/O layer that performs
    /// reads, writes and flushes on it itself (io_uring) instead of
    /// calling [`read_at`](Member::read_at) and the rest. `None` (the
    /// default) for members that are not one descriptor, and for wrappers
    /// that must see every I/O (fault injection).
    fn ring_target(&self) -> Option<&dyn RingTarget> {
        None
    }

    /// A remote member whose connection broke (not one that answered with
    /// an error): its host may come back with its bytes as they were, and
    /// the server then tries to bring it back (`re-add`). False for local
    /// devices.
    fn connection_lost(&self) -> bool {
        false
    }

    /// Its user gave up on an I/O to it (`serve --member-timeout`): a
    /// remote member drops its connection, so that it counts as lost (and
    /// is tried again) rather than hung. Nothing for local devices: a
    /// blocking call cannot be taken back.
    fn abandon(&self, why: &str) {
        let _ = why;
    }

    /// The member is out of use (faulty) and is sent nothing more: a
    /// remote member closes its connections, so that its server (which
    /// may be waiting to exit) is not held by a client that has left in
    /// all but name. Whether it counts as lost
    /// ([`connection_lost`](Member::connection_lost)) does not change.
    /// Nothing for local devices: their descriptor, and the claim on it,
    /// stay until `platter remove`. Cheap once done: the server calls it
    /// for every faulty member about ten times a second.
    fn close_connections(&self) {}

    /// Starts `op` without waiting for it: `done` gets the outcome later,
    /// on a thread of the member's own. For members that keep requests in
    /// flight themselves (an NBD member's connection), so that no thread
    /// waits out each I/O. `Err(done)` hands `done` back uncalled when this
    /// member cannot start `op` so (most cannot: the default); the caller
    /// then performs it with the blocking calls. `done` must not be called
    /// from inside `start`.
    fn start(
        &self,
        op: &platter_core::volume::MemberOp,
        done: MemberDone,
    ) -> Result<(), MemberDone> {
        let _ = op;
        Err(done)
    }

    /// Whether [`Member::start`] may take I/Os at all (so that members
    /// which never do are not asked for each one).
    fn starts_requests(&self) -> bool {
        false
    }
}

/// The outcome of an I/O begun with [`Member::start`]: a read's bytes.
pub type MemberDone = Box<dyn FnOnce(Result<Option<bytes::Bytes>, MemberError>) + Send + 'static>;

/// What an I/O layer needs to perform a member's reads, writes and
/// flushes on its descriptor and still keep the [`Member`] contract: the
/// checks the member makes around its own calls, and its errors.
///
/// The layer calls [`check_before`](RingTarget::check_before) before the
/// kernel sees a read or write, [`check_after`](RingTarget::check_after)
/// once a write has fully succeeded, and [`error`](RingTarget::error) for
/// whatever the kernel answered instead (a short read at the end is
/// `UnexpectedEof`). Trims are never performed this way (they take several
/// calls and fallbacks); they go through [`Member::trim`].
pub trait RingTarget: Send + Sync {
    /// Stays open, and the same file, for the life of the member.
    fn fd(&self) -> RawFd;

    /// Where the member's byte 0 lies in the descriptor: 0, except for a
    /// window of a device (a pool's subdisk). The layer adds it to every
    /// offset it gives the kernel; every other call takes the member's own
    /// offsets.
    fn base_offset_bytes(&self) -> u64 {
        0
    }

    /// `Some(alignment)` when opened with `O_DIRECT`: offsets, lengths and
    /// memory must be multiples of it (memory: of at least 4096). I/Os that
    /// are not go through the member's own calls, which bounce them.
    fn direct_block_bytes(&self) -> Option<u64>;

    /// Bounds, read-only, and anything else refused before the device is
    /// touched; `op` is [`Op::Read`], [`Op::Write`] or [`Op::Flush`].
    fn check_before(&self, op: Op, offset_bytes: u64, len_bytes: u64) -> Result<(), MemberError>;

    /// After a write succeeded: the member may still call it failed (a
    /// file that shrank under it).
    fn check_after(&self, op: Op, offset_bytes: u64, len_bytes: u64) -> Result<(), MemberError>;

    /// The member's error for what the kernel answered.
    fn error(&self, err: io::Error, op: Op, offset_bytes: u64, len_bytes: u64) -> MemberError;
}

/// The bounds check of the contract, shared by every back end so they all
/// refuse the same requests with the same message.
pub fn check_range(
    member: &str,
    size_bytes: u64,
    op: Op,
    offset_bytes: u64,
    len_bytes: u64,
) -> Result<(), MemberError> {
    match offset_bytes.checked_add(len_bytes) {
        Some(end_bytes) if end_bytes <= size_bytes => Ok(()),
        _ => Err(MemberError::with_message(
            MemberErrorKind::OutOfRange,
            member,
            op,
            offset_bytes,
            len_bytes,
            format!("the range is past the end of the member ({size_bytes} bytes)"),
        )),
    }
}

/// Lets wrappers hold their inner member as `&M`, `Box<M>` or `Arc<M>` (and
/// `Box<dyn Member>`) without caring which.
macro_rules! forward_member {
    ($($ptr:ty),*) => {$(
        impl<M: Member + ?Sized> Member for $ptr {
            fn describe(&self) -> &str {
                (**self).describe()
            }
            fn size_bytes(&self) -> u64 {
                (**self).size_bytes()
            }
            fn logical_block_bytes(&self) -> u32 {
                (**self).logical_block_bytes()
            }
            fn rotational(&self) -> Option<bool> {
                (**self).rotational()
            }
            fn identity(&self) -> Option<(u64, u64)> {
                (**self).identity()
            }
            fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), MemberError> {
                (**self).read_at(offset_bytes, buf)
            }
            fn read_uninit_at<'a>(
                &self,
                offset_bytes: u64,
                buf: &'a mut [MaybeUninit<u8>],
            ) -> Result<&'a mut [u8], MemberError> {
                (**self).read_uninit_at(offset_bytes, buf)
            }
            fn write_at(&self, offset_bytes: u64, data: &[u8]) -> Result<(), MemberError> {
                (**self).write_at(offset_bytes, data)
            }
            fn write_parts_at(&self, offset_bytes: u64, parts: &[&[u8]]) -> Result<(), MemberError> {
                (**self).write_parts_at(offset_bytes, parts)
            }
            fn flush(&self) -> Result<(), MemberError> {
                (**self).flush()
            }
            fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), MemberError> {
                (**self).trim(offset_bytes, len_bytes)
            }
            fn check_size(&self) -> Result<(), MemberError> {
                (**self).check_size()
            }
            fn reserve(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), MemberError> {
                (**self).reserve(offset_bytes, len_bytes)
            }
            fn ring_target(&self) -> Option<&dyn RingTarget> {
                (**self).ring_target()
            }
            fn connection_lost(&self) -> bool {
                (**self).connection_lost()
            }
            fn abandon(&self, why: &str) {
                (**self).abandon(why)
            }
            fn close_connections(&self) {
                (**self).close_connections()
            }
            fn start(
                &self,
                op: &platter_core::volume::MemberOp,
                done: MemberDone,
            ) -> Result<(), MemberDone> {
                (**self).start(op, done)
            }
            fn starts_requests(&self) -> bool {
                (**self).starts_requests()
            }
        }
    )*};
}

forward_member!(&M, Box<M>, Arc<M>);

/// [`Member::read_uninit_at`] the plain way: zero `buf`, then
/// [`Member::read_at`] into it. For members (and paths) that cannot read
/// into uninitialised memory themselves.
pub fn read_zeroed_at<'a, M: Member + ?Sized>(
    member: &M,
    offset_bytes: u64,
    buf: &'a mut [MaybeUninit<u8>],
) -> Result<&'a mut [u8], MemberError> {
    buf.fill(MaybeUninit::new(0));
    // SAFETY: just zeroed; `MaybeUninit<u8>` has the layout of `u8`.
    let buf = unsafe { &mut *(buf as *mut [MaybeUninit<u8>] as *mut [u8]) };
    member.read_at(offset_bytes, buf)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_range_accepts_up_to_the_end() {
        assert!(check_range("m", 100, Op::Read, 0, 100).is_ok());
        assert!(check_range("m", 100, Op::Read, 100, 0).is_ok());
        assert!(check_range("m", 100, Op::Read, 99, 1).is_ok());
    }

    #[test]
    fn check_range_refuses_past_the_end_and_overflow() {
        for (offset_bytes, len_bytes) in [(0, 101), (100, 1), (101, 0), (u64::MAX, 2)] {
            let err = check_range("m", 100, Op::Write, offset_bytes, len_bytes).unwrap_err();
            assert_eq!(err.kind, MemberErrorKind::OutOfRange);
            assert_eq!((err.offset_bytes, err.len_bytes), (offset_bytes, len_bytes));
        }
    }
}
