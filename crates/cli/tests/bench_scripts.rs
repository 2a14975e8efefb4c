//! The benchmarks' command lines (bench/lib.sh's `bench_options`): for
//! every script in bench/ that parses its options with lib.sh (the others
//! are named below, with why), `--help` exits 0 printing its header
//! comment, an unknown option exits 2 naming it, `--runs 0` is refused and
//! so is `--runs` without its value. Only the parsing runs: the scripts get
//! a PATH with nothing but what it needs, so one that went past its checks
//! would stop at its first tool (fio, cargo, nbdkit), never building or
//! benchmarking.
//!
//! Needs bash, awk, sed and dirname; skips with the reason elsewhere,
//! fails under `CI=true`.

use platter_testkit::tools::{required_tools, Tools};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Scripts of bench/ whose command line is not lib.sh's, and why.
const OWN_COMMAND_LINE: &[(&str, &str)] = &[
    ("lib.sh", "the shared part itself"),
    ("parity.sh", "one optional number of rounds; runs at once"),
    (
        "sim.sh",
        "optional numbers of requests and rounds; runs at once",
    ),
    (
        "cost.sh",
        "one fio job per level: no runs, no shared options",
    ),
    ("mutants.sh", "cargo-mutants' budget and filters: no runs"),
];

fn bench_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench")
}

/// The scripts that parse their command line with lib.sh, by name.
fn scripts() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(bench_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".sh"))
        .filter(|n| OWN_COMMAND_LINE.iter().all(|(own, _)| own != n))
        .collect();
    names.sort();
    names
}

/// The header comment from line 2 to the first line that is not one,
/// without its `# `: what `--help` prints.
fn header(script: &str) -> String {
    let text = std::fs::read_to_string(bench_dir().join(script)).unwrap();
    let mut out = String::new();
    for line in text.lines().skip(1).take_while(|l| l.starts_with('#')) {
        let line = line.strip_prefix('#').unwrap();
        out.push_str(line.strip_prefix(' ').unwrap_or(line));
        out.push('\n');
    }
    out
}

/// A PATH holding only the tools the parsing uses.
fn narrow_path(t: &Tools, dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    for tool in ["awk", "sed", "dirname"] {
        std::os::unix::fs::symlink(t.path(tool), bin.join(tool)).unwrap();
    }
    bin
}

fn run(t: &Tools, path: &Path, script: &str, args: &[&str]) -> Output {
    Command::new(t.path("bash"))
        .arg(bench_dir().join(script))
        .args(args)
        .env_clear()
        .env("PATH", path)
        .output()
        .expect("bash runs")
}

#[test]
fn every_bench_script_refuses_bad_options_before_it_runs() {
    let test = "every_bench_script_refuses_bad_options_before_it_runs";
    let Some(t) = required_tools(test, &["bash", "awk", "sed", "dirname"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = narrow_path(&t, dir.path());
    let scripts = scripts();
    assert!(scripts.len() >= 9, "the benchmarks on lib.sh: {scripts:?}");
    for script in &scripts {
        let help = run(&t, &path, script, &["--help"]);
        assert_eq!(help.status.code(), Some(0), "{script} --help: {help:?}");
        let usage = String::from_utf8(help.stdout).unwrap();
        assert_eq!(usage, header(script), "{script} --help");
        assert!(
            usage.contains(&format!("bench/{script} [")),
            "{script}: {usage}"
        );

        // A usage error is followed by the usage; a bad value is not.
        let refusals: [(&[&str], i32, &str); 3] = [
            (
                &["--no-such-option"],
                2,
                "unknown argument: --no-such-option",
            ),
            (&["--runs", "0"], 1, "--runs wants a positive integer"),
            (&["--runs"], 2, "--runs wants a value"),
        ];
        for (args, code, message) in refusals {
            let out = run(&t, &path, script, args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(code), "{script} {args:?}: {out:?}");
            let usage = if code == 2 {
                header(script)
            } else {
                String::new()
            };
            assert_eq!(
                err,
                format!("{script}: {message}\n{usage}"),
                "{script} {args:?}"
            );
        }
    }
}
