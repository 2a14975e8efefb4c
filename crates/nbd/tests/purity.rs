//! The codec is sans-I/O (DESIGN.md: "NBD wire codec (no I/O, fuzzable)"): no
//! sockets, files, threads, clock or process in its sources, so that fuzzing
//! and property tests see everything it does.

use std::path::Path;

use platter_testkit::check::assert_sources_avoid;

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

#[test]
fn codec_sources_touch_no_socket_file_thread_or_clock() {
    assert_sources_avoid(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &FORBIDDEN,
        5,
    );
}
