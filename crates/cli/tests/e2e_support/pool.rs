//! Pools on the real binary, for the tests that serve them
//! (`e2e_pools.rs`, `e2e_moves.rs`): a pool of file drives, its server,
//! fio on its exports, and what `list` and `status` say.

use super::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// The size `serve_pool_args` tells the fixture each drive has.
pub const POOL_DRIVE_BYTES: u64 = 160 * MIB;

pub fn ok(args: &[&str], what: &str) -> Out {
    run_ok(&mut platter(args), CMD_TIMEOUT, what)
}

/// `platter ARGS`, expected to fail with one line on stderr saying `says`.
pub fn refused(args: &[&str], says: &str) {
    let out = run(&mut platter(args), CMD_TIMEOUT);
    let what = format!("platter {}", args.join(" "));
    assert_eq!(out.status.code(), Some(1), "{}", out.describe(&what));
    assert!(
        out.stderr.contains(says),
        "expected {says:?}: {}",
        out.describe(&what)
    );
    assert_eq!(
        out.stderr.trim_end().lines().count(),
        1,
        "{}",
        out.describe(&what)
    );
}

/// Pool `tank` of `n` drives `d0`, `d1`, ... of `drive_size` each, made
/// in `dir/d`: that folder, and it as the devices' argument.
pub fn pool_of(dir: &Path, n: usize, drive_size: &str) -> (std::path::PathBuf, String) {
    let d = dir.join("d");
    std::fs::create_dir(&d).unwrap();
    let drives: Vec<String> = (0..n)
        .map(|i| d.join(format!("d{i}")).display().to_string())
        .collect();
    let mut args = vec!["pool", "create", "tank", "--drive-size", drive_size];
    args.extend(drives.iter().map(String::as_str));
    ok(&args, "pool create");
    let dev = d.display().to_string();
    (d, dev)
}

/// A count from environment variable `var`, or `default`.
pub fn env_count(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(default)
}

pub fn list_json(dev: &str) -> Value {
    let out = ok(&["list", "--json", dev], "list --json");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1, "one pool: {v}");
    v[0].clone()
}

/// `serve --pool tank DEV EXTRA...`, whose banner names `first`.
pub fn serve_pool_first(dir: &Path, dev: &str, first: &str, extra: &[&str]) -> Server {
    let args = ["--pool", "tank", dev];
    serve_pool_args(dir, first, &args, extra)
}

/// `serve ARGS EXTRA...` of a pool, whose banner names `first`.
pub fn serve_pool_args(dir: &Path, first: &str, args: &[&str], extra: &[&str]) -> Server {
    let volume = Volume {
        spec: Spec::new("raid10", 4, "64k"),
        name: first.into(),
        members: Vec::new(),
        size_bytes: 0,
        member_size_bytes: POOL_DRIVE_BYTES,
        interleave_bytes: 64 * KIB,
        stripe_data_bytes: 128 * KIB,
        member_used_bytes: Vec::new(),
        dir: tempfile::tempdir_in(dir).unwrap(),
    };
    let options = ServeOptions {
        instead_of_members: Some(args.iter().map(|a| a.to_string()).collect()),
        extra_args: extra.iter().map(|a| a.to_string()).collect(),
        ..ServeOptions::default()
    };
    Server::start_with(volume, options)
}

pub fn uri(s: &Server, export: &str) -> String {
    format!("nbd+unix:///{export}?socket={}", s.socket().display())
}

pub fn fio(t: &Tools, uri: &str, size_bytes: u64, verify_only: bool) -> Command {
    let mut c = t.cmd("fio");
    c.args([
        "--name=pool",
        "--thread",
        "--ioengine=nbd",
        "--rw=randwrite",
        "--bs=16k",
        "--iodepth=8",
        "--randrepeat=1",
        "--verify=crc32c",
        "--verify_fatal=1",
        "--verify_state_save=0",
    ])
    .arg(format!("--uri={uri}"))
    .arg(format!("--size={}", size_bytes / 4096 * 4096));
    if verify_only {
        c.arg("--verify_only=1");
    }
    c
}

/// fio on every export at once; each must finish with no error.
pub fn fio_all(t: &Tools, s: &Server, volumes: &[(&str, u64)], verify_only: bool) {
    let mut running: Vec<(String, Background)> = volumes
        .iter()
        .map(|(name, size)| {
            let what = format!("fio on {name}");
            (
                what.clone(),
                Background::spawn(&mut fio(t, &uri(s, name), *size, verify_only), &what),
            )
        })
        .collect();
    for (what, b) in &mut running {
        let status = b.wait(CMD_TIMEOUT);
        assert!(
            status.success(),
            "{what}: {status}\n{}\n{}",
            b.stdout(),
            b.stderr()
        );
        assert!(b.stdout().contains("err= 0"), "{what}: {}", b.stdout());
    }
}

pub fn sizes(pool: &Value) -> Vec<(String, u64)> {
    pool["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_string(),
                v["size_bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// `platter status --volume NAME --json` of the pool server, parsed.
pub fn live(s: &Server, name: &str) -> Value {
    let args = [
        "status",
        "--volume",
        name,
        "--json",
        "--control",
        &s.control(),
    ];
    serde_json::from_str(&ok(&args, "status").stdout).unwrap()
}

/// Waits (20 s at most) until volume `name` of the pool server has a
/// rebuild under way (a spare took the lost subdisk's place).
pub fn wait_rebuilding(s: &Server, name: &str) {
    let start = std::time::Instant::now();
    loop {
        let st = live(s, name);
        if !st["rebuild"].is_null() {
            return;
        }
        assert!(
            start.elapsed().as_secs() < 20,
            "{name}: no rebuild began: {st}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Waits (2 minutes at most) until volume `name` of the pool server has
/// no rebuild under way and every member active.
pub fn wait_rebuilt(s: &Server, name: &str) {
    let start = std::time::Instant::now();
    loop {
        let st = live(s, name);
        let members = st["members"].as_array().unwrap();
        if st["rebuild"].is_null() && members.iter().all(|m| m["state"] == "active") {
            return;
        }
        assert!(start.elapsed().as_secs() < 120, "{name}: not rebuilt: {st}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// A drive's file cut to nothing under a running server, as a pulled
/// disk.
pub fn truncate(dev: &str, drive: &str) {
    let file = Path::new(dev).join(drive);
    std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .unwrap()
        .set_len(0)
        .unwrap();
}

/// The drive of each subdisk of volume `name` (of one plex), in slot
/// order.
pub fn subdisk_drives(dev: &str, name: &str) -> Vec<String> {
    subdisk_drives_of(dev, name, 0)
}

pub fn drive_state(dev: &str, drive: &str) -> String {
    let pool = list_json(dev);
    let d = pool["drives"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == drive);
    d.unwrap_or_else(|| panic!("no drive {drive}: {pool}"))["state"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The drives of plex `p` of volume `name`, in slot order.
pub fn subdisk_drives_of(dev: &str, name: &str, p: usize) -> Vec<String> {
    let pool = list_json(dev);
    let v = pool["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap()
        .clone();
    v["plexes"][p]["subdisks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|sd| sd["drive"].as_str().unwrap().to_string())
        .collect()
}

/// Offline, on pool `tank` at `dev`: a volume for each (name, level,
/// size, drives), its subdisks on the drives named (`--drives`).
pub fn create_volumes(dev: &str, volumes: &[(&str, &str, &str, &str)]) {
    for (name, level, size, drives) in volumes {
        let args = [
            "volume", "create", "tank", name, "--level", level, "--size", size, "--drives", drives,
            dev,
        ];
        ok(&args, &format!("volume create {name}"));
    }
}

/// Every subdisk `list --json` shows of a pool, across its volumes and
/// plexes.
pub fn all_subdisks(pool: &Value) -> Vec<Value> {
    pool["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|v| v["plexes"].as_array().unwrap())
        .flat_map(|p| p["subdisks"].as_array().unwrap())
        .cloned()
        .collect()
}

/// The pool's configuration generation, as `list` says it.
pub fn generation(dev: &str) -> u64 {
    list_json(dev)["generation"].as_u64().unwrap()
}

/// An argument list as the `&str`s `ok` and `refused` take.
pub fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// `platter check` of each array named, through the server: no copy or
/// parity disagrees.
pub fn check_clean(s: &Server, names: &[&str]) {
    for name in names {
        let out = ok(
            &["check", "--volume", name, "--control", &s.control()],
            &format!("check {name}"),
        );
        assert!(
            out.stdout.contains(" 0 mismatched"),
            "{name}: {}",
            out.stdout
        );
    }
}
