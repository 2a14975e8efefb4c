//! The codec is sans-I/O (DESIGN.md: "NBD wire codec (no I/O, fuzzable)"): no
//! sockets, files, threads, clock or process in its sources, so that fuzzing
//! and property tests see everything it does.

use std::path::Path;

const FORBIDDEN: [&str; 12] = [
    "std::fs",
    "std::thread",
    "std::net",
    "std::process",
    "std::time",
    "std::io",
    "std::os",
    "std::env",
    "SystemTime",
    "Instant",
    "tokio",
    "unsafe",
];

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("nbd src is readable") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn codec_sources_touch_no_socket_file_thread_or_clock() {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() >= 5, "found only {} sources", files.len());
    for f in files {
        let text = std::fs::read_to_string(&f).expect("source is readable");
        // Comments may name what the code must not use.
        let code: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect();
        for word in FORBIDDEN {
            assert!(
                !code.iter().any(|l| l.contains(word)),
                "{} uses {word}",
                f.display()
            );
        }
    }
}
