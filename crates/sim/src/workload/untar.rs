//! An untar-like writer: `files` files (2000) created by `p` processes
//! (1: tar is one), a new directory every `dir_files` files (20), each
//! file placed by [`FsModel`] and written front to back in requests of
//! at most `cluster` bytes (64 KiB, the filesystem's write clustering).
//!
//! File sizes follow the distribution of a source tree: 25 % under
//! 512 bytes, 50 % under 1.5 KiB, 95 % under 32 KiB, 99.5 % under
//! 100 KiB, the rest up to 1 MiB; uniform within each bracket.

use super::fs::FsModel;
use super::{Generator, Next, Op, Params};
use crate::rng::Rng;
use platter_core::units::format_size;
use std::fmt;

/// (cumulative per mille, upper bound in bytes) of each bracket.
pub const SIZE_BRACKETS: [(u64, u64); 5] = [
    (250, 511),
    (500, 1535),
    (950, 32 * 1024 - 1),
    (995, 100 * 1024 - 1),
    (1000, 1 << 20),
];

/// A file size from [`SIZE_BRACKETS`].
pub fn file_size(rng: &mut Rng) -> u64 {
    let x = rng.below(1000);
    let mut lo = 1;
    for (cum, hi) in SIZE_BRACKETS {
        if x < cum {
            return rng.range(lo, hi);
        }
        lo = hi + 1;
    }
    unreachable!("the last bracket is 1000 per mille")
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Untar {
    pub files: u64,
    pub processes: u32,
    pub dir_files: u64,
    pub cluster_bytes: u64,
}

impl Default for Untar {
    fn default() -> Self {
        Untar {
            files: 2000,
            processes: 1,
            dir_files: 20,
            cluster_bytes: 64 << 10,
        }
    }
}

impl Untar {
    pub fn from_params(p: &mut Params) -> Result<Untar, String> {
        let d = Untar::default();
        let u = Untar {
            files: p.num("files", d.files)?,
            processes: p.num("p", u64::from(d.processes))? as u32,
            dir_files: p.num("dir-files", d.dir_files)?,
            cluster_bytes: p.size("cluster", d.cluster_bytes)?,
        };
        if u.processes == 0 || u.dir_files == 0 || u.cluster_bytes < 1024 {
            return Err("untar: p and dir-files at least 1, cluster at least 1k".into());
        }
        Ok(u)
    }

    pub fn generator(&self, volume_bytes: u64, rng: Rng) -> UntarGen {
        UntarGen {
            u: self.clone(),
            fs: FsModel::new(volume_bytes),
            created: 0,
            procs: (0..self.processes).map(|_| (0, 0)).collect(),
            rng,
        }
    }
}

impl fmt::Display for Untar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "untar files={} p={} dir-files={} cluster={}",
            self.files,
            self.processes,
            self.dir_files,
            format_size(self.cluster_bytes)
        )
    }
}

pub struct UntarGen {
    u: Untar,
    fs: FsModel,
    created: u64,
    /// Per process: the rest of the file being written (offset, bytes).
    procs: Vec<(u64, u64)>,
    rng: Rng,
}

impl Generator for UntarGen {
    fn processes(&self) -> u32 {
        self.u.processes
    }

    fn next(&mut self, p: u32, _now_ns: u64) -> Next {
        let (mut at, mut left) = self.procs[p as usize];
        if left == 0 {
            if self.created == self.u.files {
                return Next::Done;
            }
            let dir = self.created / self.u.dir_files;
            self.created += 1;
            let size = file_size(&mut self.rng);
            (at, left) = self.fs.create(dir, size);
        }
        let len = left.min(self.u.cluster_bytes);
        self.procs[p as usize] = (at + len, left - len);
        Next::Op(Op::write(at, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_brackets() {
        let mut r = Rng::new(9);
        let n = 100_000;
        let sizes: Vec<u64> = (0..n).map(|_| file_size(&mut r)).collect();
        let under = |b: u64| sizes.iter().filter(|&&s| s < b).count() as f64 / n as f64;
        assert!((under(512) - 0.25).abs() < 0.01);
        assert!((under(1536) - 0.50).abs() < 0.01);
        assert!((under(32 << 10) - 0.95).abs() < 0.01);
        assert!((under(100 << 10) - 0.995).abs() < 0.002);
    }

    #[test]
    fn every_file_is_written_in_clusters() {
        let u = Untar {
            files: 50,
            ..Untar::default()
        };
        let mut g = u.generator(1 << 30, Rng::new(2));
        let mut n = 0;
        while let Next::Op(o) = g.next(0, 0) {
            assert!(o.len_bytes <= 64 << 10 && o.len_bytes % 1024 == 0);
            n += 1;
        }
        assert!(n >= 50);
    }
}
