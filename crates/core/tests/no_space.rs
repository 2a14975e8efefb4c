//! A member with no room for a write (ENOSPC) is full, not broken. The
//! outside tester's story: members on a 100 MiB tmpfs, the volume written
//! until the file system was full; every member was marked faulty, the
//! client got EIO, reads of old data failed too, and after space was freed
//! `serve` refused the volume, though the data on the members was intact.
//! Now the write fails with `NoSpace`, every member stays in use, old data
//! reads back, the volume says its stripes are owed a resync, and once
//! there is room a repair makes parity and copies agree again.

mod support;

use platter_core::volume::{Event, Health, Maintenance, Request};
use platter_core::Level;
use support::*;

#[test]
fn a_write_refused_for_space_fails_alone_and_keeps_every_member() {
    let configs: Vec<Config> = all_configs(&[512, 65536], &[2, 3, 4, 5])
        .into_iter()
        .filter(|c| c.level != Level::Concat)
        .collect();
    assert!(configs.len() > 10);
    for (i, config) in configs.iter().enumerate() {
        let mut h = Harness::new(config, 70_000 + i as u64);
        let size = h.volume.size_bytes();
        let old = h.rng.bytes(size as usize);
        h.write(0, &old).expect("the first fill");
        h.flush();

        let full = config.members - 1;
        h.full[full as usize] = true;
        let stripe = h.volume.geometry().stripe_data_bytes();
        let (at, len) = (stripe, (2 * stripe).min(size - stripe));
        let new = h.rng.bytes(len as usize);
        let writes_before = h.received[full as usize].writes;
        let refused = h.write(at, &new);
        let events: Vec<Event> = std::iter::from_fn(|| h.volume.next_event()).collect();
        // Stripe and RAID-10 writes may miss the full member.
        let touched = h.received[full as usize].writes > writes_before;
        assert!(touched || config.level != Level::Raid5, "{config:?}");
        if touched {
            assert_eq!(
                refused,
                Err(platter_core::volume::ErrorKind::NoSpace),
                "{config:?}"
            );
            assert!(
                events
                    .iter()
                    .any(|e| matches!(e, Event::NoSpace { member, .. } if *member == full)),
                "{config:?}: {events:?}"
            );
            if h.volume.geometry().redundancy() > 0 {
                assert!(h.volume.resync_owed(), "{config:?}");
            }
        }
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, Event::MemberFaulty { .. })),
            "{config:?}: {events:?}"
        );
        assert!(
            h.volume.health().iter().all(|s| *s == Health::Online),
            "{config:?}: {:?}",
            h.volume.health()
        );
        // What the refused write did not cover is intact, degraded or not.
        assert_eq!(h.read(0, at).unwrap(), &old[..at as usize], "{config:?}");
        let end = at + len;
        assert_eq!(
            h.read(end, size - end).unwrap(),
            &old[end as usize..],
            "{config:?}"
        );

        // Room again: the same write goes through, and a repair leaves
        // nothing for a check to find.
        h.full[full as usize] = false;
        h.write(at, &new).expect("the write once there is room");
        assert_eq!(h.read(at, len).unwrap(), new, "{config:?}");
        if h.volume.geometry().redundancy() > 0 {
            h.scrub(Maintenance::Repair);
            let after = h.scrub(Maintenance::Check);
            assert!(after.mismatched_stripes.is_empty(), "{config:?}: {after:?}");
        }
        assert!(matches!(
            h.one(Request::Flush),
            Ok(platter_core::volume::Reply::Done)
        ));
    }
}
