//! Member back ends: the devices that hold the parts of a volume.
//!
//! [`Member`] is the small trait the executor drives (positioned, thread-safe
//! I/O; its doc comment is the contract). [`FileMember`] serves regular files
//! and block devices, [`NbdMember`] an export of an NBD server, [`MemoryMember`] serves tests, and [`open_member`] turns
//! a command-line member name into one of them.

pub mod aio;
pub mod assembly;
mod blockdev;
pub mod buffers;
mod direct;
pub mod error;
pub mod executor;
pub mod fault;
pub mod file;
pub mod member;
pub mod memory;
pub mod nbd;
pub mod open;
mod positioned;
pub mod socket;

pub use error::{MemberError, MemberErrorKind, Op};
pub use executor::{perform, SyncExecutor};
pub use fault::{CrashMode, FaultControls, FaultSpec, FaultyMember};
pub use file::FileMember;
pub use member::{check_range, Member, MemberDone, RingTarget};
pub use memory::MemoryMember;
pub use nbd::NbdMember;
pub use open::{open_member, OpenOptions};
