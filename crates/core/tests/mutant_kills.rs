//! Tests written for mutants that survived `bench/mutants.sh`
//! (docs/mutants.md lists each with the test that now kills it). Each
//! test says which mutant it kills and what bug that mutant stands for.

use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::{Level, ParityLayout};

fn spec(level: Level, members: u32, copies: u32, member_bytes: u64) -> GeometrySpec {
    GeometrySpec {
        level,
        parity_layout: ParityLayout::LeftSymmetric,
        copies,
        interleave_bytes: 64 << 10,
        data_offset_bytes: 1 << 20,
        member_data_bytes: vec![member_bytes; members as usize],
    }
}

/// Kills `geometry/mod.rs: replace gcd -> u64 with 1`. A RAID-10 stripe is
/// the chunks of one repeat of md's near layout, lcm(members, copies)
/// slots: 4 members with 2 copies repeat every 4 slots, 2 chunks. With
/// gcd taken as 1 the stripe would be 4 chunks: every stripe number, the
/// stripe locks and the write-intent bitmap's regions (stored as stripes
/// per region in the labels) would change meaning under an existing volume.
#[test]
fn a_raid10_stripe_is_one_repeat_of_the_near_layout() {
    for (members, copies, k) in [
        (4u32, 2u32, 2u32),
        (6, 2, 3),
        (6, 3, 2),
        (6, 4, 3),
        (3, 2, 3),
    ] {
        let g = Geometry::new(spec(Level::Raid10, members, copies, 1 << 30)).unwrap();
        assert_eq!(g.data_per_stripe(), k, "raid10 {members}x{copies}");
        assert_eq!(g.stripe_data_bytes(), u64::from(k) * (64 << 10));
        let chunks = u64::from(members) * (1 << 30) / (64 << 10) / u64::from(copies);
        assert_eq!(g.stripes(), chunks.div_ceil(u64::from(k)));
    }
}

/// Kills `geometry/mod.rs: replace <impl Display for GeometryError>::fmt
/// with Ok(Default::default())`: a refused geometry must say why, in words
/// (`platter create` prints this text and nothing else). A volume over
/// 2^64 bytes is the size case: 255 members of 2^57 bytes.
#[test]
fn a_refused_geometry_says_why() {
    let e = Geometry::new(spec(Level::Stripe, 255, 1, 1 << 57)).unwrap_err();
    assert_eq!(e.to_string(), e.0);
    assert!(e.to_string().contains("more than 2^64 bytes"), "{e}");
    let e = Geometry::new(spec(Level::Raid6, 3, 1, 1 << 30)).unwrap_err();
    assert!(e.to_string().contains("at least 4 members"), "{e}");
}

/// Kills `geometry/mod.rs: Geometry::redundancy` with `copies - 1` mutated
/// to `copies + 1` or `copies / 1`, and `data_per_stripe -> 0 | 1` (the
/// stripe test above). The redundancy is what `platter status` and the
/// simulator's budget take as the failures a volume survives in every
/// stripe: a mirror of 3 survives 2, not 4; a raid10 with 2 copies, 1.
#[test]
fn redundancy_is_copies_less_one_or_the_parity_members() {
    for (level, members, copies, want) in [
        (Level::Mirror, 3u32, 3u32, 2u32),
        (Level::Mirror, 2, 2, 1),
        (Level::Raid10, 4, 2, 1),
        (Level::Raid10, 6, 3, 2),
        (Level::Raid5, 4, 1, 1),
        (Level::Raid6, 5, 1, 2),
        (Level::Stripe, 3, 1, 0),
    ] {
        let g = Geometry::new(spec(level, members, copies, 1 << 30)).unwrap();
        assert_eq!(g.redundancy(), want, "{level:?} x{members} copies {copies}");
    }
}

mod volume_bookkeeping {
    use bytes::Bytes;
    use platter_core::geometry::{Geometry, GeometrySpec};
    use platter_core::volume::{
        CacheLimits, ErrorKind, Health, Limits, Maintenance, MemberOp, Request, Volume,
    };
    use platter_core::{Level, ParityLayout};

    fn raid5(max_requests: usize) -> Volume {
        let g = Geometry::new(GeometrySpec {
            level: Level::Raid5,
            parity_layout: ParityLayout::DEFAULT,
            copies: 1,
            interleave_bytes: 4096,
            data_offset_bytes: 4096,
            member_data_bytes: vec![1 << 20; 3],
        })
        .unwrap();
        Volume::new(g, vec![Health::Online; 3], Limits { max_requests })
    }

    fn write(offset_bytes: u64, len: usize) -> Request {
        Request::Write {
            offset_bytes,
            data: Bytes::from(vec![7u8; len]),
            fua: false,
        }
    }

    /// Performs every member I/O (reads return zeros) until the volume is
    /// idle.
    fn settle(v: &mut Volume) {
        for _ in 0..100_000 {
            let Some(io) = v.next_io() else {
                assert!(v.is_idle());
                return;
            };
            let data = match io.op {
                MemberOp::Read { len_bytes, .. } => {
                    Some(Bytes::from(vec![0u8; len_bytes as usize]))
                }
                _ => None,
            };
            v.io_done(io.id, Ok(data));
        }
        panic!("did not settle");
    }

    /// Kills `volume/mod.rs: replace - with + in Volume::submit` and
    /// `replace += with -=` / `*=` there. The request limit counts client
    /// requests only: the stripe cache's write-outs are the volume's own
    /// and take no slot. Counting them twice (the `+`) would refuse
    /// clients the volume has room for; a refusal counts one error (the
    /// `-=` underflows, the `*=` counts none). No test had filled the limit.
    #[test]
    fn the_request_limit_counts_client_requests_and_a_refusal_counts_an_error() {
        let mut v = raid5(2);
        v.enable_stripe_cache(CacheLimits::DEFAULT);
        // A partial stripe, cached; the tick sends it out as the volume's
        // own request, left in flight.
        v.submit(write(5 * 8192 + 512, 512));
        v.submit(Request::CacheTick { all: true });
        while v.next_completion().is_some() {}
        assert!(v.requests_in_flight() >= 1, "a write-out in flight");
        let internal = v.requests_in_flight();
        let a = v.submit(write(0, 8192));
        let b = v.submit(write(8192, 8192));
        let c = v.submit(write(16384, 8192));
        let done: Vec<_> = std::iter::from_fn(|| v.next_completion()).collect();
        assert_eq!(done.len(), 1, "only the third is refused at once");
        assert_eq!(done[0].id, c);
        let e = done[0].result.as_ref().expect_err("busy");
        assert_eq!(e.kind, ErrorKind::Busy);
        assert_eq!(v.stats().volume.errors, 1);
        assert_eq!(v.requests_in_flight(), internal + 2);
        settle(&mut v);
        let mut ids: Vec<_> = std::iter::from_fn(|| v.next_completion())
            .map(|c| c.id)
            .collect();
        ids.sort();
        assert_eq!(ids, vec![a, b]);
    }

    /// [`raid5`] with members 0 and 2 of 3 failed, the failures recorded.
    fn raid5_two_lost() -> Volume {
        let mut v = raid5(16);
        v.mark_faulty(0, "test".into());
        v.mark_faulty(2, "test".into());
        let unrecorded: Vec<u32> = v.unrecorded_failures().collect();
        for m in unrecorded {
            v.failure_recorded(m);
        }
        while v.next_event().is_some() {}
        v
    }

    /// Kills `volume/read.rs: replace != with == in Volume::lost_error`:
    /// the EIO for bytes no member can give names the members that are
    /// lost, not the ones still online (the operator reads it to know
    /// which devices to look at).
    #[test]
    fn a_lost_read_names_the_lost_members() {
        let mut v = raid5_two_lost();
        v.submit(Request::Read {
            offset_bytes: 0,
            len_bytes: 4096,
        });
        settle(&mut v);
        let c = v.next_completion().expect("the read ends");
        let e = c.result.expect_err("two of three members lost");
        assert_eq!(e.kind, ErrorKind::Io);
        assert!(e.message.contains("member 0 faulty"), "{}", e.message);
        assert!(e.message.contains("member 2 faulty"), "{}", e.message);
        assert!(!e.message.contains("member 1"), "{}", e.message);
    }

    /// Kills `volume/write.rs: replace * with +` and `with /` in
    /// `plan_write`'s error: a write to a stripe no parity can keep names
    /// the stripe's own volume bytes (the operator and the client's log
    /// read them to know what was lost), not bytes near the volume's start.
    #[test]
    fn a_lost_write_names_its_stripes_bytes() {
        let mut v = raid5_two_lost();
        let sb = v.geometry().stripe_data_bytes();
        v.submit(write(5 * sb + 512, 1024));
        settle(&mut v);
        let c = v.next_completion().expect("the write ends");
        let e = c.result.expect_err("two of three members lost");
        let bytes = format!("volume bytes {}..{}", 5 * sb, 6 * sb);
        assert!(e.message.contains(&bytes), "{}", e.message);
    }

    /// Kills `volume/mod.rs: replace Volume::requests_in_flight -> usize
    /// with 0` and `with 1`: the server's stop waits on it.
    #[test]
    fn requests_in_flight_counts_what_was_accepted_and_not_completed() {
        let mut v = raid5(16);
        assert_eq!(v.requests_in_flight(), 0);
        for i in 0..3 {
            v.submit(write(i * 8192, 8192));
        }
        assert_eq!(v.requests_in_flight(), 3);
        settle(&mut v);
        assert_eq!(v.requests_in_flight(), 0);
    }

    /// Kills `volume/mod.rs: replace && with ||` in `Volume::is_idle` (the
    /// second and third `&&`): a FLUSH holds no stripe lock, so a volume
    /// with one in flight has idle locks and, once its member flushes are
    /// handed out, an empty queue, and is still not idle (the server's
    /// stop and the upkeep thread ask before they let go).
    #[test]
    fn a_flush_in_flight_is_not_idle() {
        let mut v = raid5(16);
        v.submit(Request::Flush);
        assert!(!v.is_idle(), "queued member flushes");
        let ios: Vec<_> = std::iter::from_fn(|| v.next_io()).collect();
        assert_eq!(ios.len(), 3);
        assert!(!v.is_idle(), "member flushes out");
        for io in ios {
            v.io_done(io.id, Ok(None));
        }
        assert!(v.is_idle());
    }

    fn failed(v: &mut Volume, member: u32) {
        v.mark_faulty(member, "test".into());
        let unrecorded: Vec<u32> = v.unrecorded_failures().collect();
        for m in unrecorded {
            v.failure_recorded(m);
        }
        while v.next_event().is_some() {}
    }

    /// Kills `volume/rebuild.rs: replace match guard r.cursor_stripe ==
    /// first_stripe with true in Volume::plan_rebuild`: a rebuild step must
    /// start at the cursor. One that did not (a stale step, a host that
    /// stepped twice) would write the new member past stripes it has not
    /// rebuilt, and the cursor would then call them in sync.
    #[test]
    fn a_rebuild_step_away_from_the_cursor_is_refused() {
        let mut v = raid5(16);
        failed(&mut v, 2);
        v.start_rebuild(2, 0).expect("a rebuild");
        v.submit(Request::Maintain {
            first_stripe: 5,
            stripe_count: 1,
            action: Maintenance::Rebuild,
        });
        settle(&mut v);
        let c = v.next_completion().expect("the step ends");
        let e = c.result.expect_err("out of order");
        assert!(e.message.contains("out of order"), "{}", e.message);
        assert_eq!(
            v.rebuild_progress().expect("still running").cursor_stripe,
            0
        );
    }

    /// Kills `volume/rebuild.rs: replace * with +` and `* with /` in
    /// `plan_rebuild`: a rebuild that cannot read enough members says at
    /// which volume bytes it stopped.
    #[test]
    fn a_rebuild_with_too_few_members_says_where_it_stopped() {
        let mut v = raid5(16);
        failed(&mut v, 2);
        v.start_rebuild(2, 3).expect("a rebuild");
        failed(&mut v, 0);
        v.rebuild_step(1).expect("a step");
        settle(&mut v);
        let c = v.next_completion().expect("the step ends");
        let e = c.result.expect_err("two of three lost");
        assert!(
            e.message.contains(&format!("volume bytes {}..", 3 * 8192)),
            "{}",
            e.message
        );
    }

    /// Kills `volume/rebuild.rs: replace && with ||` in the choice of a
    /// mirror rebuild's source: the copy read must be usable, not merely
    /// another member's. With member 0 failed, a mirror x3 rebuilding
    /// member 2 reads member 1 only; the mutant read the failed member 0
    /// and copied what it held.
    #[test]
    fn a_mirror_rebuild_reads_a_usable_copy() {
        let g = Geometry::new(GeometrySpec {
            level: Level::Mirror,
            parity_layout: ParityLayout::DEFAULT,
            copies: 3,
            interleave_bytes: 4096,
            data_offset_bytes: 4096,
            member_data_bytes: vec![1 << 16; 3],
        })
        .unwrap();
        let mut v = Volume::new(g, vec![Health::Online; 3], Limits { max_requests: 16 });
        failed(&mut v, 0);
        failed(&mut v, 2);
        v.start_rebuild(2, 0).expect("a rebuild");
        v.rebuild_step(4).expect("a step");
        let mut reads = [0u32; 3];
        for _ in 0..1000 {
            let Some(io) = v.next_io() else { break };
            let data = match io.op {
                MemberOp::Read { len_bytes, .. } => {
                    reads[io.member as usize] += 1;
                    Some(Bytes::from(vec![0u8; len_bytes as usize]))
                }
                _ => None,
            };
            v.io_done(io.id, Ok(data));
        }
        assert_eq!(reads[0], 0, "read the failed member");
        assert!(reads[1] > 0);
        assert!(v.next_completion().expect("the step ends").result.is_ok());
    }

    /// Kills `volume/rebuild.rs: replace * with +`, `* with /` where a
    /// mirror rebuild finds no usable copy: its error says at which volume
    /// bytes it stopped.
    #[test]
    fn a_mirror_rebuild_with_no_copy_left_says_where_it_stopped() {
        let g = Geometry::new(GeometrySpec {
            level: Level::Mirror,
            parity_layout: ParityLayout::DEFAULT,
            copies: 2,
            interleave_bytes: 4096,
            data_offset_bytes: 4096,
            member_data_bytes: vec![1 << 16; 2],
        })
        .unwrap();
        let mut v = Volume::new(g, vec![Health::Online; 2], Limits { max_requests: 16 });
        failed(&mut v, 1);
        v.start_rebuild(1, 3).expect("a rebuild");
        failed(&mut v, 0);
        v.rebuild_step(1).expect("a step");
        settle(&mut v);
        let e = v
            .next_completion()
            .expect("the step ends")
            .result
            .expect_err("no copy left");
        assert!(e.message.contains("volume bytes 12288.."), "{}", e.message);
    }
}

/// Kills the fourth run's survivors in `volume/request.rs`: the reply and
/// request types' accessors the server uses (the NBD reply is written
/// from `segments`/`into_segments`, its size from `len`/`is_empty`; log
/// lines and error replies name requests and print errors). The core and
/// simulator suites read replies through `to_bytes` only.
mod request_types {
    use bytes::Bytes;
    use platter_core::volume::{ErrorKind, ReadData, Request, VolumeError, READ_SEGMENTS_MAX};

    fn pieces(n: usize, each: usize) -> smallvec::SmallVec<[(u64, Bytes); 2]> {
        (0..n)
            .rev()
            .map(|i| ((i * each) as u64, Bytes::from(vec![i as u8; each])))
            .collect()
    }

    #[test]
    fn read_data_keeps_its_segments_in_order_up_to_the_bound() {
        let d = ReadData::assemble(pieces(3, 512), 1536);
        assert_eq!(d.len(), 1536);
        assert!(!d.is_empty());
        let firsts: Vec<u8> = d.segments().iter().map(|s| s[0]).collect();
        assert_eq!(
            firsts,
            vec![0, 1, 2],
            "in offset order, not copied together"
        );
        assert_eq!(d.clone().into_segments().len(), 3);
        // Exactly at the bound: still segments; one more: one buffer.
        let at = ReadData::assemble(pieces(READ_SEGMENTS_MAX, 8), (READ_SEGMENTS_MAX * 8) as u64);
        assert_eq!(at.segments().len(), READ_SEGMENTS_MAX);
        let over = ReadData::assemble(
            pieces(READ_SEGMENTS_MAX + 1, 8),
            ((READ_SEGMENTS_MAX + 1) * 8) as u64,
        );
        assert_eq!(over.segments().len(), 1);
        assert_eq!(over.segments()[0].len(), (READ_SEGMENTS_MAX + 1) * 8);
        let empty = ReadData::assemble(smallvec::SmallVec::new(), 0);
        assert!(empty.is_empty());
        assert!(empty.segments().is_empty());
    }

    #[test]
    fn requests_are_named_and_errors_print_their_message() {
        let r = Request::Read {
            offset_bytes: 0,
            len_bytes: 1,
        };
        assert_eq!(r.name(), "read");
        assert_eq!(Request::Flush.name(), "flush");
        let e = VolumeError::new(ErrorKind::Io, "member 2 is gone");
        assert_eq!(e.to_string(), "member 2 is gone");
    }
}
