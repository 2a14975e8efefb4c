use super::*;

fn uuid(tag: u8, n: u32) -> [u8; 16] {
    let mut u = [tag; 16];
    u[12..].copy_from_slice(&n.to_le_bytes());
    u
}

/// A label for `level` with every field away from zero, so a field written to
/// the wrong place or not at all shows up in a round trip.
fn sample(level: Level) -> Label {
    let member_count = level.min_members() + 1;
    let copies = match level {
        Level::Mirror => member_count,
        Level::Raid10 => 2,
        _ => 1,
    };
    let slot = member_count - 1;
    let data_size_bytes = 1_000_000 * 512;
    let slots = (0..member_count)
        .map(|i| SlotEntry {
            member_uuid: uuid(0xB0, i),
            data_size_bytes: data_size_bytes + u64::from(i) * 512,
            state: SlotState::ALL[i as usize % SlotState::ALL.len()],
            left_at_events: 0,
        })
        .map(|mut e| {
            if e.member_uuid == uuid(0xB0, slot) {
                e.data_size_bytes = data_size_bytes;
            }
            e
        })
        .collect();
    Label {
        layout_version: LAYOUT_VERSION,
        volume_uuid: uuid(0xA0, 7),
        member_uuid: uuid(0xB0, slot),
        slot,
        member_count,
        level,
        parity_layout: ParityLayout::RightAsymmetric,
        copies,
        interleave_bytes: 126 * 512,
        data_offset_bytes: 1 << 20,
        data_size_bytes,
        volume_size_bytes: 3 * data_size_bytes,
        event_counter: 0x0102_0304_0506_0708,
        state: VolumeState::Rebuilding,
        rebuild_checkpoint_bytes: 12345 * 512,
        read_policy: 3,
        created_unix_seconds: 1_700_000_000,
        updated_unix_seconds: 1_700_000_999,
        name: "home—ünïcode".to_string(),
        intent_region_stripes: 0,
        read_policy_arg: 64 << 10,
        scrub: Default::default(),
        checksums: None,
        ppl: None,
        reshape: None,
        slots,
    }
}

/// Applies `patch` to the bytes and restores the checksum, so the change
/// reaches the checks behind it.
fn patched(label: &Label, patch: impl FnOnce(&mut [u8; LABEL_BYTES])) -> [u8; LABEL_BYTES] {
    let mut b = label.encode();
    patch(&mut b);
    refix_crc(&mut b);
    b
}

fn refix_crc(b: &mut [u8; LABEL_BYTES]) {
    let crc = crc32c::crc32c(&b[..at::CHECKSUM]);
    b[at::CHECKSUM..].copy_from_slice(&crc.to_le_bytes());
}

#[track_caller]
fn assert_field(result: Result<Label, LabelError>, expected: &str) {
    match result {
        Err(LabelError::Field { field, detail }) => {
            assert_eq!(field, expected, "wrong field refused ({detail})");
            assert!(!detail.is_empty());
        }
        other => panic!("expected a {expected} field error, got {other:?}"),
    }
}

#[test]
fn round_trip_every_level() {
    for level in Level::ALL {
        for state in VolumeState::ALL {
            let mut label = sample(level);
            label.state = state;
            let bytes = label.encode();
            assert_eq!(Label::decode(&bytes), Ok(label.clone()), "{level} {state}");
            assert!(!is_blank(&bytes));
        }
    }
}

#[test]
fn round_trip_edges() {
    let mut label = sample(Level::Raid6);
    label.name = "n".repeat(NAME_MAX_BYTES);
    label.data_size_bytes = u64::MAX - label.data_offset_bytes;
    label.slots[label.slot as usize].data_size_bytes = label.data_size_bytes;
    label.event_counter = u64::MAX;
    assert_eq!(Label::decode(&label.encode()), Ok(label.clone()));

    label.name.clear();
    assert_eq!(Label::decode(&label.encode()), Ok(label));

    let mut full = sample(Level::Stripe);
    full.member_count = MAX_MEMBERS;
    full.slots = (0..MAX_MEMBERS)
        .map(|i| SlotEntry {
            member_uuid: uuid(0xB0, i),
            data_size_bytes: full.data_size_bytes,
            state: SlotState::Active,
            left_at_events: 0,
        })
        .collect();
    full.slot = MAX_MEMBERS - 1;
    full.member_uuid = uuid(0xB0, full.slot);
    assert_eq!(Label::decode(&full.encode()), Ok(full));
}

#[test]
fn decode_reads_the_first_4096_bytes_of_longer_input() {
    let label = sample(Level::Raid5);
    let mut long = label.encode().to_vec();
    long.extend_from_slice(&[0xEE; 1000]);
    assert_eq!(Label::decode(&long), Ok(label));
}

#[test]
fn every_single_bit_flip_is_refused() {
    let bytes = sample(Level::Raid10).encode();
    for i in 0..LABEL_BYTES {
        for bit in 0..8 {
            let mut b = bytes;
            b[i] ^= 1 << bit;
            match Label::decode(&b) {
                Err(LabelError::Checksum { stored, computed }) => {
                    assert!(i >= at::MAGIC + LABEL_MAGIC.len(), "byte {i}");
                    assert_ne!(stored, computed);
                }
                Err(LabelError::NotALabel) => assert!(i < LABEL_MAGIC.len(), "byte {i}"),
                other => panic!("flip of byte {i} bit {bit} gave {other:?}"),
            }
        }
    }
}

#[test]
fn every_whole_byte_flip_is_refused() {
    let bytes = sample(Level::Mirror).encode();
    for i in 0..LABEL_BYTES {
        let mut b = bytes;
        b[i] ^= 0xFF;
        let expected_not_a_label = i < LABEL_MAGIC.len();
        match Label::decode(&b) {
            Err(LabelError::Checksum { .. }) if !expected_not_a_label => {}
            Err(LabelError::NotALabel) if expected_not_a_label => {}
            other => panic!("flip of byte {i} gave {other:?}"),
        }
    }
}

#[test]
fn blank_and_foreign_are_not_labels() {
    let zero = [0u8; LABEL_BYTES];
    assert!(is_blank(&zero));
    assert_eq!(Label::decode(&zero), Err(LabelError::NotALabel));

    // An ext4 or XFS superblock, a partition table: anything without the magic.
    let mut foreign = [0u8; LABEL_BYTES];
    foreign[..4].copy_from_slice(b"XFSB");
    assert!(is_blank(&foreign));
    assert_eq!(Label::decode(&foreign), Err(LabelError::NotALabel));

    assert!(is_blank(&[]));
    assert!(is_blank(&LABEL_MAGIC[..7]));
    assert!(!is_blank(&LABEL_MAGIC));

    // Damaged but ours: not blank, so `create` will not silently overwrite it.
    let mut damaged = sample(Level::Stripe).encode();
    damaged[100] ^= 1;
    assert!(!is_blank(&damaged));
}

#[test]
fn short_input_is_too_short() {
    let bytes = sample(Level::Concat).encode();
    for len in [0, 7, 8, 512, LABEL_BYTES - 1] {
        assert_eq!(
            Label::decode(&bytes[..len]),
            Err(LabelError::TooShort { len })
        );
    }
}

#[test]
fn unknown_format_version_is_refused() {
    let label = sample(Level::Stripe);
    for version in [0, LABEL_FORMAT_VERSION + 1, u32::MAX] {
        let b = patched(&label, |b| {
            b[at::FORMAT_VERSION..at::FORMAT_VERSION + 4].copy_from_slice(&version.to_le_bytes())
        });
        assert_eq!(
            Label::decode(&b),
            Err(LabelError::UnknownFormatVersion(version))
        );
    }
}

#[test]
fn unknown_layout_version_is_refused() {
    let label = sample(Level::Stripe);
    for version in [0, 2, u32::MAX] {
        let b = patched(&label, |b| {
            b[at::LAYOUT_VERSION..at::LAYOUT_VERSION + 4].copy_from_slice(&version.to_le_bytes());
            // A newer layout may bring codes this build lacks; the version is
            // still what gets reported.
            b[at::LEVEL] = 99;
        });
        let err = Label::decode(&b).unwrap_err();
        assert_eq!(err, LabelError::UnknownLayoutVersion(version));
        assert!(err.to_string().contains("newer platter"), "{err}");
    }
}

#[test]
fn unknown_codes_are_refused() {
    let label = sample(Level::Raid5);
    for code in [0, 7, 255] {
        assert_field(
            Label::decode(&patched(&label, |b| b[at::LEVEL] = code)),
            "level",
        );
        assert_field(
            Label::decode(&patched(&label, |b| b[at::STATE] = code)),
            "state",
        );
        assert_field(
            Label::decode(&patched(&label, |b| {
                b[at::SLOT_TABLE + at::ENTRY_STATE] = code
            })),
            "slots",
        );
    }
    for code in [4, 255] {
        assert_field(
            Label::decode(&patched(&label, |b| b[at::PARITY_LAYOUT] = code)),
            "parity_layout",
        );
    }
}

fn put(b: &mut [u8; LABEL_BYTES], offset: usize, value: &[u8]) {
    b[offset..offset + value.len()].copy_from_slice(value);
}

#[test]
fn member_count_out_of_range_is_refused() {
    let label = sample(Level::Stripe);
    for count in [0u32, MAX_MEMBERS + 1, u32::MAX] {
        assert_field(
            Label::decode(&patched(&label, |b| {
                put(b, at::MEMBER_COUNT, &count.to_le_bytes())
            })),
            "member_count",
        );
    }
    // Three members are not enough for raid6.
    let mut raid6 = sample(Level::Raid6);
    raid6.member_count = 3;
    raid6.slot = 2;
    raid6.slots.truncate(3);
    raid6.member_uuid = raid6.slots[2].member_uuid;
    raid6.slots[2].data_size_bytes = raid6.data_size_bytes;
    assert_field(raid6.validate().map(|()| raid6.clone()), "member_count");
}

#[test]
fn slot_beyond_member_count_is_refused() {
    let label = sample(Level::Stripe);
    for slot in [label.member_count, label.member_count + 1, u32::MAX] {
        assert_field(
            Label::decode(&patched(&label, |b| put(b, at::SLOT, &slot.to_le_bytes()))),
            "slot",
        );
    }
}

#[test]
fn copies_invalid_for_the_level_are_refused() {
    let cases: [(Level, &[u32]); 6] = [
        (Level::Concat, &[0, 2]),
        (Level::Stripe, &[0, 2]),
        (Level::Mirror, &[0, 1, 2, 4]),
        (Level::Raid10, &[0, 1, 4]),
        (Level::Raid5, &[0, 2]),
        (Level::Raid6, &[0, 2]),
    ];
    for (level, bad) in cases {
        let label = sample(level);
        for &copies in bad {
            assert_field(
                Label::decode(&patched(&label, |b| {
                    put(b, at::COPIES, &copies.to_le_bytes())
                })),
                "copies",
            );
        }
    }
}

#[test]
fn interleave_not_a_multiple_of_512_is_refused() {
    let label = sample(Level::Stripe);
    for interleave in [0u64, 1, 511, 513, 126 * 512 + 1] {
        assert_field(
            Label::decode(&patched(&label, |b| {
                put(b, at::INTERLEAVE_BYTES, &interleave.to_le_bytes())
            })),
            "interleave_bytes",
        );
    }
}

#[test]
fn data_offset_inside_the_label_or_unaligned_is_refused() {
    let label = sample(Level::Stripe);
    for offset in [0u64, 512, 4095, 4097, 6144] {
        assert_field(
            Label::decode(&patched(&label, |b| {
                put(b, at::DATA_OFFSET_BYTES, &offset.to_le_bytes())
            })),
            "data_offset_bytes",
        );
    }
}

#[test]
fn data_area_past_u64_is_refused() {
    let mut label = sample(Level::Concat);
    label.data_size_bytes = u64::MAX - label.data_offset_bytes + 1;
    label.slots[label.slot as usize].data_size_bytes = label.data_size_bytes;
    assert_field(label.validate().map(|()| label.clone()), "data_size_bytes");
}

#[test]
fn bad_names_are_refused() {
    let label = sample(Level::Mirror);
    let non_utf8 = patched(&label, |b| put(b, at::NAME, &[0xC3, 0x28, 0]));
    assert_field(Label::decode(&non_utf8), "name");
    let garbage_after_nul = patched(&label, |b| put(b, at::NAME, b"ab\0c"));
    assert_field(Label::decode(&garbage_after_nul), "name");

    let mut long = label.clone();
    long.name = "x".repeat(NAME_MAX_BYTES + 1);
    assert_field(long.validate().map(|()| long.clone()), "name");
    let mut nul = label;
    nul.name = "a\0b".to_string();
    assert_field(nul.validate().map(|()| nul.clone()), "name");
}

#[test]
fn nil_uuids_are_refused() {
    let label = sample(Level::Raid5);
    assert_field(
        Label::decode(&patched(&label, |b| put(b, at::VOLUME_UUID, &[0; 16]))),
        "volume_uuid",
    );
    assert_field(
        Label::decode(&patched(&label, |b| put(b, at::MEMBER_UUID, &[0; 16]))),
        "member_uuid",
    );
}

#[test]
fn reserved_bytes_must_be_zero() {
    let label = sample(Level::Raid6);
    let first_entry_reserved = at::SLOT_TABLE + at::ENTRY_RESERVED;
    for offset in [
        at::RESHAPE_RESERVED,
        at::RESERVED_HEADER,
        at::SLOT_TABLE - 1,
        first_entry_reserved,
        at::RESERVED_TAIL,
        at::CHECKSUM - 1,
    ] {
        let err = Label::decode(&patched(&label, |b| b[offset] = 1));
        assert_field(err.clone(), "reserved");
        assert!(
            err.unwrap_err()
                .to_string()
                .contains(&format!("0x{offset:03x}")),
            "offset {offset:#x}"
        );
    }
}

#[test]
fn slot_table_inconsistencies_are_refused() {
    let label = sample(Level::Raid6);
    let entry = |i: usize| at::SLOT_TABLE + i * at::SLOT_ENTRY_BYTES;
    let used = label.member_count as usize;

    // A leftover entry past member_count.
    assert_field(
        Label::decode(&patched(&label, |b| b[entry(used) + at::ENTRY_STATE] = 1)),
        "slots",
    );
    assert_field(
        Label::decode(&patched(&label, |b| b[entry(MAX_MEMBERS as usize - 1)] = 1)),
        "slots",
    );
    // Two slots naming one member.
    let dup = label.slots[0].member_uuid;
    assert_field(
        Label::decode(&patched(&label, |b| put(b, entry(1), &dup))),
        "slots",
    );
    // Own slot naming someone else, or disagreeing about the size.
    let own = label.slot as usize;
    assert_field(
        Label::decode(&patched(&label, |b| {
            b[entry(own) + at::ENTRY_MEMBER_UUID] ^= 1
        })),
        "slots",
    );
    assert_field(
        Label::decode(&patched(&label, |b| {
            b[entry(own) + at::ENTRY_DATA_SIZE_BYTES] ^= 1
        })),
        "slots",
    );
    // An empty slot is fine when Removed and refused otherwise.
    let mut removed = label.clone();
    removed.slots[0] = SlotEntry {
        member_uuid: [0; 16],
        data_size_bytes: 0,
        state: SlotState::Removed,
        left_at_events: 0,
    };
    assert_eq!(Label::decode(&removed.encode()), Ok(removed.clone()));
    removed.slots[1] = removed.slots[0];
    assert_eq!(Label::decode(&removed.encode()), Ok(removed.clone()));
    removed.slots[0].state = SlotState::Faulty;
    assert_field(removed.validate().map(|()| removed.clone()), "slots");
    // Table length disagreeing with member_count.
    let mut short = label;
    short.slots.pop();
    assert_field(short.validate().map(|()| short.clone()), "slots");
}

#[test]
#[should_panic(expected = "refusing to encode an invalid label: invalid label field slot")]
fn encode_asserts_the_invariants() {
    let mut label = sample(Level::Stripe);
    label.slot = label.member_count;
    let _ = label.encode();
}

#[test]
fn messages_read_after_a_member_path() {
    let stored = 0xDEAD_BEEF;
    let msg = LabelError::Checksum {
        stored,
        computed: 0x0000_0001,
    }
    .to_string();
    assert_eq!(
        msg,
        "label checksum mismatch (stored 0xdeadbeef, computed 0x00000001): the label is damaged"
    );
    assert_eq!(
        LabelError::NotALabel.to_string(),
        "no platter label (blank or foreign device)"
    );
}

#[test]
fn state_codes_are_stable_and_nonzero() {
    let volume: Vec<u8> = VolumeState::ALL.iter().map(|s| s.code()).collect();
    assert_eq!(volume, [1, 2, 3, 4]);
    let slot: Vec<u8> = SlotState::ALL.iter().map(|s| s.code()).collect();
    assert_eq!(slot, [1, 2, 3, 4, 5]);
    for s in VolumeState::ALL {
        assert_eq!(VolumeState::from_code(s.code()), Some(s));
    }
    for s in SlotState::ALL {
        assert_eq!(SlotState::from_code(s.code()), Some(s));
    }
    assert_eq!(VolumeState::from_code(0), None);
    assert_eq!(SlotState::from_code(0), None);
}

#[test]
fn fields_tile_the_label_without_overlap() {
    let mut fields = vec![
        (at::MAGIC, 8),
        (at::FORMAT_VERSION, 4),
        (at::LAYOUT_VERSION, 4),
        (at::VOLUME_UUID, 16),
        (at::MEMBER_UUID, 16),
        (at::SLOT, 4),
        (at::MEMBER_COUNT, 4),
        (at::LEVEL, 1),
        (at::PARITY_LAYOUT, 1),
        (at::STATE, 1),
        (at::READ_POLICY, 1),
        (at::COPIES, 4),
        (at::INTERLEAVE_BYTES, 8),
        (at::DATA_OFFSET_BYTES, 8),
        (at::DATA_SIZE_BYTES, 8),
        (at::VOLUME_SIZE_BYTES, 8),
        (at::EVENT_COUNTER, 8),
        (at::REBUILD_CHECKPOINT_BYTES, 8),
        (at::CREATED_UNIX_SECONDS, 8),
        (at::UPDATED_UNIX_SECONDS, 8),
        (at::INTENT_REGION_STRIPES, 8),
        (at::READ_POLICY_ARG, 8),
        (at::SCRUB_STARTED_UNIX_SECONDS, 8),
        (at::SCRUB_CURSOR_STRIPES, 8),
        (at::SCRUB_FOUND_STRIPES, 8),
        (at::SCRUB_COMPLETED_UNIX_SECONDS, 8),
        (at::SCRUB_LAST_FOUND_STRIPES, 8),
        (at::CHECKSUM_OFFSET_BYTES, 8),
        (at::CHECKSUM_ALGORITHM, 8),
        (at::PPL_OFFSET_BYTES, 8),
        (at::PPL_LEN_BYTES, 8),
        (at::RESHAPE_ID, 8),
        (at::RESHAPE_POSITION_BYTES, 8),
        (at::RESHAPE_OLD_INTERLEAVE_BYTES, 8),
        (at::RESHAPE_OLD_MEMBER_COUNT, 4),
        (at::RESHAPE_OLD_COPIES, 4),
        (at::RESHAPE_OLD_LEVEL, 1),
        (at::RESHAPE_OLD_PARITY_LAYOUT, 1),
        // Six reserved bytes, as two aligned pieces.
        (at::RESHAPE_RESERVED, 2),
        (
            at::RESHAPE_RESERVED + 2,
            at::RESHAPE_OLD_DATA_OFFSET_BYTES - at::RESHAPE_RESERVED - 2,
        ),
        (at::RESHAPE_OLD_DATA_OFFSET_BYTES, 8),
        (at::CHECKSUM_FORMAT, 8),
        (at::NAME, NAME_MAX_BYTES),
        (at::RESERVED_HEADER, at::SLOT_TABLE - at::RESERVED_HEADER),
        (at::SLOT_TABLE, MAX_MEMBERS as usize * at::SLOT_ENTRY_BYTES),
        (at::RESERVED_TAIL, at::CHECKSUM - at::RESERVED_TAIL),
        (at::CHECKSUM, 4),
    ];
    fields.sort();
    let mut next = 0;
    for (offset, size) in fields {
        assert_eq!(offset, next, "gap or overlap at {offset:#x}");
        assert_eq!(offset % size.min(8), 0, "{offset:#x} misaligned");
        next = offset + size;
    }
    assert_eq!(next, LABEL_BYTES);

    let entry = [
        (at::ENTRY_MEMBER_UUID, 16),
        (at::ENTRY_DATA_SIZE_BYTES, 8),
        (at::ENTRY_STATE, 1),
        (
            at::ENTRY_RESERVED,
            at::SLOT_ENTRY_BYTES - at::ENTRY_RESERVED,
        ),
    ];
    let mut next = 0;
    for (offset, size) in entry {
        assert_eq!(offset, next);
        next = offset + size;
    }
    assert_eq!(next, at::SLOT_ENTRY_BYTES);
}

/// Version 2 holds the scrub record; a label without one is written at
/// version 1, byte for byte what a version-1 build writes and reads.
#[test]
fn the_scrub_record_needs_version_2_and_only_it_does() {
    let mut label = sample(Level::Raid6);
    assert_eq!(label.encode()[at::FORMAT_VERSION], 1);
    label.scrub = ScrubRecord {
        started_unix_seconds: 1_700_000_000,
        cursor_stripes: 12,
        found_stripes: 1,
        completed_unix_seconds: 1_600_000_000,
        last_found_stripes: 0,
    };
    let b = label.encode();
    assert_eq!(b[at::FORMAT_VERSION], 2);
    assert_eq!(Label::decode(&b), Ok(label.clone()));

    // Version 1 with a scrub field set: reserved bytes there.
    let v1 = patched(&label, |b| b[at::FORMAT_VERSION] = 1);
    assert_field(Label::decode(&v1), "reserved");
    // Version 2 with none set: not what a writer produces.
    let bare = sample(Level::Raid6);
    let v2 = patched(&bare, |b| b[at::FORMAT_VERSION] = 2);
    assert_field(Label::decode(&v2), "format_version");
    // A cursor with no pass in progress, findings of no completed pass.
    let mut stray = label.clone();
    stray.scrub.started_unix_seconds = 0;
    assert!(stray.validate().is_err());
    let mut stray = label;
    stray.scrub.completed_unix_seconds = 0;
    stray.scrub.last_found_stripes = 3;
    assert!(stray.validate().is_err());
}

/// A log names its area only on parity levels, in whole blocks before the
/// data and clear of the checksums; a version-4 label has one, and a log
/// from a build that knows only 3 is not there to misread.
#[test]
fn a_partial_parity_log_is_checked_and_read_back() {
    let mut label = sample(Level::Raid5);
    let len = crate::ppl::ring_bytes_min(label.interleave_bytes);
    label.data_offset_bytes = label.data_offset_bytes.max(4096 + len);
    label.ppl = Some(crate::ppl::Layout {
        offset_bytes: 4096,
        len_bytes: len,
    });
    let b = label.encode();
    assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 4);
    assert_eq!(Label::decode(&b).unwrap(), label);
    for bad in [
        crate::ppl::Layout {
            offset_bytes: 4096 + 512,
            len_bytes: len,
        },
        crate::ppl::Layout {
            offset_bytes: 4096,
            len_bytes: len - 4096,
        },
        crate::ppl::Layout {
            offset_bytes: 4096,
            len_bytes: label.data_offset_bytes,
        },
    ] {
        let mut l = label.clone();
        l.ppl = Some(bad);
        assert!(l.validate().is_err(), "{bad:?}");
    }
    let mut l = sample(Level::Mirror);
    l.data_offset_bytes = label.data_offset_bytes;
    l.ppl = label.ppl;
    assert!(l.validate().is_err(), "a log on a mirror");
    // Version 4 with the fields zero is not canonical.
    let mut plain = label.clone();
    plain.ppl = None;
    let b = patched(&plain, |b| b[8..12].copy_from_slice(&4u32.to_le_bytes()));
    assert!(Label::decode(&b).is_err());
}

/// When a slot's member left is recorded in version 5 only, read back as
/// written; version 5 with nothing recorded is not canonical, and the
/// field's bytes in an older version are refused, not guessed at.
#[test]
fn a_slots_leaving_needs_version_5_and_only_it_does() {
    let mut label = sample(Level::Mirror);
    let plain = label.encode();
    assert!(u32::from_le_bytes(plain[8..12].try_into().unwrap()) < 5);
    label.slots[1].state = SlotState::Faulty;
    label.slots[1].left_at_events = label.event_counter;
    let b = label.encode();
    assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 5);
    assert_eq!(Label::decode(&b).unwrap(), label);
    let mut none = label.clone();
    none.slots[1].left_at_events = 0;
    let v5 = patched(&none, |b| b[8..12].copy_from_slice(&5u32.to_le_bytes()));
    assert!(Label::decode(&v5).is_err(), "version 5 with nothing in it");
    let e = at::SLOT_TABLE + at::SLOT_ENTRY_BYTES + at::ENTRY_LEFT_AT_EVENTS;
    let old = patched(&none, |b| b[e] = 7);
    assert!(
        Label::decode(&old).is_err(),
        "the field's bytes in version 1"
    );
}

/// Version 6 holds a reshape in progress; without one the label is
/// written as before, and a build that knows only 5 refuses one with it
/// (it would read the bytes not yet moved through the new layout).
#[test]
fn a_reshape_needs_version_6_and_only_it_does() {
    let mut label = sample(Level::Raid5);
    let plain = label.encode();
    assert!(u32::from_le_bytes(plain[8..12].try_into().unwrap()) < 6);
    let record = ReshapeRecord {
        id: 77,
        position_bytes: 3 << 20,
        old_level: Level::Raid5,
        old_parity_layout: ParityLayout::LeftSymmetric,
        old_copies: 1,
        old_interleave_bytes: 64 << 10,
        old_member_count: 3,
        old_data_offset_bytes: label.data_offset_bytes + (1 << 20),
    };
    label.reshape = Some(record);
    let b = label.encode();
    assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 6);
    assert_eq!(Label::decode(&b).unwrap(), label);
    let spec = record.old_spec(&label);
    assert_eq!(spec.data_offset_bytes, label.data_offset_bytes + (1 << 20));
    assert_eq!(spec.member_data_bytes.len(), 3);
    // A reshape that keeps the data offset writes 0 there, as builds
    // before the field did, and reads it back as the label's.
    let kept = ReshapeRecord {
        old_data_offset_bytes: label.data_offset_bytes,
        ..record
    };
    let kept_label = Label {
        reshape: Some(kept),
        ..label.clone()
    };
    let b = kept_label.encode();
    assert_eq!(
        b[at::RESHAPE_OLD_DATA_OFFSET_BYTES..at::CHECKSUM_FORMAT],
        [0; 8]
    );
    assert_eq!(Label::decode(&b).unwrap(), kept_label);
    assert_eq!(spec.interleave_bytes, 64 << 10);

    let none = Label {
        reshape: None,
        ..label.clone()
    };
    let v6 = patched(&none, |b| b[8..12].copy_from_slice(&6u32.to_le_bytes()));
    assert_field(Label::decode(&v6), "format_version");
    let v5 = patched(&label, |b| b[8..12].copy_from_slice(&5u32.to_le_bytes()));
    assert_field(Label::decode(&v5), "reserved");
    // With no reshape (id 0), its other fields must be zero too.
    let stray = patched(&none, |b| b[at::RESHAPE_POSITION_BYTES] = 1);
    assert_field(Label::decode(&stray), "reserved");

    let bad = |r: ReshapeRecord| {
        let l = Label {
            reshape: Some(r),
            ..label.clone()
        };
        l.validate()
    };
    for wrong in [
        ReshapeRecord { id: 0, ..record },
        ReshapeRecord {
            old_member_count: 2,
            ..record
        },
        ReshapeRecord {
            old_member_count: label.member_count + 1,
            ..record
        },
        ReshapeRecord {
            old_copies: 2,
            ..record
        },
        ReshapeRecord {
            old_interleave_bytes: 1000,
            ..record
        },
        // The data only ever moves down, in whole pages.
        ReshapeRecord {
            old_data_offset_bytes: label.data_offset_bytes - 4096,
            ..record
        },
        ReshapeRecord {
            old_data_offset_bytes: label.data_offset_bytes + 512,
            ..record
        },
    ] {
        assert!(
            matches!(
                bad(wrong),
                Err(LabelError::Field {
                    field: "reshape",
                    ..
                })
            ),
            "{wrong:?}"
        );
    }
    let unknown_level = patched(&label, |b| b[at::RESHAPE_OLD_LEVEL] = 0xEE);
    assert_field(Label::decode(&unknown_level), "reshape");
}

/// Sealed checksum pages need version 7 and only they do: bare pages stay
/// at version 3 (older builds read those), a version-7 label with bare or
/// no pages is not what a writer produces, the field's bytes in an older
/// version are refused, and an unknown page format is refused by name.
#[test]
fn sealed_checksum_pages_need_version_7_and_only_they_do() {
    use crate::integrity::{Algorithm, PageFormat};
    let mut label = sample(Level::Mirror);
    label.data_offset_bytes = label.data_offset_bytes.max(8 << 20);
    let with = |label: &Label, format| Label {
        checksums: Some(Checksums {
            algorithm: Algorithm::Crc32c,
            format,
            area_offset_bytes: 1 << 20,
        }),
        ..label.clone()
    };
    let version = |b: &[u8; LABEL_BYTES]| u32::from_le_bytes(b[8..12].try_into().unwrap());
    let bare = with(&label, PageFormat::Bare);
    assert_eq!(version(&bare.encode()), 3);
    assert_eq!(Label::decode(&bare.encode()).unwrap(), bare);
    for records in [false, true] {
        let sealed = with(&label, PageFormat::Sealed { records });
        let b = sealed.encode();
        assert_eq!(version(&b), 7);
        assert_eq!(b[at::CHECKSUM_FORMAT], 1 + u8::from(records));
        assert_eq!(Label::decode(&b).unwrap(), sealed);
        // Read by a build that knows only 6: the field is reserved there.
        let v6 = patched(&sealed, |b| b[8..12].copy_from_slice(&6u32.to_le_bytes()));
        assert!(Label::decode(&v6).is_err(), "sealed pages at version 6");
    }
    let v7 = patched(&bare, |b| b[8..12].copy_from_slice(&7u32.to_le_bytes()));
    assert_field(Label::decode(&v7), "format_version");
    let unknown = patched(&with(&label, PageFormat::Sealed { records: true }), |b| {
        b[at::CHECKSUM_FORMAT] = 3
    });
    assert_field(Label::decode(&unknown), "checksum_format");
    let stray = patched(&label, |b| {
        b[8..12].copy_from_slice(&7u32.to_le_bytes());
        b[at::CHECKSUM_FORMAT] = 1
    });
    assert!(
        Label::decode(&stray).is_err(),
        "a page format with no checksums"
    );
}
