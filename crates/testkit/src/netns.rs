//! Other "hosts" on this machine: network namespaces the test creates,
//! each joined to the test's own namespace by a veth pair, so that a
//! remote member is reached over TCP through a network interface that can
//! be cut (`ip link set ... down`) like a cable, not only over loopback.
//!
//! Needs root and iproute2 (`ip`). Where they are missing the test is
//! skipped with the reason, except under `CI=true`, where that fails it.
//! Every namespace and interface is deleted on drop.

use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::tools::{required_tools, Tools};

/// Namespaces made by this test process so far: each gets its own /30.
static MADE: AtomicU32 = AtomicU32::new(0);

/// One namespace: a host at [`NetNs::host_addr`], reached from the test's
/// namespace through its veth pair.
pub struct NetNs {
    tools: Tools,
    name: String,
    /// The veth end in the test's namespace.
    near_if: String,
    host_addr: String,
}

impl NetNs {
    /// A new namespace with a link to it up; `None` (the reason printed)
    /// where this process cannot make one outside CI.
    pub fn create(test: &str) -> Option<NetNs> {
        let tools = required_tools(test, &["ip"])?;
        let n = MADE.fetch_add(1, Ordering::SeqCst);
        assert!(n < 64, "{test}: more namespaces than addresses");
        // Names and addresses from the process id: test binaries running
        // at once never share one.
        let pid = std::process::id();
        let tag = format!("{:x}{n:02}", pid & 0xfffff);
        let name = format!("platter-{tag}");
        let (near_if, far_if) = (format!("pn{tag}"), format!("pf{tag}"));
        let base = format!("10.{}.{}", 100 + (pid >> 8) % 100, pid & 0xff);
        let (near_addr, host_addr) = (
            format!("{base}.{}", 4 * n + 1),
            format!("{base}.{}", 4 * n + 2),
        );
        let ns = NetNs {
            tools,
            name,
            near_if,
            host_addr,
        };
        if let Err(why) = ns.ip(&["netns", "add", &ns.name]) {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{test}: cannot make a network namespace under CI: {why}"
            );
            crate::skips::skipped(test, format!("cannot make a network namespace ({why})"));
            return None;
        }
        let steps: [&[&str]; 6] = [
            &[
                "link",
                "add",
                &ns.near_if,
                "type",
                "veth",
                "peer",
                "name",
                &far_if,
                "netns",
                &ns.name,
            ],
            &[
                "addr",
                "add",
                &format!("{near_addr}/30"),
                "dev",
                &ns.near_if,
            ],
            &["link", "set", &ns.near_if, "up"],
            &[
                "-n",
                &ns.name,
                "addr",
                "add",
                &format!("{}/30", ns.host_addr),
                "dev",
                &far_if,
            ],
            &["-n", &ns.name, "link", "set", &far_if, "up"],
            &["-n", &ns.name, "link", "set", "lo", "up"],
        ];
        for step in steps {
            if let Err(why) = ns.ip(step) {
                panic!("{test}: setting up namespace {}: {why}", ns.name);
            }
        }
        Some(ns)
    }

    /// The host's address, as the test's namespace reaches it.
    pub fn host_addr(&self) -> &str {
        &self.host_addr
    }

    /// `program` run inside the namespace (`ip netns exec`); the program
    /// is the process `ip` becomes, so `--exit-with-parent` still works.
    pub fn command(&self, program: &std::path::Path) -> Command {
        let mut c = self.tools.cmd("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// Cuts the cable (`false`) or plugs it back in (`true`): packets stop,
    /// connections are not closed.
    pub fn set_link(&self, up: bool) {
        let state = if up { "up" } else { "down" };
        if let Err(why) = self.ip(&["link", "set", &self.near_if, state]) {
            panic!("link {} {state}: {why}", self.near_if);
        }
    }

    /// Waits until something in the namespace listens on `port`.
    pub fn wait_listening(&self, port: u16, timeout: Duration) {
        let addr: SocketAddr = format!("{}:{port}", self.host_addr)
            .parse()
            .expect("an address");
        let until = Instant::now() + timeout;
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(Instant::now() < until, "nothing listens on {addr}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn ip(&self, args: &[&str]) -> Result<(), String> {
        let out = self
            .tools
            .cmd("ip")
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
        }
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // Deleting the namespace deletes its veth end, and with it the pair.
        let _ = self.ip(&["link", "del", &self.near_if]);
        let _ = self.ip(&["netns", "del", &self.name]);
    }
}
