//! systemd integration (issue 17): `platter serve` started by
//! `systemd-socket-activate` (the protocol systemd's socket units use)
//! serves the sockets it was passed, a socket named `control` as its
//! control socket, and leaves the socket files to their owner; with
//! `NOTIFY_SOCKET` set it reports `READY=1` once it serves and
//! `STOPPING=1` when told to stop; a socket of the wrong kind is refused
//! with what the unit file needs.

mod e2e_support;

use e2e_support::*;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant};

const MIRROR: Spec = Spec::new("mirror", 2, "64k");

fn wait_for(path: &Path, bg: &mut Background) {
    let start = Instant::now();
    while !path.exists() {
        assert!(bg.is_running(), "ended early: {}", bg.stderr());
        assert!(
            start.elapsed() < CMD_TIMEOUT,
            "{} never appeared: {}",
            path.display(),
            bg.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn socket_activation_serves_the_passed_sockets_and_leaves_them_to_their_owner() {
    let test = "socket_activation_serves_the_passed_sockets_and_leaves_them_to_their_owner";
    let Some(t) = required_tools(test, &["systemd-socket-activate", "nbdinfo", "qemu-io"]) else {
        return;
    };
    let v = Volume::create(MIRROR, 4 * MIB);
    let sock = v.path().join("act.sock");
    let ctl = v.path().join("act.ctl");
    let mut activate = t.cmd("systemd-socket-activate");
    activate
        .arg("-l")
        .arg(&sock)
        .arg("-l")
        .arg(&ctl)
        .arg("--fdname=nbd:control")
        .arg(env!("CARGO_BIN_EXE_platter"))
        .arg("serve")
        .args(&v.members);
    let mut bg = Background::spawn(&mut activate, "systemd-socket-activate platter serve");
    wait_for(&sock, &mut bg);
    // The first client starts the server (systemd-socket-activate execs it
    // then): nbdinfo waits in the socket's backlog meanwhile.
    let uri = format!("nbd+unix:///{}?socket={}", v.name, sock.display());
    let out = run_ok(
        t.cmd("nbdinfo").args(["--size", &uri]),
        CMD_TIMEOUT,
        "nbdinfo through the passed socket",
    );
    assert_eq!(out.stdout.trim(), v.size_bytes.to_string());
    qemu_io(
        &t,
        &uri,
        &["write -P 0x3c 0 256k".into(), "read -P 0x3c 0 256k".into()],
        "write and read through the passed socket",
    );
    // The socket named "control" answers platter's management commands.
    let out = run_ok(
        platter(&["status", "--json", "--control"]).arg(&ctl),
        CMD_TIMEOUT,
        "status through the passed control socket",
    );
    let status: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(status["name"], v.name.as_str(), "{status}");
    // Stopped as systemd stops it: it flushes and marks the volume clean,
    // and the socket files stay (the socket unit owns them).
    send_signal(bg.pid(), "TERM");
    let code = bg.wait(CMD_TIMEOUT);
    assert!(code.success(), "stopped: {code:?}\n{}", bg.stderr());
    assert!(
        sock.exists() && ctl.exists(),
        "the passed sockets were removed"
    );
    let out = run_ok(
        platter(&["status", "--json"]).args(&v.members),
        CMD_TIMEOUT,
        "status from the labels",
    );
    let status: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(status["state"], "clean", "{status}");
}

#[test]
fn socket_activation_over_tcp() {
    let test = "socket_activation_over_tcp";
    let Some(t) = required_tools(test, &["systemd-socket-activate", "nbdinfo"]) else {
        return;
    };
    let v = Volume::create(MIRROR, 4 * MIB);
    // A free port: bound, read, let go (the activator binds it next).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut activate = t.cmd("systemd-socket-activate");
    activate
        .arg("-l")
        .arg(format!("127.0.0.1:{port}"))
        .arg(env!("CARGO_BIN_EXE_platter"))
        .arg("serve")
        .args(&v.members);
    let mut bg = Background::spawn(&mut activate, "systemd-socket-activate over TCP");
    let uri = format!("nbd://127.0.0.1:{port}/{}", v.name);
    let start = Instant::now();
    let out = loop {
        let out = run(t.cmd("nbdinfo").args(["--size", &uri]), CMD_TIMEOUT);
        if out.status.success() || start.elapsed() > CMD_TIMEOUT {
            break out;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        out.status.success(),
        "{}\n{}",
        out.describe("nbdinfo"),
        bg.stderr()
    );
    assert_eq!(out.stdout.trim(), v.size_bytes.to_string());
    send_signal(bg.pid(), "TERM");
    assert!(bg.wait(CMD_TIMEOUT).success(), "{}", bg.stderr());
    // Given no control socket, it said so, and how to get one.
    let said = bg.stderr();
    assert!(
        said.contains("no control socket") && said.contains("--control PATH"),
        "{said}"
    );
}

/// Receives one notification, within the command timeout.
fn notification(s: &UnixDatagram) -> String {
    s.set_read_timeout(Some(CMD_TIMEOUT)).unwrap();
    let mut buf = [0u8; 4096];
    let n = s.recv(&mut buf).expect("a notification");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn readiness_and_stopping_are_notified() {
    let v = Volume::create(MIRROR, 4 * MIB);
    for abstract_name in [false, true] {
        let path = v.path().join("notify");
        let _ = std::fs::remove_file(&path);
        let (listener, address) = if abstract_name {
            use std::os::linux::net::SocketAddrExt;
            let name = format!("platter-test-notify-{}", std::process::id());
            let a = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
            (UnixDatagram::bind_addr(&a).unwrap(), format!("@{name}"))
        } else {
            (
                UnixDatagram::bind(&path).unwrap(),
                path.display().to_string(),
            )
        };
        let sock = v.path().join("sock");
        let mut serve = platter(&["serve", "--socket"]);
        serve
            .arg(&sock)
            .args(&v.members)
            .env("NOTIFY_SOCKET", &address);
        let mut bg = Background::spawn(&mut serve, "serve with NOTIFY_SOCKET");
        let ready = notification(&listener);
        assert!(ready.lines().any(|l| l == "READY=1"), "{ready}");
        assert!(
            ready.contains(&format!("STATUS=serving '{}'", v.name)),
            "{ready}"
        );
        // READY means it serves: a client gets in at once.
        assert!(sock.exists(), "READY before the socket listens");
        send_signal(bg.pid(), "TERM");
        let stopping = notification(&listener);
        assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping}");
        assert!(bg.wait(CMD_TIMEOUT).success(), "{}", bg.stderr());
    }
}

/// A datagram socket passed where a stream socket belongs (`ListenDatagram=`
/// in the socket unit) is refused, saying what the unit needs.
#[test]
fn a_socket_of_the_wrong_kind_is_refused_with_what_the_unit_needs() {
    let test = "a_socket_of_the_wrong_kind_is_refused_with_what_the_unit_needs";
    let Some(t) = required_tools(test, &["systemd-socket-activate"]) else {
        return;
    };
    let v = Volume::create(MIRROR, 4 * MIB);
    let before: Vec<Vec<u8>> = v
        .members
        .iter()
        .map(|m| std::fs::read(m).unwrap())
        .collect();
    let sock = v.path().join("dgram.sock");
    let mut activate = t.cmd("systemd-socket-activate");
    activate
        .arg("--datagram")
        .arg("-l")
        .arg(&sock)
        .arg(env!("CARGO_BIN_EXE_platter"))
        .arg("serve")
        .args(&v.members);
    let mut bg = Background::spawn(&mut activate, "activation with a datagram socket");
    wait_for(&sock, &mut bg);
    // The activator starts the program on the first datagram.
    UnixDatagram::unbound()
        .unwrap()
        .send_to(b"wake", &sock)
        .unwrap();
    let code = bg.wait(CMD_TIMEOUT);
    assert_eq!(code.code(), Some(1), "{}", bg.stderr());
    assert!(
        bg.stderr().contains("not a stream socket") && bg.stderr().contains("ListenStream"),
        "{}",
        bg.stderr()
    );
    for (m, b) in v.members.iter().zip(&before) {
        assert!(std::fs::read(m).unwrap() == *b, "{m} changed");
    }
}

/// The value of `key=` in a unit file's text (the first).
fn unit_value(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in\n{text}"))
        .to_string()
}

/// The shipped contrib/volumes.toml made the test's own: paths under
/// /run/platter moved into `dir`, the installed event program replaced by
/// the repository's, and volume `home`'s example members (the host's
/// disks, by nature) by `members`, `write-mostly` naming the same slot.
fn contrib_volumes_file(contrib: &Path, dir: &str, members: &[String]) -> String {
    let text = std::fs::read_to_string(contrib.join("volumes.toml"))
        .unwrap()
        .replace("/run/platter", dir)
        .replace(
            "/usr/local/lib/platter/platter-event-mail",
            &contrib.join("platter-event-mail").display().to_string(),
        );
    let mut file: toml::Table = toml::from_str(&text).unwrap();
    let home = file["volumes"]["home"].as_table_mut().unwrap();
    let examples: Vec<toml::Value> = home["members"].as_array().unwrap().clone();
    assert_eq!(
        examples.len(),
        members.len(),
        "home's members: {examples:?}"
    );
    let ours = |v: &toml::Value| {
        let i = examples
            .iter()
            .position(|e| e == v)
            .expect("one of the members");
        toml::Value::from(members[i].as_str())
    };
    home["members"] = toml::Value::Array(examples.iter().map(ours).collect());
    let options = home["options"].as_table_mut().unwrap();
    let write_mostly = options["write-mostly"].as_array().unwrap().iter().map(ours);
    options["write-mostly"] = toml::Value::Array(write_mostly.collect());
    toml::to_string(&file).unwrap()
}

/// The example files in contrib/ work together as shipped, run the way
/// systemd runs them: the socket unit's `ListenStream=` passed (by
/// systemd-socket-activate) to the service's `ExecStart=`, reading
/// contrib/volumes.toml's volume `home` (paths moved into a temporary
/// directory, the example disks replaced by files). The volume is served
/// on the unit's socket to a real client, says READY (`Type=notify`), and
/// answers `platter status` on the control socket the file names.
///
/// Regression: the shipped file named the socket unit's path as the
/// volume's `socket`, and the service refused to start ("socket
/// /run/platter/home.sock is in use by a running server"), and it had no
/// `control`: `platter status --control` had nothing to reach.
#[test]
fn the_contrib_units_and_volumes_file_serve_a_volume() {
    let test = "the_contrib_units_and_volumes_file_serve_a_volume";
    let Some(t) = required_tools(test, &["systemd-socket-activate", "qemu-io"]) else {
        return;
    };
    let contrib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib");
    let unit = |name: &str| std::fs::read_to_string(contrib.join("systemd").join(name)).unwrap();
    let (service, socket) = (unit("platter@.service"), unit("platter@.socket"));
    assert_eq!(unit_value(&service, "Type"), "notify");
    let v = Volume::create(Spec::new("mirror", 3, "64k"), 4 * MIB);
    let dir = v.path().display().to_string();
    let config = format!("{dir}/volumes.toml");
    std::fs::write(&config, contrib_volumes_file(&contrib, &dir, &v.members)).unwrap();
    let instance = "home";
    let listen = unit_value(&socket, "ListenStream")
        .replace("/run/platter", &dir)
        .replace("%i", instance);
    let exec: Vec<String> = unit_value(&service, "ExecStart")
        .split_whitespace()
        .map(|w| {
            w.replace("/usr/local/bin/platter", env!("CARGO_BIN_EXE_platter"))
                .replace("/etc/platter/volumes.toml", &config)
                .replace("%i", instance)
        })
        .collect();
    let notify_path = v.path().join("notify");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    let mut activate = t.cmd("systemd-socket-activate");
    activate
        .args(["-l", &listen])
        .arg(format!(
            "--fdname={}",
            unit_value(&socket, "FileDescriptorName")
        ))
        .arg(format!("--setenv=NOTIFY_SOCKET={}", notify_path.display()))
        .args(&exec);
    let mut bg = Background::spawn(&mut activate, "the contrib units");
    wait_for(Path::new(&listen), &mut bg);
    let uri = format!("nbd+unix:///{}?socket={listen}", v.name);
    qemu_io(
        &t,
        &uri,
        &[
            "write -P 0x5a 1M 512k".into(),
            "read -P 0x5a 1M 512k".into(),
        ],
        "a client through the unit's socket",
    );
    let ready = notification(&notify);
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready}");
    let ctl = format!("{dir}/{instance}.ctl");
    let out = run_ok(
        &mut platter(&["status", "--json", "--control", &ctl]),
        CMD_TIMEOUT,
        "status through the control socket the volumes file names",
    );
    let status: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(status["name"], v.name.as_str(), "{status}");
    send_signal(bg.pid(), "TERM");
    assert!(bg.wait(CMD_TIMEOUT).success(), "{}", bg.stderr());
    assert!(
        !bg.stderr().contains("no control socket"),
        "{}",
        bg.stderr()
    );
    assert!(Path::new(&listen).exists(), "the unit's socket was removed");
    assert_eq!(v.state(), "clean");
}

/// Clients that start their own server: `nbdinfo [ CMD ]` and `nbdcopy --
/// [ CMD ]` (libnbd's socket activation: no option needed, and the banner
/// goes to stderr, not into the client's output), and libnbd's
/// `nbd_connect_command` (nbdsh's `h.connect_command`), which talks over
/// the server's standard input and output (`serve --stdio`). platter stops,
/// flushed and clean, when the client leaves; data copied in one run comes
/// back in the next. `--stdio` with a standard input that is not a socket
/// is refused before anything is opened.
#[test]
fn clients_that_start_their_server_are_served() {
    let test = "clients_that_start_their_server_are_served";
    let Some(t) = required_tools(test, &["nbdinfo", "nbdcopy", "nbdsh"]) else {
        return;
    };
    let v = Volume::create(MIRROR, 4 * MIB);
    let bin = env!("CARGO_BIN_EXE_platter");
    let server: Vec<&str> = ["[", bin, "serve"]
        .into_iter()
        .chain(v.members.iter().map(String::as_str))
        .chain(["]"])
        .collect();
    let out = run_ok(
        t.cmd("nbdinfo").args(["--size", "--"]).args(&server),
        CMD_TIMEOUT,
        "nbdinfo [ platter serve ]",
    );
    assert_eq!(
        out.stdout.trim(),
        v.size_bytes.to_string(),
        "only nbdinfo's answer on stdout"
    );
    let src = v.path().join("src.img");
    let dst = v.path().join("dst.img");
    write_random_image(&src, v.size_bytes, 3);
    run_ok(
        t.cmd("nbdcopy").arg(&src).args(&server),
        CMD_TIMEOUT,
        "nbdcopy into [ platter serve ]",
    );
    // Read back over --stdio, by nbdsh's connect_command.
    let script = format!(
        "h.connect_command([{bin:?}, 'serve', '--stdio', {m0:?}, {m1:?}])\n\
         open({dst:?}, 'wb').write(h.pread(h.get_size(), 0))\n\
         h.shutdown()\n",
        m0 = v.members[0],
        m1 = v.members[1],
        dst = dst.display().to_string(),
    );
    let path_var = std::env::var("PATH").unwrap_or_default();
    // nbdsh runs `python3 -m nbd`: Debian's python3 has the module.
    run_ok(
        t.cmd("nbdsh")
            .env("PATH", format!("/usr/bin:{path_var}"))
            .arg("-c")
            .arg(&script),
        CMD_TIMEOUT,
        "nbdsh connect_command platter serve --stdio",
    );
    assert!(
        std::fs::read(&src).unwrap() == std::fs::read(&dst).unwrap(),
        "what went in came back out"
    );
    // Each run stopped cleanly (the labels say so).
    let start = Instant::now();
    loop {
        let out = run_ok(
            platter(&["status", "--json"]).args(&v.members),
            CMD_TIMEOUT,
            "status from the labels",
        );
        let status: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        if status["state"] == "clean" {
            break;
        }
        assert!(start.elapsed() < CMD_TIMEOUT, "never clean: {status}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let before: Vec<Vec<u8>> = v
        .members
        .iter()
        .map(|m| std::fs::read(m).unwrap())
        .collect();
    let out = run(
        platter(&["serve", "--stdio"])
            .args(&v.members)
            .stdin(std::process::Stdio::null()),
        CMD_TIMEOUT,
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        out.describe("serve --stdio")
    );
    assert!(out.stderr.contains("not a stream socket"), "{}", out.stderr);
    for (m, b) in v.members.iter().zip(&before) {
        assert!(
            std::fs::read(m).unwrap() == *b,
            "{m} changed by a refused start"
        );
    }
}
