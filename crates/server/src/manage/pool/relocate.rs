//! Subdisks moved while the pool serves (`platter subdisk move
//! --control`, and moves a stop or a crash cut short, taken up at the
//! start). The host records the move and opens the subdisk over both
//! places; the array serving it takes that in the subdisk's slot (its
//! engine paused and idle, no label being written), so that every write
//! from then on lands on both; a mover thread copies, the host recording
//! checkpoints and finally the new place; the array then takes the new
//! place alone. docs/pools.md "Moving a subdisk".

use super::{MoveEnd, PoolHost, PoolServer};
use crate::served::{Served, Volumes};
use platter_core::pool::SubdiskMove;
use platter_core::volume::Health;
use platter_io::moving::MovingMember;
use platter_io::Member;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A move the host planned: the array serving the subdisk and its slot.
pub struct PlannedMove {
    pub array: String,
    pub slot: u32,
    pub planned: SubdiskMove,
    /// Recorded already (taken up again): what lies below its checkpoint
    /// is compared before the copy goes on.
    pub resumed: bool,
}

/// A move under way in the server: its thread and the flag that stops it.
pub(crate) struct Mover {
    pub(crate) subdisk: String,
    pub(crate) volume: String,
    to: String,
    member: Arc<MovingMember>,
    rate: u64,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl PoolServer {
    /// `subdisk-move`: refused while the subdisk's array does not serve
    /// it in service, or while it moves already; else recorded, taken by
    /// the array over both places, and copied by a thread of its own.
    pub(super) fn move_subdisk(&self, req: &Value) -> Result<Value, String> {
        self.reap_movers();
        let plan = self.host.plan_move(req)?;
        let name = plan.planned.subdisk_name();
        if self.moving(&name) {
            return Err(format!("{name} is moving already"));
        }
        let mut begun = self.begin(vec![plan], rate_of(req), None)?;
        begun.pop().ok_or_else(|| {
            format!(
                "{name} is recorded to move, but its array no longer serves it in service: the \
                 next start takes the move up"
            )
        })
    }

    /// `pool-evacuate`: a move of every subdisk on the drive, refused
    /// whole when one has nowhere to go or is not served in service.
    pub(super) fn evacuate(&self, req: &Value) -> Result<Value, String> {
        self.reap_movers();
        let drive = req
            .get("drive")
            .and_then(Value::as_str)
            .ok_or("missing \"drive\"")?;
        let plans = self.host.plan_evacuation(drive)?;
        if plans.is_empty() {
            return Err(format!(
                "drive {drive} has no subdisk to move (none, or every one moving already)"
            ));
        }
        let moves = self.begin(plans, rate_of(req), Some(drive))?;
        Ok(json!({ "moves": moves }))
    }

    /// Records `plans` (one configuration), has each array take its
    /// subdisk over both places, and starts a mover for each.
    fn begin(
        &self,
        plans: Vec<PlannedMove>,
        rate: u64,
        leaving: Option<&str>,
    ) -> Result<Vec<Value>, String> {
        let mut served = Vec::new();
        for plan in &plans {
            served.push(self.serving(plan)?);
        }
        let moves: Vec<SubdiskMove> = plans.iter().map(|p| p.planned.clone()).collect();
        let members = self.host.begin_moves(&moves, leaving)?;
        let mut answers = Vec::new();
        for ((plan, member), served) in plans.into_iter().zip(members).zip(served) {
            let name = plan.planned.subdisk_name();
            let device = Arc::clone(&member) as Arc<dyn Member>;
            if let Err(e) = take_device(&served, plan.slot, device, None) {
                // Recorded: the next start takes it up.
                tracing::warn!(subdisk = %name, error = %e, "a subdisk move waits for the next start");
                continue;
            }
            answers.push(json!({
                "subdisk": name,
                "drive": plan.planned.drive,
                "offset_bytes": plan.planned.offset_bytes,
                "copied_bytes": plan.planned.copied_bytes,
            }));
            tracing::info!(subdisk = %name, to = %plan.planned.drive, "subdisk move begun");
            self.spawn_mover(plan, member, rate);
        }
        Ok(answers)
    }

    /// The moves the start took up (each subdisk opened over both places
    /// by the host): each gets its thread. Called by the heal thread.
    pub(crate) fn resume_moves(&self) {
        for (plan, member) in self.host.resumable_moves() {
            tracing::info!(subdisk = %plan.planned.subdisk_name(), copied_bytes = plan.planned.copied_bytes, "a subdisk move cut short goes on");
            self.spawn_mover(plan, member, crate::defaults::REBUILD_BYTES_PER_SEC);
        }
    }

    /// The array serving `plan`'s subdisk, which must be in service.
    fn serving(&self, plan: &PlannedMove) -> Result<Arc<Served>, String> {
        let served = self
            .volumes
            .named_or_plex(&plan.array)
            .ok_or_else(|| format!("{} is not served: move it offline", plan.array))?;
        let health = served.manager.engine.health();
        if health.get(plan.slot as usize) != Some(&Health::Online) {
            return Err(format!(
                "{} is not in service in {} (it is {:?}): heal or replace it rather than move it",
                plan.planned.subdisk_name(),
                plan.array,
                health.get(plan.slot as usize)
            ));
        }
        Ok(served)
    }

    fn spawn_mover(&self, plan: PlannedMove, member: Arc<MovingMember>, rate: u64) {
        let stop = Arc::new(AtomicBool::new(false));
        let (host, volumes) = (Arc::clone(&self.host), Arc::clone(&self.volumes));
        let subdisk = plan.planned.subdisk_name();
        let volume = plan.planned.volume.clone();
        let to = plan.planned.drive.clone();
        let flag = Arc::clone(&stop);
        let moving = Arc::clone(&member);
        let thread = std::thread::Builder::new()
            .name("platter-move".into())
            .spawn(move || run_mover(host.as_ref(), &volumes, &plan, &moving, rate, &flag))
            .expect("spawn a mover thread");
        self.movers.lock().expect("movers").push(Mover {
            subdisk,
            volume,
            to,
            member,
            rate,
            stop,
            thread,
        });
    }

    fn moving(&self, subdisk: &str) -> bool {
        let movers = self.movers.lock().expect("movers");
        movers
            .iter()
            .any(|m| m.subdisk == subdisk && !m.thread.is_finished())
    }

    /// The moves under way of array `array`'s volume (`v` or `v.p1`), for
    /// `status`: each subdisk, where it goes, how far its copy came.
    pub(crate) fn moves_json(&self, array: &str) -> Vec<Value> {
        let volume = platter_core::pool::split_plex_name(array).map_or(array, |(v, _)| v);
        let movers = self.movers.lock().expect("movers");
        movers
            .iter()
            .filter(|m| m.volume == volume && !m.thread.is_finished())
            .map(|m| {
                let total = m.member.size_bytes();
                let copied = m.member.copied_bytes();
                json!({
                    "subdisk": m.subdisk,
                    "to": m.to,
                    "copied_bytes": copied,
                    "total_bytes": total,
                    "percent": copied as f64 * 100.0 / total.max(1) as f64,
                    "rate_limit_bytes_per_sec": (m.rate != crate::UNLIMITED_RATE).then_some(m.rate),
                })
            })
            .collect()
    }

    /// Forgets the movers that ended.
    pub(super) fn reap_movers(&self) {
        let mut movers = self.movers.lock().expect("movers");
        let (ended, going): (Vec<Mover>, Vec<Mover>) =
            movers.drain(..).partition(|m| m.thread.is_finished());
        *movers = going;
        for m in ended {
            let _ = m.thread.join();
        }
    }

    /// Stops the movers of `volume` (every one with None) where they are,
    /// each recording how far it came, and waits for them.
    pub(crate) fn stop_movers(&self, volume: Option<&str>) {
        let mut movers = self.movers.lock().expect("movers");
        let (stopping, going): (Vec<Mover>, Vec<Mover>) = movers
            .drain(..)
            .partition(|m| volume.is_none_or(|v| m.volume == v));
        *movers = going;
        drop(movers);
        for m in &stopping {
            m.stop.store(true, Ordering::Release);
        }
        for m in stopping {
            let _ = m.thread.join();
        }
    }
}

/// The copy rate a request asks, or the rebuilds' default.
fn rate_of(req: &Value) -> u64 {
    req.get("rate")
        .and_then(Value::as_u64)
        .unwrap_or(crate::defaults::REBUILD_BYTES_PER_SEC)
}

/// The mover thread: the host copies and finishes; the array then takes
/// the new place alone (or the old one, if the move was given up).
fn run_mover(
    host: &dyn PoolHost,
    volumes: &Volumes,
    plan: &PlannedMove,
    member: &Arc<MovingMember>,
    rate: u64,
    stop: &AtomicBool,
) {
    let name = plan.planned.subdisk_name();
    let ended = host.run_move(&plan.planned, member, plan.resumed, rate, stop);
    let device = match ended {
        Ok(MoveEnd::Stopped) => {
            tracing::info!(subdisk = %name, "subdisk move stopped; it goes on at the next start");
            return;
        }
        Ok(MoveEnd::Moved(new_place)) => {
            tracing::info!(subdisk = %name, drive = %plan.planned.drive, "subdisk moved");
            new_place
        }
        Ok(MoveEnd::SourceFailed(why)) => {
            rebuild_instead(host, volumes, plan, member, &why);
            return;
        }
        Err(e) => {
            tracing::error!(subdisk = %name, error = %e, "subdisk move failed");
            let Some(drive) = member.given_up().and(host.drive_of_subdisk(&plan.planned)) else {
                return;
            };
            (Arc::clone(member.from()), drive)
        }
    };
    // The wrapper serves correctly either way; the plain subdisk is the
    // cheaper path (io_uring).
    if let Some(served) = volumes.named_or_plex(&plan.array) {
        let (device, drive) = device;
        served.manager.note_drive(device.describe(), &drive);
        if let Err(e) = take_device(&served, plan.slot, device, host.drive_delay(&drive)) {
            tracing::warn!(subdisk = %name, error = %e, "the moved subdisk stays behind its mover's wrapper until the next start");
        }
    }
}

/// The old place failed a read mid-copy: an array whose redundancy
/// covers the subdisk rebuilds it at the new place (a heal onto it);
/// one without gives the move up, the subdisk staying where it is.
fn rebuild_instead(
    host: &dyn PoolHost,
    volumes: &Volumes,
    plan: &PlannedMove,
    member: &MovingMember,
    why: &str,
) {
    let name = plan.planned.subdisk_name();
    let Some(served) = volumes.named_or_plex(&plan.array) else {
        return;
    };
    let m = &served.manager;
    if !super::heal::rebuilds_without(m, Some(plan.slot)) {
        tracing::error!(subdisk = %name, error = %why, "subdisk move stopped: its old place failed a read and its plex has nothing to rebuild it from; it stays where it is, the move recorded");
        return;
    }
    tracing::warn!(subdisk = %name, error = %why, "the old place failed a read mid-move: the subdisk is rebuilt at its new place from the others");
    let placed = host
        .rebuild_move(&plan.planned, member)
        .and_then(|(device, drive)| {
            m.note_drive(device.describe(), &drive);
            m.replace_slot(plan.slot, device)
        });
    if let Err(e) = placed {
        tracing::error!(subdisk = %name, error = %e, "the subdisk could not be rebuilt at its new place");
    }
}

/// Slot `slot` of `served` served by `device` from now on: the engine
/// paused and idle, no label being written, so that no write lands on
/// the device it replaces after this.
fn take_device(
    served: &Served,
    slot: u32,
    device: Arc<dyn Member>,
    delay: Option<platter_io::aio::Delay>,
) -> Result<(), String> {
    let m = &served.manager;
    m.engine.pause();
    m.engine.wait_idle();
    let health = m.engine.health();
    let out = if health.get(slot as usize) == Some(&Health::Online) {
        m.meta
            .between_writes(|| m.engine.swap_device(slot, device, delay));
        Ok(())
    } else {
        Err(format!(
            "member {slot} of {} is no longer in service",
            served.name()
        ))
    };
    m.engine.resume();
    out
}
