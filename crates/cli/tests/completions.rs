//! Shell completions and the manual pages, made from the same clap
//! definitions as `--help` (issues 17 and 41): bash, given the script,
//! completes `platter se` to `serve`, `platter serve --tls-` to the TLS
//! options and `--level` to the levels; `man -l` renders the main page,
//! which names every subcommand, and man(1) finds each command's own page.
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

/// Regression: `--level` and the like named no values clap could offer
/// (they were parsed from free text), so bash completed them with file
/// names. Now the values come from the same parsers that take them.
#[test]
fn bash_completes_the_values_of_levels_layouts_and_policies() {
    let test = "bash_completes_the_values_of_levels_layouts_and_policies";
    let Some(t) = required_tools(test, &["bash"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("platter.bash");
    std::fs::write(&script, platter(&["completions", "bash"])).unwrap();
    let bash = t.path("bash");
    let offered = |line: &[&str]| {
        let mut words = complete(bash, &script, line);
        words.sort();
        words
    };
    let levels = ["concat", "mirror", "raid10", "raid5", "raid6", "stripe"];
    assert_eq!(offered(&["platter", "create", "--level", ""]), levels);
    assert_eq!(offered(&["platter", "reshape", "--level", ""]), levels);
    assert_eq!(
        offered(&["platter", "create", "--level", "rai"]),
        ["raid10", "raid5", "raid6"]
    );
    let layouts = offered(&["platter", "create", "--layout", ""]);
    for want in [
        "left-symmetric",
        "right-asymmetric",
        "left-symmetric-6",
        "near",
    ] {
        assert!(layouts.iter().any(|w| w == want), "{want}: {layouts:?}");
    }
    assert!(offered(&["platter", "reshape", "--layout", "right-a"])
        .iter()
        .all(|w| w.starts_with("right-asymmetric")));
    let policies = offered(&["platter", "create", "--read-policy", ""]);
    for want in ["auto", "load", "proximity", "round-robin", "split"] {
        assert!(policies.iter().any(|w| w == want), "{want}: {policies:?}");
    }
    assert_eq!(
        offered(&["platter", "create", "--consistency-policy", ""]),
        ["ppl", "resync"]
    );
    assert_eq!(
        offered(&["platter", "create", "--checksums", ""]),
        ["crc32c", "none", "xxh3"]
    );
    // zsh's and fish's scripts carry the same values (clap_complete's
    // elvish and powershell scripts complete option names only).
    for shell in ["zsh", "fish"] {
        let script = platter(&["completions", shell]);
        for value in ["raid10", "left-symmetric-6", "proximity", "xxh3", "ppl"] {
            assert!(script.contains(value), "{shell}: no {value}");
        }
    }
}

/// The pages `platter man --out-dir DIR` writes: every page named in
/// another (its commands, SEE ALSO), as roff source.
fn pages_named(roff: &str) -> Vec<String> {
    let text = roff
        .replace("\\fB", "")
        .replace("\\fR", "")
        .replace("\\-", "-");
    let mut names = Vec::new();
    for (at, _) in text.match_indices("(1)") {
        let start = text[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .map_or(0, |i| i + 1);
        names.push(text[start..at].to_string());
    }
    names
}

/// One page per command, made from the same definitions as --help and
/// found by man(1) where setup installs them (here MANPATH names them):
/// `man platter-serve` shows serve's options, EXIT STATUS and SEE ALSO,
/// and `platter man serve` prints the same page. Every page another
/// names exists.
///
/// Regression: there was one page, whose list of commands named
/// platter-create(1) and the others, which did not exist (`man
/// platter-serve`: "No manual entry for platter-serve").
#[test]
fn every_command_has_a_manual_page_that_man_finds() {
    let test = "every_command_has_a_manual_page_that_man_finds";
    let Some(t) = required_tools(test, &["man"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let man1 = dir.path().join("man1");
    platter(&["man", "--out-dir", man1.to_str().unwrap()]);
    for (words, page, wants) in [
        (
            &["serve"][..],
            "platter-serve",
            &["--socket", "--on-event"][..],
        ),
        (
            &["sim", "validate"][..],
            "platter-sim-validate",
            &["--trace"][..],
        ),
        (&[][..], "platter", &["platter-serve(1)"][..]),
    ] {
        let out = t
            .cmd("man")
            .arg(page)
            .env("MANPATH", dir.path())
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "200")
            .output()
            .expect("man runs");
        assert!(out.status.success(), "man {page}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        for want in ["EXIT STATUS", "SEE ALSO", "platter(1)"]
            .iter()
            .chain(wants)
        {
            assert!(text.contains(want), "man {page}: no {want:?} in\n{text}");
        }
        let mut args = vec!["man"];
        args.extend(words);
        let file = std::fs::read_to_string(man1.join(format!("{page}.1"))).unwrap();
        assert!(
            platter(&args) == file,
            "platter man {words:?} is not {page}.1"
        );
    }
    // Every page named exists, and every page is named by another (the
    // list of commands of platter(1) or platter-sim(1)).
    let mut named = std::collections::BTreeSet::new();
    let mut files = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(&man1).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
        for name in pages_named(&std::fs::read_to_string(&path).unwrap()) {
            assert!(
                man1.join(format!("{name}.1")).exists(),
                "{stem}(1) names {name}(1), which is not a page"
            );
            if name != stem {
                named.insert(name);
            }
        }
        files.insert(stem);
    }
    assert!(named.contains("platter"), "no page names platter(1)");
    assert_eq!(files, named, "pages no other page names");
    assert!(files.len() > 20, "{files:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_platter"))
        .args(["man", "nosuch"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("platter: error: no manual page for 'nosuch'") && err.lines().count() == 1,
        "{err}"
    );
}
