//! `platter reshape --control` (and `grow`): starting a reshape on a
//! running volume. The engine is paused and emptied, the labels written
//! (the old members' first, then the added ones'), and the engine swapped
//! to serve both layouts; the upkeep thread moves the data from there, as
//! it does for a reshape resumed at start-up (docs/reshape.md).

use crate::engine::serving::Serving;
use crate::manage::newdevice::NewDevice;
use crate::manage::{layout_json, Manager};
use platter_core::geometry::Geometry;
use platter_core::intent::{IntentLayout, RegionSet};
use platter_core::label::Label;
use platter_core::reshape::{
    q_member_label, q_on_added_member, redundancy_lost, refuse_to_begin, remedies,
    reserved_from_bytes, reshaped_label, target, Asked, Plan,
};
use platter_core::volume::{CacheLimits, Health, Volume};
use platter_io::Member;
use serde_json::{json, Value};
use std::sync::Arc;

impl Manager {
    pub fn reshape(&self, req: &Value) -> Result<Value, String> {
        let _changing = self.slot_changes.lock().expect("slot changes");
        let label = self.meta.label();
        self.refuse_busy(&label)?;
        let paths: Vec<&str> = req
            .get("add")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let asked = asked_of(req, paths.len())?;
        let old = self.engine.with_volume(|v| v.geometry().clone());
        if let Some(new) = q_on_added_member(&old, &asked) {
            return self.add_q_member(req, &label, old, new, paths[0]);
        }
        let new = target(&old, &asked).map_err(|e| e.0)?;
        let force = req.get("force").and_then(Value::as_bool).unwrap_or(false);
        let dry_run = req.get("dry_run").and_then(Value::as_bool) == Some(true);
        // Refused before anything is opened or written, as `platter
        // reshape` refuses it (a dry run says it instead).
        let lowered = redundancy_lost(&old, &new);
        if let (Some(why), false, false) = (&lowered, force, dry_run) {
            return Err(format!(
                "{why}; give --force to reshape it anyway, or ask for a level that keeps \
                 the redundancy"
            ));
        }
        let plan = plan_move(&old, new, &asked, &label)?;
        // Its data offset may be lower than the old (Plan::choose).
        let new = plan.new_geometry().clone();
        let summary = json!({
            "from": layout_json(&old),
            "to": layout_json(&new),
            "moves_bytes": plan.total_bytes(),
            "seconds_at_rate_limit": self.seconds_at_rate_limit(plan.total_bytes()),
            "rate_limit_bytes_per_sec": self.rate_limit_json(),
            "redundancy_lost": lowered,
        });
        if dry_run {
            return Ok(summary);
        }
        let create_size_bytes = req.get("size_bytes").and_then(Value::as_u64);
        let mut added: Vec<Arc<dyn Member>> = Vec::new();
        for (i, path) in paths.iter().enumerate() {
            if paths[..i].contains(path) {
                return Err(format!("{path} is named twice"));
            }
            added.push(self.open_new_device(&NewDevice {
                path,
                create_size_bytes,
                force,
            })?);
        }
        self.start_move(plan, &label, added)?;
        tracing::info!(
            from = %old.level(),
            to = %new.level(),
            members = new.members(),
            "reshape started"
        );
        Ok(summary)
    }

    /// How many members to add to this volume, its level kept, for it to
    /// hold at least `size_bytes`, and the plan that moves its data so
    /// (`volume extend --add-subdisks` of a pool's volume). Refused as a
    /// reshape would be, or when no count up to a label's limit is enough.
    pub(crate) fn plan_growth(&self, size_bytes: u64) -> Result<(u32, Plan), String> {
        let label = self.meta.label();
        self.refuse_busy(&label)?;
        let old = self.engine.with_volume(|v| v.geometry().clone());
        if old.level() == platter_core::Level::Mirror {
            return Err("a mirror's subdisks are copies: more of them hold no more".into());
        }
        let mut last = String::new();
        for added in 1..=platter_core::format::MAX_MEMBERS.saturating_sub(old.members()) {
            let asked = Asked {
                added_members: added,
                level: None,
                parity_layout: None,
                interleave_bytes: None,
            };
            let new = target(&old, &asked).map_err(|e| e.0)?;
            if new.volume_size_bytes() < size_bytes {
                continue;
            }
            match plan_move(&old, new, &asked, &label) {
                Ok(plan) => return Ok((added, plan)),
                Err(e) => last = e,
            }
            break;
        }
        Err(if last.is_empty() {
            format!("no number of subdisks a label holds makes it {size_bytes} bytes")
        } else {
            last
        })
    }

    /// Starts the move `plan_growth` planned, onto the members `added`
    /// (a pool's new subdisks, laid out blank and recorded by its host).
    pub(crate) fn grow_onto(
        &self,
        plan: Plan,
        added: Vec<Arc<dyn Member>>,
    ) -> Result<Value, String> {
        let _changing = self.slot_changes.lock().expect("slot changes");
        let label = self.meta.label();
        self.refuse_busy(&label)?;
        let old = self.engine.with_volume(|v| v.geometry().clone());
        let summary = json!({
            "from": layout_json(&old),
            "to": layout_json(plan.new_geometry()),
            "moves_bytes": plan.total_bytes(),
            "seconds_at_rate_limit": self.seconds_at_rate_limit(plan.total_bytes()),
        });
        self.start_move(plan, &label, added)?;
        tracing::info!(
            members = old.members(),
            "reshape started to grow the volume onto new subdisks"
        );
        Ok(summary)
    }

    /// A reshape begins on a writable volume with every member in use and
    /// nothing being rebuilt or resynced.
    fn refuse_busy(&self, label: &Label) -> Result<(), String> {
        if self.meta.read_only() {
            return Err("the server is read-only".into());
        }
        refuse_to_begin(label, &self.engine.health()).map_err(|e| e.0)?;
        if self.engine.with_volume(|v| v.rebuild_progress()).is_some() {
            return Err("a member is being rebuilt: reshape once it is done".into());
        }
        if self.upkeep.resync_progress().is_some() {
            return Err("a resync runs: reshape once it is done".into());
        }
        Ok(())
    }

    /// The labels of the new layout written and the engine serving both
    /// layouts; members whose label could not be written are failed once
    /// it runs again.
    fn start_move(
        &self,
        plan: Plan,
        label: &Label,
        added: Vec<Arc<dyn Member>>,
    ) -> Result<(), String> {
        let limits = self.engine.with_volume(|v| v.limits().clone());
        let id =
            u64::from_le_bytes(uuid::Uuid::new_v4().as_bytes()[..8].try_into().expect("8")) | 1;
        let added_uuids: Vec<[u8; 16]> = added
            .iter()
            .map(|_| *uuid::Uuid::new_v4().as_bytes())
            .collect();
        let new_label = reshaped_label(label, plan.new_geometry(), &added_uuids, Some(id));
        self.engine.pause();
        let started = self.swap_in(plan, new_label, added, id, limits);
        self.engine.resume();
        let failed = started?;
        for (slot, why) in failed {
            self.engine.mark_faulty(slot, why);
        }
        Ok(())
    }

    /// RAID-5 to RAID-6 with Q on the added member (md's
    /// `--layout=preserve`): the engine is paused and emptied, the labels
    /// written, and a RAID-6 volume over the same members and the new one
    /// served in place of the RAID-5, the new member rebuilt as Q.
    fn add_q_member(
        &self,
        req: &Value,
        label: &Label,
        old: Geometry,
        new: Geometry,
        path: &str,
    ) -> Result<Value, String> {
        let q_bytes = new.member_used_bytes(old.members());
        let summary = json!({
            "from": layout_json(&old),
            "to": layout_json(&new),
            "moves_bytes": 0,
            "q_bytes": q_bytes,
            "seconds_at_rate_limit": self.seconds_at_rate_limit(q_bytes),
            "rate_limit_bytes_per_sec": self.rate_limit_json(),
        });
        if req.get("dry_run").and_then(Value::as_bool) == Some(true) {
            return Ok(summary);
        }
        let device = self.open_new_device(&NewDevice {
            path,
            create_size_bytes: req.get("size_bytes").and_then(Value::as_u64),
            force: req.get("force").and_then(Value::as_bool).unwrap_or(false),
        })?;
        let (limits, cache) = self
            .engine
            .with_volume(|v| (v.limits().clone(), v.cache_status()));
        let n = old.members();
        let new_label = q_member_label(label, &new, *uuid::Uuid::new_v4().as_bytes());
        let q_volume = || -> Result<Volume, String> {
            // Health as it is now, with the engine paused and empty.
            let mut health = self.engine.health();
            health.push(Health::Missing);
            let mut vol = Volume::new(new.clone(), health, limits.clone());
            if label.intent_region_stripes > 0 {
                if let Some(layout) = IntentLayout::new(&new, label.intent_region_stripes)? {
                    let bits = RegionSet::new(&layout);
                    vol.enable_intent(layout, bits, false);
                }
            }
            if let Some(c) = cache {
                vol.enable_stripe_cache(CacheLimits {
                    max_stripes: c.capacity_stripes,
                    ..CacheLimits::DEFAULT
                });
            }
            vol.start_rebuild(n, 0).map_err(|e| e.to_string())?;
            Ok(vol)
        };
        self.engine.pause();
        let swapped = self.engine.empty_paused().and_then(|()| {
            let vol = q_volume()?;
            let failed = self
                .meta
                .begin_reshape(new_label, std::slice::from_ref(&device));
            self.engine
                .swap_serving(Serving::Plain(vol), vec![Arc::clone(&device)]);
            Ok(failed)
        });
        self.engine.resume();
        for (slot, why) in swapped? {
            self.engine.mark_faulty(slot, why);
        }
        tracing::info!(
            layout = %new.spec().parity_layout,
            "raid5 is now raid6: rebuilding Q on the added member"
        );
        Ok(summary)
    }

    /// With the engine paused: empties it, writes the labels and starts
    /// serving both layouts. Answers the members whose label could not
    /// be written (to be failed once the engine runs again).
    fn swap_in(
        &self,
        plan: Plan,
        new_label: Label,
        added: Vec<Arc<dyn Member>>,
        id: u64,
        limits: platter_core::volume::Limits,
    ) -> Result<Vec<(u32, String)>, String> {
        self.engine.empty_paused()?;
        let n_new = plan.new_geometry().members() as usize;
        let health = vec![Health::Online; n_new];
        let failed = self.meta.begin_reshape(new_label.clone(), &added);
        let reshaping =
            crate::engine::resume::driven(plan, 0, health, new_label.volume_uuid, id, limits);
        self.engine.begin_reshape(reshaping, added);
        Ok(failed)
    }
}

/// The request's level, layout, interleave and number of added members.
fn asked_of(req: &Value, added: usize) -> Result<Asked, String> {
    Ok(Asked {
        added_members: u32::try_from(added).map_err(|_| "too many members")?,
        level: req
            .get("level")
            .and_then(Value::as_str)
            .map(str::parse)
            .transpose()
            .map_err(|e| format!("level: {e}"))?,
        parity_layout: req
            .get("layout")
            .and_then(Value::as_str)
            .map(str::parse)
            .transpose()
            .map_err(|e| format!("layout: {e}"))?,
        interleave_bytes: req.get("interleave_bytes").and_then(Value::as_u64),
    })
}

/// The windows' plan for moving the data to `new` in place, refused when
/// no plan fits the room before the data (with what would make one fit)
/// or the volume's bitmap cannot cover the new layout. A concat has
/// nothing to move: `platter grow` writes its labels.
fn plan_move(old: &Geometry, new: Geometry, asked: &Asked, label: &Label) -> Result<Plan, String> {
    if old.level() == platter_core::Level::Concat {
        return Err(
            "a concat grows at its end with nothing to move: stop the server and run \
             platter grow, which writes the labels"
                .into(),
        );
    }
    let reserved = reserved_from_bytes(old, &new, label.intent_region_stripes);
    let plan = Plan::choose(old.clone(), new, reserved).map_err(|e| {
        let mut msg = format!("cannot reshape in place: {e}");
        if let Some(r) = remedies(old, asked, label.intent_region_stripes) {
            msg += &format!("\n{r}");
        }
        msg
    })?;
    let new = plan.new_geometry();
    if label.intent_region_stripes > 0 && new.redundancy() > 0 {
        platter_core::intent::IntentLayout::new(new, label.intent_region_stripes)
            .map_err(|e| format!("the write-intent bitmap for the new layout: {e}"))?;
    }
    Ok(plan)
}
