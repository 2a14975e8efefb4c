//! `platter create`: label a set of members as a new volume.

use crate::error::{CliError, Result};
use crate::members::{assemble_devices, foreign_label, open_all};
use crate::out::out;
use clap::Args;
use platter_core::balance::ReadPolicy;
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::integrity::{Algorithm, PageFormat, PAGE_BYTES};
use platter_core::intent::{IntentLayout, INTENT_OFFSET_BYTES};
use platter_core::label::{
    check_new_name, Checksums, Label, SlotEntry, SlotState, VolumeState, LAYOUT_VERSION,
    MAX_MEMBERS,
};
use platter_core::units::{parse_size, SECTOR_BYTES};
use platter_core::{Level, ParityLayout};
use platter_io::{Member, OpenOptions};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Where the data area starts on every member by default (`--reserve`):
/// the label, then room for the write-intent bitmap (and a reshape's
/// backups), then data at a 1 MiB boundary. With checksums, the
/// checksum area starts here and the data follows it (at the next 1 MiB
/// boundary).
const DATA_OFFSET_BYTES: u64 = 1 << 20;
const MIB: u64 = 1 << 20;
/// The most `--reserve` takes: a reshape's windows gain little past it.
const RESERVE_BYTES_MAX: u64 = 1 << 30;

/// Where the partial parity log starts on a member of `member_bytes`:
/// after the checksum area, when there is one.
fn ppl_offset_for(member_bytes: u64, checksums: Option<PageFormat>, reserve: u64) -> u64 {
    match checksums {
        None => reserve,
        Some(format) => {
            // Sized for everything after the reserve: the data area is smaller.
            let area = format.area_bytes(member_bytes.saturating_sub(reserve));
            reserve + area.div_ceil(MIB) * MIB
        }
    }
}

/// Where the data area starts on a member of `member_bytes`: after the
/// checksum area and the log, when there are any.
fn data_offset_for(
    member_bytes: u64,
    checksums: Option<PageFormat>,
    ppl_bytes: u64,
    reserve: u64,
) -> u64 {
    ppl_offset_for(member_bytes, checksums, reserve) + ppl_bytes
}

/// What comes before a member's data, for messages about small members.
fn metadata_words(args: &CreateArgs) -> String {
    let mut s = format!("{} MiB for the label and bitmap", args.reserve / MIB);
    if args.checksums.0.is_some() {
        s.push_str(", 1 MiB or more of checksums");
    }
    let ppl = ppl_bytes_of(args);
    if ppl > 0 {
        s.push_str(&format!(", {} MiB of partial parity log", ppl / MIB));
    }
    s
}

/// The partial parity log's bytes on every member (whole MiBs), 0 without.
fn ppl_bytes_of(args: &CreateArgs) -> u64 {
    match args.consistency_policy {
        ConsistencyPolicy::Resync => 0,
        ConsistencyPolicy::Ppl => platter_core::ppl::area_bytes_for(args.interleave),
    }
}

/// What keeps a RAID-5/6 stripe's parity right across a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ConsistencyPolicy {
    /// The write-intent bitmap and a resync of the regions it marks: a
    /// member lost before that resync can rebuild data nobody was writing
    /// wrong (the write hole).
    Resync,
    /// A partial parity log on the members as well: closes the write hole
    /// for RAID-5 and RAID-6, at the cost of a log write and flush before
    /// each partial-stripe write.
    Ppl,
}

fn parse_checksums(s: &str) -> std::result::Result<ChecksumChoice, String> {
    match s {
        "none" => Ok(ChecksumChoice(None)),
        other => Algorithm::parse(other)
            .map(|a| ChecksumChoice(Some(a)))
            .ok_or_else(|| format!("'{other}' is not one of crc32c, xxh3, none")),
    }
}

#[derive(Clone, Copy, Debug)]
struct ChecksumChoice(Option<Algorithm>);

fn parse_on_off(s: &str) -> std::result::Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("'{other}' is not on or off")),
    }
}

/// Writes member `slot` of `members`'s checksum area as a new volume's:
/// every sealed page holding the entries of its zeroed data blocks (`data`:
/// this member's data bytes and the largest member's, which sizes the
/// area), then, with write records, the empty record pages it keeps for
/// the member before it. Written in 1 MiB pieces.
fn write_checksum_area(
    m: &Arc<dyn Member>,
    c: Checksums,
    (slot, members): (u32, u32),
    volume_uuid: [u8; 16],
    (data_bytes, largest_bytes): (u64, u64),
) -> Result<()> {
    use platter_core::integrity::format::{PageId, RecordPage, SealedPage, RECORDS_PER_PAGE};
    const PAGES_PER_WRITE: u64 = MIB / PAGE_BYTES;
    if c.format == PageFormat::Bare {
        // Bare entries of 0 say "reads as zeros": the area zeroed is all.
        m.trim(c.area_offset_bytes, c.format.area_bytes(largest_bytes))?;
        return Ok(());
    }
    let blocks = data_bytes / SECTOR_BYTES;
    let pages = c.format.pages(largest_bytes);
    let mut at = c.area_offset_bytes;
    let mut buf = Vec::with_capacity(MIB as usize);
    for p in 0..pages {
        let id = PageId {
            volume_uuid,
            slot,
            index: p,
        };
        buf.extend(SealedPage::zeroed(c.algorithm, id, blocks));
        if (p + 1) % PAGES_PER_WRITE == 0 || p + 1 == pages {
            m.write_at(at, &buf)?;
            at += buf.len() as u64;
            buf.clear();
        }
    }
    let described = (slot + members - 1) % members;
    for q in 0..c.format.record_pages(largest_bytes) {
        let id = PageId {
            volume_uuid,
            slot: described,
            index: q,
        };
        m.write_at(at, &RecordPage::encode(&[0; RECORDS_PER_PAGE as usize], id))?;
        at += PAGE_BYTES;
    }
    Ok(())
}

#[derive(Args, Clone)]
pub struct CreateArgs {
    /// How the members make the volume (md's names raid0, raid1 and linear
    /// are taken too).
    #[arg(long, value_name = "LEVEL", value_parser = crate::values::level())]
    level: Level,
    /// Bytes on one member before moving to the next: any multiple of 512
    /// (126s, 64k, 1M).
    #[arg(long, value_name = "SIZE", default_value = "64k", value_parser = parse_size)]
    interleave: u64,
    /// Parity placement for raid5/raid6: left-symmetric (default),
    /// left-asymmetric, right-symmetric, right-asymmetric. For raid10: near.
    #[arg(long, value_name = "NAME", value_parser = crate::values::layout())]
    layout: Option<String>,
    /// raid10 only: copies of each chunk (md's near layout; need not divide
    /// the member count).
    #[arg(long, value_name = "N", default_value_t = 2)]
    copies: u32,
    /// How mirror and raid10 reads choose a copy: round-robin,
    /// split[:SIZE] (reads of SIZE or more, default 128k, split across the
    /// copies), load (fewest outstanding I/Os), prefer:SLOT (that member
    /// first), proximity[:WINDOW] (gmirror's load: least loaded, favouring
    /// the member whose last I/O ended at or within WINDOW, default 1M, of
    /// the read), auto (proximity for rotational members, load for the
    /// others). Changeable later with `platter read-policy`. See
    /// docs/tuning.md.
    #[arg(long, value_name = "POLICY", default_value = "auto",
          value_parser = crate::values::read_policy(), hide_possible_values = true)]
    read_policy: ReadPolicy,
    /// A name for people; the volume is identified by its UUID.
    #[arg(long, value_name = "NAME", default_value = "platter")]
    name: String,
    /// Create member files that do not exist, of this size (sparse).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    member_size: Option<u64>,
    /// Volume bytes per bit of the write-intent bitmap (rounded up to whole
    /// stripes; grown if the bitmap would not fit). After a crash only the
    /// regions being written are resynced; smaller regions mean a shorter
    /// resync, larger ones fewer bitmap updates while writing. 0: no bitmap
    /// (a crash resyncs the whole volume). Ignored for concat and stripe.
    #[arg(long, value_name = "SIZE", default_value = "4M", value_parser = parse_size)]
    bitmap_region: u64,
    /// Overwrite members that already carry a platter label.
    #[arg(long)]
    force: bool,
    /// Skip zeroing the members' data areas. Only safe when they already
    /// read as zeros (new sparse files, freshly discarded devices): parity
    /// and mirror copies must start out agreeing.
    #[arg(long)]
    assume_clean: bool,
    /// Keep a checksum of every 512-byte block of the members' data areas
    /// and check it on every read: crc32c (hardware-accelerated), xxh3, or
    /// none (default). A block that fails its checksum (bit rot, a lost or
    /// misdirected write, a member overwritten behind the volume's back) is
    /// never served: the read is served from another copy or from parity,
    /// and the bad block is rewritten. Costs 0.8% of each member and the
    /// reads and writes of the checksums (docs/performance.md). Needs the
    /// write-intent bitmap on redundant levels.
    #[arg(long, value_name = "ALGORITHM", default_value = "none", value_parser = crate::values::checksums(parse_checksums))]
    checksums: ChecksumChoice,
    /// With --checksums: also keep, on the next member, the generation at
    /// which each member's checksum pages were last made durable (write
    /// records), so that a write a member acknowledged and then lost, its
    /// data and its checksum page alike, is caught after a restart instead
    /// of read back stale. on (default) or off; costs one small write on
    /// the next member per flush (docs/performance.md, bench/checksums.sh).
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = parse_on_off, action = clap::ArgAction::Set)]
    checksum_records: bool,
    /// With --checksums: the page layout. `sealed` (default) or `bare`,
    /// the layout of builds before label format 7, where a zeroed page
    /// vouches for zeroed data: only to test and measure against volumes
    /// made by those builds.
    #[arg(long, value_name = "sealed|bare", default_value = "sealed", hide = true,
          value_parser = ["sealed", "bare"])]
    checksum_pages: String,
    /// raid5/raid6: what keeps parity right across a crash. resync
    /// (default): the write-intent bitmap's resync, as md does; a member
    /// lost before the resync can rebuild chunks nobody was writing wrong
    /// (the RAID-5/6 write hole). ppl: also log the partial parity of every
    /// partial-stripe write before it is written (md's PPL, for RAID-6 too),
    /// and apply the log at the next start: closes the write hole, costs a
    /// log write and flush per partial-stripe write and 4 MiB or more of
    /// each member (docs/failures.md, docs/performance.md).
    #[arg(long, value_name = "POLICY", value_enum, default_value_t = ConsistencyPolicy::Resync)]
    consistency_policy: ConsistencyPolicy,
    /// Files, block devices, or NBD exports (`nbd://HOST[:PORT]/EXPORT`,
    /// `nbd+unix:///EXPORT?socket=PATH`). Order sets the slots; afterwards
    /// the labels, not the order, are trusted.
    #[arg(value_name = "MEMBER", required = true)]
    members: Vec<String>,
    /// Room at the start of every member for the label and bitmap, and
    /// for reshapes: whole MiBs, 1M to 1G. By default md's rule: about
    /// 0.1% of the smallest member, at most 128 MiB (1M for members up to
    /// 512 MiB, 129M from 128 GiB). A reshape on the same members (a new
    /// interleave or parity layout) moves the data down into half of it,
    /// or backs up each window here when too little is left; more room
    /// moves it in larger windows, much faster on members with latency
    /// (docs/reshape.md). Checksums and the partial parity log follow it.
    #[arg(long = "reserve", value_name = "SIZE", value_parser = parse_size)]
    reserve_asked: Option<u64>,
    /// The reserve in use: `reserve_asked`, or md's rule for the members.
    #[arg(skip)]
    reserve: u64,
}

/// md's headroom for reshapes (mdadm, super1.c `validate_geometry1`):
/// 128 MiB, halved while more than about 0.1% of the member; then room
/// for the label and the largest bitmap md gives (128 KiB), in whole MiBs,
/// at least 1 MiB.
fn md_reserve_bytes(member_bytes: u64) -> u64 {
    let mut headroom: u64 = 128 * MIB;
    // At most 11 halvings: bounded.
    while headroom.saturating_mul(1024) > member_bytes && headroom > 64 * 1024 {
        headroom /= 2;
    }
    ((4096 + 128 * 1024 + headroom).div_ceil(MIB) * MIB).max(DATA_OFFSET_BYTES)
}

impl CreateArgs {
    /// These arguments with the reserve settled for members of at least
    /// `smallest_member_bytes`.
    /// How the checksum pages are laid out, when there are checksums.
    fn checksum_format(&self) -> Option<PageFormat> {
        self.checksums
            .0
            .map(|_| match self.checksum_pages.as_str() {
                "bare" => PageFormat::Bare,
                _ => PageFormat::Sealed {
                    records: self.checksum_records,
                },
            })
    }

    fn with_reserve_for(&self, smallest_member_bytes: u64) -> CreateArgs {
        let mut a = self.clone();
        a.reserve = self
            .reserve_asked
            .unwrap_or_else(|| md_reserve_bytes(smallest_member_bytes));
        a
    }
}

fn layout_for(level: Level, name: Option<&str>) -> Result<ParityLayout> {
    match (level, name) {
        (_, None) => Ok(ParityLayout::DEFAULT),
        (Level::Raid5 | Level::Raid6, Some(n)) => Ok(n.parse::<ParityLayout>()?),
        (Level::Raid10, Some("near" | "n2" | "n3" | "n4")) => Ok(ParityLayout::DEFAULT),
        (Level::Raid10, Some(n)) => Err(CliError(format!(
            "raid10 layout '{n}' is not supported: only md's near layout is (use --copies)"
        ))),
        (_, Some(n)) => Err(CliError(format!(
            "--layout {n}: {level} has no layouts (only raid5, raid6 and raid10 do)"
        ))),
    }
}

fn raid10_copies(layout: Option<&str>, copies: u32) -> u32 {
    match layout {
        Some(n) if n.len() == 2 && n.starts_with('n') => n[1..].parse().unwrap_or(copies),
        _ => copies,
    }
}

fn random_uuid() -> [u8; 16] {
    *uuid::Uuid::new_v4().as_bytes()
}

pub fn run(args: CreateArgs) -> Result<()> {
    if let Some(reserve) = args.reserve_asked {
        if !(DATA_OFFSET_BYTES..=RESERVE_BYTES_MAX).contains(&reserve)
            || !reserve.is_multiple_of(MIB)
        {
            return Err(CliError(format!(
                "--reserve {reserve} bytes: give whole MiBs from 1M to 1G"
            )));
        }
    }
    // The smallest a member may be is checked with the smallest reserve
    // md's rule gives; members of --member-size with theirs.
    let args = args.with_reserve_for(args.member_size.unwrap_or(0));
    let level = args.level;
    let n = args.members.len() as u32;
    if n < level.min_members() {
        return Err(CliError(format!(
            "{level} needs at least {} members, {n} given",
            level.min_members()
        )));
    }
    if n > MAX_MEMBERS {
        return Err(CliError(format!(
            "at most {MAX_MEMBERS} members, {n} given"
        )));
    }
    if args.interleave == 0 || !args.interleave.is_multiple_of(SECTOR_BYTES) {
        return Err(CliError(format!(
            "--interleave must be a positive multiple of 512 bytes, got {} bytes",
            args.interleave
        )));
    }
    check_new_name(&args.name).map_err(|e| CliError(format!("--name {e}")))?;
    let parity_layout = layout_for(level, args.layout.as_deref())?;
    let copies = match level {
        Level::Mirror => n,
        Level::Raid10 => raid10_copies(args.layout.as_deref(), args.copies),
        _ => 1,
    };
    if level == Level::Raid10 && !(2..=n).contains(&copies) {
        return Err(CliError(format!(
            "raid10 needs 2 to {n} copies over {n} members, got {copies}"
        )));
    }
    args.read_policy
        .check(level, n, copies)
        .map_err(|e| CliError(format!("--read-policy: {e}")))?;

    check_member_size(&args, parity_layout, copies)?;

    let opts = OpenOptions {
        create_size_bytes: args.member_size,
        ..OpenOptions::default()
    };
    // Files this command creates are removed again if it fails, so a
    // refused create leaves nothing behind.
    let created: Vec<&String> = args
        .members
        .iter()
        .filter(|m| !m.contains("://") && std::fs::symlink_metadata(m).is_err())
        .collect();
    let result = open_all(&args.members, opts)
        .map_err(CliError::from)
        .and_then(|members| label_members(&args, members, parity_layout, copies));
    if result.is_err() {
        for path in created {
            let _ = std::fs::remove_file(path);
        }
    }
    result
}

/// The smallest member: the label and bitmap area (and a checksum area),
/// then one interleave.
fn min_member_bytes(
    interleave: u64,
    checksums: Option<PageFormat>,
    ppl_bytes: u64,
    reserve: u64,
) -> Result<u64> {
    let label_area = reserve + if checksums.is_some() { MIB } else { 0 } + ppl_bytes;
    label_area.checked_add(interleave).ok_or_else(|| {
        CliError(format!(
            "--interleave {interleave} bytes is too large: no member can hold {reserve} bytes \
             of label and bitmap and one interleave"
        ))
    })
}

/// A member's data area: what follows the label and bitmap area, in whole
/// sectors.
fn data_bytes_of(member_bytes: u64, data_offset_bytes: u64) -> u64 {
    member_bytes.saturating_sub(data_offset_bytes) / SECTOR_BYTES * SECTOR_BYTES
}

/// The volume's geometry and write-intent bitmap (region stripes, layout)
/// for members with these data areas.
fn layout(
    args: &CreateArgs,
    parity_layout: ParityLayout,
    copies: u32,
    data_offset_bytes: u64,
    data_bytes: Vec<u64>,
) -> Result<(Geometry, u64, Option<IntentLayout>)> {
    let spec = GeometrySpec {
        level: args.level,
        parity_layout,
        copies,
        interleave_bytes: args.interleave,
        data_offset_bytes,
        member_data_bytes: data_bytes,
    };
    let geometry = Geometry::new(spec.clone()).map_err(|e| CliError(e.0))?;
    if args.consistency_policy == ConsistencyPolicy::Ppl && !args.level.is_parity() {
        return Err(CliError(format!(
            "--consistency-policy ppl is for raid5 and raid6 (the write hole is theirs); \
             {} keeps copies, which the write-intent bitmap's resync makes agree",
            args.level
        )));
    }
    if args.checksums.0.is_some() && geometry.redundancy() == 0 {
        return Err(CliError(format!(
            "--checksums needs a level with copies or parity to repair from; {} has none \
             (a block that failed its checksum could only fail the read)",
            args.level
        )));
    }
    if args.checksums.0.is_some() && args.bitmap_region == 0 {
        return Err(CliError(
            "--checksums needs the write-intent bitmap (drop --bitmap-region 0): it says \
             where a crash may have left blocks and their checksums out of step"
                .into(),
        ));
    }
    let intent_region_stripes = if args.bitmap_region == 0 {
        0
    } else {
        // The bitmap keeps to the first MiB (a checksum area follows it).
        let room = Geometry::new(GeometrySpec {
            data_offset_bytes: args.reserve,
            ..spec
        })
        .map_err(|e| CliError(e.0))?;
        IntentLayout::choose_region_stripes(&room, args.bitmap_region)
    };
    let intent = IntentLayout::new(&geometry, intent_region_stripes).map_err(CliError)?;
    Ok((geometry, intent_region_stripes, intent))
}

/// What the arguments alone decide, checked before any file is created: a
/// member of `--member-size` holds the label area and an interleave, can be
/// a file at all, and such members make a volume whose sizes fit a u64.
fn check_member_size(args: &CreateArgs, parity_layout: ParityLayout, copies: u32) -> Result<()> {
    let min_bytes = min_member_bytes(
        args.interleave,
        args.checksum_format(),
        ppl_bytes_of(args),
        args.reserve,
    )?;
    let Some(size) = args.member_size else {
        return Ok(());
    };
    if i64::try_from(size).is_err() {
        return Err(CliError(format!(
            "--member-size {size} bytes is larger than any file can be (at most {} bytes, \
             2^63 - 1)",
            i64::MAX
        )));
    }
    if size < min_bytes {
        return Err(CliError(format!(
            "--member-size {size} bytes is too small: a member needs at least {min_bytes} \
             ({}, then one interleave)",
            metadata_words(args)
        )));
    }
    let offset = data_offset_for(
        size,
        args.checksum_format(),
        ppl_bytes_of(args),
        args.reserve,
    );
    let members = vec![data_bytes_of(size, offset); args.members.len()];
    layout(args, parity_layout, copies, offset, members).map(|_| ())
}

fn label_members(
    args: &CreateArgs,
    members: Vec<Arc<dyn Member>>,
    parity_layout: ParityLayout,
    copies: u32,
) -> Result<()> {
    let smallest = members.iter().map(|m| m.size_bytes()).min().unwrap_or(0);
    let args = &args.with_reserve_for(smallest);
    for m in &members {
        refuse_labelled(m.as_ref(), args.force)?;
    }
    let ppl_bytes = ppl_bytes_of(args);
    let (ppl_offset_bytes, data_offset_bytes, data_bytes) = data_areas(args, &members, ppl_bytes)?;
    let (geometry, intent_region_stripes, intent) = layout(
        args,
        parity_layout,
        copies,
        data_offset_bytes,
        data_bytes.clone(),
    )?;
    let checksums = args.checksums.0.map(|algorithm| Checksums {
        algorithm,
        format: args.checksum_format().expect("checksums"),
        area_offset_bytes: args.reserve,
    });
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let volume_uuid = random_uuid();
    let slots: Vec<SlotEntry> = data_bytes
        .iter()
        .map(|&d| SlotEntry {
            member_uuid: random_uuid(),
            data_size_bytes: d,
            state: SlotState::Active,
            left_at_events: 0,
        })
        .collect();
    let label = Label {
        layout_version: LAYOUT_VERSION,
        volume_uuid,
        member_uuid: slots[0].member_uuid,
        slot: 0,
        member_count: members.len() as u32,
        level: args.level,
        parity_layout,
        copies,
        interleave_bytes: args.interleave,
        data_offset_bytes,
        data_size_bytes: data_bytes[0],
        volume_size_bytes: geometry.volume_size_bytes(),
        event_counter: 1,
        state: VolumeState::Clean,
        rebuild_checkpoint_bytes: 0,
        read_policy: args.read_policy.code(),
        created_unix_seconds: now,
        updated_unix_seconds: now,
        name: args.name.clone(),
        intent_region_stripes,
        read_policy_arg: args.read_policy.arg(),
        scrub: Default::default(),
        checksums,
        // A reused device may hold old records where the log goes; a new
        // volume starts with none (`clear_areas`).
        ppl: (ppl_bytes > 0).then_some(platter_core::ppl::Layout {
            offset_bytes: ppl_offset_bytes,
            len_bytes: ppl_bytes,
        }),
        reshape: None,
        slots,
    };
    clear_areas(args, &members, &label, intent)?;
    for (slot, m) in members.iter().enumerate() {
        m.write_at(0, &label.for_slot(slot as u32).encode())?;
        m.flush()?;
    }
    let volume = assemble_devices(members)?;
    out!("{}", crate::listing::render(&volume, &[]));
    Ok(())
}

/// Where the log and the data start on every member, and each member's
/// data area; members too small for them are refused.
fn data_areas(
    args: &CreateArgs,
    members: &[Arc<dyn Member>],
    ppl_bytes: u64,
) -> Result<(u64, u64, Vec<u64>)> {
    let min_bytes = min_member_bytes(
        args.interleave,
        args.checksum_format(),
        ppl_bytes,
        args.reserve,
    )?;
    // One data offset for every member: the largest member's checksums.
    let ppl_offset_bytes = members
        .iter()
        .map(|m| ppl_offset_for(m.size_bytes(), args.checksum_format(), args.reserve))
        .max()
        .unwrap_or(args.reserve);
    let data_offset_bytes = ppl_offset_bytes + ppl_bytes;
    let data_bytes: Vec<u64> = members
        .iter()
        .map(|m| {
            let size = m.size_bytes();
            if size < min_bytes {
                return Err(CliError(format!(
                    "member {}: {size} bytes is too small: it needs at least {min_bytes} \
                     ({}, then one interleave)",
                    m.describe(),
                    metadata_words(args)
                )));
            }
            if size < data_offset_bytes + args.interleave {
                return Err(CliError(format!(
                    "member {}: {size} bytes is too small: with checksums sized for the \
                     largest member, it needs at least {} bytes",
                    m.describe(),
                    data_offset_bytes + args.interleave
                )));
            }
            Ok(data_bytes_of(size, data_offset_bytes))
        })
        .collect::<Result<_>>()?;
    Ok((ppl_offset_bytes, data_offset_bytes, data_bytes))
}

/// Before the labels: the data zeroed (unless --assume-clean), the
/// checksum pages written, and the log and the bitmap emptied of whatever
/// a reused device held there.
fn clear_areas(
    args: &CreateArgs,
    members: &[Arc<dyn Member>],
    label: &Label,
    intent: Option<IntentLayout>,
) -> Result<()> {
    let n = label.member_count;
    if !args.assume_clean {
        for (m, e) in members.iter().zip(&label.slots) {
            zero_data(m, label.data_offset_bytes, e.data_size_bytes)?;
        }
    }
    // Every checksum page sealed, with the entries of the zeroed blocks:
    // a page that is not one (zeroed, discarded) then vouches for nothing.
    if let Some(c) = label.checksums {
        let largest = label.slots.iter().map(|e| e.data_size_bytes).max();
        let largest = largest.unwrap_or(0);
        for (slot, (m, e)) in members.iter().zip(&label.slots).enumerate() {
            let d = e.data_size_bytes;
            write_checksum_area(m, c, (slot as u32, n), label.volume_uuid, (d, largest))?;
        }
    }
    if let Some(l) = label.ppl {
        for m in members {
            m.trim(l.offset_bytes, l.len_bytes)?;
        }
    }
    // A reused device may hold anything where the bitmap goes: a stray bit
    // would only cost a resync, but a new volume starts with none.
    if let Some(layout) = intent {
        let zeros = vec![0u8; layout.area_bytes() as usize];
        for m in members {
            m.write_at(INTENT_OFFSET_BYTES, &zeros)?;
        }
    }
    Ok(())
}

fn refuse_labelled(m: &dyn Member, force: bool) -> Result<()> {
    if force {
        return Ok(());
    }
    match foreign_label(m, None)? {
        None => Ok(()),
        Some(what) => Err(CliError(format!(
            "member {}: {what}; use --force to overwrite it",
            m.describe()
        ))),
    }
}

/// Makes the data area read as zeros, so every stripe's parity and every
/// chunk's copies agree from the start.
fn zero_data(m: &Arc<dyn Member>, data_offset_bytes: u64, data_bytes: u64) -> Result<()> {
    m.trim(data_offset_bytes, data_bytes)?;
    Ok(())
}

/// What a pool volume's array is made with (`platter volume create`):
/// `create`'s own choices, on subdisks.
pub(crate) struct ArraySpec {
    pub level: Level,
    pub interleave_bytes: u64,
    pub layout: Option<String>,
    pub copies: u32,
    pub name: String,
}

impl ArraySpec {
    /// The parity layout and copies `create` would take from these.
    pub(crate) fn settle(&self, members: u32) -> Result<(ParityLayout, u32)> {
        let parity_layout = layout_for(self.level, self.layout.as_deref())?;
        let copies = match self.level {
            Level::Mirror => members,
            Level::Raid10 => raid10_copies(self.layout.as_deref(), self.copies),
            _ => 1,
        };
        if self.level == Level::Raid10 && !(2..=members).contains(&copies) {
            return Err(CliError(format!(
                "raid10 needs 2 to {members} copies over {members} subdisks, got {copies}"
            )));
        }
        Ok((parity_layout, copies))
    }

    fn args(&self, members: usize, reserve: u64) -> CreateArgs {
        CreateArgs {
            level: self.level,
            interleave: self.interleave_bytes,
            layout: self.layout.clone(),
            copies: self.copies,
            read_policy: ReadPolicy::default(),
            name: self.name.clone(),
            member_size: None,
            bitmap_region: 4 * MIB,
            // The pool's configuration, not a label, says the extent is free.
            force: true,
            assume_clean: false,
            checksums: ChecksumChoice(None),
            checksum_records: true,
            checksum_pages: "sealed".into(),
            consistency_policy: ConsistencyPolicy::Resync,
            members: vec![String::new(); members],
            reserve_asked: Some(reserve),
            reserve,
        }
    }
}

/// The room a pool volume's subdisks keep before their data: md's rule
/// for a subdisk of about `member_bytes`.
pub(crate) fn subdisk_reserve_bytes(member_bytes: u64) -> u64 {
    md_reserve_bytes(member_bytes)
}

/// Writes a new array's labels on a pool volume's subdisks (their data
/// zeroed, the bitmap emptied), as `create` does on whole members.
pub(crate) fn label_subdisks(
    spec: &ArraySpec,
    members: Vec<Arc<dyn Member>>,
    reserve: u64,
) -> Result<()> {
    check_new_name(&spec.name).map_err(|e| CliError(format!("volume name {e}")))?;
    let (parity_layout, copies) = spec.settle(members.len() as u32)?;
    label_members(
        &spec.args(members.len(), reserve),
        members,
        parity_layout,
        copies,
    )
}
