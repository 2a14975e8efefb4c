//! Giving memory back once the server is idle.
//!
//! Buffers freed after a burst of large requests stay with the process:
//! glibc keeps freed blocks in its arenas (one per busy thread, and a
//! 4 MiB block counts as small once blocks that size have been freed), and
//! the read-buffer pool keeps up to 64 MiB. A server that held a gigabyte
//! for clients who then left went on holding it. Once nothing has been
//! buffered for a second, both are let go.

/// Ticks (of the server's 100 ms loop) with nothing buffered before memory
/// is given back.
const IDLE_TICKS: u32 = 10;

#[derive(Default)]
pub struct Trimmer {
    /// Something was buffered (or a connection ended) since the last trim.
    owed: bool,
    idle_ticks: u32,
}

impl Trimmer {
    /// One tick of the server's loop; `busy`: something is buffered now, or
    /// a connection ended since the last tick.
    pub fn tick(&mut self, busy: bool) {
        if busy {
            self.owed = true;
            self.idle_ticks = 0;
            return;
        }
        if !self.owed {
            return;
        }
        self.idle_ticks += 1;
        if self.idle_ticks >= IDLE_TICKS {
            self.owed = false;
            give_back();
        }
    }
}

fn give_back() {
    platter_io::buffers::release_idle();
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        libc::malloc_trim(0);
    }
    tracing::debug!("idle: freed buffers given back to the system");
}

/// While a reshape moves the data, glibc keeps its windows' buffers (up to
/// 16 MiB each) in its heap instead of mapping them afresh: above its mmap
/// threshold every window's buffer was a new mapping, zeroed by the kernel
/// and unmapped on free (perf: 45% of an in-place reshape in clear_page and
/// the fault handler; the move on tmpfs ran 2-3x faster with them kept).
/// Not for good: with a 128 MiB trim threshold glibc never gives back the
/// top of a thread's heap, and a server whose clients had held 200 MiB of
/// reads kept it after they left (`protocol_limits.rs`). After the reshape
/// the trim threshold is 8 MiB, about what glibc's own would have grown
/// to for 4 MiB requests.
pub fn keep_large_buffers(on: bool) {
    // SAFETY: mallopt only sets the allocator's parameters.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        if on {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 20);
        } else {
            libc::mallopt(libc::M_TRIM_THRESHOLD, 8 << 20);
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = on;
}
