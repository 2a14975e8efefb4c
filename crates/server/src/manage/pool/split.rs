//! `plex detach|attach --control`: a plex of a volume of several plexes
//! split off while the volume serves, and joined back (the command line's
//! `pool/split.rs` says what each means; docs/pools.md "Splitting a
//! volume").
//!
//! Detach: the volume paused and emptied, every plex flushed, so that the
//! plex holds the volume's bytes at that instant; the configuration
//! records the split; the mirror marks the plex out (its leaving in the
//! other plexes' labels, from which its bitmap keeps every region written
//! after); the volume resumes; the plex's array stops, and with `--as`
//! starts again as a volume of its own. A crash after the configuration
//! finds the volume served without the plex, which the start records as
//! leaving one event after the plex's own label: the same as here.
//!
//! Attach: a volume served as the plex stops; the configuration records
//! the plex attached; its array starts and the mirror takes it back by
//! re-add (only the regions its bitmap kept) or, when the plex's label
//! moved on after the split (served writable), by a whole rebuild. A crash
//! after the configuration finds the plex stale in the mirror's labels:
//! [`rejoin_at_start`] does the same.

use super::heal::plex_index;
use super::{refuse_with_clients, stop_served, NewVolume, PoolServer};
use crate::manage::Manager;
use crate::plex::PlexMember;
use crate::served::Served;
use crate::server::{keep_volume, start_plexes, PoolStart};
use platter_core::label::{Label, SlotState};
use platter_core::pool::DetachedPlex;
use platter_core::volume::{Health, Request};
use platter_io::assembly::read_label_area;
use platter_io::Member;
use serde_json::{json, Value};
use std::sync::Arc;

impl PoolServer {
    pub(super) fn detach_plex(&self, req: &Value) -> Result<Value, String> {
        let d = self.host.plan_detach(req)?;
        let name = d.plex_name();
        let served = self
            .volumes
            .named(&d.volume)
            .ok_or_else(|| format!("volume {} is not served", d.volume))?;
        let plex = served
            .plexes()
            .into_iter()
            .find(|x| x.name() == name)
            .ok_or_else(|| format!("plex {name} is not served (it could not start): it holds none of the volume's bytes to split off"))?;
        let m = &served.manager;
        {
            let _changing = m.slot_changes.lock().expect("slot changes");
            refuse_unsplittable(m, d.plex, &name)?;
            m.engine.pause();
            let split = m.engine.empty_paused().and_then(|()| {
                flush_plexes(m)?;
                // Every plex holds every write now: the bitmap's bits
                // clear, so that what it marks from here on is what the
                // plex misses.
                m.engine
                    .run(Request::Sweep { all: true })
                    .map_err(|e| format!("clearing the bitmap: {e}"))?;
                self.host.detach_plex(&d)?;
                m.engine
                    .mark_faulty(d.plex as u32, "its plex is detached".into());
                self.note_detached(m, &d);
                Ok(())
            });
            m.engine.resume();
            split?;
        }
        // Its last writes landed with the flush; nothing writes it after.
        served.take_plex(&name);
        stop_served(&plex);
        tracing::info!(plex = %name, volume = %d.volume, "plex detached");
        let mut answer = json!({
            "plex": name,
            "volume": d.volume,
            "as": d.as_volume,
            "writable": d.writable,
        });
        if let Some(as_name) = &d.as_volume {
            self.serve_detached(as_name).map_err(|e| {
                format!(
                    "plex {name} is detached, but serving it as volume {as_name} failed: {e}; \
                     the server's next start serves it"
                )
            })?;
            answer["size_bytes"] = json!(self
                .volumes
                .named(as_name)
                .map(|s| s.manager.engine.size_bytes()));
        }
        Ok(answer)
    }

    /// `status` of the volume names `plex attach` for the plex's slot.
    fn note_detached(&self, m: &Manager, d: &DetachedPlex) {
        let control = self.control_path.as_deref().unwrap_or("CONTROL");
        let attach = format!(
            "platter plex attach {} {} {} --control {control}",
            self.host.pool_name(),
            d.volume,
            d.plex_name()
        );
        m.detached
            .lock()
            .expect("detached")
            .insert(d.plex as u32, attach);
    }

    /// At the start: each detached plex's slot noted as `detach` notes it.
    pub(crate) fn note_detached_at_start(&self) {
        for d in self.host.detached_plexes() {
            if let Some(v) = self.volumes.named(&d.volume) {
                self.note_detached(&v.manager, &d);
            }
        }
    }

    /// Serves volume `as_name`, a detached plex.
    fn serve_detached(&self, as_name: &str) -> Result<(), String> {
        let new = self.host.start_detached(as_name)?;
        let config = self.config_for(new.member_drives, new.member_delays);
        let PoolStart::Plexes {
            plexes,
            assemble,
            read_only,
        } = new.start
        else {
            return Err("a detached plex is served as a mirror of one plex".into());
        };
        let config = config.or_read_only(read_only);
        let starting = start_plexes(plexes, assemble, &config).map_err(|e| e.to_string())?;
        let served =
            keep_volume(starting, &config, self.control_path.clone()).map_err(|e| e.to_string())?;
        self.volumes.add(served)?;
        tracing::info!(volume = %as_name, read_only, "detached plex served as a volume");
        Ok(())
    }

    pub(super) fn attach_plex(&self, req: &Value) -> Result<Value, String> {
        let force = req.get("force").and_then(Value::as_bool).unwrap_or(false);
        let d = self.host.plan_attach(req)?;
        let name = d.plex_name();
        let served = self
            .volumes
            .named(&d.volume)
            .ok_or_else(|| format!("volume {} is not served", d.volume))?;
        if let Some(as_served) = d.as_volume.as_deref().and_then(|n| self.volumes.named(n)) {
            refuse_with_clients(&as_served, force)?;
            if let Some(taken) = self.volumes.take(as_served.name()) {
                taken.io.close_to_new_clients();
                stop_served(&taken);
            }
        }
        let made = self.host.attach_plex(&d)?;
        let mut answer = self.serve_back(&served, d.plex, &name, made)?;
        tracing::info!(plex = %name, volume = %d.volume, revived = %answer, "plex attached");
        answer["plex"] = json!(name);
        answer["volume"] = json!(d.volume);
        Ok(answer)
    }
}

impl PoolServer {
    /// Plex array `made` served as plex `name` of `volume` and taken back
    /// into its mirror's slot `slot` ([`rejoin`]); the answer says how it
    /// is revived.
    pub(super) fn serve_back(
        &self,
        volume: &Served,
        slot: usize,
        name: &str,
        made: NewVolume,
    ) -> Result<Value, String> {
        let plex = self.serve_plex(made)?;
        let member: Arc<dyn Member> =
            Arc::new(PlexMember::new(Arc::clone(&plex.manager.engine), name));
        volume.swap_plex(plex);
        rejoin(&volume.manager, slot as u32, name, member)
    }
}

/// A plex is split off only while it holds the volume's bytes and
/// another plex does too.
fn refuse_unsplittable(m: &Manager, slot: usize, name: &str) -> Result<(), String> {
    let health = m.engine.health();
    if health.get(slot) != Some(&Health::Online) {
        return Err(format!(
            "plex {name} does not hold the volume's bytes now ({:?}): nothing to split off",
            health.get(slot)
        ));
    }
    let geometry = m.engine.with_volume(|v| v.geometry().clone());
    if !geometry.serves_all(|q| q as usize != slot && health[q as usize] == Health::Online) {
        return Err(format!(
            "no other plex of the volume holds all of its bytes: detaching {name} would leave \
             it nothing to serve"
        ));
    }
    Ok(())
}

fn flush_plexes(m: &Manager) -> Result<(), String> {
    for member in m.engine.members().into_iter().flatten() {
        member.flush().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Plex `member` back in slot `slot` of the mirror `m`: re-added (only
/// the regions written while it was out revived) when its label is the
/// last it had before it left, else rebuilt whole.
pub(super) fn rejoin(
    m: &Manager,
    slot: u32,
    name: &str,
    member: Arc<dyn Member>,
) -> Result<Value, String> {
    let regions = m
        .engine
        .with_volume(|v| v.intent_status().map_or(0, |b| b.layout.regions));
    let re_added = {
        let _changing = m.slot_changes.lock().expect("slot changes");
        m.re_add_opened(name, Arc::clone(&member))
    };
    match re_added {
        Ok(done) => Ok(json!({
            "whole": false,
            "missed_regions": done["missed_regions"],
            "regions": regions,
        })),
        Err(why) => {
            tracing::info!(plex = %name, reason = %why, "plex revived whole");
            if let Err(e) = m.replace_slot(slot, Arc::clone(&member)) {
                // Taken once the rebuild under way ends (one at a time).
                tracing::info!(plex = %name, reason = %e, "plex waits as a spare");
                m.spares.lock().expect("spares").push(member);
            }
            Ok(json!({ "whole": true, "why": why, "regions": regions }))
        }
    }
}

/// A plex the pool counts attached whose slot the mirror's start left out
/// (its label behind the volume's: an attach recorded offline, or cut off
/// by a crash before the mirror took it back) is taken back as `plex
/// attach` takes it. A blank plex (made anew) is the mirror's spare
/// already, and one whose slot was removed stays out.
pub(crate) fn rejoin_at_start(volume: &Served) {
    let m = &volume.manager;
    let table = m.meta.label();
    for plex in volume.plexes() {
        let Some(slot) = plex_index(plex.name()) else {
            continue;
        };
        let out = matches!(
            m.engine.health().get(slot),
            Some(Health::Faulty | Health::Missing)
        );
        let removed = table.slots.get(slot).map(|e| e.state) == Some(SlotState::Removed);
        if !out || removed {
            continue;
        }
        let member: Arc<dyn Member> = Arc::new(PlexMember::new(
            Arc::clone(&plex.manager.engine),
            plex.name(),
        ));
        let own = read_label_area(member.as_ref())
            .ok()
            .and_then(|a| Label::decode(&a).ok());
        if own.is_none_or(|l| l.volume_uuid != table.volume_uuid) {
            continue;
        }
        match rejoin(m, slot as u32, plex.name(), member) {
            Ok(how) => {
                tracing::warn!(plex = %plex.name(), revived = %how, "plex attached again: reviving it")
            }
            Err(e) => {
                tracing::error!(plex = %plex.name(), error = %e, "plex could not be taken back")
            }
        }
    }
}
