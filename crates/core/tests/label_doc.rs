//! `docs/on-disk-format.md` is the contract people and other tools read; this
//! checks its byte tables against the bytes `Label::encode` writes, so the
//! document cannot drift from the code.

use platter_core::integrity::{Algorithm, PageFormat};
use platter_core::label::{
    at, Checksums, Label, ReshapeRecord, ScrubRecord, SlotEntry, SlotState, VolumeState,
    LABEL_BYTES, LABEL_FORMAT_VERSION, LABEL_MAGIC, LAYOUT_VERSION, MAX_MEMBERS, NAME_MAX_BYTES,
};
use platter_core::{Level, ParityLayout};

const DOC: &str = include_str!("../../../docs/on-disk-format.md");

#[derive(Debug, PartialEq)]
struct Row {
    offset: usize,
    size: usize,
    field: String,
}

/// The rows of the first table after `heading` whose offset cell is hex.
fn table_after(heading: &str) -> Vec<Row> {
    let start = DOC
        .lines()
        .position(|l| l.trim() == heading)
        .unwrap_or_else(|| panic!("no heading {heading:?} in docs/on-disk-format.md"));
    DOC.lines()
        .skip(start + 1)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let hex = cells.get(1)?.strip_prefix("0x")?;
            Some(Row {
                offset: usize::from_str_radix(hex, 16).expect("hex offset"),
                size: cells[2].parse().expect("decimal size"),
                field: cells[3].trim_matches('`').to_string(),
            })
        })
        .collect()
}

fn row(offset: usize, size: usize, field: &str) -> Row {
    Row {
        offset,
        size,
        field: field.to_string(),
    }
}

fn sample() -> Label {
    let member_count = 5;
    let slots: Vec<SlotEntry> = (0..member_count)
        .map(|i| SlotEntry {
            member_uuid: [0x40 + i as u8; 16],
            data_size_bytes: 0x1111_2222_3333_4400 + u64::from(i),
            state: SlotState::ALL[i as usize],
            // A faulty slot records when its member left (version 5).
            left_at_events: if SlotState::ALL[i as usize] == SlotState::Faulty {
                0x0102_0304_0506_0708
            } else {
                0
            },
        })
        .collect();
    let slot = 2;
    Label {
        layout_version: LAYOUT_VERSION,
        volume_uuid: [0x11; 16],
        member_uuid: slots[slot as usize].member_uuid,
        slot,
        member_count,
        level: Level::Raid6,
        parity_layout: ParityLayout::RightSymmetric,
        copies: 1,
        interleave_bytes: 126 * 512,
        // Room before the data for the checksums of its huge data area.
        data_offset_bytes: 1 << 54,
        data_size_bytes: slots[slot as usize].data_size_bytes,
        volume_size_bytes: 0x0A0B_0C0D_0E0F_1011,
        event_counter: 0x0102_0304_0506_0708,
        state: VolumeState::Degraded,
        rebuild_checkpoint_bytes: 0x2122_2324_2526_2728,
        read_policy: 0x7E,
        created_unix_seconds: 0x3132_3334_3536_3738,
        updated_unix_seconds: 0x4142_4344_4546_4748,
        name: "doc-check".to_string(),
        intent_region_stripes: 7,
        read_policy_arg: 0x5152_5354_5556_5758,
        scrub: ScrubRecord {
            started_unix_seconds: 0x6162_6364_6566_6768,
            cursor_stripes: 0x7172_7374_7576_7778,
            found_stripes: 9,
            completed_unix_seconds: 0x0102_0304_0506_0708,
            last_found_stripes: 11,
        },
        // Sealed pages with write records (version 7).
        checksums: Some(Checksums {
            algorithm: Algorithm::Xxh3,
            format: PageFormat::Sealed { records: true },
            area_offset_bytes: 0x8000,
        }),
        // After the checksum area, before the data.
        ppl: Some(platter_core::ppl::Layout {
            offset_bytes: 3 << 52,
            len_bytes: 4 << 20,
        }),
        // Moving from a RAID-5 of 4 (version 6).
        reshape: Some(ReshapeRecord {
            id: 0x1213_1415_1617_1819,
            position_bytes: 0x2223_2425_2627_2829,
            old_level: Level::Raid5,
            old_parity_layout: ParityLayout::LeftAsymmetric,
            old_copies: 1,
            old_interleave_bytes: 64 * 1024,
            old_member_count: 4,
            // Moved down into the room before the data by 1 MiB.
            old_data_offset_bytes: (1u64 << 54) + (1 << 20),
        }),
        slots,
    }
}

#[test]
fn label_table_matches_the_code() {
    let expected = vec![
        row(at::MAGIC, 8, "magic"),
        row(at::FORMAT_VERSION, 4, "format_version"),
        row(at::LAYOUT_VERSION, 4, "layout_version"),
        row(at::VOLUME_UUID, 16, "volume_uuid"),
        row(at::MEMBER_UUID, 16, "member_uuid"),
        row(at::SLOT, 4, "slot"),
        row(at::MEMBER_COUNT, 4, "member_count"),
        row(at::LEVEL, 1, "level"),
        row(at::PARITY_LAYOUT, 1, "parity_layout"),
        row(at::STATE, 1, "state"),
        row(at::READ_POLICY, 1, "read_policy"),
        row(at::COPIES, 4, "copies"),
        row(at::INTERLEAVE_BYTES, 8, "interleave_bytes"),
        row(at::DATA_OFFSET_BYTES, 8, "data_offset_bytes"),
        row(at::DATA_SIZE_BYTES, 8, "data_size_bytes"),
        row(at::VOLUME_SIZE_BYTES, 8, "volume_size_bytes"),
        row(at::EVENT_COUNTER, 8, "event_counter"),
        row(at::REBUILD_CHECKPOINT_BYTES, 8, "rebuild_checkpoint_bytes"),
        row(at::CREATED_UNIX_SECONDS, 8, "created_unix_seconds"),
        row(at::UPDATED_UNIX_SECONDS, 8, "updated_unix_seconds"),
        row(at::NAME, NAME_MAX_BYTES, "name"),
        row(at::INTENT_REGION_STRIPES, 8, "intent_region_stripes"),
        row(at::READ_POLICY_ARG, 8, "read_policy_arg"),
        row(
            at::SCRUB_STARTED_UNIX_SECONDS,
            8,
            "scrub_started_unix_seconds",
        ),
        row(at::SCRUB_CURSOR_STRIPES, 8, "scrub_cursor_stripes"),
        row(at::SCRUB_FOUND_STRIPES, 8, "scrub_found_stripes"),
        row(
            at::SCRUB_COMPLETED_UNIX_SECONDS,
            8,
            "scrub_completed_unix_seconds",
        ),
        row(at::SCRUB_LAST_FOUND_STRIPES, 8, "scrub_last_found_stripes"),
        row(at::CHECKSUM_OFFSET_BYTES, 8, "checksum_offset_bytes"),
        row(at::CHECKSUM_ALGORITHM, 8, "checksum_algorithm"),
        row(at::PPL_OFFSET_BYTES, 8, "ppl_offset_bytes"),
        row(at::PPL_LEN_BYTES, 8, "ppl_len_bytes"),
        row(at::RESHAPE_ID, 8, "reshape_id"),
        row(at::RESHAPE_POSITION_BYTES, 8, "reshape_position_bytes"),
        row(
            at::RESHAPE_OLD_INTERLEAVE_BYTES,
            8,
            "reshape_old_interleave_bytes",
        ),
        row(at::RESHAPE_OLD_MEMBER_COUNT, 4, "reshape_old_member_count"),
        row(at::RESHAPE_OLD_COPIES, 4, "reshape_old_copies"),
        row(at::RESHAPE_OLD_LEVEL, 1, "reshape_old_level"),
        row(
            at::RESHAPE_OLD_PARITY_LAYOUT,
            1,
            "reshape_old_parity_layout",
        ),
        row(
            at::RESHAPE_RESERVED,
            at::RESHAPE_OLD_DATA_OFFSET_BYTES - at::RESHAPE_RESERVED,
            "reserved",
        ),
        row(
            at::RESHAPE_OLD_DATA_OFFSET_BYTES,
            8,
            "reshape_old_data_offset_bytes",
        ),
        row(at::CHECKSUM_FORMAT, 8, "checksum_format"),
        row(
            at::RESERVED_HEADER,
            at::SLOT_TABLE - at::RESERVED_HEADER,
            "reserved",
        ),
        row(
            at::SLOT_TABLE,
            MAX_MEMBERS as usize * at::SLOT_ENTRY_BYTES,
            "slots",
        ),
        row(
            at::RESERVED_TAIL,
            at::CHECKSUM - at::RESERVED_TAIL,
            "reserved",
        ),
        row(at::CHECKSUM, 4, "checksum"),
    ];
    assert_eq!(table_after("## Label byte table"), expected);
}

#[test]
fn slot_entry_table_matches_the_code() {
    let expected = vec![
        row(at::ENTRY_MEMBER_UUID, 16, "member_uuid"),
        row(at::ENTRY_DATA_SIZE_BYTES, 8, "data_size_bytes"),
        row(at::ENTRY_STATE, 1, "state"),
        row(
            at::ENTRY_RESERVED,
            at::ENTRY_LEFT_AT_EVENTS - at::ENTRY_RESERVED,
            "reserved",
        ),
        row(at::ENTRY_LEFT_AT_EVENTS, 8, "left_at_events"),
        row(
            at::ENTRY_RESERVED_TAIL,
            at::SLOT_ENTRY_BYTES - at::ENTRY_RESERVED_TAIL,
            "reserved",
        ),
    ];
    assert_eq!(table_after("### Slot table entry"), expected);
}

/// The documented offsets hold the documented values in the bytes `encode`
/// actually writes.
#[test]
fn documented_offsets_hold_the_values() {
    let label = sample();
    let bytes = label.encode();
    let mut expected: Vec<(&str, Vec<u8>)> = vec![
        ("magic", LABEL_MAGIC.to_vec()),
        (
            "format_version",
            LABEL_FORMAT_VERSION.to_le_bytes().to_vec(),
        ),
        (
            "layout_version",
            label.layout_version.to_le_bytes().to_vec(),
        ),
        ("volume_uuid", label.volume_uuid.to_vec()),
        ("member_uuid", label.member_uuid.to_vec()),
        ("slot", label.slot.to_le_bytes().to_vec()),
        ("member_count", label.member_count.to_le_bytes().to_vec()),
        ("level", vec![6]),
        ("parity_layout", vec![3]),
        ("state", vec![3]),
        ("read_policy", vec![label.read_policy]),
        (
            "read_policy_arg",
            label.read_policy_arg.to_le_bytes().to_vec(),
        ),
        (
            "scrub_started_unix_seconds",
            label.scrub.started_unix_seconds.to_le_bytes().to_vec(),
        ),
        (
            "scrub_cursor_stripes",
            label.scrub.cursor_stripes.to_le_bytes().to_vec(),
        ),
        (
            "scrub_found_stripes",
            label.scrub.found_stripes.to_le_bytes().to_vec(),
        ),
        (
            "scrub_completed_unix_seconds",
            label.scrub.completed_unix_seconds.to_le_bytes().to_vec(),
        ),
        (
            "scrub_last_found_stripes",
            label.scrub.last_found_stripes.to_le_bytes().to_vec(),
        ),
        ("checksum_offset_bytes", 0x8000u64.to_le_bytes().to_vec()),
        ("checksum_algorithm", 2u64.to_le_bytes().to_vec()),
        ("checksum_format", 2u64.to_le_bytes().to_vec()),
        ("ppl_offset_bytes", (3u64 << 52).to_le_bytes().to_vec()),
        ("ppl_len_bytes", (4u64 << 20).to_le_bytes().to_vec()),
        (
            "reshape_id",
            0x1213_1415_1617_1819u64.to_le_bytes().to_vec(),
        ),
        (
            "reshape_position_bytes",
            0x2223_2425_2627_2829u64.to_le_bytes().to_vec(),
        ),
        (
            "reshape_old_interleave_bytes",
            (64u64 * 1024).to_le_bytes().to_vec(),
        ),
        ("reshape_old_member_count", 4u32.to_le_bytes().to_vec()),
        ("reshape_old_copies", 1u32.to_le_bytes().to_vec()),
        ("reshape_old_level", vec![5]),
        ("reshape_old_parity_layout", vec![0]),
        (
            "reshape_old_data_offset_bytes",
            ((1u64 << 54) + (1 << 20)).to_le_bytes().to_vec(),
        ),
        (
            "intent_region_stripes",
            label.intent_region_stripes.to_le_bytes().to_vec(),
        ),
        ("copies", label.copies.to_le_bytes().to_vec()),
        (
            "interleave_bytes",
            label.interleave_bytes.to_le_bytes().to_vec(),
        ),
        (
            "data_offset_bytes",
            label.data_offset_bytes.to_le_bytes().to_vec(),
        ),
        (
            "data_size_bytes",
            label.data_size_bytes.to_le_bytes().to_vec(),
        ),
        (
            "volume_size_bytes",
            label.volume_size_bytes.to_le_bytes().to_vec(),
        ),
        ("event_counter", label.event_counter.to_le_bytes().to_vec()),
        (
            "rebuild_checkpoint_bytes",
            label.rebuild_checkpoint_bytes.to_le_bytes().to_vec(),
        ),
        (
            "created_unix_seconds",
            label.created_unix_seconds.to_le_bytes().to_vec(),
        ),
        (
            "updated_unix_seconds",
            label.updated_unix_seconds.to_le_bytes().to_vec(),
        ),
        (
            "checksum",
            crc32c::crc32c(&bytes[..LABEL_BYTES - 4])
                .to_le_bytes()
                .to_vec(),
        ),
    ];
    let mut name = label.name.as_bytes().to_vec();
    name.resize(NAME_MAX_BYTES, 0);
    expected.push(("name", name));

    let rows = table_after("## Label byte table");
    for (field, value) in expected {
        let r = rows
            .iter()
            .find(|r| r.field == field)
            .unwrap_or_else(|| panic!("{field} is not documented"));
        assert_eq!(value.len(), r.size, "{field}: documented size");
        assert_eq!(
            &bytes[r.offset..r.offset + r.size],
            &value[..],
            "{field} at documented offset {:#x}",
            r.offset
        );
    }
    for r in rows.iter().filter(|r| r.field == "reserved") {
        assert!(bytes[r.offset..r.offset + r.size].iter().all(|&b| b == 0));
    }

    let table = rows
        .iter()
        .find(|r| r.field == "slots")
        .expect("slot table");
    let entry_rows = table_after("### Slot table entry");
    let entry_bytes = entry_rows.iter().map(|r| r.size).sum::<usize>();
    assert_eq!(table.size, entry_bytes * MAX_MEMBERS as usize);
    for (i, entry) in label.slots.iter().enumerate() {
        let base = table.offset + i * entry_bytes;
        for r in &entry_rows {
            let value = match r.field.as_str() {
                "member_uuid" => entry.member_uuid.to_vec(),
                "data_size_bytes" => entry.data_size_bytes.to_le_bytes().to_vec(),
                "state" => vec![entry.state.code()],
                "left_at_events" => entry.left_at_events.to_le_bytes().to_vec(),
                "reserved" => vec![0; r.size],
                other => panic!("undocumented entry field {other}"),
            };
            let at = base + r.offset;
            assert_eq!(&bytes[at..at + r.size], &value[..], "slot {i} {}", r.field);
        }
    }
    let unused = table.offset + label.slots.len() * entry_bytes;
    assert!(bytes[unused..table.offset + table.size]
        .iter()
        .all(|&b| b == 0));
}

/// The state and code tables in the document use the codes the code uses.
#[test]
fn documented_codes_match_the_code() {
    for state in VolumeState::ALL {
        let line = format!("| {}    | `{}`", state.code(), state.name());
        assert!(DOC.contains(&line), "volume state row {line:?}");
    }
    for state in SlotState::ALL {
        let line = format!("| {}    | `{}`", state.code(), state.name());
        assert!(DOC.contains(&line), "slot state row {line:?}");
    }
    for level in Level::ALL {
        assert!(
            DOC.contains(&format!("{} {}", level.code(), level.name())),
            "level {level}"
        );
    }
    for layout in ParityLayout::ALL
        .into_iter()
        .chain(ParityLayout::RAID6_ONLY)
    {
        assert!(
            DOC.contains(&format!("{} {}", layout.code(), layout.name())),
            "parity layout {layout}"
        );
    }
}
