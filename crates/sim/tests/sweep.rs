//! Sweeps give the same numbers for the same seed, however many threads
//! run them.

use platter_core::balance::ReadPolicy;
use platter_core::{Level, ParityLayout};
use platter_sim::disk::parametric::Parametric;
use platter_sim::disk::HostModel;
use platter_sim::sweep::{parse_interleaves, svg, table, Members, Sweep};
use platter_sim::workload::WorkloadSpec;

fn sweep(seed: u64, workload: &str) -> Sweep {
    Sweep {
        members_model: Members::Disk {
            spec: Box::new(Parametric::drive_7200().spec()),
            host: HostModel::default(),
        },
        workload: WorkloadSpec::parse(workload).unwrap(),
        levels: vec![Level::Stripe, Level::Mirror, Level::Raid5],
        member_counts: vec![2, 3],
        interleaves: parse_interleaves("16s,126s,128s,1024s").unwrap(),
        policies: vec![
            ReadPolicy::RoundRobin,
            ReadPolicy::Proximity { window_bytes: 0 },
        ],
        seed,
        member_bytes: None,
        parity_layout: ParityLayout::LeftSymmetric,
        stripe_cache: None,
        link: Default::default(),
        beside: None,
    }
}

#[test]
fn same_seed_same_table_on_one_and_two_threads() {
    let s = sweep(5, "raidtest:p=4,n=150");
    // stripe 2 + 3, mirror 2 + 3 with two policies, raid5 3 (2 is below
    // its minimum, if it has one) times four interleaves.
    assert!(s.points().len() >= 4 * 7, "{}", s.points().len());
    let one = s.run(1, &|_, _, _| {});
    let two = s.run(2, &|_, _, _| {});
    assert_eq!(one, two);
    let t = table(&one);
    assert_eq!(t, table(&two));
    println!("{t}");
    assert!(one.iter().all(|r| r.result.is_ok()));
    let other = sweep(6, "raidtest:p=4,n=150").run(2, &|_, _, _| {});
    assert_ne!(table(&other), t, "another seed, other requests");
    let plot = svg(&one, "test");
    assert!(plot.starts_with("<svg") && plot.ends_with("</svg>\n"));
    assert_eq!(plot.matches("<polyline").count(), 2 + 4 + 1);
}

#[test]
fn progress_reports_every_point_once() {
    let s = sweep(1, "dd:bs=64k,total=1M");
    let seen = std::sync::Mutex::new(Vec::new());
    let rows = s.run(2, &|n, total, _| seen.lock().unwrap().push((n, total)));
    let mut seen = seen.into_inner().unwrap();
    seen.sort_unstable();
    let total = rows.len();
    assert_eq!(seen, (1..=total).map(|n| (n, total)).collect::<Vec<_>>());
}
