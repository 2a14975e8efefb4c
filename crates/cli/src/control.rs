//! Commands that talk to a running server through its control socket.

use crate::error::{CliError, Result};
use crate::out::outln;
use clap::Args;
use platter_core::label::printable;
use platter_core::units::{format_size, parse_size};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// How often `--wait` polls the server.
const WAIT_INTERVAL: Duration = Duration::from_secs(1);

/// Sends one request and returns the server's answer (`ok` part).
pub fn ask(control: &PathBuf, request: Value) -> Result<Value> {
    let mut s = UnixStream::connect(control).map_err(|e| {
        CliError(format!(
            "cannot reach the control socket {}: {e} (is platter serve running?)",
            control.display()
        ))
    })?;
    // Check and repair read the whole volume; give them time.
    let _ = s.set_read_timeout(Some(Duration::from_secs(3600)));
    writeln!(s, "{request}").map_err(|e| CliError(format!("control socket: {e}")))?;
    let mut line = String::new();
    BufReader::new(&s)
        .read_line(&mut line)
        .map_err(|e| CliError(format!("control socket: {e}")))?;
    let answer: Value = serde_json::from_str(&line)
        .map_err(|e| CliError(format!("control socket sent no JSON answer: {e}")))?;
    if let Some(e) = answer.get("error") {
        return Err(CliError(e.as_str().unwrap_or("error").to_string()));
    }
    Ok(answer.get("ok").cloned().unwrap_or(Value::Null))
}

pub fn print_status(v: &Value) {
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("?").to_string();
    let n = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    outln!(
        "V {:<20} State: {:<10} Size: {} ({} bytes)",
        printable(&s("name")),
        s("state"),
        format_size(n("size_bytes")),
        n("size_bytes")
    );
    outln!("  UUID:       {}", s("uuid"));
    outln!(
        "  Level:      {}, interleave {}",
        s("level"),
        format_size(n("interleave_bytes"))
    );
    outln!(
        "  Data:       from {} on every member (room before it for reshapes)",
        format_size(n("data_offset_bytes"))
    );
    if let Some(f) = v.get("filesystem") {
        match f.get("none").and_then(Value::as_str) {
            Some(why) => outln!("  Filesystem: no alignment: {why}"),
            None => {
                for k in ["xfs", "ext4"] {
                    outln!(
                        "  Filesystem: {}",
                        f.get(k).and_then(Value::as_str).unwrap_or("?")
                    );
                }
            }
        }
    }
    if let Some(p) = v.get("read_policy").filter(|p| !p.is_null()) {
        outln!("  Reads:      {}", policy_line(p));
    }
    outln!("  Events:     {}", n("event_counter"));
    if let Some(r) = v.get("rebuild").filter(|r| !r.is_null()) {
        let g = |k: &str| r.get(k).and_then(Value::as_u64).unwrap_or(0);
        let pct = r.get("percent").and_then(Value::as_f64).unwrap_or(0.0);
        outln!(
            "  Rebuild:    member {} {:.1}% ({}/{} stripes), {}/s (limit {}/s), ETA {} s",
            g("member"),
            pct,
            g("cursor_stripe"),
            g("stripes"),
            format_size(g("rate_bytes_per_sec")),
            format_size(g("rate_limit_bytes_per_sec")),
            g("eta_seconds")
        );
    }
    if let Some(r) = v.get("reshape").filter(|r| !r.is_null()) {
        let g = |k: &str| r.get(k).and_then(Value::as_u64).unwrap_or(0);
        let f = |k: &str| r["from"].get(k).and_then(Value::as_u64).unwrap_or(0);
        let from = format!(
            "{} of {} members, interleave {}",
            r["from"]["level"].as_str().unwrap_or("?"),
            f("members"),
            format_size(f("interleave_bytes"))
        );
        if r["finished"].as_bool().unwrap_or(false) {
            outln!("  Reshape:    from {from}: done; new connections see the new size");
        } else if let Some(why) = r["stuck"].as_str() {
            outln!(
                "  Reshape:    from {from}: STOPPED at {:.1}% ({} of {}): {why}. The volume \
                 serves through both layouts; the move goes on from the labels when the \
                 server is restarted with the cause fixed",
                r.get("percent").and_then(Value::as_f64).unwrap_or(0.0),
                format_size(g("position_bytes")),
                format_size(g("total_bytes")),
            );
        } else {
            outln!(
                "  Reshape:    from {from}: {:.1}% ({} of {}), {}/s (limit {}/s), ETA {} s",
                r.get("percent").and_then(Value::as_f64).unwrap_or(0.0),
                format_size(g("position_bytes")),
                format_size(g("total_bytes")),
                format_size(g("rate_bytes_per_sec")),
                format_size(g("rate_limit_bytes_per_sec")),
                g("eta_seconds")
            );
        }
    }
    let rec = &v["recording"];
    if let Some(path) = rec["path"].as_str() {
        let n = |k: &str| rec[k].as_u64().unwrap_or(0);
        if rec["recording"].as_bool() == Some(true) {
            outln!(
                "  Recording:  {path}: {} requests, {} of at most {}",
                n("requests"),
                format_size(n("bytes_written")),
                format_size(n("limit_bytes"))
            );
        } else if let Some(why) = rec["stopped_because"].as_str() {
            outln!(
                "  Recording:  STOPPED after {} requests: {why}",
                n("requests")
            );
        }
    }
    if let Some(r) = v.get("resync").filter(|r| !r.is_null()) {
        let g = |k: &str| r.get(k).and_then(Value::as_u64).unwrap_or(0);
        outln!(
            "  Resync:     {:.1}% ({}/{} stripes), {} rewritten so far",
            r.get("percent").and_then(Value::as_f64).unwrap_or(0.0),
            g("cursor_stripe"),
            g("stripes"),
            g("rewritten_stripes")
        );
    }
    outln!();
    outln!("  {:<4} {:<12} Path", "Slot", "State");
    for m in v
        .get("members")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let away = m
            .get("away_seconds")
            .and_then(Value::as_u64)
            .map(|secs| {
                format!(
                    " (away {secs} s; failed at {} s)",
                    n("member_timeout_seconds")
                )
            })
            .unwrap_or_default();
        outln!(
            "  {:<4} {:<12} {}{away}",
            m.get("slot").and_then(Value::as_u64).unwrap_or(0),
            m.get("state").and_then(Value::as_str).unwrap_or("?"),
            m.get("path").and_then(Value::as_str).unwrap_or("-")
        );
    }
    for u in v
        .get("unreachable")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        outln!(
            "  -    {:<12} {} (slot not known yet; away {} s, failed at {} s)",
            "unreachable",
            u.get("uri").and_then(Value::as_str).unwrap_or("?"),
            u.get("away_seconds").and_then(Value::as_u64).unwrap_or(0),
            n("member_timeout_seconds")
        );
    }
    for sp in v
        .get("spares")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        outln!("  -    {:<12} {}", "spare", sp.as_str().unwrap_or("?"));
    }
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

#[derive(Args)]
pub struct MemberArgs {
    /// The server's control socket (the NBD socket's path plus ".ctl",
    /// unless serve was given --control).
    #[arg(long, value_name = "PATH")]
    control: PathBuf,
    /// Print the server's answer as JSON for programs.
    #[arg(long)]
    json: bool,
    /// A member's slot number, path or nbd:// URI (for remove, also a
    /// spare's).
    #[arg(value_name = "MEMBER")]
    member: String,
}

#[derive(Args)]
pub struct FailArgs {
    /// The server's control socket (the NBD socket's path plus ".ctl",
    /// unless serve was given --control).
    #[arg(long, value_name = "PATH")]
    control: PathBuf,
    /// Print the server's answer as JSON for programs.
    #[arg(long)]
    json: bool,
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
    /// The server's control socket (the NBD socket's path plus ".ctl",
    /// unless serve was given --control).
    #[arg(long, value_name = "PATH")]
    control: PathBuf,
    /// Print the server's answer as JSON for programs.
    #[arg(long)]
    json: bool,
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
    /// The server's control socket (the NBD socket's path plus ".ctl",
    /// unless serve was given --control).
    #[arg(long, value_name = "PATH")]
    control: PathBuf,
    /// Print the server's answer as JSON for programs.
    #[arg(long)]
    json: bool,
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
    /// The server's control socket (the NBD socket's path plus ".ctl",
    /// unless serve was given --control).
    #[arg(long, value_name = "PATH")]
    control: PathBuf,
    /// Print the server's answer as JSON for programs.
    #[arg(long)]
    json: bool,
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
    /// The server's control socket (the NBD socket's path plus ".ctl",
    /// unless serve was given --control).
    #[arg(long, value_name = "PATH")]
    control: PathBuf,
    /// Print the server's answer as JSON for programs.
    #[arg(long)]
    json: bool,
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
    /// The server's control socket (the NBD socket's path plus ".ctl",
    /// unless serve was given --control).
    #[arg(long, value_name = "PATH")]
    control: PathBuf,
    /// Print the server's answer as JSON for programs.
    #[arg(long)]
    json: bool,
    /// Bytes per second, more than 0 (units: 10M, 1G).
    #[arg(value_name = "RATE", value_parser = parse_rate)]
    rate: u64,
}

#[derive(Args)]
pub struct RecordArgs {
    /// The server's control socket (the NBD socket's path plus ".ctl",
    /// unless serve was given --control).
    #[arg(long, value_name = "PATH")]
    control: PathBuf,
    /// Print the server's answer as JSON for programs.
    #[arg(long)]
    json: bool,
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
    /// The server's control socket (the NBD socket's path plus ".ctl",
    /// unless serve was given --control).
    #[arg(long, value_name = "PATH")]
    control: PathBuf,
    /// Print the server's answer as JSON for programs.
    #[arg(long)]
    json: bool,
    /// round-robin | split[:SIZE] | load | prefer:SLOT | proximity[:WINDOW] |
    /// auto; leave out to show the current one.
    #[arg(value_name = "POLICY", value_parser = crate::values::read_policy_text(),
          hide_possible_values = true)]
    policy: Option<String>,
}

/// The live status of a served volume.
pub fn status(control: &PathBuf, json_out: bool) -> Result<()> {
    let v = ask(control, json!({ "cmd": "status" }))?;
    show(json_out, &v, print_status);
    Ok(())
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
    let v = ask(&a.control, req)?;
    show(a.json, &v, |v| match v["already"].as_str() {
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
        &a.control,
        json!({ "cmd": "remove", "member": member_name(&a.member)? }),
    )?;
    show(a.json, &v, |v| {
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
        &a.control,
        device_request(req, &a.new, a.member_size, a.force)?,
    )?;
    show(a.json, &v, |v| {
        outln!(
            "member {} replaced by {}; rebuild started",
            v["replaced"],
            a.new
        )
    });
    if a.wait {
        crate::progress::watch(&a.control, WAIT_INTERVAL, a.json)?;
    }
    Ok(())
}

pub fn re_add(a: ReAddArgs) -> Result<()> {
    let req = json!({ "cmd": "re-add", "device": resolved(&a.device)? });
    let v = ask(&a.control, req)?;
    show(a.json, &v, |v| {
        outln!(
            "member {} re-added from {}; rebuilding the {} regions it missed",
            v["re_added"],
            a.device,
            v["missed_regions"]
        )
    });
    if a.wait {
        crate::progress::watch(&a.control, WAIT_INTERVAL, a.json)?;
    }
    Ok(())
}

pub fn add_spare(a: DeviceArgs) -> Result<()> {
    let req = json!({ "cmd": "add-spare" });
    let v = ask(
        &a.control,
        device_request(req, &a.device, a.member_size, a.force)?,
    )?;
    show(a.json, &v, |_| outln!("{} added as a spare", a.device));
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
    let v = ask(&a.control, req)?;
    show(a.json, &v, |v| {
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

/// "proximity (in effect: proximity:1M)" or just "load".
fn policy_line(p: &Value) -> String {
    let policy = p["policy"].as_str().unwrap_or("?");
    let effective = p["in_effect"].as_str().unwrap_or("?");
    if policy == effective {
        policy.to_string()
    } else {
        format!("{policy} (in effect: {effective})")
    }
}

pub fn read_policy(a: PolicyArgs) -> Result<()> {
    let mut req = json!({ "cmd": "read-policy" });
    if let Some(p) = &a.policy {
        // Checked here too, for the clearer message.
        p.parse::<platter_core::balance::ReadPolicy>()
            .map_err(CliError)?;
        req["policy"] = json!(p);
    }
    let v = ask(&a.control, req)?;
    show(a.json, &v, |v| {
        outln!("read policy {}", policy_line(v));
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
    let v = ask(&a.control, req)?;
    show(a.json, &v, |v| {
        let path = v["path"].as_str().unwrap_or("?");
        if a.action == "start" {
            outln!(
                "recording the clients' requests to {path} (at most {}); `platter record \
                 --control {} stop` ends it",
                format_size(v["limit_bytes"].as_u64().unwrap_or(0)),
                a.control.display()
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
    let v = ask(
        &a.control,
        json!({ "cmd": "rebuild-rate", "bytes_per_sec": a.rate }),
    )?;
    show(a.json, &v, |_| {
        outln!("rebuild rate limit {}/s", format_size(a.rate))
    });
    Ok(())
}
