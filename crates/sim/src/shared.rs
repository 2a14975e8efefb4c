//! Several volumes on the same modelled drives, as a pool carves them
//! (`platter volume create`): each volume's subdisk is a window of a drive,
//! and every volume's I/O queues at the same drives, whose heads seek
//! between the volumes' windows. vinum's stripe-size experiment ran
//! volumes side by side like this; [`run_shared`] answers what one
//! volume's load costs another.
//!
//! Each volume is a [`Bench`] of its own (its engine, workload, report);
//! they share one [`ServiceModel`] through [`SharedDrives`], and
//! [`run_shared`] takes their events in virtual-time order (ties to the
//! volume listed first), so the drives see every volume's I/O in the
//! order it was issued. A run is still a pure function of its inputs and
//! seeds.

use crate::bench::{Bench, BenchReport};
use crate::members::ServiceModel;
use crate::rng::Rng;
use platter_core::volume::MemberOp;
use std::cell::RefCell;
use std::rc::Rc;

/// Volumes one set of drives serves at most.
pub const VOLUMES_MAX: u64 = 16;

/// Where a volume's member lies: a drive of the shared model, and the
/// window's first byte on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub drive: u32,
    pub offset_bytes: u64,
    pub len_bytes: u64,
}

/// The drives every volume shares, and what each volume's completions
/// are, until that volume collects them.
struct Drives {
    model: Box<dyn ServiceModel>,
    /// By volume: the tokens completed, not yet collected.
    done: Vec<Vec<u64>>,
}

/// One model of drives shared by several volumes.
#[derive(Clone)]
pub struct SharedDrives(Rc<RefCell<Drives>>);

impl SharedDrives {
    pub fn new(model: Box<dyn ServiceModel>) -> SharedDrives {
        SharedDrives(Rc::new(RefCell::new(Drives {
            model,
            done: Vec::new(),
        })))
    }

    /// The service model of volume `volume`, whose member `m` is
    /// `windows[m]`.
    pub fn volume(&self, volume: u32, windows: Vec<Window>) -> Box<dyn ServiceModel> {
        assert!(
            u64::from(volume) < VOLUMES_MAX,
            "at most {VOLUMES_MAX} volumes"
        );
        let mut d = self.0.borrow_mut();
        if d.done.len() <= volume as usize {
            d.done.resize(volume as usize + 1, Vec::new());
        }
        Box::new(VolumeOnDrives {
            drives: self.clone(),
            volume,
            windows,
        })
    }
}

/// A volume's view of the shared drives: its member I/O moved into its
/// windows, its completions picked out of everyone's.
struct VolumeOnDrives {
    drives: SharedDrives,
    volume: u32,
    windows: Vec<Window>,
}

impl VolumeOnDrives {
    /// `op` of member `m` at the drive's offsets.
    fn moved(&self, member: u32, op: &MemberOp) -> (u32, MemberOp) {
        let w = self.windows[member as usize];
        let inside = |offset: u64, len: u64| {
            assert!(
                offset + len <= w.len_bytes,
                "member {member}'s I/O at {offset}+{len} leaves its window of {}",
                w.len_bytes
            );
            w.offset_bytes + offset
        };
        let op = match op {
            MemberOp::Read {
                offset_bytes,
                len_bytes,
            } => MemberOp::Read {
                offset_bytes: inside(*offset_bytes, *len_bytes),
                len_bytes: *len_bytes,
            },
            MemberOp::Write { offset_bytes, data } => MemberOp::Write {
                offset_bytes: inside(*offset_bytes, data.len() as u64),
                data: data.clone(),
            },
            MemberOp::Trim {
                offset_bytes,
                len_bytes,
            } => MemberOp::Trim {
                offset_bytes: inside(*offset_bytes, *len_bytes),
                len_bytes: *len_bytes,
            },
            // A flush is the drive's, as a subdisk's is (`SubdiskMember`).
            MemberOp::Flush => MemberOp::Flush,
        };
        (w.drive, op)
    }
}

impl ServiceModel for VolumeOnDrives {
    fn submit(&mut self, now_ns: u64, member: u32, token: u64, op: &MemberOp, rng: &mut Rng) {
        let (drive, op) = self.moved(member, op);
        let token = token
            .checked_mul(VOLUMES_MAX)
            .expect("tokens are slab indices")
            + u64::from(self.volume);
        let mut d = self.drives.0.borrow_mut();
        d.model.submit(now_ns, drive, token, &op, rng);
    }

    fn next_event_ns(&self) -> Option<u64> {
        self.drives.0.borrow().model.next_event_ns()
    }

    fn advance(&mut self, now_ns: u64, rng: &mut Rng) -> Vec<u64> {
        let mut d = self.drives.0.borrow_mut();
        for token in d.model.advance(now_ns, rng) {
            let volume = (token % VOLUMES_MAX) as usize;
            d.done[volume].push(token / VOLUMES_MAX);
        }
        std::mem::take(&mut d.done[self.volume as usize])
    }

    fn power_fail(&mut self, now_ns: u64) {
        self.drives.0.borrow_mut().model.power_fail(now_ns);
    }
}

/// Runs every bench to its end on the drives they share, taking their
/// events in virtual-time order; their reports in their order.
pub fn run_shared(mut benches: Vec<Bench>) -> Vec<BenchReport> {
    for b in &mut benches {
        b.start();
    }
    loop {
        let next = benches
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.next_ns().map(|t| (t, i)))
            .min();
        let Some((_, i)) = next else { break };
        assert!(benches[i].step(), "an event was due");
        // Its I/O may have moved the drives' next completion earlier:
        // every volume wakes for it (and collects only its own).
        for b in &mut benches {
            b.arm_wake();
        }
    }
    benches.into_iter().map(Bench::finish_run).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::parametric::Parametric;
    use crate::disk::{DiskModel, HostModel};
    use crate::workload::WorkloadSpec;
    use platter_core::balance::ReadPolicy;
    use platter_core::geometry::{Geometry, GeometrySpec};
    use platter_core::{Level, ParityLayout};

    const MEMBER_BYTES: u64 = 512 << 20;
    /// Where a second volume's subdisks begin on each drive: far enough
    /// that moving between the volumes is a long seek.
    const SECOND_BYTES: u64 = 4 << 30;

    fn drives(n: u32) -> Box<dyn ServiceModel> {
        Box::new(DiskModel::new(
            &Parametric::drive_7200().spec(),
            n,
            HostModel::default(),
        ))
    }

    fn spec(level: Level, il: u64) -> GeometrySpec {
        GeometrySpec {
            level,
            parity_layout: ParityLayout::LeftSymmetric,
            copies: 2,
            interleave_bytes: il,
            data_offset_bytes: 8192,
            member_data_bytes: vec![MEMBER_BYTES - 8192; 4],
        }
    }

    fn bench(g: GeometrySpec, w: &str, service: Box<dyn ServiceModel>, seed: u64) -> Bench {
        let size = Geometry::new(g.clone()).unwrap().volume_size_bytes();
        let gen = WorkloadSpec::parse(w).unwrap().build(size, seed);
        Bench::new(g, ReadPolicy::Auto, service, gen, seed).unwrap()
    }

    /// Member `m` of a volume whose subdisks start at `offset_bytes` of
    /// drives `first..first + 4`.
    fn windows(first: u32, offset_bytes: u64) -> Vec<Window> {
        (0..4)
            .map(|m| Window {
                drive: first + m,
                offset_bytes,
                len_bytes: MEMBER_BYTES,
            })
            .collect()
    }

    const A_LOAD: &str = "raidtest:n=400,p=4,read=100,min=4k,max=64k";
    const B_LOAD: &str = "dd:total=64M,qd=2";

    /// The volume of interest alone on its drives, through the shared
    /// model and through its own: the same run, trace and all.
    #[test]
    fn one_volume_on_shared_drives_runs_as_on_drives_of_its_own() {
        let g = spec(Level::Raid5, 64 << 10);
        let own = bench(g.clone(), A_LOAD, drives(4), 3).run();
        let shared = SharedDrives::new(drives(4));
        let a = bench(g, A_LOAD, shared.volume(0, windows(0, 0)), 3);
        assert_eq!(run_shared(vec![a]), vec![own]);
    }

    /// A second volume's sequential reads on the same drives cost the
    /// first's random reads time (the heads go back and forth between
    /// them); on drives of its own it costs nothing.
    #[test]
    fn a_second_volume_on_the_same_drives_slows_the_first() {
        let (ga, gb) = (spec(Level::Raid5, 64 << 10), spec(Level::Stripe, 128 << 10));
        let alone = bench(ga.clone(), A_LOAD, drives(4), 5).run();

        let shared = SharedDrives::new(drives(4));
        let a = bench(ga.clone(), A_LOAD, shared.volume(0, windows(0, 0)), 5);
        let b = bench(
            gb.clone(),
            B_LOAD,
            shared.volume(1, windows(0, SECOND_BYTES)),
            9,
        );
        let together = run_shared(vec![a, b]);
        assert_eq!(together[0].requests, alone.requests);
        println!(
            "A's mean latency: alone {} us, with B on its drives {} us; B {:.1} MB/s",
            alone.mean_latency_ns / 1000,
            together[0].mean_latency_ns / 1000,
            together[1].mb_per_s()
        );
        assert!(
            together[0].mean_latency_ns > alone.mean_latency_ns * 13 / 10,
            "B on A's drives: A's mean {} ns, alone {} ns",
            together[0].mean_latency_ns,
            alone.mean_latency_ns
        );
        assert!(together[1].requests > 0 && together[1].errors == 0);

        let apart = SharedDrives::new(drives(8));
        let a = bench(ga, A_LOAD, apart.volume(0, windows(0, 0)), 5);
        let b = bench(gb, B_LOAD, apart.volume(1, windows(4, 0)), 9);
        let side_by_side = run_shared(vec![a, b]);
        assert_eq!(
            side_by_side[0], alone,
            "B on drives of its own costs A nothing"
        );
    }

    #[test]
    fn the_same_volumes_and_seeds_give_the_same_runs() {
        let go = || {
            let shared = SharedDrives::new(drives(4));
            let a = bench(
                spec(Level::Raid5, 64 << 10),
                A_LOAD,
                shared.volume(0, windows(0, 0)),
                1,
            );
            let b = bench(
                spec(Level::Raid10, 64 << 10),
                "raidtest:n=300,p=2,read=50",
                shared.volume(1, windows(0, SECOND_BYTES)),
                2,
            );
            run_shared(vec![a, b])
        };
        assert_eq!(go(), go());
    }
}

/// One volume of a pool for [`run_pool`]: its layout, where its members
/// lie on the pool's drives, and its load.
#[derive(Clone, Debug)]
pub struct VolumeRun {
    pub name: String,
    pub geometry: platter_core::geometry::GeometrySpec,
    pub windows: Vec<Window>,
    pub workload: crate::workload::WorkloadSpec,
}

/// What a volume of a pool did alone on its drives, and with every other
/// loaded volume running at once.
#[derive(Clone, Debug, PartialEq)]
pub struct Contention {
    pub name: String,
    pub alone: BenchReport,
    pub together: BenchReport,
}

/// Each volume's seed: the run's, mixed with its name (not its place in
/// the list), so that it issues the same requests alone and together.
fn volume_seed(seed: u64, name: &str) -> u64 {
    let named = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    crate::rng::mix64(seed ^ named)
}

/// Runs every volume alone on fresh drives (`drives` makes them), then
/// all of them at once on one set: what each costs the others.
pub fn run_pool(
    drives: &dyn Fn() -> Box<dyn ServiceModel>,
    volumes: &[VolumeRun],
    seed: u64,
) -> Result<Vec<Contention>, String> {
    if volumes.len() as u64 > VOLUMES_MAX {
        return Err(format!("at most {VOLUMES_MAX} volumes run at once"));
    }
    let bench = |v: &VolumeRun, shared: &SharedDrives, i: u32| -> Result<Bench, String> {
        let size = platter_core::geometry::Geometry::new(v.geometry.clone())
            .map_err(|e| format!("volume {}: {e}", v.name))?
            .volume_size_bytes();
        let seed = volume_seed(seed, &v.name);
        let gen = v.workload.build(size, seed);
        let service = shared.volume(i, v.windows.clone());
        Bench::new(v.geometry.clone(), Default::default(), service, gen, seed)
            .map_err(|e| format!("volume {}: {e}", v.name))
    };
    let mut alone = Vec::new();
    for v in volumes {
        let shared = SharedDrives::new(drives());
        alone.extend(run_shared(vec![bench(v, &shared, 0)?]));
    }
    let shared = SharedDrives::new(drives());
    let mut all = Vec::new();
    for (i, v) in volumes.iter().enumerate() {
        all.push(bench(v, &shared, i as u32)?);
    }
    let together = run_shared(all);
    Ok(volumes
        .iter()
        .zip(alone.into_iter().zip(together))
        .map(|(v, (alone, together))| Contention {
            name: v.name.clone(),
            alone,
            together,
        })
        .collect())
}
