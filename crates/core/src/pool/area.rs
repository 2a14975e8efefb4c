//! The pool area: the first [`POOL_AREA_BYTES`] of every drive, two slots
//! of [`SLOT_BYTES`], each a 4 KiB header and the configuration's text
//! (docs/on-disk-format.md, "The pool area"). A change writes the slot not
//! holding the drive's newest configuration, so a torn write leaves the
//! last good one whole; the newest valid generation on the drives present
//! is the pool's.

use super::text::{self, Strictness};
use super::{uuid_text, Pool, POOL_AREA_BYTES};
use crate::format::{get_u32, get_u64, put_u32, put_u64};

/// Bytes of one of a drive's two configuration slots.
pub const SLOT_BYTES: u64 = POOL_AREA_BYTES / 2;
/// Bytes of a slot's header; the text follows it.
pub const HEADER_BYTES: usize = 4096;
/// The longest text a slot holds.
pub const TEXT_MAX_BYTES: usize = SLOT_BYTES as usize - HEADER_BYTES;
/// The first bytes of a slot's header.
pub const POOL_MAGIC: [u8; 8] = *b"PLTRPOOL";
/// The header's format; a newer one is refused, not guessed at.
pub const FORMAT_VERSION: u32 = 1;

/// Where each field of the header lies (little-endian).
pub mod at {
    pub const MAGIC: usize = 0x000;
    pub const VERSION: usize = 0x008;
    pub const SLOT: usize = 0x00C;
    pub const POOL_UUID: usize = 0x010;
    pub const DRIVE_UUID: usize = 0x020;
    pub const GENERATION: usize = 0x030;
    pub const TEXT_BYTES: usize = 0x038;
    pub const TEXT_CRC: usize = 0x03C;
    pub const WRITTEN: usize = 0x040;
    pub const CHECKSUM: usize = super::HEADER_BYTES - 4;
}

/// The offset on the drive of slot `slot` (0 or 1).
pub fn slot_offset_bytes(slot: u32) -> u64 {
    assert!(slot < 2, "a drive has two slots");
    u64::from(slot) * SLOT_BYTES
}

/// A slot's header as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub slot: u32,
    pub pool_uuid: [u8; 16],
    /// Which of the pool's drives this is.
    pub drive_uuid: [u8; 16],
    pub generation: u64,
    pub text_bytes: u32,
    pub text_crc: u32,
    pub written_unix_seconds: u64,
}

/// Why a slot holds no configuration to use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotFault {
    /// All zeros: never written, or zeroed.
    Blank,
    /// No pool magic: the device holds something else here.
    Foreign,
    /// A pool slot that cannot be trusted: the reason says why.
    Damaged(String),
}

impl std::fmt::Display for SlotFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SlotFault::Blank => f.write_str("blank"),
            SlotFault::Foreign => f.write_str("not a pool slot"),
            SlotFault::Damaged(why) => write!(f, "damaged: {why}"),
        }
    }
}

/// The bytes of slot `slot` holding `pool` for the drive `drive_uuid`:
/// the header and the text, padded to whole 4 KiB blocks.
pub fn encode(pool: &Pool, drive_uuid: [u8; 16], slot: u32, now_unix_seconds: u64) -> Vec<u8> {
    assert!(slot < 2, "a drive has two slots");
    assert!(
        pool.drive_by_uuid(&drive_uuid).is_some(),
        "the drive belongs to the pool"
    );
    let text = text::render(pool);
    assert!(
        text.len() <= TEXT_MAX_BYTES,
        "the caller checked the text fits"
    );
    let mut out = vec![0u8; HEADER_BYTES + text.len().next_multiple_of(HEADER_BYTES)];
    out[at::MAGIC..at::MAGIC + 8].copy_from_slice(&POOL_MAGIC);
    put_u32(&mut out, at::VERSION, FORMAT_VERSION);
    put_u32(&mut out, at::SLOT, slot);
    out[at::POOL_UUID..at::POOL_UUID + 16].copy_from_slice(&pool.uuid);
    out[at::DRIVE_UUID..at::DRIVE_UUID + 16].copy_from_slice(&drive_uuid);
    put_u64(&mut out, at::GENERATION, pool.generation);
    put_u32(&mut out, at::TEXT_BYTES, text.len() as u32);
    put_u32(&mut out, at::TEXT_CRC, crc32c::crc32c(text.as_bytes()));
    put_u64(&mut out, at::WRITTEN, now_unix_seconds);
    let sum = crc32c::crc32c(&out[..at::CHECKSUM]);
    put_u32(&mut out, at::CHECKSUM, sum);
    out[HEADER_BYTES..HEADER_BYTES + text.len()].copy_from_slice(text.as_bytes());
    out
}

/// Whether `pool` fits a slot.
pub fn fits(pool: &Pool) -> Result<(), String> {
    let n = text::render(pool).len();
    if n > TEXT_MAX_BYTES {
        return Err(format!(
            "the configuration is {n} bytes; a slot holds {TEXT_MAX_BYTES}: fewer volumes or \
             subdisks are needed"
        ));
    }
    Ok(())
}

/// Reads the header of a slot read from offset `slot_offset_bytes(slot)`.
pub fn decode_header(bytes: &[u8], slot: u32) -> Result<Header, SlotFault> {
    let Some(bytes) = bytes.get(..HEADER_BYTES) else {
        return Err(SlotFault::Damaged("shorter than a header".into()));
    };
    if bytes[..8] != POOL_MAGIC {
        return Err(if bytes.iter().all(|&b| b == 0) {
            SlotFault::Blank
        } else {
            SlotFault::Foreign
        });
    }
    let sum = get_u32(bytes, at::CHECKSUM);
    if crc32c::crc32c(&bytes[..at::CHECKSUM]) != sum {
        return Err(SlotFault::Damaged(
            "its header fails its checksum (torn or overwritten)".into(),
        ));
    }
    let version = get_u32(bytes, at::VERSION);
    if version != FORMAT_VERSION {
        return Err(SlotFault::Damaged(format!(
            "format {version}, which this build does not know (it knows {FORMAT_VERSION})"
        )));
    }
    let header = Header {
        slot: get_u32(bytes, at::SLOT),
        pool_uuid: bytes[at::POOL_UUID..at::POOL_UUID + 16]
            .try_into()
            .expect("16"),
        drive_uuid: bytes[at::DRIVE_UUID..at::DRIVE_UUID + 16]
            .try_into()
            .expect("16"),
        generation: get_u64(bytes, at::GENERATION),
        text_bytes: get_u32(bytes, at::TEXT_BYTES),
        text_crc: get_u32(bytes, at::TEXT_CRC),
        written_unix_seconds: get_u64(bytes, at::WRITTEN),
    };
    check_header(&header, slot)?;
    Ok(header)
}

fn check_header(h: &Header, slot: u32) -> Result<(), SlotFault> {
    if h.slot != slot {
        return Err(SlotFault::Damaged(format!(
            "it says it is slot {}, read from slot {slot} (misplaced)",
            h.slot
        )));
    }
    if h.text_bytes as usize > TEXT_MAX_BYTES || h.text_bytes == 0 {
        return Err(SlotFault::Damaged(format!(
            "its text is said to be {} bytes (1 to {TEXT_MAX_BYTES})",
            h.text_bytes
        )));
    }
    if h.generation == 0 {
        return Err(SlotFault::Damaged("generation 0".into()));
    }
    Ok(())
}

/// The configuration a slot holds, its header read: `text` is the
/// header's `text_bytes` bytes after it.
pub fn decode_text(header: &Header, text: &[u8]) -> Result<Pool, SlotFault> {
    let damaged = |why: String| SlotFault::Damaged(why);
    let Some(text) = text.get(..header.text_bytes as usize) else {
        return Err(damaged("its text is cut short".into()));
    };
    if crc32c::crc32c(text) != header.text_crc {
        return Err(damaged(
            "its text fails its checksum (torn or overwritten)".into(),
        ));
    }
    let text = std::str::from_utf8(text).map_err(|_| damaged("its text is not UTF-8".into()))?;
    let pool =
        text::parse(text, Strictness::Stored).map_err(|e| damaged(format!("its text: {e}")))?;
    if pool.uuid != header.pool_uuid || pool.generation != header.generation {
        return Err(damaged(format!(
            "its text is pool {} generation {}, its header pool {} generation {}",
            uuid_text(&pool.uuid),
            pool.generation,
            uuid_text(&header.pool_uuid),
            header.generation
        )));
    }
    if pool.drive_by_uuid(&header.drive_uuid).is_none() {
        return Err(damaged(format!(
            "its drive {} is not among the pool's drives",
            uuid_text(&header.drive_uuid)
        )));
    }
    Ok(pool)
}

/// Decodes a whole slot (header and text in one buffer).
pub fn decode(bytes: &[u8], slot: u32) -> Result<(Header, Pool), SlotFault> {
    let header = decode_header(bytes, slot)?;
    let pool = decode_text(&header, &bytes[HEADER_BYTES.min(bytes.len())..])?;
    Ok((header, pool))
}

/// What one slot holds.
pub type SlotRead = Result<(Header, Pool), SlotFault>;

/// What one drive's two slots hold.
#[derive(Clone, Debug)]
pub struct DriveSlots {
    pub slots: [SlotRead; 2],
}

impl DriveSlots {
    /// The slot holding the newest valid configuration.
    pub fn newest(&self) -> Option<(u32, &Header, &Pool)> {
        (0..2u32)
            .filter_map(|s| match &self.slots[s as usize] {
                Ok((h, p)) => Some((s, h, p)),
                Err(_) => None,
            })
            .max_by_key(|(_, h, _)| h.generation)
    }

    /// The slot the next change writes: never the one holding the newest.
    pub fn next_slot(&self) -> u32 {
        match self.newest() {
            Some((s, _, _)) => 1 - s,
            None => 0,
        }
    }

    /// Whether neither slot holds a pool (a device never made a drive).
    pub fn is_blank(&self) -> bool {
        self.slots
            .iter()
            .all(|s| matches!(s, Err(SlotFault::Blank)))
    }

    /// Whether some slot looks like a pool's, valid or not.
    pub fn has_pool_slot(&self) -> bool {
        self.slots
            .iter()
            .any(|s| matches!(s, Ok(_) | Err(SlotFault::Damaged(_))))
    }

    /// Why the drive's slots hold nothing usable, for a message.
    pub fn faults(&self) -> String {
        let say = |s: usize| match &self.slots[s] {
            Ok((h, _)) => format!("slot {s} generation {}", h.generation),
            Err(f) => format!("slot {s} {f}"),
        };
        format!("{}; {}", say(0), say(1))
    }
}

/// One device's slots, as read by whoever looks for pools.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The path or URI it was read from.
    pub device: String,
    pub slots: DriveSlots,
    /// The device's size now: one smaller than its drive (a file cut
    /// short under a server) is left out, said why.
    pub size_bytes: u64,
}

/// A pool gathered from the devices that hold its drives.
#[derive(Clone, Debug)]
pub struct Gathered {
    /// The newest valid configuration on the devices present.
    pub pool: Pool,
    /// The drives found: (index in the devices given, drive name); a
    /// drive put in or added since by the same command or server: (its
    /// place in the pool's drives, name).
    pub present: Vec<(usize, String)>,
    /// Drives whose newest configuration is older than the pool's: (drive
    /// name, their generation). Their data is theirs still; the next change
    /// writes them the pool's configuration.
    pub behind: Vec<(String, u64)>,
    /// Devices with a pool slot but none valid: (device, why). Left out.
    pub damaged: Vec<(String, String)>,
    /// Drives of the pool that no device given holds.
    pub missing: Vec<String>,
}

/// Finds pool `name` (or the only pool) among `seen`, and which device
/// is which of its drives. Refuses, naming the devices, when two devices
/// claim one drive or two hold different configurations of one
/// generation.
pub fn gather(seen: &[Seen], name: Option<&str>) -> Result<Gathered, String> {
    gather_uuid(seen, pick_pool(seen, name)?)
}

/// The pools whose drives are among `seen`, each once.
pub fn pools_in(seen: &[Seen]) -> Vec<[u8; 16]> {
    let mut out: Vec<[u8; 16]> = Vec::new();
    for (_, h, _) in seen.iter().filter_map(|s| s.slots.newest()) {
        if !out.contains(&h.pool_uuid) {
            out.push(h.pool_uuid);
        }
    }
    out
}

/// [`gather`] for the pool of `uuid`, which some device of `seen` holds.
pub fn gather_uuid(seen: &[Seen], uuid: [u8; 16]) -> Result<Gathered, String> {
    fn valid(s: &Seen, uuid: [u8; 16]) -> Option<(u32, &Header, &Pool)> {
        s.slots.newest().filter(|(_, h, _)| h.pool_uuid == uuid)
    }
    let (_, top_header, pool) = seen
        .iter()
        .filter_map(|s| valid(s, uuid))
        .max_by_key(|(_, h, _)| h.generation)
        .expect("pick_pool found a device");
    let (top_header, pool) = (*top_header, pool.clone());
    let mut g = Gathered {
        pool,
        present: Vec::new(),
        behind: Vec::new(),
        damaged: Vec::new(),
        missing: Vec::new(),
    };
    for (i, s) in seen.iter().enumerate() {
        let Some((_, h, _)) = valid(s, uuid) else {
            if s.slots.newest().is_none() && s.slots.has_pool_slot() {
                g.damaged.push((s.device.clone(), s.slots.faults()));
            }
            continue;
        };
        g.place(seen, i, h, &top_header)?;
    }
    g.missing = g
        .pool
        .drives
        .iter()
        .filter(|d| !g.present.iter().any(|(_, n)| *n == d.name))
        .map(|d| d.name.clone())
        .collect();
    Ok(g)
}

impl Gathered {
    fn place(&mut self, seen: &[Seen], i: usize, h: &Header, top: &Header) -> Result<(), String> {
        if h.generation == top.generation && h.text_crc != top.text_crc {
            return Err(format!(
                "{} holds a different configuration of pool {} at the same generation {}: \
                 the pool was changed in two places; name the devices of one of them",
                seen[i].device, self.pool.name, h.generation
            ));
        }
        let Some(drive) = self.pool.drive_by_uuid(&h.drive_uuid) else {
            // A drive taken out of the pool by a later change.
            self.damaged.push((
                seen[i].device.clone(),
                format!(
                    "not a drive of pool {} at generation {} (its own configuration is generation {})",
                    self.pool.name, top.generation, h.generation
                ),
            ));
            return Ok(());
        };
        if seen[i].size_bytes < drive.size_bytes {
            self.damaged.push((
                seen[i].device.clone(),
                format!(
                    "drive {} of pool {} is {} bytes, its configuration says {}: cut short \
                     (truncated or resized?); left out",
                    drive.name, self.pool.name, seen[i].size_bytes, drive.size_bytes
                ),
            ));
            return Ok(());
        }
        if let Some((j, _)) = self.present.iter().find(|(_, n)| *n == drive.name) {
            return Err(format!(
                "{} and {} both say they are drive {} of pool {}: a copied drive? Name one",
                seen[*j].device, seen[i].device, drive.name, self.pool.name
            ));
        }
        if h.generation < top.generation {
            self.behind.push((drive.name.clone(), h.generation));
        }
        self.present.push((i, drive.name.clone()));
        Ok(())
    }
}

/// The uuid of the pool asked for: the pools of that name (or every pool)
/// among the devices must be exactly one.
fn pick_pool(seen: &[Seen], name: Option<&str>) -> Result<[u8; 16], String> {
    let mut pools: Vec<([u8; 16], String, Vec<&str>)> = Vec::new();
    for s in seen {
        let Some((_, h, p)) = s.slots.newest() else {
            continue;
        };
        if name.is_some_and(|n| n != p.name) {
            continue;
        }
        match pools.iter_mut().find(|(u, _, _)| *u == h.pool_uuid) {
            Some(entry) => entry.2.push(&s.device),
            None => pools.push((h.pool_uuid, p.name.clone(), vec![&s.device])),
        }
    }
    match (pools.len(), name) {
        (1, _) => Ok(pools[0].0),
        (0, Some(n)) => Err(format!(
            "no drive of a pool named {n:?} among the devices given"
        )),
        (0, None) => Err("no pool drive among the devices given".into()),
        _ => Err(format!(
            "the devices hold drives of {} pools: {}; name the pool or its devices",
            pools.len(),
            pools
                .iter()
                .map(|(u, n, d)| format!("{n} ({}, on {})", uuid_text(u), d.join(" ")))
                .collect::<Vec<_>>()
                .join("; ")
        )),
    }
}
