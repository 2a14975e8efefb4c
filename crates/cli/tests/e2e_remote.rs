//! Remote members (issue 16): volumes whose members are NBD exports served
//! by nbdkit (its file plugin over files in the test's directory), built
//! with `platter create` over nbd+unix:// URIs, served, and written and
//! read by qemu-io.
//!
//! Needs nbdkit and qemu-io; skips with the reason elsewhere, fails under
//! `CI=true`.

mod e2e_support;

use e2e_support::*;
use platter_testkit::nbdkit::Nbdkit;

/// `n` member files of `size` bytes in `dir`, each exported by its own
/// nbdkit through `filters` (with their parameters in `params`); the
/// servers and their URIs.
fn exported_members(
    test: &str,
    dir: &std::path::Path,
    n: usize,
    size: u64,
    filters: &[&str],
    params: &[&str],
) -> Option<(Vec<Nbdkit>, Vec<String>)> {
    let mut kits = Vec::new();
    for (i, path) in member_paths(dir, n).iter().enumerate() {
        std::fs::File::create(path)
            .and_then(|f| f.set_len(size))
            .expect("a member file");
        let k = Nbdkit::start(
            test,
            &dir.join(format!("m{i}.sock")),
            filters,
            &[&["file", &format!("file={path}")], params].concat(),
        )?;
        kits.push(k);
    }
    let uris = kits.iter().map(Nbdkit::uri).collect();
    Some((kits, uris))
}

fn qemu_io_cmds(cmds: &[&str]) -> Vec<String> {
    cmds.iter().map(|c| c.to_string()).collect()
}

/// A mirror over two hosts' exports: written and read through the volume;
/// one host killed without a goodbye (SIGKILL) leaves the mirror serving
/// from the other copy, with the member out of use.
#[test]
fn a_mirror_over_two_exports_serves_on_when_one_host_dies() {
    let test = "a_mirror_over_two_exports_serves_on_when_one_host_dies";
    let Some(t) = required_tools(test, &["qemu-io"]) else {
        return;
    };
    let dir = temp_dir();
    let Some((mut kits, uris)) = exported_members(test, dir.path(), 2, 32 * MIB, &[], &[]) else {
        return;
    };
    let volume = Volume::create_on(
        Spec::new("mirror", 2, "64k"),
        uris.clone(),
        32 * MIB,
        dir,
        &[],
    );
    assert_eq!(volume.status()["members"][1]["path"], uris[1]);
    let mut s = Server::start(volume);
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&[
            "write -P 0x5a 0 8M",
            "write -P 0x11 1000 3333",
            "read -P 0x5a 0 1000",
            "read -P 0x11 1000 3333",
            "read -P 0x5a 4333 1M",
        ]),
        "write through two remote members",
    );
    kits[1].kill();
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&[
            "write -P 0x77 0 1M",
            "flush",
            "read -P 0x77 0 1M",
            "read -P 0x5a 1M 7M",
        ]),
        "serve on with one host gone",
    );
    let live = live_status(&s);
    let state = live["members"][1]["state"].as_str().unwrap_or_default();
    assert!(
        state.starts_with("faulty"),
        "{test}: slot 1 is {state:?}: {live}"
    );
    s.stop_expecting_errors("TERM", &["nbd+unix"]);
}

/// RAID-5 over exports that take only whole 4 KiB blocks, at most 64 KiB
/// at once (nbdkit's blocksize-policy, erroring on anything else): the
/// volume's partial-block writes are merged and long ones split, so
/// qemu-io's odd offsets read back right, also after a restart.
#[test]
fn raid5_over_exports_with_4k_blocks_reads_back_unaligned_writes() {
    let test = "raid5_over_exports_with_4k_blocks_reads_back_unaligned_writes";
    let Some(t) = required_tools(test, &["qemu-io"]) else {
        return;
    };
    let dir = temp_dir();
    let Some((_kits, uris)) = exported_members(
        test,
        dir.path(),
        3,
        16 * MIB,
        &["blocksize-policy"],
        &[
            "blocksize-minimum=4096",
            "blocksize-maximum=65536",
            "blocksize-error-policy=error",
        ],
    ) else {
        return;
    };
    let volume = Volume::create_on(Spec::new("raid5", 3, "64k"), uris, 16 * MIB, dir, &[]);
    let mut s = Server::start(volume);
    let cmds = [
        "write -P 0x21 0 5M",
        "write -P 0x42 513 70001",
        "write -P 0x63 1048575 3",
        "read -P 0x21 0 513",
        "read -P 0x42 513 70001",
        "read -P 0x21 70514 978061",
        "read -P 0x63 1048575 3",
        "read -P 0x21 1048578 1M",
    ];
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&cmds),
        "unaligned writes over 4k-block exports",
    );
    s.restart();
    qemu_io(
        &t,
        s.uri(),
        &qemu_io_cmds(&cmds[3..]),
        "read back after a restart",
    );
    s.stop();
}
