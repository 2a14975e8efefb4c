//! A volume of two unlike plexes, as a pool serves one: an md-exact
//! mirror whose members are a raid5 plex and a concat plex, each an
//! engine of its own over memory subdisks (`PlexMember`). Writes reach
//! both plexes, reads are balanced over them, and a plex whose subdisk
//! fails is failed by the mirror, which serves every byte from the other.

mod support;

use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::volume::{Health, Limits, Volume};
use platter_core::{Level, ParityLayout};
use platter_io::aio::layer::Layer;
use platter_io::{FaultSpec, Member};
use platter_server::engine::Engine;
use platter_server::plex::PlexMember;
use std::sync::Arc;
use support::{read, rig, write, Rig, Spec};

const DATA_OFFSET_BYTES: u64 = 1 << 20;

/// The mirror of `plexes`, its data from 1 MiB on each.
fn mirror_of(plexes: &[Arc<PlexMember>]) -> Arc<Engine> {
    let data = plexes.iter().map(|p| p.size_bytes()).min().unwrap() - DATA_OFFSET_BYTES;
    let n = plexes.len();
    let geometry = Geometry::new(GeometrySpec {
        level: Level::Mirror,
        parity_layout: ParityLayout::LeftSymmetric,
        copies: n as u32,
        interleave_bytes: 64 << 10,
        data_offset_bytes: DATA_OFFSET_BYTES,
        member_data_bytes: vec![data; n],
    })
    .unwrap();
    let members = plexes
        .iter()
        .map(|p| Some(Arc::clone(p) as Arc<dyn Member>))
        .collect();
    let volume = Volume::new(geometry, vec![Health::Online; n], Limits::default());
    let layer = Arc::new(Layer::threads(support::pool(
        32,
        std::time::Duration::from_secs(30),
    )));
    Engine::new(volume, members, layer)
}

/// A raid5 plex of 3 subdisks and a concat plex of 1, and their mirror.
fn two_plexes() -> (Rig, Rig, Arc<Engine>) {
    let raid5 = rig(Spec::new(Level::Raid5, 3));
    let concat = rig(Spec {
        member_bytes: 16 << 20,
        ..Spec::new(Level::Concat, 1)
    });
    let plexes = [
        Arc::new(PlexMember::new(Arc::clone(&raid5.engine), "v.p0")),
        Arc::new(PlexMember::new(Arc::clone(&concat.engine), "v.p1")),
    ];
    let mirror = mirror_of(&plexes);
    (raid5, concat, mirror)
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(2654435761).wrapping_add(seed) as u8 ^ (i >> 9) as u8)
        .collect()
}

fn reads_of(r: &Rig) -> u64 {
    r.engine.stats().members.iter().map(|m| m.reads).sum()
}

#[test]
fn both_plexes_hold_every_write_and_share_the_reads() {
    let (raid5, concat, mirror) = two_plexes();
    let size = mirror.size_bytes();
    assert_eq!(
        size,
        (16 << 20) - DATA_OFFSET_BYTES,
        "the smaller plex bounds it"
    );
    let chunks: Vec<u64> = (0..size / (256 << 10)).map(|c| c * (256 << 10)).collect();
    for (i, &at) in chunks.iter().enumerate() {
        write(&mirror, at, pattern(i as u64, 256 << 10)).unwrap();
    }
    mirror.run(platter_core::volume::Request::Flush).unwrap();
    for (i, &at) in chunks.iter().enumerate() {
        let want = pattern(i as u64, 256 << 10);
        assert!(
            read(&mirror, at, 256 << 10).unwrap() == want,
            "mirror at {at}"
        );
        // Each plex holds it at the mirror's data offset.
        for plex in [&raid5, &concat] {
            let got = read(&plex.engine, DATA_OFFSET_BYTES + at, 256 << 10).unwrap();
            assert!(got == want, "a plex at {at}");
        }
    }
    let (r0, c0) = (reads_of(&raid5), reads_of(&concat));
    for (i, &at) in chunks.iter().enumerate().cycle().take(400) {
        let got = read(&mirror, at, 64 << 10).unwrap();
        assert!(got[..] == pattern(i as u64, 256 << 10)[..64 << 10]);
    }
    let (r1, c1) = (reads_of(&raid5) - r0, reads_of(&concat) - c0);
    assert!(
        r1 > 0 && c1 > 0,
        "reads went to one plex only: raid5 {r1}, concat {c1}"
    );
}

#[test]
fn a_plex_whose_subdisk_fails_is_failed_and_the_other_serves_every_byte() {
    let (raid5, concat, mirror) = two_plexes();
    let size = mirror.size_bytes();
    let step = 128 << 10;
    for (i, at) in (0..size).step_by(step).enumerate() {
        write(&mirror, at, pattern(i as u64, step)).unwrap();
    }
    // The concat plex's only subdisk fails: every I/O from now on.
    let c = &concat.controls[0];
    c.set(FaultSpec {
        fail_from_nth: Some(c.io_count() + 1),
        ..FaultSpec::default()
    });
    for (i, at) in (0..size).step_by(step).enumerate() {
        let got = read(&mirror, at, step as u64).unwrap();
        assert!(got == pattern(i as u64, step), "a wrong byte at {at}");
    }
    // Written on with the plex failed, read back from the raid5 plex.
    write(&mirror, 0, pattern(99, step)).unwrap();
    assert!(read(&mirror, 0, step as u64).unwrap() == pattern(99, step));
    assert_eq!(mirror.health(), [Health::Online, Health::Faulty]);
    // A raid5 plex that loses a subdisk serves on inside, degraded: the
    // mirror does not notice.
    let r = &raid5.controls[1];
    r.set(FaultSpec {
        fail_from_nth: Some(r.io_count() + 1),
        ..FaultSpec::default()
    });
    for (i, at) in (0..size).step_by(step).enumerate().skip(1) {
        let got = read(&mirror, at, step as u64).unwrap();
        assert!(got == pattern(i as u64, step), "a wrong byte at {at}");
    }
    assert_eq!(mirror.health()[0], Health::Online);
    assert_eq!(raid5.engine.health()[1], Health::Faulty);
}
