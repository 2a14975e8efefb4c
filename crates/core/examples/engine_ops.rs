//! The engine's own cost per request, without any I/O: member I/O completes
//! at once (reads return shared zero buffers). Run under `perf stat -e
//! instructions:u` to count instructions per request:
//!
//!     cargo build --release --example engine_ops -p platter-core
//!     perf stat -e instructions:u target/release/examples/engine_ops write 1000000

use bytes::Bytes;
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::volume::{Health, Limits, MemberOp, Request, Volume};
use platter_core::{Level, ParityLayout};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let kind = args.get(1).map(String::as_str).unwrap_or("write");
    let count: u64 = args
        .get(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let level: Level = args
        .get(3)
        .map(|l| l.parse().expect("level"))
        .unwrap_or(Level::Stripe);
    let n = 4;
    let g = Geometry::new(GeometrySpec {
        level,
        parity_layout: ParityLayout::DEFAULT,
        copies: 2,
        interleave_bytes: 65536,
        data_offset_bytes: 1 << 20,
        member_data_bytes: vec![256 << 20; n],
    })
    .expect("geometry");
    let size = g.volume_size_bytes();
    let mut v = Volume::new(g, vec![Health::Online; n], Limits::default());
    let zeros = Bytes::from(vec![0u8; 1 << 20]);
    let payload = Bytes::from(vec![7u8; 4096]);
    let mut x: u64 = 1;
    let mut done = 0u64;
    for _ in 0..count {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let offset_bytes = (x >> 20) % (size / 4096) * 4096;
        let req = if kind == "read" {
            Request::Read {
                offset_bytes,
                len_bytes: 4096,
            }
        } else {
            Request::Write {
                offset_bytes,
                data: payload.clone(),
                fua: false,
            }
        };
        v.submit(req);
        while let Some(io) = v.next_io() {
            let r = match io.op {
                MemberOp::Read { len_bytes, .. } => Ok(Some(zeros.slice(..len_bytes as usize))),
                _ => Ok(None),
            };
            v.io_done(io.id, r);
            // Phases after the first come out of io_done.
        }
        while v.next_completion().is_some() {
            done += 1;
        }
    }
    assert_eq!(done, count);
    println!("{count} {kind} requests");
}
