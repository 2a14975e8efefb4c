//! A reshape while clients read and write: [`Reshaping`] runs the old and
//! new layouts' volumes over model members whose I/Os complete in any
//! order, with up to four client requests in flight, crashes at any
//! moment (members keep any subset of their unflushed writes) and, in
//! other runs, a member that fails. Every client read must return what
//! was written; after every restart each byte must read back as written,
//! or (for a write that no flush covered) as before it; at the end the
//! new layout's volume holds everything and its redundancy agrees.
//! Seeds: `PLATTER_SIM_SEEDS` (default 200), from `PLATTER_SIM_FIRST_SEED`
//! (default 0); `PLATTER_SIM_DEBUG` prints each seed's layouts (to run a
//! failing seed again).

use bytes::Bytes;
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::level::{Level, ParityLayout};
use platter_core::reshape::{
    Action, Plan, Reshape, Reshaping, Setup, UndoArea, UndoRecord, UNDO_HEADER_BYTES,
};
use platter_core::volume::{
    Completion, Event, Health, IoError, IoErrorKind, IoResult, Limits, Maintenance, MemberIo,
    MemberOp, Reply, Request, RequestId, Volume,
};
use platter_testkit::volatile::VolatileDisk;
use platter_testkit::Rng;
use std::collections::BTreeMap;

/// As `platter create`'s: the room before it keeps each member's undo
/// record when the new layout never pulls ahead of the old one.
const DATA_OFFSET: u64 = 1 << 20;
const VOLUME_UUID: [u8; 16] = [9; 16];
const RESHAPE_ID: u64 = 3;
/// Client requests in flight at once.
const CLIENTS_MAX: usize = 4;

fn geometry(level: Level, members: u32, interleave: u64, member_bytes: u64) -> Geometry {
    geometry_laid(
        level,
        members,
        interleave,
        member_bytes,
        ParityLayout::LeftSymmetric,
    )
}

fn geometry_laid(
    level: Level,
    members: u32,
    interleave: u64,
    member_bytes: u64,
    parity_layout: ParityLayout,
) -> Geometry {
    Geometry::new(GeometrySpec {
        level,
        parity_layout,
        copies: match level {
            Level::Mirror => members,
            Level::Raid10 => 2,
            _ => 1,
        },
        interleave_bytes: interleave,
        data_offset_bytes: DATA_OFFSET,
        member_data_bytes: vec![member_bytes; members as usize],
    })
    .expect("a valid geometry")
}

fn pick_case(rng: &mut Rng) -> (Geometry, Geometry) {
    let interleaves = [4096, 8192, 126 * 512];
    let il_old = interleaves[rng.below(3) as usize];
    let il_new = if rng.chance(33) {
        interleaves[rng.below(3) as usize]
    } else {
        il_old
    };
    let member_bytes = (4 + rng.below(8)) * 126 * 512 * 2;
    let (old_level, old_n, new_level) = match rng.below(6) {
        0 => (Level::Stripe, 2 + rng.below(3) as u32, Level::Stripe),
        1 => (Level::Raid5, 3 + rng.below(3) as u32, Level::Raid5),
        2 => (Level::Raid6, 4 + rng.below(2) as u32, Level::Raid6),
        3 => (Level::Raid10, 2 + rng.below(3) as u32, Level::Raid10),
        4 => (Level::Mirror, 2, Level::Raid5),
        // Any level to any other the plan accepts: what `platter
        // reshape --level` lets an operator ask.
        _ => {
            let levels = [
                Level::Stripe,
                Level::Mirror,
                Level::Raid10,
                Level::Raid5,
                Level::Raid6,
            ];
            let old = levels[rng.below(5) as usize];
            let new = levels[rng.below(5) as usize];
            (old, old.min_members() + rng.below(3) as u32, new)
        }
    };
    // A quarter add no member: an interleave or parity layout change,
    // whose every window keeps a backup in the members' reserved areas.
    // (Seed 496 found clients let onto a window while its images were
    // read: the window held as many stripes as the area, the range kept
    // off only the fewest that could go; a flushed write read back old.)
    let added = if rng.chance(25) {
        0
    } else {
        1 + rng.below(2) as u32
    };
    let layouts = [
        ParityLayout::LeftAsymmetric,
        ParityLayout::RightAsymmetric,
        ParityLayout::LeftSymmetric,
        ParityLayout::RightSymmetric,
    ];
    let (il_new, layout_new) = if added == 0 && new_level.is_parity() && rng.chance(50) {
        (il_new, layouts[rng.below(4) as usize])
    } else if added == 0 && il_new == il_old {
        (
            interleaves[(rng.below(2) + 1) as usize].max(il_old * 2),
            ParityLayout::LeftSymmetric,
        )
    } else {
        (il_new, ParityLayout::LeftSymmetric)
    };
    (
        geometry(old_level, old_n, il_old, member_bytes),
        geometry_laid(
            new_level,
            (old_n + added).max(new_level.min_members()),
            il_new,
            member_bytes,
            layout_new,
        ),
    )
}

/// Member I/O in flight, the members, and the one that fails (if any).
struct Host {
    disks: Vec<VolatileDisk>,
    out: Vec<MemberIo>,
    failed: Option<u32>,
    /// The labels' durable position.
    durable_bytes: u64,
}

impl Host {
    fn new(members: u32, member_bytes: u64) -> Host {
        Host {
            disks: (0..members)
                .map(|_| VolatileDisk::new(DATA_OFFSET + member_bytes))
                .collect(),
            out: Vec::new(),
            failed: None,
            durable_bytes: 0,
        }
    }

    fn perform(&mut self, io: &MemberIo) -> IoResult {
        if self.failed == Some(io.member) {
            return Err(IoError {
                kind: IoErrorKind::Gone,
                message: format!("member {} is gone", io.member),
                unverified: None,
            });
        }
        Ok(self.disks[io.member as usize].perform(&io.op))
    }

    fn write_through(&mut self, member: u32, offset_bytes: u64, data: &[u8]) {
        let write = MemberOp::Write {
            offset_bytes,
            data: data.to_vec().into(),
        };
        self.disks[member as usize].perform(&write);
        self.disks[member as usize].perform(&MemberOp::Flush);
    }
}

/// Runs a plain volume's requests to the end, I/Os in order.
fn run_plain(v: &mut Volume, host: &mut Host, req: Request) -> Result<Reply, String> {
    let id = v.submit(req);
    for _ in 0..1_000_000 {
        while let Some(io) = v.next_io() {
            let r = host.perform(&io);
            v.io_done(io.id, r);
        }
        while let Some(e) = v.next_event() {
            if let Event::MemberFaulty { member, .. } = e {
                v.failure_recorded(member);
            }
        }
        if let Some(c) = v.next_completion() {
            assert_eq!(c.id, id);
            return c.result.map_err(|e| e.message);
        }
    }
    panic!("a plain volume's request never completed");
}

/// Writes `model` over a volume of layout `g` (its members all in use)
/// through a plain volume, and flushes: the data a reshape then moves.
fn fill_plain(host: &mut Host, g: &Geometry, model: &[u8]) {
    let mut v = Volume::new(
        g.clone(),
        vec![Health::Online; g.members() as usize],
        Limits::default(),
    );
    for (i, chunk) in model.chunks(256 * 1024).enumerate() {
        let write = Request::Write {
            offset_bytes: i as u64 * 256 * 1024,
            data: Bytes::copy_from_slice(chunk),
            fua: false,
        };
        run_plain(&mut v, host, write).expect("the fill");
    }
    run_plain(&mut v, host, Request::Flush).expect("the fill's flush");
}

/// A reshape of `plan` from its start in windows of one stripe, moving the
/// restart point only when it must: the step-by-step tests' set-up.
fn one_stripe_windows(plan: Plan, health: Vec<Health>) -> Reshaping {
    Reshaping::new(
        Reshape::resume(plan, 0, 1),
        health,
        Setup {
            volume_uuid: VOLUME_UUID,
            reshape_id: RESHAPE_ID,
            window_stripes_max: 1,
            persist_every_bytes: u64::MAX,
            limits: Limits::default(),
        },
    )
}

/// A client request in flight, with what the model needs when it ends.
struct Pending {
    req: Request,
    /// A flush: the writes it covers (completed before it was sent).
    covers: Vec<u64>,
}

/// A write not yet covered by a completed flush: its bytes before.
struct Unsure {
    offset_bytes: u64,
    before: Vec<u8>,
    completed: bool,
}

struct Run {
    seed: u64,
    rng: Rng,
    plan: Plan,
    host: Host,
    model: Vec<u8>,
    pending: BTreeMap<RequestId, Pending>,
    unsure: BTreeMap<u64, Unsure>,
    next_write: u64,
    write_of: BTreeMap<RequestId, u64>,
    window_max: u64,
    /// Half the runs persist only when they must (a write waiting on
    /// moved bytes, no safe window left), so moved bytes wait long for
    /// the labels.
    persist_every_bytes: u64,
    crashes: u64,
    persists: u64,
    undos: u64,
    reads: u64,
    finished: bool,
    stuck: Option<String>,
}

impl Run {
    fn reshaping(&self) -> Reshaping {
        let n = self.plan.new_geometry().members();
        let health = (0..n)
            .map(|m| {
                if self.host.failed == Some(m) {
                    Health::Faulty
                } else {
                    Health::Online
                }
            })
            .collect();
        let rs = Reshape::resume(self.plan.clone(), self.host.durable_bytes, self.window_max);
        let mut r = Reshaping::new(
            rs,
            health,
            Setup {
                volume_uuid: VOLUME_UUID,
                reshape_id: RESHAPE_ID,
                window_stripes_max: self.window_max,
                persist_every_bytes: self.persist_every_bytes,
                limits: Limits::default(),
            },
        );
        r.allow_bytes(u64::MAX);
        r
    }

    fn busy(&self, off: u64, len: u64, writing: bool) -> bool {
        self.pending.values().any(|p| {
            let (o, l) = p.req.range();
            let w = !matches!(p.req, Request::Read { .. } | Request::Flush);
            (writing || w) && off < o + l && o < off + len
        })
    }

    fn submit_random(&mut self, r: &mut Reshaping) {
        let size = self.model.len() as u64;
        let len = ((1 + self.rng.below(32)) * 512).min(size);
        // Half the requests near the moving position: on the window being
        // copied, just moved, or about to be.
        let near = r.reshape().position_bytes().min(size - len) / 512;
        let off = if self.rng.chance(50) {
            let spread = 2 * self.plan.stripe_bytes() / 512 + 1;
            (near + self.rng.below(spread)).saturating_sub(spread / 2) * 512
        } else {
            self.rng.below((size - len) / 512 + 1) * 512
        }
        .min(size - len);
        let req = match self.rng.below(10) {
            0 => Request::Flush,
            1..=4 => Request::Read {
                offset_bytes: off,
                len_bytes: len,
            },
            _ => {
                let data: Vec<u8> = (0..len).map(|_| self.rng.next() as u8).collect();
                Request::Write {
                    offset_bytes: off,
                    data: Bytes::from(data),
                    fua: false,
                }
            }
        };
        let writing = matches!(req, Request::Write { .. });
        if !matches!(req, Request::Flush) && self.busy(off, len, writing) {
            return;
        }
        let mut covers = Vec::new();
        if let Request::Write { data, .. } = &req {
            let w = self.next_write;
            self.next_write += 1;
            let range = off as usize..(off + len) as usize;
            self.unsure.insert(
                w,
                Unsure {
                    offset_bytes: off,
                    before: self.model[range.clone()].to_vec(),
                    completed: false,
                },
            );
            self.model[range].copy_from_slice(data);
            let id = r.submit(req.clone());
            self.write_of.insert(id, w);
            self.pending.insert(id, Pending { req, covers });
            return;
        }
        if matches!(req, Request::Flush) {
            covers = self
                .unsure
                .iter()
                .filter(|(_, u)| u.completed)
                .map(|(w, _)| *w)
                .collect();
        }
        let id = r.submit(req.clone());
        self.pending.insert(id, Pending { req, covers });
    }

    fn completed(&mut self, c: Completion) {
        let p = self.pending.remove(&c.id).expect("a request we sent");
        let seed = self.seed;
        let reply = c
            .result
            .unwrap_or_else(|e| panic!("seed {seed}: {} failed: {e}", p.req.name()));
        match p.req {
            Request::Read {
                offset_bytes,
                len_bytes,
            } => {
                let Reply::Data(d) = reply else {
                    panic!("a read without data")
                };
                self.reads += 1;
                let want = &self.model[offset_bytes as usize..(offset_bytes + len_bytes) as usize];
                if let Some(i) = d.to_vec().iter().zip(want).position(|(a, b)| a != b) {
                    panic!(
                        "seed {seed}: a client read of {len_bytes} at {offset_bytes} got a wrong \
                         byte at {}",
                        offset_bytes + i as u64
                    );
                }
            }
            Request::Write { .. } => {
                let w = self.write_of.remove(&c.id).expect("a write's number");
                self.unsure
                    .get_mut(&w)
                    .expect("unsure until flushed")
                    .completed = true;
            }
            Request::Flush => {
                for w in p.covers {
                    self.unsure.remove(&w);
                }
            }
            _ => unreachable!(),
        }
    }

    fn actions(&mut self, r: &mut Reshaping) {
        while let Some(a) = r.next_action() {
            match a {
                Action::Persist { position_bytes } => {
                    // The labels are written after the flush, whole.
                    self.host.durable_bytes = position_bytes;
                    self.persists += 1;
                    r.persisted(position_bytes);
                }
                Action::Finished => self.finished = true,
                Action::Stuck {
                    position_bytes,
                    reason,
                } => {
                    self.stuck = Some(format!("at {position_bytes}: {reason}"));
                }
            }
        }
        while let Some(e) = r.next_event() {
            if let Event::MemberFaulty { member, .. } = e {
                assert_eq!(self.host.failed, Some(member), "seed {}", self.seed);
                r.failure_recorded(member);
            }
        }
    }

    /// What a restart does before resuming: the undo record's image put
    /// back (and the record erased) when the labels stand at its position.
    fn undo_replay(&mut self) {
        let Some(area) = self.plan.undo_area() else {
            return;
        };
        for slot in area.holders(self.plan.old().members()) {
            if self.host.failed == Some(slot) {
                continue;
            }
            let raw = self.host.disks[slot as usize].read(area.offset_bytes(), area.bytes());
            let Ok(record) = UndoRecord::decode(&raw) else {
                continue;
            };
            if !record.is_for(VOLUME_UUID, RESHAPE_ID, self.host.durable_bytes) {
                continue;
            }
            for (m, image) in record.slot_images() {
                let at =
                    self.plan.new_geometry().spec().data_offset_bytes + record.span.start_bytes;
                self.host.write_through(m, at, image);
            }
            self.undos += 1;
            // Put back once: clients may write the window again before the
            // next record (docs/reshape.md).
            let erase = [0u8; UNDO_HEADER_BYTES as usize];
            self.host.write_through(slot, area.offset_bytes(), &erase);
        }
    }

    /// Runs one request of a restart to its end, I/Os in order.
    fn restart_request(&mut self, r: &mut Reshaping, req: Request) -> Reply {
        let id = r.submit(req);
        for _ in 0..1_000_000 {
            while let Some(io) = r.next_io() {
                let res = self.host.perform(&io);
                r.io_done(io.id, res);
            }
            self.actions(r);
            if let Some(c) = r.next_completion() {
                assert_eq!(c.id, id);
                return c
                    .result
                    .unwrap_or_else(|e| panic!("seed {}: a restart's request: {e}", self.seed));
            }
        }
        panic!("seed {}: a restart's request never completed", self.seed);
    }

    /// After a crash: the undo record put back, then a resync of the
    /// whole volume (copies and parity made to agree with the data as it
    /// stands, through the layout each byte is in). Every byte must then
    /// read as written or, for a write no flush covered, as before it.
    fn restart(&mut self) -> Reshaping {
        self.crashes += 1;
        self.host.out.clear();
        for d in &mut self.host.disks {
            d.crash(&mut self.rng);
        }
        self.pending.clear();
        self.write_of.clear();
        self.undo_replay();
        let mut r = self.reshaping();
        let size = self.model.len() as u64;
        let resync = Request::Maintain {
            first_stripe: 0,
            stripe_count: size.div_ceil(self.plan.stripe_bytes()),
            action: Maintenance::Resync,
        };
        // Answered as a volume answers it: the findings of both layouts.
        let Reply::Checked(_) = self.restart_request(&mut r, resync) else {
            panic!("seed {}: a resync answered without its findings", self.seed)
        };
        let read = Request::Read {
            offset_bytes: 0,
            len_bytes: size,
        };
        let Reply::Data(d) = self.restart_request(&mut r, read) else {
            panic!("a read without data")
        };
        let got = d.to_vec();
        let unsure = std::mem::take(&mut self.unsure);
        let mut allowed: Vec<Vec<u8>> = Vec::new();
        let mut index = vec![usize::MAX; got.len()];
        for u in unsure.values() {
            for (i, b) in u.before.iter().enumerate() {
                let at = u.offset_bytes as usize + i;
                if index[at] == usize::MAX {
                    index[at] = allowed.len();
                    allowed.push(vec![self.model[at]]);
                }
                allowed[index[at]].push(*b);
            }
        }
        for (at, (g, m)) in got.iter().zip(&self.model).enumerate() {
            let ok = g == m || (index[at] != usize::MAX && allowed[index[at]].contains(g));
            assert!(
                ok,
                "seed {}: after crash {}, volume byte {at} reads {g}, written {m} (durable {})",
                self.seed, self.crashes, self.host.durable_bytes
            );
        }
        self.model.copy_from_slice(&got);
        r
    }
}

#[derive(Default)]
struct Tally {
    ran: u64,
    crashes: u64,
    undos: u64,
    persists: u64,
    failed_members: u64,
    reads: u64,
    /// Runs whose every window keeps a backup in the members' reserved
    /// areas, and their undo records put back.
    in_place: u64,
    in_place_undos: u64,
    /// Runs that moved the data down into the room before it instead.
    moved_down: u64,
}

/// One seed's run, added to `t`; false when the case is refused.
fn run_seed(seed: u64, t: &mut Tally) -> bool {
    let mut rng = Rng::new(seed);
    let (old, new) = pick_case(&mut rng);
    // Half the cases with no member added offer Plan::choose room before
    // the data (32 to 988 KiB) to move it down into. Drawn aside, so that
    // every other seed runs as it did before.
    let mut aside = Rng::new(seed ^ 0x5EED_D0E5);
    let plan = if new.members() == old.members() && aside.chance(50) {
        let reserved_from = DATA_OFFSET - 4096 * (8 + aside.below(240));
        Plan::choose(old.clone(), new, reserved_from)
    } else {
        Plan::new(old.clone(), new, 4096)
    };
    let Ok(plan) = plan else {
        return false;
    };
    // The new layout as planned: its data may start lower.
    let new = plan.new_geometry().clone();
    if std::env::var("PLATTER_SIM_DEBUG").is_ok() {
        eprintln!(
            "seed {seed}: {:?}\n -> {:?}\n undo {:?}",
            old.spec(),
            new.spec(),
            plan.undo_area()
        );
    }
    let crashing = rng.chance(50);
    let redundant = old.redundancy() > 0 && new.redundancy() > 0;
    let fail_at = (!crashing && redundant).then(|| rng.below(400));
    let fail_member = rng.below(u64::from(old.members())) as u32;
    let member_bytes = new.spec().member_data_bytes[0];
    let mut host = Host::new(new.members(), member_bytes);
    let old_size = old.volume_size_bytes();
    let model: Vec<u8> = (0..old_size).map(|_| rng.next() as u8).collect();
    fill_plain(&mut host, &old, &model);
    let window_max = 1 + rng.below(4);
    let persist_every_bytes = if rng.chance(50) {
        u64::MAX
    } else {
        new.stripe_data_bytes() * (1 + rng.below(8))
    };
    let mut run = Run {
        seed,
        rng,
        plan,
        host,
        model,
        pending: BTreeMap::new(),
        unsure: BTreeMap::new(),
        next_write: 0,
        write_of: BTreeMap::new(),
        window_max,
        persist_every_bytes,
        crashes: 0,
        persists: 0,
        undos: 0,
        reads: 0,
        finished: false,
        stuck: None,
    };
    let mut r = run.reshaping();
    let mut requests_left = 300u64;
    // Bounded: every step completes an I/O or sends a request, and the
    // move makes progress between crashes (at most 4).
    for step in 0..2_000_000u64 {
        if Some(step) == fail_at {
            run.host.failed = Some(fail_member);
        }
        while run.pending.len() < CLIENTS_MAX && requests_left > 0 && run.rng.chance(50) {
            requests_left -= 1;
            run.submit_random(&mut r);
        }
        while let Some(io) = r.next_io() {
            run.host.out.push(io);
        }
        while let Some(c) = r.next_completion() {
            run.completed(c);
        }
        run.actions(&mut r);
        r.check_invariants();
        assert!(run.stuck.is_none(), "seed {seed}: stuck {:?}", run.stuck);
        if crashing && run.crashes < 4 && run.rng.below(300) == 0 {
            r = run.restart();
            continue;
        }
        if run.host.out.is_empty() {
            if run.finished && run.pending.is_empty() && r.is_idle() {
                break;
            }
            continue;
        }
        let i = run.rng.below(run.host.out.len() as u64) as usize;
        let io = run.host.out.swap_remove(i);
        let res = run.host.perform(&io);
        r.io_done(io.id, res);
        r.check_invariants();
    }
    assert!(run.finished, "seed {seed}: the reshape did not finish");
    assert_eq!(run.host.durable_bytes, run.plan.total_bytes());
    let mut v = r.into_new_volume();
    let got = run_plain(
        &mut v,
        &mut run.host,
        Request::Read {
            offset_bytes: 0,
            len_bytes: old_size,
        },
    );
    let Ok(Reply::Data(d)) = got else {
        panic!("seed {seed}: the final read failed: {got:?}")
    };
    assert!(
        d.to_vec() == run.model,
        "seed {seed}: the new layout does not hold what was written"
    );
    if run.host.failed.is_none() {
        let check = Request::Maintain {
            first_stripe: 0,
            stripe_count: new.stripes(),
            action: Maintenance::Check,
        };
        match run_plain(&mut v, &mut run.host, check) {
            Ok(Reply::Checked(report)) => assert!(
                report.mismatched_stripes.is_empty(),
                "seed {seed}: stripes {:?} of the new layout disagree",
                report.mismatched_stripes
            ),
            other => panic!("seed {seed}: the check: {other:?}"),
        }
    }
    t.ran += 1;
    if let Some(UndoArea::Reserved { .. }) = run.plan.undo_area() {
        t.in_place += 1;
        t.in_place_undos += run.undos;
    }
    t.moved_down += u64::from(run.plan.lead_bytes() > 0);
    t.crashes += run.crashes;
    t.undos += run.undos;
    t.persists += run.persists;
    t.failed_members += u64::from(run.host.failed.is_some());
    t.reads += run.reads;
    true
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
        .unwrap_or(200)
}

#[test]
fn a_reshape_under_client_load_survives_crashes_and_a_failed_member() {
    let mut t = Tally::default();
    for seed in first_seed()..first_seed() + seeds() {
        run_seed(seed, &mut t);
    }
    eprintln!(
        "live reshape: {} seeds ran, {} crashes, {} undo records put back, {} persists, {} runs \
         with a failed member, {} client reads checked; {} runs in place ({} of their undo \
         records put back), {} moved the data down",
        t.ran,
        t.crashes,
        t.undos,
        t.persists,
        t.failed_members,
        t.reads,
        t.in_place,
        t.in_place_undos,
        t.moved_down
    );
    // A floor on what the seeds exercise, not a check of any one: about
    // 6% of runs move the data down (4.4% to 7.8% over ten 1,000-seed
    // chunks of the soak from 420000); at 5% the chunk 427000..428000
    // failed with 39 of 892 though every seed in it passed.
    assert!(
        t.moved_down >= t.ran / 40,
        "only {} runs moved the data down into the room before it",
        t.moved_down
    );
    assert!(
        t.in_place >= t.ran / 10,
        "only {} runs kept their backups in the reserved areas",
        t.in_place
    );
    // The test must have done something: most cases are accepted, crash
    // or lose a member, and some crashes land where only the backup helps.
    assert!(t.ran >= seeds() / 2, "only {} cases accepted", t.ran);
    assert!(
        t.crashes >= t.ran / 2,
        "only {} crashes in {} runs",
        t.crashes,
        t.ran
    );
    assert!(
        t.failed_members >= t.ran / 8,
        "only {} runs lost a member",
        t.failed_members
    );
    assert!(
        t.undos > 0 || seeds() < 100,
        "no crash needed the undo record"
    );
    assert!(
        t.in_place_undos > 0 || seeds() < 100,
        "no crash needed a member's own undo record"
    );
}

/// A RAID-5 of 4 members of 64 interleaves grown to 5, its members
/// holding the old layout of a model whose bytes `pattern` varies.
fn raid5_grow_4_to_5(il: u64, pattern: u64) -> (Plan, Host, Vec<u8>) {
    let old = geometry(Level::Raid5, 4, il, 64 * il);
    let new = geometry(Level::Raid5, 5, il, 64 * il);
    let plan = Plan::new(old.clone(), new, 4096).expect("a grow");
    let mut host = Host::new(5, 64 * il);
    let size = old.volume_size_bytes();
    let model: Vec<u8> = (0..size).map(|i| (i / 512 * pattern + i) as u8).collect();
    fill_plain(&mut host, &old, &model);
    (plan, host, model)
}

#[test]
fn a_read_on_a_window_ends_before_the_window_is_written() {
    // RAID-5 4 -> 5: new stripe 1 is written over old row 1, which holds
    // volume chunks 3-5 (on other members than the new layout puts them).
    // A client read of those chunks, sent before the move reaches them
    // and slow to be performed, must not see the new layout's bytes: the
    // window waits for requests on it to end. (Without the wait, the
    // read returned chunks of the new layout.)
    let il = 4096;
    let (plan, mut host, model) = raid5_grow_4_to_5(il, 7);
    let new = plan.new_geometry().clone();
    let mut r = one_stripe_windows(plan, vec![Health::Online; 5]);
    let (off, len) = (3 * il, 3 * il);
    let read = r.submit(Request::Read {
        offset_bytes: off,
        len_bytes: len,
    });
    let mut held = Vec::new();
    while let Some(io) = r.next_io() {
        held.push(io);
    }
    assert!(!held.is_empty());
    r.allow_bytes(u64::MAX);
    // Everything else runs as far as it can before the read's I/Os.
    for _ in 0..100_000 {
        let Some(io) = r.next_io() else { break };
        let res = host.perform(&io);
        r.io_done(io.id, res);
        while let Some(Action::Persist { position_bytes }) = r.next_action() {
            r.persisted(position_bytes);
        }
    }
    assert!(
        r.reshape().position_bytes() <= new.stripe_data_bytes(),
        "the move passed a window a read was still on"
    );
    for io in held {
        let res = host.perform(&io);
        r.io_done(io.id, res);
    }
    let c = r.next_completion().expect("the read ended");
    assert_eq!(c.id, read);
    let Ok(Reply::Data(d)) = c.result else {
        panic!("the read failed: {:?}", c.result)
    };
    assert!(d.to_vec() == model[off as usize..(off + len) as usize]);
}

/// The seeded runs check the reshape's invariants after every step; a
/// broken one must fail there. A read split at the position runs with its
/// parts counted one too many, as a bug in the split would leave it.
#[test]
fn a_broken_reshape_invariant_fails_at_its_step() {
    let (plan, _host, _model) = raid5_grow_4_to_5(4096, 7);
    let mut r = one_stripe_windows(plan, vec![Health::Online; 5]);
    r.submit(Request::Read {
        offset_bytes: 0,
        len_bytes: 4096,
    });
    while r.next_io().is_some() {}
    r.check_invariants();
    assert!(r.break_parts_count_for_tests(), "the read runs");
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.check_invariants()));
    let panic = caught.expect_err("a wrong parts count must fail the check");
    let msg = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(msg.contains("'s parts"), "wrong failure: {msg}");
}

/// Drives a plain volume's pending work (a rebuild step) to its end.
fn settle_plain(v: &mut Volume, host: &mut Host) {
    for _ in 0..1_000_000 {
        let mut moved = false;
        while let Some(io) = v.next_io() {
            let r = host.perform(&io);
            v.io_done(io.id, r);
            moved = true;
        }
        while v.next_completion().is_some() {
            moved = true;
        }
        while let Some(e) = v.next_event() {
            if let Event::MemberFaulty { member, .. } = e {
                v.failure_recorded(member);
            }
            moved = true;
        }
        if !moved {
            return;
        }
    }
    panic!("a plain volume did not settle");
}

#[test]
fn a_raid5_becomes_raid6_by_writing_q_on_an_added_member() {
    // md's `--grow --level=6 --layout=preserve`: a RAID-5 of n members is
    // a RAID-6 of n + 1 in the matching `_6` layout (the RAID-5 layout
    // over the first n, Q on the last) once Q is written there; not a
    // byte of the RAID-5 moves. Checked by reading the volume back with
    // any two members missing, which needs Q with md's syndrome order.
    let mut rng = Rng::new(0x56);
    for layout in ParityLayout::ALL {
        for n in [3, 4, 5] {
            let il = 8192;
            let member_bytes = 24 * il;
            let old = Geometry::new(GeometrySpec {
                level: Level::Raid5,
                parity_layout: layout,
                copies: 1,
                interleave_bytes: il,
                data_offset_bytes: DATA_OFFSET,
                member_data_bytes: vec![member_bytes; n as usize],
            })
            .expect("a RAID-5 geometry");
            let new = Geometry::new(GeometrySpec {
                level: Level::Raid6,
                parity_layout: layout.with_q_last().expect("a _6 layout"),
                copies: 1,
                interleave_bytes: il,
                data_offset_bytes: DATA_OFFSET,
                member_data_bytes: vec![member_bytes; n as usize + 1],
            })
            .expect("a RAID-6 geometry");
            assert_eq!(old.volume_size_bytes(), new.volume_size_bytes());
            let mut host = Host::new(n + 1, member_bytes);
            let size = old.volume_size_bytes();
            let model: Vec<u8> = (0..size).map(|_| rng.next() as u8).collect();
            fill_plain(&mut host, &old, &model);
            let mut health = vec![Health::Online; n as usize + 1];
            health[n as usize] = Health::Missing;
            let mut v6 = Volume::new(new.clone(), health, Limits::default());
            v6.start_rebuild(n, 0).expect("Q's member rebuilds");
            for _ in 0..new.stripes() + 1 {
                if v6.rebuild_step(4).is_none() && v6.rebuild_progress().is_none() {
                    break;
                }
                settle_plain(&mut v6, &mut host);
            }
            assert!(v6.rebuild_progress().is_none(), "{layout} n={n}: not done");
            let check = Request::Maintain {
                first_stripe: 0,
                stripe_count: new.stripes(),
                action: Maintenance::Check,
            };
            match run_plain(&mut v6, &mut host, check) {
                Ok(Reply::Checked(r)) => assert!(
                    r.mismatched_stripes.is_empty() && r.unchecked_stripes == 0,
                    "{layout} n={n}: {r:?}"
                ),
                other => panic!("{layout} n={n}: the check: {other:?}"),
            }
            for a in 0..=n {
                for b in a + 1..=n {
                    let mut health = vec![Health::Online; n as usize + 1];
                    health[a as usize] = Health::Missing;
                    health[b as usize] = Health::Missing;
                    let mut d = Volume::new(new.clone(), health, Limits::default());
                    let read = Request::Read {
                        offset_bytes: 0,
                        len_bytes: size,
                    };
                    let Ok(Reply::Data(got)) = run_plain(&mut d, &mut host, read) else {
                        panic!("{layout} n={n}: no read without {a} and {b}");
                    };
                    assert!(
                        got.to_vec() == model,
                        "{layout} n={n}: wrong bytes without members {a} and {b}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_reshape_whose_backup_member_fails_stops_and_serves_on() {
    // RAID-5 4 -> 5: the first windows need the undo record, kept on the
    // added member. With that member out of use the reshape cannot move
    // them safely: it stops (`Action::Stuck`, saying why) and clients go
    // on reading and writing every byte through the old layout.
    let il = 4096;
    let (plan, mut host, mut model) = raid5_grow_4_to_5(il, 13);
    let size = plan.old().volume_size_bytes();
    let mut health = vec![Health::Online; 5];
    health[4] = Health::Faulty;
    let mut r = one_stripe_windows(plan, health);
    r.allow_bytes(u64::MAX);
    let mut host_run = |r: &mut Reshaping, req: Request| -> Reply {
        let id = r.submit(req);
        for _ in 0..100_000 {
            while let Some(io) = r.next_io() {
                let res = host.perform(&io);
                r.io_done(io.id, res);
            }
            if let Some(c) = r.next_completion() {
                assert_eq!(c.id, id);
                return c.result.expect("served while stopped");
            }
        }
        panic!("a request never completed");
    };
    let data = Bytes::from(vec![0x5a; 3 * il as usize]);
    host_run(
        &mut r,
        Request::Write {
            offset_bytes: il,
            data: data.clone(),
            fua: false,
        },
    );
    model[il as usize..4 * il as usize].fill(0x5a);
    let Reply::Data(got) = host_run(
        &mut r,
        Request::Read {
            offset_bytes: 0,
            len_bytes: size,
        },
    ) else {
        panic!("a read without data")
    };
    assert!(
        got.to_vec() == model,
        "wrong bytes after the reshape stopped"
    );
    let actions: Vec<Action> = std::iter::from_fn(|| r.next_action()).collect();
    assert!(
        matches!(
            actions.as_slice(),
            [Action::Stuck { position_bytes: 0, reason }] if reason.contains("backup")
        ),
        "{actions:?}"
    );
    assert_eq!(r.reshape().position_bytes(), 0, "nothing moved");
}
