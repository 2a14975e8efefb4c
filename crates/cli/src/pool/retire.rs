//! `platter pool remove-drive` (LVM's `vgreduce`): a drive that holds no
//! subdisk leaves the pool.
//!
//! Order on the devices: the configuration without the drive is written
//! to every other drive first; then, if the drive is present, its two
//! slots are erased. A crash between the two leaves a device whose old
//! configuration names a drive the pool no longer has: `list` names it
//! as "not a drive of pool ...", and nothing assembles from it.

use clap::Args;
use platter_core::pool::area::{self, HEADER_BYTES};
use serde_json::json;

use super::drives::{open_pool, OpenPool};
use super::make::{drive_index, writable};
use super::{ControlArgs, DeviceArgs};
use crate::error::{CliError, Result};
use crate::out::outln;

#[derive(Args)]
pub struct RemoveDriveArgs {
    #[arg(value_name = "POOL")]
    pool: String,
    /// The drive to take out (its name in the pool: d1). It must hold no
    /// subdisk: `pool heal` places a failed drive's elsewhere, `volume
    /// remove` frees them.
    #[arg(value_name = "DRIVE")]
    drive: String,
    #[command(flatten)]
    devices: DeviceArgs,
    #[command(flatten)]
    control: ControlArgs,
}

pub fn remove_drive(args: RemoveDriveArgs) -> Result<()> {
    if let Some(control) = &args.control.control {
        let req = json!({
            "cmd": "pool-remove-drive",
            "pool": args.pool,
            "drive": args.drive,
        });
        let done = crate::control::ask(control, req)?;
        outln!(
            "drive {} left pool {}: {} drives (generation {}), through its server",
            args.drive,
            args.pool,
            done["drives"],
            done["generation"]
        );
        return Ok(());
    }
    let mut open = open_pool(Some(&args.pool), &args.devices.devices, writable())?;
    let erased = remove_drive_in(&mut open, &args.drive)?;
    outln!(
        "drive {} left pool {}: {} drives (generation {}){}",
        args.drive,
        args.pool,
        open.pool().drives.len(),
        open.pool().generation,
        if erased {
            "; its pool area erased"
        } else {
            "; it was not found, and keeps its old configuration"
        }
    );
    Ok(())
}

/// Takes drive `name` out of the open pool, as [`remove_drive`] says;
/// returns whether its device was present and erased.
pub fn remove_drive_in(open: &mut OpenPool, name: &str) -> Result<bool> {
    let d = drive_index(open, name)?;
    let pool = open.pool();
    let mut on_it = Vec::new();
    for v in &pool.volumes {
        for (p, plex) in v.plexes.iter().enumerate() {
            for (s, sd) in plex.subdisks.iter().enumerate() {
                if sd.drive == name {
                    on_it.push(v.subdisk_name(p, s));
                }
            }
        }
    }
    for c in &pool.copies {
        for (s, sd) in c.plex.subdisks.iter().enumerate() {
            if sd.drive == name {
                on_it.push(format!("{}.p1.s{s}", c.volume));
            }
        }
    }
    if !on_it.is_empty() {
        return Err(CliError(format!(
            "drive {name} holds subdisks {}: `platter pool heal` places a failed drive's \
             elsewhere, `platter volume remove` frees a volume's, `platter volume convert \
             --abort` a convert's new plex's",
            on_it.join(", ")
        )));
    }
    if pool.drives.len() == 1 {
        return Err(CliError(format!(
            "drive {name} is the last of pool {}: a pool keeps at least one",
            pool.name
        )));
    }
    let mut next = pool.clone();
    next.drives.remove(d);
    let before = open.clone();
    let device = open.forget_drive(d);
    if let Err(e) = open.write(next) {
        // No drive took it: the pool still has the drive, at the
        // generation the failed write used up.
        let generation = open.gathered.pool.generation;
        *open = before;
        open.gathered.pool.generation = generation;
        return Err(e);
    }
    let Some(m) = device else {
        return Ok(false);
    };
    for slot in 0..2 {
        m.write_at(area::slot_offset_bytes(slot), &[0u8; HEADER_BYTES])?;
    }
    m.flush()?;
    Ok(true)
}
