//! An array of plain values that is a `Vec` when small and a map of pages
//! when large: the simulated members and the oracle of a volume of TiBs
//! hold only the pages a run touched (elements never written are
//! `T::default()`). Which one is chosen changes nothing a run does.

use std::collections::BTreeMap;
use std::ops::Range;

/// Elements per page of a sparse array.
const PAGE: usize = 4096;
/// Arrays longer than this are sparse.
pub const DENSE_MAX: u64 = 1 << 30;

#[derive(Clone, Debug)]
pub enum Pages<T: Copy + Default + PartialEq> {
    Dense(Vec<T>),
    Sparse {
        len: u64,
        pages: BTreeMap<u64, Box<[T]>>,
    },
}

impl<T: Copy + Default + PartialEq> Pages<T> {
    /// `len` default elements: dense up to [`DENSE_MAX`], sparse beyond.
    pub fn new(len: u64) -> Pages<T> {
        if len <= DENSE_MAX {
            Pages::Dense(vec![T::default(); len as usize])
        } else {
            Pages::Sparse {
                len,
                pages: BTreeMap::new(),
            }
        }
    }

    pub fn len(&self) -> u64 {
        match self {
            Pages::Dense(v) => v.len() as u64,
            Pages::Sparse { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements held in memory (all of a dense array).
    pub fn held(&self) -> u64 {
        match self {
            Pages::Dense(v) => v.len() as u64,
            Pages::Sparse { pages, .. } => (pages.len() * PAGE) as u64,
        }
    }

    fn check(&self, r: &Range<u64>) {
        assert!(
            r.start <= r.end && r.end <= self.len(),
            "range {r:?} outside an array of {}",
            self.len()
        );
    }

    /// Calls `f(array range, page slice)` for each page piece of `r`; with
    /// `create`, missing pages are made first (else skipped).
    fn pieces_mut(&mut self, r: Range<u64>, mut f: impl FnMut(Range<u64>, &mut [T])) {
        self.check(&r);
        match self {
            Pages::Dense(v) => f(r.clone(), &mut v[r.start as usize..r.end as usize]),
            Pages::Sparse { pages, .. } => {
                let mut at = r.start;
                while at < r.end {
                    let page = at / PAGE as u64;
                    let within = (at % PAGE as u64) as usize;
                    let n = (PAGE - within).min((r.end - at) as usize);
                    let p = pages
                        .entry(page)
                        .or_insert_with(|| vec![T::default(); PAGE].into_boxed_slice());
                    f(at..at + n as u64, &mut p[within..within + n]);
                    at += n as u64;
                }
            }
        }
    }

    /// A copy of `r`.
    pub fn get(&self, r: Range<u64>) -> Vec<T> {
        self.check(&r);
        match self {
            Pages::Dense(v) => v[r.start as usize..r.end as usize].to_vec(),
            Pages::Sparse { pages, .. } => {
                let mut out = vec![T::default(); (r.end - r.start) as usize];
                for (&page, p) in pages.range(r.start / PAGE as u64..r.end.div_ceil(PAGE as u64)) {
                    let base = page * PAGE as u64;
                    let a = base.max(r.start);
                    let b = (base + PAGE as u64).min(r.end);
                    out[(a - r.start) as usize..(b - r.start) as usize]
                        .copy_from_slice(&p[(a - base) as usize..(b - base) as usize]);
                }
                out
            }
        }
    }

    /// The slice of `r` when the array is dense (no copy).
    pub fn slice(&self, r: Range<u64>) -> Option<&[T]> {
        match self {
            Pages::Dense(v) => Some(&v[r.start as usize..r.end as usize]),
            Pages::Sparse { .. } => None,
        }
    }

    pub fn set(&mut self, at: u64, src: &[T]) {
        self.pieces_mut(at..at + src.len() as u64, |r, dst| {
            let o = (r.start - at) as usize;
            dst.copy_from_slice(&src[o..o + dst.len()]);
        });
    }

    pub fn fill(&mut self, r: Range<u64>, value: T) {
        if value == T::default() {
            // Zeroing pages never written: nothing to make.
            if let Pages::Sparse { pages, .. } = self {
                if !pages
                    .range(r.start / PAGE as u64..r.end.div_ceil(PAGE as u64))
                    .any(|_| true)
                {
                    self.check(&r);
                    return;
                }
            }
        }
        self.pieces_mut(r, |_, dst| dst.fill(value));
    }

    /// Every element held, mutably (a sparse array's unwritten elements
    /// stay default and are not visited).
    pub fn for_each_held_mut(&mut self, mut f: impl FnMut(&mut T)) {
        match self {
            Pages::Dense(v) => v.iter_mut().for_each(f),
            Pages::Sparse { pages, .. } => {
                for p in pages.values_mut() {
                    p.iter_mut().for_each(&mut f);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_and_dense_arrays_agree() {
        let mut d: Pages<u8> = Pages::Dense(vec![0; 5 * PAGE]);
        let mut s: Pages<u8> = Pages::Sparse {
            len: 5 * PAGE as u64,
            pages: BTreeMap::new(),
        };
        for a in [&mut d, &mut s] {
            a.set(4000, &[7; 300]);
            a.fill(PAGE as u64 * 2 - 5..PAGE as u64 * 3 + 9, 3);
            a.fill(10..20, 0);
            a.fill(PAGE as u64 * 4..PAGE as u64 * 4 + 100, 0);
        }
        assert_eq!(d.get(0..5 * PAGE as u64), s.get(0..5 * PAGE as u64));
        assert_eq!(s.get(3999..4001), vec![0, 7]);
        assert_eq!(s.get(4299..4301), vec![7, 0]);
        // Pages 0 to 3 were written; page 4, only zeroed, is not held.
        assert_eq!(s.held(), 4 * PAGE as u64);
        assert_eq!(Pages::<u8>::new(DENSE_MAX + 1).held(), 0);
    }
}
