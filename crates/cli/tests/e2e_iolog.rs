//! Issue 7, point 3: the simulator's workloads against a real volume.
//! `platter sim iolog` writes a workload's requests as fio iologs, one per
//! process; the fio command it prints replays them through fio's nbd
//! engine against a served RAID-5 volume. fio must report, per job, as
//! many reads and writes (and bytes) as that job's iolog holds, and no
//! error; afterwards `platter check` finds parity consistent everywhere.

mod e2e_support;

use e2e_support::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// (reads, writes, read bytes, written bytes) of an iolog, counted from
/// its lines.
fn iolog_counts(path: &Path) -> (u64, u64, u64, u64) {
    let text = std::fs::read_to_string(path).expect("read the iolog");
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("fio version 2 iolog"),
        "{}",
        path.display()
    );
    let mut c = (0, 0, 0, 0);
    for l in lines {
        let f: Vec<&str> = l.split_whitespace().collect();
        let len = || f[3].parse::<u64>().expect("a length");
        match f[1] {
            "read" => {
                c.0 += 1;
                c.2 += len();
            }
            "write" => {
                c.1 += 1;
                c.3 += len();
            }
            "add" | "open" | "close" => {}
            other => panic!("{}: unexpected action {other}", path.display()),
        }
    }
    c
}

/// Writes the iologs of `workload` for the served volume, runs the printed
/// fio command and checks fio's counts against the iologs.
fn replay(t: &Tools, s: &Server, workload: &str, expect_jobs: usize) {
    let what = format!("iolog {workload} on {}", s.label());
    let dir = temp_dir();
    let out_dir = dir.path().join("iolog");
    let size = s.volume.size_bytes.to_string();
    let out = run_ok(
        &mut platter(&[
            "sim",
            "iolog",
            "--workload",
            workload,
            "--size",
            &size,
            "--out",
            out_dir.to_str().unwrap(),
            "--uri",
            s.uri(),
        ]),
        CMD_TIMEOUT,
        &what,
    );
    eprintln!("{what}:\n{}{}", out.stderr, out.stdout);
    let json_path = dir.path().join("fio.json");
    // The printed command, as a shell runs it, with fio's JSON report to a
    // file (the nbd engine prints to stdout too).
    let command = format!(
        "{} --output-format=json --output={}",
        out.stdout.trim_end(),
        json_path.display()
    );
    let fio = t.cmd("fio");
    let fio_dir = Path::new(fio.get_program())
        .parent()
        .expect("fio's folder")
        .to_owned();
    let path = std::env::join_paths(std::iter::once(fio_dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    run_ok(
        Command::new("sh").arg("-c").arg(&command).env("PATH", path),
        CMD_TIMEOUT,
        &format!("{what}: fio"),
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).expect("fio's report"))
            .expect("fio's JSON report");
    let jobs = report["jobs"].as_array().expect("jobs");
    assert_eq!(jobs.len(), expect_jobs, "{what}: {report}");
    let mut total = (0, 0);
    for job in jobs {
        let name = job["jobname"].as_str().expect("jobname");
        let iolog = out_dir.join(format!("{name}.iolog"));
        let (reads, writes, read_bytes, write_bytes) = iolog_counts(&iolog);
        let got = (
            job["read"]["total_ios"].as_u64().unwrap(),
            job["write"]["total_ios"].as_u64().unwrap(),
            job["read"]["io_bytes"].as_u64().unwrap(),
            job["write"]["io_bytes"].as_u64().unwrap(),
        );
        assert_eq!(
            got,
            (reads, writes, read_bytes, write_bytes),
            "{what}: job {name}: fio's (reads, writes, read bytes, written bytes) against the iolog's"
        );
        assert_eq!(job["error"], 0, "{what}: job {name}: {job}");
        total.0 += reads;
        total.1 += writes;
    }
    eprintln!(
        "{what}: fio replayed {} reads and {} writes in {} jobs",
        total.0,
        total.1,
        jobs.len()
    );
}

#[test]
fn simulator_workloads_replay_against_a_served_raid5() {
    let test = "simulator_workloads_replay_against_a_served_raid5";
    let Some(t) = tools(test, &["fio"]) else {
        return;
    };
    if !fio_has_nbd(&t) {
        platter_testkit::skips::skipped(test, "fio has no nbd engine");
        return;
    }
    let mut s = Server::start(Volume::create(Spec::new("raid5", 4, "64k"), 64 * MIB));
    replay(&t, &s, "raidtest:p=4,n=500", 4);
    replay(&t, &s, "dd:rw=write,bs=64k,total=8M", 1);
    let report = run_ok(
        &mut platter(&[
            "check",
            "--json",
            "--control",
            &format!("{}.ctl", s.socket().display()),
        ]),
        CMD_TIMEOUT,
        "check",
    );
    let report: Value = serde_json::from_str(&report.stdout).expect("check's JSON");
    assert_eq!(report["mismatched_stripes"], 0, "{report}");
    assert_eq!(report["unchecked_stripes"], 0, "{report}");
    assert!(report["stripes"].as_u64().unwrap() > 0, "{report}");
    s.stop();
}
