//! Counters per drive of a pool, as vinum counts per drive: each drive's
//! subdisks' member counters summed over every volume served. A volume
//! counts its own subdisks (its members); only here are the volumes that
//! share a drive added up, which is what says how busy the disk is.

use std::collections::BTreeMap;
use std::sync::Arc;

use platter_core::stats::MemberStats;
use serde::Serialize;
use serde_json::{json, Value};

use crate::manage::Manager;

/// One drive's I/O, summed over its subdisks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DriveCounters {
    pub subdisks: u64,
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub written_bytes: u64,
    pub trims: u64,
    pub flushes: u64,
    pub errors: u64,
    pub outstanding: u64,
}

impl DriveCounters {
    fn add(&mut self, m: &MemberStats) {
        self.subdisks += 1;
        self.reads += m.reads;
        self.read_bytes += m.bytes_read;
        self.writes += m.writes;
        self.written_bytes += m.bytes_written;
        self.trims += m.trims;
        self.flushes += m.flushes;
        self.errors += m.errors;
        self.outstanding += m.outstanding;
    }
}

/// Every drive's counters, by drive name; empty when no member is a
/// pool's subdisk.
pub fn drive_counters(managers: &[Arc<Manager>]) -> BTreeMap<String, DriveCounters> {
    let mut out: BTreeMap<String, DriveCounters> = BTreeMap::new();
    for m in managers {
        if m.member_drives.is_empty() {
            continue;
        }
        let stats = m.engine.stats();
        for (slot, member) in m.engine.members().iter().enumerate() {
            let drive = member
                .as_ref()
                .and_then(|d| m.member_drives.get(d.describe()));
            if let (Some(drive), Some(s)) = (drive, stats.members.get(slot)) {
                out.entry(drive.clone()).or_default().add(s);
            }
        }
    }
    out
}

/// `{"cmd": "drives"}`'s answer: `{"drives": {NAME: counters}}`.
pub fn drives_json(managers: &[Arc<Manager>]) -> Value {
    json!({ "drives": drive_counters(managers) })
}

/// The counters as OpenMetrics families `platter_drive_*{drive="NAME"}`,
/// to merge with the volumes' (no `# EOF`); empty without drives.
pub fn encode(drives: &BTreeMap<String, DriveCounters>) -> String {
    type Field = fn(&DriveCounters) -> u64;
    let fields: [(&str, Field, &str); 7] = [
        ("reads", |d| d.reads, "Reads issued to the drive's subdisks"),
        (
            "read_bytes",
            |d| d.read_bytes,
            "Bytes read from the drive's subdisks",
        ),
        (
            "writes",
            |d| d.writes,
            "Writes issued to the drive's subdisks",
        ),
        (
            "written_bytes",
            |d| d.written_bytes,
            "Bytes written to the drive's subdisks",
        ),
        ("trims", |d| d.trims, "Trims issued to the drive's subdisks"),
        (
            "flushes",
            |d| d.flushes,
            "Flushes issued to the drive's subdisks",
        ),
        (
            "errors",
            |d| d.errors,
            "I/Os on the drive's subdisks that failed",
        ),
    ];
    let mut out = String::new();
    if drives.is_empty() {
        return out;
    }
    for (field, get, help) in fields {
        let family = format!("platter_drive_{field}");
        out += &format!("# HELP {family} {help}, summed over every volume served.\n");
        out += &format!("# TYPE {family} counter\n");
        for (name, d) in drives {
            out += &format!("{family}_total{{drive=\"{}\"}} {}\n", escape(name), get(d));
        }
    }
    out +=
        "# HELP platter_drive_outstanding I/Os on the drive's subdisks issued and not yet done.\n";
    out += "# TYPE platter_drive_outstanding gauge\n";
    for (name, d) in drives {
        out += &format!(
            "platter_drive_outstanding{{drive=\"{}\"}} {}\n",
            escape(name),
            d.outstanding
        );
    }
    out
}

/// The live page's table of the drives (every volume's I/O on each), or
/// nothing without drives.
pub fn html_table(drives: &BTreeMap<String, DriveCounters>) -> String {
    if drives.is_empty() {
        return String::new();
    }
    let size = platter_core::units::format_size;
    let mut t = String::from(
        "<table class=\"drives\"><tr><th>drive</th><th>subdisks</th><th>reads</th>\
         <th>read</th><th>writes</th><th>written</th><th>errors</th><th>outstanding</th></tr>",
    );
    for (name, d) in drives {
        t += &format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td></tr>",
            crate::observe::livepage::esc(name),
            d.subdisks,
            d.reads,
            size(d.read_bytes),
            d.writes,
            size(d.written_bytes),
            d.errors,
            d.outstanding
        );
    }
    t + "</table>"
}

/// A label value as OpenMetrics quotes it (drive names are plain, but a
/// name is never trusted to be).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_carry_each_drive_summed() {
        let mut d0 = DriveCounters::default();
        d0.add(&MemberStats {
            reads: 3,
            bytes_read: 12288,
            ..MemberStats::default()
        });
        d0.add(&MemberStats {
            reads: 2,
            writes: 7,
            ..MemberStats::default()
        });
        let text = encode(&BTreeMap::from([("d0".to_string(), d0)]));
        assert!(
            text.contains("platter_drive_reads_total{drive=\"d0\"} 5\n"),
            "{text}"
        );
        assert!(
            text.contains("platter_drive_writes_total{drive=\"d0\"} 7\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE platter_drive_read_bytes counter\n"),
            "{text}"
        );
        assert!(encode(&BTreeMap::new()).is_empty());
    }
}
