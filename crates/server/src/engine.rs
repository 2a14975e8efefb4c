//! The engine pump: one [`Volume`] behind a mutex, driven by whichever
//! worker thread has work. A worker submits a request, takes the member I/Os
//! the engine emits, performs them outside the lock, reports the results, and
//! repeats until the engine asks for nothing more. Completions are handed to
//! their callbacks outside the lock.
//!
//! The engine is the same state machine the simulator drives; only this file
//! knows that members are real devices.

use platter_core::volume::{
    Event, Health, IdMap, IoId, IoResult, MemberIo, Reply, Request, RequestId, Volume, VolumeError,
};
use platter_io::Member;
use smallvec::SmallVec;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

pub type Done = Box<dyn FnOnce(Result<Reply, VolumeError>) + Send>;

/// Member I/Os taken from the engine in one round; most requests make few.
type Ios = SmallVec<[MemberIo; 4]>;
type Finished = SmallVec<[(Done, Result<Reply, VolumeError>); 2]>;

struct State {
    volume: Volume,
    routes: IdMap<RequestId, Done>,
    events: Vec<Event>,
    idle_waiters: u32,
}

pub struct Engine {
    state: Mutex<State>,
    idle: Condvar,
    /// By slot; `None` where no device is present.
    members: Vec<Option<Arc<dyn Member>>>,
}

impl Engine {
    pub fn new(volume: Volume, members: Vec<Option<Arc<dyn Member>>>) -> Engine {
        assert_eq!(members.len(), volume.geometry().members() as usize);
        Engine {
            state: Mutex::new(State {
                volume,
                routes: IdMap::default(),
                events: Vec::new(),
                idle_waiters: 0,
            }),
            idle: Condvar::new(),
            members,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock is a broken invariant; the server
        // cannot continue from it safely.
        self.state.lock().expect("engine lock poisoned")
    }

    pub fn size_bytes(&self) -> u64 {
        self.lock().volume.size_bytes()
    }

    pub fn health(&self) -> Vec<Health> {
        self.lock().volume.health().to_vec()
    }

    pub fn members(&self) -> &[Option<Arc<dyn Member>>] {
        &self.members
    }

    pub fn take_events(&self) -> Vec<Event> {
        std::mem::take(&mut self.lock().events)
    }

    /// Runs `req` to completion on this thread (and any other work it
    /// unblocks); `done` is called exactly once.
    pub fn submit(&self, req: Request, done: Done) {
        let mut ios = Ios::new();
        let mut finished = Finished::new();
        {
            let mut s = self.lock();
            let id = s.volume.submit(req);
            s.routes.insert(id, done);
            Self::drain(&mut s, &mut ios, &mut finished);
            if s.idle_waiters > 0 && s.volume.is_idle() {
                self.idle.notify_all();
            }
        }
        Self::deliver(finished);
        self.pump(ios);
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
        while !s.volume.is_idle() {
            s.idle_waiters += 1;
            s = self.idle.wait(s).expect("engine lock poisoned");
            s.idle_waiters -= 1;
        }
    }

    fn pump(&self, mut ios: Ios) {
        // Each round performs the I/Os of finished plans; a request's plan
        // has a bounded number of phases, so this ends.
        while !ios.is_empty() {
            let results: SmallVec<[(IoId, IoResult); 4]> =
                ios.drain(..).map(|io| (io.id, self.perform(&io))).collect();
            let mut finished = Finished::new();
            {
                let mut s = self.lock();
                for (id, r) in results {
                    s.volume.io_done(id, r);
                }
                Self::drain(&mut s, &mut ios, &mut finished);
                if s.idle_waiters > 0 && s.volume.is_idle() {
                    self.idle.notify_all();
                }
            }
            Self::deliver(finished);
        }
    }

    fn drain(s: &mut State, ios: &mut Ios, finished: &mut Finished) {
        while let Some(io) = s.volume.next_io() {
            ios.push(io);
        }
        while let Some(c) = s.volume.next_completion() {
            let done = s
                .routes
                .remove(&c.id)
                .expect("every completion has a route");
            finished.push((done, c.result));
        }
        while let Some(e) = s.volume.next_event() {
            match &e {
                Event::MemberFaulty { member, reason } => {
                    tracing::error!(member, reason = %reason, "member marked faulty");
                }
                Event::RebuildDone { member } => {
                    tracing::info!(member, "rebuild finished; member online");
                }
            }
            s.events.push(e);
        }
    }

    fn deliver(finished: Finished) {
        for (done, result) in finished {
            done(result);
        }
    }

    fn perform(&self, io: &MemberIo) -> IoResult {
        let member = self.members[io.member as usize]
            .as_ref()
            .expect("the engine never addresses an absent member");
        platter_io::executor::perform(member.as_ref(), &io.op)
    }
}
