//! A plot as a list of shapes, drawn as an SVG document or as PNG pixels
//! from the one list, so the two never disagree. The raster is plain:
//! shapes are covered by their distance to each pixel's centre (one pixel
//! of anti-aliasing), text is an 8x8 bitmap font, and the image is twice
//! the plot's size so the text stays legible.

use font8x8::{UnicodeFonts, BASIC_FONTS};
use std::fmt::Write as _;

pub type Rgb = [u8; 3];

pub const WHITE: Rgb = [255, 255, 255];
pub const BLACK: Rgb = [0, 0, 0];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anchor {
    Start,
    Middle,
    End,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    Rect {
        x: f64,
        y: f64,
        w: f64,
        h: f64,
        fill: Option<Rgb>,
        stroke: Option<Rgb>,
    },
    Line {
        from: (f64, f64),
        to: (f64, f64),
        color: Rgb,
        width: f64,
    },
    Polyline {
        points: Vec<(f64, f64)>,
        color: Rgb,
        width: f64,
    },
    Circle {
        at: (f64, f64),
        r: f64,
        color: Rgb,
    },
    /// `at` is the baseline's anchor point; `upright` turns the text a
    /// quarter to the left (read bottom to top).
    Text {
        at: (f64, f64),
        text: String,
        anchor: Anchor,
        size: f64,
        upright: bool,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Plot {
    pub width: f64,
    pub height: f64,
    pub shapes: Vec<Shape>,
}

fn hex(c: Rgb) -> String {
    format!("#{:02x}{:02x}{:02x}", c[0], c[1], c[2])
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Pixels per plot unit in the PNG.
const PNG_SCALE: f64 = 2.0;
/// The largest PNG drawn (pixels a side): plots are a few hundred units.
const PNG_MAX_SIDE: f64 = 8192.0;

impl Plot {
    pub fn new(width: f64, height: f64) -> Plot {
        Plot {
            width,
            height,
            shapes: Vec::new(),
        }
    }

    pub fn push(&mut self, shape: Shape) {
        self.shapes.push(shape);
    }

    pub fn svg(&self) -> String {
        let (w, h) = (self.width, self.height);
        let mut s = String::new();
        // `write!` to a String cannot fail.
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
        );
        for shape in &self.shapes {
            let _ = match shape {
                Shape::Rect {
                    x,
                    y,
                    w,
                    h,
                    fill,
                    stroke,
                } => writeln!(
                    s,
                    r#"<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{}" stroke="{}"/>"#,
                    fill.map_or("none".into(), hex),
                    stroke.map_or("none".into(), hex)
                ),
                Shape::Line {
                    from,
                    to,
                    color,
                    width,
                } => writeln!(
                    s,
                    r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="{width}"/>"#,
                    from.0,
                    from.1,
                    to.0,
                    to.1,
                    hex(*color)
                ),
                Shape::Polyline {
                    points,
                    color,
                    width,
                } => {
                    let pts: Vec<String> = points
                        .iter()
                        .map(|(x, y)| format!("{x:.1},{y:.1}"))
                        .collect();
                    writeln!(
                        s,
                        r#"<polyline fill="none" stroke="{}" stroke-width="{width}" points="{}"/>"#,
                        hex(*color),
                        pts.join(" ")
                    )
                }
                Shape::Circle { at, r, color } => writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="{r}" fill="{}"/>"#,
                    at.0,
                    at.1,
                    hex(*color)
                ),
                Shape::Text {
                    at,
                    text,
                    anchor,
                    size,
                    upright,
                } => {
                    let anchor = match anchor {
                        Anchor::Start => "start",
                        Anchor::Middle => "middle",
                        Anchor::End => "end",
                    };
                    let turn = if *upright {
                        format!(r#" transform="rotate(-90 {:.1} {:.1})""#, at.0, at.1)
                    } else {
                        String::new()
                    };
                    writeln!(
                        s,
                        r#"<text x="{:.1}" y="{:.1}" text-anchor="{anchor}" font-size="{size}"{turn}>{}</text>"#,
                        at.0,
                        at.1,
                        esc(text)
                    )
                }
            };
        }
        s.push_str("</svg>\n");
        s
    }

    /// The plot as a PNG file's bytes.
    pub fn png(&self) -> Vec<u8> {
        let scale = PNG_SCALE.min(PNG_MAX_SIDE / self.width.max(self.height).max(1.0));
        let mut c = Canvas::new(
            (self.width * scale).ceil() as usize,
            (self.height * scale).ceil() as usize,
            scale,
        );
        for shape in &self.shapes {
            c.draw(shape);
        }
        c.encode()
    }
}

struct Canvas {
    w: usize,
    h: usize,
    scale: f64,
    rgb: Vec<u8>,
}

/// Distance from `p` to the segment `a`-`b`.
fn to_segment(p: (f64, f64), a: (f64, f64), b: (f64, f64)) -> f64 {
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    let len2 = dx * dx + dy * dy;
    let t = if len2 == 0.0 {
        0.0
    } else {
        (((p.0 - a.0) * dx + (p.1 - a.1) * dy) / len2).clamp(0.0, 1.0)
    };
    let (x, y) = (a.0 + t * dx - p.0, a.1 + t * dy - p.1);
    (x * x + y * y).sqrt()
}

impl Canvas {
    fn new(w: usize, h: usize, scale: f64) -> Canvas {
        Canvas {
            w,
            h,
            scale,
            rgb: vec![255; w * h * 3],
        }
    }

    fn blend(&mut self, x: i64, y: i64, color: Rgb, coverage: f64) {
        if x < 0 || y < 0 || x as usize >= self.w || y as usize >= self.h || coverage <= 0.0 {
            return;
        }
        let a = coverage.min(1.0);
        let i = (y as usize * self.w + x as usize) * 3;
        for (px, &c) in self.rgb[i..i + 3].iter_mut().zip(&color) {
            let old = f64::from(*px);
            *px = (old + (f64::from(c) - old) * a).round() as u8;
        }
    }

    /// Covers the pixels within `half` of the segment (device pixels).
    fn segment(&mut self, a: (f64, f64), b: (f64, f64), half: f64, color: Rgb) {
        let pad = half + 1.0;
        let (x0, x1) = ((a.0.min(b.0) - pad).floor(), (a.0.max(b.0) + pad).ceil());
        let (y0, y1) = ((a.1.min(b.1) - pad).floor(), (a.1.max(b.1) + pad).ceil());
        for y in y0 as i64..=y1 as i64 {
            for x in x0 as i64..=x1 as i64 {
                let d = to_segment((x as f64 + 0.5, y as f64 + 0.5), a, b);
                self.blend(x, y, color, half + 0.5 - d);
            }
        }
    }

    fn at(&self, p: (f64, f64)) -> (f64, f64) {
        (p.0 * self.scale, p.1 * self.scale)
    }

    fn draw(&mut self, shape: &Shape) {
        let s = self.scale;
        match shape {
            Shape::Rect {
                x,
                y,
                w,
                h,
                fill,
                stroke,
            } => {
                let (x0, y0) = self.at((*x, *y));
                let (x1, y1) = self.at((x + w, y + h));
                if let Some(c) = fill {
                    for py in y0.round() as i64..y1.round() as i64 {
                        for px in x0.round() as i64..x1.round() as i64 {
                            self.blend(px, py, *c, 1.0);
                        }
                    }
                }
                if let Some(c) = stroke {
                    let half = s / 2.0;
                    let corners = [(x0, y0), (x1, y0), (x1, y1), (x0, y1), (x0, y0)];
                    for w in corners.windows(2) {
                        self.segment(w[0], w[1], half, *c);
                    }
                }
            }
            Shape::Line {
                from,
                to,
                color,
                width,
            } => {
                let (a, b) = (self.at(*from), self.at(*to));
                self.segment(a, b, width * s / 2.0, *color);
            }
            Shape::Polyline {
                points,
                color,
                width,
            } => {
                for w in points.windows(2) {
                    let (a, b) = (self.at(w[0]), self.at(w[1]));
                    self.segment(a, b, width * s / 2.0, *color);
                }
            }
            Shape::Circle { at, r, color } => {
                // A disc is the pixels within `r` of a segment of length 0.
                let c = self.at(*at);
                self.segment(c, c, r * s, *color);
            }
            Shape::Text {
                at,
                text,
                anchor,
                size,
                upright,
            } => self.text(*at, text, *anchor, *size, *upright),
        }
    }

    /// 8x8 glyphs, two thirds of `size` tall: a fixed-width cell is as
    /// wide as it is tall, and a proportional font's average letter at
    /// `size` about half as wide, so this keeps labels near their room.
    fn text(&mut self, at: (f64, f64), text: &str, anchor: Anchor, size: f64, upright: bool) {
        let dot = (size * self.scale / 12.0).round().max(1.0) as i64;
        let cell = 8 * dot;
        let n = text.chars().count() as i64;
        let shift = match anchor {
            Anchor::Start => 0,
            Anchor::Middle => n * cell / 2,
            Anchor::End => n * cell,
        };
        let (ax, ay) = self.at(at);
        let (ax, ay) = (ax.round() as i64, ay.round() as i64);
        for (i, ch) in text.chars().enumerate() {
            let glyph = BASIC_FONTS
                .get(ch)
                .or(BASIC_FONTS.get('?'))
                .unwrap_or([0; 8]);
            let along = i as i64 * cell - shift;
            for (row, bits) in glyph.iter().enumerate() {
                for col in 0..8 {
                    if bits & (1 << col) == 0 {
                        continue;
                    }
                    // The cell sits on the baseline: its bottom row is
                    // a dot below it.
                    let (u, v) = (along + col * dot, (row as i64 - 7) * dot);
                    for dy in 0..dot {
                        for dx in 0..dot {
                            let (px, py) = if upright {
                                (ax + v + dy, ay - u - dx)
                            } else {
                                (ax + u + dx, ay + v + dy)
                            };
                            self.blend(px, py, BLACK, 1.0);
                        }
                    }
                }
            }
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, self.w as u32, self.h as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        // Writing to a Vec only fails on a malformed header, which the
        // sizes above cannot make.
        let mut w = enc.write_header().expect("a PNG header");
        w.write_image_data(&self.rgb).expect("the image data");
        w.finish().expect("the PNG's end");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pixel(png_bytes: &[u8], x: usize, y: usize) -> Rgb {
        let dec = png::Decoder::new(std::io::Cursor::new(png_bytes));
        let mut r = dec.read_info().unwrap();
        let mut buf = vec![0; r.output_buffer_size().unwrap()];
        let info = r.next_frame(&mut buf).unwrap();
        let i = (y * info.width as usize + x) * 3;
        [buf[i], buf[i + 1], buf[i + 2]]
    }

    #[test]
    fn the_png_draws_what_the_svg_says() {
        let mut p = Plot::new(100.0, 50.0);
        p.push(Shape::Line {
            from: (10.0, 25.0),
            to: (90.0, 25.0),
            color: [255, 0, 0],
            width: 2.0,
        });
        p.push(Shape::Circle {
            at: (50.0, 10.0),
            r: 3.0,
            color: [0, 0, 255],
        });
        p.push(Shape::Text {
            at: (10.0, 45.0),
            text: "IIII".into(),
            anchor: Anchor::Start,
            size: 12.0,
            upright: false,
        });
        let png = p.png();
        assert_eq!(&png[1..4], b"PNG");
        // Twice the plot's size: (50, 25) is pixel (100, 50).
        assert_eq!(pixel(&png, 100, 50), [255, 0, 0]);
        assert_eq!(pixel(&png, 100, 20), [0, 0, 255]);
        assert_eq!(pixel(&png, 100, 70), WHITE);
        let text_dark = (20..80)
            .flat_map(|x| (70..90).map(move |y| (x, y)))
            .filter(|&(x, y)| pixel(&png, x, y) == BLACK)
            .count();
        assert!(text_dark > 20, "the text is drawn: {text_dark} dots");
        let svg = p.svg();
        assert!(svg.contains(r##"stroke="#ff0000""##) && svg.contains(">IIII</text>"));
    }
}
