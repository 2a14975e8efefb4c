//! Counters per drive of a pool, as vinum counts per drive: each drive's
//! subdisks' member counters summed over every volume served. A volume
//! counts its own subdisks (its members); only here are the volumes that
//! share a drive added up, which is what says how busy the disk is.

use std::collections::BTreeMap;
use std::sync::Arc;

use platter_core::stats::{Histogram, MemberStats};
use serde::Serialize;
use serde_json::{json, Value};

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use crate::manage::Manager;
use crate::observe::metrics::{counter, gauge, histogram, Labels};

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
    /// Every subdisk's member I/O service times, merged: how long the
    /// drive takes, whichever volume asks.
    pub latency: Histogram,
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
        self.latency.merge(&m.latency);
    }
}

/// Every drive's counters, by drive name; empty when no member is a
/// pool's subdisk.
pub fn drive_counters(managers: &[Arc<Manager>]) -> BTreeMap<String, DriveCounters> {
    let mut out: BTreeMap<String, DriveCounters> = BTreeMap::new();
    for m in managers {
        let member_drives = Arc::clone(&m.member_drives.lock().expect("member drives"));
        if member_drives.is_empty() {
            continue;
        }
        let stats = m.engine.stats();
        for (slot, member) in m.engine.members().iter().enumerate() {
            let drive = member
                .as_ref()
                .and_then(|d| member_drives.get(d.describe()));
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
/// to merge with the volumes'; empty without drives.
pub fn encode(drives: &BTreeMap<String, DriveCounters>) -> String {
    if drives.is_empty() {
        return String::new();
    }
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Families(drives.clone())));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String cannot fail");
    out
}

/// The drives' counters, for the registry to encode.
#[derive(Debug)]
struct Families(BTreeMap<String, DriveCounters>);

impl prometheus_client::collector::Collector for Families {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
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
        let series = |get: Field| -> Vec<(Labels, u64)> {
            self.0
                .iter()
                .map(|(name, d)| (vec![("drive", name.clone())], get(d)))
                .collect()
        };
        for (field, get, help) in fields {
            let help = format!("{help}, summed over every volume served");
            counter(
                &mut enc,
                &format!("platter_drive_{field}"),
                &help,
                &series(get),
            )?;
        }
        gauge(
            &mut enc,
            "platter_drive_outstanding",
            "I/Os on the drive's subdisks issued and not yet done",
            &series(|d| d.outstanding),
        )?;
        let latencies: Vec<(Labels, &Histogram)> = self
            .0
            .iter()
            .map(|(name, d)| (vec![("drive", name.clone())], &d.latency))
            .collect();
        histogram(
            &mut enc,
            "platter_drive_latency_seconds",
            "I/O service time on the drive's subdisks, every volume served",
            &latencies,
        )
    }
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
         <th>read</th><th>writes</th><th>written</th><th>errors</th><th>outstanding</th>\
         <th>mean ms</th><th>p99 ms</th></tr>",
    );
    for (name, d) in drives {
        t += &format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{:.3}</td><td>{:.3}</td></tr>",
            crate::observe::livepage::esc(name),
            d.subdisks,
            d.reads,
            size(d.read_bytes),
            d.writes,
            size(d.written_bytes),
            d.errors,
            d.outstanding,
            d.latency.sum() as f64 / d.latency.count().max(1) as f64 / 1e6,
            d.latency.p99() as f64 / 1e6
        );
    }
    t + "</table>"
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
