//! Per-block checksums (`platter create --checksums`) in the engine: a
//! member whose data area was silently replaced is caught on the read that
//! would have returned its bytes, the read is served from the other copy or
//! from parity, and the bad blocks are rewritten; a scrub repairs what reads
//! did not touch; a crash leaves no read failing its checksums.
//!
//! Issue 15's outside test found the story these guard against: a raid6
//! member zeroed behind the server's back was assembled as clean and every
//! chunk of it came back wrong; on a two-copy raid10, 819 of 1,008 chunks.

use bytes::Bytes;
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::integrity::{Algorithm, Layout, Limits as ChecksumLimits, PageFormat};
use platter_core::intent::{IntentLayout, RegionSet};
use platter_core::volume::{
    CheckReport, Health, Limits, Maintenance, MemberIo, MemberOp, Reply, Request, Volume,
};
use platter_core::{Level, ParityLayout};
use platter_testkit::Rng;

const INTERLEAVE: u64 = 4096;
// 1 MiB per member: two checksum pages each.
const ROWS: u64 = 256;
const AREA_OFFSET: u64 = 16 << 10;
const DATA_OFFSET: u64 = 64 << 10;

struct Rig {
    v: Volume,
    members: Vec<Vec<u8>>,
    rng: Rng,
    pool: Vec<MemberIo>,
    /// Writes performed since each member's last flush: (offset, bytes it
    /// replaced), so a crash can undo any of them.
    unflushed: Vec<Vec<(u64, Vec<u8>)>>,
    /// Reads of each member's data area so far.
    data_reads: Vec<u64>,
    /// Every member read so far: (member, offset, length).
    read_log: Vec<(u32, u64, u64)>,
    /// Checksum pages cached per member.
    page_limit: usize,
}

fn geometry(level: Level, members: u32, copies: u32) -> Geometry {
    Geometry::new(GeometrySpec {
        level,
        parity_layout: ParityLayout::DEFAULT,
        copies,
        interleave_bytes: INTERLEAVE,
        data_offset_bytes: DATA_OFFSET,
        member_data_bytes: vec![INTERLEAVE * ROWS; members as usize],
    })
    .unwrap()
}

/// Bare pages, as volumes made before sealed pages keep them: a new
/// volume's area is all zeros (the simulator's suites drive sealed pages).
fn layout(alg: Algorithm) -> Layout {
    Layout {
        algorithm: alg,
        format: PageFormat::Bare,
        volume_uuid: [7; 16],
        area_offset_bytes: AREA_OFFSET,
        data_offset_bytes: DATA_OFFSET,
        data_size_bytes: INTERLEAVE * ROWS,
    }
}

impl Rig {
    fn new(g: Geometry, checksums: Option<Algorithm>, seed: u64) -> Rig {
        let n = g.members() as usize;
        let members = vec![vec![0u8; (DATA_OFFSET + INTERLEAVE * ROWS) as usize]; n];
        let mut rig = Rig {
            v: Volume::new(g.clone(), vec![Health::Online; n], Limits::default()),
            members,
            rng: Rng::new(seed),
            pool: Vec::new(),
            unflushed: vec![Vec::new(); n],
            data_reads: vec![0; n],
            read_log: Vec::new(),
            page_limit: ChecksumLimits::default().pages_per_member,
        };
        rig.assemble(g, checksums, false);
        rig
    }

    /// A fresh volume over the members' bytes; `crashed`: the bitmap's
    /// regions on the members are owed a resync.
    fn assemble(&mut self, g: Geometry, checksums: Option<Algorithm>, crashed: bool) {
        let health = vec![Health::Online; g.members() as usize];
        self.assemble_as(g, checksums, crashed, health);
    }

    fn assemble_as(
        &mut self,
        g: Geometry,
        checksums: Option<Algorithm>,
        crashed: bool,
        health: Vec<Health>,
    ) {
        let n = g.members() as usize;
        let il = IntentLayout::new(&g, 4).unwrap().expect("a bitmap");
        let mut on = RegionSet::new(&il);
        for m in &self.members {
            on.union_with(&RegionSet::from_bytes(
                &il,
                &m[4096..(4096 + il.area_bytes()) as usize],
            ));
        }
        self.v = Volume::new(g, health, Limits::default());
        self.v.enable_intent(il, on, crashed);
        if let Some(alg) = checksums {
            let limits = ChecksumLimits {
                pages_per_member: self.page_limit,
            };
            self.v.enable_checksums(layout(alg), limits);
        }
        self.unflushed = vec![Vec::new(); n];
    }

    fn perform(&mut self, io: MemberIo) {
        let m = &mut self.members[io.member as usize];
        let result = match io.op {
            MemberOp::Read {
                offset_bytes,
                len_bytes,
            } => Ok(Some(Bytes::copy_from_slice({
                self.read_log.push((io.member, offset_bytes, len_bytes));
                if offset_bytes >= DATA_OFFSET {
                    self.data_reads[io.member as usize] += 1;
                }
                &m[offset_bytes as usize..(offset_bytes + len_bytes) as usize]
            }))),
            MemberOp::Write { offset_bytes, data } => {
                let at = offset_bytes as usize;
                let bytes = data.to_bytes();
                self.unflushed[io.member as usize]
                    .push((offset_bytes, m[at..at + bytes.len()].to_vec()));
                m[at..at + bytes.len()].copy_from_slice(&bytes);
                Ok(None)
            }
            MemberOp::Trim {
                offset_bytes,
                len_bytes,
            } => {
                m[offset_bytes as usize..(offset_bytes + len_bytes) as usize].fill(0);
                Ok(None)
            }
            MemberOp::Flush => {
                self.unflushed[io.member as usize].clear();
                Ok(None)
            }
        };
        self.v.io_done(io.id, result);
    }

    fn one(&mut self, req: Request) -> Reply {
        let id = self.v.submit(req);
        for _ in 0..1_000_000 {
            self.v.check_invariants();
            while let Some(io) = self.v.next_io() {
                self.pool.push(io);
            }
            if let Some(c) = self.v.next_completion() {
                assert_eq!(c.id, id);
                assert!(self.pool.is_empty() || !self.v.is_idle());
                return c.result.expect("the request succeeds");
            }
            assert!(!self.pool.is_empty(), "stalled");
            let i = self.rng.below(self.pool.len() as u64) as usize;
            let io = self.pool.swap_remove(i);
            self.perform(io);
        }
        panic!("did not settle")
    }

    fn read(&mut self, offset: u64, len: u64) -> Vec<u8> {
        match self.one(Request::Read {
            offset_bytes: offset,
            len_bytes: len,
        }) {
            Reply::Data(d) => d.to_vec(),
            other => panic!("{other:?}"),
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        self.one(Request::Write {
            offset_bytes: offset,
            data: Bytes::copy_from_slice(data),
            fua: false,
        });
    }

    fn scrub(&mut self, action: Maintenance) -> CheckReport {
        let stripe_count = self.v.geometry().stripes();
        match self.one(Request::Maintain {
            first_stripe: 0,
            stripe_count,
            action,
        }) {
            Reply::Checked(r) => r,
            other => panic!("{other:?}"),
        }
    }

    /// Fills the volume with random bytes in writes of random sizes; the
    /// volume's content.
    fn fill(&mut self) -> Vec<u8> {
        let size = self.v.size_bytes();
        let mut model = vec![0u8; size as usize];
        let mut at = 0;
        while at < size {
            let len = ((1 + self.rng.below(40)) * 512).min(size - at);
            let data: Vec<u8> = (0..len).map(|_| self.rng.below(256) as u8).collect();
            self.write(at, &data);
            model[at as usize..(at + len) as usize].copy_from_slice(&data);
            at += len;
        }
        self.one(Request::Flush);
        model
    }

    fn zero_data_area(&mut self, member: usize) {
        self.members[member][DATA_OFFSET as usize..].fill(0);
    }

    fn repaired(&self) -> u64 {
        (0..self.v.geometry().members())
            .map(|m| self.v.checksums_repaired(m))
            .sum()
    }
}

fn configs() -> Vec<(&'static str, Geometry)> {
    vec![
        ("mirror x2", geometry(Level::Mirror, 2, 2)),
        ("mirror x3", geometry(Level::Mirror, 3, 3)),
        ("raid10 x4", geometry(Level::Raid10, 4, 2)),
        ("raid5 x4", geometry(Level::Raid5, 4, 1)),
        ("raid6 x5", geometry(Level::Raid6, 5, 1)),
    ]
}

#[test]
fn a_zeroed_member_is_never_served_and_is_rewritten() {
    for (name, g) in configs() {
        let mut rig = Rig::new(g.clone(), Some(Algorithm::Crc32c), 7);
        let model = rig.fill();
        let before = rig.members[1].clone();
        rig.zero_data_area(1);
        let size = rig.v.size_bytes();
        // One read of everything first: on parity levels its replan
        // rebuilds member 1's stripes from hull reads that meet member
        // 1's zeroed parity too (that once failed the member).
        assert!(rig.read(0, size) == model, "{name}: the whole volume");
        rig.zero_data_area(1);
        let mut at = 0;
        while at < size {
            let len = (64 << 10).min(size - at);
            assert!(
                rig.read(at, len) == model[at as usize..(at + len) as usize],
                "{name}: a read at {at} returned wrong bytes"
            );
            at += len;
        }
        let events: Vec<_> = std::iter::from_fn(|| rig.v.next_event()).collect();
        assert!(
            rig.v.health().iter().all(|h| *h == Health::Online),
            "{name}: {events:?}"
        );
        let st = rig.v.checksum_stats(1).unwrap().clone();
        assert!(st.blocks_mismatched > 0, "{name}: {st:?}");
        assert!(rig.repaired() > 0, "{name}: nothing repaired");
        // What reads did not touch (parity, other copies) the scrub finds:
        // it names member 1 wherever it looks wrong.
        let report = rig.scrub(Maintenance::Repair);
        assert!(
            report.wrong_members.iter().all(|&(_, m)| m == 1),
            "{name}: {report:?}"
        );
        assert_eq!(report.unlocated_stripes, Vec::<u64>::new(), "{name}");
        let clean = rig.scrub(Maintenance::Check);
        assert!(clean.mismatched_stripes.is_empty(), "{name}: {clean:?}");
        assert!(
            rig.members[1][DATA_OFFSET as usize..] == before[DATA_OFFSET as usize..],
            "{name}: member 1 is not back as it was"
        );
        let st2 = rig.v.checksum_stats(1).unwrap().clone();
        assert!(rig.read(0, size) == model, "{name}");
        assert_eq!(
            rig.v.checksum_stats(1).unwrap().blocks_mismatched,
            st2.blocks_mismatched,
            "{name}: a repaired block failed again"
        );
    }
}

/// The counterpart, so the test above can fail: without checksums, the
/// same zeroed member is served (md does the same).
#[test]
fn without_checksums_a_zeroed_member_is_served() {
    for (name, g) in configs() {
        let mut rig = Rig::new(g, None, 7);
        let model = rig.fill();
        // Member 0: the copy reads prefer on raid10.
        rig.zero_data_area(0);
        let size = rig.v.size_bytes();
        let wrong = (0..size / 4096)
            .filter(|&i| rig.read(i * 4096, 4096) != model[(i * 4096) as usize..][..4096])
            .count();
        assert!(wrong > 0, "{name}: no zeroed bytes were served");
    }
}

/// A misdirected write: the right bytes at the wrong place fail there.
#[test]
fn a_block_copied_to_the_wrong_place_fails_its_checksum() {
    let g = geometry(Level::Mirror, 2, 2);
    let mut rig = Rig::new(g, Some(Algorithm::Xxh3), 3);
    let model = rig.fill();
    let (a, b) = (DATA_OFFSET as usize, DATA_OFFSET as usize + 8192);
    let block = rig.members[0][a..a + 512].to_vec();
    rig.members[0][b..b + 512].copy_from_slice(&block);
    rig.members[1][b..b + 512].copy_from_slice(&block);
    // Both copies of volume bytes 8192.. now hold block 0's bytes: no
    // copy matches, so the read fails rather than return them.
    let id = rig.v.submit(Request::Read {
        offset_bytes: 8192,
        len_bytes: 512,
    });
    let _ = id;
    let mut failed = false;
    for _ in 0..10_000 {
        while let Some(io) = rig.v.next_io() {
            rig.pool.push(io);
        }
        if let Some(c) = rig.v.next_completion() {
            failed = c.result.is_err();
            break;
        }
        let io = rig.pool.pop().expect("I/O owed");
        rig.perform(io);
    }
    assert!(failed, "bytes of another block were served");
    assert_ne!(model[8192..8704], block[..]);
}

/// A crash between a member write and its checksum page (pages are
/// written at flushes): after restart the regions the bitmap marks are
/// trusted and resynced, so no read fails and nothing is served wrong.
#[test]
fn after_a_crash_marked_regions_are_trusted_then_checked() {
    // Some run trusts blocks on more than one member: the volume's count
    // is their sum (mutation testing made it a difference unseen).
    let mut several_trusting = false;
    for (name, g) in configs() {
        for seed in 0..20 {
            let mut rig = Rig::new(g.clone(), Some(Algorithm::Crc32c), seed);
            let mut model = rig.fill();
            let size = rig.v.size_bytes();
            // Unflushed writes, some landed and some not.
            let mut written = Vec::new();
            for _ in 0..6 {
                let len = (1 + rig.rng.below(16)) * 512;
                let at = rig.rng.below((size - len) / 512) * 512;
                let data: Vec<u8> = (0..len).map(|_| rig.rng.below(256) as u8).collect();
                rig.write(at, &data);
                written.push((at, data));
            }
            for m in 0..rig.members.len() {
                let undo = std::mem::take(&mut rig.unflushed[m]);
                for (off, old) in undo.into_iter().rev() {
                    if rig.rng.below(2) == 0 {
                        let at = off as usize;
                        rig.members[m][at..at + old.len()].copy_from_slice(&old);
                    }
                }
            }
            rig.assemble(g.clone(), Some(Algorithm::Crc32c), true);
            // Reads before the resync: no checksum failure, and each byte
            // is the old or the new value of an unflushed write (md's rule
            // for unflushed writes after a crash).
            let got = rig.read(0, size);
            for (i, (&g_, &m_)) in got.iter().zip(&model).enumerate() {
                if g_ != m_ {
                    let i = i as u64;
                    assert!(
                        written
                            .iter()
                            .any(|(at, d)| *at <= i && i < at + d.len() as u64),
                        "{name} seed {seed}: byte {i} changed and no write touched it"
                    );
                }
            }
            let trusted: Vec<u64> = (0..rig.members.len() as u32)
                .map(|m| rig.v.checksum_stats(m).unwrap().blocks_trusted)
                .collect();
            assert_eq!(
                rig.v.stats().checksums.unwrap().trusted_blocks,
                trusted.iter().sum::<u64>(),
                "{name} seed {seed}"
            );
            several_trusting |= trusted.iter().filter(|&&t| t > 0).count() > 1;
            let report = rig.scrub(Maintenance::Resync);
            let _ = report;
            let after = rig.read(0, size);
            model.copy_from_slice(&after);
            rig.one(Request::Flush);
            let mismatched: u64 = (0..rig.members.len() as u32)
                .map(|m| rig.v.checksum_stats(m).unwrap().blocks_mismatched)
                .sum();
            assert_eq!(
                mismatched, 0,
                "{name} seed {seed}: a read failed its checksums"
            );
            // Checked, not trusted, from a clean start.
            rig.assemble(g.clone(), Some(Algorithm::Crc32c), false);
            assert!(rig.read(0, size) == model, "{name} seed {seed}");
            let clean = rig.scrub(Maintenance::Check);
            assert!(
                clean.mismatched_stripes.is_empty(),
                "{name} seed {seed}: {clean:?}"
            );
            let mismatched: u64 = (0..rig.members.len() as u32)
                .map(|m| rig.v.checksum_stats(m).unwrap().blocks_mismatched)
                .sum();
            assert_eq!(mismatched, 0, "{name} seed {seed}: after the resync");
        }
    }
    assert!(
        several_trusting,
        "no crash left blocks to trust on two members"
    );
}

/// Mirror and RAID-10 write a client's bytes as they come, not in whole
/// sectors: the first seeded run with checksums stopped on "member I/O
/// 152828+62884 is not whole blocks", and their zeroes are member trims of
/// the bytes as they come. A partial block is read, checked, merged (or
/// zeroed) and written whole, with its new checksum; reads of any bytes
/// check the whole blocks around them.
#[test]
fn writes_and_reads_off_block_boundaries_keep_their_checksums() {
    for (name, g) in [
        ("mirror x2", geometry(Level::Mirror, 2, 2)),
        ("raid10 x4", geometry(Level::Raid10, 4, 2)),
        ("raid5 x4", geometry(Level::Raid5, 4, 1)),
    ] {
        let mut rig = Rig::new(g, Some(Algorithm::Crc32c), 11);
        let mut model = rig.fill();
        let size = rig.v.size_bytes();
        for _ in 0..200 {
            let len = 1 + rig.rng.below(3000);
            let at = rig.rng.below(size - len);
            if rig.rng.below(3) == 0 {
                // Zeroes: member trims of the bytes as they come.
                rig.one(Request::WriteZeroes {
                    offset_bytes: at,
                    len_bytes: len,
                    fua: false,
                });
                model[at as usize..(at + len) as usize].fill(0);
            } else {
                let data: Vec<u8> = (0..len).map(|_| rig.rng.below(256) as u8).collect();
                rig.write(at, &data);
                model[at as usize..(at + len) as usize].copy_from_slice(&data);
            }
            let (ra, rl) = (rig.rng.below(size - 700), 1 + rig.rng.below(700));
            assert!(
                rig.read(ra, rl) == model[ra as usize..(ra + rl) as usize],
                "{name}: a read of {rl} bytes at {ra}"
            );
        }
        rig.one(Request::Flush);
        assert!(rig.read(0, size) == model, "{name}");
        let mismatched: u64 = (0..rig.members.len() as u32)
            .map(|m| rig.v.checksum_stats(m).unwrap().blocks_mismatched)
            .sum();
        assert_eq!(mismatched, 0, "{name}: a block's checksum went stale");
        // And they still catch a zeroed member.
        rig.zero_data_area(1);
        assert!(rig.read(0, size) == model, "{name}: after zeroing");
        assert!(
            rig.v.checksum_stats(1).unwrap().blocks_mismatched > 0,
            "{name}"
        );
    }
}

/// On RAID-5, a read whose chunk on one member fails its checksum is
/// rebuilt from the rest of that stripe, and the member is left out of
/// that stripe's reconstruction: one failed read of it, then the rewrite's
/// read-back, nothing more. The reconstruction once located the stripe in
/// the request's bytes wrongly (a mutant of `plan_read`, `*` as `+`,
/// passed every test): the bad member was read again in the stripe's hull
/// and failed again before the read converged.
#[test]
fn a_wrong_chunk_is_read_once_then_rebuilt_without_it() {
    let g = geometry(Level::Raid5, 4, 1);
    // Stripe 2 has member 1 as its parity, stripe 3 a data chunk on it.
    assert_eq!(g.parity_roles(2).unwrap().p, 1);
    let d = g
        .parity_roles(3)
        .unwrap()
        .data
        .iter()
        .position(|&m| m == 1)
        .unwrap() as u64;
    let mut rig = Rig::new(g.clone(), Some(Algorithm::Crc32c), 5);
    let model = rig.fill();
    let at = (DATA_OFFSET + 3 * INTERLEAVE) as usize;
    rig.members[1][at..at + INTERLEAVE as usize].fill(0);
    let sb = g.stripe_data_bytes();
    let before = rig.data_reads[1];
    assert!(rig.read(2 * sb, 2 * sb) == model[(2 * sb) as usize..(4 * sb) as usize]);
    assert_eq!(
        rig.data_reads[1] - before,
        2,
        "member 1: the failed read and the rewrite's read-back (chunk {d} of stripe 3)"
    );
    assert_eq!(rig.repaired(), 1);
}

/// One checksum page cached per member, two in use: pages are written out
/// and dropped between I/Os and read back when needed, and nothing is lost
/// on the way (the flush that waits for a dropped page: the unit test
/// `integrity::tests::a_flush_goes_out_when_a_page_it_waited_for_was_dropped_written`).
#[test]
fn a_cache_smaller_than_the_checksums_keeps_them_right() {
    for (name, g) in [
        ("mirror x2", geometry(Level::Mirror, 2, 2)),
        ("raid5 x4", geometry(Level::Raid5, 4, 1)),
    ] {
        let n = g.members() as usize;
        let mut rig = Rig::new(g.clone(), Some(Algorithm::Crc32c), 21);
        rig.page_limit = 1;
        rig.assemble(g.clone(), Some(Algorithm::Crc32c), false);
        let model = rig.fill();
        let size = rig.v.size_bytes();
        assert!(rig.read(0, size) == model, "{name}");
        let pages: u64 = (0..n as u32)
            .map(|m| rig.v.checksum_stats(m).unwrap().page_reads)
            .sum();
        assert!(
            pages > 2 * n as u64,
            "{name}: pages were dropped and read again ({pages})"
        );
        // From the members alone: a fresh volume checks every block.
        rig.assemble(g, Some(Algorithm::Crc32c), false);
        assert!(rig.read(0, size) == model, "{name}: after reassembly");
        let bad: u64 = (0..n as u32)
            .map(|m| rig.v.checksum_stats(m).unwrap().blocks_mismatched)
            .sum();
        assert_eq!(bad, 0, "{name}");
    }
}

/// A degraded read's reconstruction meets a block that fails its checksum
/// on another member: that member is left out of the stripe's
/// reconstruction (RAID-6 still has Q), the bytes come back right, and it
/// stays in service: a wrong block is not a dead disk. Mutation testing
/// found the path unexamined: a reconstruction's failed read could mark
/// its member faulty, or avoid the member over the wrong stripe's bytes,
/// and no test read a degraded stripe past a wrong block.
#[test]
fn a_wrong_block_in_a_degraded_reconstruction_is_left_out_not_failed() {
    let g = geometry(Level::Raid6, 5, 1);
    let mut rig = Rig::new(g.clone(), Some(Algorithm::Crc32c), 6);
    let model = rig.fill();
    // A stripe past the first with a data chunk on member 0 (lost) and
    // another data chunk on some member x (wrong).
    let s = (1..ROWS)
        .find(|&s| g.parity_roles(s).unwrap().data.contains(&0))
        .unwrap();
    let roles = g.parity_roles(s).unwrap();
    let x = *roles.data.iter().find(|&&m| m != 0).unwrap();
    rig.v.mark_faulty(0, "test: lost".into());
    let at = (DATA_OFFSET + s * INTERLEAVE) as usize;
    rig.members[x as usize][at..at + INTERLEAVE as usize].fill(0xEE);
    let sb = g.stripe_data_bytes();
    // From the stripe before, so the request does not start at stripe s.
    let (off, len) = ((s - 1) * sb, 2 * sb);
    assert!(rig.read(off, len) == model[off as usize..(off + len) as usize]);
    assert_eq!(rig.v.health()[x as usize], Health::Online, "member {x}");
}

use platter_core::integrity::IntegrityStats;

/// The volume's checksum counters are its members' summed. Mutation
/// testing turned the sums into differences or products unseen: no core
/// test read the volume's counters, and the simulator's totals only ask
/// for more than zero.
#[test]
fn the_volumes_checksum_counters_add_up_its_members() {
    let g = geometry(Level::Raid5, 4, 1);
    let n = g.members();
    let mut rig = Rig::new(g.clone(), Some(Algorithm::Crc32c), 22);
    rig.page_limit = 1;
    rig.assemble(g.clone(), Some(Algorithm::Crc32c), false);
    let model = rig.fill();
    // A wrong data chunk on members 1 and 2, in different stripes.
    for (m, from) in [(1u32, 0u64), (2, 4)] {
        let stripe = (from..)
            .find(|&s| g.parity_roles(s).unwrap().data.contains(&m))
            .unwrap();
        let at = (DATA_OFFSET + stripe * INTERLEAVE) as usize;
        rig.members[m as usize][at..at + INTERLEAVE as usize].fill(0);
    }
    let size = rig.v.size_bytes();
    assert!(rig.read(0, size) == model);
    let c = rig.v.stats().checksums.expect("checksums are on");
    let per: Vec<_> = (0..n)
        .map(|m| rig.v.checksum_stats(m).unwrap().clone())
        .collect();
    let sum = |f: &dyn Fn(&platter_core::integrity::IntegrityStats) -> u64| {
        per.iter().map(f).sum::<u64>()
    };
    assert_eq!(c.verified_blocks, sum(&|s| s.blocks_verified));
    assert_eq!(c.mismatched_blocks, sum(&|s| s.blocks_mismatched));
    assert_eq!(c.trusted_blocks, sum(&|s| s.blocks_trusted));
    assert_eq!(c.page_reads, sum(&|s| s.page_reads));
    assert_eq!(c.page_writes, sum(&|s| s.page_writes));
    assert_eq!(
        c.repaired_reads,
        (0..n).map(|m| rig.v.checksums_repaired(m)).sum::<u64>()
    );
    // Each counter has more than one member in it, so a difference or a
    // product of them would show.
    let several = |f: fn(&IntegrityStats) -> u64| per.iter().filter(|s| f(s) > 0).count() > 1;
    assert!(several(|s| s.blocks_verified), "{per:?}");
    assert!(several(|s| s.page_reads), "{per:?}");
    assert!(several(|s| s.page_writes), "{per:?}");
    // Each wrong chunk: its blocks mismatched once, one read repaired.
    let bad: Vec<u64> = per.iter().map(|s| s.blocks_mismatched).collect();
    assert!(
        bad[1] > 0 && bad[1] == bad[2] && bad[0] + bad[3] == 0,
        "{bad:?}"
    );
    assert_eq!(c.repaired_reads, 2, "{c:?}");
}

/// A repair on a copy level replaces the copy whose blocks fail their
/// checksums by one that reads clean, and names that member. Mutation
/// testing found `mend_copies` reached by neither the core tests nor the
/// simulator's seeded suite (emptied, or its clean-copy test inverted,
/// unseen).
#[test]
fn a_repair_mends_the_copy_that_fails_its_checksums() {
    for (name, g) in [
        ("mirror x2", geometry(Level::Mirror, 2, 2)),
        ("raid10 x4", geometry(Level::Raid10, 4, 2)),
    ] {
        let mut rig = Rig::new(g.clone(), Some(Algorithm::Crc32c), 23);
        let model = rig.fill();
        let e = g.extents(3 * INTERLEAVE, INTERLEAVE).next().unwrap();
        let bad = g.data_locations(e.stripe, e.data_index).next().unwrap();
        let at = (DATA_OFFSET + bad.row * INTERLEAVE) as usize;
        rig.members[bad.member as usize][at..at + 512].fill(0);
        let r = rig.scrub(Maintenance::Repair);
        assert!(
            r.wrong_members.contains(&(e.stripe, bad.member)),
            "{name}: {r:?}"
        );
        let chunk = &model[(3 * INTERLEAVE) as usize..(4 * INTERLEAVE) as usize];
        assert!(
            rig.members[bad.member as usize][at..at + INTERLEAVE as usize] == *chunk,
            "{name}: the wrong copy was not replaced"
        );
        let again = rig.scrub(Maintenance::Check);
        assert!(again.mismatched_stripes.is_empty(), "{name}: {again:?}");
    }
}

/// A scrub's stripe where one copy fails its checksums (mended from the
/// clean copy) while another chunk's two copies disagree and both read
/// clean (no majority) is unlocated as a whole: the disagreeing copy's
/// member is not named wrong on no evidence. Mutation testing found the
/// merge of the two verdicts unexamined: `located &= ...` made `|=`
/// named the second copy's member wrong, unseen.
#[test]
fn a_mended_stripe_whose_copies_still_disagree_stays_unlocated() {
    // Four members, two copies: chunk 0 of a stripe on members 0 and 1,
    // chunk 1 on members 2 and 3.
    let g = geometry(Level::Raid10, 4, 2);
    let mut rig = Rig::new(g.clone(), Some(Algorithm::Crc32c), 41);
    rig.fill();
    // Member 3 from a volume filled otherwise: its checksums match its
    // bytes, which disagree with member 2's everywhere.
    let mut other = Rig::new(g.clone(), Some(Algorithm::Crc32c), 42);
    other.fill();
    rig.members[3] = other.members[3].clone();
    rig.assemble(g.clone(), Some(Algorithm::Crc32c), false);
    let e = g.extents(10 * INTERLEAVE, INTERLEAVE).next().unwrap();
    assert_eq!(e.data_index, 0);
    let bad = g.data_locations(e.stripe, 0).next().unwrap();
    let at = (DATA_OFFSET + bad.row * INTERLEAVE) as usize;
    rig.members[bad.member as usize][at..at + 512].fill(0);
    let r = rig.scrub(Maintenance::Check);
    assert!(r.mismatched_stripes.contains(&e.stripe), "{r:?}");
    assert!(r.unlocated_stripes.contains(&e.stripe), "{r:?}");
    assert!(
        !r.wrong_members
            .iter()
            .any(|&(s, m)| s == e.stripe && m >= 2),
        "a member named wrong with no checksum or majority against it: {r:?}"
    );
}

/// The resync after a crash, with checksums and a member missing, reads
/// the present copies of the stripes it cannot compare so that their
/// checksums are set from what they hold; on a RAID-10 whose last stripe
/// is partial it reads nothing past the volume's end. Mutation testing
/// found that end unexamined: `stripe * k` made `stripe / k` read rows
/// that hold no chunk of the volume, unseen.
#[test]
fn a_resync_with_a_member_missing_reads_only_the_volumes_chunks() {
    // Three members, two copies: a stripe is three chunks over two rows.
    // 255 rows hold 382 chunks, so the last stripe holds one.
    let g = Geometry::new(GeometrySpec {
        level: Level::Raid10,
        parity_layout: ParityLayout::DEFAULT,
        copies: 2,
        interleave_bytes: INTERLEAVE,
        data_offset_bytes: DATA_OFFSET,
        member_data_bytes: vec![INTERLEAVE * (ROWS - 1); 3],
    })
    .unwrap();
    let k = u64::from(g.data_per_stripe());
    let chunks = g.volume_size_bytes() / INTERLEAVE;
    assert_eq!((k, chunks % k), (3, 1), "the last stripe is partial");
    let held: std::collections::HashSet<(u32, u64)> = (0..chunks)
        .flat_map(|c| g.data_locations(c / k, (c % k) as u32))
        .map(|l| (l.member, l.row))
        .collect();
    let mut rig = Rig::new(g.clone(), Some(Algorithm::Crc32c), 31);
    rig.fill();
    let mut health = vec![Health::Online; 3];
    health[1] = Health::Missing;
    rig.assemble_as(g.clone(), Some(Algorithm::Crc32c), true, health);
    rig.read_log.clear();
    let r = match rig.one(Request::Maintain {
        first_stripe: 0,
        stripe_count: g.stripes(),
        action: Maintenance::Resync,
    }) {
        Reply::Checked(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(r.unchecked_stripes, g.stripes(), "{r:?}");
    let data: Vec<_> = rig.read_log.iter().filter(|r| r.1 >= DATA_OFFSET).collect();
    let last_row = (g.stripes() - 1) * 2;
    assert!(
        data.iter().any(|&&(m, off, len)| m != 1
            && off <= DATA_OFFSET + last_row * INTERLEAVE
            && DATA_OFFSET + (last_row + 1) * INTERLEAVE <= off + len),
        "the last stripe's present copy was not read"
    );
    for &&(m, off, len) in &data {
        let (first, last) = (
            (off - DATA_OFFSET) / INTERLEAVE,
            (off + len - 1 - DATA_OFFSET) / INTERLEAVE,
        );
        for row in first..=last {
            assert!(
                held.contains(&(m, row)),
                "member {m} row {row} holds no chunk of the volume, yet was read"
            );
        }
    }
}

/// A scrub names a member wrong only in the stripes whose bytes failed
/// their checksums. Found while writing the test above: a scrub reads a
/// member's chunks of many stripes in one read, and one bad 512-byte block
/// made the whole read suspect, so a mirror's scrub named the member wrong
/// in all 256 stripes (and a repair rewrote them all); on RAID-5 a second
/// bad block on another member, anywhere, then made its stripe "too many
/// to rebuild", left unrepaired.
#[test]
fn one_bad_block_makes_its_member_suspect_in_its_stripe_only() {
    for (name, g) in configs() {
        let mut rig = Rig::new(g.clone(), Some(Algorithm::Crc32c), 43);
        let model = rig.fill();
        let n = g.members();
        // Two bad blocks on two members, in different stripes; on a
        // parity level, data or parity as the rotation falls.
        // The first in a row's last block, the second in a row's first:
        // each touches the next (previous) row, whose stripe is not wrong
        // (mutation testing found the edges unexamined: `<` made `<=`).
        let bad = [(0u32, 5u64, INTERLEAVE - 512), (n - 1, 9u64, 0)];
        for &(m, row, within) in &bad {
            let at = (DATA_OFFSET + row * INTERLEAVE + within) as usize;
            rig.members[m as usize][at..at + 512].fill(0x5a);
        }
        let stripe_of = |row: u64| {
            (0..g.stripes())
                .find(|&s| {
                    (0..g.data_per_stripe()).any(|d| g.data_locations(s, d).any(|l| l.row == row))
                        || g.level().is_parity() && s == row
                })
                .unwrap()
        };
        let want: Vec<(u64, u32)> = bad.iter().map(|&(m, row, _)| (stripe_of(row), m)).collect();
        let r = rig.scrub(Maintenance::Repair);
        assert_eq!(r.wrong_members, want, "{name}: {r:?}");
        assert!(r.unlocated_stripes.is_empty(), "{name}: {r:?}");
        let again = rig.scrub(Maintenance::Check);
        assert!(again.mismatched_stripes.is_empty(), "{name}: {again:?}");
        let size = rig.v.size_bytes();
        assert!(rig.read(0, size) == model, "{name}: the volume changed");
    }
}
