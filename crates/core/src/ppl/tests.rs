use super::*;
use crate::geometry::{Geometry, GeometrySpec};
use crate::{Level, ParityLayout};

const UUID: [u8; 16] = [7; 16];
const CHUNK: u64 = 4096;

fn geometry(level: Level, members: u32) -> Geometry {
    Geometry::new(GeometrySpec {
        level,
        parity_layout: ParityLayout::LeftSymmetric,
        copies: 1,
        interleave_bytes: CHUNK,
        data_offset_bytes: 0,
        member_data_bytes: vec![16 * CHUNK; members as usize],
    })
    .expect("valid geometry")
}

fn record(seq: u64, pieces: Vec<Piece>, pq: bool) -> Record {
    Record {
        seq,
        stripes: vec![3],
        lo_bytes: 512,
        hi_bytes: 2048,
        pieces,
        pp: Some(Bytes::from(vec![0xA5; 1536])),
        pq: pq.then(|| Bytes::from(vec![0x5A; 1536])),
        whole: false,
    }
}

#[test]
fn a_record_reads_back_as_written_and_a_torn_one_not_at_all() {
    let r = record(
        9,
        vec![Piece {
            data_index: 1,
            within_bytes: 1024,
            len_bytes: 512,
        }],
        true,
    );
    let bytes = r.encode(&UUID);
    assert_eq!(bytes.len() as u64, r.encoded_bytes());
    let mut area = vec![0u8; 4 * 4096];
    area[4096..4096 + bytes.len()].copy_from_slice(&bytes);
    assert_eq!(parse_area(&area, &UUID, CHUNK), vec![r.clone()]);
    // Another volume's record is not ours.
    assert!(parse_area(&area, &[8; 16], CHUNK).is_empty());
    // A payload that did not land whole: the record is passed over.
    let mut torn = area.clone();
    torn[2 * 4096 + 100] ^= 1;
    assert!(parse_area(&torn, &UUID, CHUNK).is_empty());
    // A header flipped: likewise.
    let mut torn = area;
    torn[4096 + at::STRIPE] ^= 1;
    assert!(parse_area(&torn, &UUID, CHUNK).is_empty());
}

/// A record of the volume passed over is named with where it lies (a
/// start logs it); zeros, another volume's records and intact records are
/// not. Records with a bad checksum were once skipped with no word.
#[test]
fn damaged_records_of_the_volume_are_named_by_their_offset() {
    let r = record(4, vec![], false);
    let bytes = r.encode(&UUID);
    let mut area = vec![0u8; 8 * 4096];
    area[4096..4096 + bytes.len()].copy_from_slice(&bytes);
    area[5 * 4096..5 * 4096 + bytes.len()].copy_from_slice(&bytes);
    let clean = parse_area_checked(&area, &UUID, CHUNK);
    assert_eq!(clean.records.len(), 2);
    assert!(clean.damaged_at_bytes.is_empty(), "{clean:?}");
    // The second's payload torn, the first's header.
    area[5 * 4096 + 4096 + 10] ^= 1;
    area[4096 + at::SEQ] ^= 1;
    let got = parse_area_checked(&area, &UUID, CHUNK);
    assert!(got.records.is_empty());
    assert_eq!(got.damaged_at_bytes, vec![4096, 5 * 4096]);
    // Another volume's damaged record is none of ours to name.
    assert!(parse_area_checked(&area, &[8; 16], CHUNK)
        .damaged_at_bytes
        .is_empty());
}

#[test]
fn rows_past_the_chunk_are_damage_not_a_record() {
    let mut r = record(1, vec![], false);
    r.hi_bytes = CHUNK + 512;
    r.pp = Some(Bytes::from(vec![0; (r.hi_bytes - r.lo_bytes) as usize]));
    let bytes = r.encode(&UUID);
    assert!(parse_area(&bytes, &UUID, CHUNK).is_empty());
}

/// Members as byte vectors, data as the stripe's chunks; parity kept
/// right by the test, then broken the way a crash breaks it.
struct Stripe {
    g: Geometry,
    members: Vec<Vec<u8>>,
}

impl Stripe {
    fn new(level: Level, n: u32) -> Stripe {
        let g = geometry(level, n);
        let mut s = Stripe {
            members: vec![vec![0; (16 * CHUNK) as usize]; n as usize],
            g,
        };
        let k = s.g.data_per_stripe();
        for d in 0..k {
            let m = s.roles().data[d as usize] as usize;
            let at = s.at(0) as usize;
            for (i, b) in s.members[m][at..at + CHUNK as usize].iter_mut().enumerate() {
                *b = (i as u8).wrapping_mul(d as u8 + 3).wrapping_add(d as u8);
            }
        }
        s.fix_parity();
        s
    }

    fn roles(&self) -> crate::geometry::StripeRoles {
        self.g.parity_roles(3).unwrap()
    }

    fn at(&self, within: u64) -> u64 {
        self.g.member_offset_bytes(3, within)
    }

    fn chunk(&self, m: u32) -> Vec<u8> {
        let at = self.at(0) as usize;
        self.members[m as usize][at..at + CHUNK as usize].to_vec()
    }

    fn parity(&self) -> (Vec<u8>, Vec<u8>) {
        let roles = self.roles();
        let k = roles.data.len();
        let mut data = vec![Vec::new(); k];
        for (d, &m) in roles.data.iter().enumerate() {
            data[roles.q_slot[d] as usize] = self.chunk(m);
        }
        let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        let (mut p, mut q) = (vec![0; CHUNK as usize], vec![0; CHUNK as usize]);
        platter_parity::gen_pq(&refs, &mut p, &mut q);
        (p, q)
    }

    fn fix_parity(&mut self) {
        let (p, q) = self.parity();
        let roles = self.roles();
        let at = self.at(0) as usize;
        self.members[roles.p as usize][at..at + CHUNK as usize].copy_from_slice(&p);
        if let Some(qm) = roles.q {
            self.members[qm as usize][at..at + CHUNK as usize].copy_from_slice(&q);
        }
    }

    /// The record a write of `pieces` logs over rows `[lo, hi)`: partial
    /// parity of every cell there it does not modify.
    fn record_for(&self, lo: u64, hi: u64, pieces: Vec<Piece>) -> Record {
        let roles = self.roles();
        let k = roles.data.len();
        let len = (hi - lo) as usize;
        let mut data = vec![vec![0u8; len]; k];
        for (dd, &m) in roles.data.iter().enumerate() {
            let at = self.at(lo) as usize;
            let cells = &mut data[roles.q_slot[dd] as usize];
            cells.copy_from_slice(&self.members[m as usize][at..at + len]);
            for p in pieces.iter().filter(|p| p.data_index as usize == dd) {
                let a = (p.within_bytes - lo) as usize;
                cells[a..a + p.len_bytes as usize].fill(0);
            }
        }
        let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        let (mut p, mut q) = (vec![0; len], vec![0; len]);
        platter_parity::gen_pq(&refs, &mut p, &mut q);
        Record {
            seq: 1,
            stripes: vec![3],
            lo_bytes: lo,
            hi_bytes: hi,
            pieces,
            pp: Some(p.into()),
            pq: roles.q.map(|_| q.into()),
            whole: false,
        }
    }

    fn one(d: u32, w: u64, len: u64) -> Piece {
        Piece {
            data_index: d,
            within_bytes: w,
            len_bytes: len,
        }
    }

    fn recover(&mut self, present: &[bool], records: Vec<Record>) -> Recovered {
        let members = self.members.clone();
        let out = recover(&self.g, present, records, &mut |m, at, len| {
            Ok(members[m as usize][at as usize..(at + len) as usize].to_vec())
        })
        .expect("recovers");
        // Every parity write has bytes, and no two overlap.
        let mut spans: Vec<(u32, usize, usize)> = out
            .fixes
            .iter()
            .map(|f| (f.member, f.offset_bytes as usize, f.data.len()))
            .collect();
        spans.sort_unstable();
        for w in spans.windows(2) {
            assert!(
                w[0].0 != w[1].0 || w[0].1 + w[0].2 <= w[1].1,
                "fixes overlap: {w:?}"
            );
        }
        assert!(spans.iter().all(|s| s.2 > 0), "an empty fix: {spans:?}");
        for f in &out.fixes {
            let at = f.offset_bytes as usize;
            self.members[f.member as usize][at..at + f.data.len()].copy_from_slice(&f.data);
        }
        out
    }
}

/// The write hole itself: the data landed, the parity did not. With the
/// record applied the parity agrees again, so the chunk nobody wrote
/// rebuilds right; without it, it would rebuild wrong (asserted, so the
/// test can fail).
#[test]
fn a_record_makes_parity_agree_with_the_data_that_landed() {
    for (level, n) in [(Level::Raid5, 4), (Level::Raid6, 5)] {
        let mut s = Stripe::new(level, n);
        let (good_p, _) = s.parity();
        let rec = s.record_for(1024, 2048, vec![Stripe::one(0, 1024, 1024)]);
        let m0 = s.roles().data[0] as usize;
        let at = s.at(1024) as usize;
        s.members[m0][at..at + 1024].fill(0xEE);
        let (p_now, q_now) = s.parity();
        assert_ne!(p_now, good_p, "the write changed the data");
        let roles = s.roles();
        let pm = roles.p as usize;
        let at0 = s.at(0) as usize;
        assert_ne!(
            s.members[pm][at0..at0 + CHUNK as usize],
            p_now[..],
            "parity is stale"
        );
        let out = s.recover(&vec![true; n as usize], vec![rec.clone(), rec]);
        assert_eq!(out.records, 1, "the copies of a record count once");
        assert_eq!(
            s.members[pm][at0..at0 + CHUNK as usize],
            p_now[..],
            "{level:?} P"
        );
        if let Some(qm) = roles.q {
            assert_eq!(
                s.members[qm as usize][at0..at0 + CHUNK as usize],
                q_now[..],
                "Q"
            );
        }
    }
}

/// A member gone that the write modified: its rows keep their parity (the
/// cells being written are lost either way); the rows it did not modify
/// are still made right.
#[test]
fn rows_of_a_modified_member_that_is_gone_are_left_alone() {
    let mut s = Stripe::new(Level::Raid5, 4);
    let roles = s.roles();
    // Data 1 written in rows [0, 1024), data 0 in [1024, 2048).
    let rec = s.record_for(
        0,
        2048,
        vec![Stripe::one(0, 1024, 1024), Stripe::one(1, 0, 1024)],
    );
    let (m0, m1) = (roles.data[0] as usize, roles.data[1] as usize);
    let pm = roles.p as usize;
    let at0 = s.at(0) as usize;
    let at1 = s.at(1024) as usize;
    let before = s.members[pm][at0..at0 + CHUNK as usize].to_vec();
    let unwritten = s.members[m1][at1..at1 + 1024].to_vec();
    // The crash: both data cells landed, the parity did not; then data 1's
    // member is gone.
    s.members[m0][at1..at1 + 1024].fill(0x11);
    s.members[m1][at0..at0 + 1024].fill(0x22);
    let mut present = vec![true; 4];
    present[m1] = false;
    let out = s.recover(&present, vec![rec]);
    assert_eq!(out.rows_skipped_bytes, 1024);
    assert_eq!(
        s.members[pm][at0..at0 + 1024],
        before[..1024],
        "rows of the gone cell kept"
    );
    // Rows [1024, 2048): P agrees with what landed, so the gone member's
    // cells there, which nobody wrote, rebuild as they were.
    let mut rebuilt = s.members[pm][at1..at1 + 1024].to_vec();
    for &d in &[roles.data[0], roles.data[2]] {
        platter_parity::xor_into(&mut rebuilt, &s.members[d as usize][at1..at1 + 1024]);
    }
    assert_eq!(
        rebuilt, unwritten,
        "the gone member's unwritten cells rebuild right"
    );
    // Without the record they would not have.
    let mut stale = before[1024..2048].to_vec();
    for &d in &[roles.data[0], roles.data[2]] {
        platter_parity::xor_into(&mut stale, &s.members[d as usize][at1..at1 + 1024]);
    }
    assert_ne!(stale, unwritten);
}

#[test]
fn a_record_past_the_volume_is_an_error_not_a_write() {
    let mut s = Stripe::new(Level::Raid5, 4);
    let mut rec = s.record_for(0, 512, vec![Stripe::one(0, 0, 512)]);
    rec.stripes = vec![1 << 40];
    let members = s.members.clone();
    let err = recover(&s.g, &[true; 4], vec![rec], &mut |m, at, len| {
        Ok(members[m as usize][at as usize..(at + len) as usize].to_vec())
    })
    .unwrap_err();
    assert!(err.contains("past the volume"), "{err}");
    s.members.clear();
}

/// Regression (seed 21 of the write-hole seeds, RAID-6): an old record of
/// a stripe and a newer one over the same rows, the newer one modifying
/// the member that was then lost. Recovery skipped the newer record's rows
/// (its modified cell was gone) and so applied the old record there, whose
/// partial parity predated the newer write: the parity came out wrong and
/// the lost member rebuilt 25,212 bytes nobody was writing wrong. The
/// newest record covering a row now decides it, applied or not.
#[test]
fn a_newer_record_that_cannot_be_applied_still_overrules_an_older_one() {
    let mut s = Stripe::new(Level::Raid5, 4);
    let roles = s.roles();
    let (m0, m1) = (roles.data[0] as usize, roles.data[1] as usize);
    let pm = roles.p as usize;
    let at0 = s.at(0) as usize;
    // The old write to data 0, landed and made durable with its parity.
    let mut old = s.record_for(0, 1024, vec![Stripe::one(0, 0, 1024)]);
    old.seq = 1;
    s.members[m0][at0..at0 + 1024].fill(0x33);
    s.fix_parity();
    // The newer write to data 1 over the same rows, also complete.
    let mut new = s.record_for(0, 1024, vec![Stripe::one(1, 0, 1024)]);
    new.seq = 2;
    s.members[m1][at0..at0 + 1024].fill(0x44);
    s.fix_parity();
    let before = s.members[pm][at0..at0 + 1024].to_vec();
    let mut present = vec![true; 4];
    present[m1] = false;
    let out = s.recover(&present, vec![old, new]);
    assert_eq!(out.records, 2);
    assert_eq!(
        s.members[pm][at0..at0 + 1024],
        before[..],
        "the parity, right already, is left alone"
    );
}

#[test]
fn a_whole_record_lists_its_stripes_and_reads_back() {
    let r = Record {
        seq: 4,
        stripes: vec![2, 5, 9],
        lo_bytes: 0,
        hi_bytes: CHUNK,
        pieces: (0..3).map(|d| Stripe::one(d, 0, CHUNK)).collect(),
        pp: None,
        pq: None,
        whole: true,
    };
    let bytes = r.encode(&UUID);
    assert_eq!(bytes.len(), 4096, "a whole record is its header");
    assert_eq!(parse_area(&bytes, &UUID, CHUNK), vec![r]);
}

/// Rows off the chunk's start (`lo` > 0), as most records have: a whole
/// record's parity is made over exactly its rows, and the bytes left to a
/// lost member are counted over exactly the rows a newer record did not
/// decide. (Mutants that took `hi + lo` for the rows, or `b + a` for a
/// span's length, went unseen while every test's rows began at 0.)
#[test]
fn rows_off_the_chunk_start_are_made_and_counted_exactly() {
    let whole = |s: &Stripe| Record {
        seq: 2,
        stripes: vec![3],
        lo_bytes: 512,
        hi_bytes: 1536,
        pieces: (0..3).map(|d| Stripe::one(d, 512, 1024)).collect(),
        pp: None,
        pq: None,
        whole: s.roles().data.len() == 3,
    };
    // Every member there: the whole write of rows [512, 1536) landed on
    // the data and not on P or Q; both are made over exactly those rows.
    let mut s = Stripe::new(Level::Raid6, 5);
    let roles = s.roles();
    let at = s.at(512) as usize;
    for &m in &roles.data {
        s.members[m as usize][at..at + 1024].fill(0x3C);
    }
    let (p, q) = s.parity();
    let before_p = s.members[roles.p as usize].clone();
    let w = whole(&s);
    let out = s.recover(&[true; 5], vec![w]);
    assert_eq!(out.rows_skipped_bytes, 0);
    let (pm, qm) = (roles.p as usize, roles.q.unwrap() as usize);
    assert_eq!(
        s.members[pm][at..at + 1024],
        p[512..1536],
        "P over the rows"
    );
    assert_eq!(
        s.members[qm][at..at + 1024],
        q[512..1536],
        "Q over the rows"
    );
    let at0 = s.at(0) as usize;
    assert_eq!(
        s.members[pm][at0..at0 + 512],
        before_p[at0..at0 + 512],
        "rows before kept"
    );
    // Data 1's member gone. The newer whole record decides [512, 1536) and
    // is skipped there (data 1 modified): 1024 bytes. The older record over
    // [512, 2560) is left [1536, 2560), of which data 1's modified cell
    // [1536, 2048) is skipped: 512 bytes more.
    let mut s = Stripe::new(Level::Raid6, 5);
    let m1 = s.roles().data[1] as usize;
    let mut older = s.record_for(
        512,
        2560,
        vec![Stripe::one(0, 512, 1024), Stripe::one(1, 1536, 512)],
    );
    older.seq = 1;
    let mut present = vec![true; 5];
    present[m1] = false;
    let w = whole(&s);
    let out = s.recover(&present, vec![older, w]);
    assert_eq!(out.records, 2);
    assert_eq!(out.rows_skipped_bytes, 1024 + 512);
}

proptest::proptest! {
    /// A log area with a record in it, then bytes changed anywhere: parsing
    /// never panics, and every record it still accepts is one the engine
    /// could have written (it encodes back to the same record). The
    /// `ppl_parse` fuzz target does the same over arbitrary bytes.
    #[test]
    fn a_damaged_log_area_parses_without_panic_to_records_the_engine_writes(
        flips in proptest::collection::vec((0usize..3 * 4096, proptest::num::u8::ANY), 0..8),
        lo_sectors in 0u64..7,
        len_sectors in 1u64..2,
    ) {
        let lo = lo_sectors * 512;
        let hi = lo + len_sectors * 512;
        let r = Record {
            seq: 5,
            stripes: vec![1],
            lo_bytes: lo,
            hi_bytes: hi,
            pieces: vec![Stripe::one(1, lo, hi - lo)],
            pp: Some(Bytes::from(vec![0x42; (hi - lo) as usize])),
            pq: None,
            whole: false,
        };
        let mut area = vec![0u8; 3 * 4096];
        let bytes = r.encode(&UUID);
        area[..bytes.len()].copy_from_slice(&bytes);
        for (at, x) in flips {
            area[at] ^= x;
        }
        for got in parse_area(&area, &UUID, CHUNK) {
            proptest::prop_assert_eq!(parse_area(&got.encode(&UUID), &UUID, CHUNK), vec![got]);
        }
    }
}
