//! The volumes one server serves. A pool's server starts and stops them
//! while it runs (`platter volume create|extend|remove --control`), so no
//! one holds the list: a connection keeps the volume it chose in its
//! handshake for its life, and the control socket, the metrics and the
//! main loop take the list as it is each time they look.

use crate::manage::Manager;
use crate::network::conn::ExportVolume;
use crate::observe::alerts::Alerts;
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

/// One volume a server serves: what its connections use and what keeps it.
pub struct Served {
    pub io: Arc<ExportVolume>,
    pub manager: Arc<Manager>,
    pub alerts: Arc<Alerts>,
    /// Its upkeep thread (rebuilds, resyncs, scrubs, the cache's destage),
    /// joined when the volume stops.
    pub upkeep_thread: Mutex<Option<JoinHandle<()>>>,
    /// A volume of several plexes: the plexes' arrays it mirrors, served
    /// under it (no export of their own), stopped after it. A plex made
    /// anew while the volume serves takes its old one's place here.
    pub plexes: RwLock<Vec<Arc<Served>>>,
}

impl Served {
    pub fn name(&self) -> &str {
        &self.io.export.name
    }

    /// The plexes' arrays now.
    pub fn plexes(&self) -> Vec<Arc<Served>> {
        self.plexes.read().expect("plexes lock").clone()
    }

    /// Plex `name` taken out (detached).
    pub fn take_plex(&self, name: &str) -> Option<Arc<Served>> {
        let mut plexes = self.plexes.write().expect("plexes lock");
        let at = plexes.iter().position(|p| p.name() == name)?;
        Some(plexes.remove(at))
    }

    /// Plex `new` in the place of the one of its name (added when none
    /// is served: a plex that could not start); returns the one it took
    /// the place of.
    pub fn swap_plex(&self, new: Arc<Served>) -> Option<Arc<Served>> {
        let mut plexes = self.plexes.write().expect("plexes lock");
        match plexes.iter().position(|p| p.name() == new.name()) {
            Some(at) => Some(std::mem::replace(&mut plexes[at], new)),
            None => {
                plexes.push(new);
                None
            }
        }
    }
}

/// Every volume served, in the order they started.
#[derive(Default)]
pub struct Volumes {
    list: RwLock<Vec<Arc<Served>>>,
}

impl Volumes {
    /// The volumes now.
    pub fn all(&self) -> Vec<Arc<Served>> {
        self.list.read().expect("volumes lock").clone()
    }

    pub fn managers(&self) -> Vec<Arc<Manager>> {
        self.all().iter().map(|s| Arc::clone(&s.manager)).collect()
    }

    /// The volume named `name` served here, or the plex of that name
    /// (`v.p1`) of a volume of plexes.
    pub fn named_or_plex(&self, name: &str) -> Option<Arc<Served>> {
        self.named(name).or_else(|| {
            self.all()
                .iter()
                .flat_map(|s| s.plexes())
                .find(|p| p.name() == name)
        })
    }

    /// The volume served whose plex is named `plex` (`v.p1`), and the
    /// plex's index: its slot in the volume's mirror.
    pub fn plex_of(&self, plex: &str) -> Option<(Arc<Served>, usize)> {
        let (volume, p) = platter_core::pool::split_plex_name(plex)?;
        let served = self.named(volume)?;
        // A volume of plexes serves one of them at least.
        let is_plex = !served.plexes().is_empty() && p < served.manager.engine.health().len();
        is_plex.then_some((served, p))
    }

    /// Every volume's manager and, after each volume of plexes', its
    /// plexes' (their spares, lost members and counters are looked after
    /// as any volume's; they have no export).
    pub fn managers_with_plexes(&self) -> Vec<Arc<Manager>> {
        self.arrays()
            .iter()
            .map(|s| Arc::clone(&s.manager))
            .collect()
    }

    /// Every array served: each volume and, after a volume of plexes,
    /// its plexes' arrays.
    pub fn arrays(&self) -> Vec<Arc<Served>> {
        self.all()
            .into_iter()
            .flat_map(|s| {
                let plexes = s.plexes();
                std::iter::once(s).chain(plexes)
            })
            .collect()
    }

    /// What connections choose from, in the order exports are listed.
    pub fn exports(&self) -> Vec<Arc<ExportVolume>> {
        self.all().iter().map(|s| Arc::clone(&s.io)).collect()
    }

    pub fn named(&self, name: &str) -> Option<Arc<Served>> {
        self.all().into_iter().find(|s| s.name() == name)
    }

    /// `s` in the place of the volume of its name (the same export, served
    /// by another array); returns the one it replaced.
    pub fn replace(&self, s: Arc<Served>) -> Option<Arc<Served>> {
        let mut list = self.list.write().expect("volumes lock");
        let at = list.iter().position(|x| x.name() == s.name())?;
        Some(std::mem::replace(&mut list[at], s))
    }

    /// Adds `s`; refused when a volume of its name is served (an export
    /// name must pick one volume).
    pub fn add(&self, s: Arc<Served>) -> Result<(), String> {
        let mut list = self.list.write().expect("volumes lock");
        if list.iter().any(|x| x.name() == s.name()) {
            return Err(format!(
                "two volumes are named '{}': an export name must pick one",
                s.name()
            ));
        }
        list.push(s);
        Ok(())
    }

    /// Takes volume `name` out of the list: no new connection can choose
    /// it; those that did keep it until they end.
    pub fn take(&self, name: &str) -> Option<Arc<Served>> {
        let mut list = self.list.write().expect("volumes lock");
        let at = list.iter().position(|s| s.name() == name)?;
        Some(list.remove(at))
    }
}
