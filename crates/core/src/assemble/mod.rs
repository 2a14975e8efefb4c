//! Assembly: from the labels found on a set of devices to a volume.
//!
//! Labels are trusted, not the order of arguments: each member says which
//! slot it fills. The freshest label (highest event counter) speaks for the
//! volume; a member whose own label is older missed changes and is not used.
//! Everything refused is refused with one line naming the member and why.

use crate::geometry::{Geometry, GeometrySpec};
use crate::label::{printable, Label, LabelError, SlotState};
use crate::volume::Health;
use thiserror::Error;

mod left_out;
pub use left_out::{Absence, LeftOut, Remedy};

/// What was found on one device.
#[derive(Clone, Debug)]
pub struct Found {
    /// The device's name for messages (path or URI).
    pub name: String,
    pub size_bytes: u64,
    pub label: Result<Label, LabelError>,
}

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum AssembleError {
    #[error("no members given")]
    NoMembers,
    #[error("member {member}: {source}")]
    Label { member: String, source: LabelError },
    #[error(
        "member {member}: belongs to another volume ({found}, '{found_name}'), not {expected} ('{expected_name}')"
    )]
    OtherVolume {
        member: String,
        found: String,
        found_name: String,
        expected: String,
        expected_name: String,
    },
    #[error("member {member}: claims slot {slot}, which {other} also claims")]
    DuplicateSlot {
        member: String,
        other: String,
        slot: u32,
    },
    #[error(
        "member {member}: not in the volume's member table (slot {slot} belongs to another member)"
    )]
    UnknownMember { member: String, slot: u32 },
    #[error("member {member}: label disagrees with the volume on {field}")]
    Inconsistent { member: String, field: &'static str },
    #[error("volume {0}: {1}")]
    Geometry(String, String),
}

/// Why a slot is not in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotNote {
    InUse,
    NotFound,
    /// Present but its label is older than the volume's.
    Stale {
        event_counter: u64,
    },
    /// The volume's table marks it so.
    Marked(SlotState),
    /// Its device is shorter than its label says (truncated, or an export
    /// served smaller): left out, as a missing member.
    TooSmall {
        member: String,
        size_bytes: u64,
        needed_bytes: u64,
    },
}

impl SlotNote {
    /// Why the slot's device was left out, for the log and the refusal;
    /// `None` when it was not.
    pub fn left_out_because(&self) -> Option<String> {
        match self {
            SlotNote::TooSmall {
                member,
                size_bytes,
                needed_bytes,
            } => Some(format!(
                "member {member}: device is {size_bytes} bytes but its label needs \
                 {needed_bytes} (truncated or the wrong device?)"
            )),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Assembly {
    /// The freshest label: the volume's own view of itself.
    pub label: Label,
    pub geometry: Geometry,
    /// While a reshape runs (`label.reshape`), the layout it moves from,
    /// over the first slots; `geometry` is the one it moves to. Bytes not
    /// yet moved are read through this one: the server serves them both
    /// (`platter_core::reshape::Reshaping`).
    pub old_geometry: Option<Geometry>,
    /// For each slot, the index into the input of the device filling it.
    pub slot_device: Vec<Option<usize>>,
    pub health: Vec<Health>,
    pub notes: Vec<SlotNote>,
    /// Devices whose label gives their slot to another member in the
    /// volume's newer labels (an old disk after `replace`, or after a
    /// spare took its place): not used, and no obstacle.
    pub superseded: Vec<Superseded>,
}

/// A device whose own label is older than the volume's and names a member
/// the volume's freshest slot table no longer holds: its slot went to
/// another device since (md leaves such a device out the same way).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superseded {
    /// The index into the input of the device.
    pub device: usize,
    /// The slot its label says it fills.
    pub slot: u32,
    pub member_uuid: [u8; 16],
    /// Its own label's event counter (older than the volume's).
    pub event_counter: u64,
    /// Who holds that slot now, in the freshest table: `None` when the
    /// slot is empty (removed) or no longer exists.
    pub by_member_uuid: Option<[u8; 16]>,
}

pub fn uuid_string(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

pub fn assemble(found: &[Found]) -> Result<Assembly, AssembleError> {
    if found.is_empty() {
        return Err(AssembleError::NoMembers);
    }
    let mut labels = Vec::with_capacity(found.len());
    for f in found {
        match &f.label {
            Ok(l) => labels.push(l),
            Err(e) => {
                return Err(AssembleError::Label {
                    member: f.name.clone(),
                    source: e.clone(),
                })
            }
        }
    }
    let reference = freshest(found, &labels)?;
    let mut slots = Placed::new(reference.member_count as usize);
    for (i, (f, l)) in found.iter().zip(&labels).enumerate() {
        slots.place(found, i, f, l, reference)?;
    }
    let (geometry, old_geometry) = geometries(reference)?;
    let health = slots.notes.iter().map(SlotNote::health).collect();
    Ok(Assembly {
        label: reference.clone(),
        geometry,
        old_geometry,
        slot_device: slots.slot_device,
        health,
        notes: slots.notes,
        superseded: slots.superseded,
    })
}

/// The freshest label of the volume most members belong to (the first on
/// a tie): it speaks for the volume. Members of another volume are named
/// as intruders.
fn freshest<'a>(found: &[Found], labels: &[&'a Label]) -> Result<&'a Label, AssembleError> {
    let volume = labels
        .iter()
        .map(|l| l.volume_uuid)
        .max_by_key(|u| {
            let count = labels.iter().filter(|l| l.volume_uuid == *u).count();
            let first = labels.iter().position(|l| l.volume_uuid == *u).unwrap_or(0);
            (count, std::cmp::Reverse(first))
        })
        .expect("at least one label");
    // On equal counters the first member given speaks for the volume.
    let reference = labels
        .iter()
        .enumerate()
        .filter(|(_, l)| l.volume_uuid == volume)
        .max_by_key(|(i, l)| (l.event_counter, std::cmp::Reverse(*i)))
        .map(|(_, l)| *l)
        .expect("at least one label of the volume");
    for (f, l) in found.iter().zip(labels) {
        if l.volume_uuid != volume {
            return Err(AssembleError::OtherVolume {
                member: f.name.clone(),
                found: uuid_string(&l.volume_uuid),
                found_name: printable(&l.name).into_owned(),
                expected: uuid_string(&volume),
                expected_name: printable(&reference.name).into_owned(),
            });
        }
    }
    Ok(reference)
}

/// The devices placed in the slots so far.
struct Placed {
    /// For each slot, the index into the input of the device filling it.
    slot_device: Vec<Option<usize>>,
    /// Devices claiming each slot, used or not: two claims are refused.
    claimed: Vec<Option<usize>>,
    notes: Vec<SlotNote>,
    superseded: Vec<Superseded>,
}

impl Placed {
    fn new(slots: usize) -> Placed {
        Placed {
            slot_device: vec![None; slots],
            claimed: vec![None; slots],
            notes: vec![SlotNote::NotFound; slots],
            superseded: Vec::new(),
        }
    }

    /// Device `i` (`f`, its label `l`) into the slot its label names,
    /// unless the volume has given that slot away since (superseded).
    fn place(
        &mut self,
        found: &[Found],
        i: usize,
        f: &Found,
        l: &Label,
        reference: &Label,
    ) -> Result<(), AssembleError> {
        // Before its geometry is compared: the volume may have been grown
        // or reshaped since this device left it.
        if let Some(s) = superseded_by(reference, i, l) {
            self.superseded.push(s);
            return Ok(());
        }
        check_agrees(f, l, reference)?;
        let slot = l.slot as usize;
        let entry = &reference.slots[slot];
        if entry.member_uuid != l.member_uuid {
            return Err(AssembleError::UnknownMember {
                member: f.name.clone(),
                slot: l.slot,
            });
        }
        if let Some(other) = self.claimed[slot] {
            return Err(AssembleError::DuplicateSlot {
                member: f.name.clone(),
                other: found[other].name.clone(),
                slot: l.slot,
            });
        }
        self.claimed[slot] = Some(i);
        let needed_bytes = l.data_offset_bytes.saturating_add(l.data_size_bytes);
        if f.size_bytes < needed_bytes {
            self.notes[slot] = SlotNote::TooSmall {
                member: f.name.clone(),
                size_bytes: f.size_bytes,
                needed_bytes,
            };
            return Ok(());
        }
        self.slot_device[slot] = Some(i);
        self.notes[slot] = SlotNote::of_present(l, reference);
        Ok(())
    }
}

/// A member's label must describe the volume's layout as the freshest
/// label does.
fn check_agrees(f: &Found, l: &Label, reference: &Label) -> Result<(), AssembleError> {
    let inconsistent = |field| AssembleError::Inconsistent {
        member: f.name.clone(),
        field,
    };
    if l.member_count != reference.member_count {
        return Err(inconsistent("member count"));
    }
    if l.level != reference.level {
        return Err(inconsistent("level"));
    }
    if l.interleave_bytes != reference.interleave_bytes {
        return Err(inconsistent("interleave"));
    }
    if l.parity_layout != reference.parity_layout || l.copies != reference.copies {
        return Err(inconsistent("layout"));
    }
    if l.data_offset_bytes != reference.data_offset_bytes {
        return Err(inconsistent("data offset"));
    }
    if l.checksums != reference.checksums {
        return Err(inconsistent("checksums"));
    }
    if l.ppl != reference.ppl {
        return Err(inconsistent("partial parity log"));
    }
    Ok(())
}

impl SlotNote {
    /// A device present in its slot, large enough: in use unless its label
    /// is stale or the volume's table marks the slot out of use.
    fn of_present(l: &Label, reference: &Label) -> SlotNote {
        let entry = &reference.slots[l.slot as usize];
        // One change behind, in a slot the newest label still holds
        // active and never left: the labels are written member after
        // member, and a crash (or kill -9) between two writes leaves some
        // a change behind with nothing missed. md accepts a device one
        // event behind for the same reason (`super_1_validate`). A member
        // that failed or went missing is marked so in that newest label
        // (faulty, or `left_at_events`), and stays out. (How it showed:
        // a stripe grown by two, killed while the reshape wrote its
        // position to the labels, would not start again: "1 of 5 members
        // unavailable".)
        let one_behind = l.event_counter.checked_add(1) == Some(reference.event_counter)
            && entry.state == SlotState::Active
            && entry.left_at_events == 0;
        if l.event_counter < reference.event_counter && !one_behind {
            SlotNote::Stale {
                event_counter: l.event_counter,
            }
        } else if matches!(
            entry.state,
            SlotState::Faulty | SlotState::Removed | SlotState::Rebuilding
        ) {
            SlotNote::Marked(entry.state)
        } else {
            SlotNote::InUse
        }
    }

    fn health(&self) -> Health {
        match self {
            SlotNote::InUse => Health::Online,
            SlotNote::NotFound | SlotNote::TooSmall { .. } => Health::Missing,
            // A member part-way through a rebuild holds good data only below
            // its checkpoint; the server resumes the rebuild from there.
            SlotNote::Marked(SlotState::Rebuilding) => Health::Missing,
            SlotNote::Stale { .. } | SlotNote::Marked(_) => Health::Faulty,
        }
    }
}

/// The volume's layout, and while a reshape runs the one it moves from.
fn geometries(reference: &Label) -> Result<(Geometry, Option<Geometry>), AssembleError> {
    let volume = uuid_string(&reference.volume_uuid);
    let geometry = Geometry::new(GeometrySpec {
        level: reference.level,
        parity_layout: reference.parity_layout,
        copies: reference.copies,
        interleave_bytes: reference.interleave_bytes,
        data_offset_bytes: reference.data_offset_bytes,
        member_data_bytes: reference.slots.iter().map(|s| s.data_size_bytes).collect(),
    })
    .map_err(|e| AssembleError::Geometry(volume.clone(), e.0))?;
    let old_geometry = match reference.reshape {
        None => None,
        Some(r) => Some(Geometry::new(r.old_spec(reference)).map_err(|e| {
            AssembleError::Geometry(
                volume,
                format!("the layout its reshape moves from: {}", e.0),
            )
        })?),
    };
    Ok((geometry, old_geometry))
}

/// `label` (of device `device`) when the freshest label `reference` no
/// longer names its member anywhere and is newer: the slot was given to
/// another member while this device was away. A label as new as the
/// reference that disagrees about the slot is not superseded: two
/// histories, refused as an unknown member.
fn superseded_by(reference: &Label, device: usize, label: &Label) -> Option<Superseded> {
    if label.event_counter >= reference.event_counter
        || reference
            .slots
            .iter()
            .any(|s| s.member_uuid == label.member_uuid)
    {
        return None;
    }
    Some(Superseded {
        device,
        slot: label.slot,
        member_uuid: label.member_uuid,
        event_counter: label.event_counter,
        by_member_uuid: reference
            .slots
            .get(label.slot as usize)
            .map(|s| s.member_uuid)
            .filter(|u| *u != [0; 16]),
    })
}

#[cfg(test)]
mod tests;
