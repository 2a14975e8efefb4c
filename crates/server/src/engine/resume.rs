//! Serving a volume whose labels say a reshape is in progress
//! (docs/reshape.md): the undo record put back if the labels stand at its
//! window, then both layouts served while the upkeep thread moves the
//! rest.

use crate::server::{ServeConfig, ServeError};
use crate::startup::Opened;
use platter_core::geometry::Geometry;
use platter_core::label::ReshapeRecord;
use platter_core::reshape::{
    reserved_from_bytes, Plan, Reshape, Reshaping, Setup, UndoArea, UndoRecord, UNDO_HEADER_BYTES,
};
use platter_core::volume::{Health, Limits};
use platter_io::Member;
use std::sync::Arc;

/// Volume bytes a window moves at most (whole new stripes): each window
/// waits for its read before its write, so on members with latency a
/// larger one moves faster; clients on it wait for it (16 MiB: tens of
/// milliseconds).
const WINDOW_BYTES: u64 = 16 << 20;
/// Bytes moved between label writes of the position, at most, unless a
/// client write to moved bytes asks sooner: a crash copies at most this
/// again. A small volume writes it every 1/16 of its size. Each costs a
/// label write and flush on every member.
const PERSIST_EVERY_BYTES_MAX: u64 = 256 << 20;

/// The reshape as the labels leave it, ready to serve: its undo record
/// put back where needed. Refuses what a reshape cannot serve.
pub(crate) fn reshaping(
    opened: &Opened,
    config: &ServeConfig,
    old: Geometry,
    limits: Limits,
) -> Result<Reshaping, ServeError> {
    let label = &opened.assembly.label;
    let record = label.reshape.expect("a reshape in the labels");
    let refuse = |why: String| Err(ServeError::Refused(why));
    if config.read_only {
        return refuse(
            "the volume is being reshaped: serve it without --read-only so that the reshape can \
             go on (a read-only server could not put back what a crash left mid-window)"
                .into(),
        );
    }
    if label.checksums.is_some() || label.ppl.is_some() {
        return refuse(
            "the labels say a reshape is in progress on a volume with checksums or a partial \
             parity log, which this build does not reshape"
                .into(),
        );
    }
    let new = opened.assembly.geometry.clone();
    let reserved = reserved_from_bytes(&old, &new, label.intent_region_stripes);
    let plan = Plan::new(old, new, reserved)
        .map_err(|e| ServeError::Refused(format!("the labels' reshape cannot go on: {e}")))?;
    let sb = plan.stripe_bytes();
    if record.position_bytes > plan.total_bytes()
        || (record.position_bytes < plan.total_bytes() && !record.position_bytes.is_multiple_of(sb))
    {
        return refuse(format!(
            "the labels' reshape position {} is not a whole stripe of the new layout ({sb} \
             bytes) within its {} bytes: damaged labels",
            record.position_bytes,
            plan.total_bytes()
        ));
    }
    put_back_undo(
        &opened.members,
        &opened.assembly.health,
        &plan,
        label.volume_uuid,
        &record,
    )?;
    tracing::warn!(
        position_bytes = record.position_bytes,
        total_bytes = plan.total_bytes(),
        "resuming the reshape from the labels"
    );
    Ok(driven(
        plan,
        record.position_bytes,
        opened.assembly.health.clone(),
        label.volume_uuid,
        record.id,
        limits,
    ))
}

/// The reshape of `plan`, from `position_bytes`, as the server drives it.
pub(crate) fn driven(
    plan: Plan,
    position_bytes: u64,
    health: Vec<Health>,
    volume_uuid: [u8; 16],
    reshape_id: u64,
    limits: Limits,
) -> Reshaping {
    let sb = plan.stripe_bytes();
    let persist_every_bytes = (plan.total_bytes() / 16).clamp(sb, PERSIST_EVERY_BYTES_MAX);
    let window_stripes_max = (WINDOW_BYTES / sb).max(1);
    let rs = Reshape::resume(plan, position_bytes, window_stripes_max);
    Reshaping::new(
        rs,
        health,
        Setup {
            volume_uuid,
            reshape_id,
            window_stripes_max,
            persist_every_bytes,
            limits,
        },
    )
}

/// A crash in a window that needed a backup: the labels stand at the
/// record's position, so the window's member bytes are put back as they
/// were before it, flushed, and the record erased (put back once: clients
/// may write the window again before the next record). A record for
/// another window, reshape or volume, or a torn one, is left alone. Where
/// each member keeps its own record, each is put back on its own: a crash
/// part way leaves the rest for the next restart.
pub fn put_back_undo(
    members: &[Option<Arc<dyn Member>>],
    health: &[Health],
    plan: &Plan,
    volume_uuid: [u8; 16],
    record: &ReshapeRecord,
) -> Result<(), ServeError> {
    let Some(area) = plan.undo_area() else {
        return Ok(());
    };
    let data_offset = plan.new_geometry().spec().data_offset_bytes;
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        ServeError::Refused(format!("the reshape's backup: {what}: {e}"))
    };
    let online = |m: u32| {
        members
            .get(m as usize)
            .and_then(Option::as_ref)
            .filter(|_| health.get(m as usize) == Some(&Health::Online))
    };
    for slot in area.holders(plan.old().members()) {
        let Some(holder) = online(slot) else {
            if matches!(area, UndoArea::Added { .. }) && record.position_bytes < plan.total_bytes()
            {
                tracing::warn!(
                    slot,
                    "the member that keeps the reshape's backup is not here; if the last stop \
                     cut a backed-up window short, its bytes are lost"
                );
            }
            continue;
        };
        // The header first: the area may be far larger than its record
        // (`platter create --reserve`), and is most often empty.
        let read = |len: u64| {
            let mut raw = vec![0u8; len as usize];
            holder
                .read_at(area.offset_bytes(), &mut raw)
                .map(|()| raw)
                .map_err(|e| fail(&format!("cannot read it on member {slot}"), &e))
        };
        let header = read(UNDO_HEADER_BYTES)?;
        let Some(len) = UndoRecord::len_from_header(&header)
            .ok()
            .filter(|&len| len <= area.bytes())
        else {
            continue;
        };
        let Ok(undo) = UndoRecord::decode(&read(len)?) else {
            continue;
        };
        if !undo.is_for(volume_uuid, record.id, record.position_bytes) {
            continue;
        }
        tracing::warn!(
            slot,
            position_bytes = undo.position_bytes,
            "the last stop cut a backed-up window short: putting its bytes back"
        );
        for (m, image) in undo.slot_images() {
            if m >= plan.old().members() {
                return Err(fail(
                    &format!("the record on member {slot}"),
                    &format!("it images slot {m}, past the old layout's members"),
                ));
            }
            let Some(d) = online(m) else {
                continue;
            };
            d.write_at(data_offset + undo.span.start_bytes, image)
                .and_then(|()| d.flush())
                .map_err(|e| fail(&format!("cannot put back member {m}'s bytes"), &e))?;
        }
        holder
            .write_at(area.offset_bytes(), &[0u8; UNDO_HEADER_BYTES as usize])
            .and_then(|()| holder.flush())
            .map_err(|e| {
                fail(
                    &format!("cannot erase it on member {slot} once put back"),
                    &e,
                )
            })?;
    }
    Ok(())
}
