use std::sync::Arc;

use platter_core::label::{Label, ReshapeRecord, SlotEntry, VolumeState, LABEL_BYTES};
use platter_core::Level;
use platter_io::memory::MemoryMember;
use platter_io::Member;

use super::finish_added_labels;
use crate::create::{label_subdisks, subdisk_reserve_bytes, ArraySpec};
use crate::pool::drives::labels_of;

const MIB: u64 = 1 << 20;

/// Five 40 MiB devices; the first `labelled` carry the labels of a raid5
/// made on the first three and being reshaped to five at
/// `position_bytes`, in `state` (the old members' labels as `platter
/// reshape --add` writes them first).
fn devices(labelled: usize, position_bytes: u64, state: VolumeState) -> Vec<Arc<dyn Member>> {
    let devs: Vec<Arc<dyn Member>> = (0..5)
        .map(|i| Arc::new(MemoryMember::new(format!("mem{i}"), 40 * MIB)) as Arc<dyn Member>)
        .collect();
    let spec = ArraySpec {
        level: Level::Raid5,
        interleave_bytes: 64 << 10,
        layout: None,
        copies: 1,
        name: "r".into(),
    };
    label_subdisks(&spec, devs[..3].to_vec(), subdisk_reserve_bytes(40 * MIB)).unwrap();
    let made = labels_of(&devs[..1]).unwrap()[0].clone().unwrap();
    let label = reshaping(made, position_bytes, state);
    for (slot, d) in devs.iter().enumerate() {
        d.write_at(0, &[0u8; LABEL_BYTES]).unwrap();
        if slot < labelled {
            d.write_at(0, &label.for_slot(slot as u32).encode())
                .unwrap();
        }
    }
    devs
}

/// `made`'s layout grown to five members by a reshape at
/// `position_bytes`.
fn reshaping(made: Label, position_bytes: u64, state: VolumeState) -> Label {
    let mut l = made.clone();
    l.state = state;
    l.event_counter += 1;
    l.member_count = 5;
    for i in 3..5u8 {
        let added = SlotEntry {
            member_uuid: [i + 1; 16],
            ..made.slots[0]
        };
        l.slots.push(added);
    }
    l.reshape = Some(ReshapeRecord {
        id: 7,
        position_bytes,
        old_level: made.level,
        old_parity_layout: made.parity_layout,
        old_copies: made.copies,
        old_interleave_bytes: made.interleave_bytes,
        old_member_count: 3,
        old_data_offset_bytes: made.data_offset_bytes,
    });
    l
}

/// The story: the old members' labels were written and the added ones'
/// cut off; the two blank devices get the labels of slots 3 and 4.
#[test]
fn blank_added_members_of_a_reshape_not_begun_are_labelled() {
    let devs = devices(3, 0, VolumeState::Clean);
    let written = finish_added_labels(&devs).unwrap();
    assert_eq!(written, [("mem3".to_string(), 3), ("mem4".to_string(), 4)]);
    let labels = labels_of(&devs).unwrap();
    for (slot, l) in labels.iter().enumerate() {
        let l = l.as_ref().expect("every device labelled");
        assert_eq!(l.slot, slot as u32);
        assert_eq!(l.member_count, 5);
    }
    // Labelled once: a second look finds nothing blank.
    assert!(finish_added_labels(&devs).unwrap().is_empty());
    // Cut after the first added label: the one blank device is the last
    // added slot, and is labelled.
    let devs = devices(4, 0, VolumeState::Clean);
    let written = finish_added_labels(&devs).unwrap();
    assert_eq!(written, [("mem4".to_string(), 4)]);
}

/// Each case where a blank device is not known to hold nothing: nothing
/// is written, and assembly says what is missing.
#[test]
fn nothing_is_written_unless_the_reshape_has_surely_not_begun() {
    let cases: [(&str, Vec<Arc<dyn Member>>); 3] = [
        ("moved", devices(3, 2 * MIB, VolumeState::Clean)),
        ("served since", devices(3, 0, VolumeState::Dirty)),
        // An old member missing too: slot 2 is not an added one.
        ("old member blank", devices(2, 0, VolumeState::Clean)),
    ];
    for (what, devs) in cases {
        let before: Vec<Option<Label>> = labels_of(&devs).unwrap();
        let written = finish_added_labels(&devs).unwrap();
        assert!(written.is_empty(), "{what}: {written:?}");
        assert_eq!(labels_of(&devs).unwrap(), before, "{what}");
    }
    // A blank device too small for its slot's data is not taken.
    let mut devs = devices(3, 0, VolumeState::Clean);
    devs[4] = Arc::new(MemoryMember::new("small", 8 * MIB));
    assert!(finish_added_labels(&devs).unwrap().is_empty());
}
