//! Manual pages, one per command (`platter man serve` prints
//! platter-serve(1)), made from the same clap definitions as `--help`,
//! with the EXIT STATUS and SEE ALSO sections clap has no field for.

use crate::error::{CliError, Result};
use crate::out::{outln, write_bytes};
use clap::{Args, Command};
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct ManArgs {
    /// The command whose page to print (`serve`, `sim validate`); none:
    /// platter(1).
    #[arg(value_name = "COMMAND")]
    command: Vec<String>,
    /// Write every page (platter.1, platter-serve.1, platter-sim-validate.1,
    /// ...) into DIR instead of printing one: scripts/setup installs them
    /// so, in PREFIX/share/man/man1.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    out_dir: Option<PathBuf>,
}

/// Prints a page, or writes them all; `cli` is platter's command.
pub fn run(args: ManArgs, cli: Command) -> Result<()> {
    let mut root = without_help_commands(cli);
    root.build();
    if let Some(dir) = &args.out_dir {
        return write_all(&root, dir);
    }
    let mut cmd = &root;
    for word in &args.command {
        cmd = visible(cmd)
            .find(|c| c.get_name() == word || c.get_all_aliases().any(|a| a == word))
            .ok_or_else(|| no_such_command(cmd, word))?;
    }
    write_bytes(&page(cmd)?);
    Ok(())
}

/// clap's implicit `help` subcommands would be listed as pages that do
/// not exist.
fn without_help_commands(cmd: Command) -> Command {
    cmd.disable_help_subcommand(true)
        .mut_subcommands(without_help_commands)
}

fn visible(cmd: &Command) -> impl Iterator<Item = &Command> {
    cmd.get_subcommands().filter(|c| !c.is_hide_set())
}

fn no_such_command(cmd: &Command, word: &str) -> CliError {
    let names: Vec<&str> = visible(cmd).map(Command::get_name).collect();
    CliError(format!(
        "no manual page for '{word}': {} has {}",
        page_name(cmd),
        if names.is_empty() {
            "no commands".to_string()
        } else {
            format!("the commands {}", names.join(", "))
        }
    ))
}

/// `platter`, `platter-serve`, `platter-sim-validate`: clap's display
/// name once the command is built.
fn page_name(cmd: &Command) -> &str {
    cmd.get_display_name().unwrap_or(cmd.get_name())
}

/// The command and every visible command under it.
fn every_command(cmd: &Command) -> Vec<&Command> {
    let mut all = vec![cmd];
    for sub in visible(cmd) {
        all.extend(every_command(sub));
    }
    all
}

fn write_all(root: &Command, dir: &Path) -> Result<()> {
    let fail = |e: std::io::Error| CliError(format!("{}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(fail)?;
    let commands = every_command(root);
    for cmd in &commands {
        let path = dir.join(format!("{}.1", page_name(cmd)));
        std::fs::write(&path, page(cmd)?)
            .map_err(|e| CliError(format!("{}: {e}", path.display())))?;
    }
    outln!(
        "{} manual pages written to {}",
        commands.len(),
        dir.display()
    );
    Ok(())
}

/// The page of a built command, in roff.
fn page(cmd: &Command) -> Result<Vec<u8>> {
    // Subcommands carry no version of their own; their pages show platter's.
    let version = env!("CARGO_PKG_VERSION");
    let man = clap_mangen::Man::new(cmd.clone().version(version))
        .source(format!("platter {version}"))
        .manual("platter");
    let mut w = Vec::new();
    let failed = |e: std::io::Error| CliError(format!("cannot make the manual page: {e}"));
    man.render_title(&mut w).map_err(failed)?;
    man.render_name_section(&mut w).map_err(failed)?;
    man.render_synopsis_section(&mut w).map_err(failed)?;
    man.render_description_section(&mut w).map_err(failed)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut w).map_err(failed)?;
    }
    if visible(cmd).next().is_some() {
        man.render_subcommands_section(&mut w).map_err(failed)?;
    }
    if cmd.get_after_help().is_some() || cmd.get_after_long_help().is_some() {
        man.render_extra_section(&mut w).map_err(failed)?;
    }
    w.extend(exit_status_section(cmd).into_bytes());
    w.extend(see_also_section(cmd).into_bytes());
    man.render_version_section(&mut w).map_err(failed)?;
    Ok(w)
}

/// The words after `platter`: "" for platter itself, "serve", "sim validate".
fn path_of(cmd: &Command) -> String {
    let bin = cmd.get_bin_name().unwrap_or(cmd.get_name());
    bin.strip_prefix("platter")
        .unwrap_or(bin)
        .trim()
        .to_string()
}

/// Text for roff: backslashes and leading dots or quotes made literal.
fn roff(text: &str) -> String {
    let t = text.replace('\\', "\\e").replace('-', "\\-");
    if t.starts_with('.') || t.starts_with('\'') {
        format!("\\&{t}")
    } else {
        t
    }
}

fn exit_status_section(cmd: &Command) -> String {
    let mut s = String::from(".SH \"EXIT STATUS\"\n");
    for (code, meaning) in exit_codes(&path_of(cmd)) {
        s.push_str(&format!(".TP\n\\fB{code}\\fR\n{}\n", roff(meaning)));
    }
    s
}

/// The statuses most commands share.
const COMMON: &[(&str, &str)] = &[
    ("0", "the command succeeded"),
    (
        "1",
        "an error, said in one line on standard error (platter: error: ...)",
    ),
    (
        "2",
        "the command line is wrong (an unknown option, a value an option refuses)",
    ),
];

/// Commands whose statuses are their own (check and repair keep 1 for
/// "mismatches found", so their failures are 2).
const OWN: &[(&str, &[(&str, &str)])] = &[
    (
        "check",
        &[
            ("0", "every stripe was checked, and all agree"),
            ("1", "mismatches found (platter repair mends them)"),
            (
                "2",
                "some stripes could not be checked (a member lost), the check failed, or the \
               command line is wrong",
            ),
        ],
    ),
    (
        "repair",
        &[
            (
                "0",
                "every stripe was checked, and any mismatch found was repaired",
            ),
            (
                "2",
                "some stripes could not be checked or repaired (a member lost), the repair \
               failed, or the command line is wrong",
            ),
        ],
    ),
    (
        "scan",
        &[
            ("0", "volumes were found, each with every member"),
            (
                "1",
                "an error, said in one line on standard error: a PATH that does not exist, say",
            ),
            ("2", "the command line is wrong"),
            ("3", "no volume was found"),
            (
                "4",
                "a volume lacks members or cannot be served, or a damaged label was found",
            ),
        ],
    ),
    (
        "serve",
        &[
            (
                "0",
                "stopped (SIGINT, SIGTERM, or its one client left) with every member flushed \
               and the volume marked clean",
            ),
            (
                "1",
                "an error, said in one line on standard error: refused at start (members, \
               sockets, options), or the final flush or label write failed",
            ),
            ("2", "the command line is wrong"),
        ],
    ),
];

/// platter(1)'s statuses beyond [`COMMON`].
const ROOT_MORE: &[(&str, &str)] = &[
    (
        "3, 4",
        "platter scan's (no volume found; a volume incomplete); check, repair and scan \
              give 1 and 2 meanings of their own (their pages)",
    ),
    (
        "141",
        "standard output was closed before everything was printed (platter status | \
             head -1): a command that only prints, or a control command, ended there \
             quietly; create, reshape, serve, sweep and sim finish their work instead and \
             exit with their own status",
    ),
];

const CLOSED: (&str, &str) = (
    "141",
    "standard output was closed before everything was printed (platter status | head -1): \
     the command ended there, quietly",
);

/// What each exit status of `platter PATH` means.
fn exit_codes(path: &str) -> Vec<(&'static str, &'static str)> {
    let top = path.split(' ').next().unwrap_or("");
    if top.is_empty() {
        return COMMON.iter().chain(ROOT_MORE).copied().collect();
    }
    let own = OWN.iter().find(|(name, _)| *name == top);
    let mut codes = own.map_or(COMMON, |(_, codes)| codes).to_vec();
    if !finishes_when_stdout_closes(top) {
        codes.push(CLOSED);
    }
    codes
}

/// Commands that finish their work when their output has nowhere to go
/// (main.rs, `on_closed`): they exit with their own status, never 141.
fn finishes_when_stdout_closes(top: &str) -> bool {
    matches!(top, "create" | "reshape" | "serve" | "sweep" | "sim")
}

fn see_also_section(cmd: &Command) -> String {
    let path = path_of(cmd);
    let top = path.split(' ').next().unwrap_or("");
    let mut pages: Vec<String> = if path.is_empty() {
        visible(cmd).map(|c| page_name(c).to_string()).collect()
    } else {
        let mut p = vec!["platter".to_string()];
        if path != top {
            p.push(format!("platter-{top}"));
        }
        p.extend(related(top).iter().map(|r| format!("platter-{r}")));
        p
    };
    pages.dedup();
    let refs: Vec<String> = pages
        .iter()
        .map(|p| format!("\\fB{}\\fR(1)", roff(p)))
        .collect();
    format!(
        ".SH \"SEE ALSO\"\n{}\n.PP\n{}\n",
        refs.join(", "),
        roff(
            "In the source tree: README.md; docs/README.md, the index of the documentation; \
             docs/troubleshooting.md, the errors platter prints and what to do about them."
        )
    )
}

/// The commands a reader of `top`'s page is likely to want next.
fn related(top: &str) -> &'static [&'static str] {
    match top {
        "create" => &["status", "serve", "reshape", "scan"],
        "status" => &["serve", "stats", "scan"],
        "serve" => &[
            "status", "scan", "stats", "fail", "replace", "check", "record",
        ],
        "scan" => &["serve", "status"],
        "fail" => &["remove", "replace", "status"],
        "remove" => &["fail", "replace", "add-spare"],
        "reshape" => &["status", "serve"],
        "replace" => &["fail", "remove", "add-spare", "status"],
        "add-spare" => &["replace", "status"],
        "re-add" => &["replace", "status"],
        "check" => &["repair", "status"],
        "repair" => &["check", "status"],
        "rebuild-rate" => &["status", "replace"],
        "record" => &["serve", "sim", "advise"],
        "stats" => &["status", "serve"],
        "read-policy" => &["create", "sweep"],
        "sim" => &["sweep", "advise", "record"],
        "sweep" => &["sim", "advise"],
        "advise" => &["record", "sweep", "reshape"],
        "completions" => &["man"],
        "man" => &["completions"],
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(path: &str) -> Vec<String> {
        exit_codes(path)
            .iter()
            .map(|(c, _)| c.to_string())
            .collect()
    }

    /// The pages name the statuses the commands return.
    #[test]
    fn exit_statuses_are_the_commands_own() {
        use crate::control::{SCRUB_CLEAN, SCRUB_INCOMPLETE, SCRUB_MISMATCHES};
        use crate::scan::{EXIT_INCOMPLETE, EXIT_NOTHING, EXIT_WHOLE};
        let check = [SCRUB_CLEAN, SCRUB_MISMATCHES, SCRUB_INCOMPLETE];
        assert!(check
            .iter()
            .all(|c| codes("check").contains(&c.to_string())));
        let scan = [EXIT_WHOLE, EXIT_NOTHING, EXIT_INCOMPLETE];
        assert!(scan.iter().all(|c| codes("scan").contains(&c.to_string())));
        let closed = crate::out::CLOSED_STATUS.to_string();
        assert!(codes("status").contains(&closed) && codes("").contains(&closed));
        assert!(!codes("create").contains(&closed) && !codes("sim validate").contains(&closed));
    }
}
