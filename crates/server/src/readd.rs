//! `re-add`: a member that left the volume comes back holding what it held
//! then (a remote member whose connection dropped, a device pulled and
//! plugged in again), and is rebuilt only where the write-intent bitmap
//! says it missed writes (md's `--re-add` with a bitmap).
//!
//! The device's own label says which slot it was. It may come back only
//! if nothing but the bitmap's regions can differ on it: the slot still
//! names it (it was not replaced), it is out of use, and its label is the
//! last one written before the labels recorded its leaving
//! (`SlotEntry::left_at_events`). A label written later somewhere else
//! (the member served on its own: a split brain) or a member that missed
//! more than its leaving is refused, with `replace` named for a full
//! rebuild.

use crate::manage::Manager;
use crate::newdevice::{empty_ppl, names_device};
use platter_core::label::{Label, SlotState, VolumeState};
use platter_core::volume::Health;
use platter_io::assembly::read_label_area;
use platter_io::{open_member, Member};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A remote member whose connection broke: *disconnected*, retried with
/// backoff (a second after, then twice as long each time, at most
/// [`RECONNECT_DELAY_MAX`]) until it is back or has been away longer than
/// `--member-timeout`.
pub struct Reconnect {
    uri: String,
    /// When its broken connection was seen: away since.
    since: Instant,
    delay: Duration,
    next_try: Instant,
    /// A try runs on its own thread ([`Manager::reconnect_lost`]).
    trying: bool,
    /// Away longer than the member timeout, or it answered but may not
    /// come back (why was logged once): failed for good, no longer tried;
    /// the operator decides (`replace`, or `re-add`), or a spare takes over.
    failed: bool,
}

impl Reconnect {
    /// Seconds since its connection broke.
    pub fn away_seconds(&self) -> u64 {
        self.since.elapsed().as_secs()
    }
}

const RECONNECT_DELAY_FIRST: Duration = Duration::from_secs(1);
pub const RECONNECT_DELAY_MAX: Duration = Duration::from_secs(30);

impl Manager {
    /// `platter re-add DEVICE`.
    pub fn re_add(&self, path: &str) -> Result<Value, String> {
        let _changing = self.slot_changes.lock().expect("slot changes");
        // A remote member is opened before its old handle goes: if its
        // host is not back, the slot keeps the handle (and its URI). A
        // local file's handle goes first, or the volume's own claim on it
        // would refuse the open.
        let device = if path.contains("://") {
            let device = open_member(path, self.open_options).map_err(|e| e.to_string())?;
            self.release_old_handle(path)?;
            device
        } else {
            self.release_old_handle(path)?;
            open_member(path, self.open_options).map_err(|e| e.to_string())?
        };
        self.re_add_opened(path, Arc::from(device))
    }

    /// Lets go of the handle a failed slot keeps of `path`; refused if
    /// `path` is a member in use.
    fn release_old_handle(&self, path: &str) -> Result<(), String> {
        let health = self.engine.health();
        let members = self.engine.members();
        if let Some(slot) = members
            .iter()
            .position(|m| m.as_ref().is_some_and(|m| names_device(m.describe(), path)))
        {
            if matches!(health[slot], Health::Online | Health::Rebuilding) {
                return Err(format!("{path} is member {slot}, in use"));
            }
            drop(members);
            self.engine.take_member(slot as u32);
        }
        Ok(())
    }

    /// The slot's remote member is disconnected: out of use because its
    /// connection broke, but still expected back (a spare does not take
    /// its place yet). From the moment its connection is seen broken, so
    /// that a spare does not slip in before the server's loop notes it.
    pub fn is_disconnected(&self, slot: u32) -> bool {
        if !self.reconnect || self.engine.health()[slot as usize] != Health::Faulty {
            return false;
        }
        let lost = self.reconnects.lock().expect("reconnects");
        match lost.get(&slot) {
            Some(r) => !r.failed,
            None => self.engine.members()[slot as usize]
                .as_ref()
                .is_some_and(|m| m.connection_lost()),
        }
    }

    /// Seconds the slot's member has been disconnected, while it is.
    pub fn away_seconds(&self, slot: u32) -> Option<u64> {
        if !self.is_disconnected(slot) {
            return None;
        }
        let lost = self.reconnects.lock().expect("reconnects");
        Some(lost.get(&slot).map_or(0, Reconnect::away_seconds))
    }

    /// Remote members whose connection broke are *disconnected*: tried
    /// again with backoff and brought back (`re-add`) once their host
    /// answers, so that only what they missed is rebuilt; one away longer
    /// than the member timeout is failed for good. Called by the server's
    /// loop every 100 ms. A try runs on a thread of its own (a host that
    /// neither answers nor refuses holds it up to the connect timeout), one
    /// at a time; [`Manager::stop_reconnecting`] waits for it.
    pub fn reconnect_lost(self: &Arc<Self>) {
        let health = self.engine.health();
        let members = self.engine.members();
        let mut lost = self.reconnects.lock().expect("reconnects");
        lost.retain(|slot, r| r.trying || health[*slot as usize] == Health::Faulty);
        for (slot, m) in members.iter().enumerate() {
            let Some(m) = m else { continue };
            if health[slot] == Health::Faulty && m.connection_lost() {
                lost.entry(slot as u32).or_insert_with(|| {
                    tracing::warn!(
                        slot,
                        member = %m.describe(),
                        member_timeout_seconds = self.member_timeout.as_secs(),
                        "disconnected; trying it again in the background"
                    );
                    let now = Instant::now();
                    Reconnect {
                        uri: m.describe().to_owned(),
                        since: now,
                        delay: RECONNECT_DELAY_FIRST,
                        next_try: now + RECONNECT_DELAY_FIRST,
                        trying: false,
                        failed: false,
                    }
                });
            }
        }
        drop(members);
        let now = Instant::now();
        for (&slot, r) in lost.iter_mut() {
            if !r.failed && now.duration_since(r.since) >= self.member_timeout {
                r.failed = true;
                tracing::error!(
                    slot,
                    member = %r.uri,
                    member_timeout_seconds = self.member_timeout.as_secs(),
                    "away longer than --member-timeout: failed (a spare takes its place if there \
                     is one; `platter re-add` or `replace` otherwise)"
                );
            }
        }
        if lost.values().any(|r| r.trying)
            || self.stopping.load(Ordering::SeqCst)
            || self.engine.with_volume(|v| v.rebuild_progress()).is_some()
        {
            return;
        }
        let Some((&slot, r)) = lost
            .iter_mut()
            .find(|(_, r)| !r.failed && r.next_try <= now)
        else {
            return;
        };
        r.trying = true;
        let uri = r.uri.clone();
        drop(lost);
        let manager = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("reconnect".into())
            .spawn(move || manager.try_reconnect(slot, &uri));
        match spawned {
            Ok(handle) => *self.reconnecting.lock().expect("reconnecting") = Some(handle),
            Err(e) => {
                tracing::error!(error = %e, "cannot start a thread to reconnect a member");
                if let Some(r) = self.reconnects.lock().expect("reconnects").get_mut(&slot) {
                    r.trying = false;
                }
            }
        }
    }

    /// Waits for a reconnect try that is running, and starts no more: the
    /// server is shutting down.
    pub fn stop_reconnecting(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let handle = self.reconnecting.lock().expect("reconnecting").take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }

    /// One try at bringing back the member of `slot` from `uri`.
    fn try_reconnect(&self, slot: u32, uri: &str) {
        let outcome = match open_member(uri, self.open_options) {
            Err(e) => {
                tracing::info!(slot, error = %e, "not back yet");
                None
            }
            Ok(device) => {
                let device: Arc<dyn Member> = Arc::from(device);
                let _changing = self.slot_changes.lock().expect("slot changes");
                let result = if self.stopping.load(Ordering::SeqCst) {
                    Err("the server is shutting down".to_owned())
                } else {
                    // Checked before the old handle goes, so that a host
                    // that takes the connection but not yet requests
                    // (paused, still starting) stays disconnected.
                    self.check_returning(uri, device.as_ref())
                        .and_then(|_| self.release_old_handle(uri))
                        .and_then(|()| self.re_add_opened(uri, Arc::clone(&device)))
                };
                match result {
                    Err(e) if device.connection_lost() => {
                        tracing::info!(slot, error = %e, "connected, but not answering yet");
                        None
                    }
                    r => Some(r),
                }
            }
        };
        let mut lost = self.reconnects.lock().expect("reconnects");
        match outcome {
            Some(Ok(v)) => {
                tracing::info!(
                    slot,
                    member = %uri,
                    missed_regions = %v["missed_regions"],
                    "reconnected; rebuilding what it missed"
                );
                lost.remove(&slot);
            }
            Some(Err(e)) => {
                tracing::error!(
                    slot,
                    member = %uri,
                    error = %e,
                    "the member's host answers again, but it cannot come back on its own"
                );
                if let Some(r) = lost.get_mut(&slot) {
                    r.trying = false;
                    r.failed = true;
                }
            }
            None => {
                if let Some(r) = lost.get_mut(&slot) {
                    r.trying = false;
                    r.delay = (r.delay * 2).min(RECONNECT_DELAY_MAX);
                    r.next_try = Instant::now() + r.delay;
                }
            }
        }
    }

    /// Brings `device` (opened from `path`) back into its slot; the caller
    /// holds `slot_changes`.
    fn re_add_opened(&self, path: &str, device: Arc<dyn Member>) -> Result<Value, String> {
        if self.engine.with_volume(|v| v.rebuild_progress()).is_some() {
            return Err("a member is being rebuilt; one at a time".into());
        }
        let slot = self.check_returning(path, device.as_ref())?;
        empty_ppl(device.as_ref(), self.meta.label().ppl)?;
        self.note_rotational(slot, &device);
        self.engine.set_member(slot, device);
        self.engine
            .with_volume(|v| v.start_partial_rebuild(slot, 0))
            .map_err(|e| e.to_string())?;
        let missed = self
            .engine
            .with_volume(|v| v.intent_status().map_or(0, |b| b.missed_regions));
        self.meta.record(|l| {
            let entry = &mut l.slots[slot as usize];
            // Kept while it rebuilds: a restart resumes the partial rebuild.
            entry.state = SlotState::Rebuilding;
            l.state = VolumeState::Rebuilding;
            l.rebuild_checkpoint_bytes = 0;
        });
        tracing::info!(
            slot,
            missed_regions = missed,
            "member re-added; rebuilding what it missed"
        );
        Ok(json!({ "re_added": slot, "device": path, "missed_regions": missed }))
    }

    /// The slot `device` may come back to, or why not.
    fn check_returning(&self, path: &str, device: &dyn Member) -> Result<u32, String> {
        let full = "; `platter replace` rebuilds it whole";
        let area = read_label_area(device).map_err(|e| format!("{path}: {e}"))?;
        let own =
            Label::decode(&area).map_err(|e| format!("{path}: no usable label ({e}){full}"))?;
        let table = self.meta.label();
        if own.volume_uuid != table.volume_uuid {
            return Err(format!("{path} belongs to another volume"));
        }
        let slot = own.slot;
        let Some(entry) = table.slots.get(slot as usize) else {
            return Err(format!(
                "{path} was slot {slot}, which this volume does not have"
            ));
        };
        if entry.member_uuid != own.member_uuid {
            return Err(format!(
                "{path} was member {slot}, which has been replaced since{full}"
            ));
        }
        let health = self.engine.health()[slot as usize];
        if !matches!(health, Health::Faulty | Health::Missing) {
            return Err(format!("member {slot} is in use ({health:?})"));
        }
        if self.engine.with_volume(|v| v.intent_status()).is_none() {
            return Err(format!(
                "the volume keeps no write-intent bitmap, so what {path} missed is not known{full}"
            ));
        }
        if device.size_bytes() < table.data_offset_bytes + entry.data_size_bytes {
            return Err(format!("{path} is smaller than when it was member {slot}"));
        }
        if entry.left_at_events == 0
            || own.event_counter.checked_add(1) != Some(entry.left_at_events)
        {
            return Err(format!(
                "{path}'s label (event {}) is not the last one member {slot} had before it left \
                 (event {}): it was written elsewhere, or missed more than the bitmap kept{full}",
                own.event_counter,
                entry.left_at_events.saturating_sub(1)
            ));
        }
        Ok(slot)
    }
}
