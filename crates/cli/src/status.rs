//! `platter status`: the volume as its members' labels describe it, or as
//! its server sees it (`--control`), or every volume served on this host
//! (no argument).

use crate::error::{CliError, Result};
use crate::members::assemble_devices;
use crate::out::{out, outln};
use clap::Args;
use platter_io::{open_member, Member, OpenOptions};
use serde_json::Value;
use std::sync::Arc;

/// `status --test` exit codes, as mdadm `--detail --test`: 0 every member
/// in use...
pub const TEST_CLEAN: u8 = 0;
/// ...1 members out (missing, failed, being rebuilt) and every byte
/// still served...
pub const TEST_DEGRADED: u8 = 1;
/// ...2 data the volume cannot serve...
pub const TEST_FAILED: u8 = 2;
/// ...4 no answer: no such volume, members unreadable, no server.
pub const TEST_UNKNOWN: u8 = 4;

#[derive(Args)]
pub struct StatusArgs {
    /// Print JSON for programs instead of a table for people.
    #[arg(long)]
    json: bool,
    /// Ask a running server instead of reading labels (its control socket).
    #[arg(long, value_name = "PATH", conflicts_with = "members")]
    control: Option<std::path::PathBuf>,
    /// With --control on a pool's server (`serve --pool`): which of its
    /// volumes.
    #[arg(long, value_name = "NAME", requires = "control")]
    volume: Option<String>,
    /// With --control: follow the rebuild or resync until it ends, with a
    /// progress bar on a terminal and one line per interval otherwise
    /// ("rebuild slot 2: 43.1% at 120M/s, ETA 12 s"; with --json, the
    /// status as one JSON object per line). Exits at once, saying so, when
    /// nothing runs; fails if a rebuild stops short (its member failed).
    #[arg(long, requires = "control")]
    watch: bool,
    /// Seconds between two looks with --watch (fractions allowed).
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = crate::progress::parse_interval, requires = "watch")]
    interval: std::time::Duration,
    /// Exit with the volume's health, as mdadm --detail --test: 0 clean
    /// (every member in use), 1 degraded (members out, every byte still
    /// served; a rebuild in progress counts), 2 failed (data it cannot
    /// serve), 4 could not tell (no such volume, members unreadable, no
    /// server on --control). With no MEMBER, the codes of every volume
    /// served here, OR-ed. The status is printed as without it.
    #[arg(long, conflicts_with = "watch")]
    pub test: bool,
    /// With no MEMBER and no --control: where servers link their control
    /// sockets (default: $PLATTER_RUN_DIR, else /run/platter; serve's
    /// --run-dir).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["members", "control"])]
    run_dir: Option<std::path::PathBuf>,
    /// The members to read (any order; a missing one shows as missing):
    /// files, block devices or nbd:// URIs. With none (and no --control),
    /// every volume served on this host, one line each.
    #[arg(value_name = "MEMBER")]
    members: Vec<String>,
}

/// The `--test` code of one status (offline or live).
pub fn test_code(v: &Value) -> u8 {
    let online = v["members_online"].as_u64();
    match (v["state"].as_str(), online, v["member_count"].as_u64()) {
        (Some("failed"), _, _) => TEST_FAILED,
        (Some(_), Some(online), Some(count)) if online < count => TEST_DEGRADED,
        (Some(_), Some(_), Some(_)) => TEST_CLEAN,
        _ => TEST_UNKNOWN,
    }
}

/// Prints the status; the answer is the exit code (`--test`'s, else 0).
pub fn run(args: StatusArgs) -> Result<u8> {
    let code = |v: &Value| if args.test { test_code(v) } else { 0 };
    if let Some(control) = &args.control {
        if args.watch {
            return crate::progress::watch(control, args.interval, args.json).map(|()| 0);
        }
        let v = crate::control::status(control, args.json)?;
        return Ok(code(&v));
    }
    if args.members.is_empty() {
        let listing = crate::served::gather(&crate::served::run_dir(args.run_dir.clone()))?;
        crate::served::print(&listing, args.json);
        if !args.test {
            return Ok(0);
        }
        // As mdadm --detail --test over several arrays: every code OR-ed.
        let unknown = if listing.not_answering.is_empty() {
            TEST_CLEAN
        } else {
            TEST_UNKNOWN
        };
        return Ok(listing
            .volumes
            .iter()
            .fold(unknown, |c, (_, v)| c | test_code(v)));
    }
    let v = offline(&args.members)?;
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&v).expect("JSON of plain data")
        );
    } else {
        out!("{}", crate::status_text::render(&v));
    }
    Ok(code(&v))
}

/// The status the members' labels give.
fn offline(specs: &[String]) -> Result<Value> {
    let opts = OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    };
    let mut members: Vec<Arc<dyn Member>> = Vec::new();
    let mut unreadable = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        if specs[..i].contains(spec) {
            return Err(CliError(format!("member {spec} is named twice")));
        }
        match open_member(spec, opts) {
            Ok(m) => members.push(Arc::from(m)),
            Err(e) => unreadable.push(e.to_string()),
        }
    }
    if members.is_empty() {
        return Err(CliError(unreadable.join("; ")));
    }
    let volume = assemble_devices(members)?;
    Ok(crate::listing::json(&volume, &unreadable))
}

impl crate::control::AboutVolume for StatusArgs {
    fn about(&self) -> Option<&str> {
        self.volume.as_deref()
    }
}
