//! Live management of a served volume: the operations behind the control
//! socket (`platter status|fail|remove|replace|add-spare|check|repair|
//! rebuild-rate|read-policy|stats --control PATH`), each a JSON request and a
//! JSON answer on one line.

pub(crate) mod grow;
pub mod leftout;
pub(crate) mod newdevice;
pub mod pool;
pub(crate) mod readd;
pub(crate) mod reconnect;
pub mod record;
pub(crate) mod scrub;

use crate::engine::meta::Meta;
use crate::engine::upkeep::Upkeep;
use crate::engine::Engine;
use crate::manage::leftout::LeftOutMember;
use crate::manage::newdevice::{names_device, NewDevice};
use crate::observe::alerts::{Alert, EventKind};
use platter_core::geometry::Geometry;
use platter_core::label::{SlotState, VolumeState};
use platter_core::volume::{CheckReport, Health, Maintenance, Reply, Request};
use platter_io::Member;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Mismatches a check or repair lists one by one (`mismatches`); the
/// counts are exact beyond it.
const MISMATCHES_LISTED: usize = 10_000;

/// A control request larger than this is refused.
const REQUEST_MAX_BYTES: u64 = 64 * 1024;
/// Stripes per scrub step.
const SCRUB_STEP_BYTES: u64 = 8 << 20;

pub struct Manager {
    pub engine: Arc<Engine>,
    pub meta: Arc<Meta>,
    pub upkeep: Arc<Upkeep>,
    pub spares: Mutex<Vec<Arc<dyn Member>>>,
    /// Removed slots and the name of the device that left each, so that
    /// `replace OLD-PATH NEW` still finds the slot after `remove`.
    pub removed: Mutex<BTreeMap<u32, String>>,
    /// Held while a slot's device changes (remove, replace), so that two
    /// operators (or an operator and a spare taking over) cannot interleave
    /// the check of a slot's health with the change of its device.
    pub slot_changes: Mutex<()>,
    /// `serve --rotational`: slots whose rotation the operator stated.
    pub rotational: BTreeMap<u32, bool>,
    /// Remote members away and expected back, by URI (`reconnect.rs`).
    pub away: Mutex<BTreeMap<String, crate::manage::reconnect::Away>>,
    /// Remote members whose connection broke are disconnected and tried
    /// again (`readd.rs`); off (`--no-reconnect`), they are failed.
    pub reconnect: bool,
    /// A remote member disconnected this long is failed for good
    /// (`--member-timeout`).
    pub member_timeout: Duration,
    /// How devices that join while serving are opened.
    pub open_options: platter_io::OpenOptions,
    /// The reconnect try running, if any (`readd.rs`).
    pub reconnecting: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Set at shutdown: no more reconnect tries.
    pub stopping: std::sync::atomic::AtomicBool,
    /// The clients' requests recorded (`record-start`, `record-stop`).
    pub recorder: Arc<crate::manage::record::Recorder>,
    /// The members the volume started without, by slot, until a device
    /// takes the slot again (`status` says why each is out).
    pub left_out: Mutex<BTreeMap<u32, LeftOutMember>>,
    /// Slots whose member is out on purpose (a pool's detached plex), by
    /// slot: the command that brings it back, for `status` to say instead
    /// of `re-add`.
    pub detached: Mutex<BTreeMap<u32, String>>,
    /// The control socket's path, for the commands `status` suggests.
    pub control_path: Option<String>,
    /// Devices set aside at start: their slot went to another member.
    pub superseded: Vec<crate::manage::leftout::SupersededDevice>,
    /// A pool's drive of each subdisk, by member name (`observe::drives`):
    /// the server's map at the start, shared by its volumes until a
    /// replaced drive's subdisks join one (`note_drive`).
    pub member_drives: Mutex<Arc<std::collections::HashMap<String, String>>>,
}

/// Why no member is rebuilt while the volume is reshaped: a rebuild
/// writes one layout's stripes, and the volume is in two.
pub(crate) const RESHAPING_NO_REBUILD: &str =
    "the volume is being reshaped: no member is rebuilt until the reshape ends (a failed member \
     stays out; replace it once `platter status` shows no reshape)";

fn health_name(h: Health) -> &'static str {
    match h {
        Health::Online => "active",
        Health::Faulty => "faulty",
        Health::Missing => "missing",
        Health::Rebuilding => "rebuilding",
    }
}

/// The volume's state as `status` shows it: `failed` when the members in
/// use no longer hold all of its data (a member being rebuilt counts as
/// lost: it holds nothing above its cursor), otherwise what the labels say.
pub fn live_state(geometry: &Geometry, health: &[Health]) -> &'static str {
    if geometry.serves_all(|m| health[m as usize] == Health::Online) {
        Meta::state_for(health, VolumeState::Clean).name()
    } else {
        "failed"
    }
}

/// `status`'s `filesystem`: what mkfs should be told (core's
/// `fsalign`), for the live and the offline status alike.
pub fn filesystem_json(geometry: &Geometry) -> Value {
    use platter_core::fsalign::{alignment, FsAlignment};
    match alignment(geometry) {
        FsAlignment::Striped {
            unit_bytes,
            units,
            xfs,
            ext4,
        } => json!({
            "stripe_unit_bytes": unit_bytes,
            "stripe_width_bytes": unit_bytes * units,
            "xfs": xfs,
            "ext4": ext4,
        }),
        FsAlignment::None(why) => json!({ "none": why }),
    }
}

/// A layout as status and the reshape commands show it: level, members,
/// interleave, parity layout, size.
pub fn layout_json(g: &Geometry) -> Value {
    json!({
        "level": g.level().name(),
        "members": g.members(),
        "interleave_bytes": g.interleave_bytes(),
        "layout": g.spec().parity_layout.name(),
        "size_bytes": g.volume_size_bytes(),
    })
}

impl Manager {
    /// The live status: the labels' facts (`describe.rs`, as the offline
    /// status shows them) and what only the running server knows: each
    /// member's health, the work in progress, spares, the recording.
    pub fn status(&self) -> Value {
        let label = self.meta.label();
        let health = self.engine.health();
        let (geometry, bitmap) = self
            .engine
            .with_volume(|v| (v.geometry().clone(), v.intent_status()));
        let mut v = crate::observe::describe::volume_fields(&label, &geometry);
        let online = health.iter().filter(|h| **h == Health::Online).count();
        let live = json!({
            // What clients are told: during a reshape, the size it began with.
            "size_bytes": self.engine.size_bytes(),
            "state": live_state(&geometry, &health),
            "members_online": online,
            "read_policy": (geometry.copies() > 1).then(|| self.read_policy_status()),
            "members": self.members_status(&label, &geometry, &health),
            "left_out": self.left_out_status(&label, &health),
            "superseded": self.superseded_status(&label),
            "member_timeout_seconds": self.member_timeout.as_secs(),
            "unreachable": self.unplaced_status(),
            "spares": self.spares.lock().expect("spares").iter().map(|m| m.describe().to_string()).collect::<Vec<_>>(),
            "rebuild": self.rebuild_status(&geometry),
            "reshape": self.reshape_status(),
            "recording": self.recorder.status(),
            "scrub": self.upkeep.scrubber.status(geometry.stripes()),
            "resync": self.resync_status(&geometry),
            "bitmap": bitmap.map(|b| {
                let mut m = crate::observe::describe::bitmap_fields(&b.layout, &geometry, b.dirty_regions);
                m.insert("unsynced_regions".into(), json!(b.unsynced_regions));
                m.insert("missed_regions".into(), json!(b.missed_regions));
                m.insert("rounds".into(), json!(b.rounds));
                m.insert(
                    "resync_regions_at_start".into(),
                    json!(self.upkeep.resync_regions.load(Ordering::SeqCst)),
                );
                m
            }),
        });
        if let Value::Object(live) = live {
            v.extend(live);
        }
        Value::Object(v)
    }

    /// Each slot: the label's facts, its health, its device, and the
    /// event count of the label it holds (the volume's for a member in
    /// use; for one that left, the count before the write that recorded
    /// its leaving).
    fn members_status(
        &self,
        label: &platter_core::label::Label,
        geometry: &Geometry,
        health: &[Health],
    ) -> Vec<Value> {
        let members = self.engine.members();
        (0..geometry.members())
            .map(|s| {
                let i = s as usize;
                let state = if self.is_disconnected(s) {
                    "disconnected"
                } else if label.slots[i].state == SlotState::Removed
                    && matches!(health[i], Health::Faulty | Health::Missing)
                {
                    "removed"
                } else {
                    health_name(health[i])
                };
                let events = match health[i] {
                    Health::Online | Health::Rebuilding => Some(label.event_counter),
                    _ => label.slots[i].left_at_events.checked_sub(1),
                };
                let mut m = crate::observe::describe::member_fields(label, geometry, s);
                m.insert("state".into(), json!(state));
                m.insert(
                    "path".into(),
                    json!(members[i].as_ref().map(|m| m.describe().to_string())),
                );
                m.insert("events".into(), json!(events));
                m.insert("away_seconds".into(), json!(self.away_seconds(s)));
                Value::Object(m)
            })
            .collect()
    }

    /// The rebuild limit for status: `null` when unlimited.
    pub(crate) fn rate_limit_json(&self) -> Value {
        match self.upkeep.rate_bytes_per_sec.load(Ordering::Relaxed) {
            crate::engine::upkeep::UNLIMITED => Value::Null,
            rate => json!(rate),
        }
    }

    /// How long moving `bytes` takes at the rate limit; `null` when
    /// unlimited (the members' speed decides).
    pub(crate) fn seconds_at_rate_limit(&self, bytes: u64) -> Value {
        match self.upkeep.rate_bytes_per_sec.load(Ordering::Relaxed) {
            crate::engine::upkeep::UNLIMITED => Value::Null,
            rate => json!(bytes.div_ceil(rate.max(1))),
        }
    }

    fn rebuild_status(&self, geometry: &Geometry) -> Option<Value> {
        let p = self.engine.with_volume(|v| v.rebuild_progress())?;
        let rate = self.upkeep.last_rate_bytes_per_sec.load(Ordering::Relaxed);
        let left_bytes = (p.stripes - p.cursor_stripe) * geometry.stripe_data_bytes();
        Some(json!({
            "member": p.member,
            "cursor_stripe": p.cursor_stripe,
            "stripes": p.stripes,
            "percent": 100.0 * p.cursor_stripe as f64 / p.stripes.max(1) as f64,
            "rate_bytes_per_sec": rate,
            "rate_limit_bytes_per_sec": self.rate_limit_json(),
            "eta_seconds": left_bytes.checked_div(rate).unwrap_or(0),
        }))
    }

    fn reshape_status(&self) -> Option<Value> {
        let p = self.engine.reshape_progress()?;
        let rate = self
            .upkeep
            .reshape_rate_bytes_per_sec
            .load(Ordering::Relaxed);
        let left_bytes = p.total_bytes.saturating_sub(p.position_bytes);
        Some(json!({
            "from": layout_json(&p.old),
            "position_bytes": p.position_bytes,
            "durable_bytes": p.durable_bytes,
            "total_bytes": p.total_bytes,
            "percent": 100.0 * p.position_bytes as f64 / p.total_bytes.max(1) as f64,
            "finished": p.finished,
            "stuck": p.stuck,
            "rate_bytes_per_sec": rate,
            "rate_limit_bytes_per_sec": self.rate_limit_json(),
            "eta_seconds": left_bytes.checked_div(rate).unwrap_or(0),
        }))
    }

    fn resync_status(&self, geometry: &Geometry) -> Option<Value> {
        let (cursor, stripes) = self.upkeep.resync_progress()?;
        let rate = self
            .upkeep
            .resync_rate_bytes_per_sec
            .load(Ordering::Relaxed);
        let left_bytes = stripes.saturating_sub(cursor) * geometry.stripe_data_bytes();
        Some(json!({
            "cursor_stripe": cursor,
            "stripes": stripes,
            "percent": 100.0 * cursor as f64 / stripes.max(1) as f64,
            "rewritten_stripes": self.upkeep.resync_mismatched_stripes.load(Ordering::SeqCst),
            "rate_bytes_per_sec": rate,
            "eta_seconds": left_bytes.checked_div(rate).unwrap_or(0),
            "regions": self.upkeep.resync_by_region.load(Ordering::SeqCst)
                .then(|| self.upkeep.resync_regions.load(Ordering::SeqCst)),
        }))
    }

    /// The members out of use (a disconnected one is expected back on its
    /// own), why each is out, and the command that brings it back.
    fn left_out_status(&self, label: &platter_core::label::Label, health: &[Health]) -> Value {
        let members = self.engine.members();
        let known = self.left_out.lock().expect("left out");
        (0..health.len() as u32)
            .filter(|&s| matches!(health[s as usize], Health::Faulty | Health::Missing))
            .filter(|&s| !self.is_disconnected(s))
            .map(|s| {
                let entry = &label.slots[s as usize];
                let m = known
                    .get(&s)
                    .filter(|m| m.member_uuid == entry.member_uuid)
                    .cloned()
                    .unwrap_or_else(|| {
                        let path = members[s as usize]
                            .as_ref()
                            .map(|d| d.describe().to_string());
                        LeftOutMember::while_serving(label, s, path)
                    });
                let mut j = m.json(label.event_counter, self.control_path.as_deref());
                if let Some(attach) = self.detached.lock().expect("detached").get(&s) {
                    j["reason"] = json!("detached");
                    j["detail"] = json!("its plex is detached (`platter plex detach`)");
                    j["remedy"] = json!(attach);
                }
                j
            })
            .collect()
    }

    /// The devices set aside at start, with where the member now in each
    /// one's slot is.
    fn superseded_status(&self, label: &platter_core::label::Label) -> Value {
        let members = self.engine.members();
        self.superseded
            .iter()
            .map(|d| {
                let slot = d.slot as usize;
                let by_path = members
                    .get(slot)
                    .and_then(Option::as_ref)
                    .filter(|_| label.slots.get(slot).map(|e| e.member_uuid) == d.by_member_uuid)
                    .map(|m| m.describe().to_string());
                d.json(by_path.as_deref())
            })
            .collect()
    }

    /// A device took `slot` again: what was said of its start no longer
    /// holds.
    pub(crate) fn forget_left_out(&self, slot: u32) {
        self.left_out.lock().expect("left out").remove(&slot);
        self.detached.lock().expect("detached").remove(&slot);
    }

    /// A slot named by number or by its device's path.
    fn slot_of(&self, name: &str) -> Result<u32, String> {
        let members = self.engine.members();
        if let Ok(n) = name.parse::<u32>() {
            if (n as usize) < members.len() {
                return Ok(n);
            }
        }
        members
            .iter()
            .position(|m| m.as_ref().is_some_and(|m| names_device(m.describe(), name)))
            .map(|i| i as u32)
            .or_else(|| {
                let removed = self.removed.lock().expect("removed");
                removed
                    .iter()
                    .find(|(_, n)| names_device(n, name))
                    .map(|(s, _)| *s)
            })
            .ok_or_else(|| match name.parse::<u32>() {
                Ok(n) => format!(
                    "there is no slot {n} ({})",
                    platter_core::balance::slots_are(members.len() as u32)
                ),
                Err(_) => format!("no member {name} (give a slot number or a member's path)"),
            })
    }

    /// Takes a member out of the volume for good (mdadm's --remove): only a
    /// faulty or missing one, whose device is then closed so that it can be
    /// pulled or reused; the slot stays empty ("removed") until `replace`
    /// fills it, also after a restart. A spare is removed by its path.
    pub fn remove(&self, name: &str) -> Result<Value, String> {
        {
            let mut spares = self.spares.lock().expect("spares");
            if let Some(i) = spares.iter().position(|m| names_device(m.describe(), name)) {
                drop(spares.remove(i));
                tracing::info!(spare = %name, "spare removed");
                return Ok(json!({ "removed_spare": name }));
            }
        }
        let _changing = self.slot_changes.lock().expect("slot changes");
        let slot = self.slot_of(name)?;
        let health = self.engine.health()[slot as usize];
        let device = self.engine.members()[slot as usize]
            .as_ref()
            .map(|m| m.describe().to_string());
        let shown = device.as_deref().map_or_else(
            || format!("member {slot}"),
            |d| format!("member {slot} ({d})"),
        );
        match health {
            Health::Online | Health::Rebuilding => {
                return Err(format!(
                    "{shown} is {}: fail it first (platter fail --control PATH {slot})",
                    health_name(health)
                ))
            }
            Health::Faulty | Health::Missing => {}
        }
        if self.meta.label().slots[slot as usize].state == SlotState::Removed && device.is_none() {
            return Err(format!("member {slot} is already removed"));
        }
        // The engine does not address a faulty or missing slot; an I/O it
        // issued just before the failure fails harmlessly once the device
        // is gone (`Engine::perform`).
        let taken = self.engine.take_member(slot);
        self.meta.record(|l| {
            l.slots[slot as usize].state = SlotState::Removed;
        });
        drop(taken);
        if let Some(d) = &device {
            self.removed
                .lock()
                .expect("removed")
                .insert(slot, d.clone());
        }
        tracing::info!(
            slot,
            device = device.as_deref().unwrap_or("-"),
            "member removed"
        );
        self.engine.alert(
            Alert::new(
                EventKind::MemberRemoved,
                "taken out of the volume (platter remove)",
            )
            .member(slot, device.clone()),
        );
        Ok(json!({ "removed": slot, "device": device }))
    }

    /// Marks a member faulty. A failure that would leave the volume unable
    /// to serve all of its data (the last copy of a chunk, more members
    /// than the parity covers) is refused unless `force`: clients would get
    /// EIO where they had data.
    pub fn fail(&self, name: &str, force: bool) -> Result<Value, String> {
        let slot = self.slot_of(name)?;
        let _changing = self.slot_changes.lock().expect("slot changes");
        let health = self.engine.health();
        match health[slot as usize] {
            // Failing the member being rebuilt stops its rebuild (as
            // `mdadm --fail` does to a recovering spare); it held no data
            // the volume needs, since it was not yet counted as online.
            Health::Online | Health::Rebuilding => {}
            h @ (Health::Faulty | Health::Missing) => {
                return Ok(json!({ "failed": slot, "already": health_name(h) }))
            }
        }
        let geometry = self.engine.with_volume(|v| v.geometry().clone());
        let serves_after =
            geometry.serves_all(|m| m != slot && health[m as usize] == Health::Online);
        if !serves_after && !force {
            let out: Vec<String> = (0..geometry.members())
                .filter(|&m| health[m as usize] != Health::Online)
                .map(|m| format!("{m} ({})", health_name(health[m as usize])))
                .collect();
            let already = if out.is_empty() {
                String::new()
            } else {
                format!(" (already out: {})", out.join(", "))
            };
            return Err(format!(
                "failing member {slot} would leave the {} volume unable to serve all of its \
                 data{already}: clients would get I/O errors; use --force to fail it anyway",
                geometry.level()
            ));
        }
        self.engine
            .mark_faulty(slot, "failed by the operator".into());
        Ok(json!({ "failed": slot, "volume_serves_all": serves_after }))
    }

    pub fn add_spare(&self, new: &NewDevice) -> Result<Value, String> {
        let device = self.open_new_device(new)?;
        self.spares.lock().expect("spares").push(device);
        self.replace_from_spares();
        Ok(json!({ "spare": new.path }))
    }

    pub fn replace(&self, old: &str, new: &NewDevice) -> Result<Value, String> {
        let slot = self.slot_of(old)?;
        let device = self.open_new_device(new)?;
        self.replace_slot(slot, device)?;
        Ok(json!({ "replaced": slot, "device": new.path }))
    }

    /// Counts member `name`'s I/O as drive `drive`'s from now on.
    pub(crate) fn note_drive(&self, name: &str, drive: &str) {
        let mut map = self.member_drives.lock().expect("member drives");
        Arc::make_mut(&mut map).insert(name.to_string(), drive.to_string());
    }

    pub(crate) fn replace_slot(&self, slot: u32, device: Arc<dyn Member>) -> Result<(), String> {
        let _changing = self.slot_changes.lock().expect("slot changes");
        let health = self.engine.health()[slot as usize];
        if health == Health::Rebuilding {
            return Err(format!("member {slot} is already being rebuilt"));
        }
        if self.engine.with_volume(|v| v.rebuild_progress()).is_some() {
            return Err("another member is being rebuilt; one at a time".into());
        }
        if self.engine.reshape_progress().is_some() {
            return Err(RESHAPING_NO_REBUILD.into());
        }
        if health == Health::Online {
            self.engine
                .mark_faulty(slot, "replaced by the operator".into());
        }
        self.note_rotational(slot, &device);
        self.engine.set_member(slot, device);
        self.forget_left_out(slot);
        self.removed.lock().expect("removed").remove(&slot);
        self.engine
            .with_volume(|v| v.start_rebuild(slot, 0))
            .map_err(|e| e.to_string())?;
        let member_uuid = *uuid::Uuid::new_v4().as_bytes();
        self.meta.record(|l| {
            l.slots[slot as usize].member_uuid = member_uuid;
            l.slots[slot as usize].state = SlotState::Rebuilding;
            l.slots[slot as usize].left_at_events = 0;
            l.state = VolumeState::Rebuilding;
            l.rebuild_checkpoint_bytes = 0;
        });
        tracing::info!(slot, "rebuild started");
        Ok(())
    }

    /// A lost member and a spare at hand: put the spare in (called by the
    /// upkeep thread and after add-spare).
    pub fn replace_from_spares(&self) {
        if self.engine.with_volume(|v| v.rebuild_progress()).is_some() {
            return;
        }
        let health = self.engine.health();
        // A disconnected member is expected back: a spare waits until it
        // has been away longer than the member timeout.
        let Some(slot) = (0..health.len()).find(|&s| {
            matches!(health[s], Health::Faulty | Health::Missing) && self.spare_may_take(s as u32)
        }) else {
            return;
        };
        let Some(spare) = self.spares.lock().expect("spares").pop() else {
            return;
        };
        let name = spare.describe().to_string();
        match self.replace_slot(slot as u32, spare) {
            Ok(()) => {
                tracing::info!(slot, spare = %name, "spare took over");
                self.engine.alert(
                    Alert::new(
                        EventKind::SpareActive,
                        "took the failed member's place; rebuilding",
                    )
                    .member(slot as u32, Some(name)),
                );
            }
            Err(e) => tracing::error!(slot, error = %e, "spare could not take over"),
        }
    }

    /// A check or repair of the stripes holding volume bytes `range`
    /// (offset, length; the whole volume without one).
    pub fn scrub(&self, action: Maintenance, range: Option<(u64, u64)>) -> Result<Value, String> {
        let (all, stripe_bytes, size) = self.engine.with_volume(|v| {
            let g = v.geometry();
            (g.stripes(), g.stripe_data_bytes(), g.volume_size_bytes())
        });
        let (mut first, end) = match range {
            None => (0, all),
            Some((offset, len)) => {
                // u64::MAX: to the end.
                let len = if len == u64::MAX {
                    size.saturating_sub(offset)
                } else {
                    len
                };
                let end = offset
                    .checked_add(len)
                    .filter(|&e| len > 0 && e <= size)
                    .ok_or_else(|| {
                        format!("{len} bytes at {offset} are not inside the volume of {size} bytes")
                    })?;
                (offset / stripe_bytes, end.div_ceil(stripe_bytes))
            }
        };
        let stripes = end - first;
        let step = (SCRUB_STEP_BYTES / stripe_bytes).max(1);
        let mut total = CheckReport::default();
        // Steps of bounded size, one at a time, so client requests are held
        // up by one step's stripes at most.
        while first < end {
            let count = step.min(end - first);
            let r = self.engine.run(Request::Maintain {
                first_stripe: first,
                stripe_count: count,
                action,
            });
            match r {
                Ok(Reply::Checked(rep)) => {
                    total.mismatched_stripes.extend(rep.mismatched_stripes);
                    total.unchecked_stripes += rep.unchecked_stripes;
                    total.wrong_members.extend(rep.wrong_members);
                    total.unlocated_stripes.extend(rep.unlocated_stripes);
                }
                Ok(other) => return Err(format!("unexpected answer {other:?}")),
                Err(e) => return Err(e.to_string()),
            }
            first += count;
        }
        if range.is_none() && total.unchecked_stripes == 0 {
            self.upkeep
                .scrubber
                .completed_by_hand(&self.meta, total.mismatched_stripes.len() as u64);
        }
        let members = self.engine.members();
        let path = |m: u32| {
            members[m as usize]
                .as_ref()
                .map(|d| d.describe().to_string())
        };
        // Each mismatch with the members found wrong in it (none when the
        // redundancy cannot tell: `unlocated`). Listed up to a bound: a
        // member zeroed under a large volume mismatches every stripe, and
        // the counts say how many there were.
        let mismatches: Vec<Value> = total
            .mismatched_stripes
            .iter()
            .take(MISMATCHES_LISTED)
            .map(|&s| {
                let wrong: Vec<Value> = total
                    .wrong_members_of(s)
                    .map(|m| json!({ "slot": m, "path": path(m) }))
                    .collect();
                json!({
                    "offset_bytes": s * stripe_bytes,
                    "length_bytes": stripe_bytes,
                    "located": total.unlocated_stripes.binary_search(&s).is_err(),
                    "wrong_members": wrong,
                })
            })
            .collect();
        Ok(json!({
            "stripes": stripes,
            "mismatched_stripes": total.mismatched_stripes.len(),
            "mismatched_regions_bytes": total.mismatched_stripes.iter().map(|s| [s * stripe_bytes, stripe_bytes]).collect::<Vec<_>>(),
            "mismatches": mismatches,
            "wrong_members": total.wrong_members.len(),
            "unlocated_stripes": total.unlocated_stripes.len(),
            "unchecked_stripes": total.unchecked_stripes,
            "repaired": action == Maintenance::Repair,
        }))
    }

    fn handle(&self, req: &Value) -> Result<Value, String> {
        let arg = |k: &str| {
            req.get(k)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("missing \"{k}\""))
        };
        let force = req.get("force").and_then(Value::as_bool).unwrap_or(false);
        let new_device = |path| NewDevice {
            path,
            create_size_bytes: req.get("size_bytes").and_then(Value::as_u64),
            force,
        };
        match req.get("cmd").and_then(Value::as_str) {
            Some("status") => Ok(self.status()),
            Some("stats") => Ok(crate::observe::metrics::stats_json(
                &self.engine,
                &self.meta,
            )),
            Some("stats-reset") => {
                self.engine.reset_stats();
                Ok(crate::observe::metrics::stats_json(
                    &self.engine,
                    &self.meta,
                ))
            }
            Some("fail") => self.fail(arg("member")?, force),
            Some("remove") => self.remove(arg("member")?),
            Some("replace") => self.replace(arg("member")?, &new_device(arg("device")?)),
            Some("add-spare") => self.add_spare(&new_device(arg("device")?)),
            Some("re-add") => self.re_add(arg("device")?),
            Some("reshape") => self.reshape(req),
            Some("record-start") => {
                let limit = req
                    .get("limit_bytes")
                    .and_then(Value::as_u64)
                    .unwrap_or(crate::manage::record::DEFAULT_LIMIT_BYTES);
                self.recorder
                    .start(std::path::Path::new(arg("path")?), limit)?;
                Ok(json!(self.recorder.status()))
            }
            Some("record-stop") => {
                if !self.recorder.stop() {
                    return Err("no recording runs".into());
                }
                Ok(json!(self.recorder.status()))
            }
            Some(cmd @ ("check" | "repair")) => {
                let range = match (
                    req.get("offset_bytes").map(Value::as_u64),
                    req.get("length_bytes").map(Value::as_u64),
                ) {
                    (None, None) => None,
                    (Some(Some(o)), None) => Some((o, u64::MAX)),
                    (Some(Some(o)), Some(Some(l))) => Some((o, l)),
                    _ => {
                        return Err("\"offset_bytes\" and \"length_bytes\" must be numbers, \
                                     and a length needs an offset"
                            .into())
                    }
                };
                let action = if cmd == "check" {
                    Maintenance::Check
                } else {
                    Maintenance::Repair
                };
                self.scrub(action, range)
            }
            Some("read-policy") => self.read_policy(req.get("policy").and_then(Value::as_str)),
            Some("rebuild-rate") => {
                let rate = parse_rate_request(req.get("bytes_per_sec"))?;
                self.upkeep
                    .rate_bytes_per_sec
                    .store(rate, Ordering::Relaxed);
                Ok(json!({ "rebuild_rate_bytes_per_sec": self.rate_limit_json() }))
            }
            Some(other) => Err(format!("unknown command {other:?}")),
            None => Err("missing \"cmd\"".into()),
        }
    }
}

/// `rebuild-rate`'s `bytes_per_sec`: a number of bytes per second above 0,
/// or "unlimited".
fn parse_rate_request(v: Option<&Value>) -> Result<u64, String> {
    match v {
        Some(Value::String(s)) if s == "unlimited" => Ok(crate::engine::upkeep::UNLIMITED),
        Some(v) => v.as_u64().filter(|r| *r > 0).ok_or_else(|| {
            "\"bytes_per_sec\" must be a number of bytes per second greater than 0, or \
             \"unlimited\""
                .to_string()
        }),
        None => Err("missing \"bytes_per_sec\"".into()),
    }
}

/// What the control socket answers for: the volumes served, and a
/// pool's changes when the server serves a pool.
pub(crate) struct Control {
    pub volumes: Arc<crate::served::Volumes>,
    pub pool: Option<Arc<pool::PoolServer>>,
}

/// Serves the control socket until `stop`; one request per connection,
/// answered by the manager of the volume it names (`"volume"`), or of the
/// only volume.
pub(crate) fn serve_control(
    listener: UnixListener,
    control: Control,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    let control = Arc::new(control);
    let _ = listener.set_nonblocking(true);
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((s, _)) => {
                let _ = s.set_nonblocking(false);
                let c = Arc::clone(&control);
                // Check and repair take time; do not hold up the next caller.
                let _ = std::thread::Builder::new()
                    .name("platter-control".into())
                    .spawn(move || serve_one(&c, s));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Answers one control request.
fn serve_one(control: &Control, stream: UnixStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut line = String::new();
    let mut reader = BufReader::new(std::io::Read::take(&stream, REQUEST_MAX_BYTES));
    let answer = match reader.read_line(&mut line) {
        Ok(_) => match serde_json::from_str::<Value>(&line) {
            Ok(req) => match answer(control, &req) {
                Ok(v) => json!({ "ok": v }),
                Err(e) => json!({ "error": e }),
            },
            Err(e) => json!({ "error": format!("not a JSON request: {e}") }),
        },
        Err(e) => json!({ "error": format!("cannot read the request: {e}") }),
    };
    let mut out = &stream;
    let _ = writeln!(out, "{answer}");
}

/// `{"cmd": "volumes"}` lists the volumes served, `{"cmd": "drives"}`
/// a pool's counters per drive, `volume-create|extend|remove` change a
/// pool's volumes; any other request goes to the volume it names, which
/// may be left out when there is one.
fn answer(control: &Control, req: &Value) -> Result<Value, String> {
    // One look at the list: a volume made or removed meanwhile must not
    // move a name onto another's manager.
    let served = control.volumes.all();
    let managers: Vec<Arc<Manager>> = served.iter().map(|s| Arc::clone(&s.manager)).collect();
    let names: Vec<String> = served.iter().map(|s| s.name().to_string()).collect();
    match req.get("cmd").and_then(Value::as_str) {
        Some("volumes") => return Ok(json!(names)),
        Some("drives") => {
            let all = control.volumes.managers_with_plexes();
            return Ok(crate::observe::drives::drives_json(&all));
        }
        Some(
            cmd @ ("volume-create" | "volume-extend" | "volume-remove" | "pool-replace-drive"
            | "pool-add-drive" | "pool-heal" | "pool-remove-drive" | "subdisk-move"
            | "pool-evacuate" | "plex-detach" | "plex-attach" | "volume-convert"),
        ) => {
            let pool = control.pool.as_ref().ok_or_else(|| {
                format!("{cmd}: this server serves no pool (`platter serve --pool`)")
            })?;
            return pool.answer(cmd, req);
        }
        _ => {}
    }
    let plex;
    let m = match (req.get("volume").and_then(Value::as_str), &managers[..]) {
        (Some(name), _) => match names.iter().position(|n| n == name) {
            Some(at) => &managers[at],
            // A plex of a volume of plexes answers by its array's name.
            None => {
                plex = control
                    .volumes
                    .named_or_plex(name)
                    .map(|s| Arc::clone(&s.manager))
                    .ok_or_else(|| {
                        format!(
                            "no volume named '{name}' is served here (served: {})",
                            names.join(", ")
                        )
                    })?;
                &plex
            }
        },
        (None, [only]) => only,
        (None, []) => {
            let pool = control.pool.as_ref().map(|p| p.pool_name());
            return Err(format!(
                "this server serves no volume yet: make one with `platter volume create {} \
                 NAME --level LEVEL --size SIZE --control PATH`",
                pool.as_deref().unwrap_or("POOL")
            ));
        }
        (None, _) => {
            return Err(format!(
                "this server serves {} volumes ({}): name one with --volume",
                names.len(),
                names.join(", ")
            ))
        }
    };
    let mut answer = m.handle(req)?;
    if req.get("cmd").and_then(Value::as_str) == Some("status") {
        // The clients are the connections' to know, not the manager's.
        let at = managers.iter().position(|x| Arc::ptr_eq(x, m));
        let clients = at.map_or(0, |i| served[i].io.client_count());
        answer["clients"] = json!(clients);
        if let (Some(pool), Some(name)) = (&control.pool, answer["name"].as_str()) {
            let copy = pool.copy_json(name);
            let moves = pool.moves_json(name);
            if !moves.is_empty() {
                answer["moves"] = json!(moves);
            }
            if let Some(copy) = copy {
                answer["convert"] = copy;
            }
        }
    }
    Ok(answer)
}
