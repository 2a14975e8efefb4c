//! The reshape's steps run against a model of members that lose any
//! subset of their unflushed writes in a crash, with client writes (each
//! flushed) between steps and crashes at any member write, including in
//! the middle of a window. After every step and every restart, every
//! volume byte must read back as written, through the layout the reshape
//! says it is in; at the end the new layout holds the volume and its
//! parity is right. Seeds: `PLATTER_SIM_SEEDS` (default 300). (Outside
//! the crate's sources, which may not read the environment.)

use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::level::{Level, ParityLayout};
use platter_core::reshape::{
    redundancy_lost, target, Asked, Plan, Reshape, Span, Step, UndoArea, UndoError, UndoRecord,
    UNDO_HEADER_BYTES,
};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: reproducible from the seed, no dependency.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

/// As `platter create`'s: the room before it keeps each member's undo
/// record when the new layout never pulls ahead of the old one.
const DATA_OFFSET: u64 = 1 << 20;
/// What the undo records of the model's one volume and reshape carry.
const VOLUME_UUID: [u8; 16] = [7; 16];
const RESHAPE_ID: u64 = 1;

/// A member: what it holds now, and what a crash would leave.
struct Disk {
    now: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<(usize, Vec<u8>)>,
}

/// A crash happened at the scheduled member write.
struct Crashed;

struct Disks {
    disks: Vec<Disk>,
    writes: u64,
    crash_at: Option<u64>,
}

impl Disks {
    fn new(n: u32, bytes: usize) -> Disks {
        Disks {
            disks: (0..n)
                .map(|_| Disk {
                    now: vec![0; bytes],
                    durable: vec![0; bytes],
                    pending: Vec::new(),
                })
                .collect(),
            writes: 0,
            crash_at: None,
        }
    }
    fn read(&self, m: u32, at: u64, len: u64) -> &[u8] {
        &self.disks[m as usize].now[at as usize..(at + len) as usize]
    }
    fn write(&mut self, m: u32, at: u64, data: &[u8]) -> Result<(), Crashed> {
        self.writes += 1;
        if self.crash_at.is_some_and(|c| self.writes >= c) {
            return Err(Crashed);
        }
        let d = &mut self.disks[m as usize];
        d.now[at as usize..at as usize + data.len()].copy_from_slice(data);
        d.pending.push((at as usize, data.to_vec()));
        Ok(())
    }
    fn flush(&mut self) {
        for d in &mut self.disks {
            for (at, data) in d.pending.drain(..) {
                d.durable[at..at + data.len()].copy_from_slice(&data);
            }
        }
    }
    /// Each disk keeps a random subset of its unflushed writes.
    fn crash(&mut self, rng: &mut Rng) {
        for d in &mut self.disks {
            for (at, data) in d.pending.drain(..) {
                if rng.chance(2) {
                    d.durable[at..at + data.len()].copy_from_slice(&data);
                }
            }
            d.now.copy_from_slice(&d.durable);
        }
        self.crash_at = None;
    }
}

/// Reads volume bytes through `g` (the first copy of each chunk).
fn read_via(disks: &Disks, g: &Geometry, offset: u64, len: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len as usize);
    if len == 0 {
        return out;
    }
    for e in g.extents(offset, len) {
        let loc = g
            .data_locations(e.stripe, e.data_index)
            .next()
            .expect("a copy");
        let at = g.member_offset_bytes(loc.row, e.within_bytes);
        out.extend_from_slice(disks.read(loc.member, at, e.len_bytes));
    }
    out
}

/// Writes volume bytes through `g` to every copy, then recomputes the
/// parity (XOR in P; Q is not modelled) of the stripes touched.
fn write_via(disks: &mut Disks, g: &Geometry, offset: u64, data: &[u8]) -> Result<(), Crashed> {
    if data.is_empty() {
        return Ok(());
    }
    let mut stripes = Vec::new();
    let mut at = 0usize;
    for e in g.extents(offset, data.len() as u64) {
        let piece = &data[at..at + e.len_bytes as usize];
        at += e.len_bytes as usize;
        for loc in g.data_locations(e.stripe, e.data_index) {
            disks.write(
                loc.member,
                g.member_offset_bytes(loc.row, e.within_bytes),
                piece,
            )?;
        }
        if stripes.last() != Some(&e.stripe) {
            stripes.push(e.stripe);
        }
    }
    for s in stripes {
        let Some(roles) = g.parity_roles(s) else {
            continue;
        };
        let il = g.interleave_bytes();
        let mut p = vec![0u8; il as usize];
        for &m in &roles.data {
            for (x, y) in p
                .iter_mut()
                .zip(disks.read(m, g.member_offset_bytes(s, 0), il))
            {
                *x ^= y;
            }
        }
        disks.write(roles.p, g.member_offset_bytes(s, 0), &p)?;
    }
    Ok(())
}

/// What the labels would hold.
struct Labels {
    durable_bytes: u64,
}

struct Case {
    old: Geometry,
    new: Geometry,
    /// Where the room before the data starts; with no member added, half
    /// the cases offer [`Plan::choose`] room to move the data down into
    /// (between 32 and 988 KiB) rather than back every window up.
    reserved_from_bytes: u64,
    move_down: bool,
}

fn geometry(level: Level, members: u32, interleave: u64, member_bytes: u64) -> Geometry {
    Geometry::new(GeometrySpec {
        level,
        parity_layout: ParityLayout::LeftSymmetric,
        copies: 2,
        interleave_bytes: interleave,
        data_offset_bytes: DATA_OFFSET,
        member_data_bytes: vec![member_bytes; members as usize],
    })
    .expect("a valid geometry")
}

fn pick_case(rng: &mut Rng) -> Case {
    let interleaves = [4096, 8192, 126 * 512];
    let il_old = interleaves[rng.below(3) as usize];
    let il_new = if rng.chance(3) {
        interleaves[rng.below(3) as usize]
    } else {
        il_old
    };
    // Whole interleaves of every size above, from a few stripes to a few
    // dozen: enough for the start of a grow (where backups are needed)
    // and the steady part after it.
    let member_bytes = (4 + rng.below(12)) * 126 * 512 * 2;
    let (old_level, old_n, new_level) = match rng.below(6) {
        0 => (Level::Stripe, 2 + rng.below(3) as u32, Level::Stripe),
        1 => (Level::Raid5, 3 + rng.below(3) as u32, Level::Raid5),
        2 => (Level::Raid6, 4 + rng.below(2) as u32, Level::Raid6),
        3 => (Level::Raid10, 2 + rng.below(3) as u32, Level::Raid10),
        4 => (Level::Mirror, 2, Level::Raid5),
        _ => (Level::Raid5, 3 + rng.below(2) as u32, Level::Raid6),
    };
    // A quarter add no member: an interleave change (or RAID-5 to RAID-6
    // in the ordinary layout, which holds no more data per row), every
    // window kept in a backup in the members' reserved areas.
    let added_none = rng.chance(4);
    let il_new = if added_none && il_new == il_old && old_level == new_level {
        interleaves[(rng.below(2) + 1) as usize].max(il_old * 2)
    } else {
        il_new
    };
    let added = if added_none && old_level == new_level {
        0
    } else {
        1 + rng.below(2) as u32
    };
    let move_down = added_none && rng.chance(2);
    let reserved_from_bytes = if move_down {
        DATA_OFFSET - 4096 * (8 + rng.below(240))
    } else {
        4096
    };
    Case {
        old: geometry(old_level, old_n, il_old, member_bytes),
        new: geometry(new_level, old_n + added, il_new, member_bytes),
        reserved_from_bytes,
        move_down,
    }
}

fn undo_write(
    disks: &mut Disks,
    plan: &Plan,
    position_bytes: u64,
    span: Span,
) -> Result<(), Crashed> {
    let area = plan.undo_area().expect("a plan that saves undo records");
    let image = |disks: &mut Disks, m: u32| {
        disks
            .read(
                m,
                plan.new_geometry().spec().data_offset_bytes + span.start_bytes,
                span.end_bytes - span.start_bytes,
            )
            .to_vec()
    };
    let record = |first_slot, images| UndoRecord {
        volume_uuid: VOLUME_UUID,
        reshape_id: RESHAPE_ID,
        position_bytes,
        span,
        first_slot,
        images,
    };
    match area {
        UndoArea::Added { slot, .. } => {
            let images = (0..plan.old().members()).map(|m| image(disks, m)).collect();
            disks.write(slot, area.offset_bytes(), &record(0, images).encode())?;
        }
        UndoArea::Reserved { .. } => {
            for m in 0..plan.old().members() {
                let images = vec![image(disks, m)];
                disks.write(m, area.offset_bytes(), &record(m, images).encode())?;
            }
        }
    }
    disks.flush();
    Ok(())
}

/// What a restart does before resuming: puts back the undo record's
/// image if the labels stand at its position.
fn undo_replay(disks: &mut Disks, plan: &Plan, labels: &Labels) -> Result<bool, Crashed> {
    let Some(area) = plan.undo_area() else {
        return Ok(false);
    };
    let mut put_back = false;
    for slot in area.holders(plan.old().members()) {
        let raw = disks.read(slot, area.offset_bytes(), area.bytes()).to_vec();
        let Ok(record) = UndoRecord::decode(&raw) else {
            continue;
        };
        if !record.is_for(VOLUME_UUID, RESHAPE_ID, labels.durable_bytes) {
            continue;
        }
        for (m, image) in record.slot_images() {
            let at = plan.new_geometry().spec().data_offset_bytes + record.span.start_bytes;
            disks.write(m, at, image)?;
        }
        disks.flush();
        // Put back once: clients may write the window again before the
        // next record, and a later restart must not find this image still
        // good. (Found at 3,000 seeds: a second record for the same
        // window, torn by a crash, left this one to be put back over a
        // client's flushed write.)
        disks.write(
            slot,
            area.offset_bytes(),
            &[0u8; UNDO_HEADER_BYTES as usize],
        )?;
        disks.flush();
        put_back = true;
    }
    Ok(put_back)
}

/// Volume bytes through the layout the reshape says each is in.
fn read_volume(disks: &Disks, rs: &Reshape, offset: u64, len: u64) -> Vec<u8> {
    let split = rs.position_bytes().clamp(offset, offset + len);
    let mut got = read_via(disks, rs.plan().new_geometry(), offset, split - offset);
    got.extend(read_via(
        disks,
        rs.plan().old(),
        split,
        offset + len - split,
    ));
    got
}

/// Writes volume bytes through the layout the reshape says each is in.
fn write_volume(disks: &mut Disks, rs: &Reshape, offset: u64, data: &[u8]) -> Result<(), Crashed> {
    let split = rs
        .position_bytes()
        .clamp(offset, offset + data.len() as u64);
    let (below, above) = data.split_at((split - offset) as usize);
    write_via(disks, rs.plan().new_geometry(), offset, below)?;
    write_via(disks, rs.plan().old(), split, above)
}

/// Flushes every member, then moves the labels' durable position up.
fn persist(disks: &mut Disks, labels: &mut Labels, rs: &mut Reshape, position_bytes: u64) {
    disks.flush();
    labels.durable_bytes = position_bytes;
    rs.persist_done(position_bytes);
}

fn check_volume(disks: &Disks, rs: &Reshape, model: &[u8], when: &str) {
    let got = read_volume(disks, rs, 0, model.len() as u64);
    if let Some(at) = got.iter().zip(model).position(|(a, b)| a != b) {
        panic!(
            "{when}: volume byte {at} reads {} instead of {} (position {}, durable {})",
            got[at],
            model[at],
            rs.position_bytes(),
            rs.durable_bytes()
        );
    }
}

/// What one seed's run did.
struct Ran {
    crashes: u64,
    undos: u64,
    /// Every window kept a backup in the members' reserved areas.
    in_place: bool,
    /// The data moved down into the room before it, nothing backed up.
    moved_down: bool,
}

/// One seed's run, or `None` when the case is refused.
fn run_seed(seed: u64) -> Option<Ran> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let case = pick_case(&mut rng);
    let plan = if case.move_down {
        Plan::choose(case.old.clone(), case.new.clone(), case.reserved_from_bytes)
    } else {
        Plan::new(case.old.clone(), case.new.clone(), 4096)
    }
    .ok()?;
    // The new layout as planned: its data may start lower.
    let case = Case {
        new: plan.new_geometry().clone(),
        ..case
    };
    let window_max = 1 + rng.below(4);
    let old_size = case.old.volume_size_bytes();
    let member_bytes = case.new.spec().member_data_bytes[0];
    let mut disks = Disks::new(case.new.members(), (DATA_OFFSET + member_bytes) as usize);
    let mut model: Vec<u8> = (0..old_size).map(|_| rng.next() as u8).collect();
    if write_via(&mut disks, &case.old, 0, &model).is_err() {
        unreachable!("no crash scheduled");
    }
    disks.flush();
    let mut labels = Labels { durable_bytes: 0 };
    let mut rs = Reshape::resume(plan.clone(), 0, window_max);
    let (mut crashes, mut undos) = (0, 0);
    let mut inflight: Option<(u64, Vec<u8>)> = None;
    // Bounded: each window moves at least one stripe; crashes are capped.
    for _ in 0..100_000 {
        if crashes < 4 && rng.chance(8) {
            disks.crash_at = Some(disks.writes + 1 + rng.below(12));
        }
        let step = rs.next_step();
        let result = (|| -> Result<bool, Crashed> {
            let len = (1 + rng.below(16)) * 512;
            let off = rng.below(old_size / 512) * 512;
            let len = len.min(old_size - off);
            let kept_off = rs
                .undo_window()
                .is_some_and(|(start, end)| off < end && off + len > start);
            if rng.chance(3) && !kept_off {
                if rs.write_must_wait(off, len) {
                    let position = rs.position_bytes();
                    persist(&mut disks, &mut labels, &mut rs, position);
                }
                let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                inflight = Some((off, data.clone()));
                write_volume(&mut disks, &rs, off, &data)?;
                disks.flush();
                model[off as usize..(off + len) as usize].copy_from_slice(&data);
                inflight = None;
                return Ok(false);
            }
            match step {
                Step::Persist { position_bytes } => {
                    persist(&mut disks, &mut labels, &mut rs, position_bytes)
                }
                Step::SaveUndo {
                    position_bytes,
                    span,
                    ..
                } => {
                    undo_write(&mut disks, rs.plan(), position_bytes, span)?;
                    rs.undo_saved(position_bytes);
                }
                Step::Copy {
                    position_bytes,
                    len_bytes,
                } => {
                    let readable = old_size.saturating_sub(position_bytes).min(len_bytes);
                    let mut data = read_via(&disks, rs.plan().old(), position_bytes, readable);
                    data.resize(len_bytes as usize, 0);
                    write_via(&mut disks, rs.plan().new_geometry(), position_bytes, &data)?;
                    rs.copy_done(position_bytes, len_bytes);
                }
                Step::Done => return Ok(true),
                Step::Stuck { position_bytes } => {
                    panic!("seed {seed}: stuck at {position_bytes} with a plan that was accepted")
                }
            }
            Ok(false)
        })();
        match result {
            Ok(true) => break,
            Ok(false) => {
                if rng.chance(16) {
                    check_volume(&disks, &rs, &model, &format!("seed {seed} after {step:?}"));
                }
            }
            Err(Crashed) => {
                crashes += 1;
                disks.crash(&mut rng);
                match undo_replay(&mut disks, &plan, &labels) {
                    Ok(put_back) => undos += u64::from(put_back),
                    Err(Crashed) => unreachable!("no crash is scheduled during a restart"),
                }
                rs = Reshape::resume(plan.clone(), labels.durable_bytes, window_max);
                // A client write not yet flushed may have landed in part:
                // each of its bytes reads as before or as written.
                if let Some((off, data)) = inflight.take() {
                    let got = read_volume(&disks, &rs, off, data.len() as u64);
                    let before = &mut model[off as usize..off as usize + data.len()];
                    for (i, g) in got.iter().enumerate() {
                        assert!(
                            *g == before[i] || *g == data[i],
                            "seed {seed}: a torn client write left byte {} neither old nor new",
                            off as usize + i
                        );
                        before[i] = *g;
                    }
                    // What the write-intent bitmap's resync does for the
                    // stripes a torn write touched: parity made right.
                    let resync = write_volume(&mut disks, &rs, off, &got);
                    assert!(resync.is_ok(), "no crash is scheduled during a restart");
                    disks.flush();
                }
                check_volume(
                    &disks,
                    &rs,
                    &model,
                    &format!("seed {seed} after a crash in {step:?}"),
                );
            }
        }
    }
    assert_eq!(rs.next_step(), Step::Done, "seed {seed}: did not finish");
    assert_eq!(labels.durable_bytes, plan.total_bytes());
    let got = read_via(&disks, &case.new, 0, old_size);
    assert!(
        got == model,
        "seed {seed}: the new layout differs from what was written"
    );
    for s in 0..case.new.stripes() {
        if let (Some(roles), Level::Raid5) = (case.new.parity_roles(s), case.new.level()) {
            let il = case.new.interleave_bytes();
            let mut p = disks
                .read(roles.p, case.new.member_offset_bytes(s, 0), il)
                .to_vec();
            for &m in &roles.data {
                for (x, y) in
                    p.iter_mut()
                        .zip(disks.read(m, case.new.member_offset_bytes(s, 0), il))
                {
                    *x ^= y;
                }
            }
            assert!(
                p.iter().all(|&b| b == 0),
                "seed {seed}: stripe {s}'s parity is wrong"
            );
        }
    }
    Some(Ran {
        crashes,
        undos,
        in_place: matches!(plan.undo_area(), Some(UndoArea::Reserved { .. })),
        moved_down: plan.lead_bytes() > 0,
    })
}

/// `PLATTER_SIM_FIRST_SEED`: where the seeds start (to run one again;
/// `scripts/soak-sim` runs chunks), as in the simulator's seeded tests.
fn first_seed() -> u64 {
    std::env::var("PLATTER_SIM_FIRST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn seeds() -> u64 {
    std::env::var("PLATTER_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300)
}

#[test]
fn crashes_at_any_write_of_a_reshape_lose_nothing() {
    let (mut ran, mut crashes, mut undos, mut in_place, mut in_place_undos) = (0, 0, 0, 0, 0);
    let mut moved_down = 0;
    for seed in first_seed()..first_seed() + seeds() {
        if let Some(r) = run_seed(seed) {
            ran += 1;
            crashes += r.crashes;
            undos += r.undos;
            if r.in_place {
                in_place += 1;
                in_place_undos += r.undos;
            }
            moved_down += u64::from(r.moved_down);
        }
    }
    eprintln!(
        "reshape model: {ran} seeds ran, {crashes} crashes, {undos} undo records put back; \
         {in_place} in place ({in_place_undos} of their undo records put back), {moved_down} \
         moved the data down"
    );
    assert!(
        moved_down >= ran / 20,
        "only {moved_down} runs moved the data down into the room before it"
    );
    assert!(
        in_place >= ran / 10 && in_place_undos > 0,
        "only {in_place} runs ({in_place_undos} undos) kept backups in the reserved areas"
    );
    // The test must have done something: most cases are accepted, crash,
    // and some crashes land where a backup is all that is left.
    assert!(ran >= seeds() / 2, "only {ran} cases accepted");
    assert!(crashes >= ran, "only {crashes} crashes in {ran} runs");
    assert!(undos > 0, "no crash ever needed the undo record");
}

#[test]
fn a_grow_needs_a_backup_only_at_its_start() {
    // raid5 4 -> 5 members at the same interleave: data disks 3 -> 4, so
    // new stripe s overwrites old row s, which holds volume chunks
    // [3s, 3s + 3): not yet moved until s >= 3.
    let old = geometry(Level::Raid5, 4, 4096, 64 * 4096);
    let new = geometry(Level::Raid5, 5, 4096, 64 * 4096);
    let plan = Plan::new(old, new, 4096).expect("a grow is planned");
    let sb = plan.stripe_bytes();
    let critical: Vec<u64> = (0..plan.new_geometry().stripes())
        .filter(|&s| plan.safe_stripes(s, s * sb, 1) == 0)
        .collect();
    assert_eq!(critical, vec![0, 1, 2]);
    let Some(UndoArea::Added {
        slot,
        offset_bytes,
        bytes,
    }) = plan.undo_area()
    else {
        panic!("a grow keeps its backup on the added member");
    };
    assert_eq!(slot, 4);
    let start = offset_bytes - DATA_OFFSET;
    assert!(start + bytes <= 64 * 4096 && start >= 32 * 4096);
}

#[test]
fn reshapes_that_cannot_be_done_in_place_are_refused() {
    let g = |level, n, il| geometry(level, n, il, 64 * 4096);
    // Fewer data disks: smaller.
    assert!(Plan::new(g(Level::Raid5, 4, 4096), g(Level::Raid6, 4, 4096), 4096).is_err());
    // Fewer members.
    assert!(Plan::new(g(Level::Stripe, 4, 4096), g(Level::Stripe, 3, 4096), 4096).is_err());
    // Concat moves nothing: grown another way.
    assert!(Plan::new(g(Level::Concat, 2, 4096), g(Level::Concat, 3, 4096), 4096).is_err());
    // Smaller.
    assert!(Plan::new(g(Level::Stripe, 4, 4096), g(Level::Raid6, 4, 4096), 4096).is_err());
    // A grow with an added member is accepted.
    assert!(Plan::new(g(Level::Stripe, 4, 4096), g(Level::Stripe, 5, 4096), 4096).is_ok());
}

/// A reshape that leaves the volume surviving fewer lost members is named
/// (and refused without --force by both `platter reshape` and the
/// server); one that keeps or adds redundancy is not. How it showed: a
/// raid5 reshaped to stripe, offline and live, was accepted without a word.
#[test]
fn reshapes_that_lower_the_redundancy_are_named() {
    let with = |level: Level, n: u32, copies: u32| {
        Geometry::new(GeometrySpec {
            level,
            parity_layout: ParityLayout::LeftSymmetric,
            copies,
            interleave_bytes: 4096,
            data_offset_bytes: DATA_OFFSET,
            member_data_bytes: vec![64 * 4096; n as usize],
        })
        .expect("a valid geometry")
    };
    let to = |old: &Geometry, level: Option<Level>, added: u32| {
        let asked = Asked {
            added_members: added,
            level,
            ..Asked::default()
        };
        target(old, &asked).expect("a target")
    };
    let raid5 = with(Level::Raid5, 3, 1);
    let lost = redundancy_lost(&raid5, &to(&raid5, Some(Level::Stripe), 0)).expect("lowered");
    assert_eq!(
        lost,
        "this reshape lowers the volume's redundancy: raid5 of 3 members survives the loss of \
         any one member, stripe of 3 members would survive no lost member (losing any one \
         loses data)"
    );
    assert!(redundancy_lost(&raid5, &to(&raid5, Some(Level::Concat), 0)).is_some());
    let raid6 = with(Level::Raid6, 5, 1);
    let lost = redundancy_lost(&raid6, &to(&raid6, Some(Level::Raid5), 0)).expect("lowered");
    assert!(
        lost.contains("raid6 of 5 members survives the loss of any 2 members")
            && lost.contains("raid5 of 5 members would survive the loss of any one member"),
        "{lost}"
    );
    let mirror3 = with(Level::Mirror, 3, 3);
    assert!(redundancy_lost(&mirror3, &to(&mirror3, Some(Level::Raid10), 1)).is_some());
    // Kept or added: no word.
    assert_eq!(
        redundancy_lost(&raid5, &to(&raid5, Some(Level::Raid6), 1)),
        None
    );
    assert_eq!(redundancy_lost(&raid5, &to(&raid5, None, 1)), None);
    let mirror2 = with(Level::Mirror, 2, 2);
    assert_eq!(
        redundancy_lost(&mirror2, &to(&mirror2, Some(Level::Raid5), 1)),
        None
    );
    assert_eq!(redundancy_lost(&mirror2, &to(&mirror2, None, 1)), None);
    let stripe = with(Level::Stripe, 3, 1);
    assert_eq!(
        redundancy_lost(&stripe, &to(&stripe, Some(Level::Concat), 0)),
        None
    );
}

#[test]
fn a_torn_or_foreign_undo_record_is_not_a_record() {
    let r = UndoRecord {
        volume_uuid: [1; 16],
        reshape_id: 9,
        position_bytes: 4096,
        span: Span {
            start_bytes: 0,
            end_bytes: 512,
        },
        first_slot: 2,
        images: vec![vec![3; 512], vec![4; 512]],
    };
    let b = r.encode();
    assert_eq!(UndoRecord::decode(&b), Ok(r.clone()));
    assert_eq!(b.len() as u64, r.len_bytes());
    let mut torn = b.clone();
    torn[4096 + 700] ^= 1;
    assert_eq!(
        UndoRecord::decode(&torn),
        Err(UndoError::Damaged("image checksum"))
    );
    let mut head = b.clone();
    head[0x28] ^= 1;
    assert_eq!(
        UndoRecord::decode(&head),
        Err(UndoError::Damaged("header checksum"))
    );
    assert_eq!(UndoRecord::decode(&b[..5000]), Err(UndoError::Short));
    assert_eq!(UndoRecord::decode(&[0u8; 4096]), Err(UndoError::NotARecord));
}
