//! Sweeps: one workload over lists of levels, member counts, interleaves
//! and read policies, each configuration a [`Bench`] run on modelled
//! members; a table and an SVG plot of the results.
//!
//! Every configuration runs with the same seed, so each sees the same
//! client requests (common random numbers), and runs on its own: the
//! results do not depend on how many threads run them or in what order.

use crate::bench::{Bench, BenchReport};
use crate::disk::drive::DriveSpec;
use crate::disk::{DiskModel, HostModel};
use crate::link::Link;
use crate::members::{ServiceModel, SimpleLatency, SimpleService};
use crate::plot::{Anchor, Plot, Rgb, Shape, BLACK, WHITE};
use crate::rng::mix64;
use crate::shared::{run_shared, SharedDrives, Window};
use crate::workload::WorkloadSpec;
use platter_core::balance::ReadPolicy;
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::units::{format_size, parse_size, SECTOR_BYTES};
use platter_core::volume::CacheLimits;
use platter_core::{Level, ParityLayout};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Room before each member's data area (label and bitmap), as the
/// seeded scenarios leave it.
pub const DATA_OFFSET_BYTES: u64 = 8192;

/// What serves member I/O.
#[derive(Clone, Debug)]
pub enum Members {
    /// A modelled drive behind each member; members are the whole drive
    /// (or `member_bytes`, if smaller).
    Disk {
        spec: Box<DriveSpec>,
        host: HostModel,
    },
    /// [`SimpleLatency`] members of `member_bytes` each, serving at most
    /// `queue_depth` I/Os at once (`None`: any number).
    Simple {
        latency: SimpleLatency,
        queue_depth: Option<u32>,
    },
}

#[derive(Clone, Debug)]
pub struct Sweep {
    pub members_model: Members,
    pub workload: WorkloadSpec,
    pub levels: Vec<Level>,
    pub member_counts: Vec<u32>,
    pub interleaves: Vec<u64>,
    /// For mirror and RAID-10; other levels run once, without one.
    pub policies: Vec<ReadPolicy>,
    pub seed: u64,
    /// Cap on each member's data bytes (required for `Simple`).
    pub member_bytes: Option<u64>,
    pub parity_layout: ParityLayout,
    /// RAID-5/6 partial-stripe writes gathered as `platter serve` gathers
    /// them (its default: [`CacheLimits::DEFAULT`], [`DESTAGE_INTERVAL_NS`]).
    pub stripe_cache: Option<CacheLimits>,
    /// The client's connection ([`Link`]; the default costs nothing).
    pub link: Link,
    /// A second volume on every point's drives, with a load of its own
    /// (`sweep --beside`): what it costs each point.
    pub beside: Option<Beside>,
}

/// A second volume on the same drives as every point's volume, as a pool
/// carves two volumes from its drives: each drive's first half holds the
/// point's subdisk, its second half this volume's, and both volumes run
/// their workloads at once ([`crate::shared`]). vinum's own benchmarks ran
/// plexes of different interleaves side by side like this.
#[derive(Clone, Debug)]
pub struct Beside {
    pub level: Level,
    pub interleave_bytes: u64,
    pub workload: WorkloadSpec,
}

impl Beside {
    /// `LEVEL:INTERLEAVE:WORKLOAD` (`stripe:128k:dd:total=64M`).
    pub fn parse(text: &str) -> Result<Beside, String> {
        let mut parts = text.splitn(3, ':');
        let (Some(level), Some(il), Some(w)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!(
                "`{text}`: expected LEVEL:INTERLEAVE:WORKLOAD (stripe:128k:dd:total=64M)"
            ));
        };
        let interleave_bytes = parse_size(il)?;
        if interleave_bytes == 0 || !interleave_bytes.is_multiple_of(SECTOR_BYTES) {
            return Err(format!("interleave {il}: a positive multiple of 512 bytes"));
        }
        Ok(Beside {
            level: level.parse()?,
            interleave_bytes,
            workload: WorkloadSpec::parse(w)?,
        })
    }
}

/// What a point's volume did with the volume beside it running, and what
/// that one did.
#[derive(Clone, Debug, PartialEq)]
pub struct Together {
    pub volume: BenchReport,
    pub beside: BenchReport,
}

/// Mixed into the seed of the volume beside (`sweep --beside`).
const BESIDE_SEED_SALT: u64 = 0xB351_DE00;
const MIB: u64 = 1 << 20;

/// The served side's destage tick (`platter-server`'s `DESTAGE_INTERVAL`).
pub const DESTAGE_INTERVAL_NS: u64 = 20_000_000;

/// One configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    pub level: Level,
    pub members: u32,
    pub interleave_bytes: u64,
    pub policy: Option<ReadPolicy>,
}

impl Point {
    /// The line of the plot this point belongs to.
    pub fn series(&self) -> String {
        match self.policy {
            Some(p) => format!("{} x{} {}", self.level, self.members, p),
            None => format!("{} x{}", self.level, self.members),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub point: Point,
    /// The point's volume alone on its drives.
    pub result: Result<BenchReport, String>,
    /// ... and with the volume [`Sweep::beside`] running on the same
    /// drives, when there is one.
    pub together: Option<Result<Together, String>>,
}

/// Interleaves as the command line takes them: sizes separated by commas,
/// and `A..B` for A, 2A, 4A, ... up to B.
pub fn parse_interleaves(text: &str) -> Result<Vec<u64>, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if let Some((a, b)) = part.split_once("..") {
            let (a, b) = (parse_size(a)?, parse_size(b)?);
            if a == 0 || b < a {
                return Err(format!("`{part}`: expected A..B with 0 < A <= B"));
            }
            let mut x = a;
            while x <= b {
                out.push(x);
                x *= 2;
            }
        } else {
            out.push(parse_size(part)?);
        }
    }
    for &il in &out {
        if il == 0 || !il.is_multiple_of(SECTOR_BYTES) {
            return Err(format!("interleave {il}: a positive multiple of 512 bytes"));
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// 8s to 32768s by powers of two, and 126s.
pub fn default_interleaves() -> Vec<u64> {
    let mut v = parse_interleaves("8s..32768s,126s").expect("valid");
    v.sort_unstable();
    v
}

/// An interleave for people: sectors, and the size when it is round.
pub fn format_interleave(bytes: u64) -> String {
    format!("{}s", bytes / SECTOR_BYTES)
}

impl Sweep {
    pub fn points(&self) -> Vec<Point> {
        let mut out = Vec::new();
        for &level in &self.levels {
            for &members in &self.member_counts {
                if members < level.min_members() {
                    continue;
                }
                let policies: Vec<Option<ReadPolicy>> =
                    if matches!(level, Level::Mirror | Level::Raid10) {
                        if self.policies.is_empty() {
                            vec![Some(ReadPolicy::Auto)]
                        } else {
                            self.policies.iter().copied().map(Some).collect()
                        }
                    } else {
                        vec![None]
                    };
                for policy in policies {
                    for &interleave_bytes in &self.interleaves {
                        out.push(Point {
                            level,
                            members,
                            interleave_bytes,
                            policy,
                        });
                    }
                }
            }
        }
        out
    }

    fn member_data_bytes(&self, il: u64) -> Result<u64, String> {
        let b = match &self.members_model {
            Members::Disk { spec, .. } => {
                let disk = self.window_bytes(spec) - DATA_OFFSET_BYTES;
                self.member_bytes.map_or(disk, |m| m.min(disk))
            }
            Members::Simple { .. } => self
                .member_bytes
                .ok_or("simple members need a member size")?,
        };
        let b = b / il * il;
        if b == 0 {
            return Err(format!("interleave {} exceeds the member", format_size(il)));
        }
        Ok(b)
    }

    /// Each volume's part of a drive: all of it, or half with a volume
    /// beside (in whole MiBs).
    fn window_bytes(&self, spec: &DriveSpec) -> u64 {
        let disk = spec.layout.blocks * SECTOR_BYTES;
        match self.beside {
            None => disk,
            Some(_) => disk / 2 / MIB * MIB,
        }
    }

    /// The geometry of a point.
    pub fn geometry(&self, p: &Point) -> Result<GeometrySpec, String> {
        Ok(GeometrySpec {
            level: p.level,
            parity_layout: self.parity_layout,
            copies: if p.level == Level::Raid10 { 2 } else { 1 },
            interleave_bytes: p.interleave_bytes,
            data_offset_bytes: DATA_OFFSET_BYTES,
            member_data_bytes: vec![
                self.member_data_bytes(p.interleave_bytes)?;
                p.members as usize
            ],
        })
    }

    fn service(&self, members: u32) -> Box<dyn ServiceModel> {
        match &self.members_model {
            Members::Disk { spec, host } => Box::new(DiskModel::new(spec, members, host.clone())),
            Members::Simple {
                latency,
                queue_depth: None,
            } => Box::new(SimpleService::new(latency.clone())),
            Members::Simple {
                latency,
                queue_depth: Some(d),
            } => Box::new(SimpleService::with_queue_depth(latency.clone(), *d)),
        }
    }

    /// Runs one configuration.
    pub fn run_point(&self, p: &Point) -> Result<BenchReport, String> {
        let g = self.geometry(p)?;
        let service = self.service(p.members);
        Ok(self
            .bench(g, p.policy, service, &self.workload, self.seed)?
            .run())
    }

    /// A volume of geometry `g` on `service`, its requests `workload`'s.
    fn bench(
        &self,
        g: GeometrySpec,
        policy: Option<ReadPolicy>,
        service: Box<dyn ServiceModel>,
        workload: &WorkloadSpec,
        seed: u64,
    ) -> Result<Bench, String> {
        let size = Geometry::new(g.clone())
            .map_err(|e| e.to_string())?
            .volume_size_bytes();
        let gen = workload.build(size, seed);
        let bench = Bench::new(g, policy.unwrap_or_default(), service, gen, seed)?;
        let bench = match self.stripe_cache {
            Some(limits) => bench.with_stripe_cache(limits, DESTAGE_INTERVAL_NS),
            None => bench,
        };
        Ok(bench.with_link(self.link))
    }

    /// A point's volume and the volume beside it, at once on the same
    /// drives (the point's subdisks on each drive's first half).
    pub fn run_together(&self, p: &Point, beside: &Beside) -> Result<Together, String> {
        let Members::Disk { spec, host } = &self.members_model else {
            return Err(
                "--beside needs modelled drives (--drive), whose heads the volumes \
                        share"
                    .into(),
            );
        };
        if p.members < beside.level.min_members() {
            return Err(format!(
                "{} beside needs {} members",
                beside.level,
                beside.level.min_members()
            ));
        }
        let half = self.window_bytes(spec);
        let il = beside.interleave_bytes;
        let b = GeometrySpec {
            level: beside.level,
            parity_layout: self.parity_layout,
            copies: if beside.level == Level::Raid10 { 2 } else { 1 },
            interleave_bytes: il,
            data_offset_bytes: DATA_OFFSET_BYTES,
            member_data_bytes: vec![(half - DATA_OFFSET_BYTES) / il * il; p.members as usize],
        };
        let windows = |offset_bytes| -> Vec<Window> {
            (0..p.members)
                .map(|drive| Window {
                    drive,
                    offset_bytes,
                    len_bytes: half,
                })
                .collect()
        };
        let drives = SharedDrives::new(Box::new(DiskModel::new(spec, p.members, host.clone())));
        let a = self.geometry(p)?;
        let a = self.bench(
            a,
            p.policy,
            drives.volume(0, windows(0)),
            &self.workload,
            self.seed,
        )?;
        // Its own requests, the same whatever the point.
        let seed = mix64(self.seed ^ BESIDE_SEED_SALT);
        let b = self.bench(
            b,
            None,
            drives.volume(1, windows(half)),
            &beside.workload,
            seed,
        )?;
        let mut r = run_shared(vec![a, b]).into_iter();
        Ok(Together {
            volume: r.next().expect("two reports"),
            beside: r.next().expect("two reports"),
        })
    }

    /// Runs every point on `threads` threads; `done(finished, total, row)`
    /// is called as each finishes (from the thread that ran it). Rows come
    /// back in the order of [`Sweep::points`].
    pub fn run(&self, threads: usize, done: &(dyn Fn(usize, usize, &Row) + Sync)) -> Vec<Row> {
        let points = self.points();
        let total = points.len();
        let next = AtomicUsize::new(0);
        let finished = AtomicUsize::new(0);
        let slots: Vec<Mutex<Option<Row>>> = points.iter().map(|_| Mutex::new(None)).collect();
        std::thread::scope(|s| {
            for _ in 0..threads.clamp(1, total.max(1)) {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(p) = points.get(i) else { break };
                    let row = Row {
                        point: *p,
                        result: self.run_point(p),
                        together: self.beside.as_ref().map(|b| self.run_together(p, b)),
                    };
                    let n = finished.fetch_add(1, Ordering::Relaxed) + 1;
                    done(n, total, &row);
                    *slots[i].lock().expect("not poisoned") = Some(row);
                });
            }
        });
        slots
            .into_iter()
            .map(|m| {
                m.into_inner()
                    .expect("not poisoned")
                    .expect("every point ran")
            })
            .collect()
    }
}

/// The results as a table: one line per configuration; with a volume
/// beside, the point's mean latency with it running, how many times
/// alone's that is, and the beside volume's throughput.
pub fn table(rows: &[Row]) -> String {
    let beside = rows.iter().any(|r| r.together.is_some());
    let mut s = String::new();
    let _ = write!(
        s,
        "{:<7} {:>3} {:>10} {:<14} {:>9} {:>9} {:>9} {:>9} {:>11}",
        "level", "n", "interleave", "policy", "MB/s", "IOPS", "mean ms", "p99 ms", "member I/O"
    );
    if beside {
        let _ = write!(
            s,
            " {:>12} {:>9} {:>11}",
            "ms beside", "slower", "beside MB/s"
        );
    }
    s.push('\n');
    for r in rows {
        let p = &r.point;
        let policy = p.policy.map_or_else(|| "-".to_string(), |p| p.to_string());
        let _ = write!(
            s,
            "{:<7} {:>3} {:>10} {:<14} ",
            p.level.to_string(),
            p.members,
            format_interleave(p.interleave_bytes),
            policy
        );
        match &r.result {
            Ok(b) => {
                let _ = write!(
                    s,
                    "{:>9.2} {:>9.1} {:>9.2} {:>9.2} {:>11}",
                    b.mb_per_s(),
                    b.iops(),
                    b.mean_latency_ns as f64 / 1e6,
                    b.p99_latency_ns as f64 / 1e6,
                    b.member_ios
                );
                match &r.together {
                    Some(Ok(t)) => {
                        let _ = write!(
                            s,
                            " {:>12.2} {:>8.2}x {:>11.2}",
                            t.volume.mean_latency_ns as f64 / 1e6,
                            t.volume.mean_latency_ns as f64 / b.mean_latency_ns.max(1) as f64,
                            t.beside.mb_per_s()
                        );
                    }
                    Some(Err(e)) => {
                        let _ = write!(s, " beside: {e}");
                    }
                    None => {}
                }
                s.push('\n');
            }
            Err(e) => {
                let _ = writeln!(s, "error: {e}");
            }
        }
    }
    s
}

const COLORS: [Rgb; 10] = [
    [0x1f, 0x77, 0xb4],
    [0xd6, 0x27, 0x28],
    [0x2c, 0xa0, 0x2c],
    [0xff, 0x7f, 0x0e],
    [0x94, 0x67, 0xbd],
    [0x8c, 0x56, 0x4b],
    [0xe3, 0x77, 0xc2],
    [0x7f, 0x7f, 0x7f],
    [0xbc, 0xbd, 0x22],
    [0x17, 0xbe, 0xcf],
];

/// Throughput against interleave (log scale), one line per level,
/// member count and policy, as a standalone SVG document.
pub fn svg(rows: &[Row], title: &str) -> String {
    plot(rows, title).svg()
}

/// The same plot as a PNG file's bytes.
pub fn png(rows: &[Row], title: &str) -> Vec<u8> {
    plot(rows, title).png()
}

/// The sweep's plot as shapes.
pub fn plot(rows: &[Row], title: &str) -> Plot {
    let ok: Vec<(&Point, f64)> = rows
        .iter()
        .filter_map(|r| r.result.as_ref().ok().map(|b| (&r.point, b.mb_per_s())))
        .collect();
    let mut xs: Vec<u64> = ok.iter().map(|(p, _)| p.interleave_bytes).collect();
    xs.sort_unstable();
    xs.dedup();
    let f = Frame::new(&xs, &ok);
    let mut p = Plot::new(f.w, f.h);
    p.push(Shape::Rect {
        x: 0.0,
        y: 0.0,
        w: f.w,
        h: f.h,
        fill: Some(WHITE),
        stroke: None,
    });
    p.push(Shape::Text {
        at: (f.left + f.pw / 2.0, 22.0),
        text: title.to_string(),
        anchor: Anchor::Middle,
        size: 14.0,
        upright: false,
    });
    f.axes(&mut p, &xs);
    f.series(&mut p, &ok);
    p
}

/// The plot's size, where its area lies, and how interleaves (log scale)
/// and throughputs map onto it.
struct Frame {
    w: f64,
    h: f64,
    left: f64,
    top: f64,
    pw: f64,
    ph: f64,
    x0: f64,
    span: f64,
    ymax: f64,
}

impl Frame {
    fn new(xs: &[u64], ok: &[(&Point, f64)]) -> Frame {
        let (w, h) = (860.0, 520.0);
        let (left, right, top, bottom) = (70.0, 230.0, 40.0, 60.0);
        let (x0, x1) = match (xs.first(), xs.last()) {
            (Some(&a), Some(&b)) => ((a as f64).log2(), (b as f64).log2()),
            _ => (0.0, 1.0),
        };
        let ymax = ok.iter().map(|(_, y)| *y).fold(0.0, f64::max);
        Frame {
            w,
            h,
            left,
            top,
            pw: w - left - right,
            ph: h - top - bottom,
            x0,
            span: if x1 > x0 { x1 - x0 } else { 1.0 },
            ymax: nice_ceiling(ymax.max(1e-9)),
        }
    }

    fn px(&self, il: u64) -> f64 {
        self.left + ((il as f64).log2() - self.x0) / self.span * self.pw
    }

    fn py(&self, y: f64) -> f64 {
        self.top + self.ph - y / self.ymax * self.ph
    }

    /// The grid, its labels, the frame and the axes' names.
    fn axes(&self, p: &mut Plot, xs: &[u64]) {
        let (left, top, pw, ph) = (self.left, self.top, self.pw, self.ph);
        for i in 0..=5 {
            let y = self.ymax * f64::from(i) / 5.0;
            let yy = self.py(y);
            p.push(Shape::Line {
                from: (left, yy),
                to: (left + pw, yy),
                color: [0xdd; 3],
                width: 1.0,
            });
            p.push(text((left - 6.0, yy + 4.0), &trim_float(y), Anchor::End));
        }
        let mut last_label = f64::NEG_INFINITY;
        for &il in xs {
            let x = self.px(il);
            p.push(Shape::Line {
                from: (x, top),
                to: (x, top + ph),
                color: [0xee; 3],
                width: 1.0,
            });
            if x - last_label >= 34.0 {
                last_label = x;
                p.push(text(
                    (x, top + ph + 16.0),
                    &format_interleave(il),
                    Anchor::Middle,
                ));
            }
        }
        p.push(Shape::Rect {
            x: left,
            y: top,
            w: pw,
            h: ph,
            fill: None,
            stroke: Some(BLACK),
        });
        p.push(text(
            (left + pw / 2.0, self.h - 18.0),
            "interleave (sectors, log scale)",
            Anchor::Middle,
        ));
        p.push(Shape::Text {
            at: (18.0, top + ph / 2.0),
            text: "MB/s".into(),
            anchor: Anchor::Middle,
            size: 12.0,
            upright: true,
        });
    }

    /// One line per series, in order of first appearance, with its key.
    fn series(&self, p: &mut Plot, ok: &[(&Point, f64)]) {
        let mut series: Vec<String> = Vec::new();
        for (pt, _) in ok {
            let name = pt.series();
            if !series.contains(&name) {
                series.push(name);
            }
        }
        for (i, name) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let pts: Vec<(f64, f64)> = ok
                .iter()
                .filter(|(pt, _)| &pt.series() == name)
                .map(|(pt, y)| (self.px(pt.interleave_bytes), self.py(*y)))
                .collect();
            p.push(Shape::Polyline {
                points: pts.clone(),
                color,
                width: 2.0,
            });
            for at in pts {
                p.push(Shape::Circle { at, r: 2.5, color });
            }
            let ly = self.top + 10.0 + 18.0 * i as f64;
            let lx = self.left + self.pw + 16.0;
            p.push(Shape::Line {
                from: (lx, ly),
                to: (lx + 20.0, ly),
                color,
                width: 2.0,
            });
            p.push(text((lx + 26.0, ly + 4.0), name, Anchor::Start));
        }
    }
}

/// A label in the plot's text size.
fn text(at: (f64, f64), t: &str, anchor: Anchor) -> Shape {
    Shape::Text {
        at,
        text: t.to_string(),
        anchor,
        size: 12.0,
        upright: false,
    }
}

/// 1, 2 or 5 times a power of ten, at least `y`.
fn nice_ceiling(y: f64) -> f64 {
    let p = 10f64.powf(y.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= y {
            return m * p;
        }
    }
    10.0 * p
}

fn trim_float(y: f64) -> String {
    let s = format!("{y:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleave_lists() {
        assert_eq!(
            parse_interleaves("8s..64s,126s").unwrap(),
            vec![4096, 8192, 16384, 32768, 64512]
        );
        let d = default_interleaves();
        assert_eq!(d.len(), 14);
        assert_eq!(d[0], 4096);
        assert_eq!(*d.last().unwrap(), 32768 * 512);
        assert!(parse_interleaves("100").is_err());
    }

    #[test]
    fn nice_ceilings() {
        assert_eq!(nice_ceiling(3.2), 5.0);
        assert_eq!(nice_ceiling(17.0), 20.0);
        assert_eq!(nice_ceiling(100.0), 100.0);
    }
}
