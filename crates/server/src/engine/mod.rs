//! The engine: one [`Volume`] behind a mutex, driven by submissions and by
//! member I/O completions. A connection's worker submits a request and
//! goes back to its socket; every member I/O the volume emits is handed at
//! once to the member's queue in the asynchronous I/O layer
//! (`platter_io::aio`). Each completion, on a thread of that layer, takes
//! the lock, reports the result to the volume and takes what the volume
//! has next: more I/Os (submitted at once too), finished requests and
//! events, both handed on outside the lock. A request's latency is then
//! that of its slowest member I/O per phase. docs/architecture.md tells the
//! whole path.
//!
//! The engine is the same state machine the simulator drives; only this file
//! knows that members are real devices.

pub(crate) mod memory;
pub(crate) mod meta;
pub(crate) mod read_policy;
pub mod resume;
pub(crate) mod serving;
pub(crate) mod upkeep;

use crate::engine::serving::Serving;
use platter_core::drive::{self, Engine as _};
use platter_core::geometry::Geometry;
use platter_core::reshape::{Action, Reshaping};
use platter_core::stats::LatencyOf;
use platter_core::volume::{
    Event, Health, IdMap, IoId, MemberIo, Reply, Request, RequestId, Volume, VolumeError,
};
use platter_io::aio::{average_step, Completed, IoLayer, MemberQueue, QueueLoad};
use platter_io::Member;
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Instant;

pub type Done = Box<dyn FnOnce(Result<Reply, VolumeError>) + Send>;
/// Sets up a volume as the server does at start (its bitmap, stripe
/// cache, read balancing), given the member devices by slot.
pub type VolumeSetup = Box<dyn Fn(&mut Volume, &[Option<Arc<dyn Member>>]) + Send>;
/// Sees every event; returns the members that must be failed because of
/// it (those whose label could not record it), with why.
pub type EventHook = Box<dyn FnMut(&Event) -> Vec<(u32, String)> + Send>;

/// Member I/Os taken from the engine in one round; most requests make few.
/// Each with the device it goes to, resolved when the engine emitted it: a
/// replacement swapped in later must never receive an I/O meant for the
/// device it replaced (a read of the old member would return the new one's
/// blank bytes to a client).
type Ios = SmallVec<[(MemberIo, Option<Arc<dyn MemberQueue>>); 4]>;
type Finished = SmallVec<[(Done, Result<Reply, VolumeError>); 2]>;

/// A member I/O on a device this fast lately ([`platter_io::aio::Pace`]:
/// its recent I/Os took at most this, plus [`INLINE_NS_PER_KIB`] for each
/// KiB they moved) is performed on the thread that has it, not handed to
/// the member's queue threads. Handing it over and back costs two thread
/// wake-ups, more than memory-speed members (tmpfs, a page cache) take for
/// a small I/O; and a large one on them is a memory copy, which keeps a
/// CPU busy wherever it runs: another thread only adds the hand-off (on
/// tmpfs a RAID-5 volume's 330 KiB member writes, handed over, cost 15%
/// of its sequential write speed). Disks, SSDs and remote members take
/// far longer than their bytes' copy, and their I/Os overlap in the
/// queue's threads.
const INLINE_IO_NS_MAX: u64 = 40_000;
/// About a memory copy at 2 GB/s, on a busy machine.
const INLINE_NS_PER_KIB: u64 = 500;
/// ... unless one of the member's I/Os has been out this long: the device
/// may have stopped answering, and no more threads should wait in it.
/// Well above a fast I/O, so that one preempted by the scheduler on a busy
/// machine rarely trips it.
const INLINE_STALL_NS: u64 = 1_000_000;
/// ... or this many of its I/Os are being performed on callers' threads
/// already: a device that stops answering holds at most about this many
/// of the threads that read requests (each until `--member-timeout` fails
/// the member and the device answers). The check and the count are not
/// one atomic step, so threads deciding at the same instant may pass it
/// together; on a 2-core machine more than 2 at once gain nothing anyway.
const INLINE_PER_MEMBER_MAX: u32 = 4;
/// What one thread takes on performing itself, at most, per submission or
/// completion (expected times summed): a request with many I/Os on fast
/// members runs them one after another while that stays short, and hands
/// the rest over so they run beside it.
const INLINE_WORK_NS_MAX: u64 = 1_000_000;

/// What the thread driving the engine does itself: fast members' I/Os,
/// performed in a loop ([`Engine::perform_inline`]) rather than by recursion
/// as each one's completion makes the next.
struct InlineWork {
    steps: VecDeque<InlineStep>,
    /// Whether this thread may perform member I/O: a submitting thread
    /// may, the I/O layer's threads do not (a member I/O thread stuck in
    /// another member's I/O would hold its own member's depth, and the
    /// watchdog must never wait for a device).
    inline: bool,
    /// Whether this thread may send requests to remote members itself
    /// ([`Completed::may_send`]).
    may_send: bool,
    /// Of [`INLINE_WORK_NS_MAX`], what is left.
    budget_ns: u64,
}

enum InlineStep {
    Perform(MemberIo, Arc<dyn MemberQueue>),
    /// An I/O that ended without reaching a device.
    Ended(IoId, u32, Completed),
}

impl InlineWork {
    fn new(inline: bool, may_send: bool) -> InlineWork {
        InlineWork {
            steps: VecDeque::new(),
            inline,
            may_send,
            budget_ns: INLINE_WORK_NS_MAX,
        }
    }

    /// Whether this thread takes on an I/O on `queue` itself.
    fn takes(&mut self, queue: &dyn MemberQueue) -> bool {
        if !self.inline {
            return false;
        }
        let pace = queue.pace();
        let fast_ns = INLINE_IO_NS_MAX
            .saturating_add(pace.recent_bytes.saturating_mul(INLINE_NS_PER_KIB) / 1024);
        if pace.recent_ns > fast_ns
            || pace.recent_ns > self.budget_ns
            || pace.oldest_out_ns >= INLINE_STALL_NS
            || pace.here_now >= INLINE_PER_MEMBER_MAX
        {
            return false;
        }
        self.budget_ns -= pace.recent_ns;
        true
    }
}

/// Member I/Os a submission left for the submitting thread to perform
/// ([`Engine::submit_client`]); performed by [`InlineIos::run`], or when
/// dropped, so none is ever lost.
#[must_use = "the I/Os are performed when this runs or is dropped"]
pub struct InlineIos<'a> {
    engine: &'a Engine,
    here: InlineWork,
}

impl InlineIos<'_> {
    /// No I/O is left to perform here.
    pub fn is_empty(&self) -> bool {
        self.here.steps.is_empty()
    }

    /// Performs the I/Os, and those their completions make.
    pub fn run(self) {
        drop(self);
    }
}

impl Drop for InlineIos<'_> {
    fn drop(&mut self) {
        if !self.here.steps.is_empty() {
            let here = std::mem::replace(&mut self.here, InlineWork::new(false, true));
            self.engine.perform_inline(here);
        }
    }
}

/// Where a completion goes, and (client requests) when it was submitted.
struct Route {
    done: Done,
    timed: Option<(LatencyOf, Instant)>,
}

struct State {
    serving: Serving,
    /// What a reshape asked of the host, for the upkeep thread.
    reshape_actions: Vec<Action>,
    routes: IdMap<RequestId, Route>,
    events: Vec<Event>,
    idle_waiters: u32,
    /// By slot; `None` where no device is present. Kept under the engine
    /// lock, which every I/O takes anyway: resolving an I/O's device then
    /// costs no lock of its own. Replacements are swapped in under it.
    members: Vec<Option<Device>>,
    /// Set at shutdown: client requests are refused from then on, so none
    /// can slip in behind the final flush.
    closed_to_clients: bool,
    /// Set while a reshape starts (`Engine::pause`): submissions from any
    /// other thread wait, so that the volume empties and stays empty
    /// while its layout is swapped.
    paused_by: Option<std::thread::ThreadId>,
    /// When a write refused for space was last logged, and how many have
    /// not been since: a full file system refuses every write, and the log
    /// must not fill it further.
    no_space_logged: Option<Instant>,
    no_space_unlogged: u64,
    /// By slot: how long each member has had at least one I/O on its
    /// device (the live page's busy share, iostat's %util).
    busy: Vec<BusyClock>,
}

/// The union of a member's I/O intervals, summed: each completed I/O
/// covers `[end - device time, end]`; only what lies past the last end
/// counted adds. Completions that arrive out of order undercount a
/// little, never overcount.
#[derive(Clone, Copy, Debug, Default)]
struct BusyClock {
    last_end: Option<Instant>,
    busy_ns: u64,
}

impl BusyClock {
    fn add(&mut self, end: Instant, device_ns: u64) {
        let start = end
            .checked_sub(std::time::Duration::from_nanos(device_ns))
            .unwrap_or(end);
        let from = match self.last_end {
            Some(last) if last > start => last,
            _ => start,
        };
        if end > from {
            self.busy_ns = self.busy_ns.saturating_add(ns_between(from, end));
        }
        if self.last_end.is_none_or(|last| end > last) {
            self.last_end = Some(end);
        }
    }
}

/// Rounds of writing the stripe cache out before [`Engine::empty_paused`]
/// gives up (its write-outs can fail and leave entries).
const EMPTY_ROUNDS_MAX: u32 = 8;

/// At most one log line per this long for writes refused for space.
const NO_SPACE_LOG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// A member device and its queue in the I/O layer. A replacement gets a
/// queue of its own: threads stuck in the device it replaced must not
/// take the new one's depth.
struct Device {
    device: Arc<dyn Member>,
    queue: Arc<dyn MemberQueue>,
}

pub struct Engine {
    /// Completions hold the engine through this while their I/O is out.
    me: Weak<Engine>,
    io: Arc<dyn IoLayer>,
    state: Mutex<State>,
    idle: Condvar,
    /// Wakes submissions held by a pause.
    resumed: Condvar,
    /// Wakes the upkeep thread when the reshape asks something of it (a
    /// window backed up in the reserved areas asks a label write for each
    /// one: it should not wait for the next tick).
    reshape_asked: Condvar,
    /// How this server sets up a volume it serves (bitmap, stripe cache,
    /// read balancing), for the new layout's once a reshape ends.
    volume_setup: Mutex<Option<VolumeSetup>>,
    /// Called (outside the engine lock) with every event, in order.
    on_event: Mutex<Option<EventHook>>,
    /// Recent member I/O time (ns), over every member ([`average_step`]):
    /// whether a request's member I/O is a matter of microseconds
    /// (memory, a cache) or of milliseconds (a disk). Updated without a
    /// lock; a lost update only makes it a little less recent.
    member_io_ns_avg: AtomicU64,
    /// [`Engine::sends_on_submit`], kept with the devices.
    sends_on_submit: AtomicBool,
    member_count: usize,
    /// How often the engine lock was taken, found taken, and how long
    /// takers waited: what tells whether the lock bounds anything
    /// (docs/architecture.md, "The engine lock").
    lock_acquired: AtomicU64,
    lock_contended: AtomicU64,
    lock_waited_ns: AtomicU64,
    /// Where events that need a person go (`alerts.rs`); set once at start,
    /// only logged before.
    alerts: std::sync::OnceLock<Arc<crate::observe::alerts::Alerts>>,
}

/// Where a reshape stands, for status and the upkeep thread.
#[derive(Clone, Debug)]
pub struct ReshapeProgress {
    /// Volume bytes moved to the new layout.
    pub position_bytes: u64,
    /// ... of which the labels hold as moved for good.
    pub durable_bytes: u64,
    pub total_bytes: u64,
    pub finished: bool,
    /// Why it stopped for good, if it did: nothing moves until a restart.
    pub stuck: Option<String>,
    /// The layout it moves from.
    pub old: Geometry,
}

/// The engine lock's use since the start, for `stats --json`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LockUse {
    pub acquired: u64,
    /// Acquisitions that found it held and waited.
    pub contended: u64,
    /// Their waits, summed.
    pub waited_ns: u64,
}

/// What [`Engine::member_io_ns_avg`] starts from: slow, until I/Os show
/// otherwise.
const MEMBER_IO_NS_START: u64 = 1_000_000;

impl Engine {
    /// The engine over `volume`, its member devices by slot, doing member
    /// I/O through `io`.
    pub fn new(
        volume: impl Into<Serving>,
        members: Vec<Option<Arc<dyn Member>>>,
        io: Arc<dyn IoLayer>,
    ) -> Arc<Engine> {
        let volume: Serving = volume.into();
        assert_eq!(members.len(), volume.geometry().members() as usize);
        let members_len = members.len();
        let members = members
            .into_iter()
            .map(|m| {
                m.map(|device| Device {
                    queue: io.queue(Arc::clone(&device)),
                    device,
                })
            })
            .collect();
        let engine = Arc::new_cyclic(|me| Engine {
            me: me.clone(),
            io,
            state: Mutex::new(State {
                serving: volume,
                reshape_actions: Vec::new(),
                routes: IdMap::default(),
                events: Vec::new(),
                idle_waiters: 0,
                members,
                closed_to_clients: false,
                paused_by: None,
                no_space_logged: None,
                no_space_unlogged: 0,
                busy: vec![BusyClock::default(); members_len],
            }),
            idle: Condvar::new(),
            resumed: Condvar::new(),
            reshape_asked: Condvar::new(),
            volume_setup: Mutex::new(None),
            on_event: Mutex::new(None),
            member_io_ns_avg: AtomicU64::new(MEMBER_IO_NS_START),
            // Set from the devices below.
            sends_on_submit: AtomicBool::new(false),
            // Members can be added (a reshape): the bound covers any count.
            member_count: platter_core::label::MAX_MEMBERS as usize,
            lock_acquired: AtomicU64::new(0),
            lock_contended: AtomicU64::new(0),
            lock_waited_ns: AtomicU64::new(0),
            alerts: std::sync::OnceLock::new(),
        });
        engine.note_devices(&engine.lock());
        engine
    }

    /// Whether submitting may send to a member's socket on the submitting
    /// thread (a remote member: [`Member::starts_requests`]), and so wait
    /// there while the member's server is slow to read. A connection
    /// worker then does not keep its client's socket through a
    /// submission: one stalled server would stop the whole connection.
    pub fn sends_on_submit(&self) -> bool {
        self.sends_on_submit.load(Ordering::Relaxed)
    }

    /// Recomputes [`Engine::sends_on_submit`] after the devices changed.
    fn note_devices(&self, s: &State) {
        let sends = s
            .members
            .iter()
            .flatten()
            .any(|d| d.device.starts_requests());
        self.sends_on_submit.store(sends, Ordering::Relaxed);
    }

    /// The recent average time of one member I/O, in nanoseconds.
    pub fn member_io_ns_avg(&self) -> u64 {
        self.member_io_ns_avg.load(Ordering::Relaxed)
    }

    fn note_member_io(&self, ns: u64) {
        let avg_ns = self.member_io_ns_avg.load(Ordering::Relaxed);
        self.member_io_ns_avg
            .store(average_step(avg_ns, ns), Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.lock_acquired.fetch_add(1, Ordering::Relaxed);
        match self.state.try_lock() {
            Ok(guard) => return guard,
            Err(std::sync::TryLockError::Poisoned(_)) => panic!("engine lock poisoned"),
            Err(std::sync::TryLockError::WouldBlock) => {}
        }
        // Only a contended acquisition reads the clock.
        let start = Instant::now();
        // A panic while holding the lock is a broken invariant; the server
        // cannot continue from it safely.
        let guard = self.state.lock().expect("engine lock poisoned");
        let waited_ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.lock_contended.fetch_add(1, Ordering::Relaxed);
        self.lock_waited_ns.fetch_add(waited_ns, Ordering::Relaxed);
        guard
    }

    /// How the engine lock has been used since the start.
    pub fn lock_use(&self) -> LockUse {
        LockUse {
            acquired: self.lock_acquired.load(Ordering::Relaxed),
            contended: self.lock_contended.load(Ordering::Relaxed),
            waited_ns: self.lock_waited_ns.load(Ordering::Relaxed),
        }
    }

    pub fn size_bytes(&self) -> u64 {
        self.lock().serving.size_bytes()
    }

    /// The data stripe of the layout served (the new one during a
    /// reshape) and which members spin, as `auto` counts them: what a
    /// connection's handshake says of the export.
    pub fn shape(&self) -> (u64, Vec<Option<bool>>) {
        let mut s = self.lock();
        let v = s.serving.volume_mut();
        (
            v.geometry().stripe_data_bytes(),
            v.balancer().rotational().to_vec(),
        )
    }

    pub fn health(&self) -> Vec<Health> {
        self.lock().serving.health().to_vec()
    }

    /// The devices by slot, as they are now.
    pub fn members(&self) -> Vec<Option<Arc<dyn Member>>> {
        self.lock()
            .members
            .iter()
            .map(|m| m.as_ref().map(|d| Arc::clone(&d.device)))
            .collect()
    }

    /// What performs member I/O: `io-uring` or `threads`.
    pub fn io_backend(&self) -> &'static str {
        self.io.backend()
    }

    /// How busy each member's queue is, by slot (`None`: no device).
    /// Tells the read balancing each member's recent I/O time (levels
    /// with copies only): the near copy is read first. Called by the
    /// server's loop; a handful of atomic loads under the engine lock.
    pub fn refresh_read_latencies(&self) {
        let mut st = self.lock();
        if st.serving.geometry().copies() < 2 {
            return;
        }
        let State {
            serving, members, ..
        } = &mut *st;
        for (slot, d) in members.iter().enumerate() {
            let ns = d.as_ref().map_or(0, |d| d.queue.pace().recent_ns);
            serving.set_member_latency(slot as u32, ns);
        }
    }

    pub fn member_queues(&self) -> Vec<Option<QueueLoad>> {
        self.lock()
            .members
            .iter()
            .map(|m| m.as_ref().map(|d| d.queue.load()))
            .collect()
    }

    /// Puts `device` in `slot` (a replacement). The engine must not be
    /// using the slot: it is faulty or missing.
    pub fn set_member(&self, slot: u32, device: Arc<dyn Member>) {
        let queue = self.io.queue(Arc::clone(&device));
        let mut s = self.lock();
        s.members[slot as usize] = Some(Device { device, queue });
        self.note_devices(&s);
    }

    /// Takes the device out of `slot` (a removal) and returns it; the
    /// device closes once the caller and any I/O the engine issued to it
    /// before the slot failed have let it go. The engine must not be using
    /// the slot: it is faulty or missing.
    pub fn take_member(&self, slot: u32) -> Option<Arc<dyn Member>> {
        let mut s = self.lock();
        let taken = s.members[slot as usize].take().map(|d| d.device);
        self.note_devices(&s);
        taken
    }

    /// Runs `f` on the volume under the engine lock (management calls such
    /// as starting a rebuild). Requests it submits are started by the
    /// caller (`f` must leave no member I/O behind).
    pub fn with_volume<T>(&self, f: impl FnOnce(&mut Volume) -> T) -> T {
        let (out, events) = {
            let mut s = self.lock();
            let out = f(s.serving.volume_mut());
            let (ios, finished, events) = self.take_out(&mut s, None);
            assert!(
                ios.is_empty() && finished.is_empty(),
                "with_volume must not submit"
            );
            (out, events)
        };
        let mut here = InlineWork::new(true, true);
        self.deliver_events(events, &mut here);
        self.perform_inline(here);
        out
    }

    /// Runs `f` on what the engine drives and starts whatever it made
    /// (member I/O, completions, events).
    fn drive(&self, f: impl FnOnce(&mut Serving)) {
        let (ios, finished, events) = {
            let mut s = self.lock();
            f(&mut s.serving);
            self.take_out(&mut s, None)
        };
        let mut here = InlineWork::new(true, true);
        self.issue(ios, &mut here);
        self.deliver_events(events, &mut here);
        Self::deliver(finished);
        self.perform_inline(here);
    }

    /// Takes a member out of use (an operator's word, a device gone), in
    /// every layout the volume is served through.
    pub fn mark_faulty(&self, member: u32, reason: String) {
        self.drive(|s| s.mark_faulty(member, reason));
    }

    /// Holds every other thread's submissions until [`Engine::resume`];
    /// those in flight go on. The caller's own submissions pass.
    pub fn pause(&self) {
        self.lock().paused_by = Some(std::thread::current().id());
    }

    pub fn resume(&self) {
        self.lock().paused_by = None;
        self.resumed.notify_all();
    }

    /// With the engine paused (by the caller): waits for what is in
    /// flight, writes the stripe cache out, and flushes every member, so
    /// that every write acknowledged so far is on the members before a
    /// layout changes hands.
    pub fn empty_paused(&self) -> Result<(), String> {
        for round in 0.. {
            self.wait_idle();
            if self.with_volume(|v| v.cached_stripes()) == 0 {
                break;
            }
            if round == EMPTY_ROUNDS_MAX {
                return Err("the stripe cache would not empty; try again".into());
            }
            self.run(Request::CacheTick { all: true })
                .map_err(|e| format!("emptying the stripe cache: {e}"))?;
        }
        self.run(Request::Flush)
            .map_err(|e| format!("flushing the members: {e}"))?;
        self.wait_idle();
        Ok(())
    }

    /// Starts serving `reshaping` in place of the volume, with `added`
    /// devices in the slots after the members'. The caller has paused the
    /// engine and waited for it to be idle: the volume's state (its
    /// requests, its cache) goes with it.
    pub fn begin_reshape(&self, reshaping: Reshaping, added: Vec<Arc<dyn Member>>) {
        crate::engine::memory::keep_large_buffers(true);
        self.swap_serving(Serving::Reshaping(Box::new(reshaping)), added);
    }

    /// Serves `serving` (a volume of a new layout over the same members
    /// and `added` after them) in place of the volume, under the same
    /// conditions as [`Engine::begin_reshape`].
    pub fn swap_serving(&self, serving: Serving, added: Vec<Arc<dyn Member>>) {
        let mut s = self.lock();
        assert!(s.serving.is_idle(), "a layout changes on an idle volume");
        assert!(matches!(s.serving, Serving::Plain(_)));
        for device in added {
            let queue = self.io.queue(Arc::clone(&device));
            s.members.push(Some(Device { device, queue }));
            s.busy.push(BusyClock::default());
        }
        assert_eq!(s.members.len(), serving.health().len());
        s.serving = serving;
        self.note_devices(&s);
    }

    /// Sets how a volume is set up when a finished reshape hands over.
    pub fn set_volume_setup(&self, setup: VolumeSetup) {
        *self.volume_setup.lock().expect("volume setup") = Some(setup);
    }

    /// A finished reshape hands over to its new layout's volume, set up
    /// as the server sets up any (bitmap, cache, balancing): the engine
    /// is paused, emptied and flushed first, so that the bitmap starts
    /// with nothing owed. False when no finished reshape is served.
    pub fn finish_reshape(&self) -> bool {
        if !self.reshape_progress().is_some_and(|p| p.finished) {
            return false;
        }
        self.pause();
        let flushed = self.empty_paused().is_ok();
        let members = self.members();
        let setup = self.volume_setup.lock().expect("volume setup");
        let handed = flushed
            && self.lock().serving.hand_over(|v| {
                if let Some(setup) = setup.as_ref() {
                    setup(v, &members);
                }
            });
        drop(setup);
        if handed {
            crate::engine::memory::keep_large_buffers(false);
        }
        self.resume();
        handed
    }

    /// Where the reshape in progress stands; `None` without one.
    pub fn reshape_progress(&self) -> Option<ReshapeProgress> {
        let s = self.lock();
        let r = s.serving.reshaping()?;
        Some(ReshapeProgress {
            position_bytes: r.reshape().position_bytes(),
            durable_bytes: r.reshape().durable_bytes(),
            total_bytes: r.reshape().plan().total_bytes(),
            finished: r.is_finished(),
            stuck: r.stuck_reason().map(str::to_string),
            old: r.old_geometry().clone(),
        })
    }

    /// Waits until the reshape has asked something of the host, at most
    /// `timeout`.
    pub fn wait_reshape_actions(&self, timeout: std::time::Duration) {
        let s = self.lock();
        let _unused = self
            .reshape_asked
            .wait_timeout_while(s, timeout, |s| s.reshape_actions.is_empty())
            .expect("engine lock poisoned");
    }

    /// What the reshape asked of the host since the last call.
    pub fn take_reshape_actions(&self) -> Vec<Action> {
        std::mem::take(&mut self.lock().reshape_actions)
    }

    /// Lets the reshape move `bytes` more, when it has fewer than
    /// `unless_above` bytes allowed still (the rate limit's tick).
    pub fn reshape_allow(&self, bytes: u64, unless_above: u64) {
        self.drive(|s| {
            if let Some(r) = s.reshaping_mut() {
                if r.allowed_bytes() <= unless_above {
                    r.allow_bytes(bytes);
                }
            }
        });
    }

    /// The labels now hold the reshape's position `position_bytes`.
    pub fn reshape_persisted(&self, position_bytes: u64) {
        self.drive(|s| {
            if let Some(r) = s.reshaping_mut() {
                r.persisted(position_bytes);
            }
        });
    }

    /// Submits what `f` submits (a maintenance step, say) with `done` as its
    /// completion, like [`Engine::submit`]. False when `f` submitted
    /// nothing.
    pub fn submit_with(
        &self,
        f: impl FnOnce(&mut Serving) -> Option<RequestId>,
        done: Done,
    ) -> bool {
        self.submit_timed(f, done, None, false)
            .is_ok_and(|submitted| submitted)
    }

    /// [`Engine::submit_with`], recording the request's latency (submit to
    /// completion) in the volume's statistics when `timed` says which kind.
    /// `Err(done)` when `client` and the engine is closed to clients.
    fn submit_timed(
        &self,
        f: impl FnOnce(&mut Serving) -> Option<RequestId>,
        done: Done,
        timed: Option<LatencyOf>,
        client: bool,
    ) -> Result<bool, Done> {
        let here = self.submit_leaving_work(f, done, timed, client)?;
        let submitted = here.is_some();
        if let Some(here) = here {
            self.perform_inline(here);
        }
        Ok(submitted)
    }

    /// [`Engine::submit_timed`] up to the fast members' I/Os, which are
    /// left to the caller (`None`: `f` submitted nothing).
    fn submit_leaving_work(
        &self,
        f: impl FnOnce(&mut Serving) -> Option<RequestId>,
        done: Done,
        timed: Option<LatencyOf>,
        client: bool,
    ) -> Result<Option<InlineWork>, Done> {
        let start = Instant::now();
        let (ios, finished, events) = {
            let mut s = self.lock();
            // Bounded by the pause, which its holder ends (`resume`).
            while s
                .paused_by
                .is_some_and(|t| t != std::thread::current().id())
            {
                s = self.resumed.wait(s).expect("engine lock poisoned");
            }
            if client && s.closed_to_clients {
                return Err(done);
            }
            let Some(id) = f(&mut s.serving) else {
                return Ok(None);
            };
            let timed = timed.map(|of| (of, start));
            s.routes.insert(id, Route { done, timed });
            self.take_out(&mut s, None)
        };
        let mut here = InlineWork::new(true, true);
        self.issue(ios, &mut here);
        self.deliver_events(events, &mut here);
        Self::deliver(finished);
        Ok(Some(here))
    }

    /// Hands events to the hook (which writes the labels), then tells the
    /// volume which member failures are now recorded: the writes it held
    /// back for them are released here and delivered. Members whose label
    /// could not be written are failed in turn, and their failure recorded
    /// on the rest; each round fails at least one more member, so the loop
    /// ends within the member count. I/Os this makes are started, or left
    /// in `here` for the caller to perform.
    fn deliver_events(&self, mut events: Vec<Event>, here: &mut InlineWork) {
        for _ in 0..=self.member_count {
            if events.is_empty() {
                return;
            }
            let mut to_fail = Vec::new();
            if let Some(hook) = self.on_event.lock().expect("event hook").as_mut() {
                for e in &events {
                    to_fail.extend(hook(e));
                }
            }
            let recorded: SmallVec<[u32; 2]> = events
                .iter()
                .filter_map(|e| match e {
                    Event::MemberFaulty { member, .. } => Some(*member),
                    _ => None,
                })
                .collect();
            if recorded.is_empty() && to_fail.is_empty() {
                return;
            }
            let (ios, finished, next) = {
                let mut s = self.lock();
                for (member, reason) in to_fail {
                    s.serving.mark_faulty(member, reason);
                }
                for member in recorded {
                    s.serving.failure_recorded(member);
                }
                self.take_out(&mut s, None)
            };
            events = next;
            self.issue(ios, here);
            Self::deliver(finished);
        }
        assert!(events.is_empty(), "label failures did not settle");
    }

    /// Sends alerts to `alerts` from now on (once).
    pub fn set_alerts(&self, alerts: Arc<crate::observe::alerts::Alerts>) {
        let _ = self.alerts.set(alerts);
    }

    /// Raises `a` (`alerts.rs`): logged, and run by `--on-event`.
    pub fn alert(&self, a: crate::observe::alerts::Alert) {
        match self.alerts.get() {
            Some(alerts) => alerts.raise(a),
            None => tracing::warn!(event = a.kind.name(), detail = %a.detail, "event"),
        }
    }

    /// By slot: nanoseconds each member has been busy since the start
    /// (at least one I/O on its device).
    pub fn member_busy_ns(&self) -> Vec<u64> {
        self.lock().busy.iter().map(|b| b.busy_ns).collect()
    }

    /// The device in `slot` as it describes itself, if there is one.
    pub fn member_name(&self, slot: u32) -> Option<String> {
        self.members()
            .get(slot as usize)
            .and_then(|m| m.as_ref().map(|m| m.describe().to_string()))
    }

    /// Sets the hook that sees every event (label keeping).
    pub fn on_event(&self, hook: EventHook) {
        *self.on_event.lock().expect("event hook") = Some(hook);
    }

    /// Starts `req`; `done` is called exactly once, when it ends: on this
    /// thread when it needs no member I/O or its I/Os were fast enough to
    /// perform here, otherwise on the I/O layer's thread that completes
    /// its last member I/O.
    pub fn submit(&self, req: Request, done: Done) {
        let timed = req.latency_of();
        let _ = self.submit_timed(|v| Some(v.submit(req)), done, timed, false);
    }

    /// [`Engine::submit`] for a client's request: once the engine is closed
    /// to clients, `done` comes back unused (the caller answers
    /// ESHUTDOWN). Checked under the engine lock, which the submission takes
    /// anyway.
    ///
    /// The I/Os of members fast enough to perform on this thread are not
    /// performed yet: they are the returned [`InlineIos`]'s, performed when
    /// it runs or is dropped. A connection worker that finds it empty knows
    /// the submission is over (every I/O is with its member) and can read
    /// the next request without handing the socket to another worker.
    pub fn submit_client(&self, req: Request, done: Done) -> Result<InlineIos<'_>, Done> {
        let timed = req.latency_of();
        let here = self.submit_leaving_work(|v| Some(v.submit(req)), done, timed, true)?;
        Ok(InlineIos {
            engine: self,
            here: here.unwrap_or_else(|| InlineWork::new(true, true)),
        })
    }

    /// Refuses client requests from now on; those already submitted finish.
    pub fn close_to_clients(&self) {
        self.lock().closed_to_clients = true;
    }

    /// A snapshot of the volume's statistics.
    pub fn stats(&self) -> platter_core::stats::Stats {
        self.lock().serving.stats()
    }

    /// Zeroes the volume's statistics.
    pub fn reset_stats(&self) {
        self.lock().serving.reset_stats();
    }

    /// Runs a request and waits for its result (for management work).
    pub fn run(&self, req: Request) -> Result<Reply, VolumeError> {
        let slot = Arc::new((Mutex::new(None), Condvar::new()));
        let s2 = Arc::clone(&slot);
        self.submit(
            req,
            Box::new(move |r| {
                *s2.0.lock().expect("result slot") = Some(r);
                s2.1.notify_all();
            }),
        );
        let mut g = slot.0.lock().expect("result slot");
        loop {
            if let Some(r) = g.take() {
                return r;
            }
            g = slot.1.wait(g).expect("result slot");
        }
    }

    /// Blocks until no request is in the engine.
    pub fn wait_idle(&self) {
        let mut s = self.lock();
        while !s.serving.is_idle() {
            s.idle_waiters += 1;
            s = self.idle.wait(s).expect("engine lock poisoned");
            s.idle_waiters -= 1;
        }
    }

    /// Hands each I/O to its member's queue, or leaves it in `here` when
    /// its member is fast enough for this thread to perform it. Outside
    /// the engine lock: a queue may complete an I/O on another thread at
    /// once.
    fn issue(&self, ios: Ios, here: &mut InlineWork) {
        for (io, queue) in ios {
            let Some(queue) = queue else {
                // The engine addresses only members in use, but an I/O
                // taken from it just before its member failed can be
                // started after the operator removed the device: it fails
                // like the member did.
                let member = io.member;
                here.steps.push_back(InlineStep::Ended(
                    io.id,
                    member,
                    Completed {
                        result: Err(format!("member {member} was removed").into()),
                        device_ns: 0,
                        timed_out: false,
                        may_send: here.may_send,
                    },
                ));
                continue;
            };
            if here.takes(queue.as_ref()) {
                here.steps.push_back(InlineStep::Perform(io, queue));
                continue;
            }
            let MemberIo { id, member, op } = io;
            let engine = self.me.upgrade().expect("the engine outlives its I/Os");
            let done = Box::new(move |c| engine.complete(id, member, c));
            queue.submit(op, done, here.may_send);
        }
    }

    /// Performs the I/Os left in `here`, and those their completions make
    /// (the next phase of a request), until none is left. Each I/O is
    /// still one of its queue's: it counts in `stats`, and one that
    /// outlives `--member-timeout` is completed as timed out by the
    /// watchdog (failing the member) while this thread stays in the
    /// device, as a member I/O thread would; other threads see the member
    /// as slow meanwhile ([`MemberQueue::pace`]) and hand its I/Os
    /// over.
    fn perform_inline(&self, mut here: InlineWork) {
        while let Some(step) = here.steps.pop_front() {
            match step {
                InlineStep::Perform(io, queue) => {
                    let MemberIo { id, member, op } = io;
                    let engine = self.me.upgrade().expect("the engine outlives its I/Os");
                    let timed_out = Box::new(move |c| engine.complete(id, member, c));
                    if let Some(c) = queue.perform_here(op, timed_out) {
                        self.settle(id, member, c, &mut here);
                    }
                }
                InlineStep::Ended(id, member, c) => self.settle(id, member, c, &mut here),
            }
        }
    }

    /// One member I/O ended on a thread of the I/O layer.
    fn complete(&self, id: IoId, member: u32, c: Completed) {
        let mut here = InlineWork::new(false, c.may_send);
        self.settle(id, member, c, &mut here);
        self.perform_inline(here);
    }

    /// One member I/O ended: the volume hears of it, and whatever that lets
    /// it do next is started (or left in `here`), delivered and told.
    fn settle(&self, id: IoId, member: u32, c: Completed, here: &mut InlineWork) {
        let now = Instant::now();
        if !c.timed_out {
            self.note_member_io(c.device_ns);
        }
        let (ios, finished, events) = {
            let mut s = self.lock();
            match &c.result {
                Err(e) if c.timed_out => {
                    // Once per member: the I/Os queued behind the first
                    // one time out with it.
                    if matches!(
                        s.serving.health()[member as usize],
                        Health::Online | Health::Rebuilding
                    ) {
                        tracing::error!(
                            member,
                            reason = %e.message,
                            "member I/O timed out; failing the member"
                        );
                    }
                    // Not left to the volume's read-error handling, which
                    // would try to correct the range on the same member and
                    // wait for it again.
                    s.serving
                        .mark_faulty(member, format!("I/O timed out: {}", e.message));
                }
                _ => {
                    s.serving
                        .record_latency(LatencyOf::Member(member), c.device_ns);
                    if let Some(b) = s.busy.get_mut(member as usize) {
                        b.add(now, c.device_ns);
                    }
                }
            }
            s.serving.io_done(id, c.result);
            self.take_out(&mut s, Some(now))
        };
        self.issue(ios, here);
        self.deliver_events(events, here);
        Self::deliver(finished);
    }

    /// Everything the volume has for the host after a change (its I/Os,
    /// finished requests and events), waking `wait_idle` once it is idle.
    fn take_out(&self, s: &mut State, now: Option<Instant>) -> (Ios, Finished, Vec<Event>) {
        let mut ios = Ios::new();
        let mut finished = Finished::new();
        self.drain(s, &mut ios, &mut finished, now);
        if s.idle_waiters > 0 && s.serving.is_idle() {
            self.idle.notify_all();
        }
        (ios, finished, std::mem::take(&mut s.events))
    }

    /// Takes the engine's I/Os, completions, actions and events through
    /// the engine's one loop ([`drive::pump`]). `now`: the time it is, if
    /// the caller just read the clock (completions are timed to it);
    /// otherwise the clock is read for the first timed completion.
    fn drain(&self, s: &mut State, ios: &mut Ios, finished: &mut Finished, now: Option<Instant>) {
        let mut out = Drain {
            s,
            ios,
            finished,
            now,
            asked: false,
        };
        drive::pump(&mut out);
        if out.asked {
            self.reshape_asked.notify_all();
        }
    }

    fn deliver(finished: Finished) {
        for (done, result) in finished {
            done(result);
        }
    }
}

/// The host side of one drain under the engine lock: I/Os to issue and
/// requests to answer once the lock is dropped, actions for the upkeep
/// thread, events logged and kept for status.
struct Drain<'a> {
    s: &'a mut State,
    ios: &'a mut Ios,
    finished: &'a mut Finished,
    now: Option<Instant>,
    asked: bool,
}

impl drive::Host for Drain<'_> {
    type Engine = Serving;
    fn engine(&mut self) -> &mut Serving {
        &mut self.s.serving
    }

    fn issue(&mut self, io: MemberIo) {
        let queue = self.s.members[io.member as usize]
            .as_ref()
            .map(|d| Arc::clone(&d.queue));
        self.ios.push((io, queue));
    }

    fn complete(&mut self, c: platter_core::volume::Completion) {
        let route = self
            .s
            .routes
            .remove(&c.id)
            .expect("every completion has a route");
        if let Some((of, start)) = route.timed {
            let end = *self.now.get_or_insert_with(Instant::now);
            self.s.serving.record_latency(of, ns_between(start, end));
        }
        self.finished.push((route.done, c.result));
    }

    fn action(&mut self, action: Action) {
        self.s.reshape_actions.push(action);
        self.asked = true;
    }

    fn event(&mut self, event: Event) {
        match &event {
            Event::MemberFaulty { member, reason } => {
                tracing::warn!(member, reason = %reason, "member marked faulty");
            }
            Event::NoSpace { member, reason } => {
                let now = Instant::now();
                if self
                    .s
                    .no_space_logged
                    .is_none_or(|t| now.duration_since(t) >= NO_SPACE_LOG_INTERVAL)
                {
                    tracing::warn!(
                        member,
                        reason = %reason,
                        not_logged_since_last = self.s.no_space_unlogged,
                        "write refused: no space left on the member; it stays in use, the \
                         client gets ENOSPC, and the stripes are resynced once there is room"
                    );
                    self.s.no_space_logged = Some(now);
                    self.s.no_space_unlogged = 0;
                } else {
                    self.s.no_space_unlogged += 1;
                }
            }
            Event::RebuildDone { member } => {
                tracing::info!(member, "rebuild finished; member online");
            }
            Event::ReadErrorCorrected {
                member,
                offset_bytes,
                len_bytes,
            } => {
                tracing::warn!(
                    member,
                    offset_bytes,
                    len_bytes,
                    "read error corrected from another copy; member stays online"
                );
            }
        }
        self.s.events.push(event);
    }
}

fn ns_between(start: Instant, end: Instant) -> u64 {
    u64::try_from(end.saturating_duration_since(start).as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::BusyClock;
    use std::time::{Duration, Instant};

    /// Overlapping I/Os count once; a gap counts nothing.
    #[test]
    fn busy_time_is_the_union_of_io_intervals() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let ms = |n: u64| n * 1_000_000;
        let mut b = BusyClock::default();
        b.add(at(10), ms(10)); // [0, 10]
        b.add(at(15), ms(10)); // [5, 15]: 5 more
        b.add(at(30), ms(5)); // [25, 30]: 5 more, the gap 15..25 not
        b.add(at(28), ms(20)); // [8, 28], arriving late: nothing more
        assert_eq!(b.busy_ns, ms(20));
    }
}
