//! `platter wipe DEVICE...`: erase platter labels (mdadm's
//! `--zero-superblock`), so that an old disk is passed over by `scan` and
//! can be reused without `--force`.
//!
//! Every device is checked before any is written: a refusal wipes
//! nothing. A device is opened the way a read-write `serve` claims its
//! members (an exclusive lock on a file, `O_EXCL` on a block device), so a
//! member of a running volume is refused, `--force` or not. A label whose
//! volume's newer labels gave its slot to another device (superseded) is
//! wiped without more ado; one that is still a member's (or damaged, or
//! alone, so that nothing says it was superseded) needs `--force`.

use crate::error::{CliError, Result};
use crate::out::outln;
use clap::Args;
use platter_core::assemble::uuid_string;
use platter_core::label::{is_blank, printable, Label, LABEL_BYTES};
use platter_io::assembly::{path_identity, read_label_area};
use platter_io::{open_member, Member, OpenOptions};

#[derive(Args)]
pub struct WipeArgs {
    /// Wipe a label that is still a member's (its volume loses that
    /// member), or a damaged one.
    #[arg(long)]
    force: bool,
    /// Where to look for the volume's newer labels, as `platter scan` does
    /// (directories, files, block devices, nbd:// URIs), besides each
    /// device's own directory. Repeatable.
    #[arg(long, value_name = "PATH")]
    scan: Vec<String>,
    /// The devices: files or block devices.
    #[arg(value_name = "DEVICE", required = true)]
    devices: Vec<String>,
}

pub fn run(args: WipeArgs) -> Result<()> {
    // A mistyped --scan would read as "nothing newer found".
    for p in args.scan.iter().filter(|p| !p.contains("://")) {
        std::fs::metadata(p).map_err(|e| CliError(format!("--scan {p}: {e}")))?;
    }
    let mut checked = Vec::new();
    for (i, spec) in args.devices.iter().enumerate() {
        if args.devices[..i].contains(spec) {
            return Err(CliError(format!("{spec} is named twice")));
        }
        checked.push(check(spec, &args, args.force)?);
    }
    for (spec, device, what) in checked {
        device
            .write_at(0, &[0u8; LABEL_BYTES])
            .and_then(|()| device.flush())
            .map_err(|e| CliError(format!("{spec}: wiping its label: {e}")))?;
        outln!("{spec}: wiped the platter label ({what})");
    }
    Ok(())
}

/// Opens `spec` as a writer and says what its label is, or why it may
/// not be wiped.
fn check(spec: &str, args: &WipeArgs, force: bool) -> Result<(String, Box<dyn Member>, String)> {
    if spec.contains("://") {
        return Err(CliError(format!(
            "{spec}: wipe works on files and block devices; wipe a remote export on its host"
        )));
    }
    if !std::path::Path::new(spec).exists() {
        return Err(CliError(format!("{spec}: no such file or device")));
    }
    let device = open_member(spec, OpenOptions::default()).map_err(|e| {
        let e = e.to_string();
        // A running server holds its members with a lock or O_EXCL.
        let hint = if e.contains("in use") {
            " (a member of a running volume: stop it first)"
        } else {
            ""
        };
        CliError(format!("{spec}: cannot be wiped: {e}{hint}"))
    })?;
    let area = read_label_area(device.as_ref()).map_err(|e| CliError(e.to_string()))?;
    if is_blank(&area) {
        return Err(CliError(format!(
            "{spec}: no platter label (blank or foreign device); nothing to wipe"
        )));
    }
    let label = match Label::decode(&area) {
        Ok(l) => l,
        Err(e) if force => return Ok((spec.into(), device, format!("damaged: {e}"))),
        Err(e) => {
            return Err(CliError(format!(
                "{spec}: carries a damaged platter label ({e}); --force wipes it"
            )))
        }
    };
    let what = format!(
        "volume '{}' {}, slot {}, events {}",
        printable(&label.name),
        uuid_string(&label.volume_uuid),
        label.slot,
        label.event_counter
    );
    match superseded(spec, &args.devices, &args.scan) {
        Some(by) => Ok((spec.into(), device, format!("{what}; {by}"))),
        None if force => Ok((spec.into(), device, what)),
        None => Err(CliError(format!(
            "{spec}: a current member of {what}: no newer label found (in its directory{}) \
             gives its slot to another device, so wiping it takes a member from the volume; \
             --scan PATH where the volume's other members are, or --force to wipe it anyway",
            if args.scan.is_empty() {
                ""
            } else {
                " or --scan"
            }
        ))),
    }
}

/// Whether a scan of `spec`'s directory (and of `scan`, and of the other
/// devices named) finds newer labels of its volume that gave its slot to
/// another device: what holds the slot now, if so.
fn superseded(spec: &str, all: &[String], scan: &[String]) -> Option<String> {
    let dir = std::path::Path::new(spec)
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let mut paths = vec![dir.display().to_string()];
    paths.extend(scan.iter().cloned());
    paths.extend(all.iter().filter(|d| *d != spec).cloned());
    let found = crate::scan::discover(&paths).ok()?;
    let id = path_identity(spec)?;
    found.volumes.iter().find_map(|v| {
        let a = v.assembly.as_ref().ok()?;
        let s = a
            .superseded
            .iter()
            .find(|s| path_identity(&v.paths[s.device]) == Some(id))?;
        Some(match s.by_member_uuid {
            Some(u) => format!(
                "superseded: slot {} is member {} since, events {}",
                s.slot,
                uuid_string(&u),
                a.label.event_counter
            ),
            None => format!("superseded: slot {} is empty since", s.slot),
        })
    })
}
