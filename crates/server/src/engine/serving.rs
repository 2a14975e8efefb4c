//! What the engine drives: a volume, or a volume being reshaped (two
//! layouts' volumes over the same members, `platter_core::reshape`). The
//! engine asks the same of both; only the upkeep thread and management
//! see the difference.

use platter_core::drive::Engine;
use platter_core::geometry::Geometry;
use platter_core::reshape::{Action, Reshaping};
use platter_core::stats::{LatencyOf, Stats};
use platter_core::volume::{
    Completion, Event, Health, IoId, IoResult, MemberIo, Request, RequestId, Volume,
};

// One lives in the engine's state, for the server's life: its size does
// not matter, and the plain volume stays one pointer closer.
#[allow(clippy::large_enum_variant)]
pub enum Serving {
    Plain(Volume),
    Reshaping(Box<Reshaping>),
}

impl Serving {
    /// The volume for queries and settings: during a reshape, the new
    /// layout's (see [`Reshaping::new_volume_mut`]).
    pub fn volume_mut(&mut self) -> &mut Volume {
        match self {
            Serving::Plain(v) => v,
            Serving::Reshaping(r) => r.new_volume_mut(),
        }
    }

    pub fn reshaping(&self) -> Option<&Reshaping> {
        match self {
            Serving::Plain(_) => None,
            Serving::Reshaping(r) => Some(r),
        }
    }

    pub fn reshaping_mut(&mut self) -> Option<&mut Reshaping> {
        match self {
            Serving::Plain(_) => None,
            Serving::Reshaping(r) => Some(r),
        }
    }

    /// The size clients see: during a reshape, the old one.
    pub fn size_bytes(&self) -> u64 {
        match self {
            Serving::Plain(v) => v.size_bytes(),
            Serving::Reshaping(r) => r.size_bytes(),
        }
    }

    /// During a reshape, the new layout (which has every member).
    pub fn geometry(&self) -> &Geometry {
        match self {
            Serving::Plain(v) => v.geometry(),
            Serving::Reshaping(r) => r.new_geometry(),
        }
    }

    pub fn health(&self) -> &[Health] {
        match self {
            Serving::Plain(v) => v.health(),
            Serving::Reshaping(r) => r.health(),
        }
    }

    pub fn is_idle(&self) -> bool {
        match self {
            Serving::Plain(v) => v.is_idle(),
            Serving::Reshaping(r) => r.is_idle(),
        }
    }

    /// Hands a finished reshape over to its new layout's volume, after
    /// `setup` (a bitmap, a cache). False, with nothing changed, unless a
    /// finished reshape with nothing in flight is served.
    pub fn hand_over(&mut self, setup: impl FnOnce(&mut Volume)) -> bool {
        if !matches!(self, Serving::Reshaping(r) if r.is_finished() && r.is_idle()) {
            return false;
        }
        // Moved out of place for the instant of the swap (under the
        // engine lock): a one-member stripe nobody sees stands in.
        let stand_in = Volume::new(
            Geometry::new(platter_core::geometry::GeometrySpec {
                level: platter_core::Level::Stripe,
                parity_layout: platter_core::ParityLayout::DEFAULT,
                copies: 1,
                interleave_bytes: 512,
                data_offset_bytes: 4096,
                member_data_bytes: vec![512],
            })
            .expect("a one-member stripe"),
            vec![Health::Online],
            platter_core::volume::Limits::default(),
        );
        let Serving::Reshaping(r) = std::mem::replace(self, Serving::Plain(stand_in)) else {
            unreachable!("checked above");
        };
        let mut vol = r.into_new_volume();
        setup(&mut vol);
        *self = Serving::Plain(vol);
        true
    }

    pub fn mark_faulty(&mut self, member: u32, reason: String) {
        match self {
            Serving::Plain(v) => v.mark_faulty(member, reason),
            Serving::Reshaping(r) => r.mark_faulty(member, reason),
        }
    }

    pub fn failure_recorded(&mut self, member: u32) {
        match self {
            Serving::Plain(v) => v.failure_recorded(member),
            Serving::Reshaping(r) => r.failure_recorded(member),
        }
    }

    pub fn set_member_latency(&mut self, member: u32, latency_ns: u64) {
        match self {
            Serving::Plain(v) => v.set_member_latency(member, latency_ns),
            Serving::Reshaping(r) => r.set_member_latency(member, latency_ns),
        }
    }

    pub fn record_latency(&mut self, of: LatencyOf, ns: u64) {
        self.volume_mut().record_latency(of, ns);
    }

    pub fn stats(&mut self) -> Stats {
        self.volume_mut().stats()
    }

    pub fn reset_stats(&mut self) {
        self.volume_mut().reset_stats();
    }
}

impl From<Volume> for Serving {
    fn from(v: Volume) -> Serving {
        Serving::Plain(v)
    }
}

impl From<Reshaping> for Serving {
    fn from(r: Reshaping) -> Serving {
        Serving::Reshaping(Box::new(r))
    }
}

impl Serving {
    fn engine(&mut self) -> &mut dyn Engine {
        match self {
            Serving::Plain(v) => v,
            Serving::Reshaping(r) => r.as_mut(),
        }
    }
}

/// The engine behind the lock, whichever it is now.
impl Engine for Serving {
    fn submit(&mut self, req: Request) -> RequestId {
        self.engine().submit(req)
    }
    fn io_done(&mut self, io: IoId, result: IoResult) {
        self.engine().io_done(io, result)
    }
    fn next_io(&mut self) -> Option<MemberIo> {
        self.engine().next_io()
    }
    fn next_completion(&mut self) -> Option<Completion> {
        self.engine().next_completion()
    }
    fn next_event(&mut self) -> Option<Event> {
        self.engine().next_event()
    }
    /// What a reshape needs of the host (labels, its end); none without.
    fn next_action(&mut self) -> Option<Action> {
        self.engine().next_action()
    }
}
