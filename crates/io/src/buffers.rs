//! Recycled read buffers.
//!
//! A read's buffer lives until its reply is sent, then is freed; allocating
//! and zeroing a fresh megabyte for every read costs as much as the read.
//! Buffers of a size class are kept for reuse instead (their old contents
//! are overwritten by the next read, which must fill them whole), up to a
//! fixed number of bytes in all, and [`release_idle`] lets them go, so an
//! idle server holds little.
//!
//! Classes are eight per power of two, so a buffer is at most an eighth
//! larger than the read it holds: a server's memory bound counts reads by
//! their length (docs/nbd.md), and power-of-two classes let a RAID-5 read
//! of 4 MiB over three data members hold 6 MiB.

use bytes::Bytes;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Smallest size class: below this, allocation is cheap enough.
const MIN_CLASS_BYTES: usize = 64 << 10;
/// Largest size class: the NBD maximum request.
const MAX_CLASS_BYTES: usize = 32 << 20;
/// Classes per power of two: sizes of 9/16 to 16/16 of it.
const STEPS: usize = 8;
const CLASSES: usize = (MAX_CLASS_BYTES / MIN_CLASS_BYTES).trailing_zeros() as usize * STEPS + 1;
/// Bytes kept idle across all classes.
pub const POOL_MAX_BYTES: u64 = 64 << 20;

struct Pool {
    classes: [Mutex<Vec<Vec<u8>>>; CLASSES],
    idle_bytes: AtomicU64,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        classes: std::array::from_fn(|_| Mutex::new(Vec::new())),
        idle_bytes: AtomicU64::new(0),
    })
}

fn class_of(len: usize) -> Option<usize> {
    if !(MIN_CLASS_BYTES..=MAX_CLASS_BYTES).contains(&len) {
        return None;
    }
    // `len` lies in (top/2, top]; the classes there are k * step for k in
    // 9..=16 (the class of `top` itself is the next octave's first).
    let top = len.next_power_of_two();
    let step = top / (2 * STEPS);
    let k = len.div_ceil(step);
    let octave = (top / MIN_CLASS_BYTES).trailing_zeros() as usize;
    Some(if k == 2 * STEPS {
        octave * STEPS
    } else {
        (octave - 1) * STEPS + (k - STEPS)
    })
}

/// The bytes a buffer of `class` holds.
fn class_bytes(class: usize) -> usize {
    let (octave, k) = (class / STEPS, class % STEPS);
    let base = MIN_CLASS_BYTES << octave;
    base + k * (base / STEPS)
}

/// Frees every buffer kept for reuse (the server calls this when idle).
pub fn release_idle() {
    let p = pool();
    for class in &p.classes {
        let freed = std::mem::take(&mut *class.lock().expect("buffer pool"));
        let bytes: usize = freed.iter().map(Vec::len).sum();
        p.idle_bytes.fetch_sub(bytes as u64, Ordering::Relaxed);
    }
}

/// A buffer of `len` bytes, filled by `fill`, as `Bytes` that return their
/// memory to the pool when the last reference goes. `fill` must write every
/// byte: a recycled buffer still holds an earlier read's data.
pub fn read_into<E>(len: usize, fill: impl FnOnce(&mut [u8]) -> Result<(), E>) -> Result<Bytes, E> {
    let Some(class) = class_of(len) else {
        let mut v = vec![0u8; len];
        fill(&mut v)?;
        return Ok(Bytes::from(v));
    };
    let p = pool();
    let recycled = p.classes[class].lock().expect("buffer pool").pop();
    let mut buf = match recycled {
        Some(b) => {
            p.idle_bytes.fetch_sub(b.len() as u64, Ordering::Relaxed);
            b
        }
        None => vec![0u8; class_bytes(class)],
    };
    fill(&mut buf[..len])?;
    Ok(Bytes::from_owner(Pooled { buf, len, class }))
}

/// [`read_into`] for a reader that fills memory not yet initialised
/// (`Member::read_uninit_at`): buffers below the pool's classes are not
/// zeroed first. `fill` must hand back the slice it was given, initialised;
/// this panics if it hands back another.
pub fn read_into_uninit<E>(
    len: usize,
    fill: impl for<'a> FnOnce(&'a mut [MaybeUninit<u8>]) -> Result<&'a mut [u8], E>,
) -> Result<Bytes, E> {
    if class_of(len).is_some() {
        return read_into(len, |buf| {
            // SAFETY: `MaybeUninit<u8>` has the layout of `u8`; `fill`
            // returns the same bytes as `&mut [u8]`, initialised (checked).
            let raw = unsafe { &mut *(buf as *mut [u8] as *mut [MaybeUninit<u8>]) };
            let (at, n) = (raw.as_ptr() as usize, raw.len());
            let out = fill(raw)?;
            assert!(
                out.as_ptr() as usize == at && out.len() == n,
                "read_into_uninit: another slice"
            );
            Ok(())
        });
    }
    let mut v: Vec<u8> = Vec::with_capacity(len);
    let spare = &mut v.spare_capacity_mut()[..len];
    let (at, n) = (spare.as_ptr() as usize, spare.len());
    let out = fill(spare)?;
    assert!(
        out.as_ptr() as usize == at && out.len() == n,
        "read_into_uninit: another slice"
    );
    // SAFETY: `fill` returned these `len` bytes as an initialised slice.
    unsafe { v.set_len(len) };
    Ok(Bytes::from(v))
}

/// A read buffer that a device fills later (an io_uring read in flight),
/// then handed out as [`Bytes`] like [`read_into`]'s.
pub struct ReadBuf {
    kind: ReadBufKind,
    len: usize,
}

enum ReadBufKind {
    Pooled(Pooled),
    /// Below the pool's classes: not initialised until filled.
    Plain(Vec<u8>),
    Aligned(Aligned),
}

impl ReadBuf {
    /// A buffer for `len` bytes, its memory aligned to `align_bytes` (a
    /// power of two; above 16 for `O_DIRECT`, which pooled buffers do not
    /// promise).
    pub fn new(len: usize, align_bytes: usize) -> ReadBuf {
        let kind = if align_bytes > 16 {
            ReadBufKind::Aligned(Aligned::new(len, align_bytes))
        } else if let Some(class) = class_of(len) {
            let p = pool();
            let recycled = p.classes[class].lock().expect("buffer pool").pop();
            let buf = match recycled {
                Some(b) => {
                    p.idle_bytes.fetch_sub(b.len() as u64, Ordering::Relaxed);
                    b
                }
                None => vec![0u8; class_bytes(class)],
            };
            ReadBufKind::Pooled(Pooled { buf, len, class })
        } else {
            ReadBufKind::Plain(Vec::with_capacity(len))
        };
        ReadBuf { kind, len }
    }

    /// Where the device writes the buffer's bytes; stays put while the
    /// buffer lives (moving a `ReadBuf` does not move its memory).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        match &mut self.kind {
            ReadBufKind::Pooled(p) => p.buf.as_mut_ptr(),
            ReadBufKind::Plain(v) => v.as_mut_ptr(),
            ReadBufKind::Aligned(a) => a.ptr.as_ptr(),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes, once the device has written every one of them.
    ///
    /// # Safety
    /// All `len` bytes from [`as_mut_ptr`](ReadBuf::as_mut_ptr) have been
    /// written (a read that came back whole).
    pub unsafe fn into_bytes(self) -> Bytes {
        match self.kind {
            ReadBufKind::Pooled(p) => Bytes::from_owner(p),
            ReadBufKind::Plain(mut v) => {
                // SAFETY: the caller promises the device wrote them all.
                unsafe { v.set_len(self.len) };
                Bytes::from(v)
            }
            ReadBufKind::Aligned(a) => Bytes::from_owner(a),
        }
    }
}

/// Memory aligned for `O_DIRECT`, not initialised until a device fills it.
pub(crate) struct Aligned {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
    len: usize,
}

// SAFETY: a plain heap allocation owned by this value alone.
unsafe impl Send for Aligned {}
// SAFETY: shared only as `&[u8]` once filled (`ReadBuf::into_bytes`).
unsafe impl Sync for Aligned {}

impl Aligned {
    pub(crate) fn new(len: usize, align_bytes: usize) -> Aligned {
        let layout = std::alloc::Layout::from_size_align(len.max(1), align_bytes)
            .expect("a read buffer's size and alignment fit a layout");
        // SAFETY: the layout's size is not zero.
        let raw = unsafe { std::alloc::alloc(layout) };
        let ptr =
            std::ptr::NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Aligned { ptr, layout, len }
    }
}

impl Aligned {
    /// Its memory, to be written before it is read.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl AsRef<[u8]> for Aligned {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: handed out only by `ReadBuf::into_bytes`, whose caller
        // promises all `len` bytes were written.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

struct Pooled {
    buf: Vec<u8>,
    len: usize,
    class: usize,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let p = pool();
        let size = self.buf.len() as u64;
        if p.idle_bytes.fetch_add(size, Ordering::Relaxed) + size > POOL_MAX_BYTES {
            p.idle_bytes.fetch_sub(size, Ordering::Relaxed);
            return;
        }
        let buf = std::mem::take(&mut self.buf);
        p.classes[self.class].lock().expect("buffer pool").push(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_and_hold_only_the_new_data() {
        let a = read_into::<()>(100_000, |b| {
            b.fill(7);
            Ok(())
        })
        .unwrap();
        assert_eq!(a.len(), 100_000);
        assert!(a.iter().all(|&x| x == 7));
        let ptr = a.as_ptr();
        drop(a);
        let b = read_into::<()>(99_000, |b| {
            b.fill(9);
            Ok(())
        })
        .unwrap();
        assert_eq!(b.len(), 99_000);
        assert!(b.iter().all(|&x| x == 9));
        // Same size class (104 KiB): the first buffer came back.
        assert_eq!(b.as_ptr(), ptr);
        assert!(read_into::<&str>(1 << 20, |_| Err("failed")).is_err());
        assert_eq!(class_of(MIN_CLASS_BYTES), Some(0));
        assert_eq!(class_of(MAX_CLASS_BYTES), Some(CLASSES - 1));
        assert_eq!(class_of(MAX_CLASS_BYTES + 1), None);
    }

    /// The story: 60 clients each pipelining 4 MiB reads took the server
    /// past its documented memory bound. The bound counts a read by its
    /// length, but the buffers holding it were rounded up to a power of
    /// two: a RAID-5 read of 4 MiB over three data members is three member
    /// reads of 1.33 MiB, held in 2 MiB buffers each. A class may now be at
    /// most an eighth larger than what it holds.
    #[test]
    fn a_buffer_is_at_most_an_eighth_larger_than_its_read() {
        let mut len = MIN_CLASS_BYTES;
        while len <= MAX_CLASS_BYTES {
            let class = class_of(len).unwrap();
            let size = class_bytes(class);
            assert!(size >= len, "{len} in a class of {size}");
            assert!(size - len <= len / 8, "{len} in a class of {size}");
            if class > 0 {
                assert!(class_bytes(class - 1) < len, "{len} not in the least class");
            }
            len += 4093;
        }
        assert_eq!(class_bytes(class_of(4 << 20).unwrap()), 4 << 20);
        assert_eq!(class_bytes(CLASSES - 1), MAX_CLASS_BYTES);
    }
}
