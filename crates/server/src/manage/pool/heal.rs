//! Failed subdisks placed again while the pool serves (`pool heal
//! --control`, and the heal thread when a spare drive is present): the
//! host places each, blank, and the array it belongs to takes it. An
//! array is a volume of one plex or a plex of a volume of several
//! (`v.p1`); a plex whose own redundancy covers the loss rebuilds the
//! subdisk inside, one that cannot serve all of its data is made anew
//! once every subdisk of it is placed, and its volume's mirror rebuilds
//! it from the other plexes (`remake`).

use super::PoolServer;
use crate::manage::Manager;
use crate::served::Served;
use platter_core::volume::Health;
use serde_json::{json, Value};
use std::sync::Arc;

/// What one array served lost: its name and first failed slot, or why
/// nothing rebuilds it.
enum Lost {
    Slot(String, u32),
    Beyond(String),
}

impl PoolServer {
    /// The automatic heal (the heal thread's, each second): when a spare
    /// drive is present and an array served has a failed subdisk, the
    /// spare takes it. Nothing when the server is stopping or a change
    /// is under way (the next look finds it).
    pub(crate) fn heal_onto_spares(&self) {
        if self.config.read_only || !self.host.has_spare() || self.lost_subdisks().0.is_empty() {
            return;
        }
        let Ok(closed) = self.closed.try_lock() else {
            return;
        };
        if *closed {
            return;
        }
        self.host.set_failing(&self.failing_drives());
        let healed = self.heal(false);
        drop(closed);
        // Looked at each second: said only when it did something.
        if healed["placed"].as_array().is_some_and(|p| !p.is_empty()) {
            tracing::info!(%healed, "failed subdisks placed on a spare");
        }
    }

    /// The drives of the subdisks the arrays served found failed.
    pub(super) fn failing_drives(&self) -> Vec<String> {
        let mut drives = Vec::new();
        for served in self.volumes.arrays() {
            let m = &served.manager;
            let names = Arc::clone(&m.member_drives.lock().expect("member drives"));
            let health = m.engine.health();
            for (slot, member) in m.engine.members().iter().enumerate() {
                let drive = member.as_ref().and_then(|d| names.get(d.describe()));
                if let (Some(drive), Health::Faulty) = (drive, health[slot]) {
                    if !drives.contains(drive) {
                        drives.push(drive.clone());
                    }
                }
            }
        }
        drives
    }

    /// Each array served with a failed subdisk that a heal can mend and
    /// nothing mends now: its first such slot (an array rebuilds one
    /// member at a time; the next heal finds the next). Then each array
    /// whose loss nothing can mend, and why. The mirror over a volume's
    /// plexes is not looked at: its plexes are.
    fn lost_subdisks(&self) -> (Vec<(String, u32)>, Vec<String>) {
        let (mut lost, mut beyond) = (Vec::new(), Vec::new());
        for served in self.volumes.all() {
            let plexes = served.plexes();
            let found = if plexes.is_empty() {
                vec![self.lost_in(&served, None)]
            } else {
                plexes
                    .iter()
                    .map(|p| self.lost_in(p, Some(&served)))
                    .collect()
            };
            for f in found.into_iter().flatten() {
                match f {
                    Lost::Slot(name, slot) => lost.push((name, slot)),
                    Lost::Beyond(why) => beyond.push(why),
                }
            }
        }
        (lost, beyond)
    }

    /// What array `served` lost, if anything; `under` is the volume whose
    /// mirror holds it as a plex.
    fn lost_in(&self, served: &Served, under: Option<&Served>) -> Option<Lost> {
        let m = &served.manager;
        let health = m.engine.health();
        let name = served.name().to_string();
        let awaiting = self.awaiting_remake(&name);
        let slot = (0..health.len() as u32).find(|&s| {
            matches!(health[s as usize], Health::Faulty | Health::Missing)
                && m.spare_may_take(s)
                && !awaiting.contains(&s)
        })?;
        if !rebuilds_inside(m) {
            return match under {
                // Made anew once its subdisks are placed: the volume's
                // other plexes hold its data.
                Some(volume) if another_plex_serves(volume, &name) => Some(Lost::Slot(name, slot)),
                _ => Some(Lost::Beyond(format!(
                    "volume {name} lost more than its redundancy covers: nothing rebuilds it"
                ))),
            };
        }
        let busy = m.engine.with_volume(|v| v.rebuild_progress()).is_some()
            || m.engine.reshape_progress().is_some()
            || !m.spares.lock().expect("spares").is_empty();
        (!busy).then_some(Lost::Slot(name, slot))
    }

    /// Places the failed subdisks of the arrays served again (the host's
    /// writes) and has each array rebuild its new one, or makes anew a
    /// plex that cannot rebuild inside. Called with the `closed` lock
    /// held. The answer lists what was placed and why anything was not.
    pub(super) fn heal(&self, free_space: bool) -> Value {
        let (lost, mut unplaced) = self.lost_subdisks();
        let relocated = if lost.is_empty() {
            super::Relocated {
                placed: Vec::new(),
                unplaced: Vec::new(),
            }
        } else {
            match self.host.relocate(&lost, free_space) {
                Ok(r) => r,
                Err(e) => super::Relocated {
                    placed: Vec::new(),
                    unplaced: vec![e],
                },
            }
        };
        unplaced.extend(relocated.unplaced);
        let mut placed = Vec::new();
        for r in relocated.placed {
            let Some(served) = self.volumes.named_or_plex(&r.volume) else {
                continue;
            };
            let said = json!({
                "volume": r.volume, "slot": r.slot, "drive": r.drive, "from": r.from,
            });
            if let Some((volume, p)) = self.volumes.plex_of(&r.volume) {
                if !rebuilds_inside(&served.manager) {
                    match self.remake_after(&volume, p, &r.volume, r.slot) {
                        Ok(remade) => {
                            let mut said = said;
                            said["remade"] = json!(remade);
                            placed.push(said);
                        }
                        Err(e) => unplaced.push(e),
                    }
                    continue;
                }
            }
            let m = &served.manager;
            m.note_drive(r.member.describe(), &r.drive);
            if let Err(e) = m.replace_slot(r.slot, Arc::clone(&r.member)) {
                // Blank in the configuration's place for the slot: a
                // spare of the array's, as a server started now would
                // take it.
                m.spares.lock().expect("spares").push(r.member);
                unplaced.push(format!(
                    "volume {}: {e}; its new subdisk on {} waits as a spare",
                    r.volume, r.drive
                ));
                continue;
            }
            placed.push(said);
        }
        json!({ "placed": placed, "unplaced": unplaced })
    }

    /// Plex `name` (plex `p` of `volume`) has its failed subdisk `slot`
    /// placed again: made anew once no other subdisk of it is lost.
    /// Whether it was made anew now.
    fn remake_after(
        &self,
        volume: &Arc<Served>,
        p: usize,
        name: &str,
        slot: u32,
    ) -> Result<bool, String> {
        self.await_remake(name, slot);
        match self.remake_plex(volume, p) {
            Ok(remade) => Ok(remade),
            Err(e) => Err(format!(
                "plex {name}: its subdisk {slot} is placed again, but making the plex anew \
                 failed: {e}; the server's next start makes it"
            )),
        }
    }
}

/// Whether an array rebuilds a lost subdisk from its own redundancy:
/// it has some, and its members in use hold all of its data (a member
/// rebuilding holds nothing above its cursor).
pub(super) fn rebuilds_inside(m: &Manager) -> bool {
    rebuilds_without(m, None)
}

/// [`rebuilds_inside`], with member `lost` counted out as well (one
/// still in use whose device fails: a moving subdisk's old place).
pub(super) fn rebuilds_without(m: &Manager, lost: Option<u32>) -> bool {
    let health = m.engine.health();
    m.engine.with_volume(|v| {
        let g = v.geometry();
        g.redundancy() > 0
            && g.serves_all(|s| Some(s) != lost && health[s as usize] == Health::Online)
    })
}

/// Whether a plex of `volume` other than `plex` is in use by its mirror.
pub(super) fn another_plex_serves(volume: &Served, plex: &str) -> bool {
    let health = volume.manager.engine.health();
    let p = plex_index(plex);
    health
        .iter()
        .enumerate()
        .any(|(s, h)| Some(s) != p && *h == Health::Online)
}

/// The index `p` in a plex's name (`v.p1`): its slot in the mirror.
pub(super) fn plex_index(plex: &str) -> Option<usize> {
    platter_core::pool::split_plex_name(plex).map(|(_, p)| p)
}
