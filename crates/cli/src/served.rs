//! `platter status` with no argument: every volume served on this host,
//! one line each, as /proc/mdstat lists md's arrays. Each `platter serve`
//! links its control socket into the run directory
//! (`platter_server::observe::registry`); this asks every socket found there. A
//! link a killed server left behind is removed, never listed.

use crate::control::exchange;
use crate::error::{CliError, Result};
use crate::out::{errln, outln};
use platter_core::label::printable;
use platter_server::observe::registry::{self, DEFAULT_RUN_DIR, RUN_DIR_ENV};
use serde_json::{json, Value};
use std::io::ErrorKind;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a server has to answer `status`: it answers from memory, on
/// a thread of its own, so this is only for one that hangs.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// The run directory: `--run-dir`, else `PLATTER_RUN_DIR`, else
/// /run/platter; a relative one made whole here, so that a server and a
/// reader started in different directories agree.
pub fn run_dir(given: Option<PathBuf>) -> PathBuf {
    let dir = given
        .or_else(|| {
            std::env::var_os(RUN_DIR_ENV)
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from(DEFAULT_RUN_DIR));
    std::path::absolute(&dir).unwrap_or(dir)
}

/// What the run directory's sockets said.
pub struct Listing {
    pub run_dir: PathBuf,
    /// Each served volume's control socket and live status.
    pub volumes: Vec<(PathBuf, Value)>,
    /// Sockets that accepted a connection and gave no status, with why.
    pub not_answering: Vec<(PathBuf, String)>,
    /// Pools' servers that serve no volume yet, by control socket.
    pub no_volume_yet: Vec<PathBuf>,
}

/// Asks every control socket in `run_dir` for its status. A link whose
/// server is gone (its process, or its socket) is removed; a socket
/// nobody listens on is passed over (the next server on its path
/// replaces it).
pub fn gather(run_dir: &Path) -> Result<Listing> {
    let entries = registry::entries(run_dir).map_err(|e| {
        CliError(format!(
            "cannot read the run directory {}: {e}",
            run_dir.display()
        ))
    })?;
    let mut listing = Listing {
        run_dir: run_dir.to_path_buf(),
        volumes: Vec::new(),
        not_answering: Vec::new(),
        no_volume_yet: Vec::new(),
    };
    let mut seen = std::collections::HashSet::new();
    for entry in entries {
        if entry.is_dead_link() {
            entry.remove_link();
            continue;
        }
        // A socket also linked (a server's link to a socket in this
        // directory) is asked once.
        let Ok(socket) = entry.path.canonicalize() else {
            entry.remove_link();
            continue;
        };
        if !seen.insert(socket.clone()) {
            continue;
        }
        let names = match ask(&socket, json!({ "cmd": "volumes" })) {
            Ok(Some(v)) => v.as_array().map(|a| {
                a.iter()
                    .filter_map(|n| n.as_str().map(str::to_string))
                    .collect::<Vec<String>>()
            }),
            // A server from before pools knows no "volumes": it has one.
            Ok(None) => None,
            Err(Gone) => {
                entry.remove_link();
                continue;
            }
        };
        // A pool's server answers for each of its volumes, if it has any.
        let asks: Vec<Value> = match names {
            Some(names) if names.is_empty() => {
                listing.no_volume_yet.push(socket.clone());
                Vec::new()
            }
            Some(names) if names.len() > 1 => names
                .into_iter()
                .map(|n| json!({ "cmd": "status", "volume": n }))
                .collect(),
            _ => vec![json!({ "cmd": "status" })],
        };
        for request in asks {
            let answer = UnixStream::connect(&socket)
                .map_err(|e| CliError(e.to_string()))
                .and_then(|stream| exchange(stream, &socket, request, ANSWER_TIMEOUT));
            match answer {
                Ok(v) => listing.volumes.push((socket.clone(), v)),
                Err(e) => listing.not_answering.push((socket.clone(), e.0)),
            }
        }
    }
    Ok(listing)
}

/// The socket's server is gone: its link goes.
struct Gone;

/// One request to `socket`: its answer, `None` when the server answers
/// with an error (it does not know the request), `Gone` when nobody
/// listens there.
fn ask(socket: &Path, request: Value) -> std::result::Result<Option<Value>, Gone> {
    let stream = match UnixStream::connect(socket) {
        Ok(s) => s,
        Err(e) if matches!(e.kind(), ErrorKind::ConnectionRefused | ErrorKind::NotFound) => {
            return Err(Gone)
        }
        Err(_) => return Ok(None),
    };
    Ok(exchange(stream, socket, request, ANSWER_TIMEOUT).ok())
}

/// What runs on a volume, from its status: "rebuild of member 2 43.1%",
/// "resync 12.0%", "reshape 50.0%", "scrub 3.2%".
fn work(v: &Value) -> Vec<Value> {
    let pct = |done: &Value, of: &Value| {
        let of = of.as_u64().unwrap_or(0).max(1);
        (1000.0 * done.as_u64().unwrap_or(0) as f64 / of as f64).round() / 10.0
    };
    let mut work = Vec::new();
    let r = &v["rebuild"];
    if !r.is_null() {
        work.push(json!({ "what": "rebuild", "member": r["member"],
                          "percent": pct(&r["cursor_stripe"], &r["stripes"]) }));
    }
    let r = &v["resync"];
    if !r.is_null() {
        work.push(json!({ "what": "resync", "percent": pct(&r["cursor_stripe"], &r["stripes"]) }));
    }
    let r = &v["reshape"];
    if !r.is_null() && r["finished"] != true {
        work.push(json!({ "what": "reshape", "stuck": r["stuck"],
                          "percent": pct(&r["position_bytes"], &r["total_bytes"]) }));
    }
    let r = &v["scrub"]["in_progress"];
    if !r.is_null() {
        work.push(json!({ "what": "scrub", "percent": pct(&r["cursor_stripes"], &r["stripes"]) }));
    }
    work
}

fn work_text(w: &Value) -> String {
    let what = w["what"].as_str().unwrap_or("?");
    let pct = w["percent"].as_f64().unwrap_or(0.0);
    match (w["member"].as_u64(), w["stuck"].is_string()) {
        (Some(m), _) => format!("{what} of member {m} {pct:.1}%"),
        (None, true) => format!("{what} STOPPED at {pct:.1}%"),
        (None, false) => format!("{what} {pct:.1}%"),
    }
}

/// One volume's line in `--json`: who, what state, its members, the work
/// in progress and where to ask for more.
fn summary(control: &Path, v: &Value) -> Value {
    json!({
        "name": v["name"],
        "uuid": v["uuid"],
        "level": v["level"],
        "state": v["state"],
        "members_online": v["members_online"],
        "member_count": v["member_count"],
        "work": work(v),
        "control": control,
    })
}

/// Prints the listing: a table for people, or JSON.
pub fn print(listing: &Listing, json_out: bool) {
    for (socket, why) in &listing.not_answering {
        errln!("platter: warning: {}: no status: {why}", socket.display());
    }
    let rows: Vec<Value> = listing.volumes.iter().map(|(c, v)| summary(c, v)).collect();
    if json_out {
        let not_answering: Vec<Value> = listing
            .not_answering
            .iter()
            .map(|(c, why)| json!({ "control": c, "error": why }))
            .collect();
        let all = json!({ "run_dir": listing.run_dir, "volumes": rows,
                          "not_answering": not_answering,
                          "no_volume_yet": listing.no_volume_yet });
        outln!(
            "{}",
            serde_json::to_string_pretty(&all).expect("JSON of plain data")
        );
        return;
    }
    for control in &listing.no_volume_yet {
        outln!(
            "a pool's server with no volume yet: {} (`platter volume create POOL NAME --level \
             LEVEL --size SIZE --control {}`)",
            control.display(),
            control.display()
        );
    }
    if rows.is_empty() && !listing.no_volume_yet.is_empty() {
        return;
    }
    if rows.is_empty() {
        outln!(
            "no volume is served here: no control socket in {} (volumes served without one, \
             by --listen alone or --stdio, cannot be listed)",
            listing.run_dir.display()
        );
        return;
    }
    outln!(
        "{:<20} {:<7} {:<10} {:<8} {:<28} Control",
        "Name",
        "Level",
        "State",
        "Members",
        "Work"
    );
    for r in &rows {
        let work: Vec<String> = r["work"]
            .as_array()
            .into_iter()
            .flatten()
            .map(work_text)
            .collect();
        outln!(
            "{:<20} {:<7} {:<10} {:<8} {:<28} {}",
            printable(r["name"].as_str().unwrap_or("?")),
            r["level"].as_str().unwrap_or("?"),
            r["state"].as_str().unwrap_or("?"),
            format!("{}/{}", r["members_online"], r["member_count"]),
            if work.is_empty() {
                "-".to_string()
            } else {
                work.join(", ")
            },
            r["control"].as_str().unwrap_or("?")
        );
    }
}
