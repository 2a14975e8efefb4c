//! The statistics on known request patterns (definitions in
//! docs/statistics.md): multiblock and multistripe transfers, parity write
//! strategies, recovered reads and degraded writes, per-plex attribution,
//! member counters against what the members received, histograms.

mod support;

use bytes::Bytes;
use platter_core::stats::{Counters, Histogram, LatencyOf, Stats};
use platter_core::volume::{Request, Volume};
use platter_core::{Level, ParityLayout};
use support::*;

const IL: u64 = 8 * SECTOR_BYTES;

fn config(level: Level, members: u32, copies: u32) -> Config {
    Config::of(level, members, copies, IL, 8)
}

fn stats(h: &Harness) -> Stats {
    h.volume.stats()
}

fn write(h: &mut Harness, offset_bytes: u64, len_bytes: u64) {
    let data = h.rng.bytes(len_bytes as usize);
    h.write(offset_bytes, &data).expect("write");
}

fn read(h: &mut Harness, offset_bytes: u64, len_bytes: u64) {
    h.read(offset_bytes, len_bytes).expect("read");
}

/// Reads and writes `[offset, offset + len)` on a fresh volume and returns
/// the volume's (multiblock, multistripe) counts after each.
fn shape(c: &Config, offset_bytes: u64, len_bytes: u64) -> [(u64, u64); 2] {
    let mut h = Harness::new(c, 1);
    read(&mut h, offset_bytes, len_bytes);
    let r = stats(&h).volume.counters;
    assert_eq!((r.reads, r.bytes_read), (1, len_bytes));
    write(&mut h, offset_bytes, len_bytes);
    let w = stats(&h).volume.counters;
    assert_eq!((w.writes, w.bytes_written), (1, len_bytes));
    [
        (r.multiblock, r.multistripe),
        (w.multiblock - r.multiblock, w.multistripe - r.multistripe),
    ]
}

#[test]
fn the_three_patterns_of_the_issue() {
    for c in [
        config(Level::Stripe, 4, 1),
        config(Level::Raid5, 4, 1),
        config(Level::Raid6, 5, 1),
        config(Level::Raid10, 4, 2),
        config(Level::Raid10, 3, 2),
    ] {
        let stripe = c.geometry().stripe_data_bytes();
        assert!(stripe >= 2 * IL, "{c:?}: a stripe of two chunks at least");
        // Aligned, inside one interleave: neither.
        assert_eq!(shape(&c, IL, IL), [(0, 0); 2], "{c:?}");
        assert_eq!(shape(&c, IL + 512, 1024), [(0, 0); 2], "{c:?}");
        // Two interleaves of one stripe: multiblock.
        assert_eq!(shape(&c, IL / 2, IL), [(1, 0); 2], "{c:?}");
        assert_eq!(shape(&c, 0, 2 * IL), [(1, 0); 2], "{c:?}");
        // Across a stripe boundary: multistripe (and so multiblock).
        assert_eq!(shape(&c, stripe - 512, 1024), [(1, 1); 2], "{c:?}");
        assert_eq!(shape(&c, stripe - IL, 2 * IL), [(1, 1); 2], "{c:?}");
    }
}

#[test]
fn mirror_and_concat_shapes() {
    // A mirror copy is one run on one member: never multiblock.
    let m = config(Level::Mirror, 2, 2);
    assert_eq!(shape(&m, IL / 2, 3 * IL), [(0, 0); 2]);
    // Concat: multiblock when the range crosses from one member to the next.
    let c = config(Level::Concat, 3, 1);
    let member0 = c.geometry().member_used_bytes(0);
    assert_eq!(shape(&c, IL / 2, 3 * IL), [(0, 0); 2]);
    assert_eq!(shape(&c, member0 - 512, 1024), [(1, 0); 2]);
}

#[test]
fn raid5_full_stripe_write() {
    let c = config(Level::Raid5, 4, 1);
    let mut h = Harness::new(&c, 2);
    let stripe = h.volume.geometry().stripe_data_bytes();
    write(&mut h, stripe, stripe);
    let v = stats(&h).volume.counters;
    assert_eq!(
        (
            v.full_stripe_writes,
            v.read_modify_writes,
            v.reconstruct_writes,
            v.parityless_writes
        ),
        (1, 0, 0, 0)
    );
    // Nothing was read to write it.
    assert!(stats(&h).members.iter().all(|m| m.reads == 0));
    // Two whole stripes: two full-stripe writes.
    write(&mut h, 2 * stripe, 2 * stripe);
    assert_eq!(stats(&h).volume.counters.full_stripe_writes, 3);
    // A stripe and a half: one full, one partial.
    write(&mut h, 0, stripe + IL);
    let v = stats(&h).volume.counters;
    assert_eq!(v.full_stripe_writes, 4);
    assert_eq!(v.read_modify_writes + v.reconstruct_writes, 1);
}

#[test]
fn raid5_small_writes_count_the_strategy_chosen() {
    // Three members (two data chunks): rewriting a sector of one chunk reads
    // the other chunk (one read) rather than the old data and parity (two),
    // so it is a reconstruct-write.
    let mut h = Harness::new(&config(Level::Raid5, 3, 1), 3);
    write(&mut h, 512, 512);
    let v = stats(&h).volume.counters;
    assert_eq!(
        (
            v.full_stripe_writes,
            v.read_modify_writes,
            v.reconstruct_writes
        ),
        (0, 0, 1)
    );
    // Four members (three data chunks): two reads either way, the other
    // two chunks or the old data and parity; a tie goes to
    // reconstruct-write, as md's default. (Mutation testing dropped the
    // parity reads from read-modify-write's count unseen: no test had a
    // tie.)
    let mut h = Harness::new(&config(Level::Raid5, 4, 1), 5);
    write(&mut h, 512, 512);
    let v = stats(&h).volume.counters;
    assert_eq!((v.read_modify_writes, v.reconstruct_writes), (0, 1));
    // Five members (four data chunks): the old data and parity (two reads)
    // beat the three other chunks: read-modify-write.
    let mut h = Harness::new(&config(Level::Raid5, 5, 1), 4);
    write(&mut h, 512, 512);
    let v = stats(&h).volume.counters;
    assert_eq!(
        (
            v.full_stripe_writes,
            v.read_modify_writes,
            v.reconstruct_writes
        ),
        (0, 1, 0)
    );
    // A write over two stripes counts each stripe once.
    let stripe = h.volume.geometry().stripe_data_bytes();
    write(&mut h, stripe - 512, 1024);
    let v = stats(&h).volume.counters;
    assert_eq!(v.read_modify_writes + v.reconstruct_writes, 3);
    // The one plex carries the same numbers.
    assert_eq!(stats(&h).plexes.len(), 1);
    assert_eq!(stats(&h).plexes[0].counters, v);
}

/// The member holding data chunk `d` of stripe 0, and the parity member.
fn raid5_roles(h: &Harness) -> (Vec<u32>, u32) {
    let roles = h.volume.geometry().parity_roles(0).unwrap();
    (roles.data.clone(), roles.p)
}

#[test]
fn raid5_degraded_reads_and_writes() {
    let c = config(Level::Raid5, 4, 1);
    let mut h = Harness::new(&c, 5);
    let stripe = h.volume.geometry().stripe_data_bytes();
    write(&mut h, 0, 4 * stripe);
    let (data, p) = raid5_roles(&h);
    let lost = data[1];
    h.reassemble(&[lost]);

    // Chunk 0 of stripe 0 is on an online member: a plain read.
    read(&mut h, 0, IL);
    assert_eq!(stats(&h).volume.counters.recovered_reads, 0);
    // Chunk 1 is on the lost member: rebuilt from the others.
    read(&mut h, IL + 512, 512);
    assert_eq!(stats(&h).volume.counters.recovered_reads, 1);
    // Partly: still one recovered read.
    read(&mut h, 0, 2 * IL);
    let v = stats(&h).volume.counters;
    assert_eq!((v.reads, v.recovered_reads), (3, 2));

    // A write to chunk 0: its member and the parity are online, so every
    // chunk it covers is updated. Not degraded.
    write(&mut h, 0, 512);
    assert_eq!(stats(&h).volume.counters.degraded_writes, 0);
    // A write to chunk 1 cannot reach its member: degraded.
    write(&mut h, IL, 512);
    assert_eq!(stats(&h).volume.counters.degraded_writes, 1);
    assert_eq!(stats(&h).plexes[0].counters.degraded_writes, 1);

    // Lose the parity member of stripe 0 instead: writes there keep no
    // parity (parityless, degraded).
    h.reassemble(&[p]);
    let reads_before: u64 = stats(&h).members.iter().map(|m| m.reads).sum();
    write(&mut h, 0, 512);
    let v = stats(&h).volume.counters;
    assert_eq!((v.parityless_writes, v.degraded_writes), (1, 1));
    assert_eq!(v.recovered_reads, 0);
    // With no parity to keep it reads nothing: not the old data either.
    // (Mutation testing let a parityless write read the old data for
    // nothing unseen.)
    let reads_after: u64 = stats(&h).members.iter().map(|m| m.reads).sum();
    assert_eq!(reads_after, reads_before);
}

#[test]
fn mirror_degraded_write_per_plex() {
    let c = config(Level::Mirror, 2, 2);
    let mut h = Harness::new(&c, 6);
    write(&mut h, 0, 3 * IL);
    let s = stats(&h);
    assert_eq!(s.plexes.len(), 2);
    for p in &s.plexes {
        assert_eq!((p.counters.writes, p.counters.bytes_written), (1, 3 * IL));
        assert_eq!(p.counters.degraded_writes, 0);
    }
    h.reassemble(&[1]);
    write(&mut h, IL, 1024);
    let s = stats(&h);
    assert_eq!(s.volume.counters.degraded_writes, 1);
    assert_eq!(s.plexes[0].counters.bytes_written, 1024);
    assert_eq!(s.plexes[0].counters.degraded_writes, 0);
    assert_eq!(s.plexes[1].counters.bytes_written, 0);
    assert_eq!(s.plexes[1].counters.degraded_writes, 1);
    // Nor a write (the counts started again with the reassembly):
    // mutation testing let a plex count a write of no bytes unseen.
    assert_eq!(s.plexes[1].counters.writes, 0);
    // Reads from the copy left are not recovered: nothing was rebuilt and
    // no copy failed.
    read(&mut h, 0, IL);
    let s = stats(&h);
    assert_eq!(s.volume.counters.recovered_reads, 0);
    assert_eq!(s.plexes[0].counters.bytes_read, IL);
}

#[test]
fn mirror_read_that_fails_over_is_recovered() {
    let c = config(Level::Mirror, 2, 2);
    let mut h = Harness::new(&c, 7);
    write(&mut h, 0, 4 * IL);
    // Reads alternate between the copies; with one member broken, some
    // read lands on it first and is served from the other.
    h.broken[1] = true;
    for i in 0..4 {
        read(&mut h, i * IL, IL);
    }
    let s = stats(&h);
    assert!(s.volume.counters.recovered_reads >= 1, "{s:?}");
    assert_eq!(s.volume.counters.reads, 4);
    assert!(s.members[1].errors >= 1);
    // Every byte was finally delivered by plex 0.
    assert_eq!(s.plexes[0].counters.bytes_read, 4 * IL);
    assert_eq!(s.plexes[1].counters.bytes_read, 0);
}

#[test]
fn raid10_plexes_are_copies() {
    for (members, copies) in [(4, 2), (3, 2), (5, 3)] {
        let c = config(Level::Raid10, members, copies);
        let mut h = Harness::new(&c, 8);
        let len = 5 * IL + 512;
        write(&mut h, 512, len);
        let s = stats(&h);
        assert_eq!(s.plexes.len(), copies as usize);
        for p in &s.plexes {
            assert_eq!(p.counters.bytes_written, len, "{c:?}");
        }
        // Each read is served by the copies it picked: the plexes' bytes
        // add up to the request's.
        for i in 0..6 {
            read(&mut h, i * 512, len);
        }
        let s = stats(&h);
        let total: u64 = s.plexes.iter().map(|p| p.counters.bytes_read).sum();
        assert_eq!(total, 6 * len, "{c:?}");
        assert_eq!(s.volume.counters.bytes_read, 6 * len);
    }
}

#[test]
fn member_counters_equal_what_members_received() {
    let configs = [
        config(Level::Stripe, 3, 1),
        config(Level::Concat, 3, 1),
        config(Level::Mirror, 3, 3),
        config(Level::Raid10, 5, 2),
        config(Level::Raid5, 4, 1),
        config(Level::Raid6, 6, 1),
    ];
    for (i, c) in configs.iter().enumerate() {
        let mut h = Harness::new(c, 100 + i as u64);
        let mut model = Model::new(&h.volume);
        random_workload(&mut h, &mut model, 200, 4);
        let s = stats(&h);
        for (m, got) in s.members.iter().enumerate() {
            let r = h.received[m];
            assert_eq!(
                (
                    got.reads,
                    got.bytes_read,
                    got.writes,
                    got.bytes_written,
                    got.trims,
                    got.bytes_trimmed,
                    got.flushes
                ),
                (
                    r.reads,
                    r.bytes_read,
                    r.writes,
                    r.bytes_written,
                    r.trims,
                    r.bytes_trimmed,
                    r.flushes
                ),
                "{c:?} member {m}"
            );
            assert_eq!(got.outstanding, 0);
        }
        assert_eq!(s.volume.outstanding, 0);
    }
}

#[test]
fn outstanding_gauges_and_reset() {
    let c = config(Level::Raid5, 4, 1);
    let mut h = Harness::new(&c, 9);
    let id = h.volume.submit(Request::Write {
        offset_bytes: 0,
        data: Bytes::from(vec![7u8; 1024]),
        fua: false,
    });
    let s = stats(&h);
    assert_eq!(s.volume.outstanding, 1);
    assert_eq!(s.plexes[0].outstanding, 1);
    let issued: u64 = s.members.iter().map(|m| m.outstanding).sum();
    assert!(issued >= 1);
    // Reset zeroes counters, not the gauges.
    h.volume.reset_stats();
    let r = stats(&h);
    assert_eq!(r.volume.outstanding, 1);
    assert!(r.members.iter().all(|m| m.reads == 0 && m.writes == 0));
    let done = h.run();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].id, id);
    let s = stats(&h);
    assert_eq!(s.volume.outstanding, 0);
    assert_eq!(s.volume.counters.writes, 1);
    h.volume.record_latency(LatencyOf::Write, 1000);
    h.volume.record_latency(LatencyOf::Member(2), 1000);
    h.volume.reset_stats();
    let z = stats(&h);
    assert_eq!(z.volume.counters, Counters::default());
    assert_eq!(z.volume.write_latency.count(), 0);
    assert_eq!(z.members[2].latency.count(), 0);
    assert_eq!(z, Stats::new(1, 4));
}

#[test]
fn errors_are_counted_apart() {
    let c = config(Level::Stripe, 2, 1);
    let mut h = Harness::new(&c, 10);
    let size = h.volume.size_bytes();
    assert!(h.read(size, 512).is_err());
    h.broken[0] = true;
    assert!(h.read(0, 512).is_err());
    let v = stats(&h).volume;
    assert_eq!(v.errors, 2);
    assert_eq!(v.counters.reads, 0);
}

#[test]
fn trims_and_flushes() {
    let c = config(Level::Mirror, 2, 2);
    let mut h = Harness::new(&c, 11);
    h.one(Request::Trim {
        offset_bytes: 0,
        len_bytes: 2 * IL,
    })
    .unwrap();
    h.one(Request::Flush).unwrap();
    let v = stats(&h).volume;
    assert_eq!((v.trims, v.bytes_trimmed, v.flushes), (1, 2 * IL, 1));
    assert_eq!((v.counters.writes, v.counters.reads), (0, 0));
    assert_eq!(stats(&h).members[0].flushes, 1);
}

#[test]
fn histogram_percentiles_on_known_inputs() {
    let mut h = Histogram::default();
    assert_eq!((h.p50(), h.p99(), h.max()), (0, 0, 0));
    // 98 fast samples of 1000 ns (bucket (512, 1024]) and 2 slow ones.
    for _ in 0..98 {
        h.record(1000);
    }
    h.record(600_000);
    h.record(700_000);
    assert_eq!(h.count(), 100);
    assert_eq!(h.max(), 700_000);
    // The bucket's upper bound: within a factor of two, never below.
    assert_eq!(h.p50(), 1024);
    assert_eq!(h.percentile(0.98), 1024);
    // Rank 99 is in the slow bucket (524288, 1048576], capped by the max.
    assert_eq!(h.p99(), 700_000);
    assert_eq!(h.sum(), 98 * 1000 + 1_300_000);

    // Exact powers of two are their own bucket's bound.
    let mut e = Histogram::default();
    for v in [4096u64; 10] {
        e.record(v);
    }
    assert_eq!((e.p50(), e.p99(), e.max()), (4096, 4096, 4096));

    // Merge adds; reset empties.
    let mut m = h.clone();
    m.merge(&e);
    assert_eq!(m.count(), 110);
    assert_eq!(m.max(), 700_000);
    assert_eq!(m.p50(), 1024);
    m.reset();
    assert_eq!(m, Histogram::default());

    // A hundred evenly spread values: p50 within 2x of the true 50th.
    let mut u = Histogram::default();
    for v in 1..=100u64 {
        u.record(v * 1000);
    }
    assert_eq!(u.p50(), 65_536); // 50_000 lies in (32768, 65536]
    assert_eq!(u.p99(), 100_000); // capped at the max
    assert!(u.p50() >= 50_000 && u.p50() < 100_000);
}

#[test]
fn latencies_recorded_by_the_driver() {
    let c = config(Level::Stripe, 2, 1);
    let mut v = Volume::new(
        c.geometry(),
        vec![platter_core::volume::Health::Online; 2],
        Default::default(),
    );
    for ns in [100, 200, 300] {
        v.record_latency(LatencyOf::Read, ns);
    }
    v.record_latency(LatencyOf::Other, 5);
    v.record_latency(LatencyOf::Member(1), 77);
    // A member the volume does not have is ignored.
    v.record_latency(LatencyOf::Member(9), 1);
    let s = v.stats();
    assert_eq!(s.volume.read_latency.count(), 3);
    assert_eq!(s.volume.read_latency.max(), 300);
    assert_eq!(s.volume.read_latency.p50(), 256);
    assert_eq!(s.volume.other_latency.count(), 1);
    assert_eq!(s.volume.write_latency.count(), 0);
    assert_eq!(s.members[1].latency.max(), 77);
    assert_eq!(s.members[0].latency.count(), 0);
    assert_eq!(
        Request::Flush.latency_of(),
        Some(LatencyOf::Other),
        "flushes go with trims"
    );
}

#[test]
fn stats_serialize_and_parse_back() {
    let c = config(Level::Raid10, 4, 2);
    let mut h = Harness::new(&c, 12);
    write(&mut h, 0, 3 * IL);
    read(&mut h, 512, IL);
    h.volume.record_latency(LatencyOf::Read, 12_345);
    let s = stats(&h);
    let text = serde_json::to_string(&s).unwrap();
    assert!(text.contains("\"multiblock\":"), "{text}");
    assert!(text.contains("\"p99\":12345"), "{text}");
    let back: Stats = serde_json::from_str(&text).unwrap();
    assert_eq!(back, s);
}

#[test]
fn mirror_outstanding_per_plex() {
    let c = config(Level::Mirror, 2, 2);
    let mut h = Harness::new(&c, 13);
    // A write goes to both plexes; a read to the one copy it picked.
    h.volume.submit(Request::Write {
        offset_bytes: 0,
        data: Bytes::from(vec![1u8; 512]),
        fua: false,
    });
    h.volume.submit(Request::Read {
        offset_bytes: 4 * IL,
        len_bytes: 512,
    });
    let s = stats(&h);
    assert_eq!(s.volume.outstanding, 2);
    let per_plex: Vec<u64> = s.plexes.iter().map(|p| p.outstanding).collect();
    assert_eq!(per_plex.iter().sum::<u64>(), 3, "{per_plex:?}");
    assert!(per_plex.iter().all(|&n| n >= 1), "{per_plex:?}");
    assert_eq!(h.run().len(), 2);
    assert!(stats(&h).plexes.iter().all(|p| p.outstanding == 0));

    // A lone read on three copies is outstanding on exactly one plex. (With
    // two, counting it on the plexes it does *not* read (a mutant) also
    // gives one plex 1 and the other 0.)
    let c = config(Level::Mirror, 3, 3);
    let mut h = Harness::new(&c, 14);
    h.volume.submit(Request::Read {
        offset_bytes: 4 * IL,
        len_bytes: 512,
    });
    let per_plex: Vec<u64> = stats(&h).plexes.iter().map(|p| p.outstanding).collect();
    assert_eq!(per_plex.iter().sum::<u64>(), 1, "{per_plex:?}");
    assert_eq!(h.run().len(), 1);
}

/// Per-plex read bytes go to the copy that served them. Every earlier test
/// read either from both copies (checking only the sum) or from plex 0
/// alone, so attributing every byte to plex 0 (a mutant of `plex_of`)
/// passed them all: here only the later copies can serve.
#[test]
fn reads_count_on_the_plex_of_the_copy_that_served_them() {
    // Mirror, 3 copies, the first two broken: plex 2 serves everything.
    let c = config(Level::Mirror, 3, 3);
    let mut h = Harness::new(&c, 9);
    write(&mut h, 0, 4 * IL);
    h.broken[0] = true;
    h.broken[1] = true;
    for i in 0..4 {
        read(&mut h, i * IL, IL);
    }
    let per_plex: Vec<u64> = stats(&h)
        .plexes
        .iter()
        .map(|p| p.counters.bytes_read)
        .collect();
    assert_eq!(per_plex, vec![0, 0, 4 * IL]);

    // RAID-10, 3 members, 2 copies (md's near layout: copy j of chunk c
    // is slot 2c + j, slot s is row s / 3 of member s % 3). With member 0
    // broken, chunk 0 (slots 0, 1: members 0, 1) is served by its copy 1,
    // chunk 1 (slots 2, 3: member 2 row 0, member 0 row 1) by its copy 0,
    // and chunk 3 (slots 6, 7: member 0 row 2, member 1 row 2) by copy 1.
    let c = config(Level::Raid10, 3, 2);
    let mut h = Harness::new(&c, 10);
    write(&mut h, 0, 4 * IL);
    h.broken[0] = true;
    let mut want = [0u64; 2];
    for (chunk, copy) in [(0u64, 1usize), (1, 0), (3, 1)] {
        read(&mut h, chunk * IL, IL);
        want[copy] += IL;
        let per_plex: Vec<u64> = stats(&h)
            .plexes
            .iter()
            .map(|p| p.counters.bytes_read)
            .collect();
        assert_eq!(per_plex, want, "after chunk {chunk}");
    }
}

/// On a one-plex level every read byte is that plex's: no test read from
/// one (so a mutant taking the copy levels' per-plex plan for every level
/// left plex 0 at zero unseen).
#[test]
fn a_single_plex_counts_every_read_byte() {
    for level in [Level::Stripe, Level::Raid5] {
        let mut h = Harness::new(&config(level, 4, 1), 15);
        write(&mut h, 0, 3 * IL);
        read(&mut h, 512, 2 * IL);
        let s = stats(&h);
        assert_eq!(s.plexes.len(), 1);
        assert_eq!(s.plexes[0].counters.bytes_read, 2 * IL, "{level:?}");
        assert_eq!(s.plexes[0].counters, s.volume.counters, "{level:?}");
    }
}

/// A write over two stripes is degraded when the lost member holds a chunk
/// it writes in the second stripe, though not in the first. Mutation
/// testing let `write_reach` keep the first stripe's roles for the second
/// (`!=` → `==` in its cache of them) unseen. Right-symmetric RAID-5 of 4
/// with member 2 lost: stripe 0's data is on members 1, 2, 3 (the write
/// takes chunk 2, on member 3); stripe 1's on 2, 3, 0 (the write takes
/// chunk 0, on member 2).
#[test]
fn a_write_is_degraded_by_its_second_stripes_roles() {
    let c = Config {
        layout: ParityLayout::RightSymmetric,
        ..config(Level::Raid5, 4, 1)
    };
    let mut h = Harness::new(&c, 7);
    h.reassemble(&[2]);
    let g = h.volume.geometry().clone();
    assert_eq!(g.parity_roles(0).unwrap().data, [1, 2, 3]);
    assert_eq!(g.parity_roles(1).unwrap().data, [2, 3, 0]);
    write(&mut h, 2 * IL, 2 * IL);
    assert_eq!(stats(&h).volume.counters.degraded_writes, 1);
}
