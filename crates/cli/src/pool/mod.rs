//! `platter pool` and `platter volume`: pools of drives carved into
//! subdisks, plexes and volumes (vinum's objects; docs/pools.md), and
//! `platter list` / `printconfig`, which show them.

mod convert;
#[cfg(test)]
mod crash_kit;
pub mod drives;
pub mod extend;
pub mod heal;
pub mod host;
mod import;
mod list;
mod make;
mod plexes;
pub mod relocate;
mod retire;
#[cfg(test)]
mod seeded;
#[cfg(test)]
mod seeded_copies;
#[cfg(test)]
mod seeded_plexes;
mod split;

use clap::{Args, Subcommand};

pub use list::{list, printconfig, ListArgs, PrintconfigArgs};
pub use split::{run_plex, PlexCommand};

use crate::error::Result;

#[derive(Subcommand)]
pub enum PoolCommand {
    /// Make a pool of drives: each device's first MiB becomes its pool
    /// area, which holds the whole configuration (twice). With --config,
    /// also the volumes a configuration file describes (`printconfig`'s
    /// output).
    Create(make::PoolCreateArgs),
    /// Add drives to a pool (through its server with --control, while it
    /// serves).
    AddDrive(make::AddDriveArgs),
    /// Put a new device in the place of a drive that is gone: its
    /// subdisks are laid out there again, blank, and each volume rebuilds
    /// its subdisk on it (as a spare takes a failed member's place): at
    /// once with --control (the pool's server, the drive failed there),
    /// else when `serve --pool` next serves the pool.
    ReplaceDrive(make::ReplaceDriveArgs),
    /// Place each failed subdisk of a redundant volume again, blank, on a
    /// spare drive (`add-drive --spare`) or in free space on another drive
    /// that holds none of its plex, for the volume to rebuild there: at
    /// once with --control (the subdisks the server found failed; it does
    /// this by itself with spares), else (the subdisks on drives not
    /// found) when `serve --pool` next serves the pool. The drive left is
    /// marked failed: nothing new is placed on it.
    Heal(heal::HealArgs),
    /// Take a drive that holds no subdisk out of the pool (LVM's
    /// `vgreduce`): the other drives' configuration no longer names it,
    /// and its pool area is erased if it is present (through the pool's
    /// server with --control, while it serves).
    RemoveDrive(retire::RemoveDriveArgs),
    /// Make a pool of one volume from the members of a volume made by
    /// `platter create`, its data where it is: each member's label and
    /// bitmap move up by 1 MiB into the room before its data, and its
    /// first MiB becomes its pool area. Needs the volume clean and whole,
    /// and that room (members of 1 GiB and more, or made with `--reserve
    /// 2M`). Run it again to finish an import a crash cut short.
    Import(import::ImportArgs),
    /// Move every subdisk off a drive (LVM's `pvmove` of a whole PV),
    /// each to the roomiest drive that keeps its plex's rules, while the
    /// volumes serve (--control) or offline; one configuration records
    /// every move first, so a crash leaves each to be taken up (run again,
    /// or the next `serve --pool`). Then `pool remove-drive` takes it out.
    Evacuate(relocate::EvacuateArgs),
}

#[derive(Subcommand)]
pub enum VolumeCommand {
    /// Carve a volume out of a pool's free space: one plex of LEVEL whose
    /// subdisks lie on distinct drives (the roomiest first), labelled as
    /// `platter create` labels members.
    Create(make::VolumeCreateArgs),
    /// Remove a volume from its pool; its subdisks become free space.
    /// With --control, the server stops serving it first, refusing while
    /// a client is connected unless --force.
    Remove(make::VolumeRemoveArgs),
    /// Make a volume larger in place: each of its subdisks grows into the
    /// free space after it on its drive (a concat: its last subdisk), the
    /// growth zeroed first, so that no byte moves and the new stripes
    /// need no resync. Offline, or through the pool's server with
    /// --control (the volume paused for the moment of the change);
    /// clients see the new size when they next connect. A crash part way
    /// is finished by running it again, or by the next `serve --pool`.
    Extend(extend::VolumeExtendArgs),
    /// Change a volume's organisation by plex (vinum's way): a plex of a
    /// volume of several plexes is replaced by a new plex of another
    /// level or interleave on drives none of its plexes use, revived from
    /// the others while the volume serves; a volume of one plex is copied
    /// into the new plex while it serves (no --plex), keeping its size.
    /// The old plex's subdisks are then free. Through the pool's server
    /// (--control), or recorded offline for the next `serve --pool` to
    /// do; a crash part way is taken up by the next `serve --pool` (a
    /// copy begins again). --abort gives a convert up.
    Convert(convert::VolumeConvertArgs),
}

#[derive(Subcommand)]
pub enum SubdiskCommand {
    /// Copy a subdisk to free space on another drive while its volume
    /// serves (vinum's `move`, LVM's `pvmove`), then point the volume at
    /// the copy: writes go to both places until then. Through the pool's
    /// server with --control; offline, the pool must not be served. A
    /// move a crash or a stop cut short goes on from its last checkpoint
    /// when run again without --to, or when `serve --pool` next serves
    /// the pool.
    Move(relocate::SubdiskMoveArgs),
}

pub fn run_subdisk(c: SubdiskCommand) -> Result<()> {
    match c {
        SubdiskCommand::Move(a) => relocate::subdisk_move(a),
    }
}

pub fn run_pool(c: PoolCommand) -> Result<()> {
    match c {
        PoolCommand::Create(a) => make::pool_create(a),
        PoolCommand::AddDrive(a) => make::add_drive(a),
        PoolCommand::ReplaceDrive(a) => make::replace_drive(a),
        PoolCommand::Heal(a) => heal::heal(a),
        PoolCommand::RemoveDrive(a) => retire::remove_drive(a),
        PoolCommand::Import(a) => import::import(a),
        PoolCommand::Evacuate(a) => relocate::evacuate(a),
    }
}

pub fn run_volume(c: VolumeCommand) -> Result<()> {
    match c {
        VolumeCommand::Create(a) => make::volume_create(a),
        VolumeCommand::Remove(a) => make::volume_remove(a),
        VolumeCommand::Extend(a) => extend::volume_extend(a),
        VolumeCommand::Convert(a) => convert::volume_convert(a),
    }
}

/// Where a command looks for the pool's drives.
#[derive(Args, Clone)]
pub struct DeviceArgs {
    /// The pool's drives: devices, files, or directories holding them
    /// (their files and block devices). Without any, every block device
    /// in /dev.
    #[arg(value_name = "DEVICE")]
    pub devices: Vec<String>,
}

/// Where a volume command goes when the pool is served.
#[derive(Args, Clone)]
pub struct ControlArgs {
    /// The pool's server's control socket (`serve --pool`): the server
    /// makes the change and serves the volume as changed, without a
    /// restart. Without it the pool must not be served (its drives are
    /// opened here).
    #[arg(long, value_name = "PATH", conflicts_with = "devices")]
    pub control: Option<std::path::PathBuf>,
}
