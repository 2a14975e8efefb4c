//! The members a volume is served without: why each is out and the
//! command that brings it back, logged at start and shown by `platter
//! status` (live and offline, `--json` too), and the devices whose label
//! was superseded, logged and passed over.

use platter_core::assemble::{uuid_string, Absence, Assembly, LeftOut, Remedy};
use platter_core::label::{Label, SlotState};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// What stands for the control socket's path where none is known (a
/// stopped volume, a server without one).
pub const CONTROL_PLACEHOLDER: &str = "CONTROL";

/// A slot served without a device, with the device's path if one is
/// known (given and refused, or seen elsewhere by a scan).
#[derive(Clone, Debug)]
pub struct LeftOutMember {
    pub slot: u32,
    pub member_uuid: [u8; 16],
    pub path: Option<String>,
    /// `None`: it left while the volume was served.
    pub why: Option<Absence>,
    pub remedy: Remedy,
}

/// The slots the assembly leaves out; `names` are the devices as given,
/// `last_seen` where members not given were found by a scan.
pub fn at_start(
    a: &Assembly,
    names: &[String],
    last_seen: &BTreeMap<u32, String>,
) -> Vec<LeftOutMember> {
    a.left_out()
        .into_iter()
        .map(|l: LeftOut| LeftOutMember {
            slot: l.slot,
            member_uuid: l.member_uuid,
            path: match &l.why {
                Absence::TooSmall { member, .. } => Some(member.clone()),
                _ => l
                    .device
                    .map(|i| names[i].clone())
                    .or_else(|| last_seen.get(&l.slot).cloned()),
            },
            remedy: l.remedy(&a.label),
            why: Some(l.why),
        })
        .collect()
}

impl LeftOutMember {
    /// A member that failed or went missing while served.
    pub fn while_serving(label: &Label, slot: u32, path: Option<String>) -> LeftOutMember {
        let entry = &label.slots[slot as usize];
        let why = (entry.state == SlotState::Removed).then_some(Absence::Removed);
        let remedy = LeftOut {
            slot,
            member_uuid: entry.member_uuid,
            device: None,
            why: why.clone().unwrap_or(Absence::Faulty),
        }
        .remedy(label);
        LeftOutMember {
            slot,
            member_uuid: entry.member_uuid,
            path,
            why,
            remedy,
        }
    }

    /// The reason for programs and for people.
    pub fn reason(&self, volume_events: u64) -> (&'static str, String) {
        match &self.why {
            Some(w) => (w.reason(), w.detail(volume_events)),
            None => ("faulty", "failed while served".into()),
        }
    }

    /// The command that brings it back, through `control` (`None`: the
    /// placeholder).
    pub fn command(&self, control: Option<&str>) -> String {
        self.remedy.command(
            control.unwrap_or(CONTROL_PLACEHOLDER),
            self.slot,
            self.path.as_deref(),
        )
    }

    pub fn json(&self, volume_events: u64, control: Option<&str>) -> Value {
        let (reason, detail) = self.reason(volume_events);
        json!({
            "slot": self.slot,
            "member_uuid": uuid_string(&self.member_uuid),
            "path": self.path,
            "reason": reason,
            "detail": detail,
            "remedy": self.command(control),
        })
    }

    /// One line for the log and for `status`.
    pub fn line(&self, volume_events: u64, control: Option<&str>) -> String {
        let (_, detail) = self.reason(volume_events);
        let at = self
            .path
            .as_deref()
            .map_or(String::new(), |p| format!(", {p}"));
        format!(
            "slot {} (member {}{at}): {detail}; brought back by: {}",
            self.slot,
            uuid_string(&self.member_uuid),
            self.command(control)
        )
    }
}

/// Logs each member the volume starts without, one line each.
pub fn log_at_start(left: &[LeftOutMember], volume_events: u64, control: Option<&str>) {
    for m in left {
        tracing::warn!("member left out: {}", m.line(volume_events, control));
    }
}

/// A device set aside at start because its label was superseded: the
/// volume's newer labels gave its slot to another member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SupersededDevice {
    pub path: String,
    /// The slot its label names.
    pub slot: u32,
    pub member_uuid: [u8; 16],
    /// Its label's event counter.
    pub event_counter: u64,
    /// The member holding the slot now; `None` when it is empty.
    pub by_member_uuid: Option<[u8; 16]>,
}

/// The superseded devices among `names` (the devices assembled).
pub fn superseded(a: &Assembly, names: &[String]) -> Vec<SupersededDevice> {
    a.superseded
        .iter()
        .map(|s| SupersededDevice {
            path: names[s.device].clone(),
            slot: s.slot,
            member_uuid: s.member_uuid,
            event_counter: s.event_counter,
            by_member_uuid: s.by_member_uuid,
        })
        .collect()
}

impl SupersededDevice {
    /// One line for the log.
    pub fn line(&self, volume_events: u64) -> String {
        let by = self.by_member_uuid.map_or_else(
            || "is empty now".to_string(),
            |u| format!("now holds member {}", uuid_string(&u)),
        );
        format!(
            "{}: superseded: its label (slot {}, events {} < {volume_events}) is from before \
             the slot was given to another device, and slot {} {by}; not used (platter wipe {} \
             clears the old label)",
            self.path, self.slot, self.event_counter, self.slot, self.path
        )
    }

    /// For `status --json`; `by_path` is where the member now in the slot
    /// is, if known.
    pub fn json(&self, by_path: Option<&str>) -> Value {
        json!({
            "path": self.path,
            "slot": self.slot,
            "member_uuid": uuid_string(&self.member_uuid),
            "event_counter": self.event_counter,
            "by_member_uuid": self.by_member_uuid.map(|u| uuid_string(&u)),
            "by_path": by_path,
        })
    }
}
