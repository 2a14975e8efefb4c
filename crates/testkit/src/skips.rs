//! A test that cannot run here (a tool, a privilege or a kernel feature is
//! missing) says why: on stderr, which cargo shows only for a failing
//! test, and in the file `PLATTER_SKIP_LOG` names, which `scripts/test`
//! lists at its end, so that a skipped suite is seen, not mistaken for a
//! passing one.

use std::io::Write;

/// Records that `test` is skipped, and why. Under `CI=true` it fails the
/// test instead: CI installs every tool and runs as root on a kernel with
/// every feature the tests use, so a skip there is a broken suite.
pub fn skipped(test: impl std::fmt::Display, why: impl std::fmt::Display) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test} would be skipped under CI=true ({why}): CI must provide what it needs"
    );
    eprintln!("skipping {test}: {why}");
    let Some(path) = std::env::var_os("PLATTER_SKIP_LOG") else {
        return;
    };
    // One short line per write, appended: lines from tests running at once
    // do not interleave.
    let line = format!("{test}: {why}\n");
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        eprintln!("cannot note the skip in {}: {e}", path.to_string_lossy());
    }
}
