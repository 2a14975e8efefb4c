//! The scheduled scrub (`serve --scrub-every`): a `check` of the whole
//! volume, a few stripes at a time at `--scrub-rate`, every interval. Its
//! record lives in the labels (format version 2, `ScrubRecord`): a pass in
//! progress resumes at its cursor after a restart, and the time of the last
//! complete pass, with what it found, is there for `status`, `stats` and
//! the Prometheus endpoint. It only checks: what it finds is logged with
//! where and which member, and `platter repair` mends it (RAID-6 and three
//! or more copies mend the member they name; docs/failures.md).
//!
//! It runs from the upkeep thread, between its other work: never during a
//! rebuild or a resync, and it waits while a member is lost (a degraded
//! stripe has nothing to compare with).

use crate::engine::meta::{now_unix_seconds, Meta};
use crate::engine::upkeep::pace;
use crate::engine::Engine;
use platter_core::label::ScrubRecord;
use platter_core::volume::{Health, Maintenance, Reply, Request};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bytes per scrub step: each holds its stripes' locks while it reads.
const STEP_BYTES: u64 = 4 << 20;
/// How often a pass in progress records its cursor in the labels.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(10);
/// Mismatches a pass logs one by one; the count goes on.
const LOGGED_MISMATCHES_MAX: u64 = 100;

/// The schedule, and the pass's state between steps.
pub struct Scrubber {
    /// 0: no scheduled scrub.
    pub every_secs: AtomicU64,
    pub rate_bytes_per_sec: AtomicU64,
    /// The record as it stands (the labels get it at checkpoints).
    record: Mutex<ScrubRecord>,
    last_checkpoint: Mutex<Option<Instant>>,
}

impl Scrubber {
    pub fn new(every: Option<Duration>, rate_bytes_per_sec: u64, record: ScrubRecord) -> Scrubber {
        Scrubber {
            every_secs: AtomicU64::new(every.map_or(0, |d| d.as_secs().max(1))),
            rate_bytes_per_sec: AtomicU64::new(rate_bytes_per_sec.max(1)),
            record: Mutex::new(record),
            last_checkpoint: Mutex::new(None),
        }
    }

    /// The record as it stands now (fresher than the labels').
    pub fn record(&self) -> ScrubRecord {
        *self.record.lock().expect("scrub record")
    }

    /// For `status` and `stats`: the schedule and the record.
    pub fn status(&self, stripes: u64) -> serde_json::Value {
        let mut m = crate::observe::describe::scrub_record_fields(&self.record(), stripes);
        let every = self.every_secs.load(Ordering::Relaxed);
        m.insert(
            "every_secs".into(),
            serde_json::json!((every > 0).then_some(every)),
        );
        m.insert(
            "rate_bytes_per_sec".into(),
            serde_json::json!(self.rate_bytes_per_sec.load(Ordering::Relaxed)),
        );
        serde_json::Value::Object(m)
    }

    /// A whole-volume `check` or `repair` run by hand ended: it counts as a
    /// complete pass.
    pub fn completed_by_hand(&self, meta: &Meta, found_stripes: u64) {
        let r = {
            let mut r = self.record.lock().expect("scrub record");
            r.completed_unix_seconds = now_unix_seconds().max(1);
            r.last_found_stripes = found_stripes;
            *r
        };
        meta.record(|l| l.scrub = r);
    }

    /// One step of the schedule: starts a pass when one is due, checks the
    /// next stripes of the pass in progress, or ends it. False when there
    /// was nothing to do.
    pub fn step(&self, engine: &Engine, meta: &Meta, stop: &AtomicBool) -> bool {
        let every = self.every_secs.load(Ordering::Relaxed);
        if every == 0 {
            return false;
        }
        if engine.health().iter().any(|h| *h != Health::Online) {
            return false;
        }
        let (stripes, stripe_bytes) = engine.with_volume(|v| {
            let g = v.geometry();
            (g.stripes(), g.stripe_data_bytes())
        });
        let now = now_unix_seconds();
        let mut r = self.record();
        if r.started_unix_seconds == 0 {
            // The first pass comes one interval after the volume's
            // creation, the next one interval after the last.
            let since = r
                .completed_unix_seconds
                .max(meta.label().created_unix_seconds);
            if now < since.saturating_add(every) {
                return false;
            }
            r.started_unix_seconds = now.max(1);
            r.cursor_stripes = 0;
            r.found_stripes = 0;
            tracing::info!(stripes, "scheduled scrub started");
            self.save(meta, r, true);
        }
        if r.cursor_stripes >= stripes {
            tracing::info!(
                stripes,
                mismatched = r.found_stripes,
                "scheduled scrub finished"
            );
            if r.found_stripes > 0 {
                tracing::warn!(
                    mismatched = r.found_stripes,
                    "the scrub found stripes whose parity or copies disagree: \
                     `platter check` lists them, `platter repair` mends them"
                );
                engine.alert(crate::observe::alerts::Alert::new(
                    crate::observe::alerts::EventKind::MismatchesFound,
                    format!(
                        "the scheduled scrub found {} of {stripes} stripes whose parity or \
                         copies disagree (`platter check` lists them, `platter repair` mends them)",
                        r.found_stripes
                    ),
                ));
            }
            r = ScrubRecord {
                completed_unix_seconds: now.max(1),
                last_found_stripes: r.found_stripes,
                ..ScrubRecord::default()
            };
            self.save(meta, r, true);
            return true;
        }
        let count = (STEP_BYTES / stripe_bytes).clamp(1, stripes - r.cursor_stripes);
        let started = Instant::now();
        let answer = engine.run(Request::Maintain {
            first_stripe: r.cursor_stripes,
            stripe_count: count,
            action: Maintenance::Check,
        });
        match answer {
            Ok(Reply::Checked(rep)) => {
                for &s in &rep.mismatched_stripes {
                    if r.found_stripes < LOGGED_MISMATCHES_MAX {
                        let wrong: Vec<u32> = rep.wrong_members_of(s).collect();
                        tracing::warn!(
                            offset_bytes = s * stripe_bytes,
                            length_bytes = stripe_bytes,
                            wrong_slots = ?wrong,
                            "scrub: parity or copies disagree"
                        );
                    }
                    r.found_stripes += 1;
                }
                // A member lost during the step: its stripes were not
                // checked; the pass waits (above) and checks them again.
                if rep.unchecked_stripes == 0 {
                    r.cursor_stripes += count;
                }
            }
            Ok(other) => tracing::error!(?other, "scrub step: unexpected answer"),
            Err(e) => {
                tracing::warn!(error = %e, "scrub step failed; retrying in a second");
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        self.save(meta, r, false);
        pace(
            &self.rate_bytes_per_sec,
            stop,
            count * stripe_bytes,
            started,
        );
        true
    }

    /// Keeps the record; writes it to the labels now (`durable`) or at the
    /// next checkpoint.
    fn save(&self, meta: &Meta, r: ScrubRecord, durable: bool) {
        *self.record.lock().expect("scrub record") = r;
        let mut last = self.last_checkpoint.lock().expect("scrub checkpoint");
        if durable || last.is_none_or(|t| t.elapsed() >= CHECKPOINT_INTERVAL) {
            meta.record(|l| l.scrub = r);
            *last = Some(Instant::now());
        }
    }
}
