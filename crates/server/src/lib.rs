//! Serving a platter volume over NBD.
//!
//! Threads, not an async runtime: member I/O is blocking positioned I/O.
//! Each connection has a few worker threads (nbdkit's model) that read a
//! request with the pure codec in `platter-nbd`, run it through the engine
//! on their own thread ([`engine`]) and queue the reply (`replies`). Every
//! queue is bounded ([`flow`]): a client can make its own connection wait,
//! never grow memory without limit or hold up another connection.

pub mod defaults;
pub mod engine;
pub mod manage;
pub mod network;
pub mod observe;
mod server;
mod startup;

pub use engine::upkeep::UNLIMITED as UNLIMITED_RATE;
pub use manage::{filesystem_json, layout_json};
pub use network::conn::{CONN_MAX_BYTES, CONN_MAX_REQUESTS};
pub use network::listen::check_stdio;
pub use server::{serve, Ready, ServeConfig, ServeError, MAX_BLOCK_BYTES};
