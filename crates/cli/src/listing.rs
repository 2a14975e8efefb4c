//! The volume listing, for people (a table after vinum's `list`) and for
//! programs (`--json`, the same facts).

use platter_core::assemble::{uuid_string, Assembly, SlotNote};
use platter_core::balance::ReadPolicy;
use platter_core::label::{Label, SlotState};
use platter_core::volume::Health;
use platter_io::assembly::{read_label_area, OpenVolume};
use platter_server::manage::leftout::LeftOutMember;
use platter_server::observe::describe;
use serde_json::{json, Value};

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

/// The label's read policy by name, or what is wrong with it.
fn read_policy_name(a: &Assembly) -> String {
    match ReadPolicy::from_label(a.label.read_policy, a.label.read_policy_arg) {
        Ok(p) => p.to_string(),
        Err(e) => format!("auto ({e})"),
    }
}

/// `status --json` of a stopped volume: the labels' facts, as the live
/// status shows them (`platter_server::observe::describe`), and what the members
/// found say: each slot's state and device, the bitmap's marked regions.
pub fn json(volume: &OpenVolume, unreadable: &[String]) -> Value {
    let a = &volume.assembly;
    let g = &a.geometry;
    let mut v = describe::volume_fields(&a.label, g);
    let offline = json!({
        "size_bytes": g.volume_size_bytes(),
        "state": volume_state(a),
        "members_online": a.health.iter().filter(|h| **h == Health::Online).count(),
        // As stored (`auto` stays `auto`); null for levels without copies.
        "read_policy": (g.copies() > 1).then(|| read_policy_name(a)),
        "reshape": reshape_json(a),
        "bitmap": bitmap_json(volume),
        "scrub": describe::scrub_record_fields(&a.label.scrub, g.stripes()),
        "members": (0..g.members()).map(|slot| member_json(volume, slot)).collect::<Vec<_>>(),
        "left_out": left_out(volume)
            .iter()
            .map(|m| m.json(a.label.event_counter, None))
            .collect::<Vec<_>>(),
        "superseded": superseded(volume),
        "unreadable": unreadable,
    });
    if let Value::Object(offline) = offline {
        v.extend(offline);
    }
    Value::Object(v)
}

/// A reshape the labels say is in progress: the layout it moves from and
/// how far it moved for good; null with none.
fn reshape_json(a: &Assembly) -> Value {
    match (a.label.reshape, a.old_geometry.as_ref()) {
        (Some(r), Some(old)) => json!({
            "from": platter_server::layout_json(old),
            "position_bytes": r.position_bytes,
            "total_bytes": a.geometry.volume_size_bytes(),
        }),
        _ => Value::Null,
    }
}

/// The bitmap as the members in use keep it: the regions marked on any of
/// them (a clean stop leaves none); null without one.
fn bitmap_json(volume: &OpenVolume) -> Value {
    match volume.intent() {
        Ok(Some((layout, marked))) => Value::Object(describe::bitmap_fields(
            &layout,
            &volume.assembly.geometry,
            marked.len(),
        )),
        Ok(None) => Value::Null,
        Err(e) => json!({ "error": e.to_string() }),
    }
}

/// A slot: the label's facts, its state, its device, and the event count
/// of that device's own label.
fn member_json(volume: &OpenVolume, slot: u32) -> Value {
    let a = &volume.assembly;
    let device = a.slot_device[slot as usize].map(|i| &volume.devices[i]);
    let events = device.and_then(|d| {
        let bytes = read_label_area(d.as_ref()).ok()?;
        Some(Label::decode(&bytes).ok()?.event_counter)
    });
    let mut m = describe::member_fields(&a.label, &a.geometry, slot);
    m.insert("state".into(), json!(slot_state(a, slot as usize)));
    m.insert("path".into(), json!(device.map(|d| d.describe())));
    m.insert("events".into(), json!(events));
    Value::Object(m)
}

fn names(volume: &OpenVolume) -> Vec<String> {
    volume
        .devices
        .iter()
        .map(|m| m.describe().to_string())
        .collect()
}

/// The slots a start would serve without: why each is out and the command
/// that brings it back once served (`CONTROL` for the control socket).
fn left_out(volume: &OpenVolume) -> Vec<LeftOutMember> {
    platter_server::manage::leftout::at_start(&volume.assembly, &names(volume), &Default::default())
}

/// Devices given whose label is superseded: their slot went to another
/// member since. Not used.
pub(crate) fn superseded(volume: &OpenVolume) -> Value {
    let a = &volume.assembly;
    let names = names(volume);
    a.superseded
        .iter()
        .map(|s| {
            let by_path = s.by_member_uuid.and_then(|u| {
                let slot = a.label.slots.iter().position(|e| e.member_uuid == u)?;
                Some(names[a.slot_device[slot]?].clone())
            });
            json!({
                "path": names[s.device],
                "slot": s.slot,
                "member_uuid": uuid_string(&s.member_uuid),
                "event_counter": s.event_counter,
                "by_member_uuid": s.by_member_uuid.map(|u| uuid_string(&u)),
                "by_path": by_path,
            })
        })
        .collect()
}

/// The volume for people: the same text as the live status.
pub fn render(volume: &OpenVolume, unreadable: &[String]) -> String {
    crate::status_text::render(&json(volume, unreadable))
}
