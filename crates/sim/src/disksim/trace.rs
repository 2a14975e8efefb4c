//! DiskSim "validate" traces and the demerit figure.
//!
//! Each trace line is `R|W  HIT  blkno  sectors  service_us  next_us`:
//! read or write, what the measuring tool saw of the drive's cache (`Hit`,
//! `Miss`, or for writes `Doub`/`Trip`, double and triple disconnects),
//! the first block, the length in sectors, the measured service time, and
//! the idle time before the next request. As in DiskSim's
//! `iotrace_validate_get_ioreq_event`, one request is outstanding at a
//! time: request `i + 1` arrives `next_us` of line `i` after request `i`
//! completed in the simulation (the first arrives at time 0).
//!
//! The demerit (Ruemmler and Wilkes 1994) is the root-mean-square
//! horizontal distance between the measured and the simulated
//! response-time distributions. [`demerit_ms`] computes it as DiskSim's
//! `rms` utility does from DiskSim's printed distributions: both samples
//! are put in the 1750 buckets of the "access time" statistics (bucket
//! bounds in microseconds, starting at 0 and growing by 1 plus 1 %), and
//! the two cumulative curves are compared at every 0.0001 of probability
//! with linear interpolation between bucket bounds.

use crate::disk::drive::{Command, Drive, DriveSpec, Hit, Kind};
use std::path::Path;

#[derive(Clone, Debug, PartialEq)]
pub struct TraceRecord {
    pub write: bool,
    /// `Hit`, `Miss`, `Doub`, `Trip`.
    pub cache: String,
    pub lbn: u64,
    pub sectors: u32,
    pub measured_ms: f64,
    pub next_ms: f64,
}

pub fn parse_trace(text: &str, name: &str) -> Result<Vec<TraceRecord>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        let bad = |what: &str| format!("{name}:{}: {what} in {line:?}", i + 1);
        if f.len() != 6 {
            return Err(bad("expected 6 fields"));
        }
        let write = match f[0] {
            "R" => false,
            "W" => true,
            _ => return Err(bad("expected R or W")),
        };
        let num = |s: &str, what: &str| s.parse::<f64>().map_err(|_| bad(what));
        let lbn = f[2].parse::<u64>().map_err(|_| bad("bad block number"))?;
        let sectors = f[3].parse::<u32>().map_err(|_| bad("bad sector count"))?;
        if sectors == 0 {
            return Err(bad("zero sectors"));
        }
        out.push(TraceRecord {
            write,
            cache: f[1].to_string(),
            lbn,
            sectors,
            measured_ms: num(f[4], "bad service time")? / 1000.0,
            next_ms: num(f[5], "bad inter-arrival time")? / 1000.0,
        });
    }
    Ok(out)
}

pub fn read_trace(path: &Path) -> Result<Vec<TraceRecord>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_trace(&text, &path.display().to_string())
}

/// One replayed request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Replayed {
    pub simulated_ms: f64,
    pub hit: Hit,
}

/// Replays `trace` against one drive, DiskSim's validate mode.
pub fn replay(spec: &DriveSpec, trace: &[TraceRecord]) -> Vec<Replayed> {
    let mut drive = Drive::new(spec.clone());
    let blocks = drive.blocks();
    let mut now = 0.0;
    let mut out = Vec::with_capacity(trace.len());
    for (i, r) in trace.iter().enumerate() {
        let count = r.sectors.min(blocks as u32);
        let lbn = r.lbn.min(blocks - u64::from(count));
        drive.submit(
            now,
            Command {
                token: i as u64,
                kind: if r.write { Kind::Write } else { Kind::Read },
                lbn,
                count,
            },
        );
        let t = drive.next_event_ms().expect("a command in service");
        let done = drive.advance(t);
        assert_eq!(done.len(), 1, "one command at a time");
        out.push(Replayed {
            simulated_ms: done[0].done_ms - now,
            hit: done[0].hit,
        });
        now = done[0].done_ms + r.next_ms;
    }
    out
}

/// Bucket lower bounds (µs) of DiskSim's "access time" distributions.
fn buckets() -> Vec<i64> {
    let mut v = Vec::with_capacity(1750);
    let mut b: i64 = 0;
    for _ in 0..1750 {
        v.push(b);
        b += 1 + (b.abs() as f64 / 100.0) as i64;
    }
    v
}

/// DiskSim's printed cumulative distribution: `(x_ms, fraction)` points.
fn distribution(samples_ms: &[f64], starts: &[i64]) -> Vec<(f64, f64)> {
    let n = starts.len();
    let mut counts = vec![0u64; n];
    for &v in samples_ms {
        let iv = (v * 1000.0) as i64;
        // Bucket k holds values in [starts[k-1], starts[k]) (DiskSim's
        // stat_update with growing buckets); the last catches the rest.
        let k = starts.partition_point(|&s| s <= iv);
        counts[k.min(n - 1)] += 1;
    }
    let total = samples_ms.len().max(1) as f64;
    let mut cum = 0.0;
    let mut out = Vec::with_capacity(n);
    for (k, &c) in counts.iter().enumerate() {
        cum += c as f64 / total;
        // DiskSim prints six decimals and `rms` reads them back.
        let y = (cum * 1e6).round() / 1e6;
        out.push((starts[k] as f64 / 1000.0, y));
        if y >= 1.0 {
            break;
        }
    }
    out
}

fn quantile(line: &[(f64, f64)], i: &mut usize, p: f64) -> f64 {
    while *i < line.len() - 1 && line[*i].1 < p {
        *i += 1;
    }
    let k = (*i).max(1);
    let (x0, y0) = line[k - 1];
    let (x1, y1) = line[k];
    if y1 == y0 {
        x1
    } else {
        x0 + (p - y0) / (y1 - y0) * (x1 - x0)
    }
}

/// The demerit in ms, as DiskSim's `rms` computes it.
pub fn demerit_ms(measured_ms: &[f64], simulated_ms: &[f64]) -> f64 {
    if measured_ms.is_empty() || simulated_ms.is_empty() {
        return 0.0;
    }
    let starts = buckets();
    let a = distribution(measured_ms, &starts);
    let b = distribution(simulated_ms, &starts);
    let (mut i, mut j) = (0, 0);
    let (mut sum, mut count) = (0.0, 0u32);
    let mut p = 0.0001;
    while p <= 1.0 {
        let d = quantile(&a, &mut i, p) - quantile(&b, &mut j, p);
        sum += d * d;
        count += 1;
        p += 0.0001;
    }
    (sum / f64::from(count)).sqrt()
}

/// The demerit from exact empirical quantiles (no buckets), for
/// comparison with the bucketed figure.
pub fn demerit_exact_ms(measured_ms: &[f64], simulated_ms: &[f64]) -> f64 {
    let mut a = measured_ms.to_vec();
    let mut b = simulated_ms.to_vec();
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let q = |v: &[f64], p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    let steps = 10_000;
    let sum: f64 = (1..=steps)
        .map(|k| {
            let p = f64::from(k) / f64::from(steps);
            let d = q(&a, p) - q(&b, p);
            d * d
        })
        .sum();
    (sum / f64::from(steps)).sqrt()
}

/// What `platter sim validate` prints.
#[derive(Clone, Debug, PartialEq)]
pub struct Validation {
    pub requests: usize,
    pub demerit_ms: f64,
    pub demerit_exact_ms: f64,
    pub mean_measured_ms: f64,
    pub mean_simulated_ms: f64,
    /// Reads the trace marks `Hit` / reads it marks `Hit` or `Miss`.
    pub measured_read_hit_ratio: Option<f64>,
    pub simulated_read_hit_ratio: f64,
}

pub fn validate(spec: &DriveSpec, trace: &[TraceRecord]) -> Validation {
    summarize(trace, &replay(spec, trace))
}

/// The figures of a replay `sim` of `trace`.
pub fn summarize(trace: &[TraceRecord], sim: &[Replayed]) -> Validation {
    let measured: Vec<f64> = trace.iter().map(|r| r.measured_ms).collect();
    let simulated: Vec<f64> = sim.iter().map(|r| r.simulated_ms).collect();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let reads: Vec<usize> = (0..trace.len()).filter(|&i| !trace[i].write).collect();
    let marked: Vec<&TraceRecord> = reads
        .iter()
        .map(|&i| &trace[i])
        .filter(|r| r.cache == "Hit" || r.cache == "Miss")
        .collect();
    // A trace that marks every read a hit carries no cache information.
    let measured_read_hit_ratio = (!marked.is_empty() && marked.iter().any(|r| r.cache == "Miss"))
        .then(|| marked.iter().filter(|r| r.cache == "Hit").count() as f64 / marked.len() as f64);
    let sim_hits = reads.iter().filter(|&&i| sim[i].hit == Hit::Whole).count();
    Validation {
        requests: trace.len(),
        demerit_ms: demerit_ms(&measured, &simulated),
        demerit_exact_ms: demerit_exact_ms(&measured, &simulated),
        mean_measured_ms: mean(&measured),
        mean_simulated_ms: mean(&simulated),
        measured_read_hit_ratio,
        simulated_read_hit_ratio: sim_hits as f64 / reads.len().max(1) as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_samples_have_no_demerit_and_a_shift_shows() {
        let a: Vec<f64> = (0..1000).map(|i| 1.0 + f64::from(i) * 0.01).collect();
        assert!(demerit_ms(&a, &a) < 1e-9);
        let b: Vec<f64> = a.iter().map(|x| x + 1.0).collect();
        let d = demerit_ms(&a, &b);
        assert!((d - 1.0).abs() < 0.1, "{d}");
        assert!((demerit_exact_ms(&a, &b) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn trace_lines_parse() {
        let t = parse_trace("R Hit 10 4 15362.0 56074.0\nW Doub 3 1 10.5 2.5\n", "t").unwrap();
        assert_eq!(t.len(), 2);
        assert!(t[1].write);
        assert_eq!(t[0].sectors, 4);
        assert!((t[0].measured_ms - 15.362).abs() < 1e-12);
        assert!(parse_trace("X Hit 1 1 1 1\n", "t").is_err());
    }
}
