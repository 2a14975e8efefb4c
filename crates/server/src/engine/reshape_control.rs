//! The engine's side of a reshape: pausing submissions while the served
//! volume is swapped, starting and finishing the reshape under the lock,
//! and passing the reshape's requests (label writes) to the upkeep thread
//! and its answers back.

use super::*;

/// Where a reshape stands, for status and the upkeep thread.
#[derive(Clone, Debug)]
pub struct ReshapeProgress {
    /// Volume bytes moved to the new layout.
    pub position_bytes: u64,
    /// ... of which the labels hold as moved for good.
    pub durable_bytes: u64,
    pub total_bytes: u64,
    pub finished: bool,
    /// Why it stopped for good, if it did: nothing moves until a restart.
    pub stuck: Option<String>,
    /// The layout it moves from.
    pub old: Geometry,
}

/// Rounds of writing the stripe cache out before [`Engine::empty_paused`]
/// gives up (its write-outs can fail and leave entries).
pub(super) const EMPTY_ROUNDS_MAX: u32 = 8;

impl Engine {
    /// Holds every other thread's submissions until [`Engine::resume`];
    /// those in flight go on. The caller's own submissions pass.
    pub fn pause(&self) {
        self.lock().paused_by = Some(std::thread::current().id());
    }

    pub fn resume(&self) {
        self.lock().paused_by = None;
        self.resumed.notify_all();
    }

    /// With the engine paused (by the caller): waits for what is in
    /// flight, writes the stripe cache out, and flushes every member, so
    /// that every write acknowledged so far is on the members before a
    /// layout changes hands.
    pub fn empty_paused(&self) -> Result<(), String> {
        for round in 0.. {
            self.wait_idle();
            if self.with_volume(|v| v.cached_stripes()) == 0 {
                break;
            }
            if round == EMPTY_ROUNDS_MAX {
                return Err("the stripe cache would not empty; try again".into());
            }
            self.run(Request::CacheTick { all: true })
                .map_err(|e| format!("emptying the stripe cache: {e}"))?;
        }
        self.run(Request::Flush)
            .map_err(|e| format!("flushing the members: {e}"))?;
        self.wait_idle();
        Ok(())
    }

    /// Starts serving `reshaping` in place of the volume, with `added`
    /// devices in the slots after the members'. The caller has paused the
    /// engine and waited for it to be idle: the volume's state (its
    /// requests, its cache) goes with it.
    pub fn begin_reshape(&self, reshaping: Reshaping, added: Vec<Arc<dyn Member>>) {
        crate::engine::memory::keep_large_buffers(true);
        self.swap_serving(Serving::Reshaping(Box::new(reshaping)), added);
    }

    /// Serves `serving` (a volume of a new layout over the same members
    /// and `added` after them) in place of the volume, under the same
    /// conditions as [`Engine::begin_reshape`].
    pub fn swap_serving(&self, serving: Serving, added: Vec<Arc<dyn Member>>) {
        let mut s = self.lock();
        assert!(s.serving.is_idle(), "a layout changes on an idle volume");
        assert!(matches!(s.serving, Serving::Plain(_)));
        for device in added {
            let queue = self.io.queue(Arc::clone(&device));
            s.members.push(Some(Device { device, queue }));
            s.busy.push(BusyClock::default());
        }
        assert_eq!(s.members.len(), serving.health().len());
        s.serving = serving;
        self.note_devices(&s);
    }

    /// With the engine paused and emptied (by the caller): serves
    /// `geometry`, the same members' layout with more data on each (a
    /// pool's volume extended in place, whose layout keeps every byte
    /// where it was and grows at its end), set up as the server sets up
    /// any volume (`set_volume_setup`).
    /// `added` are members after the last (a concat's added subdisk),
    /// online from the start: their bytes were zeroed.
    pub fn serve_grown(&self, geometry: Geometry, added: Vec<Arc<dyn Member>>) {
        let mut health = self.health();
        health.extend(added.iter().map(|_| Health::Online));
        let setup = self.volume_setup.lock().expect("volume setup");
        let mut s = self.lock();
        assert!(s.serving.is_idle(), "a layout grows on an idle volume");
        let Serving::Plain(old) = &s.serving else {
            panic!("a volume being reshaped does not grow");
        };
        assert!(
            geometry.volume_size_bytes() >= old.size_bytes(),
            "a volume grows"
        );
        assert_eq!(geometry.members() as usize, health.len());
        assert_eq!(geometry.level(), old.geometry().level());
        assert!(added.is_empty() || geometry.level() == platter_core::Level::Concat);
        let limits = old.limits().clone();
        for device in added {
            let queue = self.io.queue(Arc::clone(&device));
            s.members.push(Some(Device { device, queue }));
            s.busy.push(BusyClock::default());
        }
        let members: Vec<Option<Arc<dyn Member>>> = s
            .members
            .iter()
            .map(|m| m.as_ref().map(|d| Arc::clone(&d.device)))
            .collect();
        let mut vol = Volume::new(geometry, health, limits);
        if let Some(setup) = setup.as_ref() {
            setup(&mut vol, &members);
        }
        s.serving = Serving::Plain(vol);
        self.note_devices(&s);
    }

    /// Sets how a volume is set up when a finished reshape hands over.
    pub fn set_volume_setup(&self, setup: VolumeSetup) {
        *self.volume_setup.lock().expect("volume setup") = Some(setup);
    }

    /// A finished reshape hands over to its new layout's volume, set up
    /// as the server sets up any (bitmap, cache, balancing): the engine
    /// is paused, emptied and flushed first, so that the bitmap starts
    /// with nothing owed. False when no finished reshape is served.
    pub fn finish_reshape(&self) -> bool {
        if !self.reshape_progress().is_some_and(|p| p.finished) {
            return false;
        }
        self.pause();
        let flushed = self.empty_paused().is_ok();
        let members = self.members();
        let setup = self.volume_setup.lock().expect("volume setup");
        let handed = flushed
            && self.lock().serving.hand_over(|v| {
                if let Some(setup) = setup.as_ref() {
                    setup(v, &members);
                }
            });
        drop(setup);
        if handed {
            crate::engine::memory::keep_large_buffers(false);
        }
        self.resume();
        handed
    }

    /// Where the reshape in progress stands; `None` without one.
    pub fn reshape_progress(&self) -> Option<ReshapeProgress> {
        let s = self.lock();
        let r = s.serving.reshaping()?;
        Some(ReshapeProgress {
            position_bytes: r.reshape().position_bytes(),
            durable_bytes: r.reshape().durable_bytes(),
            total_bytes: r.reshape().plan().total_bytes(),
            finished: r.is_finished(),
            stuck: r.stuck_reason().map(str::to_string),
            old: r.old_geometry().clone(),
        })
    }

    /// Waits until the reshape has asked something of the host, at most
    /// `timeout`.
    pub fn wait_reshape_actions(&self, timeout: std::time::Duration) {
        let s = self.lock();
        let _unused = self
            .reshape_asked
            .wait_timeout_while(s, timeout, |s| s.reshape_actions.is_empty())
            .expect("engine lock poisoned");
    }

    /// What the reshape asked of the host since the last call.
    pub fn take_reshape_actions(&self) -> Vec<Action> {
        std::mem::take(&mut self.lock().reshape_actions)
    }

    /// Lets the reshape move `bytes` more, when it has fewer than
    /// `unless_above` bytes allowed still (the rate limit's tick).
    pub fn reshape_allow(&self, bytes: u64, unless_above: u64) {
        self.drive(|s| {
            if let Some(r) = s.reshaping_mut() {
                if r.allowed_bytes() <= unless_above {
                    r.allow_bytes(bytes);
                }
            }
        });
    }

    /// The labels now hold the reshape's position `position_bytes`.
    pub fn reshape_persisted(&self, position_bytes: u64) {
        self.drive(|s| {
            if let Some(r) = s.reshaping_mut() {
                r.persisted(position_bytes);
            }
        });
    }
}
