//! A pool's volumes changed while its server runs (`platter volume
//! create|extend|remove --control`). The host, the command line's pool
//! code holding the pool's drives open, writes the configuration and the
//! subdisks' labels as the offline commands do; the server starts, grows
//! or stops the volume around those writes, so that a crash at any point
//! leaves what a crash of the offline command leaves (docs/pools.md).

use crate::manage::Manager;
use crate::served::{Served, Volumes};
use crate::server::{
    finish_volume, keep_volume, start_plexes, start_volume, stop_upkeep, PoolStart, ServeConfig,
};
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::label::Label;
use platter_core::pool::{DetachedPlex, PlexConvert, SubdiskMove};
use platter_core::volume::Health;
use platter_io::moving::MovingMember;
use platter_io::Member;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

/// What owns a pool's drives for its server: every write of the pool's
/// configuration and of its volumes' labels outside the engine's.
///
/// Contract: each call either makes its change whole, in the order the
/// offline command makes it (labels before the configuration that gives
/// the extents out; the configuration before the labels of a removal
/// are erased), or returns why and leaves the pool as a crash at that
/// point of the offline command would. Calls come one at a time.
pub trait PoolHost: Send + Sync {
    /// The pool's name: a request naming another is refused.
    fn pool_name(&self) -> String;
    /// Places, labels and records the volume `req` describes (the fields
    /// of `platter volume create`); returns it opened over the drives.
    fn create(&self, req: &Value) -> Result<NewVolume, String>;
    /// Grows volume `name`, whose server has paused and emptied it and
    /// whose labels say `label`, to at least `size_bytes`: zeroes the
    /// growth, records the subdisks' new lengths (or a concat's added
    /// subdisk, labelled), and widens the subdisks the server holds.
    /// Returns the grown label, which the server writes to the members,
    /// and the members added.
    fn extend(&self, name: &str, label: &Label, size_bytes: u64) -> Result<Extended, String>;
    /// Takes volume `name` out of the configuration, then erases its
    /// subdisks' labels; its server has stopped it.
    fn remove(&self, name: &str) -> Result<(), String>;
    /// Adds the drives `req["drives"]` names to the pool, as `pool
    /// add-drive` does; returns what the pool is then (`drives`,
    /// `generation`).
    fn add_drives(&self, req: &Value) -> Result<Value, String>;
    /// The volumes with a subdisk on drive `drive`, and its slot in each.
    fn drive_users(&self, drive: &str) -> Result<Vec<(String, u32)>, String>;
    /// Puts device `req["device"]` in drive `req["drive"]`'s place, as
    /// `pool replace-drive` does (each subdisk laid out again, blank), the
    /// server having found every volume's subdisk there failed. Returns
    /// each volume's new subdisk with its slot, for the volume to rebuild.
    fn replace_drive(&self, req: &Value) -> Result<NewSubdisks, String>;
    /// Lays out `count` new subdisks for volume `name`'s plex, each as long
    /// as its others, on drives up that hold none of it, blank, and
    /// records them as the plex's next slots (`volume extend
    /// --add-subdisks`, before the reshape onto them begins). Returns
    /// them with their drives.
    fn add_subdisks(&self, name: &str, count: u32) -> Result<OnDrives, String>;
    /// Takes the last `count` subdisks of volume `name` out of the
    /// configuration again (a reshape onto them that could not begin).
    fn drop_subdisks(&self, name: &str, count: u32) -> Result<(), String>;
    /// Takes drive `drive`, which holds no subdisk, out of the pool, as
    /// `pool remove-drive` does; returns what the pool is then (`drives`,
    /// `generation`).
    fn remove_drive(&self, drive: &str) -> Result<Value, String>;
    /// The drives on which a volume served has a failed subdisk: no new
    /// subdisk goes there (said before each change that places some).
    fn set_failing(&self, drives: &[String]);
    /// Whether a spare drive of the pool is present: the server heals by
    /// itself only then.
    fn has_spare(&self) -> bool;
    /// Places each failed subdisk `lost` names (volume, slot) again,
    /// blank, as `pool heal` does: on a spare drive, or with `free_space`
    /// also in another drive's free space. Returns each subdisk placed,
    /// for its volume to rebuild, and why each other was not.
    fn relocate(&self, lost: &[(String, u32)], free_space: bool) -> Result<Relocated, String>;
    /// Whether plex `plex` (`v.p1`) of a volume of plexes can be made
    /// anew: every subdisk of it on a drive present, one at least blank
    /// (a replaced or healed drive's).
    fn plex_whole(&self, plex: &str) -> Result<bool, String>;
    /// Makes plex `plex` anew, as a server's start makes one that cannot
    /// serve all of its data: its subdisks labelled as a new array, its
    /// data zeroed; the server has stopped the old one. Returns the array
    /// to serve, which the volume's mirror takes and rebuilds.
    fn remake_plex(&self, plex: &str) -> Result<NewVolume, String>;
    /// Works out, writing nothing, an extend of volume of plexes `name`
    /// to at least `size_bytes`: each plex's grown label (`plexes`, by
    /// plex index, are their labels now) and the mirror's (`mirror` now).
    fn plan_plexes_extend(
        &self,
        name: &str,
        mirror: &Label,
        plexes: &[Label],
        size_bytes: u64,
    ) -> Result<(Vec<Label>, Label), String>;
    /// Makes that extend, the server having paused and emptied the volume
    /// and each plex and zeroed the mirror's bitmap: each plex's growth
    /// and bitmap zeroed, then the configuration, then the plexes'
    /// subdisks it holds widened. Returns each plex's grown label, which
    /// the server writes (each plex's, then the mirror's).
    fn extend_plexes(
        &self,
        name: &str,
        mirror: &Label,
        plexes: &[Label],
        size_bytes: u64,
    ) -> Result<Vec<Label>, String>;
    /// Plans the move `req` asks (`subdisk` V.pN.sM, `to` DRIVE[:OFFSET];
    /// without `to`, the move the pool records, taken up again), checked
    /// as `platter subdisk move` checks it; writes nothing.
    fn plan_move(&self, req: &Value) -> Result<PlannedMove, String>;
    /// Plans a move off drive `drive` of every subdisk on it not moving
    /// already, as `pool evacuate` does; writes nothing.
    fn plan_evacuation(&self, drive: &str) -> Result<Vec<PlannedMove>, String>;
    /// Records the moves of `moves` not recorded yet, in one
    /// configuration (with drive `leaving`, an evacuation's, marked as
    /// being emptied), and opens each's subdisk over its old place and its
    /// new one, for its array to serve.
    fn begin_moves(
        &self,
        moves: &[SubdiskMove],
        leaving: Option<&str>,
    ) -> Result<Vec<Arc<MovingMember>>, String>;
    /// Copies move `m`'s subdisk through `member` (which its array
    /// serves), recording checkpoints, then records the new place and
    /// switches `member` to it. Err when it failed (the move given up, if
    /// the new place failed).
    fn run_move(
        &self,
        m: &SubdiskMove,
        member: &MovingMember,
        resumed: bool,
        rate: u64,
        stop: &AtomicBool,
    ) -> Result<MoveEnd, String>;
    /// Move `m`'s old place failed a read: records the subdisk at its new
    /// place, its label area zeroed, the move dropped, for its array to
    /// rebuild it there; returns the new place.
    fn rebuild_move(&self, m: &SubdiskMove, member: &MovingMember) -> Result<OnDrive, String>;
    /// The drive a subdisk of move `m` is on now.
    fn drive_of_subdisk(&self, m: &SubdiskMove) -> Option<String>;
    /// The latency `serve --inject` gives drive `drive`, if any.
    fn drive_delay(&self, drive: &str) -> Option<platter_io::aio::Delay>;
    /// The moves recorded that this start opened over both places, each
    /// once: the server takes them up.
    /// Checks the split `req` asks (`volume`, `plex` as `v.p1` or its
    /// number, `as`, `writable`) as `plex detach` does; writes nothing.
    fn plan_detach(&self, req: &Value) -> Result<DetachedPlex, String>;
    /// Records split `d`, the server having paused and emptied the volume
    /// and flushed its plexes.
    fn detach_plex(&self, d: &DetachedPlex) -> Result<(), String>;
    /// Volume `name`, a detached plex served as a volume of its own: the
    /// plex's array and the mirror over it alone (read-only unless the
    /// split said writable).
    fn start_detached(&self, name: &str) -> Result<NewVolume, String>;
    /// The split `req` (`volume`, `plex`) names, checked as `plex attach`
    /// checks it; writes nothing.
    fn plan_attach(&self, req: &Value) -> Result<DetachedPlex, String>;
    /// Records plex `d` attached again, the server having stopped a
    /// volume served as it; returns the plex's array to serve, which the
    /// volume's mirror takes back.
    fn attach_plex(&self, d: &DetachedPlex) -> Result<NewVolume, String>;
    /// Places the new plex convert `req` asks (`volume`, `plex`, `level`,
    /// `interleave_bytes`, `layout`, `subdisks`, `drives`), with at least
    /// `plex_bytes` of array data on drives no plex of the volume uses,
    /// and records it with the convert; writes no label.
    fn begin_convert(&self, req: &Value, plex_bytes: u64) -> Result<PlexConvert, String>;
    /// Labels convert `c`'s new plex as a new array named as the plex it
    /// replaces, its data zeroed (the server has stopped the old one);
    /// returns the array, which the mirror takes into that slot.
    fn make_convert_plex(&self, c: &PlexConvert) -> Result<NewVolume, String>;
    /// Ends convert `c`, its new plex in step: one configuration puts it
    /// in the old plex's place; the old plex's labels are zeroed.
    fn finish_convert(&self, c: &PlexConvert) -> Result<(), String>;
    /// Convert `c`'s old plex assembled again, nothing written to its
    /// data: a convert given up serves it in its slot once more.
    fn reopen_convert_old(&self, c: &PlexConvert) -> Result<NewVolume, String>;
    /// Gives convert `c` up, its new plex out of the mirror: one
    /// configuration drops the new plex; its subdisks' labels are zeroed.
    fn abort_convert(&self, c: &PlexConvert) -> Result<(), String>;
    /// The converts the pool records, each with whether its new plex
    /// holds its slot of the mirror.
    fn converts(&self) -> Vec<(PlexConvert, bool)>;
    /// The drives convert `c`'s new plex lies on.
    fn convert_drives(&self, c: &PlexConvert) -> Vec<String>;
    /// Places the new plex that a convert of volume of one plex `req`
    /// asks (as [`PoolHost::begin_convert`]), with at least
    /// `volume_bytes` of array data, and records the copy into it; writes
    /// no label. Returns the drives it lies on.
    fn begin_copy(&self, req: &Value, volume_bytes: u64) -> Result<Vec<String>, String>;
    /// Labels the new plex of volume `volume`'s copy as a new array named
    /// as the volume, its data zeroed, its labels saying the volume's
    /// size `volume_bytes` (its array may hold more); returns it to serve.
    fn make_copy_plex(&self, volume: &str, volume_bytes: u64) -> Result<NewVolume, String>;
    /// Copies volume `volume` through `member` (its plex to its new plex)
    /// at `rate` until done (Ok(true), the new plex flushed) or `stop`
    /// (Ok(false): nothing is recorded, a copy begins again at the next
    /// start). Err: a place failed.
    fn run_copy(
        &self,
        volume: &str,
        member: &MovingMember,
        rate: u64,
        stop: &AtomicBool,
    ) -> Result<bool, String>;
    /// One configuration makes volume `volume`'s new plex its only one
    /// (the copy is done, no write in flight).
    fn finish_copy(&self, volume: &str) -> Result<(), String>;
    /// Zeroes the labels of the plex volume `volume`'s finished copy left
    /// (the server has stopped its array).
    fn erase_copied(&self, volume: &str);
    /// Gives volume `volume`'s copy up, its new plex's array stopped: one
    /// configuration drops it; its subdisks' labels are zeroed.
    fn abort_copy(&self, volume: &str) -> Result<(), String>;
    /// The volumes whose copy into a new plex the pool records, each with
    /// how far the copy had come when last recorded.
    fn copies(&self) -> Vec<(String, u64)>;
    /// The plexes the pool records detached.
    fn detached_plexes(&self) -> Vec<DetachedPlex>;
    fn resumable_moves(&self) -> Vec<(PlannedMove, Arc<MovingMember>)>;
}

/// What [`PoolHost::relocate`] placed.
pub struct Relocated {
    pub placed: Vec<RelocatedSubdisk>,
    pub unplaced: Vec<String>,
}

/// A failed subdisk on its new extent, blank.
pub struct RelocatedSubdisk {
    pub volume: String,
    pub slot: u32,
    pub member: Arc<dyn Member>,
    /// The drive it is on now, and the one it left.
    pub drive: String,
    pub from: String,
}

/// How a move's copy ended.
pub enum MoveEnd {
    /// At the new place, with its drive.
    Moved(OnDrive),
    /// Stopped where it was, how far recorded.
    Stopped,
    /// The old place failed a read: why.
    SourceFailed(String),
}

/// A subdisk with the name of its drive.
pub type OnDrive = (Arc<dyn Member>, String);

/// New subdisks, each with the name of its drive.
pub type OnDrives = Vec<(Arc<dyn Member>, String)>;

/// Subdisks laid out again on a new drive: (volume, slot, subdisk).
pub type NewSubdisks = Vec<(String, u32, Arc<dyn Member>)>;

/// What an extend made: the volume's label as grown, and the subdisks it
/// added (a concat's new last member), each with its drive's name.
pub struct Extended {
    pub label: Label,
    pub added: Vec<(Arc<dyn Member>, String)>,
}

/// A volume the host made, for the server to start.
pub struct NewVolume {
    /// Its array (with the blank subdisks it starts with as spares: none
    /// for a new volume), or its plexes and their mirror.
    pub start: crate::server::PoolStart,
    /// Each subdisk's drive, by member name (`observe::drives`).
    pub member_drives: HashMap<String, String>,
    /// Latency injected into its subdisks (`serve --inject`), by member.
    pub member_delays: HashMap<String, platter_io::aio::Delay>,
}

mod convert;
mod copy;
mod extend_plexes;
mod heal;
mod relocate;
mod remake;
pub(crate) mod split;

pub use relocate::PlannedMove;

/// The pool side of a pool's server.
pub struct PoolServer {
    config: ServeConfig,
    control_path: Option<String>,
    volumes: Arc<Volumes>,
    host: Arc<dyn PoolHost>,
    /// Held through a change, so that changes come one at a time; true
    /// once the server stops, after which none starts.
    closed: Mutex<bool>,
    /// Plexes that cannot rebuild inside, by name, with the failed slots
    /// already placed again: each waits for its others before the plex
    /// is made anew.
    awaiting: Mutex<BTreeMap<String, BTreeSet<u32>>>,
    /// The subdisk moves under way, each on a thread of its own.
    movers: Mutex<Vec<relocate::Mover>>,
    /// The copies of volumes of one plex into new plexes, by volume.
    copiers: Mutex<BTreeMap<String, copy::Copier>>,
}

impl PoolServer {
    /// The server's configuration, its control socket and its volumes,
    /// with the pool's host.
    pub(crate) fn new(
        (config, control_path, volumes): (ServeConfig, Option<String>, Arc<Volumes>),
        host: Arc<dyn PoolHost>,
    ) -> PoolServer {
        PoolServer {
            config,
            control_path,
            volumes,
            host,
            closed: Mutex::new(false),
            awaiting: Mutex::new(BTreeMap::new()),
            movers: Mutex::new(Vec::new()),
            copiers: Mutex::new(BTreeMap::new()),
        }
    }

    /// The pool's name.
    pub(crate) fn pool_name(&self) -> String {
        self.host.pool_name()
    }

    /// Waits for a change under way; none starts after. Subdisk moves
    /// stop where they are, each recording how far it came.
    pub(crate) fn close(&self) {
        // A change that panicked leaves the lock poisoned: the stop goes on.
        *self.closed.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.stop_movers(None);
        self.stop_copies();
    }

    pub(crate) fn answer(&self, cmd: &str, req: &Value) -> Result<Value, String> {
        let closed = self.closed.lock().unwrap_or_else(|e| e.into_inner());
        if *closed {
            return Err("the server is stopping".into());
        }
        if self.config.read_only {
            return Err(format!("{cmd}: the server is read-only"));
        }
        // Ended movers let their subdisks' old places (and drives) go: a
        // drive emptied and taken out is then free to be used again.
        self.reap_movers();
        let pool = self.host.pool_name();
        if let Some(asked) = req.get("pool").and_then(Value::as_str) {
            if asked != pool {
                return Err(format!("this server serves pool {pool}, not {asked}"));
            }
        }
        if cmd == "pool-replace-drive" {
            return self.replace_drive(req);
        }
        self.host.set_failing(&self.failing_drives());
        if cmd == "pool-add-drive" {
            let mut added = self.host.add_drives(req)?;
            tracing::info!(drives = %added["drives"], "drives added to the pool");
            // A spare added while subdisks are failed takes them at once.
            added["healed"] = self.heal(false);
            return Ok(added);
        }
        if cmd == "pool-remove-drive" {
            let drive = req
                .get("drive")
                .and_then(Value::as_str)
                .ok_or("missing \"drive\"")?;
            let left = self.host.remove_drive(drive)?;
            tracing::info!(drive, "drive taken out of the pool");
            return Ok(left);
        }
        if cmd == "subdisk-move" {
            return self.move_subdisk(req);
        }
        if cmd == "pool-evacuate" {
            return self.evacuate(req);
        }
        if cmd == "plex-detach" {
            return self.detach_plex(req);
        }
        if cmd == "plex-attach" {
            return self.attach_plex(req);
        }
        if cmd == "volume-convert" {
            return self.convert(req);
        }
        if cmd == "pool-heal" {
            let free_space = req
                .get("free_space")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            return Ok(json!({ "healed": self.heal(free_space) }));
        }
        let name = req
            .get("name")
            .and_then(Value::as_str)
            .ok_or("missing \"name\"")?;
        match cmd {
            "volume-create" => self.create(name, req),
            "volume-extend" => self.extend(name, req),
            _ => self.remove(name, req),
        }
    }

    /// The host makes the volume; the server starts it and lists it.
    fn create(&self, name: &str, req: &Value) -> Result<Value, String> {
        // The host refuses a name the pool has; every volume served is
        // the pool's.
        let new = self.host.create(req)?;
        let config = self.config_for(new.member_drives, new.member_delays);
        let later = |e: String| {
            format!(
                "volume {name} is made and in the pool, but cannot be served now: {e}; the \
                 server's next start serves it"
            )
        };
        let starting = match new.start {
            PoolStart::Array(volume, spares) => start_volume(*volume, spares, &config),
            PoolStart::Plexes {
                plexes,
                assemble,
                read_only,
            } => start_plexes(plexes, assemble, &config.or_read_only(read_only)),
        }
        .map_err(|e| later(e.to_string()))?;
        let size_bytes = starting.export.size_bytes;
        let served = keep_volume(starting, &config, self.control_path.clone())
            .map_err(|e| later(e.to_string()))?;
        self.volumes.add(served).map_err(later)?;
        tracing::info!(volume = %name, size_bytes, "volume created and served");
        Ok(json!({ "volume": name, "size_bytes": size_bytes }))
    }

    /// Refused while clients use the volume, unless `force`, which cuts
    /// them off; then the volume stops (its last writes flushed) and the
    /// host takes it out of the pool.
    fn remove(&self, name: &str, req: &Value) -> Result<Value, String> {
        let force = req.get("force").and_then(Value::as_bool).unwrap_or(false);
        // Refused before the volume stops: its copy's front serves it.
        if self.host.copies().iter().any(|(v, _)| v == name) {
            return Err(format!(
                "volume {name} is being converted; give the convert up first (`platter volume \
                 convert {} {name} --abort`), then remove it",
                self.host.pool_name()
            ));
        }
        let Some(served) = self.volumes.named(name) else {
            // In the pool but not served (it could not start): nothing
            // to stop.
            self.host.remove(name)?;
            return Ok(json!({ "volume": name, "clients_cut": 0 }));
        };
        refuse_with_clients(&served, force)?;
        self.refuse_served_split(name)?;
        // Its subdisks' copies stop before their new places are freed.
        self.stop_movers(Some(name));
        let Some(served) = self.volumes.take(name) else {
            return Err(format!("volume {name} was removed meanwhile"));
        };
        // No client attaches from here on (one whose handshake chose the
        // volume before is turned away); one that did since the look
        // above is counted.
        let clients = served.io.close_to_new_clients();
        if let Err(e) = refuse_with_clients(&served, force) {
            served.io.reopen_to_clients();
            self.volumes.add(served).expect("its name was free");
            return Err(e);
        }
        stop_served(&served);
        self.host.remove(name).map_err(|e| {
            format!(
                "volume {name} is no longer served, but taking it out of the pool failed: {e}; \
                 the pool still holds it (the next start serves it; remove it again then)"
            )
        })?;
        tracing::info!(volume = %name, clients_cut = clients, "volume removed");
        Ok(json!({ "volume": name, "clients_cut": clients }))
    }

    /// A volume whose detached plex is served as a volume of its own
    /// (`plex detach --as`) is not removed under it.
    fn refuse_served_split(&self, name: &str) -> Result<(), String> {
        for other in self.volumes.all().iter().filter(|s| s.name() != name) {
            let ours = other.plexes().into_iter().find(|p| {
                platter_core::pool::split_plex_name(p.name()).map(|(v, _)| v) == Some(name)
            });
            if let Some(plex) = ours {
                return Err(format!(
                    "volume {name}: its plex {} is served as volume {}; attach it first (`platter \
                     plex attach`), or copy what you need from it",
                    plex.name(),
                    other.name()
                ));
            }
        }
        Ok(())
    }

    /// A failed drive's place taken by a new device: refused while a
    /// volume served still uses its subdisk there; then each volume served
    /// takes its new, blank subdisk into the slot and rebuilds it, one
    /// without redundancy is named as lost, and a volume not served
    /// rebuilds when it next is.
    fn replace_drive(&self, req: &Value) -> Result<Value, String> {
        let drive = req
            .get("drive")
            .and_then(Value::as_str)
            .ok_or("missing \"drive\"")?;
        for (volume, slot) in self.host.drive_users(drive)? {
            let Some(served) = self.volumes.named_or_plex(&volume) else {
                continue;
            };
            let health = served.manager.engine.health()[slot as usize];
            if health == Health::Rebuilding {
                return Err(format!(
                    "volume {volume} is rebuilding its subdisk on {drive} (member {slot}) \
                     already: let it finish, or fail it first"
                ));
            }
            if health == Health::Online {
                return Err(format!(
                    "drive {drive} still serves volume {volume} (its subdisk, member {slot}, \
                     is active): a drive is replaced once it has failed (`platter fail \
                     --volume {volume} {slot} --control ...` fails it)"
                ));
            }
        }
        let (mut rebuilding, mut lost, mut failed) = (Vec::new(), Vec::new(), Vec::new());
        let (mut remade, mut waiting) = (Vec::new(), Vec::new());
        for (volume, slot, member) in self.host.replace_drive(req)? {
            let Some(served) = self.volumes.named_or_plex(&volume) else {
                continue;
            };
            let m = &served.manager;
            if !heal::rebuilds_inside(m) {
                // A plex of a volume of plexes: its volume serves from the
                // others while it is made anew.
                let Some((under, p)) = self.volumes.plex_of(&volume) else {
                    lost.push(volume);
                    continue;
                };
                self.await_remake(&volume, slot);
                match self.remake_plex(&under, p) {
                    Ok(true) => remade.push(volume),
                    Ok(false) => waiting.push(volume),
                    Err(e) => failed.push(format!("plex {volume}: cannot be made anew now: {e}")),
                }
                continue;
            }
            m.note_drive(member.describe(), drive);
            match m.replace_slot(slot, Arc::clone(&member)) {
                Ok(()) => rebuilding.push(volume),
                Err(e) => {
                    // A spare then: the main loop puts it in the failed
                    // member's place as soon as it can (one rebuild at a
                    // time).
                    m.spares.lock().expect("spares").push(member);
                    failed.push(format!(
                        "volume {volume}: {e}; its new subdisk waits as a spare"
                    ));
                }
            }
        }
        tracing::info!(
            drive,
            ?rebuilding,
            ?lost,
            ?failed,
            ?remade,
            ?waiting,
            "drive replaced"
        );
        Ok(json!({
            "drive": drive, "rebuilding": rebuilding, "lost": lost, "failed": failed,
            "remade": remade, "waiting": waiting,
        }))
    }

    /// The engine paused and emptied, the host grows the subdisks and
    /// records them, the labels say the new size, and the engine serves
    /// the grown layout. Connections made from then on see the new size.
    fn extend(&self, name: &str, req: &Value) -> Result<Value, String> {
        let size_bytes = req
            .get("size_bytes")
            .and_then(Value::as_u64)
            .ok_or("missing \"size_bytes\"")?;
        if let Some(c) = self.converting(name) {
            return Err(format!(
                "volume {name}: plex {name}.p{} is being converted; extend it once that is done",
                c.from
            ));
        }
        if req.get("add_subdisks").and_then(Value::as_bool) == Some(true) {
            return self.extend_adding(name, size_bytes);
        }
        let served = self
            .volumes
            .named(name)
            .ok_or_else(|| format!("no volume named {name} is served here"))?;
        if !served.plexes().is_empty() {
            return self.extend_plexes(&served, size_bytes);
        }
        let m = &served.manager;
        let _changing = m.slot_changes.lock().expect("slot changes");
        let old_bytes = m.engine.size_bytes();
        refuse_to_extend(&served, size_bytes)?;
        m.engine.pause();
        let grown = m.engine.empty_paused().and_then(|()| {
            // Owed since the look above, by a write refused meanwhile.
            if m.engine.with_volume(|v| v.resync_owed()) {
                return Err(format!(
                    "volume {name} owes a resync: extend it once it has run"
                ));
            }
            let Extended {
                label: grown,
                added,
            } = self.host.extend(name, &m.meta.label(), size_bytes)?;
            let mut devices = Vec::new();
            for (device, drive) in added {
                m.note_drive(device.describe(), &drive);
                devices.push(device);
            }
            self.serve_grown(m, &grown, devices)?;
            Ok(grown)
        });
        m.engine.resume();
        let grown = grown?;
        served.io.clear_size_cap();
        tracing::info!(volume = %name, old_bytes, size_bytes = grown.volume_size_bytes, "volume extended");
        Ok(json!({
            "volume": name,
            "old_size_bytes": old_bytes,
            "size_bytes": grown.volume_size_bytes,
        }))
    }
}

impl PoolServer {
    /// The server's configuration for a volume (or plex) the host has
    /// just made: its subdisks' drives and latencies; a recording asked
    /// for at the start is of the volumes then, not of this one.
    fn config_for(
        &self,
        member_drives: HashMap<String, String>,
        member_delays: HashMap<String, platter_io::aio::Delay>,
    ) -> ServeConfig {
        let mut config = self.config.clone();
        config.member_drives = Arc::new(member_drives);
        config.member_delays.extend(member_delays);
        config.record = None;
        config
    }

    /// Array `m`, paused and empty, serves the grown layout `grown` says
    /// (with `added` members after its others), and every member, an
    /// added one too, takes the grown label.
    fn serve_grown(
        &self,
        m: &Manager,
        grown: &Label,
        added: Vec<Arc<dyn Member>>,
    ) -> Result<(), String> {
        let geometry = Geometry::new(spec_of(grown)).map_err(|e| e.to_string())?;
        m.engine
            .set_volume_setup(crate::startup::volume_setup(grown, &self.config));
        m.engine.serve_grown(geometry, added);
        m.meta.record(|l| take_shape(l, grown));
        Ok(())
    }

    /// `volume extend --add-subdisks`: as many new subdisks as make the
    /// volume `size_bytes`, laid out and recorded by the host, then a
    /// reshape onto them (the labels say the new layout; the upkeep moves
    /// the data). A reshape that cannot begin takes them out again; a
    /// server killed between the two finds them blank and unlabelled at
    /// its next start, and the host takes them out then.
    fn extend_adding(&self, name: &str, size_bytes: u64) -> Result<Value, String> {
        let served = self
            .volumes
            .named(name)
            .ok_or_else(|| format!("no volume named {name} is served here"))?;
        let m = &served.manager;
        refuse_to_extend(&served, size_bytes)?;
        let (count, plan) = m.plan_growth(size_bytes)?;
        let added = self.host.add_subdisks(name, count)?;
        let mut members = Vec::new();
        for (device, drive) in added {
            m.note_drive(device.describe(), &drive);
            members.push(device);
        }
        match m.grow_onto(plan, members) {
            Ok(summary) => {
                served.io.clear_size_cap();
                tracing::info!(volume = %name, count, "volume growing onto new subdisks");
                Ok(json!({ "volume": name, "subdisks_added": count, "reshape": summary }))
            }
            Err(e) => {
                if let Err(undo) = self.host.drop_subdisks(name, count) {
                    tracing::warn!(volume = %name, error = %undo, "the new subdisks stay recorded; the next start takes them out");
                }
                Err(e)
            }
        }
    }
}

/// A volume stopped for good: no new request, clients cut off, upkeep
/// ended, its last writes flushed and its labels marked.
fn stop_served(served: &Served) {
    served.manager.engine.close_to_clients();
    served.io.disconnect_clients();
    stop_array(served);
}

/// `served`'s array stopped (its upkeep, its last flush, its labels
/// marked clean), its plexes' after it; its export is left alone (a
/// convert by copy hands it to another engine).
fn stop_array(served: &Served) {
    // The labels' hook holds the engine: the volume's memory and threads
    // go once its last connection does.
    served.manager.engine.clear_event_hook();
    served.manager.stop_reconnecting();
    served.manager.engine.close_to_clients();
    stop_upkeep(served);
    if let Err(e) = finish_volume(served) {
        // Its data is given up: only the erase that follows matters.
        tracing::warn!(volume = %served.name(), error = %e, "the removed volume's last flush failed");
    }
    served.alerts.close();
    for plex in served.plexes() {
        stop_served(&plex);
    }
}

fn refuse_with_clients(served: &Served, force: bool) -> Result<(), String> {
    let clients = served.io.client_count();
    if clients > 0 && !force {
        return Err(format!(
            "volume {} has {clients} client(s) connected: disconnect them first, or give \
             --force to cut them off and remove it",
            served.name()
        ));
    }
    Ok(())
}

/// An extend grows a whole, quiet volume of a layout that grows at its
/// end, to a size larger than today's.
fn refuse_to_extend(served: &Served, size_bytes: u64) -> Result<(), String> {
    refuse_unsteady(served)?;
    let (name, m) = (served.name(), &served.manager);
    let now = m.engine.size_bytes();
    if size_bytes <= now {
        return Err(format!(
            "volume {name} is {now} bytes already; extend makes a volume larger (it does not \
             shrink)"
        ));
    }
    Ok(())
}

/// An array that cannot grow now: not whole, reshaping, owing a resync,
/// or keeping areas sized for its data.
fn refuse_unsteady(served: &Served) -> Result<(), String> {
    let (name, m) = (served.name(), &served.manager);
    let label = m.meta.label();
    if m.engine.health().iter().any(|h| *h != Health::Online) {
        return Err(format!("volume {name} is not whole: let it rebuild first"));
    }
    if m.engine.reshape_progress().is_some() {
        return Err(format!(
            "volume {name} is being reshaped: let the reshape finish first"
        ));
    }
    if m.upkeep.resync_progress().is_some() || m.engine.with_volume(|v| v.resync_owed()) {
        // The grown volume starts with nothing owed: stripes a crash or a
        // write refused for space left unsynced would be forgotten.
        return Err(format!(
            "volume {name} owes a resync (a crash, or a write refused for space): extend it \
             once it has run"
        ));
    }
    if label.checksums.is_some() || label.ppl.is_some() {
        return Err(format!(
            "volume {name} keeps checksums or a partial parity log, whose areas are sized for \
             its data: it cannot grow in place"
        ));
    }
    Ok(())
}

/// The sizes and members of `grown` in the served label, which keeps its
/// own state and event count.
fn take_shape(l: &mut Label, grown: &Label) {
    assert!(
        grown.slots.len() >= l.slots.len(),
        "an extend adds, never takes"
    );
    for (slot, g) in l.slots.iter_mut().zip(&grown.slots) {
        assert!(
            g.data_size_bytes >= slot.data_size_bytes,
            "data never shrinks"
        );
        slot.data_size_bytes = g.data_size_bytes;
    }
    let added = grown.slots[l.slots.len()..].to_vec();
    l.slots.extend(added);
    l.member_count = grown.member_count;
    l.data_size_bytes = grown.data_size_bytes;
    l.volume_size_bytes = grown.volume_size_bytes;
    l.intent_region_stripes = grown.intent_region_stripes;
}

/// The bytes of the write-intent bitmap a volume whose labels say `l`
/// keeps after its label (0 without one): what an extend zeroes, since
/// its regions may mean other stripes once the volume grows.
pub fn bitmap_bytes(l: &Label) -> Result<u64, String> {
    let geometry = Geometry::new(spec_of(l)).map_err(|e| e.to_string())?;
    Ok(
        platter_core::intent::IntentLayout::new(&geometry, l.intent_region_stripes)?
            .map_or(0, |layout| layout.area_bytes()),
    )
}

/// The layout a label (not being reshaped) describes.
pub fn spec_of(l: &Label) -> GeometrySpec {
    GeometrySpec {
        level: l.level,
        parity_layout: l.parity_layout,
        copies: l.copies,
        interleave_bytes: l.interleave_bytes,
        data_offset_bytes: l.data_offset_bytes,
        member_data_bytes: l.slots.iter().map(|s| s.data_size_bytes).collect(),
    }
}
