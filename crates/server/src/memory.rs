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
