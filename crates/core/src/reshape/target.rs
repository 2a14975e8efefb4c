//! The layout a reshape moves to, from the one the volume has and what the
//! operator asked: `platter reshape` (stopped volume) and the server's
//! `reshape` command (running one) ask the same.

use super::ReshapeError;
use crate::geometry::{Geometry, GeometrySpec};
use crate::label::MAX_MEMBERS;
use crate::level::{Level, ParityLayout};
use crate::units::SECTOR_BYTES;

/// What the operator asked for; `None` keeps what the volume has.
#[derive(Clone, Debug, Default)]
pub struct Asked {
    pub added_members: u32,
    pub level: Option<Level>,
    pub parity_layout: Option<ParityLayout>,
    pub interleave_bytes: Option<u64>,
}

/// The new layout: the old members in their slots, then the added ones,
/// each with the data area of the smallest member already in. Refuses
/// asking for nothing, more members than a label holds, a parity layout
/// for a level without one, or an interleave that is not whole sectors.
/// Whether the move can be made in place is [`super::Plan::new`]'s to say.
pub fn target(old: &Geometry, asked: &Asked) -> Result<Geometry, ReshapeError> {
    let err = |s: String| Err(ReshapeError(s));
    let n_old = old.members();
    let Some(n_new) = n_old
        .checked_add(asked.added_members)
        .filter(|n| *n <= MAX_MEMBERS)
    else {
        return err(format!("at most {MAX_MEMBERS} members"));
    };
    let level = asked.level.unwrap_or(old.level());
    let parity_layout = match asked.parity_layout {
        None => old.spec().parity_layout,
        Some(l) if level.is_parity() => l,
        Some(_) => return err(format!("{level} has no parity layouts")),
    };
    let interleave = asked.interleave_bytes.unwrap_or(old.interleave_bytes());
    if interleave == 0 || !interleave.is_multiple_of(SECTOR_BYTES) {
        return err(format!(
            "the interleave must be a positive multiple of 512 bytes, not {interleave}"
        ));
    }
    if n_new == n_old
        && level == old.level()
        && interleave == old.interleave_bytes()
        && parity_layout == old.spec().parity_layout
    {
        return err(
            "nothing to change: add members, or ask for an interleave, level or layout".into(),
        );
    }
    let copies = match level {
        Level::Mirror => n_new,
        Level::Raid10 if old.level() == Level::Raid10 => old.copies(),
        Level::Raid10 => 2,
        _ => 1,
    };
    let data_bytes = old
        .spec()
        .member_data_bytes
        .iter()
        .copied()
        .min()
        .expect("a geometry has members");
    let mut member_data_bytes = old.spec().member_data_bytes.clone();
    member_data_bytes.extend(std::iter::repeat_n(
        data_bytes,
        asked.added_members as usize,
    ));
    Geometry::new(GeometrySpec {
        level,
        parity_layout,
        copies,
        interleave_bytes: interleave,
        data_offset_bytes: old.spec().data_offset_bytes,
        member_data_bytes,
    })
    .map_err(|e| ReshapeError(format!("the new layout: {}", e.0)))
}

/// The volume's label once a reshape to `new` begins: the added members
/// in the slots after the others (active, named by `added_member_uuids`),
/// the new layout's fields, and a reshape record at position 0 with
/// `reshape_id` (none for a concat, which grows with nothing to move).
/// The event counter is the caller's to bump as it writes.
pub fn reshaped_label(
    label: &crate::label::Label,
    new: &Geometry,
    added_member_uuids: &[[u8; 16]],
    reshape_id: Option<u64>,
) -> crate::label::Label {
    use crate::label::{ReshapeRecord, SlotEntry, SlotState};
    let spec = new.spec();
    let n_old = label.member_count as usize;
    let mut l = label.clone();
    for (i, uuid) in added_member_uuids.iter().enumerate() {
        l.slots.push(SlotEntry {
            member_uuid: *uuid,
            data_size_bytes: spec.member_data_bytes[n_old + i],
            state: SlotState::Active,
            left_at_events: 0,
        });
    }
    l.member_count = new.members();
    l.level = new.level();
    l.parity_layout = spec.parity_layout;
    l.copies = spec.copies;
    l.interleave_bytes = spec.interleave_bytes;
    l.data_offset_bytes = spec.data_offset_bytes;
    l.volume_size_bytes = new.volume_size_bytes();
    l.reshape = reshape_id.map(|id| ReshapeRecord {
        id,
        position_bytes: 0,
        old_level: label.level,
        old_parity_layout: label.parity_layout,
        old_copies: label.copies,
        old_interleave_bytes: label.interleave_bytes,
        old_member_count: label.member_count,
        old_data_offset_bytes: label.data_offset_bytes,
    });
    l
}

/// RAID-5 to RAID-6 with one member added and the interleave kept: the
/// RAID-6 `_6` layout of the RAID-5's (Q on the added member), whose
/// first members hold exactly what the RAID-5 holds. Nothing moves: Q is
/// written by rebuilding the added member (md's `--grow --level=6
/// --layout=preserve`). `None` when `asked` is not that.
pub fn q_on_added_member(old: &Geometry, asked: &Asked) -> Option<Geometry> {
    let layout = old.spec().parity_layout.with_q_last()?;
    let fits = old.level() == Level::Raid5
        && asked.level == Some(Level::Raid6)
        && asked.added_members == 1
        && asked
            .interleave_bytes
            .is_none_or(|il| il == old.interleave_bytes())
        && asked.parity_layout.is_none_or(|l| l == layout);
    if !fits {
        return None;
    }
    let mut spec = old.spec().clone();
    let data_bytes = spec.member_data_bytes.iter().copied().min()?;
    spec.member_data_bytes.push(data_bytes);
    spec.level = Level::Raid6;
    spec.parity_layout = layout;
    Geometry::new(spec).ok()
}

/// The volume's label once it becomes `new` by [`q_on_added_member`]: the
/// added member in the last slot, being rebuilt from stripe 0 (a restart
/// resumes its rebuild), the volume rebuilding.
pub fn q_member_label(
    label: &crate::label::Label,
    new: &Geometry,
    added_member_uuid: [u8; 16],
) -> crate::label::Label {
    use crate::label::{SlotState, VolumeState};
    let mut l = reshaped_label(label, new, &[added_member_uuid], None);
    l.slots.last_mut().expect("the added slot").state = SlotState::Rebuilding;
    l.state = VolumeState::Rebuilding;
    l.rebuild_checkpoint_bytes = 0;
    l
}

/// What a reshape from `old` to `new` gives up, when the new layout
/// survives fewer lost members than the old (raid6 to raid5, raid5 to
/// stripe or concat, a mirror of three to raid10's two copies): a
/// sentence naming both layouts and what each survives. `None` when the
/// new layout keeps the old one's redundancy or adds to it. Both
/// `platter reshape` and the server's `reshape` command refuse such a
/// reshape unless forced.
pub fn redundancy_lost(old: &Geometry, new: &Geometry) -> Option<String> {
    if new.redundancy() >= old.redundancy() {
        return None;
    }
    let layout = |g: &Geometry| format!("{} of {} members", g.level(), g.members());
    let survives = |g: &Geometry| match g.redundancy() {
        0 => "no lost member (losing any one loses data)".to_string(),
        1 => "the loss of any one member".to_string(),
        n => format!("the loss of any {n} members"),
    };
    Some(format!(
        "this reshape lowers the volume's redundancy: {} survives {}, {} would survive {}",
        layout(old),
        survives(old),
        layout(new),
        survives(new)
    ))
}

/// Why a reshape of the volume `label` describes, its members as
/// `health` says, cannot begin: one runs already, a member is out of use
/// (a reshape moves every byte), or the volume keeps checksums or a
/// partial parity log (not reshaped yet). `platter reshape` on a stopped
/// volume and the server's `reshape` command both ask.
pub fn refuse_to_begin(
    label: &crate::label::Label,
    health: &[crate::volume::Health],
) -> Result<(), ReshapeError> {
    let err = |s: String| Err(ReshapeError(s));
    if let Some(r) = label.reshape {
        return err(format!(
            "the volume is already being reshaped ({} of {} bytes moved for good): that \
             reshape finishes first (serve the volume)",
            r.position_bytes, label.volume_size_bytes
        ));
    }
    if let Some((slot, h)) = health
        .iter()
        .enumerate()
        .find(|(_, h)| **h != crate::volume::Health::Online)
    {
        return err(format!(
            "member {slot} is {h:?}: a reshape moves every byte and needs every member; \
             replace or rebuild it first"
        ));
    }
    if label.checksums.is_some() || label.ppl.is_some() {
        return err(
            "the volume keeps checksums or a partial parity log, which are not reshaped yet".into(),
        );
    }
    Ok(())
}
