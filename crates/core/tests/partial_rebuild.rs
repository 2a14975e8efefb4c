//! A member that comes back (a remote member whose connection dropped, a
//! device pulled and plugged in again) holds what it held when it left:
//! with a write-intent bitmap, only the regions written while it was away
//! are rebuilt (md's re-add with a bitmap). The bitmap keeps their bits
//! while the volume is degraded, also across a restart; afterwards the
//! member holds exactly what the others say, so the volume reads back
//! whole without any other member.

mod support;

use platter_core::intent::{IntentLayout, RegionSet, INTENT_OFFSET_BYTES};
use platter_core::volume::{Event, Health, Request};
use platter_core::Level;
use support::*;

/// Room after the label for the bitmap.
const DATA_OFFSET: u64 = 64 << 10;
const REGION_STRIPES: u64 = 4;

fn configs() -> Vec<Config> {
    let c = |level, members, copies| Config::of(level, members, copies, 8 * 512, 256);
    vec![
        c(Level::Mirror, 2, 2),
        c(Level::Mirror, 3, 3),
        c(Level::Raid10, 4, 2),
        c(Level::Raid10, 3, 2),
        c(Level::Raid5, 4, 1),
        c(Level::Raid6, 5, 1),
    ]
}

fn harness(config: &Config, seed: u64) -> (Harness, IntentLayout) {
    let g = config.geometry_with_data_offset(DATA_OFFSET);
    let layout = IntentLayout::new(&g, REGION_STRIPES)
        .unwrap()
        .expect("a bitmap");
    let mut h = Harness::with_geometry(g, seed);
    h.volume
        .enable_intent(layout, RegionSet::new(&layout), false);
    (h, layout)
}

fn sweep_all(h: &mut Harness) {
    for _ in 0..2 {
        h.one(Request::Sweep { all: true }).expect("sweep");
    }
}

/// What the members' bitmap areas hold, OR-ed, skipping `absent`.
fn bitmap_on_members(h: &Harness, layout: &IntentLayout, absent: u32) -> RegionSet {
    let mut on = RegionSet::new(layout);
    let at = INTENT_OFFSET_BYTES as usize;
    for (m, bytes) in h.members.iter().enumerate() {
        if m as u32 != absent {
            on.union_with(&RegionSet::from_bytes(
                layout,
                &bytes[at..at + layout.area_bytes() as usize],
            ));
        }
    }
    on
}

/// Runs a partial rebuild of `member` to its end, among client batches
/// with `load`; the data bytes written to the member meanwhile.
fn rebuild_partially(
    h: &mut Harness,
    model: &mut Model,
    member: u32,
    load: bool,
    label: &str,
) -> u64 {
    h.volume.start_partial_rebuild(member, 0).unwrap();
    assert_eq!(h.volume.health()[member as usize], Health::Rebuilding);
    let before = h.received[member as usize].data_bytes_written;
    let stripes = h.volume.geometry().stripes();
    for _ in 0..stripes * 4 {
        if h.volume.rebuild_progress().is_none() {
            break;
        }
        if load {
            random_workload_with(h, model, 2, 3, &mut |v| {
                v.rebuild_step(2);
            });
        } else if h.volume.rebuild_step(3 * REGION_STRIPES).is_some() {
            // Steps longer than a region: each still ends with its region
            // (mutation testing found a step running on into clean ones
            // unseen while steps were shorter than a region).
            h.run();
        }
    }
    assert!(
        h.volume.rebuild_progress().is_none(),
        "{label}: the rebuild did not finish"
    );
    assert_eq!(
        h.volume.health()[member as usize],
        Health::Online,
        "{label}"
    );
    let mut done = false;
    while let Some(e) = h.volume.next_event() {
        done |= e == Event::RebuildDone { member };
    }
    assert!(done, "{label}: no RebuildDone");
    h.received[member as usize].data_bytes_written - before
}

/// The member's rows in the stripes of `regions`.
fn rows_of_regions(h: &Harness, member: u32, regions: &[u64]) -> u64 {
    let g = h.volume.geometry();
    let rows_per_stripe = g.member_used_bytes(member) / g.interleave_bytes() / g.stripes();
    regions.len() as u64 * REGION_STRIPES * rows_per_stripe
}

/// A member away while writes go to two regions, then back: the rebuild
/// writes exactly those regions' rows on it and nothing else (a full
/// rebuild would write all of them), and afterwards it holds what the
/// others say (the volume reads back whole without each other member).
/// The bits are kept while it is away, and clear once it is back.
#[test]
fn a_member_that_comes_back_gets_only_what_it_missed() {
    for (i, config) in configs().iter().enumerate() {
        let label = format!("{:?} x{}", config.level, config.members);
        let (mut h, _) = harness(config, 700 + i as u64);
        let mut model = Model::new(&h.volume);
        random_workload(&mut h, &mut model, 20, 4);
        h.flush();
        sweep_all(&mut h);
        assert_eq!(
            h.volume.intent_status().unwrap().dirty_regions,
            0,
            "{label}"
        );

        let away = i as u32 % config.members;
        h.broken[away as usize] = true;
        let stripe_bytes = h.volume.geometry().stripe_data_bytes();
        for region in [1u64, 5] {
            let at = (region * REGION_STRIPES + 1) * stripe_bytes + 512;
            let data: Vec<u8> = (0..3 * 512)
                .map(|k| (k as u8) ^ (region as u8) ^ 0x5a)
                .collect();
            h.write(at, &data).expect("a degraded write succeeds");
            model.apply(&Request::Write {
                offset_bytes: at,
                data: bytes::Bytes::from(data),
                fua: false,
            });
        }
        assert_eq!(h.volume.health()[away as usize], Health::Faulty, "{label}");
        h.record_failures();
        h.broken[away as usize] = false;
        sweep_all(&mut h);
        let st = h.volume.intent_status().unwrap();
        assert_eq!(st.missed_regions, 2, "{label}: {st:?}");
        assert!(
            h.volume.region_missed(1) && h.volume.region_missed(5),
            "{label}"
        );
        assert_eq!(
            st.dirty_regions, 2,
            "{label}: a sweep cleared a missed region"
        );

        let written = rebuild_partially(&mut h, &mut model, away, false, &label);
        let il = config.interleave_bytes;
        assert_eq!(
            written,
            rows_of_regions(&h, away, &[1, 5]) * il,
            "{label}: the rebuild wrote other rows than the missed regions'"
        );
        assert_eq!(
            h.volume.intent_status().unwrap().missed_regions,
            0,
            "{label}"
        );
        h.flush();
        sweep_all(&mut h);
        assert_eq!(
            h.volume.intent_status().unwrap().dirty_regions,
            0,
            "{label}"
        );
        verify_all(&mut h, &model);
        for other in (0..config.members).filter(|&m| m != away) {
            h.reassemble(&[other]);
            verify_all(&mut h, &model);
        }
    }
}

/// The same under load, with the member failing in the middle of
/// concurrent writes (others in flight on it when it goes), and a restart while it
/// is away: the bits on the members are what it missed, read back at the
/// next assembly; the partial rebuild then runs among client writes.
#[test]
fn what_a_member_missed_survives_a_restart_and_a_rebuild_under_load() {
    for (i, config) in configs().iter().enumerate() {
        let label = format!("{:?} x{}", config.level, config.members);
        let (mut h, layout) = harness(config, 900 + i as u64);
        let mut model = Model::new(&h.volume);
        random_workload(&mut h, &mut model, 20, 4);
        h.flush();
        sweep_all(&mut h);

        let away = (i as u32 + 1) % config.members;
        h.broken[away as usize] = true;
        random_workload(&mut h, &mut model, 10, 6);
        h.broken[away as usize] = false;
        assert_eq!(h.volume.health()[away as usize], Health::Faulty, "{label}");
        h.record_failures();
        random_workload(&mut h, &mut model, 10, 6);
        h.flush();
        sweep_all(&mut h);
        let missed = h.volume.intent_status().unwrap().missed_regions;
        assert!(missed > 0, "{label}");

        // A restart without it: its bits come back from the others'.
        h.reassemble(&[away]);
        let on = bitmap_on_members(&h, &layout, away);
        assert_eq!(on.len(), missed, "{label}: the bitmap on the members");
        h.volume.enable_intent(layout, on, false);
        sweep_all(&mut h);
        assert_eq!(
            h.volume.intent_status().unwrap().missed_regions,
            missed,
            "{label}"
        );

        rebuild_partially(&mut h, &mut model, away, true, &label);
        verify_all(&mut h, &model);
        for other in (0..config.members).filter(|&m| m != away) {
            h.reassemble(&[other]);
            verify_all(&mut h, &model);
        }
    }
}
