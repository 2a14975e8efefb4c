//! A record's list of modified cells, from a write's spans.

use super::{Piece, MAX_PIECES};

// Widened to the whole rows, a write is one piece per data member: always
// within the bound, so widening ends.
const _: () = assert!(crate::format::MAX_MEMBERS as usize <= MAX_PIECES);

/// The spans `(data index, within_bytes, len_bytes)` a write modifies in
/// rows `[lo_bytes, hi_bytes)`, merged per data index and sorted. Past
/// [`MAX_PIECES`] (a stripe-cache write-out of many scattered small
/// writes), each is widened to whole blocks of growing size, inside the
/// rows, until they fit: a few unwritten bytes taken as modified keep the
/// parity right (recovery reads them as they are), and are at risk only if
/// their member is lost before recovery, like the bytes written beside
/// them.
pub(crate) fn merged_pieces<I>(lo_bytes: u64, hi_bytes: u64, spans: I) -> Vec<Piece>
where
    I: Iterator<Item = (u32, u64, u64)> + Clone,
{
    let mut grain_bytes = 1u64;
    // Bounded: at a grain of the rows' length every data index is one piece.
    for _ in 0..64 {
        let out = merged_at(lo_bytes, hi_bytes, spans.clone(), grain_bytes);
        if out.len() <= MAX_PIECES {
            return out;
        }
        grain_bytes = grain_bytes.saturating_mul(8);
    }
    unreachable!("at a grain past the rows every data index is one piece")
}

fn merged_at(
    lo_bytes: u64,
    hi_bytes: u64,
    spans: impl Iterator<Item = (u32, u64, u64)>,
    grain_bytes: u64,
) -> Vec<Piece> {
    let mut spans: Vec<(u32, u64, u64)> = spans
        .map(|(d, w, len)| {
            let a = (w / grain_bytes * grain_bytes).max(lo_bytes);
            let b = (w + len)
                .div_ceil(grain_bytes)
                .saturating_mul(grain_bytes)
                .min(hi_bytes);
            (d, a, b)
        })
        .collect();
    spans.sort_unstable();
    let mut out: Vec<Piece> = Vec::new();
    for (d, a, b) in spans {
        match out.last_mut() {
            Some(p) if p.data_index == d && a <= p.within_bytes + p.len_bytes => {
                let end = (p.within_bytes + p.len_bytes).max(b);
                p.len_bytes = end - p.within_bytes;
            }
            _ => out.push(Piece {
                data_index: d,
                within_bytes: a,
                len_bytes: b - a,
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(data_index: u32, within_bytes: u64, len_bytes: u64) -> Piece {
        Piece {
            data_index,
            within_bytes,
            len_bytes,
        }
    }

    /// Each byte of `spans` (clipped to the rows) is in exactly one piece,
    /// and every piece lies in the rows: the pieces cover the write.
    fn assert_covers(lo: u64, hi: u64, spans: &[(u32, u64, u64)], out: &[Piece]) {
        for w in out.windows(2) {
            assert!(
                (w[0].data_index, w[0].within_bytes + w[0].len_bytes)
                    < (w[1].data_index, w[1].within_bytes + 1),
                "pieces out of order or overlapping: {w:?}"
            );
        }
        for p in out {
            assert!(p.len_bytes > 0 && p.within_bytes >= lo && p.within_bytes + p.len_bytes <= hi);
        }
        for &(d, w, len) in spans {
            let (a, b) = (w.max(lo), (w + len).min(hi));
            assert!(
                out.iter().any(|p| p.data_index == d
                    && p.within_bytes <= a
                    && b <= p.within_bytes + p.len_bytes),
                "span {d}:{w}+{len} not covered by {out:?}"
            );
        }
    }

    #[test]
    fn spans_merge_per_data_index_when_they_touch_or_overlap() {
        let spans = [
            (1, 600, 100),
            (0, 512, 100),
            (0, 612, 50),  // touches the first of index 0
            (0, 640, 100), // overlaps it
            (0, 1000, 24), // apart
            (1, 700, 0),   // touches index 1's, empty
        ];
        let out = merged_pieces(512, 2048, spans.iter().copied());
        assert_eq!(
            out,
            vec![piece(0, 512, 228), piece(0, 1000, 24), piece(1, 600, 100)]
        );
        assert_covers(512, 2048, &spans, &out);
    }

    /// Mutation testing found the widening unreached (no test had more
    /// than 1,024 modified cells in one stripe): the grain, its rounding
    /// and the merge of widened spans could all be wrong unseen. A
    /// stripe-cache write-out gathers that many from scattered 1-byte
    /// writes.
    #[test]
    fn more_than_max_pieces_are_widened_to_blocks_that_cover_them() {
        let (lo, hi) = (4096u64, 4096 + 512 * 1024);
        // 300 clusters 1,000 bytes apart, each of four one-byte writes 17
        // bytes apart: 1,200 cells.
        let spans: Vec<(u32, u64, u64)> = (0..1200u64)
            .map(|i| (0, lo + 5 + (i / 4) * 1000 + (i % 4) * 17, 1))
            .collect();
        let out = merged_pieces(lo, hi, spans.iter().copied());
        assert!(out.len() <= MAX_PIECES, "{} pieces", out.len());
        assert_covers(lo, hi, &spans, &out);
        // The smallest grain under the bound (1, 8, then 64): one 64-byte
        // block, or two, per cluster, clusters apart.
        assert_eq!(out.len(), 300, "{out:?}");
        for p in &out {
            assert_eq!(p.within_bytes % 64, 0, "{p:?}");
            assert!(p.len_bytes == 64 || p.len_bytes == 128, "{p:?}");
        }
    }

    #[test]
    fn widening_stays_inside_the_rows() {
        // Spans at the rows' edges, not on a grain boundary.
        let (lo, hi) = (100u64, 100 + 40_000);
        let spans: Vec<(u32, u64, u64)> = (0..2000u64).map(|i| (0, lo + i * 20, 1)).collect();
        let out = merged_pieces(lo, hi, spans.iter().copied());
        assert!(out.len() <= MAX_PIECES);
        assert_covers(lo, hi, &spans, &out);
        assert_eq!(out[0].within_bytes, lo);
    }

    #[test]
    fn as_many_pieces_as_the_bound_are_not_widened() {
        let spans: Vec<(u32, u64, u64)> = (0..MAX_PIECES as u64).map(|i| (0, i * 10, 3)).collect();
        let out = merged_pieces(0, 1 << 20, spans.iter().copied());
        assert_eq!(out.len(), MAX_PIECES);
        assert!(out.iter().all(|p| p.len_bytes == 3));
    }
}
