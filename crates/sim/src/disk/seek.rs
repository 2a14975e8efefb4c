//! Seek curves: seek time in milliseconds as a function of the distance
//! in cylinders (0 for no movement).

#[derive(Clone, Debug, PartialEq)]
pub enum SeekCurve {
    /// Every seek takes the same time.
    Constant { ms: f64 },
    /// A measured table `(distance, ms)`, sorted by distance; between
    /// entries the time is interpolated linearly, past the last entry it
    /// is extrapolated from the last two (DiskSim's "extracted" curve).
    Table { points: Vec<(u32, f64)> },
    /// Ruemmler and Wilkes (1994): `a + b * sqrt(d)` below `boundary`
    /// cylinders, `c + e * d` from it on; optional single-cylinder time.
    /// DiskSim's `hpl`; with `first_ten`, its `hplplus10` form.
    Hpl {
        boundary: u32,
        a: f64,
        b: f64,
        c: f64,
        e: f64,
        single: Option<f64>,
        first_ten: Option<[f64; 10]>,
    },
    /// The three-parameter form: single-cylinder, average and full-stroke
    /// times, fitted as `single + b * sqrt(d - 1) + c * (d - 1)` through
    /// `(1, single)`, `(cyls / 3, average)` and `(cyls - 1, full)`.
    ThreePoint { single: f64, b: f64, c: f64 },
}

impl SeekCurve {
    /// The three-parameter curve for a disk of `cylinders` cylinders.
    pub fn three_point(single: f64, average: f64, full: f64, cylinders: u32) -> SeekCurve {
        let x1 = (f64::from(cylinders) / 3.0 - 1.0).max(1.0);
        // x = d - 1: the average at a third of the stroke, the full
        // stroke at cylinders - 1.
        let x2 = (f64::from(cylinders) - 2.0).max(2.0);
        let (y1, y2) = (average - single, full - single);
        // y = b sqrt(x) + c x through (x1, y1) and (x2, y2).
        let det = x1.sqrt() * x2 - x2.sqrt() * x1;
        let (b, c) = if det.abs() < 1e-12 {
            (0.0, y2 / x2)
        } else {
            (
                (y1 * x2 - y2 * x1) / det,
                (x1.sqrt() * y2 - x2.sqrt() * y1) / det,
            )
        };
        SeekCurve::ThreePoint { single, b, c }
    }

    pub fn seek_ms(&self, dist: u32) -> f64 {
        if dist == 0 {
            return 0.0;
        }
        match self {
            SeekCurve::Constant { ms } => *ms,
            SeekCurve::Table { points } => {
                if points.is_empty() {
                    return 0.0;
                }
                let i = points.partition_point(|&(d, _)| d < dist);
                if i < points.len() && points[i].0 == dist {
                    return points[i].1;
                }
                if points.len() == 1 {
                    return points[0].1;
                }
                // Between i-1 and i, or past the end: the last segment.
                let i = i.clamp(1, points.len() - 1);
                let (d1, t1) = points[i - 1];
                let (d2, t2) = points[i];
                let t = t1 + (f64::from(dist) - f64::from(d1)) * (t2 - t1) / f64::from(d2 - d1);
                t.max(0.0)
            }
            SeekCurve::Hpl {
                boundary,
                a,
                b,
                c,
                e,
                single,
                first_ten,
            } => {
                if let Some(ten) = first_ten {
                    if dist <= 10 {
                        return ten[dist as usize - 1];
                    }
                } else if let (1, Some(s)) = (dist, single) {
                    return *s;
                }
                if dist < *boundary {
                    a + b * f64::from(dist).sqrt()
                } else {
                    c + e * f64::from(dist)
                }
            }
            SeekCurve::ThreePoint { single, b, c } => {
                let x = f64::from(dist - 1);
                single + b * x.sqrt() + c * x
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_interpolates_and_extrapolates() {
        let t = SeekCurve::Table {
            points: vec![(1, 1.0), (10, 2.0), (100, 5.0)],
        };
        assert_eq!(t.seek_ms(0), 0.0);
        assert_eq!(t.seek_ms(1), 1.0);
        assert!((t.seek_ms(55) - 3.5).abs() < 1e-12);
        assert!((t.seek_ms(190) - 8.0).abs() < 1e-12);
    }

    #[test]
    fn three_point_passes_through_its_points() {
        let c = SeekCurve::three_point(1.0, 8.0, 16.0, 3001);
        assert!((c.seek_ms(1) - 1.0).abs() < 1e-9);
        assert!((c.seek_ms(1000) - 8.0).abs() < 0.01);
        assert!((c.seek_ms(3000) - 16.0).abs() < 1e-6);
    }
}
