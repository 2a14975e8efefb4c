//! Remote members on other "hosts" (issue 16): network namespaces the
//! test creates, each joined to the test's namespace by a veth pair, each
//! running nbdkit on TCP; platter reaches them as nbd://ADDR:PORT/. A
//! host's cable is cut (`ip link set ... down`: packets stop, nothing is
//! closed) and plugged back in.
//!
//! Needs root, iproute2, nbdkit and qemu-io; skips with the reason
//! elsewhere, fails under `CI=true`.

mod e2e_support;

use e2e_support::*;
use platter_testkit::nbdkit::Nbdkit;
use platter_testkit::netns::NetNs;
use std::sync::Arc;
use std::time::{Duration, Instant};

const PORT: u16 = 10809;

/// `n` hosts, each exporting a `size`-byte file of the test's directory.
struct Hosts {
    ns: Vec<Arc<NetNs>>,
    /// Kept running for the test's life.
    _kits: Vec<Nbdkit>,
    uris: Vec<String>,
}

impl Hosts {
    fn start(test: &str, dir: &std::path::Path, n: usize, size: u64) -> Option<Hosts> {
        let mut ns = Vec::new();
        let mut kits = Vec::new();
        for (i, path) in member_paths(dir, n).iter().enumerate() {
            std::fs::File::create(path)
                .and_then(|f| f.set_len(size))
                .expect("a member file");
            let host = Arc::new(NetNs::create(test)?);
            let k =
                Nbdkit::start_on_host(test, &host, PORT, &[], &["file", &format!("file={path}")])?;
            assert_eq!(
                k.uri(),
                format!("nbd://{}:{PORT}/", host.host_addr()),
                "host {i}"
            );
            ns.push(host);
            kits.push(k);
        }
        let uris = kits.iter().map(Nbdkit::uri).collect();
        Some(Hosts {
            ns,
            _kits: kits,
            uris,
        })
    }
}

fn state(s: &Server, slot: usize) -> String {
    live_status(s)["members"][slot]["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn wait_until(test: &str, what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(90);
    while !done() {
        assert!(Instant::now() < until, "{test}: {what}: not within 90 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A volume of `spec` over `hosts`' exports of `size` bytes, with 1 MiB
/// bitmap regions, served with a short --remote-timeout.
fn serve_over(hosts: &Hosts, dir: tempfile::TempDir, spec: Spec, size: u64) -> Server {
    let volume = Volume::create_on(
        spec,
        hosts.uris.clone(),
        size,
        dir,
        &["--bitmap-region", "1M"],
    );
    Server::start_with(volume, serve_args())
}

/// qemu-io's `cmds` through `s`, named `what` for failures.
fn io(t: &Tools, s: &Server, test: &str, cmds: &[&str], what: &str) {
    let cmds: Vec<String> = cmds.iter().map(|c| c.to_string()).collect();
    qemu_io(t, s.uri(), &cmds, &format!("{test}: {what}"));
}

fn serve_args() -> ServeOptions {
    ServeOptions {
        extra_args: ["--remote-timeout", "1", "--member-timeout", "120"]
            .map(String::from)
            .to_vec(),
        ..ServeOptions::default()
    }
}

/// A mirror across two hosts over TCP. Host 1's cable is cut: the write
/// made meanwhile stalls for --remote-timeout, then the mirror serves on
/// from host 0 and host 1 is `disconnected`. Plugged back in, host 1 comes
/// back by itself, rebuilding only the region written meanwhile, and then
/// holds every byte alone.
#[test]
fn a_mirror_across_two_hosts_survives_a_cut_cable() {
    let test = "a_mirror_across_two_hosts_survives_a_cut_cable";
    let Some(t) = required_tools(test, &["qemu-io"]) else {
        return;
    };
    let dir = temp_dir();
    let Some(hosts) = Hosts::start(test, dir.path(), 2, 40 * MIB) else {
        return;
    };
    let mut s = serve_over(&hosts, dir, Spec::new("mirror", 2, "64k"), 40 * MIB);
    let io = |s: &Server, cmds: &[&str], what: &str| io(&t, s, test, cmds, what);
    io(
        &s,
        &["write -P 0x5a 0 16M", "flush", "read -P 0x5a 0 16M"],
        "fill",
    );
    wait_until(test, "a quiet bitmap", || {
        live_status(&s)["bitmap"]["dirty_regions"] == 0
    });

    hosts.ns[1].set_link(false);
    io(
        &s,
        &["write -P 0x77 4M 1M", "flush"],
        "write with host 1 cut off",
    );
    assert_eq!(state(&s, 1), "disconnected", "{test}");
    assert_eq!(live_status(&s)["bitmap"]["missed_regions"], 1);
    io(&s, &["read -P 0x77 4M 1M"], "read with host 1 cut off");

    hosts.ns[1].set_link(true);
    wait_until(test, "host 1 back", || state(&s, 1) == "active");
    run_ok(
        &mut platter(&["fail", "--force", "--control", &s.control(), "0"]),
        CMD_TIMEOUT,
        "fail member 0",
    );
    io(
        &s,
        &[
            "read -P 0x5a 0 4M",
            "read -P 0x77 4M 1M",
            "read -P 0x5a 5M 11M",
        ],
        "read from host 1 alone",
    );
    s.stop_expecting_errors("TERM", &["nbd://", "member"]);
}

/// RAID-6 over six hosts: two cables cut, one after the other, the volume
/// reads and writes on with both members disconnected; plugged back in at
/// once, both return by themselves, and the volume then reads right with
/// two *other* hosts failed. (Cut at the same instant, the second may not
/// come back on its own: that flaked here, and is the case generation
/// identifiers would settle.)
#[test]
fn raid6_over_six_hosts_survives_two_cut_cables() {
    let test = "raid6_over_six_hosts_survives_two_cut_cables";
    let Some(t) = required_tools(test, &["qemu-io"]) else {
        return;
    };
    let dir = temp_dir();
    let Some(hosts) = Hosts::start(test, dir.path(), 6, 24 * MIB) else {
        return;
    };
    let mut s = serve_over(&hosts, dir, Spec::new("raid6", 6, "64k"), 24 * MIB);
    let io = |s: &Server, cmds: &[&str], what: &str| io(&t, s, test, cmds, what);
    io(&s, &["write -P 0x3c 0 32M", "flush"], "fill");

    // One after the other, each out of use before the next goes: cut at
    // the same instant, the first one's leaving is recorded in labels the
    // second may not receive, and then the second cannot come back on its
    // own (its label is behind; docs/remote.md, "Two members at once").
    hosts.ns[4].set_link(false);
    io(&s, &["write -P 0x99 8M 1M", "flush"], "host 4 cut off");
    assert_eq!(state(&s, 4), "disconnected", "{test}");
    hosts.ns[1].set_link(false);
    io(
        &s,
        &[
            "write -P 0x99 9M 1M",
            "flush",
            "read -P 0x3c 0 8M",
            "read -P 0x99 8M 2M",
        ],
        "two hosts cut off",
    );
    assert_eq!(state(&s, 1), "disconnected", "{test}");
    assert_eq!(state(&s, 4), "disconnected", "{test}");

    hosts.ns[1].set_link(true);
    hosts.ns[4].set_link(true);
    wait_until(test, "both hosts back", || {
        state(&s, 1) == "active" && state(&s, 4) == "active"
    });
    for slot in ["0", "5"] {
        run_ok(
            &mut platter(&["fail", "--force", "--control", &s.control(), slot]),
            CMD_TIMEOUT,
            "fail another member",
        );
    }
    io(
        &s,
        &[
            "read -P 0x3c 0 8M",
            "read -P 0x99 8M 2M",
            "read -P 0x3c 10M 22M",
        ],
        "read with the returned hosts in use",
    );
    s.stop_expecting_errors("TERM", &["nbd://", "member"]);
}
