//! A parametric drive: a [`DriveSpec`] from a handful of figures a data
//! sheet gives (rpm, cylinders, heads, sectors per track at the outer and
//! inner edge, seek times, cache), for tests and sweeps that must not
//! depend on DiskSim's parameter files.
//!
//! The layout has `zones` zones of equal cylinder count whose sectors per
//! track fall linearly from `outer_spt` to `inner_spt`; track and cylinder
//! skews cover the head switch and a one-cylinder seek, so a sequential
//! transfer crosses tracks without losing a revolution. No spares. The
//! seek curve is the three-point form (single, average, full stroke).
//! The cache has `segments` segments of `segment_blocks`, reads ahead to
//! the end of the segment, and writes through (no write-back) unless
//! `write_back` is set.

use super::drive::{CacheSpec, DriveSpec, Overheads, Scheduler};
use super::layout::{Layout, Mapping, Sparing, Zone};
use super::seek::SeekCurve;

#[derive(Clone, Debug, PartialEq)]
pub struct Parametric {
    pub name: String,
    pub rpm: f64,
    pub cylinders: u32,
    pub surfaces: u32,
    pub zones: u32,
    pub outer_spt: u32,
    pub inner_spt: u32,
    pub seek_single_ms: f64,
    pub seek_average_ms: f64,
    pub seek_full_ms: f64,
    pub head_switch_ms: f64,
    pub write_settle_ms: f64,
    /// Controller overhead per command.
    pub overhead_ms: f64,
    /// Bus time per 512-byte sector.
    pub bus_ms_per_sector: f64,
    pub segments: u32,
    pub segment_blocks: u32,
    pub read_ahead: bool,
    pub write_back: bool,
    pub scheduler: Scheduler,
}

impl Parametric {
    /// A 7200 rpm drive of about the year 2000 (the size of a Barracuda
    /// ATA II): 4 surfaces, 20,000 cylinders, 8 zones from 400 to 250
    /// sectors per track (24 to 15 MB/s off the media), 1 / 8.5 / 17 ms
    /// seeks, a 40 MB/s bus, 8 segments of 256 KiB with read-ahead.
    pub fn drive_7200() -> Parametric {
        Parametric {
            name: "parametric-7200".into(),
            rpm: 7200.0,
            cylinders: 20_000,
            surfaces: 4,
            zones: 8,
            outer_spt: 400,
            inner_spt: 250,
            seek_single_ms: 1.0,
            seek_average_ms: 8.5,
            seek_full_ms: 17.0,
            head_switch_ms: 0.8,
            write_settle_ms: 0.3,
            overhead_ms: 0.1,
            bus_ms_per_sector: 512.0 / 40e6 * 1e3,
            segments: 8,
            segment_blocks: 512,
            read_ahead: true,
            write_back: false,
            scheduler: Scheduler::Fcfs,
        }
    }

    pub fn spec(&self) -> DriveSpec {
        let period = 60_000.0 / self.rpm;
        let z = self.zones.max(1);
        let per_zone = self.cylinders / z;
        let seek_one = SeekCurve::three_point(
            self.seek_single_ms,
            self.seek_average_ms,
            self.seek_full_ms,
            self.cylinders,
        );
        let zones = (0..z)
            .map(|i| {
                let spt = if z == 1 {
                    self.outer_spt
                } else {
                    let f = f64::from(i) / f64::from(z - 1);
                    (f64::from(self.outer_spt)
                        - f * (f64::from(self.outer_spt) - f64::from(self.inner_spt)))
                    .round() as u32
                };
                let slots = |ms: f64| ((ms / period) * f64::from(spt)).ceil() as u32 + 1;
                let first_cyl = i * per_zone;
                let last_cyl = if i == z - 1 {
                    self.cylinders - 1
                } else {
                    first_cyl + per_zone - 1
                };
                Zone {
                    first_cyl,
                    last_cyl,
                    blocks_per_track: spt,
                    first_block_offset: 0,
                    dead_space: 0,
                    track_skew: slots(self.head_switch_ms) % spt,
                    cyl_skew: slots(seek_one.seek_ms(1).max(self.head_switch_ms)) % spt,
                    spares: 0,
                    slips: Vec::new(),
                    defects: Vec::new(),
                    first_lbn: 0,
                    lbns: 0,
                }
            })
            .collect();
        let layout = Layout::new(self.surfaces, Sparing::None, Mapping::Normal, zones)
            .expect("a parametric layout is valid");
        let o = self.overhead_ms;
        DriveSpec {
            name: self.name.clone(),
            layout,
            seek: seek_one,
            rpm: self.rpm,
            head_switch_ms: self.head_switch_ms,
            write_settle_ms: self.write_settle_ms,
            overheads: Overheads {
                read_hit_after_read: o,
                read_hit_after_write: o,
                read_miss_after_read: o,
                read_miss_after_write: o,
                write_hit_after_read: o,
                write_hit_after_write: o,
                write_miss_after_read: o,
                write_miss_after_write: o,
                ..Overheads::default()
            },
            bus_read_ms: self.bus_ms_per_sector,
            bus_write_ms: self.bus_ms_per_sector,
            hold_bus_read: false,
            cache: CacheSpec::plain(
                self.segments.max(1),
                self.segment_blocks,
                if self.read_ahead {
                    self.segment_blocks
                } else {
                    0
                },
                self.write_back,
            ),
            scheduler: self.scheduler,
        }
    }

    /// Mean positioning time: the average seek plus half a revolution.
    pub fn positioning_ms(&self) -> f64 {
        self.seek_average_ms + 30_000.0 / self.rpm
    }
}

/// Mean positioning time (average seek over random cylinder pairs plus
/// half a revolution) and the mean media transfer rate (bytes/s, over
/// the disk's blocks) of any drive spec.
pub fn figures(spec: &DriveSpec) -> (f64, f64) {
    let cyls = spec.layout.cylinders();
    // E|a-b| for a, b uniform over the cylinders is cyls / 3; average
    // the curve over a spread of distances weighted by their density
    // 2 (1 - x) rather than taking the curve at the mean.
    let steps = 200u32;
    let mut seek = 0.0;
    let mut weight = 0.0;
    for i in 0..steps {
        let x = (f64::from(i) + 0.5) / f64::from(steps);
        let w = 2.0 * (1.0 - x);
        let d = (x * f64::from(cyls)).round() as u32;
        seek += w * spec.seek.seek_ms(d.max(1));
        weight += w;
    }
    let positioning = seek / weight + spec.period_ms() / 2.0;
    let mut bytes = 0.0;
    let mut ms = 0.0;
    for z in &spec.layout.zones {
        bytes += z.lbns as f64 * 512.0;
        ms += z.lbns as f64 / f64::from(z.blocks_per_track) * spec.period_ms();
    }
    (positioning, bytes / (ms / 1e3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_7200_drive_is_about_what_it_says() {
        let p = Parametric::drive_7200();
        let s = p.spec();
        assert_eq!(s.layout.zones.len(), 8);
        let gb = s.layout.blocks as f64 * 512.0 / 1e9;
        assert!((10.0..20.0).contains(&gb), "{gb} GB");
        let (pos, rate) = figures(&s);
        assert!((10.0..15.0).contains(&pos), "positioning {pos} ms");
        assert!((15e6..25e6).contains(&rate), "rate {rate}");
        assert!((s.seek.seek_ms(s.layout.cylinders() / 3) - 8.5).abs() < 0.2);
    }
}
