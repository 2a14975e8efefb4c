//! `volume convert` of a volume of one plex through the pool's server:
//! the new plex placed and recorded, labelled as the volume's array when
//! the server begins the copy, and made the volume's once the copy is
//! done (`convert.rs`, `platter_server`'s `manage/pool/copy.rs`).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use platter_io::moving::MovingMember;
use platter_io::Member;
use platter_server::NewVolume;
use serde_json::Value;

use super::super::convert::{
    abort_copy_in, copy_finished, copy_recorded, erase_plex, label_copy_plex, plan_copy,
};
use super::super::drives::plex_windows;
use super::super::relocate::{copy_from, Checkpoint, Copy};
use super::{blank_apart, ServedPool};
use crate::error::{CliError, Result};

impl ServedPool {
    pub(super) fn begin_served_copy(&self, req: &Value, volume_bytes: u64) -> Result<Vec<String>> {
        let mut state = self.lock();
        let (next, copy) = plan_copy(&state.open, req, volume_bytes)?;
        state.open.write(next)?;
        Ok(copy
            .plex
            .subdisks
            .iter()
            .map(|sd| sd.drive.clone())
            .collect())
    }

    pub(super) fn make_served_copy(&self, volume: &str, volume_bytes: u64) -> Result<NewVolume> {
        let (both, windows) = {
            let mut state = self.lock();
            let pool = state.open.pool().clone();
            let v = state.volume(volume)?;
            let copy = pool
                .copy_of(volume)
                .ok_or_else(|| CliError(format!("volume {volume} has no convert under way")))?;
            let both = copy.with_new_plex(&v);
            // A copy taken up below a checkpoint keeps what it copied.
            let windows = if copy.copied_bytes > 0 {
                let windows = plex_windows(&pool, &both, 1, &state.open.drives)?;
                if windows.len() != copy.plex.subdisks.len() {
                    return Err(CliError(format!(
                        "volume {volume}: a drive of its new plex is missing; the copy goes on \
                         once it is back, or `volume convert --abort` gives it up"
                    )));
                }
                windows
            } else {
                label_copy_plex(&pool, &both, &state.open.drives, volume_bytes)?
            };
            state.windows.insert(both.plex_name(1), windows.clone());
            (both, windows)
        };
        let members = windows.into_iter().map(|w| w as Arc<dyn Member>).collect();
        let (members, blank) = blank_apart(members)?;
        self.plex_to_serve(&both, members, blank)
    }

    pub(super) fn run_served_copy(
        &self,
        volume: &str,
        member: &MovingMember,
        rate: u64,
        stop: &AtomicBool,
    ) -> Result<bool> {
        let copied = self
            .pool()
            .copy_of(volume)
            .map(|c| c.copied_bytes)
            .ok_or_else(|| CliError(format!("volume {volume} has no convert under way")))?;
        let from = Checkpoint {
            name: volume.to_string(),
            recorded_bytes: copied,
            resumed: copied > 0,
        };
        let mut record = |at: u64| {
            let mut state = self.lock();
            let next = copy_recorded(state.open.pool(), volume, at);
            state.open.write(next)
        };
        match copy_from(&from, member, rate, stop, &mut record)? {
            Copy::Done => {}
            Copy::Stopped(_) => return Ok(false),
            Copy::GivenUp(why) => {
                return Err(CliError(format!(
                    "volume {volume}: the new plex failed a write: {why}"
                )))
            }
            Copy::SourceFailed(why) => {
                return Err(CliError(format!(
                    "volume {volume}: its plex failed a read: {why}"
                )))
            }
        }
        Ok(true)
    }

    pub(super) fn finish_served_copy(&self, volume: &str) -> Result<()> {
        let mut state = self.lock();
        let v = state.volume(volume)?;
        let next = copy_finished(state.open.pool(), volume);
        state.open.write(next)?;
        let new_name = v.plex_name(1);
        if let Some(w) = state.windows.remove(&new_name) {
            state.windows.insert(v.name.clone(), w);
        }
        state.copied.insert(v.name.clone(), v);
        Ok(())
    }

    pub(super) fn erase_served_copied(&self, volume: &str) {
        let mut state = self.lock();
        let Some(old) = state.copied.remove(volume) else {
            return;
        };
        // The old plex is no more: a scan must not take it for an array.
        if let Err(e) = erase_plex(&state.open, &old, 0) {
            tracing::warn!(volume, error = %e.0, "the old plex's labels could not be zeroed");
        }
    }

    pub(super) fn abort_served_copy(&self, volume: &str) -> Result<()> {
        let mut state = self.lock();
        abort_copy_in(&mut state.open, volume)?;
        state.windows.remove(&format!("{volume}.p1"));
        Ok(())
    }
}
