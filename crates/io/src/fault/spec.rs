//! [`FaultSpec`]: what to inject, and its one-line text form for the command
//! line (`fail-nth=7,fail-from=100,fail-rate=0.001,latency=500us,latency-from=20,tear-rate=0.01,seed=3`,
//! `bad-range=2M+64k,bad-range=5M+1s`).

use std::fmt;
use std::str::FromStr;

use platter_core::units::parse_size;

use super::SECTOR_BYTES;

/// What a [`FaultyMember`](super::FaultyMember) injects. Every fault is off
/// by default.
///
/// I/Os are numbered from 1 in the order they reach the wrapper, counting
/// reads, writes, flushes and trims alike (requests past the end of the
/// member are refused before they are numbered). The numbering restarts
/// whenever a spec is set.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultSpec {
    /// The Nth I/O fails; later ones succeed.
    pub fail_nth: Option<u64>,
    /// Every I/O from the Nth on fails (a dead disk).
    pub fail_from_nth: Option<u64>,
    /// Each I/O fails with this probability, decided from `seed` and the
    /// I/O's number alone, so the same seed fails the same numbers.
    pub fail_rate: f64,
    /// Microseconds added to every I/O (`std::thread::sleep`, outside any
    /// lock). The simulator ignores it and models time itself.
    pub latency_us: u64,
    /// How much each I/O's latency varies on top of `latency_us`, decided
    /// from `seed` and the I/O's number (`latency-jitter=`): a member that
    /// looks like a disk, not a constant.
    pub latency_jitter: Option<Jitter>,
    /// Latency (and its jitter) only for I/Os numbered this or later
    /// (`latency-from=N`): a member that becomes slow while served, whose
    /// label reads and writes at the start stay fast. `None`: from the
    /// first.
    pub latency_from_nth: Option<u64>,
    /// A write that is not failed otherwise tears with this probability: a
    /// prefix of its 512-byte sectors (possibly none, never all) lands, then
    /// it fails. Sectors are counted at absolute 512-byte boundaries, so an
    /// unaligned write's first and last sectors are partial.
    pub tear_rate: f64,
    pub seed: u64,
    /// Keep an undo log of the writes and trims since the last successful
    /// flush, so that [`FaultControls::crash`](super::FaultControls::crash)
    /// can lose them. Costs a read of the old bytes before every write and
    /// trim, serializes writes, and refuses writes once the log holds
    /// [`DEFAULT_UNDO_LIMIT_BYTES`](super::DEFAULT_UNDO_LIMIT_BYTES) (or the
    /// limit set). Off by default, so a served member wrapped for failures
    /// does not grow a log.
    pub undo_log: bool,
    /// Bad sectors, in member bytes (whole 512-byte sectors; ranges may
    /// overlap). A read that touches a bad sector fails; a write heals the
    /// bad sectors it covers whole (they read fine afterwards, with the
    /// bytes written), a partial write of a sector leaves it bad. A write
    /// heals only what lands: not when it fails, and only the landed prefix
    /// when it tears. Trims heal nothing, and a crash does not make healed
    /// sectors bad again (a disk's remapping stays). Setting a spec makes
    /// exactly these sectors bad again;
    /// [`FaultControls::bad_sectors`](super::FaultControls::bad_sectors)
    /// tells which are still bad.
    pub bad_ranges: Vec<BadRange>,
    /// Member bytes whose writes are acknowledged and dropped
    /// (`drop-writes=OFFSET+LEN`, whole sectors): a write or trim that
    /// touches them succeeds, and only its bytes outside them land. A
    /// device that lies (a firmware bug, a cache that loses what it
    /// acknowledged), for what checksums can and cannot catch.
    pub drop_ranges: Vec<BadRange>,
}

/// Extra latency per I/O, drawn per I/O (`latency-jitter=T`,
/// `latency-jitter=exp:T`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jitter {
    /// Uniformly from 0 to this many microseconds.
    Uniform { max_us: u64 },
    /// Exponentially distributed with this mean (a queue's service time),
    /// cut at [`JITTER_EXP_CAP`] times the mean so that no I/O waits
    /// without bound.
    Exponential { mean_us: u64 },
}

/// The longest exponential jitter, in means.
pub const JITTER_EXP_CAP: u64 = 20;

/// A run of bad sectors on a member: `bad-range=OFFSET+LEN` in the text form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadRange {
    /// A multiple of 512.
    pub offset_bytes: u64,
    /// A multiple of 512, not zero.
    pub len_bytes: u64,
}

impl BadRange {
    pub fn end_bytes(&self) -> u64 {
        self.offset_bytes.saturating_add(self.len_bytes)
    }
}

/// A fault spec that could not be parsed, or is out of range: one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FaultSpecError(pub String);

const KEYS: &str = "fail-nth, fail-from, fail-rate, latency, latency-jitter, latency-from, \
                    tear-rate, seed, undo-log, bad-range, drop-writes";

impl FaultSpec {
    /// Whether anything is configured; a spec that injects nothing leaves the
    /// wrapper on its fast path.
    pub fn is_active(&self) -> bool {
        self.fail_nth.is_some()
            || self.fail_from_nth.is_some()
            || self.fail_rate > 0.0
            || self.latency_us > 0
            || self.latency_jitter.is_some()
            || self.tear_rate > 0.0
            || self.undo_log
            || !self.bad_ranges.is_empty()
            || !self.drop_ranges.is_empty()
    }

    /// The spec with its latency (and jitter) taken out, and that latency
    /// as a spec of its own: what `serve` gives the I/O layer as a timer
    /// ([`crate::aio::Delay`]), leaving the rest to [`super::FaultyMember`].
    ///
    /// A latency with `latency-from` stays in the member: it models a
    /// device that becomes slow inside its calls (its I/Os counted from
    /// the open, label reads included), and a thread in such a call is
    /// stuck there as in a hung disk.
    pub fn split_latency(mut self) -> (FaultSpec, FaultSpec) {
        if self.latency_from_nth.is_some() {
            return (self, FaultSpec::default());
        }
        let latency = FaultSpec {
            latency_us: self.latency_us,
            latency_jitter: self.latency_jitter,
            seed: self.seed,
            ..FaultSpec::default()
        };
        self.latency_us = 0;
        self.latency_jitter = None;
        (self, latency)
    }

    /// The latency I/O number `n` gets, in microseconds: `latency` plus
    /// its draw of `latency-jitter`, the same for the same seed and number;
    /// none before `latency-from`.
    pub fn latency_us_of(&self, n: u64) -> u64 {
        if self.latency_from_nth.is_some_and(|from| n < from) {
            return 0;
        }
        let h = super::draw(self.seed, super::PURPOSE_JITTER, n);
        let extra = match self.latency_jitter {
            None => 0,
            Some(Jitter::Uniform { max_us }) => h % (max_us + 1),
            Some(Jitter::Exponential { mean_us }) => {
                let e = -(1.0 - super::unit(h)).ln() * mean_us as f64;
                (e as u64).min(mean_us * JITTER_EXP_CAP)
            }
        };
        self.latency_us.saturating_add(extra)
    }

    /// Checks the ranges that the type does not: counts start at 1, rates
    /// are probabilities, bad ranges are whole sectors.
    pub fn validate(&self) -> Result<(), FaultSpecError> {
        for (key, n) in [
            ("fail-nth", self.fail_nth),
            ("fail-from", self.fail_from_nth),
            ("latency-from", self.latency_from_nth),
        ] {
            if n == Some(0) {
                return Err(FaultSpecError(format!("{key}=0: I/Os are numbered from 1")));
            }
        }
        for (key, rate) in [("fail-rate", self.fail_rate), ("tear-rate", self.tear_rate)] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(FaultSpecError(format!(
                    "{key}={rate}: a rate is a probability between 0 and 1"
                )));
            }
        }
        for r in &self.bad_ranges {
            check_bad_range(r)
                .map_err(|why| FaultSpecError(format!("bad-range={}: {why}", r.text())))?;
        }
        for r in &self.drop_ranges {
            check_bad_range(r)
                .map_err(|why| FaultSpecError(format!("drop-writes={}: {why}", r.text())))?;
        }
        Ok(())
    }

    /// Parses the comma-separated `key=value` form; `none` (or nothing) is
    /// the default spec. Keys: `fail-nth=N`, `fail-from=N`, `fail-rate=P`,
    /// `latency=T` (`us`, `ms` or `s`, e.g. `500us`), `latency-jitter=T`
    /// (uniform, 0 to T more) or `latency-jitter=exp:T` (exponential with
    /// mean T), `latency-from=N` (both only from the Nth I/O on), `tear-rate=P`,
    /// `seed=N`, `undo-log=on|off`, `bad-range=OFFSET+LEN` (sizes with the
    /// command line's units: `2M+64k`, `4096+8s`; whole 512-byte sectors),
    /// `drop-writes=OFFSET+LEN` (the same form). Each key at most once,
    /// except `bad-range` and `drop-writes`, which are given once per
    /// range (`bad-range=2M+64k,bad-range=5M+4k`).
    pub fn parse(text: &str) -> Result<FaultSpec, FaultSpecError> {
        let mut spec = FaultSpec::default();
        let trimmed = text.trim();
        if trimmed.is_empty() || trimmed == "none" {
            return Ok(spec);
        }
        let mut seen: Vec<&str> = Vec::new();
        for item in trimmed.split(',') {
            let item = item.trim();
            let Some((key, value)) = item.split_once('=') else {
                return Err(FaultSpecError(format!(
                    "fault spec {text:?}: {item:?} is not key=value (keys: {KEYS})"
                )));
            };
            let (key, value) = (key.trim(), value.trim());
            let bad = |why: String| FaultSpecError(format!("fault spec {text:?}: {why}"));
            if !matches!(key, "bad-range" | "drop-writes") && seen.contains(&key) {
                return Err(bad(format!("{key} is given twice")));
            }
            match key {
                "fail-nth" => spec.fail_nth = Some(parse_count(key, value).map_err(bad)?),
                "fail-from" => spec.fail_from_nth = Some(parse_count(key, value).map_err(bad)?),
                "fail-rate" => spec.fail_rate = parse_rate(key, value).map_err(bad)?,
                "tear-rate" => spec.tear_rate = parse_rate(key, value).map_err(bad)?,
                "latency" => spec.latency_us = parse_latency(value).map_err(bad)?,
                "latency-jitter" => spec.latency_jitter = Some(parse_jitter(value).map_err(bad)?),
                "latency-from" => {
                    spec.latency_from_nth = Some(parse_count(key, value).map_err(bad)?)
                }
                "seed" => {
                    spec.seed = value
                        .parse()
                        .map_err(|_| bad(format!("seed={value:?} is not a whole number")))?
                }
                "undo-log" => {
                    spec.undo_log = match value {
                        "on" | "true" | "1" => true,
                        "off" | "false" | "0" => false,
                        _ => return Err(bad(format!("undo-log={value:?}: say on or off"))),
                    }
                }
                "bad-range" => spec.bad_ranges.push(parse_range(key, value).map_err(bad)?),
                "drop-writes" => spec.drop_ranges.push(parse_range(key, value).map_err(bad)?),
                _ => {
                    return Err(bad(format!("unknown key {key:?} (keys: {KEYS})")));
                }
            }
            seen.push(key);
        }
        Ok(spec)
    }
}

fn parse_range(key: &str, value: &str) -> Result<BadRange, String> {
    let Some((off, len)) = value.split_once('+') else {
        return Err(format!(
            "{key}={value:?} is not OFFSET+LEN (member bytes, e.g. 2M+64k)"
        ));
    };
    let size = |what: &str, t: &str| {
        parse_size(t).map_err(|e| format!("{key}={value:?}: the {what}: {e}"))
    };
    let r = BadRange {
        offset_bytes: size("offset", off)?,
        len_bytes: size("length", len)?,
    };
    check_bad_range(&r).map_err(|why| format!("{key}={value:?}: {why}"))?;
    Ok(r)
}

fn check_bad_range(r: &BadRange) -> Result<(), String> {
    if r.len_bytes == 0 {
        return Err("the length is zero; a range holds at least one sector".into());
    }
    if !r.offset_bytes.is_multiple_of(SECTOR_BYTES) || !r.len_bytes.is_multiple_of(SECTOR_BYTES) {
        return Err(format!(
            "ranges are whole {SECTOR_BYTES}-byte sectors: give an offset and a length \
             that are multiples of {SECTOR_BYTES} (e.g. 8s, 4k)"
        ));
    }
    if r.offset_bytes.checked_add(r.len_bytes).is_none() {
        return Err("the range ends past 2^64 bytes".into());
    }
    Ok(())
}

/// `bytes` in the largest unit that divides it exactly (`2M`, `64k`,
/// `3s`, `100`): text `parse_size` reads back to the same number.
fn exact_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 5] = [
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("k", 1 << 10),
        ("s", SECTOR_BYTES),
    ];
    match UNITS
        .into_iter()
        .find(|(_, m)| bytes != 0 && bytes.is_multiple_of(*m))
    {
        Some((name, m)) => format!("{}{name}", bytes / m),
        None => bytes.to_string(),
    }
}

impl BadRange {
    /// `OFFSET+LEN`, as [`FaultSpec::parse`] reads it.
    fn text(&self) -> String {
        format!(
            "{}+{}",
            exact_size(self.offset_bytes),
            exact_size(self.len_bytes)
        )
    }
}

fn parse_count(key: &str, value: &str) -> Result<u64, String> {
    match value.parse::<u64>() {
        Ok(0) => Err(format!("{key}=0: I/Os are numbered from 1")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "{key}={value:?} is not a whole number of I/Os (1 or more)"
        )),
    }
}

fn parse_rate(key: &str, value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!(
            "{key}={value:?} is not a probability between 0 and 1"
        )),
    }
}

fn parse_jitter(value: &str) -> Result<Jitter, String> {
    let (kind, time) = value.split_once(':').unwrap_or(("uniform", value));
    let us = parse_latency(time).map_err(|e| format!("latency-jitter: {e}"))?;
    match kind {
        "uniform" => Ok(Jitter::Uniform { max_us: us }),
        "exp" => us
            .checked_mul(JITTER_EXP_CAP)
            .map(|_| Jitter::Exponential { mean_us: us })
            .ok_or_else(|| format!("latency-jitter={value:?} is too large")),
        _ => Err(format!(
            "latency-jitter={value:?}: unknown distribution {kind:?}; use uniform:T or exp:T"
        )),
    }
}

/// `us` in the largest unit that keeps it whole, as `latency=` reads it.
fn latency_text(us: u64) -> String {
    if us.is_multiple_of(1_000_000) {
        format!("{}s", us / 1_000_000)
    } else if us.is_multiple_of(1_000) {
        format!("{}ms", us / 1_000)
    } else {
        format!("{us}us")
    }
}

fn parse_latency(value: &str) -> Result<u64, String> {
    let digits = value.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &value[digits.len()..];
    let scale: u64 = match unit {
        "us" => 1,
        "ms" => 1_000,
        "s" => 1_000_000,
        "" => {
            return Err(format!(
                "latency={value:?} needs a unit: us, ms or s (e.g. 500us)"
            ))
        }
        _ => {
            return Err(format!(
                "latency={value:?}: unknown unit {unit:?}; use us, ms or s"
            ))
        }
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("latency={value:?} is not a whole number of {unit} that fits"))
}

impl FromStr for FaultSpec {
    type Err = FaultSpecError;
    fn from_str(s: &str) -> Result<FaultSpec, FaultSpecError> {
        FaultSpec::parse(s)
    }
}

/// The text [`FaultSpec::parse`] reads back to an equal spec: only the keys
/// that differ from the default, in a fixed order; `none` for the default.
impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut items: Vec<String> = Vec::new();
        if let Some(n) = self.fail_nth {
            items.push(format!("fail-nth={n}"));
        }
        if let Some(n) = self.fail_from_nth {
            items.push(format!("fail-from={n}"));
        }
        if self.fail_rate != 0.0 {
            // `{}` of an f64 is the shortest text that parses back exactly.
            items.push(format!("fail-rate={}", self.fail_rate));
        }
        if self.latency_us != 0 {
            items.push(format!("latency={}", latency_text(self.latency_us)));
        }
        match self.latency_jitter {
            Some(Jitter::Uniform { max_us }) => {
                items.push(format!("latency-jitter={}", latency_text(max_us)))
            }
            Some(Jitter::Exponential { mean_us }) => {
                items.push(format!("latency-jitter=exp:{}", latency_text(mean_us)))
            }
            None => {}
        }
        if let Some(n) = self.latency_from_nth {
            items.push(format!("latency-from={n}"));
        }
        if self.tear_rate != 0.0 {
            items.push(format!("tear-rate={}", self.tear_rate));
        }
        if self.seed != 0 {
            items.push(format!("seed={}", self.seed));
        }
        if self.undo_log {
            items.push("undo-log=on".to_string());
        }
        for r in &self.bad_ranges {
            items.push(format!("bad-range={}", r.text()));
        }
        for r in &self.drop_ranges {
            items.push(format!("drop-writes={}", r.text()));
        }
        if items.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&items.join(","))
        }
    }
}
