//! The live page (issue 17): `serve --metrics` also serves `/`, drawn on
//! the server as HTML and SVG. Under load on one member of a concat (the
//! classic badly chosen layout: "one drive is quite active while the other
//! is virtually idle"), headless Chromium loads the page: its DOM shows
//! that member busy and the other idle, and its screenshot is saved
//! (target/tmp/livepage-*.png) for a person to look at.

mod e2e_support;

use e2e_support::*;
use std::io::{Read, Write};
use std::time::Duration;

fn metrics_base(s: &Server) -> String {
    s.stdout_lines()
        .iter()
        .find_map(|l| l.trim().strip_prefix("metrics: ").map(str::to_string))
        .unwrap_or_else(|| panic!("no metrics line in {:?}", s.stdout_lines()))
        .trim_end_matches("/metrics")
        .to_string()
}

/// GET `path` with a plain socket: (status line, body).
fn get(base: &str, path: &str) -> (String, String) {
    let addr = base.trim_start_matches("http://");
    let mut c = std::net::TcpStream::connect(addr).expect("connect to --metrics");
    write!(c, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response");
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// `data-busy-percent` of the row of `slot` in a page or DOM.
fn busy_percent(dom: &str, slot: usize) -> f64 {
    let row = dom
        .split(&format!("id=\"member-{slot}\""))
        .nth(1)
        .unwrap_or_else(|| panic!("no member-{slot} row in\n{dom}"));
    let v = row
        .split("data-busy-percent=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("a busy share");
    v.parse().expect("a number")
}

#[test]
fn the_live_page_shows_the_loaded_member_hot() {
    let test = "the_live_page_shows_the_loaded_member_hot";
    let Some(t) = tools_with_fio_nbd(test, &["fio", "chromium"]) else {
        return;
    };
    let volume = Volume::create(Spec::new("concat", 2, "64k"), 64 * MIB);
    // Both members get the same latency (a disk's, not tmpfs's
    // microseconds): only the load tells them apart.
    let inject = inject_every_member(&volume, "latency=1ms");
    let s = Server::start_with(
        volume,
        ServeOptions {
            inject,
            extra_args: vec!["--metrics".into(), "127.0.0.1:0".into()],
            ..ServeOptions::default()
        },
    );
    let base = metrics_base(&s);
    let (status, page) = get(&base, "/");
    assert!(status.contains("200"), "{status}");
    assert!(!page.contains("<script"), "no script on the page");
    assert!(
        !page.contains("src=\"http") && !page.contains("href=\"http"),
        "no external asset"
    );
    // Random reads in the first 8 MiB: all on member 0 of the concat.
    let mut fio = t.cmd("fio");
    fio.args([
        "--name=hot",
        "--ioengine=nbd",
        &format!("--uri={}", s.uri()),
        "--rw=randread",
        "--bs=4k",
        "--iodepth=4",
        "--size=8M",
        "--time_based",
        // Longer than the test needs (Chromium may be slow to start on a
        // busy machine): stopped once the page is taken.
        "--runtime=60",
    ]);
    let mut load = Background::spawn(&mut fio, "fio on member 0");
    std::thread::sleep(Duration::from_secs(5));
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("livepage-{}.png", std::process::id()));
    let chromium = |extra: &[&str]| {
        let mut c = t.cmd("chromium");
        c.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1300,900",
        ])
        .args(extra)
        .arg(format!("{base}/"));
        run(&mut c, CMD_TIMEOUT)
    };
    let dom = chromium(&["--dump-dom"]);
    assert!(
        dom.status.success(),
        "{}",
        dom.describe("chromium --dump-dom")
    );
    let screenshot = chromium(&[&format!("--screenshot={}", shot.display())]);
    assert!(
        screenshot.status.success(),
        "{}",
        screenshot.describe("chromium --screenshot")
    );
    assert!(load.is_running(), "fio ended early: {}", load.stderr());
    load.kill();
    let (hot, cold) = (busy_percent(&dom.stdout, 0), busy_percent(&dom.stdout, 1));
    assert!(
        hot > 50.0 && cold < 5.0,
        "member 0 busy {hot}%, member 1 {cold}%: the DOM was\n{}",
        dom.stdout
    );
    assert!(dom.stdout.contains("<svg"), "drawn as SVG");
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    // The counters are still at /metrics beside the page.
    let (status, metrics) = get(&base, "/metrics");
    assert!(
        status.contains("200") && metrics.contains("platter_"),
        "{status}"
    );
}
