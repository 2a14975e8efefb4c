//! Property tests of the label codec: every valid label round-trips exactly,
//! and no input makes `decode` panic or accept bytes it would not write.

use platter_core::integrity::{Algorithm, PageFormat};
use platter_core::label::{
    at, is_blank, Checksums, Label, LabelError, ReshapeRecord, ScrubRecord, SlotEntry, SlotState,
    VolumeState, LABEL_BYTES, LABEL_MAGIC, LAYOUT_VERSION, MAX_MEMBERS,
};
use platter_core::{Level, ParityLayout};
use proptest::prelude::*;
use proptest::sample::select;

const NIL: [u8; 16] = [0; 16];

fn uuid() -> impl Strategy<Value = [u8; 16]> {
    any::<[u8; 16]>().prop_filter("nil", |u| *u != NIL)
}

fn name() -> impl Strategy<Value = String> {
    // 16 chars of at most 4 bytes each always fit; the second arm fills the
    // field exactly.
    prop_oneof![
        "[^\\x00]{0,16}",
        "[a-z]{64}",
        "[a-zé]{30,33}".prop_filter("fits", |s| s.len() <= 64),
    ]
}

/// Member counts near the level's minimum are where the copies and slot
/// rules bite, so they get half the cases.
fn level_and_count() -> impl Strategy<Value = (Level, u32)> {
    select(Level::ALL.to_vec()).prop_flat_map(|level| {
        let min = level.min_members();
        (Just(level), prop_oneof![min..=min + 3, min..=MAX_MEMBERS])
    })
}

fn slot_entries(count: u32) -> impl Strategy<Value = Vec<SlotEntry>> {
    prop::collection::vec(
        (
            uuid(),
            any::<u64>(),
            select(SlotState::ALL.to_vec()),
            prop::bool::weighted(0.1),
        ),
        count as usize,
    )
    .prop_map(|entries| {
        entries
            .into_iter()
            .map(|(member_uuid, data_size_bytes, state, empty)| {
                if empty {
                    SlotEntry {
                        member_uuid: NIL,
                        data_size_bytes,
                        state: SlotState::Removed,
                        left_at_events: 0,
                    }
                } else {
                    SlotEntry {
                        member_uuid,
                        data_size_bytes,
                        state,
                        left_at_events: 0,
                    }
                }
            })
            .collect()
    })
}

fn label() -> impl Strategy<Value = Label> {
    level_and_count()
        .prop_flat_map(|(level, member_count)| {
            let copies = match level {
                Level::Mirror => Just(member_count).boxed(),
                Level::Raid10 => (2..=member_count).boxed(),
                _ => Just(1).boxed(),
            };
            let ids = (uuid(), uuid(), 0..member_count, copies);
            let geometry = (
                select(ParityLayout::ALL.to_vec()),
                1..=u64::MAX / 512,
                prop_oneof![Just(256u64), 1..=u64::MAX / 4096],
                any::<u64>(),
                any::<u64>(),
            );
            let state = (
                any::<u64>(),
                select(VolumeState::ALL.to_vec()),
                any::<u64>(),
                any::<u8>(),
                any::<u64>(),
                any::<u64>(),
            );
            (
                Just((level, member_count)),
                ids,
                geometry,
                state,
                name(),
                slot_entries(member_count),
            )
        })
        .prop_map(
            |(
                (level, member_count),
                (volume_uuid, member_uuid, slot, copies),
                (
                    parity_layout,
                    interleave_sectors,
                    data_offset_blocks,
                    raw_size,
                    volume_size_bytes,
                ),
                (event_counter, state, checkpoint, read_policy, created, updated),
                name,
                mut slots,
            )| {
                let data_offset_bytes = data_offset_blocks * 4096;
                // Any size whose end still fits in a u64, including the last one.
                let data_size_bytes = match raw_size % 4 {
                    0 => u64::MAX - data_offset_bytes,
                    _ => raw_size % (u64::MAX - data_offset_bytes + 1),
                };
                slots[slot as usize] = SlotEntry {
                    member_uuid,
                    data_size_bytes,
                    state: slots[slot as usize].state,
                    left_at_events: 0,
                };
                Label {
                    layout_version: LAYOUT_VERSION,
                    volume_uuid,
                    member_uuid,
                    slot,
                    member_count,
                    level,
                    parity_layout,
                    copies,
                    interleave_bytes: interleave_sectors * 512,
                    data_offset_bytes,
                    data_size_bytes,
                    volume_size_bytes,
                    event_counter,
                    state,
                    rebuild_checkpoint_bytes: checkpoint,
                    read_policy,
                    created_unix_seconds: created,
                    updated_unix_seconds: updated,
                    name,
                    // Any value is valid in the label; assembly checks it
                    // against the geometry.
                    intent_region_stripes: updated.rotate_left(17),
                    // Like read_policy: the server checks it.
                    read_policy_arg: created.rotate_left(29),
                    // A third of the labels have no scrub record (written
                    // at version 1), the rest one with or without a pass
                    // in progress (version 2).
                    scrub: if event_counter % 3 == 0 {
                        ScrubRecord::default()
                    } else {
                        let started = (event_counter % 2) * (updated | 1);
                        let running = u64::from(started != 0);
                        ScrubRecord {
                            started_unix_seconds: started,
                            cursor_stripes: running * created.rotate_left(3),
                            found_stripes: running * updated.rotate_left(5),
                            completed_unix_seconds: created | 1,
                            last_found_stripes: updated.rotate_left(9),
                        }
                    },
                    // Checksums (version 3) where an area fits before the
                    // data: at 4 KiB, whatever the algorithm.
                    // Bare, sealed or sealed with records by the counter.
                    checksums: {
                        let format = PageFormat::from_code((event_counter / 8 % 3) as u8)
                            .expect("a format code");
                        let area = format.area_bytes(data_size_bytes);
                        let fits = 4096u64
                            .checked_add(area)
                            .is_some_and(|end| end <= data_offset_bytes);
                        (fits && event_counter % 4 != 0).then_some(Checksums {
                            algorithm: if event_counter % 2 == 0 {
                                Algorithm::Crc32c
                            } else {
                                Algorithm::Xxh3
                            },
                            format,
                            area_offset_bytes: 4096,
                        })
                    },
                    // A partial parity log (version 4) on parity levels
                    // where it fits at 4 KiB and there are no checksums.
                    ppl: {
                        let len = platter_core::ppl::ring_bytes_min(interleave_sectors * 512);
                        let fits = 4096u64
                            .checked_add(len)
                            .is_some_and(|end| end <= data_offset_bytes);
                        (fits && level.is_parity() && event_counter % 4 == 0).then_some(
                            platter_core::ppl::Layout {
                                offset_bytes: 4096,
                                len_bytes: len,
                            },
                        )
                    },
                    // A reshape in progress (version 6) in a fifth of the
                    // labels: from a stripe or RAID-5 of fewer members.
                    reshape: (created % 5 == 0 && member_count >= 3).then(|| {
                        let old_level = if updated % 2 == 0 {
                            Level::Stripe
                        } else {
                            Level::Raid5
                        };
                        ReshapeRecord {
                            id: created | 1,
                            position_bytes: updated.rotate_left(7),
                            old_level,
                            old_parity_layout: parity_layout,
                            old_copies: 1,
                            old_interleave_bytes: (1 + updated % 256) * 512,
                            old_member_count: 3 + (updated as u32 % (member_count - 2)),
                            // Half moved down into the room before the data.
                            old_data_offset_bytes: data_offset_bytes
                                + (updated % 2) * ((updated >> 8) % 1024) * 4096,
                        }
                    }),
                    slots,
                }
            },
        )
        // Random uuids colliding is a 2^-128 event; filtering keeps the
        // strategy honest without shaping it.
        .prop_filter("valid", |l| l.validate().is_ok())
}

fn refix_crc(b: &mut [u8]) {
    if b.len() >= LABEL_BYTES {
        let crc = crc32c::crc32c(&b[..at::CHECKSUM]);
        b[at::CHECKSUM..LABEL_BYTES].copy_from_slice(&crc.to_le_bytes());
    }
}

/// The two things every decode must satisfy: no panic (the caller of this
/// already got here), and an accepted label is exactly what encode writes.
fn check_decode(bytes: &[u8]) -> Result<(), TestCaseError> {
    match Label::decode(bytes) {
        Ok(label) => {
            prop_assert!(label.validate().is_ok());
            prop_assert_eq!(&label.encode()[..], &bytes[..LABEL_BYTES]);
            prop_assert!(!is_blank(bytes));
        }
        Err(LabelError::TooShort { len }) => {
            prop_assert_eq!(len, bytes.len());
            prop_assert!(len < LABEL_BYTES);
        }
        Err(LabelError::NotALabel) => prop_assert!(is_blank(bytes)),
        Err(e) => {
            prop_assert!(!is_blank(bytes));
            // Every refusal has a message that can follow "member /path: ".
            prop_assert!(!e.to_string().is_empty());
        }
    }
    Ok(())
}

/// Offsets worth mutating: the header and the first slot entries hold every
/// validated field; the rest is reserved or unused table.
fn mutation_offset() -> impl Strategy<Value = usize> {
    prop_oneof![
        0..at::NAME + 64,
        at::SLOT_TABLE..at::SLOT_TABLE + 5 * at::SLOT_ENTRY_BYTES,
        0..at::CHECKSUM,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn valid_labels_round_trip(label in label()) {
        let bytes = label.encode();
        let decoded = Label::decode(&bytes);
        prop_assert_eq!(decoded.as_ref(), Ok(&label));
        prop_assert_eq!(decoded.unwrap().encode(), bytes);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..5000)) {
        check_decode(&bytes)?;
    }

    #[test]
    fn arbitrary_bytes_behind_the_magic_never_panic(
        tail in prop::collection::vec(any::<u8>(), 0..5000),
        fix_crc in any::<bool>(),
    ) {
        let mut bytes = LABEL_MAGIC.to_vec();
        bytes.extend_from_slice(&tail);
        if fix_crc {
            refix_crc(&mut bytes);
        }
        check_decode(&bytes)?;
    }

    #[test]
    fn mutated_labels_never_panic(
        label in label(),
        mutations in prop::collection::vec((mutation_offset(), any::<u8>()), 1..8),
        extra in prop::collection::vec(any::<u8>(), 0..100),
    ) {
        let mut bytes = label.encode().to_vec();
        for (offset, value) in mutations {
            bytes[offset] = value;
        }
        refix_crc(&mut bytes);
        bytes.extend_from_slice(&extra);
        check_decode(&bytes)?;
    }

    /// Fields the codec leaves free take any value: the mutation test's
    /// accept path is really exercised.
    #[test]
    fn free_fields_take_any_value(
        label in label(),
        event_counter in any::<u64>(),
        checkpoint in any::<u64>(),
        volume_size in any::<u64>(),
        created in any::<u64>(),
        updated in any::<u64>(),
        read_policy in any::<u8>(),
        read_policy_arg in any::<u64>(),
    ) {
        let mut bytes = label.encode();
        bytes[at::EVENT_COUNTER..at::EVENT_COUNTER + 8].copy_from_slice(&event_counter.to_le_bytes());
        bytes[at::REBUILD_CHECKPOINT_BYTES..at::REBUILD_CHECKPOINT_BYTES + 8]
            .copy_from_slice(&checkpoint.to_le_bytes());
        bytes[at::VOLUME_SIZE_BYTES..at::VOLUME_SIZE_BYTES + 8]
            .copy_from_slice(&volume_size.to_le_bytes());
        bytes[at::CREATED_UNIX_SECONDS..at::CREATED_UNIX_SECONDS + 8]
            .copy_from_slice(&created.to_le_bytes());
        bytes[at::UPDATED_UNIX_SECONDS..at::UPDATED_UNIX_SECONDS + 8]
            .copy_from_slice(&updated.to_le_bytes());
        bytes[at::READ_POLICY] = read_policy;
        bytes[at::READ_POLICY_ARG..at::READ_POLICY_ARG + 8]
            .copy_from_slice(&read_policy_arg.to_le_bytes());
        refix_crc(&mut bytes);
        let decoded = Label::decode(&bytes).expect("free fields only");
        prop_assert_eq!(decoded.event_counter, event_counter);
        prop_assert_eq!(decoded.rebuild_checkpoint_bytes, checkpoint);
        prop_assert_eq!(decoded.volume_size_bytes, volume_size);
        prop_assert_eq!(decoded.created_unix_seconds, created);
        prop_assert_eq!(decoded.updated_unix_seconds, updated);
        prop_assert_eq!(decoded.read_policy, read_policy);
        prop_assert_eq!(decoded.read_policy_arg, read_policy_arg);
        prop_assert_eq!(decoded.encode(), bytes);
    }
}
