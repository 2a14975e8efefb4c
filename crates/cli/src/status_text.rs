//! `platter status` for people: one text from the status JSON, whether
//! the labels were read (a stopped volume) or a server answered (live), so
//! that both show the same facts; a running server adds what only it
//! knows (work in progress, spares, the recording).

use platter_core::label::printable;
use platter_core::units::format_size;
use serde_json::Value;
use std::fmt::Write;

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("?")
}

fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// The whole status: the volume's facts, the work in progress, the members.
pub fn render(v: &Value) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "V {:<20} State: {:<10} Size: {} ({} bytes)",
        printable(text(&v["name"])),
        text(&v["state"]),
        format_size(num(&v["size_bytes"])),
        num(&v["size_bytes"])
    );
    layout(&mut s, v);
    keeps(&mut s, v);
    history(&mut s, v);
    work(&mut s, v);
    members(&mut s, v);
    s
}

/// What the volume is: identity, level and layout, reads, interleave,
/// what mkfs should be told, where the data starts.
fn layout(s: &mut String, v: &Value) {
    let _ = writeln!(s, "  UUID:       {}", text(&v["uuid"]));
    let mut level = text(&v["level"]).to_string();
    if let Some(l) = v["layout"].as_str() {
        let _ = write!(level, " ({l})");
    }
    let _ = writeln!(s, "  Level:      {level}");
    if !v["read_policy"].is_null() {
        let _ = writeln!(s, "  Reads:      {}", policy_line(&v["read_policy"]));
    }
    let il = num(&v["interleave_bytes"]);
    let _ = writeln!(
        s,
        "  Interleave: {} ({}s), stripe {} of data",
        format_size(il),
        il / 512,
        format_size(num(&v["stripe_data_bytes"]))
    );
    let f = &v["filesystem"];
    match f["none"].as_str() {
        Some(why) => {
            let _ = writeln!(s, "  Filesystem: no alignment: {why}");
        }
        None => {
            for k in ["xfs", "ext4"] {
                let _ = writeln!(s, "  Filesystem: {}", text(&f[k]));
            }
        }
    }
    let _ = writeln!(
        s,
        "  Data:       from {} on every member (room before it for reshapes)",
        format_size(num(&v["data_offset_bytes"]))
    );
}

/// The read policy: as stored (offline), or with what it amounts to now
/// (live: "proximity (in effect: proximity:1M)").
pub fn policy_line(p: &Value) -> String {
    if let Some(stored) = p.as_str() {
        return stored.to_string();
    }
    let policy = text(&p["policy"]);
    let effective = text(&p["in_effect"]);
    if policy == effective {
        policy.to_string()
    } else {
        format!("{policy} (in effect: {effective})")
    }
}

/// What the volume keeps besides its data: checksums, a partial parity
/// log, a write-intent bitmap.
fn keeps(s: &mut String, v: &Value) {
    let mut keeps = Vec::new();
    if let (Some(c), Some(pages)) = (v["checksums"].as_str(), v["checksum_pages"].as_str()) {
        let how = match pages {
            "bare" => "bare pages: a zeroed page passes; recreate for sealed pages",
            "sealed" => "sealed pages",
            _ => "sealed pages, lost writes caught",
        };
        keeps.push(format!(
            "{c} checksums ({how}; from {} on every member)",
            format_size(num(&v["checksum_offset_bytes"]))
        ));
    }
    if v["consistency_policy"] == "ppl" {
        keeps.push("a partial parity log".to_string());
    }
    if !keeps.is_empty() {
        let _ = writeln!(s, "  Keeps:      {}", keeps.join(", "));
    }
    let b = &v["bitmap"];
    if b.is_null() {
        let _ = writeln!(s, "  Bitmap:     none (a crash resyncs every stripe)");
        return;
    }
    let mut line = format!(
        "{} regions of {}, {} marked",
        num(&b["regions"]),
        format_size(num(&b["region_bytes"])),
        num(&b["dirty_regions"])
    );
    for (k, what) in [
        ("unsynced_regions", "owed a resync"),
        ("missed_regions", "missed by a member out of use"),
    ] {
        if num(&b[k]) > 0 {
            let _ = write!(line, ", {} {what}", num(&b[k]));
        }
    }
    let _ = writeln!(s, "  Bitmap:     {line}");
}

/// When the labels were made and last written, the last look at the whole
/// volume, the members in use and the event count.
fn history(s: &mut String, v: &Value) {
    let _ = writeln!(
        s,
        "  Created:    {}, labels last written {}",
        utc(num(&v["created_unix_seconds"])),
        utc(num(&v["updated_unix_seconds"]))
    );
    let sc = &v["scrub"];
    let mut line = match sc["last_completed_unix_seconds"].as_u64() {
        Some(t) => format!(
            "last whole pass {}: {} mismatched stripes",
            utc(t),
            num(&sc["last_found_stripes"])
        ),
        None => "no whole pass yet (check, repair or serve --scrub-every)".to_string(),
    };
    let p = &sc["in_progress"];
    if !p.is_null() {
        let pct = 100.0 * num(&p["cursor_stripes"]) as f64 / num(&p["stripes"]).max(1) as f64;
        let _ = write!(
            line,
            "; a pass at {pct:.1}% ({} found so far)",
            num(&p["found_stripes"])
        );
    }
    if let Some(every) = sc["every_secs"].as_u64() {
        let _ = write!(line, "; every {}", interval(every));
    }
    let _ = writeln!(s, "  Scrub:      {line}");
    let mut members = format!(
        "{}/{} online, events {}",
        num(&v["members_online"]),
        num(&v["member_count"]),
        num(&v["event_counter"])
    );
    if v["label_state"] != v["state"] {
        let _ = write!(members, ", labels say {}", text(&v["label_state"]));
    }
    let _ = writeln!(s, "  Members:    {members}");
}

/// Work in progress: a rebuild, a reshape, a resync, a recording.
fn work(s: &mut String, v: &Value) {
    let limit = |r: &Value| match r["rate_limit_bytes_per_sec"].as_u64() {
        Some(l) => format!("limit {}/s", format_size(l)),
        None => "no limit".to_string(),
    };
    let r = &v["rebuild"];
    if !r.is_null() {
        let _ = writeln!(
            s,
            "  Rebuild:    member {} {:.1}% ({}/{} stripes), {}/s ({}), ETA {} s",
            num(&r["member"]),
            r["percent"].as_f64().unwrap_or(0.0),
            num(&r["cursor_stripe"]),
            num(&r["stripes"]),
            format_size(num(&r["rate_bytes_per_sec"])),
            limit(r),
            num(&r["eta_seconds"])
        );
    }
    reshape(s, &v["reshape"], &v["size_bytes"], limit);
    let r = &v["resync"];
    if !r.is_null() {
        let _ = writeln!(
            s,
            "  Resync:     {:.1}% ({}/{} stripes), {} rewritten so far",
            r["percent"].as_f64().unwrap_or(0.0),
            num(&r["cursor_stripe"]),
            num(&r["stripes"]),
            num(&r["rewritten_stripes"])
        );
    }
    recording(s, &v["recording"]);
    for m in v["moves"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "  Moving:     {} to {} {:.1}% ({}/{}), {}",
            text(&m["subdisk"]),
            text(&m["to"]),
            m["percent"].as_f64().unwrap_or(0.0),
            format_size(num(&m["copied_bytes"])),
            format_size(num(&m["total_bytes"])),
            limit(m)
        );
    }
    // Live only: the connections on the volume now.
    if let Some(n) = v["clients"].as_u64() {
        let _ = writeln!(s, "  Clients:    {n} connected");
    }
}

fn reshape(s: &mut String, r: &Value, size: &Value, limit: impl Fn(&Value) -> String) {
    if r.is_null() {
        return;
    }
    let f = &r["from"];
    let from = format!(
        "from {} of {} members, interleave {}",
        text(&f["level"]),
        num(&f["members"]),
        format_size(num(&f["interleave_bytes"]))
    );
    let (at, of) = (num(&r["position_bytes"]), num(&r["total_bytes"]));
    let pct = 100.0 * at as f64 / of.max(1) as f64;
    let line = if r["finished"] == true {
        format!("{from}: done; new connections see the new size")
    } else if let Some(why) = r["stuck"].as_str() {
        format!(
            "{from}: STOPPED at {pct:.1}% ({} of {}): {why}. The volume serves through both \
             layouts; the move goes on from the labels when the server is restarted with the \
             cause fixed",
            format_size(at),
            format_size(of)
        )
    } else if r.get("rate_bytes_per_sec").is_none() {
        // Read from the labels: no server is moving it.
        format!(
            "{from}: {} of {} moved for good (serve moves the rest; clients see {} until it ends)",
            format_size(at),
            format_size(of),
            format_size(num(&f["size_bytes"]))
        )
    } else {
        format!(
            "{from}: {pct:.1}% ({} of {}), {}/s ({}), ETA {} s; clients see {} until it ends",
            format_size(at),
            format_size(of),
            format_size(num(&r["rate_bytes_per_sec"])),
            limit(r),
            num(&r["eta_seconds"]),
            format_size(num(size))
        )
    };
    let _ = writeln!(s, "  Reshape:    {line}");
}

fn recording(s: &mut String, rec: &Value) {
    let Some(path) = rec["path"].as_str() else {
        return;
    };
    if rec["recording"] == true {
        let _ = writeln!(
            s,
            "  Recording:  {path}: {} requests, {} of at most {}",
            num(&rec["requests"]),
            format_size(num(&rec["bytes_written"])),
            format_size(num(&rec["limit_bytes"]))
        );
    } else if let Some(why) = rec["stopped_because"].as_str() {
        let _ = writeln!(
            s,
            "  Recording:  STOPPED after {} requests: {why}",
            num(&rec["requests"])
        );
    }
}

/// The slot table, then members not in a slot: unreachable remote
/// members, spares, devices that could not be read.
fn members(s: &mut String, v: &Value) {
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "  {:<4} {:<26} {:>10} {:>10} {:>7}  Path",
        "Slot", "State", "Size", "Used", "Events"
    );
    let timeout = num(&v["member_timeout_seconds"]);
    for m in v["members"].as_array().into_iter().flatten() {
        let away = m["away_seconds"]
            .as_u64()
            .map(|secs| format!(" (away {secs} s; failed at {timeout} s)"))
            .unwrap_or_default();
        let events = m["events"].as_u64().map_or("-".into(), |e| e.to_string());
        let _ = writeln!(
            s,
            "  {:<4} {:<26} {:>10} {:>10} {:>7}  {}{away}",
            num(&m["slot"]),
            text(&m["state"]),
            format_size(num(&m["data_size_bytes"])),
            format_size(num(&m["used_bytes"])),
            events,
            m["path"].as_str().unwrap_or("-")
        );
    }
    for u in v["unreachable"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "  -    {:<26} {} (slot not known yet; away {} s, failed at {timeout} s)",
            "unreachable",
            text(&u["uri"]),
            num(&u["away_seconds"])
        );
    }
    for sp in v["spares"].as_array().into_iter().flatten() {
        let _ = writeln!(s, "  -    {:<26} {}", "spare", text(sp));
    }
    left_out(s, v);
    for u in v["unreadable"].as_array().into_iter().flatten() {
        let _ = writeln!(s, "  warning: {}", text(u));
    }
}

/// Each device set aside because its slot went to another member, and
/// each member the volume is (or would be) served without: why, and the
/// command that brings it back.
fn left_out(s: &mut String, v: &Value) {
    for d in v["superseded"].as_array().into_iter().flatten() {
        let by = match (d["by_member_uuid"].as_str(), d["by_path"].as_str()) {
            (Some(u), Some(p)) => format!("member {u} at {p}"),
            (Some(u), None) => format!("member {u}"),
            (None, _) => "nothing (removed)".to_string(),
        };
        let _ = writeln!(
            s,
            "  superseded: {} (slot {}, events {} < {}): slot {} now holds {by}; not used \
             (platter wipe {} clears its label)",
            text(&d["path"]),
            num(&d["slot"]),
            num(&d["event_counter"]),
            num(&v["event_counter"]),
            num(&d["slot"]),
            text(&d["path"])
        );
    }
    for l in v["left_out"].as_array().into_iter().flatten() {
        let at = l["path"]
            .as_str()
            .map_or(String::new(), |p| format!(", {p}"));
        let _ = writeln!(
            s,
            "  left out: slot {} (member {}{at}): {}; brought back by: {}",
            num(&l["slot"]),
            text(&l["member_uuid"]),
            text(&l["detail"]),
            text(&l["remedy"])
        );
    }
}

/// `7d`, `12h`, `90s`: a scrub interval as `--scrub-every` takes it.
fn interval(secs: u64) -> String {
    for (unit, len) in [("w", 7 * 86_400), ("d", 86_400), ("h", 3600), ("m", 60)] {
        if secs >= len && secs.is_multiple_of(len) {
            return format!("{}{unit}", secs / len);
        }
    }
    format!("{secs}s")
}

/// "2024-05-01 10:00:00 UTC" (the civil date from days since the epoch,
/// after Howard Hinnant's algorithm); "never" for 0.
pub fn utc(unix_seconds: u64) -> String {
    if unix_seconds == 0 {
        return "never".to_string();
    }
    let days = (unix_seconds / 86_400) as i64;
    let secs = unix_seconds % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil_utc() {
        assert_eq!(utc(0), "never");
        assert_eq!(utc(1), "1970-01-01 00:00:01 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20 UTC");
        // `date -u -d @1709251199`: the last second of 29 February 2024.
        assert_eq!(utc(1_709_251_199), "2024-02-29 23:59:59 UTC");
        assert_eq!(utc(1_709_251_200), "2024-03-01 00:00:00 UTC");
        assert_eq!(utc(4_102_444_800), "2100-01-01 00:00:00 UTC");
    }

    #[test]
    fn intervals_read_as_scrub_every_takes_them() {
        assert_eq!(interval(7 * 86_400), "1w");
        assert_eq!(interval(86_400), "1d");
        assert_eq!(interval(5400), "90m");
        assert_eq!(interval(90), "90s");
    }
}
