//! `platter advise`: a recorded load (`serve --record`) replayed over
//! levels, interleaves and read policies on modelled drives, and the
//! layout that serves it best, against the volume's own, with the commands
//! that get there (issue 19, point 3).

use crate::error::{CliError, Result};
use crate::out::{out, outln};
use crate::sweep::{execute, prepare, row_json, SweepArgs};
use clap::Args;
use platter_core::balance::ReadPolicy;
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::reshape::{redundancy_lost, reserved_from_bytes, target, Asked, Plan};
use platter_core::Level;
use platter_sim::sweep::{format_interleave, table, Row, Sweep};
use serde_json::{json, Value};
use std::path::PathBuf;

#[derive(Args)]
#[command(after_help = "\
The trace: what `platter serve --record FILE` or `platter record --control PATH start FILE` \
wrote (fio iolog v3), any fio iolog (v2 or v3), or blkparse text; options as for the \
workloads fio:PATH[,qd=N,timed=0|1] and blkparse:PATH[,...] (timed: at the recorded times, \
the default for traces that have them).

Example: platter advise --trace home.iolog --drive parametric-7200 --volume d/m0,d/m1,d/m2,d/m3")]
pub struct AdviseArgs {
    /// The recorded load (fio iolog or blkparse text), with replay options
    /// after a comma: FILE[,qd=N,timed=0|1]. With --control and no
    /// --trace: the server's last recording (stopped).
    #[arg(long, value_name = "FILE")]
    trace: Option<String>,
    /// The drive behind every member (as for `platter sweep`).
    #[arg(long, value_name = "DRIVE", default_value = "parametric-7200")]
    drive: String,
    /// The volume's members (comma separated): its layout is compared with
    /// the others, and its level and member count are the default.
    #[arg(long, value_name = "MEMBER", value_delimiter = ',')]
    volume: Vec<String>,
    /// A running volume's control socket: its layout (unless --volume),
    /// its last recording (unless --trace), its counters, and the commands
    /// printed for it.
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    /// Member counts [default: the volume's, else 4].
    #[arg(long, value_delimiter = ',')]
    members: Vec<u32>,
    /// Levels [default: the volume's, raid10, raid5, raid6].
    #[arg(long, value_delimiter = ',')]
    levels: Vec<Level>,
    /// Interleaves: sizes (126s, 64k) and A..B for A, 2A, 4A ... B
    /// [default: 8s..32768s,126s].
    #[arg(long)]
    interleaves: Option<String>,
    /// Read policies for mirror and raid10.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "round-robin,split,load,proximity"
    )]
    policies: Vec<ReadPolicy>,
    /// Commands outstanding at each drive.
    #[arg(long)]
    queue_depth: Option<u32>,
    /// Use at most this much of each member.
    #[arg(long)]
    member_size: Option<String>,
    /// The seed: the same seed gives the same numbers.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Threads (default: every core).
    #[arg(long)]
    threads: Option<usize>,
    /// Print every configuration's figures as JSON lines, then the
    /// recommendation as one JSON object.
    #[arg(long)]
    json: bool,
    /// Advise layouts that survive fewer lost members than the volume
    /// does (raid5 for a raid6). Without it they are compared but never
    /// advised; with it, the reshape printed to one carries --force.
    #[arg(long)]
    allow_less_redundancy: bool,
}

/// The requests a trace needs before its comparison can be trusted. A
/// layout's figures are means over the trace's requests; a disk's service
/// time varies about as much as it averages (seeks and rotation), so the
/// mean over n requests is off by about 1/sqrt(n) of itself, and advice
/// separates layouts by 2% ([`best`], the tie): 1/sqrt(n) <= 2% needs
/// n >= 2,500.
const TRUSTED_REQUESTS: u64 = 2_500;

/// The failures a point's layout survives (as `Geometry::redundancy`).
fn redundancy_of(sweep: &Sweep, r: &Row) -> u32 {
    sweep
        .geometry(&r.point)
        .ok()
        .and_then(|g| Geometry::new(g).ok())
        .map_or(0, |g| g.redundancy())
}

/// What the advice may recommend: every compared layout when told
/// `--allow-less-redundancy` or no volume is known, else those that
/// survive as many lost members as the volume. The line names the ones
/// set aside.
fn redundancy_floor<'a>(
    sweep: &Sweep,
    rows: &'a [Row],
    volume: Option<&Geometry>,
    allow: bool,
) -> (Vec<&'a Row>, Option<String>) {
    let Some(g) = volume.filter(|_| !allow) else {
        return (rows.iter().collect(), None);
    };
    let (kept, lower): (Vec<&Row>, Vec<&Row>) = rows
        .iter()
        .partition(|r| redundancy_of(sweep, r) >= g.redundancy());
    let mut names: Vec<String> = lower
        .iter()
        .map(|r| format!("{} x{}", r.point.level, r.point.members))
        .collect();
    names.sort();
    names.dedup();
    let line = (!names.is_empty()).then(|| {
        format!(
            "not advised: {} (they survive fewer lost members than the volume's {} of {}, \
             which survives {}); --allow-less-redundancy lets them be advised",
            names.join(", "),
            g.level(),
            g.members(),
            g.redundancy()
        )
    });
    (kept, line)
}

/// The warning for a trace too short to tell layouts apart.
fn too_short(rows: &[Row]) -> Option<(u64, String)> {
    let requests = rows.iter().find_map(|r| r.result.as_ref().ok())?.requests;
    (requests < TRUSTED_REQUESTS).then(|| {
        (
            requests,
            format!(
                "the trace holds {requests} requests: too few to trust this comparison \
                 (its figures can move by more than the 2% that separates layouts); record \
                 at least {TRUSTED_REQUESTS}"
            ),
        )
    })
}

/// The workload spec for a trace file: fio's iologs by their first line,
/// anything else as blkparse text.
fn workload_of(trace: &str) -> Result<String> {
    let path = trace.split(',').next().unwrap_or(trace);
    let text = std::fs::read(path).map_err(|e| CliError(format!("--trace {path}: {e}")))?;
    let first = text.split(|&b| b == b'\n').next().unwrap_or_default();
    Ok(if first.starts_with(b"fio version") {
        format!("fio:{trace}")
    } else {
        format!("blkparse:{trace}")
    })
}

/// Higher is better: throughput, and lower mean latency among those within
/// 2% of the best throughput (a timed replay offers every layout the same
/// load, so their throughputs tie and latency tells them apart).
fn best<'a>(rows: impl Iterator<Item = &'a Row> + Clone) -> Option<&'a Row> {
    let mb_per_s = |r: &Row| r.result.as_ref().map_or(0.0, |b| b.mb_per_s());
    let top = rows
        .clone()
        .filter(|r| r.result.is_ok())
        .map(mb_per_s)
        .fold(0.0_f64, f64::max);
    rows.filter(|r| r.result.is_ok() && mb_per_s(r) >= top * 0.98)
        .min_by_key(|r| r.result.as_ref().map_or(u64::MAX, |b| b.mean_latency_ns))
}

fn describe(r: &Row) -> String {
    let p = &r.point;
    let mut s = format!(
        "{} of {} members, interleave {}",
        p.level,
        p.members,
        format_interleave(p.interleave_bytes)
    );
    if let Some(policy) = p.policy {
        s += &format!(", read policy {policy}");
    }
    if let Ok(b) = &r.result {
        s += &format!(
            ": {:.1} MB/s, {:.0} IOPS, mean {:.2} ms, p99 {:.2} ms",
            b.mb_per_s(),
            b.iops(),
            b.mean_latency_ns as f64 / 1e6,
            b.p99_latency_ns as f64 / 1e6
        );
    }
    s
}

/// A running volume's layout, from its status.
fn live_geometry(st: &Value) -> Result<Geometry> {
    let text = |k: &str| st[k].as_str().unwrap_or_default().to_string();
    let spec = GeometrySpec {
        level: text("level")
            .parse::<Level>()
            .map_err(|e| CliError(e.to_string()))?,
        // Null for levels without parity, whose geometry ignores it.
        parity_layout: match st["parity_layout"].as_str() {
            Some(l) => l
                .parse::<platter_core::ParityLayout>()
                .map_err(|e| CliError(e.to_string()))?,
            None => platter_core::ParityLayout::LeftSymmetric,
        },
        copies: st["copies"].as_u64().unwrap_or(1) as u32,
        interleave_bytes: st["interleave_bytes"].as_u64().unwrap_or(0),
        data_offset_bytes: st["data_offset_bytes"].as_u64().unwrap_or(0),
        member_data_bytes: st["members"]
            .as_array()
            .map(|m| {
                m.iter()
                    .map(|m| m["data_size_bytes"].as_u64().unwrap_or(0))
                    .collect()
            })
            .unwrap_or_default(),
    };
    Geometry::new(spec).map_err(|e| CliError(format!("the server's layout: {}", e.0)))
}

/// What the volume's counters say of its requests against its interleave
/// (vinum's multiblock and multistripe transfers).
fn counters_say(stats: &Value) -> Option<String> {
    let v = &stats["volume"];
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    let requests = n("reads") + n("writes");
    if requests == 0 {
        return None;
    }
    let share = |k: &str| 100.0 * n(k) as f64 / requests as f64;
    let (block, stripe) = (share("multiblock"), share("multistripe"));
    let mut s = format!(
        "the volume's counters: {requests} reads and writes, {block:.0}% crossing an interleave \
         (multiblock), {stripe:.0}% a stripe (multistripe)"
    );
    if block > 10.0 {
        s += "; many requests span chunks: a larger interleave may suit them";
    }
    Some(s)
}

pub fn run(a: AdviseArgs) -> Result<()> {
    let status = a
        .control
        .as_ref()
        .map(|c| crate::control::ask(c, json!({ "cmd": "status" })))
        .transpose()?;
    let (volume, present_policy) = volume_and_policy(&a, status.as_ref())?;
    let trace = trace_of(&a, status.as_ref())?;
    let said = a
        .control
        .as_ref()
        .map(|c| crate::control::ask(c, json!({ "cmd": "stats" })))
        .transpose()?
        .and_then(|st| counters_say(&st));
    let mut sweep_args = sweep_args(&a, volume.as_ref(), present_policy, &trace)?;
    let (sweep, drive_name) = prepare(&mut sweep_args)?;
    let rows = execute(&sweep, &sweep_args, &drive_name)?;
    let advice = Advice::new(&a, &sweep, &rows, volume.as_ref(), present_policy)?;
    if a.json {
        advice.print_json(&rows, said.as_deref());
    } else {
        advice.print_text(&rows, said.as_deref(), volume.is_some());
    }
    Ok(())
}

/// The volume's layout and, for copies, the read policy it uses now:
/// from --volume's members, else from the server's status.
fn volume_and_policy(
    a: &AdviseArgs,
    status: Option<&Value>,
) -> Result<(Option<Geometry>, Option<ReadPolicy>)> {
    let (volume, present_policy) = match (&a.volume[..], status) {
        ([], Some(st)) => (
            Some(live_geometry(st)?),
            st["read_policy"]["policy"]
                .as_str()
                .and_then(|p| p.parse::<ReadPolicy>().ok()),
        ),
        ([], None) => (None, None),
        (v, _) => {
            let (g, p) = crate::sweep::volume_layout_and_policy(v)?;
            (Some(g), p)
        }
    };
    let present_policy = present_policy.filter(|_| volume.as_ref().is_some_and(|g| g.copies() > 1));
    Ok((volume, present_policy))
}

/// The trace to replay: --trace, else the server's last recording, once
/// it has stopped.
fn trace_of(a: &AdviseArgs, status: Option<&Value>) -> Result<String> {
    match (&a.trace, status) {
        (Some(t), _) => Ok(t.clone()),
        (None, Some(st)) => {
            let rec = &st["recording"];
            match (rec["path"].as_str(), rec["recording"].as_bool()) {
                (Some(_), Some(true)) => Err(CliError(
                    "the server is still recording: stop it first (platter record \
                     --control PATH stop), or give --trace"
                        .into(),
                )),
                (Some(p), _) => Ok(p.to_string()),
                (None, _) => Err(CliError(
                    "the server has recorded nothing: platter record --control PATH start \
                     FILE, let the load run, stop it; or give --trace"
                        .into(),
                )),
            }
        }
        (None, None) => Err(CliError("give --trace FILE, or --control PATH".into())),
    }
}

/// The sweep to run: the asked levels, member counts and policies, each
/// defaulting to the volume's, with the volume's own layout among the
/// points.
fn sweep_args(
    a: &AdviseArgs,
    volume: Option<&Geometry>,
    present_policy: Option<ReadPolicy>,
    trace: &str,
) -> Result<SweepArgs> {
    let mut levels = a.levels.clone();
    if levels.is_empty() {
        levels = vec![Level::Raid10, Level::Raid5, Level::Raid6];
        if let Some(g) = volume {
            levels.retain(|l| *l != g.level());
            levels.insert(0, g.level());
        }
    }
    let members = match (&a.members[..], volume) {
        ([], Some(g)) => vec![g.members()],
        ([], None) => vec![4],
        (m, _) => m.to_vec(),
    };
    // The policy in use is among those compared.
    let mut policies = a.policies.clone();
    if let Some(p) = present_policy {
        if !policies.contains(&p) {
            policies.push(p);
        }
    }
    Ok(SweepArgs {
        drive: a.drive.clone(),
        workload: workload_of(trace)?,
        levels,
        members,
        interleaves: a.interleaves.clone(),
        policies,
        seed: a.seed,
        max_transfer: "128k".into(),
        queue_depth: a.queue_depth,
        member_size: a.member_size.clone(),
        threads: a.threads,
        volume_geometry: volume.cloned(),
        ..SweepArgs::default()
    })
}

/// Whether the row is the volume's own layout (any read policy).
fn is_volume(r: &Row, g: &Geometry) -> bool {
    r.point.level == g.level()
        && r.point.members == g.members()
        && r.point.interleave_bytes == g.interleave_bytes()
}

/// A change that gains nothing is not advice: the volume's own layout
/// wins a tie (a mirror's interleave changes nothing; an overloaded
/// replay ties every layout at the drives' speed).
fn ties(a: &Row, b: &Row) -> bool {
    match (&a.result, &b.result) {
        (Ok(x), Ok(y)) => {
            x.mb_per_s() >= y.mb_per_s() * 0.98
                && x.mean_latency_ns as f64 <= y.mean_latency_ns as f64 * 1.02
        }
        _ => false,
    }
}

/// What the comparison says: the best layout for the load, the volume as
/// it runs, the best it can become in place and the commands for that.
struct Advice<'a> {
    top: &'a Row,
    now: Option<&'a Row>,
    in_place: Option<&'a Row>,
    commands: Vec<String>,
    present_policy: Option<ReadPolicy>,
    /// The layouts left out for their redundancy.
    set_aside: Option<String>,
    short: Option<(u64, String)>,
}

impl<'a> Advice<'a> {
    fn new(
        a: &AdviseArgs,
        sweep: &Sweep,
        rows: &'a [Row],
        volume: Option<&Geometry>,
        present_policy: Option<ReadPolicy>,
    ) -> Result<Advice<'a>> {
        let (advisable, set_aside) = redundancy_floor(sweep, rows, volume, a.allow_less_redundancy);
        let Some(mut top) = best(advisable.iter().copied()) else {
            return Err(CliError(format!(
                "no configuration that keeps the volume's redundancy ran the trace \
                 (--allow-less-redundancy compares the others):\n{}",
                table(rows)
            )));
        };
        let short = too_short(rows);
        // As it runs now: its read policy when known, else its best one.
        let now = volume.and_then(|g| {
            best(
                rows.iter()
                    .filter(|r| is_volume(r, g))
                    .filter(|r| present_policy.is_none() || r.point.policy == present_policy),
            )
        });
        if let Some(n) = now.filter(|n| ties(n, top)) {
            top = n;
        }
        let (in_place, commands) = match volume {
            Some(g) => in_place(a, sweep, &advisable, g, now, present_policy),
            None => (None, Vec::new()),
        };
        Ok(Advice {
            top,
            now,
            in_place,
            commands,
            present_policy,
            set_aside,
            short,
        })
    }

    fn print_json(&self, rows: &[Row], said: Option<&str>) {
        for r in rows {
            outln!("{}", row_json(r));
        }
        outln!(
            "{}",
            json!({
                "best": row_json(self.top),
                "volume": self.now.map(row_json),
                "volume_read_policy": self.present_policy.map(|p| p.to_string()),
                "best_in_place": self.in_place.map(row_json),
                "commands": self.commands,
                "counters": said,
                "not_advised": self.set_aside,
                "trace_requests": self.short.as_ref().map(|s| s.0),
                "too_short": self.short.as_ref().map(|s| &s.1),
            })
        );
    }

    fn print_text(&self, rows: &[Row], said: Option<&str>, has_volume: bool) {
        out!("{}", table(rows));
        outln!();
        if let Some(said) = said {
            outln!("{said}");
        }
        if let Some((_, warning)) = &self.short {
            outln!("warning: {warning}");
        }
        if let Some(line) = &self.set_aside {
            outln!("{line}");
        }
        outln!("best for this load: {}", describe(self.top));
        if let Some(n) = self.now {
            self.print_against(n);
        }
        for c in &self.commands {
            outln!("  {c}");
        }
        if !has_volume {
            outln!("(give --volume MEMBERS to compare with a volume and get its reshape command)");
        }
    }

    /// The volume as it runs, and how the best and the best in place
    /// compare with it.
    fn print_against(&self, n: &Row) {
        let ratio = |r: &Row| match (&r.result, &n.result) {
            (Ok(a), Ok(b)) if b.mb_per_s() > 0.0 => a.mb_per_s() / b.mb_per_s(),
            _ => 0.0,
        };
        match self.present_policy {
            Some(p) => outln!("the volume as it runs (read policy {p}): {}", describe(n)),
            None => outln!(
                "the volume's layout (its best read policy): {}",
                describe(n)
            ),
        }
        outln!("  the best is {:.2}x its throughput", ratio(self.top));
        match self.in_place {
            Some(r) if std::ptr::eq(r, n) => {
                outln!("  the volume's layout is the best it can reshape to in place")
            }
            Some(r) => outln!(
                "  the best it can reshape to in place: {} ({:.2}x)",
                describe(r),
                ratio(r)
            ),
            None => {}
        }
    }
}

/// The best layout the volume can reshape to on its own members (its own
/// on a tie), and the `reshape` and `read-policy` commands that take it
/// there.
fn in_place<'a>(
    a: &AdviseArgs,
    sweep: &Sweep,
    advisable: &[&'a Row],
    g: &Geometry,
    now: Option<&'a Row>,
    present_policy: Option<ReadPolicy>,
) -> (Option<&'a Row>, Vec<String>) {
    let control = a
        .control
        .as_ref()
        .map_or_else(|| "PATH".to_string(), |c| c.display().to_string());
    let mut commands = Vec::new();
    let reachable = |r: &&Row| reshape_reaches(g, r, a.allow_less_redundancy);
    let mut in_place = best(
        advisable
            .iter()
            .copied()
            .filter(|r| r.point.members == g.members())
            .filter(reachable),
    );
    if let (Some(n), Some(r)) = (now, in_place) {
        if ties(n, r) {
            in_place = Some(n);
        }
    }
    if let Some(r) = in_place.filter(|r| !is_volume(r, g)) {
        let mut cmd = format!("platter reshape --control {control}");
        if r.point.level != g.level() {
            cmd += &format!(" --level {}", r.point.level);
        }
        if r.point.interleave_bytes != g.interleave_bytes() {
            cmd += &format!(
                " --interleave {}",
                format_interleave(r.point.interleave_bytes)
            );
        }
        if redundancy_of(sweep, r) < g.redundancy() {
            cmd += " --force";
        }
        commands.push(cmd);
    }
    if let Some(policy) = in_place.and_then(|r| r.point.policy) {
        if Some(policy) != present_policy {
            commands.push(format!("platter read-policy --control {control} {policy}"));
        }
    }
    (in_place, commands)
}

/// Whether `platter reshape` can move `g` to the row's layout on the same
/// members: the plan accepts it, with the room before the data past the
/// label (a bitmap there, unknown here, leaves a little less), and the
/// volume keeps its redundancy unless `allow_less` (a reshape that lowers
/// it needs --force, and speed alone is no reason to advise one).
fn reshape_reaches(g: &Geometry, r: &Row, allow_less: bool) -> bool {
    if r.point.level == g.level() && r.point.interleave_bytes == g.interleave_bytes() {
        return true;
    }
    let asked = Asked {
        added_members: r.point.members.saturating_sub(g.members()),
        level: Some(r.point.level),
        parity_layout: None,
        interleave_bytes: Some(r.point.interleave_bytes),
    };
    let Ok(new) = target(g, &asked) else {
        return false;
    };
    if !allow_less && redundancy_lost(g, &new).is_some() {
        return false;
    }
    let reserved = reserved_from_bytes(g, &new, 0);
    Plan::choose(g.clone(), new, reserved).is_ok()
}
