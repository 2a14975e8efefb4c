//! Start-up: from an assembled volume to an engine ready to serve, and
//! what the labels and the upkeep thread must know before the first client.
//! Nothing here changes a member's data or label except
//! [`reserve_areas`] (allocation only) and [`mark_in_use`].

use crate::engine::meta::Meta;
use crate::engine::upkeep::Upkeep;
use crate::engine::Engine;
use crate::manage;
use crate::manage::leftout::LeftOutMember;
use crate::server::{ServeConfig, ServeError, MAX_BLOCK_BYTES};
use platter_core::assemble::{Absence, Assembly, SlotNote};
use platter_core::geometry::Geometry;
use platter_core::intent::{IntentLayout, RegionSet};
use platter_core::label::{printable, Checksums, Label, SlotState, VolumeState};
use platter_core::volume::{CacheLimits, Health, Limits, Volume};
use platter_io::assembly::OpenVolume;
use platter_io::Member;
use platter_nbd::consts::*;
use platter_nbd::ExportInfo;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;

/// The volume as it will be served: its members by slot (a removed slot's
/// device left out), what the bitmap says, and whether it was in use.
pub(crate) struct Opened {
    pub assembly: Assembly,
    pub members: Vec<Option<Arc<dyn Member>>>,
    /// The bitmap's layout and marked regions; `None` without a bitmap or
    /// on a read-only server (which leaves it, and any resync it asks for,
    /// to the next writable start).
    pub intent: Option<(IntentLayout, RegionSet)>,
    /// Slots removed from the volume whose old device was given anyway,
    /// by slot: its description, for `platter status`.
    pub removed: BTreeMap<u32, String>,
    /// The labels say the volume was not shut down cleanly.
    pub unclean: bool,
    /// The slots served without a device, why, and what brings each back.
    pub left_out: Vec<crate::manage::leftout::LeftOutMember>,
    /// Devices set aside: their slot went to another member.
    pub superseded: Vec<crate::manage::leftout::SupersededDevice>,
}

/// Takes the volume's members by slot and refuses a volume that cannot
/// serve all of its data with the members present.
pub(crate) fn open(volume: OpenVolume, config: &ServeConfig) -> Result<Opened, ServeError> {
    let intent = if config.read_only {
        None
    } else {
        volume
            .intent()
            .map_err(|e| ServeError::Refused(e.to_string()))?
    };
    let mut members = volume.members_by_slot();
    let OpenVolume { assembly, devices } = volume;
    let names: Vec<String> = devices.iter().map(|d| d.describe().to_string()).collect();
    let mut superseded = config.superseded.clone();
    superseded.extend(crate::manage::leftout::superseded(&assembly, &names));
    for d in &superseded {
        tracing::warn!("{}", d.line(assembly.label.event_counter));
    }
    let left_out = crate::manage::leftout::at_start(&assembly, &names, &config.last_seen);
    // The engine holds the devices from here on: one that leaves it (a
    // removed member) is closed when the engine lets it go, and one whose
    // label was superseded now.
    drop(devices);
    let removed = take_removed(&mut members, &assembly);
    reserve_metadata(&members, &assembly, intent.as_ref(), config)?;
    check_servable(&assembly, &left_out)?;
    let unclean = matches!(assembly.label.state, VolumeState::Dirty);
    Ok(Opened {
        assembly,
        members,
        intent,
        removed,
        unclean,
        left_out,
        superseded,
    })
}

/// A removed slot's old device, given anyway, is not used: taken out of
/// `members`, and named by slot for `platter status`.
fn take_removed(
    members: &mut [Option<Arc<dyn Member>>],
    assembly: &Assembly,
) -> BTreeMap<u32, String> {
    let mut removed = BTreeMap::new();
    for (slot, device) in members.iter_mut().enumerate() {
        if assembly.label.slots[slot].state != SlotState::Removed {
            continue;
        }
        if let Some(d) = device.take() {
            let name = d.describe().to_string();
            tracing::warn!(
                "member {name}: slot {slot} was removed from the volume; not used \
                 (platter replace puts a device back in the slot)"
            );
            removed.insert(slot as u32, name);
        }
    }
    removed
}

/// Allocates the areas metadata writes go to on every member in use: the
/// label and bitmap, and the checksum area.
fn reserve_metadata(
    members: &[Option<Arc<dyn Member>>],
    assembly: &Assembly,
    intent: Option<&(IntentLayout, RegionSet)>,
    config: &ServeConfig,
) -> Result<(), ServeError> {
    if let Some((layout, _)) = intent {
        // The label and the bitmap, not the room for reshapes after them
        // (md's headroom: up to 128 MiB a member, most often never used).
        let end = platter_core::intent::INTENT_OFFSET_BYTES + layout.area_bytes();
        reserve_areas(
            members,
            &assembly.health,
            (0, end.min(assembly.label.data_offset_bytes)),
            "label and write-intent bitmap area",
        )?;
    }
    if let Some(c) = assembly.label.checksums.filter(|_| !config.read_only) {
        // A checksum page written for the first time (a member copied
        // sparsely, or created before the pages were written whole) must
        // find its room: a refused page write fails the member's flush,
        // and every member at once on a full file system.
        let data = assembly
            .label
            .slots
            .iter()
            .map(|s| s.data_size_bytes)
            .max()
            .unwrap_or(assembly.label.data_size_bytes);
        let len = c.format.area_bytes(data);
        reserve_areas(
            members,
            &assembly.health,
            (c.area_offset_bytes, len),
            "checksum area",
        )?;
    }
    Ok(())
}

/// Refuses a volume that cannot serve all of its data with the members
/// present, naming each one left out and why.
fn check_servable(assembly: &Assembly, left_out: &[LeftOutMember]) -> Result<(), ServeError> {
    let geometry = &assembly.geometry;
    let lost = assembly
        .health
        .iter()
        .filter(|h| **h != Health::Online)
        .count() as u32;
    let too_small: Vec<String> = assembly
        .notes
        .iter()
        .filter_map(SlotNote::left_out_because)
        .collect();
    if geometry.serves_all(|m| assembly.health[m as usize] == Health::Online) {
        for reason in &too_small {
            tracing::error!("{reason}; left out of the volume");
        }
        return Ok(());
    }
    let mut why = format!(
        "volume '{}' cannot be served: {lost} of {} members unavailable, and {} \
         cannot serve all of its data without them",
        printable(&assembly.label.name),
        geometry.members(),
        geometry.level(),
    );
    for reason in &too_small {
        why.push_str("; ");
        why.push_str(reason);
    }
    let others = left_out
        .iter()
        .filter(|m| !matches!(m.why, Some(Absence::TooSmall { .. })));
    for m in others {
        let (_, detail) = m.reason(assembly.label.event_counter);
        let at = m
            .path
            .as_deref()
            .map_or(String::new(), |p| format!(", {p}"));
        let _ = write!(why, "; slot {}{at}: {detail}", m.slot);
    }
    Err(ServeError::Refused(why))
}

/// Allocates `(offset, len)` of every member in use (`what` names it): a
/// metadata write refused for space would fail each member it went to, so
/// a volume copied sparsely onto a full file system lost every member at
/// its first write to a quiet region. Refused here, the operator can make
/// room.
fn reserve_areas(
    members: &[Option<Arc<dyn Member>>],
    health: &[Health],
    (offset_bytes, len_bytes): (u64, u64),
    what: &str,
) -> Result<(), ServeError> {
    for (device, health) in members.iter().zip(health) {
        let Some(device) = device.as_ref().filter(|_| *health == Health::Online) else {
            continue;
        };
        device.reserve(offset_bytes, len_bytes).map_err(|e| {
            ServeError::Refused(format!(
                "cannot allocate the {what} of member {} ({len_bytes} bytes at {offset_bytes}; \
                 a sparse copy leaves it unallocated): {e}; make room on its file system, or \
                 serve --read-only",
                device.describe()
            ))
        })?;
    }
    Ok(())
}

/// What the handshake offers: the export's size, flags and block sizes.
/// The preferred block size and the rotational flag are set again for
/// each connection from the engine ([`export_hints`]): a reshape changes
/// the stripe, a replacement what spins.
pub(crate) fn export_info(
    opened: &Opened,
    read_only: bool,
    rotational: &BTreeMap<u32, bool>,
) -> ExportInfo {
    let geometry = &opened.assembly.geometry;
    let block_min = opened
        .members
        .iter()
        .flatten()
        .map(|m| m.logical_block_bytes())
        .max()
        .unwrap_or(512)
        .max(512);
    let mut flags = NBD_FLAG_HAS_FLAGS
        | NBD_FLAG_SEND_FLUSH
        | NBD_FLAG_SEND_FUA
        | NBD_FLAG_CAN_MULTI_CONN
        | NBD_FLAG_SEND_DF;
    if read_only {
        flags |= NBD_FLAG_READ_ONLY;
    } else {
        flags |= NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES | NBD_FLAG_SEND_FAST_ZERO;
    }
    let name = &opened.assembly.label.name;
    let spins = crate::engine::read_policy::rotations(&opened.members, rotational);
    let mut export = ExportInfo {
        name: name.clone(),
        description: describe_export(geometry, name, &opened.assembly.health),
        // While a reshape runs, the size it had: a client reconnects after
        // the reshape (and a restart) to see the new one.
        size_bytes: opened.assembly.old_geometry.as_ref().map_or_else(
            || {
                opened
                    .assembly
                    .label
                    .told_bytes(geometry.volume_size_bytes())
            },
            |old| old.volume_size_bytes(),
        ),
        transmission_flags: flags,
        block_min_bytes: block_min,
        block_preferred_bytes: block_min,
        block_max_bytes: MAX_BLOCK_BYTES,
    };
    export_hints(&mut export, geometry.stripe_data_bytes(), &spins);
    export
}

/// Sets what the export says of the volume's shape: the preferred block
/// size for its data stripe, and `NBD_FLAG_ROTATIONAL` when a member
/// spins or may spin, as the `auto` read policy counts them.
pub(crate) fn export_hints(export: &mut ExportInfo, stripe_bytes: u64, spins: &[Option<bool>]) {
    export.block_preferred_bytes = preferred_block_bytes(stripe_bytes, export.block_min_bytes);
    if platter_core::balance::may_spin(spins) {
        export.transmission_flags |= NBD_FLAG_ROTATIONAL;
    } else {
        export.transmission_flags &= !NBD_FLAG_ROTATIONAL;
    }
}

/// `NBD_INFO_BLOCK_SIZE`'s preferred size for a data stripe of
/// `stripe_bytes`: the protocol wants a power of two, at least the minimum
/// and at most the maximum payload (32 MiB). A power-of-two stripe is its
/// own answer (an aligned request of it is one whole stripe, written
/// without reading). Other stripes (3 x 64 KiB) get the smallest power of
/// two every aligned request of which holds a whole stripe, so that no
/// such request is all read-modify-write: P >= 2S - gcd(P, S), since an
/// aligned request starts up to S - gcd(P, S) short of a stripe boundary
/// (512 KiB for 192 KiB; the next power of two, 256 KiB, leaves one
/// aligned request in three with two partial stripes and no whole one).
/// Past 32 MiB the maximum is all there is.
pub(crate) fn preferred_block_bytes(stripe_bytes: u64, min_bytes: u32) -> u32 {
    let stripe = stripe_bytes.max(1);
    let max = u64::from(MAX_BLOCK_BYTES);
    let mut p = stripe.next_power_of_two();
    while p < max && p + gcd(p, stripe) < 2 * stripe {
        p *= 2;
    }
    u32::try_from(p.min(max))
        .unwrap_or(MAX_BLOCK_BYTES)
        .max(min_bytes)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The export's description: level, name, members online, and whether
/// the volume can still serve all of its data.
pub(crate) fn describe_export(geometry: &Geometry, name: &str, health: &[Health]) -> String {
    let online = health.iter().filter(|h| **h == Health::Online).count();
    let state = match manage::live_state(geometry, health) {
        "failed" => ", failed: some data cannot be read",
        "clean" => "",
        _ => ", degraded",
    };
    format!(
        "platter {} volume '{}' ({online} of {} members online{state})",
        geometry.level(),
        printable(name),
        geometry.members()
    )
}

/// The engine over the opened volume: its bitmap, read balancing and
/// stripe cache set up, member I/O on the back end asked for. Takes the
/// members: the engine is their only holder from here on. Returns it and
/// the number of regions the bitmap owes a resync.
pub(crate) fn engine(
    opened: &mut Opened,
    config: &ServeConfig,
) -> Result<(Arc<Engine>, u64), ServeError> {
    if config.buffer_limit_bytes < u64::from(MAX_BLOCK_BYTES) {
        return Err(ServeError::Refused(format!(
            "a buffer limit of {} bytes cannot hold one request of the maximum size ({MAX_BLOCK_BYTES} bytes)",
            config.buffer_limit_bytes
        )));
    }
    // Each connection holds at most CONN_MAX_REQUESTS; the margin is for
    // flushes chained behind FUA trims and the server's own final flush.
    let max_requests =
        config.max_connections * 2 * crate::network::conn::CONN_MAX_REQUESTS as usize + 16;
    if let Some(old) = opened.assembly.old_geometry.clone() {
        return reshaping_engine(opened, config, old, Limits { max_requests });
    }
    let (mut vol, resync_regions) = volume(opened, config, Limits { max_requests })?;
    crate::engine::read_policy::configure(
        &mut vol,
        &opened.assembly.label,
        &opened.members,
        &config.rotational,
        &config.write_mostly,
    );
    if !config.read_only && config.stripe_cache_stripes > 0 {
        // Partial-stripe writes gathered into full stripes; the upkeep
        // thread's destage ticks and every FLUSH write them out.
        vol.enable_stripe_cache(CacheLimits {
            max_stripes: config.stripe_cache_stripes,
            ..CacheLimits::DEFAULT
        });
    }
    let io = io_layer(config)?;
    // Moved, not cloned: a removed member's device closes when the engine
    // lets it go.
    let members = std::mem::take(&mut opened.members);
    let engine = Engine::new(vol, members, Arc::new(io));
    engine.set_volume_setup(volume_setup(&opened.assembly.label, config));
    Ok((engine, resync_regions))
}

/// The engine over a volume whose labels say a reshape is in progress:
/// both layouts, driven from where the labels stand.
fn reshaping_engine(
    opened: &mut Opened,
    config: &ServeConfig,
    old: Geometry,
    limits: Limits,
) -> Result<(Arc<Engine>, u64), ServeError> {
    let mut r = crate::engine::resume::reshaping(opened, config, old, limits)?;
    crate::engine::memory::keep_large_buffers(true);
    // Neither a bitmap nor a cache while the layout changes (each is
    // kept in one layout's terms): an unclean stop resyncs it all.
    opened.intent = None;
    crate::engine::read_policy::configure(
        r.new_volume_mut(),
        &opened.assembly.label,
        &opened.members,
        &config.rotational,
        &config.write_mostly,
    );
    let io = io_layer(config)?;
    let members = std::mem::take(&mut opened.members);
    let engine = Engine::new(r, members, Arc::new(io));
    engine.set_volume_setup(volume_setup(&opened.assembly.label, config));
    Ok((engine, 0))
}

/// The volume with what its labels keep: the bitmap (and the regions it
/// owes a resync after an unclean stop), the partial parity log, the
/// checksums.
fn volume(
    opened: &mut Opened,
    config: &ServeConfig,
    limits: Limits,
) -> Result<(Volume, u64), ServeError> {
    let geometry = opened.assembly.geometry.clone();
    let mut vol = Volume::new(geometry.clone(), opened.assembly.health.clone(), limits);
    let mut resync_regions = 0;
    if let Some((layout, bits)) = opened.intent.take() {
        let resync = opened.unclean && geometry.redundancy() > 0;
        if resync {
            resync_regions = bits.len();
        }
        vol.enable_intent(layout, bits, resync);
    }
    if let Some(layout) = opened.assembly.label.ppl {
        if config.read_only {
            let degraded = opened.assembly.health.iter().any(|h| *h != Health::Online);
            if opened.unclean && degraded {
                return Err(ServeError::Refused(
                    "the volume was not shut down cleanly and is missing a member: its partial \
                     parity log must be applied before its lost member's data can be read \
                     right; serve it once without --read-only"
                        .into(),
                ));
            }
        } else {
            start_log(opened, layout, config.discard_log)?;
            vol.enable_ppl(layout, opened.assembly.label.volume_uuid);
        }
    }
    if let Some(c) = opened.assembly.label.checksums {
        enable_checksums(&mut vol, &opened.assembly.label, c)?;
    }
    Ok((vol, resync_regions))
}

/// Checksums need the bitmap on a redundant volume: it says where a crash
/// left them out of step.
fn enable_checksums(vol: &mut Volume, label: &Label, c: Checksums) -> Result<(), ServeError> {
    let layout = platter_core::integrity::Layout {
        algorithm: c.algorithm,
        format: c.format,
        volume_uuid: label.volume_uuid,
        area_offset_bytes: c.area_offset_bytes,
        data_offset_bytes: label.data_offset_bytes,
        data_size_bytes: label
            .slots
            .iter()
            .map(|s| s.data_size_bytes)
            .max()
            .unwrap_or(label.data_size_bytes),
    };
    layout.check().map_err(ServeError::Refused)?;
    if vol.intent_status().is_none() && vol.geometry().redundancy() > 0 {
        return Err(ServeError::Refused(
            "the volume keeps checksums but has no write-intent bitmap to say where a crash left them out of step".into(),
        ));
    }
    vol.enable_checksums(layout, platter_core::integrity::Limits::default());
    Ok(())
}

/// How the volume a finished reshape hands over to is set up: as at
/// start, with a bitmap that owes nothing (the engine was emptied and
/// flushed before the hand-over), a stripe cache, and read balancing.
pub(crate) fn volume_setup(label: &Label, config: &ServeConfig) -> crate::engine::VolumeSetup {
    let label = label.clone();
    let read_only = config.read_only;
    let cache_stripes = config.stripe_cache_stripes;
    let rotational = config.rotational.clone();
    let write_mostly = config.write_mostly.clone();
    Box::new(move |vol, members| {
        if !read_only && label.intent_region_stripes > 0 && vol.geometry().redundancy() > 0 {
            match IntentLayout::new(vol.geometry(), label.intent_region_stripes) {
                Ok(Some(layout)) => {
                    let bits = RegionSet::new(&layout);
                    vol.enable_intent(layout, bits, false);
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "no write-intent bitmap for the new layout"),
            }
        }
        if !read_only && cache_stripes > 0 {
            vol.enable_stripe_cache(CacheLimits {
                max_stripes: cache_stripes,
                ..CacheLimits::DEFAULT
            });
        }
        crate::engine::read_policy::configure(vol, &label, members, &rotational, &write_mostly);
    })
}

/// Member I/O on the back end asked for.
fn io_layer(config: &ServeConfig) -> Result<platter_io::aio::layer::Layer, ServeError> {
    let io = platter_io::aio::layer::Layer::new(platter_io::aio::layer::LayerConfig {
        queue_depth: config.member_queue_depth.max(1),
        timeout: config.member_timeout,
        backend: config.io_backend,
        delays: config.member_delays.clone(),
    })
    .map_err(|e| ServeError::IoBackend(e.to_string()))?;
    if let Some(why) = io.fallback_reason() {
        tracing::warn!(reason = why, "member I/O does not use io_uring");
    }
    Ok(io)
}

/// What the risk of `--discard-log` is, said in its help and its log line.
pub(crate) const DISCARD_LOG_RISK: &str = "the write hole of the last unclean stop is open \
     again: a member lost since, or before the resync ends, may be rebuilt wrong in the \
     stripes that were being written, chunks nobody was writing included";

/// The partial parity log at a writable start: applied after an unclean
/// stop (unless `discard`), then emptied on every member either way, and
/// the engine starts a new one. After a clean stop it is emptied without
/// being applied: the stop flushed every write, so there is nothing to
/// close, and a log written before records left a ring oldest first could
/// hold a stale record that applying would turn into wrong parity.
fn start_log(
    opened: &Opened,
    layout: platter_core::ppl::Layout,
    discard: bool,
) -> Result<(), ServeError> {
    let present: Vec<bool> = opened
        .members
        .iter()
        .zip(&opened.assembly.health)
        .map(|(m, h)| m.is_some() && *h == Health::Online)
        .collect();
    match (opened.unclean, discard) {
        (true, false) => apply_ppl(opened, layout, &present)?,
        (true, true) => tracing::warn!(
            risk = DISCARD_LOG_RISK,
            "--discard-log: the partial parity log of an unclean stop is emptied without being \
             applied"
        ),
        (false, true) => tracing::info!(
            "--discard-log: the volume was shut down cleanly, its log had nothing to close"
        ),
        (false, false) => {}
    }
    empty_ppl(opened, layout, &present)
}

/// A member's failure with the log, as a refusal naming it.
fn log_failed(m: &dyn Member, what: &str, e: platter_io::MemberError) -> ServeError {
    ServeError::Refused(format!(
        "member {}: {what} the partial parity log: {e}",
        m.describe()
    ))
}

/// The intact records of every present member's log; the damaged ones
/// (torn by the crash, or partly written over by later records) are passed
/// over and logged, how many and where.
fn read_log(
    opened: &Opened,
    layout: platter_core::ppl::Layout,
    present: &[bool],
) -> Result<Vec<platter_core::ppl::Record>, ServeError> {
    let label = &opened.assembly.label;
    let len = usize::try_from(layout.len_bytes)
        .map_err(|_| ServeError::Refused("the partial parity log is too large".into()))?;
    let mut area = vec![0u8; len];
    let mut records = Vec::new();
    let mut damaged: Vec<String> = Vec::new();
    for (slot, m) in opened.members.iter().enumerate() {
        let Some(m) = m.as_ref().filter(|_| present[slot]) else {
            continue;
        };
        m.read_at(layout.offset_bytes, &mut area)
            .map_err(|e| log_failed(m.as_ref(), "reading", e))?;
        let parsed = platter_core::ppl::parse_area_checked(
            &area,
            &label.volume_uuid,
            label.interleave_bytes,
        );
        damaged.extend(
            parsed
                .damaged_at_bytes
                .iter()
                .map(|at| format!("{} at {}", m.describe(), layout.offset_bytes + at)),
        );
        records.extend(parsed.records);
    }
    if !damaged.is_empty() {
        const SHOWN: usize = 8;
        tracing::info!(
            count = damaged.len(),
            at = %damaged.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", "),
            "partial parity log: records that fail their checksums (torn by the stop, or partly \
             written over by later records) passed over"
        );
    }
    Ok(records)
}

/// Makes parity agree with the data in every stripe the partial parity
/// log says a write was changing (`platter_core::ppl::recover`). A member
/// that fails here, or a log that cannot be applied, refuses the start,
/// naming it: nothing is served from parity that was not made right.
fn apply_ppl(
    opened: &Opened,
    layout: platter_core::ppl::Layout,
    present: &[bool],
) -> Result<(), ServeError> {
    let records = read_log(opened, layout, present)?;
    let found = records.len();
    let members = &opened.members;
    let recovered = platter_core::ppl::recover(
        &opened.assembly.geometry,
        present,
        records,
        &mut |slot, at, len| {
            let m = members[slot as usize].as_ref().expect("present");
            let mut b = vec![0u8; len as usize];
            m.read_at(at, &mut b)
                .map_err(|e| format!("member {}: reading for the log: {e}", m.describe()))?;
            Ok(b)
        },
    )
    .map_err(|e| {
        ServeError::Refused(format!(
            "applying the partial parity log: {e}; to start without it, serve once with \
             --discard-log ({DISCARD_LOG_RISK})"
        ))
    })?;
    for f in &recovered.fixes {
        let m = members[f.member as usize].as_ref().expect("present");
        m.write_at(f.offset_bytes, &f.data)
            .map_err(|e| log_failed(m.as_ref(), "writing parity from", e))?;
    }
    for (slot, m) in members.iter().enumerate() {
        let Some(m) = m.as_ref().filter(|_| present[slot]) else {
            continue;
        };
        // Parity first, durable; only then may the records go.
        m.flush()
            .map_err(|e| log_failed(m.as_ref(), "flushing parity from", e))?;
    }
    if recovered.records > 0 {
        tracing::info!(
            records = recovered.records,
            copies_found = found,
            parity_writes = recovered.fixes.len(),
            rows_left_to_lost_members_bytes = recovered.rows_skipped_bytes,
            "partial parity log applied: parity agrees with the data in every stripe it names"
        );
    }
    Ok(())
}

/// Empties the log on every present member (trimmed: it reads as zeros),
/// and allocates its space again.
fn empty_ppl(
    opened: &Opened,
    layout: platter_core::ppl::Layout,
    present: &[bool],
) -> Result<(), ServeError> {
    for (slot, m) in opened.members.iter().enumerate() {
        let Some(m) = m.as_ref().filter(|_| present[slot]) else {
            continue;
        };
        m.trim(layout.offset_bytes, layout.len_bytes)
            .and_then(|()| m.flush())
            .map_err(|e| log_failed(m.as_ref(), "emptying", e))?;
        // Allocated again (the trim may have punched a hole): a log write
        // refused for space would cost the member.
        m.reserve(layout.offset_bytes, layout.len_bytes)
            .map_err(|e| {
                ServeError::Refused(format!(
                    "cannot allocate the partial parity log of member {} ({} bytes): {e}; make \
                 room on its file system, or serve --read-only",
                    m.describe(),
                    layout.len_bytes
                ))
            })?;
    }
    Ok(())
}

/// A rebuild cut short by a restart resumes at its checkpoint.
pub(crate) fn resume_rebuilds(assembly: &Assembly, engine: &Engine) {
    if assembly.old_geometry.is_some() {
        // No rebuild runs while the volume is reshaped.
        return;
    }
    for (slot, note) in assembly.notes.iter().enumerate() {
        if *note == SlotNote::Marked(SlotState::Rebuilding) && assembly.slot_device[slot].is_some()
        {
            let from = assembly.label.rebuild_checkpoint_bytes / assembly.label.interleave_bytes;
            // A member re-added (`re-add`) keeps when it left while it
            // rebuilds: only what it missed is rebuilt, the bitmap on the
            // others telling what that is.
            let partial = assembly.label.slots[slot].left_at_events != 0;
            let started = engine.with_volume(|v| {
                if partial && v.intent_status().is_some() {
                    v.start_partial_rebuild(slot as u32, from)
                } else {
                    v.start_rebuild(slot as u32, from)
                }
            });
            match started {
                Ok(()) => tracing::info!(slot, from_stripe = from, partial, "resuming the rebuild"),
                Err(e) => tracing::error!(slot, error = %e, "cannot resume the rebuild"),
            }
        }
    }
}

/// After an unclean stop, a stripe's parity (or a chunk's copies) may be
/// half updated: the upkeep thread makes them agree again, in the
/// background; with a bitmap, only in the regions that were being written.
pub(crate) fn start_resync(
    opened: &Opened,
    engine: &Engine,
    upkeep: &Upkeep,
    resync_regions: u64,
    read_only: bool,
) {
    let geometry = &opened.assembly.geometry;
    if !opened.unclean {
        return;
    }
    if read_only || geometry.redundancy() == 0 {
        tracing::warn!("volume was not shut down cleanly");
        return;
    }
    match engine.with_volume(|v| v.intent_status()) {
        Some(b) => {
            tracing::warn!(
                regions = resync_regions,
                of = b.layout.regions,
                "volume was not shut down cleanly; resyncing the regions the write-intent bitmap marks"
            );
            upkeep.start_region_resync(resync_regions, b.layout.region_stripes);
        }
        None => {
            tracing::warn!("volume was not shut down cleanly and keeps no write-intent bitmap; resyncing every stripe");
            upkeep.start_resync(geometry.stripes());
        }
    }
}

/// Updates the volume-wide state and the slot table from the members' health.
///
/// A member newly found out of use is recorded as leaving with this write
/// (the caller bumps the counter after `mark`); one recorded before keeps
/// the write that first recorded it.
pub(crate) fn mark(label: &mut Label, health: &[Health], state: VolumeState) {
    label.state = Meta::state_for(health, state);
    let this_write = label.event_counter + 1;
    for (slot, h) in health.iter().enumerate() {
        let entry = &mut label.slots[slot];
        match h {
            // A slot being rebuilt keeps what its rebuild says (a re-add's
            // leaving, or none for a new device).
            Health::Faulty | Health::Missing
                if matches!(entry.state, SlotState::Active | SlotState::Faulty) =>
            {
                if entry.left_at_events == 0 {
                    entry.left_at_events = this_write;
                }
                if *h == Health::Faulty {
                    entry.state = SlotState::Faulty;
                }
            }
            Health::Online => entry.left_at_events = 0,
            _ => {}
        }
    }
}

/// Marks the volume in use in its labels. Called only once nothing can
/// fail before serving: a refused socket or a busy TCP port must not leave
/// the volume "dirty".
pub(crate) fn mark_in_use(meta: &Meta, engine: &Engine) {
    let health = engine.health();
    meta.record(|l| mark(l, &health, VolumeState::Dirty));
}

/// The start's events: members forced into use, members missing (each
/// named with why it is out).
pub(crate) fn alert_start(engine: &Engine, forced_slots: &[u32], opened: &Opened) {
    use crate::observe::alerts::{Alert, EventKind};
    for &slot in forced_slots {
        engine.alert(
            Alert::new(
                EventKind::ForcedAssembly,
                "--force: put into use although its label said it was faulty or stale",
            )
            .member(slot, engine.member_name(slot)),
        );
    }
    let health = engine.health();
    let lost = health.iter().filter(|h| **h != Health::Online).count();
    if lost > 0 {
        let events = opened.assembly.label.event_counter;
        let each: Vec<String> = opened
            .left_out
            .iter()
            .map(|m| format!("slot {}: {}", m.slot, m.reason(events).1))
            .collect();
        let named = if each.is_empty() {
            String::new()
        } else {
            format!(": {}", each.join(", "))
        };
        engine.alert(Alert::new(
            EventKind::StartedDegraded,
            format!(
                "{lost} of {} members unavailable at start{named}",
                health.len()
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use platter_core::geometry::GeometrySpec;
    use platter_core::{Level, ParityLayout};

    fn raid5() -> Geometry {
        Geometry::new(GeometrySpec {
            level: Level::Raid5,
            parity_layout: ParityLayout::DEFAULT,
            copies: 1,
            interleave_bytes: 64 << 10,
            data_offset_bytes: 0,
            member_data_bytes: vec![1 << 20; 4],
        })
        .unwrap()
    }

    /// What a client reads in `nbdinfo` after each failure: a client that
    /// connects after a member failed must not read the start's "clean".
    #[test]
    fn the_description_says_how_much_of_the_volume_is_left() {
        let g = raid5();
        let mut health = vec![Health::Online; 4];
        assert_eq!(
            describe_export(&g, "v", &health),
            "platter raid5 volume 'v' (4 of 4 members online)"
        );
        health[1] = Health::Faulty;
        assert_eq!(
            describe_export(&g, "v", &health),
            "platter raid5 volume 'v' (3 of 4 members online, degraded)"
        );
        health[2] = Health::Missing;
        assert_eq!(
            describe_export(&g, "v", &health),
            "platter raid5 volume 'v' (2 of 4 members online, failed: some data cannot be read)"
        );
    }

    /// A name is printed escaped: a label is read from a device, and its
    /// bytes must not drive the client's terminal.
    #[test]
    fn the_description_escapes_the_name() {
        let d = describe_export(&raid5(), "a\u{1b}[2Jb", &[Health::Online; 4]);
        assert!(!d.contains('\u{1b}'), "{d}");
    }

    /// Whether every request of `p` bytes aligned to `p` holds a whole
    /// stripe of `s` bytes (over one period of the two).
    fn every_aligned_request_holds_a_stripe(p: u64, s: u64) -> bool {
        let period = p / gcd(p, s) * s;
        (0..period / p).all(|k| {
            let start = k * p;
            start.div_ceil(s) * s + s <= start + p
        })
    }

    #[test]
    fn the_preferred_block_size_is_the_least_power_of_two_holding_a_stripe() {
        let k = 1024;
        assert_eq!(preferred_block_bytes(256 * k, 512), 256 * k as u32);
        assert_eq!(preferred_block_bytes(64 * k, 512), 64 * k as u32);
        assert_eq!(preferred_block_bytes(192 * k, 512), 512 * k as u32);
        assert_eq!(preferred_block_bytes(3 * 126 * 512, 512), 512 * k as u32);
        assert_eq!(preferred_block_bytes(17 << 20, 512), MAX_BLOCK_BYTES);
        assert_eq!(preferred_block_bytes(512, 4096), 4096);
        for s in (512..=2 << 20).step_by(512 * 37) {
            let p = u64::from(preferred_block_bytes(s, 512));
            assert!(p.is_power_of_two() && p >= s, "{s}: {p}");
            assert!(every_aligned_request_holds_a_stripe(p, s), "{s}: {p}");
            if p / 2 >= s {
                assert!(!every_aligned_request_holds_a_stripe(p / 2, s), "{s}: {p}");
            }
        }
    }
}
