//! `volume extend --control` of a volume of several plexes: each plex's
//! array grows in place, then the volume's mirror over them, while the
//! volume stays served (clients wait while it is paused; those that
//! connect after see the new size).
//!
//! The writes come in the order the offline extend makes them
//! (`pool/extend/plexes.rs` in the command line, whose start-up code
//! brings either level's labels up after a crash): the mirror's bitmap
//! zeroed through the plexes, each plex's growth and bitmap zeroed and the
//! configuration written (the host), each plex's labels (its own engine's
//! label writer), then the mirror's through the grown plexes.

use super::heal::plex_index;
use super::{bitmap_bytes, refuse_to_extend, refuse_unsteady, PoolServer};
use crate::served::Served;
use platter_core::intent::INTENT_OFFSET_BYTES;
use platter_core::label::Label;
use serde_json::{json, Value};
use std::sync::Arc;

impl PoolServer {
    pub(super) fn extend_plexes(
        &self,
        served: &Arc<Served>,
        size_bytes: u64,
    ) -> Result<Value, String> {
        let name = served.name().to_string();
        let m = &served.manager;
        let _changing = m.slot_changes.lock().expect("slot changes");
        let plexes = plexes_in_order(served)?;
        refuse_to_extend(served, size_bytes)?;
        for p in &plexes {
            refuse_unsteady(p)?;
        }
        let old_bytes = m.engine.size_bytes();
        let labels: Vec<Label> = plexes.iter().map(|p| p.manager.meta.label()).collect();
        let mirror = m.meta.label();
        let (_, grown_mirror) = self
            .host
            .plan_plexes_extend(&name, &mirror, &labels, size_bytes)?;
        m.engine.pause();
        let grown = m.engine.empty_paused().and_then(|()| {
            zero_mirror_bitmap(served, &grown_mirror)?;
            self.grow_each_plex(&name, &plexes, (&mirror, &labels), size_bytes)?;
            self.serve_grown(m, &grown_mirror, Vec::new())?;
            Ok(grown_mirror)
        });
        m.engine.resume();
        let grown = grown?;
        tracing::info!(volume = %name, old_bytes, size_bytes = grown.volume_size_bytes, "volume of plexes extended");
        Ok(json!({
            "volume": name,
            "old_size_bytes": old_bytes,
            "size_bytes": grown.volume_size_bytes,
        }))
    }

    /// Every plex paused and emptied, the host's writes, then each plex
    /// served grown with its labels written; the plexes go on after.
    fn grow_each_plex(
        &self,
        name: &str,
        plexes: &[Arc<Served>],
        (mirror, labels): (&Label, &[Label]),
        size_bytes: u64,
    ) -> Result<(), String> {
        for p in plexes {
            p.manager.engine.pause();
        }
        let grown = (|| {
            for p in plexes {
                p.manager.engine.empty_paused()?;
            }
            let grown = self.host.extend_plexes(name, mirror, labels, size_bytes)?;
            for (p, g) in plexes.iter().zip(&grown) {
                self.serve_grown(&p.manager, g, Vec::new())?;
            }
            Ok(())
        })();
        for p in plexes {
            p.manager.engine.resume();
        }
        grown
    }
}

/// The plexes' arrays of `served` by plex index (the mirror's slots);
/// refused when one of them is not served.
fn plexes_in_order(served: &Served) -> Result<Vec<Arc<Served>>, String> {
    let count = served.manager.engine.health().len();
    let mut plexes = served.plexes();
    plexes.sort_by_key(|p| plex_index(p.name()));
    if let Some(p) = (0..count).find(|&p| !plexes.iter().any(|x| plex_index(x.name()) == Some(p))) {
        return Err(format!(
            "volume {0}: plex {0}.p{p} is not served (detached, or it could not start): extend \
             it once every plex serves (`platter plex attach` joins a detached one back)",
            served.name()
        ));
    }
    plexes.truncate(count);
    Ok(plexes)
}

/// The mirror's bitmap, as its grown layout sizes it, zeroed on every
/// plex (the volume is paused and empty: nothing is owed).
fn zero_mirror_bitmap(served: &Served, grown: &Label) -> Result<(), String> {
    let bitmap_bytes = bitmap_bytes(grown)?;
    for member in served.manager.engine.members().into_iter().flatten() {
        member
            .trim(INTENT_OFFSET_BYTES, bitmap_bytes)
            .and_then(|()| member.flush())
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
