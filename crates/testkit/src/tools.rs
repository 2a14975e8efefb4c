//! External tools a test needs: found on PATH (and the sbin directories),
//! or the test is skipped with the reason, except under `CI=true`, where a
//! missing tool fails it (CI installs every tool, so a skip there would
//! hide a test that never runs).

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

/// The full path of `name` found on PATH (then the sbin directories, which
/// a non-login PATH may lack), if it is an executable file.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let extra = ["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from);
    std::env::split_paths(&path)
        .chain(extra)
        .map(|d| d.join(name))
        .find(|p| {
            fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// Every tool in `names`, or `None` after saying which is missing and that
/// `test` is skipped; under `CI=true` a missing tool fails `test` (CI
/// installs every tool, so a skip there would hide a test that never runs).
pub fn tools(test: &str, names: &[&str]) -> Option<Tools> {
    required_tools(test, names)
}

fn look_up(test: &str, names: &[&str]) -> Option<Tools> {
    let mut found = HashMap::new();
    for n in names {
        match find_tool(n) {
            Some(p) => {
                found.insert(n.to_string(), p);
            }
            None => {
                crate::skips::skipped(test, format!("`{n}` is not installed (not on PATH)"));
                return None;
            }
        }
    }
    Some(Tools(found))
}

/// [`tools`], except that under `CI=true` a missing tool fails `test`
/// instead of skipping it: CI installs every tool (`scripts/test`), so a
/// skip there would hide a test that never runs.
pub fn required_tools(test: &str, names: &[&str]) -> Option<Tools> {
    let found = look_up(test, names);
    assert!(
        found.is_some() || std::env::var("CI").as_deref() != Ok("true"),
        "{test}: a tool it needs is missing under CI (see above)"
    );
    found
}

/// Paths of the tools a test needs.
pub struct Tools(HashMap<String, PathBuf>);

impl Tools {
    pub fn cmd(&self, name: &str) -> Command {
        Command::new(self.path(name))
    }

    /// Where the tool `name` is.
    pub fn path(&self, name: &str) -> &std::path::Path {
        self.0
            .get(name)
            .unwrap_or_else(|| panic!("tool {name} was not asked for"))
    }
}
