//! Issue 19, point 2: `platter sim calibrate` writes a drive model that
//! `advise` and `sweep` load, reads only unless told, refuses what would
//! lose data, and stops cleanly on Ctrl-C or a drive that fails a read
//! (nbdkit's error filter: needs nbdkit, fails under `CI=true` without). The closed loop (parameters
//! recovered within tolerances) is `crates/sim/tests/calibrate.rs`; this
//! suite drives the command a user runs, and the whole path from a
//! running volume to advice in three commands.

mod e2e_support;

use e2e_support::*;
use std::time::{Duration, Instant};

/// Record, calibrate, advise: a volume served with `--record`, a fio job
/// (one sequential reader), the drive model measured from a modelled
/// drive, and the advice from the running volume and that model: a
/// mirror read with the proximity policy, the same advice as from the
/// drive it measured.
#[test]
fn from_a_running_volume_to_advice_in_three_commands() {
    let test = "from_a_running_volume_to_advice_in_three_commands";
    let Some(t) = tools_with_fio_nbd(test, &["fio"]) else {
        return;
    };
    // 1. record (the server started recording; the helper stops it).
    let (s, recording) = recorded_sequential_reader_on_a_mirror(&t, "load.iolog");
    let dir = recording.parent().unwrap().to_path_buf();
    // 2. calibrate: a model of the drive (here a modelled one; a user
    // names /dev/sdX).
    let model = dir.join("disk.parv");
    let cal = run_ok(
        &mut platter(&[
            "sim",
            "calibrate",
            "model:parametric-7200",
            "--out",
            model.to_str().unwrap(),
            "--json",
        ]),
        CMD_TIMEOUT,
        "sim calibrate",
    );
    let figures: serde_json::Value =
        serde_json::from_str(cal.stdout.lines().last().unwrap_or_default()).expect("JSON");
    let rpm = figures["rpm"].as_f64().unwrap();
    assert!((rpm - 7200.0).abs() < 72.0, "{test}: {figures}");
    assert_eq!(figures["write_back"], serde_json::Value::Null, "{test}");
    assert!(model.exists() && model.with_extension("seek").exists());
    // 3. advise from the running volume and the model. (The volume reads
    // round-robin, so there is something to advise.)
    run_ok(
        &mut platter(&["read-policy", "--control", &s.control(), "round-robin"]),
        CMD_TIMEOUT,
        "read-policy",
    );
    let advise = |drive: &str| {
        let out = run_ok(
            &mut platter(&[
                "advise",
                "--json",
                "--control",
                &s.control(),
                "--drive",
                drive,
                "--trace",
                &format!("{},timed=0", recording.display()),
                "--interleaves",
                "64k",
                "--policies",
                "round-robin,load,proximity",
            ]),
            CMD_TIMEOUT,
            "advise",
        );
        let v: serde_json::Value =
            serde_json::from_str(out.stdout.lines().last().unwrap_or_default()).unwrap();
        v
    };
    let calibrated = advise(model.to_str().unwrap());
    assert_eq!(
        calibrated["best"]["level"], "mirror",
        "{test}: {calibrated}"
    );
    assert_eq!(
        calibrated["best"]["policy"], "proximity",
        "{test}: {calibrated}"
    );
    // The drive it measured gives the same advice.
    let truth = advise("parametric-7200");
    for k in ["level", "members", "interleave", "policy"] {
        assert_eq!(calibrated["best"][k], truth["best"][k], "{test}: {k}");
    }
}

/// A file is not a disk: calibrate says so, writes no model, and the file
/// reads as before (it never writes unless told).
#[test]
fn calibrate_reads_only_and_refuses_what_it_must() {
    let test = "calibrate_reads_only_and_refuses_what_it_must";
    let tmp = temp_dir();
    let dir = tmp.path();
    let file = dir.join("data.img");
    let mut rng = Rng::new(19);
    let data = rng.bytes(96 << 20);
    std::fs::write(&file, &data).unwrap();
    let out = dir.join("m.parv");
    let f = file.to_str().unwrap();
    let o = out.to_str().unwrap();
    let r = run(
        &mut platter(&["sim", "calibrate", f, "--out", o]),
        CMD_TIMEOUT,
    );
    assert!(!r.status.success(), "{test}: {}", r.stdout);
    // Every refusal says what calibrate is for. Regression: on a loaded CI
    // machine the file's noisy timings passed for a revolution, the zones
    // refused it ("took no longer: not a disk's sequential rate"), and
    // that message alone did not say it.
    assert!(
        r.stderr.contains("calibrate models"),
        "{test}: {}",
        r.stderr
    );
    assert!(!out.exists(), "{test}: a model written after a failure");
    assert!(
        std::fs::read(&file).unwrap() == data,
        "{test}: the file changed"
    );
    let fifo = dir.join("fifo");
    run_ok(
        std::process::Command::new("mkfifo").arg(&fifo),
        CMD_TIMEOUT,
        "mkfifo",
    );
    let fifo_path = fifo.to_str().unwrap();
    // The model onto the drive itself, a model not named .parv, a
    // budget too small: refused before or without writing.
    for (args, says) in [
        (vec![f, "--out", f], "never writes its model onto it"),
        (vec![f, "--out", &format!("{}.txt", o)], "name it FILE.parv"),
        (
            vec!["model:parametric-7200", "--out", o, "--budget", "2s"],
            "time budget",
        ),
        (vec!["model:nosuchdrive", "--out", o], "nosuchdrive"),
        // A FIFO is no drive: refused at once (an open would wait for a
        // writer forever).
        (vec![fifo_path, "--out", o], "FIFO"),
        (vec![f, "--out", o, "--budget", "soon"], "--budget soon"),
    ] {
        let mut a = vec!["sim", "calibrate"];
        a.extend(args.iter().copied());
        let r = run(&mut platter(&a), CMD_TIMEOUT);
        assert!(!r.status.success(), "{test}: {a:?}");
        assert!(r.stderr.contains(says), "{test}: {a:?}: {}", r.stderr);
        assert!(!out.exists(), "{test}: {a:?} wrote a model");
    }
    assert!(
        std::fs::read(&file).unwrap() == data,
        "{test}: the file changed"
    );
    // A model that cannot be written (its folder is missing): the whole
    // measurement runs, then the error names the file.
    let lost = dir.join("no-such-folder").join("m.parv");
    let r = run(
        &mut platter(&[
            "sim",
            "calibrate",
            "model:parametric-7200",
            "--out",
            lost.to_str().unwrap(),
        ]),
        CMD_TIMEOUT,
    );
    assert!(!r.status.success(), "{test}");
    assert!(r.stderr.contains("no-such-folder"), "{test}: {}", r.stderr);
    // --allow-write on a volume's member: refused, the member untouched.
    let volume = Volume::create(Spec::new("stripe", 2, "64k"), 64 * MIB);
    let member = volume.members[0].clone();
    let before = std::fs::read(&member).unwrap();
    let r = run(
        &mut platter(&["sim", "calibrate", &member, "--out", o, "--allow-write"]),
        CMD_TIMEOUT,
    );
    assert!(!r.status.success(), "{test}");
    assert!(r.stderr.contains("platter label"), "{test}: {}", r.stderr);
    assert!(
        std::fs::read(&member).unwrap() == before,
        "{test}: the member changed"
    );
}

/// Ctrl-C in the middle of a measurement: the command says it stopped and
/// writes no model.
#[test]
fn calibrate_stops_cleanly_on_ctrl_c() {
    let test = "calibrate_stops_cleanly_on_ctrl_c";
    let tmp = temp_dir();
    let out = tmp.path().join("m.parv");
    let mut cmd = platter(&[
        "sim",
        "calibrate",
        "model:parametric-7200",
        "--samples",
        "1024",
        "--out",
        out.to_str().unwrap(),
    ]);
    let mut bg = Background::spawn(&mut cmd, "sim calibrate");
    let deadline = Instant::now() + CMD_TIMEOUT;
    while !bg.stderr().contains("measuring seek times") {
        assert!(bg.is_running(), "{test}: ended early: {}", bg.stderr());
        assert!(
            Instant::now() < deadline,
            "{test}: no seek phase: {}",
            bg.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = bg.pid().to_string();
    run_ok(
        std::process::Command::new("kill").args(["-INT", &pid]),
        CMD_TIMEOUT,
        "kill -INT",
    );
    let status = bg.wait(CMD_TIMEOUT);
    assert!(!status.success(), "{test}");
    assert!(
        bg.stderr().contains("stopped by Ctrl-C; no model written"),
        "{test}: {}",
        bg.stderr()
    );
    assert!(
        !out.exists() && !out.with_extension("seek").exists(),
        "{test}"
    );
}

/// A drive that starts failing reads in the middle of a measurement (an
/// nbdkit export whose error filter fails every read once the test makes
/// its trigger file, after the first phase began): the command fails
/// naming the target and the server's error, and writes no model.
#[test]
fn a_read_that_fails_midway_ends_the_calibration_without_a_model() {
    let test = "a_read_that_fails_midway_ends_the_calibration_without_a_model";
    let tmp = temp_dir();
    let trigger = tmp.path().join("trigger");
    let trigger_param = format!("error-pread-file={}", trigger.display());
    // 20 ms a read: the first phase is still measuring when the trigger
    // is made. (Without the trigger the command fails too, later and
    // for another reason: a memory disk is no rotating drive.)
    let Some(k) = platter_testkit::nbdkit::Nbdkit::start(
        test,
        &tmp.path().join("drive.sock"),
        &["error", "delay"],
        &[
            "memory",
            "size=256M",
            "error=EIO",
            "error-pread-rate=100%",
            &trigger_param,
            "delay-read=20ms",
        ],
    ) else {
        return;
    };
    let uri = k.uri();
    let out = tmp.path().join("m.parv");
    let mut cmd = platter(&["sim", "calibrate", &uri, "--out", out.to_str().unwrap()]);
    let mut bg = Background::spawn(&mut cmd, "sim calibrate");
    let deadline = Instant::now() + CMD_TIMEOUT;
    while !bg.stderr().contains("measuring cache hits") {
        assert!(bg.is_running(), "{test}: ended early: {}", bg.stderr());
        assert!(Instant::now() < deadline, "{test}: {}", bg.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    // A few reads in (each takes 20 ms), the drive goes bad.
    std::thread::sleep(Duration::from_millis(200));
    assert!(bg.is_running(), "{test}: ended early: {}", bg.stderr());
    std::fs::write(&trigger, b"").unwrap();
    let status = bg.wait(CMD_TIMEOUT);
    assert!(!status.success(), "{test}");
    let err = bg.stderr();
    assert!(
        err.contains(&uri) && err.contains("NBD_EIO"),
        "{test}: {err}"
    );
    assert!(
        !out.exists() && !out.with_extension("seek").exists(),
        "{test}: a model written after a failed read"
    );
}
