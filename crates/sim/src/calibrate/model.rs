//! What calibration measured, and the drive model built from it.

use crate::disk::drive::{CacheSpec, DriveSpec, Overheads, Scheduler};
use crate::disk::layout::{Layout, Mapping, Sparing, Zone};
use crate::disk::seek::SeekCurve;

#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredZone {
    pub first_lbn: u64,
    /// Sectors per track as measured: effective (the sequential rate
    /// times the revolution, track switches inside) or, where the bus
    /// hides the media, the pace of read-ahead.
    pub blocks_per_track: u32,
    pub effective: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    pub blocks: u64,
    /// A one-sector read hit, less its bus transfer.
    pub hit_ms: f64,
    pub bus_ms_per_sector: f64,
    pub rotation_ms: f64,
    pub zones: Vec<MeasuredZone>,
    /// (distance in measured tracks, miss overhead plus seek in ms).
    pub positioning: Vec<(u32, f64)>,
    /// Sectors read ahead after a one-sector read (0: none).
    pub read_ahead_blocks: u32,
    /// Cache segments (0: no read cache seen).
    pub segments: u32,
    pub segment_blocks: u32,
    /// `None` when writes were not allowed, so not measured.
    pub write_back: Option<bool>,
    /// A write's overhead (measured only with writes allowed; else the
    /// model takes a read's).
    pub write_overhead_ms: Option<f64>,
    /// Time spent on the target, and commands issued.
    pub spent_ms: f64,
    pub reads: u64,
}

/// Linear between the points `(x, y)` (sorted by `x`), the end values
/// beyond them.
pub(crate) fn interpolate(points: &[(u32, f64)], x: u32) -> f64 {
    let i = points.partition_point(|&(px, _)| px < x);
    if i == 0 {
        return points[0].1;
    }
    if i == points.len() {
        return points[i - 1].1;
    }
    let ((x0, y0), (x1, y1)) = (points[i - 1], points[i]);
    y0 + (y1 - y0) * f64::from(x - x0) / f64::from(x1 - x0)
}

/// Where zone `i` ends: the next one's first LBN, or the disk's end.
pub(crate) fn zone_end(zones: &[MeasuredZone], i: usize, blocks: u64) -> u64 {
    zones.get(i + 1).map_or(blocks, |n| n.first_lbn)
}

impl Measured {
    pub fn rpm(&self) -> f64 {
        60_000.0 / self.rotation_ms
    }

    /// Mean sequential rate over the disk, bytes per second.
    pub fn mean_rate(&self) -> f64 {
        let mut ms = 0.0;
        for (i, z) in self.zones.iter().enumerate() {
            let end = zone_end(&self.zones, i, self.blocks);
            ms += (end - z.first_lbn) as f64 / f64::from(z.blocks_per_track) * self.rotation_ms;
        }
        self.blocks as f64 * 512.0 / (ms / 1e3)
    }

    /// Positioning at `d` tracks, interpolated between measured points.
    pub fn positioning_ms(&self, d: u32) -> f64 {
        interpolate(&self.positioning, d)
    }

    /// The model: one surface (every track switch a cylinder switch),
    /// each zone's LBNs exactly the measured range (the unused end of its
    /// last track is dead space), the seek table the measured
    /// positioning less the hit overhead (the overhead every command
    /// pays in the model), and a skew on every track that covers the
    /// one-track seek, so that a sequential read runs at the measured
    /// rate: an effective zone's tracks are widened until the skew's
    /// loss brings them back to it.
    pub fn spec(&self, name: &str) -> DriveSpec {
        let seek_one = (self.positioning_ms(1) - self.hit_ms).max(0.0);
        let mut zones = Vec::new();
        let mut cyl = 0u32;
        let (mut measured_tracks, mut model_tracks) = (0u64, 0u64);
        for (i, z) in self.zones.iter().enumerate() {
            let end = zone_end(&self.zones, i, self.blocks);
            let lbns = end - z.first_lbn;
            let skew_of = |spt: u32| {
                ((seek_one / self.rotation_ms * f64::from(spt)).ceil() as u32 + 1).min(spt - 1)
            };
            let mut spt = z.blocks_per_track.max(2);
            if z.effective {
                // A bounded fixpoint: spt^2 / (spt + skew) = measured.
                for _ in 0..32 {
                    let want = f64::from(z.blocks_per_track) * f64::from(spt + skew_of(spt))
                        / f64::from(spt);
                    let next = (want.round() as u32).max(2);
                    if next == spt {
                        break;
                    }
                    spt = next;
                }
            }
            let skew = skew_of(spt);
            let per = u64::from(spt);
            let tracks = lbns.div_ceil(per) as u32;
            measured_tracks += lbns.div_ceil(u64::from(z.blocks_per_track.max(1)));
            model_tracks += u64::from(tracks);
            zones.push(Zone {
                first_cyl: cyl,
                last_cyl: cyl + tracks - 1,
                blocks_per_track: spt,
                first_block_offset: 0,
                dead_space: u64::from(tracks) * per - lbns,
                track_skew: skew,
                cyl_skew: skew,
                spares: 0,
                slips: Vec::new(),
                defects: Vec::new(),
                first_lbn: 0,
                lbns: 0,
            });
            cyl += tracks;
        }
        let layout = Layout::new(1, Sparing::None, Mapping::Normal, zones)
            .expect("measured zones make a layout");
        assert_eq!(layout.blocks, self.blocks, "the model holds every sector");
        // Distances were measured in measured tracks; the model's tracks
        // are wider where skews were taken out.
        let ratio = model_tracks as f64 / measured_tracks.max(1) as f64;
        let mut points: Vec<(u32, f64)> = Vec::new();
        for &(d, m) in &self.positioning {
            let d = ((f64::from(d) * ratio).round() as u32).max(1);
            if points.last().is_none_or(|p| p.0 < d) {
                points.push((d, (m - self.hit_ms).max(0.0)));
            }
        }
        let o = self.hit_ms;
        let w = self.write_overhead_ms.unwrap_or(o);
        DriveSpec {
            name: name.to_string(),
            layout,
            seek: SeekCurve::Table { points },
            rpm: self.rpm(),
            head_switch_ms: 0.0,
            write_settle_ms: 0.0,
            overheads: Overheads {
                read_hit_after_read: o,
                read_hit_after_write: o,
                read_miss_after_read: o,
                read_miss_after_write: o,
                write_hit_after_read: w,
                write_hit_after_write: w,
                write_miss_after_read: w,
                write_miss_after_write: w,
                ..Overheads::default()
            },
            bus_read_ms: self.bus_ms_per_sector,
            bus_write_ms: self.bus_ms_per_sector,
            hold_bus_read: false,
            cache: CacheSpec::plain(
                self.segments,
                self.segment_blocks,
                self.read_ahead_blocks,
                self.write_back == Some(true),
            ),
            scheduler: Scheduler::Fcfs,
        }
    }
}
