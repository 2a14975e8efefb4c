//! `platter create` with sizes at the edges of u64: every combination
//! either makes the volume or is refused in one line, never panics, and a
//! refusal leaves no file behind.

mod support;

use proptest::prelude::*;
use std::fs;
use support::*;

/// The story: `create --interleave 18446744073709551104` panicked in
/// create.rs (add with overflow), exit 101, and left four unlabelled member
/// files; `--member-size 18446744073709551615` said "out of range integral
/// type conversion attempted". Both are refused in a sentence now, before
/// any file is made.
#[test]
fn sizes_past_u64_are_refused_before_any_file_is_made() {
    let cases: [(&[&str], &str); 4] = [
        (
            &[
                "--interleave",
                "18446744073709551104",
                "--member-size",
                "8M",
            ],
            "--interleave 18446744073709551104 bytes is too large",
        ),
        (
            &["--member-size", "18446744073709551615"],
            "larger than any file can be",
        ),
        // Members a file can be, but three data members hold more than a
        // u64 counts; and a stripe of three such interleaves (members that
        // large get md's 129 MiB before their data).
        (
            &["--member-size", "9223372036854775807"],
            "more than 2^64 bytes",
        ),
        (
            &[
                "--interleave",
                "4611686018427387904",
                "--member-size",
                "4611686018562654208",
            ],
            "more than 2^64 bytes",
        ),
    ];
    for (sizes, message) in cases {
        let dir = temp_dir();
        let members = member_paths(dir.path(), 5);
        let mut args = vec!["create", "--level", "raid5"];
        args.extend(sizes);
        args.extend(members.iter().map(String::as_str));
        let err = assert_refused(&platter(&args), message);
        assert!(err.contains(message), "{sizes:?}: {err}");
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            0,
            "{sizes:?}: files left"
        );
    }
}

/// A size: small and sensible, a power of two, anything, or near the top
/// of u64 or i64; mostly whole sectors, as an interleave must be to get
/// past the first check.
fn size() -> impl Strategy<Value = u64> {
    let raw = prop_oneof![
        (1u64..=64).prop_map(|m| m << 20),
        (1u64..=4096).prop_map(|s| s * 512),
        (0u32..64).prop_map(|s| 1u64 << s),
        any::<u64>(),
        (0u64..1 << 20).prop_map(|d| u64::MAX - d),
        (0u64..1 << 20).prop_map(|d| i64::MAX as u64 - d),
    ];
    (raw, prop::bool::weighted(0.75)).prop_map(|(v, whole_sectors)| {
        if whole_sectors && v >= 512 {
            v / 512 * 512
        } else {
            v
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn create_succeeds_or_refuses_cleanly(
        level in prop::sample::select(vec!["concat", "stripe", "mirror", "raid10", "raid5", "raid6"]),
        members in 1usize..=70,
        interleave in size(),
        member_size in size(),
        bitmap_region in prop_oneof![Just(0u64), size()],
    ) {
        let dir = temp_dir();
        let paths = member_paths(dir.path(), members);
        let (interleave, member_size, bitmap_region) =
            (interleave.to_string(), member_size.to_string(), bitmap_region.to_string());
        let mut args = vec![
            "create", "--level", level, "--interleave", &interleave,
            "--member-size", &member_size, "--bitmap-region", &bitmap_region,
        ];
        args.extend(paths.iter().map(String::as_str));
        let out = platter(&args);
        let what = format!("{args:?}");
        if out.status.success() {
            assert_ok(&out, &what);
            // Any order will do: the labels say which member is which.
            let v = status_json(&shuffle(&paths, &mut (members as u64 + 1)), &what);
            prop_assert_eq!(&v["state"], "clean", "{}", what);
            prop_assert_eq!(&v["member_count"], members, "{}", what);
        } else {
            assert_refused(&out, &what);
            let left: Vec<_> = fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.path()).collect();
            prop_assert!(left.is_empty(), "{}: left {:?}", what, left);
        }
    }
}
