//! Counters in vinum's manner: per volume, per plex and per member.
//!
//! The definitions are in `docs/statistics.md`; this module only holds the
//! numbers. The volume updates them from small hooks (`volume/account.rs`);
//! latencies need a clock, which the core has not, so the driver measures
//! them and hands them in with [`crate::volume::Volume::record_latency`].
//!
//! Everything here is plain data: a snapshot is a clone, two snapshots can be
//! subtracted for rates, and the JSON form (serde) is what the control socket
//! sends.

use serde::{Deserialize, Serialize};

/// Client-request counters, kept for the volume and for each plex.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Client reads completed successfully.
    pub reads: u64,
    pub bytes_read: u64,
    /// Client writes and write-zeroes completed successfully.
    pub writes: u64,
    pub bytes_written: u64,
    /// Reads and writes that touched more than one interleave-sized chunk.
    pub multiblock: u64,
    /// Reads and writes that touched more than one stripe.
    pub multistripe: u64,
    /// Reads served (wholly or partly) by reconstruction from parity, or
    /// from another copy after the copy first read failed.
    pub recovered_reads: u64,
    /// Writes that could not update every copy or parity chunk they cover.
    pub degraded_writes: u64,
    /// Parity levels, per stripe written: the whole stripe's data was new,
    /// so parity was computed without reading anything.
    pub full_stripe_writes: u64,
    /// Per stripe: old data and parity read, the difference folded in.
    pub read_modify_writes: u64,
    /// Per stripe: the rest of the stripe's data read (or, with a member
    /// lost, every survivor), parity computed afresh.
    pub reconstruct_writes: u64,
    /// Per stripe: every parity chunk lost, the data written alone.
    pub parityless_writes: u64,
}

impl Counters {
    /// `self - earlier`, saturating (a reset between the two gives zeros).
    pub fn delta(&self, earlier: &Counters) -> Counters {
        Counters {
            reads: self.reads.saturating_sub(earlier.reads),
            bytes_read: self.bytes_read.saturating_sub(earlier.bytes_read),
            writes: self.writes.saturating_sub(earlier.writes),
            bytes_written: self.bytes_written.saturating_sub(earlier.bytes_written),
            multiblock: self.multiblock.saturating_sub(earlier.multiblock),
            multistripe: self.multistripe.saturating_sub(earlier.multistripe),
            recovered_reads: self.recovered_reads.saturating_sub(earlier.recovered_reads),
            degraded_writes: self.degraded_writes.saturating_sub(earlier.degraded_writes),
            full_stripe_writes: self
                .full_stripe_writes
                .saturating_sub(earlier.full_stripe_writes),
            read_modify_writes: self
                .read_modify_writes
                .saturating_sub(earlier.read_modify_writes),
            reconstruct_writes: self
                .reconstruct_writes
                .saturating_sub(earlier.reconstruct_writes),
            parityless_writes: self
                .parityless_writes
                .saturating_sub(earlier.parityless_writes),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeStats {
    #[serde(flatten)]
    pub counters: Counters,
    /// Client trims completed successfully, and their bytes.
    pub trims: u64,
    pub bytes_trimmed: u64,
    /// Client flushes completed successfully.
    pub flushes: u64,
    /// Client requests that completed with an error (any kind).
    pub errors: u64,
    /// Client requests in the volume now (a gauge: not reset).
    pub outstanding: u64,
    /// Request latencies as the driver measured them, submit to completion.
    pub read_latency: Histogram,
    pub write_latency: Histogram,
    /// Trims and flushes.
    pub other_latency: Histogram,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlexStats {
    #[serde(flatten)]
    pub counters: Counters,
    /// Client requests in the volume now on this plex (a gauge): reads
    /// whose plan reads from it, and every other request.
    pub outstanding: u64,
}

/// What a member was asked to do: every member I/O the volume issued,
/// client requests, rebuild, scrub and write-intent bitmap alike.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStats {
    pub reads: u64,
    pub bytes_read: u64,
    pub writes: u64,
    pub bytes_written: u64,
    pub trims: u64,
    pub bytes_trimmed: u64,
    pub flushes: u64,
    /// Member I/Os that failed.
    pub errors: u64,
    /// Blocks of this member that failed their checksums when read.
    #[serde(default)]
    pub checksum_mismatched_blocks: u64,
    /// Member I/Os issued and not yet reported done (a gauge).
    pub outstanding: u64,
    /// Each member I/O's service time as the driver measured it.
    pub latency: Histogram,
}

/// A volume's counters. Plexes: a mirror has one per member, RAID-10 one per
/// copy (plex k holds the k-th copy of every chunk), other levels one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    pub volume: VolumeStats,
    pub plexes: Vec<PlexStats>,
    pub members: Vec<MemberStats>,
    /// What checks and repairs found (not the resync after a crash, whose
    /// mismatches are writes cut short).
    #[serde(default)]
    pub scrub: ScrubStats,
    /// Per-block checksums (`create --checksums`), when the volume keeps
    /// them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksums: Option<ChecksumStats>,
    /// The partial parity log (`create --consistency-policy ppl`), when
    /// the volume keeps one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ppl: Option<PplStats>,
}

/// What the partial parity log wrote since assembly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PplStats {
    /// Records written (a RAID-6 record goes to P and to Q: two).
    pub records: u64,
    pub record_bytes: u64,
    /// Of those, whole records: written only so that an older record of
    /// the stripe is not applied over newer data.
    pub whole_records: u64,
    /// Flushes of every member a write waited for before logging: a
    /// partial write to a stripe with an unflushed partial write, or log
    /// space still held by writes not yet durable.
    pub clearing_flushes: u64,
    /// Writes that waited for log space held by writes still running.
    #[serde(default)]
    pub space_waits: u64,
    /// Ring tails zeroed (and flushed) before records went to the ring's
    /// start over newer ones: about one per lap of each member's ring.
    #[serde(default)]
    pub tails_zeroed: u64,
}

/// What the checksums saw, over every member (per member:
/// [`MemberStats::checksum_mismatched_blocks`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChecksumStats {
    /// 512-byte blocks read whose bytes matched their checksums.
    pub verified_blocks: u64,
    /// Blocks read whose bytes did not: never served.
    pub mismatched_blocks: u64,
    /// Member reads that failed their checksums and were rewritten from
    /// another copy or from parity, then read back right.
    pub repaired_reads: u64,
    /// Blocks whose checksums were set from their bytes (read in a region
    /// a crash left owed a resync).
    pub trusted_blocks: u64,
    /// Checksum pages read from and written to the members.
    pub page_reads: u64,
    pub page_writes: u64,
    /// Sealed checksum pages read that were not sealed pages of theirs
    /// (zeroed, discarded, torn, misplaced), and pages read older than
    /// their write record (the member lost a write it acknowledged): their
    /// blocks were served from redundancy and rewritten.
    #[serde(default)]
    pub pages_refused: u64,
    #[serde(default)]
    pub pages_stale: u64,
}

/// Silent corruption found by `check`, `repair` and the scheduled scrub.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubStats {
    /// Stripes compared (every member usable).
    pub checked_stripes: u64,
    /// Stripes whose parity or copies disagreed.
    pub mismatched_stripes: u64,
    /// Members named wrong in a mismatched stripe (RAID-6 syndromes, a
    /// majority of copies), one per stripe and member.
    pub wrong_members: u64,
    /// Mismatched stripes where no member could be named.
    pub unlocated_stripes: u64,
    /// Stripes a repair rewrote.
    pub repaired_stripes: u64,
}

impl Stats {
    pub fn new(plexes: u32, members: u32) -> Stats {
        Stats {
            volume: VolumeStats::default(),
            plexes: vec![PlexStats::default(); plexes as usize],
            members: vec![MemberStats::default(); members as usize],
            scrub: ScrubStats::default(),
            checksums: None,
            ppl: None,
        }
    }

    /// Zeroes every counter and histogram; gauges (outstanding) are live
    /// and stay as they are.
    pub fn reset(&mut self) {
        let keep_v = self.volume.outstanding;
        self.volume = VolumeStats {
            outstanding: keep_v,
            ..VolumeStats::default()
        };
        for p in &mut self.plexes {
            *p = PlexStats {
                outstanding: p.outstanding,
                ..PlexStats::default()
            };
        }
        for m in &mut self.members {
            *m = MemberStats {
                outstanding: m.outstanding,
                ..MemberStats::default()
            };
        }
        self.scrub = ScrubStats::default();
    }
}

/// Buckets of a [`Histogram`]: bucket 0 holds 0 and 1, bucket `b` holds
/// `(2^(b-1), 2^b]`, bucket 64 everything above 2^63.
pub const HISTOGRAM_BUCKETS: usize = 65;
const _: () = assert!(HISTOGRAM_BUCKETS == u64::BITS as usize + 1);

/// A fixed-bucket log2 histogram of nanoseconds (or any `u64`).
///
/// Percentiles are reported as the upper bound of the bucket that holds the
/// rank, capped at the largest value seen: never below the true value, and at
/// most twice it. `max` is exact.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "HistogramJson", try_from = "HistogramJson")]
pub struct Histogram {
    buckets: [u64; HISTOGRAM_BUCKETS],
    count: u64,
    sum: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: [0; HISTOGRAM_BUCKETS],
            count: 0,
            sum: 0,
            max: 0,
        }
    }
}

impl Histogram {
    /// The bucket `v` falls in.
    pub fn bucket_of(v: u64) -> usize {
        if v <= 1 {
            0
        } else {
            (64 - (v - 1).leading_zeros()) as usize
        }
    }

    /// The largest value bucket `b` holds.
    pub fn bucket_upper(b: usize) -> u64 {
        assert!(b < HISTOGRAM_BUCKETS);
        if b >= 64 {
            u64::MAX
        } else {
            1u64 << b
        }
    }

    pub fn record(&mut self, v: u64) {
        self.buckets[Self::bucket_of(v)] += 1;
        self.count += 1;
        self.sum = self.sum.saturating_add(v);
        self.max = self.max.max(v);
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
        self.count += other.count;
        self.sum = self.sum.saturating_add(other.sum);
        self.max = self.max.max(other.max);
    }

    pub fn reset(&mut self) {
        *self = Histogram::default();
    }

    /// The samples recorded since `earlier` (a snapshot of this histogram):
    /// bucket counts, count and sum subtract (saturating, so a reset in
    /// between gives the later numbers). The maximum cannot be told apart
    /// and stays this one's: an upper bound for the interval.
    pub fn delta(&self, earlier: &Histogram) -> Histogram {
        let mut d = Histogram::default();
        for (b, (now, then)) in self.buckets.iter().zip(earlier.buckets.iter()).enumerate() {
            d.buckets[b] = now.saturating_sub(*then);
        }
        d.count = d.buckets.iter().sum();
        d.sum = self.sum.saturating_sub(earlier.sum);
        if d.count > 0 {
            d.max = self.max;
        }
        d
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum(&self) -> u64 {
        self.sum
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    /// Per bucket counts (not cumulative), bucket 0 first.
    pub fn buckets(&self) -> &[u64; HISTOGRAM_BUCKETS] {
        &self.buckets
    }

    /// The value at quantile `q` (0 < q <= 1); 0 when empty.
    pub fn percentile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (b, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Self::bucket_upper(b).min(self.max);
            }
        }
        unreachable!("bucket counts add up to count")
    }

    pub fn p50(&self) -> u64 {
        self.percentile(0.50)
    }

    pub fn p99(&self) -> u64 {
        self.percentile(0.99)
    }
}

/// The JSON form of a [`Histogram`]: its numbers and the percentiles (which
/// are recomputed, not trusted, when read back).
#[derive(Serialize, Deserialize)]
struct HistogramJson {
    count: u64,
    sum: u64,
    max: u64,
    p50: u64,
    p99: u64,
    /// `[bucket, count]` for the non-empty buckets.
    buckets: Vec<(usize, u64)>,
}

impl From<Histogram> for HistogramJson {
    fn from(h: Histogram) -> Self {
        HistogramJson {
            count: h.count,
            sum: h.sum,
            max: h.max,
            p50: h.p50(),
            p99: h.p99(),
            buckets: h
                .buckets
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(b, n)| (b, *n))
                .collect(),
        }
    }
}

impl TryFrom<HistogramJson> for Histogram {
    type Error = String;
    fn try_from(j: HistogramJson) -> Result<Self, String> {
        let mut h = Histogram {
            count: j.count,
            sum: j.sum,
            max: j.max,
            ..Histogram::default()
        };
        for (b, n) in j.buckets {
            if b >= HISTOGRAM_BUCKETS {
                return Err(format!("histogram bucket {b} out of range"));
            }
            h.buckets[b] += n;
        }
        if h.buckets.iter().sum::<u64>() != h.count {
            return Err("histogram buckets do not add up to its count".into());
        }
        Ok(h)
    }
}

/// Which histogram a latency goes to (`Request::latency_of` says for a
/// client request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LatencyOf {
    /// A client read, submit to completion.
    Read,
    /// A client write or write-zeroes.
    Write,
    /// A client trim or flush.
    Other,
    /// One member I/O, issue to result.
    Member(u32),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two() {
        assert_eq!(Histogram::bucket_of(0), 0);
        assert_eq!(Histogram::bucket_of(1), 0);
        assert_eq!(Histogram::bucket_of(2), 1);
        assert_eq!(Histogram::bucket_of(3), 2);
        assert_eq!(Histogram::bucket_of(4), 2);
        assert_eq!(Histogram::bucket_of(5), 3);
        assert_eq!(Histogram::bucket_of(1024), 10);
        assert_eq!(Histogram::bucket_of(1025), 11);
        assert_eq!(Histogram::bucket_of(u64::MAX), 64);
        for b in 0..HISTOGRAM_BUCKETS {
            assert_eq!(Histogram::bucket_of(Histogram::bucket_upper(b)), b);
        }
    }

    #[test]
    fn delta_of_snapshots() {
        let mut h = Histogram::default();
        h.record(100);
        let earlier = h.clone();
        h.record(5000);
        h.record(6000);
        let d = h.delta(&earlier);
        assert_eq!((d.count(), d.sum(), d.max()), (2, 11_000, 6000));
        assert_eq!(d.p50(), 6000);
        assert_eq!(h.delta(&h), Histogram::default());
    }

    #[test]
    fn json_round_trip() {
        let mut h = Histogram::default();
        for v in [0, 5, 1000, 1000, 70_000] {
            h.record(v);
        }
        let text = serde_json::to_string(&h).unwrap();
        let back: Histogram = serde_json::from_str(&text).unwrap();
        assert_eq!(back, h);
        assert!(text.contains("\"p50\":1024"), "{text}");
    }
}
