//! Serving a platter volume over NBD.
//!
//! Threads, not an async runtime: member I/O is blocking positioned I/O.
//! Each connection has a few worker threads (nbdkit's model) that read a
//! request with the pure codec in `platter-nbd`, run it through the engine
//! on their own thread ([`engine`]) and queue the reply (`replies`). Every
//! queue is bounded ([`flow`]): a client can make its own connection wait,
//! never grow memory without limit or hold up another connection.

pub mod alerts;
mod balancing;
mod conn;
pub mod defaults;
pub mod describe;
pub mod engine;
pub mod flow;
mod grow;
pub mod leftout;
mod listen;
mod livepage;
mod manage;
mod memory;
mod meta;
pub mod metrics;
mod newdevice;
mod readd;
mod reconnect;
pub mod record;
pub mod registry;
mod replies;
pub mod resume;
mod scrub;
mod server;
mod serving;
mod startup;
mod stream;
pub mod systemd;
mod upkeep;

pub use conn::{CONN_MAX_BYTES, CONN_MAX_REQUESTS};
pub use listen::check_stdio;
pub use manage::{filesystem_json, layout_json};
pub use server::{serve, Ready, ServeConfig, ServeError, MAX_BLOCK_BYTES};
pub use upkeep::UNLIMITED as UNLIMITED_RATE;
