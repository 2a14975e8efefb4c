//! The simulator's speed: simulated member I/Os per second of wall time,
//! on one core, for a simple random workload (4 KiB random reads and
//! writes from 32 processes on a 4-member stripe of SimpleLatency
//! members). Run with `cargo run --release -p platter-sim --example
//! sim_speed [REQUESTS [ROUNDS]]` (or bench/sim.sh); see bench/README.md.

use platter_core::balance::ReadPolicy;
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::{Level, ParityLayout};
use platter_sim::bench::Bench;
use platter_sim::workload::raidtest::Raidtest;
use platter_sim::workload::WorkloadSpec;
use platter_sim::{SimpleLatency, SimpleService};
use std::time::Instant;

fn main() {
    let requests: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("REQUESTS: a number"))
        .unwrap_or(2_000_000);
    let g = GeometrySpec {
        level: Level::Stripe,
        parity_layout: ParityLayout::LeftSymmetric,
        copies: 1,
        interleave_bytes: 64 << 10,
        data_offset_bytes: 8192,
        member_data_bytes: vec![1 << 30; 4],
    };
    let size = Geometry::new(g.clone()).unwrap().volume_size_bytes();
    let w = WorkloadSpec::Raidtest(Raidtest {
        processes: 32,
        requests,
        read_percent: 50,
        min_bytes: 4096,
        max_bytes: 4096,
        align_bytes: 512,
    });
    let rounds: usize = std::env::args()
        .nth(2)
        .map(|s| s.parse().expect("ROUNDS: a number"))
        .unwrap_or(5);
    let mut rates = Vec::new();
    for round in 0..rounds {
        let bench = Bench::new(
            g.clone(),
            ReadPolicy::Auto,
            Box::new(SimpleService::new(SimpleLatency::default())),
            w.build(size, 1),
            1,
        )
        .unwrap();
        let t = Instant::now();
        let r = bench.run();
        let secs = t.elapsed().as_secs_f64();
        let rate = r.member_ios as f64 / secs;
        rates.push(rate);
        println!(
            "round {round}: {} requests, {} member I/Os in {secs:.3} s wall: {:.0} member I/Os per second ({:.1} s simulated)",
            r.requests,
            r.member_ios,
            rate,
            r.elapsed_ns as f64 / 1e9
        );
    }
    rates.sort_by(f64::total_cmp);
    let median = rates[rates.len() / 2];
    println!("median: {median:.0} simulated member I/Os per second of wall time (one core)");
}
