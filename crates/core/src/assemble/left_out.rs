//! Which slots an assembly serves without, why, and the command that
//! brings each back: for `serve`'s refusal to start degraded unless asked
//! (`--run`), the log of a degraded start, and `status`.

use super::{Assembly, SlotNote};
use crate::label::{Label, SlotState};

/// Why a slot has no device in use at the start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Absence {
    /// No device given for it, though the freshest label holds it in use
    /// (active or being rebuilt) and never recorded it leaving: merely not
    /// named. `serve` starts without it only with `--run`.
    NotGiven,
    /// No device given; the labels recorded it leaving at this event (it
    /// was missing at an earlier start, or left while serving).
    Gone { left_at_events: u64 },
    /// Given, but its label is older than the volume's: it missed changes.
    Stale { event_counter: u64 },
    /// The freshest label marks it faulty.
    Faulty,
    /// Taken out with `platter remove`.
    Removed,
    /// Given, but shorter than its label says.
    TooSmall {
        member: String,
        size_bytes: u64,
        needed_bytes: u64,
    },
}

/// A slot the volume is served without.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeftOut {
    pub slot: u32,
    /// The member the freshest label holds in the slot (nil when a removed
    /// slot holds none).
    pub member_uuid: [u8; 16],
    /// The index into the input of the device given for it, if any.
    pub device: Option<usize>,
    pub why: Absence,
}

/// What brings a member back into a running volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Remedy {
    /// `platter re-add`: only what the bitmap says it missed is rebuilt.
    ReAdd,
    /// `platter replace`: a device rebuilt whole.
    Replace,
}

impl Absence {
    /// A one-word reason for programs: `missing`, `stale`, `faulty`,
    /// `removed` or `too-small`.
    pub fn reason(&self) -> &'static str {
        match self {
            Absence::NotGiven | Absence::Gone { .. } => "missing",
            Absence::Stale { .. } => "stale",
            Absence::Faulty => "faulty",
            Absence::Removed => "removed",
            Absence::TooSmall { .. } => "too-small",
        }
    }

    /// The reason for people, against the volume's event counter.
    pub fn detail(&self, volume_events: u64) -> String {
        match self {
            Absence::NotGiven => "missing (not among the members given)".into(),
            Absence::Gone { left_at_events } => format!("missing since events {left_at_events}"),
            Absence::Stale { event_counter } => {
                format!("stale at events {event_counter} < {volume_events}")
            }
            Absence::Faulty => "faulty (the labels mark it so)".into(),
            Absence::Removed => "removed (platter remove)".into(),
            Absence::TooSmall {
                size_bytes,
                needed_bytes,
                ..
            } => format!("too small ({size_bytes} of {needed_bytes} bytes)"),
        }
    }
}

impl LeftOut {
    /// What brings it back. `re-add` takes a member back only with a
    /// bitmap and only if its label is the last one it had before the
    /// labels recorded it leaving (`SlotEntry::left_at_events`); a member
    /// not given is recorded leaving by this start, one event after the
    /// label it holds if it was in sync. For a device not here that is
    /// not known; `re-add` checks, and names `replace` if it refuses.
    pub fn remedy(&self, label: &Label) -> Remedy {
        let entry = &label.slots[self.slot as usize];
        let bitmap = label.intent_region_stripes > 0;
        let readdable = match self.why {
            // A replacement cut short holds nothing re-add could vouch for.
            Absence::NotGiven => entry.state != SlotState::Rebuilding,
            Absence::Gone { .. } => true,
            Absence::Faulty => self.device.is_none(),
            Absence::Stale { event_counter } => {
                entry.left_at_events != 0
                    && event_counter.checked_add(1) == Some(entry.left_at_events)
            }
            Absence::Removed | Absence::TooSmall { .. } => false,
        };
        if bitmap && readdable {
            Remedy::ReAdd
        } else {
            Remedy::Replace
        }
    }
}

impl Remedy {
    /// The command, for the control socket `control` (a path, or a word
    /// standing for it), slot `slot` and its device `device` if known.
    pub fn command(self, control: &str, slot: u32, device: Option<&str>) -> String {
        match self {
            Remedy::ReAdd => format!(
                "platter re-add --control {control} {}",
                device.unwrap_or("DEVICE")
            ),
            Remedy::Replace => format!("platter replace --control {control} {slot} NEW-DEVICE"),
        }
    }
}

impl Assembly {
    /// The slots served without a device, in slot order. A member being
    /// rebuilt whose device is here is not left out: its rebuild resumes.
    pub fn left_out(&self) -> Vec<LeftOut> {
        (0..self.notes.len())
            .filter_map(|slot| {
                let entry = &self.label.slots[slot];
                let why = match (&self.notes[slot], entry.state) {
                    (SlotNote::InUse | SlotNote::Marked(SlotState::Rebuilding), _) => return None,
                    (_, SlotState::Removed) => Absence::Removed,
                    (SlotNote::NotFound, SlotState::Faulty) | (SlotNote::Marked(_), _) => {
                        Absence::Faulty
                    }
                    (SlotNote::NotFound, _) if entry.left_at_events != 0 => Absence::Gone {
                        left_at_events: entry.left_at_events,
                    },
                    (SlotNote::NotFound, _) => Absence::NotGiven,
                    (SlotNote::Stale { event_counter }, _) => Absence::Stale {
                        event_counter: *event_counter,
                    },
                    (
                        SlotNote::TooSmall {
                            member,
                            size_bytes,
                            needed_bytes,
                        },
                        _,
                    ) => Absence::TooSmall {
                        member: member.clone(),
                        size_bytes: *size_bytes,
                        needed_bytes: *needed_bytes,
                    },
                };
                Some(LeftOut {
                    slot: slot as u32,
                    member_uuid: entry.member_uuid,
                    device: self.slot_device[slot],
                    why,
                })
            })
            .collect()
    }
}
