//! What `platter serve`'s options default to, in one place: the CLI shows
//! these in `--help` and [`crate::ServeConfig::default`] is built from
//! them, so a test's server and an operator's agree.

use platter_core::volume::CacheLimits;
use std::time::Duration;

/// Worker threads per connection (`--threads`).
pub const THREADS_PER_CONNECTION: usize = 8;
/// Connections served at once (`--max-connections`).
pub const MAX_CONNECTIONS: usize = 64;
/// RAID-5/6 stripe cache, in stripes (`--stripe-cache`).
pub const STRIPE_CACHE_STRIPES: u64 = CacheLimits::DEFAULT.max_stripes;
/// Request payloads and unsent replies across every connection
/// (`--buffer-limit`), as the CLI writes it and in bytes.
pub const BUFFER_LIMIT: &str = "1G";
pub const BUFFER_LIMIT_BYTES: u64 = 1 << 30;
/// An idle connection is closed after this once a client was turned away
/// (`--idle-timeout`).
pub const IDLE_TIMEOUT_SECS: u64 = 300;
/// The whole handshake (`--handshake-timeout`).
pub const HANDSHAKE_TIMEOUT_SECS: u64 = 30;
/// Member I/Os in flight per member (`--member-queue-depth`).
pub const MEMBER_QUEUE_DEPTH: usize = platter_io::aio::layer::QUEUE_DEPTH_DEFAULT;
/// A member I/O older than this fails its member (`--member-timeout`).
pub const MEMBER_TIMEOUT: Duration = platter_io::aio::layer::TIMEOUT_DEFAULT;
pub const MEMBER_TIMEOUT_SECS: u64 = MEMBER_TIMEOUT.as_secs();
/// A remote member's request unanswered this long drops its connection: the
/// member is disconnected and tried again (`--remote-timeout`). Shorter
/// than the member timeout, so that a stalled host is given up on before
/// it is failed for good, and long enough for a busy server's flush.
pub const REMOTE_TIMEOUT_SECS: u64 = 10;

const _: () = assert!(
    MEMBER_TIMEOUT.subsec_nanos() == 0,
    "the CLI takes whole seconds"
);
const _: () = assert!(
    REMOTE_TIMEOUT_SECS <= MEMBER_TIMEOUT_SECS,
    "a stalled remote member is disconnected before it would be failed"
);
const _: () = assert!(
    BUFFER_LIMIT_BYTES >= crate::server::MAX_BLOCK_BYTES as u64,
    "the buffer limit holds at least one request of the largest size"
);
/// `--scrub-rate`: gentle beside clients (md's raid-check lets a check
/// run far faster when the array is idle; a scheduled pass has days).
pub const SCRUB_RATE: &str = "32M";
pub const SCRUB_BYTES_PER_SEC: u64 = 32 << 20;
/// Rebuilds, resyncs and reshapes move at most this fast
/// (`--rebuild-rate`, `platter rebuild-rate`): a disk's worth of
/// streaming, so clients keep a share of the members.
pub const REBUILD_RATE: &str = "128M";
pub const REBUILD_BYTES_PER_SEC: u64 = 128 << 20;
