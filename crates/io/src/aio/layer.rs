//! The [`IoLayer`] platter serves with: per member device a queue of at
//! most `queue_depth` I/Os on the device at once (queue.rs), performed by
//! an io_uring where the kernel allows one and the member offers its
//! descriptor (ring.rs), else by up to `queue_depth` threads per member
//! making the synchronous [`Member`] calls. Injected latency is a timer
//! (timer.rs), not a thread asleep. One watchdog thread fails I/Os that
//! outlive the timeout; it sleeps without a deadline while nothing is
//! outstanding, and threads end after [`IDLE_EXIT`] without work, so an
//! idle server holds no running thread and polls nothing.
//!
//! A thread stuck in a device that stopped answering stays stuck (a
//! blocking system call cannot be taken back); it keeps its place in the
//! depth, and its late answer is dropped. The member is taken out of use
//! by the timeout, so no new I/O goes to it. The same holds for an I/O in
//! the ring: its buffers are kept until the kernel answers.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

pub use super::queue::IDLE_EXIT;
use super::queue::{Queue, QueueHandle};
use super::ring::Ring;
use super::timer::Timer;
use super::{Delay, IoLayer, MemberQueue};
use crate::member::Member;

/// What `serve --member-queue-depth` defaults to.
pub const QUEUE_DEPTH_DEFAULT: usize = 32;
/// What `serve --member-timeout` defaults to.
pub const TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// The environment variable that chooses the back end where
/// `--io-backend` is not given (the test suite forces `threads` with it).
pub const BACKEND_ENV: &str = "PLATTER_IO_BACKEND";

/// Which mechanism performs member I/O.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// io_uring if the kernel allows it, else threads (with the reason
    /// logged).
    #[default]
    Auto,
    /// io_uring, or refuse to start.
    Uring,
    /// Threads only.
    Threads,
}

impl Backend {
    pub fn parse(text: &str) -> Result<Backend, String> {
        match text {
            "auto" => Ok(Backend::Auto),
            "io-uring" | "io_uring" | "uring" => Ok(Backend::Uring),
            "threads" => Ok(Backend::Threads),
            other => Err(format!(
                "unknown I/O back end {other:?}; use auto, io-uring or threads"
            )),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Auto => "auto",
            Backend::Uring => "io-uring",
            Backend::Threads => "threads",
        })
    }
}

#[derive(Clone, Debug)]
pub struct LayerConfig {
    /// I/Os on one device at once (at least 1).
    pub queue_depth: usize,
    /// An I/O not completed this long after its submission fails.
    pub timeout: Duration,
    pub backend: Backend,
    /// Injected latency by member (as [`Member::describe`] names it).
    pub delays: HashMap<String, Delay>,
}

impl Default for LayerConfig {
    fn default() -> Self {
        LayerConfig {
            queue_depth: QUEUE_DEPTH_DEFAULT,
            timeout: TIMEOUT_DEFAULT,
            backend: Backend::Auto,
            delays: HashMap::new(),
        }
    }
}

/// The io_uring could not be had where it was required.
#[derive(Debug, thiserror::Error)]
#[error("io_uring is not available: {0}")]
pub struct UringRefused(pub String);

pub struct Layer {
    shared: Arc<Shared>,
    /// Why the ring is not used, when it is not.
    fallback_reason: Option<String>,
}

pub(super) struct Shared {
    pub(super) config: LayerConfig,
    /// I/Os submitted and not completed, over every queue: the watchdog
    /// sleeps without a deadline while this is zero.
    pub(super) outstanding: AtomicU64,
    /// The watchdog sleeps without a deadline: the first I/O must wake it.
    /// While it ticks, I/Os need not touch its lock (on a fast member at
    /// depth 1 every I/O takes `outstanding` from 0 to 1, and waking the
    /// watchdog for each would cost a context switch per I/O).
    watchdog_asleep: AtomicBool,
    watch: Mutex<Watch>,
    watch_wake: Condvar,
    pub(super) timer: Arc<Timer>,
    pub(super) ring: Option<Arc<Ring>>,
}

struct Watch {
    queues: Vec<Weak<Queue>>,
    started: bool,
    stop: bool,
}

impl Layer {
    /// A layer with `config.backend`: [`Backend::Auto`] falls back to
    /// threads with the reason logged (and kept: [`Layer::fallback_reason`]);
    /// [`Backend::Uring`] fails instead.
    ///
    /// # Panics
    /// If `config.queue_depth` is 0 (the command line refuses it).
    pub fn new(config: LayerConfig) -> Result<Layer, UringRefused> {
        assert!(config.queue_depth > 0, "a queue depth of 0 serves nothing");
        let (ring, fallback_reason) = match config.backend {
            Backend::Threads => (
                None,
                Some(format!(
                    "the thread pool was asked for (--io-backend threads or {BACKEND_ENV}=threads)"
                )),
            ),
            Backend::Uring => (Some(Ring::new().map_err(UringRefused)?), None),
            Backend::Auto => match Ring::new() {
                Ok(ring) => (Some(ring), None),
                Err(why) => (None, Some(why)),
            },
        };
        match &fallback_reason {
            None => tracing::info!("member I/O through io_uring"),
            Some(why) => {
                tracing::info!(reason = %why, "member I/O through the portable thread pool")
            }
        }
        Ok(Layer {
            shared: Arc::new(Shared {
                config,
                outstanding: AtomicU64::new(0),
                watchdog_asleep: AtomicBool::new(false),
                watch: Mutex::new(Watch {
                    queues: Vec::new(),
                    started: false,
                    stop: false,
                }),
                watch_wake: Condvar::new(),
                timer: Arc::new(Timer::default()),
                ring,
            }),
            fallback_reason,
        })
    }

    /// A layer of threads only, never refused.
    pub fn threads(config: LayerConfig) -> Layer {
        Layer::new(LayerConfig {
            backend: Backend::Threads,
            ..config
        })
        .expect("the thread pool is always available")
    }

    /// `io-uring` or `threads`.
    pub fn backend_name(&self) -> &'static str {
        if self.shared.ring.is_some() {
            "io-uring"
        } else {
            "threads"
        }
    }

    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback_reason.as_deref()
    }
}

impl Drop for Layer {
    fn drop(&mut self) {
        self.shared.watch().stop = true;
        self.shared.watch_wake.notify_all();
        self.shared.timer.stop();
        if let Some(ring) = &self.shared.ring {
            ring.stop();
        }
    }
}

impl IoLayer for Layer {
    fn queue(&self, device: Arc<dyn Member>) -> Arc<dyn MemberQueue> {
        self.queue_delayed(device, None)
    }

    fn queue_delayed(&self, device: Arc<dyn Member>, delay: Option<Delay>) -> Arc<dyn MemberQueue> {
        let delay = delay.or_else(|| self.shared.config.delays.get(device.describe()).cloned());
        let queue = Arc::new(Queue::new(device, Arc::clone(&self.shared), delay));
        let mut w = self.shared.watch();
        w.queues.retain(|q| q.strong_count() > 0);
        w.queues.push(Arc::downgrade(&queue));
        if !w.started {
            let shared = Arc::clone(&self.shared);
            match std::thread::Builder::new()
                .name("platter-io-watchdog".into())
                .spawn(move || shared.watchdog())
            {
                Ok(_) => w.started = true,
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the member I/O watchdog; member I/Os are not timed out")
                }
            }
        }
        Arc::new(QueueHandle(queue))
    }

    fn backend(&self) -> &'static str {
        self.backend_name()
    }
}

impl Shared {
    fn watch(&self) -> MutexGuard<'_, Watch> {
        self.watch.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fails every I/O older than the timeout, looking about ten times per
    /// timeout while any I/O is outstanding.
    fn watchdog(&self) {
        let tick =
            (self.config.timeout / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut w = self.watch();
        loop {
            if w.stop {
                return;
            }
            // Asleep is announced before `outstanding` is looked at, and
            // an I/O counts itself before it looks at `asleep`: one of the
            // two sees the other (both sequentially consistent). The waker
            // notifies under this lock, so not between the check and the
            // wait.
            self.watchdog_asleep.store(true, Ordering::SeqCst);
            if self.outstanding.load(Ordering::SeqCst) == 0 {
                w = self.watch_wake.wait(w).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            self.watchdog_asleep.store(false, Ordering::SeqCst);
            w = self
                .watch_wake
                .wait_timeout(w, tick)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            let queues: Vec<Arc<Queue>> = w.queues.iter().filter_map(Weak::upgrade).collect();
            drop(w);
            for q in queues {
                q.expire(self.config.timeout);
            }
            w = self.watch();
        }
    }

    /// One more I/O is outstanding: wakes the watchdog if it sleeps.
    pub(super) fn counted(&self) {
        self.outstanding.fetch_add(1, Ordering::SeqCst);
        if self.watchdog_asleep.load(Ordering::SeqCst) {
            // Under the watchdog's lock, so it cannot miss the change
            // between its check and its wait.
            let _w = self.watch();
            self.watch_wake.notify_all();
        }
    }
}

#[cfg(test)]
mod tests;
