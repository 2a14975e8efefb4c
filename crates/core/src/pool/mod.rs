//! Pools: drives carved into subdisks, subdisks organised into plexes,
//! plexes holding volumes, in FreeBSD vinum's words (LVM's: physical
//! volumes, extents, logical volumes).
//!
//! A *drive* is a device that belongs to one pool. A *subdisk* is a
//! contiguous extent of one drive. A *plex* organises subdisks as one of
//! the levels (concat, stripe, mirror, raid10, raid5, raid6), md-exact: each
//! subdisk is a member of an ordinary platter array and carries that
//! array's label at its start. A *volume* is served as one NBD export.
//!
//! The pool's configuration (every object, its size and place) is kept on
//! every drive, twice, in the pool area at the drive's start
//! ([`area`], docs/on-disk-format.md "The pool area"), as text
//! ([`text`]) a person can read and `pool create --config` takes back.
//! [`alloc`] finds room for new subdisks. This module holds the model and
//! the rules every configuration keeps ([`Pool::check`]).

pub mod alloc;
pub mod area;
pub mod text;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use crate::format::MAX_MEMBERS;
use crate::level::{Level, ParityLayout};
use crate::units::SECTOR_BYTES;

/// Bytes at the start of every drive that hold the pool's configuration
/// (two slots); subdisks start after it.
pub const POOL_AREA_BYTES: u64 = 1 << 20;

/// The most plexes a volume mirrors (vinum's limit).
pub const MAX_PLEXES: usize = 8;

/// The longest name of a pool, drive or volume.
pub const NAME_MAX_BYTES: usize = 64;

/// A pool: its drives and the volumes carved from them, at one
/// generation of its configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pool {
    pub name: String,
    pub uuid: [u8; 16],
    /// Raised by one at every change; the newest valid one on the drives
    /// present is the pool's configuration.
    pub generation: u64,
    pub drives: Vec<Drive>,
    pub volumes: Vec<PoolVolume>,
    /// Subdisks being copied to another place (`platter subdisk move`):
    /// each still serves from where its `sd` line puts it until the
    /// change that finishes the move puts it at its new place.
    pub moves: Vec<SubdiskMove>,
    /// Plexes split off their volumes (`platter plex detach`): each holds
    /// the volume as it was at the split until `plex attach` joins it back.
    pub detached: Vec<DetachedPlex>,
    /// Plexes being made anew in another organisation (`platter volume
    /// convert`): the new plex holds its place until it is revived.
    pub converts: Vec<PlexConvert>,
    /// Volumes of one plex being converted by copy: each new plex holds
    /// its extents, and is no plex of its volume, until the copy ends.
    pub copies: Vec<VolumeCopy>,
}

/// A volume of one plex being made another organisation (`volume
/// convert` of a volume with no mirror above its plex): the new plex, on
/// drives the volume does not use, is an array of its own that a copy
/// fills while the volume serves from its plex (every write landing on
/// both behind the copy); the configuration that ends the change makes
/// the new plex the volume's only one. Written as the volume's plex
/// `V.p1` and `convert plex V.p0 into V.p1` (docs/on-disk-format.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeCopy {
    pub volume: String,
    pub plex: Plex,
    /// How far the copy had come when this generation was written: it
    /// goes on from here, after comparing what lies below (writes a crash
    /// cut short may have reached one plex and not the other).
    pub copied_bytes: u64,
}

/// A plex of a volume of several plexes being replaced by one of another
/// organisation (vinum's way of changing a volume's organisation: attach
/// a plex of the new one, revive it, remove the old). The new plex is the
/// volume's last in the configuration, on drives no other plex uses, but
/// is no slot of the volume's mirror until it takes plex `from`'s: then,
/// revived, the configuration that ends the change puts it at `from` and
/// drops the old plex, in one generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlexConvert {
    pub volume: String,
    /// The plex replaced: a slot of the volume's mirror.
    pub from: usize,
    /// The plex replacing it, the volume's last.
    pub into: usize,
}

impl VolumeCopy {
    /// Volume `v` (this copy's) as if the new plex were its second: how
    /// the configuration writes it, and how the new plex's subdisks are
    /// named (`v.p1.s0`) and opened.
    pub fn with_new_plex(&self, v: &PoolVolume) -> PoolVolume {
        assert_eq!(v.name, self.volume);
        let mut both = v.clone();
        both.plexes.truncate(1);
        both.plexes.push(self.plex.clone());
        both
    }
}

/// A plex split off its volume of several plexes (vinum's `detach`, LVM's
/// `lvconvert --splitmirrors`): the volume serves without it and its
/// write-intent bitmap keeps what changes meanwhile; the plex holds the
/// volume's bytes as they were at the split.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetachedPlex {
    pub volume: String,
    pub plex: usize,
    /// Served as a volume of its own under this name (`--as`).
    pub as_volume: Option<String>,
    /// Whether that volume takes writes: joined back, the plex is then
    /// revived whole (what changed on it is known to nothing).
    pub writable: bool,
}

impl DetachedPlex {
    /// The name of the plex (`v.p1`).
    pub fn plex_name(&self) -> String {
        format!("{}.p{}", self.volume, self.plex)
    }
}

/// A subdisk on its way to another extent (LVM's `pvmove`): writes go to
/// both places while the copy runs; the configuration that ends it names
/// the new place and drops this, in one generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubdiskMove {
    pub volume: String,
    pub plex: usize,
    pub slot: usize,
    /// Where the subdisk goes: as long as it is.
    pub drive: String,
    pub offset_bytes: u64,
    /// How far the copy had come when this generation was written: it
    /// goes on from here (after checking what lies below, see
    /// docs/pools.md "Moving a subdisk").
    pub copied_bytes: u64,
}

impl SubdiskMove {
    /// The name of the subdisk that moves (`v.p0.s1`).
    pub fn subdisk_name(&self) -> String {
        format!("{}.p{}.s{}", self.volume, self.plex, self.slot)
    }

    /// The extent it goes to, given the subdisk's length.
    pub fn target(&self, len_bytes: u64) -> Subdisk {
        Subdisk {
            drive: self.drive.clone(),
            offset_bytes: self.offset_bytes,
            len_bytes,
        }
    }
}

/// A device of the pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drive {
    pub name: String,
    /// Written in the drive's own pool area: what tells which drive a
    /// device is, whatever its path today.
    pub uuid: [u8; 16],
    pub size_bytes: u64,
    /// Where the drive was when the configuration was last written: a hint
    /// for people and for `pool create --config`, never trusted to find it.
    pub device: String,
    pub state: DriveState,
}

/// What the pool does with a drive's free space.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DriveState {
    /// In use: new volumes and extends are placed on it.
    #[default]
    Up,
    /// Kept empty for the subdisks of a drive that fails (`pool add-drive
    /// --spare`, md's hot spare): nothing else is placed on it, and it is
    /// up once it takes one.
    Spare,
    /// A subdisk of it failed and was placed elsewhere (`pool heal`):
    /// nothing new is placed on it; `pool replace-drive` puts a new
    /// device in its place, up.
    Failed,
    /// Being emptied (`pool evacuate`): its subdisks move off it and
    /// nothing new is placed on it; `pool remove-drive` takes it out.
    Leaving,
}

impl DriveState {
    /// The word of the text form (`drive ... state spare`).
    pub fn name(self) -> &'static str {
        match self {
            DriveState::Up => "up",
            DriveState::Spare => "spare",
            DriveState::Failed => "failed",
            DriveState::Leaving => "leaving",
        }
    }

    pub fn parse(word: &str) -> Result<DriveState, String> {
        match word {
            "up" => Ok(DriveState::Up),
            "spare" => Ok(DriveState::Spare),
            "failed" => Ok(DriveState::Failed),
            "leaving" => Ok(DriveState::Leaving),
            _ => Err(format!(
                "drive state '{word}' is not one of up, spare, failed, leaving"
            )),
        }
    }

    /// Whether new volumes and extends may be placed on the drive.
    pub fn takes_new_subdisks(self) -> bool {
        self == DriveState::Up
    }
}

/// A volume: one plex, or a mirror of several that need not be alike
/// (vinum's volume of plexes): then each plex is an md-exact array over
/// its subdisks, and the volume an md-exact RAID-1 whose members are the
/// plexes' arrays, its label at the start of each plex's data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolVolume {
    pub name: String,
    /// The size `volume extend` made it: its subdisks' labels that still
    /// say less were cut off by a crash before they were all rewritten,
    /// and are brought up to it (`volume extend`, `serve --pool`). `None`
    /// for a volume never extended: its labels say its size.
    pub size_bytes: Option<u64>,
    pub plexes: Vec<Plex>,
}

/// An organisation of subdisks: the array that holds a volume's data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plex {
    pub org: Level,
    pub interleave_bytes: u64,
    pub parity_layout: ParityLayout,
    /// raid10's copies of each chunk; the subdisk count for a mirror; 1
    /// otherwise.
    pub copies: u32,
    /// In the array's slot order.
    pub subdisks: Vec<Subdisk>,
}

/// A contiguous extent of one drive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subdisk {
    pub drive: String,
    pub offset_bytes: u64,
    pub len_bytes: u64,
}

impl Subdisk {
    pub fn end_bytes(&self) -> u64 {
        self.offset_bytes.saturating_add(self.len_bytes)
    }
}

impl PoolVolume {
    /// The name of plex `p`, as vinum names it.
    pub fn plex_name(&self, p: usize) -> String {
        format!("{}.p{p}", self.name)
    }

    /// The name of plex `p`'s array as a server runs it: the volume's own
    /// for a volume of one plex, the plex's (`v.p1`) in a volume of
    /// several ([`Pool::array`] reads it back).
    pub fn array_name(&self, p: usize) -> String {
        if self.has_plexes() {
            self.plex_name(p)
        } else {
            self.name.clone()
        }
    }

    /// The name of subdisk `s` of plex `p`.
    pub fn subdisk_name(&self, p: usize, s: usize) -> String {
        format!("{}.p{p}.s{s}", self.name)
    }

    /// The plex of a volume of one plex.
    pub fn plex(&self) -> &Plex {
        assert_eq!(self.plexes.len(), 1, "a volume of one plex");
        &self.plexes[0]
    }

    /// Whether the volume mirrors several plexes.
    pub fn has_plexes(&self) -> bool {
        self.plexes.len() > 1
    }

    /// What a command that handles volumes of one plex only says of this
    /// one.
    pub fn one_plex_only(&self, what: &str) -> Result<&Plex, String> {
        if self.has_plexes() {
            return Err(format!(
                "volume {} mirrors {} plexes: {what} handles volumes of one plex (not yet \
                 volumes of several)",
                self.name,
                self.plexes.len()
            ));
        }
        Ok(&self.plexes[0])
    }
}

impl Pool {
    pub fn drive(&self, name: &str) -> Option<&Drive> {
        self.drives.iter().find(|d| d.name == name)
    }

    pub fn drive_by_uuid(&self, uuid: &[u8; 16]) -> Option<&Drive> {
        self.drives.iter().find(|d| &d.uuid == uuid)
    }

    pub fn volume(&self, name: &str) -> Option<&PoolVolume> {
        self.volumes.iter().find(|v| v.name == name)
    }

    /// The volume and plex an array of the pool is named by: a volume of
    /// one plex by its own name, a plex of a volume of several as vinum
    /// names it (`v.p1`). Each array a server runs is one of these.
    pub fn array(&self, name: &str) -> Option<(&PoolVolume, usize)> {
        if let Some(v) = self.volume(name).filter(|v| !v.has_plexes()) {
            return Some((v, 0));
        }
        let (volume, p) = split_plex_name(name)?;
        let v = self.volume(volume).filter(|v| v.has_plexes())?;
        (p < v.plexes.len() && v.plex_name(p) == name).then_some((v, p))
    }

    /// The subdisk `m` moves, if the pool has it.
    pub fn moving(&self, m: &SubdiskMove) -> Option<&Subdisk> {
        self.volume(&m.volume)?
            .plexes
            .get(m.plex)?
            .subdisks
            .get(m.slot)
    }

    /// The move of subdisk `slot` of plex `plex` of volume `volume`, if it
    /// moves.
    pub fn move_of(&self, volume: &str, plex: usize, slot: usize) -> Option<&SubdiskMove> {
        self.moves
            .iter()
            .find(|m| m.volume == volume && m.plex == plex && m.slot == slot)
    }

    /// The split of plex `plex` of volume `volume`, if it is detached.
    pub fn detached_plex(&self, volume: &str, plex: usize) -> Option<&DetachedPlex> {
        self.detached
            .iter()
            .find(|d| d.volume == volume && d.plex == plex)
    }

    /// The plexes of `v` its mirror serves (those not detached, nor a
    /// plex a convert makes, which takes its old plex's slot).
    pub fn attached_plexes(&self, v: &PoolVolume) -> Vec<usize> {
        (0..v.plexes.len())
            .filter(|&p| self.detached_plex(&v.name, p).is_none())
            .filter(|&p| self.convert_of(&v.name).is_none_or(|c| c.into != p))
            .collect()
    }

    /// The convert under way of volume `volume`, if one is.
    pub fn convert_of(&self, volume: &str) -> Option<&PlexConvert> {
        self.converts.iter().find(|c| c.volume == volume)
    }

    /// The copy under way into a new plex of volume `volume` (a volume of
    /// one plex), if one is.
    pub fn copy_of(&self, volume: &str) -> Option<&VolumeCopy> {
        self.copies.iter().find(|c| c.volume == volume)
    }

    /// Refused while volume `name` is converted, by copy or by plex: its
    /// plexes are changing.
    pub fn not_converting(&self, name: &str, what: &str) -> Result<(), String> {
        if self.copy_of(name).is_some() || self.convert_of(name).is_some() {
            return Err(format!(
                "volume {name} is being converted; {what} once the convert is done or given up \
                 (`platter volume convert {} {name} --abort`)",
                self.name
            ));
        }
        Ok(())
    }

    /// The slots of `v`'s mirror: its plexes but a convert's new one.
    pub fn mirror_slots(&self, v: &PoolVolume) -> usize {
        v.plexes.len() - usize::from(self.convert_of(&v.name).is_some())
    }

    /// The detached plex served as volume `name`.
    pub fn served_as(&self, name: &str) -> Option<&DetachedPlex> {
        self.detached
            .iter()
            .find(|d| d.as_volume.as_deref() == Some(name))
    }

    /// Refused while a plex of volume `name` is detached: its mirror's
    /// slot is held for it.
    pub fn none_detached(&self, name: &str, what: &str) -> Result<(), String> {
        match self.detached.iter().find(|d| d.volume == name) {
            Some(d) => Err(format!(
                "volume {name}: plex {} is detached; {what} once it is attached again (`platter \
                 plex attach`)",
                d.plex_name()
            )),
            None => Ok(()),
        }
    }

    /// Refused while a subdisk of volume `name` moves: a change of its
    /// subdisks' lengths or count would leave the move's new place short.
    pub fn not_moving(&self, name: &str, what: &str) -> Result<(), String> {
        match self.moves.iter().find(|m| m.volume == name) {
            Some(m) => Err(format!(
                "volume {name}: subdisk {} is moving to drive {}; {what} once the move is done \
                 (`platter subdisk move` without --to finishes it)",
                m.subdisk_name(),
                m.drive
            )),
            None => Ok(()),
        }
    }

    /// Every extent a move copies to, with the move.
    pub fn move_targets(&self) -> impl Iterator<Item = (&SubdiskMove, Subdisk)> {
        self.moves.iter().filter_map(|m| {
            let sd = self.moving(m)?;
            Some((m, m.target(sd.len_bytes)))
        })
    }

    /// Every subdisk of the pool with the volume it belongs to, a copy's
    /// new plex's with the volume it is made for.
    pub fn subdisks(&self) -> impl Iterator<Item = (&PoolVolume, &Subdisk)> {
        let copies = self.copies.iter().filter_map(|c| {
            let v = self.volume(&c.volume)?;
            Some(c.plex.subdisks.iter().map(move |s| (v, s)))
        });
        self.volumes
            .iter()
            .flat_map(|v| {
                v.plexes
                    .iter()
                    .flat_map(move |p| p.subdisks.iter().map(move |s| (v, s)))
            })
            .chain(copies.flatten())
    }

    /// Checks every rule a configuration keeps; the error is one line
    /// naming the object at fault.
    pub fn check(&self) -> Result<(), String> {
        check_name("pool", &self.name)?;
        if self.generation == 0 {
            return Err("the generation is 0; the first is 1".into());
        }
        self.check_drives()?;
        self.check_spares()?;
        let mut volumes = BTreeSet::new();
        for v in &self.volumes {
            check_name("volume", &v.name)?;
            if !volumes.insert(v.name.as_str()) {
                return Err(format!("volume {:?} is named twice", v.name));
            }
            // An array's name picks one plex (`Pool::array`).
            if let Some(p) = (0..v.plexes.len())
                .find(|&p| v.has_plexes() && self.volume(&v.plex_name(p)).is_some())
            {
                return Err(format!(
                    "volume {:?} is named as plex {p} of volume {:?}",
                    v.plex_name(p),
                    v.name
                ));
            }
            self.check_volume(v)?;
        }
        self.check_moves()?;
        self.check_detached()?;
        self.check_converts()?;
        self.check_volume_copies()?;
        self.check_overlaps()
    }

    /// A move names a subdisk of the pool once, and goes to an extent of
    /// a drive up where the subdisk's plex and volume keep their rules.
    fn check_moves(&self) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        for m in &self.moves {
            let name = m.subdisk_name();
            let Some(sd) = self.moving(m) else {
                return Err(format!(
                    "a move names subdisk {name}, which the pool does not have"
                ));
            };
            if !seen.insert(name.clone()) {
                return Err(format!("subdisk {name} moves twice"));
            }
            let to = m.target(sd.len_bytes);
            self.check_subdisk(&format!("{name}'s new place"), &to)?;
            if self.drive(&m.drive).map(|d| d.state) != Some(DriveState::Up) {
                return Err(format!(
                    "subdisk {name} moves to drive {:?}, which is not up",
                    m.drive
                ));
            }
            if m.copied_bytes > sd.len_bytes || !m.copied_bytes.is_multiple_of(SECTOR_BYTES) {
                return Err(format!(
                    "subdisk {name}: {} bytes copied of {} is not whole sectors inside it",
                    m.copied_bytes, sd.len_bytes
                ));
            }
            let v = self.volume(&m.volume).expect("moving() found it");
            let beside = self.moves.iter().find(|o| {
                o.volume == m.volume && o.drive == m.drive && (o.plex, o.slot) != (m.plex, m.slot)
            });
            if let Some(o) = beside {
                return Err(format!(
                    "subdisks {name} and {} of volume {:?} both move to drive {:?}",
                    o.subdisk_name(),
                    v.name,
                    m.drive
                ));
            }
            if let Some(why) = move_shares_a_drive(v, m) {
                return Err(format!(
                    "subdisk {name} cannot move to drive {:?}: {why}",
                    m.drive
                ));
            }
        }
        Ok(())
    }

    /// A detached plex is one of a volume of several plexes, split once;
    /// every volume keeps a plex attached; the name it is served as is
    /// no other volume's or array's, and a writable one is served.
    fn check_detached(&self) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        for d in &self.detached {
            let name = d.plex_name();
            let Some(v) = self.volume(&d.volume).filter(|v| d.plex < v.plexes.len()) else {
                return Err(format!(
                    "plex {name} is detached, but the pool does not have it"
                ));
            };
            if !v.has_plexes() {
                return Err(format!(
                    "plex {name} is detached, but volume {:?} has one plex",
                    v.name
                ));
            }
            if !seen.insert(name.clone()) {
                return Err(format!("plex {name} is detached twice"));
            }
            if self.attached_plexes(v).is_empty() {
                return Err(format!("volume {:?} has every plex detached", v.name));
            }
            if self
                .moves
                .iter()
                .any(|m| m.volume == d.volume && m.plex == d.plex)
            {
                return Err(format!(
                    "plex {name} is detached while a subdisk of it moves"
                ));
            }
            match &d.as_volume {
                Some(as_name) => self.check_served_as(&name, as_name)?,
                None if d.writable => {
                    return Err(format!(
                        "plex {name} is detached writable but not served as a volume"
                    ))
                }
                None => {}
            }
        }
        Ok(())
    }

    /// A convert names a volume of several plexes once, replaces one of
    /// its plexes by its last, neither detached, with no subdisk moving.
    fn check_converts(&self) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        for c in &self.converts {
            let Some(v) = self.volume(&c.volume) else {
                return Err(format!(
                    "a convert names volume {:?}, which the pool does not have",
                    c.volume
                ));
            };
            if !seen.insert(c.volume.as_str()) {
                return Err(format!("volume {:?} is converted twice at once", c.volume));
            }
            if v.plexes.len() < 3 || c.into + 1 != v.plexes.len() || c.from >= c.into {
                return Err(format!(
                    "volume {:?}: a convert replaces one of its plexes by its last one (plex {} \
                     into {} of {})",
                    c.volume,
                    c.from,
                    c.into,
                    v.plexes.len()
                ));
            }
            if self
                .detached
                .iter()
                .any(|d| d.volume == c.volume && (d.plex == c.from || d.plex == c.into))
            {
                return Err(format!(
                    "volume {:?}: a plex it converts is detached",
                    c.volume
                ));
            }
            if self.moves.iter().any(|m| m.volume == c.volume) {
                return Err(format!(
                    "volume {:?} is converted while a subdisk of it moves",
                    c.volume
                ));
            }
        }
        Ok(())
    }

    /// A copy names a volume of one plex once, with no other change of
    /// its plexes under way, and its new plex keeps a plex's rules on
    /// drives the volume's plex does not use.
    fn check_volume_copies(&self) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        for c in &self.copies {
            let Some(v) = self.volume(&c.volume) else {
                return Err(format!(
                    "a convert names volume {:?}, which the pool does not have",
                    c.volume
                ));
            };
            if !seen.insert(c.volume.as_str()) {
                return Err(format!("volume {:?} is converted twice at once", c.volume));
            }
            if v.plexes.len() != 1 || self.convert_of(&v.name).is_some() {
                return Err(format!(
                    "volume {:?}: a convert by copy is of a volume of one plex",
                    c.volume
                ));
            }
            if self.moves.iter().any(|m| m.volume == c.volume) {
                return Err(format!(
                    "volume {:?} is converted while a subdisk of it moves",
                    c.volume
                ));
            }
            if !c.copied_bytes.is_multiple_of(SECTOR_BYTES) {
                return Err(format!(
                    "volume {:?}: {} bytes copied is not whole sectors",
                    c.volume, c.copied_bytes
                ));
            }
            let both = c.with_new_plex(v);
            self.check_plex(&both, 1)?;
            check_plexes_apart(&both)?;
        }
        Ok(())
    }

    fn check_served_as(&self, plex: &str, as_name: &str) -> Result<(), String> {
        check_name("volume", as_name)?;
        if self.volume(as_name).is_some() || self.array(as_name).is_some() {
            return Err(format!(
                "plex {plex} is served as {as_name:?}, which names a volume or plex of the pool"
            ));
        }
        let twice = self
            .detached
            .iter()
            .filter(|o| o.as_volume.as_deref() == Some(as_name))
            .count();
        if twice > 1 {
            return Err(format!("two detached plexes are served as {as_name:?}"));
        }
        Ok(())
    }

    fn check_drives(&self) -> Result<(), String> {
        if self.drives.is_empty() {
            return Err(format!("pool {:?} has no drive", self.name));
        }
        let mut names = BTreeSet::new();
        let mut uuids = BTreeSet::new();
        for d in &self.drives {
            check_name("drive", &d.name)?;
            if !names.insert(d.name.as_str()) {
                return Err(format!("drive {:?} is named twice", d.name));
            }
            if !uuids.insert(d.uuid) {
                return Err(format!("drive {:?} has the uuid of another drive", d.name));
            }
            if d.size_bytes <= POOL_AREA_BYTES {
                return Err(format!(
                    "drive {:?} of {} bytes has no room after its {POOL_AREA_BYTES}-byte pool area",
                    d.name, d.size_bytes
                ));
            }
            check_device(&d.device).map_err(|e| format!("drive {:?}: {e}", d.name))?;
        }
        Ok(())
    }

    /// A spare holds no subdisk: the change that places one on it makes
    /// it up.
    fn check_spares(&self) -> Result<(), String> {
        for (v, sd) in self.subdisks() {
            if self.drive(&sd.drive).map(|d| d.state) == Some(DriveState::Spare) {
                return Err(format!(
                    "drive {:?} is a spare but holds a subdisk of volume {:?}",
                    sd.drive, v.name
                ));
            }
        }
        Ok(())
    }

    fn check_volume(&self, v: &PoolVolume) -> Result<(), String> {
        if v.size_bytes
            .is_some_and(|s| s == 0 || !s.is_multiple_of(SECTOR_BYTES))
        {
            return Err(format!(
                "volume {:?}: its size is not a positive multiple of 512 bytes",
                v.name
            ));
        }
        if v.plexes.is_empty() || v.plexes.len() > MAX_PLEXES {
            return Err(format!(
                "volume {:?} has {} plexes; a volume has 1 to {MAX_PLEXES}",
                v.name,
                v.plexes.len()
            ));
        }
        for p in 0..v.plexes.len() {
            self.check_plex(v, p)?;
        }
        check_plexes_apart(v)
    }

    fn check_plex(&self, v: &PoolVolume, plex: usize) -> Result<(), String> {
        let p = &v.plexes[plex];
        let n = p.subdisks.len() as u32;
        let name = v.plex_name(plex);
        if n < p.org.min_members() || n > MAX_MEMBERS {
            return Err(format!(
                "plex {name}: {} needs {} to {MAX_MEMBERS} subdisks, it has {n}",
                p.org,
                p.org.min_members()
            ));
        }
        if p.interleave_bytes == 0 || !p.interleave_bytes.is_multiple_of(SECTOR_BYTES) {
            return Err(format!(
                "plex {name}: the interleave {} is not a positive multiple of 512 bytes",
                p.interleave_bytes
            ));
        }
        self.check_copies(&name, p)?;
        for (s, sd) in p.subdisks.iter().enumerate() {
            self.check_subdisk(&v.subdisk_name(plex, s), sd)?;
        }
        check_spread(&name, p)
    }

    fn check_copies(&self, name: &str, p: &Plex) -> Result<(), String> {
        let n = p.subdisks.len() as u32;
        let ok = match p.org {
            Level::Mirror => p.copies == n,
            Level::Raid10 => (2..=n).contains(&p.copies),
            _ => p.copies == 1,
        };
        if !ok {
            return Err(format!(
                "plex {name}: {} copies do not fit a {} of {n} subdisks",
                p.copies, p.org
            ));
        }
        let layout_ok = match p.org {
            Level::Raid5 => ParityLayout::ALL.contains(&p.parity_layout),
            Level::Raid6 => {
                ParityLayout::ALL.contains(&p.parity_layout)
                    || ParityLayout::RAID6_ONLY.contains(&p.parity_layout)
            }
            _ => p.parity_layout == ParityLayout::DEFAULT,
        };
        if !layout_ok {
            return Err(format!(
                "plex {name}: layout {} does not apply to {}",
                p.parity_layout, p.org
            ));
        }
        Ok(())
    }

    fn check_subdisk(&self, name: &str, sd: &Subdisk) -> Result<(), String> {
        let Some(d) = self.drive(&sd.drive) else {
            return Err(format!(
                "subdisk {name} is on drive {:?}, which the pool does not have",
                sd.drive
            ));
        };
        if sd.len_bytes == 0
            || !sd.offset_bytes.is_multiple_of(SECTOR_BYTES)
            || !sd.len_bytes.is_multiple_of(SECTOR_BYTES)
        {
            return Err(format!(
                "subdisk {name}: offset {} and length {} must be whole sectors, the length not 0",
                sd.offset_bytes, sd.len_bytes
            ));
        }
        let end = sd.offset_bytes.checked_add(sd.len_bytes);
        if sd.offset_bytes < POOL_AREA_BYTES || end.is_none_or(|e| e > d.size_bytes) {
            return Err(format!(
                "subdisk {name} ({}+{}) is not inside drive {:?} between its pool area and its \
                 end ({POOL_AREA_BYTES}..{})",
                sd.offset_bytes, sd.len_bytes, d.name, d.size_bytes
            ));
        }
        Ok(())
    }

    /// No two subdisks share a byte of a drive.
    fn check_overlaps(&self) -> Result<(), String> {
        let mut by_drive: BTreeMap<String, Vec<(u64, u64, String)>> = BTreeMap::new();
        for v in &self.volumes {
            for (p, plex) in v.plexes.iter().enumerate() {
                for (s, sd) in plex.subdisks.iter().enumerate() {
                    by_drive.entry(sd.drive.clone()).or_default().push((
                        sd.offset_bytes,
                        sd.end_bytes(),
                        v.subdisk_name(p, s),
                    ));
                }
            }
        }
        for c in &self.copies {
            for (s, sd) in c.plex.subdisks.iter().enumerate() {
                by_drive.entry(sd.drive.clone()).or_default().push((
                    sd.offset_bytes,
                    sd.end_bytes(),
                    format!("{}.p1.s{s}", c.volume),
                ));
            }
        }
        for (m, to) in self.move_targets() {
            by_drive.entry(to.drive.clone()).or_default().push((
                to.offset_bytes,
                to.end_bytes(),
                format!("{}'s new place", m.subdisk_name()),
            ));
        }
        for (drive, mut extents) in by_drive {
            extents.sort();
            for w in extents.windows(2) {
                if w[1].0 < w[0].1 {
                    return Err(format!(
                        "subdisks {} and {} overlap on drive {drive:?} (bytes {}..{})",
                        w[0].2, w[1].2, w[1].0, w[0].1
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The plexes of a volume lie on drives apart: one drive's loss costs
/// the volume one plex at most, which its others cover.
fn check_plexes_apart(v: &PoolVolume) -> Result<(), String> {
    let mut owner: BTreeMap<&str, usize> = BTreeMap::new();
    for (p, plex) in v.plexes.iter().enumerate() {
        for sd in &plex.subdisks {
            match owner.get(sd.drive.as_str()) {
                Some(&q) if q != p => {
                    return Err(format!(
                        "plexes {} and {} of volume {:?} both have subdisks on drive {:?}: \
                         losing it would lose both",
                        v.plex_name(q),
                        v.plex_name(p),
                        v.name,
                        sd.drive
                    ))
                }
                _ => {
                    owner.insert(sd.drive.as_str(), p);
                }
            }
        }
    }
    Ok(())
}

/// Why subdisk move `m` would put two subdisks of its plex, or two plexes
/// of its volume, on drive `m.drive`, if it would: a move never makes a
/// drive's loss cost what the layout did not (vinum and LVM refuse the
/// same), whatever the plex's organisation.
pub fn move_shares_a_drive(v: &PoolVolume, m: &SubdiskMove) -> Option<String> {
    for (p, plex) in v.plexes.iter().enumerate() {
        for (s, sd) in plex.subdisks.iter().enumerate() {
            if sd.drive != m.drive || (p, s) == (m.plex, m.slot) {
                continue;
            }
            return Some(if p == m.plex {
                format!("subdisk {} of its plex is there", v.subdisk_name(p, s))
            } else {
                format!("plex {} of its volume is there", v.plex_name(p))
            });
        }
    }
    None
}

/// A redundant plex keeps each subdisk on a drive of its own: two on one
/// drive would be lost together, which its redundancy does not cover.
fn check_spread(name: &str, p: &Plex) -> Result<(), String> {
    if !matches!(
        p.org,
        Level::Mirror | Level::Raid10 | Level::Raid5 | Level::Raid6
    ) {
        return Ok(());
    }
    let mut seen = BTreeSet::new();
    for sd in &p.subdisks {
        if !seen.insert(sd.drive.as_str()) {
            return Err(format!(
                "plex {name} ({}) has two subdisks on drive {:?}: losing it would lose both",
                p.org, sd.drive
            ));
        }
    }
    Ok(())
}

/// Names are what the text form and the exports can carry: letters,
/// digits, `-`, `_` and `.`, not starting with `.` or `-`.
/// A plex's name (`v.p1`, [`PoolVolume::plex_name`]) as its volume's
/// name and the plex's index, if it has that shape.
pub fn split_plex_name(name: &str) -> Option<(&str, usize)> {
    let (volume, p) = name.rsplit_once(".p")?;
    Some((volume, p.parse().ok()?))
}

pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if name.is_empty() || name.len() > NAME_MAX_BYTES || !ok_chars || name.starts_with(['.', '-']) {
        return Err(format!(
            "{what} name {name:?}: use 1 to {NAME_MAX_BYTES} letters, digits, '-', '_' or '.', \
             not starting with '.' or '-'"
        ));
    }
    Ok(())
}

/// A device hint is one word of the text form.
fn check_device(device: &str) -> Result<(), String> {
    if device.is_empty()
        || device
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '#')
    {
        return Err(format!(
            "device {device:?}: a path in the pool configuration holds no spaces, '#' or \
             control characters"
        ));
    }
    Ok(())
}

/// A uuid as people read it: 8-4-4-4-12 hex digits.
pub fn uuid_text(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Reads a uuid written by [`uuid_text`] (dashes optional).
pub fn parse_uuid(text: &str) -> Result<[u8; 16], String> {
    let hex: String = text.chars().filter(|&c| c != '-').collect();
    if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!("uuid {text:?} is not 32 hex digits"));
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex checked");
    }
    Ok(out)
}
