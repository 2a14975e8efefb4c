//! Commands that talk to a running server through its control socket.

use crate::error::{CliError, Result};
use crate::out::outln;
use clap::Args;
use platter_core::units::{format_size, parse_size};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// How often `--wait` polls the server.
const WAIT_INTERVAL: Duration = Duration::from_secs(1);

/// Sends one request and returns the server's answer (`ok` part).
pub fn ask(control: &PathBuf, request: Value) -> Result<Value> {
    let s = UnixStream::connect(control).map_err(|e| {
        CliError(match not_a_socket(control) {
            Some(what) => format!(
                "{} is {what}, not a control socket (platter serve makes it at its --socket \
                 path plus .ctl)",
                control.display()
            ),
            None => format!(
                "cannot reach the control socket {}: {e} (is platter serve running?)",
                control.display()
            ),
        })
    })?;
    // Check and repair read the whole volume; give them time.
    exchange(s, control, request, Duration::from_secs(3600))
}

/// Sends one request on a connected control socket and returns the
/// answer (`ok` part), waiting at most `timeout` for it.
pub fn exchange(
    mut s: UnixStream,
    control: &std::path::Path,
    mut request: Value,
    timeout: Duration,
) -> Result<Value> {
    if let (Some(name), Some(fields)) = (
        ABOUT_VOLUME.get().and_then(Option::as_ref),
        request.as_object_mut(),
    ) {
        fields.insert("volume".into(), Value::String(name.clone()));
    }
    let _ = s.set_read_timeout(Some(timeout));
    writeln!(s, "{request}").map_err(|e| CliError(format!("control socket: {e}")))?;
    let mut line = Vec::new();
    BufReader::new(&s)
        .take(ANSWER_MAX_BYTES)
        .read_until(b'\n', &mut line)
        .map_err(|e| CliError(format!("control socket: {e}")))?;
    let answer = parse_answer(control, &line)?;
    if let Some(e) = answer.get("error") {
        return Err(CliError(e.as_str().unwrap_or("error").to_string()));
    }
    Ok(answer.get("ok").cloned().unwrap_or(Value::Null))
}

/// The volume `--volume` names, for every request this process sends: a
/// pool's server answers for the volume a request names.
static ABOUT_VOLUME: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Sets what `--volume` named, once, before any request.
pub fn about_volume(name: Option<String>) {
    let _ = ABOUT_VOLUME.set(name);
}

/// An answer longer than this is not a control socket's.
const ANSWER_MAX_BYTES: u64 = 64 << 20;

/// What `path` is when it is not a socket at all ("a regular file").
fn not_a_socket(path: &std::path::Path) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let t = std::fs::metadata(path).ok()?.file_type();
    match () {
        _ if t.is_socket() => None,
        _ if t.is_file() => Some("a regular file"),
        _ if t.is_dir() => Some("a directory"),
        _ if t.is_block_device() => Some("a block device"),
        _ => Some("not a socket"),
    }
}

/// The control socket's answer, or what the socket is instead: an NBD
/// server greets every client with `NBDMAGIC` before it is asked
/// anything, so `--control` given the NBD socket reads that.
fn parse_answer(control: &std::path::Path, line: &[u8]) -> Result<Value> {
    let shown = control.display();
    if line.starts_with(b"NBDMAGIC") {
        let mut ctl = control.as_os_str().to_owned();
        ctl.push(".ctl");
        let ctl = PathBuf::from(ctl);
        let hint = if ctl.exists() {
            format!("the control socket is {}", ctl.display())
        } else {
            format!(
                "platter serve's control socket is its --socket path plus .ctl ({}), or where \
                 its --control says",
                ctl.display()
            )
        };
        return Err(CliError(format!(
            "{shown} is an NBD socket, not a control socket: {hint}"
        )));
    }
    if line.is_empty() {
        return Err(CliError(format!(
            "{shown} closed the connection without an answer: not a platter control socket?"
        )));
    }
    serde_json::from_slice(line).map_err(|e| {
        CliError(format!(
            "{shown} is not a platter control socket: its answer is not JSON ({e})"
        ))
    })
}

pub fn print_status(v: &Value) {
    crate::out::out!("{}", crate::status_text::render(v));
}

pub(crate) fn show(json_out: bool, v: &Value, human: impl FnOnce(&Value)) {
    if json_out {
        outln!(
            "{}",
            serde_json::to_string_pretty(v).expect("JSON of plain data")
        );
    } else {
        human(v);
    }
}

/// The options of every command that asks a running server.
#[derive(Args)]
pub struct ServerArgs {
    /// The server's control socket (the NBD socket's path plus ".ctl",
    /// unless serve was given --control).
    #[arg(long, value_name = "PATH")]
    control: PathBuf,
    /// Print the server's answer as JSON for programs.
    #[arg(long)]
    json: bool,
    /// With a pool's server (`serve --pool`): which of its volumes.
    #[arg(long, value_name = "NAME")]
    volume: Option<String>,
}

/// Which of a pool server's volumes a command asks about (`--volume`).
pub trait AboutVolume {
    fn about(&self) -> Option<&str>;
}

macro_rules! about_volume_of_server_args {
    ($($t:ty),*) => {
        $(impl AboutVolume for $t {
            fn about(&self) -> Option<&str> {
                self.server.volume.as_deref()
            }
        })*
    };
}

about_volume_of_server_args!(
    MemberArgs,
    FailArgs,
    ReplaceArgs,
    ReAddArgs,
    DeviceArgs,
    ScrubArgs,
    RateArgs,
    RecordArgs,
    PolicyArgs
);

#[derive(Args)]
pub struct MemberArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// A member's slot number, path or nbd:// URI (for remove, also a
    /// spare's).
    #[arg(value_name = "MEMBER")]
    member: String,
}

#[derive(Args)]
pub struct FailArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Fail the member even if the volume then cannot serve all of its
    /// data (the last copy of a chunk, more members than parity covers):
    /// clients get I/O errors there.
    #[arg(long)]
    force: bool,
    /// A member's slot number, path or nbd:// URI.
    #[arg(value_name = "MEMBER")]
    member: String,
}

#[derive(Args)]
pub struct ReplaceArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Create NEW as a file of this size if it does not exist (without it,
    /// a missing NEW is refused).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    member_size: Option<u64>,
    /// Overwrite NEW even if it carries another volume's label.
    #[arg(long)]
    force: bool,
    /// Stay until the rebuild ends, showing its progress (a bar on a
    /// terminal, a line a second otherwise); fails if the rebuild stops short.
    #[arg(long)]
    wait: bool,
    /// The member to replace: slot number or path.
    #[arg(value_name = "OLD")]
    old: String,
    /// The new device (file or block device).
    #[arg(value_name = "NEW")]
    new: String,
}

#[derive(Args)]
pub struct ReAddArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Stay until the rebuild ends, showing its progress; fails if the
    /// rebuild stops short.
    #[arg(long)]
    wait: bool,
    /// The member's device as it was given to serve (file, block device or
    /// nbd:// URI); its label says which slot it was.
    #[arg(value_name = "DEVICE")]
    device: String,
}

#[derive(Args)]
pub struct DeviceArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Create DEVICE as a file of this size if it does not exist (without
    /// it, a missing DEVICE is refused).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    member_size: Option<u64>,
    /// Overwrite DEVICE even if it carries another volume's label.
    #[arg(long)]
    force: bool,
    /// The device (file, block device or nbd:// URI).
    #[arg(value_name = "DEVICE")]
    device: String,
}

#[derive(Args)]
pub struct ScrubArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Only the stripes holding volume bytes from here (units: 4k, 1T);
    /// the whole volume by default. A volume of TiBs is checked in parts.
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    offset: Option<u64>,
    /// With --offset: how many volume bytes (default: to the end).
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    length: Option<u64>,
}

#[derive(Args)]
pub struct RateArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Bytes per second, more than 0 (units: 10M, 1G), or `unlimited`
    /// (as fast as the members go). Rebuilds, resyncs and reshapes all
    /// move at this rate; it starts at serve's --rebuild-rate (default
    /// 128M, 128 MiB a second) and lasts until the server stops.
    #[arg(value_name = "RATE", value_parser = parse_rebuild_rate)]
    rate: u64,
}

#[derive(Args)]
pub struct RecordArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The most FILE may grow to (default 1G): the recording stops there,
    /// says so, and the volume serves on.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    limit: Option<u64>,
    /// `start FILE` (created, or overwritten) or `stop`.
    #[arg(value_name = "ACTION", value_parser = ["start", "stop"])]
    action: String,
    /// With start: the file to record to, as the server sees the path.
    #[arg(value_name = "FILE", required_if_eq("action", "start"))]
    file: Option<PathBuf>,
}

#[derive(Args)]
pub struct PolicyArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// round-robin | split[:SIZE] | load | prefer:SLOT | proximity[:WINDOW] |
    /// auto; leave out to show the current one.
    #[arg(value_name = "POLICY", value_parser = crate::values::read_policy_text(),
          hide_possible_values = true)]
    policy: Option<String>,
}

/// Prints the live status of a served volume, and answers it.
pub fn status(control: &PathBuf, json_out: bool) -> Result<Value> {
    let v = ask(control, json!({ "cmd": "status" }))?;
    show(json_out, &v, print_status);
    Ok(v)
}

/// A rebuild rate: a size per second, more than 0 (a rate of 0 would stop
/// the rebuild for good).
pub fn parse_rate(text: &str) -> std::result::Result<u64, String> {
    match parse_size(text)? {
        0 => Err(
            "the rate must be a size per second greater than 0, with units \
                  (e.g. 500k, 20M, 1G)"
                .into(),
        ),
        rate => Ok(rate),
    }
}

/// A rebuild rate: a size per second, more than 0, or `unlimited`
/// ([`platter_server::UNLIMITED_RATE`]).
pub fn parse_rebuild_rate(text: &str) -> std::result::Result<u64, String> {
    if text == "unlimited" {
        return Ok(platter_server::UNLIMITED_RATE);
    }
    match parse_size(text)? {
        0 => Err(
            "0 would stop the rebuild for good: give a size per second greater than 0 \
             (e.g. 500k, 20M, 1G), or `unlimited`"
                .into(),
        ),
        rate => Ok(rate),
    }
}

/// A path as the server must see it: absolute, resolved here, where the
/// operator typed it (the server's working directory is another one).
/// URIs are left alone.
pub(crate) fn resolved(path: &str) -> Result<String> {
    if path.contains("://") {
        return Ok(path.to_string());
    }
    let absolute = std::path::absolute(path)
        .map_err(|e| CliError(format!("{path}: cannot make the path absolute: {e}")))?;
    absolute
        .into_os_string()
        .into_string()
        .map_err(|p| CliError(format!("{}: not a UTF-8 path", p.display())))
}

/// A member as named on the command line: a slot number as it is, a path
/// resolved here.
fn member_name(name: &str) -> Result<String> {
    if name.parse::<u32>().is_ok() {
        return Ok(name.to_string());
    }
    resolved(name)
}

/// The request fields naming a new device.
fn device_request(mut req: Value, path: &str, size: Option<u64>, force: bool) -> Result<Value> {
    req["device"] = json!(resolved(path)?);
    if let Some(size) = size {
        req["size_bytes"] = json!(size);
    }
    if force {
        req["force"] = json!(true);
    }
    Ok(req)
}

pub fn fail(a: FailArgs) -> Result<()> {
    let mut req = json!({ "cmd": "fail", "member": member_name(&a.member)? });
    if a.force {
        req["force"] = json!(true);
    }
    let v = ask(&a.server.control, req)?;
    show(a.server.json, &v, |v| match v["already"].as_str() {
        Some(state) => outln!("member {} is already {state}", v["failed"]),
        None if v["volume_serves_all"] == json!(false) => outln!(
            "member {} marked faulty; the volume can no longer serve all of its data",
            v["failed"]
        ),
        None => outln!("member {} marked faulty", v["failed"]),
    });
    Ok(())
}

pub fn remove(a: MemberArgs) -> Result<()> {
    let v = ask(
        &a.server.control,
        json!({ "cmd": "remove", "member": member_name(&a.member)? }),
    )?;
    show(a.server.json, &v, |v| {
        if let Some(spare) = v.get("removed_spare") {
            outln!("spare {} removed", spare.as_str().unwrap_or("?"));
        } else {
            match v["device"].as_str() {
                Some(d) => outln!("member {} removed; {d} is closed", v["removed"]),
                None => outln!("member {} removed", v["removed"]),
            }
        }
    });
    Ok(())
}

pub fn replace(a: ReplaceArgs) -> Result<()> {
    let req = json!({ "cmd": "replace", "member": member_name(&a.old)? });
    let v = ask(
        &a.server.control,
        device_request(req, &a.new, a.member_size, a.force)?,
    )?;
    show(a.server.json, &v, |v| {
        outln!(
            "member {} replaced by {}; rebuild started",
            v["replaced"],
            a.new
        )
    });
    if a.wait {
        crate::progress::watch(&a.server.control, WAIT_INTERVAL, a.server.json)?;
    }
    Ok(())
}

pub fn re_add(a: ReAddArgs) -> Result<()> {
    let req = json!({ "cmd": "re-add", "device": resolved(&a.device)? });
    let v = ask(&a.server.control, req)?;
    show(a.server.json, &v, |v| {
        outln!(
            "member {} re-added from {}; rebuilding the {} regions it missed",
            v["re_added"],
            a.device,
            v["missed_regions"]
        )
    });
    if a.wait {
        crate::progress::watch(&a.server.control, WAIT_INTERVAL, a.server.json)?;
    }
    Ok(())
}

pub fn add_spare(a: DeviceArgs) -> Result<()> {
    let req = json!({ "cmd": "add-spare" });
    let v = ask(
        &a.server.control,
        device_request(req, &a.device, a.member_size, a.force)?,
    )?;
    show(a.server.json, &v, |_| {
        outln!("{} added as a spare", a.device)
    });
    Ok(())
}

/// `check` and `repair` exit codes (README.md, docs/failures.md): 0 when
/// every stripe was checked and agrees (after `repair`: was made to agree)...
pub const SCRUB_CLEAN: u8 = 0;
/// ...1 when `check` found stripes whose parity or copies disagree...
pub const SCRUB_MISMATCHES: u8 = 1;
/// ...2 when some or all of the volume could not be checked: a member lost
/// (its stripes have nothing to compare with), or the server not reached
/// or failing the scrub.
pub const SCRUB_INCOMPLETE: u8 = 2;

/// Mismatches `check` prints one per line; `--json` lists more.
const MISMATCH_LINES: usize = 20;

/// Runs `check` or `repair`; the answer is the exit code.
pub fn scrub(a: ScrubArgs, repair: bool) -> Result<u8> {
    let cmd = if repair { "repair" } else { "check" };
    let mut req = json!({ "cmd": cmd });
    if let Some(o) = a.offset {
        req["offset_bytes"] = json!(o);
    }
    if let Some(l) = a.length {
        req["length_bytes"] = json!(l);
    }
    let v = ask(&a.server.control, req)?;
    show(a.server.json, &v, |v| {
        outln!(
            "{} stripes checked: {} mismatched{}, {} unchecked (a member lost)",
            v["stripes"],
            v["mismatched_stripes"],
            if repair { " and repaired" } else { "" },
            v["unchecked_stripes"]
        );
        let listed = v["mismatches"].as_array().map_or(0, Vec::len);
        let total = v["mismatched_stripes"].as_u64().unwrap_or(0);
        if total > 0 {
            let unlocated = v["unlocated_stripes"].as_u64().unwrap_or(0);
            outln!(
                "  {} with the wrong member found{}, {unlocated} where the redundancy cannot tell which",
                total.saturating_sub(unlocated),
                if repair { " and rewritten" } else { "" },
            );
        }
        for m in v["mismatches"]
            .as_array()
            .into_iter()
            .flatten()
            .take(MISMATCH_LINES)
        {
            let wrong: Vec<String> = m["wrong_members"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|w| match w["path"].as_str() {
                    Some(p) => format!("slot {} ({p})", w["slot"]),
                    None => format!("slot {}", w["slot"]),
                })
                .collect();
            let whose = if m["located"].as_bool() == Some(true) {
                format!("wrong: {}", wrong.join(", "))
            } else {
                // RAID-5, two copies, no majority: the redundancy says that
                // the stripe disagrees, not which member is wrong.
                "which member is wrong cannot be told (parity or copies disagree)".to_string()
            };
            outln!(
                "  mismatch at volume bytes {}+{}: {whose}",
                m["offset_bytes"],
                m["length_bytes"]
            );
        }
        if total > MISMATCH_LINES as u64 {
            outln!(
                "  ... and {} more ({listed} listed by --json)",
                total - MISMATCH_LINES as u64
            );
        }
    });
    let count = |k: &str| {
        v[k].as_u64()
            .ok_or_else(|| CliError(format!("the server's {cmd} answer has no \"{k}\"")))
    };
    Ok(if count("mismatched_stripes")? > 0 && !repair {
        SCRUB_MISMATCHES
    } else if count("unchecked_stripes")? > 0 {
        SCRUB_INCOMPLETE
    } else {
        SCRUB_CLEAN
    })
}

pub fn read_policy(a: PolicyArgs) -> Result<()> {
    let mut req = json!({ "cmd": "read-policy" });
    if let Some(p) = &a.policy {
        // Checked here too, for the clearer message.
        p.parse::<platter_core::balance::ReadPolicy>()
            .map_err(CliError)?;
        req["policy"] = json!(p);
    }
    let v = ask(&a.server.control, req)?;
    show(a.server.json, &v, |v| {
        if let Some(why) = v["no_copies"].as_str() {
            outln!("{why}");
            return;
        }
        outln!("read policy {}", crate::status_text::policy_line(v));
        if a.policy.is_some() && v["recorded"] == json!(false) {
            outln!("(read-only server: not recorded in the labels; lasts until it stops)");
        }
        let spins: Vec<String> = v["rotational"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(slot, r)| {
                let r = match r.as_bool() {
                    Some(true) => "spins",
                    Some(false) => "does not spin",
                    None => "unknown",
                };
                format!("slot {slot} {r}")
            })
            .collect();
        outln!("members: {}", spins.join(", "));
    });
    Ok(())
}

/// `platter record --control PATH start FILE | stop`.
pub fn record(a: RecordArgs) -> Result<()> {
    let req = match (a.action.as_str(), &a.file) {
        ("start", Some(file)) => {
            // The server opens the file: a relative path is made whole here.
            let file = std::path::absolute(file)
                .map_err(|e| CliError(format!("{}: {e}", file.display())))?;
            let mut req = json!({ "cmd": "record-start", "path": file });
            if let Some(limit) = a.limit {
                req["limit_bytes"] = json!(limit);
            }
            req
        }
        ("stop", None) => json!({ "cmd": "record-stop" }),
        ("stop", Some(_)) => return Err(CliError("record stop takes no FILE".into())),
        _ => return Err(CliError("record start needs a FILE".into())),
    };
    let v = ask(&a.server.control, req)?;
    show(a.server.json, &v, |v| {
        let path = v["path"].as_str().unwrap_or("?");
        if a.action == "start" {
            outln!(
                "recording the clients' requests to {path} (at most {}); `platter record \
                 --control {} stop` ends it",
                format_size(v["limit_bytes"].as_u64().unwrap_or(0)),
                a.server.control.display()
            );
        } else {
            outln!(
                "recorded {} requests to {path} ({}); replay them with `platter sim \
                 --workload fio:{path}`",
                v["requests"].as_u64().unwrap_or(0),
                format_size(v["bytes_written"].as_u64().unwrap_or(0))
            );
            if let Some(why) = v["stopped_because"].as_str() {
                outln!("it had stopped by itself: {why}");
            }
        }
    });
    Ok(())
}

pub fn rebuild_rate(a: RateArgs) -> Result<()> {
    let rate = match a.rate {
        platter_server::UNLIMITED_RATE => json!("unlimited"),
        rate => json!(rate),
    };
    let v = ask(
        &a.server.control,
        json!({ "cmd": "rebuild-rate", "bytes_per_sec": rate }),
    )?;
    show(a.server.json, &v, |v| {
        match v["rebuild_rate_bytes_per_sec"].as_u64() {
            Some(rate) => outln!("rebuild rate limit {}/s", format_size(rate)),
            None => outln!("rebuild rate: unlimited (as fast as the members go)"),
        }
    });
    Ok(())
}
