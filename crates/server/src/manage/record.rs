//! Recording the clients' requests (issue 19: `serve --record FILE`,
//! `platter record --control`), for the simulator to replay (`platter sim
//! --workload fio:FILE`, `platter sweep`). The format is fio's iolog
//! version 3 (docs/simulator.md, "Recording a volume's load"): a header
//! line, then one line per request, `TIME platter ACTION OFFSET LENGTH`,
//! TIME in microseconds since the recording began, ACTION `read`, `write`
//! (a write of zeroes is recorded as a write), `trim` or `sync`.
//!
//! The connection threads only hand a small fixed-size record to a bounded
//! queue; a thread of its own formats and writes them. When the recording
//! is off, a request costs one relaxed atomic load. A queue that fills
//! (the disk under the file slower than the clients) stops the recording
//! rather than slow the volume, and so does the size bound; either says so
//! in the log and in `platter status`.

use platter_core::volume::Request;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// Requests the queue holds before the recording stops for falling behind.
const QUEUE_REQUESTS_MAX: usize = 1 << 16;
/// The file name fio's lines name (fio replays every line on its one file).
const FILE_NAME: &str = "platter";
/// `serve --record`'s bound when none is given.
pub const DEFAULT_LIMIT_BYTES: u64 = 1 << 30;

#[derive(Clone, Copy, Debug)]
struct Line {
    at_us: u64,
    action: &'static str,
    offset_bytes: u64,
    len_bytes: u64,
}

/// What `platter status` says of the recording.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RecordStatus {
    pub path: Option<String>,
    pub recording: bool,
    pub requests: u64,
    pub bytes_written: u64,
    pub limit_bytes: u64,
    /// Why the last recording stopped by itself (the bound, the queue, an
    /// error writing the file); `None` while it runs or after `stop`.
    pub stopped_because: Option<String>,
}

struct Recording {
    tx: SyncSender<Line>,
    started: Instant,
    writer: JoinHandle<()>,
}

/// Shared by the connection threads (which note requests) and the control
/// socket (which starts and stops it).
#[derive(Default)]
pub struct Recorder {
    current: Mutex<Option<Recording>>,
    shared: Arc<Counters>,
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    bytes_written: AtomicU64,
    /// Set by whoever stops it: the writer (bound, error) or a noter (queue).
    stopped_because: Mutex<Option<String>>,
    path: Mutex<Option<PathBuf>>,
    limit_bytes: AtomicU64,
    /// Recording: cleared by `stop`, by the writer (the bound, an error)
    /// and by a noter (a full queue). The one check a request makes.
    on: AtomicBool,
}

impl Recorder {
    /// Starts recording to `path` (created, or truncated), at most
    /// `limit_bytes` of it. Refused while a recording runs.
    pub fn start(&self, path: &Path, limit_bytes: u64) -> Result<(), String> {
        let mut current = self.current.lock().expect("recorder lock");
        if current.is_some() && self.shared.on.load(Ordering::SeqCst) {
            return Err(format!(
                "already recording to {} (stop it first)",
                self.shared
                    .path
                    .lock()
                    .expect("recorder path")
                    .as_deref()
                    .map_or_else(String::new, |p| p.display().to_string())
            ));
        }
        if let Some(old) = current.take() {
            drop(old.tx);
            let _ = old.writer.join();
        }
        if limit_bytes < 4096 {
            return Err(format!(
                "a recording bound of {limit_bytes} bytes is too small (at least 4096)"
            ));
        }
        let file = File::create(path)
            .map_err(|e| format!("cannot create the recording {}: {e}", path.display()))?;
        let (tx, rx) = sync_channel::<Line>(QUEUE_REQUESTS_MAX);
        let counters = Arc::clone(&self.shared);
        counters.requests.store(0, Ordering::SeqCst);
        counters.bytes_written.store(0, Ordering::SeqCst);
        counters.limit_bytes.store(limit_bytes, Ordering::SeqCst);
        *counters.stopped_because.lock().expect("recorder reason") = None;
        *counters.path.lock().expect("recorder path") = Some(path.to_path_buf());
        counters.on.store(true, Ordering::SeqCst);
        let shown = path.display().to_string();
        let writer = std::thread::Builder::new()
            .name("platter-record".into())
            .spawn(move || write_lines(file, &shown, rx, &counters))
            .map_err(|e| format!("cannot start the recording's thread: {e}"))?;
        *current = Some(Recording {
            tx,
            started: Instant::now(),
            writer,
        });
        tracing::info!(path = %path.display(), limit_bytes, "recording the clients' requests");
        Ok(())
    }

    /// Stops the recording and waits for its file to be written out.
    /// Whether one was running.
    pub fn stop(&self) -> bool {
        self.shared.on.store(false, Ordering::SeqCst);
        let Some(rec) = self.current.lock().expect("recorder lock").take() else {
            return false;
        };
        drop(rec.tx);
        let _ = rec.writer.join();
        tracing::info!(
            requests = self.shared.requests.load(Ordering::SeqCst),
            "recording stopped"
        );
        true
    }

    /// Notes a client's request, if recording: never blocks.
    pub fn note(&self, req: &Request) {
        if !self.shared.on.load(Ordering::Relaxed) {
            return;
        }
        let (action, offset_bytes, len_bytes) = match req {
            Request::Read {
                offset_bytes,
                len_bytes,
            } => ("read", *offset_bytes, *len_bytes),
            Request::Write {
                offset_bytes, data, ..
            } => ("write", *offset_bytes, data.len() as u64),
            Request::WriteZeroes {
                offset_bytes,
                len_bytes,
                ..
            } => ("write", *offset_bytes, *len_bytes),
            Request::Trim {
                offset_bytes,
                len_bytes,
            } => ("trim", *offset_bytes, *len_bytes),
            Request::Flush => ("sync", 0, 0),
            _ => return,
        };
        let current = self.current.lock().expect("recorder lock");
        let Some(rec) = current.as_ref() else {
            return;
        };
        let line = Line {
            at_us: rec.started.elapsed().as_micros() as u64,
            action,
            offset_bytes,
            len_bytes,
        };
        match rec.tx.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.shared.stop_because(format!(
                    "the file could not keep up with the clients ({QUEUE_REQUESTS_MAX} requests \
                     waiting to be written): stopped rather than slow the volume"
                ));
            }
            // The writer has ended (the bound, an error) and said why.
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    pub fn status(&self) -> RecordStatus {
        let c = &self.shared;
        RecordStatus {
            path: c
                .path
                .lock()
                .expect("recorder path")
                .as_ref()
                .map(|p| p.display().to_string()),
            recording: c.on.load(Ordering::SeqCst),
            requests: c.requests.load(Ordering::SeqCst),
            bytes_written: c.bytes_written.load(Ordering::SeqCst),
            limit_bytes: c.limit_bytes.load(Ordering::SeqCst),
            stopped_because: c.stopped_because.lock().expect("recorder reason").clone(),
        }
    }
}

impl Counters {
    fn stop_because(&self, why: String) {
        self.on.store(false, Ordering::SeqCst);
        let mut reason = self.stopped_because.lock().expect("recorder reason");
        if reason.is_none() {
            tracing::warn!(%why, "recording stopped");
            *reason = Some(why);
        }
    }
}

/// How long the recording's thread sleeps between drains of the queue.
const DRAIN_EVERY: std::time::Duration = std::time::Duration::from_millis(5);

/// Every line sent until the queue closes, taken a drain at a time: the
/// thread sleeps between drains rather than wait in `recv`, so that a
/// connection worker's send never has to wake it (with a waiting receiver,
/// every request cost a futex wake and a context switch: random 4k reads
/// on tmpfs ran at 0.53 of their speed while recording).
fn drained(rx: &std::sync::mpsc::Receiver<Line>) -> impl Iterator<Item = Line> + '_ {
    std::iter::from_fn(move || loop {
        match rx.try_recv() {
            Ok(line) => return Some(line),
            Err(std::sync::mpsc::TryRecvError::Empty) => std::thread::sleep(DRAIN_EVERY),
            Err(std::sync::mpsc::TryRecvError::Disconnected) => return None,
        }
    })
}

/// The recording's thread: writes each line until the queue closes (stop)
/// or the bound is reached, then the closing line.
fn write_lines(file: File, shown: &str, rx: std::sync::mpsc::Receiver<Line>, c: &Counters) {
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let limit = c.limit_bytes.load(Ordering::SeqCst);
    let mut written = 0u64;
    let mut last_us = 0;
    let put = |out: &mut BufWriter<File>, written: &mut u64, text: &str| -> std::io::Result<()> {
        out.write_all(text.as_bytes())?;
        *written += text.len() as u64;
        c.bytes_written.store(*written, Ordering::Relaxed);
        Ok(())
    };
    let head = format!("fio version 3 iolog\n0 {FILE_NAME} add\n0 {FILE_NAME} open\n");
    // The closing line's room is kept back, so that the file always ends
    // as fio expects.
    let close_room = 40;
    let mut bound = false;
    let result = (|| -> std::io::Result<()> {
        put(&mut out, &mut written, &head)?;
        for line in drained(&rx) {
            let text = format!(
                "{} {FILE_NAME} {} {} {}\n",
                line.at_us, line.action, line.offset_bytes, line.len_bytes
            );
            if written + text.len() as u64 + close_room > limit {
                // Noters stop at once; the reason is given once the file
                // is whole.
                c.on.store(false, Ordering::SeqCst);
                bound = true;
                break;
            }
            put(&mut out, &mut written, &text)?;
            c.requests.fetch_add(1, Ordering::Relaxed);
            last_us = line.at_us;
        }
        put(
            &mut out,
            &mut written,
            &format!("{last_us} {FILE_NAME} close\n"),
        )?;
        out.flush()
    })();
    match result {
        Err(e) => c.stop_because(format!("writing {shown} failed: {e}")),
        Ok(()) if bound => c.stop_because(format!(
            "{shown} reached its bound of {limit} bytes: stopped (the volume serves on)"
        )),
        Ok(()) => {}
    }
}
