//! What the volume has for the host after each change, taken under the
//! engine lock through the engine's one loop (`platter_core::drive`): I/Os
//! to issue and requests to answer once the lock is dropped, the reshape's
//! actions for the upkeep thread, events logged and kept for status.

use super::*;

/// At most one log line per this long for writes refused for space.
pub(super) const NO_SPACE_LOG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// The host side of one drain under the engine lock: I/Os to issue and
/// requests to answer once the lock is dropped, actions for the upkeep
/// thread, events logged and kept for status.
pub(super) struct Drain<'a> {
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

impl Engine {
    /// Everything the volume has for the host after a change (its I/Os,
    /// finished requests and events), waking `wait_idle` once it is idle.
    pub(super) fn take_out(
        &self,
        s: &mut State,
        now: Option<Instant>,
    ) -> (Ios, Finished, Vec<Event>) {
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
    pub(super) fn drain(
        &self,
        s: &mut State,
        ios: &mut Ios,
        finished: &mut Finished,
        now: Option<Instant>,
    ) {
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

    pub(super) fn deliver(finished: Finished) {
        for (done, result) in finished {
            done(result);
        }
    }
}
