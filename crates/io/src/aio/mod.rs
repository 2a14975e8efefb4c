//! Asynchronous member I/O: an I/O is submitted now and completes later,
//! on its own, through a callback. The server's engine hands every member
//! I/O the volume emits to a [`MemberQueue`] at once and is driven by the
//! completions, so a request waits for its slowest member I/O per phase,
//! not for the sum of them.
//!
//! The interface is shaped for submit/complete rather than call/return so
//! that back ends which are asynchronous by nature (io_uring, a remote NBD
//! member with requests in flight on one socket) fit behind it as they
//! are. Its implementation, [`layer::Layer`], performs reads, writes and
//! flushes in an io_uring where the kernel allows it and everything else
//! (and everything, where io_uring is refused) on a bounded set of
//! threads per member making the synchronous [`Member`] calls.
//!
//! Promises every implementation keeps (the engine relies on them):
//! - `done` is called exactly once per submission, never from inside
//!   [`MemberQueue::submit`] itself (the caller may hold locks), and on a
//!   thread of the layer's own.
//! - [`MemberQueue::perform_here`] is the exception: the I/O runs on the
//!   caller's thread, which gets the outcome back, and `done` is called
//!   only if the I/O times out first (then on the layer's thread, and the
//!   caller gets `None`). It is counted in the queue like any other I/O,
//!   so `load` and the timeout see it.
//! - An I/O not completed within the layer's timeout completes with
//!   [`Completed::timed_out`] set; whatever the device answers later is
//!   dropped. An I/O still waiting for its turn when it times out is never
//!   started.
//! - I/Os on one queue may complete in any order: the volume never has two
//!   overlapping I/Os on a member in flight at once.

pub mod layer;
mod queue;
mod ring;
mod timer;

use std::sync::Arc;
use std::time::Duration;

use platter_core::volume::{IoResult, MemberOp};

use crate::fault::FaultSpec;
use crate::member::Member;

/// Latency injected into every I/O of one member (`--inject
/// latency=,latency-jitter=`), served by the layer's timer: the I/O holds
/// its place in the member's queue depth for the latency, then goes to the
/// device.
#[derive(Clone, Debug)]
pub struct Delay {
    /// Only its latency, jitter and seed are used.
    spec: FaultSpec,
}

impl Delay {
    /// The latency `spec` injects; `None` when it injects none.
    pub fn of_spec(spec: &FaultSpec) -> Option<Delay> {
        (spec.latency_us > 0 || spec.latency_jitter.is_some()).then(|| Delay {
            spec: spec.clone().split_latency().1,
        })
    }

    /// The latency of the member's I/O number `n` (its order of taking a
    /// slot), the same for the same seed.
    pub fn of(&self, n: u64) -> Duration {
        Duration::from_micros(self.spec.latency_us_of(n))
    }

    /// What it injects, as a fault specification (latency only).
    pub fn spec(&self) -> &FaultSpec {
        &self.spec
    }

    /// The latency every I/O gets at least.
    pub fn base_ns(&self) -> u64 {
        self.spec.latency_us.saturating_mul(1000)
    }
}

/// How one member I/O ended.
pub struct Completed {
    pub result: IoResult,
    /// How long the device took (from the start of the call to its
    /// return; queueing before it is not counted). Zero when timed out.
    pub device_ns: u64,
    /// The I/O did not complete within the timeout; `result` is an error
    /// saying so, and the member must be taken out of use.
    pub timed_out: bool,
    /// Whether the thread delivering this may send requests to a member
    /// that starts them itself (a remote one): pass it on to
    /// [`MemberQueue::submit`] for the I/Os this completion leads to. A
    /// device's own completion thread (an NBD member's reader) may not: a
    /// reader blocked sending to a server whose replies fill our receive
    /// buffer would wait for itself until the send deadline.
    pub may_send: bool,
}

/// Called once with the outcome of a submitted I/O.
pub type IoDone = Box<dyn FnOnce(Completed) + Send>;

/// How busy a queue is, for `stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueLoad {
    /// I/Os submitted and not yet completed (waiting for a turn, or on
    /// the device).
    pub outstanding: u64,
    /// The most I/Os the queue has on its device at once.
    pub depth: u64,
}

/// How fast a queue's device has been answering.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pace {
    /// A moving average of its recent I/O times ([`average_step`]).
    pub recent_ns: u64,
    /// What those I/Os moved, on average (flushes count as 0 bytes).
    pub recent_bytes: u64,
    /// How long the device has had an I/O on it without answering any
    /// (0: none is on it): the age of the oldest I/O on the device, or the
    /// time since its last answer if that is less. A device that stopped
    /// answering shows here at once, long before an answer moves the
    /// average. I/Os waiting for a slot or a queue thread, and one whose
    /// thread waits for the CPU mid-call while the device answers others,
    /// do not make it old: on a machine whose CPUs are busy they wait for
    /// the CPU, not the device, and counted they would keep a fast
    /// member's I/O off the submitting thread, each I/O handed over making
    /// the next one wait. A device that leaves one I/O unanswered while it
    /// answers others is found by `--member-timeout` instead.
    pub oldest_out_ns: u64,
    /// I/Os being performed on callers' threads now.
    pub here_now: u32,
}

/// What a device's recent average starts from: slow, so its first I/Os
/// go to its queue's threads until their times show the device is fast.
pub const RECENT_NS_START: u64 = 1_000_000;

/// The next value of a moving average over about the last 8 I/O times,
/// given one more. A sample counts for at most 4 times the average (and
/// at least 10 µs): one I/O stretched by the scheduler on a busy machine
/// (a thread preempted for milliseconds in a 2 µs read) barely moves it,
/// while a device that became slow moves it past any microsecond
/// threshold within about 20 I/Os.
pub fn average_step(avg_ns: u64, sample_ns: u64) -> u64 {
    let cap_ns = avg_ns.saturating_mul(4).max(10_000);
    avg_ns - avg_ns / 8 + sample_ns.min(cap_ns) / 8
}

/// One member device's queue.
pub trait MemberQueue: Send + Sync {
    /// Starts `op` on the queue's device; `done` gets its outcome.
    /// `may_send`: whether the calling thread may send the request itself
    /// (see [`Completed::may_send`]); when not, the queue's own threads
    /// send it.
    fn submit(&self, op: MemberOp, done: IoDone, may_send: bool);

    /// Performs `op` on this thread and returns its outcome; `None` when
    /// it timed out first, in which case `done` got the timeout (on the
    /// layer's thread) and the device's late answer is dropped. Otherwise
    /// `done` is dropped uncalled. For members whose I/O takes less than
    /// a hand-off to another thread costs: see [`MemberQueue::pace`].
    fn perform_here(&self, op: MemberOp, done: IoDone) -> Option<Completed>;

    /// How fast the device has been answering, to choose between
    /// [`MemberQueue::submit`] and [`MemberQueue::perform_here`].
    fn pace(&self) -> Pace;

    fn load(&self) -> QueueLoad;
}

/// A source of queues: one per member device. Dropping a queue lets its
/// I/Os in flight finish and then frees what serves it.
pub trait IoLayer: Send + Sync {
    fn queue(&self, device: Arc<dyn Member>) -> Arc<dyn MemberQueue>;

    /// [`IoLayer::queue`] with `delay` injected, whatever the device's
    /// name (a pool's subdisk at a new place, whose name the layer was not
    /// given at its start); `None`: as [`IoLayer::queue`].
    fn queue_delayed(&self, device: Arc<dyn Member>, delay: Option<Delay>) -> Arc<dyn MemberQueue> {
        let _ = delay;
        self.queue(device)
    }

    /// What performs the I/O, for `stats` (`io-uring`, `threads`).
    fn backend(&self) -> &'static str {
        "threads"
    }
}
