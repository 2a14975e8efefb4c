//! Keeping the labels true while the volume runs: a member that fails, a
//! replacement that starts or finishes its rebuild, and the rebuild's
//! checkpoint are written to every member still in use, with the event
//! counter bumped, so that after a restart a stale member is never trusted
//! over the fresh ones.

use crate::engine::Engine;
use platter_core::label::{Label, SlotState, VolumeState};
use platter_core::volume::{Event, Health};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

pub struct Meta {
    label: Mutex<Label>,
    engine: Arc<Engine>,
    read_only: bool,
}

pub(crate) fn now_unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Meta {
    pub fn new(label: Label, engine: Arc<Engine>, read_only: bool) -> Meta {
        Meta {
            label: Mutex::new(label),
            engine,
            read_only,
        }
    }

    /// Whether the labels are left alone (a read-only server).
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    pub fn label(&self) -> Label {
        self.label.lock().expect("label lock").clone()
    }

    /// Runs `f` with no label being written meanwhile: a label write
    /// that took the members before a device changed lands on none but
    /// the old device.
    pub(crate) fn between_writes<T>(&self, f: impl FnOnce() -> T) -> T {
        let _held = self.label.lock().expect("label lock");
        f()
    }

    /// Applies `change`, bumps the event counter and writes the label to
    /// every member in use. A member that cannot take it is left to fail on
    /// its next I/O; the others still record the change.
    pub fn record(&self, change: impl FnOnce(&mut Label)) {
        let _ = self.record_on_members(change);
    }

    /// [`Meta::record`], returning the members that could not take the
    /// label, with why.
    pub(crate) fn record_on_members(&self, change: impl FnOnce(&mut Label)) -> Vec<(u32, String)> {
        let mut failed = Vec::new();
        if self.read_only {
            return failed;
        }
        let mut label = self.label.lock().expect("label lock");
        change(&mut label);
        label.event_counter += 1;
        label.updated_unix_seconds = now_unix_seconds();
        let health = self.engine.health();
        let members = self.engine.members();
        for (slot, h) in health.iter().enumerate() {
            if !matches!(h, Health::Online | Health::Rebuilding) {
                continue;
            }
            let Some(m) = &members[slot] else { continue };
            let bytes = label.for_slot(slot as u32).encode();
            if let Err(e) = m.write_at(0, &bytes).and_then(|()| m.flush()) {
                tracing::error!(slot, error = %e, "cannot write the label");
                failed.push((slot as u32, format!("cannot write the label: {e}")));
            }
        }
        failed
    }

    /// A reshape begins (`grow.rs`, the engine paused and idle): `label`
    /// goes to the members in use, slot by slot, then to the `added`
    /// devices in the slots after them. A stop between leaves the added
    /// members blank and named missing, not the old ones stale. Answers
    /// the members that could not take it.
    pub(crate) fn begin_reshape(
        &self,
        mut label: Label,
        added: &[Arc<dyn platter_io::Member>],
    ) -> Vec<(u32, String)> {
        let mut failed = Vec::new();
        let mut current = self.label.lock().expect("label lock");
        label.event_counter = current.event_counter + 1;
        label.updated_unix_seconds = now_unix_seconds();
        let health = self.engine.health();
        let members = self.engine.members();
        let n_old = members.len();
        let devices = members
            .into_iter()
            .enumerate()
            .filter(|(slot, _)| health[*slot] == Health::Online)
            .filter_map(|(slot, m)| Some((slot, m?)))
            .chain(
                added
                    .iter()
                    .enumerate()
                    .map(|(i, d)| (n_old + i, Arc::clone(d))),
            );
        for (slot, m) in devices {
            let bytes = label.for_slot(slot as u32).encode();
            if let Err(e) = m.write_at(0, &bytes).and_then(|()| m.flush()) {
                tracing::error!(slot, error = %e, "cannot write the label");
                failed.push((slot as u32, format!("cannot write the label: {e}")));
            }
        }
        *current = label;
        failed
    }

    /// The volume-wide state from the members' health and a wanted state.
    pub fn state_for(health: &[Health], wanted: VolumeState) -> VolumeState {
        if health.contains(&Health::Rebuilding) {
            VolumeState::Rebuilding
        } else if wanted == VolumeState::Clean && health.iter().any(|h| *h != Health::Online) {
            VolumeState::Degraded
        } else {
            wanted
        }
    }

    /// Keeps the labels true after `e`. Returns the members that could not
    /// take the new label: they must be failed too, or a crash could bring
    /// them back believing the failed member current.
    pub fn on_event(&self, e: &Event) -> Vec<(u32, String)> {
        match e {
            Event::MemberFaulty { member, .. } => self.record_on_members(|l| {
                let slot = &mut l.slots[*member as usize];
                slot.state = SlotState::Faulty;
                // This write's counter (`record_on_members` bumps it after
                // the change): the member's own label is below it.
                slot.left_at_events = l.event_counter + 1;
                l.rebuild_checkpoint_bytes = 0;
                if l.state == VolumeState::Rebuilding {
                    l.state = VolumeState::Dirty;
                }
            }),
            Event::RebuildDone { member } => self.record_on_members(|l| {
                l.slots[*member as usize].state = SlotState::Active;
                l.slots[*member as usize].left_at_events = 0;
                l.rebuild_checkpoint_bytes = 0;
                l.state = VolumeState::Dirty;
            }),
            // The member stays in use: nothing for the labels.
            Event::ReadErrorCorrected { .. } | Event::NoSpace { .. } => Vec::new(),
        }
    }

    /// Records how far the rebuild has come. The label keeps it in bytes
    /// of the member's data area: the stripe cursor times the interleave.
    pub fn checkpoint(&self, cursor_stripe: u64) {
        self.record(|l| {
            l.rebuild_checkpoint_bytes = cursor_stripe * l.interleave_bytes;
        });
    }
}
