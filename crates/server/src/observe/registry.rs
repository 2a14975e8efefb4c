//! The host's list of served volumes, as md's /proc/mdstat is: every
//! `platter serve` with a control socket puts a link to it in a run
//! directory (`/run/platter` unless told otherwise), and `platter status`
//! with no argument asks each socket found there. A control socket made
//! in that directory (`--socket /run/platter/home.sock`, a systemd socket
//! unit) is found as it is, with no link.
//!
//! A server killed with SIGKILL leaves its link behind: the link's name
//! carries the server's process id, so a reader (or the next server) can
//! tell a dead server's link from a live one's and remove it.

use std::io;
use std::path::{Path, PathBuf};

/// Where servers register unless told otherwise.
pub const DEFAULT_RUN_DIR: &str = "/run/platter";
/// The environment variable naming another run directory (the option
/// `--run-dir` wins over it).
pub const RUN_DIR_ENV: &str = "PLATTER_RUN_DIR";
/// The end of every entry's name: control sockets and links to them.
const SUFFIX: &str = ".ctl";

/// A server's link in the run directory, removed when dropped.
#[derive(Debug)]
pub struct Registration {
    link: PathBuf,
    target: PathBuf,
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Only our own link: a server started since with our process id
        // (after a reboot) may have replaced it.
        if std::fs::read_link(&self.link).is_ok_and(|t| t == self.target) {
            let _ = std::fs::remove_file(&self.link);
        }
    }
}

/// The volume's name as a file name: letters, digits, `-` and `_` kept,
/// anything else `_` (a name may hold `/` or spaces), at most 64 bytes.
fn file_name_part(name: &str) -> String {
    let part: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if part.is_empty() {
        "volume".to_string()
    } else {
        part
    }
}

/// Links `control` into `run_dir` as `NAME.PID.ctl`, making the directory
/// if it is missing. `None` when the socket is itself in `run_dir`.
pub fn register(run_dir: &Path, control: &Path, name: &str) -> io::Result<Option<Registration>> {
    let target = std::path::absolute(control)?;
    std::fs::create_dir_all(run_dir)?;
    // Links of servers killed since: nobody may be listing to find them.
    for dead in entries(run_dir)?.iter().filter(|e| e.is_dead_link()) {
        dead.remove_link();
    }
    let dir = run_dir.canonicalize()?;
    let in_dir = target
        .parent()
        .and_then(|p| p.canonicalize().ok())
        .is_some_and(|p| p == dir);
    if in_dir && target.to_string_lossy().ends_with(SUFFIX) {
        return Ok(None);
    }
    let link = run_dir.join(format!(
        "{}.{}{SUFFIX}",
        file_name_part(name),
        std::process::id()
    ));
    // Left by a process of the same id before a reboot: it is not ours
    // to keep.
    if std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()) {
        std::fs::remove_file(&link)?;
    }
    std::os::unix::fs::symlink(&target, &link)?;
    Ok(Some(Registration { link, target }))
}

/// An entry of the run directory: a control socket, or a server's link
/// to one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: PathBuf,
    /// For a server's link: the process id its name carries.
    pub pid: Option<u32>,
}

impl Entry {
    /// A link whose server is gone (killed: a clean stop removes it).
    pub fn is_dead_link(&self) -> bool {
        self.pid.is_some_and(|pid| !process_exists(pid))
    }

    /// Removes a server's link (a dead one's, or one whose socket no
    /// longer answers); control sockets themselves are left to the next
    /// server on their path, which replaces them.
    pub fn remove_link(&self) {
        if self.pid.is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 checks the process exists; nothing is sent.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The run directory's entries, by name; none when it does not exist.
pub fn entries(run_dir: &Path) -> io::Result<Vec<Entry>> {
    let list = match std::fs::read_dir(run_dir) {
        Ok(list) => list,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for entry in list {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(SUFFIX) else {
            continue;
        };
        let kind = entry.file_type()?;
        let pid = if kind.is_symlink() {
            stem.rsplit_once('.').and_then(|(_, pid)| pid.parse().ok())
        } else if std::os::unix::fs::FileTypeExt::is_socket(&kind) {
            None
        } else {
            continue;
        };
        found.push(Entry {
            path: entry.path(),
            pid,
        });
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_is_made_named_and_removed_with_its_registration() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let sock = dir.path().join("v.sock.ctl");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let r = register(&run, &sock, "my vol/1").unwrap().expect("a link");
        let found = entries(&run).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].pid, Some(std::process::id()));
        assert!(found[0]
            .path
            .ends_with(format!("my_vol_1.{}.ctl", std::process::id())));
        assert!(!found[0].is_dead_link());
        drop(r);
        assert!(entries(&run).unwrap().is_empty());
    }

    #[test]
    fn a_socket_in_the_run_directory_needs_no_link() {
        let run = tempfile::tempdir().unwrap();
        let sock = run.path().join("home.sock.ctl");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        assert!(register(run.path(), &sock, "home").unwrap().is_none());
        let found = entries(run.path()).unwrap();
        assert_eq!(
            found,
            vec![Entry {
                path: sock.clone(),
                pid: None
            }]
        );
    }

    #[test]
    fn a_registration_removes_the_links_of_dead_servers() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        std::fs::create_dir(&run).unwrap();
        let dead = run.join("old.99999999.ctl");
        std::os::unix::fs::symlink("/nonexistent.ctl", &dead).unwrap();
        let sock = dir.path().join("v.ctl");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let _r = register(&run, &sock, "v").unwrap().expect("a link");
        assert!(std::fs::symlink_metadata(&dead).is_err(), "left: {dead:?}");
        assert_eq!(entries(&run).unwrap().len(), 1);
    }

    #[test]
    fn a_link_of_a_process_that_is_gone_is_dead() {
        let run = tempfile::tempdir().unwrap();
        // Process ids above the kernel's pid_max (at most 2^22) never run.
        let link = run.path().join("old.99999999.ctl");
        std::os::unix::fs::symlink("/nonexistent.ctl", &link).unwrap();
        std::fs::write(run.path().join("notes.txt"), "").unwrap();
        let found = entries(run.path()).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].is_dead_link());
        found[0].remove_link();
        assert!(entries(run.path()).unwrap().is_empty());
    }
}
