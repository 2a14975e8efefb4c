//! Deterministic simulation of platter volumes.
//!
//! The simulator drives the same sans-I/O engine as the real executor
//! ([`platter_core::volume::Volume`]) against simulated members (byte
//! arrays, sparse for members of TiBs, with a service-time model and
//! injected faults), in virtual time,
//! FoundationDB- and TigerBeetle-style: a seed fixes the whole run, so any
//! failure replays exactly from its seed.
//!
//! ```
//! use platter_sim::{random_config, ScenarioOptions, Simulation};
//! let config = random_config(42, &ScenarioOptions::default());
//! let report = Simulation::new(config, 42).run();
//! assert!(report.ok(), "{:?}", report.violation_messages);
//! ```
//!
//! # Determinism rules
//! Everything that decides what happens, or is folded into the trace hash,
//! must be a pure function of the seed and the config:
//! - **No wall clock.** Time is [`clock::Clock`]'s `now_ns`, which moves
//!   only when the event loop takes the next event. No `Instant`, no
//!   `SystemTime`, no sleeping, no threads inside a run.
//! - **No hash-map iteration order** in anything that is scheduled or
//!   hashed: the simulator keeps its own state in `Vec`s and `BTreeMap`s,
//!   and ties in the event queue break by insertion sequence, never by
//!   heap layout. (The engine's id maps use a fixed hasher, so they are
//!   deterministic too, but the simulator does not rely on their order.)
//! - **One RNG stream per concern** ([`rng::Stream`]): scenario, workload,
//!   latency, faults. Drawing one more latency sample must not change the
//!   workload; a new kind of fault must not reshuffle service times.
//! - **No external randomness**: [`rng::Rng`] is our own splitmix64, so the
//!   sequence for a seed never changes with a dependency upgrade.
//!
//! [`Report::trace_hash`] folds every submission, member I/O issue and
//! completion (time, kind, member, offset, length, result), client
//! completion, engine event and fault; equal hashes mean equal runs.
//!
//! # The oracle
//! [`oracle::Oracle`] is a flat byte array (sparse pages for volumes of
//! TiBs). Requests are applied to it at
//! submission (the engine serializes overlapping requests in submission
//! order) and reads are checked against it as of their submission. Within
//! the redundancy budget no request may fail and no read may be wrong;
//! beyond it, failures must be `ErrorKind::Io` and reads must still never
//! return wrong bytes (bytes of a failed write may be old or new).

pub mod bench;
pub mod calibrate;
pub mod clock;
pub mod disk;
pub mod disksim;
pub mod events;
pub mod link;
pub mod members;
pub mod oracle;
pub mod plot;
pub mod rng;
pub mod run;
pub mod scenario;
pub mod shared;
pub mod sparse;
pub mod sweep;
pub mod trace;
pub mod workload;

pub use disk::{DiskModel, HostModel};
pub use link::Link;
pub use members::{CrashUndo, Jitter, ServiceModel, SimpleLatency, SimpleService};
pub use run::{
    Arrival, Fault, Mix, RebuildPace, Report, ScheduledFault, SilentCorruption, SimConfig,
    Simulation, Workload,
};
pub use scenario::{
    large_config, lost_bytes_config, random_config, rebuild_config, with_checksums, with_ppl,
    ScenarioOptions,
};
