//! `platter serve --inject MEMBER=SPEC`: refused in one line when the spec
//! or the member is wrong; with a member dying under qemu-io, the data still
//! reads back and the server says the member was marked faulty; with bad
//! sectors on a mirror or RAID-10 copy, or on a RAID-5 or RAID-6 member,
//! qemu-io reads right data, the read error is corrected in place once, and
//! the member stays online.

mod e2e_support;

use std::fs;
use std::os::unix::fs::FileExt;
use std::process::Command;
use std::time::{Duration, Instant};

use e2e_support::*;

fn serve_cmd(v: &Volume, injects: &[String]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_platter"));
    cmd.arg("serve").arg("--socket").arg(v.path().join("sock"));
    for i in injects {
        cmd.arg("--inject").arg(i);
    }
    cmd.args(&v.members)
        .env("RUST_BACKTRACE", "1")
        .env("PLATTER_LOG", "info")
        .env("NO_COLOR", "1");
    cmd
}

/// The command exits non-zero at once with one line on stderr naming
/// `says`, nothing on stdout, and leaves the labels alone.
fn assert_refused_in_one_line(v: &Volume, injects: &[String], says: &str) {
    let out = run(&mut serve_cmd(v, injects), CMD_TIMEOUT);
    let what = format!("serve --inject {injects:?}");
    assert!(
        out.status.code().is_some_and(|c| c != 0),
        "{}",
        out.describe(&what)
    );
    assert!(out.stdout.is_empty(), "{}", out.describe(&what));
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", out.describe(&what));
    assert!(
        lines[0].starts_with("platter: error: --inject") && lines[0].contains(says),
        "{}",
        out.describe(&what)
    );
    assert!(!out.stderr.contains("panicked"));
    assert_eq!(v.state(), "clean", "{what}: labels left alone");
}

#[test]
fn bad_injections_are_refused_in_one_line() {
    let v = Volume::create(Spec::new("raid5", 4, "64k"), 4 * MIB);
    let m1 = &v.members[1];
    for (inject, says) in [
        (format!("{m1}=fial-nth=3"), "unknown key \"fial-nth\""),
        (format!("{m1}=fail-rate=2"), "between 0 and 1"),
        (format!("{m1}=latency=5"), "needs a unit"),
        (format!("{m1}=fail-nth=0"), "numbered from 1"),
        (m1.to_string(), "is not one of the members"),
        (
            format!("{}/elsewhere=fail-nth=1", v.path().display()),
            "is not one of the members",
        ),
        ("m1=fail-nth=1".to_string(), "m1 is not one of the members"),
        (format!("{m1}=bad-range=2M+100"), "multiples of 512"),
        (
            format!("{m1}=bad-range=1G+4k"),
            "ends past the member's end",
        ),
    ] {
        assert_refused_in_one_line(&v, &[inject], says);
    }
    // The same member twice.
    assert_refused_in_one_line(
        &v,
        &[format!("{m1}=fail-nth=1"), format!("{m1}=seed=2")],
        "named twice",
    );
}

/// Waits for the ready banner on the server's stdout.
fn wait_ready(server: &mut Background) {
    let start = Instant::now();
    while !server.stdout().contains("\ntry:") {
        assert!(
            server.is_running(),
            "the server ended early:\n{}",
            server.stderr()
        );
        assert!(
            start.elapsed() < READY_TIMEOUT,
            "no banner:\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn raid5_serves_through_a_member_dying_under_qemu_io() {
    let Some(tools) = tools(
        "raid5_serves_through_a_member_dying_under_qemu_io",
        &["qemu-io"],
    ) else {
        return;
    };
    let v = Volume::create(Spec::new("raid5", 4, "64k"), 8 * MIB);
    let inject = format!("{}=fail-from=50", v.members[1]);
    let mut server = Background::spawn(&mut serve_cmd(&v, &[inject]), "platter serve --inject");
    wait_ready(&mut server);
    let uri = format!(
        "nbd+unix:///{}?socket={}",
        v.name,
        v.path().join("sock").display()
    );
    // 100 patterns of up to 40k at unaligned offsets, one in each 80k of
    // the volume, across interleaves and stripes: enough member I/O that
    // m1 dies part-way through the writes whatever the engine merges.
    let mut rng = Rng::new(7);
    let regions: Vec<(u64, u64, u8)> = (0..100u64)
        .map(|i| {
            let off = i * 80 * KIB + rng.below(40 * KIB);
            let len = 1 + rng.below(40 * KIB);
            (off, len, 1 + (i % 250) as u8)
        })
        .collect();
    let mut write = tools.cmd("qemu-io");
    write.args(["-f", "raw"]);
    for &(off, len, p) in &regions {
        write.args(["-c", &format!("write -P {p:#x} {off} {len}")]);
    }
    write.args(["-c", "flush"]).arg(&uri);
    run_ok(&mut write, CMD_TIMEOUT, "qemu-io write");
    read_back(&tools, &uri, &regions);
    send_signal(server.pid(), "TERM");
    let status = server.wait(STOP_TIMEOUT);
    let log = server.stderr();
    assert!(log.contains("injecting faults"), "{log}");
    let faulty = log
        .lines()
        .find(|l| l.contains("member marked faulty"))
        .unwrap_or_else(|| panic!("no member marked faulty in the log:\n{log}"));
    assert!(
        faulty.contains("injected fault") && faulty.contains(&v.members[1]),
        "{faulty}"
    );
    assert!(!log.contains("panicked"), "{log}");
    assert!(status.success(), "server exit: {status}\n{log}");
    // The member stays out; served again without faults, the volume is
    // degraded and still holds every pattern.
    assert_eq!(v.state(), "degraded");
    let mut again = Background::spawn(&mut serve_cmd(&v, &[]), "platter serve again");
    wait_ready(&mut again);
    read_back(&tools, &uri, &regions);
    send_signal(again.pid(), "TERM");
    let status = again.wait(STOP_TIMEOUT);
    assert!(
        status.success(),
        "second server: {status}\n{}",
        again.stderr()
    );
}

/// Reads every pattern back on a new connection (qemu-io `read -P` prints
/// "Pattern verification failed" and still exits 0, so look).
fn read_back(tools: &Tools, uri: &str, regions: &[(u64, u64, u8)]) {
    let mut read = tools.cmd("qemu-io");
    read.args(["-f", "raw"]);
    for &(off, len, p) in regions {
        read.args(["-c", &format!("read -P {p:#x} {off} {len}")]);
    }
    read.arg(uri);
    let out = run_ok(&mut read, CMD_TIMEOUT, "qemu-io read");
    assert!(
        !out.stdout.contains("verification failed") && !out.stderr.contains("failed"),
        "{}",
        out.describe("qemu-io read")
    );
    assert_eq!(
        out.stdout.matches("read ").count(),
        regions.len(),
        "{}",
        out.describe("qemu-io read")
    );
}

// ---------------------------------------------------------------------------
// Bad sectors on a copy, corrected in place

/// Where member data starts on every member (`platter create`'s layout).
const DATA_OFFSET: u64 = MIB;

/// The pattern byte of the volume's `i`th interleave-sized chunk (never 0
/// and never 0xff, the bytes the test puts under the bad sectors).
fn chunk_pattern(i: u64) -> u8 {
    1 + (i % 250) as u8
}

/// The volume offset that member `slot`'s byte `member_offset` holds, for
/// a mirror or md's "near" RAID-10 with `copies` copies of each chunk laid
/// in consecutive slots, row by row.
fn volume_offset_of(v: &Volume, slot: u64, member_offset: u64) -> u64 {
    let d = member_offset - DATA_OFFSET;
    match v.spec.level {
        "mirror" => d,
        "raid10" => {
            let il = v.interleave_bytes;
            let members = v.spec.members as u64;
            let copies = u64::from(v.spec.copies);
            let (row, within) = (d / il, d % il);
            let chunk = (row * members + slot) / copies;
            chunk * il + within
        }
        "raid5" | "raid6" => {
            // md's default left-symmetric layout: parity rotates down from
            // the last member, data follows it (RAID-6's Q right after P).
            let il = v.interleave_bytes;
            let n = v.spec.members as u64;
            let q = u64::from(v.spec.level == "raid6");
            let (row, within) = (d / il, d % il);
            let p = n - 1 - row % n;
            let i = (slot + 2 * n - p - 1 - q) % n;
            assert!(i < n - 1 - q, "slot {slot} holds parity in row {row}");
            (row * (n - 1 - q) + i) * il + within
        }
        l => panic!("no redundancy on {l}"),
    }
}

/// Lines of the server log that report a corrected read error.
fn corrections(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("read error corrected"))
        .map(str::to_string)
        .collect()
}

/// Waits (briefly) until the log reports `n` corrections; returns them.
fn wait_corrections(s: &Server, n: usize) -> Vec<String> {
    let start = Instant::now();
    loop {
        let c = corrections(&s.log());
        if c.len() >= n || start.elapsed() > Duration::from_secs(5) {
            return c;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// qemu-io `read -P` of every chunk, each twice in a row: under round-robin
/// reads rotate over the copies per request, so with two copies one of the
/// two reads of each chunk goes to the member with the bad sectors.
fn read_every_chunk_twice(t: &Tools, s: &Server, what: &str) {
    let v = &s.volume;
    let il = v.interleave_bytes;
    let cmds: Vec<String> = (0..v.size_bytes / il)
        .flat_map(|i| {
            let c = format!("read -P {:#x} {} {il}", chunk_pattern(i), i * il);
            [c.clone(), c]
        })
        .collect();
    let out = qemu_io(t, s.uri(), &cmds, what);
    assert_eq!(
        out.stdout.matches("read ").count(),
        cmds.len(),
        "{}",
        out.describe(what)
    );
}

fn bad_sectors_are_corrected_in_place(spec: Spec, bad_slot: usize) {
    let test = format!("bad_sectors_are_corrected_in_place {}", spec.label());
    let Some(t) = tools(&test, &["qemu-io"]) else {
        return;
    };
    let copies = matches!(spec.level, "mirror" | "raid10");
    if copies {
        assert_eq!(spec.copies, 2, "the reads rotate over two copies");
    }
    let mut s = Server::start(Volume::create(spec, 8 * MIB));
    let il = s.volume.interleave_bytes;
    assert_eq!(il, 64 * KIB);
    // A pattern per chunk, so that a rewrite in the wrong place shows.
    let writes: Vec<String> = (0..s.volume.size_bytes / il)
        .map(|i| format!("write -P {:#x} {} {il}", chunk_pattern(i), i * il))
        .chain(["flush".to_string()])
        .collect();
    qemu_io(&t, s.uri(), &writes, &format!("{test}: write"));
    s.stop();

    // 16 KiB of bad sectors 8 KiB into the chunk at member byte 2M (1 MiB
    // into the data area), inside one chunk, not aligned to it.
    let member = s.volume.members[bad_slot].clone();
    let (bad_at, bad_len) = (2 * MIB + 8 * KIB, 16 * KIB);
    let v_at = volume_offset_of(&s.volume, bad_slot as u64, bad_at);
    let want = chunk_pattern(v_at / il);
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&member)
        .expect("open the member file");
    let mut held = vec![0u8; bad_len as usize];
    file.read_exact_at(&mut held, bad_at).unwrap();
    assert!(
        held.iter().all(|&b| b == want),
        "{test}: member {bad_slot} byte {bad_at} should hold volume byte {v_at} \
         (pattern {want:#x}); the test's layout arithmetic is off"
    );
    // The sectors' contents are lost too: only a rewrite puts them back.
    file.write_all_at(&vec![0xff; bad_len as usize], bad_at)
        .unwrap();
    file.sync_all().unwrap();

    s.options.inject = vec![format!("{member}=bad-range={bad_at}+{bad_len}")];
    s.start_again();
    assert!(s.log().contains("injecting faults"), "{}", s.log());
    // Files count as spinning, so `auto` reads by proximity and could stay
    // on one copy; round-robin makes every copy serve. (A parity level's
    // chunk has one place: every read of it meets the bad sectors.)
    if copies {
        run_ok(
            Command::new(env!("CARGO_BIN_EXE_platter")).args([
                "read-policy",
                "--control",
                &format!("{}.ctl", s.socket().display()),
                "round-robin",
            ]),
            CMD_TIMEOUT,
            "platter read-policy",
        );
    }
    read_every_chunk_twice(&t, &s, &format!("{test}: read through the bad sectors"));

    // Corrected once: the failed member read (the chunk, which covers the
    // bad sectors whole) was rewritten from the other copy and read back.
    let found = wait_corrections(&s, 1);
    assert_eq!(found.len(), 1, "{test}: one correction:\n{}", s.log());
    let chunk_at = bad_at / il * il;
    assert!(
        found[0].contains(&format!("member={bad_slot}"))
            && found[0].contains(&format!("offset_bytes={chunk_at}"))
            && found[0].contains(&format!("len_bytes={il}"))
            && found[0].contains("member stays online"),
        "{test}: {}",
        found[0]
    );
    assert!(!s.log().contains("member marked faulty"), "{}", s.log());
    let st = live_status(&s);
    for m in st["members"].as_array().expect("members") {
        assert_eq!(m["state"], "active", "{test}: {st}");
    }
    let bad = &st["members"][bad_slot];
    assert_eq!(bad["path"], member.as_str(), "{test}: {st}");
    assert_eq!(st["state"], "clean", "{test}: {st}");

    // Healed: reading everything again corrects nothing more.
    read_every_chunk_twice(&t, &s, &format!("{test}: read again"));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        corrections(&s.log()).len(),
        1,
        "{test}: the healed sectors needed no new correction:\n{}",
        s.log()
    );
    s.stop();

    // The rewrite landed on the member: the whole chunk holds its pattern.
    let mut chunk = vec![0u8; il as usize];
    file.read_exact_at(&mut chunk, chunk_at).unwrap();
    assert!(
        chunk.iter().all(|&b| b == want),
        "{test}: member {bad_slot} bytes {chunk_at}..{} after the correction: \
         first wrong at {:?}",
        chunk_at + il,
        chunk.iter().position(|&b| b != want)
    );
}

#[test]
fn mirror_bad_sectors_are_corrected_in_place() {
    bad_sectors_are_corrected_in_place(Spec::new("mirror", 2, "64k"), 1);
}

#[test]
fn raid10_bad_sectors_are_corrected_in_place() {
    bad_sectors_are_corrected_in_place(Spec::new("raid10", 4, "64k"), 3);
}

/// On parity levels the bad sectors' chunk is rebuilt from the rest of its
/// stripe and rewritten (md's raid5 does so too); it used to cost the
/// member. Slot 1 holds data in the bad sectors' row on both levels.
#[test]
fn raid5_bad_sectors_are_corrected_in_place() {
    bad_sectors_are_corrected_in_place(Spec::new("raid5", 4, "64k"), 1);
}

#[test]
fn raid6_bad_sectors_are_corrected_in_place() {
    bad_sectors_are_corrected_in_place(Spec::new("raid6", 5, "64k"), 1);
}
