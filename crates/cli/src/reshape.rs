//! `platter reshape` (and `platter grow`): change a stopped volume's layout
//! in place. This writes the labels only: the new members' labels and
//! a reshape record on every member (docs/reshape.md). The next
//! `platter serve` moves the data while it serves, resuming after a
//! crash from the labels.

pub mod added;

use crate::error::{CliError, Result};
use crate::members::{assemble_devices, foreign_label, open_all};
use crate::out::outln;
use clap::Args;
use platter_core::geometry::Geometry;
use platter_core::label::VolumeState;
use platter_core::reshape::{
    q_member_label, q_on_added_member, redundancy_lost, refuse_to_begin, remedies,
    reserved_from_bytes, reshaped_label, target, Asked, Plan, UndoArea,
};
use platter_core::units::{format_size, parse_size};
use platter_core::{Level, ParityLayout};
use platter_io::{Member, OpenOptions};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

#[derive(Args)]
pub struct ReshapeArgs {
    /// A device to add to the volume (repeat for more): a blank file,
    /// block device or NBD export at least as large as the members.
    #[arg(long = "add", value_name = "MEMBER")]
    add: Vec<String>,
    /// The new interleave (any multiple of 512: 126s, 64k, 1M). With no
    /// member added, every window is first saved in each member's reserved
    /// area before its data (1 MiB from `platter create`): interleaves up
    /// to about 1 MiB.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    interleave: Option<u64>,
    /// The new level: raid5 (from a mirror of two, with a member added) or
    /// raid6 (from raid5: with one member added, Q goes on it and nothing
    /// moves, md's --layout=preserve; with two or more, or with --layout
    /// naming an ordinary raid6 layout, the data moves). One that survives
    /// fewer lost members than the volume's (raid6 to raid5, raid5 to
    /// stripe) needs --force.
    #[arg(long, value_name = "LEVEL", value_parser = crate::values::level())]
    level: Option<Level>,
    /// The new parity layout for raid5/raid6 (left-symmetric,
    /// left-asymmetric, right-symmetric, right-asymmetric).
    #[arg(long, value_name = "NAME", value_parser = crate::values::layout())]
    layout: Option<String>,
    /// Create files to add that do not exist, of this size (sparse).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    member_size: Option<u64>,
    /// Say what would change, how much data moves and about how long it
    /// takes (the members' read speed measured now), and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Overwrite a device to add that carries another volume's label, and
    /// allow a reshape that lowers the volume's redundancy (raid6 to
    /// raid5, raid5 to stripe or concat, a mirror to fewer copies), which
    /// is refused without it. With --abort: abort although the member that
    /// keeps the reshape's backup is missing.
    #[arg(long)]
    force: bool,
    /// Cancel a reshape that has moved nothing for good yet (the labels
    /// stand at position 0): the labels go back to the old layout and the
    /// added members' labels are erased. Give the old members (the added
    /// ones too, when present). A reshape that has moved data can only go
    /// forward: serve the volume.
    #[arg(long, conflicts_with_all = ["add", "interleave", "level", "layout", "dry_run", "control"])]
    abort: bool,
    /// Reshape a running volume through its server's control socket
    /// instead: the server pauses its clients for a moment, writes the
    /// labels and moves the data while it serves.
    #[arg(long, value_name = "PATH", conflicts_with = "members")]
    control: Option<std::path::PathBuf>,
    /// With --control: print the server's answer as JSON.
    #[arg(long, requires = "control")]
    json: bool,
    /// The volume's members (any order): files, block devices or nbd://
    /// URIs. The volume must be stopped (a server holds its members).
    #[arg(value_name = "MEMBER", required_unless_present = "control")]
    members: Vec<String>,
}

/// `reshape --control`: the server starts the reshape of the running
/// volume (`grow.rs` there).
fn through_server(args: &ReshapeArgs, control: &std::path::PathBuf) -> Result<()> {
    let mut req = serde_json::json!({ "cmd": "reshape" });
    let add = args
        .add
        .iter()
        .map(|p| crate::control::resolved(p))
        .collect::<Result<Vec<_>>>()?;
    req["add"] = serde_json::json!(add);
    if let Some(s) = args.member_size {
        req["size_bytes"] = serde_json::json!(s);
    }
    if let Some(il) = args.interleave {
        req["interleave_bytes"] = serde_json::json!(il);
    }
    if let Some(level) = args.level {
        req["level"] = serde_json::json!(level.name());
    }
    if let Some(layout) = &args.layout {
        req["layout"] = serde_json::json!(layout);
    }
    req["force"] = serde_json::json!(args.force);
    req["dry_run"] = serde_json::json!(args.dry_run);
    let v = crate::control::ask(control, req)?;
    crate::control::show(args.json, &v, |v| {
        let g = |side: &str| {
            let s = &v[side];
            format!(
                "{} of {} members, interleave {}",
                s["level"].as_str().unwrap_or("?"),
                s["members"],
                format_size(s["interleave_bytes"].as_u64().unwrap_or(0))
            )
        };
        outln!("{} -> {}", g("from"), g("to"));
        let (what, bytes) = match v["q_bytes"].as_u64() {
            Some(q) => (
                format!(
                    "no data moves ({} layout: Q on the added member); writes Q,",
                    v["to"]["layout"].as_str().unwrap_or("?")
                ),
                q,
            ),
            None => ("moves".to_string(), v["moves_bytes"].as_u64().unwrap_or(0)),
        };
        match v["rate_limit_bytes_per_sec"].as_u64() {
            Some(rate) => outln!(
                "{what} {} at the rate limit {}/s: about {} s",
                format_size(bytes),
                format_size(rate),
                v["seconds_at_rate_limit"]
            ),
            None => outln!(
                "{what} {} with no rate limit (rebuild-rate unlimited): as fast as the members go",
                format_size(bytes)
            ),
        }
        if let Some(why) = v["redundancy_lost"].as_str() {
            if args.force {
                outln!("{why} (--force)");
            } else {
                outln!("{why}: without --force the reshape is refused");
            }
        }
        if args.dry_run {
            outln!("dry run: nothing changed");
        } else {
            outln!(
                "reshape started: follow it with `platter status --watch --control {}`",
                control.display()
            );
        }
    });
    Ok(())
}

/// What a reshape does to the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// Moved into the new layout while served (`Reshaping`).
    Move,
    /// A concat's new members at its end: labels alone.
    ConcatGrow,
    /// RAID-5 to RAID-6 `_6`: Q rebuilt on the added member.
    QMember,
}

/// What to do about a reshape refused for lowering the redundancy; the
/// server's refusal says the same (`grow.rs`).
const HOW_TO_LOWER: &str =
    "give --force to reshape it anyway, or ask for a level that keeps the redundancy";

/// The server's default rebuild rate, which a reshape moves at.
const DEFAULT_RATE_BYTES_PER_SEC: u64 = 128 << 20;

/// Data read from each member to measure its speed for the estimate.
const MEASURE_BYTES: u64 = 16 << 20;

pub fn run(args: ReshapeArgs) -> Result<()> {
    if let Some(control) = &args.control {
        return through_server(&args, control);
    }
    if args.abort {
        return abort(&args);
    }
    refuse_named_twice(&args)?;
    let opts = OpenOptions {
        read_only: args.dry_run,
        ..OpenOptions::default()
    };
    let members = open_all(&args.members, opts).map_err(CliError::from)?;
    let volume = assemble_devices(members)?;
    let a = &volume.assembly;
    let label = &a.label;
    let name = platter_core::label::printable(&label.name).into_owned();
    refuse_to_begin(label, &a.health).map_err(|e| CliError(format!("volume '{name}': {e}")))?;
    if label.state != VolumeState::Clean {
        return Err(CliError(format!(
            "volume '{name}' was not shut down cleanly ({}): serve it and stop it once (its \
             resync runs) before reshaping",
            label.state
        )));
    }
    let old = a.geometry.clone();
    let asked = asked_of(&args)?;
    let q_member = q_on_added_member(&old, &asked);
    let new = match &q_member {
        Some(g) => g.clone(),
        None => target(&old, &asked).map_err(|e| CliError(e.0))?,
    };
    // Refused before any file is made or label written.
    let lowered = redundancy_lost(&old, &new);
    if let (Some(why), false, false) = (&lowered, args.force, args.dry_run) {
        return Err(CliError(format!("volume '{name}': {why}; {HOW_TO_LOWER}")));
    }
    let spec = new.spec();
    let needed = spec.data_offset_bytes
        + spec.member_data_bytes[old.members() as usize..]
            .first()
            .copied()
            .unwrap_or(0);
    let added = open_added(&args, &label.volume_uuid, needed)?;
    let d = Decided::new(&old, new, q_member.is_some(), &asked, label, &name)?;
    say_layouts(&name, &old, &d);
    say_moves(&old, &d, &volume.devices);
    match (&lowered, args.force) {
        (Some(why), false) => outln!("{why}: without --force the reshape is refused"),
        (Some(why), true) => outln!("{why} (--force)"),
        (None, _) => {}
    }
    if args.dry_run {
        outln!("dry run: nothing changed");
        return Ok(());
    }
    write_labels(&volume.devices, &added, label, &d.new, d.change)?;
    say_done(d.change);
    Ok(())
}

fn refuse_named_twice(args: &ReshapeArgs) -> Result<()> {
    for (i, spec) in args.add.iter().enumerate() {
        if args.members.contains(spec) || args.add[..i].contains(spec) {
            return Err(CliError(format!(
                "{spec} is named twice (it is already a member, or added twice)"
            )));
        }
    }
    Ok(())
}

fn asked_of(args: &ReshapeArgs) -> Result<Asked> {
    Ok(Asked {
        added_members: u32::try_from(args.add.len()).unwrap_or(u32::MAX),
        level: args.level,
        parity_layout: args
            .layout
            .as_deref()
            .map(str::parse::<ParityLayout>)
            .transpose()?,
        interleave_bytes: args.interleave,
    })
}

/// The reshape decided on: what it does to the data, and how.
struct Decided {
    change: Change,
    /// The windows' order and backups, for a reshape that moves data.
    plan: Option<Plan>,
    /// The layout it ends in: for a move, with the data offset the plan
    /// chose (it may be lower than the old: `Plan::choose`).
    new: Geometry,
    /// The room before the data the reshape may use.
    reserved: u64,
}

impl Decided {
    /// Refuses a move with no plan that fits the room before the data, and
    /// a new layout the volume's write-intent bitmap cannot cover.
    fn new(
        old: &Geometry,
        new: Geometry,
        q_member: bool,
        asked: &Asked,
        label: &platter_core::label::Label,
        name: &str,
    ) -> Result<Decided> {
        let mut plan = None;
        let reserved = reserved_from_bytes(old, &new, label.intent_region_stripes);
        let change = if q_member {
            Change::QMember
        } else if old.level() == Level::Concat && new.level() == Level::Concat {
            Change::ConcatGrow
        } else {
            plan = Some(
                Plan::choose(old.clone(), new.clone(), reserved).map_err(|e| {
                    let mut msg = format!("cannot reshape volume '{name}' in place: {e}");
                    if let Some(r) = remedies(old, asked, label.intent_region_stripes) {
                        msg += &format!("\n{r}");
                    }
                    CliError(msg)
                })?,
            );
            Change::Move
        };
        let new = plan.as_ref().map_or(new, |p| p.new_geometry().clone());
        if label.intent_region_stripes > 0 && new.redundancy() > 0 {
            platter_core::intent::IntentLayout::new(&new, label.intent_region_stripes).map_err(
                |e| CliError(format!("the write-intent bitmap for the new layout: {e}")),
            )?;
        }
        Ok(Decided {
            change,
            plan,
            new,
            reserved,
        })
    }
}

/// The layouts before and after, and where a move keeps its backups.
fn say_layouts(name: &str, old: &Geometry, d: &Decided) {
    let new = &d.new;
    let describe = |g: &Geometry| {
        format!(
            "{} of {} members, interleave {}",
            g.level(),
            g.members(),
            format_size(g.interleave_bytes())
        )
    };
    outln!(
        "volume '{name}': {} -> {}; size {} -> {}",
        describe(old),
        describe(new),
        format_size(old.volume_size_bytes()),
        format_size(new.volume_size_bytes())
    );
    match d.plan.as_ref().map(|p| (p.lead_bytes(), p.undo_area())) {
        Some((lead, _)) if lead > 0 => outln!(
            "the data moves {} lower on every member, into the room before it: nothing is \
             backed up, and {} of that room stays for a later reshape",
            format_size(lead),
            format_size(new.spec().data_offset_bytes.saturating_sub(d.reserved))
        ),
        Some((_, Some(UndoArea::Reserved { bytes, .. }))) => outln!(
            "every window is first backed up in the {} before each member's data (slower: \
             each byte is written twice)",
            format_size(bytes)
        ),
        _ => {}
    }
}

/// What the reshape moves or writes, and about how long that takes at the
/// members' read speed, measured now.
fn say_moves(old: &Geometry, d: &Decided, devices: &[Arc<dyn Member>]) {
    let new = &d.new;
    if d.change == Change::ConcatGrow {
        outln!("a concat grows at its end: no data moves");
        return;
    }
    let moved = match d.change {
        Change::Move => new.volume_size_bytes(),
        // Q is written: one member's worth.
        Change::QMember => new.member_used_bytes(old.members()),
        Change::ConcatGrow => 0,
    };
    if d.change == Change::QMember {
        outln!(
            "raid5 -> raid6 in the {} layout (the raid5 as it is, Q on the added member, as \
             md's --layout=preserve): no data moves, Q is written by rebuilding the added \
             member",
            new.spec().parity_layout
        );
    }
    let rate = measured_rate(devices);
    let limit = DEFAULT_RATE_BYTES_PER_SEC;
    let rate = rate.min(limit).max(1);
    outln!(
        "{} {} while it serves; about {} s at {}/s (the members' read speed \
         measured now, capped by the default rate limit; `platter rebuild-rate` changes it)",
        if d.change == Change::QMember {
            "writes Q,"
        } else {
            "moves"
        },
        format_size(moved),
        moved.div_ceil(rate),
        format_size(rate)
    );
}

/// What happens next, once the labels are written.
fn say_done(change: Change) {
    match change {
        Change::ConcatGrow => outln!("done: serve the volume to use its new size"),
        Change::QMember => outln!(
            "labels written: `platter serve` rebuilds Q on the added member while serving \
             (follow it with `platter status --control PATH --watch`); the volume survives a \
             second lost member once that is done"
        ),
        Change::Move => outln!(
            "labels written: `platter serve` moves the data while serving (follow it with \
             `platter status --control PATH --watch`); clients that connect after \
             the reshape ends see the new size"
        ),
    }
}

/// The devices to add, opened and checked. A dry run makes no file: one
/// that --member-size would make is only checked for its size.
fn open_added(
    args: &ReshapeArgs,
    volume_uuid: &[u8; 16],
    needed: u64,
) -> Result<Vec<Arc<dyn Member>>> {
    let to_make = |spec: &&String| {
        args.dry_run
            && args.member_size.is_some()
            && !spec.contains("://")
            && !Path::new(spec.as_str()).exists()
    };
    if let (Some(size), Some(spec)) = (args.member_size, args.add.iter().find(to_make)) {
        if size < needed {
            return Err(CliError(format!(
                "{spec}: --member-size {size} bytes is too small: a member of this volume needs {needed}"
            )));
        }
    }
    let present: Vec<String> = args.add.iter().filter(|s| !to_make(s)).cloned().collect();
    let opts = OpenOptions {
        create_size_bytes: args.member_size.filter(|_| !args.dry_run),
        read_only: args.dry_run,
        ..OpenOptions::default()
    };
    let added = open_all(&present, opts).map_err(CliError::from)?;
    for m in &added {
        check_added(m.as_ref(), volume_uuid, needed, args.force)?;
    }
    Ok(added)
}

/// Refuses a device that cannot be added: too small, one of this
/// volume's own, or another volume's (unless `force`).
fn check_added(m: &dyn Member, volume_uuid: &[u8; 16], needed: u64, force: bool) -> Result<()> {
    if m.size_bytes() < needed {
        return Err(CliError(format!(
            "{} is too small: {} bytes, and a member of this volume needs {needed}",
            m.describe(),
            m.size_bytes()
        )));
    }
    let area = platter_io::assembly::read_label_area(m)?;
    if let Ok(l) = platter_core::label::Label::decode(&area) {
        if &l.volume_uuid == volume_uuid {
            return Err(CliError(format!(
                "{} is already a member of this volume (slot {}): a reshape adds new devices",
                m.describe(),
                l.slot
            )));
        }
    }
    if !force {
        if let Some(what) = foreign_label(m, None)? {
            return Err(CliError(format!(
                "{}: {what}; use --force to overwrite it",
                m.describe()
            )));
        }
    }
    Ok(())
}

/// The slowest member's sequential read speed over a few MiB of its data
/// area, in bytes per second.
fn measured_rate(members: &[Arc<dyn Member>]) -> u64 {
    let mut slowest = u64::MAX;
    let mut buf = vec![0u8; 1 << 20];
    for m in members {
        let start = Instant::now();
        let mut read = 0u64;
        while read < MEASURE_BYTES.min(m.size_bytes().saturating_sub(1 << 20)) {
            if m.read_at((1 << 20) + read, &mut buf).is_err() {
                break;
            }
            read += buf.len() as u64;
        }
        let secs = start.elapsed().as_secs_f64().max(1e-6);
        if read > 0 {
            slowest = slowest.min((read as f64 / secs) as u64);
        }
    }
    slowest
}

/// The old members' labels first, then the added ones': a stop between
/// leaves the added members blank, and the volume's labels (the freshest)
/// name them as missing rather than the old members as stale.
fn write_labels(
    members: &[Arc<dyn Member>],
    added: &[Arc<dyn Member>],
    label: &platter_core::label::Label,
    new: &Geometry,
    change: Change,
) -> Result<()> {
    let added_uuids: Vec<[u8; 16]> = added
        .iter()
        .map(|_| *uuid::Uuid::new_v4().as_bytes())
        .collect();
    // Random, never 0: an undo record of another reshape (an earlier one
    // of this volume) is never put back.
    let id = u64::from_le_bytes(uuid::Uuid::new_v4().as_bytes()[..8].try_into().expect("8")) | 1;
    let mut l = match change {
        Change::Move => reshaped_label(label, new, &added_uuids, Some(id)),
        Change::ConcatGrow => reshaped_label(label, new, &added_uuids, None),
        Change::QMember => q_member_label(label, new, added_uuids[0]),
    };
    let n_old = label.member_count;
    l.event_counter += 1;
    l.updated_unix_seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let by_slot: Vec<(u32, &Arc<dyn Member>)> = members
        .iter()
        .map(|m| {
            let area = platter_io::assembly::read_label_area(m.as_ref())?;
            let own = platter_core::label::Label::decode(&area)
                .map_err(|e| CliError(format!("member {}: {e}", m.describe())))?;
            Ok((own.slot, m))
        })
        .collect::<Result<_>>()?;
    let with_added = by_slot
        .into_iter()
        .chain(added.iter().enumerate().map(|(i, m)| (n_old + i as u32, m)));
    for (slot, m) in with_added {
        m.write_at(0, &l.for_slot(slot).encode())?;
        m.flush()?;
    }
    Ok(())
}

/// `reshape --abort`: back to the old layout, when nothing has moved for
/// good. At position 0 the old layout is whole but for the first window
/// if it was cut short, and its undo record (on the first added member)
/// holds what it overwrote: put back first, as a restart would.
fn abort(args: &ReshapeArgs) -> Result<()> {
    let members = open_all(&args.members, OpenOptions::default()).map_err(CliError::from)?;
    let volume = assemble_devices(members)?;
    let a = &volume.assembly;
    let label = &a.label;
    let name = platter_core::label::printable(&label.name).into_owned();
    let (Some(r), Some(old)) = (label.reshape, a.old_geometry.clone()) else {
        return Err(CliError(format!("volume '{name}' is not being reshaped")));
    };
    if r.position_bytes != 0 {
        return Err(CliError(format!(
            "volume '{name}' has moved {} to the new layout for good: a reshape can only go \
             forward from there; serve the volume to let it finish",
            format_size(r.position_bytes)
        )));
    }
    let reserved = reserved_from_bytes(&old, &a.geometry, label.intent_region_stripes);
    let plan = Plan::new(old.clone(), a.geometry.clone(), reserved)
        .map_err(|e| CliError(format!("the labels' reshape: {e}")))?;
    let by_slot: Vec<Option<Arc<dyn Member>>> = a
        .slot_device
        .iter()
        .map(|d| d.map(|i| Arc::clone(&volume.devices[i])))
        .collect();
    if let Some(UndoArea::Added { slot, .. }) = plan.undo_area() {
        if a.health[slot as usize] != platter_core::volume::Health::Online && !args.force {
            return Err(CliError(format!(
                "slot {slot}, which keeps the reshape's backup, is not here: if the first \
                 window was cut short its old bytes are there; give that member, or --force \
                 to abort without it"
            )));
        }
    }
    platter_server::engine::resume::put_back_undo(
        &by_slot,
        &a.health,
        &plan,
        label.volume_uuid,
        &r,
    )
    .map_err(|e| CliError(e.to_string()))?;
    let n_old = r.old_member_count;
    let mut l = label.clone();
    l.reshape = None;
    l.level = r.old_level;
    l.parity_layout = r.old_parity_layout;
    l.copies = r.old_copies;
    l.interleave_bytes = r.old_interleave_bytes;
    l.data_offset_bytes = r.old_data_offset_bytes;
    l.member_count = n_old;
    l.slots.truncate(n_old as usize);
    l.volume_size_bytes = old.volume_size_bytes();
    l.event_counter += 1;
    for (slot, device) in by_slot.iter().enumerate() {
        let Some(m) = device else { continue };
        if (slot as u32) < n_old {
            m.write_at(0, &l.for_slot(slot as u32).encode())?;
        } else {
            // No longer a member: its label goes (a blank device again).
            m.write_at(0, &[0u8; platter_core::label::LABEL_BYTES])?;
        }
        m.flush()?;
    }
    outln!(
        "volume '{name}': reshape aborted; it is {} of {} members again, interleave {}",
        old.level(),
        old.members(),
        format_size(old.interleave_bytes())
    );
    Ok(())
}
