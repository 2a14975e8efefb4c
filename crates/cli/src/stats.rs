//! `platter stats`: the served volume's counters, a table modelled on
//! vinum's `list -s` (definitions in docs/statistics.md). `--watch SECS`
//! refreshes it with rates per second; `--reset` zeroes the counters.

use crate::control::ask;
use crate::error::{CliError, Result};
use crate::out::{out, outln};
use clap::Args;
use platter_core::stats::{Counters, Histogram, Stats};
use platter_core::units::format_size;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct StatsArgs {
    /// The server's control socket (the NBD socket's path plus ".ctl",
    /// unless serve was given --control).
    #[arg(long, value_name = "PATH")]
    control: PathBuf,
    /// With a pool's server (`serve --pool`): which of its volumes.
    #[arg(long, value_name = "NAME")]
    volume: Option<String>,
    /// Print the numbers as JSON for programs (with --watch: one JSON
    /// object per line and refresh, with rates).
    #[arg(long)]
    json: bool,
    /// Refresh every SECS seconds (fractions allowed) showing rates per
    /// second since the previous refresh, until interrupted. On a terminal
    /// the screen is redrawn; otherwise one table after another.
    #[arg(long, value_name = "SECS")]
    watch: Option<f64>,
    /// Zero the counters and histograms first.
    #[arg(long)]
    reset: bool,
    /// With a pool's server: the I/O of each drive, its subdisks' summed
    /// over every volume (vinum's counters per drive).
    #[arg(long, conflicts_with_all = ["volume", "watch", "reset"])]
    drives: bool,
}

/// One answer of the server: the numbers and what names them.
struct Snapshot {
    name: String,
    level: String,
    paths: Vec<Option<String>>,
    stats: Stats,
    at: Instant,
}

impl Snapshot {
    fn parse(v: &Value) -> Result<Snapshot> {
        let stats: Stats = serde_json::from_value(v.clone()).map_err(|e| {
            CliError(format!(
                "the server sent statistics this client cannot read: {e}"
            ))
        })?;
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("?").to_string();
        let paths = v
            .get("member_paths")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(|p| p.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        Ok(Snapshot {
            // Shown in every table: a crafted label's control characters
            // escaped.
            name: platter_core::label::printable(&s("name")).into_owned(),
            level: s("level"),
            paths,
            stats,
            at: Instant::now(),
        })
    }
}

pub fn run(a: StatsArgs) -> Result<()> {
    if a.drives {
        return drives(&a);
    }
    if let Some(secs) = a.watch {
        if !(secs.is_finite() && secs > 0.0) {
            return Err(CliError(format!(
                "--watch {secs}: give a positive number of seconds"
            )));
        }
    }
    let first = if a.reset {
        ask(&a.control, json!({ "cmd": "stats-reset" }))?
    } else {
        ask(&a.control, json!({ "cmd": "stats" }))?
    };
    let Some(secs) = a.watch else {
        if a.json {
            outln!(
                "{}",
                serde_json::to_string_pretty(&first).expect("JSON of plain data")
            );
        } else {
            if a.reset {
                outln!("counters reset");
            }
            out!("{}", table(&Snapshot::parse(&first)?, None));
        }
        return Ok(());
    };
    let interval = Duration::from_secs_f64(secs);
    let terminal = crate::out::stdout_is_terminal();
    let mut prev = Snapshot::parse(&first)?;
    let started = prev.at;
    emit(a.json, terminal, &first, &prev, None, started);
    loop {
        std::thread::sleep(interval);
        let v = ask(&a.control, json!({ "cmd": "stats" }))?;
        let now = Snapshot::parse(&v)?;
        emit(a.json, terminal, &v, &now, Some(&prev), started);
        prev = now;
    }
}

/// Prints one refresh.
fn emit(
    json_out: bool,
    terminal: bool,
    raw: &Value,
    now: &Snapshot,
    prev: Option<&Snapshot>,
    started: Instant,
) {
    let text = if json_out {
        let mut v = raw.clone();
        if let Some(p) = prev {
            let secs = now.at.duration_since(p.at).as_secs_f64();
            v["interval_seconds"] = json!(secs);
            v["rates"] = rates_json(&now.stats, &p.stats, secs);
        }
        format!("{v}\n")
    } else {
        let when = now.at.duration_since(started).as_secs_f64();
        let head = match prev {
            None => format!("--- {} at +{when:.1}s: totals\n", now.name),
            Some(p) => format!(
                "--- {} at +{when:.1}s: per second over the last {:.1}s\n",
                now.name,
                now.at.duration_since(p.at).as_secs_f64()
            ),
        };
        let clear = if terminal { "\x1b[H\x1b[2J" } else { "" };
        format!("{clear}{head}{}\n", table(now, prev))
    };
    out!("{text}");
}

fn per_sec(c: &Counters, secs: f64) -> Value {
    let r = |n: u64| n as f64 / secs.max(1e-9);
    json!({
        "reads": r(c.reads),
        "bytes_read": r(c.bytes_read),
        "writes": r(c.writes),
        "bytes_written": r(c.bytes_written),
        "multiblock": r(c.multiblock),
        "multistripe": r(c.multistripe),
        "recovered_reads": r(c.recovered_reads),
        "degraded_writes": r(c.degraded_writes),
    })
}

fn rates_json(now: &Stats, prev: &Stats, secs: f64) -> Value {
    let r = |n: u64| n as f64 / secs.max(1e-9);
    json!({
        "volume": per_sec(&now.volume.counters.delta(&prev.volume.counters), secs),
        "plexes": now.plexes.iter().zip(&prev.plexes)
            .map(|(a, b)| per_sec(&a.counters.delta(&b.counters), secs))
            .collect::<Vec<_>>(),
        "members": now.members.iter().zip(&prev.members).map(|(a, b)| json!({
            "reads": r(a.reads.saturating_sub(b.reads)),
            "bytes_read": r(a.bytes_read.saturating_sub(b.bytes_read)),
            "writes": r(a.writes.saturating_sub(b.writes)),
            "bytes_written": r(a.bytes_written.saturating_sub(b.bytes_written)),
        })).collect::<Vec<_>>(),
    })
}

/// "850ns", "12us", "1.5ms", "2.0s"; "-" when nothing was timed.
fn fmt_ns(ns: u64, count: u64) -> String {
    if count == 0 {
        return "-".into();
    }
    match ns {
        0..=999 => format!("{ns}ns"),
        1_000..=999_999 => format!("{}us", ns / 1_000),
        1_000_000..=999_999_999 => format!("{:.1}ms", ns as f64 / 1e6),
        _ => format!("{:.1}s", ns as f64 / 1e9),
    }
}

/// A count, or a rate per second when watching.
fn fmt_n(n: u64, secs: Option<f64>) -> String {
    match secs {
        None => n.to_string(),
        Some(s) => {
            let r = n as f64 / s.max(1e-9);
            if r == 0.0 {
                "0".into()
            } else if r < 10.0 {
                format!("{r:.1}")
            } else {
                format!("{r:.0}")
            }
        }
    }
}

fn fmt_bytes(n: u64, secs: Option<f64>) -> String {
    match secs {
        None => format_size(n),
        Some(s) => format_size((n as f64 / s.max(1e-9)) as u64),
    }
}

struct Row {
    name: String,
    c: Option<Counters>,
    reads: u64,
    bytes_read: u64,
    writes: u64,
    bytes_written: u64,
    outstanding: u64,
    latency: Option<Histogram>,
    path: String,
}

const HEADER: [&str; 14] = [
    "Name", "Reads", "Bytes", "Writes", "Bytes", "Mblock", "Mstripe", "Recover", "Degraded", "Out",
    "p50", "p99", "Max", "",
];

/// The table; with `prev`, counters become rates per second since then and
/// latencies cover the interval.
fn table(now: &Snapshot, prev: Option<&Snapshot>) -> String {
    let secs = prev.map(|p| now.at.duration_since(p.at).as_secs_f64());
    let s = &now.stats;
    let zero = Stats::new(s.plexes.len() as u32, s.members.len() as u32);
    let before = prev
        .map(|p| &p.stats)
        .filter(|p| p.plexes.len() == s.plexes.len() && p.members.len() == s.members.len())
        .unwrap_or(&zero);
    let rows = rows(now, before);
    let cells: Vec<[String; 14]> = rows.iter().map(|r| r.cells(secs)).collect();
    let mut out = aligned(&cells);
    let vc = &rows[0].c.as_ref().expect("volume row has counters");
    if matches!(now.level.as_str(), "raid5" | "raid6") {
        out += &format!(
            "Parity stripe writes{}: {} full-stripe, {} read-modify-write, {} reconstruct-write, {} parityless\n",
            if secs.is_some() { " per second" } else { "" },
            fmt_n(vc.full_stripe_writes, secs),
            fmt_n(vc.read_modify_writes, secs),
            fmt_n(vc.reconstruct_writes, secs),
            fmt_n(vc.parityless_writes, secs),
        );
    }
    let v = &s.volume;
    let b = &before.volume;
    out += &format!(
        "Trims {} ({}), flushes {}, errors {}{}\n",
        fmt_n(v.trims.saturating_sub(b.trims), secs),
        fmt_bytes(v.bytes_trimmed.saturating_sub(b.bytes_trimmed), secs),
        fmt_n(v.flushes.saturating_sub(b.flushes), secs),
        fmt_n(v.errors.saturating_sub(b.errors), secs),
        if secs.is_some() { " per second" } else { "" },
    );
    out
}

/// The volume's row, each plex's, each member's: what they did since
/// `before`.
fn rows(now: &Snapshot, before: &Stats) -> Vec<Row> {
    let s = &now.stats;
    let mut rows = Vec::new();
    let vc = s.volume.counters.delta(&before.volume.counters);
    let mut vlat = s.volume.read_latency.delta(&before.volume.read_latency);
    vlat.merge(&s.volume.write_latency.delta(&before.volume.write_latency));
    rows.push(Row {
        name: format!("V {}", now.name),
        reads: vc.reads,
        bytes_read: vc.bytes_read,
        writes: vc.writes,
        bytes_written: vc.bytes_written,
        c: Some(vc),
        outstanding: s.volume.outstanding,
        latency: Some(vlat),
        path: now.level.clone(),
    });
    for (i, p) in s.plexes.iter().enumerate() {
        let c = p.counters.delta(&before.plexes[i].counters);
        rows.push(Row {
            name: format!("P {}.p{i}", now.name),
            reads: c.reads,
            bytes_read: c.bytes_read,
            writes: c.writes,
            bytes_written: c.bytes_written,
            c: Some(c),
            outstanding: p.outstanding,
            latency: None,
            path: String::new(),
        });
    }
    for (i, m) in s.members.iter().enumerate() {
        let b = &before.members[i];
        rows.push(Row {
            name: format!("M {}.m{i}", now.name),
            c: None,
            reads: m.reads.saturating_sub(b.reads),
            bytes_read: m.bytes_read.saturating_sub(b.bytes_read),
            writes: m.writes.saturating_sub(b.writes),
            bytes_written: m.bytes_written.saturating_sub(b.bytes_written),
            outstanding: m.outstanding,
            latency: Some(m.latency.delta(&b.latency)),
            path: now
                .paths
                .get(i)
                .cloned()
                .flatten()
                .unwrap_or_else(|| "-".into()),
        });
    }
    rows
}

impl Row {
    /// The row's cells under [`HEADER`].
    fn cells(&self, secs: Option<f64>) -> [String; 14] {
        let opt =
            |f: fn(&Counters) -> u64| self.c.as_ref().map_or("-".into(), |c| fmt_n(f(c), secs));
        let lat = |f: fn(&Histogram) -> u64| {
            self.latency
                .as_ref()
                .map_or("-".into(), |h| fmt_ns(f(h), h.count()))
        };
        [
            self.name.clone(),
            fmt_n(self.reads, secs),
            fmt_bytes(self.bytes_read, secs),
            fmt_n(self.writes, secs),
            fmt_bytes(self.bytes_written, secs),
            opt(|c| c.multiblock),
            opt(|c| c.multistripe),
            opt(|c| c.recovered_reads),
            opt(|c| c.degraded_writes),
            self.outstanding.to_string(),
            lat(Histogram::p50),
            lat(Histogram::p99),
            lat(Histogram::max),
            self.path.clone(),
        ]
    }
}

/// The header and the rows in columns: the name to the left, the figures
/// to the right, the path after them.
fn aligned(cells: &[[String; 14]]) -> String {
    let mut widths = HEADER.map(str::len);
    for row in cells {
        for (w, c) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(c.len());
        }
    }
    let line = |row: &[String]| {
        let mut l = String::new();
        for (i, c) in row.iter().enumerate() {
            if i == 0 {
                l += &format!("{c:<w$}", w = widths[0]);
            } else if i == row.len() - 1 {
                l += &format!("  {c}");
            } else {
                l += &format!(" {c:>w$}", w = widths[i]);
            }
        }
        l.trim_end().to_string() + "\n"
    };
    let mut out = line(&HEADER.map(str::to_string));
    for row in cells {
        out += &line(row);
    }
    out
}

impl crate::control::AboutVolume for StatsArgs {
    fn about(&self) -> Option<&str> {
        self.volume.as_deref()
    }
}

/// `stats --drives`: a line per drive of the pool served.
fn drives(a: &StatsArgs) -> Result<()> {
    let answer = ask(&a.control, json!({ "cmd": "drives" }))?;
    if a.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&answer).expect("JSON of plain data")
        );
        return Ok(());
    }
    let Some(drives) = answer["drives"].as_object().filter(|d| !d.is_empty()) else {
        return Err(CliError(
            "this server serves no pool: its members are counted by `platter stats`".into(),
        ));
    };
    outln!(
        "{:<12} {:>8} {:>10} {:>10} {:>10} {:>10} {:>8} {:>7} {:>9} {:>9}",
        "drive",
        "subdisks",
        "reads",
        "read",
        "writes",
        "written",
        "flushes",
        "errors",
        "mean ms",
        "p99 ms"
    );
    let n = |d: &Value, k: &str| d[k].as_u64().unwrap_or(0);
    for (name, d) in drives {
        let latency: platter_core::stats::Histogram =
            serde_json::from_value(d["latency"].clone()).unwrap_or_default();
        let mean_ms = latency.sum() as f64 / latency.count().max(1) as f64 / 1e6;
        outln!(
            "{:<12} {:>8} {:>10} {:>10} {:>10} {:>10} {:>8} {:>7} {:>9.3} {:>9.3}",
            name,
            n(d, "subdisks"),
            n(d, "reads"),
            format_size(n(d, "read_bytes")),
            n(d, "writes"),
            format_size(n(d, "written_bytes")),
            n(d, "flushes"),
            n(d, "errors"),
            mean_ms,
            latency.p99() as f64 / 1e6
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_lines_up() {
        let mut stats = Stats::new(2, 2);
        stats.volume.counters.reads = 3;
        stats.volume.counters.bytes_read = 3 << 20;
        stats.volume.counters.multistripe = 1;
        stats.volume.read_latency.record(1500);
        stats.members[1].latency.record(2_000_000);
        let snap = Snapshot {
            name: "v".into(),
            level: "mirror".into(),
            paths: vec![Some("/d/a".into()), None],
            stats,
            at: Instant::now(),
        };
        let t = table(&snap, None);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("Name"), "{t}");
        assert!(
            lines[1].starts_with("V v ") && lines[1].contains("3M"),
            "{t}"
        );
        assert!(lines[1].contains("1us"), "{t}");
        assert!(lines[2].starts_with("P v.p0"), "{t}");
        assert!(
            lines[4].starts_with("M v.m0") && lines[4].ends_with("/d/a"),
            "{t}"
        );
        assert!(lines[5].contains("2.0ms"), "{t}");
        assert_eq!(lines.len(), 7, "{t}");
    }
}
