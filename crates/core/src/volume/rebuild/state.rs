//! A rebuild's state: the member, its cursor and the one step in flight,
//! and the rules that move them. The volume's side (`mod.rs`) submits the
//! steps, plans their I/O and changes the member's health.

use super::super::RequestId;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::volume) struct RebuildState {
    member: u32,
    /// Stripes below this are written on the member.
    cursor_stripe: u64,
    /// The step in flight, if any (steps run one at a time, in order). A
    /// step outlives its rebuild when the member fails under it: it then
    /// belongs to no rebuild, writes nothing and ends failed, and a later
    /// rebuild of the slot never takes it for its own.
    step: Option<RequestId>,
    /// Only the regions the member missed are written
    /// ([`Volume::start_partial_rebuild`]); the cursor passes the rest.
    partial: bool,
}

impl RebuildState {
    pub fn new(member: u32, from_stripe: u64, stripes: u64, partial: bool) -> RebuildState {
        RebuildState {
            member,
            cursor_stripe: from_stripe.min(stripes),
            step: None,
            partial,
        }
    }

    pub fn member(&self) -> u32 {
        self.member
    }

    pub fn cursor_stripe(&self) -> u64 {
        self.cursor_stripe
    }

    pub fn partial(&self) -> bool {
        self.partial
    }

    pub fn step_in_flight(&self) -> bool {
        self.step.is_some()
    }

    /// The rebuild ends, its cursor at `stripes` and no step in flight;
    /// the member it rebuilt.
    pub fn finish(self, stripes: u64) -> u32 {
        assert!(self.step.is_none(), "a rebuild ends between steps");
        assert!(self.cursor_stripe >= stripes, "a rebuild ends at the end");
        self.member
    }

    /// Whether `member` holds good data for `stripe`: it is the member
    /// being rebuilt and the cursor is past the stripe.
    pub fn serves(&self, member: u32, stripe: u64) -> bool {
        self.member == member && stripe < self.cursor_stripe
    }

    /// Of `[.., end_stripe)`, the end of the stripes `member` holds good
    /// data for (0 for a member not being rebuilt).
    pub fn serves_until(&self, member: u32, end_stripe: u64) -> u64 {
        if self.member == member {
            self.cursor_stripe.min(end_stripe)
        } else {
            0
        }
    }

    pub fn owns(&self, id: RequestId) -> bool {
        self.step == Some(id)
    }

    /// The next step starts at `first_stripe` (a partial rebuild skips
    /// what the member did not miss) as request `id`.
    pub fn begin_step(&mut self, first_stripe: u64, id: RequestId) {
        assert!(self.step.is_none(), "rebuild steps run one at a time");
        assert!(
            first_stripe >= self.cursor_stripe,
            "a rebuild moves forward"
        );
        self.cursor_stripe = first_stripe;
        self.step = Some(id);
    }

    /// Nothing left from `end_stripe` (the end): the cursor stands there.
    pub fn skip_to_end(&mut self, end_stripe: u64) {
        assert!(self.step.is_none() && end_stripe >= self.cursor_stripe);
        self.cursor_stripe = end_stripe;
    }

    /// Its step ended; on success the cursor moves past it. True when the
    /// cursor reached `stripes`, the end.
    pub fn step_done(
        &mut self,
        first_stripe: u64,
        stripe_count: u64,
        ok: bool,
        stripes: u64,
    ) -> bool {
        assert!(self.step.take().is_some(), "a step of this rebuild ended");
        if !ok {
            return false;
        }
        assert_eq!(
            self.cursor_stripe, first_stripe,
            "rebuild steps run in order"
        );
        self.cursor_stripe = first_stripe + stripe_count;
        self.cursor_stripe >= stripes
    }

    /// Its own invariants over a volume of `stripes`: the cursor within
    /// it; a step in flight is live and starts at the cursor (`step_at`
    /// says where a live rebuild step starts).
    pub fn check(&self, stripes: u64, step_at: impl Fn(RequestId) -> Option<u64>) {
        assert!(
            self.cursor_stripe <= stripes,
            "the rebuild's cursor past the end"
        );
        if let Some(step) = self.step {
            assert_eq!(
                step_at(step),
                Some(self.cursor_stripe),
                "the rebuild's step {step:?} is a live step at its cursor"
            );
        }
    }
}
