//! Checks more than one suite makes.

use std::path::{Path, PathBuf};

/// Asserts equality without printing megabytes: names the first difference.
pub fn assert_same(actual: &[u8], expected: &[u8], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    if let Some(at) = actual.iter().zip(expected).position(|(a, e)| a != e) {
        panic!(
            "{what}: first difference at byte {at}: read {:#04x}, expected {:#04x}",
            actual[at], expected[at]
        );
    }
}

/// Every `.rs` file below `dir`.
pub fn rust_sources(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("src is readable") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out
}

/// The sans-I/O check: no line of code (comments may name what the code
/// must not use) in the `.rs` files below `dir` contains a `forbidden`
/// word, and there are at least `min_files` of them.
pub fn assert_sources_avoid(dir: &Path, forbidden: &[&str], min_files: usize) {
    let files = rust_sources(dir);
    assert!(
        files.len() >= min_files,
        "found only {} sources",
        files.len()
    );
    for f in files {
        let text = std::fs::read_to_string(&f).expect("source is readable");
        let code: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect();
        for word in forbidden {
            assert!(
                !code.iter().any(|l| l.contains(word)),
                "{} uses {word}",
                f.display()
            );
        }
    }
}
