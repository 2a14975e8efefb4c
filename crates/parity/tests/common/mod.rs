//! Shared by the integration tests: buffers with a chosen alignment (ISA-L
//! takes different paths for 32-byte aligned and unaligned buffers), and the
//! list of backends built into this test binary.

#![allow(dead_code)] // each test file uses a different subset

use platter_parity::RecoverError;
use proptest::prelude::*;

/// A set of equal-length blocks, each starting `skew` bytes past a 64-byte
/// boundary, so that skew 0 exercises ISA-L's aligned kernels and anything
/// else its unaligned paths or the fallback.
#[derive(Clone, Debug)]
pub struct Blocks {
    bufs: Vec<Vec<u8>>,
    starts: Vec<usize>,
    len: usize,
}

impl Blocks {
    pub fn new(contents: &[Vec<u8>], skew: usize) -> Blocks {
        assert!(skew < 64);
        let len = contents.first().map_or(0, Vec::len);
        let mut bufs = Vec::new();
        let mut starts = Vec::new();
        for c in contents {
            assert_eq!(c.len(), len);
            let mut buf = vec![0u8; len + 128];
            let start = (64 - buf.as_ptr() as usize % 64) % 64 + skew;
            buf[start..start + len].copy_from_slice(c);
            bufs.push(buf);
            starts.push(start);
        }
        Blocks { bufs, starts, len }
    }

    pub fn zeroed(count: usize, len: usize, skew: usize) -> Blocks {
        Blocks::new(&vec![vec![0u8; len]; count], skew)
    }

    pub fn get(&self) -> Vec<&[u8]> {
        self.bufs
            .iter()
            .zip(&self.starts)
            .map(|(b, &s)| &b[s..s + self.len])
            .collect()
    }

    pub fn get_mut(&mut self) -> Vec<&mut [u8]> {
        let len = self.len;
        self.bufs
            .iter_mut()
            .zip(&self.starts)
            .map(|(b, &s)| &mut b[s..s + len])
            .collect()
    }

    pub fn to_vecs(&self) -> Vec<Vec<u8>> {
        self.get().into_iter().map(<[u8]>::to_vec).collect()
    }
}

/// Block lengths: any size up to 8 KiB, and multiples of 32 (half of them
/// multiples of 64) which `pq_gen` needs.
pub fn block_len() -> impl Strategy<Value = usize> {
    prop_oneof![1..=8192usize, (1..=256usize).prop_map(|k| k * 32)]
}

/// Offset of each block from a 64-byte boundary: aligned half the time.
pub fn skew() -> impl Strategy<Value = usize> {
    prop_oneof![Just(0usize), 1..64usize]
}

/// `count` random blocks of `len` bytes.
pub fn contents(count: usize, len: usize) -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), len), count)
}

pub type GenPq = fn(&[&[u8]], &mut [u8], &mut [u8]);
pub type Recover = fn(&mut [&mut [u8]], usize, &[usize]) -> Result<(), RecoverError>;

pub struct Backend {
    pub name: &'static str,
    pub gen_pq: GenPq,
    pub recover: Recover,
}

/// Every backend compiled in; recovery must hold for each of them.
pub fn backends() -> Vec<Backend> {
    let reference = Backend {
        name: platter_parity::reference::backend_name(),
        gen_pq: platter_parity::reference::gen_pq,
        recover: platter_parity::reference::recover,
    };
    #[cfg(has_isal)]
    let isal = Some(Backend {
        name: platter_parity::isal::backend_name(),
        gen_pq: platter_parity::isal::gen_pq,
        recover: platter_parity::isal::recover,
    });
    #[cfg(not(has_isal))]
    let isal = None;
    std::iter::once(reference).chain(isal).collect()
}
