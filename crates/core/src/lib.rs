//! The platter engine: pure and deterministic.
//!
//! No threads, no sockets, no `std::fs`, no clock. A [`volume::Volume`] takes
//! client requests, emits member I/O requests and reacts to their completions;
//! the real executor (`platter-io`) and the simulator drive the same code.

pub mod assemble;
pub mod balance;
pub mod buf;
pub mod drive;
pub mod format;
pub mod fsalign;
pub mod geometry;
pub mod integrity;
pub mod intent;
pub mod label;
pub mod level;
pub mod member_io;
pub mod pool;
pub mod ppl;
pub mod reshape;
pub mod stats;
pub mod units;
pub mod volume;

pub use level::{Level, ParityLayout};
