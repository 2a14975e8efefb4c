//! What the calibrator sees of a drive: timed reads (and, when allowed,
//! timed writes of the data already there) at queue depth 1. A real
//! device and a modelled drive in virtual time answer through the same
//! trait, so the closed-loop test drives the code a user runs.

use crate::disk::drive::{Command, Drive, DriveSpec, Kind};
use std::fmt;

#[derive(Debug)]
pub enum ProbeError {
    /// The I/O failed; the message names the target.
    Io(String),
    /// The user asked to stop (Ctrl-C).
    Interrupted,
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeError::Io(m) => f.write_str(m),
            ProbeError::Interrupted => f.write_str("interrupted"),
        }
    }
}

pub trait Probe {
    /// 512-byte sectors the target holds.
    fn blocks(&self) -> u64;
    /// Reads `count` sectors from `lbn` once the target has been idle
    /// `idle_ms` after the previous command; the command's time in ms,
    /// from submission to completion. Contract: `lbn + count <= blocks()`.
    fn read(&mut self, lbn: u64, count: u32, idle_ms: f64) -> Result<f64, ProbeError>;
    /// Reads the `count` sectors at `lbn` and keeps their data, for
    /// [`Probe::write_kept`]. Only called when the user allowed writes.
    fn keep(&mut self, lbn: u64, count: u32) -> Result<(), ProbeError>;
    /// Writes the kept data back where they were read, timed as `read`
    /// is: the sectors end as they were.
    fn write_kept(&mut self, idle_ms: f64) -> Result<f64, ProbeError>;
    /// Time spent on the target so far (ms): wall clock or virtual.
    fn elapsed_ms(&self) -> f64;
}

/// A modelled drive in virtual time: each command starts when the
/// previous one completed plus its idle time.
pub struct ModelProbe {
    drive: Drive,
    now_ms: f64,
    next_token: u64,
    kept: Option<(u64, u32)>,
}

impl ModelProbe {
    pub fn new(spec: DriveSpec) -> ModelProbe {
        ModelProbe {
            drive: Drive::new(spec),
            now_ms: 0.0,
            next_token: 0,
            kept: None,
        }
    }

    fn command(&mut self, kind: Kind, lbn: u64, count: u32, idle_ms: f64) -> f64 {
        assert!(idle_ms >= 0.0, "idle {idle_ms}");
        self.now_ms += idle_ms;
        let token = self.next_token;
        self.next_token += 1;
        let start = self.now_ms;
        self.drive.submit(
            start,
            Command {
                token,
                kind,
                lbn,
                count,
            },
        );
        // One command at a time: it is the only one the drive holds.
        let at = self
            .drive
            .next_event_ms()
            .expect("the command is in service");
        let served = self.drive.advance(at);
        assert_eq!(served.len(), 1, "queue depth 1");
        assert_eq!(served[0].token, token);
        self.now_ms = served[0].done_ms;
        self.now_ms - start
    }
}

impl Probe for ModelProbe {
    fn blocks(&self) -> u64 {
        self.drive.blocks()
    }

    fn read(&mut self, lbn: u64, count: u32, idle_ms: f64) -> Result<f64, ProbeError> {
        Ok(self.command(Kind::Read, lbn, count, idle_ms))
    }

    fn keep(&mut self, lbn: u64, count: u32) -> Result<(), ProbeError> {
        self.command(Kind::Read, lbn, count, 0.0);
        self.kept = Some((lbn, count));
        Ok(())
    }

    fn write_kept(&mut self, idle_ms: f64) -> Result<f64, ProbeError> {
        let (lbn, count) = self.kept.expect("keep before write_kept");
        Ok(self.command(Kind::Write, lbn, count, idle_ms))
    }

    fn elapsed_ms(&self) -> f64 {
        self.now_ms
    }
}
