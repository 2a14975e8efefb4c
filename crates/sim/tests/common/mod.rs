//! What the simulator's suites share.

use std::path::PathBuf;

/// DiskSim's three drives in `../shared/data/disksim` next to the
/// repository; `None` (after saying so) when they are absent, and the
/// tests that need them pass without them.
pub fn disksim_data() -> Option<PathBuf> {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/disksim");
    if d.join("cheetah9LP.parv").exists() {
        Some(d)
    } else {
        println!("skipped: DiskSim data not found at {}", d.display());
        None
    }
}
