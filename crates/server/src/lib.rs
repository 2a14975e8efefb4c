//! Serving a platter volume over NBD.
//!
//! Threads, not an async runtime: member I/O is blocking positioned I/O, so
//! requests run on a fixed pool of workers that pump the engine
//! ([`engine`]); each connection has one reader thread that parses requests
//! with the pure codec in `platter-nbd` and hands them to the pool. Every
//! queue is bounded ([`flow`]): a client can make the server wait, never
//! grow without limit.

mod conn;
pub mod engine;
pub mod flow;
mod server;
mod stream;
mod workers;

pub use server::{serve, Ready, ServeConfig, ServeError, BUDGET_BYTES, MAX_BLOCK_BYTES};
