//! `platter`: create, inspect and serve volumes built from member devices.

mod advise;
mod calibrate;
mod config;
mod control;
mod create;
mod error;
mod examine;
mod listing;
mod manual;
mod members;
mod out;
mod partial;
mod pool;
mod progress;
mod reshape;
mod scan;
mod serve;
mod served;
mod sim;
mod simpool;
mod stats;
mod status;
mod status_text;
mod sweep;
mod values;
mod wipe;

use clap::{Parser, Subcommand};
use out::errln;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "platter",
    version,
    about = "A userspace volume manager: concat, stripe, mirror, RAID-10, RAID-5 and RAID-6 over files, block devices and NBD exports.",
    long_about = None,
    after_help = "Sizes take units: 126s (512-byte sectors), 64k, 1M, 2G.\n\
                  Example: platter create --level raid5 --interleave 64k --member-size 1G d/m0 d/m1 d/m2 d/m3"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write labels on members to make a new volume.
    Create(create::CreateArgs),
    /// Pools of drives, carved into volumes (vinum's drives, LVM's volume
    /// groups): `pool create POOL DEVICE...`, `pool add-drive`.
    #[command(subcommand)]
    Pool(pool::PoolCommand),
    /// A pool's volumes: `volume create POOL NAME --level L --size S
    /// DEVICE...`, `volume remove`.
    #[command(subcommand)]
    Volume(pool::VolumeCommand),
    /// A pool's subdisks: `subdisk move POOL V.pN.sM --to DRIVE`.
    #[command(subcommand)]
    Subdisk(pool::SubdiskCommand),
    /// A volume's plexes: `plex detach POOL VOLUME PLEX [--as NAME]`
    /// splits a mirror of plexes, `plex attach` joins the plex back.
    #[command(subcommand)]
    Plex(pool::PlexCommand),
    /// List pools found on devices: drives, volumes, plexes and subdisks,
    /// with states and sizes (vinum's list, LVM's lvs). Reads only.
    List(pool::ListArgs),
    /// Print a pool's configuration as text, which `pool create --config`
    /// takes back (vinum's printconfig). Reads only.
    Printconfig(pool::PrintconfigArgs),
    /// Read the members' labels and show the volume they make (or ask a
    /// running server with --control, and follow its rebuild with --watch);
    /// with no argument, list every volume served on this host.
    #[command(
        after_help = "Sizes are shown with units: 126s (512-byte sectors), 64k, 1M, 2G.\n\
                            Exit status: 0, or 1 on an error; with --test, 0 clean, 1 degraded, \
                            2 failed, 4 could not tell (mdadm --detail --test)."
    )]
    Status(status::StatusArgs),
    /// Assemble a volume from its members and serve it over NBD.
    Serve(serve::ServeArgs),
    /// Find volumes by the labels on their members: in /dev's block
    /// devices, or in the directories, files and devices given. Reads only.
    Scan(scan::ScanArgs),
    /// Print one device's platter label as it is on disk: every field,
    /// the slot table with each slot's state and when it left (like
    /// mdadm --examine). Reads only.
    Examine(examine::ExamineArgs),
    /// Erase the platter label of devices (like mdadm --zero-superblock),
    /// so that scan passes over them and create takes them without
    /// --force.
    #[command(
        long_about = "Erase the platter label (the first 4 KiB) of each device, like mdadm \
                      --zero-superblock, so that scan and serve --scan pass over it and create \
                      takes it without --force. Meant for an old disk whose slot went to another \
                      device (replace, or a spare taking over): scan shows it as superseded, and \
                      wipe takes it without more ado. A device that is still a member of its \
                      volume (its label current, or no newer label giving its slot away found \
                      in its directory or where --scan says), or whose label is damaged, needs \
                      --force. A member of a \
                      running volume is refused, --force or not: stop the volume first. Every \
                      device is checked before any is written; a refusal wipes none.",
        after_help = "Example: platter wipe /srv/disks/old-b.img"
    )]
    Wipe(wipe::WipeArgs),
    /// Take a member of a running volume out of use (it is marked faulty).
    /// Refused, unless --force, when the volume could then no longer serve
    /// all of its data.
    Fail(control::FailArgs),
    /// Take a failed member out of a running volume and close its device.
    #[command(
        long_about = "Take a failed member out of a running volume and close its device, so \
                      that it can be pulled or reused (like mdadm --remove). Only a faulty or \
                      missing member can be removed: fail an active one first. The slot stays \
                      empty (\"removed\"), also across restarts, until `platter replace` puts \
                      a new device in it; the old device, if given to `platter serve` again, \
                      is not used. Given a spare's path, removes that spare instead."
    )]
    Remove(control::MemberArgs),
    /// Change a stopped volume's layout in place: add members (grow),
    /// change its interleave, level or parity layout. The next serve moves
    /// the data while it serves.
    #[command(
        visible_alias = "grow",
        long_about = "Change a stopped volume's layout in place: add members (--add, also \
                      `platter grow`), change its interleave, level (mirror of two to raid5, \
                      raid5 to raid6, each with members added) or parity layout. This writes \
                      the labels only; the next `platter serve` moves the data front to back \
                      while serving, at the rebuild rate (`platter rebuild-rate`), and resumes \
                      from the labels after a crash or kill at any point. A concat grows at its \
                      end with nothing to move. Clients that connect once the reshape is done see \
                      the new size (NBD cannot tell a connected client of a new size: it \
                      reconnects). --dry-run says how much data moves and about how long it takes. \
                      See docs/reshape.md.",
        after_help = "Example: platter grow --add d/m4 d/m0 d/m1 d/m2 d/m3\n         \
                      platter reshape --interleave 126s --dry-run d/m0 d/m1 d/m2 d/m3"
    )]
    Reshape(reshape::ReshapeArgs),
    /// Put a new device in a member's place and rebuild it in the background.
    Replace(control::ReplaceArgs),
    /// Give a running volume a spare that takes over when a member fails.
    AddSpare(control::DeviceArgs),
    /// Bring back a member that left, rebuilding only what it missed.
    #[command(
        name = "re-add",
        long_about = "Bring back a member that left the running volume (a remote member whose \
                      connection dropped, a device pulled and plugged in again) still holding \
                      what it held then: only the regions written while it was away, which the \
                      write-intent bitmap kept, are rebuilt (like mdadm --re-add). The device's \
                      own label names its slot. Refused, with the reason, when more than the \
                      bitmap kept could differ on it: the slot was replaced since, the volume \
                      has no bitmap, or its label was written after it left (it was served on \
                      its own: a split brain); `platter replace` then rebuilds it whole."
    )]
    ReAdd(control::ReAddArgs),
    /// Read the whole volume and report where parity or copies disagree.
    #[command(
        after_help = "Exit status: 0 every stripe checked and in agreement; 1 mismatches found; \
                      2 some stripes could not be checked (a member lost) or the check failed."
    )]
    Check(control::ScrubArgs),
    /// Like check, and rewrite parity (from data) or copies (from the first).
    #[command(
        after_help = "Exit status: 0 every stripe checked, and any mismatch found repaired; \
                      2 some stripes could not be checked or repaired (a member lost) or the repair failed."
    )]
    Repair(control::ScrubArgs),
    /// Change the rebuild's rate limit while it runs (default 128M a
    /// second, serve's --rebuild-rate; `unlimited` for none).
    RebuildRate(control::RateArgs),
    /// Record a running volume's client requests to a file (fio iolog v3),
    /// or stop recording: `record --control PATH start FILE`, `stop`. The
    /// simulator replays it (`platter sim --workload fio:FILE`).
    Record(control::RecordArgs),
    /// Show a served volume's counters per volume, plex and member (reads,
    /// writes, multiblock and multistripe transfers, recovered reads,
    /// degraded writes, latencies), like vinum's `list -s`.
    #[command(
        after_help = "Definitions: docs/statistics.md. Rows: V the volume, P its plexes (a mirror has one per member, \
                      raid10 one per copy), M its members. Recover: recovered reads; Degraded: degraded writes; \
                      Out: requests (members: I/Os) in flight; p50/p99/Max: latency (volume: reads and writes)."
    )]
    Stats(stats::StatsArgs),
    /// Show or change how a running mirror or raid10 volume balances reads.
    #[command(
        long_about = "Show or change how a running mirror or raid10 volume chooses the copy \
                      each read goes to. The change applies to reads from now on and is \
                      recorded in every member's label, so it survives a restart (a \
                      --read-only server applies it until it stops). POLICY is one of: \
                      round-robin, split[:SIZE], load, prefer:SLOT, proximity[:WINDOW], auto \
                      (see platter create --help and docs/tuning.md). Without POLICY, shows \
                      the policy, what it amounts to now (auto resolved, defaults filled in) \
                      and which members spin."
    )]
    ReadPolicy(control::PolicyArgs),
    /// Simulate modelled disks in virtual time (see docs/simulator.md).
    #[command(subcommand)]
    Sim(sim::SimCommand),
    /// Run one workload over lists of levels, member counts, interleaves
    /// and read policies on modelled drives, in virtual time; print a
    /// table and write an SVG plot (see docs/simulator.md).
    Sweep(sweep::SweepArgs),
    /// Replay a recorded load (`serve --record`) over levels, interleaves
    /// and read policies on modelled drives, and say which layout serves it
    /// best, against the volume's own, with the `platter reshape` and
    /// `read-policy` commands that get there.
    Advise(advise::AdviseArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish or
    /// powershell); `scripts/setup` installs bash's.
    #[command(
        after_help = "Example: platter completions bash > /usr/share/bash-completion/completions/platter"
    )]
    Completions {
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print a manual page (roff), made from the same definitions as
    /// --help: platter(1), or a command's (`platter man serve` prints
    /// platter-serve(1)); `scripts/setup` installs them all (--out-dir).
    #[command(after_help = "Example: platter man serve | man -l -")]
    Man(manual::ManArgs),
}

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match parse(argv) {
        Ok(cli) => cli,
        Err(e) => {
            errln!("platter: error: {e}");
            return ExitCode::from(1);
        }
    };
    out::on_closed(on_closed(&cli.command));
    control::about_volume(about_volume(&cli.command).map(str::to_string));
    init_logging();
    // check and repair keep 1 for "mismatches found"; their failures are 2.
    let error_code = match &cli.command {
        Command::Check(_) | Command::Repair(_) => control::SCRUB_INCOMPLETE,
        // status --test keeps 1 and 2 for "degraded" and "failed".
        Command::Status(a) if a.test => status::TEST_UNKNOWN,
        _ => 1,
    };
    let result = match cli.command {
        Command::Create(args) => create::run(args),
        Command::Pool(c) => pool::run_pool(c),
        Command::Volume(c) => pool::run_volume(c),
        Command::Subdisk(c) => pool::run_subdisk(c),
        Command::Plex(c) => pool::run_plex(c),
        Command::List(a) => pool::list(a),
        Command::Printconfig(a) => pool::printconfig(a),
        Command::Status(args) => return exit(status::run(args), error_code),
        Command::Serve(args) => serve::run(args),
        Command::Scan(args) => return exit(scan::run(args), error_code),
        Command::Examine(args) => return exit(examine::run(args), error_code),
        Command::Wipe(args) => wipe::run(args),
        Command::Fail(a) => control::fail(a),
        Command::Remove(a) => control::remove(a),
        Command::Replace(a) => control::replace(a),
        Command::Reshape(a) => reshape::run(a),
        Command::ReAdd(a) => control::re_add(a),
        Command::AddSpare(a) => control::add_spare(a),
        Command::Check(a) => return exit(control::scrub(a, false), error_code),
        Command::Repair(a) => return exit(control::scrub(a, true), error_code),
        Command::RebuildRate(a) => control::rebuild_rate(a),
        Command::Record(a) => control::record(a),
        Command::Stats(a) => stats::run(a),
        Command::ReadPolicy(a) => control::read_policy(a),
        Command::Sim(c) => sim::run(c),
        Command::Sweep(a) => sweep::run(a),
        Command::Advise(a) => advise::run(a),
        // Made whole in memory first (as manual pages are): clap_complete
        // panics on a failed write.
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "platter", &mut script);
            out::write_bytes(&script);
            Ok(())
        }
        Command::Man(a) => manual::run(a, <Cli as clap::CommandFactory>::command()),
    };
    exit(result.map(|()| 0), error_code)
}

/// The volume of a pool's server the command asks about (`--volume`).
fn about_volume(command: &Command) -> Option<&str> {
    use control::AboutVolume;
    match command {
        Command::Status(a) => a.about(),
        Command::Stats(a) => a.about(),
        Command::Fail(a) => a.about(),
        Command::Remove(a) => a.about(),
        Command::Replace(a) => a.about(),
        Command::AddSpare(a) => a.about(),
        Command::ReAdd(a) => a.about(),
        Command::Check(a) | Command::Repair(a) => a.about(),
        Command::RebuildRate(a) => a.about(),
        Command::Record(a) => a.about(),
        Command::ReadPolicy(a) => a.about(),
        _ => None,
    }
}

/// What a closed stdout does to `command` (out.rs): commands that change
/// something as they go, or write files after they print, finish their
/// work; the others stop at once.
fn on_closed(command: &Command) -> out::OnClosed {
    use out::OnClosed::{Finish, Quit};
    match command {
        // Labels written member by member after the plan is printed
        // (reshape), the listing printed after them (create): never half
        // a volume's labels. serve goes on serving without its banner.
        Command::Create(_)
        | Command::Pool(_)
        | Command::Volume(_)
        | Command::Subdisk(_)
        | Command::Plex(_)
        | Command::Reshape(_)
        | Command::Serve(_)
        | Command::Wipe(_) => Finish,
        // Files written after the table (sweep's plot), or beside the
        // output (sim's iologs, calibrate's model).
        Command::Sweep(_) | Command::Sim(_) => Finish,
        // Read-only, or the control socket's commands: the server has made
        // the change (fail, replace, read-policy POLICY, ...) before its
        // answer is printed, and --wait / --watch only follow it.
        Command::Status(_)
        | Command::List(_)
        | Command::Printconfig(_)
        | Command::Scan(_)
        | Command::Examine(_)
        | Command::Fail(_)
        | Command::Remove(_)
        | Command::Replace(_)
        | Command::AddSpare(_)
        | Command::ReAdd(_)
        | Command::Check(_)
        | Command::Repair(_)
        | Command::RebuildRate(_)
        | Command::Record(_)
        | Command::Stats(_)
        | Command::ReadPolicy(_)
        | Command::Advise(_)
        | Command::Completions { .. }
        | Command::Man(_) => Quit,
    }
}

/// Logs to stderr; when systemd connected stderr to the journal
/// (`JOURNAL_STREAM` names stderr's device and inode), to the journal
/// natively instead, each field its own (`PLATTER_EVENT=member-failed`,
/// `PLATTER_SLOT=1`: `journalctl PLATTER_EVENT=member-failed` filters).
fn init_logging() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = || {
        tracing_subscriber::EnvFilter::try_from_env("PLATTER_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
    };
    let journald = stderr_is_the_journal()
        .then(tracing_journald::layer)
        .and_then(Result::ok)
        .map(|l| {
            l.with_field_prefix(Some("PLATTER".into()))
                .with_syslog_identifier("platter".into())
        });
    if let Some(layer) = journald {
        tracing_subscriber::registry()
            .with(filter())
            .with(layer)
            .init();
        return;
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter())
        // A closed stderr (`2>&1 | head`) loses the log lines; by default
        // the subscriber says so with `eprintln!`, which panics on the
        // same closed stderr, in whichever thread logged.
        .log_internal_errors(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Whether stderr is the stream systemd's `JOURNAL_STREAM` names
/// (`DEVICE:INODE`), as systemd.exec(5) says to check.
fn stderr_is_the_journal() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = stream.to_str().and_then(|s| s.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    std::fs::metadata("/proc/self/fd/2").is_ok_and(|m| m.dev() == dev && m.ino() == ino)
}

/// The command line, with `serve --config FILE NAME` replaced by the
/// volume's own command line from FILE (`config::serve_argv`).
fn parse(argv: Vec<std::ffi::OsString>) -> error::Result<Cli> {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().get_matches_from(argv.clone());
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let Command::Serve(serve) = &cli.command else {
        return Ok(cli);
    };
    let Some(file) = serve.config.clone() else {
        return Ok(cli);
    };
    let sub = matches
        .subcommand_matches("serve")
        .expect("serve's matches");
    let names: Vec<usize> = sub.indices_of("members").into_iter().flatten().collect();
    let [name_index] = names[..] else {
        return Err(error::CliError(
            "with --config FILE, name one volume of the file (platter serve --config FILE NAME)"
                .into(),
        ));
    };
    let serve_at = argv
        .iter()
        .position(|a| a == "serve")
        .expect("the subcommand");
    // clap counts indices from the subcommand, and `--option=value` as
    // two: map them back to words of the command line.
    let mut word_of: Vec<usize> = Vec::new();
    let mut options_end = false;
    for (i, word) in argv.iter().enumerate().skip(serve_at) {
        let w = word.to_string_lossy();
        options_end |= w == "--";
        let pair = !options_end && w.starts_with("--") && w.contains('=');
        word_of.extend(std::iter::repeat_n(i, if pair { 2 } else { 1 }));
    }
    let value_index = sub.index_of("config").expect("--config's value");
    let (value_at, name_at) = (word_of[value_index], word_of[name_index]);
    // `--config FILE` is two words; `--config=FILE` one.
    let flag_at = word_of[value_index - 1];
    let given: Vec<std::ffi::OsString> = argv
        .iter()
        .enumerate()
        .skip(serve_at + 1)
        .filter(|&(i, _)| i != name_at && i != flag_at && i != value_at)
        .map(|(_, a)| a.clone())
        .collect();
    let name = argv[name_at].to_string_lossy().into_owned();
    let command = Cli::command().mut_subcommand("serve", |c| c.args_override_self(true));
    let options = command.find_subcommand("serve").expect("serve").clone();
    let mut expanded = argv[..=serve_at].to_vec();
    expanded.extend(config::serve_argv(&file, &name, &options, given)?);
    let matches = command.get_matches_from(expanded);
    Ok(Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit()))
}

/// The exit code of a command's outcome; an error is printed first.
fn exit(result: error::Result<u8>, error_code: u8) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            errln!("platter: error: {e}");
            ExitCode::from(error_code)
        }
    }
}
