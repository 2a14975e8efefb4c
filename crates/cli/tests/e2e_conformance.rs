//! An outside conformance check (issue 17): libnbd's own client, through
//! nbdsh scripts modelled on libnbd's tests/errors-* and its option-mode
//! tests (tests/conformance/*.py), against `platter serve`. In strict mode
//! libnbd must refuse bad requests from what platter advertised; with
//! strict mode off they reach platter, which must answer each with the
//! error the NBD spec names and keep the connection usable. Run against a
//! read-write RAID-5 and a read-only mirror.

mod e2e_support;

use e2e_support::*;
use std::path::Path;

fn nbdsh(t: &platter_testkit::tools::Tools, script: &str, vars: &str) -> Out {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/conformance")
        .join(script);
    let mut cmd = t.cmd("nbdsh");
    // nbdsh runs `python3 -m nbd`: Debian's python3-libnbd is installed
    // for Debian's python3, which a python3 earlier on PATH may not be.
    let path_var = std::env::var("PATH").unwrap_or_default();
    cmd.env("PATH", format!("/usr/bin:{path_var}"))
        .arg("-c")
        .arg(vars)
        .arg("-c")
        .arg(format!("exec(open('{}').read())", path.display()));
    run(&mut cmd, CMD_TIMEOUT)
}

fn check(t: &platter_testkit::tools::Tools, s: &Server, read_only: bool) {
    let vars = format!(
        "URI={:?}; NAME={:?}; READ_ONLY={}",
        s.uri(),
        s.volume.name,
        if read_only { "True" } else { "False" }
    );
    for (script, done) in [
        ("errors.py", "conformance: "),
        ("handshake.py", "handshake: "),
    ] {
        let out = nbdsh(t, script, &vars);
        assert!(
            out.status.success() && out.stdout.contains(done),
            "{}",
            out.describe(&format!("nbdsh {script} on {}", s.label()))
        );
        // Each script counts its checks: none may be skipped silently.
        let checks = out.stdout.lines().filter(|l| l.starts_with("ok  ")).count();
        assert!(checks >= 6, "{script}: {checks} checks\n{}", out.stdout);
    }
}

#[test]
fn libnbd_finds_platter_conformant_read_write() {
    let test = "libnbd_finds_platter_conformant_read_write";
    let Some(t) = required_tools(test, &["nbdsh"]) else {
        return;
    };
    let s = Server::start(Volume::create(Spec::new("raid5", 4, "64k"), 16 * MIB));
    check(&t, &s, false);
}

#[test]
fn libnbd_finds_platter_conformant_read_only() {
    let test = "libnbd_finds_platter_conformant_read_only";
    let Some(t) = required_tools(test, &["nbdsh"]) else {
        return;
    };
    let s = Server::start_with(
        Volume::create(Spec::new("mirror", 2, "64k"), 4 * MIB),
        ServeOptions {
            read_only: true,
            ..ServeOptions::default()
        },
    );
    check(&t, &s, true);
}
