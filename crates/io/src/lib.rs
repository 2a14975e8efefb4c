//! Member I/O for the real world: the devices that hold a volume's parts,
//! and what carries the engine's member I/O to them.
//!
//! - [`Member`] is the small trait every back end implements (positioned,
//!   thread-safe I/O; its doc comment is the contract): [`FileMember`] for
//!   regular files and block devices, [`NbdMember`] for an export of an NBD
//!   server, [`MemoryMember`] for tests; [`open_member`] turns a
//!   command-line member name into one of them.
//! - [`aio`]: the asynchronous queues the server hands each member I/O to
//!   (io_uring where the kernel allows it, a bounded set of threads
//!   otherwise), completing through a callback.
//! - [`perform()`]: the one place a [`MemberOp`](platter_core::volume::MemberOp)
//!   becomes a call on a member, and a member's error the engine's kind.
//! - [`assembly`]: reading labels, assembling what they describe, writing
//!   labels back as the volume's state changes.
//! - [`fault`]: a wrapper that injects failures, latency, torn writes and
//!   crashes (tests and `platter serve --inject`).
//! - [`socket`]: waiting on a socket's input alone (remote members).

pub mod aio;
pub mod assembly;
mod blockdev;
pub mod buffers;
mod direct;
pub mod error;
pub mod fault;
pub mod file;
pub mod member;
pub mod memory;
pub mod moving;
pub mod nbd;
pub mod open;
pub mod perform;
mod positioned;
pub mod socket;
pub mod subdisk;

pub use error::{MemberError, MemberErrorKind, Op};
pub use fault::{CrashMode, FaultControls, FaultSpec, FaultyMember};
pub use file::FileMember;
pub use member::{check_range, Member, MemberDone, RingTarget};
pub use memory::MemoryMember;
pub use nbd::NbdMember;
pub use open::{open_member, OpenOptions};
pub use perform::perform;
