//! Serving a platter volume over NBD.
//!
//! Threads, not an async runtime. Each connection has a few worker threads
//! (nbdkit's model) that read a request with the pure codec in
//! `platter-nbd` and submit it to the engine ([`engine`]); the engine hands
//! each member I/O to the member's asynchronous queue (`platter_io::aio`:
//! io_uring where the kernel allows it, a bounded set of threads
//! otherwise) and the thread that completes the last one queues the reply
//! (`network::replies`). Every queue is bounded (`network::flow`): a
//! client can make its own connection wait, never grow memory without
//! limit or hold up another connection. The folders are the server's
//! rooms: `network` (listening, connections, replies, budgets), `engine`
//! (the volume behind its lock and what drives it), `manage` (the control
//! socket's commands and the work behind them), `observe` (metrics, the
//! live page, alerts, status). docs/architecture.md tells the whole path.

pub mod defaults;
pub mod engine;
pub mod manage;
pub mod network;
pub mod observe;
pub mod plex;
mod served;
mod server;
mod startup;

pub use engine::upkeep::UNLIMITED as UNLIMITED_RATE;
pub use manage::pool::{
    Extended, MoveEnd, NewSubdisks, NewVolume, OnDrive, OnDrives, PlannedMove, PoolHost, Relocated,
    RelocatedSubdisk,
};
pub use manage::{filesystem_json, layout_json};
pub use network::conn::{CONN_MAX_BYTES, CONN_MAX_REQUESTS};
pub use network::listen::check_stdio;
pub use server::{
    serve, serve_pool, serve_volumes, AssemblePlexes, Members, PoolStart, Ready, ServeConfig,
    ServeError, MAX_BLOCK_BYTES,
};
