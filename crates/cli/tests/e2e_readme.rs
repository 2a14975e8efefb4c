//! Every command in the README, run as a new user would (issue 41): in a
//! `git clone` of the working tree (its uncommitted changes applied), with
//! no `../shared` beside it and nothing built in it, set up by the
//! README's own `./scripts/setup`, each command as written.
//!
//! The commands are the README's code-block lines with a `$ ` prompt (and
//! the two `./scripts/...` lines at its top), joined where a line ends
//! with `\`; a `host$ ` prompt names another host. They run in the README's
//! order, by bash, from the clone's root, as root, in private mount and
//! network namespaces: `/run` is a fresh tmpfs and `/usr/local` an overlay
//! whose writes land in a tmpfs of the test's (so `scripts/setup` installs
//! where it always does, and the examples' sockets, `/run/home.sock`, and
//! ports, 127.0.0.1:9100, are the test's own). How they run:
//!
//! - `./scripts/setup` runs as written, given the binary cargo built
//!   (`PLATTER_BIN`) instead of making a release build; the banner it
//!   prints must be the README's, and the banner's first two `try:` lines
//!   are run against it; then it is stopped as Ctrl-C would (the third
//!   line, an `nbdfuse ... &` mount left running, is not: e2e_filesystem
//!   runs nbdfuse). `man platter-serve` must then find the installed page.
//! - Each code block is an example of its own: a block after the one that
//!   makes `d/m0`... (the README's "Using it") starts from that volume as
//!   it was made, whatever an earlier example did to it.
//! - `platter serve` runs in the background, as in a second terminal, until
//!   the next `serve` on its socket or the end of its block, and must then
//!   stop cleanly on SIGTERM. A `--control /run/X.ctl` command in a block
//!   without a server on `/run/X` runs with the README's first
//!   `platter serve --socket /run/X ...` started for the block.
//! - A command that runs until Ctrl-C (`stats --watch`) gets SIGINT after
//!   a few seconds.
//! - Every other command must exit 0, or as [`EXIT`] says.
//! - [`SKIPPED`] lists the commands that cannot run here by their nature,
//!   each with why; commands on other hosts are skipped too.
//!
//! Regression: a new user's run of the README found `platter sim validate
//! --drive ../shared/...` failing in a clone, `platter create ... d/m0`
//! refused for want of `d/`, `platter scan /srv/disks` naming no
//! directory, `read-policy` shown on a raid5, `/dev/sdf` as a spare,
//! `grow --add d/m4` without a size for it, and `scripts/setup` asking
//! Debian 12 for an `nbdfuse` package it does not have (libnbd-bin holds
//! nbdfuse there).
//!
//! Needs root, git, unshare, nsenter, mount, ip and the NBD clients; skips
//! with the reason elsewhere, fails under `CI=true`.

mod e2e_support;

use e2e_support::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// README commands not run, by their text (comment left out), and why.
const SKIPPED: &[(&str, &str)] = &[
    (
        "./scripts/test",
        "the whole test suite, this test among it: it would run itself",
    ),
    (
        "install -D -m 644 contrib/volumes.toml /etc/platter/volumes.toml",
        "changes the host's /etc; e2e_systemd's the_contrib_units_and_volumes_file_serve_a_volume \
         runs contrib/ as systemd would",
    ),
    (
        "cp contrib/systemd/platter@.* /etc/systemd/system/",
        "changes the host's systemd; e2e_systemd runs the units' own lines",
    ),
    (
        "systemctl enable --now platter@home.socket",
        "needs systemd as the host's init, and changes the host",
    ),
    (
        "scripts/disksim-valid DISKSIM/valid",
        "needs a DiskSim 4.0 checkout (DISKSIM), which the repository does not ship",
    ),
    (
        "scripts/disksim-requests DISKSIM/src/disksim DISKSIM/valid cheetah9LP",
        "needs a DiskSim 4.0 checkout (DISKSIM) and its built simulator",
    ),
    (
        "platter sim calibrate /dev/sdb --out sdb.parv",
        "measures a real disk, /dev/sdb (e2e_calibrate calibrates modelled drives)",
    ),
    (
        "platter advise --trace home.iolog --drive sdb.parv --volume d/m0,d/m1,d/m2,d/m3",
        "needs sdb.parv, the model of a real disk the line before makes (e2e_calibrate and \
         e2e_record run advise)",
    ),
];

/// Exit statuses other than 0 that a command may give here, and why.
const EXIT: &[(&str, &[i32], &str)] = &[(
    "platter scan",
    &[0, 3, 4],
    "what /dev's block devices hold depends on the host",
)];

/// Commands that run until Ctrl-C.
const UNTIL_INTERRUPTED: &[&str] = &["platter stats --watch 2 --control /run/home.sock.ctl"];

/// How long a README command may take (a sweep in a debug build: a minute).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(600);

/// A command of the README.
#[derive(Clone, Debug)]
struct Readme {
    /// Its first line's number in README.md.
    line: usize,
    /// The code block it is in (numbered from 0).
    block: usize,
    /// The host of a `host$ ` prompt.
    host: Option<String>,
    /// As written (continuation lines and comment included).
    text: String,
    /// Its words, comment left out: what the tables above name.
    key: String,
}

/// The README's commands, in order.
fn readme_commands(readme: &str) -> Vec<Readme> {
    let lines: Vec<&str> = readme.lines().collect();
    let (mut out, mut block, mut in_code) = (Vec::new(), 0, false);
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let code = line.starts_with("    ");
        if !code && !line.trim().is_empty() && in_code {
            block += 1;
        }
        in_code = code || (in_code && line.trim().is_empty());
        let start = i;
        i += 1;
        let Some((host, mut text)) = code.then(|| command_of(line.trim_start())).flatten() else {
            continue;
        };
        while text.trim_end().ends_with('\\') && i < lines.len() {
            text = format!("{}\n{}", text.trim_end(), lines[i].trim_start());
            i += 1;
        }
        let key = key_of(&text);
        out.push(Readme {
            line: start + 1,
            block,
            host,
            text,
            key,
        });
    }
    out
}

/// `$ CMD`, `host$ CMD` or `./scripts/...`: the host and the command.
fn command_of(line: &str) -> Option<(Option<String>, String)> {
    if line.starts_with("./scripts/") {
        return Some((None, line.to_string()));
    }
    let (prompt, rest) = line.split_once("$ ")?;
    let host = prompt
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-');
    if !host {
        return None;
    }
    let host = (!prompt.is_empty()).then(|| prompt.to_string());
    Some((host, rest.trim_start().to_string()))
}

/// The command's words, its comment (a `#` after a blank, outside quotes)
/// and line continuations left out.
fn key_of(text: &str) -> String {
    let (mut quote, mut prev, mut end) = (None, ' ', text.len());
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if prev.is_whitespace() => {
                end = i;
                break;
            }
            _ => {}
        }
        prev = c;
    }
    text[..end]
        .replace("\\\n", " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The socket of `platter serve --socket PATH ...`.
fn serve_socket(key: &str) -> Option<&str> {
    let rest = key.strip_prefix("platter serve ")?;
    rest.split_once("--socket ")
        .map(|(_, s)| s.split_whitespace().next().unwrap_or(""))
}

/// The NBD socket whose control socket (`--control SOCKET.ctl`) `key` uses.
fn control_of(key: &str) -> Option<&str> {
    let (_, rest) = key.split_once("--control ")?;
    rest.split_whitespace().next()?.strip_suffix(".ctl")
}

/// A clone of the repository as its working tree stands: HEAD, then the
/// uncommitted changes and the files not yet added.
fn clone_working_tree(test: &str, t: &Tools, into: &Path) -> Option<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let git = |dir: &Path, args: &[&str]| {
        let out = run(t.cmd("git").arg("-C").arg(dir).args(args), CMD_TIMEOUT);
        (out.status.success(), out)
    };
    let (ok, top) = git(&repo, &["rev-parse", "--show-toplevel"]);
    if !ok {
        platter_testkit::skips::skipped(test, "the source is not a git checkout");
        return None;
    }
    let repo = PathBuf::from(top.stdout.trim());
    let clone = into.join("platter");
    let path = clone.to_str().unwrap();
    run_ok(
        t.cmd("git")
            .args(["clone", "-q", "--no-checkout"])
            .arg(&repo)
            .arg(path),
        CMD_TIMEOUT,
        "git clone",
    );
    let repo_s = repo.to_str().unwrap();
    for args in [
        &["fetch", "-q", repo_s, "HEAD"][..],
        &["checkout", "-q", "--detach", "FETCH_HEAD"][..],
    ] {
        let (ok, out) = git(&clone, args);
        assert!(ok, "{}", out.describe(&format!("git {args:?}")));
    }
    let (_, diff) = git(&repo, &["diff", "HEAD", "--binary"]);
    if !diff.stdout.is_empty() {
        let patch = into.join("working-tree.patch");
        std::fs::write(&patch, &diff.stdout).unwrap();
        let (ok, out) = git(&clone, &["apply", "--binary", patch.to_str().unwrap()]);
        assert!(
            ok,
            "{}",
            out.describe("git apply the working tree's changes")
        );
    }
    let (_, new) = git(&repo, &["ls-files", "--others", "--exclude-standard"]);
    for file in new.stdout.lines() {
        let to = clone.join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(repo.join(file), &to).unwrap();
    }
    assert!(!into.join("shared").exists() && !clone.join("target").exists());
    Some(clone)
}

/// A process holding the private mount and network namespaces every
/// command enters (`nsenter`): /run a tmpfs, /usr/local an overlay whose
/// writes go to `dir`, loopback up.
struct Namespaces {
    holder: Background,
}

impl Namespaces {
    fn create(t: &Tools, dir: &Path) -> Namespaces {
        let mut unshare = t.cmd("unshare");
        unshare.args(["--mount", "--net", "sleep", "86400"]);
        let mut holder = Background::spawn(&mut unshare, "the namespaces' holder");
        let comm = format!("/proc/{}/comm", holder.pid());
        let start = Instant::now();
        while std::fs::read_to_string(&comm).unwrap_or_default().trim() != "sleep" {
            assert!(holder.is_running(), "unshare: {}", holder.stderr());
            assert!(start.elapsed() < CMD_TIMEOUT, "unshare never ran sleep");
            std::thread::sleep(Duration::from_millis(20));
        }
        let ns = Namespaces { holder };
        // The overlay's own directories on a tmpfs: an upper directory on
        // the test's file system would fail where that is an overlay too
        // (a container's root).
        let layers = dir.join("usr-local");
        std::fs::create_dir_all(&layers).unwrap();
        let layers = layers.display().to_string();
        let overlay = format!("lowerdir=/usr/local,upperdir={layers}/upper,workdir={layers}/work");
        let steps: [&[&str]; 5] = [
            &["mount", "-t", "tmpfs", "tmpfs", "/run"],
            &["mount", "-t", "tmpfs", "tmpfs", &layers],
            &[
                "mkdir",
                &format!("{layers}/upper"),
                &format!("{layers}/work"),
            ],
            &[
                "mount",
                "-t",
                "overlay",
                "overlay",
                "-o",
                &overlay,
                "/usr/local",
            ],
            &["ip", "link", "set", "lo", "up"],
        ];
        for args in steps {
            let mut c = ns.enter(t, Path::new("/"));
            run_ok(c.args(args), CMD_TIMEOUT, &args.join(" "));
        }
        ns
    }

    /// `nsenter` into the namespaces, in `wd` (else /), ready for the
    /// program and its arguments.
    fn enter(&self, t: &Tools, wd: &Path) -> Command {
        let mut c = t.cmd("nsenter");
        c.args([
            "--target",
            &self.holder.pid().to_string(),
            "--mount",
            "--net",
        ])
        .arg(format!("--wd={}", wd.display()))
        .arg("--");
        c
    }
}

/// Runs the README's commands.
struct Session<'a> {
    t: &'a Tools,
    ns: Namespaces,
    clone: PathBuf,
    all: Vec<Readme>,
    /// Where `d/` is kept as the README made it.
    home: Option<PathBuf>,
    servers: Vec<(String, Readme, Background)>,
    /// README lines not run, and why.
    skipped: Vec<(usize, String)>,
}

impl Session<'_> {
    /// `bash -c TEXT` in the clone, inside the namespaces.
    fn bash(&self, text: &str) -> Command {
        let mut c = self.ns.enter(self.t, &self.clone);
        let path = format!(
            "/usr/local/bin:{}",
            std::env::var("PATH").unwrap_or_default()
        );
        c.arg(self.t.path("bash"))
            .args(["-c", text])
            .env("PATH", path)
            .env("PLATTER_BIN", env!("CARGO_BIN_EXE_platter"));
        c
    }

    fn run_all(&mut self) {
        let all = self.all.clone();
        let mut block = usize::MAX;
        for c in &all {
            if c.block != block {
                self.stop_servers();
                block = c.block;
                self.fresh_home();
            }
            self.one(c);
        }
        self.stop_servers();
    }

    fn one(&mut self, c: &Readme) {
        if let Some(why) = skip_reason(c) {
            self.skipped.push((c.line, format!("`{}`: {why}", c.key)));
        } else if c.key == "./scripts/setup" {
            self.setup(c);
        } else if let Some(socket) = serve_socket(&c.key) {
            self.serve(socket.to_string(), c);
        } else {
            if let Some(socket) = control_of(&c.key) {
                self.served_for(socket, c);
            }
            self.command(c);
        }
        if self.home.is_none() && self.clone.join("d/m0").exists() {
            self.keep_home();
        }
    }

    /// A command run to its end, its exit status checked.
    fn command(&self, c: &Readme) {
        if UNTIL_INTERRUPTED.contains(&c.key.as_str()) {
            let mut bg = Background::spawn(&mut self.bash(&format!("exec {}", c.text)), &c.key);
            std::thread::sleep(Duration::from_secs(3));
            assert!(
                bg.is_running(),
                "README.md:{} ended early: {}",
                c.line,
                bg.stderr()
            );
            send_signal(bg.pid(), "INT");
            bg.wait(CMD_TIMEOUT);
            return;
        }
        let out = run(&mut self.bash(&c.text), COMMAND_TIMEOUT);
        let allowed = EXIT
            .iter()
            .find(|(k, _, _)| *k == c.key)
            .map_or(&[0][..], |(_, codes, _)| codes);
        let code = out.status.code().unwrap_or(-1);
        assert!(
            allowed.contains(&code),
            "{}\n{}",
            out.describe(&format!("README.md:{}: {}", c.line, c.text)),
            self.server_logs()
        );
    }

    /// A server in the background until the next on its socket or the
    /// block's end.
    fn serve(&mut self, socket: String, c: &Readme) {
        if let Some(i) = self.servers.iter().position(|(s, _, _)| *s == socket) {
            let (_, was, bg) = self.servers.remove(i);
            stop(&was, bg);
        }
        let mut bg = Background::spawn(&mut self.bash(&format!("exec {}", c.text)), &c.key);
        wait_for_line(
            &mut bg,
            "try:",
            &format!("README.md:{}: {}", c.line, c.text),
        );
        self.servers.push((socket, c.clone(), bg));
    }

    /// The README's first `serve` of `socket`, unless one runs already.
    fn served_for(&mut self, socket: &str, c: &Readme) {
        if self.servers.iter().any(|(s, _, _)| s == socket) {
            return;
        }
        let first = self
            .all
            .iter()
            .find(|s| serve_socket(&s.key) == Some(socket));
        let first = first.unwrap_or_else(|| {
            panic!(
                "README.md:{}: no `platter serve --socket {socket}` in the README",
                c.line
            )
        });
        self.serve(socket.to_string(), &first.clone());
    }

    fn stop_servers(&mut self) {
        for (_, c, bg) in self.servers.drain(..) {
            stop(&c, bg);
        }
    }

    fn server_logs(&self) -> String {
        let logs = self.servers.iter().map(|(_, c, bg)| {
            format!(
                "--- server of README.md:{} ---\n{}",
                c.line,
                tail(&bg.stderr(), 4000)
            )
        });
        logs.collect::<Vec<_>>().join("\n")
    }

    /// Keeps `d/` as the README made it, for the examples after.
    fn keep_home(&mut self) {
        let kept = self.clone.parent().unwrap().join("home-as-made");
        let mut cp = Command::new("cp");
        cp.args(["-a", "--sparse=always"])
            .arg(self.clone.join("d"))
            .arg(&kept);
        run_ok(&mut cp, CMD_TIMEOUT, "cp d");
        self.home = Some(kept);
    }

    fn fresh_home(&self) {
        let Some(kept) = &self.home else { return };
        let d = self.clone.join("d");
        std::fs::remove_dir_all(&d).unwrap();
        let mut cp = Command::new("cp");
        cp.args(["-a", "--sparse=always"]).arg(kept).arg(&d);
        run_ok(&mut cp, CMD_TIMEOUT, "cp d back");
    }

    /// `./scripts/setup`: installs, then serves the demo until Ctrl-C.
    fn setup(&mut self, c: &Readme) {
        let mut bg = Background::spawn(&mut self.bash(&format!("exec {}", c.text)), &c.key);
        let what = format!("README.md:{}: {}", c.line, c.text);
        wait_for_line(&mut bg, "  mkdir -p /tmp/platter-fuse", &what);
        let readme = std::fs::read_to_string(self.clone.join("README.md")).unwrap();
        let (banner_at, banner) = banner_block(&readme);
        let printed: Vec<String> = bg
            .stdout()
            .lines()
            .skip_while(|l| !l.starts_with("serving '"))
            .take(banner.len())
            .map(str::to_string)
            .collect();
        assert_eq!(
            printed, banner,
            "the README's banner is not what setup printed"
        );
        for line in &banner[banner.len() - 3..banner.len() - 1] {
            let out = run(&mut self.bash(line.trim()), CMD_TIMEOUT);
            assert!(out.status.success(), "{}", out.describe(line));
        }
        let fuse = banner[banner.len() - 1].trim();
        self.skipped.push((
            banner_at + banner.len() - 1,
            format!(
                "`{fuse}`: mounts the volume with FUSE and leaves it mounted (e2e_filesystem \
                 runs nbdfuse)"
            ),
        ));
        stop(c, bg);
        let out = run(
            &mut self.bash("command -v platter && man -P cat platter-serve"),
            CMD_TIMEOUT,
        );
        assert!(
            out.status.success()
                && out.stdout.starts_with("/usr/local/bin/platter\n")
                && out.stdout.contains("EXIT STATUS"),
            "{}",
            out.describe("platter and its manual pages, installed")
        );
    }
}

/// The banner the README shows setup printing: the code block that
/// starts `serving '`, its lines unindented, and its first line's number.
fn banner_block(readme: &str) -> (usize, Vec<String>) {
    let lines: Vec<&str> = readme.lines().collect();
    let at = lines.iter().position(|l| l.starts_with("    serving '"));
    let at = at.expect("no banner in the README");
    let block = lines[at..].iter().take_while(|l| l.starts_with("    "));
    let block: Vec<String> = block.map(|l| l[4..].to_string()).collect();
    assert!(block.len() > 3, "the README's banner: {block:?}");
    (at + 1, block)
}

fn skip_reason(c: &Readme) -> Option<String> {
    if let Some(host) = &c.host {
        return Some(format!(
            "on host {host} of an example whose members are other hosts' disks; e2e_hosts \
             plays such hosts with network namespaces"
        ));
    }
    SKIPPED
        .iter()
        .find(|(k, _)| *k == c.key)
        .map(|(_, why)| why.to_string())
}

/// Waits until `bg` prints a line starting with `want`.
fn wait_for_line(bg: &mut Background, want: &str, what: &str) {
    let start = Instant::now();
    while !bg.stdout().lines().any(|l| l.starts_with(want)) {
        assert!(
            bg.is_running(),
            "{what}: ended before it served\n{}\n{}",
            bg.stdout(),
            bg.stderr()
        );
        assert!(
            start.elapsed() < COMMAND_TIMEOUT,
            "{what}: never served\n{}\n{}",
            bg.stdout(),
            bg.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stops a server as Ctrl-C would; it must end cleanly.
fn stop(c: &Readme, mut bg: Background) {
    send_signal(bg.pid(), "TERM");
    let status = bg.wait(CMD_TIMEOUT);
    assert!(
        status.success(),
        "README.md:{}: {} stopped with {status}\n{}",
        c.line,
        c.text,
        tail(&bg.stderr(), 8000)
    );
}

#[test]
fn every_readme_command_runs_as_written_in_a_fresh_clone() {
    let test = "every_readme_command_runs_as_written_in_a_fresh_clone";
    let tools = [
        "git", "bash", "unshare", "nsenter", "mount", "ip", "nbdinfo", "qemu-io", "man",
    ];
    let Some(t) = required_tools(test, &tools) else {
        return;
    };
    if !is_root() {
        platter_testkit::skips::skipped(test, "needs root (private /run, /usr/local and network)");
        return;
    }
    let dir = temp_dir();
    let Some(clone) = clone_working_tree(test, &t, dir.path()) else {
        return;
    };
    let lacking = packages_setup_lacks(&t, &clone);
    if !lacking.is_empty() {
        let why = format!(
            "scripts/setup would install {} (./scripts/test installs them first)",
            lacking.join(", ")
        );
        platter_testkit::skips::skipped(test, why);
        return;
    }
    let readme = std::fs::read_to_string(clone.join("README.md")).unwrap();
    let all = readme_commands(&readme);
    check_tables(&all);
    let mut s = Session {
        ns: Namespaces::create(&t, dir.path()),
        t: &t,
        clone,
        all,
        home: None,
        servers: Vec::new(),
        skipped: Vec::new(),
    };
    s.run_all();
    s.skipped.sort();
    let skipped: Vec<String> = s
        .skipped
        .iter()
        .map(|(l, why)| format!("README.md:{l} {why}"))
        .collect();
    eprintln!("README commands not run here:\n  {}", skipped.join("\n  "));
}

/// The packages `scripts/setup` would install here: it would reach for
/// apt, which the private network cannot.
fn packages_setup_lacks(t: &Tools, clone: &Path) -> Vec<String> {
    let script = ". scripts/lib/common.sh; for p in \"${BUILD_PACKAGES[@]}\" \
                  \"${CLIENT_PACKAGES[@]}\"; do have_package \"$p\" || echo \"$p\"; done";
    let mut c = t.cmd("bash");
    c.args(["-c", script]).current_dir(clone);
    let out = run_ok(&mut c, CMD_TIMEOUT, "the packages setup needs");
    out.stdout.lines().map(str::to_string).collect()
}

/// The extraction finds the README's commands, and every entry of the
/// tables above names one of them (a README edit must edit these too).
fn check_tables(all: &[Readme]) {
    assert!(all.len() > 40, "{all:#?}");
    assert_eq!(all[0].key, "./scripts/setup", "{:?}", all[0]);
    let keys: Vec<&str> = all.iter().map(|c| c.key.as_str()).collect();
    let named = SKIPPED
        .iter()
        .map(|(k, _)| *k)
        .chain(EXIT.iter().map(|(k, _, _)| *k))
        .chain(UNTIL_INTERRUPTED.iter().copied());
    for k in named {
        assert!(keys.contains(&k), "no README command `{k}`: {keys:#?}");
    }
}
