//! Parity speed against memcpy of the same bytes, measured in the same run.
//!
//! For each shape (data blocks x block size) it times, in alternating
//! rounds, copying the stripe's data blocks (memcpy: the floor any parity
//! work has to beat, since parity must at least read every data byte) and
//! each parity kernel over the same blocks. A ratio is kernel throughput /
//! memcpy throughput, both counted in data bytes; the printed figure is the
//! median over the rounds, because a small shared machine is noisy.
//!
//!     cargo run --release -p platter-parity --example parity_bench [-- ROUNDS]
//!
//! `bench/parity.sh` runs it and checks the floors (XOR >= 0.9x,
//! P+Q >= 0.7x).

use std::hint::black_box;
use std::time::{Duration, Instant};

/// Each timed run lasts about this long.
const RUN: Duration = Duration::from_millis(60);

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(9);
    println!("backend: {}", platter_parity::backend_name());
    println!(
        "{:<6} {:>5} {:>8} {:>12} {:>9} {:>9} {:>10}",
        "shape", "data", "block", "memcpy MB/s", "xor", "p+q", "recover2"
    );
    for &(k, block_bytes) in &[
        (3usize, 64usize << 10),
        (4, 64 << 10),
        (8, 64 << 10),
        (4, 1 << 20),
    ] {
        let mut data_bufs: Vec<Aligned> = (0..k).map(|_| Aligned::new(block_bytes)).collect();
        for (i, d) in data_bufs.iter_mut().enumerate() {
            for (b, x) in d.get_mut().iter_mut().enumerate() {
                *x = (b * 31 + i * 7) as u8;
            }
        }
        let data: Vec<&[u8]> = data_bufs.iter().map(|d| d.get()).collect();
        let mut copy_buf = Aligned::new(k * block_bytes);
        let copy = copy_buf.get_mut();
        let mut p_buf = Aligned::new(block_bytes);
        let mut q_buf = Aligned::new(block_bytes);
        let (p, q) = (p_buf.get_mut(), q_buf.get_mut());
        let mut ratios = [Vec::new(), Vec::new(), Vec::new()];
        let mut memcpy_rates = Vec::new();
        for _ in 0..rounds {
            let refs: Vec<&[u8]> = data.clone();
            let memcpy = rate(k * block_bytes, || {
                for (i, d) in refs.iter().enumerate() {
                    copy[i * block_bytes..(i + 1) * block_bytes].copy_from_slice(d);
                }
                black_box(&copy);
            });
            let xor = rate(k * block_bytes, || {
                platter_parity::gen_p(&refs, p);
                black_box(&p);
            });
            let pq = rate(k * block_bytes, || {
                platter_parity::gen_pq(&refs, p, q);
                black_box(&q);
            });
            // Two data blocks lost: the hardest RAID-6 case.
            platter_parity::gen_pq(&refs, p, q);
            let mut blocks: Vec<Aligned> = (0..k + 2).map(|_| Aligned::new(block_bytes)).collect();
            for (i, b) in blocks.iter_mut().enumerate() {
                let src: &[u8] = match i {
                    i if i < k => data[i],
                    i if i == k => p,
                    _ => q,
                };
                b.get_mut().copy_from_slice(src);
            }
            let recover = rate(k * block_bytes, || {
                let mut views: Vec<&mut [u8]> = blocks.iter_mut().map(|b| b.get_mut()).collect();
                platter_parity::recover(&mut views, k, &[0, 1]).expect("recoverable");
                black_box(&views);
            });
            assert_eq!(blocks[0].get(), data[0], "recovery rebuilt the wrong bytes");
            memcpy_rates.push(memcpy);
            ratios[0].push(xor / memcpy);
            ratios[1].push(pq / memcpy);
            ratios[2].push(recover / memcpy);
        }
        println!(
            "{:<6} {:>5} {:>8} {:>12.0} {:>8.2}x {:>8.2}x {:>9.2}x",
            format!("{k}+2"),
            k,
            block_bytes,
            median(&mut memcpy_rates) / 1e6,
            median(&mut ratios[0]),
            median(&mut ratios[1]),
            median(&mut ratios[2]),
        );
    }
    rmw_rows(rounds);
}

/// The read-modify-write kernels: the change `old ^ new` of one block,
/// in place (`xor_into`, a plain loop) and into a separate destination
/// (`xor2`, ISA-L's two-source `xor_gen` on aligned blocks), against memcpy
/// of the two source blocks.
fn rmw_rows(rounds: usize) {
    println!(
        "{:<6} {:>8} {:>12} {:>9} {:>9}",
        "rmw", "block", "memcpy MB/s", "xor_into", "xor2"
    );
    for &block_bytes in &[4usize << 10, 64 << 10, 1 << 20] {
        let mut a = Aligned::new(block_bytes);
        let mut b = Aligned::new(block_bytes);
        for (i, x) in a.get_mut().iter_mut().enumerate() {
            *x = (i * 13) as u8;
        }
        for (i, x) in b.get_mut().iter_mut().enumerate() {
            *x = (i * 7 + 1) as u8;
        }
        let mut dst = Aligned::new(block_bytes);
        let mut copy = Aligned::new(2 * block_bytes);
        let mut memcpy_rates = Vec::new();
        let mut ratios = [Vec::new(), Vec::new()];
        for _ in 0..rounds {
            let memcpy = rate(2 * block_bytes, || {
                copy.get_mut()[..block_bytes].copy_from_slice(a.get());
                copy.get_mut()[block_bytes..].copy_from_slice(b.get());
                black_box(copy.get());
            });
            let in_place = rate(2 * block_bytes, || {
                platter_parity::xor_into(a.get_mut(), b.get());
                black_box(a.get());
            });
            let separate = rate(2 * block_bytes, || {
                platter_parity::xor2(a.get(), b.get(), dst.get_mut());
                black_box(dst.get());
            });
            memcpy_rates.push(memcpy);
            ratios[0].push(in_place / memcpy);
            ratios[1].push(separate / memcpy);
        }
        println!(
            "{:<6} {:>8} {:>12.0} {:>8.2}x {:>8.2}x",
            "rmw",
            block_bytes,
            median(&mut memcpy_rates) / 1e6,
            median(&mut ratios[0]),
            median(&mut ratios[1]),
        );
    }
}

/// A buffer at a 64-byte boundary: ISA-L's vector kernels need 32-byte
/// aligned blocks and fall back to the reference loops otherwise.
struct Aligned {
    raw: Vec<u8>,
    at: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let raw = vec![0u8; len + 64];
        let at = raw.as_ptr().align_offset(64);
        Aligned { raw, at, len }
    }
    fn get(&self) -> &[u8] {
        &self.raw[self.at..self.at + self.len]
    }
    fn get_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.at..self.at + self.len]
    }
}

/// Bytes per second of `f` over `bytes` bytes, run repeatedly for [`RUN`].
fn rate(bytes: usize, mut f: impl FnMut()) -> f64 {
    f(); // warm the caches and the page tables
    let start = Instant::now();
    let mut n = 0u64;
    // Bounded: at most RUN of wall time, checked every call.
    while start.elapsed() < RUN {
        f();
        n += 1;
    }
    (bytes as f64 * n as f64) / start.elapsed().as_secs_f64()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
