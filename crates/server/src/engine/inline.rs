//! Member I/O on the submitting thread: a request's I/Os to members fast
//! enough (memory, a page cache) are performed where the request was
//! submitted instead of handed to the member's queue and back (two thread
//! wake-ups), within a time budget; everything else goes to the queues,
//! and each completion settles into the volume and issues what follows.

use super::*;

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
pub(super) const INLINE_IO_NS_MAX: u64 = 40_000;

/// About a memory copy at 2 GB/s, on a busy machine.
pub(super) const INLINE_NS_PER_KIB: u64 = 500;

/// ... unless the member has had an I/O on it this long without
/// answering any ([`platter_io::aio::Pace::oldest_out_ns`]): the device
/// may have stopped answering, and no more threads should wait in it.
/// Well above a fast I/O, so that one preempted by the scheduler on a busy
/// machine rarely trips it; I/Os queued for a slot or a thread do not
/// count.
pub(super) const INLINE_STALL_NS: u64 = 1_000_000;

/// ... or this many of its I/Os are being performed on callers' threads
/// already: a device that stops answering holds at most about this many
/// of the threads that read requests (each until `--member-timeout` fails
/// the member and the device answers). The check and the count are not
/// one atomic step, so threads deciding at the same instant may pass it
/// together; on a 2-core machine more than 2 at once gain nothing anyway.
pub(super) const INLINE_PER_MEMBER_MAX: u32 = 4;

/// What one thread takes on performing itself, at most, per submission or
/// completion (expected times summed): a request with many I/Os on fast
/// members runs them one after another while that stays short, and hands
/// the rest over so they run beside it.
pub(super) const INLINE_WORK_NS_MAX: u64 = 1_000_000;

/// What the thread driving the engine does itself: fast members' I/Os,
/// performed in a loop ([`Engine::perform_inline`]) rather than by recursion
/// as each one's completion makes the next.
pub(super) struct InlineWork {
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

pub(super) enum InlineStep {
    Perform(MemberIo, Arc<dyn MemberQueue>),
    /// An I/O that ended without reaching a device.
    Ended(IoId, u32, Completed),
}

impl InlineWork {
    pub(super) fn new(inline: bool, may_send: bool) -> InlineWork {
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
    pub(super) engine: &'a Engine,
    pub(super) here: InlineWork,
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

impl Engine {
    /// Hands each I/O to its member's queue, or leaves it in `here` when
    /// its member is fast enough for this thread to perform it. Outside
    /// the engine lock: a queue may complete an I/O on another thread at
    /// once.
    pub(super) fn issue(&self, ios: Ios, here: &mut InlineWork) {
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
    pub(super) fn perform_inline(&self, mut here: InlineWork) {
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
    pub(super) fn complete(&self, id: IoId, member: u32, c: Completed) {
        let mut here = InlineWork::new(false, c.may_send);
        self.settle(id, member, c, &mut here);
        self.perform_inline(here);
    }

    /// One member I/O ended: the volume hears of it, and whatever that lets
    /// it do next is started (or left in `here`), delivered and told.
    pub(super) fn settle(&self, id: IoId, member: u32, c: Completed, here: &mut InlineWork) {
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
}
