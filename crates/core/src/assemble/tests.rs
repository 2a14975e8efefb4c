use super::*;
use crate::label::{SlotEntry, VolumeState, LAYOUT_VERSION};
use crate::level::{Level, ParityLayout};

const DATA_BYTES: u64 = 64 << 20;

fn volume(level: Level, n: u32, tag: u8) -> Vec<Label> {
    let slots: Vec<SlotEntry> = (0..n)
        .map(|i| SlotEntry {
            member_uuid: [
                tag, 0xEE, i as u8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,
            ],
            data_size_bytes: DATA_BYTES,
            state: SlotState::Active,
            left_at_events: 0,
        })
        .collect();
    (0..n)
        .map(|i| Label {
            layout_version: LAYOUT_VERSION,
            volume_uuid: [tag; 16],
            member_uuid: slots[i as usize].member_uuid,
            slot: i,
            member_count: n,
            level,
            parity_layout: ParityLayout::DEFAULT,
            copies: if level == Level::Mirror { n } else { 1 },
            interleave_bytes: 65536,
            data_offset_bytes: 1 << 20,
            data_size_bytes: DATA_BYTES,
            volume_size_bytes: 0,
            event_counter: 5,
            state: VolumeState::Clean,
            rebuild_checkpoint_bytes: 0,
            read_policy: 0,
            created_unix_seconds: 0,
            updated_unix_seconds: 0,
            name: format!("vol{tag}"),
            intent_region_stripes: 0,
            read_policy_arg: 0,
            scrub: Default::default(),
            checksums: None,
            ppl: None,
            reshape: None,
            slots: slots.clone(),
        })
        .collect()
}

fn found(labels: &[Label]) -> Vec<Found> {
    labels
        .iter()
        .map(|l| Found {
            name: format!("/dev/m{}", l.slot),
            size_bytes: (1 << 20) + DATA_BYTES,
            label: Ok(l.clone()),
        })
        .collect()
}

#[test]
fn labels_not_argument_order_decide_slots() {
    let labels = volume(Level::Raid5, 4, 1);
    let mut f = found(&labels);
    f.reverse();
    let a = assemble(&f).unwrap();
    assert_eq!(a.slot_device, vec![Some(3), Some(2), Some(1), Some(0)]);
    assert_eq!(a.health, vec![Health::Online; 4]);
    assert_eq!(a.geometry.volume_size_bytes(), 3 * DATA_BYTES);
}

#[test]
fn missing_and_stale_members_are_not_used() {
    let mut labels = volume(Level::Raid6, 5, 2);
    labels[1].event_counter = 3; // missed two changes while away
    let f = found(&[
        labels[0].clone(),
        labels[1].clone(),
        labels[3].clone(),
        labels[4].clone(),
    ]);
    let a = assemble(&f).unwrap();
    assert_eq!(
        a.health,
        vec![
            Health::Online,
            Health::Faulty,
            Health::Missing,
            Health::Online,
            Health::Online
        ]
    );
    assert_eq!(a.notes[1], SlotNote::Stale { event_counter: 3 });
    assert_eq!(a.notes[2], SlotNote::NotFound);
}

/// A kill between two members' label writes leaves some a change behind
/// (the reshape writes its position to the labels every window, so a
/// kill -9 lands there often). Such a member is in sync, as md takes a
/// device one event behind; two behind, or one whose slot the newest label
/// marks faulty or left, is not. (How it showed: a stripe grown by two and
/// killed mid-move would not start again, "1 of 5 members unavailable".)
#[test]
fn a_member_one_label_write_behind_is_in_sync_unless_marked() {
    let mut labels = volume(Level::Stripe, 3, 6);
    for l in &mut labels[..2] {
        l.event_counter = 6;
    }
    let a = assemble(&found(&labels)).unwrap();
    assert_eq!(a.health, vec![Health::Online; 3]);
    assert_eq!(a.notes[2], SlotNote::InUse);
    // The newest label recorded slot 2's failure: it stays out.
    let mut failed = labels.clone();
    for l in &mut failed[..2] {
        l.slots[2].state = SlotState::Faulty;
    }
    let a = assemble(&found(&failed)).unwrap();
    assert_eq!(a.health[2], Health::Faulty);
    assert_eq!(a.notes[2], SlotNote::Stale { event_counter: 5 });
    // ... or that it was missing when the volume last started.
    let mut left = labels.clone();
    for l in &mut left[..2] {
        l.slots[2].left_at_events = 6;
    }
    let a = assemble(&found(&left)).unwrap();
    assert_eq!(a.health[2], Health::Faulty);
    assert_eq!(a.notes[2], SlotNote::Stale { event_counter: 5 });
    // Two changes behind: stale.
    let mut behind = labels.clone();
    behind[2].event_counter = 4;
    let a = assemble(&found(&behind)).unwrap();
    assert_eq!(a.notes[2], SlotNote::Stale { event_counter: 4 });
}

#[test]
fn refusals_name_the_member_and_the_reason() {
    let labels = volume(Level::Mirror, 3, 3);
    let other = volume(Level::Mirror, 3, 4);
    let msg = |f: Vec<Found>| assemble(&f).unwrap_err().to_string();

    let mut f = found(&labels);
    f[2].name = "/srv/other.img".into();
    f[2].label = Ok(other[2].clone());
    let m = msg(f);
    assert!(
        m.starts_with("member /srv/other.img: belongs to another volume"),
        "{m}"
    );

    let mut f = found(&labels);
    f.push(Found {
        name: "/srv/copy.img".into(),
        ..f[1].clone()
    });
    let m = msg(f);
    assert_eq!(
        m,
        "member /srv/copy.img: claims slot 1, which /dev/m1 also claims"
    );

    let mut f = found(&labels);
    f[0].label = Err(LabelError::Checksum {
        stored: 1,
        computed: 2,
    });
    let m = msg(f);
    assert!(
        m.starts_with("member /dev/m0: label checksum mismatch"),
        "{m}"
    );

    let mut f = found(&labels);
    let mut l = labels[2].clone();
    l.interleave_bytes = 4096;
    f[2].label = Ok(l);
    let m = msg(f);
    assert_eq!(
        m,
        "member /dev/m2: label disagrees with the volume on interleave"
    );

    assert_eq!(msg(Vec::new()), "no members given");

    // A volume whose labels say a reshape is in progress assembles with
    // both layouts: the one it moves from, over the first slots, and the
    // one it moves to.
    let mut moving = volume(Level::Raid5, 4, 5);
    for l in &mut moving {
        l.reshape = Some(crate::label::ReshapeRecord {
            id: 9,
            position_bytes: 1 << 20,
            old_level: Level::Raid5,
            old_parity_layout: ParityLayout::DEFAULT,
            old_copies: 1,
            old_interleave_bytes: 65536,
            old_member_count: 3,
            old_data_offset_bytes: l.data_offset_bytes,
        });
    }
    let a = assemble(&found(&moving)).expect("a reshaping volume assembles");
    let old = a.old_geometry.expect("the old layout");
    assert_eq!((old.members(), a.geometry.members()), (3, 4));
    assert_eq!(
        old.stripe_data_bytes() * 3,
        a.geometry.stripe_data_bytes() * 2
    );
}

/// A device shorter than its label says is left out as a missing member,
/// with the reason, not a refusal of the whole volume; a second device
/// claiming the same slot is still refused.
#[test]
fn a_short_device_is_left_out_with_its_reason() {
    let labels = volume(Level::Mirror, 2, 5);
    let mut f = found(&labels);
    f[1].size_bytes = 16 << 20;
    let a = assemble(&f).unwrap();
    assert_eq!(a.health, vec![Health::Online, Health::Missing]);
    assert_eq!(a.slot_device, vec![Some(0), None]);
    assert_eq!(
        a.notes[1].left_out_because().as_deref(),
        Some(
            "member /dev/m1: device is 16777216 bytes but its label needs 68157440 \
             (truncated or the wrong device?)"
        )
    );
    assert_eq!(a.notes[0].left_out_because(), None);

    let mut twice = found(&labels);
    twice[1].size_bytes = 16 << 20;
    twice.push(Found {
        name: "/dev/again".into(),
        ..twice[1].clone()
    });
    assert!(matches!(
        assemble(&twice),
        Err(AssembleError::DuplicateSlot { .. })
    ));
}

/// After `replace` (or a spare taking over) the old disk keeps its label,
/// older than the volume's, naming a member the table no longer holds.
/// It is set aside as superseded and the volume assembles from the rest.
/// (How it showed: "member /dev/m1: not in the volume's member table (slot
/// 1 belongs to another member)", and `scan`, `serve --scan` and `status`
/// of a directory holding the old disk refused the whole volume.)
#[test]
fn an_old_disk_whose_slot_was_given_away_is_superseded_not_a_refusal() {
    let labels = volume(Level::Raid5, 3, 7);
    let old = labels[1].clone();
    let mut newer = labels.clone();
    let new_uuid = [7, 0xAB, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13];
    for l in &mut newer {
        l.event_counter = 21;
        l.slots[1].member_uuid = new_uuid;
    }
    newer[1].member_uuid = new_uuid;
    let mut f = found(&newer);
    f.push(Found {
        name: "/dev/old".into(),
        size_bytes: (1 << 20) + DATA_BYTES,
        // From before the volume grew: its geometry no longer matches.
        label: Ok(Label {
            member_count: 2,
            slots: old.slots[..2].to_vec(),
            ..old.clone()
        }),
    });
    let a = assemble(&f).expect("assembles without the old disk");
    assert_eq!(a.slot_device, vec![Some(0), Some(1), Some(2)]);
    assert_eq!(a.health, vec![Health::Online; 3]);
    assert_eq!(
        a.superseded,
        vec![Superseded {
            device: 3,
            slot: 1,
            member_uuid: old.member_uuid,
            event_counter: 5,
            by_member_uuid: Some(new_uuid),
        }]
    );
    // Without the new member, its slot is missing, not the old disk's.
    let without: Vec<Found> = f.iter().filter(|d| d.name != "/dev/m1").cloned().collect();
    let a = assemble(&without).unwrap();
    assert_eq!(a.notes[1], SlotNote::NotFound);
    assert_eq!(a.superseded.len(), 1);
    // As new as the volume and disagreeing about the slot: two histories,
    // still refused.
    let mut twin = f.clone();
    let mut same_age = old.clone();
    same_age.event_counter = 21;
    twin[3].label = Ok(same_age);
    assert!(matches!(
        assemble(&twin),
        Err(AssembleError::UnknownMember { slot: 1, .. })
    ));
}

/// Each slot served without a device says why, and what brings it back:
/// `re-add` where the bitmap can tell what it missed, `replace` where not.
#[test]
fn left_out_slots_say_why_and_what_brings_them_back() {
    let mut labels = volume(Level::Raid6, 6, 8);
    for l in &mut labels {
        l.intent_region_stripes = 1;
        l.event_counter = 13;
        l.slots[2].left_at_events = 12; // missing at the last start
        l.slots[3].state = SlotState::Faulty;
        l.slots[3].left_at_events = 10;
        l.slots[4].state = SlotState::Removed;
    }
    // Slot 1 was missing at the start that wrote event 12; its own label
    // is the one before.
    for l in &mut labels {
        l.slots[1].left_at_events = 12;
    }
    labels[1].event_counter = 11;
    labels[1].slots[1].left_at_events = 0;
    // Slots 0 and 1 given; 2, 3, 4 and 5 not.
    let a = assemble(&found(&labels[..2])).unwrap();
    let left = a.left_out();
    let whys: Vec<(u32, Absence)> = left.iter().map(|l| (l.slot, l.why.clone())).collect();
    assert_eq!(
        whys,
        vec![
            (1, Absence::Stale { event_counter: 11 }),
            (2, Absence::Gone { left_at_events: 12 }),
            (3, Absence::Faulty),
            (4, Absence::Removed),
            (5, Absence::NotGiven),
        ]
    );
    let remedies: Vec<Remedy> = left.iter().map(|l| l.remedy(&a.label)).collect();
    assert_eq!(
        remedies,
        [
            Remedy::ReAdd,
            Remedy::ReAdd,
            Remedy::ReAdd,
            Remedy::Replace,
            Remedy::ReAdd
        ]
    );
    assert_eq!(left[0].why.detail(13), "stale at events 11 < 13");
    assert_eq!(
        Remedy::ReAdd.command("/run/v.ctl", 1, Some("/d/m1")),
        "platter re-add --control /run/v.ctl /d/m1"
    );
    assert_eq!(
        Remedy::Replace.command("/run/v.ctl", 4, None),
        "platter replace --control /run/v.ctl 4 NEW-DEVICE"
    );
    // A replacement cut short and not given: nothing to re-add.
    let mut cut = labels.clone();
    for l in &mut cut {
        l.slots[5].state = SlotState::Rebuilding;
    }
    let a = assemble(&found(&cut[..2])).unwrap();
    let last = a.left_out().pop().unwrap();
    assert_eq!((last.slot, &last.why), (5, &Absence::NotGiven));
    assert_eq!(last.remedy(&a.label), Remedy::Replace);
    // Stale by more than its leaving, or without a bitmap: replaced whole.
    let mut far = labels.clone();
    far[1].event_counter = 9;
    let a = assemble(&found(&far[..2])).unwrap();
    assert_eq!(a.left_out()[0].remedy(&a.label), Remedy::Replace);
    for l in &mut labels {
        l.intent_region_stripes = 0;
    }
    let a = assemble(&found(&labels[..2])).unwrap();
    assert!(a
        .left_out()
        .iter()
        .all(|l| l.remedy(&a.label) == Remedy::Replace));
}
