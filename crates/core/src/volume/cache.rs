//! The stripe cache: partial-stripe write data held in memory until later
//! writes complete the stripe, as md's raid5 stripe cache and a disk's
//! volatile write cache do (RAID-5 and RAID-6 only; off unless
//! [`Volume::enable_stripe_cache`] is called).
//!
//! A write without FUA that covers only part of a stripe copies its bytes
//! into the stripe's cache entry and, for that stripe, is complete: no
//! member is touched. When later writes make the entry whole, the stripe
//! goes out as one full-stripe write, parity computed without reading
//! anything. NBD promises durability only for FLUSH and FUA, so an
//! acknowledged write may sit here exactly as it may sit in a disk's cache.
//!
//! The rules, each kept by the code named:
//! - Reads see cached bytes (`plan_read` serves them from the entry; the
//!   rest of a stripe comes from the members, which never hold a partial
//!   update of a cached stripe: a stripe's members change only under its
//!   exclusive lock, in one write).
//! - A FLUSH writes out every entry that existed when it arrived and waits
//!   for those writes (and any write that took an entry) to end before it
//!   flushes the members (`flush_start`, `cache_settle`).
//! - A FUA write never leaves data here: a stripe it touches that has an
//!   entry is merged and written out in the same request.
//! - An entry is written out (a *destage*: an internal request holding the
//!   stripe's lock, with its write-intent bit set and durable first like
//!   any write) when the cache is full (oldest first; the write that found
//!   it full goes to the members itself), when it has been idle for a
//!   whole [`Request::CacheTick`] tick, when a FLUSH asks, and before
//!   a check, repair or rebuild step of its stripe (so scrubs see the
//!   data; the members are consistent either way, so this is not needed
//!   for correctness).
//! - Write-zeroes drop the cached bytes they cover; trims drop entries of
//!   the whole stripes they release (a trim leaves partial stripes alone).
//!
//! What a crash can lose: the entries, i.e. writes acknowledged and not
//! yet flushed, the same as any unflushed write (`docs/failures.md`).
//!
//! The bound: at most [`CacheLimits::max_stripes`] entries and
//! [`CacheLimits::max_bytes`] of entry buffers (each a whole stripe's data),
//! whichever is smaller, counting the entries taken out and still being
//! written (their buffers live until the members have them); a volume
//! whose stripe is larger than the byte bound caches nothing.

use super::stripe_cache::{Ranges, StripeCache};
use super::{Maintenance, Op, Plan, Request, RequestId, Stage, Volume};
use crate::buf::AlignedBuf;
use bytes::Bytes;
use smallvec::SmallVec;
use std::mem::MaybeUninit;

/// How much the stripe cache may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheLimits {
    pub max_stripes: u64,
    pub max_bytes: u64,
}

impl CacheLimits {
    /// 64 stripes or 16 MiB, whichever is smaller.
    pub const DEFAULT: CacheLimits = CacheLimits {
        max_stripes: 64,
        max_bytes: 16 << 20,
    };
}

const _: () = assert!(CacheLimits::DEFAULT.max_stripes > 0 && CacheLimits::DEFAULT.max_bytes > 0);

impl Default for CacheLimits {
    fn default() -> Self {
        CacheLimits::DEFAULT
    }
}

/// What the stripe cache holds now, for status and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStatus {
    /// Stripes with cached data (acknowledged, not on the members).
    pub stripes: u64,
    /// Cached data bytes in them.
    pub bytes: u64,
    /// The most stripes the cache holds at once.
    pub capacity_stripes: u64,
    /// Entries taken out and being written to the members now.
    pub writing: u64,
    /// Write-outs that failed (too many members lost): their data is gone,
    /// and the next FLUSH fails.
    pub failures: u64,
}

/// Cached data taken out for writing: the stripe, its buffer, and the
/// ranges of it to write.
pub(super) struct Outgoing {
    pub stripe: u64,
    pub data: Bytes,
    pub ranges: Vec<(u64, u64)>,
}

/// What a request did with the cache, decided once, when it first starts
/// (a request planned again after a member failure must not do it twice).
#[derive(Default)]
pub(super) struct CacheWork {
    /// Stripes the request does not write from its own data: cached, or
    /// merged into `outgoing`. Sorted.
    pub skip: Vec<u64>,
    pub outgoing: Vec<Outgoing>,
    /// Entries the request took over (their sequence numbers), settled
    /// when it finishes (`cache_settle`).
    pub taken: SmallVec<[u64; 2]>,
}

/// Part of a chunk a read wants: in the stripe cache, or on the members.
pub(super) enum ChunkRun {
    Cached { within_bytes: u64, bytes: Bytes },
    Members { within_bytes: u64, len_bytes: u64 },
}

impl ChunkRun {
    /// Where in its chunk the run starts.
    pub(super) fn within_bytes(&self) -> u64 {
        match self {
            ChunkRun::Cached { within_bytes, .. } | ChunkRun::Members { within_bytes, .. } => {
                *within_bytes
            }
        }
    }
}

impl Volume {
    /// Turns on the stripe cache (RAID-5 and RAID-6; a no-op for other
    /// levels, or when one stripe's data exceeds `limits.max_bytes`).
    /// The driver must then send [`Request::CacheTick`] ticks (see there).
    pub fn enable_stripe_cache(&mut self, limits: CacheLimits) {
        assert!(self.is_idle(), "the cache is enabled before any request");
        let sb = self.geometry.stripe_data_bytes();
        if !self.geometry.level().is_parity() || sb == 0 {
            return;
        }
        let capacity = limits.max_stripes.min(limits.max_bytes / sb) as usize;
        if capacity == 0 {
            return;
        }
        // The byte bound holds by construction: every entry and write-out
        // is one stripe's buffer, and there are at most `capacity`.
        assert!(capacity as u64 * sb <= limits.max_bytes);
        // Every stripe of a parity level is whole (`stripe_len`).
        assert_eq!(self.geometry.stripes() * sb, self.size_bytes());
        self.cache = Some(StripeCache::new(capacity));
    }

    /// `None` when the cache is off.
    pub fn cache_status(&self) -> Option<CacheStatus> {
        Some(self.cache.as_ref()?.status())
    }

    /// Stripes with cached data not yet on the members (0 without a cache).
    pub fn cached_stripes(&self) -> u64 {
        self.cache.as_ref().map_or(0, |c| c.stripes())
    }

    /// The bytes of a cached stripe: all of them (a parity level's volume
    /// is whole stripes, asserted when the cache is enabled).
    pub(super) fn stripe_len(&self, stripe: u64) -> u64 {
        assert!(
            stripe < self.geometry.stripes(),
            "stripe {stripe} past the end"
        );
        self.geometry.stripe_data_bytes()
    }

    /// A write, write-zeroes, trim or destage meets the cache, once, when
    /// it first starts: see the module comment.
    pub(super) fn cache_absorb(&mut self, req: &Request, plan: &mut Plan) {
        if plan.cache.is_some() {
            return;
        }
        let mut work = CacheWork::default();
        let idle = match &self.cache {
            None => true,
            Some(c) => c.is_empty() && !matches!(req, Request::Write { .. }),
        };
        if idle {
            plan.cache = Some(work);
            return;
        }
        match req {
            Request::Write { data, fua, .. } => self.cache_absorb_write(req, data, *fua, &mut work),
            Request::WriteZeroes { .. } | Request::Trim { .. } => {
                self.cache_absorb_release(req, &mut work)
            }
            Request::Maintain {
                first_stripe,
                action: Maintenance::Destage,
                ..
            } => {
                let c = self.cache.as_mut().expect("cache on");
                if let Some(t) = c.take(*first_stripe) {
                    work.taken.push(t.seq);
                    work.outgoing.push(Outgoing {
                        stripe: *first_stripe,
                        data: t.buf.into_bytes(),
                        ranges: t.valid.into_vec(),
                    });
                }
            }
            _ => {}
        }
        // `plan_write` and `narrow_to_written` binary-search `skip`; and
        // a stripe going out from the cache is one the request skips.
        assert!(work.skip.windows(2).all(|w| w[0] < w[1]), "skip is sorted");
        if matches!(req, Request::Write { .. }) {
            assert!(work
                .outgoing
                .iter()
                .all(|o| work.skip.binary_search(&o.stripe).is_ok()));
        }
        plan.cache = Some(work);
    }

    /// The stripes `req` touches, each with the part `[a, b)` of its data
    /// bytes that the request covers.
    fn stripe_parts(&self, req: &Request) -> impl Iterator<Item = (u64, u64, u64)> {
        let sb = self.geometry.stripe_data_bytes();
        let (offset_bytes, len_bytes) = req.range();
        let stripes = if len_bytes == 0 {
            0..0
        } else {
            offset_bytes / sb..(offset_bytes + len_bytes - 1) / sb + 1
        };
        stripes.map(move |s| {
            let a = offset_bytes.max(s * sb) - s * sb;
            let b = (offset_bytes + len_bytes).min((s + 1) * sb) - s * sb;
            debug_assert!(a < b && b <= sb);
            (s, a, b)
        })
    }

    /// A write meets the cache: whole stripes supersede their entries,
    /// partial ones merge into an entry, or become one while there is
    /// room (FUA writes and stripes past their redundancy go straight
    /// out), or, when the cache is full, evict the oldest.
    fn cache_absorb_write(&mut self, req: &Request, data: &Bytes, fua: bool, work: &mut CacheWork) {
        let sb = self.geometry.stripe_data_bytes();
        let offset_bytes = req.range().0;
        for (s, a, b) in self.stripe_parts(req).collect::<SmallVec<[_; 4]>>() {
            let slen = self.stripe_len(s);
            let src =
                &data[(s * sb + a - offset_bytes) as usize..(s * sb + b - offset_bytes) as usize];
            let writable = self.stripe_lost_members(s) <= self.geometry.redundancy();
            let c = self.cache.as_mut().expect("cache on");
            if a == 0 && b == slen {
                // Every byte is new: the entry is superseded, and the
                // stripe goes out from the request's own data.
                if let Some(t) = c.take(s) {
                    work.taken.push(t.seq);
                }
                continue;
            }
            if let Some(covers) = c.merge(s, a, b, src, slen) {
                work.skip.push(s);
                if fua || covers {
                    let t = c.take(s).expect("just merged");
                    work.taken.push(t.seq);
                    work.outgoing.push(Outgoing {
                        stripe: s,
                        data: t.buf.into_bytes(),
                        ranges: t.valid.into_vec(),
                    });
                }
                continue;
            }
            if fua || !writable {
                continue;
            }
            if !c.has_room() {
                // Full: this stripe is written by the request itself, and
                // the oldest entry goes out.
                c.evict_oldest();
                continue;
            }
            let mut valid = Ranges::default();
            valid.insert(a, b);
            c.insert(s, entry_buf(slen, a, src), valid, true, false);
            work.skip.push(s);
        }
    }

    /// Write-zeroes drop the bytes they cover from the cache; a trim only
    /// whole stripes. An entry left empty is superseded: settled when this
    /// request's own writes are done.
    fn cache_absorb_release(&mut self, req: &Request, work: &mut CacheWork) {
        let zeroes = matches!(req, Request::WriteZeroes { .. });
        for (s, a, b) in self.stripe_parts(req).collect::<SmallVec<[_; 4]>>() {
            let whole = a == 0 && b == self.stripe_len(s);
            if !(zeroes || whole) {
                continue;
            }
            let c = self.cache.as_mut().expect("cache on");
            if let Some(seq) = c.forget(s, a, b) {
                work.taken.push(seq);
            }
        }
    }

    /// Submits a destage request for `stripe`'s entry, unless one is owed
    /// already. Internal: it completes nowhere but in the cache.
    pub(super) fn spawn_destage(&mut self, stripe: u64) {
        if self.cache.as_mut().is_some_and(|c| c.mark_queued(stripe)) {
            self.submit_destage(stripe);
        }
    }

    fn submit_destage(&mut self, stripe: u64) {
        self.submit_internal(Request::Maintain {
            first_stripe: stripe,
            stripe_count: 1,
            action: Maintenance::Destage,
        });
    }

    /// Submits the destages that requests asked for while they were being
    /// planned (their entries are already marked queued).
    pub(super) fn cache_spawn_pending(&mut self) {
        // Bounded: only a write being planned adds to the list, and each
        // entry is added once (it is marked queued when added).
        while let Some(s) = self.cache.as_mut().and_then(|c| c.pop_to_spawn()) {
            self.submit_destage(s);
        }
    }

    /// Writes out the entries in `[first, first + count)` (before a scrub
    /// or rebuild step of those stripes).
    pub(super) fn destage_range(&mut self, first: u64, count: u64) {
        let Some(c) = &self.cache else {
            return;
        };
        for s in c.stripes_in(first, count) {
            self.spawn_destage(s);
        }
    }

    /// A [`Request::CacheTick`] tick: entries not written since the previous
    /// tick (every entry with `all`) are written out.
    pub(super) fn destage_tick(&mut self, all: bool) {
        let due = self.cache.as_mut().map(|c| c.tick(all)).unwrap_or_default();
        for s in due {
            self.spawn_destage(s);
        }
    }

    /// A FLUSH starts: if cached data older than it exists, write it out
    /// and hold the flush until that is done (true).
    pub(super) fn flush_start(&mut self, id: RequestId) -> bool {
        let Some(c) = self.cache.as_mut() else {
            return false;
        };
        let (bound, waiting) = c.flush_bound();
        let failures = c.failures();
        let op = self.ops.get_mut(&id).expect("live request");
        assert_eq!(
            op.stage.pending(),
            0,
            "a FLUSH waits for the cache before any I/O"
        );
        op.durable.cache_failures_seen = failures;
        if !waiting {
            return false;
        }
        op.stage = Stage::Destaging;
        let c = self.cache.as_mut().expect("cache on");
        c.wait_flush(id, bound);
        let stripes: Vec<u64> = c.entries().map(|(s, _)| s).collect();
        for s in stripes {
            self.spawn_destage(s);
        }
        true
    }

    /// A request that took entries has finished: they are settled, and
    /// flushes waiting only for them go on to flush the members. If the
    /// request failed (its stripe lost more members than parity covers),
    /// the cached data it was writing out goes back into the cache, where
    /// reads still find it (a read must never return older bytes than a
    /// completed write left), marked failed, and the waiting flushes fail.
    pub(super) fn cache_settle(&mut self, op: &Op, failed: bool) {
        let Some(c) = self.cache.as_mut() else {
            return;
        };
        if failed {
            c.record_failure();
            for out in op.plan.cache.iter().flat_map(|w| &w.outgoing) {
                assert!(
                    c.entry(out.stripe).is_none(),
                    "a new entry under a write-out's lock"
                );
                c.insert(
                    out.stripe,
                    AlignedBuf::copy_from(&out.data),
                    Ranges::from_sorted(out.ranges.clone()),
                    false,
                    !op.trouble.no_space,
                );
            }
        }
        for id in c.settle(op.cache_taken()) {
            let members: Vec<u32> = (0..self.geometry.members())
                .filter(|&m| self.in_use(m))
                .collect();
            self.issue_flushes(id, members);
        }
    }

    /// Whether write-outs failed since the FLUSH `op` started.
    pub(super) fn cache_failed_since(&self, op: &Op) -> bool {
        self.cache
            .as_ref()
            .is_some_and(|c| c.failures() > op.durable.cache_failures_seen)
    }

    /// Splits `[within, within + len)` of data chunk `d` of `stripe` into
    /// runs that are cached (with their bytes) and runs that are not.
    pub(super) fn cached_runs(
        &self,
        stripe: u64,
        data_index: u32,
        within: u64,
        len: u64,
    ) -> Option<Vec<ChunkRun>> {
        let e = self.cache.as_ref()?.entry(stripe)?;
        let il = self.geometry.interleave_bytes();
        let base = u64::from(data_index) * il;
        let (a, b) = (base + within, base + within + len);
        let mut out = Vec::new();
        let mut at = a;
        for &(x, y) in e.valid().as_slice() {
            if y <= at || x >= b {
                continue;
            }
            let (x, y) = (x.max(at), y.min(b));
            if x > at {
                out.push(ChunkRun::Members {
                    within_bytes: at - base,
                    len_bytes: x - at,
                });
            }
            let bytes = Bytes::copy_from_slice(&e.bytes()[x as usize..y as usize]);
            out.push(ChunkRun::Cached {
                within_bytes: x - base,
                bytes,
            });
            at = y;
        }
        if at < b {
            out.push(ChunkRun::Members {
                within_bytes: at - base,
                len_bytes: b - at,
            });
        }
        Some(out)
    }
}

/// A new entry's stripe buffer of `slen` bytes: `src` at `a`, zeros around
/// it, in one pass.
fn entry_buf(slen: u64, a: u64, src: &[u8]) -> AlignedBuf {
    let (a_at, b_at) = (a as usize, a as usize + src.len());
    assert!(
        b_at as u64 <= slen,
        "a cache entry's bytes lie in its stripe"
    );
    // SAFETY: the closure writes every byte of `dst`.
    unsafe {
        AlignedBuf::filled(slen as usize, |dst| {
            dst[..a_at].fill(MaybeUninit::new(0));
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                dst[a_at..b_at].as_mut_ptr().cast::<u8>(),
                b_at - a_at,
            );
            dst[b_at..].fill(MaybeUninit::new(0));
            Ok::<(), std::convert::Infallible>(())
        })
    }
    .unwrap_or_else(|e| match e {})
}
