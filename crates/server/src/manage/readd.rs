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

use crate::manage::newdevice::{empty_ppl, names_device};
use crate::manage::Manager;
use platter_core::label::{Label, SlotState, VolumeState};
use platter_core::volume::Health;
use platter_io::assembly::read_label_area;
use platter_io::{open_member, Member};
use serde_json::{json, Value};
use std::sync::Arc;

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
    pub(crate) fn release_old_handle(&self, path: &str) -> Result<(), String> {
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

    /// Brings `device` (opened from `path`) back into its slot; the caller
    /// holds `slot_changes`.
    pub(crate) fn re_add_opened(
        &self,
        path: &str,
        device: Arc<dyn Member>,
    ) -> Result<Value, String> {
        if self.engine.with_volume(|v| v.rebuild_progress()).is_some() {
            return Err("a member is being rebuilt; one at a time".into());
        }
        if self.engine.reshape_progress().is_some() {
            return Err(crate::manage::RESHAPING_NO_REBUILD.into());
        }
        let slot = self.check_returning(path, device.as_ref())?;
        empty_ppl(device.as_ref(), self.meta.label().ppl)?;
        self.note_rotational(slot, &device);
        self.engine.set_member(slot, device);
        self.forget_left_out(slot);
        self.engine
            .with_volume(|v| v.start_partial_rebuild(slot, 0))
            .map_err(|e| e.to_string())?;
        let missed = self
            .engine
            .with_volume(|v| v.intent_status().map_or(0, |b| b.missed_regions));
        let refused = self.meta.record_on_members(|l| {
            let entry = &mut l.slots[slot as usize];
            // Kept while it rebuilds: a restart resumes the partial rebuild.
            entry.state = SlotState::Rebuilding;
            l.state = VolumeState::Rebuilding;
            l.rebuild_checkpoint_bytes = 0;
        });
        if let Some((_, why)) = refused.iter().find(|(m, _)| *m == slot) {
            // Its label still says it left: a restart would not take it as
            // current, so it is not current now either.
            let reason = format!("{path} could not take its label on re-add: {why}");
            self.engine.mark_faulty(slot, reason.clone());
            return Err(format!("{reason}; member {slot} stays out of use"));
        }
        tracing::info!(
            slot,
            missed_regions = missed,
            "member re-added; rebuilding what it missed"
        );
        Ok(json!({ "re_added": slot, "device": path, "missed_regions": missed }))
    }

    /// The slot `device` may come back to, or why not.
    pub(crate) fn check_returning(&self, path: &str, device: &dyn Member) -> Result<u32, String> {
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
