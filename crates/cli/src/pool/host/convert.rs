//! `volume convert` through the pool's server: the new plex placed and
//! recorded, labelled when the server swaps it in, and put in the old
//! plex's place once the mirror has revived it (`convert.rs`).

use platter_core::pool::PlexConvert;
use platter_server::NewVolume;
use serde_json::Value;

use super::super::convert::{aborted, erase_plex, finished, new_in_slot, plan_convert};
use super::{blank_apart, ServedPool};
use crate::error::Result;

impl ServedPool {
    pub(super) fn begin_served_convert(&self, req: &Value, plex_bytes: u64) -> Result<PlexConvert> {
        let mut state = self.lock();
        let (next, c) = plan_convert(&state.open, req, plex_bytes)?;
        state.open.write(next)?;
        state.in_slot.insert(c.volume.clone(), false);
        Ok(c)
    }

    pub(super) fn make_served_convert(&self, c: &PlexConvert) -> Result<NewVolume> {
        let v = self.lock().volume(&c.volume)?;
        let name = v.plex_name(c.from);
        let windows = {
            let mut state = self.lock();
            let windows = super::super::plexes::label_plex_as(
                state.open.pool(),
                &v,
                c.into,
                &state.open.drives,
                &name,
            )?;
            state.windows.insert(name.clone(), windows.clone());
            // From here the mirror's label lands on it as the mirror takes it.
            state.in_slot.insert(c.volume.clone(), true);
            windows
        };
        let members = windows
            .into_iter()
            .map(|w| w as std::sync::Arc<dyn platter_io::Member>)
            .collect();
        let (members, blank) = blank_apart(members)?;
        self.plex_to_serve(&v, members, blank)
    }

    pub(super) fn finish_served_convert(&self, c: &PlexConvert) -> Result<()> {
        let mut state = self.lock();
        let v = state.volume(&c.volume)?;
        let next = finished(state.open.pool(), c);
        state.open.write(next)?;
        state.in_slot.remove(&c.volume);
        // The old plex is no more: a scan must not take it for an array.
        if let Err(e) = erase_plex(&state.open, &v, c.from) {
            tracing::warn!(volume = %c.volume, error = %e.0, "the old plex's labels could not be zeroed");
        }
        Ok(())
    }

    /// Convert `c`'s old plex assembled to serve again, nothing written
    /// but the labels its array owes: a convert given up puts it back.
    pub(super) fn reopen_served_convert(&self, c: &PlexConvert) -> Result<NewVolume> {
        let v = self.lock().volume(&c.volume)?;
        let (members, blank) = self.open_plex(&v, false, c.from)?;
        self.plex_to_serve(&v, members, blank)
    }

    /// Gives convert `c` up (the server has taken its new plex out of the
    /// mirror): one configuration drops the new plex, whose subdisks'
    /// labels are then zeroed.
    pub(super) fn abort_served_convert(&self, c: &PlexConvert) -> Result<()> {
        let mut state = self.lock();
        let v = state.volume(&c.volume)?;
        let next = aborted(state.open.pool(), c);
        state.open.write(next)?;
        state.in_slot.remove(&c.volume);
        if let Err(e) = erase_plex(&state.open, &v, c.into) {
            tracing::warn!(volume = %c.volume, error = %e.0, "the dropped plex's labels could not be zeroed");
        }
        Ok(())
    }

    /// Whether convert `c`'s new plex holds its slot: known once asked
    /// (at the start, or since the server swapped it in).
    pub(super) fn convert_in_slot(&self, c: &PlexConvert) -> bool {
        let mut state = self.lock();
        if let Some(known) = state.in_slot.get(&c.volume) {
            return *known;
        }
        let known = match state.volume(&c.volume) {
            Ok(v) => new_in_slot(&state.open, &v, c),
            Err(_) => false,
        };
        state.in_slot.insert(c.volume.clone(), known);
        known
    }
}
