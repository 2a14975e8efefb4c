//! A tiny filesystem allocation model, after FFS (UFS), for the workloads
//! that create or read files (news spool, untar).
//!
//! - The volume is cut into **groups** of `group_bytes` (32 MiB, FFS's
//!   cylinder groups on the disks of the 1990s). The first `meta_bytes`
//!   (64 KiB) of each group hold its inodes and bitmaps; they are never
//!   read or written here (metadata traffic is not modelled).
//! - **Directories are spread**: directory `d` lives in group
//!   `(d * stride) mod groups`, with `stride` coprime to the group count
//!   and close to the golden ratio of it, so consecutive directories land
//!   far apart and every group gets its share (FFS puts a new directory in
//!   a group with few directories and free inodes).
//! - **Files are contiguous in their directory's group**: each file takes
//!   the next free bytes of the group, rounded up to a fragment (1 KiB)
//!   below a block (8 KiB) and to whole blocks from a block on. A full group
//!   sends the file to the next group with room (FFS's rehash, simplified);
//!   a full filesystem starts again at the front of each group (old files
//!   are overwritten: the model keeps no free lists).
//!
//! Consecutive files of one directory are therefore adjacent on the
//! volume, files of different directories are groups apart: the
//! "contiguous-ish" placement that decides how far heads move.

pub const FRAG_BYTES: u64 = 1024;
pub const BLOCK_BYTES: u64 = 8192;

#[derive(Clone, Debug)]
pub struct FsModel {
    group_bytes: u64,
    meta_bytes: u64,
    groups: u64,
    stride: u64,
    /// Next free byte in each group (relative to the group start).
    next: Vec<u64>,
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl FsModel {
    pub fn new(volume_bytes: u64) -> FsModel {
        FsModel::with_groups(volume_bytes, 32 << 20)
    }

    pub fn with_groups(volume_bytes: u64, group_bytes: u64) -> FsModel {
        let group_bytes = group_bytes.min(volume_bytes).max(BLOCK_BYTES * 2);
        let groups = (volume_bytes / group_bytes).max(1);
        let meta_bytes = (64 << 10).min(group_bytes / 8) / FRAG_BYTES * FRAG_BYTES;
        let mut stride = ((groups as f64) * 0.618_033_988_75) as u64;
        stride = stride.max(1);
        while gcd(stride, groups) != 1 {
            stride += 1;
        }
        FsModel {
            group_bytes,
            meta_bytes,
            groups,
            stride,
            next: vec![meta_bytes; groups as usize],
        }
    }

    pub fn groups(&self) -> u64 {
        self.groups
    }

    pub fn group_of_dir(&self, dir: u64) -> u64 {
        (dir % self.groups) * self.stride % self.groups
    }

    /// Bytes a file of `bytes` occupies.
    pub fn allocated(bytes: u64) -> u64 {
        let bytes = bytes.max(1);
        if bytes < BLOCK_BYTES {
            bytes.div_ceil(FRAG_BYTES) * FRAG_BYTES
        } else {
            bytes.div_ceil(BLOCK_BYTES) * BLOCK_BYTES
        }
    }

    /// Places a file of `bytes` in directory `dir`: its volume offset and
    /// allocated length.
    pub fn create(&mut self, dir: u64, bytes: u64) -> (u64, u64) {
        let len = Self::allocated(bytes).min(self.group_bytes - self.meta_bytes);
        let first = self.group_of_dir(dir);
        for i in 0..self.groups {
            let g = (first + i) % self.groups;
            let at = self.next[g as usize];
            if at + len <= self.group_bytes {
                self.next[g as usize] = at + len;
                return (g * self.group_bytes + at, len);
            }
        }
        // Full: start over in every group.
        for n in &mut self.next {
            *n = self.meta_bytes;
        }
        self.create(dir, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_of_a_directory_are_adjacent_and_directories_spread() {
        let mut fs = FsModel::new(1 << 30);
        assert_eq!(fs.groups(), 32);
        let (a, la) = fs.create(0, 930);
        let (b, _) = fs.create(0, 3030);
        assert_eq!(la, 1024);
        assert_eq!(b, a + 1024);
        let (c, lc) = fs.create(1, 10_000);
        assert_eq!(lc, 16384);
        assert!(c.abs_diff(a) >= 8 << 20, "{a} {c}");
        let groups: std::collections::BTreeSet<u64> = (0..32).map(|d| fs.group_of_dir(d)).collect();
        assert_eq!(groups.len(), 32);
    }
}
