//! The one launcher of `platter serve` for the tests that run the real
//! binary: output collected as it comes, lines handed to the test to wait
//! for a banner, a stop by signal with a deadline, and a kill on drop.
//!
//! The fixtures (the end-to-end `Server`, the NBD protocol tests' `Server`)
//! build the command line and judge what the server says; this module only
//! runs it.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A shared buffer a reader thread appends to.
pub type Shared<T> = Arc<Mutex<T>>;

/// A thread that appends what `r` gives to `buf` until the end (or an
/// error); its handle, to know when it is done.
pub fn collect_into<R: Read + Send + 'static>(mut r: R, buf: Shared<Vec<u8>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match r.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.lock().unwrap().extend_from_slice(&chunk[..n]),
            }
        }
    })
}

/// The environment variable naming `platter serve`'s run directory (where
/// it links its control socket for `platter status` with no argument).
pub const RUN_DIR_ENV: &str = "PLATTER_RUN_DIR";

/// The run directory servers started by the tests register in, so that
/// they never appear among the host's volumes in /run/platter (scripts/test
/// exports the same for servers started otherwise).
pub fn test_run_dir() -> std::path::PathBuf {
    std::env::temp_dir().join("platter-tests-run")
}

/// One run of `platter serve`, killed (and reaped) on drop if still running.
pub struct ServeProcess {
    child: Option<Child>,
    pid: u32,
    /// The command line, for messages.
    pub command_line: String,
    log: Shared<Vec<u8>>,
    stdout: Shared<Vec<String>>,
    lines: Receiver<String>,
    readers: Vec<JoinHandle<()>>,
}

impl ServeProcess {
    /// Runs `cmd` (the caller's `platter serve ...`) with stdin closed, the
    /// log at info without colour and backtraces on, appending its stderr
    /// to `log` and its stdout lines to `stdout` (the caller may keep both
    /// across restarts).
    pub fn spawn(
        cmd: &mut Command,
        log: Shared<Vec<u8>>,
        stdout: Shared<Vec<String>>,
    ) -> ServeProcess {
        let command_line = ServeProcess::prepare(cmd);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {command_line}: {e}"));
        let err = child.stderr.take().expect("stderr piped");
        let err_reader = collect_into(err, Arc::clone(&log));
        let (tx, lines) = channel::<String>();
        let out = child.stdout.take().expect("stdout piped");
        let stdout2 = Arc::clone(&stdout);
        let out_reader = std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { return };
                stdout2.lock().unwrap().push(l.clone());
                let _ = tx.send(l);
            }
        });
        ServeProcess {
            pid: child.id(),
            child: Some(child),
            command_line,
            log,
            stdout,
            lines,
            readers: vec![err_reader, out_reader],
        }
    }

    /// Sets up `cmd` the way [`ServeProcess::spawn`] runs it (it does so
    /// itself; call this first to know the command line before the start);
    /// answers the command line.
    pub fn prepare(cmd: &mut Command) -> String {
        // Registered where the host's own volumes are not listed, unless
        // the test names its own run directory.
        if !cmd.get_envs().any(|(k, _)| k == RUN_DIR_ENV) {
            cmd.env(RUN_DIR_ENV, test_run_dir());
        }
        cmd.env("RUST_BACKTRACE", "1")
            .env("PLATTER_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        format!("{cmd:?}")
    }

    /// The next stdout line, waiting until `deadline`; `Disconnected` once
    /// stdout is closed (the server ended).
    pub fn next_line(&self, deadline: Instant) -> Result<String, RecvTimeoutError> {
        self.lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the process still runs (false once it has been reaped).
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => c.try_wait().expect("wait for the server").is_none(),
            None => false,
        }
    }

    /// The exit status if the process has ended (without reaping it for
    /// good: [`ServeProcess::wait_exit`] still answers).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .expect("server not waited for yet")
            .try_wait()
            .expect("wait for the server")
    }

    /// Its stderr (the log) so far, as text.
    pub fn log(&self) -> String {
        String::from_utf8_lossy(&self.log.lock().unwrap()).into_owned()
    }

    /// Its stdout lines so far.
    pub fn stdout_lines(&self) -> Vec<String> {
        self.stdout.lock().unwrap().clone()
    }

    /// Sends `signal` ("TERM", "INT", "KILL") with kill(1).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {}", self.pid);
    }

    /// Waits for the exit and reaps the process; past `limit` kills it and
    /// answers `None`. Either way the output readers are done (or given a
    /// second) when it returns, so [`ServeProcess::log`] is complete.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let status = self.reap(limit);
        self.drain();
        status
    }

    /// Sends `signal` and [`ServeProcess::wait_exit`]s; answers the status
    /// and how long the exit took, or `None` if it overran `limit` (killed).
    pub fn stop(&mut self, signal: &str, limit: Duration) -> Option<(ExitStatus, Duration)> {
        let start = Instant::now();
        self.signal(signal);
        let status = self.reap(limit);
        let took = start.elapsed();
        self.drain();
        Some((status?, took))
    }

    fn reap(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        let child = self.child.as_mut().expect("server not waited for yet");
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait for the server") {
                break Some(s);
            }
            if start.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        self.child = None;
        status
    }

    /// Kills the process now (SIGKILL) and reaps it; answers its status.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        let mut c = self.child.take()?;
        let _ = c.kill();
        let status = c.wait().ok();
        self.drain();
        status
    }

    /// Lets the output readers finish (bounded: a grandchild could hold a
    /// pipe open).
    fn drain(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(1);
        while self.readers.iter().any(|r| !r.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        for r in std::mem::take(&mut self.readers) {
            if r.is_finished() {
                let _ = r.join();
            }
        }
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
