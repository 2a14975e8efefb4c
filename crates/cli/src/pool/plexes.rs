//! Volumes of several plexes (`volume create --plex L[:N] --plex ...`):
//! vinum's volume of plexes that need not be alike. Each plex is an
//! md-exact array over its own subdisks (labelled as a volume of one plex
//! is, named `VOLUME.pN`), on drives no other plex of the volume uses;
//! the volume is an md-exact RAID-1 whose members are the plexes' arrays,
//! its label at the start of each plex's data, written through the
//! plexes' engines (`platter_server::plex::PlexMember`) as a server
//! would write it.

use std::sync::Arc;

use platter_core::label::{Label, SlotState, LABEL_BYTES};
use platter_core::pool::{Plex, Pool, PoolVolume, MAX_PLEXES};
use platter_core::volume::{Limits, Volume};
use platter_core::Level;
use platter_io::aio::layer::{Layer, LayerConfig};
use platter_io::assembly::{assemble_devices, read_label_area};
use platter_io::subdisk::SubdiskMember;
use platter_io::Member;
use platter_server::engine::Engine;
use platter_server::plex::PlexMember;

use super::drives;
use super::make::{place, spec_of, VolumeCreateArgs};
use crate::create::{label_subdisks, subdisk_reserve_bytes, ArraySpec};
use crate::error::{CliError, Result};

/// One `--plex LEVEL[:N]`.
fn parse_plex(spec: &str) -> Result<(Level, Option<u32>)> {
    let (level, count) = match spec.split_once(':') {
        Some((l, n)) => {
            let n = n.parse::<u32>().map_err(|_| {
                CliError(format!("--plex {spec}: '{n}' is not a number of subdisks"))
            })?;
            (l, Some(n))
        }
        None => (spec, None),
    };
    let level: Level = level
        .parse()
        .map_err(|e| CliError(format!("--plex {spec}: {e}")))?;
    Ok((level, count))
}

/// The room the volume's own label and bitmap take at the start of each
/// plex (md's rule for a member of that size), and the size each plex
/// must hold for the volume to be `size_bytes`.
fn plex_bytes(size_bytes: u64) -> (u64, u64) {
    let mut reserve = subdisk_reserve_bytes(size_bytes);
    // The rule grows with the member: settle it for the plex's own size.
    for _ in 0..4 {
        let next = subdisk_reserve_bytes(size_bytes.saturating_add(reserve));
        if next == reserve {
            break;
        }
        reserve = next;
    }
    (reserve, size_bytes.saturating_add(reserve))
}

/// Each plex placed, on drives among `allowed` that the plexes before it
/// do not use.
pub fn place_plexes(
    open: &drives::OpenPool,
    args: &VolumeCreateArgs,
    allowed: &[String],
) -> Result<Vec<Plex>> {
    if args.plexes.len() < 2 || args.plexes.len() > MAX_PLEXES {
        return Err(CliError(format!(
            "--plex: a volume of plexes has 2 to {MAX_PLEXES} of them ({} given; one plex is \
             --level)",
            args.plexes.len()
        )));
    }
    let (_, each_bytes) = plex_bytes(args.size);
    let mut plexes = Vec::new();
    let mut left: Vec<String> = allowed.to_vec();
    for (p, spec) in args.plexes.iter().enumerate() {
        let (level, subdisks) = parse_plex(spec)?;
        let one = VolumeCreateArgs {
            level: Some(level),
            plexes: Vec::new(),
            subdisks,
            size: each_bytes,
            name: format!("{}.p{p}", args.name),
            ..args.clone()
        };
        let plex = place(open, &one, &left)?;
        left.retain(|d| !plex.subdisks.iter().any(|sd| sd.drive == *d));
        plexes.push(plex);
    }
    Ok(plexes)
}

/// Labels each plex's subdisks as a new array, then the volume's own
/// labels over the plexes, through an engine per plex.
pub fn label_plexes(pool: &Pool, v: &PoolVolume, open: &[Option<Arc<dyn Member>>]) -> Result<()> {
    let mut arrays = Vec::new();
    for p in 0..v.plexes.len() {
        let subdisks = label_plex(pool, v, p, open)?;
        arrays.push(subdisks.into_iter().map(|w| w as Arc<dyn Member>).collect());
    }
    let members = plex_members(v, arrays.into_iter())?;
    let smallest = members.iter().map(|m| m.size_bytes()).min().unwrap_or(0);
    let spec = ArraySpec {
        level: Level::Mirror,
        interleave_bytes: 64 << 10,
        layout: None,
        copies: members.len() as u32,
        name: v.name.clone(),
    };
    label_subdisks(&spec, members.clone(), subdisk_reserve_bytes(smallest))
        .map_err(|e| CliError(format!("volume {}: {}", v.name, e.0)))?;
    for m in &members {
        m.flush()?;
    }
    Ok(())
}

/// Labels plex `p`'s subdisks as a new array, its data zeroed (so that
/// the volume's mirror finds it blank: a spare it rebuilds); returns them.
pub fn label_plex(
    pool: &Pool,
    v: &PoolVolume,
    p: usize,
    open: &[Option<Arc<dyn Member>>],
) -> Result<Vec<Arc<SubdiskMember>>> {
    label_plex_as(pool, v, p, open, &v.plex_name(p))
}

/// [`label_plex`], the array named `name` (a convert's new plex takes the
/// name of the plex it replaces).
pub fn label_plex_as(
    pool: &Pool,
    v: &PoolVolume,
    p: usize,
    open: &[Option<Arc<dyn Member>>],
    name: &str,
) -> Result<Vec<Arc<SubdiskMember>>> {
    let plex = &v.plexes[p];
    let windows = drives::plex_windows(pool, v, p, open)?;
    let subdisks: Vec<Arc<dyn Member>> = windows
        .iter()
        .map(|w| Arc::clone(w) as Arc<dyn Member>)
        .collect();
    if subdisks.len() != plex.subdisks.len() {
        return Err(CliError(format!(
            "volume {}: a drive of plex {} is missing; it cannot be made now",
            v.name,
            v.plex_name(p)
        )));
    }
    // A plex made anew keeps nothing of the old array: a subdisk that
    // survived holds its old label, which would be refused as another
    // volume's.
    for m in &subdisks {
        m.write_at(0, &[0u8; LABEL_BYTES])?;
    }
    let smallest = plex.subdisks.iter().map(|s| s.len_bytes).min().unwrap_or(0);
    let spec = ArraySpec {
        name: name.to_string(),
        ..spec_of(v, plex)
    };
    label_subdisks(&spec, subdisks, subdisk_reserve_bytes(smallest))
        .map_err(|e| CliError(format!("plex {name}: {}", e.0)))?;
    Ok(windows)
}

/// Each plex's array (its subdisks, by plex) served by an engine in this
/// process, as the volume's mirror's members.
pub(super) fn plex_members(
    v: &PoolVolume,
    arrays: impl Iterator<Item = Vec<Arc<dyn Member>>>,
) -> Result<Vec<Arc<dyn Member>>> {
    let mut out: Vec<Arc<dyn Member>> = Vec::new();
    for (p, members) in arrays.enumerate() {
        let engine = plex_engine(members)?;
        out.push(Arc::new(PlexMember::new(engine, v.plex_name(p))));
    }
    Ok(out)
}

/// A plex's array, just labelled, served in this process for the
/// volume's labels to be written through it.
fn plex_engine(subdisks: Vec<Arc<dyn Member>>) -> Result<Arc<Engine>> {
    let opened = assemble_devices(subdisks).map_err(CliError::from)?;
    let a = &opened.assembly;
    let by_slot = a
        .slot_device
        .iter()
        .map(|d| d.map(|i| Arc::clone(&opened.devices[i])))
        .collect();
    let volume = Volume::new(a.geometry.clone(), a.health.clone(), Limits::default());
    Ok(Engine::new(
        volume,
        by_slot,
        Arc::new(Layer::threads(LayerConfig::default())),
    ))
}

/// The mirror's label as plex `p` of `v` holds it, read offline through an
/// engine over the plex's subdisks present (`None`: it does not assemble,
/// or holds none).
pub fn mirror_label_on(open: &drives::OpenPool, v: &PoolVolume, p: usize) -> Option<Label> {
    let windows = drives::plex_windows(open.pool(), v, p, &open.drives).ok()?;
    let members: Vec<Arc<dyn Member>> = windows.into_iter().map(|w| w as Arc<dyn Member>).collect();
    let plex = plex_members(v, std::iter::once(members)).ok()?;
    let area = read_label_area(plex[0].as_ref()).ok()?;
    Label::decode(&area).ok()
}

/// A volume of plexes as its plexes' copies of the mirror's label tell
/// it, offline: the newest, and which plexes hold the volume's bytes.
pub struct MirrorLabels {
    pub newest: Label,
    in_step: Vec<bool>,
}

impl MirrorLabels {
    /// Read from every plex of `v`; refused when none can be read.
    pub fn read(open: &drives::OpenPool, v: &PoolVolume) -> Result<MirrorLabels> {
        let labels: Vec<Option<Label>> = (0..v.plexes.len())
            .map(|p| mirror_label_on(open, v, p))
            .collect();
        let newest = labels
            .iter()
            .flatten()
            .max_by_key(|l| l.event_counter)
            .cloned()
            .ok_or_else(|| CliError(format!("volume {}: no plex of it can be read", v.name)))?;
        // In use and in step: its slot active and never left in the
        // newest label, its own label at most a change behind (the
        // labels are written plex after plex).
        let in_step = labels
            .iter()
            .enumerate()
            .map(|(p, own)| {
                own.as_ref().is_some_and(|own| {
                    own.event_counter + 1 >= newest.event_counter
                        && newest
                            .slots
                            .get(p)
                            .is_some_and(|e| e.state == SlotState::Active && e.left_at_events == 0)
                })
            })
            .collect();
        Ok(MirrorLabels { newest, in_step })
    }

    /// Whether plex `p` holds the volume's bytes.
    pub fn in_step(&self, p: usize) -> bool {
        self.in_step.get(p).copied().unwrap_or(false)
    }
}
