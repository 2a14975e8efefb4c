//! A plex made anew while its volume serves (vinum's revive of a plex
//! from the volume's others): a plex that cannot serve all of its data
//! (a concat or stripe plex that lost a subdisk) has the lost subdisks
//! placed again, blank; then its old array is stopped, the host labels
//! its subdisks as a new array, and the volume's mirror takes the new
//! array into the plex's slot and rebuilds it from the other plexes.
//!
//! Order, so that no two arrays write the same subdisks and a crash at
//! any step leaves what a server's start mends: the mirror stops using
//! the plex (its failure recorded in the other plexes' labels), the old
//! array's last writes land, then the new labels; a crash after those
//! finds a plex whose data is zeroed under labels that say it is new,
//! which the mirror's labels already count as failed, so it is rebuilt.

use super::heal::another_plex_serves;
use super::{stop_served, PoolServer};
use crate::plex::PlexMember;
use crate::served::Served;
use crate::server::{keep_volume, start_volume, PoolStart};
use platter_core::volume::Health;
use std::collections::BTreeSet;
use std::sync::Arc;

impl PoolServer {
    /// Makes plex `p` of `volume` anew once every subdisk of it is placed
    /// (false while one is still lost), and has the volume rebuild it.
    pub(super) fn remake_plex(&self, volume: &Arc<Served>, p: usize) -> Result<bool, String> {
        let name = format!("{}.p{p}", volume.name());
        if !self.host.plex_whole(&name)? {
            return Ok(false);
        }
        if !another_plex_serves(volume, &name) {
            return Err(format!(
                "no other plex of volume {} holds all of its data",
                volume.name()
            ));
        }
        let mirror = &volume.manager;
        match mirror.engine.health().get(p) {
            Some(Health::Rebuilding) => {
                return Err(format!("volume {} is rebuilding it already", volume.name()))
            }
            Some(Health::Online) => mirror
                .engine
                .mark_faulty(p as u32, "its plex is made anew".into()),
            _ => {}
        }
        if let Some(old) = volume.plexes().into_iter().find(|x| x.name() == name) {
            stop_served(&old);
        }
        let made = self.host.remake_plex(&name)?;
        let plex = self.serve_plex(made)?;
        let member: Arc<dyn platter_io::Member> =
            Arc::new(PlexMember::new(Arc::clone(&plex.manager.engine), &name));
        volume.swap_plex(plex);
        self.awaiting.lock().expect("awaiting").remove(&name);
        if let Err(e) = mirror.replace_slot(p as u32, Arc::clone(&member)) {
            // The main loop puts it in once the mirror's rebuild under way
            // ends (one at a time).
            tracing::info!(plex = %name, reason = %e, "plex made anew waits as a spare");
            mirror.spares.lock().expect("spares").push(member);
        }
        tracing::info!(plex = %name, "plex made anew is served: its volume rebuilds it");
        Ok(true)
    }

    /// The array the host made, served as a plex (no export, no
    /// recording of its own).
    pub(super) fn serve_plex(&self, made: super::NewVolume) -> Result<Arc<Served>, String> {
        self.serve_plex_recording(made, None)
    }

    /// [`Self::serve_plex`], its clients' requests noted by `recorder`
    /// (a convert by copy's new array: its volume's export's).
    pub(super) fn serve_plex_recording(
        &self,
        made: super::NewVolume,
        recorder: Option<Arc<crate::manage::record::Recorder>>,
    ) -> Result<Arc<Served>, String> {
        let config = self.config_for(made.member_drives, made.member_delays);
        let PoolStart::Array(array, spares) = made.start else {
            return Err("a plex is an array, not a mirror of plexes".into());
        };
        let mut starting = start_volume(*array, spares, &config).map_err(|e| e.to_string())?;
        starting.recorder = recorder;
        keep_volume(starting, &config, None).map_err(|e| e.to_string())
    }

    /// Slot `slot` of plex `plex` is placed again: not looked for again
    /// while the plex waits for its other lost subdisks.
    pub(super) fn await_remake(&self, plex: &str, slot: u32) {
        let mut awaiting = self.awaiting.lock().expect("awaiting");
        awaiting.entry(plex.to_string()).or_default().insert(slot);
    }

    /// The slots of plex `plex` placed again while it waits.
    pub(super) fn awaiting_remake(&self, plex: &str) -> BTreeSet<u32> {
        let awaiting = self.awaiting.lock().expect("awaiting");
        awaiting.get(plex).cloned().unwrap_or_default()
    }
}
