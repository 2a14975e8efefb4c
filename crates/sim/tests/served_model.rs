//! The member model `bench/sim_vs_served.sh` compares with `platter serve
//! --inject mN=latency=L`: constant latency, at most a queue depth of I/Os
//! at once per member, members in parallel; and the client's link.

use platter_core::balance::ReadPolicy;
use platter_core::volume::CacheLimits;
use platter_core::{Level, ParityLayout};
use platter_sim::bench::BenchReport;
use platter_sim::sweep::{Members, Point, Sweep};
use platter_sim::workload::WorkloadSpec;
use platter_sim::{Jitter, Link, SimpleLatency};

const L_NS: u64 = 2_000_000;

fn sweep(workload: &str, latency: SimpleLatency, queue_depth: u32) -> Sweep {
    Sweep {
        members_model: Members::Simple {
            latency,
            queue_depth: Some(queue_depth),
        },
        workload: WorkloadSpec::parse(workload).unwrap(),
        levels: vec![],
        member_counts: vec![],
        interleaves: vec![],
        policies: vec![],
        seed: 1,
        member_bytes: Some(63 << 20),
        parity_layout: ParityLayout::LeftSymmetric,
        stripe_cache: Some(CacheLimits::DEFAULT),
        link: Link::default(),
        beside: None,
    }
}

fn run(s: &Sweep, level: Level, members: u32, il_bytes: u64) -> BenchReport {
    let policy = matches!(level, Level::Mirror).then_some(ReadPolicy::Auto);
    let r = s
        .run_point(&Point {
            level,
            members,
            interleave_bytes: il_bytes,
            policy,
        })
        .unwrap();
    assert_eq!(r.errors, 0);
    println!("{level} x{members} {}: {r:?}", s.workload.describe());
    r
}

fn constant() -> SimpleLatency {
    SimpleLatency::constant(L_NS, Jitter::NONE, 0)
}

fn near(x: f64, want: f64, rel: f64) -> bool {
    (x - want).abs() <= want * rel
}

#[test]
fn a_1m_read_on_stripe4_takes_one_member_latency() {
    // Four 256 KiB member reads at once: one latency, not four.
    let s = sweep("dd:bs=1M,qd=1,total=64M", constant(), 32);
    let r = run(&s, Level::Stripe, 4, 256 << 10);
    assert_eq!(r.member_ios, 4 * r.requests);
    assert_eq!(r.mean_latency_ns, L_NS);
    assert_eq!(r.max_latency_ns, L_NS);
    // Eight requests in flight: eight latencies' worth of data per L.
    let s = sweep("dd:bs=1M,qd=8,total=128M", constant(), 32);
    let r = run(&s, Level::Stripe, 4, 256 << 10);
    assert!(
        near(r.iops(), 8.0 * 1e9 / L_NS as f64, 0.01),
        "{}",
        r.iops()
    );
}

#[test]
fn random_4k_reads_at_qd32_are_bound_by_the_client_or_the_member_queues() {
    let w = "raidtest:p=32,n=8000,read=100,min=4k,max=4k,align=4k";
    // 32 requests in flight, each one member I/O: 32 per L, on stripe4 and
    // on a mirror alike, while 32 fit on the members at once.
    for (level, n, il) in [(Level::Stripe, 4, 256 << 10), (Level::Mirror, 2, 64 << 10)] {
        let r = run(&sweep(w, constant(), 32), level, n, il);
        assert_eq!(r.member_ios, r.requests, "4k aligned: one member I/O each");
        assert!(near(r.iops(), 32e9 / L_NS as f64, 0.01), "{}", r.iops());
    }
    // A member queue depth of 2: at most 8 I/Os at once on stripe4 and 4 on
    // the mirror, whatever the client keeps in flight. Stripe's random
    // placement leaves a member idle now and then (a little under the
    // bound); the mirror's reads go to the less loaded copy.
    let bound = 8e9 / L_NS as f64;
    let r = run(&sweep(w, constant(), 2), Level::Stripe, 4, 256 << 10);
    assert!(
        r.iops() <= bound * 1.001 && r.iops() >= bound * 0.9,
        "{}",
        r.iops()
    );
    let r = run(&sweep(w, constant(), 2), Level::Mirror, 2, 64 << 10);
    assert!(near(r.iops(), 4e9 / L_NS as f64, 0.01), "{}", r.iops());
}

#[test]
fn sequential_1m_writes_take_one_member_write_with_the_stripe_cache() {
    let w = "dd:rw=write,bs=1M,qd=1,total=96M";
    let r = run(&sweep(w, constant(), 32), Level::Mirror, 2, 64 << 10);
    assert_eq!(r.mean_latency_ns, L_NS);
    // RAID-5 over 4 at 64k: 1 MiB is 5 1/3 stripes. The cache holds each
    // request's partial stripe until the next completes it, so each request
    // writes whole stripes in one phase. Without it, the partial stripes
    // are read first: two phases.
    let mut s = sweep(w, constant(), 32);
    let r = run(&s, Level::Raid5, 4, 64 << 10);
    assert!(r.mean_latency_ns <= L_NS + L_NS / 50, "{r:?}");
    s.stripe_cache = None;
    let r = run(&s, Level::Raid5, 4, 64 << 10);
    assert!(r.mean_latency_ns >= L_NS * 18 / 10, "{r:?}");
}

#[test]
fn the_link_adds_its_time_and_bounds_throughput() {
    let link = Link::parse("request=50us,read=300us,write=400us").unwrap();
    let mut s = sweep("dd:bs=1M,qd=1,total=64M", constant(), 32);
    s.link = link;
    let r = run(&s, Level::Stripe, 4, 256 << 10);
    assert_eq!(r.mean_latency_ns, L_NS + 350_000);
    // Eight in flight: the replies, one at a time, are the bound (one per
    // 350 us), not the members (8 per 2.35 ms); the first reply leaves
    // after one member latency (3% of this run).
    s.workload = WorkloadSpec::parse("dd:bs=1M,qd=8,total=256M").unwrap();
    let r = run(&s, Level::Stripe, 4, 256 << 10);
    assert!(near(r.iops(), 1e9 / 350_000.0, 0.03), "{}", r.iops());
    assert!(r.iops() < 1e9 / 350_000.0);
    // A write's payload crosses before the members see it.
    s.workload = WorkloadSpec::parse("dd:rw=write,bs=1M,qd=1,total=32M").unwrap();
    let r = run(&s, Level::Mirror, 2, 64 << 10);
    assert_eq!(r.mean_latency_ns, L_NS + 450_000);
}

#[test]
fn jitter_adds_its_mean_and_a_request_waits_for_its_slowest_member() {
    let jittered = SimpleLatency::constant(L_NS, Jitter::Exponential { mean_ns: 500_000 }, 0);
    // One member I/O per request: L plus the jitter's mean.
    let s = sweep("dd:bs=4k,qd=1,total=8M", jittered.clone(), 32);
    let r = run(&s, Level::Stripe, 4, 256 << 10);
    assert!(near(r.mean_latency_ns as f64, 2_500_000.0, 0.05), "{r:?}");
    // Four at once: the largest of four draws, 25/12 of the mean
    // (1 + 1/2 + 1/3 + 1/4) for an exponential.
    let s = sweep("dd:bs=1M,qd=1,total=63M", jittered, 32);
    let r = run(&s, Level::Stripe, 4, 256 << 10);
    let want = L_NS as f64 + 500_000.0 * 25.0 / 12.0;
    assert!(
        near(r.mean_latency_ns as f64, want, 0.08),
        "{r:?} want {want}"
    );
}
