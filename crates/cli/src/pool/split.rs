//! `platter plex detach` and `plex attach` (vinum's `detach`/`attach`,
//! LVM's `lvconvert --splitmirrors`): a plex of a volume of several plexes
//! split off as an image of the volume at that instant, and joined back.
//!
//! The configuration records the split (`detach plex V.pN ...`); the
//! volume's mirror serves without the plex, its write-intent bitmap
//! keeping every region written meanwhile (md keeps bits while a member
//! is out). The plex's own copy of the mirror's label is not written
//! after the split, so on attach the mirror's re-add (md's `--re-add`
//! with a bitmap) takes it back and revives only those regions; a plex
//! served writable, whose label then moved on, is refused there and
//! revived whole. Through the server (`--control`) the volume is paused
//! and emptied, the plex flushed, the configuration written, then the
//! mirror records the plex leaving; offline, only the configuration is
//! written and the next start records it (docs/pools.md "Splitting a
//! volume").

use clap::{Args, Subcommand};
use platter_core::pool::{DetachedPlex, Pool, PoolVolume};
use serde_json::{json, Value};

use super::drives::{open_pool, OpenPool};
use super::make::writable;
use super::plexes::MirrorLabels;
use super::{ControlArgs, DeviceArgs};
use crate::error::{CliError, Result};
use crate::out::outln;

#[derive(Subcommand)]
pub enum PlexCommand {
    /// Split a plex off its volume of several plexes (vinum's `detach`,
    /// LVM's `lvconvert --splitmirrors`): the plex keeps the volume's bytes
    /// as they were at that instant, the volume serves on from its other
    /// plexes and remembers in its write-intent bitmap what it writes
    /// meanwhile. With --as NAME the pool's server also serves the plex
    /// as volume NAME, read-only unless --writable (a backup or a test
    /// copy). `plex attach` joins it back.
    Detach(DetachArgs),
    /// Join a detached plex back to its volume: the volume revives on it
    /// only the regions written since the detach (all of it when the plex
    /// was served --writable), while it serves. A volume served as the
    /// plex (--as) stops; with clients connected that is refused unless
    /// --force.
    Attach(AttachArgs),
}

pub fn run_plex(c: PlexCommand) -> Result<()> {
    match c {
        PlexCommand::Detach(a) => detach(a),
        PlexCommand::Attach(a) => attach(a),
    }
}

#[derive(Args)]
pub struct DetachArgs {
    #[arg(value_name = "POOL")]
    pool: String,
    #[arg(value_name = "VOLUME")]
    volume: String,
    /// The plex, as `list` names it (db.p1), or its number alone.
    #[arg(value_name = "PLEX")]
    plex: String,
    /// Serve the detached plex as a volume of this name (by the pool's
    /// server; read-only unless --writable).
    #[arg(long = "as", value_name = "NAME")]
    as_volume: Option<String>,
    /// Let clients write to the volume --as serves. The writes are not
    /// tracked: `plex attach` then revives the whole plex.
    #[arg(long, requires = "as_volume")]
    writable: bool,
    #[command(flatten)]
    devices: DeviceArgs,
    #[command(flatten)]
    control: ControlArgs,
}

#[derive(Args)]
pub struct AttachArgs {
    #[arg(value_name = "POOL")]
    pool: String,
    #[arg(value_name = "VOLUME")]
    volume: String,
    /// The detached plex, as `list` names it (db.p1), or its number alone.
    #[arg(value_name = "PLEX")]
    plex: String,
    /// Cut off the clients of the volume the plex is served as (--as).
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    devices: DeviceArgs,
    #[command(flatten)]
    control: ControlArgs,
}

fn detach(args: DetachArgs) -> Result<()> {
    if let Some(control) = &args.control.control {
        let req = json!({
            "cmd": "plex-detach",
            "pool": args.pool,
            "volume": args.volume,
            "plex": args.plex,
            "as": args.as_volume,
            "writable": args.writable,
        });
        let done = crate::control::ask(control, req)?;
        say_detached(&done);
        return Ok(());
    }
    let mut open = open_pool(Some(&args.pool), &args.devices.devices, writable())?;
    let (v, p) = volume_and_plex(open.pool(), &args.volume, &args.plex)?;
    let d = DetachedPlex {
        volume: v.name.clone(),
        plex: p,
        as_volume: args.as_volume,
        writable: args.writable,
    };
    detach_in(&mut open, &d)?;
    say_detached(&json!({
        "plex": d.plex_name(),
        "volume": d.volume,
        "as": d.as_volume,
        "writable": d.writable,
        "generation": open.pool().generation,
    }));
    Ok(())
}

fn say_detached(done: &Value) {
    let served = match done["as"].as_str() {
        Some(name) if done["writable"] == true => format!("; served as volume {name} (writable)"),
        Some(name) => format!("; served as volume {name} (read-only)"),
        None => String::new(),
    };
    outln!(
        "plex {} detached from volume {}{served}; `platter plex attach` joins it back",
        done["plex"].as_str().unwrap_or("?"),
        done["volume"].as_str().unwrap_or("?"),
    );
}

fn attach(args: AttachArgs) -> Result<()> {
    if let Some(control) = &args.control.control {
        let req = json!({
            "cmd": "plex-attach",
            "pool": args.pool,
            "volume": args.volume,
            "plex": args.plex,
            "force": args.force,
        });
        let done = crate::control::ask(control, req)?;
        say_attached(&done);
        return Ok(());
    }
    let mut open = open_pool(Some(&args.pool), &args.devices.devices, writable())?;
    let (v, p) = volume_and_plex(open.pool(), &args.volume, &args.plex)?;
    attach_in(&mut open, &v.name, p)?;
    outln!(
        "plex {} attached to volume {} (generation {}); the next `serve --pool` revives on it \
         what the volume wrote since the detach (all of it if it was written elsewhere)",
        v.plex_name(p),
        v.name,
        open.pool().generation
    );
    Ok(())
}

fn say_attached(done: &Value) {
    let how = revived(done, "the detach");
    outln!(
        "plex {} attached to volume {}: reviving {how}; `platter status --control` follows it",
        done["plex"].as_str().unwrap_or("?"),
        done["volume"].as_str().unwrap_or("?"),
    );
}

/// What the server's answer `done` says a plex taken back revives: all of
/// it, or the regions written since `since`.
pub(super) fn revived(done: &Value, since: &str) -> String {
    if done["whole"] == true {
        return "the whole plex".to_string();
    }
    format!(
        "the {} region(s) of {} written since {since}",
        done["missed_regions"], done["regions"]
    )
}

/// Offline, plex `d` split off: checked in step in the mirror's labels,
/// then recorded.
pub(super) fn detach_in(open: &mut OpenPool, d: &DetachedPlex) -> Result<()> {
    let detached = plan_detach(open.pool(), d)?;
    let v = open.pool().volume(&d.volume).cloned().expect("planned");
    check_in_sync(open, &v, d.plex)?;
    open.write(detached)
}

/// Offline, plex `p` of `volume` recorded attached; the next start
/// revives it.
pub(super) fn attach_in(open: &mut OpenPool, volume: &str, p: usize) -> Result<()> {
    let attached = plan_attach(open.pool(), volume, p)?;
    open.write(attached)
}

/// Volume `volume` of several plexes and its plex `plex` (`v.p1`, `p1` or
/// `1`).
pub fn volume_and_plex(pool: &Pool, volume: &str, plex: &str) -> Result<(PoolVolume, usize)> {
    let v = pool
        .volume(volume)
        .ok_or_else(|| CliError(format!("pool {} has no volume {volume}", pool.name)))?;
    if !v.has_plexes() {
        return Err(CliError(format!(
            "volume {volume} has one plex: only a volume of several plexes (`volume create \
             --plex ... --plex ...`) splits"
        )));
    }
    let number = plex
        .strip_prefix(&format!("{volume}."))
        .unwrap_or(plex)
        .trim_start_matches('p');
    let p = number
        .parse::<usize>()
        .ok()
        .filter(|&p| p < v.plexes.len())
        .ok_or_else(|| {
            CliError(format!(
                "volume {volume} has no plex {plex} (its plexes: {})",
                (0..v.plexes.len())
                    .map(|p| v.plex_name(p))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
    Ok((v.clone(), p))
}

/// The configuration with plex `d` detached, or why not.
pub fn plan_detach(pool: &Pool, d: &DetachedPlex) -> Result<Pool> {
    let name = d.plex_name();
    if pool.detached_plex(&d.volume, d.plex).is_some() {
        return Err(CliError(format!("plex {name} is detached already")));
    }
    let v = pool.volume(&d.volume).expect("named by the caller");
    if pool.attached_plexes(v).len() < 2 {
        return Err(CliError(format!(
            "plex {name} is the last plex its volume serves from: detaching it would leave the \
             volume nothing to serve"
        )));
    }
    pool.not_moving(&d.volume, "detach a plex")
        .map_err(CliError)?;
    let mut next = pool.clone();
    next.detached.push(d.clone());
    next.check().map_err(CliError)?;
    Ok(next)
}

/// The configuration with plex `p` of `volume` attached again, or why not.
pub fn plan_attach(pool: &Pool, volume: &str, p: usize) -> Result<Pool> {
    if pool.detached_plex(volume, p).is_none() {
        return Err(CliError(format!(
            "plex {volume}.p{p} is not detached (it is one of the plexes volume {volume} serves \
             from)"
        )));
    }
    let mut next = pool.clone();
    next.detached
        .retain(|d| !(d.volume == volume && d.plex == p));
    Ok(next)
}

/// Offline, a plex is split off only while it holds the volume's bytes:
/// its slot in the newest of the mirror's labels is in use and in step,
/// and another plex's is too.
fn check_in_sync(open: &OpenPool, v: &PoolVolume, p: usize) -> Result<()> {
    let labels = MirrorLabels::read(open, v)?;
    if !labels.in_step(p) {
        return Err(CliError(format!(
            "plex {} does not hold the volume's bytes now (it failed, is being rebuilt, or cannot \
             be read): nothing to split off",
            v.plex_name(p)
        )));
    }
    if !(0..v.plexes.len()).any(|q| q != p && labels.in_step(q)) {
        return Err(CliError(format!(
            "no other plex of volume {} holds all of its bytes: detaching {} would leave it \
             nothing to serve",
            v.name,
            v.plex_name(p)
        )));
    }
    Ok(())
}
