//! `volume convert --control`: a plex of a volume of several plexes
//! replaced by a new plex of another organisation while the volume serves
//! (the command line's `pool/convert.rs` says the order of writes).
//!
//! The command records the new plex and swaps it in: the mirror stops
//! using the old plex, whose array stops; the host labels the new plex's
//! subdisks as a new array named as the old plex; the mirror takes it into
//! that slot and rebuilds it. The heal thread ends the convert once the
//! new plex is in step (one configuration puts it in the old plex's
//! place), and takes up one a crash cut short: a new plex not in its slot
//! yet is swapped in again, one being rebuilt is waited for.

use super::heal::another_plex_serves;
use super::{stop_served, PoolServer};
use crate::plex::PlexMember;
use crate::served::Served;
use platter_core::pool::PlexConvert;
use platter_core::volume::Health;
use serde_json::{json, Value};
use std::sync::Arc;

impl PoolServer {
    pub(super) fn convert(&self, req: &Value) -> Result<Value, String> {
        let volume = req
            .get("volume")
            .and_then(Value::as_str)
            .ok_or("missing \"volume\"")?;
        if let Some(served) = self.volumes.named(volume).filter(|s| s.plexes().is_empty()) {
            return self.convert_by_copy(&served, req);
        }
        let served = self
            .volumes
            .named(volume)
            .filter(|s| !s.plexes().is_empty())
            .ok_or_else(|| {
                format!(
                    "volume {volume} has one plex, or is not served here: convert replaces a \
                     plex of a volume of several plexes, whose others hold its bytes while the \
                     new one is revived"
                )
            })?;
        if req.get("abort").and_then(Value::as_bool) == Some(true) {
            return self.abort_convert(&served);
        }
        if let Some(c) = self.converting(volume) {
            return Err(format!(
                "volume {volume}: plex {volume}.p{} is being converted already; one at a time",
                c.from
            ));
        }
        let label = served.manager.meta.label();
        let health = served.manager.engine.health();
        if let Some(p) = health.iter().position(|h| *h != Health::Online) {
            return Err(format!(
                "volume {volume} is not whole (plex {volume}.p{p} is {:?}): let it rebuild \
                 first; a convert revives the new plex from the others",
                health[p]
            ));
        }
        let slot_bytes = label
            .slots
            .iter()
            .map(|s| s.data_size_bytes)
            .max()
            .unwrap_or(0);
        let plex_bytes = label
            .data_offset_bytes
            .checked_add(slot_bytes)
            .ok_or("the volume's size overflows")?;
        let c = self.host.begin_convert(req, plex_bytes)?;
        self.swap_in(&served, &c)?;
        let drives = self.host.convert_drives(&c);
        tracing::info!(volume, from = c.from, into = c.into, "plex being converted");
        Ok(json!({
            "volume": volume,
            "plex": format!("{volume}.p{}", c.from),
            "level": req.get("level"),
            "drives": drives,
        }))
    }

    /// The old plex out of the mirror and stopped, the new one labelled,
    /// served in its place and rebuilt by the mirror.
    fn swap_in(&self, volume: &Arc<Served>, c: &PlexConvert) -> Result<(), String> {
        let name = format!("{}.p{}", c.volume, c.from);
        if !another_plex_serves(volume, &name) {
            return Err(format!(
                "no other plex of volume {} holds all of its data: the new plex would have \
                 nothing to be revived from",
                c.volume
            ));
        }
        let mirror = &volume.manager;
        if mirror.engine.health().get(c.from) == Some(&Health::Online) {
            mirror
                .engine
                .mark_faulty(c.from as u32, "its plex is converted".into());
        }
        if let Some(old) = volume.take_plex(&name) {
            stop_served(&old);
        }
        let made = self.host.make_convert_plex(c)?;
        let plex = self.serve_plex(made)?;
        let member: Arc<dyn platter_io::Member> =
            Arc::new(PlexMember::new(Arc::clone(&plex.manager.engine), &name));
        volume.swap_plex(plex);
        if let Err(e) = mirror.replace_slot(c.from as u32, Arc::clone(&member)) {
            tracing::info!(plex = %name, reason = %e, "converted plex waits as a spare");
            mirror.spares.lock().expect("spares").push(member);
        }
        Ok(())
    }

    /// `volume convert --abort`: the new plex out of the mirror and
    /// stopped, the configuration without it, and the old plex, assembled
    /// before anything changed, back in its slot by the mirror's re-add
    /// (only the regions written since it left) or rebuilt whole.
    fn abort_convert(&self, volume: &Arc<Served>) -> Result<Value, String> {
        let c = self
            .host
            .converts()
            .into_iter()
            .find(|(c, _)| c.volume == volume.name());
        let Some((c, in_slot)) = c else {
            return Err(format!("volume {} has no convert under way", volume.name()));
        };
        let name = format!("{}.p{}", c.volume, c.from);
        let mirror = &volume.manager;
        let health = mirror.engine.health().get(c.from).copied();
        if in_slot && health == Some(Health::Online) {
            return Err(format!(
                "the plex replacing {name} is in step already: the convert ends within a \
                 second; convert the volume again to change it back"
            ));
        }
        if !another_plex_serves(volume, &name) {
            return Err(format!(
                "no other plex of volume {} holds all of its data: giving the convert up now \
                 would leave plex {name} nothing to be revived from",
                c.volume
            ));
        }
        // A start that found the old plex still in its slot serves it.
        let back = in_slot || health != Some(Health::Online);
        let old = back.then(|| self.host.reopen_convert_old(&c)).transpose()?;
        if in_slot {
            mirror
                .engine
                .mark_faulty(c.from as u32, "its convert is given up".into());
            mirror
                .spares
                .lock()
                .expect("spares")
                .retain(|m| m.describe() != name);
            if let Some(new) = volume.take_plex(&name) {
                stop_served(&new);
            }
        }
        self.host.abort_convert(&c)?;
        let mut answer = match old {
            Some(made) => self.serve_back(volume, c.from, &name, made)?,
            None => json!({ "whole": false, "missed_regions": 0, "regions": 0 }),
        };
        tracing::info!(volume = %c.volume, plex = %name, revived = %answer, "convert given up");
        answer["volume"] = json!(c.volume);
        answer["plex"] = json!(name);
        Ok(answer)
    }

    /// The convert under way of volume `volume`, if one is.
    pub(super) fn converting(&self, volume: &str) -> Option<PlexConvert> {
        self.host
            .converts()
            .into_iter()
            .map(|(c, _)| c)
            .find(|c| c.volume == volume)
    }

    /// Each convert the pool records, looked at by the heal thread: ended
    /// once its new plex is in step, swapped in when a start found the
    /// old plex still in its slot.
    pub(crate) fn tend_converts(&self) {
        if self.config.read_only {
            return;
        }
        let Ok(closed) = self.closed.try_lock() else {
            return;
        };
        if *closed {
            return;
        }
        self.tend_copies();
        let converts = self.host.converts();
        for (c, new_in_slot) in converts {
            let Some(volume) = self.volumes.named(&c.volume) else {
                continue;
            };
            let health = volume.manager.engine.health().get(c.from).copied();
            let done = match (new_in_slot, health) {
                (true, Some(Health::Online)) => self.host.finish_convert(&c).map(|()| true),
                (true, _) => Ok(false),
                (false, _) => self.swap_in(&volume, &c).map(|()| false),
            };
            match done {
                Ok(true) => {
                    tracing::info!(volume = %c.volume, plex = c.from, "plex converted: the old plex's subdisks are free")
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(volume = %c.volume, error = %e, "the convert cannot go on now")
                }
            }
        }
        drop(closed);
    }
}
