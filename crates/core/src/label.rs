//! The member label: the first [`LABEL_BYTES`] of every member.
//!
//! The byte table, the meaning of every state and the assembly rules are in
//! `docs/on-disk-format.md`; the offsets in [`at`] must match it (the test
//! `crates/core/tests/label_doc.rs` reads the document and checks).
//!
//! One validation function ([`Label::validate`]) serves both directions:
//! [`Label::encode`] asserts it, because writing a label that assembly would
//! refuse is a caller bug that must not reach a disk; [`Label::decode`] returns
//! its error, because a disk's bytes are untrusted input. A label that decodes
//! therefore satisfies every invariant documented on [`Label`], and decoding is
//! canonical: the bytes of any label that decodes are exactly what `encode`
//! writes for it. That is why reserved bytes must be zero and unknown codes are
//! refused rather than carried along.

use std::borrow::Cow;
use std::fmt;

use thiserror::Error;

use crate::level::{Level, ParityLayout};
use crate::units::SECTOR_BYTES;

pub use crate::format::{LABEL_BYTES, MAX_MEMBERS};

/// The first bytes of every label: readable in `hexdump -C`, and not all zero,
/// so a blank (zeroed) device never carries it. The trailing 0x01 keeps it out
/// of plain text files.
pub const LABEL_MAGIC: [u8; 8] = *b"PLATTER\x01";

/// Version of the byte layout below, the newest this build reads and
/// writes. Bumped on any change a reader of an older version would
/// misread; reserved bytes exist so that growth rarely needs it.
///
/// A label is written at the *oldest* version that holds it: version 1
/// unless a version-2 field is in use (the scheduled scrub's record), 3
/// when the volume keeps checksums, 4 when it keeps a partial parity log,
/// 5 while a slot records when its member left (`left_at_events`), 6
/// while a reshape runs ([`ReshapeRecord`]), 7 when its checksum pages are
/// sealed ([`Checksums::format`]), so a volume that never used them stays
/// readable by older builds. A build that knows only 2 must
/// refuse a volume with checksums (it would write data without them), one
/// that knows only 3 a volume with a log (it would write partial stripes
/// without their records), one that knows only 4 a member's departure (it
/// would clear the bitmap the member's return needs), one that knows only
/// 5 a volume in the middle of a reshape (it would read the bytes not yet
/// moved through the new layout), one that knows only 6 a volume with
/// sealed checksum pages (it would read their headers as entries).
pub const LABEL_FORMAT_VERSION: u32 = 7;

/// Version of the volume-to-member mapping arithmetic (`geometry`).
///
/// Linux 3.14 changed md's RAID-0 mapping for members of unequal size, and
/// arrays created before it were silently read with the new arithmetic. Any
/// change to how a volume offset maps to a member offset must bump this, and a
/// reader refuses versions it does not implement instead of guessing.
pub const LAYOUT_VERSION: u32 = 1;

/// Bytes available for the volume name (UTF-8, stored NUL-padded).
pub const NAME_MAX_BYTES: usize = 64;

// The label's fields do not overlap, and the slot table and checksum fit
// the label: a change to a limit that broke the format fails to compile.
const _: () = assert!(at::NAME + NAME_MAX_BYTES <= at::INTENT_REGION_STRIPES);
const _: () = assert!(at::READ_POLICY_ARG + 8 == at::SCRUB_STARTED_UNIX_SECONDS);
const _: () = assert!(at::SCRUB_LAST_FOUND_STRIPES + 8 == at::CHECKSUM_OFFSET_BYTES);
const _: () = assert!(at::CHECKSUM_ALGORITHM + 8 == at::PPL_OFFSET_BYTES);
const _: () = assert!(at::PPL_LEN_BYTES + 8 == at::RESHAPE_ID);
const _: () = assert!(at::RESHAPE_OLD_PARITY_LAYOUT + 1 == at::RESHAPE_RESERVED);
const _: () = assert!(at::RESHAPE_RESERVED + 6 == at::RESHAPE_OLD_DATA_OFFSET_BYTES);
const _: () = assert!(at::RESHAPE_OLD_DATA_OFFSET_BYTES + 8 == at::CHECKSUM_FORMAT);
const _: () = assert!(at::CHECKSUM_FORMAT + 8 == at::RESERVED_HEADER);
const _: () = assert!(at::RESERVED_HEADER <= at::SLOT_TABLE);
const _: () = assert!(at::RESERVED_TAIL <= at::CHECKSUM);
const _: () = assert!(at::CHECKSUM + 4 == LABEL_BYTES);

/// Byte offsets and sizes of the label fields (see `docs/on-disk-format.md`).
pub mod at {
    pub const MAGIC: usize = 0x000;
    pub const FORMAT_VERSION: usize = 0x008;
    pub const LAYOUT_VERSION: usize = 0x00C;
    pub const VOLUME_UUID: usize = 0x010;
    pub const MEMBER_UUID: usize = 0x020;
    pub const SLOT: usize = 0x030;
    pub const MEMBER_COUNT: usize = 0x034;
    pub const LEVEL: usize = 0x038;
    pub const PARITY_LAYOUT: usize = 0x039;
    pub const STATE: usize = 0x03A;
    pub const READ_POLICY: usize = 0x03B;
    pub const COPIES: usize = 0x03C;
    pub const INTERLEAVE_BYTES: usize = 0x040;
    pub const DATA_OFFSET_BYTES: usize = 0x048;
    pub const DATA_SIZE_BYTES: usize = 0x050;
    pub const VOLUME_SIZE_BYTES: usize = 0x058;
    pub const EVENT_COUNTER: usize = 0x060;
    pub const REBUILD_CHECKPOINT_BYTES: usize = 0x068;
    pub const CREATED_UNIX_SECONDS: usize = 0x070;
    pub const UPDATED_UNIX_SECONDS: usize = 0x078;
    pub const NAME: usize = 0x080;
    pub const INTENT_REGION_STRIPES: usize = 0x0C0;
    pub const READ_POLICY_ARG: usize = 0x0C8;
    /// Format version 2: the scheduled scrub's record ([`super::ScrubRecord`]),
    /// five u64s. Zero (reserved) in version 1.
    pub const SCRUB_STARTED_UNIX_SECONDS: usize = 0x0D0;
    pub const SCRUB_CURSOR_STRIPES: usize = 0x0D8;
    pub const SCRUB_FOUND_STRIPES: usize = 0x0E0;
    pub const SCRUB_COMPLETED_UNIX_SECONDS: usize = 0x0E8;
    pub const SCRUB_LAST_FOUND_STRIPES: usize = 0x0F0;
    /// Format version 3: where the per-block checksums are
    /// ([`super::Checksums`]). Zero in versions 1 and 2.
    pub const CHECKSUM_OFFSET_BYTES: usize = 0x0F8;
    pub const CHECKSUM_ALGORITHM: usize = 0x100;
    /// Format version 4: where the partial parity log is
    /// ([`super::Label::ppl`]). Zero in versions 1 to 3.
    pub const PPL_OFFSET_BYTES: usize = 0x108;
    pub const PPL_LEN_BYTES: usize = 0x110;
    /// Format version 6: the reshape in progress ([`super::ReshapeRecord`]).
    /// Zero in versions 1 to 5, and with no reshape.
    pub const RESHAPE_ID: usize = 0x118;
    pub const RESHAPE_POSITION_BYTES: usize = 0x120;
    pub const RESHAPE_OLD_INTERLEAVE_BYTES: usize = 0x128;
    pub const RESHAPE_OLD_MEMBER_COUNT: usize = 0x130;
    pub const RESHAPE_OLD_COPIES: usize = 0x134;
    pub const RESHAPE_OLD_LEVEL: usize = 0x138;
    pub const RESHAPE_OLD_PARITY_LAYOUT: usize = 0x139;
    /// Zero.
    pub const RESHAPE_RESERVED: usize = 0x13A;
    /// The old layout's data offset when the reshape moves it down into
    /// the room before the data (docs/reshape.md); 0 when it stays.
    pub const RESHAPE_OLD_DATA_OFFSET_BYTES: usize = 0x140;
    /// Zero: room for header fields.
    pub const CHECKSUM_FORMAT: usize = 0x148;
    pub const RESERVED_HEADER: usize = 0x150;
    pub const SLOT_TABLE: usize = 0x200;
    /// Zero in format version 1: room after the slot table.
    pub const RESERVED_TAIL: usize = SLOT_TABLE + super::MAX_MEMBERS as usize * SLOT_ENTRY_BYTES;
    /// CRC32C (Castagnoli) of bytes `[0, CHECKSUM)`.
    pub const CHECKSUM: usize = 0xFFC;

    /// One slot table entry; offsets below are relative to its start.
    pub const SLOT_ENTRY_BYTES: usize = 48;
    pub const ENTRY_MEMBER_UUID: usize = 0;
    pub const ENTRY_DATA_SIZE_BYTES: usize = 16;
    pub const ENTRY_STATE: usize = 24;
    /// Zero: room for per-slot fields.
    pub const ENTRY_RESERVED: usize = 25;
    /// Format version 5: the event counter of the label write that
    /// recorded the slot's member leaving ([`super::SlotEntry::left_at_events`]).
    /// Zero (reserved) before.
    pub const ENTRY_LEFT_AT_EVENTS: usize = 32;
    /// Zero: room after it.
    pub const ENTRY_RESERVED_TAIL: usize = 40;
}

/// The state of the whole volume, as its last writer left it.
///
/// Codes start at 1 so that zeroed bytes never read as a valid state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VolumeState {
    /// Shut down cleanly: every copy and parity block agrees.
    Clean,
    /// Writes may have been in flight; after a crash, redundancy must be
    /// resynchronised before it is trusted.
    Dirty,
    /// Running without one or more members the level needs for full
    /// redundancy.
    Degraded,
    /// A replacement member is being reconstructed; see
    /// `Label::rebuild_checkpoint_bytes`.
    Rebuilding,
}

impl VolumeState {
    pub const ALL: [VolumeState; 4] = [
        VolumeState::Clean,
        VolumeState::Dirty,
        VolumeState::Degraded,
        VolumeState::Rebuilding,
    ];

    /// The label's code; never renumber.
    pub fn code(self) -> u8 {
        match self {
            VolumeState::Clean => 1,
            VolumeState::Dirty => 2,
            VolumeState::Degraded => 3,
            VolumeState::Rebuilding => 4,
        }
    }

    pub fn from_code(code: u8) -> Option<VolumeState> {
        VolumeState::ALL.into_iter().find(|s| s.code() == code)
    }

    pub fn name(self) -> &'static str {
        match self {
            VolumeState::Clean => "clean",
            VolumeState::Dirty => "dirty",
            VolumeState::Degraded => "degraded",
            VolumeState::Rebuilding => "rebuilding",
        }
    }
}

impl fmt::Display for VolumeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The state of one slot in the slot table.
///
/// Codes start at 1 so that an unused (zeroed) table entry never reads as a
/// slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SlotState {
    /// In service and in sync.
    Active,
    /// Failed (an I/O error, or failed by the operator); not read or written.
    Faulty,
    /// A standby member that takes over when another slot fails.
    Spare,
    /// Empty: the member was taken out and nothing replaced it yet.
    Removed,
    /// Being reconstructed; in sync below the rebuild checkpoint.
    Rebuilding,
}

impl SlotState {
    pub const ALL: [SlotState; 5] = [
        SlotState::Active,
        SlotState::Faulty,
        SlotState::Spare,
        SlotState::Removed,
        SlotState::Rebuilding,
    ];

    /// The label's code; never renumber.
    pub fn code(self) -> u8 {
        match self {
            SlotState::Active => 1,
            SlotState::Faulty => 2,
            SlotState::Spare => 3,
            SlotState::Removed => 4,
            SlotState::Rebuilding => 5,
        }
    }

    pub fn from_code(code: u8) -> Option<SlotState> {
        SlotState::ALL.into_iter().find(|s| s.code() == code)
    }

    pub fn name(self) -> &'static str {
        match self {
            SlotState::Active => "active",
            SlotState::Faulty => "faulty",
            SlotState::Spare => "spare",
            SlotState::Removed => "removed",
            SlotState::Rebuilding => "rebuilding",
        }
    }
}

impl fmt::Display for SlotState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One entry of the slot table: which member holds a slot, as far as the
/// label's writer knew.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlotEntry {
    /// All zero (nil) only for a [`SlotState::Removed`] slot that nothing
    /// occupies.
    pub member_uuid: [u8; 16],
    pub data_size_bytes: u64,
    pub state: SlotState,
    /// For a member out of use (`Faulty`): the event counter of the label
    /// write that recorded its leaving; 0 when in use or not known. A
    /// member that comes back with its own label one behind it left after
    /// every write its own label saw, and missed only what the write-intent
    /// bitmap has kept since (`platter re-add`).
    pub left_at_events: u64,
}

/// The decoded label of one member.
///
/// Invariants (checked by [`Label::validate`], asserted by [`Label::encode`],
/// guaranteed by [`Label::decode`]):
/// - `layout_version == LAYOUT_VERSION`;
/// - `volume_uuid` and `member_uuid` are not nil;
/// - `level.min_members() <= member_count <= MAX_MEMBERS` and
///   `slot < member_count`;
/// - `copies` is `member_count` for mirror, `2..=member_count` for raid10 and 1
///   otherwise;
/// - `interleave_bytes` is a positive multiple of 512; `data_offset_bytes` is a
///   multiple of 4096 and at least 4096 (the label's own space);
///   `data_offset_bytes + data_size_bytes` fits in a u64;
/// - `name` is at most `NAME_MAX_BYTES` bytes and has no NUL;
/// - `slots.len() == member_count`; non-nil member uuids in it are distinct;
///   a nil uuid only in a `Removed` slot; `slots[slot]` names this member with
///   this member's `data_size_bytes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    pub layout_version: u32,
    pub volume_uuid: [u8; 16],
    pub member_uuid: [u8; 16],
    /// This member's slot: its position in the layout, whatever the order of
    /// the command line.
    pub slot: u32,
    pub member_count: u32,
    pub level: Level,
    /// Meaningful for raid5 and raid6; stored for every level.
    pub parity_layout: ParityLayout,
    /// Mirror: `member_count`; raid10: near copies; every other level: 1.
    pub copies: u32,
    pub interleave_bytes: u64,
    /// Where the data area starts on the member; `[LABEL_BYTES,
    /// data_offset_bytes)` is reserved (write-intent bitmap).
    pub data_offset_bytes: u64,
    /// This member's usable bytes after `data_offset_bytes`.
    pub data_size_bytes: u64,
    pub volume_size_bytes: u64,
    /// Bumped on every state change; the highest counter among a volume's
    /// members is the freshest truth at assembly.
    pub event_counter: u64,
    pub state: VolumeState,
    /// In `Rebuilding`: offset into the data area of the rebuilding slot(s)
    /// below which they are in sync, so a restart resumes there.
    pub rebuild_checkpoint_bytes: u64,
    /// 0 = auto; other codes belong to the read balancer
    /// ([`crate::balance::ReadPolicy::from_label`]). Any value is valid in
    /// the label; the server checks it.
    pub read_policy: u8,
    pub created_unix_seconds: u64,
    pub updated_unix_seconds: u64,
    pub name: String,
    /// Stripes per bit of the write-intent bitmap kept in `[LABEL_BYTES,
    /// data_offset_bytes)`; 0 = no bitmap (see [`crate::intent`]).
    pub intent_region_stripes: u64,
    /// The read policy's argument: the split threshold in bytes, the
    /// preferred slot, or the proximity window in bytes; 0 = the default
    /// (and 0 for policies without one). Checked like `read_policy`.
    pub read_policy_arg: u64,
    /// Where the scheduled scrub stands (format version 2; all zero when
    /// none ever ran).
    pub scrub: ScrubRecord,
    /// Per-block checksums of the data area (format version 3), or none.
    pub checksums: Option<Checksums>,
    /// The partial parity log's area on every member (format version 4;
    /// RAID-5/6 only), or none (`crate::ppl`).
    pub ppl: Option<crate::ppl::Layout>,
    /// The reshape in progress (format version 6), or none. While one
    /// runs, the fields above describe the new layout.
    pub reshape: Option<ReshapeRecord>,
    pub slots: Vec<SlotEntry>,
}

/// A reshape in progress (docs/reshape.md): the layout the volume is
/// moving from, and how far it has moved for good. The label's own
/// geometry fields are the layout it moves to; the old layout's members
/// are the first `old_member_count` slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReshapeRecord {
    /// Names this reshape (never 0): the undo record carries it, so a
    /// record left by another reshape is never put back.
    pub id: u64,
    /// Volume bytes below this are in the new layout for good: a restart
    /// resumes moving here. A whole number of new stripes.
    pub position_bytes: u64,
    pub old_level: Level,
    pub old_parity_layout: ParityLayout,
    pub old_copies: u32,
    pub old_interleave_bytes: u64,
    pub old_member_count: u32,
    /// Where the old layout's data starts on every member: the label's
    /// `data_offset_bytes` (the new layout's), or above it when the
    /// reshape moves the data down into the room before it.
    pub old_data_offset_bytes: u64,
}

impl ReshapeRecord {
    /// The old layout's geometry, over the label's first
    /// `old_member_count` slots.
    pub fn old_spec(&self, label: &Label) -> crate::geometry::GeometrySpec {
        crate::geometry::GeometrySpec {
            level: self.old_level,
            parity_layout: self.old_parity_layout,
            copies: self.old_copies,
            interleave_bytes: self.old_interleave_bytes,
            data_offset_bytes: self.old_data_offset_bytes,
            member_data_bytes: label.slots[..self.old_member_count as usize]
                .iter()
                .map(|s| s.data_size_bytes)
                .collect(),
        }
    }
}

/// Where and how a volume keeps its per-block checksums (`platter create
/// --checksums`; `crate::integrity`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checksums {
    pub algorithm: crate::integrity::Algorithm,
    /// How the pages are laid out (format version 7 for sealed pages).
    pub format: crate::integrity::PageFormat,
    /// Member offset of the checksum area: whole 4 KiB pages, after the
    /// bitmap and before `data_offset_bytes`.
    pub area_offset_bytes: u64,
}

/// The scheduled scrub's record (`platter serve --scrub-every`): a pass
/// in progress resumes at its cursor after a restart, and the time of the
/// last completed pass says how fresh the volume's last look is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScrubRecord {
    /// When the pass in progress began; 0 = none in progress.
    pub started_unix_seconds: u64,
    /// The next stripe the pass in progress checks.
    pub cursor_stripes: u64,
    /// Mismatched stripes the pass in progress found so far.
    pub found_stripes: u64,
    /// When the last complete pass (scheduled, or a whole-volume `check`
    /// or `repair`) ended; 0 = never.
    pub completed_unix_seconds: u64,
    /// Mismatched stripes that pass found.
    pub last_found_stripes: u64,
}

impl ScrubRecord {
    fn is_zero(&self) -> bool {
        *self == ScrubRecord::default()
    }

    /// A pass's cursor and findings only while it is in progress, the last
    /// pass's findings only once one completed.
    fn validate(&self) -> Result<(), LabelError> {
        if self.started_unix_seconds == 0 && (self.cursor_stripes != 0 || self.found_stripes != 0) {
            return Err(field_error(
                "scrub",
                "a cursor or findings with no pass in progress (started is 0)",
            ));
        }
        if self.completed_unix_seconds == 0 && self.last_found_stripes != 0 {
            return Err(field_error(
                "scrub",
                "findings of a last pass that never completed",
            ));
        }
        Ok(())
    }

    /// Format version 2's five u64s, 0x0D0-0x0F7.
    fn decode(b: &[u8; LABEL_BYTES]) -> ScrubRecord {
        ScrubRecord {
            started_unix_seconds: get_u64(b, at::SCRUB_STARTED_UNIX_SECONDS),
            cursor_stripes: get_u64(b, at::SCRUB_CURSOR_STRIPES),
            found_stripes: get_u64(b, at::SCRUB_FOUND_STRIPES),
            completed_unix_seconds: get_u64(b, at::SCRUB_COMPLETED_UNIX_SECONDS),
            last_found_stripes: get_u64(b, at::SCRUB_LAST_FOUND_STRIPES),
        }
    }
}

/// Why a member's label was refused. The messages are written to follow
/// "member /path: ".
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum LabelError {
    #[error("label too short: {len} bytes, a label is {LABEL_BYTES}")]
    TooShort { len: usize },
    #[error("no platter label (blank or foreign device)")]
    NotALabel,
    #[error(
        "label checksum mismatch (stored 0x{stored:08x}, computed 0x{computed:08x}): \
         the label is damaged"
    )]
    Checksum { stored: u32, computed: u32 },
    #[error(
        "label format version {0} is not supported (this platter reads version \
         {LABEL_FORMAT_VERSION}): written by a newer platter?"
    )]
    UnknownFormatVersion(u32),
    #[error(
        "layout version {0} is not supported (this platter maps version \
         {LAYOUT_VERSION}): written by a newer platter?"
    )]
    UnknownLayoutVersion(u32),
    #[error("invalid label field {field}: {detail}")]
    Field { field: &'static str, detail: String },
}

fn field_error(field: &'static str, detail: impl Into<String>) -> LabelError {
    LabelError::Field {
        field,
        detail: detail.into(),
    }
}

const NIL_UUID: [u8; 16] = [0; 16];

/// True when `bytes` does not start with the label magic: a blank (zeroed) or
/// foreign device, as opposed to a labelled one or a damaged label. A label
/// whose magic itself is damaged also reads as blank; `create` cannot tell
/// that from a foreign device, and neither can anyone else.
pub fn is_blank(bytes: &[u8]) -> bool {
    !bytes.starts_with(&LABEL_MAGIC)
}

/// The checksum a label's bytes should carry in their last four
/// (`at::CHECKSUM`): CRC32C of everything before them.
pub fn computed_checksum(bytes: &[u8; LABEL_BYTES]) -> u32 {
    crc32c::crc32c(&bytes[..at::CHECKSUM])
}

/// Checks a name for a new volume: it must fit the label and hold no
/// control characters (a newline or a terminal escape in a name would
/// garble every listing that shows it, or drive the operator's terminal).
pub fn check_new_name(name: &str) -> Result<(), String> {
    if name.len() > NAME_MAX_BYTES {
        return Err(format!(
            "is {} bytes long; at most {NAME_MAX_BYTES} bytes fit",
            name.len()
        ));
    }
    match name.chars().find(|c| c.is_control()) {
        Some(c) => Err(format!(
            "contains the control character {}; use printable characters",
            c.escape_default()
        )),
        None => Ok(()),
    }
}

/// A name read from a label, safe to print: control characters (which a
/// crafted label may hold, though `create` never writes them) are shown
/// escaped (`\n`, `\u{1b}`), everything else as it is.
pub fn printable(name: &str) -> Cow<'_, str> {
    if !name.chars().any(char::is_control) {
        return Cow::Borrowed(name);
    }
    Cow::Owned(
        name.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

impl Label {
    /// The volume's size as clients are told it, its layout holding
    /// `holds_bytes`: what the label says, when less (a convert by copy
    /// made its array in whole stripes of its own and kept the volume's
    /// size), else the layout's; 0 (never said) is the layout's.
    pub fn told_bytes(&self, holds_bytes: u64) -> u64 {
        match self.volume_size_bytes {
            0 => holds_bytes,
            said => said.min(holds_bytes),
        }
    }

    /// Checks every invariant listed on [`Label`].
    pub fn validate(&self) -> Result<(), LabelError> {
        self.validate_header()?;
        self.validate_slots()
    }

    fn validate_header(&self) -> Result<(), LabelError> {
        if self.layout_version != LAYOUT_VERSION {
            return Err(LabelError::UnknownLayoutVersion(self.layout_version));
        }
        self.validate_checksum_area()?;
        self.validate_ppl_area()?;
        if let Some(r) = &self.reshape {
            self.validate_reshape(r)?;
        }
        self.scrub.validate()?;
        self.validate_membership()?;
        self.validate_data_area()?;
        self.validate_name()
    }

    /// The checksum area (0x0F8-0x107, 0x148): between the label and the
    /// data area, on a page boundary.
    fn validate_checksum_area(&self) -> Result<(), LabelError> {
        let Some(c) = self.checksums else {
            return Ok(());
        };
        let area = c.format.area_bytes(self.data_size_bytes);
        if c.area_offset_bytes < LABEL_BYTES as u64
            || c.area_offset_bytes % crate::integrity::PAGE_BYTES != 0
            || c.area_offset_bytes
                .checked_add(area)
                .is_none_or(|end| end > self.data_offset_bytes)
        {
            return Err(field_error(
                "checksum_offset_bytes",
                format!(
                    "{} does not hold {area} bytes of checksums between the label and the data area at {}",
                    c.area_offset_bytes, self.data_offset_bytes
                ),
            ));
        }
        Ok(())
    }

    /// The partial parity log's area (0x108-0x117): on a parity level,
    /// whole blocks between the label and the data area, beside any
    /// checksums, and large enough for the interleave.
    fn validate_ppl_area(&self) -> Result<(), LabelError> {
        let Some(l) = self.ppl else {
            return Ok(());
        };
        let checksums = self.checksums.map(|c| {
            let area = c.format.area_bytes(self.data_size_bytes);
            (c.area_offset_bytes, c.area_offset_bytes + area)
        });
        let block = crate::ppl::BLOCK_BYTES;
        let end = l.offset_bytes.checked_add(l.len_bytes);
        if !self.level.is_parity() {
            return Err(field_error(
                "ppl_offset_bytes",
                format!(
                    "a partial parity log on {}, which has no parity",
                    self.level
                ),
            ));
        }
        if l.offset_bytes < LABEL_BYTES as u64
            || l.offset_bytes % block != 0
            || l.len_bytes % block != 0
            || l.len_bytes < crate::ppl::ring_bytes_min(self.interleave_bytes)
            || end.is_none_or(|e| e > self.data_offset_bytes)
            || checksums.is_some_and(|(a, b)| l.offset_bytes < b && a < end.unwrap_or(0))
        {
            return Err(field_error(
                "ppl_offset_bytes",
                format!(
                    "a log of {} bytes at {} does not fit whole blocks between the label and \
                     the data area at {} (beside any checksums), or is smaller than {} bytes",
                    l.len_bytes,
                    l.offset_bytes,
                    self.data_offset_bytes,
                    crate::ppl::ring_bytes_min(self.interleave_bytes)
                ),
            ));
        }
        Ok(())
    }

    /// The volume and its members (0x010-0x03F): uuids, the member count
    /// and this member's slot, the copies the level keeps.
    fn validate_membership(&self) -> Result<(), LabelError> {
        if self.volume_uuid == NIL_UUID {
            return Err(field_error("volume_uuid", "is nil (all zero)"));
        }
        if self.member_uuid == NIL_UUID {
            return Err(field_error("member_uuid", "is nil (all zero)"));
        }
        let min_members = self.level.min_members();
        if !(min_members..=MAX_MEMBERS).contains(&self.member_count) {
            return Err(field_error(
                "member_count",
                format!(
                    "{} is outside {min_members}..={MAX_MEMBERS} for {}",
                    self.member_count, self.level
                ),
            ));
        }
        if self.slot >= self.member_count {
            return Err(field_error(
                "slot",
                format!(
                    "{} is not below member_count {}",
                    self.slot, self.member_count
                ),
            ));
        }
        let copies_ok = match self.level {
            Level::Mirror => self.copies == self.member_count,
            Level::Raid10 => (2..=self.member_count).contains(&self.copies),
            Level::Concat | Level::Stripe | Level::Raid5 | Level::Raid6 => self.copies == 1,
        };
        if !copies_ok {
            let expected = match self.level {
                Level::Mirror => format!("{} (member_count)", self.member_count),
                Level::Raid10 => format!("2..={} (member_count)", self.member_count),
                _ => "1".to_string(),
            };
            return Err(field_error(
                "copies",
                format!(
                    "{} is invalid for {} (expected {expected})",
                    self.copies, self.level
                ),
            ));
        }
        Ok(())
    }

    /// The layout on the member (0x040-0x057): the interleave, and a data
    /// area after the label that fits a 64-bit device.
    fn validate_data_area(&self) -> Result<(), LabelError> {
        if self.interleave_bytes == 0 || !self.interleave_bytes.is_multiple_of(SECTOR_BYTES) {
            return Err(field_error(
                "interleave_bytes",
                format!(
                    "{} is not a positive multiple of 512",
                    self.interleave_bytes
                ),
            ));
        }
        if self.data_offset_bytes < LABEL_BYTES as u64
            || !self.data_offset_bytes.is_multiple_of(LABEL_BYTES as u64)
        {
            return Err(field_error(
                "data_offset_bytes",
                format!(
                    "{} is not a multiple of {LABEL_BYTES} at or after the label",
                    self.data_offset_bytes
                ),
            ));
        }
        if self
            .data_offset_bytes
            .checked_add(self.data_size_bytes)
            .is_none()
        {
            return Err(field_error(
                "data_size_bytes",
                format!(
                    "{} after data offset {} passes the end of a 64-bit device",
                    self.data_size_bytes, self.data_offset_bytes
                ),
            ));
        }
        Ok(())
    }

    fn validate_name(&self) -> Result<(), LabelError> {
        if self.name.len() > NAME_MAX_BYTES {
            return Err(field_error(
                "name",
                format!(
                    "{} bytes long, at most {NAME_MAX_BYTES} fit",
                    self.name.len()
                ),
            ));
        }
        // NUL is the padding; a name containing one would read back shorter.
        if self.name.contains('\0') {
            return Err(field_error("name", "contains a NUL byte"));
        }
        Ok(())
    }

    fn validate_reshape(&self, r: &ReshapeRecord) -> Result<(), LabelError> {
        let fail = |detail: String| Err(field_error("reshape", detail));
        if r.id == 0 {
            return fail("a reshape with id 0 (0 is no reshape)".into());
        }
        let min_members = r.old_level.min_members();
        if !(min_members..=self.member_count).contains(&r.old_member_count) {
            return fail(format!(
                "old member count {} is outside {min_members}..={} (the new count) for {}",
                r.old_member_count, self.member_count, r.old_level
            ));
        }
        let copies_ok = match r.old_level {
            Level::Mirror => r.old_copies == r.old_member_count,
            Level::Raid10 => (2..=r.old_member_count).contains(&r.old_copies),
            Level::Concat | Level::Stripe | Level::Raid5 | Level::Raid6 => r.old_copies == 1,
        };
        if !copies_ok {
            return fail(format!(
                "old copies {} are invalid for {} of {} members",
                r.old_copies, r.old_level, r.old_member_count
            ));
        }
        if r.old_interleave_bytes == 0 || !r.old_interleave_bytes.is_multiple_of(SECTOR_BYTES) {
            return fail(format!(
                "old interleave {} is not a positive multiple of 512",
                r.old_interleave_bytes
            ));
        }
        if r.old_data_offset_bytes < self.data_offset_bytes
            || !r.old_data_offset_bytes.is_multiple_of(LABEL_BYTES as u64)
            || r.old_data_offset_bytes
                .checked_add(self.data_size_bytes)
                .is_none()
        {
            return fail(format!(
                "old data offset {} is below the data offset {}, not whole 4 KiB pages, or \
                 too large (a reshape only moves the data down)",
                r.old_data_offset_bytes, self.data_offset_bytes
            ));
        }
        Ok(())
    }

    fn validate_slots(&self) -> Result<(), LabelError> {
        if self.slots.len() != self.member_count as usize {
            return Err(field_error(
                "slots",
                format!(
                    "{} entries for member_count {}",
                    self.slots.len(),
                    self.member_count
                ),
            ));
        }
        for (i, entry) in self.slots.iter().enumerate() {
            if entry.member_uuid == NIL_UUID {
                if entry.state != SlotState::Removed {
                    return Err(field_error(
                        "slots",
                        format!("slot {i} is {} but names no member", entry.state),
                    ));
                }
                continue;
            }
            // Two slots naming one member would map two layout positions onto
            // one device.
            if let Some(j) = self.slots[..i]
                .iter()
                .position(|e| e.member_uuid == entry.member_uuid)
            {
                return Err(field_error(
                    "slots",
                    format!("slots {j} and {i} name the same member"),
                ));
            }
        }
        let own = &self.slots[self.slot as usize];
        if own.member_uuid != self.member_uuid {
            return Err(field_error(
                "slots",
                format!(
                    "own slot {} names another member than this label's member_uuid",
                    self.slot
                ),
            ));
        }
        if own.data_size_bytes != self.data_size_bytes {
            return Err(field_error(
                "slots",
                format!(
                    "own slot {} says {} data bytes, the label says {}",
                    self.slot, own.data_size_bytes, self.data_size_bytes
                ),
            ));
        }
        Ok(())
    }

    /// The label's bytes, checksum included.
    ///
    /// Panics if the label breaks an invariant: writing it would leave a member
    /// that assembly refuses, and that is the caller's bug.
    pub fn encode(&self) -> [u8; LABEL_BYTES] {
        if let Err(e) = self.validate() {
            panic!("refusing to encode an invalid label: {e}");
        }
        let mut b = [0u8; LABEL_BYTES];
        b[at::MAGIC..at::MAGIC + 8].copy_from_slice(&LABEL_MAGIC);
        let sealed = self.checksums.is_some_and(|c| c.format.is_sealed());
        let version = match (self.ppl, self.checksums, self.scrub.is_zero()) {
            _ if sealed => 7,
            _ if self.reshape.is_some() => 6,
            _ if self.slots.iter().any(|e| e.left_at_events != 0) => 5,
            (Some(_), _, _) => 4,
            (None, Some(_), _) => 3,
            (None, None, false) => 2,
            (None, None, true) => 1,
        };
        put_u32(&mut b, at::FORMAT_VERSION, version);
        put_u32(&mut b, at::LAYOUT_VERSION, self.layout_version);
        b[at::VOLUME_UUID..at::VOLUME_UUID + 16].copy_from_slice(&self.volume_uuid);
        b[at::MEMBER_UUID..at::MEMBER_UUID + 16].copy_from_slice(&self.member_uuid);
        put_u32(&mut b, at::SLOT, self.slot);
        put_u32(&mut b, at::MEMBER_COUNT, self.member_count);
        b[at::LEVEL] = self.level.code();
        b[at::PARITY_LAYOUT] = self.parity_layout.code();
        b[at::STATE] = self.state.code();
        b[at::READ_POLICY] = self.read_policy;
        put_u32(&mut b, at::COPIES, self.copies);
        put_u64(&mut b, at::INTERLEAVE_BYTES, self.interleave_bytes);
        put_u64(&mut b, at::DATA_OFFSET_BYTES, self.data_offset_bytes);
        put_u64(&mut b, at::DATA_SIZE_BYTES, self.data_size_bytes);
        put_u64(&mut b, at::VOLUME_SIZE_BYTES, self.volume_size_bytes);
        put_u64(&mut b, at::EVENT_COUNTER, self.event_counter);
        put_u64(
            &mut b,
            at::REBUILD_CHECKPOINT_BYTES,
            self.rebuild_checkpoint_bytes,
        );
        put_u64(&mut b, at::CREATED_UNIX_SECONDS, self.created_unix_seconds);
        put_u64(&mut b, at::UPDATED_UNIX_SECONDS, self.updated_unix_seconds);
        b[at::NAME..at::NAME + self.name.len()].copy_from_slice(self.name.as_bytes());
        put_u64(
            &mut b,
            at::INTENT_REGION_STRIPES,
            self.intent_region_stripes,
        );
        put_u64(&mut b, at::READ_POLICY_ARG, self.read_policy_arg);
        let r = &self.scrub;
        put_u64(
            &mut b,
            at::SCRUB_STARTED_UNIX_SECONDS,
            r.started_unix_seconds,
        );
        put_u64(&mut b, at::SCRUB_CURSOR_STRIPES, r.cursor_stripes);
        put_u64(&mut b, at::SCRUB_FOUND_STRIPES, r.found_stripes);
        put_u64(
            &mut b,
            at::SCRUB_COMPLETED_UNIX_SECONDS,
            r.completed_unix_seconds,
        );
        put_u64(&mut b, at::SCRUB_LAST_FOUND_STRIPES, r.last_found_stripes);
        if let Some(c) = self.checksums {
            put_u64(&mut b, at::CHECKSUM_OFFSET_BYTES, c.area_offset_bytes);
            put_u64(
                &mut b,
                at::CHECKSUM_ALGORITHM,
                u64::from(c.algorithm.code()),
            );
            put_u64(&mut b, at::CHECKSUM_FORMAT, u64::from(c.format.code()));
        }
        if let Some(l) = self.ppl {
            put_u64(&mut b, at::PPL_OFFSET_BYTES, l.offset_bytes);
            put_u64(&mut b, at::PPL_LEN_BYTES, l.len_bytes);
        }
        if let Some(r) = self.reshape {
            put_u64(&mut b, at::RESHAPE_ID, r.id);
            put_u64(&mut b, at::RESHAPE_POSITION_BYTES, r.position_bytes);
            put_u64(
                &mut b,
                at::RESHAPE_OLD_INTERLEAVE_BYTES,
                r.old_interleave_bytes,
            );
            put_u32(&mut b, at::RESHAPE_OLD_MEMBER_COUNT, r.old_member_count);
            put_u32(&mut b, at::RESHAPE_OLD_COPIES, r.old_copies);
            b[at::RESHAPE_OLD_LEVEL] = r.old_level.code();
            b[at::RESHAPE_OLD_PARITY_LAYOUT] = r.old_parity_layout.code();
            if r.old_data_offset_bytes != self.data_offset_bytes {
                put_u64(
                    &mut b,
                    at::RESHAPE_OLD_DATA_OFFSET_BYTES,
                    r.old_data_offset_bytes,
                );
            }
        }
        for (i, entry) in self.slots.iter().enumerate() {
            let e = at::SLOT_TABLE + i * at::SLOT_ENTRY_BYTES;
            b[e + at::ENTRY_MEMBER_UUID..e + at::ENTRY_MEMBER_UUID + 16]
                .copy_from_slice(&entry.member_uuid);
            put_u64(&mut b, e + at::ENTRY_DATA_SIZE_BYTES, entry.data_size_bytes);
            b[e + at::ENTRY_STATE] = entry.state.code();
            put_u64(&mut b, e + at::ENTRY_LEFT_AT_EVENTS, entry.left_at_events);
        }
        let crc = crc32c::crc32c(&b[..at::CHECKSUM]);
        put_u32(&mut b, at::CHECKSUM, crc);
        b
    }

    /// Reads a label from the first [`LABEL_BYTES`] of `bytes` (longer input,
    /// such as a whole first megabyte, is fine).
    ///
    /// The checks run in the order that gives the most useful message: magic
    /// (is this ours at all), checksum (is it intact), format version, layout
    /// version (is it something this build understands), then every field.
    pub fn decode(bytes: &[u8]) -> Result<Label, LabelError> {
        let Some(b) = bytes.first_chunk::<LABEL_BYTES>() else {
            return Err(LabelError::TooShort { len: bytes.len() });
        };
        let format_version = decode_frame(b)?;
        let mut label = decode_header(b, format_version)?;
        // The header first: a bad member_count explains a bad-looking table,
        // and bounds the table's decoding.
        label.validate_header()?;
        label.slots = decode_slot_table(b, format_version, label.member_count)?;
        version_in_use(
            format_version,
            5,
            label.slots.iter().any(|e| e.left_at_events != 0),
            "is 5 with no slot's leaving recorded (a writer says 1 to 4)",
        )?;
        label.validate_slots()?;
        Ok(label)
    }
}

/// What is checked before any field: the magic, the checksum (0xFFC),
/// the format version and the layout version (0x008-0x00F). Returns the
/// format version.
fn decode_frame(b: &[u8; LABEL_BYTES]) -> Result<u32, LabelError> {
    if is_blank(b) {
        return Err(LabelError::NotALabel);
    }
    let stored = get_u32(b, at::CHECKSUM);
    let computed = crc32c::crc32c(&b[..at::CHECKSUM]);
    if stored != computed {
        return Err(LabelError::Checksum { stored, computed });
    }
    let format_version = get_u32(b, at::FORMAT_VERSION);
    if !(1..=LABEL_FORMAT_VERSION).contains(&format_version) {
        return Err(LabelError::UnknownFormatVersion(format_version));
    }
    // Before the fields: a newer layout may use codes this build lacks,
    // and "newer platter" is the message that helps.
    let layout_version = get_u32(b, at::LAYOUT_VERSION);
    if layout_version != LAYOUT_VERSION {
        return Err(LabelError::UnknownLayoutVersion(layout_version));
    }
    Ok(format_version)
}

/// The header, 0x010 to the slot table, and the reserved bytes after the
/// table: every field but the slots, which are left empty.
fn decode_header(b: &[u8; LABEL_BYTES], format_version: u32) -> Result<Label, LabelError> {
    let (level, parity_layout, state) = decode_codes(b)?;
    let name = decode_name(&b[at::NAME..at::NAME + NAME_MAX_BYTES])?;
    let newer = NewerFields::decode(b, format_version)?;
    Ok(Label {
        layout_version: get_u32(b, at::LAYOUT_VERSION),
        volume_uuid: get_uuid(b, at::VOLUME_UUID),
        member_uuid: get_uuid(b, at::MEMBER_UUID),
        slot: get_u32(b, at::SLOT),
        member_count: get_u32(b, at::MEMBER_COUNT),
        level,
        parity_layout,
        copies: get_u32(b, at::COPIES),
        interleave_bytes: get_u64(b, at::INTERLEAVE_BYTES),
        data_offset_bytes: get_u64(b, at::DATA_OFFSET_BYTES),
        data_size_bytes: get_u64(b, at::DATA_SIZE_BYTES),
        volume_size_bytes: get_u64(b, at::VOLUME_SIZE_BYTES),
        event_counter: get_u64(b, at::EVENT_COUNTER),
        state,
        rebuild_checkpoint_bytes: get_u64(b, at::REBUILD_CHECKPOINT_BYTES),
        read_policy: b[at::READ_POLICY],
        created_unix_seconds: get_u64(b, at::CREATED_UNIX_SECONDS),
        updated_unix_seconds: get_u64(b, at::UPDATED_UNIX_SECONDS),
        name,
        intent_region_stripes: get_u64(b, at::INTENT_REGION_STRIPES),
        read_policy_arg: get_u64(b, at::READ_POLICY_ARG),
        scrub: newer.scrub,
        checksums: newer.checksums,
        ppl: newer.ppl,
        reshape: newer.reshape,
        slots: Vec::new(),
    })
}

/// The codes at 0x038-0x03A: level, parity layout, volume state.
fn decode_codes(b: &[u8; LABEL_BYTES]) -> Result<(Level, ParityLayout, VolumeState), LabelError> {
    let level = Level::from_code(b[at::LEVEL])
        .ok_or_else(|| field_error("level", format!("unknown level code {}", b[at::LEVEL])))?;
    let parity_layout = ParityLayout::from_code(b[at::PARITY_LAYOUT]).ok_or_else(|| {
        field_error(
            "parity_layout",
            format!("unknown parity layout code {}", b[at::PARITY_LAYOUT]),
        )
    })?;
    let state = VolumeState::from_code(b[at::STATE]).ok_or_else(|| {
        field_error(
            "state",
            format!("unknown volume state code {}", b[at::STATE]),
        )
    })?;
    Ok((level, parity_layout, state))
}

/// The fields later format versions added to the header (0x0D0-0x14F).
struct NewerFields {
    scrub: ScrubRecord,
    checksums: Option<Checksums>,
    ppl: Option<crate::ppl::Layout>,
    reshape: Option<ReshapeRecord>,
}

impl NewerFields {
    /// Each field's bytes must be zero in the versions before its own
    /// (so must the header's and the tail's reserved bytes), and the
    /// label's version must be the oldest that holds what it uses.
    fn decode(b: &[u8; LABEL_BYTES], format_version: u32) -> Result<NewerFields, LabelError> {
        if format_version == 1 {
            check_zero(b, at::SCRUB_STARTED_UNIX_SECONDS..at::RESERVED_HEADER)?;
        }
        if format_version <= 2 {
            check_zero(b, at::CHECKSUM_OFFSET_BYTES..at::RESERVED_HEADER)?;
        }
        if format_version <= 3 {
            check_zero(b, at::PPL_OFFSET_BYTES..at::RESERVED_HEADER)?;
        }
        if format_version <= 5 {
            check_zero(b, at::RESHAPE_ID..at::CHECKSUM_FORMAT)?;
        }
        if format_version <= 6 {
            check_zero(b, at::CHECKSUM_FORMAT..at::RESERVED_HEADER)?;
        }
        let reshape = decode_reshape(b)?;
        let ppl = decode_ppl(b);
        let checksums = decode_checksums(b)?;
        check_zero(b, at::RESERVED_HEADER..at::SLOT_TABLE)?;
        let scrub = ScrubRecord::decode(b);
        let v = format_version;
        version_in_use(
            v,
            2,
            !scrub.is_zero(),
            "is 2 with no version-2 field in use (a writer says 1)",
        )?;
        version_in_use(
            v,
            3,
            checksums.is_some(),
            "is 3 with no checksums (a writer says 1 or 2)",
        )?;
        version_in_use(
            v,
            4,
            ppl.is_some(),
            "is 4 with no partial parity log (a writer says 1, 2 or 3)",
        )?;
        check_zero(b, at::RESERVED_TAIL..at::CHECKSUM)?;
        version_in_use(
            v,
            6,
            reshape.is_some(),
            "is 6 with no reshape in progress (a writer says 1 to 5)",
        )?;
        version_in_use(
            v,
            7,
            checksums.is_some_and(|c| c.format.is_sealed()),
            "is 7 with no sealed checksum pages (a writer says 1 to 6)",
        )?;
        Ok(NewerFields {
            scrub,
            checksums,
            ppl,
            reshape,
        })
    }
}

/// Canonical form: a label is written at the oldest version that holds
/// it, so `version` with none of its fields `in_use` is not one a writer
/// produces.
fn version_in_use(
    format_version: u32,
    version: u32,
    in_use: bool,
    detail: &'static str,
) -> Result<(), LabelError> {
    if format_version == version && !in_use {
        return Err(field_error("format_version", detail));
    }
    Ok(())
}

/// Format version 6's reshape record (0x118-0x147): none when its id is
/// 0, and then every byte of it is zero.
fn decode_reshape(b: &[u8; LABEL_BYTES]) -> Result<Option<ReshapeRecord>, LabelError> {
    check_zero(b, at::RESHAPE_RESERVED..at::RESHAPE_OLD_DATA_OFFSET_BYTES)?;
    let id = get_u64(b, at::RESHAPE_ID);
    if id == 0 {
        check_zero(b, at::RESHAPE_ID..at::CHECKSUM_FORMAT)?;
        return Ok(None);
    }
    let old_level = Level::from_code(b[at::RESHAPE_OLD_LEVEL]).ok_or_else(|| {
        field_error(
            "reshape",
            format!("unknown old level code {}", b[at::RESHAPE_OLD_LEVEL]),
        )
    })?;
    let old_parity_layout =
        ParityLayout::from_code(b[at::RESHAPE_OLD_PARITY_LAYOUT]).ok_or_else(|| {
            field_error(
                "reshape",
                format!(
                    "unknown old parity layout code {}",
                    b[at::RESHAPE_OLD_PARITY_LAYOUT]
                ),
            )
        })?;
    Ok(Some(ReshapeRecord {
        id,
        position_bytes: get_u64(b, at::RESHAPE_POSITION_BYTES),
        old_level,
        old_parity_layout,
        old_copies: get_u32(b, at::RESHAPE_OLD_COPIES),
        old_interleave_bytes: get_u64(b, at::RESHAPE_OLD_INTERLEAVE_BYTES),
        old_member_count: get_u32(b, at::RESHAPE_OLD_MEMBER_COUNT),
        old_data_offset_bytes: match get_u64(b, at::RESHAPE_OLD_DATA_OFFSET_BYTES) {
            0 => get_u64(b, at::DATA_OFFSET_BYTES),
            o => o,
        },
    }))
}

/// Format version 4's partial parity log (0x108-0x117): none when both
/// fields are 0.
fn decode_ppl(b: &[u8; LABEL_BYTES]) -> Option<crate::ppl::Layout> {
    match (
        get_u64(b, at::PPL_OFFSET_BYTES),
        get_u64(b, at::PPL_LEN_BYTES),
    ) {
        (0, 0) => None,
        (offset_bytes, len_bytes) => Some(crate::ppl::Layout {
            offset_bytes,
            len_bytes,
        }),
    }
}

/// Format version 3's checksums (0x0F8-0x107) and version 7's page format
/// (0x148): none when the algorithm is 0, and then the other two are 0.
fn decode_checksums(b: &[u8; LABEL_BYTES]) -> Result<Option<Checksums>, LabelError> {
    let code = get_u64(b, at::CHECKSUM_ALGORITHM);
    let checksums = match u8::try_from(code)
        .map_err(|_| u8::MAX)
        .and_then(crate::integrity::Algorithm::from_code)
    {
        Err(_) => {
            return Err(field_error(
                "checksum_algorithm",
                format!("unknown checksum algorithm code {code}"),
            ))
        }
        Ok(None) => {
            if get_u64(b, at::CHECKSUM_OFFSET_BYTES) != 0 {
                return Err(field_error(
                    "checksum_offset_bytes",
                    "is not 0 with no checksums",
                ));
            }
            None
        }
        Ok(Some(algorithm)) => {
            let code = get_u64(b, at::CHECKSUM_FORMAT);
            let format = u8::try_from(code)
                .ok()
                .and_then(crate::integrity::PageFormat::from_code)
                .ok_or_else(|| {
                    field_error(
                        "checksum_format",
                        format!("unknown checksum page format code {code}"),
                    )
                })?;
            Some(Checksums {
                algorithm,
                format,
                area_offset_bytes: get_u64(b, at::CHECKSUM_OFFSET_BYTES),
            })
        }
    };
    if checksums.is_none() && get_u64(b, at::CHECKSUM_FORMAT) != 0 {
        return Err(field_error("checksum_format", "is not 0 with no checksums"));
    }
    Ok(checksums)
}

/// The slot table (0x200-0xDFF): `member_count` entries, the rest zero.
fn decode_slot_table(
    b: &[u8; LABEL_BYTES],
    format_version: u32,
    member_count: u32,
) -> Result<Vec<SlotEntry>, LabelError> {
    let used_slots = member_count as usize;
    let mut slots = Vec::with_capacity(used_slots);
    for i in 0..MAX_MEMBERS as usize {
        let e = at::SLOT_TABLE + i * at::SLOT_ENTRY_BYTES;
        if i < used_slots {
            slots.push(decode_slot_entry(b, e, i, format_version)?);
        } else if b[e..e + at::SLOT_ENTRY_BYTES].iter().any(|&x| x != 0) {
            return Err(field_error(
                "slots",
                format!("unused slot {i} (member_count {used_slots}) is not zero"),
            ));
        }
    }
    Ok(slots)
}

/// Slot `i`'s entry, at `e`; `left_at_events` is format version 5's.
fn decode_slot_entry(
    b: &[u8; LABEL_BYTES],
    e: usize,
    i: usize,
    format_version: u32,
) -> Result<SlotEntry, LabelError> {
    let state_code = b[e + at::ENTRY_STATE];
    let state = SlotState::from_code(state_code).ok_or_else(|| {
        field_error(
            "slots",
            format!("slot {i} has unknown state code {state_code}"),
        )
    })?;
    check_zero(b, e + at::ENTRY_RESERVED..e + at::ENTRY_LEFT_AT_EVENTS)?;
    if format_version < 5 {
        check_zero(b, e + at::ENTRY_LEFT_AT_EVENTS..e + at::ENTRY_RESERVED_TAIL)?;
    }
    check_zero(b, e + at::ENTRY_RESERVED_TAIL..e + at::SLOT_ENTRY_BYTES)?;
    Ok(SlotEntry {
        member_uuid: get_uuid(b, e + at::ENTRY_MEMBER_UUID),
        data_size_bytes: get_u64(b, e + at::ENTRY_DATA_SIZE_BYTES),
        state,
        left_at_events: get_u64(b, e + at::ENTRY_LEFT_AT_EVENTS),
    })
}

/// The name up to its first NUL. Everything after must be NUL too, or the
/// label would not re-encode to the same bytes.
fn decode_name(raw: &[u8]) -> Result<String, LabelError> {
    let len = raw.iter().position(|&x| x == 0).unwrap_or(raw.len());
    if raw[len..].iter().any(|&x| x != 0) {
        return Err(field_error(
            "name",
            format!("bytes after the terminating NUL at {len} are not zero"),
        ));
    }
    String::from_utf8(raw[..len].to_vec())
        .map_err(|e| field_error("name", format!("is not UTF-8 ({e})")))
}

fn check_zero(b: &[u8; LABEL_BYTES], range: std::ops::Range<usize>) -> Result<(), LabelError> {
    match b[range.clone()].iter().position(|&x| x != 0) {
        None => Ok(()),
        Some(i) => Err(field_error(
            "reserved",
            format!(
                "byte 0x{:03x} is 0x{:02x}; reserved bytes are zero",
                range.start + i,
                b[range.start + i]
            ),
        )),
    }
}

fn put_u32(b: &mut [u8; LABEL_BYTES], offset: usize, value: u32) {
    b[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
}

fn put_u64(b: &mut [u8; LABEL_BYTES], offset: usize, value: u64) {
    b[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
}

// The `try_into`s below cannot fail: offsets are constants inside the array,
// and the slices have exactly the target length.
fn get_u32(b: &[u8; LABEL_BYTES], offset: usize) -> u32 {
    u32::from_le_bytes(b[offset..offset + 4].try_into().expect("4 bytes"))
}

fn get_u64(b: &[u8; LABEL_BYTES], offset: usize) -> u64 {
    u64::from_le_bytes(b[offset..offset + 8].try_into().expect("8 bytes"))
}

fn get_uuid(b: &[u8; LABEL_BYTES], offset: usize) -> [u8; 16] {
    b[offset..offset + 16].try_into().expect("16 bytes")
}

#[cfg(test)]
mod tests;

impl Label {
    /// The label the member in `slot` carries, derived from this one: the
    /// volume-wide fields and the slot table are shared, the rest is the
    /// slot's own.
    pub fn for_slot(&self, slot: u32) -> Label {
        let entry = &self.slots[slot as usize];
        Label {
            slot,
            member_uuid: entry.member_uuid,
            data_size_bytes: entry.data_size_bytes,
            ..self.clone()
        }
    }
}
