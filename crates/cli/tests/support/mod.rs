//! Running the `platter` binary and judging what it says.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use tempfile::TempDir;

/// A temporary directory under the target directory (not /tmp, often tmpfs).
pub fn temp_dir() -> TempDir {
    platter_testkit::temp_dir!("platter-cli-")
}

/// Runs the binary with `args`; a backtrace would show in stderr if it
/// panicked, which `assert_refused` rejects.
pub fn platter(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_platter"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .env_remove("RUST_LOG")
        .output()
        .expect("run the platter binary")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts success and no complaint; returns stdout.
pub fn assert_ok(out: &Output, what: &str) -> String {
    let err = stderr(out);
    assert!(
        out.status.success(),
        "{what}: exit {:?}, stderr:\n{err}",
        out.status.code()
    );
    assert!(err.is_empty(), "{what}: stderr on success:\n{err}");
    String::from_utf8(out.stdout.clone()).expect("UTF-8 output")
}

/// Asserts a clean refusal: a non-zero exit (not a signal), nothing on
/// stdout, no panic, and exactly one line of error on stderr, except that
/// clap's argument errors may add its usage hint. Returns the error line.
pub fn assert_refused(out: &Output, what: &str) -> String {
    let err = stderr(out);
    let code = out.status.code();
    assert!(
        code.is_some() && code != Some(0),
        "{what}: want a non-zero exit, got {:?}; stderr:\n{err}",
        out.status
    );
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{what}: panicked:\n{err}"
    );
    assert!(
        out.stdout.is_empty(),
        "{what}: stdout on refusal:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let mut lines = err.lines();
    let first = lines.next().unwrap_or_default().to_string();
    let rest: Vec<&str> = lines.collect();
    if first.starts_with("platter: error: ") {
        assert!(rest.is_empty(), "{what}: more than one line:\n{err}");
    } else if first.starts_with("error: ") {
        // clap: the error (a missing argument's name on the next lines),
        // then a usage hint and "For more information".
        let lists_arguments = first.ends_with(':');
        for l in &rest {
            let l = l.trim();
            assert!(
                l.is_empty()
                    || l.starts_with("Usage:")
                    || l.starts_with("For more information")
                    || l.starts_with("tip:")
                    || (lists_arguments && (l.starts_with('<') || l.starts_with("--"))),
                "{what}: unexpected line {l:?} in:\n{err}"
            );
        }
        assert_eq!(code, Some(2), "{what}: clap's usage exit code");
    } else {
        panic!("{what}: stderr does not start with an error line:\n{err}");
    }
    assert!(
        first.len() > "platter: error: ".len() + 10,
        "{what}: {first}"
    );
    first
}

/// `platter status --json` of `members`, parsed.
pub fn status_json(members: &[String], what: &str) -> Value {
    let mut args = vec!["status", "--json"];
    args.extend(members.iter().map(String::as_str));
    let text = assert_ok(&platter(&args), what);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {e} in\n{text}"))
}

/// `dir/m0`, `dir/m1`, ...
pub fn member_paths(dir: &Path, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| dir.join(format!("m{i}")).to_str().unwrap().to_string())
        .collect()
}

/// A different order of `items` (never the given one when there are two or
/// more), chosen by `seed`.
pub fn shuffle(items: &[String], seed: &mut u64) -> Vec<String> {
    let mut v = items.to_vec();
    loop {
        for i in (1..v.len()).rev() {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let j = ((*seed >> 33) % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
        if v.len() < 2 || v != items {
            return v;
        }
    }
}
