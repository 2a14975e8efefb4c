//! nbdkit as a remote member: one server per export on a Unix socket (or
//! on TCP in a network namespace, another "host"), killed on drop,
//! restartable (a member's host going away and coming back).

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::netns::NetNs;
use crate::tools::{required_tools, Tools};

/// How long nbdkit may take to create its socket.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

pub struct Nbdkit {
    tools: Tools,
    child: Option<Child>,
    listen: Listen,
    /// Everything after the listening options: filters, plugin, its
    /// arguments.
    args: Vec<String>,
}

/// Where an nbdkit listens.
enum Listen {
    Unix(PathBuf),
    /// TCP on the host of a network namespace.
    Host {
        ns: Arc<NetNs>,
        port: u16,
    },
}

impl Nbdkit {
    /// nbdkit serving `plugin` (the plugin's name and its arguments, as
    /// nbdkit takes them: `["memory", "size=4M"]`) through `filters`, on
    /// `socket`. `None` when nbdkit is missing outside CI (the reason is
    /// printed for `test`); under `CI=true` that fails the test.
    pub fn start(test: &str, socket: &Path, filters: &[&str], plugin: &[&str]) -> Option<Nbdkit> {
        Nbdkit::launch(test, Listen::Unix(socket.to_owned()), filters, plugin)
    }

    /// The same, on TCP `port` of the host in `ns` (another "host").
    pub fn start_on_host(
        test: &str,
        ns: &Arc<NetNs>,
        port: u16,
        filters: &[&str],
        plugin: &[&str],
    ) -> Option<Nbdkit> {
        let listen = Listen::Host {
            ns: Arc::clone(ns),
            port,
        };
        Nbdkit::launch(test, listen, filters, plugin)
    }

    fn launch(test: &str, listen: Listen, filters: &[&str], plugin: &[&str]) -> Option<Nbdkit> {
        let tools = required_tools(test, &["nbdkit"])?;
        let args = filters
            .iter()
            .map(|f| format!("--filter={f}"))
            .chain(plugin.iter().map(|a| a.to_string()))
            .collect();
        let mut k = Nbdkit {
            tools,
            child: None,
            listen,
            args,
        };
        k.restart();
        Some(k)
    }

    /// Starts the server again (after [`Nbdkit::kill`]) with the same
    /// arguments, and waits until it listens.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "nbdkit is running");
        let mut cmd = match &self.listen {
            Listen::Unix(socket) => {
                let _ = std::fs::remove_file(socket);
                let mut c = self.tools.cmd("nbdkit");
                c.args(["-f", "--exit-with-parent", "-U"]).arg(socket);
                c
            }
            Listen::Host { ns, port } => {
                let mut c = ns.command(self.tools.path("nbdkit"));
                c.args(["-f", "--exit-with-parent", "-i", ns.host_addr(), "-p"])
                    .arg(port.to_string());
                c
            }
        };
        let child = cmd
            .args(&self.args)
            .stdin(Stdio::null())
            .spawn()
            .expect("nbdkit starts");
        self.child = Some(child);
        match &self.listen {
            Listen::Unix(socket) => {
                let until = Instant::now() + READY_TIMEOUT;
                while !socket.exists() {
                    assert!(Instant::now() < until, "nbdkit did not create {socket:?}");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            Listen::Host { ns, port } => ns.wait_listening(*port, READY_TIMEOUT),
        }
    }

    /// Kills the server at once (SIGKILL: no goodbye to its clients).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Asks the server to exit (SIGTERM) and waits up to `limit` for it.
    /// Whether it exited: nbdkit exits on SIGTERM once its clients'
    /// connections are closed (an idle connection a client keeps open holds
    /// it). Past `limit` it is killed (SIGKILL) either way.
    pub fn terminate(&mut self, limit: Duration) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        let status = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM {}", child.id());
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if child.try_wait().expect("wait for nbdkit").is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    /// The Unix socket it listens on (panics for one on TCP).
    pub fn socket(&self) -> &Path {
        match &self.listen {
            Listen::Unix(socket) => socket,
            Listen::Host { .. } => panic!("this nbdkit listens on TCP"),
        }
    }

    /// The member's URI.
    pub fn uri(&self) -> String {
        match &self.listen {
            Listen::Unix(socket) => format!("nbd+unix:///?socket={}", socket.display()),
            Listen::Host { ns, port } => format!("nbd://{}:{port}/", ns.host_addr()),
        }
    }
}

/// The control socket of nbdkit's pause filter (`--filter=pause
/// pause-control=PATH`): a host that stalls, its requests held without an
/// answer, and then carries on.
pub struct PauseControl {
    path: PathBuf,
}

impl PauseControl {
    pub fn new(path: &Path) -> PauseControl {
        PauseControl {
            path: path.to_owned(),
        }
    }

    /// `pause-control=PATH`, for the plugin's arguments.
    pub fn param(&self) -> String {
        format!("pause-control={}", self.path.display())
    }

    /// Requests from now on are held. Returns once the requests that were
    /// already running have finished.
    pub fn pause(&self) {
        self.command(b'p', b'P');
    }

    /// The held requests go on.
    pub fn resume(&self) {
        self.command(b'r', b'R');
    }

    fn command(&self, send: u8, expect: u8) {
        use std::io::{Read, Write};
        let mut s = std::os::unix::net::UnixStream::connect(&self.path)
            .unwrap_or_else(|e| panic!("pause control {:?}: {e}", self.path));
        s.set_read_timeout(Some(READY_TIMEOUT)).expect("a timeout");
        s.write_all(&[send]).expect("a pause command");
        let mut answer = [0u8];
        s.read_exact(&mut answer).expect("the pause filter answers");
        assert_eq!(answer[0], expect, "the pause filter's answer");
    }
}

impl Drop for Nbdkit {
    fn drop(&mut self) {
        self.kill();
    }
}
