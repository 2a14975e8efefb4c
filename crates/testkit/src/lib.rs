//! The test kit: what the test suites of the workspace share, in one place.
//!
//! A dev-dependency of the other crates, never a dependency: nothing here
//! ships in the `platter` binary.
//!
//! - [`rng::Rng`]: the seeded generator (splitmix64, built on the
//!   simulator's [`platter_sim::rng::mix64`]) that picks test inputs.
//! - [`oracle::Model`]: the flat byte array a volume must match, applying
//!   requests with the simulator oracle's rule
//!   ([`platter_sim::oracle::apply_to_bytes`]); the simulator's own
//!   [`oracle::Oracle`] is re-exported for tests that need writer tracking.
//! - [`executor::SyncExecutor`]: a volume over real members (files,
//!   memory, faulty ones) run one request at a time through the engine's
//!   one loop, `platter_core::drive::pump`.
//! - [`member::MemMember`]: an in-memory member of the sans-I/O engine with
//!   faults (dead, full, bad sectors).
//! - [`temp_dir!`] and [`dirs`]: temporary directories under the target
//!   directory; [`dirs::LoopDevice`]: a loop device detached on drop.
//! - [`check`]: comparisons that name the first difference, and the
//!   sans-I/O source scan.
//! - [`serve::ServeProcess`]: the one launcher of `platter serve` (output
//!   collected, ready line awaited, stopped by signal, killed on drop). The
//!   end-to-end and NBD protocol fixtures both wrap it; the protocol tests
//!   keep their own independent NBD client on purpose.
//! - [`nbdkit::Nbdkit`]: nbdkit serving an export on a Unix socket, a
//!   remote member that can be killed and restarted; [`netns::NetNs`]:
//!   another "host" in a network namespace with a cable that can be cut.
//! - [`tools`]: external tools looked up, the test skipped (or, under
//!   `CI=true`, failed) when one is missing; [`skips::skipped`]: every
//!   skip says why, and `scripts/test` lists them at its end.

pub mod check;
pub mod dirs;
pub mod executor;
pub mod member;
pub mod nbdkit;
pub mod netns;
pub mod oracle;
pub mod rng;
pub mod serve;
pub mod skips;
pub mod tools;
pub mod volatile;

pub use rng::Rng;
