//! The live page at `/` of `serve --metrics HOST:PORT`: what each member
//! is doing over the last minutes, so that "one drive is quite active
//! while the other is virtually idle" is seen, not guessed. Drawn here as
//! HTML with inline SVG (no script, no external asset); the browser
//! reloads it every few seconds.
//!
//! The metrics thread samples the counters once a second into a bounded
//! history ([`History`]); the page shows rates between samples: per
//! member the busy share (time with at least one I/O on the device, as
//! iostat's %util), reads and writes per second and their mean latency;
//! per plex and for the volume the bytes moved; and the progress of a
//! rebuild, resync or scrub from the server's status.

use serde_json::Value;
use std::collections::VecDeque;
use std::fmt::Write;
use std::time::{Duration, Instant};

/// How often the history takes a sample.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// Samples kept: five minutes.
pub const SAMPLES_MAX: usize = 300;
/// The "now" figures are over this many of the latest intervals.
const RECENT_INTERVALS: usize = 5;
/// The page asks the browser to reload it this often.
const REFRESH_SECS: u32 = 2;

/// One look at the counters.
#[derive(Clone, Debug)]
pub struct Sample {
    at: Instant,
    members: Vec<MemberSample>,
    /// Bytes read and written, per plex, then the volume's.
    plexes: Vec<(u64, u64)>,
    volume: (u64, u64),
}

#[derive(Clone, Copy, Debug, Default)]
struct MemberSample {
    busy_ns: u64,
    bytes_read: u64,
    bytes_written: u64,
    ios: u64,
    latency_sum_ns: u64,
    latency_count: u64,
}

/// A member's rates over one interval.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MemberRates {
    pub busy_share: f64,
    pub read_bytes_per_sec: f64,
    pub write_bytes_per_sec: f64,
    pub ios_per_sec: f64,
    pub latency_ms: f64,
}

/// The last [`SAMPLES_MAX`] samples, oldest first.
#[derive(Default)]
pub struct History {
    samples: VecDeque<Sample>,
}

impl History {
    /// Takes a sample now if [`SAMPLE_EVERY`] has passed since the last.
    pub fn tick(&mut self, engine: &crate::engine::Engine) {
        let due = self
            .samples
            .back()
            .is_none_or(|s| s.at.elapsed() >= SAMPLE_EVERY);
        if due {
            self.push(take_sample(engine));
        }
    }

    pub fn push(&mut self, s: Sample) {
        if self.samples.len() == SAMPLES_MAX {
            self.samples.pop_front();
        }
        self.samples.push_back(s);
    }

    /// Each member's rates per interval, oldest first.
    pub fn member_series(&self) -> Vec<Vec<MemberRates>> {
        let members = self.samples.back().map_or(0, |s| s.members.len());
        (0..members)
            .map(|m| {
                self.intervals()
                    .map(|(a, b, secs)| {
                        let (x, y) = (
                            a.members.get(m).copied().unwrap_or_default(),
                            b.members.get(m).copied().unwrap_or_default(),
                        );
                        let d = |f: fn(&MemberSample) -> u64| f(&y).saturating_sub(f(&x)) as f64;
                        let lat_n = d(|s| s.latency_count);
                        MemberRates {
                            busy_share: (d(|s| s.busy_ns) / 1e9 / secs).clamp(0.0, 1.0),
                            read_bytes_per_sec: d(|s| s.bytes_read) / secs,
                            write_bytes_per_sec: d(|s| s.bytes_written) / secs,
                            ios_per_sec: d(|s| s.ios) / secs,
                            latency_ms: if lat_n > 0.0 {
                                d(|s| s.latency_sum_ns) / lat_n / 1e6
                            } else {
                                0.0
                            },
                        }
                    })
                    .collect()
            })
            .collect()
    }

    /// Bytes per second moved (read + written) per interval, oldest
    /// first: the volume's, then each plex's.
    pub fn throughput_series(&self) -> (Vec<f64>, Vec<Vec<f64>>) {
        let volume = self
            .intervals()
            .map(|(a, b, secs)| {
                (b.volume.0.saturating_sub(a.volume.0) + b.volume.1.saturating_sub(a.volume.1))
                    as f64
                    / secs
            })
            .collect();
        let plexes = self.samples.back().map_or(0, |s| s.plexes.len());
        let plex = (0..plexes)
            .map(|p| {
                self.intervals()
                    .map(|(a, b, secs)| {
                        let (x, y) = (
                            a.plexes.get(p).copied().unwrap_or_default(),
                            b.plexes.get(p).copied().unwrap_or_default(),
                        );
                        (y.0.saturating_sub(x.0) + y.1.saturating_sub(x.1)) as f64 / secs
                    })
                    .collect()
            })
            .collect();
        (volume, plex)
    }

    fn intervals(&self) -> impl Iterator<Item = (&Sample, &Sample, f64)> {
        self.samples
            .iter()
            .zip(self.samples.iter().skip(1))
            .map(|(a, b)| (a, b, b.at.duration_since(a.at).as_secs_f64().max(1e-3)))
    }
}

fn take_sample(engine: &crate::engine::Engine) -> Sample {
    let stats = engine.stats();
    let busy = engine.member_busy_ns();
    Sample {
        at: Instant::now(),
        members: stats
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| MemberSample {
                busy_ns: busy.get(i).copied().unwrap_or(0),
                bytes_read: m.bytes_read,
                bytes_written: m.bytes_written,
                ios: m.reads + m.writes,
                latency_sum_ns: m.latency.sum(),
                latency_count: m.latency.count(),
            })
            .collect(),
        plexes: stats
            .plexes
            .iter()
            .map(|p| (p.counters.bytes_read, p.counters.bytes_written))
            .collect(),
        volume: (
            stats.volume.counters.bytes_read,
            stats.volume.counters.bytes_written,
        ),
    }
}

/// The mean of the last [`RECENT_INTERVALS`] of `series`.
fn recent(series: &[MemberRates]) -> MemberRates {
    let tail = &series[series.len().saturating_sub(RECENT_INTERVALS)..];
    let n = tail.len().max(1) as f64;
    let sum = |f: fn(&MemberRates) -> f64| tail.iter().map(f).sum::<f64>() / n;
    MemberRates {
        busy_share: sum(|r| r.busy_share),
        read_bytes_per_sec: sum(|r| r.read_bytes_per_sec),
        write_bytes_per_sec: sum(|r| r.write_bytes_per_sec),
        ios_per_sec: sum(|r| r.ios_per_sec),
        latency_ms: sum(|r| r.latency_ms),
    }
}

/// Text for HTML: `&`, `<`, `>`, `"` escaped (member paths and volume
/// names are the operator's, and may hold anything).
pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn mib(bytes_per_sec: f64) -> String {
    format!("{:.1}", bytes_per_sec / (1024.0 * 1024.0))
}

/// A polyline of `values` (oldest first) scaled to `max`, as an SVG of
/// `w` x `h` whose right edge is now.
fn sparkline(values: &[f64], max: f64, w: u32, h: u32, colour: &str) -> String {
    let mut pts = String::new();
    let n = SAMPLES_MAX.saturating_sub(1).max(1) as f64;
    let first = SAMPLES_MAX.saturating_sub(1).saturating_sub(values.len());
    for (i, v) in values.iter().enumerate() {
        let x = (first + i) as f64 / n * f64::from(w);
        let y = f64::from(h) - (v / max.max(1e-9)).clamp(0.0, 1.0) * f64::from(h - 2) - 1.0;
        let _ = write!(pts, "{x:.1},{y:.1} ");
    }
    format!(
        "<svg width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" class=\"spark\">\
         <rect width=\"{w}\" height=\"{h}\" fill=\"#f4f4f4\"/>\
         <polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\"/></svg>",
        pts.trim_end()
    )
}

/// A horizontal bar for a share in [0, 1].
fn bar(share: f64, w: u32, colour: &str) -> String {
    let filled = (share.clamp(0.0, 1.0) * f64::from(w)).round();
    format!(
        "<svg width=\"{w}\" height=\"14\" class=\"bar\"><rect width=\"{w}\" height=\"14\" \
         fill=\"#e6e6e6\"/><rect class=\"fill\" width=\"{filled}\" height=\"14\" \
         fill=\"{colour}\"/></svg>"
    )
}

/// A colour from cool (idle) to hot (saturated).
fn heat(share: f64) -> &'static str {
    match share {
        s if s >= 0.75 => "#c62828",
        s if s >= 0.40 => "#ef6c00",
        s if s >= 0.10 => "#f9a825",
        _ => "#2e7d32",
    }
}

/// The whole page: `status` is the control socket's `status` answer.
pub fn render(history: &History, status: &Value) -> String {
    let name = status["name"].as_str().unwrap_or("?");
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECS}\">\
         <title>platter: {n}</title><style>\
         body{{font:14px sans-serif;margin:1.5em;color:#222}}\
         table{{border-collapse:collapse}}td,th{{padding:4px 10px;text-align:left;\
         border-bottom:1px solid #ddd;vertical-align:middle}}\
         th{{font-weight:600}}.num{{text-align:right;font-variant-numeric:tabular-nums}}\
         .state-active{{color:#2e7d32}}.state-faulty,.state-missing,.state-disconnected\
         {{color:#c62828}}.state-rebuilding{{color:#ef6c00}}</style></head><body>",
        n = esc(name)
    );
    let _ = write!(
        s,
        "<h1>{} <small>{} &middot; {} &middot; state <span id=\"volume-state\">{}</span></small></h1>",
        esc(name),
        esc(status["level"].as_str().unwrap_or("?")),
        esc(&status["size_bytes"]
            .as_u64()
            .map_or("?".into(), platter_core::units::format_size)),
        esc(status["state"].as_str().unwrap_or("?")),
    );
    progress(&mut s, status);
    members_table(&mut s, history, status);
    throughput_table(&mut s, history);
    s.push_str(
        "<p>Counters: <a href=\"/metrics\">/metrics</a> (Prometheus); \
         definitions in docs/statistics.md.</p></body></html>",
    );
    s
}

/// Each member's state, how busy it is, its rates and latency, and its
/// busy line over the history.
fn members_table(s: &mut String, history: &History, status: &Value) {
    let series = history.member_series();
    let window_secs = series.first().map_or(0, Vec::len);
    let _ = write!(
        s,
        "<h2>Members</h2><p>Busy: the share of time with at least one I/O on the device \
         (iostat's %util), over the last {RECENT_INTERVALS} s; the line: the last {window_secs} s.</p>\
         <table id=\"members\"><tr><th>slot</th><th>member</th><th>state</th><th>busy</th>\
         <th class=\"num\">%</th><th class=\"num\">read MiB/s</th><th class=\"num\">write MiB/s</th>\
         <th class=\"num\">I/O/s</th><th class=\"num\">latency ms</th><th>busy, last minutes</th></tr>"
    );
    let members = status["members"].as_array().cloned().unwrap_or_default();
    for (slot, m) in members.iter().enumerate() {
        let rates = series.get(slot).map(|v| recent(v)).unwrap_or_default();
        let busy_line: Vec<f64> = series
            .get(slot)
            .map(|v| v.iter().map(|r| r.busy_share).collect())
            .unwrap_or_default();
        let state = m["state"].as_str().unwrap_or("?");
        let _ = write!(
            s,
            "<tr id=\"member-{slot}\" class=\"member\" data-slot=\"{slot}\" \
             data-busy-percent=\"{busy:.1}\" data-read-bytes-per-sec=\"{rd:.0}\" \
             data-write-bytes-per-sec=\"{wr:.0}\"><td>{slot}</td><td>{path}</td>\
             <td class=\"state-{cls}\">{state}</td><td>{bar}</td><td class=\"num\">{busy:.0}</td>\
             <td class=\"num\">{rmib}</td><td class=\"num\">{wmib}</td><td class=\"num\">{iops:.0}</td>\
             <td class=\"num\">{lat:.2}</td><td>{spark}</td></tr>",
            busy = rates.busy_share * 100.0,
            rd = rates.read_bytes_per_sec,
            wr = rates.write_bytes_per_sec,
            path = esc(m["path"].as_str().unwrap_or("-")),
            cls = esc(state),
            state = esc(state),
            bar = bar(rates.busy_share, 120, heat(rates.busy_share)),
            rmib = mib(rates.read_bytes_per_sec),
            wmib = mib(rates.write_bytes_per_sec),
            iops = rates.ios_per_sec,
            lat = rates.latency_ms,
            spark = sparkline(&busy_line, 1.0, 300, 32, heat(rates.busy_share)),
        );
    }
    s.push_str("</table>");
}

/// The volume's and each plex's bytes per second, on one scale.
fn throughput_table(s: &mut String, history: &History) {
    let (volume, plexes) = history.throughput_series();
    let top = volume
        .iter()
        .chain(plexes.iter().flatten())
        .copied()
        .fold(1.0, f64::max);
    let _ = write!(
        s,
        "<h2>Throughput</h2><p>Bytes read and written per second; the lines share one \
         scale (top: {} MiB/s).</p><table id=\"totals\"><tr><th></th><th class=\"num\">MiB/s now</th>\
         <th>last minutes</th></tr>",
        mib(top)
    );
    let now = |v: &[f64]| {
        let tail = &v[v.len().saturating_sub(RECENT_INTERVALS)..];
        tail.iter().sum::<f64>() / tail.len().max(1) as f64
    };
    let _ = write!(
        s,
        "<tr id=\"volume-total\"><td>volume</td><td class=\"num\">{}</td><td>{}</td></tr>",
        mib(now(&volume)),
        sparkline(&volume, top, 300, 32, "#1565c0")
    );
    for (p, series) in plexes.iter().enumerate() {
        let _ = write!(
            s,
            "<tr id=\"plex-{p}\"><td>plex {p}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            mib(now(series)),
            sparkline(series, top, 300, 32, "#6a1b9a")
        );
    }
    s.push_str("</table>");
}

/// Rebuild, resync and scrub progress bars, from the status.
fn progress(s: &mut String, status: &Value) {
    let mut rows = Vec::new();
    if let Some(r) = status.get("rebuild").filter(|v| !v.is_null()) {
        rows.push((
            "rebuild",
            format!("slot {}", r["member"]),
            r["percent"].as_f64().unwrap_or(0.0),
        ));
    }
    if let Some(r) = status.get("resync").filter(|v| !v.is_null()) {
        rows.push((
            "resync",
            String::new(),
            r["percent"].as_f64().unwrap_or(0.0),
        ));
    }
    if let Some(r) = status["scrub"].get("in_progress").filter(|v| !v.is_null()) {
        let (at, of) = (
            r["cursor_stripes"].as_f64().unwrap_or(0.0),
            r["stripes"].as_f64().unwrap_or(1.0).max(1.0),
        );
        rows.push(("scrub", String::new(), 100.0 * at / of));
    }
    if rows.is_empty() {
        s.push_str("<p id=\"progress\">No rebuild, resync or scrub running.</p>");
        return;
    }
    s.push_str("<table id=\"progress\">");
    for (what, detail, percent) in rows {
        let _ = write!(
            s,
            "<tr id=\"progress-{what}\" data-percent=\"{percent:.1}\"><td>{what} {}</td><td>{}</td>\
             <td class=\"num\">{percent:.1}%</td></tr>",
            esc(&detail),
            bar(percent / 100.0, 300, "#1565c0")
        );
    }
    s.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample(at: Instant, busy_ms: [u64; 2], read: [u64; 2]) -> Sample {
        Sample {
            at,
            members: (0..2)
                .map(|m| MemberSample {
                    busy_ns: busy_ms[m] * 1_000_000,
                    bytes_read: read[m],
                    ios: read[m] / 4096,
                    latency_sum_ns: read[m] / 4096 * 2_000_000,
                    latency_count: read[m] / 4096,
                    ..MemberSample::default()
                })
                .collect(),
            plexes: vec![(read[0], 0), (read[1], 0)],
            volume: (read[0] + read[1], 0),
        }
    }

    /// One member busy 900 ms of each second, the other 10: the page
    /// says so in its numbers and draws the first hot.
    #[test]
    fn the_busy_member_is_shown_hot() {
        let t0 = Instant::now();
        let mut h = History::default();
        for i in 0..10u64 {
            h.push(sample(
                t0 + Duration::from_secs(i),
                [900 * i, 10 * i],
                [i << 24, i << 12],
            ));
        }
        let series = h.member_series();
        let r0 = recent(&series[0]);
        assert!((r0.busy_share - 0.9).abs() < 1e-9, "{r0:?}");
        assert!((r0.read_bytes_per_sec - 16.0 * 1024.0 * 1024.0).abs() < 1.0);
        assert!((r0.latency_ms - 2.0).abs() < 1e-9);
        assert!((recent(&series[1]).busy_share - 0.01).abs() < 1e-9);
        let status = json!({
            "name": "v<1>", "level": "stripe", "size_bytes": 1, "state": "clean",
            "members": [{"path": "/d/a", "state": "active"}, {"path": "/d/b", "state": "active"}],
            "rebuild": {"member": 1, "percent": 42.0},
        });
        let page = render(&h, &status);
        assert!(page.contains("data-busy-percent=\"90.0\""), "{page}");
        assert!(page.contains("data-busy-percent=\"1.0\""), "{page}");
        assert!(page.contains("fill=\"#c62828\""), "the hot member is red");
        assert!(
            page.contains("v&lt;1&gt;") && !page.contains("v<1>"),
            "names escaped"
        );
        assert!(page.contains("id=\"progress-rebuild\" data-percent=\"42.0\""));
        assert!(!page.contains("<script"), "no script");
    }

    #[test]
    fn the_history_is_bounded() {
        let t0 = Instant::now();
        let mut h = History::default();
        for i in 0..(SAMPLES_MAX as u64 + 50) {
            h.push(sample(t0 + Duration::from_secs(i), [0, 0], [0, 0]));
        }
        assert_eq!(h.samples.len(), SAMPLES_MAX);
        assert_eq!(h.member_series()[0].len(), SAMPLES_MAX - 1);
    }
}
