//! The modules of platter-core stand in layers, and a module takes from
//! the layers below it only. Before this check, 18 files imported each
//! other in a ring: `balance`, `stats` and `integrity` took the member I/O
//! vocabulary from `volume`, which imported them back, and `label` and
//! `integrity` (and `ppl`, `intent`) took each other's constants; a reader
//! could not tell where anything began. This test reads every source file
//! and fails on a `crate::` path (in code, not comments) that names a
//! module at or above the file's own.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Bottom first. A module may name only modules before it.
const LAYERS: &[&str] = &[
    "units",
    "level",
    "buf",
    "format",
    "member_io",
    "geometry",
    "fsalign",
    "balance",
    "stats",
    "intent",
    "ppl",
    "integrity",
    "label",
    "pool",
    "volume",
    "assemble",
    "reshape",
    "drive",
];

fn rank(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|m| *m == module)
        .unwrap_or_else(|| panic!("module `{module}` is not in LAYERS: give it its place"))
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// What `lib.rs` re-exports at the root (`crate::Level`), by the module
/// that defines it.
fn root_items(lib: &str) -> BTreeMap<String, String> {
    let mut items = BTreeMap::new();
    for line in lib.lines().filter(|l| l.starts_with("pub use ")) {
        let rest = line.trim_start_matches("pub use ").trim_end_matches(';');
        let (module, names) = rest.split_once("::").expect("pub use MODULE::...");
        for name in names.trim_matches(|c| c == '{' || c == '}').split(',') {
            items.insert(name.trim().to_string(), module.to_string());
        }
    }
    items
}

/// The modules a line of code names through `crate::`, including those in
/// a grouped `use crate::{a::X, b}`.
fn named(code: &str, root: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let group = rest.starts_with('{');
        let body = if group {
            &rest[1..rest.find('}').unwrap_or(rest.len())]
        } else {
            rest
        };
        for path in body.split(',') {
            let first: String = path
                .trim()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if let Some(module) = root.get(&first) {
                out.push(module.clone());
            } else if !first.is_empty() {
                out.push(first);
            }
            if !group {
                break;
            }
        }
    }
    out
}

/// Every upward or sideways import, as `file:line: module -> named`.
fn violations(src: &Path) -> Vec<String> {
    let root = root_items(&fs::read_to_string(src.join("lib.rs")).unwrap());
    let mut files = Vec::new();
    sources(src, &mut files);
    files.sort();
    let mut bad = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        let module = rel.iter().next().unwrap().to_string_lossy();
        let module = module.trim_end_matches(".rs");
        if module == "lib" {
            continue;
        }
        let own = rank(module);
        let text = fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for other in named(code, &root) {
                if other != module && rank(&other) >= own {
                    bad.push(format!("{}:{}: {module} -> {other}", rel.display(), n + 1));
                }
            }
        }
    }
    bad
}

#[test]
fn core_modules_import_only_the_layers_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let bad = violations(&src);
    assert!(
        bad.is_empty(),
        "imports that run up the layers (tests/layers.rs, LAYERS):\n{}",
        bad.join("\n")
    );
}

/// The check sees what it must: a file that names a module above it, in
/// a plain path, a grouped `use`, or through a root re-export; and not
/// what is in a comment.
#[test]
fn the_check_sees_an_upward_import() {
    let dir = std::env::temp_dir().join(format!("platter-layers-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let src = dir.as_path();
    fs::write(
        src.join("lib.rs"),
        "pub use level::{Level, ParityLayout};\n",
    )
    .unwrap();
    fs::create_dir(src.join("balance")).unwrap();
    fs::write(
        src.join("balance/mod.rs"),
        "use crate::member_io::MemberOp;\n// crate::volume in a comment\n\
         use crate::{units::X, volume::Request};\nfn f() -> crate::Level {}\n",
    )
    .unwrap();
    fs::write(src.join("level.rs"), "use crate::reshape::Plan;\n").unwrap();
    assert_eq!(
        violations(src),
        vec![
            "balance/mod.rs:3: balance -> volume".to_string(),
            "level.rs:1: level -> reshape".to_string(),
        ]
    );
    fs::remove_dir_all(&dir).unwrap();
}

/// Functions that break an engine's state on purpose (`*_for_tests`, and
/// the simulator's `break_invariant_at_step`) shipped in the release API
/// until they moved behind the `test-hooks` feature, which only the test
/// kit turns on. Every such function in any crate's `src` must sit right
/// under that `cfg`, or the binary carries a way to corrupt a volume.
fn unguarded_hooks(crates: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for entry in fs::read_dir(crates).unwrap() {
        let src = entry.unwrap().path().join("src");
        if src.is_dir() {
            sources(&src, &mut files);
        }
    }
    files.sort();
    let mut bad = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            let is_hook = code.contains(" fn ")
                && (code.contains("_for_tests(") || code.contains("fn break_invariant_at_step("));
            let guarded = lines[..n]
                .iter()
                .rev()
                .take_while(|l| l.trim_start().starts_with("#["))
                .any(|l| l.contains("feature = \"test-hooks\""));
            if is_hook && !guarded {
                bad.push(format!("{}:{}", file.display(), n + 1));
            }
        }
    }
    bad
}

#[test]
fn test_hooks_stay_out_of_the_release_api() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let bad = unguarded_hooks(&crates);
    assert!(
        bad.is_empty(),
        "test hooks without #[cfg(feature = \"test-hooks\")]:\n{}",
        bad.join("\n")
    );
}

/// The hook check sees a hook with no feature gate and passes a gated one.
#[test]
fn the_hook_check_sees_an_unguarded_hook() {
    let dir = std::env::temp_dir().join(format!("platter-hooks-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("a/src")).unwrap();
    fs::write(
        dir.join("a/src/lib.rs"),
        "#[cfg(feature = \"test-hooks\")]\npub fn break_x_for_tests() {}\n\
         #[doc(hidden)]\npub fn break_y_for_tests() {}\n",
    )
    .unwrap();
    let bad = unguarded_hooks(&dir);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].ends_with("lib.rs:4"), "{bad:?}");
    fs::remove_dir_all(&dir).unwrap();
}
