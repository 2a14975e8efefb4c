//! The volume listing, for people (a table after vinum's `list`) and for
//! programs (`--json`, the same facts).

use platter_core::assemble::{uuid_string, Assembly, SlotNote};
use platter_core::balance::ReadPolicy;
use platter_core::label::{printable, SlotState};
use platter_core::units::format_size;
use platter_core::volume::Health;
use platter_core::Level;
use platter_io::Member;
use platter_server::leftout::LeftOutMember;
use serde::Serialize;
use std::fmt::Write;
use std::sync::Arc;

#[derive(Serialize)]
pub struct VolumeJson {
    name: String,
    uuid: String,
    level: String,
    layout: Option<String>,
    copies: u32,
    /// As stored (`auto` stays `auto`); null for levels without copies.
    read_policy: Option<String>,
    interleave_bytes: u64,
    stripe_data_bytes: u64,
    /// What mkfs should be told: `stripe_unit_bytes`, `stripe_width_bytes`,
    /// `xfs` and `ext4` commands, or `none` with the reason.
    filesystem: serde_json::Value,
    size_bytes: u64,
    state: String,
    /// What the freshest label says (clean, dirty...): `state` shows
    /// "degraded" whenever a member is lost, which would hide a crash.
    label_state: String,
    event_counter: u64,
    members_online: u32,
    member_count: u32,
    /// `crc32c`, `xxh3`, or null (`create --checksums`).
    checksums: Option<String>,
    /// With checksums, how their pages are kept: `bare` (volumes made
    /// before sealed pages: a zeroed page passes), `sealed`, or
    /// `sealed+records` (lost writes caught); where they start, and where
    /// the data area starts, in member bytes.
    checksum_pages: Option<String>,
    checksum_offset_bytes: Option<u64>,
    data_offset_bytes: u64,
    /// raid5/raid6: `resync` or `ppl` (`create --consistency-policy`);
    /// null for other levels.
    consistency_policy: Option<String>,
    /// A reshape in progress: the layout it moves from and how far it
    /// moved for good; null with none.
    reshape: Option<serde_json::Value>,
    members: Vec<MemberJson>,
    /// The slots a start would serve without: why each is out and the
    /// command that brings it back once served (`CONTROL` for the control
    /// socket's path).
    left_out: Vec<serde_json::Value>,
    /// Devices given whose label is superseded: their slot went to another
    /// member since. Not used.
    superseded: Vec<SupersededJson>,
    unreadable: Vec<String>,
}

#[derive(Serialize)]
pub struct SupersededJson {
    path: String,
    slot: u32,
    member_uuid: String,
    event_counter: u64,
    /// The member holding the slot now; null when it is empty.
    by_member_uuid: Option<String>,
    /// Its path, when it is among the devices given.
    by_path: Option<String>,
}

#[derive(Serialize)]
pub struct MemberJson {
    slot: u32,
    state: String,
    path: Option<String>,
    member_uuid: String,
    data_size_bytes: u64,
    used_bytes: u64,
}

pub(crate) fn volume_state(a: &Assembly) -> String {
    let lost = a.health.iter().filter(|h| **h != Health::Online).count() as u32;
    if lost == 0 {
        a.label.state.name().to_string()
    } else if a
        .geometry
        .serves_all(|m| a.health[m as usize] == Health::Online)
    {
        "degraded".to_string()
    } else {
        "failed".to_string()
    }
}

pub(crate) fn slot_state(a: &Assembly, slot: usize) -> String {
    // The slot was emptied by `platter remove`: a device given for it is the
    // one that left (and has an older label, so it would read as stale).
    if a.label.slots[slot].state == SlotState::Removed {
        return match a.notes[slot] {
            SlotNote::NotFound => "removed".to_string(),
            _ => "removed (device not used)".to_string(),
        };
    }
    match &a.notes[slot] {
        SlotNote::InUse => SlotState::Active.name().to_string(),
        SlotNote::NotFound => "missing".to_string(),
        SlotNote::Stale { event_counter } => {
            format!("stale (events {event_counter} < {})", a.label.event_counter)
        }
        SlotNote::Marked(s) => s.name().to_string(),
        SlotNote::TooSmall {
            size_bytes,
            needed_bytes,
            ..
        } => format!("too small ({size_bytes} of {needed_bytes} bytes)"),
    }
}

fn layout_name(a: &Assembly) -> Option<String> {
    match a.label.level {
        Level::Raid5 | Level::Raid6 => Some(a.label.parity_layout.name().to_string()),
        Level::Raid10 => Some(format!("near, {} copies", a.label.copies)),
        _ => None,
    }
}

/// The label's read policy by name, or what is wrong with it.
fn read_policy_name(a: &Assembly) -> String {
    match ReadPolicy::from_label(a.label.read_policy, a.label.read_policy_arg) {
        Ok(p) => p.to_string(),
        Err(e) => format!("auto ({e})"),
    }
}

pub fn json(a: &Assembly, members: &[Arc<dyn Member>], unreadable: &[String]) -> VolumeJson {
    let g = &a.geometry;
    VolumeJson {
        name: a.label.name.clone(),
        uuid: uuid_string(&a.label.volume_uuid),
        level: a.label.level.name().to_string(),
        layout: layout_name(a),
        copies: g.copies(),
        read_policy: (g.copies() > 1).then(|| read_policy_name(a)),
        interleave_bytes: g.interleave_bytes(),
        stripe_data_bytes: g.stripe_data_bytes(),
        filesystem: platter_server::filesystem_json(g),
        size_bytes: g.volume_size_bytes(),
        state: volume_state(a),
        label_state: a.label.state.name().to_string(),
        event_counter: a.label.event_counter,
        members_online: a.health.iter().filter(|h| **h == Health::Online).count() as u32,
        member_count: g.members(),
        checksums: a.label.checksums.map(|c| c.algorithm.name().to_string()),
        checksum_pages: a.label.checksums.map(|c| c.format.name().to_string()),
        checksum_offset_bytes: a.label.checksums.map(|c| c.area_offset_bytes),
        data_offset_bytes: a.label.data_offset_bytes,
        consistency_policy: g.level().is_parity().then(|| {
            if a.label.ppl.is_some() {
                "ppl"
            } else {
                "resync"
            }
            .to_string()
        }),
        reshape: a
            .label
            .reshape
            .zip(a.old_geometry.as_ref())
            .map(|(r, old)| {
                serde_json::json!({
                    "from": platter_server::layout_json(old),
                    "position_bytes": r.position_bytes,
                    "total_bytes": g.volume_size_bytes(),
                })
            }),
        members: (0..g.members())
            .map(|slot| MemberJson {
                slot,
                state: slot_state(a, slot as usize),
                path: a.slot_device[slot as usize].map(|i| members[i].describe().to_string()),
                member_uuid: uuid_string(&a.label.slots[slot as usize].member_uuid),
                data_size_bytes: a.label.slots[slot as usize].data_size_bytes,
                used_bytes: g.member_used_bytes(slot),
            })
            .collect(),
        left_out: left_out(a, members)
            .iter()
            .map(|m| m.json(a.label.event_counter, None))
            .collect(),
        superseded: superseded(a, members),
        unreadable: unreadable.to_vec(),
    }
}

fn names(members: &[Arc<dyn Member>]) -> Vec<String> {
    members.iter().map(|m| m.describe().to_string()).collect()
}

fn left_out(a: &Assembly, members: &[Arc<dyn Member>]) -> Vec<LeftOutMember> {
    platter_server::leftout::at_start(a, &names(members), &Default::default())
}

pub(crate) fn superseded(a: &Assembly, members: &[Arc<dyn Member>]) -> Vec<SupersededJson> {
    let names = names(members);
    a.superseded
        .iter()
        .map(|s| SupersededJson {
            path: names[s.device].clone(),
            slot: s.slot,
            member_uuid: uuid_string(&s.member_uuid),
            event_counter: s.event_counter,
            by_member_uuid: s.by_member_uuid.map(|u| uuid_string(&u)),
            by_path: s.by_member_uuid.and_then(|u| {
                let slot = a.label.slots.iter().position(|e| e.member_uuid == u)?;
                Some(names[a.slot_device[slot]?].clone())
            }),
        })
        .collect()
}

/// The text lines for a superseded device and the slots left out.
fn render_left_out(s: &mut String, a: &Assembly, j: &VolumeJson, members: &[Arc<dyn Member>]) {
    for m in left_out(a, members) {
        let _ = writeln!(
            s,
            "  left out: {} (once served)",
            m.line(a.label.event_counter, None)
        );
    }
    for d in &j.superseded {
        let by = match (&d.by_member_uuid, &d.by_path) {
            (Some(u), Some(p)) => format!("member {u} at {p}"),
            (Some(u), None) => format!("member {u}"),
            (None, _) => "nothing (removed)".to_string(),
        };
        let _ = writeln!(
            s,
            "  superseded: {} (slot {}, events {} < {}): slot {} now holds {by}; not used \
             (platter wipe {} clears its label)",
            d.path, d.slot, d.event_counter, j.event_counter, d.slot, d.path
        );
    }
}

pub fn render(a: &Assembly, members: &[Arc<dyn Member>], unreadable: &[String]) -> String {
    let j = json(a, members, unreadable);
    let mut s = String::new();
    let il = j.interleave_bytes;
    let _ = writeln!(
        s,
        "V {:<20} State: {:<9} Size: {} ({} bytes)",
        printable(&j.name),
        j.state,
        format_size(j.size_bytes),
        j.size_bytes
    );
    let _ = writeln!(s, "  UUID:       {}", j.uuid);
    let mut level = j.level.clone();
    if let Some(l) = &j.layout {
        let _ = write!(level, " ({l})");
    }
    let _ = writeln!(s, "  Level:      {level}");
    if let Some(p) = &j.read_policy {
        let _ = writeln!(s, "  Reads:      {p}");
    }
    let _ = writeln!(
        s,
        "  Interleave: {} ({}s), stripe {} of data",
        format_size(il),
        il / 512,
        format_size(j.stripe_data_bytes)
    );
    for line in platter_core::fsalign::alignment(&a.geometry).lines() {
        let _ = writeln!(s, "  Filesystem: {line}");
    }
    let mut keeps = Vec::new();
    if let (Some(c), Some(pages)) = (&j.checksums, &j.checksum_pages) {
        let how = match pages.as_str() {
            "bare" => "bare pages: a zeroed page passes; recreate for sealed pages",
            "sealed" => "sealed pages",
            _ => "sealed pages, lost writes caught",
        };
        keeps.push(format!("{c} checksums ({how})"));
    }
    if j.consistency_policy.as_deref() == Some("ppl") {
        keeps.push("a partial parity log".to_string());
    }
    if !keeps.is_empty() {
        let _ = writeln!(s, "  Keeps:      {}", keeps.join(", "));
    }
    if let (Some(r), Some(old)) = (a.label.reshape, a.old_geometry.as_ref()) {
        let _ = writeln!(
            s,
            "  Reshape:    from {} of {} members, interleave {}: {} of {} moved for good \
             (serve moves the rest; clients see {} until it ends)",
            old.level(),
            old.members(),
            format_size(old.interleave_bytes()),
            format_size(r.position_bytes),
            format_size(j.size_bytes),
            format_size(old.volume_size_bytes())
        );
    }
    let _ = writeln!(
        s,
        "  Members:    {}/{} online, events {}",
        j.members_online, j.member_count, j.event_counter
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "  {:<4} {:<26} {:>10} {:>10}  Path",
        "Slot", "State", "Size", "Used"
    );
    for m in &j.members {
        let _ = writeln!(
            s,
            "  {:<4} {:<26} {:>10} {:>10}  {}",
            m.slot,
            m.state,
            format_size(m.data_size_bytes),
            format_size(m.used_bytes),
            m.path.as_deref().unwrap_or("-")
        );
    }
    render_left_out(&mut s, a, &j, members);
    for u in unreadable {
        let _ = writeln!(s, "  warning: {u}");
    }
    s
}
