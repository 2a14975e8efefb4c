//! The harness shared by the end-to-end tests (`e2e_*.rs`): volumes in
//! temporary directories, a `platter serve` fixture, external commands run
//! with a deadline, tool look-up for skipping, and a seeded PRNG.
//!
//! Every external command runs with a timeout and is killed when it
//! overruns; a failing command is reported with its command line, exit
//! status, stdout and stderr.

#![allow(dead_code)] // each test binary uses a part of the harness

use std::fs;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub mod pool;

use platter_testkit::serve::{collect_into, ServeProcess};
use serde_json::Value;
use tempfile::TempDir;

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;

/// How long the server may take to print its URIs.
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a clean stop may take (flush and label writes included).
pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// The default deadline for one client command.
pub const CMD_TIMEOUT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------
// Tools and privileges

#[allow(unused_imports)] // each test binary uses a part of the harness
pub use platter_testkit::tools::{find_tool, required_tools, tools, Tools};

/// The effective user id, from /proc (no libc in this crate's tests).
pub fn effective_uid() -> Option<u32> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

pub fn is_root() -> bool {
    effective_uid() == Some(0)
}

/// Whether fio was built with its nbd engine (libnbd).
/// The tools `names` (fio among them) when this fio has the nbd engine;
/// otherwise the test is skipped, noting why, or under `CI=true` fails.
pub fn tools_with_fio_nbd(test: &str, names: &[&str]) -> Option<Tools> {
    let t = required_tools(test, names)?;
    if fio_has_nbd(&t) {
        return Some(t);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test}: fio has no nbd engine under CI"
    );
    platter_testkit::skips::skipped(test, "this fio has no nbd engine (`fio --enghelp`)");
    None
}

pub fn fio_has_nbd(fio: &Tools) -> bool {
    let out = run(fio.cmd("fio").arg("--enghelp"), Duration::from_secs(20));
    out.status.success() && out.stdout.split_whitespace().any(|w| w == "nbd")
}

// ---------------------------------------------------------------------------
// Running commands

/// What a finished command said.
pub struct Out {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Out {
    pub fn describe(&self, what: &str) -> String {
        format!(
            "{what}: {} after {:.1?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status,
            self.elapsed,
            tail(&self.stdout, 12_000),
            tail(&self.stderr, 12_000)
        )
    }
}

/// The last `max` bytes of `s` (on a character boundary).
pub fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut at = s.len() - max;
    while !s.is_char_boundary(at) {
        at += 1;
    }
    &s[at..]
}

fn collect<R: Read + Send + 'static>(r: R) -> (Arc<Mutex<Vec<u8>>>, JoinHandle<()>) {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let h = collect_into(r, Arc::clone(&buf));
    (buf, h)
}

fn text(buf: &Arc<Mutex<Vec<u8>>>) -> String {
    String::from_utf8_lossy(&buf.lock().unwrap()).into_owned()
}

/// Runs `cmd` (stdin closed) and waits at most `timeout`; an overrun kills
/// it and panics with what it printed so far.
pub fn run(cmd: &mut Command, timeout: Duration) -> Out {
    try_run(cmd, timeout).unwrap_or_else(|e| panic!("{e}"))
}

/// [`run`] that reports an overrun (or a failure to start) as an error
/// instead of panicking: for clean-up in `Drop`.
pub fn try_run(cmd: &mut Command, timeout: Duration) -> Result<Out, String> {
    let line = format!("{cmd:?}");
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {line}: {e}"))?;
    let (out, out_h) = collect(child.stdout.take().unwrap());
    let (err, err_h) = collect(child.stderr.take().unwrap());
    let deadline = start + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => return Err(format!("{line}: wait: {e}")),
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            // Do not join the readers: a grandchild may hold the pipes.
            return Err(format!(
                "{line}: still running after {timeout:?}; killed\n--- stdout ---\n{}\n--- stderr ---\n{}",
                tail(&text(&out), 12_000),
                tail(&text(&err), 12_000)
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = out_h.join();
    let _ = err_h.join();
    Ok(Out {
        status,
        stdout: text(&out),
        stderr: text(&err),
        elapsed: start.elapsed(),
    })
}

/// [`run`], asserting a zero exit.
pub fn run_ok(cmd: &mut Command, timeout: Duration, what: &str) -> Out {
    let line = format!("{cmd:?}");
    let out = run(cmd, timeout);
    assert!(
        out.status.success(),
        "{}",
        out.describe(&format!("{what}: {line}"))
    );
    out
}

/// A long-running helper process (a load generator, nbdfuse) whose output
/// is collected; killed on drop if still running.
pub struct Background {
    pub what: String,
    child: Option<Child>,
    out: Arc<Mutex<Vec<u8>>>,
    err: Arc<Mutex<Vec<u8>>>,
    /// The threads reading `out` and `err`.
    readers: Vec<JoinHandle<()>>,
}

impl Background {
    pub fn spawn(cmd: &mut Command, what: &str) -> Background {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
        let (out, o) = collect(child.stdout.take().unwrap());
        let (err, e) = collect(child.stderr.take().unwrap());
        Background {
            what: what.to_string(),
            child: Some(child),
            out,
            err,
            readers: vec![o, e],
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => c.try_wait().expect("wait for a child").is_none(),
            None => false,
        }
    }

    pub fn stdout(&self) -> String {
        text(&self.out)
    }

    pub fn stderr(&self) -> String {
        text(&self.err)
    }

    /// Waits for the exit (at most `timeout`, then kills and panics).
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let child = self.child.as_mut().expect("not waited for yet");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = child.try_wait().expect("wait for a child") {
                self.child = None;
                // What it printed last is still in the pipes: the readers
                // end when the pipes close (at most 2 s more, in case a
                // process it started holds them). A server refusing to
                // start exits within microseconds of its last line, and
                // its stderr read empty before.
                let until = Instant::now() + Duration::from_secs(2);
                while self.readers.iter().any(|r| !r.is_finished()) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(5));
                }
                return s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                self.child = None;
                panic!(
                    "{}: still running after {timeout:?}; killed\n--- stdout ---\n{}\n--- stderr ---\n{}",
                    self.what,
                    tail(&self.stdout(), 8000),
                    tail(&self.stderr(), 8000)
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills the process now (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends `signal` ("TERM", "INT", "KILL") to `pid` with kill(1).
pub fn send_signal(pid: u32, signal: &str) {
    let kill = find_tool("kill")
        .or_else(|| {
            ["/bin/kill", "/usr/bin/kill"]
                .map(PathBuf::from)
                .into_iter()
                .find(|p| p.exists())
        })
        .expect("kill(1) to send signals");
    let out = run(
        Command::new(kill)
            .arg(format!("-{signal}"))
            .arg(pid.to_string()),
        Duration::from_secs(10),
    );
    assert!(
        out.status.success(),
        "{}",
        out.describe(&format!("kill -{signal} {pid}"))
    );
}

// ---------------------------------------------------------------------------
// What /proc says of a process (Linux)

/// The fields of `/proc/PID/stat` (or `/proc/PID/task/TID/stat`) after the
/// command name, which may hold spaces: index 0 is field 3 (the state).
fn stat_fields(path: &str) -> Option<Vec<String>> {
    let text = fs::read_to_string(path).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// CPU time `pid` has used (user and system, its ended threads included),
/// in clock ticks of [`CLOCK_TICKS_PER_SECOND`].
pub fn cpu_ticks(pid: u32) -> u64 {
    let f = stat_fields(&format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // utime and stime are fields 14 and 15.
    f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
}

/// The unit of /proc's CPU times (USER_HZ): 100 on Linux whatever the
/// kernel's own tick rate.
pub const CLOCK_TICKS_PER_SECOND: u64 = 100;

/// A `kB` line of `/proc/PID/status` (`VmRSS:`, `VmHWM:`), in bytes.
pub fn proc_status_bytes(pid: u32, key: &str) -> u64 {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    let line = s
        .lines()
        .find(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("no {key} line in /proc/{pid}/status"));
    line.split_whitespace()
        .nth(1)
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("{key} value"))
        * 1024
}

/// The names of `pid`'s threads (`comm`: at most 15 bytes), one per thread.
pub fn thread_names(pid: u32) -> Vec<String> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.filter_map(|t| fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim_end().to_string())
        .collect()
}

/// Context switches of `pid`'s live threads, voluntary and not, summed:
/// how often its threads woke up.
pub fn context_switches(pid: u32) -> u64 {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    dir.filter_map(|t| fs::read_to_string(t.ok()?.path().join("status")).ok())
        .flat_map(|s| {
            s.lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<u64>>()
        })
        .sum()
}

// ---------------------------------------------------------------------------
// Files and data

/// A temporary directory under the target directory (not /tmp, often
/// tmpfs); the name is short because a Unix socket path is limited to 107
/// bytes.
pub fn temp_dir() -> TempDir {
    platter_testkit::temp_dir!("e2e-")
}

pub use platter_testkit::Rng;

/// FNV-1a, 64 bits: a file's fingerprint.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Writes `len` bytes of seeded random data to `path`, except that every
/// MiB whose index is 3 mod 7 (and 64 KiB starting 5000 bytes into each MiB
/// that is 5 mod 11) is zeros, so clients that detect zeros send
/// write-zeroes requests too.
pub fn write_random_image(path: &Path, len: u64, seed: u64) {
    let f = fs::File::create(path).expect("create an image");
    f.set_len(len).expect("size the image");
    let mut rng = Rng::new(seed);
    let mut buf = vec![0u8; MIB as usize];
    let mut at = 0u64;
    while at < len {
        let mib = at / MIB;
        let n = (len - at).min(MIB) as usize;
        if mib % 7 == 3 {
            at += n as u64; // left as a hole: reads as zeros
            continue;
        }
        rng.fill(&mut buf[..n]);
        if mib % 11 == 5 && n > 5000 + 64 * 1024 {
            buf[5000..5000 + 64 * 1024].fill(0);
        }
        f.write_all_at(&buf[..n], at).expect("write the image");
        at += n as u64;
    }
    f.sync_all().ok();
}

/// A 256 MiB random image (with zero runs), made once per test binary and
/// kept under the target directory between runs (its content depends only
/// on the seed).
pub fn image_256m() -> &'static Path {
    static IMAGE: OnceLock<PathBuf> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let path = dir.join("e2e-image-256M-v1.raw");
        if fs::metadata(&path).map(|m| m.len()).ok() == Some(256 * MIB) {
            return path;
        }
        let tmp = dir.join(format!("e2e-image-256M-v1.raw.{}", std::process::id()));
        write_random_image(&tmp, 256 * MIB, 0x5eed_0256);
        fs::rename(&tmp, &path).expect("put the image in place");
        path
    })
}

/// Parses a size with the CLI's units: `126s`, `64k`, `1M`, `2G`, bytes.
pub fn parse_size(s: &str) -> u64 {
    let (num, mult) = match s.chars().last().expect("a size") {
        's' => (&s[..s.len() - 1], 512),
        'k' | 'K' => (&s[..s.len() - 1], KIB),
        'M' | 'm' => (&s[..s.len() - 1], MIB),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().expect("a number") * mult
}

// ---------------------------------------------------------------------------
// Volumes

/// A level at a width and interleave.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub level: &'static str,
    pub members: usize,
    /// raid10 only.
    pub copies: u32,
    pub interleave: &'static str,
}

impl Spec {
    pub const fn new(level: &'static str, members: usize, interleave: &'static str) -> Spec {
        Spec {
            level,
            members,
            copies: 2,
            interleave,
        }
    }

    /// `raid5-4-126s`, `raid10-3x2-64k`.
    pub fn label(&self) -> String {
        if self.level == "raid10" {
            format!(
                "{}-{}x{}-{}",
                self.level, self.members, self.copies, self.interleave
            )
        } else {
            format!("{}-{}-{}", self.level, self.members, self.interleave)
        }
    }

    pub fn interleave_bytes(&self) -> u64 {
        parse_size(self.interleave)
    }

    /// Volume bytes per member byte, as (numerator, denominator).
    fn data_ratio(&self) -> (u64, u64) {
        let n = self.members as u64;
        match self.level {
            "concat" | "stripe" => (n, 1),
            "mirror" => (1, 1),
            "raid10" => (n, u64::from(self.copies)),
            "raid5" => (n - 1, 1),
            "raid6" => (n - 2, 1),
            l => panic!("unknown level {l}"),
        }
    }

    /// A member size (whole MiB) that gives a volume of at least `bytes`.
    pub fn member_size_for(&self, bytes: u64) -> u64 {
        let (num, den) = self.data_ratio();
        let il = self.interleave_bytes();
        let data = (bytes * den).div_ceil(num) + 2 * il;
        (data + MIB).div_ceil(MIB) * MIB
    }
}

/// The room `platter create` leaves before the data of a member of
/// `member_bytes` without `--reserve` (docs/on-disk-format.md): md's
/// headroom, 128 MiB halved while more than about 0.1% of the member (not
/// below 64 KiB), and 132 KiB for the label and bitmap, in whole MiBs, at
/// least 1 MiB. Written from the document, not the code, as an oracle.
pub fn md_reserve_bytes(member_bytes: u64) -> u64 {
    let mut headroom = 128 * MIB;
    while headroom * 1024 > member_bytes && headroom > 64 * 1024 {
        headroom /= 2;
    }
    ((headroom + 132 * 1024).div_ceil(MIB) * MIB).max(MIB)
}

/// A volume's member files in a temporary directory, and what
/// `platter status --json` says of its shape.
pub struct Volume {
    pub spec: Spec,
    pub name: String,
    pub members: Vec<String>,
    pub size_bytes: u64,
    /// What each member file was created with (`--member-size`).
    pub member_size_bytes: u64,
    pub interleave_bytes: u64,
    pub stripe_data_bytes: u64,
    /// Per slot: data bytes the volume uses (concat member boundaries).
    pub member_used_bytes: Vec<u64>,
    pub dir: TempDir,
}

/// The paths of `n` members `m0`, `m1`, ... in `dir`.
pub fn member_paths(dir: &Path, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| dir.join(format!("m{i}")).to_str().unwrap().to_string())
        .collect()
}

/// The degraded assemblies a volume of `spec` survives: each member left
/// out, and for raid6 each pair as well.
pub fn degraded_assemblies(spec: &Spec) -> Vec<Vec<usize>> {
    let n = spec.members;
    let mut leave_outs: Vec<Vec<usize>> = (0..n).map(|k| vec![k]).collect();
    if spec.level == "raid6" {
        for a in 0..n {
            for b in a + 1..n {
                leave_outs.push(vec![a, b]);
            }
        }
    }
    leave_outs
}

impl Volume {
    /// Creates a volume of `spec` of at least `min_bytes` (sparse members).
    pub fn create(spec: Spec, min_bytes: u64) -> Volume {
        Volume::create_in(spec, min_bytes, temp_dir())
    }

    /// [`Volume::create`] with the members (and the socket) in `dir`.
    pub fn create_in(spec: Spec, min_bytes: u64, dir: TempDir) -> Volume {
        Volume::create_with(spec, min_bytes, dir, &[])
    }

    /// [`Volume::create_in`] with more `platter create` options. With
    /// `--checksums`, members are 1 MiB larger (the checksum area), with
    /// `--consistency-policy ppl` 4 MiB (the log), with `--reserve NM`
    /// N - 1 MiB.
    pub fn create_with(spec: Spec, min_bytes: u64, dir: TempDir, extra: &[&str]) -> Volume {
        let members = member_paths(dir.path(), spec.members);
        let checksum_area = if extra.contains(&"--checksums") {
            MIB
        } else {
            0
        };
        // `--consistency-policy ppl`: the log's area (4 MiB at these
        // interleaves).
        let log_area = if extra
            .windows(2)
            .any(|w| w == ["--consistency-policy", "ppl"])
        {
            4 * MIB
        } else {
            0
        };
        let base = spec.member_size_for(min_bytes) + checksum_area + log_area;
        // `--reserve NM`: the room before the data past the MiB that
        // `member_size_for` allows; without it, md's rule for the member.
        let reserve_extra = extra
            .windows(2)
            .find(|w| w[0] == "--reserve")
            .and_then(|w| w[1].strip_suffix('M')?.parse::<u64>().ok())
            .map_or_else(
                || {
                    // The reserve grows with the member it is for: settle.
                    let mut e = 0;
                    for _ in 0..4 {
                        e = md_reserve_bytes(base + e) - MIB;
                    }
                    e
                },
                |m| m.saturating_sub(1) * MIB,
            );
        let member_size_bytes = base + reserve_extra;
        let member_size = member_size_bytes.to_string();
        let mut args = vec!["--member-size", member_size.as_str()];
        args.extend(extra);
        let v = Volume::create_on(spec, members, member_size_bytes, dir, &args);
        assert!(
            v.size_bytes >= min_bytes,
            "{}: volume of {} bytes, wanted at least {min_bytes}",
            v.spec.label(),
            v.size_bytes
        );
        v
    }

    /// A volume of `spec` over `members` as they are (files that exist,
    /// nbd:// URIs), each `member_size_bytes` long, with more `platter
    /// create` options; `dir` holds the socket.
    pub fn create_on(
        spec: Spec,
        members: Vec<String>,
        member_size_bytes: u64,
        dir: TempDir,
        extra: &[&str],
    ) -> Volume {
        let name = format!("v-{}", spec.label());
        let copies = spec.copies.to_string();
        let mut args = vec![
            "create",
            "--level",
            spec.level,
            "--interleave",
            spec.interleave,
            "--name",
            &name,
        ];
        if spec.level == "raid10" {
            args.extend(["--layout", "near", "--copies", &copies]);
        }
        args.extend(extra);
        args.extend(members.iter().map(String::as_str));
        run_ok(
            Command::new(env!("CARGO_BIN_EXE_platter")).args(&args),
            CMD_TIMEOUT,
            &format!("create {}", spec.label()),
        );
        let mut v = Volume {
            spec,
            name,
            members,
            size_bytes: 0,
            member_size_bytes,
            interleave_bytes: 0,
            stripe_data_bytes: 0,
            member_used_bytes: Vec::new(),
            dir,
        };
        let s = v.status();
        v.size_bytes = s["size_bytes"].as_u64().expect("size_bytes");
        v.interleave_bytes = s["interleave_bytes"].as_u64().expect("interleave_bytes");
        v.stripe_data_bytes = s["stripe_data_bytes"].as_u64().expect("stripe_data_bytes");
        v.member_used_bytes = s["members"]
            .as_array()
            .expect("members")
            .iter()
            .map(|m| m["used_bytes"].as_u64().expect("used_bytes"))
            .collect();
        assert_eq!(
            v.interleave_bytes,
            spec.interleave_bytes(),
            "{}",
            spec.label()
        );
        assert_eq!(
            v.state(),
            "clean",
            "{}: a new volume is clean",
            spec.label()
        );
        v
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Bytes the member files have allocated (they start sparse).
    pub fn allocated_bytes(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        self.members
            .iter()
            .map(|m| fs::metadata(m).expect("a member").blocks() * 512)
            .sum()
    }

    /// `platter status --json` of every member.
    pub fn status(&self) -> Value {
        let out = run_ok(
            Command::new(env!("CARGO_BIN_EXE_platter"))
                .args(["status", "--json"])
                .args(&self.members),
            CMD_TIMEOUT,
            &format!("status of {}", self.spec.label()),
        );
        serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("status --json: {e} in\n{}", out.stdout))
    }

    /// The volume's `"state"`: clean, dirty, degraded, failed.
    pub fn state(&self) -> String {
        self.status()["state"]
            .as_str()
            .expect("state is a string")
            .to_string()
    }
}

// ---------------------------------------------------------------------------
// The server

/// How to run `platter serve`.
/// `qemu-img compare` of the raw images `a` and `b` (files or NBD URIs):
/// asserts exit 0 and "Images are identical".
pub fn assert_images_identical(
    t: &Tools,
    a: impl AsRef<std::ffi::OsStr>,
    b: impl AsRef<std::ffi::OsStr>,
    what: &str,
) {
    let out = run_ok(
        t.cmd("qemu-img")
            .args(["compare", "-f", "raw", "-F", "raw"])
            .arg(a)
            .arg(b),
        CMD_TIMEOUT,
        what,
    );
    assert!(
        out.stdout.contains("Images are identical"),
        "{}",
        out.stdout
    );
}

/// `qemu-img convert` of the volume `s` serves into `whole.raw` beside its
/// members; answers the file.
pub fn save_whole_volume(t: &Tools, s: &Server, test: &str) -> PathBuf {
    let whole = s.volume.path().join("whole.raw");
    run_ok(
        t.cmd("qemu-img")
            .args(["convert", "-f", "raw", "-O", "raw"])
            .arg(s.uri())
            .arg(&whole),
        CMD_TIMEOUT,
        &format!("{test}: read the whole volume"),
    );
    whole
}

/// `platter ARGS`, to run with [`run`] or [`run_ok`].
pub fn platter(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_platter"));
    // A server started this way registers with the tests' servers, not
    // among the host's volumes.
    c.env(
        platter_testkit::serve::RUN_DIR_ENV,
        platter_testkit::serve::test_run_dir(),
    );
    c.args(args);
    c
}

/// `platter status --json --control` of a running server, parsed.
pub fn live_status(s: &Server) -> Value {
    s.live("status")
}

/// `--inject` arguments giving every member of `volume` the same `spec`.
pub fn inject_every_member(volume: &Volume, spec: &str) -> Vec<String> {
    volume
        .members
        .iter()
        .map(|m| format!("{m}={spec}"))
        .collect()
}

#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    pub read_only: bool,
    /// Members to leave out (by index into `Volume::members`): a degraded
    /// assembly.
    pub leave_out: Vec<usize>,
    pub threads: Option<usize>,
    /// `--listen HOST:PORT` as well as the socket.
    pub listen: Option<String>,
    /// `--inject MEMBER=SPEC` arguments, as given.
    pub inject: Vec<String>,
    /// More arguments for `platter serve` (before the members).
    pub extra_args: Vec<String>,
    /// Arguments given instead of the members (`--scan DIR --name NAME`).
    pub instead_of_members: Option<Vec<String>>,
    /// Environment variables set for the server (and what it runs).
    pub env: Vec<(String, String)>,
}

/// `platter serve --socket DIR/sock MEMBER...` over a [`Volume`]; killed on
/// drop if still running (and its log shown if the test is failing).
pub struct Server {
    pub volume: Volume,
    pub options: ServeOptions,
    socket: PathBuf,
    uri: String,
    uris: Vec<String>,
    process: Option<ServeProcess>,
    log: Arc<Mutex<Vec<u8>>>,
    stdout: Arc<Mutex<Vec<String>>>,
    starts: u32,
}

impl Server {
    pub fn start(volume: Volume) -> Server {
        Server::start_with(volume, ServeOptions::default())
    }

    pub fn start_with(volume: Volume, options: ServeOptions) -> Server {
        let socket = volume.path().join("sock");
        let mut s = Server {
            volume,
            options,
            socket,
            uri: String::new(),
            uris: Vec::new(),
            process: None,
            log: Arc::new(Mutex::new(Vec::new())),
            stdout: Arc::new(Mutex::new(Vec::new())),
            starts: 0,
        };
        s.launch();
        s
    }

    pub fn label(&self) -> String {
        self.volume.spec.label()
    }

    /// `nbd+unix:///NAME?socket=PATH`, as the server printed it.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// Every URI the banner listed (the Unix socket's first).
    pub fn uris(&self) -> &[String] {
        &self.uris
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The control socket: the NBD socket's path plus `.ctl`.
    pub fn control(&self) -> String {
        format!("{}.ctl", self.socket.display())
    }

    /// `platter CMD --json --control ...` (status, check, repair), parsed.
    pub fn live(&self, cmd: &str) -> Value {
        let out = run_ok(
            Command::new(env!("CARGO_BIN_EXE_platter")).args([
                cmd,
                "--json",
                "--control",
                &self.control(),
            ]),
            CMD_TIMEOUT,
            &format!("platter {cmd} --control"),
        );
        serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("platter {cmd} --json: {e} in\n{}", out.stdout))
    }

    /// Each slot's state as the running server reports it.
    pub fn member_states(&self) -> Vec<String> {
        self.live("status")["members"]
            .as_array()
            .expect("members")
            .iter()
            .map(|m| m["state"].as_str().expect("a state").to_string())
            .collect()
    }

    pub fn pid(&self) -> u32 {
        self.process.as_ref().expect("server running").pid()
    }

    /// The server's stdout lines so far (the ready banner).
    pub fn stdout_lines(&self) -> Vec<String> {
        self.stdout.lock().unwrap().clone()
    }

    /// The server's stderr so far (its log).
    pub fn log(&self) -> String {
        text(&self.log)
    }

    pub fn is_running(&mut self) -> bool {
        match &mut self.process {
            Some(p) => p.is_running(),
            None => false,
        }
    }

    fn launch(&mut self) {
        assert!(self.process.is_none(), "server already running");
        self.starts += 1;
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_platter"));
        cmd.arg("serve").arg("--socket").arg(&self.socket);
        if self.options.read_only {
            cmd.arg("--read-only");
        }
        if let Some(l) = &self.options.listen {
            cmd.arg("--listen").arg(l);
        }
        if let Some(t) = self.options.threads {
            cmd.arg("--threads").arg(t.to_string());
        }
        for i in &self.options.inject {
            cmd.arg("--inject").arg(i);
        }
        cmd.args(&self.options.extra_args);
        // Members left out on purpose: a degraded start is asked for.
        if !self.options.leave_out.is_empty() {
            cmd.arg("--run");
        }
        cmd.envs(self.options.env.iter().map(|(k, v)| (k, v)));
        if let Some(args) = &self.options.instead_of_members {
            cmd.args(args);
        } else {
            for (i, m) in self.volume.members.iter().enumerate() {
                if !self.options.leave_out.contains(&i) {
                    cmd.arg(m);
                }
            }
        }
        let line = ServeProcess::prepare(&mut cmd);
        // The log of every run, one after another.
        self.log
            .lock()
            .unwrap()
            .extend_from_slice(format!("=== start {}: {line}\n", self.starts).as_bytes());
        self.process = Some(ServeProcess::spawn(
            &mut cmd,
            Arc::clone(&self.log),
            Arc::clone(&self.stdout),
        ));
        (self.uri, self.uris) = self.wait_ready(&line);
    }

    /// Reads the ready banner: `serving '...`, the URIs, then `try:`.
    fn wait_ready(&mut self, line: &str) -> (String, Vec<String>) {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut serving = false;
        let mut uris = Vec::new();
        loop {
            let next = self.process.as_ref().unwrap().next_line(deadline);
            match next {
                Ok(l) if l.starts_with("serving '") => {
                    assert!(
                        l.starts_with(&format!("serving '{}'", self.volume.name)),
                        "{}: banner names another volume: {l}",
                        self.label()
                    );
                    serving = true;
                }
                Ok(l) if serving && l == "try:" => break,
                Ok(l) if serving && l.starts_with("  ") => uris.push(l.trim().to_string()),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    self.process.as_mut().unwrap().kill();
                    panic!(
                        "{}: no ready banner within {READY_TIMEOUT:?} from {line}\nstdout: {:?}\nlog:\n{}",
                        self.label(),
                        self.stdout.lock().unwrap(),
                        self.log()
                    );
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.process.take().unwrap().wait_exit(STOP_TIMEOUT);
                    panic!(
                        "{}: server ended before it was ready ({status:?}): {line}\nstdout: {:?}\nlog:\n{}",
                        self.label(),
                        self.stdout.lock().unwrap(),
                        self.log()
                    );
                }
            }
        }
        let want = format!(
            "nbd+unix:///{}?socket={}",
            self.volume.name,
            self.socket.display()
        );
        assert!(
            uris.contains(&want),
            "{}: the banner lists {uris:?}, not {want}",
            self.label()
        );
        (want, uris)
    }

    /// Sends `signal` and waits for the exit; asserts exit status 0, no
    /// panic in the log, no ERROR line, and the socket removed. Returns how
    /// long it took.
    pub fn stop_with(&mut self, signal: &str) -> Duration {
        self.stop_expecting_errors(signal, &[])
    }

    /// [`Server::stop_with`] for a run that logs errors on purpose (a
    /// member failed by a test): an ERROR line is allowed if it contains
    /// one of `expected`.
    pub fn stop_expecting_errors(&mut self, signal: &str, expected: &[&str]) -> Duration {
        let process = self.process.as_mut().expect("server running");
        let stopped = process.stop(signal, STOP_TIMEOUT);
        self.process = None;
        let Some((status, took)) = stopped else {
            panic!(
                "{}: still running {STOP_TIMEOUT:?} after SIG{signal}; killed. Log:\n{}",
                self.label(),
                tail(&self.log(), 20_000)
            );
        };
        // (The launcher has let the log reader catch the last lines.)
        let log = self.log();
        assert!(
            status.success(),
            "{}: SIG{signal} ended the server with {status}; log:\n{}",
            self.label(),
            tail(&log, 20_000)
        );
        assert!(
            !log.contains("panicked"),
            "{}: the server panicked; log:\n{}",
            self.label(),
            tail(&log, 20_000)
        );
        assert!(
            !log.lines()
                .any(|l| l.contains(" ERROR ") && !expected.iter().any(|e| l.contains(e))),
            "{}: the server logged errors:\n{}",
            self.label(),
            tail(&log, 20_000)
        );
        assert!(
            !self.socket.exists(),
            "{}: the socket {} is left behind after a clean stop",
            self.label(),
            self.socket.display()
        );
        took
    }

    /// SIGKILL: a crash. The socket and "dirty" labels stay behind.
    pub fn crash(&mut self) {
        let mut process = self.process.take().expect("server running");
        let status = process.kill().expect("wait for the server");
        assert!(!status.success(), "{}: SIGKILL gave {status}", self.label());
    }

    /// SIGTERM, exit 0, and (unless read-only or degraded) the labels say
    /// "clean".
    pub fn stop(&mut self) -> Duration {
        let took = self.stop_with("TERM");
        if !self.options.read_only && self.options.leave_out.is_empty() {
            assert_eq!(
                self.volume.state(),
                "clean",
                "{}: state after a clean stop",
                self.label()
            );
        }
        took
    }

    /// Starts the server again on the same members (after [`stop`]).
    pub fn start_again(&mut self) {
        self.launch();
        // (With members left out, status says "degraded" whatever the label.)
        if !self.options.read_only && self.options.leave_out.is_empty() {
            assert_eq!(
                self.volume.state(),
                "dirty",
                "{}: labels say dirty while served",
                self.label()
            );
        }
    }

    /// Starts the server again without checking what the labels say (for a
    /// volume that is served degraded on purpose, with every member given).
    pub fn start_again_unchecked(&mut self) {
        self.launch();
    }

    /// Starts the server again (after [`stop`]) read-only with the members
    /// `leave_out` left out: a degraded assembly.
    pub fn start_again_degraded_read_only(&mut self, leave_out: &[usize]) {
        self.options = ServeOptions {
            read_only: true,
            leave_out: leave_out.to_vec(),
            ..ServeOptions::default()
        };
        self.start_again();
    }

    /// A clean stop, then a start.
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill();
        }
        if std::thread::panicking() {
            eprintln!(
                "--- log of the server for {} ---\n{}",
                self.label(),
                tail(&self.log(), 20_000)
            );
        }
    }
}

/// `qemu-io -f raw URI -c ...` with the given commands; asserts exit 0 and
/// that no check failed (qemu-io prints "Pattern verification failed" and
/// "... failed: ..." for errors, and its exit status alone is not trusted).
pub fn qemu_io(t: &Tools, uri: &str, cmds: &[String], what: &str) -> Out {
    qemu_io_with(t, &[], uri, cmds, what)
}

/// [`qemu_io`] with extra options (`-r` for a read-only open).
pub fn qemu_io_with(t: &Tools, opts: &[&str], uri: &str, cmds: &[String], what: &str) -> Out {
    let mut cmd = t.cmd("qemu-io");
    cmd.args(opts).args(["-f", "raw", uri]);
    for c in cmds {
        cmd.arg("-c").arg(c);
    }
    let out = run(&mut cmd, CMD_TIMEOUT);
    let d = || out.describe(&format!("{what} ({} commands)", cmds.len()));
    assert!(out.status.success(), "{}", d());
    assert!(
        !out.stdout.contains("Pattern verification failed"),
        "{}",
        d()
    );
    assert!(!out.stdout.contains("failed"), "{}", d());
    assert!(!out.stderr.contains("failed"), "{}", d());
    out
}

/// The sha256 of everything the volume at `uri` holds, read with nbdcopy.
pub fn volume_sha256(t: &Tools, uri: &str, what: &str) -> String {
    let mut copy = t.cmd("nbdcopy");
    copy.arg(uri).arg("-").stdout(Stdio::piped());
    let mut child = copy.spawn().expect("nbdcopy runs");
    let out = t
        .cmd("sha256sum")
        .stdin(child.stdout.take().expect("nbdcopy stdout"))
        .output()
        .expect("sha256sum runs");
    assert!(
        child.wait().expect("nbdcopy ends").success(),
        "{what}: nbdcopy failed"
    );
    assert!(out.status.success(), "{what}: sha256sum failed");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .expect("a digest")
        .to_string()
}

/// Whether `a` and `b` name the same text, ignoring trailing spaces.
pub fn same_lines(a: &str, b: &str) -> bool {
    a.lines()
        .map(str::trim_end)
        .eq(b.lines().map(str::trim_end))
}

/// `losetup --find --show FILE`.
pub struct Loop<'t> {
    t: &'t Tools,
    pub dev: String,
    attached: bool,
}

impl<'t> Loop<'t> {
    pub fn attach(t: &'t Tools, file: &Path) -> Loop<'t> {
        let out = run_ok(
            t.cmd("losetup").args(["--find", "--show"]).arg(file),
            CMD_TIMEOUT,
            "losetup --find --show",
        );
        let dev = out.stdout.trim().to_string();
        assert!(dev.starts_with("/dev/loop"), "losetup said {dev:?}");
        Loop {
            t,
            dev,
            attached: true,
        }
    }

    pub fn detach(mut self) {
        run_ok(
            self.t.cmd("losetup").arg("-d").arg(&self.dev),
            CMD_TIMEOUT,
            "losetup -d",
        );
        self.attached = false;
        self.wait_released();
    }

    /// `losetup -d` returns before the kernel lets go of the backing file
    /// (the release runs when the device's last opener closes, from a work
    /// item), so a FUSE mount under it can still be busy for a moment: an
    /// unmount right after failed in CI with "Device or resource busy".
    fn wait_released(&self) {
        let backing = Path::new("/sys/block")
            .join(self.dev.trim_start_matches("/dev/"))
            .join("loop/backing_file");
        let deadline = Instant::now() + Duration::from_secs(20);
        while backing.exists() {
            assert!(
                Instant::now() < deadline,
                "{} still holds its file 20 s after losetup -d",
                self.dev
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Loop<'_> {
    fn drop(&mut self) {
        if self.attached {
            let _ = try_run(
                self.t.cmd("losetup").arg("-d").arg(&self.dev),
                Duration::from_secs(30),
            );
        }
    }
}

/// A volume of `spec` served with `--record DIR/name`: the server, and the
/// recording's path.
pub fn recording_from_the_start(spec: Spec, min_bytes: u64, name: &str) -> (Server, PathBuf) {
    let volume = Volume::create(spec, min_bytes);
    let recording = volume.path().join(name);
    let s = Server::start_with(
        volume,
        ServeOptions {
            extra_args: vec!["--record".into(), recording.display().to_string()],
            ..ServeOptions::default()
        },
    );
    (s, recording)
}

/// A 2-way mirror served with `--record DIR/name`, one fio reader through
/// it (64 KiB sequential reads, queue depth 1, 32 MiB), the recording
/// stopped: the server and the recording's path. The load whose answer
/// is known (the proximity read policy), for the advice tests.
pub fn recorded_sequential_reader_on_a_mirror(t: &Tools, name: &str) -> (Server, PathBuf) {
    let (s, recording) = recording_from_the_start(Spec::new("mirror", 2, "64k"), 48 * MIB, name);
    let mut fio = t.cmd("fio");
    fio.args([
        "--name=seq",
        "--ioengine=nbd",
        "--rw=read",
        "--bs=64k",
        "--iodepth=1",
        "--size=32M",
    ])
    .arg(format!("--uri={}", s.uri()));
    run_ok(&mut fio, CMD_TIMEOUT, "fio");
    run_ok(
        &mut platter(&["record", "--control", &s.control(), "stop"]),
        CMD_TIMEOUT,
        "record stop",
    );
    (s, recording)
}
