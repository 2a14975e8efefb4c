//! Background upkeep: the rebuild driver. The engine rebuilds in stripe
//! steps when asked; this thread asks, at a rate that can be changed while
//! it runs, and records a checkpoint in the labels about once a second.

use crate::engine::Engine;
use crate::meta::Meta;
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
}

impl Upkeep {
    pub fn new() -> Upkeep {
        Upkeep {
            rate_bytes_per_sec: AtomicU64::new(DEFAULT_REBUILD_BYTES_PER_SEC),
            stop: AtomicBool::new(false),
            last_rate_bytes_per_sec: AtomicU64::new(0),
        }
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
            std::thread::sleep(Duration::from_millis(100));
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
        let took = started.elapsed();
        upkeep.last_rate_bytes_per_sec.store(
            (done_bytes as f64 / took.as_secs_f64().max(1e-6)) as u64,
            Ordering::Relaxed,
        );
        // Rate limit: a step of N bytes takes at least N / rate seconds.
        let rate = upkeep.rate_bytes_per_sec.load(Ordering::Relaxed).max(1);
        let due = Duration::from_secs_f64(done_bytes as f64 / rate as f64);
        if due > took {
            std::thread::sleep((due - took).min(Duration::from_secs(5)));
        }
        if last_checkpoint.elapsed() >= Duration::from_secs(1) {
            if let Some(p) = engine.with_volume(|v| v.rebuild_progress()) {
                meta.checkpoint(p.cursor_stripe);
            }
            last_checkpoint = Instant::now();
        }
    }
}
