//! Plex detach and attach through the pool's server: checked and recorded
//! as `platter plex detach|attach` does offline (`split.rs`), and the
//! arrays the server serves around those writes.

use std::collections::HashMap;

use platter_core::pool::DetachedPlex;
use platter_io::aio::Delay;
use platter_server::{NewVolume, PoolStart};
use serde_json::Value;

use super::super::split::{plan_attach, plan_detach, volume_and_plex};
use super::{assemble_checked, assemble_without, blank_apart, serving_plex, ServedPool};
use crate::error::{CliError, Result};

impl ServedPool {
    /// The volume and plex a request names.
    fn split_named(&self, req: &Value) -> Result<(platter_core::pool::PoolVolume, usize)> {
        let field = |k: &str| {
            req.get(k)
                .and_then(Value::as_str)
                .ok_or_else(|| CliError(format!("missing \"{k}\"")))
        };
        let state = self.lock();
        volume_and_plex(state.open.pool(), field("volume")?, field("plex")?)
    }

    pub(super) fn plan_served_detach(&self, req: &Value) -> Result<DetachedPlex> {
        let (v, p) = self.split_named(req)?;
        let d = DetachedPlex {
            volume: v.name.clone(),
            plex: p,
            as_volume: req.get("as").and_then(Value::as_str).map(str::to_string),
            writable: req
                .get("writable")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        };
        plan_detach(self.lock().open.pool(), &d)?;
        Ok(d)
    }

    pub(super) fn detach_served(&self, d: &DetachedPlex) -> Result<()> {
        let mut state = self.lock();
        let next = plan_detach(state.open.pool(), d)?;
        state.open.write(next)
    }

    pub(super) fn plan_served_attach(&self, req: &Value) -> Result<DetachedPlex> {
        let (v, p) = self.split_named(req)?;
        let state = self.lock();
        plan_attach(state.open.pool(), &v.name, p)?;
        Ok(state
            .open
            .pool()
            .detached_plex(&v.name, p)
            .cloned()
            .expect("plan_attach found it"))
    }

    /// Records `d` attached; its array, to serve as the mirror's plex.
    pub(super) fn attach_served(&self, d: &DetachedPlex) -> Result<NewVolume> {
        let v = self.lock().volume(&d.volume)?;
        // Assembled before anything is written: a plex that cannot serve
        // all of its data (a drive of it lost meanwhile) stays detached.
        let (members, blank) = self.open_plex(&v, false, d.plex)?;
        let plex = self.plex_to_serve(&v, members, blank)?;
        let mut state = self.lock();
        let next = plan_attach(state.open.pool(), &d.volume, d.plex)?;
        state.open.write(next)?;
        Ok(plex)
    }

    /// How a server starts volume `name`, a detached plex served as a
    /// volume of its own: the plex's array, and the volume's mirror
    /// assembled over it alone (its other plexes left out on purpose),
    /// named `name`; read-only unless the split said writable.
    pub fn start_of_detached(
        &self,
        name: &str,
        (read_only, run): (bool, bool),
        maps: (&mut HashMap<String, String>, &mut HashMap<String, Delay>),
    ) -> Result<PoolStart> {
        let pool = self.pool();
        let d = pool.served_as(name).cloned().ok_or_else(|| {
            CliError(format!(
                "pool {} has no detached plex served as {name}",
                pool.name
            ))
        })?;
        let v = pool
            .volume(&d.volume)
            .cloned()
            .expect("checked by Pool::check");
        let read_only = read_only || !d.writable;
        let (members, blank) = self.open_plex(&v, read_only, d.plex)?;
        let (drives, delays) = self.placed(&v, &members, &blank);
        maps.0.extend(drives);
        maps.1.extend(delays);
        let (array, spares) = assemble_checked(members, blank, run).and_then(serving_plex)?;
        let others = pool.mirror_slots(&v) - 1;
        let as_name = name.to_string();
        let assemble: platter_server::AssemblePlexes = Box::new(move |members| {
            let (labelled, blank) = blank_apart(members).map_err(|e| e.0)?;
            let (mut mirror, spares) =
                assemble_without(labelled, blank, run, others).map_err(|e| e.0)?;
            // The export's name: the label's own is the volume's.
            mirror.assembly.label.name = as_name;
            Ok((mirror, spares))
        });
        Ok(PoolStart::Plexes {
            plexes: vec![(d.plex_name(), array, spares)],
            assemble,
            read_only,
        })
    }

    pub(super) fn start_served_detached(&self, name: &str) -> Result<NewVolume> {
        let (mut member_drives, mut member_delays) = (HashMap::new(), HashMap::new());
        let start = self.start_of_detached(
            name,
            (false, true),
            (&mut member_drives, &mut member_delays),
        )?;
        Ok(NewVolume {
            start,
            member_drives,
            member_delays,
        })
    }
}
