//! Shell completions and the manual page, made from the same clap
//! definitions as `--help` (issue 17): bash, given the script, completes
//! `platter se` to `serve` and `platter serve --tls-` to the TLS options;
//! `man -l` renders the page and it names every subcommand.
//!
//! Needs bash and man; skips with the reason elsewhere, fails under
//! `CI=true`.

use platter_testkit::tools::required_tools;
use std::process::Command;

fn platter(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_platter"))
        .args(args)
        .output()
        .expect("platter runs");
    assert!(out.status.success(), "platter {args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// What bash's completion function offers for the words `line`.
fn complete(bash: &std::path::Path, script: &std::path::Path, line: &[&str]) -> Vec<String> {
    let words = line
        .iter()
        .map(|w| format!("'{w}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let program = format!(
        "source '{}'; COMP_WORDS=({words}); COMP_CWORD={}; COMP_LINE='{}'; COMP_POINT=${{#COMP_LINE}}; \
         _platter platter '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        line.len() - 1,
        line.join(" "),
        line[line.len() - 1],
        line[line.len().saturating_sub(2)],
    );
    let out = Command::new(bash)
        .args(["--norc", "-c", &program])
        .output()
        .expect("bash runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completes_subcommands_and_options() {
    let test = "bash_completes_subcommands_and_options";
    let Some(t) = required_tools(test, &["bash"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("platter.bash");
    std::fs::write(&script, platter(&["completions", "bash"])).unwrap();
    let bash = t.path("bash");
    let offered = complete(bash, &script, &["platter", "se"]);
    assert!(offered.iter().any(|w| w == "serve"), "{offered:?}");
    let offered = complete(bash, &script, &["platter", "serve", "--tls-"]);
    for want in ["--tls-certificates", "--tls-psk"] {
        assert!(offered.iter().any(|w| w == want), "{want}: {offered:?}");
    }
}

#[test]
fn the_manual_page_renders_and_names_every_subcommand() {
    let test = "the_manual_page_renders_and_names_every_subcommand";
    let Some(t) = required_tools(test, &["man"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("platter.1");
    std::fs::write(&page, platter(&["man"])).unwrap();
    let out = t
        .cmd("man")
        .arg("-l")
        .arg(&page)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .expect("man runs");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for sub in [
        "create",
        "status",
        "serve",
        "re-add",
        "read-policy",
        "completions",
    ] {
        assert!(text.contains(sub), "{sub} missing from:\n{text}");
    }
}
