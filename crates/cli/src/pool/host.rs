//! A pool as its server holds it: the drives open (claimed by the
//! server), every volume's subdisks as served, and the writes the control
//! socket's `volume-create|extend|remove` need, made by the same code as
//! the offline commands (`make.rs`, `extend.rs`), in the same order.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use platter_core::label::Label;
use platter_core::pool::PoolVolume;
use platter_io::aio::Delay;
use platter_io::assembly::assemble_devices;
use platter_io::subdisk::SubdiskMember;
use platter_io::Member;
use platter_server::{NewVolume, PoolHost};
use serde_json::Value;

use super::drives::{subdisk_windows, OpenPool};
use super::make::{create_in, remove_in, VolumeCreateArgs};
use crate::error::{CliError, Result};

type Members = Vec<Arc<dyn Member>>;

/// The pool a server serves.
pub struct ServedPool {
    state: Mutex<State>,
    /// Latency injected into each drive (`serve --inject`), by drive name.
    latency: HashMap<String, Delay>,
}

struct State {
    open: OpenPool,
    /// Each volume's subdisks as its engine holds them, by volume name:
    /// an extend widens these.
    windows: HashMap<String, Vec<Arc<SubdiskMember>>>,
}

impl ServedPool {
    pub fn new(open: OpenPool, latency: HashMap<String, Delay>) -> ServedPool {
        ServedPool {
            state: Mutex::new(State {
                open,
                windows: HashMap::new(),
            }),
            latency,
        }
    }

    pub fn pool(&self) -> platter_core::pool::Pool {
        self.lock().open.pool().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Volume `v`'s subdisks on the drives present, kept for its extends:
    /// those labelled, and the blank ones (on a drive put in place of a
    /// lost one) that its spares will be. An extend a crash cut short
    /// has its labels brought up first (not by a read-only server).
    pub fn open_volume(&self, v: &PoolVolume, read_only: bool) -> Result<(Members, Members)> {
        let mut state = self.lock();
        let windows = subdisk_windows(state.open.pool(), v, &state.open.drives)?;
        let members: Members = windows
            .iter()
            .map(|w| Arc::clone(w) as Arc<dyn Member>)
            .collect();
        if !read_only {
            super::extend::bring_labels_up(state.open.pool(), v, &members)?;
        }
        state.windows.insert(v.name.clone(), windows);
        blank_apart(members)
    }

    /// Where each of `v`'s subdisks (`names`, as opened) lies: its drive,
    /// and that drive's injected latency.
    pub fn places(
        &self,
        v: &PoolVolume,
        names: &[String],
        member_drives: &mut HashMap<String, String>,
        member_delays: &mut HashMap<String, Delay>,
    ) {
        let pool = self.lock().open.pool().name.clone();
        for (s, sd) in v.plex().subdisks.iter().enumerate() {
            let prefix = format!("{pool}/{} (", v.subdisk_name(0, s));
            for name in names.iter().filter(|n| n.starts_with(&prefix)) {
                member_drives.insert(name.clone(), sd.drive.clone());
                if let Some(delay) = self.latency.get(&sd.drive) {
                    member_delays.insert(name.clone(), delay.clone());
                }
            }
        }
    }

    fn create_volume(&self, req: &Value) -> Result<NewVolume> {
        let pool = self.lock().open.pool().name.clone();
        let args = VolumeCreateArgs::from_request(&pool, req).map_err(CliError)?;
        let v = create_in(&mut self.lock().open, &args)?;
        let (members, spares) = self.open_volume(&v, false)?;
        let names: Vec<String> = members.iter().map(|m| m.describe().to_string()).collect();
        let (mut member_drives, mut member_delays) = (HashMap::new(), HashMap::new());
        self.places(&v, &names, &mut member_drives, &mut member_delays);
        let volume =
            assemble_devices(members).map_err(|e| CliError(format!("volume {}: {e}", v.name)))?;
        Ok(NewVolume {
            volume,
            spares,
            member_drives,
            member_delays,
        })
    }

    fn extend_volume(&self, name: &str, label: &Label, size_bytes: u64) -> Result<Label> {
        let mut state = self.lock();
        let v = state
            .open
            .pool()
            .volume(name)
            .cloned()
            .ok_or_else(|| CliError(format!("the pool has no volume {name}")))?;
        let windows = state.windows.get(name).cloned().unwrap_or_default();
        if windows.len() != v.plex().subdisks.len() {
            return Err(CliError(format!(
                "volume {name}: a drive of its subdisks is missing; it is extended with every \
                 one present"
            )));
        }
        let grown = super::extend::grow(&mut state.open, &v, label, size_bytes)?;
        if let [lone] = &grown.members[..] {
            // Its one label has no other to be rebuilt from if the
            // server's write of it is torn: the copy goes first, at the
            // event count that write will have.
            let copy = Label {
                event_counter: label.event_counter + 1,
                ..grown.label.for_slot(0)
            };
            lone.write_at(super::extend::LONE_COPY_OFFSET_BYTES, &copy.encode())?;
            lone.flush()?;
        }
        for (w, sd) in windows.iter().zip(&grown.volume.plex().subdisks) {
            w.widen(sd.len_bytes)?;
        }
        Ok(grown.label)
    }

    fn remove_volume(&self, name: &str) -> Result<()> {
        let mut state = self.lock();
        remove_in(&mut state.open, name)?;
        state.windows.remove(name);
        Ok(())
    }
}

impl PoolHost for ServedPool {
    fn pool_name(&self) -> String {
        self.lock().open.pool().name.clone()
    }

    fn create(&self, req: &Value) -> std::result::Result<NewVolume, String> {
        self.create_volume(req).map_err(|e| e.0)
    }

    fn extend(
        &self,
        name: &str,
        label: &Label,
        size_bytes: u64,
    ) -> std::result::Result<Label, String> {
        self.extend_volume(name, label, size_bytes).map_err(|e| e.0)
    }

    fn remove(&self, name: &str) -> std::result::Result<(), String> {
        self.remove_volume(name).map_err(|e| e.0)
    }
}

/// A volume's subdisks split: those with a label, and the blank ones.
fn blank_apart(members: Members) -> Result<(Members, Members)> {
    let mut labelled = Vec::new();
    let mut blank = Vec::new();
    for m in members {
        let area = platter_io::assembly::read_label_area(m.as_ref())?;
        if area.iter().all(|&b| b == 0) {
            blank.push(m);
        } else {
            labelled.push(m);
        }
    }
    Ok((labelled, blank))
}
