//! DiskSim 4.0 import: parameter files (`.parv` with the `.diskspecs`,
//! `.model` and `.seek` files it sources) to a [`DriveSpec`], and
//! DiskSim's validation traces.

pub mod parse;
pub mod trace;
pub mod write;

pub use parse::{Block, ParamError, ParamFile, Value};

use crate::disk::drive::{
    CacheSpec, DriveSpec, ExtraDisconnect, Overheads, ReadAhead, Scheduler, WriteBack,
};
use crate::disk::layout::{Layout, Mapping, Sparing, Zone};
use crate::disk::seek::SeekCurve;
use std::path::Path;

/// Loads the (first) disk of a DiskSim parameter file.
pub fn load_drive(parv: &Path) -> Result<DriveSpec, ParamError> {
    let file = ParamFile::load(parv)?;
    drive_from(&file, parv)
}

fn err_at(b: &Block, key: &str, msg: impl Into<String>) -> ParamError {
    let origin = b.field(key).map_or(&b.origin, |f| &f.origin);
    ParamError::at(origin, Some(key), msg)
}

/// The disk instantiated in `file` (the first `disksim_disk` block).
pub fn drive_from(file: &ParamFile, parv: &Path) -> Result<DriveSpec, ParamError> {
    let disk = file
        .blocks_of("disksim_disk")
        .next()
        .ok_or_else(|| ParamError {
            origin: None,
            key: None,
            message: format!("{}: no disksim_disk block", parv.display()),
        })?;
    let model = disk.block("Model")?;
    let layout = layout_from(model)?;
    let mech = model.block("Mechanical Model")?;
    let cylinders = model.int("Number of cylinders")? as u32;
    let seek = seek_from(mech, cylinders, &model.origin)?;
    let rpm = mech.num("Rotation speed (in rpms)")?;
    if rpm <= 0.0 {
        return Err(err_at(mech, "Rotation speed (in rpms)", "must be positive"));
    }
    let overheads = overheads_from(disk)?;
    // Bus time per sector: the largest of the disk's, every bus's and
    // every controller's (DiskSim takes the maximum along the path).
    let disk_xfer = disk.num_or("Bulk sector transfer time", 0.0)?;
    let (mut rd, mut wr) = (disk_xfer, disk_xfer);
    for b in file.blocks_of("disksim_bus") {
        rd = rd.max(b.num_or("Read block transfer time", 0.0)?);
        wr = wr.max(b.num_or("Write block transfer time", 0.0)?);
    }
    for c in file.blocks_of("disksim_ctlr") {
        let x = c.num_or("Bulk sector transfer time", 0.0)?;
        rd = rd.max(x);
        wr = wr.max(x);
    }
    let cache = cache_from(disk)?;
    let scheduler = match disk.field("Scheduler") {
        Some(_) => {
            let s = disk.block("Scheduler")?;
            match s.int_or("Scheduling policy", 1)? {
                // DiskSim's positioning-time family: SPTF, SPCTF, SATF,
                // their weighted and aged forms, and SPTF_ROT (8..=16,
                // 20, 21, 24..=26). Everything else is served in order.
                8..=16 | 20 | 21 | 24..=26 => Scheduler::Sptf,
                _ => Scheduler::Fcfs,
            }
        }
        None => Scheduler::Fcfs,
    };
    Ok(DriveSpec {
        name: disk.name.clone().unwrap_or_else(|| "disk".into()),
        layout,
        seek,
        rpm,
        head_switch_ms: mech.num_or("Head switch time", 0.0)?,
        write_settle_ms: mech.num_or("Add. write settling delay", 0.0)?,
        overheads,
        bus_read_ms: rd,
        bus_write_ms: wr,
        hold_bus_read: disk.int_or("Hold bus entire read xfer", 0)? != 0,
        cache,
        scheduler,
    })
}

/// The controller's overheads, scaled by the disk's time scale (a table:
/// each field and its DiskSim name).
fn overheads_from(disk: &Block) -> Result<Overheads, ParamError> {
    let scale = disk.num_or("Time scale for overheads", 1.0)?;
    let ov = |k: &str| -> Result<f64, ParamError> { Ok(disk.num_or(k, 0.0)? * scale) };
    let extra = if disk.int_or("Extra write disconnect", 0)? != 0 {
        Some(ExtraDisconnect {
            command: ov("Extradisc command overhead")?,
            disconnect: ov("Extradisc disconnect overhead")?,
            inter_disconnect: ov("Extradisc inter-disconnect delay")?,
            second_disconnect: ov("Extradisc 2nd disconnect overhead")?,
            seek_delta: ov("Extradisc seek delta")?,
        })
    } else {
        None
    };
    Ok(Overheads {
        per_request: ov("Per-request overhead time")?,
        read_hit_after_read: ov("Read hit over. after read")?,
        read_hit_after_write: ov("Read hit over. after write")?,
        read_miss_after_read: ov("Read miss over. after read")?,
        read_miss_after_write: ov("Read miss over. after write")?,
        write_hit_after_read: ov("Write hit over. after read")?,
        write_hit_after_write: ov("Write hit over. after write")?,
        write_miss_after_read: ov("Write miss over. after read")?,
        write_miss_after_write: ov("Write miss over. after write")?,
        read_completion: ov("Read completion overhead")?,
        write_completion: ov("Write completion overhead")?,
        data_prep: ov("Data preparation overhead")?,
        first_reselect: ov("First reselect overhead")?,
        other_reselect: ov("Other reselect overhead")?,
        read_disconnect_after_read: ov("Read disconnect afterread")?,
        read_disconnect_after_write: ov("Read disconnect afterwrite")?,
        write_disconnect: ov("Write disconnect overhead")?,
        extra_write_disconnect: extra,
        min_seek_delay: disk.num_or("Minimum seek delay", 0.0)?,
    })
}

/// The disk's buffer: segments, read-ahead and write-back.
fn cache_from(disk: &Block) -> Result<CacheSpec, ParamError> {
    let contread = disk.int_or("Buffer continuous read", 0)?;
    let read_ahead = match contread {
        0 => ReadAhead::None,
        1 => ReadAhead::TrackEnd,
        2 => ReadAhead::CylinderEnd,
        3 => ReadAhead::SegmentEnd,
        4 => ReadAhead::NextTrack,
        v => {
            return Err(err_at(
                disk,
                "Buffer continuous read",
                format!("unknown scheme {v}"),
            ))
        }
    };
    let fast = disk.int_or("Fast write level", 0)?;
    let write_back = match fast {
        0 => WriteBack::Off,
        1 | 2 => WriteBack::On,
        v => {
            return Err(err_at(
                disk,
                "Fast write level",
                format!("unknown level {v}"),
            ))
        }
    };
    let segments = disk.int("Number of buffer segments")?.max(1) as u32;
    Ok(CacheSpec {
        enabled: disk.int_or("Enable caching in buffer", 1)? != 0,
        segments,
        segment_blocks: disk.int("Segment size (in blks)")?.max(1) as u32,
        write_segments: disk.int_or("Maximum number of write segments", 1)?.max(1) as u32,
        separate_write_segment: disk.int_or("Use separate write segment", 0)? != 0 && segments > 1,
        read_water: disk.num_or("High (read) water mark", 0.0)?,
        water_by_request: disk.int_or("Set watermark by reqsize", 1)? != 0,
        read_ahead,
        max_read_ahead: disk.int_or("Maximum read-ahead (blks)", 0)?.max(0) as u32,
        read_ahead_over_requested: disk.int_or("Read-ahead over requested", 1)? != 0,
        read_ahead_on_idle_hit: disk.int_or("Read-ahead on idle hit", 0)? != 0,
        write_back,
        read_hits_on_write_data: disk.int_or("Allow read hits on write data", 1)? != 0,
        stop_prefetch_in_sector: disk.int_or("Stop prefetch in sector", 0)? != 0,
    })
}

/// The `dm_layout_g1` of a `dm_disk` model.
pub fn layout_from(model: &Block) -> Result<Layout, ParamError> {
    let surfaces = model.int("Number of data surfaces")?;
    if surfaces <= 0 {
        return Err(err_at(model, "Number of data surfaces", "must be positive"));
    }
    let lb = model.block("Layout Model")?;
    if !lb.type_name.eq_ignore_ascii_case("dm_layout_g1") {
        return Err(ParamError::at(
            &lb.origin,
            Some("Layout Model"),
            format!(
                "layout {} is not modelled (only dm_layout_g1)",
                lb.type_name
            ),
        ));
    }
    let rangesize = lb.int_or("Rangesize for sparing", 1)?.max(1) as u32;
    let scheme = lb.int("Sparing scheme used")?;
    // Scheme 7 (SECTATEND_SPARING) slips every later LBN of a zone to its
    // end and counts only the slips out of the zone's LBNs: spares at the
    // end of the zone, as many as the slips (DiskSim maps it per
    // cylinder with no spares; with spares its LBN count is wrong).
    let slips_to_end = scheme == 7;
    let sparing = if slips_to_end {
        Some(Sparing::PerZone)
    } else {
        Sparing::from_disksim(scheme, rangesize)
    }
    .ok_or_else(|| {
        err_at(
            lb,
            "Sparing scheme used",
            format!("scheme {scheme} is not modelled"),
        )
    })?;
    let mapping = match lb.int_or("LBN-to-PBN mapping scheme", 0)? {
        0 => Mapping::Normal,
        1 => Mapping::SerpentineZone,
        2 => Mapping::SerpentineDisk,
        v => {
            return Err(err_at(
                lb,
                "LBN-to-PBN mapping scheme",
                format!("unknown scheme {v}"),
            ))
        }
    };
    let mut zones = Vec::new();
    for (i, v) in lb.list("Zones")?.iter().enumerate() {
        let Value::Block(z) = v else {
            return Err(err_at(lb, "Zones", format!("zone {i} is not a block")));
        };
        zones.push(zone_from(z, slips_to_end)?);
    }
    Layout::new(surfaces as u32, sparing, mapping, zones)
        .map_err(|e| ParamError::at(&lb.origin, Some("Zones"), e))
}

/// One `dm_layout_g1_zone`. With `slips_to_end` (sparing scheme 7) its
/// spares are its slips.
fn zone_from(z: &Block, slips_to_end: bool) -> Result<Zone, ParamError> {
    let units = z.word("Skew units").unwrap_or("sectors");
    let bpt = z.int("Blocks per track")?;
    if bpt <= 0 {
        return Err(err_at(z, "Blocks per track", "must be positive"));
    }
    // Skews and the first block's offset in whole sectors (DiskSim
    // truncates them), or revolutions.
    let sectors = |k: &str| -> Result<u32, ParamError> {
        let v = z.num_or(k, 0.0)?;
        let s = if units == "revolutions" {
            (v * bpt as f64) as i64
        } else {
            v as i64
        };
        Ok(s.rem_euclid(bpt) as u32)
    };
    let flat = block_numbers(z, "defects")?;
    if flat.len() % 2 != 0 {
        return Err(err_at(
            z,
            "defects",
            format!(
                "{} numbers: defects come in pairs (defective, spare)",
                flat.len()
            ),
        ));
    }
    let defects: Vec<(u64, u64)> = flat.chunks(2).map(|p| (p[0], p[1])).collect();
    let slips = block_numbers(z, "slips")?;
    let mut spares = z.int_or("Number of spares", 0)?.max(0) as u64;
    if slips_to_end {
        if spares > 0 {
            return Err(err_at(
                z,
                "Number of spares",
                format!("{spares} with sparing scheme 7, which counts none of them; give 0"),
            ));
        }
        spares = slips.len() as u64;
    }
    Ok(Zone {
        first_cyl: z.int("First cylinder number")? as u32,
        last_cyl: z.int("Last cylinder number")? as u32,
        blocks_per_track: bpt as u32,
        first_block_offset: sectors("Offset of first block")?,
        dead_space: z.int_or("Empty space at zone front", 0)?.max(0) as u64,
        track_skew: sectors("Skew for track switch")?,
        cyl_skew: sectors("Skew for cylinder switch")?,
        spares,
        slips,
        defects,
        first_lbn: 0,
        lbns: 0,
    })
}

/// A zone's list of block numbers under `k`; none when it is absent.
fn block_numbers(z: &Block, k: &str) -> Result<Vec<u64>, ParamError> {
    let mut out = Vec::new();
    if z.field(k).is_none() {
        return Ok(out);
    }
    for v in z.list(k)? {
        match v.as_f64() {
            Some(x) if x >= 0.0 && x.fract() == 0.0 => out.push(x as u64),
            _ => return Err(err_at(z, k, format!("{v:?} is not a block number"))),
        }
    }
    Ok(out)
}

/// The seek curve of a `dm_mech_g1`.
pub fn seek_from(
    mech: &Block,
    cylinders: u32,
    model_origin: &parse::Origin,
) -> Result<SeekCurve, ParamError> {
    let kind = mech.word("Seek type")?;
    Ok(match kind {
        "extracted" => {
            let f = mech.field("Full seek curve").ok_or_else(|| {
                ParamError::at(
                    &mech.origin,
                    Some("Full seek curve"),
                    "missing for an extracted seek",
                )
            })?;
            let name = f.value.as_word().unwrap_or("");
            let dir = f
                .origin
                .file
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default();
            let _ = model_origin;
            let path = dir.join(name);
            SeekCurve::Table {
                points: read_seek_file(&path)
                    .map_err(|m| ParamError::at(&f.origin, Some(&f.key), m))?,
            }
        }
        "hpl" | "hplplus10" => {
            let v = mech.list("HPL seek equation values")?;
            let nums: Vec<f64> = v.iter().filter_map(Value::as_f64).collect();
            if nums.len() < 6 {
                return Err(err_at(mech, "HPL seek equation values", "needs six values"));
            }
            let first_ten = if kind == "hplplus10" {
                let l = mech.list("First ten seek times")?;
                let t: Vec<f64> = l.iter().filter_map(Value::as_f64).collect();
                if t.len() < 10 {
                    return Err(err_at(mech, "First ten seek times", "needs ten values"));
                }
                let mut a = [0.0; 10];
                a.copy_from_slice(&t[..10]);
                Some(a)
            } else {
                None
            };
            SeekCurve::Hpl {
                boundary: nums[0] as u32,
                a: nums[1],
                b: nums[2],
                c: nums[3],
                e: nums[4],
                single: (nums[5] != -1.0).then_some(nums[5]),
                first_ten,
            }
        }
        "const" => SeekCurve::Constant {
            ms: mech.num("Average seek time")?,
        },
        "linear" | "curve" => SeekCurve::three_point(
            mech.num("Single cylinder seek time")?,
            mech.num("Average seek time")?,
            mech.num("Full strobe seek time")?,
            cylinders,
        ),
        other => {
            return Err(err_at(
                mech,
                "Seek type",
                format!("seek type {other} is not modelled"),
            ))
        }
    })
}

/// A `.seek` file: `Seek distances measured: N` then `distance, ms` lines.
pub fn read_seek_file(path: &Path) -> Result<Vec<(u32, f64)>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut points = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with("Seek distances") {
            continue;
        }
        let mut parts = line.split(',').map(str::trim);
        let d = parts.next().and_then(|d| d.parse::<u32>().ok());
        let t = parts.next().and_then(|t| t.parse::<f64>().ok());
        match (d, t) {
            (Some(d), Some(t)) => points.push((d, t)),
            _ => {
                return Err(format!(
                    "{}:{}: bad seek line {line:?}",
                    path.display(),
                    i + 1
                ))
            }
        }
    }
    points.sort_by_key(|p| p.0);
    if points.is_empty() {
        return Err(format!("{}: no seek times", path.display()));
    }
    Ok(points)
}
