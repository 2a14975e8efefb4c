//! The one loop between an engine and its host.
//!
//! An engine ([`Volume`], or a [`Reshaping`] over two of them) is sans-I/O:
//! it is handed requests and member I/O results, and says what it wants
//! done through four queues (member I/O, finished requests, events for the
//! operator, actions for the host's labels). Every host (the server, the
//! simulator, the benchmarks, the test kit) moves those queues into its own
//! world the same way, and the order it does so in is part of the
//! behaviour a seeded run replays: [`pump`] is that loop, written once.
//! A host says what each item means to it ([`Host`]) and, when its world
//! answers (a member I/O completed, a timer fired), hands the answer to
//! the engine and pumps again.

use crate::member_io::{IoId, IoResult, MemberIo};
use crate::reshape::{Action, Reshaping};
use crate::volume::{Completion, Event, Request, RequestId, Volume};

/// What a host needs of an engine: its four queues and its two inputs.
pub trait Engine {
    fn submit(&mut self, req: Request) -> RequestId;
    fn io_done(&mut self, io: IoId, result: IoResult);
    fn next_io(&mut self) -> Option<MemberIo>;
    fn next_completion(&mut self) -> Option<Completion>;
    fn next_event(&mut self) -> Option<Event>;
    /// Only a reshape asks its host to do something (write labels).
    fn next_action(&mut self) -> Option<Action> {
        None
    }
}

/// A host: where each of the engine's outputs goes. The hooks may call the
/// engine again (submit, complete an I/O at once): whatever that makes the
/// engine say is taken by the same [`pump`].
pub trait Host {
    type Engine: Engine + ?Sized;
    fn engine(&mut self) -> &mut Self::Engine;
    /// A member I/O to perform; its result goes to [`Engine::io_done`].
    fn issue(&mut self, io: MemberIo);
    /// A request finished.
    fn complete(&mut self, done: Completion);
    /// A member failed, ran out of space, ...: the operator's business.
    fn event(&mut self, event: Event);
    /// A reshape's request to the host (persist its position, ...).
    fn action(&mut self, action: Action) {
        panic!("{action:?} asked of a host that drives no reshape");
    }
}

/// Moves everything the engine has to say into the host, in one fixed
/// order (member I/O, then finished requests, then actions, then events),
/// until a round finds nothing. True when anything moved.
pub fn pump<H: Host + ?Sized>(host: &mut H) -> bool {
    let mut moved = false;
    // Bounded: every round takes what the engine queued, and the engine
    // queues only in answer to the host, whose hooks answer finitely.
    loop {
        let mut progressed = false;
        while let Some(io) = host.engine().next_io() {
            progressed = true;
            host.issue(io);
        }
        while let Some(done) = host.engine().next_completion() {
            progressed = true;
            host.complete(done);
        }
        while let Some(action) = host.engine().next_action() {
            progressed = true;
            host.action(action);
        }
        while let Some(event) = host.engine().next_event() {
            progressed = true;
            host.event(event);
        }
        if !progressed {
            return moved;
        }
        moved = true;
    }
}

impl Engine for Volume {
    fn submit(&mut self, req: Request) -> RequestId {
        Volume::submit(self, req)
    }
    fn io_done(&mut self, io: IoId, result: IoResult) {
        Volume::io_done(self, io, result)
    }
    fn next_io(&mut self) -> Option<MemberIo> {
        Volume::next_io(self)
    }
    fn next_completion(&mut self) -> Option<Completion> {
        Volume::next_completion(self)
    }
    fn next_event(&mut self) -> Option<Event> {
        Volume::next_event(self)
    }
}

impl Engine for Reshaping {
    fn submit(&mut self, req: Request) -> RequestId {
        Reshaping::submit(self, req)
    }
    fn io_done(&mut self, io: IoId, result: IoResult) {
        Reshaping::io_done(self, io, result)
    }
    fn next_io(&mut self) -> Option<MemberIo> {
        Reshaping::next_io(self)
    }
    fn next_completion(&mut self) -> Option<Completion> {
        Reshaping::next_completion(self)
    }
    fn next_event(&mut self) -> Option<Event> {
        Reshaping::next_event(self)
    }
    fn next_action(&mut self) -> Option<Action> {
        Reshaping::next_action(self)
    }
}
