//! The core is sans-I/O (DESIGN.md): no async runtime in its dependency tree,
//! and no file system, threads, sockets, clock or process in its sources. The
//! simulator's determinism and the seeded fault tests depend on it.

use std::path::Path;
use std::process::Command;

use platter_testkit::check::assert_sources_avoid;

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

#[test]
fn core_sources_touch_no_file_thread_socket_or_clock() {
    assert_sources_avoid(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &FORBIDDEN,
        10,
    );
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
