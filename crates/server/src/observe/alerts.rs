//! Alerts without a metrics stack (`serve --on-event PROGRAM`, like
//! `mdadm --monitor --program`): each event that needs a person (a member
//! failed, a spare took over, a rebuild or resync ended, a scrub found
//! mismatches, the volume started degraded or forced) is logged with
//! structured fields and, with a program, handed to it as arguments and
//! environment (docs/failures.md, "Alerts").
//!
//! The program runs on a thread of its own, one event at a time, so a
//! slow or hanging program never holds up I/O: events wait in a bounded
//! queue (further ones are dropped and counted in the log), and a run that
//! lasts longer than [`PROGRAM_TIMEOUT`] is killed.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Events waiting for the program, at most.
const QUEUE_MAX: usize = 64;
/// A run of the program longer than this is killed.
pub const PROGRAM_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the stop waits for events still queued.
const DRAIN_WAIT: Duration = Duration::from_secs(10);

/// What happened, by the name the program is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// The server started with members missing or faulty.
    StartedDegraded,
    /// `serve --force` put members into use that the labels left out.
    ForcedAssembly,
    MemberFailed,
    /// A remote member's connection broke; it is tried again.
    MemberDisconnected,
    /// A disconnected member is back and rebuilds what it missed.
    MemberReconnected,
    /// `platter remove` took a failed member out.
    MemberRemoved,
    /// A spare took a failed member's place (a rebuild starts).
    SpareActive,
    RebuildDone,
    ResyncDone,
    /// A scheduled scrub found stripes whose parity or copies disagree.
    MismatchesFound,
    /// A read failed on a member and was rewritten from another copy.
    ReadErrorCorrected,
    /// A member had no room for a write (a full thin-provisioned device).
    NoSpace,
    /// A reshape moved every byte; the new layout serves.
    ReshapeDone,
    /// A reshape cannot go on (its backup's member is out of use, a window
    /// cannot be read or written); the volume serves through both layouts.
    ReshapeStuck,
}

impl EventKind {
    /// Whether the volume is worse off for it (logged as a warning) or
    /// back to better (logged as information).
    pub fn is_trouble(self) -> bool {
        !matches!(
            self,
            EventKind::MemberReconnected
                | EventKind::MemberRemoved
                | EventKind::SpareActive
                | EventKind::RebuildDone
                | EventKind::ResyncDone
                | EventKind::ReshapeDone
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            EventKind::StartedDegraded => "started-degraded",
            EventKind::ForcedAssembly => "forced-assembly",
            EventKind::MemberFailed => "member-failed",
            EventKind::MemberDisconnected => "member-disconnected",
            EventKind::MemberReconnected => "member-reconnected",
            EventKind::MemberRemoved => "member-removed",
            EventKind::SpareActive => "spare-active",
            EventKind::RebuildDone => "rebuild-done",
            EventKind::ResyncDone => "resync-done",
            EventKind::MismatchesFound => "mismatches-found",
            EventKind::ReadErrorCorrected => "read-error-corrected",
            EventKind::NoSpace => "no-space",
            EventKind::ReshapeDone => "reshape-done",
            EventKind::ReshapeStuck => "reshape-stuck",
        }
    }
}

/// One event, as the program receives it.
#[derive(Clone, Debug)]
pub struct Alert {
    pub kind: EventKind,
    pub slot: Option<u32>,
    /// The member's path or URI, where one is concerned.
    pub member: Option<String>,
    /// A sentence for people: the reason, the count.
    pub detail: String,
}

impl Alert {
    pub fn new(kind: EventKind, detail: impl Into<String>) -> Alert {
        Alert {
            kind,
            slot: None,
            member: None,
            detail: detail.into(),
        }
    }

    pub fn member(mut self, slot: u32, member: Option<String>) -> Alert {
        self.slot = Some(slot);
        self.member = member;
        self
    }
}

/// Where alerts go: the log always, the program if one is given.
pub struct Alerts {
    volume: String,
    uuid: String,
    queue: Mutex<Option<SyncSender<Alert>>>,
    runner: Mutex<Option<JoinHandle<()>>>,
    dropped: AtomicU64,
}

impl Alerts {
    /// Alerts for volume `volume` (`uuid`), run through `program` if given.
    pub fn new(volume: &str, uuid: &str, program: Option<PathBuf>) -> Result<Alerts, String> {
        let (queue, runner) = match program {
            Some(p) => {
                let (tx, rx) = sync_channel(QUEUE_MAX);
                let (v, u) = (volume.to_string(), uuid.to_string());
                let handle = std::thread::Builder::new()
                    .name("platter-alerts".into())
                    .spawn(move || run_program(&p, &v, &u, &rx))
                    .map_err(|e| format!("cannot start the --on-event thread: {e}"))?;
                (Some(tx), Some(handle))
            }
            None => (None, None),
        };
        Ok(Alerts {
            volume: volume.to_string(),
            uuid: uuid.to_string(),
            queue: Mutex::new(queue),
            runner: Mutex::new(runner),
            dropped: AtomicU64::new(0),
        })
    }

    /// Logs `a` and queues it for the program; never blocks.
    pub fn raise(&self, a: Alert) {
        let slot = a.slot.map_or(-1, i64::from);
        let member = a.member.as_deref().unwrap_or("-");
        if a.kind.is_trouble() {
            tracing::warn!(event = a.kind.name(), volume = %self.volume,
                volume_uuid = %self.uuid, slot, member, detail = %a.detail, "event");
        } else {
            tracing::info!(event = a.kind.name(), volume = %self.volume,
                volume_uuid = %self.uuid, slot, member, detail = %a.detail, "event");
        }
        let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let Some(tx) = queue.as_ref() else { return };
        match tx.try_send(a) {
            Ok(()) => {}
            Err(TrySendError::Full(a)) => {
                let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::error!(
                    event = a.kind.name(),
                    dropped = n,
                    "--on-event program is behind ({QUEUE_MAX} events waiting): event not run"
                );
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    /// Lets the program see the events already raised (within
    /// [`DRAIN_WAIT`]), then stops its thread.
    pub fn close(&self) {
        drop(self.queue.lock().unwrap_or_else(|e| e.into_inner()).take());
        let Some(h) = self.runner.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        let deadline = Instant::now() + DRAIN_WAIT;
        while !h.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if h.is_finished() {
            let _ = h.join();
        } else {
            tracing::warn!("--on-event program still running at the stop; not waiting for it");
        }
    }
}

fn run_program(program: &std::path::Path, volume: &str, uuid: &str, rx: &Receiver<Alert>) {
    while let Ok(a) = rx.recv() {
        let mut cmd = Command::new(program);
        cmd.arg(a.kind.name()).arg(volume);
        if let Some(m) = &a.member {
            cmd.arg(m);
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        cmd.env("PLATTER_EVENT", a.kind.name())
            .env("PLATTER_VOLUME", volume)
            .env("PLATTER_VOLUME_UUID", uuid)
            .env("PLATTER_DETAIL", &a.detail)
            .env("PLATTER_TIME", now.to_string())
            .env_remove("PLATTER_SLOT")
            .env_remove("PLATTER_MEMBER")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        if let Some(s) = a.slot {
            cmd.env("PLATTER_SLOT", s.to_string());
        }
        if let Some(m) = &a.member {
            cmd.env("PLATTER_MEMBER", m);
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(program = %program.display(), error = %e, "cannot run the --on-event program");
                continue;
            }
        };
        let deadline = Instant::now() + PROGRAM_TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) | Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
            }
        };
        match status {
            Some(s) if s.success() => {}
            Some(s) => {
                tracing::warn!(event = a.kind.name(), status = %s, "--on-event program failed")
            }
            None => tracing::error!(
                event = a.kind.name(),
                timeout_seconds = PROGRAM_TIMEOUT.as_secs(),
                "--on-event program killed: it ran too long"
            ),
        }
    }
}

/// The engine's own events that need a person, as alerts.
pub fn raise_engine_event(engine: &crate::engine::Engine, e: &platter_core::volume::Event) {
    use platter_core::volume::Event;
    let (kind, slot, detail) = match e {
        // A remote member whose connection broke is away, not failed, until
        // `--member-timeout` passes (`reconnect.rs` raises that).
        Event::MemberFaulty { member, reason } => {
            let lost = engine.members()[*member as usize]
                .as_ref()
                .is_some_and(|m| m.connection_lost());
            let kind = if lost {
                EventKind::MemberDisconnected
            } else {
                EventKind::MemberFailed
            };
            (kind, *member, reason.clone())
        }
        Event::NoSpace { member, reason } => (EventKind::NoSpace, *member, reason.clone()),
        Event::RebuildDone { member } => (
            EventKind::RebuildDone,
            *member,
            "rebuilt: the member is in use again".to_string(),
        ),
        Event::ReadErrorCorrected {
            member,
            offset_bytes,
            len_bytes,
        } => (
            EventKind::ReadErrorCorrected,
            *member,
            format!(
                "{len_bytes} bytes at member offset {offset_bytes} rewritten from another copy"
            ),
        ),
    };
    engine.alert(Alert::new(kind, detail).member(slot, engine.member_name(slot)));
}
