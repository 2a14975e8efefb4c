//! Following long work on a served volume until it ends: `platter status
//! --watch` and `platter replace --wait`. The server's status says how far
//! a rebuild or a resync has come (percent, rate, ETA); this polls it and
//! shows a progress bar on a terminal, or one plain line per poll otherwise
//! (for logs and scripts).

use crate::control::ask;
use crate::error::{CliError, Result};
use crate::out::outln;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use platter_core::units::format_size;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// What the server is busy with, from one status answer.
#[derive(Clone, Debug, PartialEq)]
struct Job {
    /// "rebuild", "reshape" or "resync".
    kind: &'static str,
    /// The rebuilt slot; `None` for a resync or a reshape.
    member: Option<u64>,
    cursor_stripe: u64,
    stripes: u64,
    percent: f64,
    rate_bytes_per_sec: u64,
    eta_seconds: u64,
    rewritten_stripes: u64,
}

impl Job {
    /// A rebuild if one runs (the resync waits while it does), else a
    /// resync, else nothing.
    fn of(status: &Value) -> Option<Job> {
        let running = |k: &str| {
            status
                .get(k)
                .filter(|r| !r.is_null() && !r["finished"].as_bool().unwrap_or(false))
        };
        // A stopped reshape is not running: the watch ends and says why.
        if let Some(r) = running("reshape").filter(|r| r["stuck"].is_null()) {
            // Bytes, counted as the rebuild's stripes are.
            let n = |k: &str| r.get(k).and_then(Value::as_u64).unwrap_or(0);
            return Some(Job {
                kind: "reshape",
                member: None,
                cursor_stripe: n("position_bytes"),
                stripes: n("total_bytes"),
                percent: r.get("percent").and_then(Value::as_f64).unwrap_or(0.0),
                rate_bytes_per_sec: n("rate_bytes_per_sec"),
                eta_seconds: n("eta_seconds"),
                rewritten_stripes: 0,
            });
        }
        let (kind, r, member) = match (running("rebuild"), running("resync")) {
            (Some(r), _) => ("rebuild", r, r.get("member").and_then(Value::as_u64)),
            (_, Some(r)) => ("resync", r, None),
            _ => return None,
        };
        let n = |k: &str| r.get(k).and_then(Value::as_u64).unwrap_or(0);
        Some(Job {
            kind,
            member,
            cursor_stripe: n("cursor_stripe"),
            stripes: n("stripes"),
            percent: r.get("percent").and_then(Value::as_f64).unwrap_or(0.0),
            rate_bytes_per_sec: n("rate_bytes_per_sec"),
            eta_seconds: n("eta_seconds"),
            rewritten_stripes: n("rewritten_stripes"),
        })
    }

    fn name(&self) -> String {
        match self.member {
            Some(m) => format!("rebuild slot {m}"),
            None => self.kind.to_string(),
        }
    }

    /// "43.1% at 120M/s, ETA 12 s"
    fn progress(&self) -> String {
        let mut s = format!("{:.1}%", self.percent);
        if self.rate_bytes_per_sec > 0 {
            s += &format!(
                " at {}/s, ETA {} s",
                format_size(self.rate_bytes_per_sec),
                self.eta_seconds
            );
        } else {
            s += " (rate not measured yet)";
        }
        if self.member.is_none() && self.rewritten_stripes > 0 {
            s += &format!(", {} stripes rewritten", self.rewritten_stripes);
        }
        s
    }

    /// How the job ended, judged by the status after it: a rebuild
    /// succeeded if its slot is in use now.
    fn outcome(&self, after: &Value) -> std::result::Result<String, String> {
        if self.kind == "reshape" {
            if let Some(why) = after["reshape"]["stuck"].as_str() {
                return Err(format!("reshape stopped: {why}"));
            }
            return Ok(
                "reshape: done, every byte is in the new layout (clients that connect \
                 from now on see the new size)"
                    .to_string(),
            );
        }
        let Some(m) = self.member else {
            return Ok(format!(
                "resync: done, {} stripes rewritten",
                self.rewritten_stripes
            ));
        };
        let state = after["members"][m as usize]["state"]
            .as_str()
            .unwrap_or("unknown");
        if state == "active" {
            Ok(format!("rebuild slot {m}: done, the member is active"))
        } else {
            Err(format!("rebuild slot {m} stopped: the member is {state}"))
        }
    }
}

/// Where progress goes: a bar on a terminal, lines elsewhere, or the status
/// itself as JSON lines.
enum Display {
    Bar(Option<ProgressBar>),
    Lines,
    Json,
}

impl Display {
    fn show(&mut self, job: &Job, status: &Value, started: bool) {
        match self {
            Display::Json => outln!("{status}"),
            Display::Lines => outln!("{}: {}", job.name(), job.progress()),
            Display::Bar(bar) => {
                if started {
                    if let Some(old) = bar.take() {
                        old.finish();
                    }
                }
                let bar = bar.get_or_insert_with(|| {
                    let b = ProgressBar::with_draw_target(
                        Some(job.stripes),
                        ProgressDrawTarget::stdout(),
                    );
                    b.set_style(
                        ProgressStyle::with_template("{prefix:>16} [{bar:40}] {msg}")
                            .expect("a valid template")
                            .progress_chars("=> "),
                    );
                    b.set_prefix(job.name());
                    b
                });
                bar.set_length(job.stripes);
                bar.set_position(job.cursor_stripe);
                bar.set_message(job.progress());
            }
        }
    }

    /// The job seen last is over; `done` if it went to the end.
    fn ended(&mut self, line: &str, done: bool) {
        match self {
            Display::Json => {}
            Display::Lines => outln!("{line}"),
            Display::Bar(bar) => match bar.take() {
                Some(b) => {
                    if done {
                        // The last look was before the end.
                        b.set_position(b.length().unwrap_or(0));
                        b.set_message("100.0%");
                    }
                    b.finish();
                    outln!("{line}");
                }
                None => outln!("{line}"),
            },
        }
    }
}

/// Polls the server every `interval` and shows the rebuild or resync until
/// none runs. Ok when nothing ran or everything finished; an error when a
/// rebuild stopped short (its member failed) or the reshape stopped.
pub fn watch(control: &PathBuf, interval: Duration, json_out: bool) -> Result<()> {
    let mut display = if json_out {
        Display::Json
    } else if crate::out::stdout_is_terminal() {
        Display::Bar(None)
    } else {
        Display::Lines
    };
    let mut current: Option<Job> = None;
    let mut failures = Vec::new();
    loop {
        let status = ask(control, json!({ "cmd": "status" }))?;
        let job = Job::of(&status);
        // The job seen last ended if another one (or none) runs now.
        let same = matches!((&current, &job), (Some(a), Some(b)) if a.kind == b.kind && a.member == b.member);
        if let (Some(old), false) = (&current, same) {
            match old.outcome(&status) {
                Ok(line) => display.ended(&line, true),
                Err(line) => {
                    display.ended(&line, false);
                    failures.push(line);
                }
            }
        }
        let Some(job) = job else {
            let stopped = status["reshape"]["stuck"].as_str();
            if let (None, Some(why)) = (&current, stopped) {
                failures.push(format!("the reshape stopped: {why}"));
            } else if current.is_none() && !json_out {
                outln!(
                    "nothing to wait for: no rebuild, reshape or resync runs on '{}'",
                    platter_core::label::printable(status["name"].as_str().unwrap_or("?"))
                );
            }
            break;
        };
        display.show(&job, &status, !same);
        current = Some(job);
        std::thread::sleep(interval);
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(CliError(failures.join("; ")))
    }
}

/// `--interval SECS`: a positive number of seconds, fractions allowed.
pub fn parse_interval(s: &str) -> std::result::Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(secs > 0.0 && secs <= 3600.0) {
        return Err(format!("{s}: give between 0 and 3600 seconds"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rebuild_wins_over_a_resync_and_reads_its_numbers() {
        let v = json!({
            "rebuild": { "member": 2, "cursor_stripe": 431, "stripes": 1000, "percent": 43.1,
                         "rate_bytes_per_sec": 120u64 << 20, "eta_seconds": 12 },
            "resync": { "cursor_stripe": 0, "stripes": 1000, "percent": 0.0 },
        });
        let j = Job::of(&v).expect("a job");
        assert_eq!(j.member, Some(2));
        assert_eq!(j.name(), "rebuild slot 2");
        assert_eq!(j.progress(), "43.1% at 120M/s, ETA 12 s");
        let r = json!({ "rebuild": null, "resync": { "cursor_stripe": 5, "stripes": 10,
                        "percent": 50.0, "rewritten_stripes": 3 } });
        let j = Job::of(&r).expect("a resync");
        assert_eq!(j.member, None);
        assert_eq!(
            j.progress(),
            "50.0% (rate not measured yet), 3 stripes rewritten"
        );
        assert_eq!(Job::of(&json!({ "rebuild": null, "resync": null })), None);
    }

    #[test]
    fn a_rebuild_succeeded_only_if_its_member_is_active() {
        let j = Job::of(&json!({ "rebuild": { "member": 1 } })).unwrap();
        let ok = json!({ "members": [{ "state": "active" }, { "state": "active" }] });
        let bad = json!({ "members": [{ "state": "active" }, { "state": "faulty" }] });
        assert!(j.outcome(&ok).is_ok());
        assert_eq!(
            j.outcome(&bad),
            Err("rebuild slot 1 stopped: the member is faulty".to_string())
        );
    }

    #[test]
    fn intervals() {
        assert_eq!(parse_interval("0.2"), Ok(Duration::from_millis(200)));
        assert!(parse_interval("0").is_err());
        assert!(parse_interval("-1").is_err());
        assert!(parse_interval("soon").is_err());
    }
}
