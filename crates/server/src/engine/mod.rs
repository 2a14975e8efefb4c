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
//! The engine is the same state machine the simulator drives; only this module
//! knows that members are real devices. Its rooms: `inline` (the I/O path:
//! issuing, performing fast members' I/O on the submitting thread,
//! settling completions), `drain` (what the volume says after each change),
//! `reshape_control` (pausing, swapping and the reshape's requests),
//! `busy` (each member's busy time); this file holds the lock and the
//! submission paths.

pub(crate) mod memory;
pub(crate) mod meta;
pub(crate) mod read_policy;
pub mod resume;
pub(crate) mod serving;
pub(crate) mod upkeep;

mod busy;
mod drain;
mod inline;
mod reshape_control;

use busy::BusyClock;
pub use inline::InlineIos;
use inline::InlineWork;
pub use reshape_control::ReshapeProgress;

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

    /// The I/O layer the engine's members are reached through: an engine
    /// made in front of this one's volume uses the same.
    pub fn io(&self) -> Arc<dyn IoLayer> {
        Arc::clone(&self.io)
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

    /// With the engine paused and idle (by the caller): `device` serves
    /// `slot` in place of the device there, holding the same bytes (a
    /// subdisk while it moves, and at its new place once moved), so the
    /// slot's health stays. Returns the device it took the place of.
    /// `delay`: the latency injected into it, when its name is not one
    /// the I/O layer was given (`serve --inject`).
    pub fn swap_device(
        &self,
        slot: u32,
        device: Arc<dyn Member>,
        delay: Option<platter_io::aio::Delay>,
    ) -> Option<Arc<dyn Member>> {
        let queue = self.io.queue_delayed(Arc::clone(&device), delay);
        let mut s = self.lock();
        assert!(s.serving.is_idle(), "a device changes under an idle volume");
        let old = s.members[slot as usize]
            .replace(Device { device, queue })
            .map(|d| d.device);
        self.note_devices(&s);
        old
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
    /// Drops the event hook (the labels' and alerts'): a volume taken
    /// out of a server.
    pub fn clear_event_hook(&self) {
        *self.on_event.lock().expect("event hook") = None;
    }

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
}

fn ns_between(start: Instant, end: Instant) -> u64 {
    u64::try_from(end.saturating_duration_since(start).as_nanos()).unwrap_or(u64::MAX)
}
