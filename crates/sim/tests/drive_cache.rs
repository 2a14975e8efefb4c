//! The drive model's cache follows DiskSim 4.0's segment rules. Each test
//! opens with the validation drive whose per-request times (DiskSim's
//! "Detailed execution trace" beside `platter sim validate --requests`)
//! showed the rule missing; they run on the parametric drive, so they need
//! none of DiskSim's data.
//!
//! Parametric geometry: 400 sectors per track in the outer zone, so track
//! 0 holds LBNs 0..400 and track 1 (the next head) 400..800.

mod common;

use common::{read, serve};
use platter_sim::disk::drive::{Command, Drive, DriveSpec, Hit, Kind, ReadAhead};
use platter_sim::disk::parametric::Parametric;

fn spec(read_ahead: ReadAhead, segment_blocks: u32, max_read_ahead: u32) -> DriveSpec {
    let mut s = Parametric::drive_7200().spec();
    s.cache.read_ahead = read_ahead;
    s.cache.segment_blocks = segment_blocks;
    s.cache.max_read_ahead = max_read_ahead;
    assert_eq!(
        s.layout.zones[0].blocks_per_track, 400,
        "the geometry above"
    );
    s
}

/// cheetah9LP, request 5834: a read starting where a segment's read-ahead
/// had stopped (LBN 1914120, the first of a track) continued that segment,
/// so the DEC scheme, seeing the segment begin on an earlier track, read
/// one track more, and a read 276 sectors on was a hit (0.49 ms) where
/// DiskSim misses (2.16 ms). In DiskSim a miss takes a free segment and
/// restarts it at the request (`disk_buffer_select_read_segment` ranks a
/// segment that merely ends there as any clean one).
#[test]
fn a_miss_where_a_segment_ends_restarts_a_segment() {
    let mut d = Drive::new(spec(ReadAhead::NextTrack, 512, 0));
    reads_after_idle(
        &mut d,
        &[
            // To track 0's end: the segment holds 360..400.
            (360, 4, Hit::Miss, "first read"),
            (396, 4, Hit::Whole, "read-ahead to the track's end"),
            // Starts where the segment ends: a miss, read-ahead to track
            // 1's end only (the restarted segment begins on track 1).
            (400, 4, Hit::Miss, "restarts a segment"),
            (796, 4, Hit::Whole, "read-ahead to track 1's end"),
            (800, 4, Hit::Miss, "no second track read ahead"),
        ],
    );
}

/// Serves each `(lbn, sectors, hit, why)` read 50 ms after the last one
/// completed (read-ahead long done) and checks how it met the cache.
fn reads_after_idle(d: &mut Drive, reads: &[(u64, u32, Hit, &str)]) {
    let mut t = -50.0;
    for (i, &(lbn, count, expect, why)) in reads.iter().enumerate() {
        let (done, h) = serve(d, t + 50.0, read(i as u64, lbn, count));
        assert_eq!(h, expect, "read {i} of {lbn}+{count}: {why}");
        t = done;
    }
}

/// atlas10k, request 6698: a partial hit (LBN 4397952+4, two sectors
/// cached) took the least recently used segment for its media read, so the
/// segment holding its start kept its old data and a re-read of that data
/// hit (0.98 ms); in DiskSim the partial hit reads into the segment that
/// holds its start, whose read-ahead then scrolls the old data out, and
/// the re-read misses (1.93 ms).
#[test]
fn a_partial_hit_reads_into_the_segment_holding_its_start() {
    let mut d = Drive::new(spec(ReadAhead::SegmentEnd, 64, 32));
    reads_after_idle(
        &mut d,
        &[
            (1000, 16, Hit::Miss, "read-ahead to 1048"),
            // 1040..1048 cached, 1048..1056 from the media; read-ahead to
            // 1088 in the same 64-block segment leaves 1024..1088.
            (1040, 16, Hit::Partial, "two thirds cached"),
            (1080, 8, Hit::Whole, "read ahead after the partial hit"),
            (1000, 8, Hit::Miss, "scrolled out of the segment"),
        ],
    );
}

/// dec_rz26, request 2110: a read arriving 3 ms after the last, while its
/// read-ahead was still finishing the track, had its first 19 sectors
/// cached and 8 on the next track. The media read of those 8 waited for
/// the command overhead (1.49 ms), by when the next track's sectors had
/// passed: a revolution lost (14.9 ms; DiskSim 3.7 ms). In DiskSim the
/// running access goes on to the next track at once
/// (`disk_buffer_sector_done` seeks to it with no delay).
#[test]
fn a_partial_hit_on_running_read_ahead_goes_on_to_the_next_track() {
    let mut s = spec(ReadAhead::TrackEnd, 512, 0);
    s.overheads.read_miss_after_read = 2.0;
    s.overheads.read_hit_after_read = 1.5;
    let period = s.period_ms();
    let mut d = Drive::new(s);
    // 300..340, read-ahead to the track's end (60 sectors, 1.25 ms).
    let (t, h) = serve(&mut d, 0.0, read(0, 300, 40));
    assert_eq!(h, Hit::Miss);
    // Arrives at once: 340..400 are being read ahead, 400..440 follow
    // after a head switch (0.8 ms, which the track skew covers).
    let (done, h) = serve(&mut d, t, read(1, 340, 100));
    assert_eq!(h, Hit::Partial);
    let took = done - t;
    assert!(
        took < 1.5 + 0.5 * period,
        "{took:.3} ms: a revolution ({period:.3} ms) lost at the track switch"
    );
}

/// A calibrated model of the parametric drive (8 segments of 513 sectors,
/// 512 read ahead) missed on a re-read of the sectors it had just read
/// while its read-ahead ran: read-ahead moved its segment's start to where
/// it would be when done as soon as it began, dropping the request's own
/// sectors at once. DiskSim drops the oldest sectors one by one as new
/// ones come in (`disk_buffer_segment_wrap`). Probed in DiskSim 4.0 with
/// the barracuda (a miss; 0.5 ms later a read of sectors read-ahead has
/// brought in; the first read again 0.1 ms later): a hit, 1.154 ms; after
/// 100 ms instead, a miss.
#[test]
fn read_ahead_scrolls_its_segment_as_it_reads() {
    let mut s = Parametric::drive_7200().spec();
    s.cache.segment_blocks = 513;
    s.cache.max_read_ahead = 512;
    let first_again = |wait_ms: f64| {
        let mut d = Drive::new(s.clone());
        let (t, h) = serve(&mut d, 0.0, read(0, 1000, 8));
        assert_eq!(h, Hit::Miss);
        // Rides the read-ahead (1008.. are in), which goes on to 1018 + 512.
        let (t, h) = serve(&mut d, t + 0.5, read(1, 1010, 8));
        assert_eq!(h, Hit::Whole);
        serve(&mut d, t + wait_ms, read(2, 1000, 8)).1
    };
    assert_eq!(
        first_again(0.1),
        Hit::Whole,
        "a few sectors on, none dropped"
    );
    assert_eq!(
        first_again(100.0),
        Hit::Miss,
        "513 sectors on: scrolled out"
    );
}

/// hp_c3323a, request 208: a read of sectors just written (538187+5 after
/// a write of 538187+11) was a hit here (2.4 ms) and a miss in DiskSim
/// (7.0 ms): the drive has a separate write segment, and DiskSim never
/// gives a read the data in it, only checks it for collisions.
#[test]
fn reads_do_not_hit_the_separate_write_segment() {
    for separate in [false, true] {
        let mut s = spec(ReadAhead::SegmentEnd, 512, 64);
        s.cache.segments = 2;
        s.cache.separate_write_segment = separate;
        let mut d = Drive::new(s);
        let w = Command {
            token: 0,
            kind: Kind::Write,
            lbn: 5000,
            count: 11,
        };
        let (t, _) = serve(&mut d, 0.0, w);
        let (_, h) = serve(&mut d, t + 10.0, read(1, 5000, 5));
        let expect = if separate { Hit::Miss } else { Hit::Whole };
        assert_eq!(h, expect, "separate write segment: {separate}");
    }
}
