//! The volumes file (issue 17): `platter serve --config FILE NAME` serves
//! a volume as the file describes it, by its members or by scanning for
//! them, with `serve`'s options; a mistake in the file is an error naming
//! the line, and nothing is served or written.

mod e2e_support;

use e2e_support::*;
use std::fs;
use std::path::Path;

const MIRROR: Spec = Spec::new("mirror", 2, "64k");

fn write_config(dir: &Path, text: &str) -> String {
    let path = dir.join("volumes.toml");
    fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn quoted(paths: &[String]) -> String {
    paths
        .iter()
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

#[test]
fn a_volume_is_served_as_its_file_says_and_the_command_line_wins() {
    let test = "a_volume_is_served_as_its_file_says_and_the_command_line_wins";
    let Some(t) = required_tools(test, &["qemu-io"]) else {
        return;
    };
    let volume = Volume::create(MIRROR, 4 * MIB);
    let dir = volume.path().to_path_buf();
    // The harness gives --socket on the command line: it wins over the
    // file's, which no server may then create.
    let file_socket = dir.join("from-file.sock");
    let config = write_config(
        &dir,
        &format!(
            "# volumes on this host\n\
             [volumes.{name}]\n\
             members = [{members}]\n\
             socket = \"{sock}\"\n\
             \n\
             [volumes.{name}.options]\n\
             read-only = true\n\
             threads = 2\n\
             write-mostly = [\"{second}\"]\n",
            name = volume.name,
            members = quoted(&volume.members),
            sock = file_socket.display(),
            second = volume.members[1],
        ),
    );
    let name = volume.name.clone();
    let s = Server::start_with(
        volume,
        ServeOptions {
            instead_of_members: Some(vec!["--config".into(), config, name]),
            ..ServeOptions::default()
        },
    );
    assert!(!file_socket.exists(), "the command line's socket wins");
    assert_eq!(s.member_states(), ["active", "active"]);
    // read-only from the file: reads work, writes are refused.
    qemu_io_with(&t, &["-r"], s.uri(), &["read 0 64k".to_string()], "read");
    let out = run(
        t.cmd("qemu-io")
            .args(["-f", "raw", s.uri(), "-c", "write -P 1 0 4k"]),
        CMD_TIMEOUT,
    );
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        !out.status.success() || said.contains("failed") || said.contains("read-only"),
        "a write to a volume the file makes read-only: {said}"
    );
    let policy = s.live("read-policy");
    assert_eq!(
        policy["write_mostly"],
        serde_json::json!([1]),
        "write-mostly from the file: {policy}"
    );
}

#[test]
fn a_volume_found_by_scan_is_served_by_its_name() {
    let volume = Volume::create(MIRROR, 4 * MIB);
    let dir = volume.path().to_path_buf();
    let config = write_config(
        &dir,
        &format!(
            "[volumes.{name}]\nscan = [\"{dir}\"]\nsocket = \"{dir}/sock\"\n",
            name = volume.name,
            dir = dir.display()
        ),
    );
    let name = volume.name.clone();
    let s = Server::start_with(
        volume,
        ServeOptions {
            instead_of_members: Some(vec!["--config".into(), config, name]),
            ..ServeOptions::default()
        },
    );
    let status = s.live("status");
    assert_eq!(s.member_states(), ["active", "active"], "{status}");
}

/// Each mistake is refused with the file and the line it is on, before
/// anything is opened: the members are untouched.
#[test]
fn mistakes_in_the_file_name_their_line_and_serve_nothing() {
    let volume = Volume::create(MIRROR, 4 * MIB);
    let dir = volume.path();
    let members = quoted(&volume.members);
    let before: Vec<Vec<u8>> = volume
        .members
        .iter()
        .map(|m| fs::read(m).unwrap())
        .collect();
    let missing = dir.join("m9").display().to_string();
    let cases: Vec<(String, &str, &str)> = vec![
        (
            format!("[volumes.v]\nmembers = [{members}]\nsokcet = \"/tmp/x\"\n"),
            ":3:",
            "unknown field `sokcet`",
        ),
        (
            format!("[volumes.v]\nmembers = [{members}]\n[volumes.v.options]\nthread = 2\n"),
            ":4:",
            "'thread' is not an option",
        ),
        (
            format!(
                "[volumes.v]\nmembers = [{members}]\n[volumes.v.options]\nthreads = \"many\"\n"
            ),
            ":4:",
            "invalid value 'many'",
        ),
        (
            format!(
                "[volumes.v]\nmembers = [{members}]\n[volumes.v.options]\nread-only = \"yes\"\n"
            ),
            ":4:",
            "is a switch",
        ),
        // For one start only: in a file it would throw away the log of
        // every unclean stop.
        (
            format!(
                "[volumes.v]\nmembers = [{members}]\n[volumes.v.options]\ndiscard-log = true\n"
            ),
            ":4:",
            "is for one start, not every one: give --discard-log on the command line",
        ),
        (
            format!(
                "[volumes.v]\nmembers = [{members}]\nsocket = \"/tmp/s\"\n\n\
                 [volumes.w]\nmembers = [{members}]\nsocket = \"/tmp/s\"\n"
            ),
            ":7:",
            "has the socket /tmp/s of volume 'v'",
        ),
        (
            format!(
                "[volumes.v]\nmembers = [\n  \"{}\",\n  \"{missing}\",\n]\n",
                volume.members[0]
            ),
            ":4:",
            "does not exist",
        ),
        (
            "[volumes.v]\nsocket = \"/tmp/s\"\n".to_string(),
            ":1:",
            "needs `members`, `scan` or `pool`, one of them",
        ),
        (
            format!("[volumes.v]\nmembers = [{members}\n"),
            ":2:",
            "unclosed array",
        ),
    ];
    for (text, line, says) in cases {
        let config = write_config(dir, &text);
        let out = run(
            platter(&["serve", "--socket"])
                .arg(dir.join("sock"))
                .args(["--config", &config, "v"]),
            CMD_TIMEOUT,
        );
        let what = out.describe(&format!("serve --config with\n{text}"));
        assert_eq!(out.status.code(), Some(1), "{what}");
        assert!(
            out.stderr.contains(&format!("{config}{line}")) && out.stderr.contains(says),
            "{what}"
        );
    }
    // A volume the file does not name: the names it has are listed.
    let config = write_config(dir, &format!("[volumes.home]\nmembers = [{members}]\n"));
    let out = run(
        platter(&["serve", "--socket"])
            .arg(dir.join("sock"))
            .args(["--config", &config, "work"]),
        CMD_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        out.stderr.contains("no volume 'work'") && out.stderr.contains("home"),
        "{}",
        out.stderr
    );
    for (m, b) in volume.members.iter().zip(&before) {
        assert!(fs::read(m).unwrap() == *b, "{m} changed");
    }
}
