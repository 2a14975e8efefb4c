//! Read balancing for levels with copies (mirror, RAID-10): which copy of a
//! chunk a client read goes to.
//!
//! The [`ReadPolicy`] is stored in the label (`read_policy` and
//! `read_policy_arg`, see `docs/on-disk-format.md`) and can be changed while
//! the volume runs. The [`Balancer`] keeps what the policies look at: per
//! member, the member I/Os outstanding and the member offset where the last
//! read or write issued to it ended (where its head will be). The volume
//! tells it about every member I/O it issues and completes; it knows nothing
//! else (no clock: this is the sans-I/O core).
//!
//! The policies (`docs/tuning.md` says when to use which):
//! - `round-robin`: each request starts at the next copy in turn.
//! - `split[:SIZE]`: a read of at least SIZE bytes (128 KiB by default) is cut
//!   into one piece per usable copy, at sector boundaries, each piece from a
//!   different copy; smaller reads go round-robin (gmirror's `split`).
//! - `load`: the copy whose member has the fewest member I/Os outstanding;
//!   ties go round-robin.
//! - `prefer:SLOT`: the member in SLOT whenever it holds a usable copy;
//!   otherwise as `load`.
//! - `proximity[:WINDOW]`: gmirror's `load` since 2009 (Maxim Sobolev's
//!   patch, "Improving geom_mirror(4)'s read balancing"; see `docs/tuning.md`):
//!   the least loaded member, where a member whose last I/O ended exactly
//!   where the read starts counts two I/Os less, and one within WINDOW bytes
//!   (1 MiB by default) of it one I/O less. A sequential reader stays on one
//!   disk and its read-ahead cache; concurrent readers spread over the disks.
//! - `auto`: `proximity` if any member is (or may be) rotational, `load` when
//!   every member is known not to be.
//!
//! Every policy also heeds, per member:
//! - *write-mostly* (`serve --write-mostly`, md's flag of the same name): a
//!   member on a slow link gets every write but a read only when no other
//!   usable copy has the bytes;
//! - *latency*: each member's recent I/O time, which the server feeds in.
//!   `load` and `proximity` weigh a member's outstanding I/Os by how much
//!   slower it is than the fastest candidate (rounded: members within 1.5x
//!   of each other weigh the same, so that noise between like disks changes
//!   nothing), which is the time a new read would wait there. A copy 50
//!   times farther away (a remote host) then gets a read only once the near
//!   one has about 50 queued. `auto` thus prefers the near copy untold.
//!
//! Only the choice among usable copies is made here: which copies are usable
//! (online, rebuilt past the stripe, not failed for this request) is the
//! volume's business. Degraded, rebuild, scrub and read-repair reads never
//! ask.

use crate::member_io::MemberOp;
use crate::units::{format_size, parse_size, SECTOR_BYTES};
use crate::Level;
use smallvec::SmallVec;
use std::fmt;
use std::str::FromStr;

/// How reads choose among the copies of a chunk.
///
/// A size argument of 0 means "the default", so that a label written with
/// the default follows a better default later.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReadPolicy {
    /// `proximity` for rotational members, `load` for non-rotational ones.
    #[default]
    Auto,
    RoundRobin,
    /// Reads of at least `threshold_bytes` (0: [`ReadPolicy::DEFAULT_SPLIT_BYTES`])
    /// are split across the copies.
    Split {
        threshold_bytes: u64,
    },
    /// Fewest outstanding member I/Os.
    Load,
    /// The member in `slot` first, while it holds a usable copy.
    Prefer {
        slot: u32,
    },
    /// Least loaded, with a bonus for a member positioned at or within
    /// `window_bytes` (0: [`ReadPolicy::DEFAULT_WINDOW_BYTES`]) of the read.
    Proximity {
        window_bytes: u64,
    },
}

/// Whether any of the members is, or may be, rotational (`None`: it
/// could not tell and was not told): what `auto` picks proximity for, and
/// what the NBD export advertises as `NBD_FLAG_ROTATIONAL`. An empty list
/// is taken as spinning, as a volume with no member known is.
pub fn may_spin(rotational: &[Option<bool>]) -> bool {
    rotational.is_empty() || rotational.iter().any(|r| *r != Some(false))
}

impl ReadPolicy {
    /// The split threshold when none is given.
    pub const DEFAULT_SPLIT_BYTES: u64 = 128 << 10;
    /// The proximity window when none is given: gmirror's `TRACK_SIZE`.
    pub const DEFAULT_WINDOW_BYTES: u64 = 1 << 20;
    /// The smallest split threshold: two sectors, one per piece.
    pub const MIN_SPLIT_BYTES: u64 = 2 * SECTOR_BYTES;

    /// Every policy name, as `--read-policy` takes it.
    pub const NAMES: &'static str =
        "round-robin | split[:SIZE] | load | prefer:SLOT | proximity[:WINDOW] | auto";

    /// The label's `read_policy` code; never renumber.
    pub fn code(self) -> u8 {
        match self {
            ReadPolicy::Auto => 0,
            ReadPolicy::RoundRobin => 1,
            ReadPolicy::Split { .. } => 2,
            ReadPolicy::Load => 3,
            ReadPolicy::Prefer { .. } => 4,
            ReadPolicy::Proximity { .. } => 5,
        }
    }

    /// The label's `read_policy_arg`: the split threshold, the preferred
    /// slot or the proximity window; 0 for the others.
    pub fn arg(self) -> u64 {
        match self {
            ReadPolicy::Auto | ReadPolicy::RoundRobin | ReadPolicy::Load => 0,
            ReadPolicy::Split { threshold_bytes } => threshold_bytes,
            ReadPolicy::Prefer { slot } => u64::from(slot),
            ReadPolicy::Proximity { window_bytes } => window_bytes,
        }
    }

    /// The policy a label's `read_policy` and `read_policy_arg` name. The
    /// label codec stores any value; this is where they are checked.
    pub fn from_label(code: u8, arg: u64) -> Result<ReadPolicy, String> {
        let p = match code {
            0 => ReadPolicy::Auto,
            1 => ReadPolicy::RoundRobin,
            2 => ReadPolicy::Split {
                threshold_bytes: arg,
            },
            3 => ReadPolicy::Load,
            4 => ReadPolicy::Prefer {
                slot: u32::try_from(arg)
                    .map_err(|_| format!("read policy prefer: slot {arg} is out of range"))?,
            },
            5 => ReadPolicy::Proximity { window_bytes: arg },
            _ => {
                return Err(format!(
                    "unknown read policy code {code} (written by a newer platter?)"
                ))
            }
        };
        if p.arg() != arg {
            return Err(format!(
                "read policy {} takes no argument, the label gives {arg}",
                p.name()
            ));
        }
        if let ReadPolicy::Split { threshold_bytes } = p {
            if threshold_bytes != 0 && threshold_bytes < Self::MIN_SPLIT_BYTES {
                return Err(format!(
                    "read policy split: threshold {threshold_bytes} bytes is below {}",
                    Self::MIN_SPLIT_BYTES
                ));
            }
        }
        Ok(p)
    }

    pub fn name(self) -> &'static str {
        match self {
            ReadPolicy::Auto => "auto",
            ReadPolicy::RoundRobin => "round-robin",
            ReadPolicy::Split { .. } => "split",
            ReadPolicy::Load => "load",
            ReadPolicy::Prefer { .. } => "prefer",
            ReadPolicy::Proximity { .. } => "proximity",
        }
    }

    /// Whether the policy can be used on a `level` volume of `members`
    /// members with `copies` copies of each chunk: any policy with copies,
    /// only `auto` without (there is nothing to choose), and `prefer` only
    /// for a slot that exists.
    pub fn check(self, level: Level, members: u32, copies: u32) -> Result<(), String> {
        if copies < 2 && self != ReadPolicy::Auto {
            return Err(format!("read policy {self}: {}", no_copies(level)));
        }
        if let ReadPolicy::Prefer { slot } = self {
            if slot >= members {
                return Err(format!(
                    "read policy {self}: there is no slot {slot} ({})",
                    slots_are(members)
                ));
            }
        }
        Ok(())
    }

    /// The policy with defaults filled in, and `auto` resolved for members
    /// that are (`Some(true)`), are not (`Some(false)`) or may be (`None`)
    /// rotational.
    pub fn effective(self, rotational: &[Option<bool>]) -> ReadPolicy {
        match self {
            ReadPolicy::Auto => {
                if may_spin(rotational) {
                    ReadPolicy::Proximity {
                        window_bytes: Self::DEFAULT_WINDOW_BYTES,
                    }
                } else {
                    ReadPolicy::Load
                }
            }
            ReadPolicy::Split { threshold_bytes: 0 } => ReadPolicy::Split {
                threshold_bytes: Self::DEFAULT_SPLIT_BYTES,
            },
            ReadPolicy::Proximity { window_bytes: 0 } => ReadPolicy::Proximity {
                window_bytes: Self::DEFAULT_WINDOW_BYTES,
            },
            other => other,
        }
    }
}

/// A size as `parse_size` reads it back: with a unit when exact.
fn size_text(bytes: u64) -> String {
    let s = format_size(bytes);
    if s.contains('.') || s.ends_with('B') {
        bytes.to_string()
    } else {
        s
    }
}

/// Why a level without copies has no read policy: what `read-policy`
/// says when asked, and why setting one is refused.
pub fn no_copies(level: Level) -> String {
    format!("{level} has no copies to choose between: reads go to the member that holds the data")
}

/// The slots a volume of `members` members has, for a message naming a
/// slot it does not have: "the volume's slots are 0 and 1", "0 to 3".
pub fn slots_are(members: u32) -> String {
    match members {
        0 => "the volume has no slots".to_owned(),
        1 => "the volume's one slot is 0".to_owned(),
        2 => "the volume's slots are 0 and 1".to_owned(),
        n => format!("the volume's slots are 0 to {}", n - 1),
    }
}

impl fmt::Display for ReadPolicy {
    /// The `--read-policy` spelling: `split`, `split:256k`, `prefer:1`,
    /// `proximity:4M`; parsing it gives the policy back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ReadPolicy::Split { threshold_bytes } if threshold_bytes != 0 => {
                write!(f, "split:{}", size_text(threshold_bytes))
            }
            ReadPolicy::Prefer { slot } => write!(f, "prefer:{slot}"),
            ReadPolicy::Proximity { window_bytes } if window_bytes != 0 => {
                write!(f, "proximity:{}", size_text(window_bytes))
            }
            p => f.write_str(p.name()),
        }
    }
}

impl FromStr for ReadPolicy {
    type Err = String;

    /// `round-robin | split[:SIZE] | load | prefer:SLOT | proximity[:WINDOW] | auto`.
    fn from_str(text: &str) -> Result<ReadPolicy, String> {
        let t = text.trim();
        let (name, arg) = match t.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (t, None),
        };
        let size = |what: &str| -> Result<u64, String> {
            let a = arg.ok_or_else(|| format!("read policy {name}: missing {what}"))?;
            let bytes = parse_size(a).map_err(|e| format!("read policy {name}: {e}"))?;
            if bytes == 0 {
                return Err(format!(
                    "read policy {name}: {what} must be positive (leave it out for the default)"
                ));
            }
            Ok(bytes)
        };
        let no_arg = |p: ReadPolicy| match arg {
            None => Ok(p),
            Some(_) => Err(format!("read policy {name} takes no argument")),
        };
        let p = match name.to_ascii_lowercase().as_str() {
            "auto" => no_arg(ReadPolicy::Auto)?,
            "round-robin" | "roundrobin" | "rr" => no_arg(ReadPolicy::RoundRobin)?,
            "load" => no_arg(ReadPolicy::Load)?,
            "split" => ReadPolicy::Split {
                threshold_bytes: if arg.is_some() { size("threshold")? } else { 0 },
            },
            "proximity" => ReadPolicy::Proximity {
                window_bytes: if arg.is_some() { size("window")? } else { 0 },
            },
            "prefer" => {
                let a = arg.ok_or("read policy prefer: name the slot (prefer:SLOT)")?;
                ReadPolicy::Prefer {
                    slot: a
                        .trim()
                        .parse()
                        .map_err(|_| format!("read policy prefer: '{a}' is not a slot number"))?,
                }
            }
            _ => {
                return Err(format!(
                    "unknown read policy '{t}' (one of: {})",
                    ReadPolicy::NAMES
                ))
            }
        };
        if let ReadPolicy::Split { threshold_bytes } = p {
            if threshold_bytes != 0 && threshold_bytes < ReadPolicy::MIN_SPLIT_BYTES {
                return Err(format!(
                    "read policy split: threshold must be at least {} bytes",
                    ReadPolicy::MIN_SPLIT_BYTES
                ));
            }
        }
        Ok(p)
    }
}

/// One usable copy of a chunk, as the volume offers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub member: u32,
    /// The copy's index among all copies of the chunk (first copy 0).
    pub copy: u32,
    /// Member offset of the first byte wanted from this copy.
    pub offset_bytes: u64,
}

/// The copies of one chunk a read may use; rarely more than four.
pub(crate) type Candidates = SmallVec<[Candidate; 4]>;

/// Where one read extent goes: `(bytes into the extent, length, index into
/// the candidates)`; one entry unless the read is split.
pub(crate) type Placement = SmallVec<[(u64, u64, usize); 2]>;

/// The choices of one client read, from [`Balancer::begin`] to its last
/// extent.
pub(crate) struct ReadChoice {
    turn: u64,
    policy: ReadPolicy,
    /// Split: the volume offsets where pieces start, first = the read's
    /// offset; empty when the read is not split.
    cuts: SmallVec<[u64; 4]>,
    /// Where the pieces placed so far end, per member: an extent that
    /// continues one stays on its member, so a read is one member I/O
    /// where the layout allows.
    ends: SmallVec<[(u32, u64); 4]>,
}

/// Per-member load and position, and the policy.
#[derive(Clone, Debug)]
pub struct Balancer {
    policy: ReadPolicy,
    rotational: Vec<Option<bool>>,
    outstanding: Vec<u32>,
    /// Member offset where the last read or write issued to it ends.
    last_end: Vec<Option<u64>>,
    /// Recent I/O time per member (0: not known).
    latency_ns: Vec<u64>,
    /// Read only when no other copy can be.
    write_mostly: Vec<bool>,
    turn: u64,
}

impl Balancer {
    pub fn new(members: u32, policy: ReadPolicy) -> Balancer {
        let n = members as usize;
        Balancer {
            policy,
            rotational: vec![None; n],
            outstanding: vec![0; n],
            last_end: vec![None; n],
            latency_ns: vec![0; n],
            write_mostly: vec![false; n],
            turn: 0,
        }
    }

    /// The member's recent I/O time (0: not known, and then no member's
    /// latency counts among copies that include it).
    pub fn set_latency(&mut self, member: u32, latency_ns: u64) {
        self.latency_ns[member as usize] = latency_ns;
    }

    pub fn latency_ns(&self, member: u32) -> u64 {
        self.latency_ns[member as usize]
    }

    /// Reads go to `member` only when no other usable copy can serve them.
    pub fn set_write_mostly(&mut self, member: u32, write_mostly: bool) {
        self.write_mostly[member as usize] = write_mostly;
    }

    pub fn write_mostly(&self, member: u32) -> bool {
        self.write_mostly[member as usize]
    }

    /// How many of the usable copies on `members` a read would use: those
    /// not write-mostly, or all of them if every one is.
    pub fn readable_copies(&self, members: impl Iterator<Item = u32> + Clone) -> u32 {
        let all = members.clone().count() as u32;
        match members.filter(|&m| !self.write_mostly(m)).count() as u32 {
            0 => all,
            n => n,
        }
    }

    /// The weight of one outstanding I/O on `c`: its latency over the
    /// fastest candidate's (`fastest_ns`), rounded, at least 1; 1 when a
    /// latency is not known (`fastest_ns` 0).
    fn weight(&self, c: &Candidate, fastest_ns: u64) -> u64 {
        match fastest_ns {
            0 => 1,
            f => (self.latency_ns[c.member as usize]
                .saturating_mul(2)
                .saturating_add(f)
                / (2 * f))
                .max(1),
        }
    }

    pub fn policy(&self) -> ReadPolicy {
        self.policy
    }

    pub fn set_policy(&mut self, policy: ReadPolicy) {
        self.policy = policy;
    }

    /// The policy reads follow now: `auto` resolved, defaults filled in.
    pub fn effective(&self) -> ReadPolicy {
        self.policy.effective(&self.rotational)
    }

    pub fn set_rotational(&mut self, member: u32, rotational: Option<bool>) {
        self.rotational[member as usize] = rotational;
    }

    pub fn rotational(&self) -> &[Option<bool>] {
        &self.rotational
    }

    /// Member I/Os issued to `member` and not completed.
    pub fn outstanding(&self, member: u32) -> u32 {
        self.outstanding[member as usize]
    }

    /// Where the last read or write issued to `member` ended.
    pub fn last_position(&self, member: u32) -> Option<u64> {
        self.last_end[member as usize]
    }

    /// A member I/O was issued.
    pub(crate) fn issued(&mut self, member: u32, op: &MemberOp) {
        let m = member as usize;
        assert!(m < self.outstanding.len(), "no member {member}");
        self.outstanding[m] += 1;
        match *op {
            MemberOp::Read {
                offset_bytes,
                len_bytes,
            } => self.last_end[m] = Some(offset_bytes + len_bytes),
            MemberOp::Write {
                offset_bytes,
                ref data,
            } => self.last_end[m] = Some(offset_bytes + data.len() as u64),
            // A trim or flush does not move a head that matters here.
            MemberOp::Trim { .. } | MemberOp::Flush => {}
        }
    }

    /// A member I/O issued by [`Balancer::issued`] completed.
    pub(crate) fn completed(&mut self, member: u32) {
        let o = &mut self.outstanding[member as usize];
        assert!(*o > 0, "member {member}: completion of an I/O not issued");
        *o -= 1;
    }

    /// Starts the choices of one client read of `[offset, offset + len)`
    /// over chunks with `copies` usable copies at its start.
    pub(crate) fn begin(&mut self, offset_bytes: u64, len_bytes: u64, copies: u32) -> ReadChoice {
        let turn = self.turn;
        self.turn = self.turn.wrapping_add(1);
        let policy = self.effective();
        let mut cuts = SmallVec::new();
        if let ReadPolicy::Split { threshold_bytes } = policy {
            if len_bytes >= threshold_bytes && copies > 1 {
                // One piece per copy, cut at sector boundaries of the volume
                // (hence of every member); a piece may come out empty only
                // for reads shorter than a sector per copy.
                let end = offset_bytes + len_bytes;
                cuts.push(offset_bytes);
                for i in 1..u64::from(copies) {
                    let at = offset_bytes + len_bytes * i / u64::from(copies);
                    let at = (at / SECTOR_BYTES * SECTOR_BYTES).clamp(offset_bytes, end);
                    if at > *cuts.last().expect("first cut") && at < end {
                        cuts.push(at);
                    }
                }
                if cuts.len() < 2 {
                    cuts.clear();
                }
                // Cuts rise strictly, one piece per copy at most.
                debug_assert!(cuts.windows(2).all(|w| w[0] < w[1]));
                assert!(cuts.len() <= copies as usize);
            }
        }
        ReadChoice {
            turn,
            policy,
            cuts,
            ends: SmallVec::new(),
        }
    }

    /// Places the extent `[volume_offset, volume_offset + len)` of the read
    /// on the usable copies `cands` (not empty).
    pub(crate) fn place(
        &self,
        choice: &mut ReadChoice,
        cands: &Candidates,
        volume_offset_bytes: u64,
        len_bytes: u64,
        copies: u32,
    ) -> Placement {
        assert!(!cands.is_empty(), "placing a read with no usable copy");
        // Write-mostly copies are left out while another copy is there;
        // `back` maps the remaining ones to their index in `cands`.
        let back: SmallVec<[usize; 4]> = (0..cands.len())
            .filter(|&i| !self.write_mostly(cands[i].member))
            .collect();
        if !back.is_empty() && back.len() < cands.len() {
            let readable: Candidates = back.iter().map(|&i| cands[i]).collect();
            let mut out = self.place(choice, &readable, volume_offset_bytes, len_bytes, copies);
            for p in &mut out {
                p.2 = back[p.2];
            }
            return out;
        }
        let mut out = Placement::new();
        if !choice.cuts.is_empty() {
            // Split: piece i comes from the i-th usable copy.
            let end = volume_offset_bytes + len_bytes;
            let mut at = volume_offset_bytes;
            while at < end {
                let piece = choice.cuts.partition_point(|&c| c <= at) - 1;
                let piece_end = choice.cuts.get(piece + 1).copied().unwrap_or(u64::MAX);
                let stop = piece_end.min(end);
                let which = piece % cands.len();
                assert!(stop > at, "a split piece has bytes");
                out.push((at - volume_offset_bytes, stop - at, which));
                at = stop;
            }
            return out;
        }
        let which = self.pick(choice, cands, copies);
        assert!(which < cands.len(), "picked a copy that is not offered");
        let c = cands[which];
        let member_end = c.offset_bytes + len_bytes;
        match choice.ends.iter_mut().find(|(m, _)| *m == c.member) {
            Some(e) => e.1 = member_end,
            None => choice.ends.push((c.member, member_end)),
        }
        out.push((0, len_bytes, which));
        out
    }

    /// One copy for a whole extent.
    fn pick(&self, choice: &ReadChoice, cands: &Candidates, copies: u32) -> usize {
        if cands.len() == 1 {
            return 0;
        }
        assert!(
            cands.len() <= copies as usize,
            "more copies offered than a chunk has"
        );
        // Load and proximity: a read continuing on a member it already
        // uses stays there (one member I/O, and the head is there). Round-
        // robin keeps to its turn, so that every copy gets read.
        let continuing = || {
            cands
                .iter()
                .position(|c| choice.ends.contains(&(c.member, c.offset_bytes)))
        };
        // Round-robin among `eligible`: the first copy at or after this
        // request's turn.
        let first = (choice.turn % u64::from(copies.max(1))) as u32;
        let rotate = |eligible: &dyn Fn(&Candidate) -> bool| -> usize {
            cands
                .iter()
                .enumerate()
                .filter(|(_, c)| eligible(c))
                .min_by_key(|(_, c)| (c.copy < first, c.copy))
                .map(|(i, _)| i)
                .expect("an eligible candidate")
        };
        // The wait a new read would have on each copy: its queue, the read
        // itself included, times its weight (1 between like members).
        let fastest_ns = cands
            .iter()
            .map(|c| self.latency_ns[c.member as usize])
            .min()
            .expect("candidates");
        let weight_of = |c: &Candidate| self.weight(c, fastest_ns);
        let wait =
            |c: &Candidate| (u64::from(self.outstanding[c.member as usize]) + 1) * weight_of(c);
        let least_loaded = || {
            let min = cands.iter().map(wait).min().expect("candidates");
            rotate(&|c| wait(c) == min)
        };
        match choice.policy {
            ReadPolicy::RoundRobin | ReadPolicy::Split { .. } => rotate(&|_| true),
            ReadPolicy::Load => continuing().unwrap_or_else(least_loaded),
            ReadPolicy::Prefer { slot } => cands
                .iter()
                .position(|c| c.member == slot)
                .or_else(continuing)
                .unwrap_or_else(least_loaded),
            ReadPolicy::Proximity { .. } if continuing().is_some() => {
                continuing().expect("just checked")
            }
            ReadPolicy::Proximity { window_bytes } => {
                // gmirror's g_mirror_request_load: load minus 2 when the
                // head is exactly there, minus 1 when it is within the
                // window. Ties go to the nearer head, then round-robin.
                let bonus = |c: &Candidate| -> i64 {
                    match self.last_end[c.member as usize] {
                        Some(p) if p == c.offset_bytes => 2,
                        Some(p) if p.abs_diff(c.offset_bytes) < window_bytes => 1,
                        _ => 0,
                    }
                };
                // Between like members (weight 1) the order of
                // `outstanding - bonus`, gmirror's; a slower member's
                // queue counts for more.
                let score = |c: &Candidate| {
                    (
                        (i64::from(self.outstanding[c.member as usize]) + 2 - bonus(c))
                            * i64::try_from(weight_of(c)).unwrap_or(i64::MAX / 4),
                        -bonus(c),
                    )
                };
                let best = cands.iter().map(score).min().expect("candidates");
                rotate(&|c| score(c) == best)
            }
            ReadPolicy::Auto => unreachable!("auto is resolved in begin"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in [
            ReadPolicy::Auto,
            ReadPolicy::RoundRobin,
            ReadPolicy::Split { threshold_bytes: 0 },
            ReadPolicy::Split {
                threshold_bytes: 256 << 10,
            },
            ReadPolicy::Split {
                threshold_bytes: 1536,
            },
            ReadPolicy::Load,
            ReadPolicy::Prefer { slot: 0 },
            ReadPolicy::Prefer { slot: 3 },
            ReadPolicy::Proximity { window_bytes: 0 },
            ReadPolicy::Proximity {
                window_bytes: 4 << 20,
            },
        ] {
            assert_eq!(p.to_string().parse::<ReadPolicy>(), Ok(p), "{p}");
            assert_eq!(ReadPolicy::from_label(p.code(), p.arg()), Ok(p), "{p}");
        }
        assert_eq!(
            "split:64k".parse(),
            Ok(ReadPolicy::Split {
                threshold_bytes: 64 << 10
            })
        );
        assert_eq!("proximity:4M".to_string(), "proximity:4M");
    }

    #[test]
    fn bad_names_and_labels_are_refused() {
        for bad in [
            "",
            "fastest",
            "load:3",
            "auto:1",
            "prefer",
            "prefer:x",
            "split:0",
            "split:512",
            "proximity:",
            "split:1q",
        ] {
            assert!(bad.parse::<ReadPolicy>().is_err(), "{bad:?} accepted");
        }
        assert!(ReadPolicy::from_label(6, 0).is_err());
        assert!(ReadPolicy::from_label(1, 5).is_err());
        assert!(ReadPolicy::from_label(2, 100).is_err());
        assert!(ReadPolicy::from_label(4, u64::MAX).is_err());
    }

    #[test]
    fn check_refuses_levels_without_copies_and_missing_slots() {
        assert!(ReadPolicy::Auto.check(Level::Raid5, 3, 1).is_ok());
        assert_eq!(
            ReadPolicy::Load.check(Level::Raid5, 3, 1),
            Err(
                "read policy load: raid5 has no copies to choose between: reads go to the \
                 member that holds the data"
                    .to_string()
            )
        );
        assert!(ReadPolicy::Prefer { slot: 1 }
            .check(Level::Mirror, 2, 2)
            .is_ok());
        assert!(ReadPolicy::Prefer { slot: 2 }
            .check(Level::Mirror, 2, 2)
            .is_err());
    }

    /// Two copies of one chunk, on members 0 and 1, at member offset
    /// `offset_bytes`.
    fn two_copies(offset_bytes: u64) -> Candidates {
        (0..2)
            .map(|m| Candidate {
                member: m,
                copy: m,
                offset_bytes,
            })
            .collect()
    }

    /// Places `reads` 4 KiB reads at scattered offsets, each left
    /// outstanding; how many went to each of two members.
    fn place_outstanding(b: &mut Balancer, reads: u64) -> [u32; 2] {
        let mut counts = [0; 2];
        for i in 0..reads {
            let offset = (i * 7919 % 1000) << 20;
            let mut choice = b.begin(offset, 4096, 2);
            let placed = b.place(&mut choice, &two_copies(offset), offset, 4096, 2);
            let member = placed[0].2 as u32;
            counts[member as usize] += 1;
            b.issued(
                member,
                &MemberOp::Read {
                    offset_bytes: offset,
                    len_bytes: 4096,
                },
            );
        }
        counts
    }

    #[test]
    fn a_write_mostly_copy_is_read_only_when_it_is_the_only_one() {
        for policy in [
            ReadPolicy::RoundRobin,
            ReadPolicy::Load,
            ReadPolicy::Prefer { slot: 0 },
            ReadPolicy::Proximity { window_bytes: 0 },
            ReadPolicy::Split { threshold_bytes: 0 },
        ] {
            let mut b = Balancer::new(2, policy);
            b.set_write_mostly(0, true);
            assert_eq!(place_outstanding(&mut b, 20), [0, 20], "{policy}");
            // A split read is not cut for a copy it will not use.
            let both = [0u32, 1];
            assert_eq!(b.readable_copies(both.iter().copied()), 1, "{policy}");
            let mut choice = b.begin(0, 1 << 20, 1);
            let placed = b.place(&mut choice, &two_copies(0), 0, 1 << 20, 2);
            assert!(placed.iter().all(|p| p.2 == 1), "{policy}: {placed:?}");
            // The only copy left is read, write-mostly or not.
            let only: Candidates = two_copies(0).into_iter().take(1).collect();
            let mut choice = b.begin(0, 4096, 1);
            assert_eq!(b.place(&mut choice, &only, 0, 4096, 2)[0].2, 0, "{policy}");
        }
        let mut b = Balancer::new(2, ReadPolicy::Load);
        b.set_write_mostly(0, true);
        b.set_write_mostly(1, true);
        assert_eq!(
            place_outstanding(&mut b, 20),
            [10, 10],
            "all write-mostly: as none"
        );
    }

    #[test]
    fn a_far_copy_gets_reads_only_once_the_near_one_is_queued_deep() {
        for policy in [ReadPolicy::Load, ReadPolicy::Proximity { window_bytes: 0 }] {
            let mut b = Balancer::new(2, policy);
            b.set_latency(0, 100_000);
            b.set_latency(1, 5_000_000);
            let first = place_outstanding(&mut b, 40);
            assert_eq!(first, [40, 0], "{policy}: 50 times farther");
            let more = place_outstanding(&mut b, 460);
            let far = first[1] + more[1];
            assert!(
                (1..=15).contains(&far),
                "{policy}: {far} of 500 queued reads on the far copy"
            );
        }
    }

    #[test]
    fn like_latencies_balance_as_unknown_ones() {
        for policy in [ReadPolicy::Load, ReadPolicy::Proximity { window_bytes: 0 }] {
            let mut plain = Balancer::new(2, policy);
            let mut timed = Balancer::new(2, policy);
            timed.set_latency(0, 100_000);
            timed.set_latency(1, 140_000);
            for _ in 0..5 {
                assert_eq!(
                    place_outstanding(&mut plain, 9),
                    place_outstanding(&mut timed, 9),
                    "{policy}"
                );
            }
            // One latency unknown: none counts.
            let mut half = Balancer::new(2, policy);
            half.set_latency(1, 5_000_000);
            assert_eq!(place_outstanding(&mut half, 10), [5, 5], "{policy}");
        }
    }

    #[test]
    fn auto_resolves_by_rotation() {
        let eff = |r: &[Option<bool>]| ReadPolicy::Auto.effective(r);
        let prox = ReadPolicy::Proximity {
            window_bytes: ReadPolicy::DEFAULT_WINDOW_BYTES,
        };
        assert_eq!(eff(&[Some(false), Some(false)]), ReadPolicy::Load);
        assert_eq!(eff(&[Some(true), Some(true)]), prox);
        assert_eq!(eff(&[Some(true), Some(false)]), prox);
        assert_eq!(eff(&[None, Some(false)]), prox);
    }
}
