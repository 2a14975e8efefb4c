//! `platter examine DEVICE`: one member's label as it is on disk, every
//! field by its name in docs/on-disk-format.md (mdadm's `--examine`).
//! Reads only, without a claim, like `scan`.

use crate::error::{CliError, Result};
use crate::out::{out, outln};
use crate::status_text::utc;
use clap::Args;
use platter_core::assemble::uuid_string;
use platter_core::balance::ReadPolicy;
use platter_core::label::{
    at, computed_checksum, is_blank, printable, Label, LabelError, LABEL_BYTES, LABEL_MAGIC,
};
use platter_core::units::format_size;
use serde_json::{json, Map, Value};
use std::fmt::Write;

/// Exit status: the device holds no label this platter can read (blank,
/// foreign, damaged, or written by a newer platter).
pub const EXIT_NO_LABEL: u8 = 2;

#[derive(Args)]
#[command(
    after_help = "Exit status: 0 the label is shown; 1 the device cannot be read; 2 it holds \
                  no platter label (blank or foreign), or a damaged one, or one written by a \
                  newer platter."
)]
pub struct ExamineArgs {
    /// Print JSON for programs instead of text for people.
    #[arg(long)]
    json: bool,
    /// The device: a file, a block device or an nbd:// URI.
    #[arg(value_name = "DEVICE")]
    device: String,
}

pub fn run(args: ExamineArgs) -> Result<u8> {
    let path = &args.device;
    let area = match crate::scan::read_label_area(path) {
        Ok(Some((_, area))) => area,
        Ok(None) => return no_label(&args, "too small to hold a label", None),
        Err(e) => return Err(CliError(format!("{path}: {e}"))),
    };
    if is_blank(&area) {
        return no_label(&args, &LabelError::NotALabel.to_string(), None);
    }
    let label = match Label::decode(&area) {
        Ok(l) => l,
        Err(e) => return no_label(&args, &format!("damaged platter label: {e}"), Some(&area)),
    };
    let fields = fields(&label, &area);
    if args.json {
        let mut m: Map<String, Value> = fields.into_iter().map(|(k, v)| (k.into(), v)).collect();
        m.insert("path".into(), json!(path));
        outln!(
            "{}",
            serde_json::to_string_pretty(&m).expect("JSON of plain data")
        );
    } else {
        out!("{}", render(path, &fields));
    }
    Ok(0)
}

/// A device without a label this platter reads: said on stderr (with
/// `--json`, also as JSON), with what can be read of a damaged one.
fn no_label(args: &ExamineArgs, why: &str, area: Option<&[u8]>) -> Result<u8> {
    let path = &args.device;
    let raw = area.map(raw_fields).unwrap_or_default();
    if args.json {
        let mut m: Map<String, Value> = raw.into_iter().map(|(k, v)| (k.into(), v)).collect();
        m.insert("path".into(), json!(path));
        m.insert("error".into(), json!(why));
        outln!(
            "{}",
            serde_json::to_string_pretty(&m).expect("JSON of plain data")
        );
    } else if !raw.is_empty() {
        out!("{}", render(path, &raw));
    }
    crate::out::errln!("platter: {path}: {why}");
    Ok(EXIT_NO_LABEL)
}

/// What is read of a label that does not decode: its magic, version and
/// checksum, stored and computed.
fn raw_fields(area: &[u8]) -> Vec<(&'static str, Value)> {
    let bytes = area
        .first_chunk::<LABEL_BYTES>()
        .expect("a whole label area");
    let u32_at = |o: usize| u32::from_le_bytes(area[o..o + 4].try_into().expect("4 bytes"));
    vec![
        ("magic", json!(magic(area))),
        ("format_version", json!(u32_at(at::FORMAT_VERSION))),
        ("layout_version", json!(u32_at(at::LAYOUT_VERSION))),
        ("checksum", json!(format!("0x{:08x}", u32_at(at::CHECKSUM)))),
        (
            "checksum_computed",
            json!(format!("0x{:08x}", computed_checksum(bytes))),
        ),
    ]
}

fn magic(area: &[u8]) -> String {
    area[..LABEL_MAGIC.len()]
        .iter()
        .map(|&b| std::ascii::escape_default(b).to_string())
        .collect()
}

/// Every field of `l`, in the label's byte order, by its documented name.
fn fields(l: &Label, area: &[u8]) -> Vec<(&'static str, Value)> {
    let raw = raw_fields(area);
    let mut f = vec![raw[0].clone(), raw[1].clone(), raw[2].clone()];
    f.extend(identity_fields(l));
    f.extend(optional_fields(l));
    f.push(("slots", slots(l)));
    f.push(raw[3].clone());
    f
}

fn identity_fields(l: &Label) -> Vec<(&'static str, Value)> {
    let policy = ReadPolicy::from_label(l.read_policy, l.read_policy_arg).map_or_else(
        |e| format!("code {} ({e})", l.read_policy),
        |p| p.to_string(),
    );
    vec![
        ("volume_uuid", json!(uuid_string(&l.volume_uuid))),
        ("member_uuid", json!(uuid_string(&l.member_uuid))),
        ("slot", json!(l.slot)),
        ("member_count", json!(l.member_count)),
        ("level", json!(l.level.name())),
        ("parity_layout", json!(l.parity_layout.name())),
        ("state", json!(l.state.name())),
        ("read_policy", json!(policy)),
        ("copies", json!(l.copies)),
        ("interleave_bytes", json!(l.interleave_bytes)),
        ("data_offset_bytes", json!(l.data_offset_bytes)),
        ("data_size_bytes", json!(l.data_size_bytes)),
        ("volume_size_bytes", json!(l.volume_size_bytes)),
        ("event_counter", json!(l.event_counter)),
        (
            "rebuild_checkpoint_bytes",
            json!(l.rebuild_checkpoint_bytes),
        ),
        ("created_unix_seconds", json!(l.created_unix_seconds)),
        ("updated_unix_seconds", json!(l.updated_unix_seconds)),
        ("name", json!(printable(&l.name))),
        ("intent_region_stripes", json!(l.intent_region_stripes)),
        ("read_policy_arg", json!(l.read_policy_arg)),
    ]
}

/// The fields of later format versions; null where the label has none
/// of what they describe (no checksums, no log, no reshape).
fn optional_fields(l: &Label) -> Vec<(&'static str, Value)> {
    let s = &l.scrub;
    let c = l.checksums;
    let p = l.ppl;
    let r = l.reshape;
    vec![
        ("scrub_started_unix_seconds", json!(s.started_unix_seconds)),
        ("scrub_cursor_stripes", json!(s.cursor_stripes)),
        ("scrub_found_stripes", json!(s.found_stripes)),
        (
            "scrub_completed_unix_seconds",
            json!(s.completed_unix_seconds),
        ),
        ("scrub_last_found_stripes", json!(s.last_found_stripes)),
        (
            "checksum_offset_bytes",
            json!(c.map(|c| c.area_offset_bytes)),
        ),
        ("checksum_algorithm", json!(c.map(|c| c.algorithm.name()))),
        ("ppl_offset_bytes", json!(p.map(|p| p.offset_bytes))),
        ("ppl_len_bytes", json!(p.map(|p| p.len_bytes))),
        ("reshape_id", json!(r.map(|r| r.id))),
        ("reshape_position_bytes", json!(r.map(|r| r.position_bytes))),
        (
            "reshape_old_interleave_bytes",
            json!(r.map(|r| r.old_interleave_bytes)),
        ),
        (
            "reshape_old_member_count",
            json!(r.map(|r| r.old_member_count)),
        ),
        ("reshape_old_copies", json!(r.map(|r| r.old_copies))),
        ("reshape_old_level", json!(r.map(|r| r.old_level.name()))),
        (
            "reshape_old_parity_layout",
            json!(r.map(|r| r.old_parity_layout.name())),
        ),
        (
            "reshape_old_data_offset_bytes",
            json!(r.map(|r| r.old_data_offset_bytes)),
        ),
        ("checksum_format", json!(c.map(|c| c.format.name()))),
    ]
}

/// The slot table: each entry's member, size, state and when it left.
fn slots(l: &Label) -> Value {
    l.slots
        .iter()
        .enumerate()
        .map(|(i, e)| {
            json!({
                "slot": i,
                "member_uuid": uuid_string(&e.member_uuid),
                "data_size_bytes": e.data_size_bytes,
                "state": e.state.name(),
                "left_at_events": e.left_at_events,
            })
        })
        .collect()
}

/// One line a field, the slot table as a table.
fn render(path: &str, fields: &[(&'static str, Value)]) -> String {
    let mut s = format!("{path}:\n");
    for (k, v) in fields {
        match (k, v) {
            (&"slots", Value::Array(slots)) => render_slots(&mut s, slots),
            _ => {
                let _ = writeln!(s, "  {k:<30} {}", show(k, v));
            }
        }
    }
    s
}

fn render_slots(s: &mut String, slots: &[Value]) {
    let _ = writeln!(s, "  slots:");
    let _ = writeln!(
        s,
        "    {:<4} {:<10} {:>14} {:>16}  member_uuid",
        "slot", "state", "left_at_events", "data_size_bytes"
    );
    for e in slots {
        let n = |k: &str| e[k].as_u64().unwrap_or(0);
        let t = |k: &str| e[k].as_str().unwrap_or("?").to_string();
        let _ = writeln!(
            s,
            "    {:<4} {:<10} {:>14} {:>16}  {}",
            n("slot"),
            t("state"),
            n("left_at_events"),
            n("data_size_bytes"),
            t("member_uuid")
        );
    }
}

/// A value for people: strings bare, sizes also with a unit, times also
/// as a UTC date, absent fields as `-`.
fn show(key: &str, v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match n.as_u64() {
            Some(b) if key.ends_with("_bytes") && b > 0 => format!("{b} ({})", format_size(b)),
            Some(t) if key.ends_with("_unix_seconds") && t > 0 => format!("{t} ({})", utc(t)),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}
