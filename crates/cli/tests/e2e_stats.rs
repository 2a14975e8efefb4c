//! Issue 5, points 3 and 4 on a real server: known I/O with qemu-io, then
//! the counters scraped from `serve --metrics` (Prometheus text), `platter
//! stats --json` agreeing with them, the table, `--reset`, and `--watch`
//! without a terminal.

mod e2e_support;

use e2e_support::*;
use serde_json::Value;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn stats_json(s: &Server, extra: &[&str]) -> Value {
    let ctl = s.control();
    let mut args = vec!["stats", "--json", "--control", &ctl];
    args.extend(extra);
    let out = run_ok(&mut platter(&args), CMD_TIMEOUT, "platter stats --json");
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("stats --json is not JSON: {e}\n{}", out.stdout))
}

/// `http://HOST:PORT/metrics` from the server's banner.
fn metrics_url(s: &Server) -> String {
    s.stdout_lines()
        .iter()
        .find_map(|l| l.strip_prefix("metrics: ").map(str::to_string))
        .unwrap_or_else(|| panic!("no metrics line in {:?}", s.stdout_lines()))
}

/// GET /metrics with a plain TcpStream; the samples by `name{labels}`.
fn scrape(url: &str) -> HashMap<String, f64> {
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (addr, path) = rest.split_once('/').expect("a path");
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET /{path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read the answer");
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
    let mut samples = HashMap::new();
    for line in body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, value) = line.rsplit_once(' ').expect("name value");
        samples.insert(name.to_string(), value.parse::<f64>().expect("a number"));
    }
    samples
}

fn sample(m: &HashMap<String, f64>, name: &str, labels: &str) -> u64 {
    let key = format!("{name}{{{labels}}}");
    *m.get(&key)
        .unwrap_or_else(|| panic!("no sample {key} among {} samples", m.len())) as u64
}

#[test]
fn stats_and_metrics_on_a_served_raid5() {
    let test = "stats_and_metrics_on_a_served_raid5";
    let Some(t) = tools(test, &["qemu-io"]) else {
        return;
    };
    let volume = Volume::create(Spec::new("raid5", 4, "64k"), 16 * MIB);
    let (il, d) = (volume.interleave_bytes, volume.stripe_data_bytes);
    assert_eq!(d, 3 * il);
    let s = Server::start_with(
        volume,
        ServeOptions {
            extra_args: vec!["--metrics".into(), "127.0.0.1:0".into()],
            ..ServeOptions::default()
        },
    );
    let url = metrics_url(&s);
    let vol = format!("volume=\"{}\"", s.volume.name);

    // Start from zero: --reset answers with the zeroed counters.
    let z = stats_json(&s, &["--reset"]);
    assert_eq!(z["volume"]["writes"], 0, "{z}");
    // The back end is the one asked for: the suite runs once as it comes
    // (io_uring, which CI's kernel has) and once with the thread pool
    // forced (scripts/test), and each run must really use its own.
    let forced = std::env::var("PLATTER_IO_BACKEND").unwrap_or_default();
    let backend = z["io_backend"].as_str().expect("io_backend in stats");
    match forced.as_str() {
        "threads" => assert_eq!(backend, "threads", "{z}"),
        _ if std::env::var("CI").as_deref() == Ok("true") => {
            assert_eq!(backend, "io-uring", "CI's kernel has io_uring: {z}")
        }
        _ if backend != "io-uring" => {
            eprintln!(
                "{test}: member I/O ran on threads: io_uring refused here (see the server log)"
            )
        }
        _ => {}
    }
    assert_eq!(z["volume"]["bytes_written"], 0, "{z}");

    // Known I/O: a full aligned stripe (multiblock, one full-stripe write),
    // a write across the boundary of stripes 4 and 5 (multistripe), a write
    // over two interleaves of stripe 8 (multiblock only), and a read inside
    // one interleave (neither).
    let cmds = vec![
        format!("write -P 0xab {d} {d}"),
        format!("write -P 0xcd {} 8192", 5 * d - 4096),
        format!("write -P 0xef {} 8192", 8 * d + il - 4096),
        format!("read -P 0xab {} 4096", d + il),
    ];
    qemu_io(&t, s.uri(), &cmds, "qemu-io known pattern");
    let written = d + 8192 + 8192;

    let m = scrape(&url);
    let v = |name: &str| sample(&m, &format!("platter_volume_{name}"), &vol);
    assert_eq!(v("writes_total"), 3);
    assert_eq!(v("written_bytes_total"), written);
    assert_eq!(v("multistripe_total"), 1);
    assert_eq!(v("full_stripe_writes_total"), 1);
    // The two small writes: one stripe each side of the boundary, one for
    // the write inside stripe 8.
    assert_eq!(
        v("read_modify_writes_total") + v("reconstruct_writes_total"),
        3
    );
    assert_eq!(v("degraded_writes_total"), 0);
    assert_eq!(v("errors_total"), 0);
    assert!(v("reads_total") >= 1 && v("read_bytes_total") >= 4096);
    let reads = v("reads_total");
    // Every write is multiblock; the reads qemu-io made are inside one
    // interleave.
    assert_eq!(v("multiblock_total"), 3);
    assert_eq!(v("write_latency_seconds_count"), 3);
    assert_eq!(v("read_latency_seconds_count"), reads);
    let plex = format!("{vol},plex=\"0\"");
    assert_eq!(
        sample(&m, "platter_plex_written_bytes_total", &plex),
        written
    );
    // The members received the data and the parity of what was written:
    // the full stripe is four interleaves, each small write one data and
    // one parity piece per stripe (plus any write-intent bitmap blocks).
    let member_written: u64 = (0..4)
        .map(|i| {
            sample(
                &m,
                "platter_member_written_bytes_total",
                &format!("{vol},member=\"{i}\""),
            )
        })
        .sum();
    assert!(
        member_written >= 4 * il + 3 * 2 * 4096,
        "members got {member_written} bytes"
    );
    let inf = format!("platter_member_latency_seconds_bucket{{le=\"+Inf\",{vol},member=\"0\"}}");
    assert!(
        m.contains_key(&inf),
        "{inf} missing: {:?}",
        m.keys()
            .filter(|k| k.contains("member_latency"))
            .collect::<Vec<_>>()
    );
    // Cumulative: +Inf holds every member I/O timed.
    assert_eq!(
        m[&inf] as u64,
        sample(
            &m,
            "platter_member_latency_seconds_count",
            &format!("{vol},member=\"0\"")
        )
    );

    // `platter stats --json` says the same.
    let j = stats_json(&s, &[]);
    let jv = &j["volume"];
    for (key, metric) in [
        ("writes", "writes_total"),
        ("bytes_written", "written_bytes_total"),
        ("reads", "reads_total"),
        ("bytes_read", "read_bytes_total"),
        ("multiblock", "multiblock_total"),
        ("multistripe", "multistripe_total"),
        ("full_stripe_writes", "full_stripe_writes_total"),
        ("read_modify_writes", "read_modify_writes_total"),
        ("reconstruct_writes", "reconstruct_writes_total"),
    ] {
        assert_eq!(jv[key].as_u64(), Some(v(metric)), "{key}: {j}");
    }
    assert_eq!(j["plexes"][0]["bytes_written"].as_u64(), Some(written));
    assert_eq!(j["members"].as_array().map(Vec::len), Some(4));
    assert_eq!(j["volume"]["write_latency"]["count"], 3);
    assert!(j["volume"]["write_latency"]["max"].as_u64() > Some(0));
    assert_eq!(j["level"], "raid5");

    // The table for people.
    let ctl = s.control();
    let out = run_ok(
        &mut platter(&["stats", "--control", &ctl]),
        CMD_TIMEOUT,
        "platter stats",
    );
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines[0].starts_with("Name") && lines[0].contains("Mstripe"),
        "{}",
        out.stdout
    );
    assert!(
        lines[1].starts_with(&format!("V {}", s.volume.name)),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains(&format!("P {}.p0", s.volume.name)));
    assert!(out.stdout.contains(&format!("M {}.m3", s.volume.name)));
    assert!(out.stdout.contains("1 full-stripe"), "{}", out.stdout);

    // --reset zeroes, here and in the scrape.
    let r = stats_json(&s, &["--reset"]);
    assert_eq!(r["volume"]["writes"], 0, "{r}");
    assert_eq!(r["volume"]["write_latency"]["count"], 0, "{r}");
    let m = scrape(&url);
    assert_eq!(sample(&m, "platter_volume_written_bytes_total", &vol), 0);
    assert_eq!(sample(&m, "platter_volume_multistripe_total", &vol), 0);

    // --watch without a terminal: plain refreshes, rates after the first.
    let mut w = Background::spawn(
        &mut platter(&["stats", "--watch", "1", "--control", &ctl]),
        "platter stats --watch 1",
    );
    let mut refreshes = 0;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(100));
        refreshes = w.stdout().lines().filter(|l| l.starts_with("--- ")).count();
        if refreshes >= 2 || !w.is_running() {
            break;
        }
    }
    w.kill();
    let text = w.stdout();
    assert!(refreshes >= 2, "{text}\n{}", w.stderr());
    assert!(text.contains("per second over the last"), "{text}");
    assert!(
        !text.contains('\x1b'),
        "no screen control off a terminal: {text:?}"
    );

    // --watch --json: one object per line, rates from the second on.
    let mut w = Background::spawn(
        &mut platter(&["stats", "--watch", "0.2", "--json", "--control", &ctl]),
        "platter stats --watch 0.2 --json",
    );
    let mut lines = Vec::new();
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(100));
        lines = w.stdout().lines().map(str::to_string).collect::<Vec<_>>();
        if lines.len() >= 3 || !w.is_running() {
            break;
        }
    }
    w.kill();
    assert!(lines.len() >= 3, "{lines:?}\n{}", w.stderr());
    for (i, l) in lines.iter().take(2).enumerate() {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        assert_eq!(v["rates"].is_object(), i > 0, "{l}");
        assert!(v["volume"]["writes"].is_u64(), "{l}");
    }
}

/// Full-stripe share of the stripe writes `platter stats --json` reports,
/// once the stripe cache has nothing left to write out (its ticks are
/// 20 ms apart; qemu-io and fio flush at the end anyway).
fn full_stripe_share(s: &Server) -> (f64, Value) {
    let mut last = Value::Null;
    for _ in 0..50 {
        let mut j = stats_json(s, &[]);
        // Asking for the statistics takes the engine lock, so its use
        // moves with every look; it is not what must settle.
        j.as_object_mut().expect("an object").remove("engine_lock");
        let v = &j["volume"];
        let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k}: {j}"));
        let (full, rmw, rcw) = (
            n("full_stripe_writes"),
            n("read_modify_writes"),
            n("reconstruct_writes"),
        );
        if full + rmw + rcw > 0 && j == last {
            return (full as f64 / (full + rmw + rcw) as f64, j);
        }
        last = j;
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the stripe counts did not settle: {last}");
}

/// Issue 6, point 2: sequential 1 MiB writes to RAID-5 over 4 members at
/// 64 KiB interleave (a 192 KiB data stripe) are at least 90% full-stripe
/// writes, with qemu-io (one write at a time) and fio (8 in flight); and
/// without the stripe cache they are not (so this test can fail).
#[test]
fn sequential_mib_writes_are_full_stripe_writes() {
    let test = "sequential_mib_writes_are_full_stripe_writes";
    let Some(t) = tools(test, &["qemu-io"]) else {
        return;
    };
    let total = 32 * MIB;
    let qemu_writes: Vec<String> = (0..total / MIB)
        .map(|i| format!("write -P 0x{:02x} {} {}", 0x40 + i, i * MIB, MIB))
        .collect();
    let qemu_reads: Vec<String> = (0..total / MIB)
        .map(|i| format!("read -P 0x{:02x} {} {}", 0x40 + i, i * MIB, MIB))
        .collect();
    for cache in [true, false] {
        let volume = Volume::create(Spec::new("raid5", 4, "64k"), total + 4 * MIB);
        assert_eq!(volume.stripe_data_bytes, 192 * KIB);
        let mut options = ServeOptions::default();
        if !cache {
            options.extra_args = vec!["--stripe-cache".into(), "0".into()];
        }
        let s = Server::start_with(volume, options);
        // qemu-io's default cache mode is writethrough: every write would
        // be durable on completion (FUA), which the cache must not hold.
        qemu_io_with(
            &t,
            &["-t", "writeback"],
            s.uri(),
            &qemu_writes,
            "qemu-io sequential 1 MiB writes",
        );
        let (share, j) = full_stripe_share(&s);
        eprintln!(
            "qemu-io, stripe cache {}: {:.1}% full-stripe writes",
            if cache { "on" } else { "off" },
            100.0 * share
        );
        if cache {
            assert!(share >= 0.9, "{share}: {j}");
        } else {
            assert!(share < 0.9, "without the cache: {share}: {j}");
        }
        qemu_io(&t, s.uri(), &qemu_reads, "qemu-io read back");
        if !cache {
            continue;
        }
        // fio: 8 writes in flight.
        let Some(f) = tools(&format!("{test} (fio)"), &["fio"]) else {
            continue;
        };
        if !fio_has_nbd(&f) {
            platter_testkit::skips::skipped(test, "fio has no nbd engine (`fio --enghelp`)");
            continue;
        }
        stats_json(&s, &["--reset"]);
        let out = run_ok(
            f.cmd("fio")
                .args([
                    "--name=seq",
                    "--thread",
                    "--ioengine=nbd",
                    "--rw=write",
                    "--bs=1M",
                    "--iodepth=8",
                    "--verify=crc32c",
                    "--do_verify=1",
                    "--verify_fatal=1",
                    "--verify_state_save=0",
                ])
                .arg(format!("--uri={}", s.uri()))
                .arg(format!("--size={total}")),
            CMD_TIMEOUT,
            "fio sequential 1 MiB writes, 8 in flight",
        );
        assert!(out.stdout.contains("err= 0"), "{}", out.describe("fio"));
        let (share, j) = full_stripe_share(&s);
        eprintln!("fio, 8 in flight: {:.1}% full-stripe writes", 100.0 * share);
        assert!(share >= 0.9, "fio: {share}: {j}");
    }
}

/// A gauge's value, fractions kept.
fn gauge(m: &HashMap<String, f64>, name: &str, labels: &str) -> f64 {
    let key = format!("{name}{{{labels}}}");
    *m.get(&key)
        .unwrap_or_else(|| panic!("no sample {key} among {} samples", m.len()))
}

/// Scrapes until `done` holds of the samples (at most 120 s); answers
/// those samples.
fn scrape_until(
    url: &str,
    what: &str,
    done: impl Fn(&HashMap<String, f64>) -> bool,
) -> HashMap<String, f64> {
    let start = std::time::Instant::now();
    loop {
        let m = scrape(url);
        if done(&m) {
            return m;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{what}: not within 120 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Issue 41: Prometheus could not alert on a degraded volume: /metrics had
/// no gauge for the volume's state, its members or a rebuild. The gauges
/// follow a `platter fail` and a `replace` through to the end of its
/// rebuild, which `rebuild-rate unlimited` lets finish at once.
#[test]
fn metrics_follow_a_failure_and_a_rebuild() {
    let test = "metrics_follow_a_failure_and_a_rebuild";
    let volume = Volume::create(Spec::new("mirror", 2, "64k"), 16 * MIB);
    // 1 MiB a second: the rebuild's 4 MiB steps take seconds each, so it
    // is seen under way however slow the machine.
    let s = Server::start_with(
        volume,
        ServeOptions {
            extra_args: ["--metrics", "127.0.0.1:0", "--rebuild-rate", "1M"]
                .map(String::from)
                .to_vec(),
            ..ServeOptions::default()
        },
    );
    let url = metrics_url(&s);
    let vol = format!("volume=\"{}\"", s.volume.name);
    let state = |m: &HashMap<String, f64>, st: &str| {
        gauge(m, "platter_volume_state", &format!("{vol},state=\"{st}\""))
    };
    let m = scrape(&url);
    assert_eq!(state(&m, "clean"), 1.0);
    for st in ["degraded", "rebuilding", "failed"] {
        assert_eq!(state(&m, st), 0.0, "{st}");
    }
    assert_eq!(gauge(&m, "platter_members_online", &vol), 2.0);
    assert_eq!(gauge(&m, "platter_members_expected", &vol), 2.0);
    assert_eq!(gauge(&m, "platter_rebuild_in_progress", &vol), 0.0);

    run_ok(
        &mut platter(&["fail", "--control", &s.control(), "1"]),
        CMD_TIMEOUT,
        "fail 1",
    );
    let m = scrape(&url);
    assert_eq!(state(&m, "degraded"), 1.0, "{test}");
    assert_eq!(state(&m, "clean"), 0.0, "{test}");
    assert_eq!(gauge(&m, "platter_members_online", &vol), 1.0);
    assert_eq!(gauge(&m, "platter_members_expected", &vol), 2.0);

    let new = s.volume.path().join("new1").display().to_string();
    let size = s.volume.member_size_bytes.to_string();
    run_ok(
        &mut platter(&[
            "replace",
            "--member-size",
            &size,
            "--control",
            &s.control(),
            "1",
            &new,
        ]),
        CMD_TIMEOUT,
        "replace 1",
    );
    let m = scrape(&url);
    assert_eq!(state(&m, "rebuilding"), 1.0, "{test}");
    assert_eq!(gauge(&m, "platter_members_online", &vol), 1.0);
    assert_eq!(gauge(&m, "platter_rebuild_in_progress", &vol), 1.0);
    let ratio = "platter_rebuild_progress_ratio";
    let m = scrape_until(&url, "the rebuild's first step", |m| {
        gauge(m, ratio, &vol) > 0.0
    });
    let done = gauge(&m, ratio, &vol);
    assert!(done > 0.0 && done < 1.0, "{test}: {ratio} {done}");
    assert_eq!(gauge(&m, "platter_rebuild_in_progress", &vol), 1.0);

    run_ok(
        &mut platter(&["rebuild-rate", "--control", &s.control(), "unlimited"]),
        CMD_TIMEOUT,
        "rebuild-rate unlimited",
    );
    let m = scrape_until(&url, "the rebuild's end", |m| {
        gauge(m, "platter_rebuild_in_progress", &vol) == 0.0
    });
    assert_eq!(state(&m, "clean"), 1.0, "{test}");
    assert_eq!(state(&m, "rebuilding"), 0.0, "{test}");
    assert_eq!(gauge(&m, "platter_members_online", &vol), 2.0);
    assert_eq!(gauge(&m, ratio, &vol), 0.0);
}
