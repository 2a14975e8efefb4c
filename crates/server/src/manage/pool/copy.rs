//! `volume convert --control` of a volume of one plex: the volume's bytes
//! copied into a new plex of another organisation while it serves, then
//! the new plex's array serves it alone (docs/pools.md "Converting a
//! volume of one plex").
//!
//! A volume of one plex is served by its array's engine, which has no
//! mirror above it to take a second plex. So the export is handed, for
//! the copy's length, to a front engine of one member: a [`MovingMember`]
//! over the old array and the new (each a [`PlexMember`]), which reads
//! from the old, writes to both, and lets a copier thread fill the new
//! one range by range behind the volume's writes. Once the copy is done
//! and recorded, the export is handed to the new array's engine, and the
//! old array is stopped and its labels zeroed. Until that configuration
//! the old plex holds every byte: a stop or a crash before it leaves the
//! volume on its old plex, and the copy begins again at the next start.

use super::{stop_array, PoolServer};
use crate::engine::Engine;
use crate::plex::PlexMember;
use crate::served::Served;
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::level::{Level, ParityLayout};
use platter_core::volume::{Health, Volume};
use platter_io::moving::MovingMember;
use platter_io::Member;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

/// The largest chunk of the front engine's one-member concat: a request
/// is handed to the member in pieces no larger.
const FRONT_CHUNK_BYTES_MAX: u64 = 1 << 20;

/// A copy of a volume into its new plex: under way, ended, or one that
/// could not begin (`running` none), with why it cannot go on.
pub(crate) struct Copier {
    running: Option<Running>,
    /// Why the copy cannot go on, once it ended so: nothing is tried
    /// again until `--abort` or the next start.
    failed: Option<String>,
}

struct Running {
    member: Arc<MovingMember>,
    /// The checkpoint it began from: what lies below is compared, not
    /// copied again.
    resumed_from_bytes: u64,
    /// The volume's own array (its plex), which served the export before.
    old: Arc<Served>,
    /// The new plex's array, filled by the copy.
    new: Arc<Served>,
    stop: Arc<AtomicBool>,
    /// The copy: Ok(true) done and recorded, Ok(false) stopped.
    thread: Option<JoinHandle<Result<bool, String>>>,
}

impl PoolServer {
    /// `volume-convert` of a volume of one plex: refused while it is
    /// reshaped or converted already; else recorded and begun.
    pub(super) fn convert_by_copy(
        &self,
        served: &Arc<Served>,
        req: &Value,
    ) -> Result<Value, String> {
        let volume = served.name().to_string();
        if req.get("abort").and_then(Value::as_bool) == Some(true) {
            return self.abort_copy(&volume);
        }
        if self.host.copies().iter().any(|(v, _)| *v == volume) {
            return Err(format!(
                "volume {volume} is being converted already; one at a time"
            ));
        }
        if served.manager.engine.reshape_progress().is_some() {
            return Err(format!(
                "volume {volume} is being reshaped: convert it once the reshape is done"
            ));
        }
        let drives = self.host.begin_copy(req, served.io.size_bytes())?;
        if let Err(e) = self.begin_copy(served) {
            tracing::warn!(volume, error = %e, "the convert is recorded; it begins at the next start");
            return Err(format!(
                "volume {volume}: the convert is recorded but could not begin ({e}); the next \
                 start begins it, or `--abort` gives it up"
            ));
        }
        tracing::info!(volume, "volume being converted by copy into a new plex");
        Ok(json!({
            "volume": volume,
            "plex": format!("{volume}.p0"),
            "level": req.get("level"),
            "drives": drives,
        }))
    }

    /// The new plex labelled and served, the export handed to a front
    /// engine over both arrays, and the copier started.
    fn begin_copy(&self, served: &Arc<Served>) -> Result<(), String> {
        let volume = served.name().to_string();
        let resumed_from_bytes = self
            .host
            .copies()
            .into_iter()
            .find(|(v, _)| *v == volume)
            .map_or(0, |(_, copied)| copied);
        // The volume's size as its clients see it: its array may hold more.
        let size_bytes = served.io.size_bytes();
        let made = self.host.make_copy_plex(&volume, size_bytes)?;
        // Its manager answers for the volume once the copy ends: the
        // recording the clients' requests go to is the export's.
        let recorder = Some(Arc::clone(&served.io.recorder));
        let new = self.serve_plex_recording(made, recorder)?;
        let (front, member) = match hand_to_front(served, &new, size_bytes) {
            Ok(both) => both,
            Err(e) => {
                stop_array(&new);
                return Err(e);
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let thread = self.spawn_copier(&volume, (front, Arc::clone(&member)), Arc::clone(&stop));
        let copier = Copier {
            running: Some(Running {
                member,
                resumed_from_bytes,
                old: Arc::clone(served),
                new,
                stop,
                thread: Some(thread),
            }),
            failed: None,
        };
        self.copiers.lock().expect("copiers").insert(volume, copier);
        Ok(())
    }

    fn spawn_copier(
        &self,
        volume: &str,
        (front, member): (Arc<Engine>, Arc<MovingMember>),
        stop: Arc<AtomicBool>,
    ) -> JoinHandle<Result<bool, String>> {
        let host = Arc::clone(&self.host);
        let rate = self.config.rebuild_rate_bytes_per_sec;
        let volume = volume.to_string();
        std::thread::Builder::new()
            .name("platter-copy".into())
            .spawn(move || {
                if !host.run_copy(&volume, &member, rate, &stop)? {
                    return Ok(false);
                }
                finish_copy(host.as_ref(), &volume, &front, &member)?;
                Ok(true)
            })
            .expect("spawn a copier thread")
    }

    /// Each copy looked at by the heal thread: one whose copier ended is
    /// ended in turn; one the pool records with none (a start's) begins.
    pub(super) fn tend_copies(&self) {
        let known: Vec<String> = self
            .copiers
            .lock()
            .expect("copiers")
            .keys()
            .cloned()
            .collect();
        for volume in &known {
            self.reap_copier(volume);
        }
        for (volume, _) in self.host.copies() {
            if self.copiers.lock().expect("copiers").contains_key(&volume) {
                continue;
            }
            let Some(served) = self.volumes.named(&volume) else {
                continue;
            };
            if let Err(e) = self.begin_copy(&served) {
                tracing::warn!(volume, error = %e, "the convert by copy cannot begin now");
                let failed = Copier {
                    running: None,
                    failed: Some(e),
                };
                self.copiers
                    .lock()
                    .expect("copiers")
                    .insert(volume.clone(), failed);
            }
        }
    }

    /// Ends volume `volume`'s copy if its copier has: the new plex serves
    /// the export once the copy is recorded done; one that failed hands
    /// the export back to the volume's plex and waits for `--abort`.
    fn reap_copier(&self, volume: &str) {
        let mut copiers = self.copiers.lock().expect("copiers");
        let Some(c) = copiers.get_mut(volume) else {
            return;
        };
        let Some(r) = c.running.as_mut() else {
            return;
        };
        if !r.thread.as_ref().is_some_and(|t| t.is_finished()) {
            return;
        }
        let ended = r.join();
        if ended == Ok(true) {
            let r = copiers
                .remove(volume)
                .and_then(|c| c.running)
                .expect("found above");
            drop(copiers);
            self.switch_to_new(volume, r);
        } else if let Err(e) = ended {
            tracing::error!(volume, error = %e, "the convert by copy stopped: the volume serves from its plex; `volume convert --abort` gives it up");
            r.hand_back();
            c.failed = Some(e);
        }
    }

    /// The copy done and recorded: the new plex's array serves the export
    /// and is the volume's; the old array stops and its labels go.
    fn switch_to_new(&self, volume: &str, r: Running) {
        let io = Arc::clone(&r.old.io);
        io.swap_engine(Arc::clone(&r.new.manager.engine));
        let thread = r.new.upkeep_thread.lock().expect("upkeep thread").take();
        let now = Arc::new(Served {
            io,
            manager: Arc::clone(&r.new.manager),
            alerts: Arc::clone(&r.new.alerts),
            upkeep_thread: Mutex::new(thread),
            plexes: RwLock::new(Vec::new()),
        });
        self.volumes.replace(now);
        stop_array(&r.old);
        self.host.erase_copied(volume);
        tracing::info!(
            volume,
            "volume converted: its new plex serves it, the old plex's subdisks are free"
        );
    }

    /// `volume convert --abort` of a volume of one plex: the copy stopped,
    /// the export back on the volume's plex, the new plex's array stopped
    /// and dropped from the configuration.
    fn abort_copy(&self, volume: &str) -> Result<Value, String> {
        if !self.host.copies().iter().any(|(v, _)| v == volume) {
            return Err(format!("volume {volume} has no convert under way"));
        }
        let c = self.copiers.lock().expect("copiers").remove(volume);
        if let Some(mut r) = c.and_then(|c| c.running) {
            r.stop.store(true, Ordering::Release);
            if r.join() == Ok(true) {
                // Ended and recorded while asked: there is nothing to give up.
                self.switch_to_new(volume, r);
                return Err(format!(
                    "volume {volume}: the convert ended before it could be given up; its new \
                     plex serves it"
                ));
            }
            r.hand_back();
        }
        self.host.abort_copy(volume)?;
        tracing::info!(volume, "convert by copy given up");
        Ok(json!({ "volume": volume, "plex": format!("{volume}.p0"), "copy": true }))
    }

    /// Every copy stopped where it is (a stop of the server): each volume
    /// served by its plex again, the new plexes' arrays stopped, and the
    /// next start copies again; a copy that ended and was recorded
    /// meanwhile is finished instead (its new plex is the volume's).
    pub(super) fn stop_copies(&self) {
        let copiers = std::mem::take(&mut *self.copiers.lock().expect("copiers"));
        for (volume, c) in copiers {
            let Some(mut r) = c.running else { continue };
            r.stop.store(true, Ordering::Release);
            if r.join() == Ok(true) {
                self.switch_to_new(&volume, r);
            } else {
                r.hand_back();
            }
        }
    }

    /// The copy of volume `volume` for `status`: how far it came, or why
    /// it stopped.
    pub(crate) fn copy_json(&self, volume: &str) -> Option<Value> {
        let copiers = self.copiers.lock().expect("copiers");
        let c = copiers.get(volume)?;
        let (copied, total, resumed) = c.running.as_ref().map_or((0, 0, 0), |r| {
            let m = &r.member;
            (m.copied_bytes(), m.size_bytes(), r.resumed_from_bytes)
        });
        Some(json!({
            "to": format!("{volume}.p1"),
            "copied_bytes": copied,
            "total_bytes": total,
            "resumed_from_bytes": resumed,
            "percent": copied as f64 * 100.0 / total.max(1) as f64,
            "failed": c.failed,
        }))
    }
}

impl Running {
    /// The copier's end, waited for (once; Ok(false) after).
    fn join(&mut self) -> Result<bool, String> {
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err("the copier panicked".into())),
            None => Ok(false),
        }
    }

    /// The volume's plex serves the export again and the new plex's
    /// array stops (once: a failed copy has done it already).
    fn hand_back(&self) {
        let serving = self.old.io.engine();
        if Arc::ptr_eq(&serving, &self.old.manager.engine) {
            return;
        }
        self.old
            .io
            .swap_engine(Arc::clone(&self.old.manager.engine));
        stop_array(&self.new);
    }
}

/// `served`'s export handed to a front engine over its own array and
/// `new`, each shown `size_bytes` long; returns the front and its member.
fn hand_to_front(
    served: &Served,
    new: &Served,
    size_bytes: u64,
) -> Result<(Arc<Engine>, Arc<MovingMember>), String> {
    let volume = served.name();
    let held = new.manager.engine.size_bytes();
    if held < size_bytes {
        return Err(format!(
            "the new plex holds {held} bytes, fewer than the volume's {size_bytes}"
        ));
    }
    let from = PlexMember::bounded(
        Arc::clone(&served.manager.engine),
        format!("{volume}.p0"),
        size_bytes,
    );
    let to = PlexMember::bounded(
        Arc::clone(&new.manager.engine),
        format!("{volume}.p1"),
        size_bytes,
    );
    let member = Arc::new(MovingMember::new(Arc::new(from), Arc::new(to)));
    let front = front_engine(&served.manager.engine, size_bytes, Arc::clone(&member))?;
    let was = served.io.swap_engine(Arc::clone(&front));
    if !Arc::ptr_eq(&was, &served.manager.engine) {
        // Another engine than the volume's own served it: leave it be.
        served.io.swap_engine(was);
        return Err(format!(
            "volume {volume} is not served by its own array now"
        ));
    }
    Ok((front, member))
}

/// The copy done: with the front engine paused and idle (no write half
/// way between the places), the new plex flushed and whole, one
/// configuration makes it the volume's, and from then on every I/O goes
/// to it alone. A new plex that failed a write is not recorded: the old
/// plex, which took every write first, stays the volume's.
fn finish_copy(
    host: &dyn super::PoolHost,
    volume: &str,
    front: &Engine,
    member: &MovingMember,
) -> Result<(), String> {
    front.pause();
    front.wait_idle();
    member.flush_new_place();
    let ended = match member.given_up() {
        Some(why) => Err(format!("the new plex failed: {why}")),
        None => host.finish_copy(volume).map(|()| member.switch_to_new()),
    };
    front.resume();
    ended
}

/// An engine of one member, `member`, serving the first `size_bytes` of
/// `old`'s volume (its I/O layer, its limits): a concat at data offset 0
/// in chunks that divide its size.
fn front_engine(
    old: &Engine,
    size_bytes: u64,
    member: Arc<MovingMember>,
) -> Result<Arc<Engine>, String> {
    let chunk_bytes = gcd(size_bytes, FRONT_CHUNK_BYTES_MAX);
    let geometry = Geometry::new(GeometrySpec {
        level: Level::Concat,
        parity_layout: ParityLayout::LeftSymmetric,
        copies: 1,
        interleave_bytes: chunk_bytes,
        data_offset_bytes: 0,
        member_data_bytes: vec![size_bytes],
    })
    .map_err(|e| format!("the copy's front: {e}"))?;
    assert_eq!(geometry.volume_size_bytes(), size_bytes);
    let limits = old.with_volume(|v| v.limits().clone());
    let volume = Volume::new(geometry, vec![Health::Online], limits);
    let member: Arc<dyn Member> = member;
    Ok(Engine::new(volume, vec![Some(member)], old.io()))
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
