use proptest::prelude::*;

use super::alloc::{free_extents, place_concat, place_spread, ALIGN_BYTES};
use super::area::{self, DriveSlots, Seen, SlotFault, HEADER_BYTES};
use super::text::{self, Strictness};
use super::*;

const MIB: u64 = 1 << 20;

fn drive(name: &str, n: u8, size_bytes: u64) -> Drive {
    Drive {
        name: name.into(),
        uuid: [n; 16],
        size_bytes,
        device: format!("/tmp/pool/{name}"),
        state: DriveState::Up,
    }
}

fn sd(drive: &str, offset_mib: u64, len_mib: u64) -> Subdisk {
    Subdisk {
        drive: drive.into(),
        offset_bytes: offset_mib * MIB,
        len_bytes: len_mib * MIB,
    }
}

fn volume(name: &str, org: Level, subdisks: Vec<Subdisk>) -> PoolVolume {
    let copies = text::default_copies(org, subdisks.len() as u32);
    PoolVolume {
        name: name.into(),
        size_bytes: None,
        plexes: vec![Plex {
            org,
            interleave_bytes: 64 * 1024,
            parity_layout: ParityLayout::DEFAULT,
            copies,
            subdisks,
        }],
    }
}

/// Four drives of 100 MiB with vinum's experiment: a raid10, a raid5 and
/// a concat side by side.
fn sample() -> Pool {
    Pool {
        name: "tank".into(),
        uuid: [7; 16],
        generation: 3,
        drives: (0..4)
            .map(|i| drive(&format!("d{i}"), i + 1, 100 * MIB))
            .collect(),
        volumes: vec![
            volume(
                "db",
                Level::Raid10,
                (0..4).map(|i| sd(&format!("d{i}"), 1, 20)).collect(),
            ),
            volume(
                "bulk",
                Level::Raid5,
                (0..4).map(|i| sd(&format!("d{i}"), 21, 30)).collect(),
            ),
            volume(
                "scratch",
                Level::Concat,
                vec![sd("d2", 51, 10), sd("d0", 60, 5)],
            ),
        ],
        moves: Vec::new(),
        detached: Vec::new(),
        converts: Vec::new(),
        copies: Vec::new(),
    }
}

#[test]
fn the_sample_is_a_valid_pool() {
    sample().check().unwrap();
}

#[test]
fn text_gives_the_pool_back() {
    let mut pool = sample();
    pool.volumes[1].size_bytes = Some(84 * MIB);
    let text = text::render(&pool);
    assert!(text.contains("volume bulk size 172032s\n"), "{text}");
    assert!(
        text.contains("sd name bulk.p0.s3 drive d3 driveoffset 43008s len 61440s plex bulk.p0"),
        "{text}"
    );
    assert_eq!(text::parse(&text, Strictness::Stored).unwrap(), pool);
}

/// A spare and a failed drive say so in the text (`state`), an up drive
/// says nothing (its line reads as before drives had a state); a spare
/// that holds a subdisk, or a state misspelt, is refused by name.
#[test]
fn a_drive_state_round_trips_and_a_spare_holds_nothing() {
    let mut pool = sample();
    pool.drives.push(Drive {
        state: DriveState::Spare,
        ..drive("d4", 5, 100 * MIB)
    });
    pool.drives[0].state = DriveState::Failed;
    pool.drives[3].state = DriveState::Leaving;
    let text = text::render(&pool);
    assert!(
        text.contains("device /tmp/pool/d3 state leaving\n"),
        "{text}"
    );
    assert!(text.contains("device /tmp/pool/d4 state spare\n"), "{text}");
    assert!(
        text.contains("device /tmp/pool/d0 state failed\n"),
        "{text}"
    );
    assert!(text.contains("device /tmp/pool/d1\n"), "{text}");
    assert_eq!(text::parse(&text, Strictness::Stored).unwrap(), pool);
    let typo = text.replace("state spare", "state spar");
    let e = text::parse(&typo, Strictness::Stored).unwrap_err();
    assert!(
        e.contains("drive d4") && e.contains("up, spare, failed, leaving"),
        "{e}"
    );
    pool.volumes[2].plexes[0].subdisks[1].drive = "d4".into();
    let e = pool.check().unwrap_err();
    assert!(e.contains("d4") && e.contains("spare"), "{e}");
}

/// A subdisk on its way elsewhere (`subdisk move`): the move round trips
/// in the text, its new place is not free space, and a move that would put
/// two subdisks of a plex (of any organisation) or two plexes of a volume
/// on one drive, overlap another extent, go to a drive not up, or claim
/// more copied than the subdisk holds is refused by name.
#[test]
fn a_move_round_trips_holds_its_new_place_and_keeps_the_layout_s_rules() {
    let mut pool = sample();
    pool.drives.push(drive("d4", 5, 100 * MIB));
    pool.moves.push(SubdiskMove {
        volume: "bulk".into(),
        plex: 0,
        slot: 1,
        drive: "d4".into(),
        offset_bytes: MIB,
        copied_bytes: 8 * MIB,
    });
    pool.check().unwrap();
    let text = text::render(&pool);
    assert!(
        text.contains("move sd bulk.p0.s1 drive d4 driveoffset 2048s copied 16384s\n"),
        "{text}"
    );
    assert_eq!(text::parse(&text, Strictness::Stored).unwrap(), pool);
    assert_eq!(free_extents(&pool, "d4"), vec![(31 * MIB, 69 * MIB)]);
    let refused = |f: &dyn Fn(&mut Pool), words: &[&str]| {
        let mut p = pool.clone();
        f(&mut p);
        let e = p.check().unwrap_err();
        assert!(words.iter().all(|w| e.contains(w)), "{e}");
    };
    refused(
        &|p| p.moves[0].drive = "d2".into(),
        &["bulk.p0.s2 of its plex", "d2"],
    );
    refused(
        &|p| {
            p.moves[0] = SubdiskMove {
                volume: "scratch".into(),
                slot: 0,
                drive: "d0".into(),
                offset_bytes: 70 * MIB,
                ..p.moves[0].clone()
            }
        },
        &["scratch.p0.s1 of its plex"],
    );
    refused(
        &|p| {
            p.moves[0].drive = "d1".into();
            p.moves[0].offset_bytes = MIB;
        },
        &["overlap", "bulk.p0.s1's new place"],
    );
    refused(&|p| p.moves[0].copied_bytes = 31 * MIB, &["bytes copied"]);
    refused(&|p| p.drives[4].state = DriveState::Spare, &["not up"]);
    refused(&|p| p.moves[0].slot = 4, &["bulk.p0.s4", "does not have"]);
    refused(
        &|p| {
            let mut second = p.moves[0].clone();
            second.slot = 2;
            second.offset_bytes = 40 * MIB;
            p.moves.push(second);
        },
        &["both move to drive"],
    );
    let typo = text.replace("driveoffset 2048s copied", "driveofset 2048s copied");
    let e = text::parse(&typo, Strictness::Stored).unwrap_err();
    assert!(e.contains("did you mean 'driveoffset'"), "{e}");
}

/// A volume of several plexes keeps each plex's rules, and its plexes
/// apart: two plexes with subdisks on one drive would be lost together.
#[test]
fn a_volume_of_plexes_keeps_them_on_drives_apart() {
    let mut pool = sample();
    pool.drives.push(drive("d4", 5, 100 * MIB));
    let mut v = volume(
        "mirrored",
        Level::Raid5,
        (0..3).map(|i| sd(&format!("d{i}"), 70, 10)).collect(),
    );
    v.plexes.push(
        volume("x", Level::Concat, vec![sd("d4", 1, 20)])
            .plexes
            .remove(0),
    );
    pool.volumes.push(v);
    pool.check().unwrap();
    let text = text::render(&pool);
    assert!(text.contains("plex name mirrored.p1 org concat"), "{text}");
    assert_eq!(text::parse(&text, Strictness::Stored).unwrap(), pool);
    let mut both = pool.clone();
    both.volumes[3].plexes[1].subdisks[0] = sd("d2", 85, 10);
    let e = both.check().unwrap_err();
    assert!(
        e.contains("mirrored.p0") && e.contains("mirrored.p1") && e.contains("d2"),
        "{e}"
    );
    let mut many = pool.clone();
    let extra = many.volumes[3].plexes[1].clone();
    many.volumes[3]
        .plexes
        .extend(std::iter::repeat_n(extra, MAX_PLEXES));
    assert!(many.check().unwrap_err().contains("1 to 8"));
    // An array's name picks one plex, or one volume of one plex.
    assert_eq!(
        pool.array("mirrored.p1").map(|(v, p)| (&*v.name, p)),
        Some(("mirrored", 1))
    );
    assert_eq!(pool.array(&pool.volumes[0].name).map(|(_, p)| p), Some(0));
    for none in [
        "mirrored",
        "mirrored.p2",
        "mirrored.p01",
        "mirrored.px",
        "x.p0",
    ] {
        assert!(pool.array(none).is_none(), "{none}");
    }
    let mut alike = pool.clone();
    let mut named = alike.volumes[0].clone();
    named.name = "mirrored.p0".into();
    named.plexes[0].subdisks = vec![sd("d4", 30, 10)];
    alike.volumes.push(named);
    let e = alike.check().unwrap_err();
    assert!(e.contains("named as plex 0 of volume \"mirrored\""), "{e}");
}

/// A detached plex round-trips with the name it is served as and its
/// access; the rules refuse a split that could not be served or joined
/// back: of a volume of one plex, of every plex, twice, served under a
/// name the pool has, writable with nowhere to write it, or while a
/// subdisk of it moves.
#[test]
fn a_detached_plex_round_trips_and_keeps_the_split_s_rules() {
    let mut pool = sample();
    pool.drives.push(drive("d4", 5, 100 * MIB));
    let mut v = volume(
        "mirrored",
        Level::Raid5,
        (0..3).map(|i| sd(&format!("d{i}"), 70, 10)).collect(),
    );
    v.plexes.push(
        volume("x", Level::Concat, vec![sd("d4", 1, 20)])
            .plexes
            .remove(0),
    );
    pool.volumes.push(v);
    pool.detached.push(DetachedPlex {
        volume: "mirrored".into(),
        plex: 1,
        as_volume: Some("backup".into()),
        writable: false,
    });
    pool.check().unwrap();
    let text = text::render(&pool);
    assert!(
        text.contains("detach plex mirrored.p1 as backup access ro\n"),
        "{text}"
    );
    assert_eq!(text::parse(&text, Strictness::Stored).unwrap(), pool);
    assert_eq!(pool.attached_plexes(&pool.volumes[3]), vec![0]);
    assert_eq!(pool.served_as("backup").map(|d| d.plex), Some(1));
    assert!(pool
        .none_detached("mirrored", "extend it")
        .unwrap_err()
        .contains("plex mirrored.p1 is detached"));
    let refused = |f: &dyn Fn(&mut Pool), words: &[&str]| {
        let mut p = pool.clone();
        f(&mut p);
        let e = p.check().unwrap_err();
        assert!(words.iter().all(|w| e.contains(w)), "{e}");
    };
    refused(
        &|p| {
            p.detached[0].volume = "db".into();
            p.detached[0].plex = 0;
        },
        &["one plex"],
    );
    refused(&|p| p.detached[0].plex = 2, &["does not have"]);
    refused(
        &|p| {
            let mut every = p.detached[0].clone();
            every.plex = 0;
            every.as_volume = None;
            p.detached.push(every);
        },
        &["every plex detached"],
    );
    refused(
        &|p| {
            let mut twice = p.detached[0].clone();
            twice.as_volume = None;
            p.detached.push(twice);
        },
        &["detached twice"],
    );
    refused(
        &|p| p.detached[0].as_volume = Some("db".into()),
        &["names a volume"],
    );
    refused(
        &|p| p.detached[0].as_volume = Some("mirrored.p0".into()),
        &["names a volume or plex"],
    );
    refused(
        &|p| {
            p.detached[0].as_volume = None;
            p.detached[0].writable = true;
        },
        &["writable but not served"],
    );
    refused(
        &|p| {
            p.moves.push(SubdiskMove {
                volume: "mirrored".into(),
                plex: 1,
                slot: 0,
                drive: "d3".into(),
                offset_bytes: 70 * MIB,
                copied_bytes: 0,
            })
        },
        &["detached while a subdisk of it moves"],
    );
    for bad in [
        "detach plex mirrored.p1 access rx",
        "detach plex mirrored access ro",
    ] {
        let text = text.replace("detach plex mirrored.p1 as backup access ro", bad);
        assert!(text::parse(&text, Strictness::Stored).is_err(), "{bad}");
    }
}

/// A convert round-trips; its new plex holds its extents but is no slot
/// of the mirror (`attached_plexes`, `mirror_slots`); the rules refuse a
/// convert into a plex not the volume's last, of a volume of two plexes,
/// twice, of a detached plex, or while a subdisk of the volume moves.
#[test]
fn a_convert_round_trips_and_keeps_its_rules() {
    let mut pool = sample();
    pool.drives.push(drive("d4", 5, 100 * MIB));
    pool.drives.push(drive("d5", 6, 100 * MIB));
    let mut v = volume(
        "mirrored",
        Level::Raid5,
        (0..3).map(|i| sd(&format!("d{i}"), 70, 10)).collect(),
    );
    for d in ["d4", "d5"] {
        v.plexes.push(
            volume("x", Level::Concat, vec![sd(d, 1, 20)])
                .plexes
                .remove(0),
        );
    }
    pool.volumes.push(v);
    pool.converts.push(PlexConvert {
        volume: "mirrored".into(),
        from: 1,
        into: 2,
    });
    pool.check().unwrap();
    let text = text::render(&pool);
    assert!(
        text.contains("convert plex mirrored.p1 into mirrored.p2\n"),
        "{text}"
    );
    assert_eq!(text::parse(&text, Strictness::Stored).unwrap(), pool);
    let v = &pool.volumes[3];
    assert_eq!(pool.attached_plexes(v), vec![0, 1]);
    assert_eq!(pool.mirror_slots(v), 2);
    assert_eq!(free_extents(&pool, "d5"), vec![(21 * MIB, 79 * MIB)]);
    let refused = |f: &dyn Fn(&mut Pool), words: &[&str]| {
        let mut p = pool.clone();
        f(&mut p);
        let e = p.check().unwrap_err();
        assert!(words.iter().all(|w| e.contains(w)), "{e}");
    };
    refused(&|p| p.converts[0].into = 1, &["by its last one"]);
    refused(&|p| p.converts[0].from = 2, &["by its last one"]);
    refused(
        &|p| {
            p.volumes[3].plexes.pop();
        },
        &["by its last one"],
    );
    refused(
        &|p| {
            let again = p.converts[0].clone();
            p.converts.push(again);
        },
        &["converted twice"],
    );
    refused(
        &|p| {
            p.detached.push(DetachedPlex {
                volume: "mirrored".into(),
                plex: 1,
                as_volume: None,
                writable: false,
            })
        },
        &["a plex it converts is detached"],
    );
    refused(
        &|p| p.converts[0].volume = "nothing".into(),
        &["does not have"],
    );
    assert!(text::parse(
        &text.replace("into mirrored.p2", "into db.p2"),
        Strictness::Stored
    )
    .unwrap_err()
    .contains("another volume"));
}

#[test]
fn a_hand_written_template_takes_units_and_defaults() {
    let t = "pool tank\n\
             drive a device /dev/sdb   # the first\n\
             drive b device /dev/sdc\n\
             volume m\n\
             plex org mirror vol m\n\
             sd drive a driveoffset 1M length 10M plex m.p0\n\
             sd drive b driveoffset 1M len 20480s plex m.p0\n";
    let pool = text::parse(t, Strictness::Template).unwrap();
    assert_eq!(pool.generation, 1);
    assert_eq!(pool.uuid, [0; 16]);
    let plex = pool.volume("m").unwrap().plex();
    assert_eq!(plex.copies, 2);
    assert_eq!(plex.interleave_bytes, 64 * 1024);
    assert_eq!(plex.subdisks[1], sd("b", 1, 10));
    // A stored configuration must carry its identity.
    let err = text::parse(t, Strictness::Stored).unwrap_err();
    assert!(
        err.contains("line 1") && err.contains("generation"),
        "{err}"
    );
}

#[test]
fn a_typo_is_named_with_its_line_and_what_was_meant() {
    let t = text::render(&sample()).replace("driveoffset 43008s", "driveofset 43008s");
    let err = text::parse(&t, Strictness::Stored).unwrap_err();
    assert!(err.starts_with("line "), "{err}");
    assert!(
        err.contains("unknown word 'driveofset' (did you mean 'driveoffset'?"),
        "{err}"
    );
    for (bad, says) in [
        ("pool tank uuid 1 generation 2", "not 32 hex digits"),
        ("volme x", "did you mean 'volume'?"),
        ("pool t generation", "'generation' has no value"),
        ("pool t generation two", "not a whole number"),
        ("pool t\ndrive a size 10Q", "unknown unit"),
        (
            "pool t\nplex org raid5 vol v",
            "volume 'v' is not written before it",
        ),
        ("pool t\nvolume v\nplex org raid9 vol v", "unknown level"),
        (
            "pool t\nvolume v\nplex org raid5 vol v\nsd drive a driveoffset 1M plex v.p0",
            "has no 'len'",
        ),
        (
            "pool t\nvolume v\nplex org raid5 vol v\nsd drive a len 1M plex v.p3",
            "not written before it",
        ),
        ("pool t\npool u", "a second 'pool' line"),
        ("drive a size 1G", "no 'pool' line"),
    ] {
        let err = text::parse(bad, Strictness::Template).unwrap_err();
        assert!(err.contains(says), "{bad:?}: {err}");
    }
}

#[test]
fn the_rules_refuse_what_would_lose_or_mix_data() {
    type Break = Box<dyn Fn(&mut Pool)>;
    let cases: Vec<(&str, Break)> = vec![
        (
            "overlap on drive \"d2\"",
            Box::new(|p| p.volumes[2].plexes[0].subdisks[0].offset_bytes = 45 * MIB),
        ),
        (
            "volume \"db\" is named twice",
            Box::new(|p| p.volumes[1].name = "db".into()),
        ),
        (
            "drive \"d1\" is named twice",
            Box::new(|p| p.drives[0].name = "d1".into()),
        ),
        (
            "the uuid of another drive",
            Box::new(|p| p.drives[0].uuid = p.drives[1].uuid),
        ),
        (
            "which the pool does not have",
            Box::new(|p| p.volumes[2].plexes[0].subdisks[0].drive = "d9".into()),
        ),
        (
            "is not inside drive",
            Box::new(|p| p.volumes[2].plexes[0].subdisks[0].len_bytes = 60 * MIB),
        ),
        (
            "is not inside drive",
            Box::new(|p| p.volumes[0].plexes[0].subdisks[0].offset_bytes = 0),
        ),
        (
            "two subdisks on drive \"d1\"",
            Box::new(|p| p.volumes[1].plexes[0].subdisks[0].drive = "d1".into()),
        ),
        (
            "needs 3 to 64 subdisks",
            Box::new(|p| {
                p.volumes[1].plexes[0].subdisks.truncate(2);
            }),
        ),
        (
            "whole sectors",
            Box::new(|p| p.volumes[2].plexes[0].subdisks[1].len_bytes += 1),
        ),
        (
            "multiple of 512",
            Box::new(|p| p.volumes[0].plexes[0].interleave_bytes = 1000),
        ),
        (
            "copies do not fit",
            Box::new(|p| p.volumes[0].plexes[0].copies = 5),
        ),
        (
            "does not apply to raid10",
            Box::new(|p| p.volumes[0].plexes[0].parity_layout = ParityLayout::RightSymmetric),
        ),
        (
            "volume name \"a b\"",
            Box::new(|p| p.volumes[0].name = "a b".into()),
        ),
        ("generation is 0", Box::new(|p| p.generation = 0)),
    ];
    for (says, break_it) in cases {
        let mut pool = sample();
        break_it(&mut pool);
        let err = pool.check().unwrap_err();
        assert!(err.contains(says), "expected {says:?}: {err}");
    }
}

fn slots_of(pool: &Pool, drive: usize, slot: u32) -> DriveSlots {
    let bytes = area::encode(pool, pool.drives[drive].uuid, slot, 1_700_000_000);
    let mut slots: [Result<(area::Header, Pool), SlotFault>; 2] =
        [Err(SlotFault::Blank), Err(SlotFault::Blank)];
    slots[slot as usize] = area::decode(&bytes, slot);
    DriveSlots { slots }
}

#[test]
fn a_slot_gives_its_pool_back_and_says_why_when_it_cannot() {
    let pool = sample();
    let bytes = area::encode(&pool, pool.drives[1].uuid, 1, 42);
    assert_eq!(&bytes[..8], b"PLTRPOOL");
    assert_eq!(
        u32::from_le_bytes(bytes[0x0C..0x10].try_into().unwrap()),
        1,
        "slot at 0x0C"
    );
    assert_eq!(&bytes[0x20..0x30], &[2; 16], "drive uuid at 0x20");
    assert_eq!(
        u64::from_le_bytes(bytes[0x30..0x38].try_into().unwrap()),
        3,
        "generation at 0x30"
    );
    assert_eq!(bytes.len() % HEADER_BYTES, 0);
    let (h, back) = area::decode(&bytes, 1).unwrap();
    assert_eq!(
        (back, h.written_unix_seconds, h.drive_uuid),
        (pool.clone(), 42, [2; 16])
    );

    let fault = |b: &[u8], slot| area::decode(b, slot).unwrap_err();
    assert_eq!(fault(&vec![0; 8192], 0), SlotFault::Blank);
    assert_eq!(fault(&vec![0xEE; 8192], 0), SlotFault::Foreign);
    assert!(matches!(fault(&bytes, 0), SlotFault::Damaged(w) if w.contains("misplaced")));
    let mut torn = bytes.clone();
    torn[0x31] ^= 1;
    assert!(matches!(fault(&torn, 1), SlotFault::Damaged(w) if w.contains("header fails")));
    let mut torn_text = bytes.clone();
    torn_text[HEADER_BYTES + 10] ^= 1;
    assert!(matches!(fault(&torn_text, 1), SlotFault::Damaged(w) if w.contains("text fails")));
    let cut = &bytes[..HEADER_BYTES + 100];
    assert!(matches!(fault(cut, 1), SlotFault::Damaged(w) if w.contains("cut short")));
}

#[test]
fn a_change_writes_the_slot_that_does_not_hold_the_newest() {
    let pool = sample();
    let mut slots = slots_of(&pool, 0, 0);
    assert_eq!(slots.next_slot(), 1);
    let mut newer = pool.clone();
    newer.generation += 1;
    slots.slots[1] = area::decode(&area::encode(&newer, newer.drives[0].uuid, 1, 0), 1);
    assert_eq!(slots.newest().unwrap().1.generation, 4);
    assert_eq!(slots.next_slot(), 0);
    // The newest slot torn: the one before is the drive's configuration,
    // and the next change overwrites the torn one.
    slots.slots[1] = Err(SlotFault::Damaged("torn".into()));
    assert_eq!(slots.newest().unwrap().1.generation, 3);
    assert_eq!(slots.next_slot(), 1);
}

fn seen(pool: &Pool, drive: usize, device: &str) -> Seen {
    Seen {
        device: device.into(),
        slots: slots_of(pool, drive, 0),
        size_bytes: pool.drives[drive].size_bytes,
    }
}

#[test]
fn the_newest_generation_present_wins_and_every_odd_drive_is_named() {
    let old = sample();
    let mut new = old.clone();
    new.generation = 4;
    new.volumes.pop();
    let damaged = Seen {
        size_bytes: 100 * MIB,
        device: "/dev/x".into(),
        slots: DriveSlots {
            slots: [
                Err(SlotFault::Damaged("torn".into())),
                Err(SlotFault::Blank),
            ],
        },
    };
    let devices = vec![
        seen(&new, 0, "a"),
        seen(&old, 1, "b"),
        damaged,
        seen(&new, 3, "d"),
    ];
    let g = area::gather(&devices, Some("tank")).unwrap();
    assert_eq!(g.pool, new);
    assert_eq!(
        g.present,
        vec![(0, "d0".into()), (1, "d1".into()), (3, "d3".into())]
    );
    assert_eq!(g.behind, vec![("d1".to_string(), 3)]);
    assert_eq!(g.damaged.len(), 1);
    assert_eq!(g.damaged[0].0, "/dev/x");
    assert_eq!(g.missing, vec!["d2".to_string()]);
    assert!(area::gather(&devices, Some("other"))
        .unwrap_err()
        .contains("no drive of a pool named"));
}

/// How it showed (a pool served, a drive's file truncated under it): the
/// server's next configuration write landed on the short file before its
/// size was checked, so the device held the newest configuration, and
/// `list` then failed outright opening a subdisk past the file's end. A
/// device smaller than its drive is named and left out now, the drive
/// missing, and the others gather.
#[test]
fn a_device_cut_shorter_than_its_drive_is_named_and_left_out() {
    let pool = sample();
    let mut short = seen(&pool, 2, "c");
    short.size_bytes = 3 * MIB;
    let devices = vec![
        seen(&pool, 0, "a"),
        seen(&pool, 1, "b"),
        short,
        seen(&pool, 3, "d"),
    ];
    let g = area::gather(&devices, Some("tank")).unwrap();
    assert_eq!(g.missing, vec!["d2".to_string()]);
    assert_eq!(g.damaged.len(), 1);
    assert!(
        g.damaged[0].0 == "c" && g.damaged[0].1.contains("cut short"),
        "{:?}",
        g.damaged
    );
}

#[test]
fn two_devices_claiming_one_drive_or_one_generation_told_twice_are_refused() {
    let pool = sample();
    let copies = vec![seen(&pool, 0, "a"), seen(&pool, 0, "copy-of-a")];
    let err = area::gather(&copies, None).unwrap_err();
    assert!(
        err.contains("a and copy-of-a both say they are drive d0"),
        "{err}"
    );
    let mut forked = pool.clone();
    forked.volumes.pop();
    let split = vec![seen(&pool, 0, "a"), seen(&forked, 1, "b")];
    let err = area::gather(&split, None).unwrap_err();
    assert!(
        err.contains("different configuration") && err.contains("generation 3"),
        "{err}"
    );
    let mut other = pool.clone();
    other.uuid = [9; 16];
    let two = vec![seen(&pool, 0, "a"), seen(&other, 1, "b")];
    let err = area::gather(&two, None).unwrap_err();
    assert!(err.contains("drives of 2 pools"), "{err}");
}

#[test]
fn free_space_is_what_no_subdisk_holds_in_whole_mib() {
    let pool = sample();
    assert_eq!(
        free_extents(&pool, "d0"),
        vec![(51 * MIB, 9 * MIB), (65 * MIB, 35 * MIB)]
    );
    assert_eq!(free_extents(&pool, "d1"), vec![(51 * MIB, 49 * MIB)]);
    assert_eq!(free_extents(&pool, "nope"), vec![]);
}

#[test]
fn a_spread_plex_takes_distinct_roomy_drives_or_says_what_is_short() {
    let pool = sample();
    let drives: Vec<String> = pool.drives.iter().map(|d| d.name.clone()).collect();
    let placed = place_spread(&pool, &drives, 3, 36 * MIB).unwrap();
    let on: Vec<&str> = placed.iter().map(|s| s.drive.as_str()).collect();
    assert_eq!(on, ["d1", "d3", "d2"], "{placed:?}");
    assert!(placed
        .iter()
        .all(|s| s.len_bytes == 36 * MIB && s.offset_bytes % ALIGN_BYTES == 0));
    let mut with = pool.clone();
    with.volumes.push(volume("new", Level::Raid5, placed));
    with.check().unwrap();
    let err = place_spread(&pool, &drives, 4, 36 * MIB).unwrap_err();
    assert!(
        err.contains("needs 4 drives with 36M free in one piece"),
        "{err}"
    );
    assert!(err.contains("d0 35M"), "{err}");
}

#[test]
fn a_concat_fills_the_largest_extents_each_paying_its_label() {
    let pool = sample();
    let drives: Vec<String> = pool.drives.iter().map(|d| d.name.clone()).collect();
    let placed = place_concat(&pool, &drives, (100 * MIB, 64 << 10), MIB, 64).unwrap();
    let data: u64 = placed.iter().map(|s| s.len_bytes - MIB).sum();
    assert!(data >= 100 * MIB, "{placed:?}");
    assert_eq!(placed[0], sd("d1", 51, 49));
    let mut with = pool.clone();
    with.volumes.push(volume("big", Level::Concat, placed));
    with.check().unwrap();
    let err = place_concat(&pool, &drives, (1 << 40, 64 << 10), MIB, 64).unwrap_err();
    assert!(err.contains("more than the drives have free"), "{err}");
}

/// Regression: a concat of 2 MiB at a 63 KiB interleave was placed on a
/// 3 MiB subdisk (1 MiB of label room, 2 MiB of data), which md's linear
/// rounds down to 32 whole chunks, 2,064,384 bytes: the volume came out
/// smaller than asked, and a convert by copy into it was refused (the
/// seeded copies test, seed 2). Only whole interleaves count now.
#[test]
fn a_concat_holds_what_was_asked_in_whole_interleaves() {
    let pool = sample();
    let drives: Vec<String> = pool.drives.iter().map(|d| d.name.clone()).collect();
    for il in [512, 63 << 10, 64 << 10, 126 << 9, 1 << 20, 3 << 20] {
        for want in [2 * MIB, 2 * MIB + 512, 100 * MIB] {
            let placed = place_concat(&pool, &drives, (want, il), MIB, 64).unwrap();
            let holds: u64 = placed.iter().map(|s| (s.len_bytes - MIB) / il * il).sum();
            assert!(holds >= want, "{want} at {il}: {placed:?}");
        }
    }
}

fn arb_pool() -> impl Strategy<Value = Pool> {
    (
        1usize..6,
        0usize..5,
        any::<u64>(),
        proptest::collection::vec(any::<u8>(), 16),
    )
        .prop_flat_map(|(ndrives, nvols, seed, uuid)| {
            let pool = Pool {
                name: format!("p{}", seed % 1000),
                uuid: uuid.try_into().unwrap(),
                generation: seed % 100_000 + 1,
                drives: (0..ndrives)
                    .map(|i| drive(&format!("d{i}"), i as u8 + 1, (64 + seed % 512) * MIB))
                    .collect(),
                volumes: Vec::new(),
                moves: Vec::new(),
                detached: Vec::new(),
                converts: Vec::new(),
                copies: Vec::new(),
            };
            let orgs = proptest::collection::vec((0usize..6, 1u64..16, 1u32..5), nvols);
            (Just(pool), orgs)
        })
        .prop_map(|(mut pool, orgs)| {
            let names: Vec<String> = pool.drives.iter().map(|d| d.name.clone()).collect();
            for (i, (org, len_mib, count)) in orgs.into_iter().enumerate() {
                let org = Level::ALL[org];
                let count = count.max(org.min_members()).min(names.len() as u32);
                if count < org.min_members() {
                    continue;
                }
                if let Ok(subdisks) = place_spread(&pool, &names, count, len_mib * MIB) {
                    pool.volumes.push(volume(&format!("v{i}"), org, subdisks));
                }
            }
            // Drives with nothing on them are spares, one in three.
            let holding: Vec<String> = pool.subdisks().map(|(_, sd)| sd.drive.clone()).collect();
            for d in pool.drives.iter_mut() {
                if !holding.contains(&d.name) && d.uuid[0] % 3 == 0 {
                    d.state = DriveState::Spare;
                } else if d.uuid[0] % 4 == 1 {
                    d.state = DriveState::Failed;
                }
            }
            add_a_move(&mut pool);
            pool
        })
}

/// The first subdisk that fits on an up drive its volume does not use
/// moves there, part copied.
fn add_a_move(pool: &mut Pool) {
    for v in &pool.volumes {
        let sd = &v.plexes[0].subdisks[0];
        for d in pool.drives.iter().filter(|d| d.state == DriveState::Up) {
            let used = v.plexes[0].subdisks.iter().any(|s| s.drive == d.name);
            let room = free_extents(pool, &d.name)
                .into_iter()
                .find(|&(_, len)| len >= sd.len_bytes);
            if let (false, Some((offset_bytes, _))) = (used, room) {
                let m = SubdiskMove {
                    volume: v.name.clone(),
                    plex: 0,
                    slot: 0,
                    drive: d.name.clone(),
                    offset_bytes,
                    copied_bytes: sd.len_bytes / 2 / SECTOR_BYTES * SECTOR_BYTES,
                };
                pool.moves.push(m);
                return;
            }
        }
    }
}

proptest! {
    /// Whatever the allocator builds is a valid pool, and the text and
    /// the slot give it back exactly.
    #[test]
    fn any_allocated_pool_checks_and_round_trips(pool in arb_pool()) {
        prop_assert_eq!(pool.check(), Ok(()));
        let text = text::render(&pool);
        prop_assert_eq!(&text::parse(&text, Strictness::Stored).unwrap(), &pool);
        let bytes = area::encode(&pool, pool.drives[0].uuid, 0, 1);
        prop_assert_eq!(&area::decode(&bytes, 0).unwrap().1, &pool);
    }

    /// No byte string decodes into a slot that breaks the pool's rules.
    #[test]
    fn arbitrary_slot_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..6000)) {
        if let Ok((_, pool)) = area::decode(&bytes, 0) {
            prop_assert_eq!(pool.check(), Ok(()));
        }
    }
}

/// docs/on-disk-format.md's slot header table is the contract: each row's
/// offset is where the code puts the field.
#[test]
fn the_documented_slot_header_is_the_one_written() {
    let doc = include_str!("../../../../docs/on-disk-format.md");
    let table = doc
        .split("### Slot header")
        .nth(1)
        .and_then(|t| t.split("\n\n").nth(1))
        .expect("the slot header table");
    let offset_of = |field: &str| match field {
        "magic" => Some(area::at::MAGIC),
        "format_version" => Some(area::at::VERSION),
        "slot" => Some(area::at::SLOT),
        "pool_uuid" => Some(area::at::POOL_UUID),
        "drive_uuid" => Some(area::at::DRIVE_UUID),
        "generation" => Some(area::at::GENERATION),
        "text_bytes" => Some(area::at::TEXT_BYTES),
        "text_crc" => Some(area::at::TEXT_CRC),
        "written_unix_seconds" => Some(area::at::WRITTEN),
        "checksum" => Some(area::at::CHECKSUM),
        _ => None,
    };
    let mut rows = 0;
    for row in table.lines().skip(2) {
        let cells: Vec<&str> = row.split('|').map(|c| c.trim().trim_matches('`')).collect();
        let offset = usize::from_str_radix(cells[1].trim_start_matches("0x"), 16).unwrap();
        if let Some(at) = offset_of(cells[3]) {
            assert_eq!(at, offset, "{row}");
            rows += 1;
        }
    }
    assert_eq!(rows, 10, "every field has its row");
}
