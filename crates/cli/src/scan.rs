//! `platter scan`: find volumes by the labels on their members, and pick
//! one volume's members for `serve --scan`.
//!
//! Scanning only reads: each candidate is opened read-only without a claim
//! (no `O_EXCL`, no lock), so a device in use elsewhere (mounted, or a
//! member of a running volume) is read, not refused, and nothing is ever
//! written. A device without a platter label is passed over; one whose
//! label is damaged is reported, since that may be a member the operator
//! is looking for.

use crate::error::{CliError, Result};
use crate::out::{out, outln};
use clap::Args;
use platter_core::assemble::{assemble, uuid_string, AssembleError, Assembly, Found, Superseded};
use platter_core::label::{is_blank, printable, Label, LabelError, LABEL_BYTES};
use platter_core::pool::area::POOL_MAGIC;
use platter_io::assembly::path_identity;
use platter_io::{open_member, OpenOptions};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::Path;

/// Where `scan` looks when given nothing: every block device in it.
pub const DEFAULT_SCAN_DIR: &str = "/dev";

/// Candidates looked at in one scan, at most: a directory of millions of
/// files is not a place members live, and a bound keeps a mistyped path
/// from reading for hours.
const MAX_CANDIDATES: usize = 100_000;

/// Exit status: every volume found is whole (and no label is damaged).
pub const EXIT_WHOLE: u8 = 0;
/// Exit status: no volume found.
pub const EXIT_NOTHING: u8 = 3;
/// Exit status: a volume found lacks members, or cannot be served, or a
/// damaged label was found.
pub const EXIT_INCOMPLETE: u8 = 4;

#[derive(Args)]
#[command(
    after_help = "Exit status: 0 volumes found, each with every member; 1 an error (a \
                        path named that does not exist); 3 no volume found; 4 a volume found \
                        lacks members or cannot be served, or a damaged label was found."
)]
pub struct ScanArgs {
    /// Print JSON for programs instead of text for people.
    #[arg(long)]
    json: bool,
    /// Where to look: directories (their files and block devices, not
    /// their subdirectories), files, block devices or nbd:// URIs. Without
    /// any, every block device in /dev.
    #[arg(value_name = "PATH")]
    paths: Vec<String>,
}

/// A volume some of whose members were found.
pub struct FoundVolume {
    pub uuid: [u8; 16],
    /// The name in the freshest label found.
    pub name: String,
    /// Where each of its members was found, in the order looked at.
    pub paths: Vec<String>,
    /// Their labels, in the same order.
    pub labels: Vec<Label>,
    /// What the members found make, or why they make nothing.
    pub assembly: std::result::Result<Assembly, AssembleError>,
}

/// What a scan found.
#[derive(Default)]
pub struct Discovery {
    /// By name, then uuid.
    pub volumes: Vec<FoundVolume>,
    /// Paths whose platter label is damaged or unreadable by this
    /// version, with the reason.
    pub damaged: Vec<(String, String)>,
    /// Paths that could not be read, with the reason.
    pub unreadable: Vec<(String, String)>,
    /// Devices and files looked at (each once, whatever its names).
    pub looked_at: usize,
    /// Pools whose drives were found (`platter pool`).
    pub pools: Vec<FoundPool>,
}

/// A pool some of whose drives were found.
#[derive(Serialize)]
pub struct FoundPool {
    pub name: String,
    pub uuid: String,
    pub generation: u64,
    /// (drive, where it was found), in the pool's drive order.
    pub drives: Vec<(String, String)>,
    /// Drives of the pool not found.
    pub missing: Vec<String>,
    pub volumes: Vec<String>,
    /// The drives a spare or failed (`pool add-drive --spare`, `pool
    /// heal`), with that state.
    pub not_up: Vec<(String, &'static str)>,
}

impl Discovery {
    /// Names carried by more than one volume.
    pub fn shared_names(&self) -> Vec<&str> {
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for v in &self.volumes {
            *count.entry(v.name.as_str()).or_insert(0) += 1;
        }
        count
            .into_iter()
            .filter(|&(_, n)| n > 1)
            .map(|(name, _)| name)
            .collect()
    }
}

pub fn run(args: ScanArgs) -> Result<u8> {
    let d = discover(&args.paths)?;
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json(&d)).expect("JSON of plain data")
        );
    } else {
        out!("{}", render(&d));
    }
    Ok(exit_status(&d))
}

fn exit_status(d: &Discovery) -> u8 {
    if d.volumes.is_empty() && d.damaged.is_empty() && d.pools.is_empty() {
        return EXIT_NOTHING;
    }
    if d.pools.iter().any(|p| !p.missing.is_empty()) {
        return EXIT_INCOMPLETE;
    }
    let whole = d.volumes.iter().all(|v| {
        v.assembly.as_ref().is_ok_and(|a| {
            a.health
                .iter()
                .all(|h| *h == platter_core::volume::Health::Online)
        })
    });
    if whole && d.damaged.is_empty() {
        EXIT_WHOLE
    } else {
        EXIT_INCOMPLETE
    }
}

/// Looks at every candidate under `paths` (or [`DEFAULT_SCAN_DIR`]) and
/// groups the labels found by volume. A path named that does not exist is
/// an error (a typo should not read as "no volume here"); a candidate that
/// cannot be read is listed, not fatal.
pub fn discover(paths: &[String]) -> Result<Discovery> {
    let default = [DEFAULT_SCAN_DIR.to_string()];
    let paths = if paths.is_empty() {
        &default[..]
    } else {
        paths
    };
    let mut candidates = Vec::new();
    for p in paths {
        candidates_of(p, &mut candidates)?;
    }
    let mut d = Discovery::default();
    let mut seen: Vec<(u64, u64)> = Vec::new();
    let mut by_volume: BTreeMap<[u8; 16], Vec<(String, u64, Label)>> = BTreeMap::new();
    let mut pool_paths = Vec::new();
    for c in candidates {
        // The same device under two names (/dev/sdb and a /dev/disk/by-id
        // link) is looked at once, under the first name.
        if let Some(id) = path_identity(&c) {
            if seen.contains(&id) {
                continue;
            }
            seen.push(id);
        }
        d.looked_at += 1;
        let (size_bytes, area) = match read_label_area(&c) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => {
                d.unreadable.push((c, e));
                continue;
            }
        };
        if area.starts_with(&POOL_MAGIC) {
            pool_paths.push(c);
            continue;
        }
        if is_blank(&area) {
            continue;
        }
        match Label::decode(&area) {
            Ok(l) => by_volume
                .entry(l.volume_uuid)
                .or_default()
                .push((c, size_bytes, l)),
            Err(LabelError::NotALabel) => {}
            Err(e) => d.damaged.push((c, e.to_string())),
        }
    }
    d.volumes = by_volume
        .into_iter()
        .map(|(uuid, members)| found_volume(uuid, members))
        .collect();
    d.volumes
        .sort_by(|a, b| (&a.name, a.uuid).cmp(&(&b.name, b.uuid)));
    d.pools = found_pools(&pool_paths, &mut d.damaged)?;
    Ok(d)
}

/// A volume some of whose members were found: (path, size, label) each.
fn found_volume(uuid: [u8; 16], members: Vec<(String, u64, Label)>) -> FoundVolume {
    let found: Vec<Found> = members
        .iter()
        .map(|(path, size_bytes, l)| Found {
            name: path.clone(),
            size_bytes: *size_bytes,
            label: Ok(l.clone()),
        })
        .collect();
    let freshest = members
        .iter()
        .max_by_key(|(_, _, l)| l.event_counter)
        .map(|(_, _, l)| l.name.clone())
        .unwrap_or_default();
    FoundVolume {
        uuid,
        name: freshest,
        labels: members.iter().map(|(_, _, l)| l.clone()).collect(),
        paths: members.into_iter().map(|(p, _, _)| p).collect(),
        assembly: assemble(&found),
    }
}

/// The pools whose drives are among `paths` (devices whose first bytes
/// are a pool slot's); a device whose slots are both unusable is listed as
/// damaged, as a damaged label is.
fn found_pools(paths: &[String], damaged: &mut Vec<(String, String)>) -> Result<Vec<FoundPool>> {
    use platter_core::pool::area::{gather_uuid, pools_in};
    let seen = crate::pool::drives::look(paths)?;
    let mut out = Vec::new();
    for uuid in pools_in(&seen) {
        let g = gather_uuid(&seen, uuid).map_err(CliError)?;
        let drives = g
            .present
            .iter()
            .map(|(i, name)| (name.clone(), seen[*i].device.clone()))
            .collect();
        out.push(FoundPool {
            name: g.pool.name.clone(),
            uuid: platter_core::pool::uuid_text(&g.pool.uuid),
            generation: g.pool.generation,
            drives,
            missing: g.missing.clone(),
            volumes: g.pool.volumes.iter().map(|v| v.name.clone()).collect(),
            not_up: g
                .pool
                .drives
                .iter()
                .filter(|d| d.state != platter_core::pool::DriveState::Up)
                .map(|d| (d.name.clone(), d.state.name()))
                .collect(),
        });
        for (device, why) in g.damaged {
            if !damaged.iter().any(|(p, _)| *p == device) {
                damaged.push((device, format!("pool slots: {why}")));
            }
        }
    }
    Ok(out)
}

/// The candidates a path names: itself, or a directory's files and block
/// devices (symbolic links followed, subdirectories not entered), sorted.
pub(crate) fn candidates_of(path: &str, out: &mut Vec<String>) -> Result<()> {
    if path.contains("://") {
        out.push(path.to_string());
        return Ok(());
    }
    let meta = std::fs::metadata(path).map_err(|e| CliError(format!("{path}: {e}")))?;
    if !meta.is_dir() {
        out.push(path.to_string());
        return Ok(());
    }
    let entries =
        std::fs::read_dir(path).map_err(|e| CliError(format!("{path}: cannot list: {e}")))?;
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| CliError(format!("{path}: cannot list: {e}")))?;
        let p = entry.path();
        let Ok(m) = std::fs::metadata(&p) else {
            continue; // a dangling link
        };
        let scan_this = if path == DEFAULT_SCAN_DIR {
            m.file_type().is_block_device()
        } else {
            m.is_file() || m.file_type().is_block_device()
        };
        if scan_this {
            found.push(p.to_string_lossy().into_owned());
        }
        if out.len() + found.len() > MAX_CANDIDATES {
            return Err(CliError(format!(
                "{path}: more than {MAX_CANDIDATES} files to look at; name the \
                 directories that hold members"
            )));
        }
    }
    found.sort();
    out.extend(found);
    Ok(())
}

/// A candidate's size and first [`LABEL_BYTES`], read-only and without a
/// claim; `None` when it is too small to hold a label.
pub(crate) fn read_label_area(spec: &str) -> std::result::Result<Option<(u64, Vec<u8>)>, String> {
    let mut area = vec![0u8; LABEL_BYTES];
    if spec.contains("://") {
        let opts = OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        };
        let m = open_member(spec, opts).map_err(|e| e.to_string())?;
        if m.size_bytes() < LABEL_BYTES as u64 {
            return Ok(None);
        }
        m.read_at(0, &mut area).map_err(|e| e.to_string())?;
        return Ok(Some((m.size_bytes(), area)));
    }
    let f = std::fs::File::open(Path::new(spec)).map_err(|e| e.to_string())?;
    // A block device's metadata says 0 bytes; its end is its size.
    let size_bytes = std::io::Seek::seek(&mut &f, std::io::SeekFrom::End(0))
        .map_err(|e| format!("cannot find its size: {e}"))?;
    if size_bytes < LABEL_BYTES as u64 {
        return Ok(None);
    }
    f.read_exact_at(&mut area, 0).map_err(|e| e.to_string())?;
    Ok(Some((size_bytes, area)))
}

/// Picks one volume's members from a scan: by uuid, or by name when no
/// other volume found carries it. The error says what was found instead.
pub fn select<'d>(
    d: &'d Discovery,
    uuid: Option<&str>,
    name: Option<&str>,
) -> Result<&'d FoundVolume> {
    let matching: Vec<&FoundVolume> = d
        .volumes
        .iter()
        .filter(|v| uuid.is_none_or(|u| uuid_string(&v.uuid).eq_ignore_ascii_case(u.trim())))
        .filter(|v| name.is_none_or(|n| v.name == n))
        .collect();
    let wanted = match (uuid, name) {
        (Some(u), _) => format!("volume {u}"),
        (None, Some(n)) => format!("volume '{n}'"),
        (None, None) => {
            return Err(CliError(
                "name the volume: --name NAME or --uuid UUID".into(),
            ))
        }
    };
    match matching.as_slice() {
        [v] => Ok(v),
        [] if name.is_some_and(|n| d.pools.iter().any(|p| p.name == n)) => {
            let n = name.expect("named");
            Err(CliError(format!(
                "'{n}' is a pool, not a volume: serve every volume of it with `platter serve \
                 --pool {n} PATH...`"
            )))
        }
        [] => {
            let seen: Vec<String> = d
                .volumes
                .iter()
                .map(|v| format!("'{}' ({})", printable(&v.name), uuid_string(&v.uuid)))
                .collect();
            Err(CliError(format!(
                "{wanted}: no member found among {} devices and files looked at{}",
                d.looked_at,
                if seen.is_empty() {
                    String::new()
                } else {
                    format!(" (found: {})", seen.join(", "))
                }
            )))
        }
        many => Err(CliError(format!(
            "{wanted}: {} volumes carry this name ({}); choose one with --uuid",
            many.len(),
            many.iter()
                .map(|v| uuid_string(&v.uuid))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

fn volume_line(v: &FoundVolume) -> (String, String) {
    match &v.assembly {
        Ok(a) => {
            let online = a
                .health
                .iter()
                .filter(|h| **h == platter_core::volume::Health::Online)
                .count();
            (
                format!(
                    "{}, {} of {} members, {}",
                    a.label.level.name(),
                    online,
                    a.label.member_count,
                    platter_core::units::format_size(a.geometry.volume_size_bytes())
                ),
                crate::listing::volume_state(a),
            )
        }
        Err(e) => (
            format!("{} member labels found", v.paths.len()),
            format!("cannot be assembled: {e}"),
        ),
    }
}

pub fn render(d: &Discovery) -> String {
    let mut s = String::new();
    for v in &d.volumes {
        let (what, state) = volume_line(v);
        let _ = writeln!(
            s,
            "volume '{}' {}: {what}: {state}",
            printable(&v.name),
            uuid_string(&v.uuid)
        );
        match &v.assembly {
            Ok(a) => {
                for slot in 0..a.label.member_count as usize {
                    let path = a.slot_device[slot]
                        .map(|i| v.paths[i].as_str())
                        .or_else(|| slot_path_left_out(a, slot, &v.paths))
                        .unwrap_or("-");
                    let _ = writeln!(
                        s,
                        "  slot {slot:<3} {:<12} {path}",
                        crate::listing::slot_state(a, slot)
                    );
                }
                for d in &a.superseded {
                    let _ = writeln!(
                        s,
                        "  {:<8} {:<12} {} ({})",
                        "",
                        "superseded",
                        v.paths[d.device],
                        superseded_by(v, a, d)
                    );
                }
            }
            Err(_) => {
                for p in &v.paths {
                    let _ = writeln!(s, "  {p}");
                }
            }
        }
    }
    render_pools(&mut s, &d.pools);
    for name in d.shared_names() {
        let _ = writeln!(
            s,
            "note: more than one volume is named '{}': serve one with --uuid",
            printable(name)
        );
    }
    for (p, e) in &d.damaged {
        let _ = writeln!(s, "damaged label: {p}: {e}");
    }
    for (p, e) in &d.unreadable {
        let _ = writeln!(s, "unreadable: {p}: {e}");
    }
    let _ = writeln!(
        s,
        "{} looked at: {} volume{}, {} damaged label{}, {} unreadable",
        d.looked_at,
        d.volumes.len(),
        if d.volumes.len() == 1 { "" } else { "s" },
        d.damaged.len(),
        if d.damaged.len() == 1 { "" } else { "s" },
        d.unreadable.len()
    );
    s
}

/// Each pool found: its drives found and missing, and how to serve it.
fn render_pools(s: &mut String, pools: &[FoundPool]) {
    for p in pools {
        let _ = writeln!(
            s,
            "pool '{}' {}: {} of {} drives, generation {}, volumes: {} (platter list; serve --pool {})",
            p.name,
            p.uuid,
            p.drives.len(),
            p.drives.len() + p.missing.len(),
            p.generation,
            if p.volumes.is_empty() { "none".to_string() } else { p.volumes.join(", ") },
            p.name
        );
        let state = |drive: &str| {
            p.not_up
                .iter()
                .find(|(d, _)| d == drive)
                .map_or(String::new(), |(_, st)| format!(" ({st})"))
        };
        for (drive, path) in &p.drives {
            let _ = writeln!(s, "  drive {drive:<8} {path}{}", state(drive));
        }
        for drive in &p.missing {
            let _ = writeln!(s, "  drive {drive:<8} missing{}", state(drive));
        }
    }
}

/// What took a superseded device's slot, for people.
fn superseded_by(v: &FoundVolume, a: &Assembly, d: &Superseded) -> String {
    let now = match d.by_member_uuid {
        None => "is empty now".to_string(),
        Some(u) => {
            let at = v
                .labels
                .iter()
                .position(|l| l.member_uuid == u)
                .map_or(String::new(), |i| format!(" at {}", v.paths[i]));
            format!("now holds member {}{at}", uuid_string(&u))
        }
    };
    format!(
        "was slot {} at events {}; slot {} {now}, events {}; platter wipe clears it",
        d.slot, d.event_counter, d.slot, a.label.event_counter
    )
}

/// A slot's device that the assembly left out (too small), by its path.
fn slot_path_left_out<'p>(a: &Assembly, slot: usize, paths: &'p [String]) -> Option<&'p str> {
    match &a.notes[slot] {
        platter_core::assemble::SlotNote::TooSmall { member, .. } => {
            paths.iter().find(|p| *p == member).map(String::as_str)
        }
        _ => None,
    }
}

#[derive(Serialize)]
struct DiscoveryJson<'a> {
    volumes: Vec<FoundJson>,
    pools: &'a [FoundPool],
    /// Names carried by more than one volume.
    shared_names: Vec<String>,
    damaged: Vec<PathReason>,
    unreadable: Vec<PathReason>,
    looked_at: usize,
}

#[derive(Serialize)]
struct FoundJson {
    name: String,
    uuid: String,
    /// As `status` says it (clean, degraded, failed...), or null when the
    /// members found cannot be assembled (`error` says why).
    state: Option<String>,
    error: Option<String>,
    level: Option<String>,
    size_bytes: Option<u64>,
    member_count: Option<u32>,
    members_online: Option<u32>,
    members: Vec<FoundMemberJson>,
}

#[derive(Serialize)]
struct FoundMemberJson {
    path: String,
    slot: u32,
    /// As `status` names the slot's state, for the device filling it;
    /// `superseded` for a device whose slot went to another member.
    state: Option<String>,
    event_counter: u64,
    /// For a superseded device: the member holding its slot now (null
    /// when the slot is empty) and where it was found.
    superseded_by: Option<SupersededByJson>,
}

#[derive(Serialize)]
struct SupersededByJson {
    member_uuid: Option<String>,
    path: Option<String>,
}

#[derive(Serialize)]
struct PathReason {
    path: String,
    reason: String,
}

/// The device found `i`-th for volume `v` (assembled as `a`, if it is).
fn member_json(v: &FoundVolume, a: Option<&Assembly>, i: usize) -> FoundMemberJson {
    let l = &v.labels[i];
    let slot = l.slot;
    let gone = a.and_then(|a| a.superseded.iter().find(|d| d.device == i));
    let state = match gone {
        Some(_) => Some("superseded".to_string()),
        None => a.and_then(|a| {
            (a.slot_device.get(slot as usize) == Some(&Some(i)))
                .then(|| crate::listing::slot_state(a, slot as usize))
        }),
    };
    FoundMemberJson {
        path: v.paths[i].clone(),
        slot,
        state,
        event_counter: l.event_counter,
        superseded_by: gone.map(|d| SupersededByJson {
            member_uuid: d.by_member_uuid.map(|u| uuid_string(&u)),
            path: d.by_member_uuid.and_then(|u| {
                let at = v.labels.iter().position(|l| l.member_uuid == u)?;
                Some(v.paths[at].clone())
            }),
        }),
    }
}

fn json(d: &Discovery) -> DiscoveryJson<'_> {
    let volumes = d
        .volumes
        .iter()
        .map(|v| {
            let a = v.assembly.as_ref().ok();
            let members = (0..v.paths.len()).map(|i| member_json(v, a, i)).collect();
            FoundJson {
                name: printable(&v.name).into_owned(),
                uuid: uuid_string(&v.uuid),
                state: a.map(crate::listing::volume_state),
                error: v.assembly.as_ref().err().map(|e| e.to_string()),
                level: a.map(|a| a.label.level.name().to_string()),
                size_bytes: a.map(|a| a.geometry.volume_size_bytes()),
                member_count: a.map(|a| a.label.member_count),
                members_online: a.map(|a| {
                    a.health
                        .iter()
                        .filter(|h| **h == platter_core::volume::Health::Online)
                        .count() as u32
                }),
                members,
            }
        })
        .collect();
    let pr = |v: &[(String, String)]| {
        v.iter()
            .map(|(p, r)| PathReason {
                path: p.clone(),
                reason: r.clone(),
            })
            .collect()
    };
    DiscoveryJson {
        volumes,
        pools: &d.pools,
        shared_names: d.shared_names().into_iter().map(str::to_string).collect(),
        damaged: pr(&d.damaged),
        unreadable: pr(&d.unreadable),
        looked_at: d.looked_at,
    }
}
