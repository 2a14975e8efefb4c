//! What a volume's labels say of it, in `platter status --json`'s words.
//! The live status (from the server's label) and the offline one (from the
//! freshest member's) are both built from these, so that a field one of
//! them shows is never missing from the other.

use crate::manage::filesystem_json;
use platter_core::assemble::uuid_string;
use platter_core::geometry::Geometry;
use platter_core::intent::IntentLayout;
use platter_core::label::{Label, ScrubRecord};
use platter_core::Level;
use serde_json::{json, Map, Value};

/// The layout as people name it: the parity layout of raid5 and raid6,
/// "near, N copies" for raid10; `None` for levels that have no choice.
pub fn layout_name(g: &Geometry) -> Option<String> {
    match g.level() {
        Level::Raid5 | Level::Raid6 => Some(g.spec().parity_layout.name().to_string()),
        Level::Raid10 => Some(format!("near, {} copies", g.copies())),
        _ => None,
    }
}

/// The volume's own facts: identity, layout, where things are on each
/// member, what it keeps (checksums, a partial parity log) and when its
/// labels were made and last written.
pub fn volume_fields(label: &Label, g: &Geometry) -> Map<String, Value> {
    let checksums = label.checksums;
    let parity = g.level().is_parity();
    let fields = json!({
        "name": label.name,
        "uuid": uuid_string(&label.volume_uuid),
        "level": g.level().name(),
        "layout": layout_name(g),
        "parity_layout": parity.then(|| g.spec().parity_layout.name()),
        "copies": g.copies(),
        "interleave_bytes": g.interleave_bytes(),
        "stripe_data_bytes": g.stripe_data_bytes(),
        "filesystem": filesystem_json(g),
        // Where the data starts on every member: the room before it is
        // what an in-place reshape moves the data down into.
        "data_offset_bytes": g.spec().data_offset_bytes,
        "member_count": g.members(),
        "event_counter": label.event_counter,
        // What the freshest label says (clean, dirty...): `state` shows
        // "degraded" whenever a member is lost, which would hide a crash.
        "label_state": label.state.name(),
        "created_unix_seconds": label.created_unix_seconds,
        "updated_unix_seconds": label.updated_unix_seconds,
        "checksums": checksums.map(|c| c.algorithm.name()),
        "checksum_pages": checksums.map(|c| c.format.name()),
        "checksum_offset_bytes": checksums.map(|c| c.area_offset_bytes),
        "consistency_policy": parity.then(|| if label.ppl.is_some() { "ppl" } else { "resync" }),
    });
    match fields {
        Value::Object(map) => map,
        _ => unreachable!("json! of an object"),
    }
}

/// A slot's facts from the label's table: its member's uuid, the data
/// bytes it has and those the volume uses.
pub fn member_fields(label: &Label, g: &Geometry, slot: u32) -> Map<String, Value> {
    let entry = &label.slots[slot as usize];
    let mut m = Map::new();
    m.insert("slot".into(), json!(slot));
    m.insert("member_uuid".into(), json!(uuid_string(&entry.member_uuid)));
    m.insert("data_size_bytes".into(), json!(entry.data_size_bytes));
    m.insert("used_bytes".into(), json!(g.member_used_bytes(slot)));
    m
}

/// The write-intent bitmap: its regions, their size in volume bytes, and
/// how many are marked (`dirty_regions`).
pub fn bitmap_fields(
    layout: &IntentLayout,
    g: &Geometry,
    dirty_regions: u64,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("regions".into(), json!(layout.regions));
    m.insert(
        "region_bytes".into(),
        json!(layout.region_stripes * g.stripe_data_bytes()),
    );
    m.insert("dirty_regions".into(), json!(dirty_regions));
    m
}

/// The labels' record of the last look at the whole volume (scheduled
/// scrub, or a whole-volume check or repair): when it ended and what it
/// found, and the pass in progress.
pub fn scrub_record_fields(r: &ScrubRecord, stripes: u64) -> Map<String, Value> {
    let mut m = Map::new();
    let in_progress = (r.started_unix_seconds != 0).then(|| {
        json!({
            "started_unix_seconds": r.started_unix_seconds,
            "cursor_stripes": r.cursor_stripes,
            "stripes": stripes,
            "found_stripes": r.found_stripes,
        })
    });
    m.insert("in_progress".into(), json!(in_progress));
    m.insert(
        "last_completed_unix_seconds".into(),
        json!((r.completed_unix_seconds != 0).then_some(r.completed_unix_seconds)),
    );
    m.insert("last_found_stripes".into(), json!(r.last_found_stripes));
    m
}
