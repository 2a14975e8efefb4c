//! The volume's statistics for people and programs: the JSON the control
//! socket's `stats` command answers, and `GET /metrics` in the Prometheus
//! text format (`platter serve --metrics HOST:PORT`), encoded with the
//! `prometheus-client` crate. Definitions: docs/statistics.md.

use crate::engine::meta::Meta;
use crate::engine::Engine;
use crate::observe::livepage::History;
use platter_core::label::ScrubRecord;
use platter_core::stats::{Counters, Histogram, Stats};
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The `stats` control command's answer: the counters and what names them.
pub fn stats_json(engine: &Engine, meta: &Meta) -> Value {
    let label = meta.label();
    let stats = engine.stats();
    let geometry = engine.with_volume(|v| v.geometry().clone());
    let paths: Vec<Option<String>> = engine
        .members()
        .iter()
        .map(|m| m.as_ref().map(|m| m.describe().to_string()))
        .collect();
    let mut v = serde_json::to_value(&stats).expect("statistics are plain data");
    let obj = v.as_object_mut().expect("a JSON object");
    obj.insert("name".into(), json!(label.name));
    obj.insert("level".into(), json!(geometry.level().name()));
    obj.insert(
        "interleave_bytes".into(),
        json!(geometry.interleave_bytes()),
    );
    obj.insert(
        "stripe_data_bytes".into(),
        json!(geometry.stripe_data_bytes()),
    );
    obj.insert("member_paths".into(), json!(paths));
    // By slot, like member_paths: I/Os submitted to the member and not
    // yet completed, and the most it has at once (--member-queue-depth).
    let queues: Vec<Value> = engine
        .member_queues()
        .iter()
        .map(|q| match q {
            Some(q) => json!({ "outstanding": q.outstanding, "depth": q.depth }),
            None => Value::Null,
        })
        .collect();
    obj.insert("member_queues".into(), json!(queues));
    obj.insert("io_backend".into(), json!(engine.io_backend()));
    obj.insert("engine_lock".into(), json!(engine.lock_use()));
    // When the volume was last looked at whole, from the labels (a pass in
    // progress records its cursor every few seconds).
    let r = label.scrub;
    obj.insert(
        "scrub_record".into(),
        json!({
            "last_completed_unix_seconds": (r.completed_unix_seconds != 0).then_some(r.completed_unix_seconds),
            "last_found_stripes": r.last_found_stripes,
            "in_progress": r.started_unix_seconds != 0,
            "cursor_stripes": r.cursor_stripes,
            "found_stripes": r.found_stripes,
        }),
    );
    v
}

/// Counter fields shared by the volume and the plexes, with their help.
fn counter_fields(c: &Counters) -> [(&'static str, u64, &'static str); 12] {
    [
        ("reads", c.reads, "Client reads completed successfully"),
        (
            "read_bytes",
            c.bytes_read,
            "Bytes of successful client reads",
        ),
        (
            "writes",
            c.writes,
            "Client writes and write-zeroes completed successfully",
        ),
        (
            "written_bytes",
            c.bytes_written,
            "Bytes of successful client writes",
        ),
        (
            "multiblock",
            c.multiblock,
            "Reads and writes touching more than one interleave-sized chunk",
        ),
        (
            "multistripe",
            c.multistripe,
            "Reads and writes touching more than one stripe",
        ),
        (
            "recovered_reads",
            c.recovered_reads,
            "Reads served by reconstruction or by another copy after a failure",
        ),
        (
            "degraded_writes",
            c.degraded_writes,
            "Writes that could not update every copy or parity chunk",
        ),
        (
            "full_stripe_writes",
            c.full_stripe_writes,
            "Parity stripes written whole, nothing read",
        ),
        (
            "read_modify_writes",
            c.read_modify_writes,
            "Parity stripes written by read-modify-write",
        ),
        (
            "reconstruct_writes",
            c.reconstruct_writes,
            "Parity stripes written by reconstruct-write",
        ),
        (
            "parityless_writes",
            c.parityless_writes,
            "Parity stripes written with every parity member lost",
        ),
    ]
}

/// The states `platter_volume_state` has a series for, as the live
/// status names them: every member in use; members out but every byte
/// served; a member being rebuilt (also out); data that cannot be served.
pub const VOLUME_STATES: [&str; 4] = ["clean", "degraded", "rebuilding", "failed"];

/// What the live status says of the volume's health, for the gauges that
/// alerts watch (docs/statistics.md).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VolumeHealth {
    pub state: String,
    pub members_online: u64,
    pub members_expected: u64,
    /// Rebuild, resync, reshape and scrub: the share done, while one runs.
    pub progress: [(&'static str, Option<f64>); 4],
}

impl VolumeHealth {
    /// From `status` (`Manager::status`).
    pub fn of(status: &Value) -> VolumeHealth {
        let share = |v: &Value, done: &str, of: &str| {
            let of = v[of].as_u64()?;
            Some(v[done].as_u64()? as f64 / of.max(1) as f64)
        };
        let reshape = &status["reshape"];
        let moving = reshape.is_object() && reshape["finished"] != json!(true);
        VolumeHealth {
            state: status["state"].as_str().unwrap_or("failed").to_string(),
            members_online: status["members_online"].as_u64().unwrap_or(0),
            members_expected: status["member_count"].as_u64().unwrap_or(0),
            progress: [
                (
                    "rebuild",
                    share(&status["rebuild"], "cursor_stripe", "stripes"),
                ),
                (
                    "resync",
                    share(&status["resync"], "cursor_stripe", "stripes"),
                ),
                (
                    "reshape",
                    share(reshape, "position_bytes", "total_bytes").filter(|_| moving),
                ),
                (
                    "scrub",
                    share(&status["scrub"]["in_progress"], "cursor_stripes", "stripes"),
                ),
            ],
        }
    }
}

/// The statistics in the Prometheus text format, one scrape's worth.
#[derive(Debug)]
struct Snapshot {
    name: String,
    stats: Stats,
    /// The scrub record: when the volume was last looked at whole.
    scrub: ScrubRecord,
    health: VolumeHealth,
}

pub(crate) type Labels = Vec<(&'static str, String)>;

/// One counter family: `name` (`_total` added), one sample per series.
pub(crate) fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, u64)],
) -> std::fmt::Result {
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in series {
        ConstCounter::new(*v).encode(family.encode_family(labels)?)?;
    }
    Ok(())
}

/// One gauge family, one sample per series.
pub(crate) fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, u64)],
) -> std::fmt::Result {
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in series {
        ConstGauge::new(*v as i64).encode(family.encode_family(labels)?)?;
    }
    Ok(())
}

/// A histogram family, one series per label set: log2 buckets of
/// nanoseconds as seconds.
pub(crate) fn histogram(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, &Histogram)],
) -> std::fmt::Result {
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, h) in series {
        // Counts per log2 bound from 1 µs to 64 s, then +Inf (the
        // encoder makes them cumulative): the first bound takes every
        // smaller bucket too, +Inf every larger one.
        let mut buckets: Vec<(f64, u64)> = Vec::new();
        let mut pending = 0;
        for (b, n) in h.buckets().iter().enumerate() {
            pending += n;
            if (10..=36).contains(&b) {
                buckets.push((Histogram::bucket_upper(b) as f64 / 1e9, pending));
                pending = 0;
            }
        }
        buckets.push((f64::INFINITY, pending));
        let sum = h.sum() as f64 / 1e9;
        family
            .encode_family(labels)?
            .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                sum,
                h.count(),
                &buckets,
                None,
            )?;
    }
    Ok(())
}

impl Snapshot {}

impl prometheus_client::collector::Collector for Snapshot {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        self.encode_client_counters(&mut enc)?;
        self.encode_client_load(&mut enc)?;
        self.encode_members(&mut enc)?;
        self.encode_scrub_counters(&mut enc)?;
        self.encode_checksums(&mut enc)?;
        self.encode_ppl(&mut enc)?;
        self.encode_scrub_record(&mut enc)?;
        self.encode_health(&mut enc)
    }
}

impl Snapshot {
    fn vol(&self) -> Labels {
        vec![("volume", self.name.clone())]
    }

    fn plex(&self, p: usize) -> Labels {
        vec![("volume", self.name.clone()), ("plex", p.to_string())]
    }

    fn member(&self, m: usize) -> Labels {
        vec![("volume", self.name.clone()), ("member", m.to_string())]
    }

    /// One volume-wide counter per `(field, value, help)`, as
    /// `platter_{prefix}_{field}`.
    fn volume_counters(
        &self,
        enc: &mut DescriptorEncoder,
        prefix: &str,
        fields: &[(&str, u64, &str)],
    ) -> std::fmt::Result {
        for &(field, value, help) in fields {
            counter(
                enc,
                &format!("platter_{prefix}_{field}"),
                help,
                &[(self.vol(), value)],
            )?;
        }
        Ok(())
    }

    /// The client requests' counters: each of the volume's with the
    /// plexes' of the same name after it, then those only the volume keeps.
    fn encode_client_counters(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let s = &self.stats;
        let v = counter_fields(&s.volume.counters);
        let plexes: Vec<_> = s
            .plexes
            .iter()
            .map(|p| counter_fields(&p.counters))
            .collect();
        for (i, (field, value, help)) in v.iter().enumerate() {
            counter(
                enc,
                &format!("platter_volume_{field}"),
                help,
                &[(self.vol(), *value)],
            )?;
            let series: Vec<(Labels, u64)> = plexes
                .iter()
                .enumerate()
                .map(|(p, f)| (self.plex(p), f[i].1))
                .collect();
            counter(enc, &format!("platter_plex_{field}"), help, &series)?;
        }
        let vs = &s.volume;
        self.volume_counters(
            enc,
            "volume",
            &[
                ("trims", vs.trims, "Client trims completed successfully"),
                (
                    "trimmed_bytes",
                    vs.bytes_trimmed,
                    "Bytes of successful client trims",
                ),
                (
                    "flushes",
                    vs.flushes,
                    "Client flushes completed successfully",
                ),
                (
                    "errors",
                    vs.errors,
                    "Client requests that failed or were refused",
                ),
            ],
        )
    }

    /// Client requests in the volume now, and how long they took.
    fn encode_client_load(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let s = &self.stats;
        let vs = &s.volume;
        gauge(
            enc,
            "platter_volume_outstanding",
            "Client requests in the volume now",
            &[(self.vol(), vs.outstanding)],
        )?;
        let series: Vec<(Labels, u64)> = s
            .plexes
            .iter()
            .enumerate()
            .map(|(p, x)| (self.plex(p), x.outstanding))
            .collect();
        gauge(
            enc,
            "platter_plex_outstanding",
            "Client requests in the volume now with member I/O on the plex",
            &series,
        )?;
        for (field, help, h) in [
            ("read", "Client read latency", &vs.read_latency),
            (
                "write",
                "Client write and write-zeroes latency",
                &vs.write_latency,
            ),
            ("other", "Client trim and flush latency", &vs.other_latency),
        ] {
            histogram(
                enc,
                &format!("platter_volume_{field}_latency_seconds"),
                help,
                &[(self.vol(), h)],
            )?;
        }
        Ok(())
    }

    /// Member I/O: counters, what is out now, and service time, by slot.
    fn encode_members(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let members = &self.stats.members;
        type Field = fn(&platter_core::stats::MemberStats) -> u64;
        let member_fields: [(&str, Field, &str); 9] = [
            ("reads", |m| m.reads, "Member reads issued"),
            (
                "read_bytes",
                |m| m.bytes_read,
                "Bytes of member reads issued",
            ),
            ("writes", |m| m.writes, "Member writes issued"),
            (
                "written_bytes",
                |m| m.bytes_written,
                "Bytes of member writes issued",
            ),
            ("trims", |m| m.trims, "Member trims issued"),
            (
                "trimmed_bytes",
                |m| m.bytes_trimmed,
                "Bytes of member trims issued",
            ),
            ("flushes", |m| m.flushes, "Member flushes issued"),
            ("errors", |m| m.errors, "Member I/Os that failed"),
            (
                "checksum_mismatched_blocks",
                |m| m.checksum_mismatched_blocks,
                "Blocks of the member whose bytes failed their checksums when read (create --checksums)",
            ),
        ];
        for (field, get, help) in member_fields {
            let series: Vec<(Labels, u64)> = members
                .iter()
                .enumerate()
                .map(|(i, m)| (self.member(i), get(m)))
                .collect();
            counter(enc, &format!("platter_member_{field}"), help, &series)?;
        }
        let series: Vec<(Labels, u64)> = members
            .iter()
            .enumerate()
            .map(|(i, m)| (self.member(i), m.outstanding))
            .collect();
        gauge(
            enc,
            "platter_member_outstanding",
            "Member I/Os issued and not yet done",
            &series,
        )?;
        let series: Vec<(Labels, &Histogram)> = members
            .iter()
            .enumerate()
            .map(|(i, m)| (self.member(i), &m.latency))
            .collect();
        histogram(
            enc,
            "platter_member_latency_seconds",
            "Member I/O service time",
            &series,
        )
    }

    /// What checks, repairs and the scheduled scrub compared and found.
    fn encode_scrub_counters(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let sc = &self.stats.scrub;
        self.volume_counters(enc, "scrub", &[
            ("checked_stripes", sc.checked_stripes, "Stripes compared by checks, repairs and the scheduled scrub"),
            ("mismatched_stripes", sc.mismatched_stripes, "Stripes whose parity or copies disagreed"),
            ("wrong_members", sc.wrong_members, "Members named wrong in a mismatched stripe (RAID-6 syndromes, a majority of copies)"),
            ("unlocated_stripes", sc.unlocated_stripes, "Mismatched stripes where no member could be named"),
            ("repaired_stripes", sc.repaired_stripes, "Stripes a repair rewrote"),
        ])
    }

    /// Only for a volume created with `--checksums`.
    fn encode_checksums(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let Some(c) = &self.stats.checksums else {
            return Ok(());
        };
        self.volume_counters(
            enc,
            "checksum",
            &[
                (
                    "verified_blocks",
                    c.verified_blocks,
                    "512-byte blocks read that matched their checksums",
                ),
                (
                    "mismatched_blocks",
                    c.mismatched_blocks,
                    "Blocks read that did not match their checksums (never served)",
                ),
                (
                    "repaired_reads",
                    c.repaired_reads,
                    "Member reads that failed their checksums and were rewritten from redundancy",
                ),
                (
                    "trusted_blocks",
                    c.trusted_blocks,
                    "Blocks whose checksums were set from their bytes after a crash",
                ),
                (
                    "pages_refused",
                    c.pages_refused,
                    "Checksum pages read that were not sealed pages of theirs (zeroed, discarded, torn)",
                ),
                (
                    "pages_stale",
                    c.pages_stale,
                    "Checksum pages read older than their write record (a lost write)",
                ),
            ],
        )
    }

    /// Only for a volume that keeps a partial parity log.
    fn encode_ppl(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let Some(p) = &self.stats.ppl else {
            return Ok(());
        };
        self.volume_counters(
            enc,
            "ppl",
            &[
                (
                    "records",
                    p.records,
                    "Partial parity log records written (RAID-6: one on P, one on Q)",
                ),
                (
                    "record_bytes",
                    p.record_bytes,
                    "Bytes of partial parity log records written",
                ),
                (
                    "whole_records",
                    p.whole_records,
                    "Records written only to supersede an older record of the stripe",
                ),
                (
                    "clearing_flushes",
                    p.clearing_flushes,
                    "Flushes of every member a write waited for before logging",
                ),
            ],
        )
    }

    /// The labels' scrub record, as gauges.
    fn encode_scrub_record(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let r = &self.scrub;
        for (field, v, help) in [
            (
                "last_completed_timestamp_seconds",
                r.completed_unix_seconds,
                "When the last complete pass over the volume ended (0: never)",
            ),
            (
                "last_found_stripes",
                r.last_found_stripes,
                "Mismatched stripes the last complete pass found",
            ),
            (
                "in_progress",
                u64::from(r.started_unix_seconds != 0),
                "1 while a scheduled pass runs",
            ),
            (
                "cursor_stripes",
                r.cursor_stripes,
                "The next stripe of the pass in progress",
            ),
        ] {
            gauge(
                enc,
                &format!("platter_scrub_{field}"),
                help,
                &[(self.vol(), v)],
            )?;
        }
        Ok(())
    }

    /// The gauges an alert on a degraded volume needs: its state, its
    /// members, and how far the work that restores it has come.
    fn encode_health(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let h = &self.health;
        let states: Vec<(Labels, u64)> = VOLUME_STATES
            .iter()
            .map(|&st| {
                let mut l = self.vol();
                l.push(("state", st.to_string()));
                (l, u64::from(h.state == st))
            })
            .collect();
        gauge(
            enc,
            "platter_volume_state",
            "1 for the volume's state (clean, degraded, rebuilding, failed), 0 for the others",
            &states,
        )?;
        gauge(
            enc,
            "platter_members_online",
            "Members in use (not missing, failed or being rebuilt)",
            &[(self.vol(), h.members_online)],
        )?;
        gauge(
            enc,
            "platter_members_expected",
            "Members the volume has slots for",
            &[(self.vol(), h.members_expected)],
        )?;
        self.encode_progress(enc)
    }

    /// `platter_{rebuild,resync,reshape}_in_progress` (the scrub's is the
    /// record's, above) and `platter_*_progress_ratio`, 0 when idle.
    fn encode_progress(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        for (what, share) in self.health.progress {
            if what != "scrub" {
                gauge(
                    enc,
                    &format!("platter_{what}_in_progress"),
                    &format!("1 while a {what} runs"),
                    &[(self.vol(), u64::from(share.is_some()))],
                )?;
            }
            let (name, help) = (
                format!("platter_{what}_progress_ratio"),
                format!("The share of the {what} in progress done, 0 to 1 (0: none runs)"),
            );
            let mut family = enc.encode_descriptor(&name, &help, None, MetricType::Gauge)?;
            ConstGauge::new(share.unwrap_or(0.0)).encode(family.encode_family(&self.vol())?)?;
        }
        Ok(())
    }
}

/// `stats` in the Prometheus (OpenMetrics) text format.
pub fn encode_prometheus(
    volume_name: &str,
    stats: &Stats,
    scrub: &ScrubRecord,
    health: &VolumeHealth,
) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Snapshot {
        name: volume_name.to_string(),
        stats: stats.clone(),
        scrub: *scrub,
        health: health.clone(),
    }));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String cannot fail");
    out
}

/// Requests answered at once, at most; more are closed unanswered (a
/// scraper retries), so a flood of connections cannot take a thread each.
const ANSWERING_MAX: usize = 8;

/// Serves `GET /metrics` and the live page at `/` until `stop`: one short
/// request per connection, answered and closed (a scraper or a browser
/// needs nothing more). Samples the counters for the page once a second.
pub(crate) fn serve_metrics(
    listener: TcpListener,
    volumes: Arc<crate::served::Volumes>,
    stop: Arc<AtomicBool>,
) {
    let _ = listener.set_nonblocking(true);
    let served = Arc::new(Served {
        volumes,
        histories: Mutex::new(Default::default()),
    });
    let answering = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::SeqCst) {
        served.tick();
        match listener.accept() {
            Ok((s, _)) => {
                if answering.fetch_add(1, Ordering::SeqCst) >= ANSWERING_MAX {
                    answering.fetch_sub(1, Ordering::SeqCst);
                    continue;
                }
                let _ = s.set_nonblocking(false);
                let (served, done) = (Arc::clone(&served), Arc::clone(&answering));
                let spawned = std::thread::Builder::new()
                    .name("platter-metrics".into())
                    .spawn(move || {
                        answer(s, &served);
                        done.fetch_sub(1, Ordering::SeqCst);
                    });
                if spawned.is_err() {
                    // The closure, and its decrement, never ran.
                    answering.fetch_sub(1, Ordering::SeqCst);
                    tracing::warn!("cannot start a thread to answer a metrics request");
                }
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// The volumes a metrics port serves (a pool's server serves several,
/// and starts and stops them), each with its live page's history.
struct Served {
    volumes: Arc<crate::served::Volumes>,
    /// By volume name; a volume's goes with it.
    histories: Mutex<std::collections::BTreeMap<String, History>>,
}

impl Served {
    fn tick(&self) {
        let served = self.volumes.all();
        let mut histories = self.histories.lock().unwrap_or_else(|e| e.into_inner());
        histories.retain(|name, _| served.iter().any(|s| s.name() == name));
        for s in &served {
            histories
                .entry(s.name().to_string())
                .or_default()
                .tick(&s.manager.engine);
        }
    }

    /// Every volume's families, each family once (the series carry the
    /// volume's name).
    fn metrics(&self) -> String {
        // A plex's series are its own (`volume="v.p0"`), as vinum counts
        // each plex.
        let managers = self.volumes.managers_with_plexes();
        let mut texts: Vec<String> = managers
            .iter()
            .map(|m| {
                let health = VolumeHealth::of(&m.status());
                let scrub = m.upkeep.scrubber.record();
                encode_prometheus(&m.meta.label().name, &m.engine.stats(), &scrub, &health)
            })
            .collect();
        texts.push(crate::observe::drives::encode(
            &crate::observe::drives::drive_counters(&managers),
        ));
        merge_families(&texts)
    }

    /// The live page of the volume `?volume=NAME` names (the first by
    /// default), with links to the others.
    fn page(&self, query: &str) -> String {
        let managers = self.volumes.managers();
        let names: Vec<String> = managers
            .iter()
            .map(|m| m.meta.label().name.clone())
            .collect();
        let wanted = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("volume="))
            .and_then(|n| names.iter().position(|x| x == n))
            .unwrap_or(0);
        let Some(m) = managers.get(wanted) else {
            return "<!DOCTYPE html><html><body><p>no volume is served</p></body></html>".into();
        };
        let status = m.status();
        let histories = self.histories.lock().unwrap_or_else(|e| e.into_inner());
        let empty = History::default();
        let h = histories.get(&names[wanted]).unwrap_or(&empty);
        let page = crate::observe::livepage::render(h, &status);
        if names.len() < 2 {
            return page;
        }
        let links: Vec<String> = names
            .iter()
            .map(|n| {
                let n = crate::observe::livepage::esc(n);
                format!("<a href=\"/?volume={n}\">{n}</a>")
            })
            .collect();
        let drives = crate::observe::drives::drive_counters(&managers);
        page.replacen(
            "<body>",
            &format!(
                "<body><p>volumes: {}</p>{}",
                links.join(" "),
                crate::observe::drives::html_table(&drives)
            ),
            1,
        )
    }
}

/// Several OpenMetrics texts as one: each family once, its descriptor
/// lines from the first text that has it, then every text's samples of
/// it, in the order families first appear; one `# EOF`.
fn merge_families(texts: &[String]) -> String {
    let mut order: Vec<String> = Vec::new();
    let mut head: std::collections::HashMap<String, Vec<String>> = Default::default();
    let mut samples: std::collections::HashMap<String, Vec<String>> = Default::default();
    for text in texts {
        let mut family = String::new();
        for line in text.lines().filter(|l| *l != "# EOF") {
            if let Some(rest) = line.strip_prefix("# ") {
                let name = rest.split(' ').nth(1).unwrap_or("").to_string();
                if !order.contains(&name) {
                    order.push(name.clone());
                }
                let lines = head.entry(name.clone()).or_default();
                if !lines.iter().any(|l| l == line) {
                    lines.push(line.to_string());
                }
                family = name;
            } else {
                samples
                    .entry(family.clone())
                    .or_default()
                    .push(line.to_string());
            }
        }
    }
    let mut out = String::new();
    for f in &order {
        for l in head
            .get(f)
            .into_iter()
            .flatten()
            .chain(samples.get(f).into_iter().flatten())
        {
            out.push_str(l);
            out.push('\n');
        }
    }
    out.push_str("# EOF\n");
    out
}

/// Reads one HTTP request and answers it.
fn answer(stream: TcpStream, served: &Served) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new((&stream).take(16 * 1024));
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    // Headers up to the blank line; their content does not matter.
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line == "\r\n" || line == "\n" => break,
            Ok(_) => {}
        }
    }
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") | ("HEAD", "/metrics") => (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            served.metrics(),
        ),
        ("GET", "/") | ("HEAD", "/") => ("200 OK", "text/html; charset=utf-8", served.page(query)),
        ("GET", _) | ("HEAD", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "platter serves a live page at / and its metrics at /metrics\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET / and GET /metrics\n".to_string(),
        ),
    };
    let mut out = &stream;
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = out.write_all(head.as_bytes());
    if method != "HEAD" {
        let _ = out.write_all(body.as_bytes());
    }
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use platter_core::stats::Stats;

    /// A pool's server scrapes as one text: a family named twice (its
    /// HELP and TYPE once per volume) is not valid OpenMetrics, and
    /// Prometheus refuses the whole scrape.
    #[test]
    fn volumes_merge_into_one_family_each_with_every_volumes_series() {
        let health = VolumeHealth::of(&json!({
            "state": "clean", "members_online": 2, "member_count": 2,
            "rebuild": null, "reshape": null, "resync": null, "scrub": { "in_progress": null },
        }));
        let texts: Vec<String> = ["a", "b"]
            .iter()
            .map(|v| encode_prometheus(v, &Stats::new(2, 2), &ScrubRecord::default(), &health))
            .collect();
        let merged = merge_families(&texts);
        let types = |t: &str| t.lines().filter(|l| l.starts_with("# TYPE")).count();
        assert_eq!(types(&merged), types(&texts[0]), "each family once");
        assert_eq!(merged.matches("# EOF").count(), 1);
        assert!(merged.trim_end().ends_with("# EOF"));
        let samples = |t: &str, v: &str| {
            t.lines()
                .filter(|l| l.contains(&format!("volume=\"{v}\"")))
                .count()
        };
        assert_eq!(samples(&merged, "a"), samples(&texts[0], "a"));
        assert_eq!(samples(&merged, "b"), samples(&texts[1], "b"));
        assert!(samples(&merged, "a") > 10, "{merged}");
        // Every sample follows its own family's descriptor.
        let mut family = String::new();
        for line in merged.lines() {
            match line.strip_prefix("# TYPE ") {
                Some(rest) => family = rest.split(' ').next().unwrap().to_string(),
                None if !line.starts_with('#') => {
                    assert!(line.starts_with(&family), "{line} under {family}")
                }
                None => {}
            }
        }
    }

    #[test]
    fn encodes_every_family() {
        let mut s = Stats::new(2, 2);
        s.volume.counters.bytes_written = 4096;
        s.volume.counters.multistripe = 3;
        s.plexes[1].counters.reads = 7;
        s.members[0].bytes_read = 512;
        s.volume.read_latency.record(3_000);
        s.scrub.mismatched_stripes = 5;
        s.members[1].checksum_mismatched_blocks = 9;
        s.checksums = Some(platter_core::stats::ChecksumStats {
            repaired_reads: 4,
            ..Default::default()
        });
        s.ppl = Some(platter_core::stats::PplStats {
            records: 6,
            ..Default::default()
        });
        let scrub = ScrubRecord {
            completed_unix_seconds: 1_700_000_000,
            last_found_stripes: 2,
            ..ScrubRecord::default()
        };
        let health = VolumeHealth::of(&json!({
            "state": "degraded", "members_online": 2, "member_count": 3,
            "rebuild": { "cursor_stripe": 25, "stripes": 100 },
            "reshape": null, "resync": null, "scrub": { "in_progress": null },
        }));
        let text = encode_prometheus("v1", &s, &scrub, &health);
        for line in [
            "platter_scrub_mismatched_stripes_total{volume=\"v1\"} 5",
            "platter_scrub_last_completed_timestamp_seconds{volume=\"v1\"} 1700000000",
            "platter_scrub_last_found_stripes{volume=\"v1\"} 2",
            "platter_scrub_in_progress{volume=\"v1\"} 0",
            "platter_checksum_repaired_reads_total{volume=\"v1\"} 4",
            "platter_ppl_records_total{volume=\"v1\"} 6",
            "platter_member_checksum_mismatched_blocks_total{volume=\"v1\",member=\"1\"} 9",
            "platter_volume_state{volume=\"v1\",state=\"degraded\"} 1",
            "platter_volume_state{volume=\"v1\",state=\"clean\"} 0",
            "platter_members_online{volume=\"v1\"} 2",
            "platter_members_expected{volume=\"v1\"} 3",
            "platter_rebuild_in_progress{volume=\"v1\"} 1",
            "platter_rebuild_progress_ratio{volume=\"v1\"} 0.25",
            "platter_resync_in_progress{volume=\"v1\"} 0",
            "platter_reshape_progress_ratio{volume=\"v1\"} 0.0",
            "platter_scrub_progress_ratio{volume=\"v1\"} 0.0",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        assert!(
            text.contains("platter_volume_written_bytes_total{volume=\"v1\"} 4096"),
            "{text}"
        );
        assert!(
            text.contains("platter_volume_multistripe_total{volume=\"v1\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("platter_plex_reads_total{volume=\"v1\",plex=\"1\"} 7"),
            "{text}"
        );
        assert!(
            text.contains("platter_member_read_bytes_total{volume=\"v1\",member=\"0\"} 512"),
            "{text}"
        );
        assert!(
            text.contains("platter_volume_read_latency_seconds_count{volume=\"v1\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE platter_volume_outstanding gauge"),
            "{text}"
        );
        assert!(text.trim_end().ends_with("# EOF"), "{text}");
        // Cumulative buckets: 3 µs is under the 4.096 µs bound.
        assert!(
            text.contains(
                "platter_volume_read_latency_seconds_bucket{le=\"0.000002048\",volume=\"v1\"} 0"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "platter_volume_read_latency_seconds_bucket{le=\"0.000004096\",volume=\"v1\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "platter_volume_read_latency_seconds_bucket{le=\"+Inf\",volume=\"v1\"} 1"
            ),
            "{text}"
        );
    }
}
