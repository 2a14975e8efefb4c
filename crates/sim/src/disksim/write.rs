//! Writes a [`DriveSpec`] as a DiskSim 4.0 parameter file that
//! [`super::load_drive`] (and DiskSim) reads back: one `disksim_disk`
//! with its `dm_disk` model inline, and the seek table beside it as
//! `<stem>.seek`, DiskSim's "extracted" curve.

use crate::disk::drive::{DriveSpec, Overheads, ReadAhead, Scheduler, WriteBack};
use crate::disk::layout::{Mapping, Zone};
use crate::disk::seek::SeekCurve;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The seek file written beside `parv`.
pub fn seek_path(parv: &Path) -> PathBuf {
    parv.with_extension("seek")
}

fn name_of(s: &str) -> String {
    let n: String = s
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if n.is_empty() {
        "disk".into()
    } else {
        n
    }
}

/// The parameter text and the seek file's text. Only a table or a
/// constant seek curve can be written (what calibration makes).
pub fn render(spec: &DriveSpec, seek_file_name: &str) -> Result<(String, String), String> {
    let name = name_of(&spec.name);
    let mut t = String::new();
    let w = &mut t;
    // `write!` to a String cannot fail.
    let _ = writeln!(w, "# A drive model written by platter (sim calibrate).");
    let _ = writeln!(w, "disksim_disk {name} {{");
    let _ = writeln!(w, "   Model = dm_disk {name}_model {{");
    render_layout(w, spec);
    let seek_text = render_mechanics(w, spec, seek_file_name)?;
    let _ = writeln!(w, "   }},");
    render_disk_fields(w, spec)?;
    let policy = match spec.scheduler {
        Scheduler::Fcfs => 1,
        Scheduler::Sptf => 8,
    };
    let _ = writeln!(w, "   Scheduler = disksim_ioqueue {{");
    let _ = writeln!(w, "      Scheduling policy = {policy}");
    let _ = writeln!(w, "   }}");
    let _ = writeln!(w, "}}");
    render_bus(w, spec)?;
    Ok((t, seek_text))
}

/// The model's size and its `dm_layout_g1`: the mapping, sparing and
/// zones.
fn render_layout(w: &mut String, spec: &DriveSpec) {
    let l = &spec.layout;
    let (scheme, rangesize) = l.sparing.to_disksim();
    let mapping = match l.mapping {
        Mapping::Normal => 0,
        Mapping::SerpentineZone => 1,
        Mapping::SerpentineDisk => 2,
    };
    let _ = writeln!(w, "      Number of data surfaces = {},", l.surfaces);
    let _ = writeln!(w, "      Number of cylinders = {},", l.cylinders());
    let _ = writeln!(w, "      Block count = {},", l.blocks);
    let _ = writeln!(w, "      Layout Model = dm_layout_g1 {{");
    let _ = writeln!(w, "         LBN-to-PBN mapping scheme = {mapping},");
    let _ = writeln!(w, "         Sparing scheme used = {scheme},");
    let _ = writeln!(w, "         Rangesize for sparing = {rangesize},");
    let _ = writeln!(w, "         Zones = [");
    for (i, z) in l.zones.iter().enumerate() {
        let sep = if i + 1 < l.zones.len() { "," } else { "" };
        render_zone(w, z, sep);
    }
    let _ = writeln!(w, "         ]");
    let _ = writeln!(w, "      }},");
}

/// One `dm_layout_g1_zone`, `sep` after its closing brace.
fn render_zone(w: &mut String, z: &Zone, sep: &str) {
    let list = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
    let _ = writeln!(w, "            dm_layout_g1_zone {{");
    let _ = writeln!(w, "               First cylinder number = {},", z.first_cyl);
    let _ = writeln!(w, "               Last cylinder number = {},", z.last_cyl);
    let _ = writeln!(
        w,
        "               Blocks per track = {},",
        z.blocks_per_track
    );
    let _ = writeln!(
        w,
        "               Offset of first block = {},",
        z.first_block_offset
    );
    let _ = writeln!(
        w,
        "               Empty space at zone front = {},",
        z.dead_space
    );
    let _ = writeln!(
        w,
        "               Skew for track switch = {},",
        z.track_skew
    );
    let _ = writeln!(
        w,
        "               Skew for cylinder switch = {},",
        z.cyl_skew
    );
    let _ = writeln!(w, "               Number of spares = {},", z.spares);
    let _ = writeln!(w, "               slips = [{}],", list(&z.slips));
    let flat: Vec<u64> = z.defects.iter().flat_map(|&(d, r)| [d, r]).collect();
    let _ = writeln!(w, "               defects = [{}]", list(&flat));
    let _ = writeln!(w, "            }}{sep}");
}

/// The `dm_mech_g1` block; returns the seek file's text (empty for a
/// constant seek time).
fn render_mechanics(
    w: &mut String,
    spec: &DriveSpec,
    seek_file_name: &str,
) -> Result<String, String> {
    let _ = writeln!(w, "      Mechanical Model = dm_mech_g1 {{");
    let mut seek_text = String::new();
    match &spec.seek {
        SeekCurve::Table { points } => {
            let _ = writeln!(w, "         Seek type = extracted,");
            let _ = writeln!(w, "         Full seek curve = {seek_file_name},");
            let _ = writeln!(seek_text, "Seek distances measured: {}", points.len());
            for (d, ms) in points {
                let _ = writeln!(seek_text, "{d}, {ms}");
            }
        }
        SeekCurve::Constant { ms } => {
            let _ = writeln!(w, "         Seek type = const,");
            let _ = writeln!(w, "         Average seek time = {ms},");
        }
        other => return Err(format!("a {other:?} seek curve cannot be written")),
    }
    let _ = writeln!(w, "         Head switch time = {},", spec.head_switch_ms);
    let _ = writeln!(
        w,
        "         Add. write settling delay = {},",
        spec.write_settle_ms
    );
    let _ = writeln!(w, "         Rotation speed (in rpms) = {}", spec.rpm);
    let _ = writeln!(w, "      }}");
    Ok(seek_text)
}

/// The `disksim_disk`'s own fields: the bus, the cache and the
/// controller's overheads, in the order DiskSim's own files give them.
fn render_disk_fields(w: &mut String, spec: &DriveSpec) -> Result<(), String> {
    let o = &spec.overheads;
    let mut fields = vec![("Per-request overhead time", o.per_request.to_string())];
    fields.extend(cache_fields(spec));
    fields.extend(overhead_fields(o));
    if o.extra_write_disconnect.is_some() {
        return Err("the extra write disconnect cannot be written".into());
    }
    for (k, v) in fields {
        let _ = writeln!(w, "   {k} = {v},");
    }
    Ok(())
}

/// The bus transfer time and the buffer cache (a table: DiskSim's name for
/// each field, and its value).
fn cache_fields(spec: &DriveSpec) -> Vec<(&'static str, String)> {
    let c = &spec.cache;
    let contread = match c.read_ahead {
        ReadAhead::None => 0,
        ReadAhead::TrackEnd => 1,
        ReadAhead::CylinderEnd => 2,
        ReadAhead::SegmentEnd => 3,
        ReadAhead::NextTrack => 4,
    };
    let b = |x: bool| u8::from(x);
    vec![
        ("Bulk sector transfer time", spec.bus_read_ms.to_string()),
        (
            "Hold bus entire read xfer",
            b(spec.hold_bus_read).to_string(),
        ),
        ("Number of buffer segments", c.segments.to_string()),
        (
            "Maximum number of write segments",
            c.write_segments.to_string(),
        ),
        ("Segment size (in blks)", c.segment_blocks.to_string()),
        (
            "Use separate write segment",
            b(c.separate_write_segment).to_string(),
        ),
        ("High (read) water mark", c.read_water.to_string()),
        (
            "Set watermark by reqsize",
            b(c.water_by_request).to_string(),
        ),
        ("Enable caching in buffer", b(c.enabled).to_string()),
        ("Buffer continuous read", contread.to_string()),
        ("Maximum read-ahead (blks)", c.max_read_ahead.to_string()),
        (
            "Read-ahead over requested",
            b(c.read_ahead_over_requested).to_string(),
        ),
        (
            "Read-ahead on idle hit",
            b(c.read_ahead_on_idle_hit).to_string(),
        ),
        (
            "Allow read hits on write data",
            b(c.read_hits_on_write_data).to_string(),
        ),
        (
            "Stop prefetch in sector",
            b(c.stop_prefetch_in_sector).to_string(),
        ),
        (
            "Fast write level",
            u8::from(c.write_back == WriteBack::On).to_string(),
        ),
    ]
}

/// The controller's overheads, in milliseconds (a table, as above).
fn overhead_fields(o: &Overheads) -> Vec<(&'static str, String)> {
    vec![
        (
            "Read hit over. after read",
            o.read_hit_after_read.to_string(),
        ),
        (
            "Read hit over. after write",
            o.read_hit_after_write.to_string(),
        ),
        (
            "Read miss over. after read",
            o.read_miss_after_read.to_string(),
        ),
        (
            "Read miss over. after write",
            o.read_miss_after_write.to_string(),
        ),
        (
            "Write hit over. after read",
            o.write_hit_after_read.to_string(),
        ),
        (
            "Write hit over. after write",
            o.write_hit_after_write.to_string(),
        ),
        (
            "Write miss over. after read",
            o.write_miss_after_read.to_string(),
        ),
        (
            "Write miss over. after write",
            o.write_miss_after_write.to_string(),
        ),
        ("Read completion overhead", o.read_completion.to_string()),
        ("Write completion overhead", o.write_completion.to_string()),
        ("Data preparation overhead", o.data_prep.to_string()),
        ("First reselect overhead", o.first_reselect.to_string()),
        ("Other reselect overhead", o.other_reselect.to_string()),
        (
            "Read disconnect afterread",
            o.read_disconnect_after_read.to_string(),
        ),
        (
            "Read disconnect afterwrite",
            o.read_disconnect_after_write.to_string(),
        ),
        ("Write disconnect overhead", o.write_disconnect.to_string()),
        ("Minimum seek delay", o.min_seek_delay.to_string()),
    ]
}

/// A separate bus carries the write time when it differs: the loader
/// takes the largest of the disk's and the buses' figures.
fn render_bus(w: &mut String, spec: &DriveSpec) -> Result<(), String> {
    if spec.bus_write_ms == spec.bus_read_ms {
        return Ok(());
    }
    if spec.bus_write_ms < spec.bus_read_ms {
        return Err("a write bus faster than the read bus cannot be written".into());
    }
    let _ = writeln!(w, "disksim_bus bus0 {{");
    let _ = writeln!(w, "   Read block transfer time = {},", spec.bus_read_ms);
    let _ = writeln!(w, "   Write block transfer time = {}", spec.bus_write_ms);
    let _ = writeln!(w, "}}");
    Ok(())
}

/// Writes `parv` and, for a table seek curve, `<stem>.seek` beside it.
pub fn write_parv(spec: &DriveSpec, parv: &Path) -> Result<(), String> {
    let seek = seek_path(parv);
    let seek_name = seek
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| format!("{}: not a file name", parv.display()))?;
    let (text, seek_text) = render(spec, &seek_name)?;
    // Both files under temporary names first, then renamed into place:
    // a write that fails (a full disk, a `.parv` that names a folder)
    // leaves no stray `.seek` beside nothing, and an older model of the
    // same name stays as it was.
    let tmp = |p: &Path| {
        let mut name = p.file_name().unwrap_or_default().to_os_string();
        name.push(".tmp");
        p.with_file_name(name)
    };
    let err = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let (seek_tmp, parv_tmp) = (tmp(&seek), tmp(parv));
    let written = (|| {
        if !seek_text.is_empty() {
            std::fs::write(&seek_tmp, &seek_text).map_err(|e| err(&seek, e))?;
        }
        std::fs::write(&parv_tmp, &text).map_err(|e| err(parv, e))?;
        std::fs::rename(&parv_tmp, parv).map_err(|e| err(parv, e))?;
        if !seek_text.is_empty() {
            std::fs::rename(&seek_tmp, &seek).map_err(|e| err(&seek, e))?;
        }
        Ok(())
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&seek_tmp);
        let _ = std::fs::remove_file(&parv_tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::parametric::Parametric;

    /// calibrate wrote the `.seek` file before the `.parv`: when the
    /// `.parv` could not be written (here a folder has its name), a stray
    /// `.seek` was left, or an older model's seek curve replaced.
    #[test]
    fn a_model_that_cannot_be_written_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = Parametric::drive_7200().spec();
        // A measured table, as calibrate writes (a `.seek` file).
        spec.seek = SeekCurve::Table {
            points: vec![(1, 1.0), (100, 3.0), (10_000, 12.0)],
        };
        let parv = dir.path().join("m.parv");
        std::fs::create_dir(&parv).unwrap();
        let e = write_parv(&spec, &parv).unwrap_err();
        assert!(e.contains("m.parv"), "{e}");
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["m.parv"], "only the folder that was there");
        // Where it can be written, both files are there and load back.
        let parv = dir.path().join("n.parv");
        write_parv(&spec, &parv).unwrap();
        assert!(seek_path(&parv).exists());
        let back = crate::disksim::load_drive(&parv).unwrap();
        assert_eq!(back.layout.blocks, spec.layout.blocks);
    }
}
