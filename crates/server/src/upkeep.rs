//! Background upkeep: the rebuild driver. The engine rebuilds in stripe
//! steps when asked; this thread asks, at a rate that can be changed while
//! it runs, and records a checkpoint in the labels about once a second.

use crate::engine::Engine;
use crate::meta::Meta;
use platter_core::volume::{Maintenance, Reply, Request};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Default rebuild rate; `platter rebuild-rate` changes it live.
pub const DEFAULT_REBUILD_BYTES_PER_SEC: u64 = 128 << 20;
/// Stripes per rebuild step: large enough to stream, small enough to keep
/// client writes from waiting long on the step's stripe lock.
const STEP_BYTES: u64 = 4 << 20;

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
    /// Bytes resynced per second over the last step, for status.
    pub resync_rate_bytes_per_sec: AtomicU64,
}

impl Upkeep {
    pub fn new() -> Upkeep {
        Upkeep {
            rate_bytes_per_sec: AtomicU64::new(DEFAULT_REBUILD_BYTES_PER_SEC),
            stop: AtomicBool::new(false),
            last_rate_bytes_per_sec: AtomicU64::new(0),
            resync_cursor_stripe: AtomicU64::new(u64::MAX),
            resync_stripes: AtomicU64::new(0),
            resync_mismatched_stripes: AtomicU64::new(0),
            resync_rate_bytes_per_sec: AtomicU64::new(0),
        }
    }

    /// Starts a resync of the whole volume (after an unclean shutdown).
    pub fn start_resync(&self, stripes: u64) {
        self.resync_stripes.store(stripes, Ordering::SeqCst);
        self.resync_mismatched_stripes.store(0, Ordering::SeqCst);
        self.resync_cursor_stripe.store(0, Ordering::SeqCst);
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
    let stripe_bytes = engine.with_volume(|v| v.geometry().stripe_data_bytes());
    let step = (STEP_BYTES / stripe_bytes).max(1);
    let mut last_checkpoint = Instant::now();
    while !upkeep.stop.load(Ordering::SeqCst) {
        if engine.with_volume(|v| v.rebuild_progress()).is_none() {
            if !resync_step(&engine, &upkeep, step) {
                std::thread::sleep(Duration::from_millis(100));
            }
            continue;
        }
        let started = Instant::now();
        let (tx, rx) = mpsc::channel();
        let submitted = engine.submit_with(
            |v| v.rebuild_step(step),
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        if !submitted {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        match rx.recv() {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::error!(error = %e, "rebuild step failed; retrying in a second");
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
            Err(_) => return,
        }
        let done_bytes = step * stripe_bytes;
        pace(&upkeep, done_bytes, started);
        upkeep.last_rate_bytes_per_sec.store(
            (done_bytes as f64 / started.elapsed().as_secs_f64().max(1e-6)) as u64,
            Ordering::Relaxed,
        );
        if last_checkpoint.elapsed() >= Duration::from_secs(1) {
            if let Some(p) = engine.with_volume(|v| v.rebuild_progress()) {
                meta.checkpoint(p.cursor_stripe);
            }
            last_checkpoint = Instant::now();
        }
    }
}

/// One step of a resync: rewrite parity or copies of the next stripes so
/// that they agree again (what a crash mid-write can leave behind). False
/// when no resync runs.
fn resync_step(engine: &Engine, upkeep: &Upkeep, step: u64) -> bool {
    let Some((cursor, stripes)) = upkeep.resync_progress() else {
        return false;
    };
    if cursor >= stripes {
        let n = upkeep.resync_mismatched_stripes.load(Ordering::SeqCst);
        tracing::info!(stripes, rewritten = n, "resync finished");
        upkeep
            .resync_cursor_stripe
            .store(u64::MAX, Ordering::SeqCst);
        return true;
    }
    let started = Instant::now();
    let count = step.min(stripes - cursor);
    match engine.run(Request::Maintain {
        first_stripe: cursor,
        stripe_count: count,
        action: Maintenance::Repair,
    }) {
        Ok(Reply::Checked(r)) => {
            upkeep
                .resync_mismatched_stripes
                .fetch_add(r.mismatched_stripes.len() as u64, Ordering::SeqCst);
            upkeep
                .resync_cursor_stripe
                .store(cursor + count, Ordering::SeqCst);
        }
        other => {
            tracing::error!(?other, "resync step failed; retrying in a second");
            std::thread::sleep(Duration::from_secs(1));
            return true;
        }
    }
    let stripe_bytes = engine.with_volume(|v| v.geometry().stripe_data_bytes());
    pace(upkeep, count * stripe_bytes, started);
    upkeep.resync_rate_bytes_per_sec.store(
        ((count * stripe_bytes) as f64 / started.elapsed().as_secs_f64().max(1e-6)) as u64,
        Ordering::Relaxed,
    );
    true
}

/// The rate limit: a step of `bytes` that started at `started` takes at
/// least `bytes / rate` seconds. The rate is read again every few
/// milliseconds, so `platter rebuild-rate` takes effect within the step, and
/// a stop is not held up.
fn pace(upkeep: &Upkeep, bytes: u64, started: Instant) {
    const SLICE: Duration = Duration::from_millis(50);
    loop {
        let rate = upkeep.rate_bytes_per_sec.load(Ordering::Relaxed).max(1);
        let due = Duration::from_secs_f64(bytes as f64 / rate as f64);
        let took = started.elapsed();
        if took >= due || upkeep.stop.load(Ordering::SeqCst) {
            return;
        }
        std::thread::sleep((due - took).min(SLICE));
    }
}
