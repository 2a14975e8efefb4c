//! Moving a live volume from one geometry to another (docs/reshape.md):
//! where it is safe to write, and the order of steps that keeps every byte
//! readable across a crash at any point. Sans-I/O: [`Reshape`] says what
//! to do next ([`Step`]) and the caller does it (the engine; the tests'
//! model of members that lose unflushed writes).
//!
//! The volume is moved front to back in windows of whole new stripes.
//! Volume bytes below `position` are in the new layout, the rest in the
//! old. The labels hold `durable`, at most `position`: after a crash the
//! move starts again there, reading the old layout. So a window may only
//! overwrite member bytes whose old contents are not needed to read
//! volume bytes at or after `durable` ([`Plan::old_needed_from`]); where
//! no window is safe even with `durable` brought up to `position` (at the
//! start of a grow, where the new layout's rows are written over old rows
//! not yet moved), the bytes about to be overwritten are first saved in
//! an undo record ([`UndoRecord`]) and put back by a restart that finds it.

mod live;
mod remedy;
mod target;
mod undo;

pub use live::{Action, Reshaping, Setup};
pub use remedy::remedies;
pub use target::{
    q_member_label, q_on_added_member, redundancy_lost, refuse_to_begin, reshaped_label, target,
    Asked,
};

pub use undo::{UndoError, UndoRecord, UNDO_HEADER_BYTES};

use crate::geometry::Geometry;
use crate::level::Level;
use std::fmt;

/// Why a reshape cannot be planned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReshapeError(pub String);

impl fmt::Display for ReshapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReshapeError {}

/// The two layouts and where undo records live.
#[derive(Clone, Debug)]
pub struct Plan {
    old: Geometry,
    new: Geometry,
    undo: Option<UndoArea>,
    /// The end of the rows the new layout writes on any member: a RAID-10
    /// whose chunks do not fill its last stripe writes none past it (seed
    /// 917 of reshape_live read an undo image past a member's end there).
    new_rows_end_bytes: u64,
    /// How far below the old layout's data the new layout's starts on
    /// every member (the old data offset less the new): the new layout
    /// may run this far ahead of what the old still needs.
    lead_bytes: u64,
}

/// Where a reshape keeps its undo records (docs/reshape.md, "Where a
/// backup is needed"). Offsets are member bytes from the member's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UndoArea {
    /// A grow: one record imaging every old member, at the end of the
    /// first added member's data area, which the new layout reaches last.
    Added {
        slot: u32,
        offset_bytes: u64,
        bytes: u64,
    },
    /// A layout that never pulls ahead of the old one (an interleave or
    /// parity layout change, RAID-5 to the ordinary RAID-6 layouts): each
    /// old member keeps the record of its own bytes in its reserved area,
    /// just before the data offset (no bitmap is kept while the layout
    /// changes; the area lies past both layouts' bitmaps).
    Reserved { offset_bytes: u64, bytes: u64 },
}

impl UndoArea {
    pub fn offset_bytes(&self) -> u64 {
        match *self {
            UndoArea::Added { offset_bytes, .. } | UndoArea::Reserved { offset_bytes, .. } => {
                offset_bytes
            }
        }
    }
    pub fn bytes(&self) -> u64 {
        match *self {
            UndoArea::Added { bytes, .. } | UndoArea::Reserved { bytes, .. } => bytes,
        }
    }

    /// The slots whose area may hold a record, given the old layout's
    /// members: a restart reads each.
    pub fn holders(&self, old_members: u32) -> std::ops::Range<u32> {
        match *self {
            UndoArea::Added { slot, .. } => slot..slot + 1,
            UndoArea::Reserved { .. } => 0..old_members,
        }
    }

    /// Whether a record imaging `span` on `old_members` members fits.
    fn fits(&self, span: Span, old_members: u32) -> bool {
        let image = span.end_bytes - span.start_bytes;
        let images = match self {
            UndoArea::Added { .. } => u64::from(old_members),
            UndoArea::Reserved { .. } => 1,
        };
        image
            .checked_mul(images)
            .and_then(|b| b.checked_add(UNDO_HEADER_BYTES))
            .is_some_and(|b| b <= self.bytes())
    }
}

/// The first member byte a reshape may keep backups in before the data
/// offset: past the label and the write-intent bitmap of either layout
/// (`intent_region_stripes` from the label; 0 for none). A bitmap too
/// large to fit is the whole reserved area's.
pub fn reserved_from_bytes(old: &Geometry, new: &Geometry, intent_region_stripes: u64) -> u64 {
    let label_end = crate::intent::INTENT_OFFSET_BYTES;
    let bitmap = |g: &Geometry| match crate::intent::IntentLayout::new(g, intent_region_stripes) {
        Ok(Some(layout)) => label_end + layout.area_bytes(),
        Ok(None) => label_end,
        Err(_) => g.spec().data_offset_bytes,
    };
    bitmap(old).max(bitmap(new))
}

/// Member bytes one new stripe writes, the same on every member, from the
/// new layout's data offset: `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start_bytes: u64,
    pub end_bytes: u64,
}

/// Rows (of the geometry's interleave) one stripe spans on each member.
fn rows_per_stripe(g: &Geometry) -> u64 {
    match g.level() {
        Level::Mirror | Level::Raid10 => {
            u64::from(g.data_per_stripe()) * u64::from(g.copies()) / u64::from(g.members())
        }
        _ => 1,
    }
}

impl Plan {
    /// Checks that `old` can move to `new` in place: the same members in
    /// the same slots (more may be added after them), the same data
    /// offset or a lower one (not below `reserved_from_bytes`), no less
    /// room for data, and a level whose rows advance with the volume
    /// offset (not concat, which grows without moving). Member bytes from
    /// `reserved_from_bytes` ([`reserved_from_bytes`]) to the new data
    /// offset may keep backups.
    pub fn new(
        old: Geometry,
        new: Geometry,
        reserved_from_bytes: u64,
    ) -> Result<Plan, ReshapeError> {
        let lead_bytes = Self::check_shapes(&old, &new, reserved_from_bytes)?;
        let used = (0..new.members()).map(|m| new.member_used_bytes(m)).max();
        let data = new.spec().member_data_bytes.iter().copied().min();
        let mut plan = Plan {
            new_rows_end_bytes: used.unwrap_or(0).min(data.unwrap_or(0)),
            old,
            new,
            undo: None,
            lead_bytes,
        };
        let critical = plan.critical_stripes()?;
        if critical.most == 0 {
            return Ok(plan);
        }
        let span = plan.new_span(0);
        let image = (span.end_bytes - span.start_bytes) * critical.most;
        plan.undo = Some(
            if critical.pulls_ahead && plan.new.members() > plan.old.members() {
                plan.undo_on_added(&critical, image)?
            } else {
                plan.undo_in_reserved(&critical, image, reserved_from_bytes)?
            },
        );
        Ok(plan)
    }

    /// The refusals that need no plan: a concat, members taken away, a
    /// data offset moved up or into the label, members moved or resized,
    /// a smaller volume. Returns the bytes the data offset moves down.
    fn check_shapes(
        old: &Geometry,
        new: &Geometry,
        reserved_from_bytes: u64,
    ) -> Result<u64, ReshapeError> {
        let err = |s: String| Err(ReshapeError(s));
        if old.level() == Level::Concat || new.level() == Level::Concat {
            return err(
                "a concat is grown by adding members at its end, without moving data; \
                 it cannot be reshaped to or from another layout: create a volume of the \
                 layout wanted and copy the data to it (nbdcopy)"
                    .into(),
            );
        }
        let (n_old, n_new) = (old.members(), new.members());
        if n_new < n_old {
            return err(format!(
                "a reshape cannot take members away ({n_old} now, {n_new} asked): create a \
                 volume of {n_new} members and copy the data to it (nbdcopy)"
            ));
        }
        let (old_offset, new_offset) = (old.spec().data_offset_bytes, new.spec().data_offset_bytes);
        let Some(lead_bytes) = old_offset.checked_sub(new_offset) else {
            return err(format!(
                "the data offset can only move down, into the room before the data \
                 ({old_offset} now, {new_offset} asked)"
            ));
        };
        if lead_bytes > 0 && new_offset < reserved_from_bytes.div_ceil(4096) * 4096 {
            return err(format!(
                "a data offset of {new_offset} would overlap the label and write-intent \
                 bitmap (which end at {reserved_from_bytes})"
            ));
        }
        if new.spec().member_data_bytes[..n_old as usize] != old.spec().member_data_bytes[..] {
            return err("the members already in the volume must keep their slots and sizes".into());
        }
        if new.volume_size_bytes() < old.volume_size_bytes() {
            return err(format!(
                "the new layout holds {} bytes, less than the volume's {}: shrinking is not \
                 a reshape (add a member in the same reshape, or create a smaller volume \
                 and copy the data to it)",
                new.volume_size_bytes(),
                old.volume_size_bytes()
            ));
        }
        Ok(lead_bytes)
    }

    /// The backup goes at the end of the added member's data, when that
    /// holds it clear of the critical windows' new stripes.
    fn undo_on_added(&self, critical: &Critical, image: u64) -> Result<UndoArea, ReshapeError> {
        let err = |s: String| Err(ReshapeError(s));
        let n_old = self.old.members();
        debug_assert!(self.new.members() > n_old && critical.pulls_ahead);
        let bytes = (UNDO_HEADER_BYTES + image * u64::from(n_old)).div_ceil(4096) * 4096;
        let used = self.new.member_used_bytes(n_old);
        if bytes > used / 2 {
            return err(format!(
                "the added member's {used} bytes of data are too few for a backup of \
                     {bytes} bytes: add one of at least {} bytes of data",
                bytes * 2
            ));
        }
        let start = (used - bytes) / 4096 * 4096;
        if self.new_span(critical.end - 1).end_bytes > start {
            return err(format!(
                "the added member is too small to hold a backup of {bytes} bytes beside \
                     the first {} stripes of the new layout: add a larger one, or ask for a \
                     smaller interleave",
                critical.end
            ));
        }
        Ok(UndoArea::Added {
            slot: n_old,
            offset_bytes: self.new.spec().data_offset_bytes + start,
            bytes,
        })
    }

    /// The backup goes in the room every member has before its data, past
    /// the label and bitmap.
    fn undo_in_reserved(
        &self,
        critical: &Critical,
        image: u64,
        reserved_from_bytes: u64,
    ) -> Result<UndoArea, ReshapeError> {
        let err = |s: String| Err(ReshapeError(s));
        let (n_old, n_new) = (self.old.members(), self.new.members());
        let data_offset = self.new.spec().data_offset_bytes;
        let from = reserved_from_bytes.div_ceil(4096) * 4096;
        let room = data_offset.saturating_sub(from);
        let need = UNDO_HEADER_BYTES + image;
        if need > room {
            let why = if critical.pulls_ahead {
                "the first windows overwrite data they have not moved yet"
            } else {
                "every window overwrites data it has not moved yet"
            };
            return err(format!(
                "{why} and needs a backup of {need} bytes per member; the members have \
                 {room} bytes free before their data (data offset {data_offset}{}){}",
                if from > crate::intent::INTENT_OFFSET_BYTES {
                    ", after the write-intent bitmap"
                } else {
                    ""
                },
                if n_new == n_old && critical.pulls_ahead {
                    ": add a member in the same reshape, ask for a smaller interleave, or copy \
                     the data to a volume created with a larger --reserve"
                } else {
                    ": ask for a smaller interleave, or copy the data to a volume created with \
                     a larger --reserve"
                }
            ));
        }
        Ok(UndoArea::Reserved {
            offset_bytes: from,
            bytes: room,
        })
    }

    /// The plan for moving `old` to `new` (which has `old`'s data offset)
    /// on the same members, or with members added. Where every window
    /// would need a backup (an interleave or parity layout change) and
    /// half the room before the data lets the new layout run ahead of the
    /// old by enough, the new layout starts that much lower instead, as
    /// md moves `data_offset`: nothing is backed up, each byte is read
    /// and written once. The other half stays for the next such reshape.
    pub fn choose(
        old: Geometry,
        new: Geometry,
        reserved_from_bytes: u64,
    ) -> Result<Plan, ReshapeError> {
        let same = Plan::new(old.clone(), new.clone(), reserved_from_bytes);
        if !matches!(
            same.as_ref().map(Plan::undo_area),
            Ok(Some(UndoArea::Reserved { .. })) | Err(_)
        ) {
            return same;
        }
        let offset = old.spec().data_offset_bytes;
        let room = offset.saturating_sub(reserved_from_bytes.div_ceil(4096) * 4096);
        let lead = room / 2 / 4096 * 4096;
        let mut spec = new.spec().clone();
        spec.data_offset_bytes = offset - lead;
        let Ok(lower) = Geometry::new(spec) else {
            return same;
        };
        match Plan::new(old, lower, reserved_from_bytes) {
            Ok(plan) if plan.undo.is_none() && lead >= 2 * plan.lead_needed_bytes() => Ok(plan),
            _ => same,
        }
    }

    /// The least lead ([`Plan::choose`]) with which every window of the
    /// first stripes can be written with nothing backed up, `u64::MAX`
    /// for a layout that falls behind the old one for good (less data per
    /// member byte: no lead suffices over a large volume).
    fn lead_needed_bytes(&self) -> u64 {
        let per_row = |g: &Geometry| {
            (
                u128::from(g.stripe_data_bytes()),
                u128::from(rows_per_stripe(g) * g.interleave_bytes()),
            )
        };
        let ((old_data, old_row), (new_data, new_row)) = (per_row(&self.old), per_row(&self.new));
        if new_data * old_row < old_data * new_row {
            return u64::MAX;
        }
        let sb = self.stripe_bytes();
        (0..self.new.stripes().min(CRITICAL_SCAN_STRIPES))
            .map(|s| {
                self.new_span(s)
                    .end_bytes
                    .saturating_sub(self.old_needed_from(s * sb))
            })
            .max()
            .unwrap_or(0)
    }

    pub fn old(&self) -> &Geometry {
        &self.old
    }
    /// How much lower the new layout's data starts than the old's.
    pub fn lead_bytes(&self) -> u64 {
        self.lead_bytes
    }
    pub fn new_geometry(&self) -> &Geometry {
        &self.new
    }

    /// Where undo records live; `None` when no step needs one.
    pub fn undo_area(&self) -> Option<UndoArea> {
        self.undo
    }

    /// Bytes of volume data in one new stripe: windows are made of these.
    pub fn stripe_bytes(&self) -> u64 {
        self.new.stripe_data_bytes()
    }

    /// Bytes to move: the whole new volume (past the old size, the new
    /// layout is written with zeros so that its parity is right).
    pub fn total_bytes(&self) -> u64 {
        self.new.volume_size_bytes()
    }

    /// The member bytes new stripe `stripe` writes.
    pub fn new_span(&self, stripe: u64) -> Span {
        let rows = rows_per_stripe(&self.new);
        let il = self.new.interleave_bytes();
        assert!(
            stripe < self.new.stripes(),
            "new stripe {stripe} past the end"
        );
        Span {
            start_bytes: stripe * rows * il,
            end_bytes: ((stripe + 1) * rows * il).min(self.new_rows_end_bytes),
        }
    }

    /// The lowest member byte (from the old data offset) whose old contents
    /// are still needed once `durable` bytes are moved for good: the old
    /// stripe holding `durable` onwards. `u64::MAX` once everything old is.
    pub fn old_needed_from(&self, durable_bytes: u64) -> u64 {
        if durable_bytes >= self.old.volume_size_bytes() {
            return u64::MAX;
        }
        let stripe = durable_bytes / self.old.stripe_data_bytes();
        stripe * rows_per_stripe(&self.old) * self.old.interleave_bytes()
    }

    /// The end of the volume bytes whose old layout lies in member bytes
    /// below `end_bytes` (whole old stripes): what a window writing up to
    /// there destroys in the old layout.
    pub fn old_bytes_below(&self, end_bytes: u64) -> u64 {
        let row_bytes = rows_per_stripe(&self.old) * self.old.interleave_bytes();
        let stripes = end_bytes.div_ceil(row_bytes);
        stripes
            .saturating_mul(self.old.stripe_data_bytes())
            .min(self.old.volume_size_bytes())
    }

    /// How many new stripes from `first` can be written with `durable`
    /// bytes moved for good, without overwriting anything still needed,
    /// at most `max`. The new layout's rows start `lead_bytes` lower on
    /// the members than the old's.
    pub fn safe_stripes(&self, first: u64, durable_bytes: u64, max: u64) -> u64 {
        let needed = self
            .old_needed_from(durable_bytes)
            .saturating_add(self.lead_bytes);
        let stripes = self.new.stripes();
        let mut n = 0;
        // Bounded by `max` and the volume's stripes.
        while n < max && first + n < stripes {
            if self.new_span(first + n).end_bytes > needed {
                break;
            }
            n += 1;
        }
        n
    }

    /// Whether writing new stripes `[first, first + count)` destroys the
    /// old layout of nothing past the window itself: bytes past it stay in
    /// the old layout, and must stay readable there.
    pub fn window_holds_what_it_overwrites(&self, first: u64, count: u64) -> bool {
        assert!(count > 0, "a window has stripes");
        let end = self
            .new_span(first + count - 1)
            .end_bytes
            .saturating_sub(self.lead_bytes);
        let window_end = ((first + count) * self.stripe_bytes()).min(self.total_bytes());
        self.old_bytes_below(end) <= window_end
    }

    /// New stripes from `first` that must be copied together, with an
    /// undo record, where no window is safe: the fewest whose writes
    /// destroy the old layout of nothing past them. `None` if no window
    /// of up to [`CRITICAL_STRIPES_MAX`] does.
    pub fn critical_window(&self, first: u64) -> Option<u64> {
        assert!(first < self.new.stripes());
        let left = self.new.stripes() - first;
        (1..=CRITICAL_STRIPES_MAX.min(left))
            .find(|&k| self.window_holds_what_it_overwrites(first, k))
    }

    /// The critical windows among the first 64 Ki stripes: the undo area
    /// is sized for the largest. A layout that pulls ahead needs them only
    /// at its start; one that does not (the same data per row), in every
    /// window. The reshape checks each window as it goes, and stops rather
    /// than overwrite without a backup.
    fn critical_stripes(&self) -> Result<Critical, ReshapeError> {
        let scanned = self.new.stripes().min(CRITICAL_SCAN_STRIPES);
        let sb = self.stripe_bytes();
        let (mut most, mut end) = (0, 0);
        for s in 0..scanned {
            if self.safe_stripes(s, s * sb, 1) > 0 {
                continue;
            }
            let k = self.critical_window(s).ok_or_else(|| {
                ReshapeError(format!(
                    "the new layout cannot be written in place over the old one (new stripe {s} \
                     overwrites data beyond {CRITICAL_STRIPES_MAX} stripes: the old and new \
                     interleaves do not line up)"
                ))
            })?;
            most = most.max(k);
            end = end.max(s + k);
        }
        Ok(Critical {
            most,
            end,
            pulls_ahead: end <= scanned / 2 && end < self.new.stripes(),
        })
    }
}

/// What [`Plan::critical_stripes`] found.
struct Critical {
    /// New stripes in the largest critical window; 0 for none.
    most: u64,
    /// The end of the last critical window, in new stripes.
    end: u64,
    /// Critical windows end early: the move then pulls ahead for good.
    pulls_ahead: bool,
}

/// The most new stripes one window with an undo record may take.
pub const CRITICAL_STRIPES_MAX: u64 = 64;
/// New stripes a plan looks at for windows that need an undo record: a
/// layout that pulls ahead of the old one (more data per row) needs them
/// only at its start, and one that does not is refused.
const CRITICAL_SCAN_STRIPES: u64 = 1 << 16;

/// What the caller does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Flush every member, then write the labels with `position_bytes` as
    /// the durable position (and flush them): the restart point moves.
    Persist { position_bytes: u64 },
    /// Save the before-image of member bytes `span` on every old member
    /// in an undo record for `position_bytes` (written and flushed on the
    /// undo slot) before the window there overwrites them.
    /// The window is `[position, position + len)`, the copy that follows.
    SaveUndo {
        position_bytes: u64,
        len_bytes: u64,
        span: Span,
    },
    /// Read volume bytes `[position, position + len)` through the old
    /// layout (zeros past its end) and write them, with parity, through
    /// the new. Clients are kept off those bytes meanwhile.
    Copy { position_bytes: u64, len_bytes: u64 },
    /// Everything is in the new layout and the labels say so.
    Done,
    /// The next window would overwrite old data it does not move, or
    /// needs a backup where there is no room for one: the reshape stops
    /// here, the volume whole and readable (a bug in the plan's checks,
    /// which refuse such reshapes up front where they can).
    Stuck { position_bytes: u64 },
}

/// A reshape in progress: what is moved, what is moved for good. Volume
/// bytes below `position_bytes` are read and written through the new
/// layout, the rest through the old one; a window being copied is neither
/// (the caller keeps clients off it).
#[derive(Clone, Debug)]
pub struct Reshape {
    plan: Plan,
    position_bytes: u64,
    durable_bytes: u64,
    /// New stripes copied in one window at most.
    window_stripes_max: u64,
    /// An undo record for the current position is saved.
    undo_saved: bool,
    /// A client write waits on `[durable, position)`: persist first.
    persist_wanted: bool,
}

impl Reshape {
    /// Starts, or resumes from the labels' durable position (which must
    /// be a whole number of new stripes: the labels only ever hold one).
    pub fn resume(plan: Plan, durable_bytes: u64, window_stripes_max: u64) -> Reshape {
        assert!(
            durable_bytes.is_multiple_of(plan.stripe_bytes())
                || durable_bytes >= plan.total_bytes(),
            "a durable position inside a stripe"
        );
        Reshape {
            plan,
            position_bytes: durable_bytes,
            durable_bytes,
            window_stripes_max: window_stripes_max.max(1),
            undo_saved: false,
            persist_wanted: false,
        }
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }
    pub fn position_bytes(&self) -> u64 {
        self.position_bytes
    }
    pub fn durable_bytes(&self) -> u64 {
        self.durable_bytes
    }

    /// Its own invariants: what is moved for good was moved, and neither
    /// passes the volume's end; a window is at least one stripe.
    pub fn check(&self) {
        assert!(
            self.durable_bytes <= self.position_bytes,
            "reshape: durable position {} past the position {}",
            self.durable_bytes,
            self.position_bytes
        );
        assert!(
            self.position_bytes <= self.plan.total_bytes(),
            "reshape: position {} past the end {}",
            self.position_bytes,
            self.plan.total_bytes()
        );
        assert!(self.window_stripes_max >= 1, "reshape: an empty window");
    }

    /// Whether a client write to `[offset, offset + len)` must wait for
    /// the next [`Step::Persist`]: it lands on bytes moved but not yet
    /// moved for good, which a crash would copy again from the old layout
    /// over it. Asking makes the next step a persist.
    pub fn write_must_wait(&mut self, offset_bytes: u64, len_bytes: u64) -> bool {
        let end = offset_bytes.saturating_add(len_bytes);
        let waits = offset_bytes < self.position_bytes && end > self.durable_bytes;
        self.persist_wanted |= waits;
        waits
    }

    /// Makes the next step a persist when anything is moved and not yet
    /// for good: a host that moves the restart point up now and then
    /// bounds what a crash makes it copy again.
    pub fn want_persist(&mut self) {
        self.persist_wanted |= self.durable_bytes < self.position_bytes;
    }

    /// Volume bytes clients must keep off between a [`Step::SaveUndo`]
    /// and the end of its [`Step::Copy`]: a write there after the image
    /// is taken would be undone by a restart that puts the image back.
    /// (During any copy the window is kept off as well; that is the
    /// caller's range lock around the step.)
    pub fn undo_window(&self) -> Option<(u64, u64)> {
        if !self.undo_saved {
            return None;
        }
        match self.next_step() {
            Step::Copy {
                position_bytes,
                len_bytes,
            } => Some((position_bytes, position_bytes + len_bytes)),
            _ => None,
        }
    }

    /// What to do next. The same step comes back until its `*_done` call.
    pub fn next_step(&self) -> Step {
        let total = self.plan.total_bytes();
        let sb = self.plan.stripe_bytes();
        if self.durable_bytes < self.position_bytes
            && (self.persist_wanted || self.position_bytes >= total)
        {
            return Step::Persist {
                position_bytes: self.position_bytes,
            };
        }
        if self.position_bytes >= total {
            return Step::Done;
        }
        // Windows are whole new stripes: the position stays on one.
        assert_eq!(self.position_bytes % sb, 0, "the position is on a stripe");
        let first = self.position_bytes / sb;
        let safe = self
            .plan
            .safe_stripes(first, self.durable_bytes, self.window_stripes_max);
        if safe > 0 {
            return self.copy(first, safe);
        }
        if self.durable_bytes < self.position_bytes {
            // Moving the restart point up frees what lies behind it.
            return Step::Persist {
                position_bytes: self.position_bytes,
            };
        }
        // Nothing behind to free: the fewest stripes that can go, with a
        // backup of what they overwrite.
        let stuck = Step::Stuck {
            position_bytes: self.position_bytes,
        };
        let Some(mut k) = self.plan.critical_window(first) else {
            return stuck;
        };
        let Some(area) = self.plan.undo_area() else {
            return stuck;
        };
        let n_old = self.plan.old.members();
        let span_of = |k: u64| Span {
            start_bytes: self.plan.new_span(first).start_bytes,
            end_bytes: self.plan.new_span(first + k - 1).end_bytes,
        };
        // The record must fit, and lie where the new layout has not
        // reached (the plan checked this for the stripes it looked at).
        let data_offset = self.plan.new.spec().data_offset_bytes;
        let fits = |span: Span| {
            area.fits(span, n_old)
                && match area {
                    UndoArea::Added { offset_bytes, .. } => {
                        data_offset + span.end_bytes <= offset_bytes
                    }
                    UndoArea::Reserved { .. } => true,
                }
        };
        if !fits(span_of(k)) {
            return stuck;
        }
        if matches!(area, UndoArea::Reserved { .. }) {
            // Every window needs a record here, and each costs two flushes
            // of every member: as many stripes as the area holds.
            let most = self.window_stripes_max.min(self.plan.new.stripes() - first);
            for j in k + 1..=most {
                if !fits(span_of(j)) {
                    break;
                }
                if self.plan.window_holds_what_it_overwrites(first, j) {
                    k = j;
                }
            }
        }
        let span = span_of(k);
        assert!(span.start_bytes < span.end_bytes, "a backup has bytes");
        if !self.undo_saved {
            let Step::Copy { len_bytes, .. } = self.copy(first, k) else {
                unreachable!("copy() is a copy");
            };
            return Step::SaveUndo {
                position_bytes: self.position_bytes,
                len_bytes,
                span,
            };
        }
        self.copy(first, k)
    }

    fn copy(&self, first: u64, stripes: u64) -> Step {
        let sb = self.plan.stripe_bytes();
        let position_bytes = first * sb;
        assert!(stripes > 0 && position_bytes < self.plan.total_bytes());
        let len_bytes = (stripes * sb).min(self.plan.total_bytes() - position_bytes);
        Step::Copy {
            position_bytes,
            len_bytes,
        }
    }

    pub fn persist_done(&mut self, position_bytes: u64) {
        assert!(position_bytes <= self.position_bytes);
        assert!(
            position_bytes >= self.durable_bytes,
            "the restart point moves up"
        );
        self.durable_bytes = position_bytes;
        self.persist_wanted = false;
        self.undo_saved = false;
    }

    pub fn undo_saved(&mut self, position_bytes: u64) {
        assert_eq!(
            position_bytes, self.position_bytes,
            "an undo for another window"
        );
        self.undo_saved = true;
    }

    pub fn copy_done(&mut self, position_bytes: u64, len_bytes: u64) {
        assert_eq!(position_bytes, self.position_bytes, "windows copy in order");
        assert!(len_bytes > 0 && position_bytes + len_bytes <= self.plan.total_bytes());
        self.position_bytes += len_bytes;
        // The undo record stays good only for the window it was made for.
        self.persist_wanted |= self.undo_saved;
    }
}
