//! bonnie-like block I/O and random seeks (Tim Bray's bonnie, as in the
//! vinum tables): a file of `size` bytes (100 MiB) at the front of the
//! volume, in 8 KiB chunks, through four phases run one after another:
//!
//! - `write`: sequential block writes of the whole file;
//! - `rewrite`: each chunk read, then written back;
//! - `read`: sequential block reads;
//! - `seeks`: three processes (bonnie's `SeekProcCount`) reading random
//!   chunks, `seeks` (4000) in all, one in ten written back after its read.
//!
//! `phase=` runs one of them alone (the others' data is assumed in place).

use super::{Generator, Next, Op, Params};
use crate::rng::Rng;
use platter_core::units::format_size;
use std::fmt;

pub const CHUNK_BYTES: u64 = 8192;
pub const SEEK_PROCS: u32 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Write,
    Rewrite,
    Read,
    Seeks,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bonnie {
    pub file_bytes: u64,
    pub phases: Vec<Phase>,
    pub seeks: u64,
}

impl Default for Bonnie {
    fn default() -> Self {
        Bonnie {
            file_bytes: 100 << 20,
            phases: vec![Phase::Write, Phase::Rewrite, Phase::Read, Phase::Seeks],
            seeks: 4000,
        }
    }
}

impl Bonnie {
    pub fn from_params(p: &mut Params) -> Result<Bonnie, String> {
        let d = Bonnie::default();
        let phases = match p.word("phase", "all").as_str() {
            "all" => d.phases.clone(),
            "write" => vec![Phase::Write],
            "rewrite" => vec![Phase::Rewrite],
            "read" => vec![Phase::Read],
            "seeks" => vec![Phase::Seeks],
            other => {
                return Err(format!(
                    "bonnie: phase={other}: expected all, write, rewrite, read or seeks"
                ))
            }
        };
        Ok(Bonnie {
            file_bytes: p.size("size", d.file_bytes)?,
            phases,
            seeks: p.num("seeks", d.seeks)?,
        })
    }

    pub fn generator(&self, volume_bytes: u64, rng: Rng) -> BonnieGen {
        let chunks = (self.file_bytes.min(volume_bytes) / CHUNK_BYTES).max(1);
        BonnieGen {
            phases: self.phases.clone(),
            phase: 0,
            chunks,
            cursor: 0,
            rewrite_pending: false,
            seeks_left: self.seeks,
            seek_rewrite: [None; SEEK_PROCS as usize],
            rng,
            busy: 0,
        }
    }
}

impl fmt::Display for Bonnie {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let phases: Vec<String> = self
            .phases
            .iter()
            .map(|p| format!("{p:?}").to_lowercase())
            .collect();
        write!(
            f,
            "bonnie size={} phases={} seeks={}",
            format_size(self.file_bytes),
            phases.join("+"),
            self.seeks
        )
    }
}

pub struct BonnieGen {
    phases: Vec<Phase>,
    phase: usize,
    chunks: u64,
    cursor: u64,
    rewrite_pending: bool,
    seeks_left: u64,
    /// Per seeker: the chunk to write back after its read.
    seek_rewrite: [Option<u64>; SEEK_PROCS as usize],
    rng: Rng,
    /// Requests of the sequential phases outstanding (at most one).
    busy: u32,
}

impl BonnieGen {
    fn current(&self) -> Option<Phase> {
        self.phases.get(self.phase).copied()
    }
}

impl Generator for BonnieGen {
    fn processes(&self) -> u32 {
        SEEK_PROCS
    }

    fn next(&mut self, p: u32, _now_ns: u64) -> Next {
        // Process 0 was the one outstanding in a sequential phase, if any.
        if p == 0 && self.busy > 0 {
            self.busy -= 1;
        }
        loop {
            let Some(phase) = self.current() else {
                return Next::Done;
            };
            if phase != Phase::Seeks {
                if p != 0 {
                    return Next::Wait;
                }
                let at = self.cursor * CHUNK_BYTES;
                if phase == Phase::Rewrite && self.rewrite_pending {
                    self.rewrite_pending = false;
                    self.cursor += 1;
                    self.busy += 1;
                    return Next::Op(Op::write(at, CHUNK_BYTES));
                }
                if self.cursor == self.chunks {
                    self.phase += 1;
                    self.cursor = 0;
                    continue;
                }
                self.busy += 1;
                return Next::Op(match phase {
                    Phase::Write => {
                        self.cursor += 1;
                        Op::write(at, CHUNK_BYTES)
                    }
                    Phase::Rewrite => {
                        self.rewrite_pending = true;
                        Op::read(at, CHUNK_BYTES)
                    }
                    _ => {
                        self.cursor += 1;
                        Op::read(at, CHUNK_BYTES)
                    }
                });
            }
            // Seeks: wait for the sequential phase's last request.
            if self.busy > 0 {
                return Next::Wait;
            }
            if let Some(c) = self.seek_rewrite[p as usize].take() {
                return Next::Op(Op::write(c * CHUNK_BYTES, CHUNK_BYTES));
            }
            if self.seeks_left == 0 {
                return Next::Done;
            }
            self.seeks_left -= 1;
            let c = self.rng.below(self.chunks);
            if self.rng.below(10) == 0 {
                self.seek_rewrite[p as usize] = Some(c);
            }
            return Next::Op(Op::read(c * CHUNK_BYTES, CHUNK_BYTES));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::OpKind;

    #[test]
    fn phases_run_in_order() {
        let b = Bonnie {
            file_bytes: 4 * CHUNK_BYTES,
            seeks: 6,
            ..Bonnie::default()
        };
        let mut g = b.generator(1 << 30, Rng::new(1));
        assert_eq!(g.next(1, 0), Next::Wait);
        let mut kinds = Vec::new();
        loop {
            match g.next(0, 0) {
                Next::Op(o) => kinds.push(o.kind),
                Next::Wait => panic!("process 0 waits"),
                Next::Done => break,
            }
            if kinds.len() == 16 {
                break;
            }
        }
        use OpKind::*;
        assert_eq!(
            kinds,
            [
                Write, Write, Write, Write, Read, Write, Read, Write, Read, Write, Read, Write,
                Read, Read, Read, Read
            ]
        );
        // Seeks: every process takes part until the count is used up.
        let mut reads = 0;
        for p in [0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2] {
            if let Next::Op(o) = g.next(p, 0) {
                reads += u32::from(o.kind == Read);
            }
        }
        assert_eq!(reads, 6);
    }
}
