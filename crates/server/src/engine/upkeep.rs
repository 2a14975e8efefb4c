//! Background upkeep: the rebuild and resync driver, the write-intent
//! bitmap's sweeps, and the stripe cache's clock. The engine rebuilds in
//! stripe steps when asked; this thread asks, at a rate that can be changed
//! while it runs, and records a checkpoint in the labels about once a
//! second. Every few seconds it asks the engine to clear the bits of regions
//! that have gone quiet. A second thread ticks the stripe cache every
//! [`DESTAGE_INTERVAL`], so that a partial stripe nobody completes goes to
//! the members within two ticks of its last write.

use crate::engine::meta::Meta;
use crate::engine::serving::Serving;
use crate::engine::Engine;
use crate::manage::scrub::Scrubber;
use platter_core::label::ScrubRecord;
use platter_core::reshape::Action;
use platter_core::volume::{ErrorKind, Health, Maintenance, Reply, Request};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Default rebuild rate (`serve --rebuild-rate`); `platter rebuild-rate`
/// changes it live.
pub const DEFAULT_REBUILD_BYTES_PER_SEC: u64 = crate::defaults::REBUILD_BYTES_PER_SEC;
/// The rebuild rate that sets no limit (`rebuild-rate unlimited`): steps
/// follow one another as fast as the members take them.
pub const UNLIMITED: u64 = u64::MAX;
/// Stripes per rebuild step: large enough to stream, small enough to keep
/// client writes from waiting long on the step's stripe lock.
const STEP_BYTES: u64 = 4 << 20;
/// How long a region stays marked after its last write (md's bitmap daemon
/// sleeps 5 s too): long enough that a busy region is not set and cleared
/// over and over, short enough that a crash finds few regions marked.
const SWEEP_INTERVAL: Duration = Duration::from_secs(5);
/// The stripe cache's tick: a cached stripe not written for a whole tick is
/// written out. Sequential writers complete stripes within microseconds;
/// this only bounds how long a stray partial stripe stays in memory.
pub const DESTAGE_INTERVAL: Duration = Duration::from_millis(20);
/// How often every member in use is asked whether it shrank. Writes find a
/// truncated file at once (`platter_io::FileMember`); this finds one that
/// sees no writes, before a read past its new end would.
const SIZE_CHECK_INTERVAL: Duration = Duration::from_secs(1);

pub struct Upkeep {
    pub rate_bytes_per_sec: AtomicU64,
    pub stop: AtomicBool,
    /// Bytes rebuilt per second over the last step, for status.
    pub last_rate_bytes_per_sec: AtomicU64,
    /// After an unclean shutdown: the next stripe to resync, and the end.
    /// `u64::MAX` when no resync runs.
    pub resync_cursor_stripe: AtomicU64,
    pub resync_stripes: AtomicU64,
    /// Stripes the resync found inconsistent (and rewrote).
    pub resync_mismatched_stripes: AtomicU64,
    /// The resync covers the regions the write-intent bitmap marked (this
    /// many), not every stripe.
    pub resync_regions: AtomicU64,
    pub resync_by_region: AtomicBool,
    /// Bytes resynced per second over the last step, for status.
    pub resync_rate_bytes_per_sec: AtomicU64,
    /// Bytes a reshape moved per second lately, for status.
    pub reshape_rate_bytes_per_sec: AtomicU64,
    /// The scheduled scrub (`scrub.rs`), run when nothing above is.
    pub scrubber: Scrubber,
}

impl Upkeep {
    pub fn new() -> Upkeep {
        Upkeep::with_scrubber(Scrubber::new(None, 1, ScrubRecord::default()))
    }

    pub fn with_scrubber(scrubber: Scrubber) -> Upkeep {
        Upkeep {
            scrubber,
            rate_bytes_per_sec: AtomicU64::new(DEFAULT_REBUILD_BYTES_PER_SEC),
            stop: AtomicBool::new(false),
            last_rate_bytes_per_sec: AtomicU64::new(0),
            resync_cursor_stripe: AtomicU64::new(u64::MAX),
            resync_stripes: AtomicU64::new(0),
            resync_mismatched_stripes: AtomicU64::new(0),
            resync_regions: AtomicU64::new(0),
            resync_by_region: AtomicBool::new(false),
            resync_rate_bytes_per_sec: AtomicU64::new(0),
            reshape_rate_bytes_per_sec: AtomicU64::new(0),
        }
    }

    /// Starts a resync of the whole volume (after an unclean shutdown).
    pub fn start_resync(&self, stripes: u64) {
        self.resync_stripes.store(stripes, Ordering::SeqCst);
        self.resync_mismatched_stripes.store(0, Ordering::SeqCst);
        self.resync_cursor_stripe.store(0, Ordering::SeqCst);
    }

    /// Starts a resync of the regions the bitmap marked: `regions` of
    /// `region_stripes` stripes each (the last may be shorter).
    pub fn start_region_resync(&self, regions: u64, region_stripes: u64) {
        self.resync_by_region.store(true, Ordering::SeqCst);
        self.resync_regions.store(regions, Ordering::SeqCst);
        self.start_resync(regions * region_stripes);
    }

    /// (cursor, stripes) while a resync runs.
    pub fn resync_progress(&self) -> Option<(u64, u64)> {
        let cursor = self.resync_cursor_stripe.load(Ordering::SeqCst);
        (cursor != u64::MAX).then(|| (cursor, self.resync_stripes.load(Ordering::SeqCst)))
    }
}

impl Default for Upkeep {
    fn default() -> Self {
        Upkeep::new()
    }
}

/// Runs until `upkeep.stop`; sleeps while nothing needs doing.
pub fn run(engine: Arc<Engine>, meta: Arc<Meta>, upkeep: Arc<Upkeep>) {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("platter-destage".into())
            .spawn_scoped(scope, || destage_ticks(&engine, &upkeep))
            .expect("spawn the destage thread");
        rebuild_and_sweep(&engine, &meta, &upkeep);
    });
}

/// The stripe cache's clock (nothing to do without a cache; a cache may
/// come with the volume a finished reshape hands over to).
fn destage_ticks(engine: &Engine, upkeep: &Upkeep) {
    while !upkeep.stop.load(Ordering::SeqCst) {
        std::thread::sleep(DESTAGE_INTERVAL);
        if engine.with_volume(|v| v.cached_stripes()) == 0 {
            continue;
        }
        // Completes at once; the write-outs it starts go on in the I/O
        // layer, and the volume counts them as in flight until they end.
        if let Err(e) = engine.run(Request::CacheTick { all: false }) {
            tracing::warn!(error = %e, "stripe cache tick failed");
        }
    }
}

fn rebuild_and_sweep(engine: &Engine, meta: &Meta, upkeep: &Upkeep) {
    let mut rounds = Rounds::new(engine, meta, upkeep);
    while !upkeep.stop.load(Ordering::SeqCst) {
        rounds.periodic();
        if engine.reshape_progress().is_some() {
            rounds.reshape();
            continue;
        }
        if engine.with_volume(|v| v.rebuild_progress()).is_none() {
            rounds.resync_or_scrub();
            continue;
        }
        if rounds.rebuild().is_break() {
            return;
        }
    }
}

/// The upkeep loop's state from one round to the next.
struct Rounds<'a> {
    engine: &'a Engine,
    meta: &'a Meta,
    upkeep: &'a Upkeep,
    stripe_bytes: u64,
    /// Stripes per rebuild or resync step.
    step: u64,
    last_checkpoint: Instant,
    last_sweep: Instant,
    last_size_check: Instant,
    step_failures: u64,
    last_failure_log: Option<Instant>,
    /// (when, position) of the reshape's last rate sample.
    reshape_sample: Option<(Instant, u64)>,
    /// When the reshape was last let move on: it is let move on by the
    /// time passed, however often the loop comes round.
    reshape_allowed_at: Instant,
}

impl<'a> Rounds<'a> {
    fn new(engine: &'a Engine, meta: &'a Meta, upkeep: &'a Upkeep) -> Rounds<'a> {
        let stripe_bytes = engine.with_volume(|v| v.geometry().stripe_data_bytes());
        Rounds {
            engine,
            meta,
            upkeep,
            stripe_bytes,
            step: (STEP_BYTES / stripe_bytes).max(1),
            last_checkpoint: Instant::now(),
            last_sweep: Instant::now(),
            last_size_check: Instant::now(),
            step_failures: 0,
            last_failure_log: None,
            reshape_sample: None,
            reshape_allowed_at: Instant::now(),
        }
    }

    /// Shrunk members failed, and the bitmap swept, each at its interval.
    fn periodic(&mut self) {
        if self.last_size_check.elapsed() >= SIZE_CHECK_INTERVAL {
            fail_shrunk_members(self.engine);
            self.last_size_check = Instant::now();
        }
        if self.last_sweep.elapsed() >= SWEEP_INTERVAL {
            if let Err(e) = self.engine.run(Request::Sweep { all: false }) {
                tracing::warn!(error = %e, "write-intent bitmap sweep failed");
            }
            self.last_sweep = Instant::now();
        }
    }

    /// A resync after a crash runs beside the reshape (each byte through
    /// the layout it is in); no rebuild or scrub does.
    fn reshape(&mut self) {
        let (engine, upkeep) = (self.engine, self.upkeep);
        let moved = reshape_tick(engine, self.meta, upkeep, &mut self.reshape_allowed_at);
        if let Some(p) = engine.reshape_progress() {
            match self.reshape_sample {
                Some((at, from)) if at.elapsed() >= Duration::from_secs(1) => {
                    let rate =
                        p.position_bytes.saturating_sub(from) as f64 / at.elapsed().as_secs_f64();
                    upkeep
                        .reshape_rate_bytes_per_sec
                        .store(rate as u64, Ordering::Relaxed);
                    self.reshape_sample = Some((Instant::now(), p.position_bytes));
                }
                Some(_) => {}
                None => self.reshape_sample = Some((Instant::now(), p.position_bytes)),
            }
        }
        if !resync_step(engine, upkeep, self.step) && !moved {
            engine.wait_reshape_actions(RESHAPE_TICK);
        }
    }

    /// With no rebuild: the resync owed, else the scheduled scrub, else a
    /// nap.
    fn resync_or_scrub(&mut self) {
        let (engine, upkeep) = (self.engine, self.upkeep);
        resync_refused_writes(engine, upkeep);
        if !resync_step(engine, upkeep, self.step)
            && !upkeep.scrubber.step(engine, self.meta, &upkeep.stop)
        {
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// One rebuild step, paced to the rate limit, with the cursor
    /// checkpointed into the labels every second. Breaks when the engine
    /// is gone.
    fn rebuild(&mut self) -> ControlFlow<()> {
        let engine = self.engine;
        let started = Instant::now();
        let (tx, rx) = mpsc::channel();
        let step = self.step;
        let submitted = engine.submit_with(
            |s| match s {
                Serving::Plain(v) => v.rebuild_step(step),
                // No rebuild starts while a volume is reshaped.
                Serving::Reshaping(_) => None,
            },
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        if !submitted {
            std::thread::sleep(Duration::from_millis(10));
            return ControlFlow::Continue(());
        }
        match rx.recv() {
            Ok(Ok(_)) => {
                self.step_failures = 0;
                self.last_failure_log = None;
            }
            Ok(Err(e)) => {
                self.step_failed(e);
                return ControlFlow::Continue(());
            }
            Err(_) => return ControlFlow::Break(()),
        }
        let done_bytes = step * self.stripe_bytes;
        let upkeep = self.upkeep;
        pace(
            &upkeep.rate_bytes_per_sec,
            &upkeep.stop,
            done_bytes,
            started,
        );
        upkeep.last_rate_bytes_per_sec.store(
            (done_bytes as f64 / started.elapsed().as_secs_f64().max(1e-6)) as u64,
            Ordering::Relaxed,
        );
        if self.last_checkpoint.elapsed() >= Duration::from_secs(1) {
            if let Some(p) = engine.with_volume(|v| v.rebuild_progress()) {
                self.meta.checkpoint(p.cursor_stripe);
            }
            self.last_checkpoint = Instant::now();
        }
        ControlFlow::Continue(())
    }

    /// A rebuild that cannot proceed (its sources lost) retries every
    /// second for as long as it is stuck: say so once a minute, not every
    /// second.
    fn step_failed(&mut self, e: impl std::fmt::Display) {
        self.step_failures += 1;
        if self
            .last_failure_log
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(60))
        {
            tracing::error!(
                error = %e,
                failures = self.step_failures,
                "rebuild step failed; retrying every second"
            );
            self.last_failure_log = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Takes every member in use that shrank out of use: its bytes past the
/// new end are gone, and a file re-extended later would read zeros there.
fn fail_shrunk_members(engine: &Engine) {
    let health = engine.health();
    for (slot, device) in engine.members().iter().enumerate() {
        let Some(device) = device else { continue };
        if health[slot] != Health::Online {
            continue;
        }
        if let Err(e) = device.check_size() {
            engine.mark_faulty(slot as u32, e.to_string());
        }
    }
}

/// Starts a resync of the regions whose writes were refused for space
/// (`platter_core::volume::Volume::resync_owed`), when none runs. Its
/// repairs are refused too while the members are full; it retries every
/// second and finishes once there is room. Without a bitmap the stripes are
/// not known: the label stays dirty, and the next start resyncs them all.
fn resync_refused_writes(engine: &Engine, upkeep: &Upkeep) {
    if upkeep.resync_progress().is_some() {
        return;
    }
    let owed = engine.with_volume(|v| {
        let b = v.intent_status()?;
        (b.unsynced_regions > 0).then_some((b.unsynced_regions, b.layout.region_stripes))
    });
    if let Some((regions, region_stripes)) = owed {
        tracing::warn!(
            regions,
            "resyncing the regions whose writes were refused for lack of space"
        );
        upkeep.start_region_resync(regions, region_stripes);
    }
}

/// One step of a resync: rewrite parity or copies of the next stripes so
/// that they agree again (what a crash mid-write can leave behind). False
/// when no resync runs.
fn resync_step(engine: &Engine, upkeep: &Upkeep, step: u64) -> bool {
    let Some((cursor, stripes)) = upkeep.resync_progress() else {
        return false;
    };
    let next = if upkeep.resync_by_region.load(Ordering::SeqCst) {
        engine.with_volume(|v| {
            let region = v.unsynced_from(0)?;
            let layout = v.intent_status().expect("a bitmap").layout;
            Some((Some(region), layout.stripes_of(region)))
        })
    } else {
        (cursor < stripes).then_some((None, (cursor, step.min(stripes - cursor))))
    };
    let Some((region, (first, count))) = next else {
        let n = upkeep.resync_mismatched_stripes.load(Ordering::SeqCst);
        let regions = upkeep.resync_regions.load(Ordering::SeqCst);
        tracing::info!(stripes = cursor, rewritten = n, regions, "resync finished");
        engine.alert(crate::observe::alerts::Alert::new(
            crate::observe::alerts::EventKind::ResyncDone,
            if regions > 0 {
                format!("resync finished: {regions} bitmap regions, {n} stripes rewritten")
            } else {
                format!("resync finished: the whole volume, {n} stripes rewritten")
            },
        ));
        upkeep
            .resync_cursor_stripe
            .store(u64::MAX, Ordering::SeqCst);
        return true;
    };
    // A region larger than a step goes in several; it counts as resynced
    // only once all of them have succeeded.
    let mut at = first;
    while at < first + count {
        let n = step.min(first + count - at);
        if !repair(engine, upkeep, at, n) {
            std::thread::sleep(Duration::from_secs(1));
            return true;
        }
        at += n;
    }
    if let Some(region) = region {
        engine.with_volume(|v| v.resynced(region));
    }
    upkeep
        .resync_cursor_stripe
        .store((cursor + count).min(stripes), Ordering::SeqCst);
    true
}

/// Repairs `count` stripes from `first` at the rate limit; false on error.
fn repair(engine: &Engine, upkeep: &Upkeep, first: u64, count: u64) -> bool {
    let started = Instant::now();
    match engine.run(Request::Maintain {
        first_stripe: first,
        stripe_count: count,
        action: Maintenance::Resync,
    }) {
        Ok(Reply::Checked(r)) => {
            upkeep
                .resync_mismatched_stripes
                .fetch_add(r.mismatched_stripes.len() as u64, Ordering::SeqCst);
        }
        // Full members refuse the repair's writes too; the engine has
        // logged that, and the step is tried again until there is room.
        Err(e) if e.kind == ErrorKind::NoSpace => {
            tracing::debug!(error = %e, "resync waits for space; retrying in a second");
            return false;
        }
        other => {
            tracing::error!(?other, "resync step failed; retrying in a second");
            return false;
        }
    }
    let stripe_bytes = engine.with_volume(|v| v.geometry().stripe_data_bytes());
    pace(
        &upkeep.rate_bytes_per_sec,
        &upkeep.stop,
        count * stripe_bytes,
        started,
    );
    upkeep.resync_rate_bytes_per_sec.store(
        ((count * stripe_bytes) as f64 / started.elapsed().as_secs_f64().max(1e-6)) as u64,
        Ordering::Relaxed,
    );
    true
}

/// How often the upkeep thread lets a reshape move on (the rate limit's
/// tick); a position to write to the labels wakes it at once.
const RESHAPE_TICK: Duration = Duration::from_millis(5);

/// Does what the reshape asked (its position to the labels, its end),
/// then lets it move at the rebuild rate. True if it asked anything.
fn reshape_tick(engine: &Engine, meta: &Meta, upkeep: &Upkeep, allowed_at: &mut Instant) -> bool {
    let actions = engine.take_reshape_actions();
    let acted = !actions.is_empty();
    for a in actions {
        match a {
            Action::Persist { position_bytes } => {
                // A member that cannot take the label fails on its next
                // I/O; the others hold the position.
                meta.record(|l| {
                    if let Some(r) = &mut l.reshape {
                        r.position_bytes = position_bytes;
                    }
                });
                engine.reshape_persisted(position_bytes);
            }
            Action::Finished => {
                // The new layout's volume takes over, with its bitmap;
                // only then may the labels forget the reshape (a crash
                // before resyncs it all: no bitmap was kept while the
                // layout changed). If it cannot yet, the clean stop
                // drops the record (`flush_and_mark`).
                if engine.finish_reshape() {
                    meta.record(|l| l.reshape = None);
                }
                let size = engine.size_bytes();
                engine.alert(crate::observe::alerts::Alert::new(
                    crate::observe::alerts::EventKind::ReshapeDone,
                    format!(
                        "reshape finished: every byte is in the new layout; clients that \
                         connect from now on see {size} bytes"
                    ),
                ));
            }
            Action::Stuck {
                position_bytes,
                reason,
            } => {
                engine.alert(crate::observe::alerts::Alert::new(
                    crate::observe::alerts::EventKind::ReshapeStuck,
                    format!(
                        "the reshape stopped at byte {position_bytes}: {reason}; the volume \
                         is served through both layouts"
                    ),
                ));
            }
        }
    }
    // The time passed since the last allowance at the rate (the loop comes
    // round early when the reshape asks something, or while a resync
    // runs: a tick's worth each time would outrun the rate), at most a
    // tick's worth, and never a backlog of more than one: a pause in the
    // moves does not turn into a burst after.
    let rate = upkeep.rate_bytes_per_sec.load(Ordering::Relaxed).max(1);
    let tick_bytes = (rate as f64 * RESHAPE_TICK.as_secs_f64()) as u64;
    let now = Instant::now();
    let passed = now.duration_since(*allowed_at).min(RESHAPE_TICK);
    *allowed_at = now;
    let bytes = (rate as f64 * passed.as_secs_f64()) as u64;
    engine.reshape_allow(bytes.max(1), tick_bytes);
    acted
}

/// The rate limit: a step of `bytes` that started at `started` takes at
/// least `bytes / rate` seconds. The rate is read again every few
/// milliseconds, so `platter rebuild-rate` takes effect within the step, and
/// a stop is not held up.
pub(crate) fn pace(
    rate_bytes_per_sec: &AtomicU64,
    stop: &AtomicBool,
    bytes: u64,
    started: Instant,
) {
    const SLICE: Duration = Duration::from_millis(50);
    loop {
        let rate = rate_bytes_per_sec.load(Ordering::Relaxed).max(1);
        let due = Duration::from_secs_f64(bytes as f64 / rate as f64);
        let took = started.elapsed();
        if took >= due || stop.load(Ordering::SeqCst) {
            return;
        }
        std::thread::sleep((due - took).min(SLICE));
    }
}
