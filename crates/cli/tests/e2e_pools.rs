//! Issue 43 on the real binary: a pool of file drives carved into a
//! raid10, a raid5 and a concat volume, served by one server (every
//! volume an export of its name, `nbdinfo --list` naming them), each
//! written and verified by its own fio at the same time; a drive lost
//! under them; `printconfig` taken back by `pool create --config` on fresh
//! drives, byte for byte; and bad input refused with one line, nothing
//! written.

mod e2e_support;

use e2e_support::pool::*;
use e2e_support::*;
use serde_json::Value;
use std::path::Path;

const DRIVES: usize = 4;

fn drive_paths(dir: &Path) -> Vec<String> {
    (0..DRIVES)
        .map(|i| dir.join(format!("d{i}")).display().to_string())
        .collect()
}

/// A pool `tank` of four drives in `dir/d` with three volumes.
fn make_pool(dir: &Path) -> String {
    let d = dir.join("d");
    std::fs::create_dir(&d).unwrap();
    let drives = drive_paths(&d);
    let mut args = vec!["pool", "create", "tank", "--drive-size", "160M"];
    args.extend(drives.iter().map(String::as_str));
    ok(&args, "pool create");
    let dev = d.display().to_string();
    for (name, level, size) in [
        ("db", "raid10", "48M"),
        ("bulk", "raid5", "60M"),
        ("scratch", "concat", "24M"),
    ] {
        ok(
            &[
                "volume", "create", "tank", name, "--level", level, "--size", size, &dev,
            ],
            &format!("volume create {name}"),
        );
    }
    dev
}

/// The server of the pool: its first volume's export is the banner's.
fn serve_pool(dir: &Path, dev: &str) -> Server {
    serve_pool_with(dir, dev, &[])
}

fn serve_pool_with(dir: &Path, dev: &str, extra: &[&str]) -> Server {
    serve_pool_first(dir, dev, "db", extra)
}

#[test]
fn a_pool_serves_its_volumes_through_one_server_and_a_lost_drive_costs_each_its_own() {
    let test = "a_pool_serves_its_volumes_through_one_server_and_a_lost_drive_costs_each_its_own";
    let Some(t) = tools_with_fio_nbd(test, &["fio", "nbdinfo", "qemu-io"]) else {
        return;
    };
    let dir = temp_dir();
    let dev = make_pool(dir.path());
    let pool = list_json(&dev);
    assert_eq!(pool["drives"].as_array().unwrap().len(), DRIVES, "{pool}");
    for v in pool["volumes"].as_array().unwrap() {
        assert_eq!(v["state"], "up", "{v}");
    }
    // `scan` finds the pool by its drives, and says how to serve it.
    let scan = ok(&["scan", &dev], "scan");
    assert!(
        scan.stdout.contains("pool 'tank'") && scan.stdout.contains("4 of 4 drives"),
        "{}",
        scan.stdout
    );
    assert!(scan.stdout.contains("serve --pool tank"), "{}", scan.stdout);
    let mut s = serve_pool_with(dir.path(), &dev, &["--metrics", "127.0.0.1:0"]);
    let listed = run_ok(
        t.cmd("nbdinfo").arg("--list").arg(uri(&s, "")),
        CMD_TIMEOUT,
        "nbdinfo --list",
    );
    for name in ["db", "bulk", "scratch"] {
        assert!(
            listed.stdout.contains(&format!("export=\"{name}\"")),
            "{}",
            listed.stdout
        );
    }
    let volumes = sizes(&pool);
    let v: Vec<(&str, u64)> = volumes.iter().map(|(n, b)| (n.as_str(), *b)).collect();
    fio_all(&t, &s, &v, false);
    // The host's list names each of the pool's volumes at its socket.
    let host: Value = serde_json::from_str(&ok(&["status", "--json"], "status").stdout).unwrap();
    let ours: Vec<&str> = host["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["control"].as_str() == Some(s.control().as_str()))
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(ours, ["db", "bulk", "scratch"], "{host}");
    // One scrape holds every volume's series, each family once.
    let url = s
        .stdout_lines()
        .iter()
        .find_map(|l| l.strip_prefix("metrics: ").map(str::to_string))
        .expect("a metrics line");
    let metrics = http_get(&url);
    for name in ["db", "bulk", "scratch"] {
        let series = format!("platter_volume_state{{volume=\"{name}\"");
        assert!(metrics.contains(&series), "{series} in {metrics}");
    }
    assert_eq!(
        metrics.matches("# TYPE platter_volume_state ").count(),
        1,
        "{metrics}"
    );
    assert_drives_sum_the_volumes(&s, &metrics);
    let page = http_get(&url.replace("/metrics", "/?volume=bulk"));
    assert!(
        page.contains("<a href=\"/?volume=scratch\">scratch</a>")
            && page.contains("<tr><td>d3</td><td>"),
        "{page}"
    );
    // Each redundant volume's copies and parity agree after the load.
    for name in ["db", "bulk"] {
        ok(
            &["check", "--volume", name, "--control", &s.control()],
            &format!("check {name}"),
        );
    }

    // The drive holding the concat's only subdisk is lost: truncated
    // under the running server, as a pulled disk would be.
    let scratch = &pool["volumes"][2]["plexes"][0]["subdisks"][0];
    let lost = scratch["drive"].as_str().unwrap().to_string();
    let file = Path::new(&dev).join(&lost);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(0)
        .unwrap();
    let redundant: Vec<(&str, u64)> = v.iter().copied().filter(|(n, _)| *n != "scratch").collect();
    // The redundant volumes serve on, every byte as written.
    fio_all(&t, &s, &redundant, true);
    let read = run(
        t.cmd("qemu-io")
            .args(["-f", "raw", "-c", "read 0 64k"])
            .arg(uri(&s, "scratch")),
        CMD_TIMEOUT,
    );
    assert!(
        read.stdout.contains("Input/output error") || read.stderr.contains("Input/output error"),
        "the concat's lost range answers EIO: {}",
        read.describe("qemu-io read scratch")
    );
    for name in ["db", "bulk"] {
        let st = live(&s, name);
        let faulty = st["members"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["state"] != "active")
            .count();
        assert_eq!(faulty, 1, "{name} lost the one subdisk on {lost}: {st}");
    }
    // `list --control` says what the server sees: each redundant volume
    // degraded, its subdisk on the lost drive faulty.
    let listed = ok(
        &["list", "--json", "--control", &s.control(), &dev],
        "list --control",
    );
    let listed: Value = serde_json::from_str(&listed.stdout).unwrap();
    for v in listed[0]["volumes"].as_array().unwrap() {
        if v["name"] == "scratch" {
            continue;
        }
        assert_eq!(v["state"], "degraded", "{v}");
        for sd in v["plexes"][0]["subdisks"].as_array().unwrap() {
            let want = if sd["drive"] == lost.as_str() {
                "faulty"
            } else {
                "up"
            };
            assert_eq!(sd["state"], want, "{v}");
        }
    }
    // A spare drive added through the server takes the lost subdisk of
    // each redundant volume at once; both rebuild (slowed to be under way
    // together), the server is killed, and the next start resumes both.
    for name in ["db", "bulk"] {
        let args = [
            "rebuild-rate",
            "4M",
            "--volume",
            name,
            "--control",
            &s.control(),
        ];
        ok(&args, "rebuild-rate");
    }
    let spare = Path::new(&dev).join("spare");
    let spare_arg = format!("spare={}", spare.display());
    let added = ok(
        &[
            "pool",
            "add-drive",
            "tank",
            "--drive",
            &spare_arg,
            "--spare",
            "--drive-size",
            "160M",
            "--control",
            &s.control(),
        ],
        "pool add-drive --spare",
    );
    for name in ["db", "bulk"] {
        let says = format!("volume {name} rebuilds its subdisk");
        assert!(
            added.stdout.contains(&says) && added.stdout.contains("on spare (it was on"),
            "{}",
            added.stdout
        );
    }
    assert!(
        added.stderr.contains("scratch"),
        "the concat is named: {}",
        added.stderr
    );
    for name in ["db", "bulk"] {
        wait_rebuilding(&s, name);
    }
    s.crash();
    // The lost drive is still gone: the pool is served with --run, the
    // concat, with nothing left, not at all.
    let mut s = serve_pool_with(dir.path(), &dev, &["--run"]);
    for name in ["db", "bulk"] {
        wait_rebuilt(&s, name);
    }
    fio_all(&t, &s, &redundant, true);
    for name in ["db", "bulk"] {
        ok(
            &["check", "--volume", name, "--control", &s.control()],
            &format!("check {name}"),
        );
    }
    // The lost drive is failed now, the spare up and holding a subdisk of
    // each; only the concat is left on the lost drive.
    assert_eq!(drive_state(&dev, &lost), "failed, missing");
    assert_eq!(drive_state(&dev, "spare"), "up");
    let pool = list_json(&dev);
    for v in pool["volumes"].as_array().unwrap() {
        let on: Vec<&str> = v["plexes"][0]["subdisks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|sd| sd["drive"].as_str().unwrap())
            .collect();
        let want = if v["name"] == "scratch" { "down" } else { "up" };
        assert!(v["state"].as_str().unwrap().starts_with(want), "{v}");
        assert_eq!(on.contains(&lost.as_str()), v["name"] == "scratch", "{v}");
    }
    // The concat, whose data was all on the lost drive, is removed; a new
    // device in the failed drive's place is up and empty.
    ok(
        &[
            "volume",
            "remove",
            "tank",
            "scratch",
            "--control",
            &s.control(),
        ],
        "volume remove scratch",
    );
    s.stop_expecting_errors("TERM", &["scratch", "missing"]);
    std::fs::remove_file(&file).unwrap();
    let new = Path::new(&dev).join("new");
    let new = new.to_str().unwrap();
    let args = [
        "pool",
        "replace-drive",
        "tank",
        &lost,
        new,
        "--drive-size",
        "160M",
        &dev,
    ];
    let replaced = ok(&args, "replace-drive");
    assert!(
        replaced.stdout.contains("0 subdisks there"),
        "{}",
        replaced.stdout
    );
    let pool = list_json(&dev);
    assert!(
        pool["drives"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["state"] == "up"),
        "{pool}"
    );
    assert!(
        pool["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["state"] == "up"),
        "{pool}"
    );
}

/// The body of `GET URL` (a plain HTTP/1.1 request).
fn http_get(url: &str) -> String {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (addr, path) = rest.split_once('/').expect("a path");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    write!(
        s,
        "GET /{path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

/// `printconfig` is a configuration `pool create --config` takes back:
/// on fresh drives it gives the same subdisks, and the same data written
/// to both pools' volumes lies in the same bytes of their drives (md's
/// layouts, interleave 126s included).
#[test]
fn printconfig_made_again_on_fresh_drives_lays_out_the_same_bytes() {
    let test = "printconfig_made_again_on_fresh_drives_lays_out_the_same_bytes";
    let Some(t) = required_tools(test, &["qemu-io"]) else {
        return;
    };
    let dir = temp_dir();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    let da = drive_paths(&a);
    let mut args = vec!["pool", "create", "tank", "--drive-size", "64M"];
    args.extend(da.iter().map(String::as_str));
    ok(&args, "pool create a");
    let adev = a.display().to_string();
    ok(
        &[
            "volume",
            "create",
            "tank",
            "p",
            "--level",
            "raid5",
            "--interleave",
            "126s",
            "--size",
            "40M",
            &adev,
        ],
        "raid5",
    );
    ok(
        &[
            "volume", "create", "tank", "s", "--level", "stripe", "--size", "20M", &adev,
        ],
        "stripe",
    );
    let config = ok(&["printconfig", "tank", &adev], "printconfig").stdout;
    let file = dir.path().join("tank.conf");
    std::fs::write(&file, &config).unwrap();
    let db = drive_paths(&b);
    let mut args = vec![
        "pool",
        "create",
        "tank",
        "--drive-size",
        "64M",
        "--config",
        file.to_str().unwrap(),
    ];
    args.extend(db.iter().map(String::as_str));
    ok(&args, "pool create --config");
    let bdev = b.display().to_string();
    let again = ok(&["printconfig", "tank", &bdev], "printconfig b").stdout;
    let layout = |c: &str| -> Vec<String> {
        c.lines()
            .filter(|l| l.starts_with("plex") || l.starts_with("sd"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        layout(&config),
        layout(&again),
        "the same plexes and subdisks"
    );

    for dev in [&adev, &bdev] {
        let mut s = serve_pool_first(dir.path(), dev, "p", &[]);
        for (export, len) in [("p", 40 * MIB), ("s", 20 * MIB)] {
            let cmds = vec![
                format!("write -P 0x3c 0 {}", len / 2),
                format!("write -P 0xa7 {} {}", len / 2 + 512 * 7, 3 * MIB),
            ];
            qemu_io(&t, &uri(&s, export), &cmds, export);
        }
        s.stop_with("TERM");
    }
    // Each drive from its pool area on: the same bytes but each
    // subdisk's label area (its uuids differ), which md's rule sizes.
    let pool = list_json(&adev);
    for (fa, fb) in da.iter().zip(&db) {
        let (ba, bb) = (std::fs::read(fa).unwrap(), std::fs::read(fb).unwrap());
        let name = Path::new(fa).file_name().unwrap().to_str().unwrap();
        for v in pool["volumes"].as_array().unwrap() {
            for sd in v["plexes"][0]["subdisks"].as_array().unwrap() {
                if sd["drive"] != name {
                    continue;
                }
                let off = sd["offset_bytes"].as_u64().unwrap();
                let len = sd["len_bytes"].as_u64().unwrap();
                let data = (off + md_reserve_bytes(len)) as usize..(off + len) as usize;
                assert!(
                    ba[data.clone()] == bb[data.clone()],
                    "{name}: subdisk {} differs",
                    sd["name"]
                );
                assert!(
                    ba[data].iter().any(|&x| x != 0),
                    "{name}: something was written"
                );
            }
        }
    }
}

fn pool_areas(drives: &[String]) -> Vec<Vec<u8>> {
    drives
        .iter()
        .map(|d| {
            let mut b = std::fs::read(d).unwrap();
            b.truncate(MIB as usize);
            b
        })
        .collect()
}

#[test]
fn bad_input_gets_one_clear_line_and_writes_nothing() {
    let dir = temp_dir();
    let dev = make_pool(dir.path());
    let drives = drive_paths(Path::new(&dev));
    let before = pool_areas(&drives);
    refused(
        &[
            "volume", "create", "tank", "big", "--level", "raid5", "--size", "1G", &dev,
        ],
        "needs 4 drives with",
    );
    refused(
        &[
            "volume", "create", "tank", "db", "--level", "stripe", "--size", "1M", &dev,
        ],
        "already has a volume db",
    );
    refused(
        &[
            "volume", "create", "tank", "x", "--level", "mirror", "--size", "1M", "--drives",
            "d0,d9", &dev,
        ],
        "has no drive d9",
    );
    refused(
        &[
            "volume", "create", "nope", "x", "--level", "stripe", "--size", "1M", &dev,
        ],
        "no drive of a pool named \"nope\"",
    );
    refused(&["volume", "remove", "tank", "x", &dev], "has no volume x");
    refused(
        &[
            "volume", "create", "tank", "x", "--level", "raid5", "--size", "0", &dev,
        ],
        "--size 0: a volume holds at least one sector",
    );
    refused(
        &[
            "volume",
            "create",
            "tank",
            "x",
            "--level",
            "raid5",
            "--size",
            "8M",
            "--subdisks",
            "2",
            &dev,
        ],
        "raid5 needs at least 3 subdisks on distinct drives; 2 asked",
    );
    // A drive of this pool taken for another.
    let other = dir.path().join("other");
    refused(
        &[
            "pool",
            "create",
            "other",
            "--drive-size",
            "64M",
            &drives[1],
            other.to_str().unwrap(),
        ],
        "is drive d1 of pool tank",
    );
    assert!(!other.exists(), "a refused create leaves no new file");
    // A configuration with a typo, and one with overlapping subdisks.
    let fresh: Vec<String> = (0..2)
        .map(|i| dir.path().join(format!("f{i}")).display().to_string())
        .collect();
    let conf = dir.path().join("bad.conf");
    for (text, says) in [
        ("pool t\ndrive a\ndrive b\nvolume v\nplex org stripe vol v\nsd drive a driveofset 1M len 4M plex v.p0\n", "line 6: a subdisk: unknown word 'driveofset' (did you mean 'driveoffset'?"),
        ("pool t\ndrive a\ndrive b\nvolume v\nplex org stripe vol v\nsd drive a driveoffset 1M len 4M plex v.p0\nsd drive a driveoffset 4M len 4M plex v.p0\n", "overlap on drive \"a\""),
        ("pool t\ndrive a\ndrive b\nvolume v\nplex org raid5 vol v\nsd drive a driveoffset 1M len 4M plex v.p0\nsd drive b driveoffset 1M len 4M plex v.p0\n", "raid5 needs 3 to 64 subdisks"),
    ] {
        std::fs::write(&conf, text).unwrap();
        let mut args = vec!["pool", "create", "t", "--drive-size", "64M", "--config", conf.to_str().unwrap()];
        args.extend(fresh.iter().map(String::as_str));
        refused(&args, says);
        for f in &fresh {
            let written = std::fs::read(f).map(|b| b.iter().any(|&x| x != 0)).unwrap_or(false);
            assert!(!written, "{says}: {f} was written");
        }
    }
    assert!(
        before == pool_areas(&drives),
        "no refusal wrote a pool area"
    );
}

/// `volume create` killed (SIGKILL) at many points of its work: the pool
/// afterwards lists, and either has the volume whole (its subdisks
/// labelled, up) or does not have it and takes it again; never a
/// configuration torn or naming subdisks with no label.
#[test]
fn volume_create_killed_at_any_point_leaves_a_pool_that_lists_and_takes_it_again() {
    let dir = temp_dir();
    let dev = make_pool(dir.path());
    let mut seen = (0, 0);
    // A create takes about 10 ms: killed at once, then every 500 µs, and
    // the last one left to finish.
    let last = 30u64;
    for i in 0..=last {
        let name = format!("k{i}");
        let args = [
            "volume", "create", "tank", &name, "--level", "raid5", "--size", "8M", &dev,
        ];
        let mut b = Background::spawn(&mut platter(&args), "volume create");
        if i == last {
            assert!(b.wait(CMD_TIMEOUT).success(), "{}", b.stderr());
        }
        std::thread::sleep(std::time::Duration::from_micros(500 * i));
        b.kill();
        let pool = list_json(&dev);
        let made = pool["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name.as_str());
        match made {
            Some(v) => {
                assert_eq!(v["state"], "up", "kill after {} µs: {v}", 500 * i);
                seen.0 += 1;
            }
            None => {
                ok(&args, "volume create after the kill");
                seen.1 += 1;
            }
        }
        ok(&["volume", "remove", "tank", &name, &dev], "volume remove");
    }
    assert!(
        seen.0 > 0 && seen.1 > 0,
        "kills before and after the configuration: {seen:?}"
    );
}

/// `pool import` of a raid5 made by `platter create`: the volume's bytes
/// served from the pool are the bytes it served as an array (written by
/// fio, compared whole by `qemu-img compare`, verified by fio again and
/// checked by `platter check`); the same import of a volume without room
/// before its data is refused in one line and writes nothing.
#[test]
fn pool_import_serves_a_raid5_made_by_create_byte_for_byte() {
    let test = "pool_import_serves_a_raid5_made_by_create_byte_for_byte";
    let Some(t) = tools_with_fio_nbd(test, &["fio", "qemu-img"]) else {
        return;
    };
    let dir = temp_dir();
    let spec = Spec::new("raid5", 4, "64k");
    let tight = Volume::create_in(spec, 8 * MIB, tempfile::tempdir_in(&dir).unwrap());
    let mut args = vec!["pool", "import", "tank"];
    args.extend(tight.members.iter().map(String::as_str));
    let untouched = pool_areas(&tight.members);
    refused(&args, "--reserve 2M");
    assert!(
        pool_areas(&tight.members) == untouched,
        "a refused import wrote"
    );

    let array_dir = tempfile::tempdir_in(&dir).unwrap();
    let array = Volume::create_with(spec, 24 * MIB, array_dir, &["--reserve", "2M"]);
    let members = array.members.clone();
    let size = array.size_bytes;
    let mut s = Server::start(array);
    run_ok(
        &mut fio(&t, s.uri(), size, false),
        CMD_TIMEOUT,
        "fio on the array",
    );
    let before = save_whole_volume(&t, &s, test);
    s.stop();

    let mut args = vec!["pool", "import", "tank", "--volume", "data"];
    args.extend(members.iter().map(String::as_str));
    ok(&args, "pool import");
    let dev = s.volume.path().display().to_string();
    let listed = list_json(&dev);
    assert_eq!(listed["volumes"][0]["name"], "data", "{listed}");
    let p = serve_pool_first(dir.path(), &dev, "data", &[]);
    assert_images_identical(&t, &before, uri(&p, "data"), "the volume after import");
    let out = run_ok(
        &mut fio(&t, &uri(&p, "data"), size, true),
        CMD_TIMEOUT,
        "fio verify on the pool",
    );
    assert!(out.stdout.contains("err= 0"), "{}", out.stdout);
    ok(
        &["check", "--volume", "data", "--control", &p.control()],
        "check after import",
    );
}

/// `volume extend` of a raid5 written by fio: the server stopped, the
/// volume grown in place, and served again its old bytes verify, the
/// client sees the new size, fio writes and verifies all of it, and
/// `platter check` finds parity agreeing over the stripes the growth added
/// (zeroed, not resynced). An extend without the room is refused in one
/// line, nothing written.
#[test]
fn volume_extend_grows_a_raid5_in_place_under_its_data() {
    let test = "volume_extend_grows_a_raid5_in_place_under_its_data";
    let Some(t) = tools_with_fio_nbd(test, &["fio", "nbdinfo"]) else {
        return;
    };
    let dir = temp_dir();
    let (d, dev) = pool_of(dir.path(), DRIVES, "64M");
    let drives = drive_paths(&d);
    ok(
        &[
            "volume", "create", "tank", "r", "--level", "raid5", "--size", "12M", &dev,
        ],
        "volume create r",
    );
    ok(
        &[
            "volume", "create", "tank", "c", "--level", "concat", "--size", "4M", "--drives", "d3",
            &dev,
        ],
        "volume create c",
    );
    let small = sizes(&list_json(&dev))[0].1;
    let mut s = serve_pool_first(dir.path(), &dev, "r", &[]);
    run_ok(
        &mut fio(&t, &uri(&s, "r"), small, false),
        CMD_TIMEOUT,
        "fio on r",
    );
    s.stop_with("TERM");

    let before = pool_areas(&drives);
    refused(
        &["volume", "extend", "tank", "r", "--size", "40M", &dev],
        "the extend needs",
    );
    assert!(pool_areas(&drives) == before, "a refused extend wrote");
    ok(&["volume", "remove", "tank", "c", &dev], "volume remove c");
    ok(
        &["volume", "extend", "tank", "r", "--size", "40M", &dev],
        "volume extend",
    );
    let big = sizes(&list_json(&dev))[0].1;
    assert!(big >= 40 * MIB, "{big}");

    let s = serve_pool_first(dir.path(), &dev, "r", &[]);
    let info = run_ok(
        t.cmd("nbdinfo").args(["--size", &uri(&s, "r")]),
        CMD_TIMEOUT,
        "nbdinfo --size",
    );
    assert_eq!(
        info.stdout.trim(),
        big.to_string(),
        "the client sees the new size"
    );
    ok(
        &["check", "--volume", "r", "--control", &s.control()],
        "check after extend",
    );
    let out = run_ok(
        &mut fio(&t, &uri(&s, "r"), small, true),
        CMD_TIMEOUT,
        "fio verify",
    );
    assert!(out.stdout.contains("err= 0"), "{}", out.stdout);
    let out = run_ok(
        &mut fio(&t, &uri(&s, "r"), big, false),
        CMD_TIMEOUT,
        "fio on all of r",
    );
    assert!(out.stdout.contains("err= 0"), "{}", out.stdout);
}

/// The volumes file serves a pool as one of its entries (`pool`, its
/// drives found under `scan`), so that `platter@tank.service` serves
/// every volume of pool tank; `pool` with `members` is refused naming
/// the line.
#[test]
fn the_volumes_file_serves_a_pool() {
    let dir = temp_dir();
    let dev = make_pool(dir.path());
    let config = dir.path().join("volumes.toml");
    std::fs::write(
        &config,
        format!("[volumes.tank]\npool = \"tank\"\nscan = [\"{dev}\"]\n"),
    )
    .unwrap();
    let config = config.display().to_string();
    let s = serve_pool_args(dir.path(), "db", &["--config", &config, "tank"], &[]);
    for name in ["db", "bulk", "scratch"] {
        let status = live(&s, name);
        assert_eq!(status["name"], name, "{status}");
    }
    drop(s);
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        format!("[volumes.tank]\nmembers = [\"{dev}/d0\"]\npool = \"tank\"\n"),
    )
    .unwrap();
    refused(
        &["serve", "--config", &bad.display().to_string(), "tank"],
        "bad.toml:3: volume 'tank': `pool` serves",
    );
    // `serve --scan --name` of a pool's name points at --pool.
    let sock = dir.path().join("scan.sock").display().to_string();
    refused(
        &["serve", "--socket", &sock, "--scan", &dev, "--name", "tank"],
        "'tank' is a pool, not a volume: serve every volume of it with `platter serve --pool tank",
    );
}

/// Counters per drive (`stats --drives`, `platter_drive_*` in /metrics)
/// are the drive's subdisks' member counters summed over the volumes:
/// every drive holds a subdisk of each volume laid on it, and the bytes
/// written to the drives are the bytes the volumes wrote to their members.
fn assert_drives_sum_the_volumes(s: &Server, metrics: &str) {
    let control = s.control();
    let drives: Value = serde_json::from_str(
        &ok(
            &["stats", "--drives", "--json", "--control", &control],
            "stats --drives",
        )
        .stdout,
    )
    .unwrap();
    let drives = drives["drives"].as_object().unwrap();
    assert_eq!(drives.len(), DRIVES, "{drives:?}");
    let mut by_volumes = 0;
    for name in ["db", "bulk", "scratch"] {
        let args = ["stats", "--volume", name, "--json", "--control", &control];
        let st: Value = serde_json::from_str(&ok(&args, "stats").stdout).unwrap();
        for m in st["members"].as_array().unwrap() {
            by_volumes += m["bytes_written"].as_u64().unwrap();
        }
    }
    let by_drives: u64 = drives
        .values()
        .map(|d| d["written_bytes"].as_u64().unwrap())
        .sum();
    // The servers' own writes (bitmap pages) go on between the asks.
    assert!(by_volumes > 0, "{drives:?}");
    let apart = by_drives.abs_diff(by_volumes);
    assert!(
        apart <= by_volumes / 100,
        "drives {by_drives}, volumes {by_volumes}"
    );
    for (name, d) in drives {
        assert!(d["writes"].as_u64().unwrap() > 0, "{name}: {d}");
        let series = format!("platter_drive_written_bytes_total{{drive=\"{name}\"}}");
        assert!(metrics.contains(&series), "{series} in {metrics}");
        // Its latencies are its subdisks' I/Os, every one timed.
        let timed = d["latency"]["count"].as_u64().unwrap();
        let ios = ["reads", "writes", "trims", "flushes"]
            .iter()
            .map(|k| d[*k].as_u64().unwrap())
            .sum::<u64>();
        assert!(
            timed > 0 && timed <= ios,
            "{name}: {timed} timed of {ios}: {d}"
        );
        let series = format!("platter_drive_latency_seconds_count{{drive=\"{name}\"}}");
        assert!(metrics.contains(&series), "{series} in {metrics}");
    }
    let table = ok(
        &["stats", "--drives", "--control", &control],
        "stats --drives",
    );
    assert!(
        table.stdout.lines().count() == DRIVES + 1,
        "{}",
        table.stdout
    );
}

/// A client that holds a connection to `uri` (and reads from it now and
/// then) until it is killed, or the server cuts it off.
fn hold_connection(t: &Tools, uri: &str) -> Background {
    let script = "import time\nfor _ in range(600):\n    h.pread(4096, 0)\n    time.sleep(0.1)\n";
    let mut c = t.cmd("nbdsh");
    // nbdsh runs `python3 -m nbd`: Debian's python3-libnbd is installed
    // for Debian's python3, which a python3 earlier on PATH may not be.
    let path_var = std::env::var("PATH").unwrap_or_default();
    c.env("PATH", format!("/usr/bin:{path_var}"))
        .args(["-u", uri, "-c", script]);
    Background::spawn(&mut c, "nbdsh holding a connection")
}

/// The volumes the pool on `dev` holds and the server serves, by `list
/// --control` (which says a volume of the pool not served is not).
fn served_volumes(s: &Server, dev: &str) -> Vec<String> {
    let out = ok(
        &["list", "--json", "--control", &s.control(), dev],
        "list --control",
    );
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let served = v[0]["volumes"].as_array().unwrap().iter();
    served
        .filter(|v| !v["state"].as_str().unwrap().contains("not served"))
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect()
}

fn export_list(t: &Tools, s: &Server) -> String {
    let list = format!("nbd+unix://?socket={}", s.socket().display());
    run_ok(
        t.cmd("nbdinfo").args(["--list", "--json", &list]),
        CMD_TIMEOUT,
        "nbdinfo --list",
    )
    .stdout
}

/// A volume created, extended and removed through the pool's server
/// (`--control`) appears, grows and goes without a restart: the new one
/// in `nbdinfo --list` and written by fio; the extend made while fio
/// writes the volume, a new connection seeing the new size and every byte
/// fio wrote still there; the remove refused while a client holds a
/// connection, then forced; and after a restart the server serves what
/// the pool now says.
#[test]
fn volumes_change_while_the_pool_is_served() {
    let test = "volumes_change_while_the_pool_is_served";
    let Some(t) = tools_with_fio_nbd(test, &["fio", "nbdinfo", "nbdsh"]) else {
        return;
    };
    let dir = temp_dir();
    let (d, dev) = pool_of(dir.path(), DRIVES, "64M");
    let drives = drive_paths(&d);
    ok(
        &[
            "volume", "create", "tank", "r", "--level", "raid5", "--size", "12M", &dev,
        ],
        "volume create r",
    );
    let mut s = serve_pool_first(dir.path(), &dev, "r", &[]);
    let ctl = s.control();

    // The extend while fio writes r and verifies it.
    let small = 12 * MIB;
    let mut writing = Background::spawn(&mut fio(&t, &uri(&s, "r"), small, false), "fio on r");
    std::thread::sleep(std::time::Duration::from_millis(300));
    ok(
        &[
            "volume",
            "extend",
            "tank",
            "r",
            "--size",
            "30M",
            "--control",
            &ctl,
        ],
        "volume extend r --control",
    );
    let status = writing.wait(CMD_TIMEOUT);
    assert!(
        status.success(),
        "fio across the extend: {}",
        writing.stdout()
    );
    assert!(writing.stdout().contains("err= 0"), "{}", writing.stdout());
    let info = run_ok(
        t.cmd("nbdinfo").args(["--size", &uri(&s, "r")]),
        CMD_TIMEOUT,
        "nbdinfo --size",
    );
    let big: u64 = info.stdout.trim().parse().unwrap();
    assert!(big >= 30 * MIB, "a new connection sees the new size: {big}");
    ok(
        &["check", "--volume", "r", "--control", &ctl],
        "check after the extend",
    );
    let out = run_ok(
        &mut fio(&t, &uri(&s, "r"), big, false),
        CMD_TIMEOUT,
        "fio on all of r",
    );
    assert!(out.stdout.contains("err= 0"), "{}", out.stdout);

    ok(
        &[
            "volume",
            "create",
            "tank",
            "m",
            "--level",
            "raid10",
            "--size",
            "8M",
            "--control",
            &ctl,
        ],
        "volume create m --control",
    );
    ok(
        &[
            "volume",
            "create",
            "tank",
            "c",
            "--level",
            "concat",
            "--size",
            "4M",
            "--drives",
            "d3",
            "--control",
            &ctl,
        ],
        "volume create c --control",
    );
    let listed = export_list(&t, &s);
    for name in ["\"r\"", "\"m\"", "\"c\""] {
        assert!(listed.contains(name), "{name} not listed: {listed}");
    }
    assert_eq!(served_volumes(&s, &dev), ["r", "m", "c"]);
    fio_all(&t, &s, &[("m", 8 * MIB), ("c", 4 * MIB)], false);
    // A concat boxed in on its drive (`b` right after it) grows by a new
    // subdisk elsewhere, while served: its bytes stay, the rest is new.
    ok(
        &[
            "volume",
            "create",
            "tank",
            "b",
            "--level",
            "concat",
            "--size",
            "1M",
            "--drives",
            "d3",
            "--control",
            &ctl,
        ],
        "volume create b --control",
    );
    ok(
        &[
            "volume",
            "extend",
            "tank",
            "c",
            "--size",
            "12M",
            "--control",
            &ctl,
        ],
        "volume extend c --control (a new subdisk)",
    );
    let c = list_json(&dev)["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "c")
        .unwrap()
        .clone();
    assert_eq!(
        c["plexes"][0]["subdisks"].as_array().unwrap().len(),
        2,
        "{c}"
    );
    fio_all(&t, &s, &[("c", 4 * MIB)], true);
    let c_bytes = run_ok(
        t.cmd("nbdinfo").args(["--size", &uri(&s, "c")]),
        CMD_TIMEOUT,
        "nbdinfo --size c",
    );
    let c_bytes: u64 = c_bytes.stdout.trim().parse().unwrap();
    assert!(c_bytes >= 12 * MIB, "{c_bytes}");
    fio_all(&t, &s, &[("c", c_bytes)], false);
    ok(
        &["volume", "remove", "tank", "b", "--control", &ctl],
        "volume remove b",
    );
    refused(
        &[
            "volume",
            "create",
            "tank",
            "m",
            "--level",
            "concat",
            "--size",
            "1M",
            "--control",
            &ctl,
        ],
        "already has a volume m",
    );
    // Refused by the host with the volume paused: it serves on.
    refused(
        &[
            "volume",
            "extend",
            "tank",
            "r",
            "--size",
            "40M",
            "--control",
            &ctl,
        ],
        "the extend needs",
    );
    let out = run_ok(
        &mut fio(&t, &uri(&s, "r"), big, true),
        CMD_TIMEOUT,
        "fio verify after a refused extend",
    );
    assert!(out.stdout.contains("err= 0"), "{}", out.stdout);

    // Bad input through the server: one line each, the pool unchanged.
    let before = pool_areas(&drives);
    for (args, says) in [
        (
            vec![
                "volume", "create", "tank", "x", "--level", "raid5", "--size", "1G",
            ],
            "needs",
        ),
        (
            vec![
                "volume", "create", "other", "x", "--level", "raid5", "--size", "1M",
            ],
            "serves pool tank, not other",
        ),
        (
            vec![
                "volume", "create", "tank", "a b", "--level", "raid5", "--size", "1M",
            ],
            "a b",
        ),
        (
            vec!["volume", "extend", "tank", "nosuch", "--size", "1M"],
            "no volume named nosuch",
        ),
        (
            vec!["volume", "extend", "tank", "r", "--size", "1M"],
            "does not shrink",
        ),
        (
            vec!["volume", "remove", "tank", "nosuch"],
            "has no volume nosuch",
        ),
        (
            vec!["pool", "replace-drive", "tank", "d9", "/nonexistent/x"],
            "has no drive d9",
        ),
        (
            vec!["pool", "add-drive", "tank", "--drive", "d0=/nonexistent/x"],
            "has a drive d0 already",
        ),
        (
            vec!["pool", "add-drive", "tank", "--drive", "/nonexistent/x"],
            "/nonexistent/x",
        ),
    ] {
        let mut args = args.clone();
        args.extend(["--control", &ctl]);
        refused(&args, says);
    }
    // The drives are the server's: the offline commands are refused.
    let offline = [
        "volume", "create", "tank", "y", "--level", "concat", "--size", "1M", &dev,
    ];
    refused(&offline, "go through its server (--control PATH)");
    refused(
        &["volume", "remove", "tank", "c", "--force", &dev],
        "--force goes with --control",
    );
    assert!(pool_areas(&drives) == before, "a refused change wrote");

    // A drive added through the server takes the next volume.
    let d4 = d.join("d4").display().to_string();
    let out = ok(
        &[
            "pool",
            "add-drive",
            "tank",
            "--drive",
            &d4,
            "--drive-size",
            "64M",
            "--control",
            &ctl,
        ],
        "pool add-drive --control",
    );
    assert!(out.stdout.contains("5 drives"), "{}", out.stdout);
    ok(
        &[
            "volume",
            "create",
            "tank",
            "on4",
            "--level",
            "concat",
            "--size",
            "8M",
            "--drives",
            "d4",
            "--control",
            &ctl,
        ],
        "volume create on the added drive",
    );
    fio_all(&t, &s, &[("on4", 8 * MIB)], false);
    ok(
        &["volume", "remove", "tank", "on4", "--control", &ctl],
        "volume remove on4",
    );

    // The remove: refused with a client, then forced.
    let mut holder = hold_connection(&t, &uri(&s, "m"));
    wait_for_client(&s, "m");
    let text = ok(
        &["status", "--volume", "m", "--control", &ctl],
        "status of m",
    );
    assert!(
        text.stdout.contains("Clients:    1 connected"),
        "{}",
        text.stdout
    );
    refused(
        &["volume", "remove", "tank", "m", "--control", &ctl],
        "client(s) connected",
    );
    assert_eq!(
        served_volumes(&s, &dev),
        ["r", "m", "c"],
        "a refused remove took it"
    );
    let out = ok(
        &[
            "volume",
            "remove",
            "tank",
            "m",
            "--force",
            "--control",
            &ctl,
        ],
        "volume remove m --force",
    );
    assert!(out.stdout.contains("1 client(s) cut off"), "{}", out.stdout);
    let status = holder.wait(CMD_TIMEOUT);
    assert!(!status.success(), "the cut-off client saw no error");
    assert_eq!(served_volumes(&s, &dev), ["r", "c"]);
    assert!(!export_list(&t, &s).contains("\"m\""));
    s.stop_with("TERM");

    // The pool says what the server did.
    let pool = list_json(&dev);
    let names: Vec<String> = sizes(&pool).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["r", "c"]);
    assert_eq!(sizes(&pool)[0].1, big);
    let s = serve_pool_first(dir.path(), &dev, "r", &[]);
    fio_all(&t, &s, &[("r", big), ("c", 4 * MIB)], true);
    ok(
        &["check", "--volume", "r", "--control", &s.control()],
        "check after the restart",
    );
}

/// Waits until the server counts a client on volume `name`.
fn wait_for_client(s: &Server, name: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let st = live(s, name);
        if st["clients"].as_u64().unwrap_or(0) > 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no client on {name}: {st}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A drive that fails under a served pool is replaced through the server
/// (`pool replace-drive --control`): refused while the drive's subdisks
/// are in use, then, once the server has failed them, every redundant
/// volume with a subdisk there takes its new one and rebuilds at once;
/// a kill -9 during those rebuilds is resumed by the next start, and
/// every byte fio wrote reads back, the concat on another drive untouched.
#[test]
fn a_drive_replaced_while_the_pool_is_served_rebuilds_every_volume_on_it() {
    let test = "a_drive_replaced_while_the_pool_is_served_rebuilds_every_volume_on_it";
    let Some(t) = tools_with_fio_nbd(test, &["fio", "nbdinfo"]) else {
        return;
    };
    let dir = temp_dir();
    let (d, dev) = pool_of(dir.path(), DRIVES, "64M");
    create_volumes(
        &dev,
        &[
            ("db", "raid10", "16M", "d0,d1,d2,d3"),
            ("bulk", "raid5", "24M", "d0,d1,d2,d3"),
            ("scratch", "concat", "4M", "d3"),
        ],
    );
    let volumes = sizes(&list_json(&dev));
    let v: Vec<(&str, u64)> = volumes.iter().map(|(n, b)| (n.as_str(), *b)).collect();
    let mut s = serve_pool_with(dir.path(), &dev, &["--rebuild-rate", "2M"]);
    let ctl = s.control();
    fio_all(&t, &s, &v, false);

    let new = d.join("new").display().to_string();
    let replace = [
        "pool",
        "replace-drive",
        "tank",
        "d1",
        &new,
        "--drive-size",
        "64M",
        "--control",
        &ctl,
    ];
    refused(&replace, "still serves volume db");
    assert!(
        !Path::new(&new).exists(),
        "a refused replace made its drive"
    );

    // d1 lost under the server, as a pulled disk: truncated. The next
    // I/O of each volume there fails its subdisk.
    std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("d1"))
        .unwrap()
        .set_len(0)
        .unwrap();
    fio_all(&t, &s, &v, true);
    for name in ["db", "bulk"] {
        let st = live(&s, name);
        assert_eq!(st["members"][1]["state"], "faulty", "{name}: {st}");
    }
    let out = ok(&replace, "pool replace-drive --control");
    assert!(
        out.stdout.contains("rebuilding: db, bulk"),
        "{}",
        out.stdout
    );
    for name in ["db", "bulk"] {
        wait_rebuilding(&s, name);
    }
    // The new subdisks count as d1's.
    let drives = ok(
        &["stats", "--drives", "--json", "--control", &ctl],
        "stats --drives",
    );
    let drives: Value = serde_json::from_str(&drives.stdout).unwrap();
    assert_eq!(drives["drives"]["d1"]["subdisks"], 2, "{drives}");
    s.crash();

    let s = serve_pool(dir.path(), &dev);
    for name in ["db", "bulk"] {
        wait_rebuilt(&s, name);
    }
    fio_all(&t, &s, &v, true);
    for name in ["db", "bulk"] {
        ok(
            &["check", "--volume", name, "--control", &s.control()],
            &format!("check {name}"),
        );
    }
    let pool = list_json(&dev);
    let drive = pool["drives"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "d1")
        .unwrap()
        .clone();
    assert_eq!(drive["device"].as_str(), Some(new.as_str()), "{pool}");
    assert!(
        pool["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["state"] == "up"),
        "{pool}"
    );
}

/// How many seeded kills `pool_server_killed_mid_change_keeps_every_volume`
/// makes (`PLATTER_POOL_KILLS` for more).
const POOL_KILLS: u64 = 12;

/// The pool's server killed with SIGKILL at a seeded moment of a change
/// it makes: an extend of raid5 `r` (every byte fio wrote on it checked
/// after), a create of a raid10, a remove of one, or a drive replaced
/// under every volume with a subdisk there, and their rebuilds. After each kill the pool lists, the next server serves every
/// volume its configuration gives, `r` is its old size or its new one
/// with its data in place, a rebuild cut off finishes, and each redundant
/// volume's parity and copies agree.
#[test]
fn pool_server_killed_mid_change_keeps_every_volume() {
    let test = "pool_server_killed_mid_change_keeps_every_volume";
    let Some(t) = tools_with_fio_nbd(test, &["fio"]) else {
        return;
    };
    let kills = env_count("PLATTER_POOL_KILLS", POOL_KILLS);
    let dir = temp_dir();
    let (_, dev) = pool_of(dir.path(), DRIVES, "96M");
    let args = [
        "volume", "create", "tank", "r", "--level", "raid5", "--size", "6M", &dev,
    ];
    ok(&args, "volume create r");
    let written = 6 * MIB;
    let s = serve_pool_first(dir.path(), &dev, "r", &[]);
    fio_all(&t, &s, &[("r", written)], false);
    drop(s);
    // How often the kill came before the change was recorded, and after.
    let mut before_after = [0u32; 2];
    for seed in 0..kills {
        let mut rng = platter_testkit::rng::Rng::new(0x9001 + seed);
        let delay = std::time::Duration::from_millis(rng.below(120));
        let was = sizes(&list_json(&dev));
        let story = kill_mid_change(dir.path(), &dev, seed, delay);
        println!("{story}");
        let pool = list_json(&dev);
        let volumes = sizes(&pool);
        if seed % 4 != 2 {
            before_after[usize::from(volumes != was)] += 1;
        }
        let s = serve_pool_first(dir.path(), &dev, "r", &[]);
        for (name, _) in &volumes {
            wait_rebuilt(&s, name);
            ok(
                &["check", "--volume", name, "--control", &s.control()],
                &format!("{story}: check {name}"),
            );
        }
        let out = run_ok(
            &mut fio(&t, &uri(&s, "r"), written, true),
            CMD_TIMEOUT,
            &format!("{story}: fio verify of r"),
        );
        assert!(out.stdout.contains("err= 0"), "{story}: {}", out.stdout);
    }
    println!(
        "{test}: {kills} kills; of the extends, creates and removes, {} left the pool as it was and {} \
         as changed",
        before_after[0], before_after[1]
    );
}

/// Fails, through the server at `ctl`, every volume's subdisk on `drive`;
/// returns how many volumes had one.
fn fail_on_drive(ctl: &str, dev: &str, drive: &str) -> usize {
    let mut failed = 0;
    for v in list_json(dev)["volumes"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let subdisks = v["plexes"][0]["subdisks"].as_array().unwrap();
        for (slot, sd) in subdisks.iter().enumerate() {
            if sd["drive"] == drive {
                let slot = slot.to_string();
                let args = ["fail", "--volume", name, &slot, "--control", ctl];
                ok(&args, &format!("fail {name}'s subdisk on {drive}"));
                failed += 1;
            }
        }
    }
    failed
}

/// Starts change `seed % 4` through a fresh server, kills the server
/// `delay` after, and says what it did.
fn kill_mid_change(dir: &Path, dev: &str, seed: u64, delay: std::time::Duration) -> String {
    let mut s = serve_pool_first(dir, dev, "r", &["--rebuild-rate", "8M"]);
    let ctl = s.control();
    let now = sizes(&list_json(dev))[0].1;
    let made: Vec<String> = sizes(&list_json(dev))
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n != "r")
        .collect();
    let story = match seed % 4 {
        3 if !made.is_empty() => {
            let name = made.last().expect("one made");
            let args = ["volume", "remove", "tank", name, "--control", &ctl];
            let mut change = Background::spawn(&mut platter(&args), "volume remove");
            std::thread::sleep(delay);
            s.crash();
            change.wait(CMD_TIMEOUT);
            format!("seed {seed}: {name} removed, killed after {delay:?}")
        }
        0 => {
            let size = format!("{}", now + 2 * MIB);
            let args = [
                "volume",
                "extend",
                "tank",
                "r",
                "--size",
                &size,
                "--control",
                &ctl,
            ];
            let mut change = Background::spawn(&mut platter(&args), "volume extend");
            std::thread::sleep(delay);
            s.crash();
            change.wait(CMD_TIMEOUT);
            format!("seed {seed}: r extended from {now} to {size}, killed after {delay:?}")
        }
        1 | 3 => {
            let name = format!("n{seed}");
            let args = [
                "volume",
                "create",
                "tank",
                &name,
                "--level",
                "raid10",
                "--size",
                "2M",
                "--control",
                &ctl,
            ];
            let mut change = Background::spawn(&mut platter(&args), "volume create");
            std::thread::sleep(delay);
            s.crash();
            change.wait(CMD_TIMEOUT);
            format!("seed {seed}: {name} created, killed after {delay:?}")
        }
        _ => {
            // Every volume's subdisk on d1 failed: each rebuilds.
            let rebuilding = fail_on_drive(&ctl, dev, "d1");
            let new = Path::new(dev).join(format!("d1-{seed}"));
            let new = new.to_str().unwrap();
            let args = [
                "pool",
                "replace-drive",
                "tank",
                "d1",
                new,
                "--drive-size",
                "96M",
                "--control",
                &ctl,
            ];
            ok(&args, "pool replace-drive");
            let old = list_json(dev)["drives"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x["device"].as_str().unwrap().to_string())
                .collect::<Vec<_>>();
            std::thread::sleep(delay);
            s.crash();
            // The drive replaced is no longer the pool's: out of the way
            // of the next scan.
            for f in std::fs::read_dir(dev).unwrap() {
                let f = f.unwrap().path();
                if !old.iter().any(|o| Path::new(o) == f) {
                    std::fs::remove_file(&f).unwrap();
                }
            }
            format!(
                "seed {seed}: d1 replaced, {rebuilding} volumes rebuilding, killed after {delay:?}"
            )
        }
    };
    story
}

/// A pool made with no volume is served (`serve --pool`), its banner says
/// how to make the first, and a volume made through its control socket is
/// listed and written at once; the next start serves it as any.
#[test]
fn a_pool_with_no_volume_is_served_and_takes_its_first_through_the_server() {
    let test = "a_pool_with_no_volume_is_served_and_takes_its_first_through_the_server";
    let Some(t) = tools_with_fio_nbd(test, &["fio", "nbdinfo"]) else {
        return;
    };
    let dir = temp_dir();
    let (_, dev) = pool_of(dir.path(), DRIVES, "64M");
    let socket = dir.path().join("tank.sock");
    let socket = socket.to_str().unwrap();
    let ctl = format!("{socket}.ctl");
    let mut server = Background::spawn(
        &mut platter(&["serve", "--pool", "tank", "--socket", socket, &dev]),
        "serve --pool tank (empty)",
    );
    let deadline = std::time::Instant::now() + CMD_TIMEOUT;
    while !server.stdout().contains("make one:") {
        assert!(
            server.is_running() && std::time::Instant::now() < deadline,
            "no banner: {}\n{}",
            server.stdout(),
            server.stderr()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let banner = server.stdout();
    assert!(
        banner.starts_with("serving pool 'tank', no volume yet"),
        "{banner}"
    );
    assert!(banner.contains(&format!("--control {ctl}")), "{banner}");
    // The host's list names it; a volume command says there is none yet.
    let host: Value = serde_json::from_str(&ok(&["status", "--json"], "status").stdout).unwrap();
    let empty = host["no_volume_yet"].as_array().unwrap();
    assert!(
        empty.iter().any(|c| c.as_str() == Some(ctl.as_str())),
        "{host}"
    );
    refused(
        &["status", "--control", &ctl],
        "serves no volume yet: make one with `platter volume create tank",
    );
    let out = ok(
        &[
            "volume",
            "create",
            "tank",
            "v1",
            "--level",
            "raid5",
            "--size",
            "12M",
            "--control",
            &ctl,
        ],
        "volume create --control",
    );
    assert!(
        out.stdout.contains("served now as export 'v1'"),
        "{}",
        out.stdout
    );
    let list = format!("nbd+unix://?socket={socket}");
    let listed = run_ok(
        t.cmd("nbdinfo").args(["--list", &list]),
        CMD_TIMEOUT,
        "nbdinfo --list",
    );
    assert!(listed.stdout.contains("export=\"v1\""), "{}", listed.stdout);
    let v1 = format!("nbd+unix:///v1?socket={socket}");
    let size = 12 * MIB;
    let out = run_ok(&mut fio(&t, &v1, size, false), CMD_TIMEOUT, "fio on v1");
    assert!(out.stdout.contains("err= 0"), "{}", out.stdout);
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    assert!(server.wait(CMD_TIMEOUT).success(), "{}", server.stderr());

    let s = serve_pool_first(dir.path(), &dev, "v1", &[]);
    let out = run_ok(
        &mut fio(&t, &uri(&s, "v1"), size, true),
        CMD_TIMEOUT,
        "fio verify after the restart",
    );
    assert!(out.stdout.contains("err= 0"), "{}", out.stdout);
}

/// md's hot spare and LVM's `lvconvert --repair`: a spare drive kept in
/// the pool takes a failed subdisk by itself, the volume rebuilds on it
/// under fio; with no spare left, `pool heal --control` takes free space
/// on a drive outside the plex; and offline, `pool heal` places the
/// subdisk of a drive not found, which the next `serve --pool --run`
/// rebuilds. Every byte fio wrote reads back after each, and checks are
/// clean.
#[test]
fn a_spare_takes_a_failed_subdisk_by_itself_and_pool_heal_takes_free_space() {
    let test = "a_spare_takes_a_failed_subdisk_by_itself_and_pool_heal_takes_free_space";
    let Some(t) = tools_with_fio_nbd(test, &["fio"]) else {
        return;
    };
    let dir = temp_dir();
    let (d, dev) = pool_of(dir.path(), 5, "64M");
    let spare = format!("s0={}", d.join("s0").display());
    ok(
        &[
            "pool",
            "add-drive",
            "tank",
            "--drive",
            &spare,
            "--spare",
            "--drive-size",
            "64M",
            &dev,
        ],
        "pool add-drive --spare",
    );
    assert_eq!(drive_state(&dev, "s0"), "spare");
    // A spare is kept empty: no volume is placed on it, even when named.
    refused(
        &[
            "volume", "create", "tank", "x", "--level", "mirror", "--size", "4M", "--drives",
            "d0,s0", &dev,
        ],
        "drive s0 is a spare",
    );
    let make = [
        "volume", "create", "tank", "r", "--level", "raid5", "--size", "40M", "--drives",
        "d0,d1,d2", &dev,
    ];
    ok(&make, "volume create r");
    let size = sizes(&list_json(&dev))[0].1;
    let mut s = serve_pool_first(dir.path(), &dev, "r", &[]);
    fio_all(&t, &s, &[("r", size)], false);

    truncate(&dev, "d0");
    // Under fio, d0's subdisk fails; the server puts it on the spare.
    fio_all(&t, &s, &[("r", size)], false);
    wait_rebuilt(&s, "r");
    assert_eq!(subdisk_drives(&dev, "r"), ["s0", "d1", "d2"]);
    assert_eq!(drive_state(&dev, "s0"), "up");
    assert!(
        drive_state(&dev, "d0").starts_with("failed"),
        "{}",
        drive_state(&dev, "d0")
    );
    fio_all(&t, &s, &[("r", size)], true);
    ok(
        &["check", "--volume", "r", "--control", &s.control()],
        "check r",
    );

    // No spare left: the server leaves d1's subdisk failed; asked, `pool
    // heal` takes free space on d3 (d4 as roomy, d3 first by name).
    truncate(&dev, "d1");
    fio_all(&t, &s, &[("r", size)], false);
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert_eq!(live(&s, "r")["members"][1]["state"], "faulty");
    // Nothing new goes on a drive whose subdisk failed under the server
    // (d1 has as much room as d2, and comes first by name).
    let args = [
        "volume",
        "create",
        "tank",
        "w",
        "--level",
        "raid5",
        "--size",
        "4M",
        "--subdisks",
        "3",
        "--control",
        &s.control(),
    ];
    ok(&args, "volume create w");
    assert_eq!(subdisk_drives(&dev, "w"), ["d3", "d4", "d2"]);
    let spares_only = [
        "pool",
        "heal",
        "tank",
        "--spares-only",
        "--control",
        &s.control(),
    ];
    let out = run(&mut platter(&spares_only), CMD_TIMEOUT);
    assert!(
        out.status.code() == Some(1) && out.stderr.contains("no spare drive present"),
        "{}",
        out.describe("heal --spares-only")
    );
    let healed = ok(
        &["pool", "heal", "tank", "--control", &s.control()],
        "pool heal",
    );
    assert!(
        healed
            .stdout
            .contains("volume r rebuilds its subdisk 1 on d3"),
        "{}",
        healed.stdout
    );
    wait_rebuilt(&s, "r");
    assert_eq!(subdisk_drives(&dev, "r"), ["s0", "d3", "d2"]);
    fio_all(&t, &s, &[("r", size)], true);
    ok(
        &["check", "--volume", "r", "--control", &s.control()],
        "check r",
    );
    s.stop_expecting_errors("TERM", &["faulty", "shrank", "label", "d0", "d1"]);

    // Offline: d2's device gone; `pool heal` places its subdisk on d4,
    // blank, and the next start rebuilds it there.
    std::fs::remove_file(d.join("d2")).unwrap();
    let healed = ok(&["pool", "heal", "tank", &dev], "pool heal (offline)");
    assert!(
        healed.stdout.contains("r.p0.s2: on d4"),
        "{}",
        healed.stdout
    );
    // Until served, `list` says the new subdisk is blank and the volume
    // degraded (it once said the volume was down, size 0), and `scan`
    // says which drives failed.
    let pool = list_json(&dev);
    let r = pool["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "r")
        .unwrap();
    assert_eq!(r["state"], "degraded", "{r}");
    assert_eq!(r["plexes"][0]["subdisks"][2]["state"], "blank", "{r}");
    let scan = run(&mut platter(&["scan", &dev]), CMD_TIMEOUT);
    assert!(
        scan.stdout.contains("drive d2       missing (failed)"),
        "{}",
        scan.stdout
    );
    let s = serve_pool_first(dir.path(), &dev, "r", &["--run"]);
    wait_rebuilt(&s, "r");
    wait_rebuilt(&s, "w");
    assert_eq!(subdisk_drives(&dev, "r"), ["s0", "d3", "d4"]);
    fio_all(&t, &s, &[("r", size)], true);
    ok(
        &["check", "--volume", "r", "--control", &s.control()],
        "check r",
    );

    // The failed drives, empty now, leave the pool (LVM's vgreduce); one
    // holding a subdisk does not.
    refused(
        &[
            "pool",
            "remove-drive",
            "tank",
            "d3",
            "--control",
            &s.control(),
        ],
        "drive d3 holds subdisks r.p0.s1, w.p0.s0",
    );
    for gone in ["d0", "d1", "d2"] {
        let args = [
            "pool",
            "remove-drive",
            "tank",
            gone,
            "--control",
            &s.control(),
        ];
        ok(&args, &format!("pool remove-drive {gone}"));
    }
    let pool = list_json(&dev);
    let names: Vec<&str> = pool["drives"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["d3", "d4", "s0"], "{pool}");
    assert!(
        pool["drives"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["state"] == "up"),
        "{pool}"
    );
    fio_all(&t, &s, &[("r", size)], true);
}

/// How many seeded kills `pool_server_killed_while_a_spare_takes_a_subdisk`
/// makes (`PLATTER_HEAL_KILLS` for more).
const HEAL_KILLS: u64 = 6;

/// The pool's server killed with SIGKILL at a seeded moment after a
/// subdisk of raid5 `r` failed with a spare in the pool: before the heal,
/// during its writes, or during the rebuild on the spare. Each time the
/// next server (`--run`) finishes what was cut off: `r` has its subdisks
/// on distinct drives, none failed, rebuilt, its parity agrees, and every
/// byte fio wrote reads back.
#[test]
fn pool_server_killed_while_a_spare_takes_a_subdisk() {
    let test = "pool_server_killed_while_a_spare_takes_a_subdisk";
    let Some(t) = tools_with_fio_nbd(test, &["fio"]) else {
        return;
    };
    let kills = env_count("PLATTER_HEAL_KILLS", HEAL_KILLS);
    let dir = temp_dir();
    let (d, dev) = pool_of(dir.path(), DRIVES, "48M");
    let make = [
        "volume", "create", "tank", "r", "--level", "raid5", "--size", "12M", &dev,
    ];
    ok(&make, "volume create r");
    let written = 12 * MIB;
    let s = serve_pool_first(dir.path(), &dev, "r", &[]);
    fio_all(&t, &s, &[("r", written)], false);
    drop(s);
    let mut moved = 0;
    for seed in 0..kills {
        let mut rng = platter_testkit::rng::Rng::new(0x4ea1 + seed);
        let delay = std::time::Duration::from_millis(rng.below(1500));
        let spare = format!("s{seed}={}", d.join(format!("s{seed}")).display());
        let add = [
            "pool",
            "add-drive",
            "tank",
            "--drive",
            &spare,
            "--spare",
            "--drive-size",
            "48M",
            &dev,
        ];
        ok(&add, "pool add-drive --spare");
        let before = subdisk_drives(&dev, "r");
        let slot = rng.below(before.len() as u64) as usize;
        let mut s = serve_pool_first(dir.path(), &dev, "r", &["--rebuild-rate", "4M"]);
        let slot_arg = slot.to_string();
        ok(
            &[
                "fail",
                "--volume",
                "r",
                &slot_arg,
                "--control",
                &s.control(),
            ],
            "fail",
        );
        std::thread::sleep(delay);
        s.crash();
        moved += usize::from(subdisk_drives(&dev, "r") != before);
        let story = format!(
            "seed {seed}: r's subdisk {slot} on {} failed, killed after {delay:?}",
            before[slot]
        );
        println!("{story}");
        let s = serve_pool_first(dir.path(), &dev, "r", &["--run"]);
        wait_rebuilt(&s, "r");
        let after = subdisk_drives(&dev, "r");
        let distinct: std::collections::BTreeSet<&String> = after.iter().collect();
        assert_eq!(distinct.len(), after.len(), "{story}: {after:?}");
        assert_eq!(
            after[slot],
            format!("s{seed}"),
            "{story}: the spare took it: {after:?}"
        );
        ok(
            &["check", "--volume", "r", "--control", &s.control()],
            &format!("{story}: check"),
        );
        let out = run_ok(
            &mut fio(&t, &uri(&s, "r"), written, true),
            CMD_TIMEOUT,
            &format!("{story}: fio verify of r"),
        );
        assert!(out.stdout.contains("err= 0"), "{story}: {}", out.stdout);
    }
    println!(
        "{test}: {kills} kills; the configuration had moved the subdisk before {moved} of them"
    );
}

/// Waits (2 minutes at most) until volume `name`'s reshape has moved
/// everything and any resync a kill left owed is done.
fn wait_reshaped(s: &Server, name: &str) {
    let start = std::time::Instant::now();
    loop {
        let st = live(s, name);
        let r = &st["reshape"];
        if (r.is_null() || r["finished"].as_bool() == Some(true)) && st["resync"].is_null() {
            return;
        }
        assert!(
            start.elapsed().as_secs() < 120,
            "{name}: not reshaped: {st}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// A raid5 volume boxed in on a drive (another volume right after its
/// subdisk there) cannot grow in place; `volume extend --add-subdisks`
/// through the server lays out new subdisks on drives that hold none of
/// it and reshapes it onto them while it serves (md's `--grow
/// --raid-devices`). The server is killed mid-reshape; the next start
/// resumes it; every byte fio wrote before reads back, the new size is
/// served to a new connection and written through, and the parity agrees.
#[test]
fn a_boxed_in_raid5_grows_onto_new_subdisks_by_a_reshape_while_served() {
    let test = "a_boxed_in_raid5_grows_onto_new_subdisks_by_a_reshape_while_served";
    let Some(t) = tools_with_fio_nbd(test, &["fio", "nbdinfo"]) else {
        return;
    };
    let dir = temp_dir();
    let (_, dev) = pool_of(dir.path(), 7, "64M");
    create_volumes(
        &dev,
        &[
            ("r", "raid5", "24M", "d0,d1,d2"),
            ("block", "concat", "8M", "d0"),
        ],
    );
    let written = sizes(&list_json(&dev))[0].1;
    let mut s = serve_pool_first(dir.path(), &dev, "r", &["--rebuild-rate", "4M"]);
    fio_all(&t, &s, &[("r", written)], false);
    refused(
        &[
            "volume",
            "extend",
            "tank",
            "r",
            "--size",
            "40M",
            "--control",
            &s.control(),
        ],
        "--add-subdisks",
    );
    let grown = ok(
        &[
            "volume",
            "extend",
            "tank",
            "r",
            "--size",
            "40M",
            "--add-subdisks",
            "--control",
            &s.control(),
        ],
        "volume extend --add-subdisks",
    );
    assert!(
        grown
            .stdout
            .contains("2 subdisks added, reshaping from 3 to 5 members"),
        "{}",
        grown.stdout
    );
    assert_eq!(subdisk_drives(&dev, "r"), ["d0", "d1", "d2", "d3", "d4"]);
    // Reads while the data moves, then a kill mid-reshape.
    fio_all(&t, &s, &[("r", written)], true);
    assert!(!live(&s, "r")["reshape"].is_null());
    s.crash();
    let mut s = serve_pool_first(dir.path(), &dev, "r", &[]);
    wait_reshaped(&s, "r");
    fio_all(&t, &s, &[("r", written)], true);
    let size = live(&s, "r")["size_bytes"].as_u64().unwrap();
    assert!(size >= 40 * MIB, "{size}");
    let info = run_ok(
        t.cmd("nbdinfo").arg("--size").arg(uri(&s, "r")),
        CMD_TIMEOUT,
        "nbdinfo --size",
    );
    assert_eq!(info.stdout.trim(), size.to_string());
    fio_all(&t, &s, &[("r", size)], false);
    ok(
        &["check", "--volume", "r", "--control", &s.control()],
        "check r",
    );
    s.stop_with("TERM");

    // Grown again, by two more; this time the kill falls where the new
    // label is on the old subdisks and not yet on the added ones (their
    // label areas blanked after the kill, as such a kill leaves them, the
    // move held at 1 byte a second so nothing has moved): the next start
    // writes their labels as the start would have, and the volume serves
    // and finishes the move. (Without that, a raid5 missing two members
    // did not assemble.)
    let mut s = serve_pool_first(dir.path(), &dev, "r", &["--rebuild-rate", "1"]);
    let args = [
        "volume",
        "extend",
        "tank",
        "r",
        "--size",
        "64M",
        "--add-subdisks",
        "--control",
        &s.control(),
    ];
    let grown = ok(&args, "volume extend --add-subdisks, again");
    assert!(
        grown.stdout.contains("from 5 to 7 members"),
        "{}",
        grown.stdout
    );
    s.crash();
    let pool = list_json(&dev);
    let r = pool["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "r")
        .unwrap()
        .clone();
    for sd in &r["plexes"][0]["subdisks"].as_array().unwrap()[5..] {
        let file = Path::new(&dev).join(sd["drive"].as_str().unwrap());
        let f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(&[0u8; 4096], sd["offset_bytes"].as_u64().unwrap())
            .unwrap();
    }
    let s = serve_pool_first(dir.path(), &dev, "r", &[]);
    wait_reshaped(&s, "r");
    assert!(live(&s, "r")["size_bytes"].as_u64().unwrap() >= 64 * MIB);
    fio_all(&t, &s, &[("r", size)], true);
    ok(
        &["check", "--volume", "r", "--control", &s.control()],
        "check r",
    );
}

/// Reads each member (each plex, for a volume of plexes) served of volume
/// `name`, from `stats --json`.
fn member_reads(s: &Server, name: &str) -> Vec<u64> {
    let args = [
        "stats",
        "--volume",
        name,
        "--json",
        "--control",
        &s.control(),
    ];
    let st: Value = serde_json::from_str(&ok(&args, "stats").stdout).unwrap();
    st["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["reads"].as_u64().unwrap())
        .collect()
}

/// vinum's volume of plexes that need not be alike: a raid5 plex
/// mirrored by a concat plex on other drives, one NBD export. fio writes
/// and verifies it, the reads go to both plexes, their copies agree
/// (`check`); the concat plex's drive is truncated under fio and the
/// raid5 plex serves every byte; with the drive replaced, the next start
/// makes the concat plex anew and the volume rebuilds it from the other
/// (killed with SIGKILL mid-rebuild, resumed); `printconfig` makes the
/// same layout on fresh drives.
#[test]
fn a_volume_of_two_unlike_plexes_serves_through_the_loss_of_one_and_rebuilds_it() {
    let test = "a_volume_of_two_unlike_plexes_serves_through_the_loss_of_one_and_rebuilds_it";
    let Some(t) = tools_with_fio_nbd(test, &["fio", "nbdinfo"]) else {
        return;
    };
    let dir = temp_dir();
    let (_, dev) = pool_of(dir.path(), 5, "64M");
    // Plexes keep to drives of their own: three drives hold no second.
    refused(
        &[
            "volume", "create", "tank", "x", "--plex", "raid5:3", "--plex", "concat", "--size",
            "8M", "--drives", "d0,d1,d2", &dev,
        ],
        "volume x.p1",
    );
    // First a stripe (d0, d1) mirrored by a mirror (d2, d3); v's concat
    // plex then goes to d0, so that the lost drive costs u its stripe
    // plex too, which keeps one labelled subdisk and is made anew (a plex
    // like it once stopped the whole server at the start).
    let args = [
        "volume", "create", "tank", "u", "--plex", "stripe:2", "--plex", "mirror:2", "--size",
        "8M", &dev,
    ];
    ok(&args, "volume create u");
    let made = ok(
        &[
            "volume",
            "create",
            "tank",
            "v",
            "--plex",
            "raid5:3",
            "--plex",
            "concat",
            "--size",
            "20M",
            "--drives",
            "d2,d3,d4,d0",
            &dev,
        ],
        "volume create --plex",
    );
    assert!(
        made.stdout
            .contains("raid5 of 3 subdisks mirrored by concat of 1 subdisks"),
        "{}",
        made.stdout
    );
    let pool = list_json(&dev);
    let u_size = pool["volumes"][0]["size_bytes"].as_u64().unwrap();
    let v = &pool["volumes"][1];
    assert_eq!(v["state"], "up", "{v}");
    assert_eq!(v["plexes"].as_array().unwrap().len(), 2, "{v}");
    let size = v["size_bytes"].as_u64().unwrap();
    assert!(size >= 20 * MIB, "{v}");
    let concat_drive = v["plexes"][1]["subdisks"][0]["drive"]
        .as_str()
        .unwrap()
        .to_string();
    // d0 holds a subdisk of u's stripe plex and of v's raid5 plex: lost
    // with the concat's drive, it fails u's stripe plex (which keeps one
    // labelled subdisk, and is made anew), and v's raid5 plex serves on
    // inside, degraded.
    let u_stripe = &pool["volumes"][0]["plexes"][0]["subdisks"];
    assert_eq!(u_stripe[0]["drive"], "d0", "{pool}");
    assert_ne!(concat_drive, "d0", "{pool}");
    let lost = [concat_drive.clone(), "d0".to_string()];
    let mut s = serve_pool_first(dir.path(), &dev, "u", &[]);
    let listed = run_ok(
        t.cmd("nbdinfo").arg("--list").arg(uri(&s, "")),
        CMD_TIMEOUT,
        "nbdinfo --list",
    );
    assert!(
        listed.stdout.contains("export=\"v\"") && !listed.stdout.contains("v.p0"),
        "{}",
        listed.stdout
    );
    fio_all(&t, &s, &[("v", size), ("u", u_size)], false);
    let before = member_reads(&s, "v");
    fio_all(&t, &s, &[("v", size)], true);
    let after = member_reads(&s, "v");
    // Both plexes read, unless the balancing measured one far slower
    // (docs/tuning.md: a copy over 1.5x the fastest's latency weighs
    // more). A CI run beside a build sent a whole verify pass to the
    // concat plex ([364, 916] -> [364, 2196]): the raid5 plex's engine
    // was slowed by the load, as the weights are meant to notice.
    let latency = live(&s, "v")["read_policy"]["latency_us"].clone();
    let us = |i: usize| latency[i].as_f64().unwrap_or(0.0);
    // (Both measured: the writes just before went to both plexes.)
    let lopsided = us(0).min(us(1)) > 0.0 && us(0).max(us(1)) > 1.5 * us(0).min(us(1));
    assert!(
        (after[0] > before[0] && after[1] > before[1]) || lopsided,
        "the reads go to both plexes: {before:?} -> {after:?} (latency {latency})"
    );
    ok(
        &["check", "--volume", "v", "--control", &s.control()],
        "check v",
    );

    for drive in &lost {
        truncate(&dev, drive);
    }
    fio_all(&t, &s, &[("v", size), ("u", u_size)], true);
    let st = live(&s, "v");
    assert_eq!(st["members"][1]["state"], "faulty", "{st}");
    let st = live(&s, "u");
    assert_eq!(st["members"][0]["state"], "faulty", "{st}");
    s.stop_expecting_errors("TERM", &["faulty", "shrank", "label", "v.p1", "u.p"]);

    for drive in &lost {
        std::fs::remove_file(Path::new(&dev).join(drive)).unwrap();
        let new = Path::new(&dev).join(format!("new-{drive}"));
        let args = [
            "pool",
            "replace-drive",
            "tank",
            drive,
            new.to_str().unwrap(),
            "--drive-size",
            "64M",
            &dev,
        ];
        ok(&args, "pool replace-drive");
    }
    let mut slow = serve_pool_first(dir.path(), &dev, "u", &["--rebuild-rate", "2M"]);
    wait_rebuilding(&slow, "v");
    let log = slow.log();
    for plex in ["plex=u.p0", "plex=v.p1"] {
        let made = log
            .lines()
            .any(|l| l.contains("plex made anew") && l.contains(plex));
        assert!(made, "{plex} made anew: {log}");
    }
    slow.crash();
    let s = serve_pool_first(dir.path(), &dev, "u", &[]);
    for name in ["v", "u"] {
        wait_rebuilt(&s, name);
    }
    fio_all(&t, &s, &[("v", size), ("u", u_size)], true);
    for name in ["v", "u"] {
        let args = ["check", "--volume", name, "--control", &s.control()];
        ok(&args, &format!("check {name}"));
    }
    let pool = list_json(&dev);
    for v in pool["volumes"].as_array().unwrap() {
        assert_eq!(v["state"], "up", "{pool}");
    }

    // Made through the server, a volume of plexes serves at once.
    let args = [
        "volume",
        "create",
        "tank",
        "w",
        "--plex",
        "mirror:2",
        "--plex",
        "concat",
        "--size",
        "4M",
        "--control",
        &s.control(),
    ];
    let made = ok(&args, "volume create --plex --control");
    assert!(made.stdout.contains("served now"), "{}", made.stdout);
    let w_size = live(&s, "w")["size_bytes"].as_u64().unwrap();
    assert!(w_size >= 4 * MIB);
    fio_all(&t, &s, &[("w", w_size)], false);
    ok(
        &["check", "--volume", "w", "--control", &s.control()],
        "check w",
    );
    let pool = list_json(&dev);
    assert_eq!(
        pool["volumes"][2]["plexes"].as_array().unwrap().len(),
        2,
        "{pool}"
    );

    // The configuration makes the same plexes on fresh drives.
    let config = ok(&["printconfig", "tank", &dev], "printconfig").stdout;
    let file = dir.path().join("tank.conf");
    std::fs::write(&file, &config).unwrap();
    let e = dir.path().join("e");
    std::fs::create_dir(&e).unwrap();
    let fresh: Vec<String> = (0..5)
        .map(|i| e.join(format!("f{i}")).display().to_string())
        .collect();
    let mut args = vec![
        "pool",
        "create",
        "tank",
        "--config",
        file.to_str().unwrap(),
        "--drive-size",
        "64M",
    ];
    args.extend(fresh.iter().map(String::as_str));
    ok(&args, "pool create --config");
    let again = list_json(&e.display().to_string());
    for i in 0..2 {
        let (a, b) = (&again["volumes"][i], &pool["volumes"][i]);
        assert_eq!(a["name"], b["name"]);
        assert_eq!(a["size_bytes"], b["size_bytes"]);
        assert_eq!(a["plexes"], b["plexes"]);
    }
}

/// `pool replace-drive --control` under a volume of plexes: a plex that
/// lost what its redundancy covers (one subdisk of a mirror plex) rebuilds
/// inside at once, its volume serving throughout; a plex that cannot (a
/// stripe plex) is made anew at once and rebuilt by its volume from the
/// other plex. Then spare drives take a failed subdisk of each plex by
/// themselves (the server killed with SIGKILL while the volume rebuilds
/// a plex made anew). Last, the volume is extended through the server
/// and then offline, both plexes growing in place and the mirror with them. fio's bytes read back after each, and the copies
/// agree.
#[test]
fn a_drive_under_a_volume_of_plexes_is_replaced_through_the_server() {
    let test = "a_drive_under_a_volume_of_plexes_is_replaced_through_the_server";
    let Some(t) = tools_with_fio_nbd(test, &["fio"]) else {
        return;
    };
    let dir = temp_dir();
    let (d, dev) = pool_of(dir.path(), 4, "48M");
    let args = [
        "volume", "create", "tank", "u", "--plex", "stripe:2", "--plex", "mirror:2", "--size",
        "8M", &dev,
    ];
    ok(&args, "volume create u");
    assert_eq!(subdisk_drives_of(&dev, "u", 0), ["d0", "d1"]);
    assert_eq!(subdisk_drives_of(&dev, "u", 1), ["d2", "d3"]);
    let mut s = serve_pool_first(dir.path(), &dev, "u", &["--rebuild-rate", "2M"]);
    let size = live(&s, "u")["size_bytes"].as_u64().unwrap();
    fio_all(&t, &s, &[("u", size)], false);

    // The mirror plex loses d3: it serves on inside; replaced, it rebuilds.
    truncate(&dev, "d3");
    fio_all(&t, &s, &[("u", size)], true);
    assert_eq!(live(&s, "u.p1")["members"][1]["state"], "faulty");
    let new = d.join("n3").display().to_string();
    let args = [
        "pool",
        "replace-drive",
        "tank",
        "d3",
        &new,
        "--drive-size",
        "48M",
        "--control",
        &s.control(),
    ];
    let out = ok(&args, "replace-drive d3");
    assert!(out.stdout.contains("rebuilding: u.p1"), "{}", out.stdout);
    wait_rebuilt(&s, "u.p1");
    fio_all(&t, &s, &[("u", size)], true);
    ok(
        &["check", "--volume", "u.p1", "--control", &s.control()],
        "check u.p1",
    );

    // The stripe plex loses d0: the volume fails it and serves from the
    // mirror plex; replaced, the plex is made anew at once and the volume
    // rebuilds it, still served.
    truncate(&dev, "d0");
    fio_all(&t, &s, &[("u", size)], true);
    assert_eq!(live(&s, "u")["members"][0]["state"], "faulty");
    let new = d.join("n0").display().to_string();
    let args = [
        "pool",
        "replace-drive",
        "tank",
        "d0",
        &new,
        "--drive-size",
        "48M",
        "--control",
        &s.control(),
    ];
    let out = ok(&args, "replace-drive d0");
    assert!(
        out.stdout
            .contains("plex u.p0 cannot rebuild inside: it is made anew"),
        "{}",
        out.stdout
    );
    wait_rebuilt(&s, "u");
    fio_all(&t, &s, &[("u", size)], true);
    ok(
        &["check", "--volume", "u", "--control", &s.control()],
        "check u",
    );

    // A spare takes a plex's failed subdisk by itself: the stripe plex's
    // (made anew, rebuilt by the volume) and then the mirror plex's
    // (rebuilt inside), each while the volume serves.
    for (spare, lost, array) in [("s0", "d1", "u"), ("s1", "d2", "u.p1")] {
        let spare_arg = format!("{spare}={}", d.join(spare).display());
        let args = [
            "pool",
            "add-drive",
            "tank",
            "--drive",
            &spare_arg,
            "--spare",
            "--drive-size",
            "48M",
            "--control",
            &s.control(),
        ];
        ok(&args, "pool add-drive --spare");
        truncate(&dev, lost);
        // Writes reach both plexes: the lost subdisk is found failed.
        fio_all(&t, &s, &[("u", size)], false);
        wait_placed(&dev, spare);
        if array == "u" {
            // Killed while the volume rebuilds the plex made anew (2 MB/s
            // over 8 MiB): the next start resumes it.
            // The configuration names the spare before the plex is made
            // anew and its rebuild begins.
            let start = std::time::Instant::now();
            while live(&s, "u")["rebuild"].is_null() {
                let st = live(&s, "u");
                assert!(
                    start.elapsed().as_secs() < 20,
                    "not rebuilding the plex: {st}"
                );
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            s.crash();
            s = serve_pool_first(dir.path(), &dev, "u", &["--run"]);
        }
        wait_rebuilt(&s, array);
        // The truncated drive is named failed, and missing (too short).
        assert!(drive_state(&dev, lost).starts_with("failed"), "{lost}");
        fio_all(&t, &s, &[("u", size)], true);
        ok(
            &["check", "--volume", array, "--control", &s.control()],
            "check after the spare",
        );
    }
    // Drives replaced keep their names (d0, d3); the spares took d1's and
    // d2's subdisks.
    assert_eq!(subdisk_drives_of(&dev, "u", 0), ["d0", "s0"]);
    assert_eq!(subdisk_drives_of(&dev, "u", 1), ["s1", "d3"]);
    s.stop_expecting_errors("TERM", &["faulty", "shrank", "label", "u.p0", "u.p1"]);
    for gone in ["d0", "d1", "d2", "d3"] {
        std::fs::remove_file(d.join(gone)).unwrap();
    }
    // Nothing is left for the next start to make anew or rebuild.
    let mut s = serve_pool_first(dir.path(), &dev, "u", &[]);
    let st = live(&s, "u");
    assert!(st["rebuild"].is_null(), "{st}");
    fio_all(&t, &s, &[("u", size)], true);
    assert_eq!(list_json(&dev)["volumes"][0]["state"], "up");

    // Extended through the server while served: each plex grows, then
    // the mirror; fio's bytes stay, a new connection sees the new size and
    // writes there; every array checks clean.
    ok(
        &[
            "volume",
            "extend",
            "tank",
            "u",
            "--size",
            "16M",
            "--control",
            &s.control(),
        ],
        "volume extend u --control",
    );
    let grown = live(&s, "u")["size_bytes"].as_u64().unwrap();
    assert!(grown >= 16 << 20, "{grown}");
    fio_all(&t, &s, &[("u", size)], true);
    fio_all(&t, &s, &[("u", grown)], false);
    for array in ["u", "u.p0", "u.p1"] {
        ok(
            &["check", "--volume", array, "--control", &s.control()],
            &format!("check {array} after the extend"),
        );
    }
    // Stopped, offline, again: the bytes stay, and a start serves it.
    s.stop_expecting_errors("TERM", &[]);
    ok(
        &["volume", "extend", "tank", "u", "--size", "24M", &dev],
        "volume extend u",
    );
    let s = serve_pool_first(dir.path(), &dev, "u", &[]);
    let again = live(&s, "u")["size_bytes"].as_u64().unwrap();
    assert!(again >= 24 << 20, "{again}");
    fio_all(&t, &s, &[("u", grown)], true);
    fio_all(&t, &s, &[("u", again)], false);
    for array in ["u", "u.p0", "u.p1"] {
        ok(
            &["check", "--volume", array, "--control", &s.control()],
            &format!("check {array} after the offline extend"),
        );
    }
}

/// Waits until spare drive `spare` has taken a subdisk (it is up).
fn wait_placed(dev: &str, spare: &str) {
    let start = std::time::Instant::now();
    while drive_state(dev, spare) != "up" {
        assert!(start.elapsed().as_secs() < 60, "{spare}: took no subdisk");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// How many times `a_volume_of_plexes_killed_mid_extend_keeps_its_bytes`
/// kills its server (`PLATTER_PLEX_EXTEND_KILLS` for more).
const PLEX_EXTEND_KILLS: u64 = 4;

/// The pool's server killed with SIGKILL at a seeded moment of a `volume
/// extend --control` of a volume of plexes (a raid5 plex and a concat
/// plex; every drive 1 ms away, so the extend's writes take a while):
/// after each kill the next start serves the volume whole at its old size
/// or its new one, fio's bytes read back, and the mirror and each plex
/// check clean.
#[test]
fn a_volume_of_plexes_killed_mid_extend_keeps_its_bytes() {
    let test = "a_volume_of_plexes_killed_mid_extend_keeps_its_bytes";
    let Some(t) = tools_with_fio_nbd(test, &["fio"]) else {
        return;
    };
    let kills = env_count("PLATTER_PLEX_EXTEND_KILLS", PLEX_EXTEND_KILLS);
    let dir = temp_dir();
    let (d, dev) = pool_of(dir.path(), 4, "64M");
    let args = [
        "volume", "create", "tank", "u", "--plex", "raid5:3", "--plex", "concat", "--size", "6M",
        &dev,
    ];
    ok(&args, "volume create u");
    let slow: Vec<String> = (0..4)
        .map(|i| format!("{}=latency=1ms", d.join(format!("d{i}")).display()))
        .collect();
    let mut extra = Vec::new();
    for s in &slow {
        extra.extend(["--inject", s.as_str()]);
    }
    let written = 6 * MIB;
    let s = serve_pool_first(dir.path(), &dev, "u", &extra);
    fio_all(&t, &s, &[("u", written)], false);
    drop(s);
    let mut outcomes = [0u32; 2];
    for seed in 0..kills {
        let mut rng = platter_testkit::rng::Rng::new(0x91e0 + seed);
        let delay = std::time::Duration::from_millis(rng.below(150));
        let now = sizes(&list_json(&dev))[0].1;
        let target = now + 2 * MIB;
        let mut s = serve_pool_first(dir.path(), &dev, "u", &extra);
        let size = target.to_string();
        let args = [
            "volume",
            "extend",
            "tank",
            "u",
            "--size",
            &size,
            "--control",
            &s.control(),
        ];
        let mut change = Background::spawn(&mut platter(&args), "volume extend");
        std::thread::sleep(delay);
        s.crash();
        change.wait(CMD_TIMEOUT);
        let story =
            format!("seed {seed}: u extended from {now} to {target}, killed after {delay:?}");
        println!("{story}");
        let s = serve_pool_first(dir.path(), &dev, "u", &[]);
        let served = live(&s, "u")["size_bytes"].as_u64().unwrap();
        assert!(
            served == now || served >= target,
            "{story}: served {served}"
        );
        assert_eq!(
            sizes(&list_json(&dev))[0].1,
            served,
            "{story}: list and server agree"
        );
        outcomes[usize::from(served >= target)] += 1;
        for array in ["u", "u.p0", "u.p1"] {
            wait_rebuilt(&s, array);
            ok(
                &["check", "--volume", array, "--control", &s.control()],
                &format!("{story}: check {array}"),
            );
        }
        let out = run_ok(
            &mut fio(&t, &uri(&s, "u"), written, true),
            CMD_TIMEOUT,
            &format!("{story}: fio verify of u"),
        );
        assert!(out.stdout.contains("err= 0"), "{story}: {}", out.stdout);
    }
    println!(
        "{test}: {kills} kills; {} left u its old size, {} the new",
        outcomes[0], outcomes[1]
    );
}

/// A stripe plex that lost both of its subdisks (two drives truncated)
/// while its volume serves from a mirror plex: `pool heal --control`
/// places one subdisk and says the plex waits (it cannot be made anew
/// with the other still lost, nor rebuilt inside); a drive added, the next
/// heal places the other, and the plex is made anew and rebuilt, the
/// volume serving fio's bytes throughout.
#[test]
fn a_plex_that_lost_two_subdisks_is_made_anew_once_both_are_placed() {
    let test = "a_plex_that_lost_two_subdisks_is_made_anew_once_both_are_placed";
    let Some(t) = tools_with_fio_nbd(test, &["fio"]) else {
        return;
    };
    let dir = temp_dir();
    let (d, dev) = pool_of(dir.path(), 5, "48M");
    let args = [
        "volume",
        "create",
        "tank",
        "w",
        "--plex",
        "mirror:2",
        "--plex",
        "stripe:2",
        "--size",
        "8M",
        "--drives",
        "d0,d1,d2,d3",
        &dev,
    ];
    ok(&args, "volume create w");
    assert_eq!(subdisk_drives_of(&dev, "w", 1), ["d2", "d3"]);
    let s = serve_pool_first(dir.path(), &dev, "w", &[]);
    let size = live(&s, "w")["size_bytes"].as_u64().unwrap();
    fio_all(&t, &s, &[("w", size)], false);
    truncate(&dev, "d2");
    truncate(&dev, "d3");
    // Writes reach both plexes: the stripe plex's subdisks are found lost.
    fio_all(&t, &s, &[("w", size)], false);
    let heal = ["pool", "heal", "tank", "--control", &s.control()];
    let first = ok(&heal, "pool heal (one drive with room)");
    assert!(
        first.stdout.contains("plex w.p1 has its subdisk")
            && first.stdout.contains("once its other"),
        "{}",
        first.stdout
    );
    let placed = subdisk_drives_of(&dev, "w", 1);
    assert!(placed.contains(&"d4".to_string()), "{placed:?}");
    assert_eq!(live(&s, "w")["members"][1]["state"], "faulty");
    // No other drive outside the volume's plexes: nothing more now.
    let none = run(&mut platter(&heal), CMD_TIMEOUT);
    assert!(!none.status.success(), "{}", none.stdout);
    let d5 = format!("d5={}", d.join("d5").display());
    let args = [
        "pool",
        "add-drive",
        "tank",
        "--drive",
        &d5,
        "--drive-size",
        "48M",
        "--control",
        &s.control(),
    ];
    ok(&args, "pool add-drive d5");
    let second = ok(&heal, "pool heal (the drive added)");
    assert!(
        second.stdout.contains("volume w.p1 rebuilds"),
        "{}",
        second.stdout
    );
    wait_rebuilt(&s, "w");
    let placed = subdisk_drives_of(&dev, "w", 1);
    assert!(
        placed.contains(&"d4".to_string()) && placed.contains(&"d5".to_string()),
        "{placed:?}"
    );
    fio_all(&t, &s, &[("w", size)], true);
    for array in ["w", "w.p0", "w.p1"] {
        ok(
            &["check", "--volume", array, "--control", &s.control()],
            &format!("check {array}"),
        );
    }
}
