//! The core is sans-I/O (DESIGN.md): no async runtime in its dependency tree,
//! and no file system, threads, sockets, clock or process in its sources. The
//! simulator's determinism and the seeded fault tests depend on it.

use std::path::Path;
use std::process::Command;

const FORBIDDEN: [&str; 10] = [
    "std::fs",
    "std::thread",
    "std::net",
    "std::process",
    "std::time",
    "SystemTime",
    "Instant::now",
    "tokio",
    "std::io::stdin",
    "std::env",
];

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("core src is readable") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn core_sources_touch_no_file_thread_socket_or_clock() {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() >= 10, "found only {} sources", files.len());
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

#[test]
fn core_depends_on_no_async_runtime() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-p",
            "platter-core",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        tree.contains("platter-core"),
        "unexpected cargo tree output: {tree}"
    );
    for crate_name in ["tokio", "async-std", "mio", "libc", "nix"] {
        assert!(
            !tree
                .lines()
                .any(|l| l.starts_with(&format!("{crate_name} "))),
            "platter-core depends on {crate_name}:\n{tree}"
        );
    }
}
