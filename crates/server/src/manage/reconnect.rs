//! Remote members that are away but expected back: *disconnected* ones
//! (their connection broke, or a request went unanswered for
//! `--remote-timeout`, while served) and *unreachable* ones (the server
//! started without them, their host not answering). Each is tried again
//! with backoff (a second after, then twice as long each time, at most
//! [`RECONNECT_DELAY_MAX`]) and brought back by `re-add` (readd.rs) once
//! its label reads back, so that only what it missed is rebuilt; one away
//! longer than `--member-timeout` is failed for good.
//!
//! Keyed by URI: a member unreachable at start has no slot until its label
//! is read.

use crate::manage::Manager;
use crate::observe::alerts::{Alert, EventKind};
use platter_core::volume::Health;
use platter_io::{open_member, Member};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const RECONNECT_DELAY_FIRST: Duration = Duration::from_secs(1);
pub const RECONNECT_DELAY_MAX: Duration = Duration::from_secs(30);

/// One remote member away.
pub struct Away {
    /// Its slot, once known: a member that broke while served has one; one
    /// unreachable at start has none until its label is read.
    slot: Option<u32>,
    /// When it was found away.
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

impl Away {
    fn new(slot: Option<u32>) -> Away {
        let now = Instant::now();
        Away {
            slot,
            since: now,
            delay: RECONNECT_DELAY_FIRST,
            next_try: now + RECONNECT_DELAY_FIRST,
            trying: false,
            failed: false,
        }
    }
}

impl Manager {
    /// Members the server started without because their host did not
    /// answer: tried like disconnected ones, placed in their slot once
    /// their label reads back.
    pub fn await_unreachable(&self, uris: &[String]) {
        let mut away = self.away.lock().expect("away");
        for uri in uris {
            tracing::warn!(
                member = %uri,
                member_timeout_seconds = self.member_timeout.as_secs(),
                "unreachable at start; serving without it{}",
                if self.reconnect {
                    " and trying it in the background"
                } else {
                    " (`platter re-add` brings it back)"
                }
            );
            if self.reconnect {
                away.insert(uri.clone(), Away::new(None));
            }
        }
    }

    /// The slot's remote member is disconnected: out of use because its
    /// connection broke, but still expected back (a spare does not take
    /// its place yet). From the moment its connection is seen broken, so
    /// that a spare does not slip in before the server's loop notes it.
    pub fn is_disconnected(&self, slot: u32) -> bool {
        if !self.reconnect || self.engine.health()[slot as usize] != Health::Faulty {
            return false;
        }
        let away = self.away.lock().expect("away");
        if let Some(a) = away.values().find(|a| a.slot == Some(slot)) {
            return !a.failed;
        }
        self.engine.members()[slot as usize]
            .as_ref()
            .is_some_and(|m| m.connection_lost())
    }

    /// Whether a spare may take `slot`: not while its member is
    /// disconnected, nor, for a slot with no device, while a member
    /// unreachable at start (whose slot is not known yet) is still awaited.
    pub fn spare_may_take(&self, slot: u32) -> bool {
        if self.is_disconnected(slot) {
            return false;
        }
        self.engine.health()[slot as usize] != Health::Missing
            || !self
                .away
                .lock()
                .expect("away")
                .values()
                .any(|a| a.slot.is_none() && !a.failed)
    }

    /// Seconds the slot's member has been disconnected, while it is.
    pub fn away_seconds(&self, slot: u32) -> Option<u64> {
        if !self.is_disconnected(slot) {
            return None;
        }
        let away = self.away.lock().expect("away");
        Some(
            away.values()
                .find(|a| a.slot == Some(slot))
                .map_or(0, |a| a.since.elapsed().as_secs()),
        )
    }

    /// Members unreachable since the start, not yet placed in a slot, for
    /// `status`.
    pub fn unplaced_status(&self) -> Value {
        let away = self.away.lock().expect("away");
        away.iter()
            .filter(|(_, a)| a.slot.is_none() && !a.failed)
            .map(|(uri, a)| json!({ "uri": uri, "away_seconds": a.since.elapsed().as_secs() }))
            .collect()
    }

    /// Notes members newly disconnected, fails those away longer than the
    /// member timeout, and starts a try at bringing one back if none runs.
    /// Called by the server's loop every 100 ms. A try runs on a thread of
    /// its own (a host that neither answers nor refuses holds it up to the
    /// connect timeout), one at a time; [`Manager::stop_reconnecting`]
    /// waits for it.
    pub fn reconnect_lost(self: &Arc<Self>) {
        let health = self.engine.health();
        let members = self.engine.members();
        let mut away = self.away.lock().expect("away");
        // A placed member stays listed while out of use (or being tried);
        // one back in use, or whose slot another device took, is gone.
        away.retain(|uri, a| match a.slot {
            None => !a.failed || a.trying,
            Some(s) => {
                a.trying
                    || (health[s as usize] == Health::Faulty
                        && members[s as usize]
                            .as_ref()
                            .is_none_or(|m| m.describe() == uri))
            }
        });
        for (slot, m) in members.iter().enumerate() {
            let Some(m) = m else { continue };
            if health[slot] == Health::Faulty
                && m.connection_lost()
                && !away.contains_key(m.describe())
            {
                tracing::warn!(
                    slot,
                    member = %m.describe(),
                    member_timeout_seconds = self.member_timeout.as_secs(),
                    "disconnected; trying it again in the background"
                );
                away.insert(m.describe().to_owned(), Away::new(Some(slot as u32)));
            }
        }
        drop(members);
        let now = Instant::now();
        for (uri, a) in away.iter_mut() {
            // Not while a try runs (it ends within the connect timeout):
            // a try that found the host answering would otherwise re-add a
            // member this loop had just failed for good, and the member
            // the log and the alert call failed would be back in use.
            if !a.failed && !a.trying && now.duration_since(a.since) >= self.member_timeout {
                a.failed = true;
                tracing::error!(
                    slot = ?a.slot,
                    member = %uri,
                    member_timeout_seconds = self.member_timeout.as_secs(),
                    "away longer than --member-timeout: failed (a spare takes its place if there \
                     is one; `platter re-add` or `replace` otherwise)"
                );
                let mut alert = Alert::new(
                    EventKind::MemberFailed,
                    format!(
                        "away longer than --member-timeout ({} s)",
                        self.member_timeout.as_secs()
                    ),
                );
                alert.slot = a.slot;
                alert.member = Some(uri.clone());
                self.engine.alert(alert);
            }
        }
        if away.values().any(|a| a.trying)
            || self.stopping.load(Ordering::SeqCst)
            || self.engine.with_volume(|v| v.rebuild_progress()).is_some()
        {
            return;
        }
        let Some((uri, a)) = away
            .iter_mut()
            .find(|(_, a)| !a.failed && a.next_try <= now)
        else {
            return;
        };
        a.trying = true;
        let uri = uri.clone();
        drop(away);
        let manager = Arc::clone(self);
        let for_thread = uri.clone();
        let spawned = std::thread::Builder::new()
            .name("reconnect".into())
            .spawn(move || manager.try_reconnect(&for_thread));
        match spawned {
            Ok(handle) => *self.reconnecting.lock().expect("reconnecting") = Some(handle),
            Err(e) => {
                tracing::error!(error = %e, "cannot start a thread to reconnect a member");
                if let Some(a) = self.away.lock().expect("away").get_mut(&uri) {
                    a.trying = false;
                }
            }
        }
    }

    /// A member in use whose connection broke while nothing was asked of
    /// it (an idle volume, one of several connections) is taken out of use
    /// now, as its next I/O would: `status` must not call it active while
    /// its host is gone, and its return should not wait for a client's
    /// write to notice.
    pub fn fail_quietly_lost(&self) {
        let health = self.engine.health();
        let members = self.engine.members();
        for (slot, m) in members.iter().enumerate() {
            let Some(m) = m else { continue };
            if matches!(health[slot], Health::Online | Health::Rebuilding) && m.connection_lost() {
                // Any other connection of it goes too.
                m.abandon("another connection to the member was lost");
                let reason = format!("member {}: its connection was lost", m.describe());
                self.engine.mark_faulty(slot as u32, reason);
            }
        }
    }

    /// Members out of use (faulty: failed, away, disconnected) are sent
    /// nothing more: a remote one's connections are closed, every one of
    /// them. A member whose one connection of several broke, or that was
    /// failed for a stall past `--member-timeout`, kept the others open
    /// until `platter remove`, and its server (nbdkit) could not exit on
    /// SIGTERM for the idle client. Whether it counts as disconnected
    /// does not change (`connection_lost`); a reconnect or `re-add` opens
    /// the member anew. Called by the server's loop every 100 ms.
    pub fn close_failed_members(&self) {
        // A replacement or re-add puts a new device in a faulty slot
        // before the slot is in use again: while one is under way, the
        // slots are left alone (the next round comes 100 ms later).
        let Ok(_changing) = self.slot_changes.try_lock() else {
            return;
        };
        let health = self.engine.health();
        for (slot, m) in self.engine.members().iter().enumerate() {
            if let (Some(m), Health::Faulty) = (m, health[slot]) {
                m.close_connections();
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

    /// One try at bringing back the member at `uri`.
    fn try_reconnect(&self, uri: &str) {
        let outcome = match open_member(uri, self.open_options) {
            Err(e) => {
                tracing::info!(member = %uri, error = %e, "not back yet");
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
                        tracing::info!(member = %uri, error = %e, "connected, but not answering yet");
                        None
                    }
                    r => Some(r),
                }
            }
        };
        let mut away = self.away.lock().expect("away");
        match outcome {
            Some(Ok(v)) => {
                tracing::info!(
                    slot = %v["re_added"],
                    member = %uri,
                    missed_regions = %v["missed_regions"],
                    "reconnected; rebuilding what it missed"
                );
                let mut alert = Alert::new(
                    EventKind::MemberReconnected,
                    format!(
                        "back; rebuilding the {} regions it missed",
                        v["missed_regions"]
                    ),
                );
                alert.slot = v["re_added"].as_u64().map(|s| s as u32);
                alert.member = Some(uri.to_string());
                self.engine.alert(alert);
                away.remove(uri);
            }
            Some(Err(e)) => {
                tracing::error!(
                    member = %uri,
                    error = %e,
                    "the member's host answers again, but it cannot come back on its own"
                );
                if let Some(a) = away.get_mut(uri) {
                    a.trying = false;
                    a.failed = true;
                }
            }
            None => {
                if let Some(a) = away.get_mut(uri) {
                    a.trying = false;
                    a.delay = (a.delay * 2).min(RECONNECT_DELAY_MAX);
                    a.next_try = Instant::now() + a.delay;
                }
            }
        }
    }
}
