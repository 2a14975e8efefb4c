//! Temporary directories and loop devices.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

/// A temporary directory under the target directory of the calling test
/// (`CARGO_TARGET_TMPDIR`), named `PREFIX...`. Not /tmp: that is often
/// tmpfs, where O_DIRECT may be refused and hole punching behaves
/// differently from the disks members live on. Keep the prefix short where
/// a Unix socket goes inside (a socket path is limited to 107 bytes).
#[macro_export]
macro_rules! temp_dir {
    ($prefix:expr) => {
        $crate::dirs::temp_dir_in(env!("CARGO_TARGET_TMPDIR"), $prefix)
    };
}

/// A temporary directory `PREFIX...` under `parent` (see [`temp_dir!`]).
pub fn temp_dir_in(parent: impl AsRef<Path>, prefix: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(parent)
        .expect("create a temporary directory under the target directory")
}

/// A loop device over a file, detached on drop.
pub struct LoopDevice {
    pub path: PathBuf,
}

impl LoopDevice {
    /// Attaches `backing`, with the given logical sector size if not 512.
    pub fn attach(backing: &Path, sector_bytes: u32) -> Result<LoopDevice, String> {
        if !Path::new("/dev/loop-control").exists() {
            return Err("/dev/loop-control does not exist".to_owned());
        }
        let mut command = Command::new("losetup");
        command.args(["--find", "--show"]);
        if sector_bytes != 512 {
            command.arg(format!("--sector-size={sector_bytes}"));
        }
        let output = command
            .arg(backing)
            .output()
            .map_err(|err| format!("cannot run losetup: {err}"))?;
        if !output.status.success() {
            return Err(format!(
                "losetup --find --show failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        Ok(LoopDevice { path })
    }

    /// The kernel's own idea of the size, from sysfs (512-byte sectors), as
    /// a check on BLKGETSIZE64 that does not go through our ioctl code.
    pub fn sysfs_size_bytes(&self) -> u64 {
        let name = self
            .path
            .file_name()
            .expect("device name")
            .to_string_lossy();
        let sectors = fs::read_to_string(format!("/sys/class/block/{name}/size"))
            .expect("read the loop device's size from sysfs");
        sectors.trim().parse::<u64>().expect("a number of sectors") * 512
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.path).status();
    }
}
