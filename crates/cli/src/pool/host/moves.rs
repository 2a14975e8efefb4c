//! Subdisk moves through the pool's server: planned and recorded as
//! `platter subdisk move` does offline (`relocate.rs`), the copy's
//! checkpoints and its finish written under the host's lock one at a
//! time, so that other changes go on meanwhile.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use platter_core::pool::{PoolVolume, SubdiskMove};
use platter_io::moving::MovingMember;
use platter_io::Member;
use platter_server::{MoveEnd, PlannedMove};
use serde_json::Value;

use super::super::drives::plex_window;
use super::super::relocate::{
    copy_move, finish_move, give_up, moving_member_with, plan_evacuation, plan_or_resume,
    rebuild_at_new_place, record_copied, record_moves, Copy,
};
use super::{Members, ServedPool, State};
use crate::error::{CliError, Result};

impl ServedPool {
    pub(super) fn plan_served_move(&self, req: &Value) -> Result<PlannedMove> {
        let state = self.lock();
        let name = req
            .get("subdisk")
            .and_then(Value::as_str)
            .ok_or_else(|| CliError("missing \"subdisk\"".into()))?;
        let to = req.get("to").and_then(Value::as_str);
        let planned = plan_or_resume(&state.open, name, to)?;
        Ok(planned_in(&state, planned))
    }

    pub(super) fn plan_served_evacuation(&self, drive: &str) -> Result<Vec<PlannedMove>> {
        let state = self.lock();
        let moves = plan_evacuation(&state.open, drive)?;
        Ok(moves.into_iter().map(|m| planned_in(&state, m)).collect())
    }

    pub(super) fn begin_served_moves(
        &self,
        moves: &[SubdiskMove],
        leaving: Option<&str>,
    ) -> Result<Vec<Arc<MovingMember>>> {
        let mut state = self.lock();
        let new: Vec<SubdiskMove> = moves
            .iter()
            .filter(|m| !state.open.pool().moves.contains(m))
            .cloned()
            .collect();
        record_moves(&mut state.open, &new, leaving)?;
        moves
            .iter()
            .map(|m| moving_member_with(&state.open, m, &self.latency))
            .collect()
    }

    pub(super) fn run_served_move(
        &self,
        m: &SubdiskMove,
        member: &MovingMember,
        (resumed, rate): (bool, u64),
        stop: &AtomicBool,
    ) -> Result<MoveEnd> {
        let copy = copy_move(m, member, resumed, rate, stop, &mut |at| {
            record_copied(&mut self.lock().open, m, at)
        })?;
        let mut state = self.lock();
        match copy {
            Copy::Stopped(_) => Ok(MoveEnd::Stopped),
            Copy::GivenUp(why) => Err(give_up(&mut state.open, m, &why)),
            Copy::SourceFailed(why) => Ok(MoveEnd::SourceFailed(why)),
            Copy::Done => {
                finish_move(&mut state.open, m, member)?;
                let w = new_window(&mut state, m)?;
                Ok(MoveEnd::Moved((w, m.drive.clone())))
            }
        }
    }

    pub(super) fn rebuild_served_move(
        &self,
        m: &SubdiskMove,
        member: &MovingMember,
    ) -> Result<platter_server::OnDrive> {
        let mut state = self.lock();
        rebuild_at_new_place(&mut state.open, m, member)?;
        let w = new_window(&mut state, m)?;
        Ok((w, m.drive.clone()))
    }

    /// Subdisk `slot` of plex `p` of `v` as the start opens it when a
    /// move of it is recorded and both its places are present: over both
    /// (not by a read-only server), kept for the server to take up.
    pub(super) fn wrap_moving(
        &self,
        state: &mut State,
        v: &PoolVolume,
        p: usize,
        members: &mut Members,
    ) {
        let moves: Vec<SubdiskMove> = state
            .open
            .pool()
            .moves
            .iter()
            .filter(|m| m.volume == v.name && m.plex == p)
            .cloned()
            .collect();
        for m in moves {
            match moving_member_with(&state.open, &m, &self.latency) {
                Ok(member) => {
                    members[m.slot] = Arc::clone(&member) as Arc<dyn Member>;
                    let plan = PlannedMove {
                        array: v.array_name(p),
                        slot: m.slot as u32,
                        resumed: true,
                        planned: m,
                    };
                    state.resumable.push((plan, member));
                }
                Err(e) => {
                    tracing::warn!(subdisk = %m.subdisk_name(), error = %e.0, "a recorded subdisk move waits: one of its places is not here");
                }
            }
        }
    }
}

/// Move `m` with the array that serves its subdisk.
fn planned_in(state: &State, planned: SubdiskMove) -> PlannedMove {
    let pool = state.open.pool();
    let v = pool.volume(&planned.volume).expect("planned");
    PlannedMove {
        array: v.array_name(planned.plex),
        slot: planned.slot as u32,
        resumed: pool.moves.contains(&planned),
        planned,
    }
}

/// The moved subdisk at its new place, kept for extends; with its drive.
fn new_window(state: &mut State, m: &SubdiskMove) -> Result<Arc<dyn Member>> {
    let pool = state.open.pool().clone();
    let v = pool.volume(&m.volume).expect("moved");
    let d = super::super::make::drive_index(&state.open, &m.drive)?;
    let drive = state
        .open
        .drive(d)
        .ok_or_else(|| CliError(format!("drive {} is not present", m.drive)))?;
    let w = plex_window(&pool, v, m.plex, m.slot, &drive)?;
    let count = v.plexes[m.plex].subdisks.len();
    state.keep_window(&v.array_name(m.plex), count, m.slot, &w);
    Ok(w)
}
