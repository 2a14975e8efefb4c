//! The `platter` binary, run for real: `create` and `status` over member
//! files, every level, sizes with units, and every refusal the command line
//! promises (one clear line, the member named, no panic).

mod support;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde_json::Value;
use support::*;

const MIB: u64 = 1 << 20;

/// (level, members): each level at a width that exercises it (raid10 with a
/// member count its two copies do not divide).
const LEVELS: [(&str, usize); 6] = [
    ("concat", 3),
    ("stripe", 3),
    ("mirror", 2),
    ("raid10", 3),
    ("raid5", 4),
    ("raid6", 5),
];

/// The volume size the docs promise, computed from scratch: each member's
/// data area is its size less 1 MiB, floored to the interleave.
fn expected_size(level: &str, n: u64, member_bytes: u64, il: u64) -> u64 {
    let rows = (member_bytes - MIB) / il;
    let chunks = match level {
        "concat" | "stripe" => n * rows,
        "mirror" => rows,
        "raid10" => n * rows / 2,
        "raid5" => (n - 1) * rows,
        "raid6" => (n - 2) * rows,
        _ => unreachable!(),
    };
    chunks * il
}

#[test]
fn create_and_status_every_level_and_interleave() {
    let dir = temp_dir();
    let interleaves = [("126s", 126 * 512), ("128s", 128 * 512), ("1M", MIB)];
    let mut seed = 1u64;
    for (level, n) in LEVELS {
        for (il_text, il) in interleaves {
            let what = format!("{level} {il_text}");
            let sub = dir.path().join(format!("{level}-{il_text}"));
            fs::create_dir(&sub).unwrap();
            let members = member_paths(&sub, n);
            for m in &members {
                assert!(fs::metadata(m).is_err(), "{m} does not exist yet");
            }
            let name = format!("vol-{level}-{il_text}");
            let mut args = vec![
                "create",
                "--level",
                level,
                "--interleave",
                il_text,
                "--member-size",
                "8M",
                "--name",
                &name,
            ];
            args.extend(members.iter().map(String::as_str));
            let out = platter(&args);
            let listing = assert_ok(&out, &what);
            for m in &members {
                assert_eq!(fs::metadata(m).unwrap().len(), 8 * MIB, "{what}: {m}");
                assert!(
                    listing.contains(m.as_str()),
                    "{what}: listing names {m}:\n{listing}"
                );
            }
            assert!(listing.contains(&name), "{what}:\n{listing}");
            assert!(listing.contains(level), "{what}:\n{listing}");

            // Status, members in another order: labels decide the slots.
            let shuffled = shuffle(&members, &mut seed);
            let v = status_json(&shuffled, &what);
            let size = expected_size(level, n as u64, 8 * MIB, il);
            assert_eq!(v["level"], level, "{what}");
            assert_eq!(v["name"], name.as_str(), "{what}");
            assert_eq!(v["interleave_bytes"], il, "{what}");
            assert_eq!(v["size_bytes"], size, "{what}");
            assert_eq!(v["state"], "clean", "{what}");
            assert_eq!(v["member_count"], n, "{what}");
            assert_eq!(v["members_online"], n, "{what}");
            let slots = v["members"].as_array().unwrap();
            assert_eq!(slots.len(), n, "{what}");
            for (i, s) in slots.iter().enumerate() {
                assert_eq!(s["slot"], i, "{what}");
                assert_eq!(s["path"], members[i].as_str(), "{what}: slot {i}");
                assert_eq!(s["state"], "active", "{what}: slot {i}");
            }
            // create's listing is the same volume.
            let uuid = v["uuid"].as_str().unwrap();
            assert!(listing.contains(uuid), "{what}: {uuid} in\n{listing}");
        }
    }
}

#[test]
fn human_status_shows_the_volume_and_one_line_per_slot() {
    let dir = temp_dir();
    let members = member_paths(dir.path(), 4);
    let mut args = vec![
        "create",
        "--level",
        "raid5",
        "--interleave",
        "126s",
        "--member-size",
        "8M",
        "--name",
        "people",
    ];
    args.extend(members.iter().map(String::as_str));
    assert_ok(&platter(&args), "create");
    let shuffled = vec![
        members[2].clone(),
        members[0].clone(),
        members[3].clone(),
        members[1].clone(),
    ];
    let uuid = status_json(&shuffled, "status --json")["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let mut args = vec!["status"];
    args.extend(shuffled.iter().map(String::as_str));
    let text = assert_ok(&platter(&args), "status");
    assert!(text.contains("people"), "{text}");
    assert!(text.contains(&uuid), "{text}");
    assert!(text.contains("raid5"), "{text}");
    assert!(
        text.contains("126s"),
        "interleave shown in sectors:\n{text}"
    );
    assert!(
        text.contains("63k"),
        "interleave shown with a unit:\n{text}"
    );
    for (slot, path) in members.iter().enumerate() {
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.split_whitespace().last() == Some(path.as_str()))
            .collect();
        assert_eq!(lines.len(), 1, "one line for {path}:\n{text}");
        assert_eq!(
            lines[0].split_whitespace().next(),
            Some(slot.to_string().as_str()),
            "{path} is slot {slot}:\n{text}"
        );
        assert!(lines[0].contains("active"), "{}", lines[0]);
    }
}

#[test]
fn sizes_take_units() {
    let dir = temp_dir();
    let members = member_paths(dir.path(), 2);
    let out = platter(&[
        "create",
        "--level",
        "mirror",
        "--interleave",
        "126s",
        "--member-size",
        "2G",
        &members[0],
        &members[1],
    ]);
    assert_ok(&out, "create 2G");
    for m in &members {
        let meta = fs::metadata(m).unwrap();
        assert_eq!(meta.len(), 2 << 30, "{m}");
        // Sparse: the label is written, the data area is not allocated.
        assert!(
            meta.blocks() * 512 < 64 * MIB,
            "{m}: {} bytes allocated",
            meta.blocks() * 512
        );
    }
    let v = status_json(&members, "status");
    assert_eq!(v["interleave_bytes"], 64512);
    // md's headroom for 2 GiB members: 2 MiB, and the label and bitmap
    // make it 3 MiB before the data.
    assert_eq!(v["size_bytes"], ((2 << 30) - 3 * MIB) / 64512 * 64512);
}

#[test]
fn help_mentions_sizes_with_units() {
    for args in [
        &["--help"][..],
        &["create", "--help"],
        &["status", "--help"],
    ] {
        let out = platter(args);
        let text = assert_ok(&out, &format!("{args:?}"));
        assert!(text.contains("Usage"), "{args:?}:\n{text}");
        assert!(
            text.contains("126s") && text.contains("64k") && text.contains("1M"),
            "{args:?} mentions sizes with units:\n{text}"
        );
        assert!(
            text.contains("512"),
            "{args:?} says what a sector is:\n{text}"
        );
    }
}

// ---------------------------------------------------------------------------
// Refusals

/// A raid5 volume of three 8 MiB members in `dir`: (members, uuid).
fn raid5(dir: &std::path::Path, prefix: &str) -> (Vec<String>, String) {
    let members: Vec<String> = (0..3)
        .map(|i| {
            dir.join(format!("{prefix}{i}"))
                .to_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let mut args = vec!["create", "--level", "raid5", "--member-size", "8M"];
    args.extend(members.iter().map(String::as_str));
    assert_ok(&platter(&args), "create raid5");
    let uuid = status_json(&members, "status")["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    (members, uuid)
}

#[test]
fn create_over_a_labelled_member_needs_force() {
    let dir = temp_dir();
    let (members, uuid) = raid5(dir.path(), "m");
    // Data the refused create must not zero.
    let mut before = Vec::new();
    for (i, m) in members.iter().enumerate() {
        let mut bytes = fs::read(m).unwrap();
        bytes[(MIB + 12345) as usize..(MIB + 12345 + 100) as usize].fill(0x5a + i as u8);
        fs::write(m, &bytes).unwrap();
        before.push(bytes);
    }

    // All labelled, and only the last one labelled among fresh files.
    let fresh = dir.path().join("fresh").to_str().unwrap().to_string();
    let out = platter(&[
        "create",
        "--level",
        "stripe",
        &members[0],
        &members[1],
        &members[2],
    ]);
    let err = assert_refused(&out, "create over labels");
    assert!(err.contains(&members[0]), "{err}");
    assert!(err.contains("--force"), "{err}");
    assert!(err.contains(&uuid), "names the volume it belongs to: {err}");
    let out = platter(&[
        "create",
        "--level",
        "mirror",
        "--member-size",
        "8M",
        &fresh,
        &members[2],
    ]);
    let err = assert_refused(&out, "create over one label");
    assert!(err.contains(&members[2]), "{err}");
    for (m, b) in members.iter().zip(&before) {
        assert!(
            fs::read(m).unwrap() == *b,
            "{m} changed by a refused create"
        );
    }
    assert_eq!(status_json(&members, "status")["uuid"], uuid.as_str());

    let out = platter(&[
        "create",
        "--level",
        "stripe",
        "--force",
        &members[0],
        &members[1],
        &members[2],
    ]);
    assert_ok(&out, "create --force");
    let v = status_json(&members, "status after --force");
    assert_ne!(v["uuid"], uuid.as_str(), "a new volume");
    assert_eq!(v["level"], "stripe");
}

/// CRC32C (Castagnoli), bit by bit: independent of the crate platter uses.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn crc32c_matches_the_check_value() {
    assert_eq!(crc32c(b"123456789"), 0xE306_9283);
}

#[test]
fn a_damaged_label_is_refused_naming_the_member() {
    let dir = temp_dir();
    let (members, _) = raid5(dir.path(), "m");
    let mut bytes = fs::read(&members[1]).unwrap();
    bytes[0x84] ^= 0x20; // a letter of the name
    fs::write(&members[1], &bytes).unwrap();
    let out = platter(&["status", &members[0], &members[1], &members[2]]);
    let err = assert_refused(&out, "damaged label");
    assert!(err.contains(&members[1]), "{err}");
    assert!(err.contains("checksum"), "{err}");
    assert!(
        !err.contains(&members[0]) && !err.contains(&members[2]),
        "{err}"
    );
}

#[test]
fn an_unknown_label_version_is_refused_naming_the_member() {
    let dir = temp_dir();
    let (members, _) = raid5(dir.path(), "m");
    let mut bytes = fs::read(&members[2]).unwrap();
    let stored = u32::from_le_bytes(bytes[4092..4096].try_into().unwrap());
    assert_eq!(
        stored,
        crc32c(&bytes[..4092]),
        "the test's CRC32C is the label's"
    );
    assert_eq!(&bytes[8..12], &1u32.to_le_bytes(), "format version 1");
    bytes[8..12].copy_from_slice(&99u32.to_le_bytes());
    let crc = crc32c(&bytes[..4092]);
    bytes[4092..4096].copy_from_slice(&crc.to_le_bytes());
    fs::write(&members[2], &bytes).unwrap();
    let out = platter(&["status", "--json", &members[0], &members[1], &members[2]]);
    let err = assert_refused(&out, "version 99");
    assert!(err.contains(&members[2]), "{err}");
    assert!(err.contains("version"), "{err}");
    assert!(err.contains("99"), "{err}");
    assert!(!err.contains("checksum"), "the checksum is right: {err}");
}

#[test]
fn a_member_of_another_volume_is_refused() {
    let dir = temp_dir();
    let (members, _) = raid5(dir.path(), "m");
    let (others, _) = raid5(dir.path(), "x");
    let out = platter(&["status", &members[0], &others[1], &members[1], &members[2]]);
    let err = assert_refused(&out, "intruder");
    assert!(err.contains(&others[1]), "{err}");
    assert!(err.contains("another volume"), "{err}");
}

#[test]
fn a_copied_member_is_a_duplicated_slot() {
    let dir = temp_dir();
    let (members, _) = raid5(dir.path(), "m");
    let copy = dir.path().join("clone.img").to_str().unwrap().to_string();
    fs::copy(&members[1], &copy).unwrap();
    for order in [
        vec![&members[0], &members[1], &members[2], &copy],
        vec![&copy, &members[0], &members[1], &members[2]],
    ] {
        let mut args = vec!["status"];
        args.extend(order.iter().map(|s| s.as_str()));
        let err = assert_refused(&platter(&args), "copy");
        assert!(err.contains(&members[1]), "{err}");
        assert!(err.contains(&copy), "{err}");
        assert!(err.contains("slot 1"), "{err}");
    }
}

#[test]
fn a_missing_member_shows_the_volume_degraded() {
    let dir = temp_dir();
    let (members, uuid) = raid5(dir.path(), "m");
    fs::rename(&members[1], dir.path().join("elsewhere")).unwrap();
    let v = status_json(
        &[members[2].clone(), members[1].clone(), members[0].clone()],
        "degraded",
    );
    assert_eq!(v["uuid"], uuid.as_str());
    assert_eq!(v["state"], "degraded");
    assert_eq!(v["members_online"], 2);
    let slots = v["members"].as_array().unwrap();
    assert_eq!(slots[1]["state"], "missing");
    assert_eq!(slots[1]["path"], Value::Null);
    assert_eq!(slots[0]["path"], members[0].as_str());
    assert_eq!(slots[2]["path"], members[2].as_str());
    let out = platter(&["status", &members[0], &members[1], &members[2]]);
    let text = assert_ok(&out, "human degraded");
    assert!(text.contains("degraded"), "{text}");
    assert!(text.contains("missing"), "{text}");
    assert!(
        text.contains(&members[1]),
        "the unreadable member is named:\n{text}"
    );
}

/// Found beside the `fail` story: with two raid10 members missing the
/// offline status said "degraded" whichever two they were, and `serve`
/// started a raid10 whose lost members held the only copies of some
/// chunks (reads there failed). Which members are missing decides it.
#[test]
fn raid10_is_failed_only_when_a_chunk_loses_every_copy() {
    let dir = temp_dir();
    let members = member_paths(dir.path(), 4);
    let mut args = vec!["create", "--level", "raid10", "--member-size", "4M"];
    args.extend(members.iter().map(String::as_str));
    assert_ok(&platter(&args), "create raid10");
    // Near 2 over 4: slots 0 and 1 hold the same chunks, as do 2 and 3.
    let v = status_json(&[members[1].clone(), members[3].clone()], "0 and 2 missing");
    assert_eq!(v["state"], "degraded", "{v}");
    let v = status_json(&[members[2].clone(), members[3].clone()], "0 and 1 missing");
    assert_eq!(v["state"], "failed", "{v}");
    let sock = dir.path().join("s.sock");
    let out = platter(&[
        "serve",
        "--socket",
        sock.to_str().unwrap(),
        &members[2],
        &members[3],
    ]);
    let err = assert_refused(&out, "serve without slots 0 and 1");
    assert!(err.contains("cannot serve all of its data"), "{err}");
}

#[test]
fn wrong_arguments_are_refused_with_one_line() {
    let dir = temp_dir();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (a, b, c, d) = (p("a"), p("b"), p("c"), p("d"));
    let sub = p("subdir");
    fs::create_dir(&sub).unwrap();

    // Refused before any member is opened: nothing may be created.
    let early: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["--level", "raid7", "--member-size", "8M", &a, &b],
            vec!["raid7"],
        ),
        (
            vec![
                "--level",
                "stripe",
                "--interleave",
                "1000",
                "--member-size",
                "8M",
                &a,
                &b,
            ],
            vec!["1000", "512"],
        ),
        (
            vec!["--level", "raid5", "--member-size", "8M", &a, &b],
            vec!["raid5", "3"],
        ),
        (
            vec!["--level", "raid6", "--member-size", "8M", &a, &b, &c],
            vec!["raid6", "4"],
        ),
        (
            vec![
                "--level",
                "raid5",
                "--layout",
                "diagonal",
                "--member-size",
                "8M",
                &a,
                &b,
                &c,
            ],
            vec!["diagonal"],
        ),
        (
            vec![
                "--level",
                "stripe",
                "--layout",
                "near",
                "--member-size",
                "8M",
                &a,
                &b,
            ],
            vec!["near"],
        ),
        (
            vec!["--level", "stripe", "--member-size", "12q", &a, &b],
            vec!["12q"],
        ),
        (
            vec!["--level", "mirror", "--member-size", "8M", &a, &b, &a],
            vec![&a, "twice"],
        ),
        (vec!["--level", "mirror"], vec!["required"]),
    ];
    for (args, words) in &early {
        let mut full = vec!["create"];
        full.extend(args);
        let err = assert_refused(&platter(&full), &format!("{args:?}"));
        for w in words {
            assert!(err.contains(w), "{args:?}: {w:?} in {err}");
        }
        for m in [&a, &b, &c] {
            assert!(fs::metadata(m).is_err(), "{args:?} created {m}");
        }
    }

    // Refused because of one member: that member is named.
    let err = assert_refused(
        &platter(&["create", "--level", "mirror", &a, &b]),
        "no size",
    );
    assert!(err.contains(&a), "{err}");
    assert!(
        err.contains("member-size") || err.contains("member size"),
        "{err}"
    );
    assert!(fs::metadata(&a).is_err(), "created without a size");

    let err = assert_refused(
        &platter(&[
            "create",
            "--level",
            "mirror",
            "--member-size",
            "100k",
            &c,
            &d,
        ]),
        "too small",
    );
    // Judged from the argument, before any file is made.
    assert!(err.contains("--member-size"), "{err}");
    assert!(err.contains("too small"), "{err}");
    assert!(
        fs::metadata(&c).is_err(),
        "{c} was made for a refused create"
    );

    let err = assert_refused(
        &platter(&[
            "create",
            "--level",
            "mirror",
            "--member-size",
            "8M",
            &sub,
            &b,
        ]),
        "directory",
    );
    assert!(err.contains(&sub), "{err}");
    assert!(err.contains("directory"), "{err}");

    // status refuses the same misuse.
    let err = assert_refused(&platter(&["status", &sub]), "status of a directory");
    assert!(err.contains(&sub), "{err}");
    let err = assert_refused(&platter(&["status", &a, &a]), "status twice");
    assert!(err.contains(&a) && err.contains("twice"), "{err}");
    let err = assert_refused(&platter(&["status", "--bogus", &a]), "unknown option");
    assert!(err.contains("--bogus"), "{err}");
}

/// The same file under two names is one member named twice. create used to
/// compare only the names, so it labelled the file twice and refused only at
/// assembly, after writing every label. Devices are now compared by identity
/// before anything is written.
#[test]
fn the_same_file_under_two_names_is_refused_before_writing() {
    let dir = temp_dir();
    let a = dir.path().join("a").to_str().unwrap().to_string();
    let a2 = dir.path().join(".").join("a").to_str().unwrap().to_string();
    let b = dir.path().join("b").to_str().unwrap().to_string();
    let c = dir.path().join("c").to_str().unwrap().to_string();
    let out = platter(&[
        "create",
        "--level",
        "raid5",
        "--member-size",
        "8M",
        &a,
        &a2,
        &b,
        &c,
    ]);
    let err = assert_refused(&out, "a and ./a");
    assert!(err.contains(&a) && err.contains(&a2), "{err}");
    for m in [&a, &b, &c] {
        let bytes = fs::read(m).unwrap_or_default();
        assert!(!bytes.starts_with(b"PLATTER"), "{m} was labelled");
    }
}

/// A refused create used to leave behind the member files it had created
/// before the refusal (a too-small member, a directory among the members).
#[test]
fn a_refused_create_leaves_no_files_behind() {
    let dir = temp_dir();
    let e = dir.path().join("e").to_str().unwrap().to_string();
    let f = dir.path().join("f").to_str().unwrap().to_string();
    let sub = dir.path().join("sub");
    fs::create_dir(&sub).unwrap();
    let sub = sub.to_str().unwrap().to_string();
    let out = platter(&[
        "create",
        "--level",
        "raid5",
        "--member-size",
        "8M",
        &e,
        &f,
        &sub,
    ]);
    assert_refused(&out, "a directory among the members");
    let out = platter(&[
        "create",
        "--level",
        "mirror",
        "--member-size",
        "100k",
        &e,
        &f,
    ]);
    assert_refused(&out, "members too small");
    assert!(
        !Path::new(&e).exists() && !Path::new(&f).exists(),
        "files left behind"
    );
}

#[test]
fn sweep_prints_a_table_writes_a_plot_and_repeats_itself() {
    let dir = temp_dir();
    let plot = dir.path().join("plot.svg");
    let args = |threads: &'static str, plot: &str| {
        vec![
            "sweep".to_string(),
            "--drive".into(),
            "parametric-7200".into(),
            "--workload".into(),
            "raidtest:p=4,n=100".into(),
            "--levels".into(),
            "stripe,raid5".into(),
            "--members".into(),
            "3".into(),
            "--interleaves".into(),
            "64s..256s,126s".into(),
            "--seed".into(),
            "3".into(),
            "--threads".into(),
            threads.into(),
            "--out".into(),
            plot.into(),
        ]
    };
    let run = |threads: &'static str| {
        let a = args(threads, plot.to_str().unwrap());
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let out = platter(&a);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "sweep failed: {err}");
        // Progress goes to stderr, one plain line per configuration here
        // (not a terminal).
        assert!(err.contains("sweep: 8/8 done"), "{err}");
        String::from_utf8(out.stdout).unwrap()
    };
    let one = run("1");
    assert!(one.contains("interleave") && one.contains("MB/s"), "{one}");
    assert_eq!(one.lines().count(), 1 + 2 * 4, "{one}");
    assert!(one.contains("126s"), "{one}");
    let svg = fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("raid5 x3"), "{svg}");
    assert_eq!(run("2"), one, "the same seed gives the same table");
    // The same plot as PNG (issue 19, point 5); another name is refused
    // before anything runs.
    let png = dir.path().join("plot.png");
    let a = args("1", png.to_str().unwrap());
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let out = platter(&a);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "a PNG signature");
    // IHDR: 860 x 520 plot units at two pixels each.
    assert_eq!(&bytes[16..24], &[0, 0, 6, 184, 0, 0, 4, 16]);
    let gif = dir.path().join("plot.gif");
    let a = args("1", gif.to_str().unwrap());
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let msg = assert_refused(&platter(&a), "SVG or PNG");
    assert!(msg.contains("plot.gif"), "{msg}");
    assert!(!gif.exists());
    let out = platter(&["sweep", "--drive", "no-such-drive"]);
    let msg = assert_refused(&out, "unknown drive");
    assert!(msg.contains("no-such-drive"), "{msg}");
}

/// `sweep --beside`: a second volume on the same drives, with a load of
/// its own, slows each swept volume (vinum's experiment of plexes side by
/// side); the JSON says the same; simple members, which have no heads to
/// share, and a malformed volume are refused.
#[test]
fn sweep_beside_says_what_a_second_volume_on_the_drives_costs() {
    let base = [
        "sweep",
        "--workload",
        "raidtest:n=200,p=4,read=100",
        "--levels",
        "raid5",
        "--interleaves",
        "32s,512s",
        "--beside",
        "stripe:128k:dd:total=32M,qd=2",
    ];
    let out = platter(&base);
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        table.lines().next().unwrap().contains("ms beside"),
        "{table}"
    );
    for line in table.lines().skip(1) {
        let slower: f64 = line
            .split_whitespace()
            .find_map(|w| w.strip_suffix('x'))
            .and_then(|x| x.parse().ok())
            .unwrap_or_else(|| panic!("no slowdown in {line}"));
        assert!(slower > 1.1, "the second volume cost nothing: {line}");
    }
    let mut json = base.to_vec();
    json.push("--json");
    let out = platter(&json);
    let text = String::from_utf8(out.stdout).unwrap();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let with = v["beside"]["mean_latency_ms"].as_f64().unwrap();
        assert!(with > v["mean_latency_ms"].as_f64().unwrap(), "{v}");
        assert!(
            v["beside"]["beside_mb_per_s"].as_f64().unwrap() > 0.0,
            "{v}"
        );
    }
    let out = platter(&[
        "sweep",
        "--drive",
        "simple",
        "--member-size",
        "64M",
        "--beside",
        "stripe:64k:dd",
    ]);
    assert_refused(&out, "modelled drives");
    let out = platter(&["sweep", "--beside", "stripe"]);
    assert_refused(&out, "LEVEL:INTERLEAVE:WORKLOAD");
}

/// `sim pool`: a pool's configuration (printconfig's) on modelled drives,
/// each volume with its own load: both run slower together than alone,
/// the same seed gives the same numbers, and bad input is refused.
#[test]
fn sim_pool_says_what_volumes_on_the_same_drives_cost_each_other() {
    let dir = temp_dir();
    let d = dir.path().join("d");
    fs::create_dir(&d).unwrap();
    let drives: Vec<String> = (0..4)
        .map(|i| d.join(format!("d{i}")).display().to_string())
        .collect();
    let mut args = vec!["pool", "create", "tank", "--drive-size", "8G"];
    args.extend(drives.iter().map(String::as_str));
    let ok = |args: &[&str]| {
        let out = platter(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    ok(&args);
    let dev = d.display().to_string();
    ok(&[
        "volume", "create", "tank", "db", "--level", "raid10", "--size", "2G", &dev,
    ]);
    ok(&[
        "volume",
        "create",
        "tank",
        "bulk",
        "--level",
        "raid5",
        "--interleave",
        "128k",
        "--size",
        "3G",
        &dev,
    ]);
    let conf = dir.path().join("tank.conf");
    fs::write(&conf, ok(&["printconfig", "tank", &dev])).unwrap();
    let conf = conf.to_str().unwrap();
    let run = || {
        ok(&[
            "sim",
            "pool",
            conf,
            "--workload",
            "db=raidtest:p=4,n=300,read=70",
            "--workload",
            "bulk=dd:total=32M,qd=2",
            "--json",
        ])
    };
    let text = run();
    assert_eq!(text, run(), "the same seed gives the same numbers");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    for v in &lines {
        let (alone, together) = (&v["alone"], &v["together"]);
        let slower = together["mean_latency_ms"].as_f64().unwrap()
            / alone["mean_latency_ms"].as_f64().unwrap();
        assert!(slower > 1.05, "{v}");
        assert!(
            together["mb_per_s"].as_f64() < alone["mb_per_s"].as_f64(),
            "{v}"
        );
    }
    // A move of one of db's subdisks to free space on its own drive,
    // beside both loads: slower than alone, and the volumes slower than
    // without it.
    let moving = ok(&[
        "sim",
        "pool",
        conf,
        "--workload",
        "db=raidtest:p=4,n=300,read=70",
        "--workload",
        "bulk=dd:total=32M,qd=2",
        "--move",
        "db.p0.s0=d0",
        "--json",
    ]);
    let rows: Vec<serde_json::Value> = moving
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        rows.len(),
        5,
        "db, bulk, the move's two sides, its line: {moving}"
    );
    let m = &rows[4];
    assert_eq!(m["move"], "db.p0.s0=d0", "{m}");
    let (alone, together) = (
        m["alone_s"].as_f64().unwrap(),
        m["together_s"].as_f64().unwrap(),
    );
    assert!(alone > 0.0 && together > alone, "{m}");
    let latency = |v: &serde_json::Value| v["together"]["mean_latency_ms"].as_f64().unwrap();
    assert!(
        latency(&rows[0]) > latency(&lines[0]),
        "db slower beside the move: {moving}"
    );
    let refused = |args: &[&str], says: &str| assert_refused(&platter(args), says);
    refused(
        &[
            "sim",
            "pool",
            conf,
            "--workload",
            "db=dd",
            "--move",
            "db.p0.s0=d1",
        ],
        "db.p0.s1 of its plex",
    );
    refused(
        &["sim", "pool", conf, "--workload", "db"],
        "expected VOLUME=WORKLOAD",
    );
    refused(
        &["sim", "pool", conf, "--workload", "nosuch=dd"],
        "pool tank has no volume nosuch",
    );
    refused(
        &[
            "sim",
            "pool",
            conf,
            "--drive",
            "simple",
            "--workload",
            "db=dd",
        ],
        "not simple",
    );
}

/// `sim pool --revive V.pN`: a plex's revive (a convert's new plex, or an
/// attach of a plex written elsewhere) as a read through another plex and
/// a write through the revived one, beside another volume's load on the
/// same drives: it takes longer beside the load than alone, and the load
/// is slower beside it. A plex a volume lacks, or of a volume of one
/// plex, is refused.
#[test]
fn sim_pool_says_how_long_a_plex_revive_takes_beside_other_volumes() {
    let dir = temp_dir();
    let d = dir.path().join("d");
    fs::create_dir(&d).unwrap();
    let drives: Vec<String> = (0..5)
        .map(|i| d.join(format!("d{i}")).display().to_string())
        .collect();
    let mut args = vec!["pool", "create", "tank", "--drive-size", "8G"];
    args.extend(drives.iter().map(String::as_str));
    let ok = |args: &[&str]| {
        let out = platter(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    ok(&args);
    let dev = d.display().to_string();
    ok(&[
        "volume", "create", "tank", "bulk", "--level", "stripe", "--size", "2G", "--drives",
        "d0,d1", &dev,
    ]);
    ok(&[
        "volume", "create", "tank", "m", "--plex", "concat", "--plex", "stripe:2", "--size",
        "256M", "--drives", "d4,d0,d1", &dev,
    ]);
    let conf = dir.path().join("tank.conf");
    fs::write(&conf, ok(&["printconfig", "tank", &dev])).unwrap();
    let conf = conf.to_str().unwrap();
    let out = ok(&[
        "sim",
        "pool",
        conf,
        "--workload",
        "bulk=dd:total=64M,qd=2",
        "--revive",
        "m.p1",
        "--json",
    ]);
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        rows.len(),
        4,
        "bulk, the revive's two sides, its line: {out}"
    );
    let r = &rows[3];
    assert_eq!(r["revive"], "m.p1", "{r}");
    // The volume, and the room its mirror keeps before it in each plex.
    let bytes = r["bytes"].as_u64().unwrap();
    assert!((256 << 20..=260 << 20).contains(&bytes), "{r}");
    let (alone, together) = (
        r["alone_s"].as_f64().unwrap(),
        r["together_s"].as_f64().unwrap(),
    );
    assert!(alone > 0.0 && together > alone, "{r}");
    let latency = |v: &serde_json::Value, k: &str| v[k]["mean_latency_ms"].as_f64().unwrap();
    assert!(
        latency(&rows[0], "together") > latency(&rows[0], "alone"),
        "bulk slower beside the revive: {out}"
    );
    let refused = |args: &[&str], says: &str| assert_refused(&platter(args), says);
    refused(
        &["sim", "pool", conf, "--revive", "m.p5"],
        "has no plex m.p5",
    );
    refused(
        &["sim", "pool", conf, "--revive", "bulk.p0"],
        "has no plex bulk.p0 of a volume of several plexes",
    );

    // A volume of one plex converted by copy (recorded offline) onto the
    // loaded volume's drives: its new plex is filled from its plex, the
    // volume's 128 MiB, slower beside the load.
    ok(&[
        "volume", "create", "tank", "one", "--level", "concat", "--size", "128M", "--drives", "d2",
        &dev,
    ]);
    ok(&[
        "volume",
        "convert",
        "tank",
        "one",
        "--level",
        "stripe",
        "--subdisks",
        "2",
        "--drives",
        "d0,d1",
        &dev,
    ]);
    let copying = dir.path().join("copying.conf");
    fs::write(&copying, ok(&["printconfig", "tank", &dev])).unwrap();
    let copying = copying.to_str().unwrap();
    let out = ok(&[
        "sim",
        "pool",
        copying,
        "--workload",
        "bulk=dd:total=64M,qd=2",
        "--revive",
        "one.p1",
        "--json",
    ]);
    let r: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(r["revive"], "one.p1", "{out}");
    assert_eq!(r["bytes"], 128u64 << 20, "{r}");
    assert!(r["together_s"].as_f64() > r["alone_s"].as_f64(), "{r}");
}

#[test]
fn sweep_simple_members_model_a_served_volume() {
    // The members `serve --inject mN=latency=2ms` makes, behind a link:
    // a 1 MiB read on stripe4 takes one member read of 256 KiB (2 ms and
    // a quarter of 512 us) plus the link (50 us and 300 us).
    let out = platter(&[
        "sweep",
        "--drive",
        "simple",
        "--member-size",
        "63M",
        "--latency",
        "2ms",
        "--latency-per-mib",
        "512us",
        "--queue-depth",
        "32",
        "--link",
        "request=50us,read=300us,write=400us",
        "--levels",
        "stripe",
        "--members",
        "4",
        "--interleaves",
        "256k",
        "--workload",
        "dd:bs=1M,qd=1,total=32M",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "sweep failed: {err}");
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["mean_latency_ms"].as_f64(), Some(2.478), "{j}");
    assert_eq!(j["member_ios"].as_u64(), Some(4 * 32), "{j}");
    for (args, why) in [
        (
            &["--drive", "parametric-7200", "--latency", "2ms"][..],
            "for --drive simple",
        ),
        (
            &[
                "--drive",
                "simple",
                "--member-size",
                "63M",
                "--latency-jitter",
                "1ms",
            ][..],
            "needs --latency",
        ),
        (
            &[
                "--drive",
                "simple",
                "--member-size",
                "63M",
                "--latency",
                "2",
            ][..],
            "unit",
        ),
        (
            &[
                "--drive",
                "simple",
                "--member-size",
                "63M",
                "--latency-per-mib",
                "1ms",
            ][..],
            "needs --latency",
        ),
        (
            &[
                "--drive",
                "simple",
                "--member-size",
                "63M",
                "--link",
                "rate=1G",
            ][..],
            "unknown key",
        ),
    ] {
        let mut a = vec!["sweep"];
        a.extend_from_slice(args);
        let msg = assert_refused(&platter(&a), why);
        assert!(msg.contains(why), "{args:?}: {msg}");
    }
}

#[test]
fn sim_iolog_writes_one_iolog_per_process_and_the_fio_command() {
    let dir = temp_dir();
    let out_dir = dir.path().join("logs");
    let o = out_dir.to_str().unwrap();
    let args = [
        "sim",
        "iolog",
        "--workload",
        "raidtest:p=3,n=30",
        "--size",
        "64M",
        "--seed",
        "5",
        "--out",
        o,
    ];
    let out = platter(&args);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "sim iolog failed: {err}");
    let cmd = String::from_utf8(out.stdout).unwrap();
    assert!(
        cmd.starts_with("fio --ioengine=nbd \"--uri=$NBD_URI\""),
        "{cmd}"
    );
    let mut requests = 0;
    let mut first = Vec::new();
    for p in 0..3 {
        let path = out_dir.join(format!("proc-{p}.iolog"));
        assert!(
            cmd.contains(&format!("--name=proc-{p} --read_iolog={}", path.display())),
            "{cmd}"
        );
        let text = fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[..3], ["fio version 2 iolog", "nbd add", "nbd open"]);
        assert_eq!(lines.last(), Some(&"nbd close"));
        for l in &lines[3..lines.len() - 1] {
            let f: Vec<&str> = l.split(' ').collect();
            assert!(f.len() == 4 && ["read", "write"].contains(&f[1]), "{l}");
            let (off, len): (u64, u64) = (f[2].parse().unwrap(), f[3].parse().unwrap());
            assert!(off % 512 == 0 && off + len <= 64 * MIB, "{l}");
            requests += 1;
        }
        first.push(text);
    }
    assert_eq!(requests, 30);
    assert!(!out_dir.join("proc-3.iolog").exists());
    // The same seed writes the same iologs.
    assert!(platter(&args).status.success());
    for (p, text) in first.iter().enumerate() {
        assert_eq!(
            &fs::read_to_string(out_dir.join(format!("proc-{p}.iolog"))).unwrap(),
            text
        );
    }
    let out = platter(&[
        "sim",
        "iolog",
        "--workload",
        "nosuch",
        "--size",
        "64M",
        "--out",
        o,
    ]);
    let msg = assert_refused(&out, "unknown workload");
    assert!(msg.contains("nosuch"), "{msg}");
}

/// The story: `--name` took newlines and terminal escapes and every
/// listing printed them raw (a name could clear the operator's screen).
/// `create` refuses control characters now; and since a label can be
/// crafted by hand, a name read from one is printed with them escaped.
#[test]
fn names_with_control_characters_are_refused_or_escaped() {
    let dir = temp_dir();
    for bad in ["two\nlines", "clear\u{1b}[2J", "bell\u{7}"] {
        let members = member_paths(dir.path(), 2);
        let mut args = vec![
            "create",
            "--level",
            "mirror",
            "--member-size",
            "4M",
            "--name",
            bad,
        ];
        args.extend(members.iter().map(String::as_str));
        let err = assert_refused(&platter(&args), "a name with a control character");
        assert!(
            err.contains("--name") && err.contains("control character"),
            "{err}"
        );
        assert!(
            !err.contains(bad),
            "the refusal prints the name raw: {err:?}"
        );
        assert!(
            members.iter().all(|m| fs::metadata(m).is_err()),
            "files made"
        );
    }

    // A label written by hand with such a name.
    let (members, _) = raid5(dir.path(), "c");
    let crafted = "evil\u{1b}[2J\nname";
    for m in &members {
        use platter_core::label::{Label, LABEL_BYTES};
        let mut bytes = fs::read(m).unwrap();
        let mut label = Label::decode(&bytes[..LABEL_BYTES]).unwrap();
        label.name = crafted.to_string();
        bytes[..LABEL_BYTES].copy_from_slice(&label.encode());
        fs::write(m, bytes).unwrap();
    }
    let text = assert_ok(
        &platter(&["status", &members[0], &members[1], &members[2]]),
        "status",
    );
    assert!(
        !text.contains('\u{1b}'),
        "status prints the escape raw:\n{text:?}"
    );
    assert!(
        text.lines()
            .next()
            .unwrap()
            .contains(r"evil\u{1b}[2J\nname"),
        "{text}"
    );
    // JSON carries the name as it is (JSON escapes it).
    assert_eq!(status_json(&members, "json")["name"], crafted);
    // Refusals that name the volume escape it too.
    let mut args = vec!["create", "--level", "mirror"];
    args.extend([members[0].as_str(), members[1].as_str()]);
    let err = assert_refused(&platter(&args), "create over the crafted label");
    assert!(
        !err.contains('\u{1b}') && err.contains(r"evil\u{1b}"),
        "{err:?}"
    );
}

/// The stories: `rebuild-rate 0` said `missing or zero "bytes_per_sec"`,
/// naming a JSON field instead of what is accepted; `serve
/// --max-connections 0` started and refused every client. Both are refused
/// where the arguments are read, saying what would do.
#[test]
fn zero_rates_and_counts_are_refused_saying_what_is_accepted() {
    let dir = temp_dir();
    let ctl = dir.path().join("none.ctl");
    let err = assert_refused(
        &platter(&["rebuild-rate", "--control", ctl.to_str().unwrap(), "0"]),
        "rebuild-rate 0",
    );
    assert!(
        err.contains("greater than 0") && err.contains("20M"),
        "{err}"
    );
    let (members, _) = raid5(dir.path(), "z");
    let sock = dir.path().join("z.sock");
    for flag in ["--max-connections", "--threads"] {
        let mut args = vec!["serve", "--socket", sock.to_str().unwrap(), flag, "0"];
        args.extend(members.iter().map(String::as_str));
        let err = assert_refused(&platter(&args), flag);
        assert!(err.contains("at least 1"), "{flag}: {err}");
        assert!(!sock.exists(), "{flag} 0: the server started");
    }
    for (flag, bad, accepted) in [
        ("--member-queue-depth", "0", "1..=4096"),
        ("--member-queue-depth", "5000", "1..=4096"),
        ("--member-timeout", "0", "1..=3600"),
    ] {
        let mut args = vec!["serve", "--socket", sock.to_str().unwrap(), flag, bad];
        args.extend(members.iter().map(String::as_str));
        let err = assert_refused(&platter(&args), flag);
        assert!(err.contains(accepted), "{flag} {bad}: {err}");
        assert!(!sock.exists(), "{flag} {bad}: the server started");
    }
}

/// `sim validate --requests` writes what it replayed, request for request,
/// so a run can be set beside another simulator's (DiskSim's "Detailed
/// execution trace"): how three cache rules of the drive model were found.
#[test]
fn sim_validate_writes_each_request() {
    let dir = temp_dir();
    let parv = dir.path().join("m.parv");
    let out = platter(&[
        "sim",
        "calibrate",
        "model:parametric-7200",
        "--out",
        parv.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A miss, the same sectors again (a hit), a write, a far read.
    let trace = dir.path().join("t.trace");
    fs::write(
        &trace,
        "R Miss 1000 8 9000.0 500.0\nR Hit 1000 8 300.0 500.0\n\
         W Doub 5000 4 7000.0 500.0\nR Miss 9000000 16 12000.0 0.0\n",
    )
    .unwrap();
    let requests = dir.path().join("r.txt");
    let args = [
        "sim",
        "validate",
        "--json",
        "--drive",
        parv.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--requests",
        requests.to_str().unwrap(),
    ];
    let v: Value = serde_json::from_str(&assert_ok(&platter(&args), "sim validate")).unwrap();
    let text = fs::read_to_string(&requests).unwrap();
    let lines: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines.len(), 4, "{text}");
    let rw: Vec<&str> = lines.iter().map(|l| l[1]).collect();
    assert_eq!(rw, ["R", "R", "W", "R"]);
    assert_eq!((lines[3][2], lines[3][3]), ("9000000", "16"));
    assert_eq!(lines[0][4], "9.000000", "measured ms");
    let hits: Vec<&str> = lines.iter().map(|l| l[6]).collect();
    assert_eq!((hits[0], hits[1]), ("miss", "whole"), "{text}");
    let simulated: Vec<f64> = lines.iter().map(|l| l[5].parse().unwrap()).collect();
    assert!(simulated[1] < simulated[0], "a hit is faster: {text}");
    let mean = simulated.iter().sum::<f64>() / 4.0;
    let json_mean = v["mean_simulated_ms"].as_f64().unwrap();
    assert!((mean - json_mean).abs() < 1e-5, "{mean} vs {json_mean}");

    let mut bad = args.to_vec();
    let missing = dir.path().join("no/such/dir/r.txt");
    bad[8] = missing.to_str().unwrap();
    let msg = assert_refused(&platter(&bad), "requests into a missing folder");
    assert!(msg.contains("no/such/dir/r.txt"), "{msg}");
}

/// DiskSim's drives are found by name wherever the command runs: they ship
/// in the repository's data/disksim (and scripts/setup installs them
/// beside the binary). A name found nowhere is refused in one line that
/// says where it was looked for.
///
/// Regression: names were looked for in ../shared/data/disksim relative
/// to the current directory, which a clone has nowhere.
#[test]
fn drives_of_the_validation_set_are_found_by_name() {
    let dir = temp_dir();
    let sweep = |drive: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_platter"))
            .args(["sweep", "--drive", drive, "--workload", "dd:total=1M"])
            .args([
                "--levels",
                "stripe",
                "--members",
                "2",
                "--interleaves",
                "64k",
            ])
            .current_dir(dir.path())
            .env_remove("PLATTER_DISKSIM_DIR")
            .output()
            .unwrap()
    };
    for name in ["cheetah9LP", "barracuda", "hp_c2247a"] {
        let table = assert_ok_quietly(&sweep(name), name);
        assert!(table.contains("stripe"), "{name}: {table}");
    }
    let err = assert_refused(&sweep("nosuchdrive"), "an unknown drive");
    assert!(
        err.contains("no nosuchdrive.parv in") && err.contains("data/disksim"),
        "{err}"
    );
}

/// Success with stdout returned; sweep's progress goes to stderr.
fn assert_ok_quietly(out: &std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
