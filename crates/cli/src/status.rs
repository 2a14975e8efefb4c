//! `platter status`: the volume as its members' labels describe it.

use crate::error::{CliError, Result};
use crate::members::assemble_devices;
use crate::out::{out, outln};
use clap::Args;
use platter_io::{open_member, Member, OpenOptions};
use std::sync::Arc;

#[derive(Args)]
pub struct StatusArgs {
    /// Print JSON for programs instead of a table for people.
    #[arg(long)]
    json: bool,
    /// Ask a running server instead of reading labels (its control socket).
    #[arg(long, value_name = "PATH", conflicts_with = "members")]
    control: Option<std::path::PathBuf>,
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
    /// The members to read (any order; a missing one shows as missing):
    /// files, block devices or nbd:// URIs.
    #[arg(value_name = "MEMBER", required_unless_present = "control")]
    members: Vec<String>,
}

pub fn run(args: StatusArgs) -> Result<()> {
    if let Some(control) = &args.control {
        if args.watch {
            return crate::progress::watch(control, args.interval, args.json);
        }
        return crate::control::status(control, args.json);
    }
    let opts = OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    };
    let mut members: Vec<Arc<dyn Member>> = Vec::new();
    let mut unreadable = Vec::new();
    for (i, spec) in args.members.iter().enumerate() {
        if args.members[..i].contains(spec) {
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
    let (assembly, members) = (&volume.assembly, &volume.devices);
    if args.json {
        let v = crate::listing::json(assembly, members, &unreadable);
        outln!(
            "{}",
            serde_json::to_string_pretty(&v).expect("JSON of plain data")
        );
    } else {
        out!("{}", crate::listing::render(assembly, members, &unreadable));
    }
    Ok(())
}
