//! A pool as its server holds it: the drives open (claimed by the
//! server), every volume's subdisks as served, and the writes the control
//! socket's `volume-create|extend|remove` need, made by the same code as
//! the offline commands (`make.rs`, `extend.rs`), in the same order.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use platter_core::label::Label;
use platter_core::pool::PoolVolume;
use platter_core::pool::{DetachedPlex, DriveState, PlexConvert};
use platter_io::aio::Delay;
use platter_io::assembly::assemble_devices;
use platter_io::assembly::OpenVolume;
use platter_io::subdisk::SubdiskMember;
use platter_io::Member;
use platter_server::{
    Extended, NewSubdisks, NewVolume, OnDrives, PoolHost, PoolStart, Relocated, RelocatedSubdisk,
};
use serde_json::Value;

use super::drives::{subdisk_window, subdisk_windows, OpenPool};
use super::heal::{heal_in, Room};
use super::make::{
    add_in, create_in, drive_index, remove_in, replace_in, strings, NewDrives, VolumeCreateArgs,
};
use crate::error::{CliError, Result};

mod convert;
mod copy;
mod moves;
mod split;

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
    /// Subdisk moves the start opened over both places, for the server
    /// to take up (once).
    resumable: Vec<(
        platter_server::PlannedMove,
        Arc<platter_io::moving::MovingMember>,
    )>,
    /// Whether each volume's convert has its new plex in its slot of the
    /// mirror, once known (`convert_in_slot`).
    in_slot: HashMap<String, bool>,
    /// Volumes whose copy into a new plex has ended, as they were before:
    /// their old plex's labels are zeroed once its array has stopped.
    copied: HashMap<String, PoolVolume>,
}

impl State {
    /// Subdisk `slot` of array `array` (of `count` subdisks) as its
    /// engine holds it from now on, when every one of them is kept.
    fn keep_window(&mut self, array: &str, count: usize, slot: usize, w: &Arc<SubdiskMember>) {
        if let Some(kept) = self.windows.get_mut(array) {
            if kept.len() == count {
                kept[slot] = Arc::clone(w);
            }
        }
    }

    /// Volume `name` of the pool as it is now.
    fn volume(&self, name: &str) -> Result<PoolVolume> {
        self.open
            .pool()
            .volume(name)
            .cloned()
            .ok_or_else(|| CliError(format!("the pool has no volume {name}")))
    }
}

impl ServedPool {
    pub fn new(open: OpenPool, latency: HashMap<String, Delay>) -> ServedPool {
        ServedPool {
            state: Mutex::new(State {
                open,
                windows: HashMap::new(),
                resumable: Vec::new(),
                in_slot: HashMap::new(),
                copied: HashMap::new(),
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
        let mut v = v.clone();
        let mut windows = subdisk_windows(state.open.pool(), &v, &state.open.drives)?;
        let mut members: Members = windows
            .iter()
            .map(|w| Arc::clone(w) as Arc<dyn Member>)
            .collect();
        if !read_only && members.len() == v.plex().subdisks.len() {
            self.wrap_moving(&mut state, &v, 0, &mut members);
        }
        if !read_only {
            let finished = super::extend::finish_reshape_labels(&v, &members)?;
            if finished > 0 {
                tracing::warn!(volume = %v.name, subdisks = finished, "a reshape onto new subdisks was cut off while its labels were written: the added subdisks' labels written now");
            }
        }
        let unbegun = super::extend::unbegun_subdisks(&v, &members)?;
        if unbegun > 0 && !read_only {
            // Added for a reshape a crash stopped before it began.
            tracing::warn!(volume = %v.name, subdisks = unbegun, "subdisks added for a reshape that never began: taken out of the pool again");
            v = super::extend::drop_plex_subdisks(&mut state.open, &v, unbegun)?;
            windows.truncate(windows.len() - unbegun);
            members.truncate(members.len() - unbegun);
        }
        if !read_only {
            super::extend::bring_labels_up(state.open.pool(), &v, &members)?;
        }
        state.windows.insert(v.name.clone(), windows);
        blank_apart(members)
    }

    /// A volume of several plexes: each plex's subdisks on the drives
    /// present, labelled and blank apart, for each plex `which` names.
    pub fn open_plexes(
        &self,
        v: &PoolVolume,
        read_only: bool,
        which: &[usize],
    ) -> Result<Vec<(Members, Members)>> {
        let mut state = self.lock();
        let mut out = Vec::new();
        for &p in which {
            let windows = super::drives::plex_windows(state.open.pool(), v, p, &state.open.drives)?;
            // Kept by slot when every subdisk is there: an extend widens them.
            if windows.len() == v.plexes[p].subdisks.len() {
                state.windows.insert(v.plex_name(p), windows.clone());
            }
            let whole = windows.len() == v.plexes[p].subdisks.len();
            let mut members: Members = windows.into_iter().map(|w| w as Arc<dyn Member>).collect();
            if !read_only && whole {
                self.wrap_moving(&mut state, v, p, &mut members);
            }
            if !read_only {
                // What an extend cut short left: the labels it owed.
                super::extend::plexes::bring_plex_labels_up(state.open.pool(), v, p, &members)?;
            }
            out.push(blank_apart(members)?);
        }
        Ok(out)
    }

    /// [`Self::open_plexes`] of plex `p` alone.
    pub fn open_plex(
        &self,
        v: &PoolVolume,
        read_only: bool,
        p: usize,
    ) -> Result<(Members, Members)> {
        Ok(self
            .open_plexes(v, read_only, &[p])?
            .pop()
            .expect("one plex asked"))
    }

    /// How a server starts volume `v` of several plexes: each plex's array
    /// assembled from its subdisks (a blank one its spare; `--run` as a
    /// partial member list needs), one that cannot serve all of its data
    /// made anew while another plex holds it (not by a read-only server),
    /// and the mirror's assembly over them; the subdisks' drives and
    /// latencies noted in `maps`.
    pub fn start_of_plexes(
        &self,
        v: &PoolVolume,
        (read_only, run): (bool, bool),
        maps: (&mut HashMap<String, String>, &mut HashMap<String, Delay>),
    ) -> Result<PoolStart> {
        let (member_drives, member_delays) = maps;
        // A detached plex is not the mirror's: it serves without it.
        let pool = self.pool();
        let attached = pool.attached_plexes(v);
        let absent = pool.mirror_slots(v) - attached.len();
        // A convert's new plex serves its old plex's slot once it holds it.
        let opened: Vec<usize> = attached
            .iter()
            .map(|&p| match pool.convert_of(&v.name) {
                Some(c) if c.from == p && self.convert_in_slot(c) => c.into,
                _ => p,
            })
            .collect();
        let mut tried = Vec::new();
        let opened_plexes = self.open_plexes(v, read_only, &opened)?;
        // Kept by the slot's name, as the server serves it.
        for (&slot, &p) in attached.iter().zip(&opened).filter(|(s, p)| s != p) {
            let mut state = self.lock();
            if let Some(w) = state.windows.remove(&v.plex_name(p)) {
                state.windows.insert(v.plex_name(slot), w);
            }
        }
        for (members, blank) in opened_plexes {
            let all: Vec<String> = members
                .iter()
                .chain(&blank)
                .map(|m| m.describe().to_string())
                .collect();
            self.places(v, &all, member_drives, member_delays);
            tried.push(assemble_checked(members, blank, run).and_then(serving_plex));
        }
        let serving = tried.iter().filter(|t| t.is_ok()).count();
        let mut plexes = Vec::new();
        for ((&p, &opened), t) in attached.iter().zip(&opened).zip(tried) {
            let t = match t {
                // Made anew only while another plex holds the data.
                Err(_) if serving > 0 && !read_only => match self.remake_plex(v, opened) {
                    Ok(Some((members, blank))) => {
                        assemble_checked(members, blank, run).and_then(serving_plex)
                    }
                    Ok(None) => t,
                    Err(e) => Err(CliError(format!("made anew, it failed: {}", e.0))),
                },
                t => t,
            };
            match t {
                Ok((vol, spares)) => plexes.push((v.plex_name(p), vol, spares)),
                Err(e) => {
                    tracing::warn!(plex = %v.plex_name(p), error = %e.0, "plex not served: the volume serves without it");
                }
            }
        }
        // With every plex the pool has given, a member the mirror's labels
        // expect and no plex is is gone for good (the new plex of a convert
        // given up): nothing is left to wait for.
        let run = run || plexes.len() == attached.len();
        let (pool, volume) = (self.lock().open.pool().clone(), v.clone());
        let assemble: platter_server::AssemblePlexes = Box::new(move |members| {
            if !read_only {
                super::extend::plexes::bring_mirror_labels_up(&pool, &volume, &members)
                    .map_err(|e| e.0)?;
            }
            let (labelled, blank) = blank_apart(members).map_err(|e| e.0)?;
            assemble_without(labelled, blank, run, absent).map_err(|e| e.0)
        });
        Ok(PoolStart::Plexes {
            plexes,
            assemble,
            read_only: false,
        })
    }

    /// Plex `p` of `v`, which does not assemble, made anew when every
    /// subdisk of it is present and one at least is blank (a replaced or
    /// healed drive's): a new array, its data zeroed, which the volume's
    /// mirror takes as a spare and rebuilds from its other plexes. Returns
    /// it as `open_plexes` does, or `None` when it is not to be made anew.
    pub fn remake_plex(&self, v: &PoolVolume, p: usize) -> Result<Option<(Members, Members)>> {
        if !self.plex_whole(v, p)? {
            return Ok(None);
        }
        let mut state = self.lock();
        let windows = super::plexes::label_plex(state.open.pool(), v, p, &state.open.drives)?;
        state.windows.insert(v.plex_name(p), windows.clone());
        let made = windows.into_iter().map(|w| w as Arc<dyn Member>).collect();
        tracing::warn!(plex = %v.plex_name(p), "plex made anew: the volume rebuilds it from its other plexes");
        Ok(Some(blank_apart(made)?))
    }

    /// Whether plex `p` of `v` is to be made anew: every subdisk of it
    /// present, one at least blank (a replaced or healed drive's).
    fn plex_whole(&self, v: &PoolVolume, p: usize) -> Result<bool> {
        let state = self.lock();
        let windows = super::drives::plex_windows(state.open.pool(), v, p, &state.open.drives)?;
        if windows.len() != v.plexes[p].subdisks.len() {
            return Ok(false);
        }
        let members: Members = windows.into_iter().map(|w| w as Arc<dyn Member>).collect();
        Ok(!blank_apart(members)?.1.is_empty())
    }

    /// The volume of plexes and the plex a plex's name (`v.p1`) picks.
    fn plex_named(&self, plex: &str) -> Result<(PoolVolume, usize)> {
        let state = self.lock();
        let pool = state.open.pool();
        pool.array(plex)
            .filter(|(v, _)| v.has_plexes())
            .map(|(v, p)| (v.clone(), p))
            .ok_or_else(|| CliError(format!("pool {} has no plex {plex}", pool.name)))
    }

    /// Plex `plex` made anew while its volume serves: its array, for the
    /// server to serve and the volume's mirror to rebuild.
    fn remake_served(&self, plex: &str) -> Result<NewVolume> {
        let (v, p) = self.plex_named(plex)?;
        let (members, blank) = self.remake_plex(&v, p)?.ok_or_else(|| {
            CliError(format!(
                "plex {plex}: a subdisk of it is still lost, or none of them is blank"
            ))
        })?;
        self.plex_to_serve(&v, members, blank)
    }

    /// A plex's array over its subdisks `members` and `blank` (its
    /// spares), assembled as the server serves a plex, with the drives and
    /// latencies of its subdisks.
    fn plex_to_serve(&self, v: &PoolVolume, members: Members, blank: Members) -> Result<NewVolume> {
        let (member_drives, member_delays) = self.placed(v, &members, &blank);
        let (volume, spares) = assemble_checked(members, blank, false).and_then(serving_plex)?;
        Ok(NewVolume {
            start: PoolStart::Array(Box::new(volume), spares),
            member_drives,
            member_delays,
        })
    }

    /// The drives and latencies of subdisks `members` and `blank` of `v`.
    fn placed(
        &self,
        v: &PoolVolume,
        members: &Members,
        blank: &Members,
    ) -> (HashMap<String, String>, HashMap<String, Delay>) {
        let names: Vec<String> = members
            .iter()
            .chain(blank)
            .map(|m| m.describe().to_string())
            .collect();
        let (mut drives, mut delays) = (HashMap::new(), HashMap::new());
        self.places(v, &names, &mut drives, &mut delays);
        (drives, delays)
    }

    /// A volume of plexes' extend through the server: the plan, the
    /// plexes' zeros and the configuration, then the plexes' subdisks the
    /// server holds widened; returns each plex's grown label.
    fn extend_served_plexes(
        &self,
        name: &str,
        mirror: &Label,
        plexes: &[Label],
        size_bytes: u64,
    ) -> Result<Vec<Label>> {
        let mut state = self.lock();
        let v = state.volume(name)?;
        let mut held = Vec::new();
        for (p, plex) in v.plexes.iter().enumerate() {
            match state.windows.get(&v.plex_name(p)) {
                Some(w) if w.len() == plex.subdisks.len() => held.push(w.clone()),
                _ => {
                    return Err(CliError(format!(
                        "plex {}: the server does not hold every subdisk of it (one was lost \
                         since it started); stop the server and extend the volume offline",
                        v.plex_name(p)
                    )))
                }
            }
        }
        let growth =
            super::extend::plexes::plan_plexes(state.open.pool(), &v, plexes, mirror, size_bytes)?;
        super::extend::plexes::grow_plexes(&mut state.open, &v, plexes, &growth)?;
        for (windows, plex) in held.iter().zip(&growth.volume.plexes) {
            for (w, sd) in windows.iter().zip(&plex.subdisks) {
                w.widen(sd.len_bytes)?;
            }
        }
        Ok(growth.plexes)
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
        let subdisks = v.plexes.iter().enumerate().flat_map(|(p, plex)| {
            plex.subdisks
                .iter()
                .enumerate()
                .map(move |(s, sd)| (p, s, sd))
        });
        for (p, s, sd) in subdisks {
            let prefix = format!("{pool}/{} (", v.subdisk_name(p, s));
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
        let (mut member_drives, mut member_delays) = (HashMap::new(), HashMap::new());
        if v.has_plexes() {
            let maps = (&mut member_drives, &mut member_delays);
            let start = self.start_of_plexes(&v, (false, false), maps)?;
            return Ok(NewVolume {
                start,
                member_drives,
                member_delays,
            });
        }
        let (members, spares) = self.open_volume(&v, false)?;
        let names: Vec<String> = members.iter().map(|m| m.describe().to_string()).collect();
        self.places(&v, &names, &mut member_drives, &mut member_delays);
        let volume =
            assemble_devices(members).map_err(|e| CliError(format!("volume {}: {e}", v.name)))?;
        Ok(NewVolume {
            start: PoolStart::Array(Box::new(volume), spares),
            member_drives,
            member_delays,
        })
    }

    fn extend_volume(&self, name: &str, label: &Label, size_bytes: u64) -> Result<Extended> {
        let mut state = self.lock();
        let v = state.volume(name)?;
        if v.has_plexes() {
            return Err(CliError(format!(
                "volume {name} mirrors {} plexes: its server grows each plex, then the mirror",
                v.plexes.len()
            )));
        }
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
        // A concat's added subdisks, after the last.
        let pool = state.open.pool().clone();
        let mut added = Vec::new();
        let subdisks = grown.volume.plex().subdisks.iter().enumerate();
        for (s, sd) in subdisks.skip(windows.len()) {
            let d = drive_index(&state.open, &sd.drive)?;
            let drive = state.open.drives[d]
                .clone()
                .expect("placed on a drive present");
            let window = subdisk_window(&pool, &grown.volume, s, &drive)?;
            state
                .windows
                .entry(name.to_string())
                .or_default()
                .push(Arc::clone(&window));
            added.push((window as Arc<dyn Member>, sd.drive.clone()));
        }
        Ok(Extended {
            label: grown.label,
            added,
        })
    }

    /// `volume extend --add-subdisks`'s writes, and the new subdisks as
    /// the server holds them from now on, with their drives.
    fn add_to_plex(&self, name: &str, count: u32) -> Result<OnDrives> {
        let mut state = self.lock();
        let v = state.volume(name)?;
        let n = v
            .one_plex_only("volume extend --add-subdisks")
            .map_err(CliError)?
            .subdisks
            .len();
        if state.windows.get(name).map_or(0, Vec::len) != n {
            return Err(CliError(format!(
                "volume {name}: a drive of its subdisks is missing; it grows with every one present"
            )));
        }
        let grown = super::extend::add_plex_subdisks(&mut state.open, &v, count)?;
        let pool = state.open.pool().clone();
        let mut added = Vec::new();
        for (s, sd) in grown.plex().subdisks.iter().enumerate().skip(n) {
            let d = drive_index(&state.open, &sd.drive)?;
            let drive = state.open.drives[d]
                .clone()
                .expect("placed on a drive present");
            let window = subdisk_window(&pool, &grown, s, &drive)?;
            state
                .windows
                .entry(name.to_string())
                .or_default()
                .push(Arc::clone(&window));
            added.push((window as Arc<dyn Member>, sd.drive.clone()));
        }
        Ok(added)
    }

    /// The volumes with a subdisk on `drive`, and its slot in each.
    fn users_of(&self, drive: &str) -> Result<Vec<(String, u32)>> {
        let state = self.lock();
        let pool = state.open.pool();
        if pool.drive(drive).is_none() {
            return Err(CliError(format!("pool {} has no drive {drive}", pool.name)));
        }
        // A plex of a volume of plexes is named as its array is (`v.p1`).
        let mut users = Vec::new();
        for v in &pool.volumes {
            for (p, plex) in v.plexes.iter().enumerate() {
                let name = v.array_name(p);
                for (s, sd) in plex.subdisks.iter().enumerate() {
                    if sd.drive == drive {
                        users.push((name.clone(), s as u32));
                    }
                }
            }
        }
        Ok(users)
    }

    /// Device `device` in `drive`'s place (`pool replace-drive`'s writes),
    /// and each volume's new, blank subdisk there with its slot.
    fn replace(&self, req: &Value) -> Result<NewSubdisks> {
        let text = |k: &str| {
            req.get(k)
                .and_then(Value::as_str)
                .ok_or_else(|| CliError(format!("missing \"{k}\"")))
        };
        let (drive, device) = (text("drive")?, text("device")?);
        let taking = NewDrives::new(
            req.get("size_bytes").and_then(Value::as_u64),
            req.get("force").and_then(Value::as_bool).unwrap_or(false),
        );
        let mut state = self.lock();
        let d = drive_index(&state.open, drive)?;
        replace_in(&mut state.open, d, device, &taking)?;
        let pool = state.open.pool().clone();
        let handle = state.open.drives[d].clone().expect("put in place");
        let mut out = Vec::new();
        for v in &pool.volumes {
            for (p, plex) in v.plexes.iter().enumerate() {
                for (s, sd) in plex.subdisks.iter().enumerate() {
                    if sd.drive != drive {
                        continue;
                    }
                    let array = v.array_name(p);
                    let window = super::drives::plex_window(&pool, v, p, s, &handle)?;
                    state.keep_window(&array, plex.subdisks.len(), s, &window);
                    out.push((array, s as u32, window as Arc<dyn Member>));
                }
            }
        }
        Ok(out)
    }

    /// `pool add-drive`'s writes, for the drives `req["drives"]` names.
    fn add_to_pool(&self, req: &Value) -> Result<Value> {
        let specs = strings(req, "drives");
        if specs.is_empty() {
            return Err(CliError("missing \"drives\"".into()));
        }
        let taking = NewDrives::new(
            req.get("size_bytes").and_then(Value::as_u64),
            req.get("force").and_then(Value::as_bool).unwrap_or(false),
        );
        let spare = req.get("spare").and_then(Value::as_bool).unwrap_or(false);
        let drive_state = if spare {
            DriveState::Spare
        } else {
            DriveState::Up
        };
        let mut state = self.lock();
        add_in(&mut state.open, &specs, &taking, drive_state)?;
        let pool = state.open.pool();
        Ok(serde_json::json!({ "drives": pool.drives.len(), "generation": pool.generation }))
    }

    /// `pool heal`'s writes for the failed subdisks `lost` names, and
    /// each subdisk placed as the server holds it from now on.
    fn heal_subdisks(&self, lost: &[(String, u32)], room: Room) -> Result<Relocated> {
        let lost: Vec<(String, usize)> =
            lost.iter().map(|(v, s)| (v.clone(), *s as usize)).collect();
        let mut state = self.lock();
        let healed = heal_in(&mut state.open, &lost, room)?;
        let pool = state.open.pool().clone();
        let mut placed = Vec::new();
        for p in &healed.placed {
            let (v, plex) = pool.array(&p.volume).expect("healed in the pool");
            let d = drive_index(&state.open, &p.to.drive)?;
            let drive = state.open.drives[d]
                .clone()
                .expect("placed on a drive present");
            let window = super::drives::plex_window(&pool, v, plex, p.slot, &drive)?;
            let count = v.plexes[plex].subdisks.len();
            state.keep_window(&p.volume, count, p.slot, &window);
            placed.push(RelocatedSubdisk {
                volume: p.volume.clone(),
                slot: p.slot as u32,
                member: window as Arc<dyn Member>,
                drive: p.to.drive.clone(),
                from: p.from.clone(),
            });
        }
        Ok(Relocated {
            placed,
            unplaced: healed.unplaced,
        })
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
    ) -> std::result::Result<Extended, String> {
        self.extend_volume(name, label, size_bytes).map_err(|e| e.0)
    }

    fn remove(&self, name: &str) -> std::result::Result<(), String> {
        self.remove_volume(name).map_err(|e| e.0)
    }

    fn add_drives(&self, req: &Value) -> std::result::Result<Value, String> {
        self.add_to_pool(req).map_err(|e| e.0)
    }

    fn drive_users(&self, drive: &str) -> std::result::Result<Vec<(String, u32)>, String> {
        self.users_of(drive).map_err(|e| e.0)
    }

    fn replace_drive(&self, req: &Value) -> std::result::Result<NewSubdisks, String> {
        self.replace(req).map_err(|e| e.0)
    }

    fn add_subdisks(&self, name: &str, count: u32) -> std::result::Result<OnDrives, String> {
        self.add_to_plex(name, count).map_err(|e| e.0)
    }

    fn drop_subdisks(&self, name: &str, count: u32) -> std::result::Result<(), String> {
        let mut state = self.lock();
        let v = state.volume(name).map_err(|e| e.0)?;
        super::extend::drop_plex_subdisks(&mut state.open, &v, count as usize).map_err(|e| e.0)?;
        if let Some(w) = state.windows.get_mut(name) {
            w.truncate(w.len().saturating_sub(count as usize));
        }
        Ok(())
    }

    fn remove_drive(&self, drive: &str) -> std::result::Result<Value, String> {
        let mut state = self.lock();
        super::retire::remove_drive_in(&mut state.open, drive).map_err(|e| e.0)?;
        let pool = state.open.pool();
        Ok(serde_json::json!({ "drives": pool.drives.len(), "generation": pool.generation }))
    }

    fn set_failing(&self, drives: &[String]) {
        self.lock().open.failing = drives.to_vec();
    }

    fn has_spare(&self) -> bool {
        let state = self.lock();
        let pool = state.open.pool();
        state
            .open
            .present_names()
            .iter()
            .any(|n| pool.drive(n).is_some_and(|d| d.state == DriveState::Spare))
    }

    fn plex_whole(&self, plex: &str) -> std::result::Result<bool, String> {
        let (v, p) = self.plex_named(plex).map_err(|e| e.0)?;
        ServedPool::plex_whole(self, &v, p).map_err(|e| e.0)
    }

    fn remake_plex(&self, plex: &str) -> std::result::Result<NewVolume, String> {
        self.remake_served(plex).map_err(|e| e.0)
    }

    fn plan_plexes_extend(
        &self,
        name: &str,
        mirror: &Label,
        plexes: &[Label],
        size_bytes: u64,
    ) -> std::result::Result<(Vec<Label>, Label), String> {
        let state = self.lock();
        let v = state.volume(name).map_err(|e| e.0)?;
        let g =
            super::extend::plexes::plan_plexes(state.open.pool(), &v, plexes, mirror, size_bytes)
                .map_err(|e| e.0)?;
        Ok((g.plexes, g.mirror))
    }

    fn extend_plexes(
        &self,
        name: &str,
        mirror: &Label,
        plexes: &[Label],
        size_bytes: u64,
    ) -> std::result::Result<Vec<Label>, String> {
        self.extend_served_plexes(name, mirror, plexes, size_bytes)
            .map_err(|e| e.0)
    }

    fn relocate(
        &self,
        lost: &[(String, u32)],
        free_space: bool,
    ) -> std::result::Result<Relocated, String> {
        let room = if free_space {
            Room::FreeSpace
        } else {
            Room::Spares
        };
        self.heal_subdisks(lost, room).map_err(|e| e.0)
    }

    fn plan_move(&self, req: &Value) -> std::result::Result<platter_server::PlannedMove, String> {
        self.plan_served_move(req).map_err(|e| e.0)
    }

    fn plan_evacuation(
        &self,
        drive: &str,
    ) -> std::result::Result<Vec<platter_server::PlannedMove>, String> {
        self.plan_served_evacuation(drive).map_err(|e| e.0)
    }

    fn begin_moves(
        &self,
        moves: &[platter_core::pool::SubdiskMove],
        leaving: Option<&str>,
    ) -> std::result::Result<Vec<Arc<platter_io::moving::MovingMember>>, String> {
        self.begin_served_moves(moves, leaving).map_err(|e| e.0)
    }

    fn run_move(
        &self,
        m: &platter_core::pool::SubdiskMove,
        member: &platter_io::moving::MovingMember,
        resumed: bool,
        rate: u64,
        stop: &std::sync::atomic::AtomicBool,
    ) -> std::result::Result<platter_server::MoveEnd, String> {
        self.run_served_move(m, member, (resumed, rate), stop)
            .map_err(|e| e.0)
    }

    fn rebuild_move(
        &self,
        m: &platter_core::pool::SubdiskMove,
        member: &platter_io::moving::MovingMember,
    ) -> std::result::Result<platter_server::OnDrive, String> {
        self.rebuild_served_move(m, member).map_err(|e| e.0)
    }

    fn drive_delay(&self, drive: &str) -> Option<Delay> {
        self.latency.get(drive).cloned()
    }

    fn drive_of_subdisk(&self, m: &platter_core::pool::SubdiskMove) -> Option<String> {
        self.lock().open.pool().moving(m).map(|sd| sd.drive.clone())
    }

    fn plan_detach(&self, req: &Value) -> std::result::Result<DetachedPlex, String> {
        self.plan_served_detach(req).map_err(|e| e.0)
    }

    fn detach_plex(&self, d: &DetachedPlex) -> std::result::Result<(), String> {
        self.detach_served(d).map_err(|e| e.0)
    }

    fn start_detached(&self, name: &str) -> std::result::Result<NewVolume, String> {
        self.start_served_detached(name).map_err(|e| e.0)
    }

    fn plan_attach(&self, req: &Value) -> std::result::Result<DetachedPlex, String> {
        self.plan_served_attach(req).map_err(|e| e.0)
    }

    fn attach_plex(&self, d: &DetachedPlex) -> std::result::Result<NewVolume, String> {
        self.attach_served(d).map_err(|e| e.0)
    }

    fn begin_convert(
        &self,
        req: &Value,
        plex_bytes: u64,
    ) -> std::result::Result<PlexConvert, String> {
        self.begin_served_convert(req, plex_bytes).map_err(|e| e.0)
    }

    fn make_convert_plex(&self, c: &PlexConvert) -> std::result::Result<NewVolume, String> {
        self.make_served_convert(c).map_err(|e| e.0)
    }

    fn finish_convert(&self, c: &PlexConvert) -> std::result::Result<(), String> {
        self.finish_served_convert(c).map_err(|e| e.0)
    }

    fn reopen_convert_old(&self, c: &PlexConvert) -> std::result::Result<NewVolume, String> {
        self.reopen_served_convert(c).map_err(|e| e.0)
    }

    fn abort_convert(&self, c: &PlexConvert) -> std::result::Result<(), String> {
        self.abort_served_convert(c).map_err(|e| e.0)
    }

    fn converts(&self) -> Vec<(PlexConvert, bool)> {
        let converts = self.lock().open.pool().converts.clone();
        converts
            .into_iter()
            .map(|c| {
                let in_slot = self.convert_in_slot(&c);
                (c, in_slot)
            })
            .collect()
    }

    fn convert_drives(&self, c: &PlexConvert) -> Vec<String> {
        let pool = self.pool();
        pool.volume(&c.volume)
            .and_then(|v| v.plexes.get(c.into))
            .map(|p| p.subdisks.iter().map(|sd| sd.drive.clone()).collect())
            .unwrap_or_default()
    }

    fn begin_copy(
        &self,
        req: &Value,
        volume_bytes: u64,
    ) -> std::result::Result<Vec<String>, String> {
        self.begin_served_copy(req, volume_bytes).map_err(|e| e.0)
    }

    fn make_copy_plex(
        &self,
        volume: &str,
        volume_bytes: u64,
    ) -> std::result::Result<NewVolume, String> {
        self.make_served_copy(volume, volume_bytes).map_err(|e| e.0)
    }

    fn run_copy(
        &self,
        volume: &str,
        member: &platter_io::moving::MovingMember,
        rate: u64,
        stop: &std::sync::atomic::AtomicBool,
    ) -> std::result::Result<bool, String> {
        self.run_served_copy(volume, member, rate, stop)
            .map_err(|e| e.0)
    }

    fn finish_copy(&self, volume: &str) -> std::result::Result<(), String> {
        self.finish_served_copy(volume).map_err(|e| e.0)
    }

    fn erase_copied(&self, volume: &str) {
        self.erase_served_copied(volume);
    }

    fn abort_copy(&self, volume: &str) -> std::result::Result<(), String> {
        self.abort_served_copy(volume).map_err(|e| e.0)
    }

    fn copies(&self) -> Vec<(String, u64)> {
        let pool = self.pool();
        pool.copies
            .iter()
            .map(|c| (c.volume.clone(), c.copied_bytes))
            .collect()
    }

    fn detached_plexes(&self) -> Vec<DetachedPlex> {
        self.lock().open.pool().detached.clone()
    }

    fn resumable_moves(
        &self,
    ) -> Vec<(
        platter_server::PlannedMove,
        Arc<platter_io::moving::MovingMember>,
    )> {
        std::mem::take(&mut self.lock().resumable)
    }
}

/// A volume's subdisks split: those with a label, and the blank ones.
fn blank_apart(members: Members) -> Result<(Members, Members)> {
    let mut labelled = Vec::new();
    let mut blank = Vec::new();
    for m in members {
        if super::drives::is_blank(m.as_ref())? {
            blank.push(m);
        } else {
            labelled.push(m);
        }
    }
    Ok((labelled, blank))
}

/// An array over `members` (a blank one, a replaced drive's subdisk or a
/// plex made anew, stands for a missing one: it becomes a spare and is
/// rebuilt), as `serve` checks a partial member list (`--run`).
fn assemble_checked(members: Members, blank: Members, run: bool) -> Result<(OpenVolume, Members)> {
    assemble_without(members, blank, run, 0)
}

/// [`assemble_checked`] for an array `absent` of whose members are left
/// out on purpose (a mirror's detached plexes): as many missing need no
/// `--run`.
fn assemble_without(
    members: Members,
    blank: Members,
    run: bool,
    absent: usize,
) -> Result<(OpenVolume, Members)> {
    let names: Vec<String> = members.iter().map(|m| m.describe().to_string()).collect();
    let given = crate::partial::Given::Named(&names);
    let vol = assemble_devices(members).map_err(CliError::from)?;
    crate::partial::check(&vol.assembly, given, blank.len() + absent, run)?;
    Ok((vol, blank))
}

/// A plex's array that serves all of its data from the members in use: one
/// that does not (a stripe or concat plex that lost a subdisk) is made
/// anew and rebuilt by the volume's mirror instead.
fn serving_plex((vol, spares): (OpenVolume, Members)) -> Result<(OpenVolume, Members)> {
    let a = &vol.assembly;
    use platter_core::volume::Health;
    if !a
        .geometry
        .serves_all(|m| a.health[m as usize] == Health::Online)
    {
        return Err(CliError(format!(
            "plex {} cannot serve all of its data without its missing or failed subdisks",
            a.label.name
        )));
    }
    Ok((vol, spares))
}
