//! A volume started from fewer members than its labels expect: refused
//! unless asked (`serve --run`, mdadm's word), naming every member left
//! out and where it was last seen. A member the labels already record as
//! gone (faulty, removed, or missing when the volume last started) was not
//! merely forgotten on the command line and needs no `--run`.

use crate::error::{CliError, Result};
use platter_core::assemble::{uuid_string, Absence, Assembly, LeftOut};
use platter_core::label::printable;
use std::collections::BTreeMap;
use std::path::Path;

/// How the members were found: named, or by a scan of these paths.
pub enum Given<'a> {
    Named(&'a [String]),
    Scanned(&'a [String]),
}

/// The slots the labels expect but that were not given. Unless `run`,
/// refuses when any is left (beyond the `unreachable` remote members
/// named, which may be them); with it, answers where each was last seen,
/// by slot, for the log.
pub fn check(
    a: &Assembly,
    given: Given,
    unreachable: usize,
    run: bool,
) -> Result<BTreeMap<u32, String>> {
    let missing: Vec<LeftOut> = a
        .left_out()
        .into_iter()
        .filter(|l| l.why == Absence::NotGiven)
        .collect();
    // A volume that cannot serve all of its data without them is refused
    // anyway, `--run` or not, naming them (the server's refusal).
    let whole = a
        .geometry
        .serves_all(|m| a.health[m as usize] == platter_core::volume::Health::Online);
    if missing.is_empty() || !whole {
        return Ok(BTreeMap::new());
    }
    let seen = match given {
        Given::Named(members) => last_seen(a, &neighbourhood(members)),
        Given::Scanned(_) => BTreeMap::new(),
    };
    if run || missing.len() <= unreachable {
        return Ok(seen.into_iter().map(|(s, (p, _))| (s, p)).collect());
    }
    let where_looked = match given {
        Given::Named(_) => "not among the members given".to_string(),
        Given::Scanned(paths) => format!("not found by the scan of {}", scanned(paths)),
    };
    let each: Vec<String> = missing
        .iter()
        .map(|l| {
            let at = match seen.get(&l.slot) {
                Some((path, events)) => format!("last seen at {path}, events {events}"),
                None => "where it is now is not known".to_string(),
            };
            format!(
                "slot {} (member {}, {at})",
                l.slot,
                uuid_string(&l.member_uuid)
            )
        })
        .collect();
    let mut also = if unreachable > 0 {
        format!(" ({unreachable} remote member(s) named did not answer)")
    } else {
        String::new()
    };
    if let Given::Named(names) = given {
        for d in &a.superseded {
            also.push_str(&format!(
                " ({} is superseded: slot {} went to another member)",
                names[d.device], d.slot
            ));
        }
    }
    let is_are = if missing.len() == 1 { "is" } else { "are" };
    Err(CliError(format!(
        "volume '{}': {} of its {} members {is_are} {where_looked}, though its labels expect \
         them{also}: {}; give them, or --run to start it degraded without them (they then come \
         back with platter re-add)",
        printable(&a.label.name),
        missing.len(),
        a.label.member_count,
        each.join(", ")
    )))
}

fn scanned(paths: &[String]) -> String {
    if paths.is_empty() {
        crate::scan::DEFAULT_SCAN_DIR.to_string()
    } else {
        paths.join(" ")
    }
}

/// The directories the local members named are in: where a member left
/// out was most likely put.
fn neighbourhood(members: &[String]) -> Vec<String> {
    let mut dirs: Vec<String> = Vec::new();
    for m in members.iter().filter(|m| !m.contains("://")) {
        let dir = Path::new(m)
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let dir = dir.display().to_string();
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs
}

/// Where a scan of `dirs` finds each member of the volume, by slot: its
/// path and its label's event counter. Reads only; a directory that
/// cannot be scanned is passed over (this only adds to a message).
fn last_seen(a: &Assembly, dirs: &[String]) -> BTreeMap<u32, (String, u64)> {
    let mut seen = BTreeMap::new();
    if dirs.is_empty() {
        return seen;
    }
    let Ok(found) = crate::scan::discover(dirs) else {
        return seen;
    };
    let Some(v) = found.volumes.iter().find(|v| v.uuid == a.label.volume_uuid) else {
        return seen;
    };
    for (path, label) in v.paths.iter().zip(&v.labels) {
        let slot = label.slot;
        let expected = a.label.slots.get(slot as usize).map(|s| s.member_uuid);
        if expected == Some(label.member_uuid) {
            seen.entry(slot)
                .or_insert_with(|| (path.clone(), label.event_counter));
        }
    }
    seen
}
