//! The oracle: a flat byte array with what the volume must hold (sparse
//! pages for a volume of TiBs: [`crate::sparse`]).
//!
//! The engine serializes overlapping requests in submission order (FIFO
//! stripe range locks), so each request is applied to the model when it is
//! submitted, and a read is checked against the model as of its submission.
//!
//! Each byte also remembers its last writer, so that the oracle knows which
//! bytes it cannot vouch for: bytes of a write that failed (beyond the
//! redundancy budget it may have landed partly), and after a crash, bytes
//! whose last writer was not durable (not acknowledged before a completed
//! FLUSH, nor a completed FUA write).

use crate::sparse::Pages;
use platter_core::volume::Request;
use std::collections::BTreeSet;

/// Writer id of a byte whose content is unknown (after a crash).
pub const UNKNOWN: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriterState {
    /// Submitted, not yet acknowledged.
    Pending,
    /// Acknowledged; durable after the next completed flush submitted later.
    Acked,
    Durable,
    /// Completed with an error: its bytes may be old, new, or a mix.
    Failed,
}

/// What a read must return, captured at its submission.
#[derive(Clone, Debug)]
pub struct ReadExpect {
    pub offset_bytes: u64,
    pub bytes: Vec<u8>,
    pub writers: Vec<u32>,
}

pub struct Oracle {
    bytes: Pages<u8>,
    writer: Pages<u32>,
    /// By writer id; id 0 is the initial all-zero content (durable).
    writers: Vec<WriterState>,
    acked: BTreeSet<u32>,
    stripe_bytes: u64,
    parity: bool,
}

impl Oracle {
    pub fn new(size_bytes: u64, stripe_bytes: u64, parity: bool) -> Oracle {
        Oracle {
            bytes: Pages::new(size_bytes),
            writer: Pages::new(size_bytes),
            writers: vec![WriterState::Durable],
            acked: BTreeSet::new(),
            stripe_bytes,
            parity,
        }
    }

    pub fn size_bytes(&self) -> u64 {
        self.bytes.len()
    }

    /// A copy of what the volume must hold at `offset_bytes`.
    pub fn bytes(&self, offset_bytes: u64, len_bytes: u64) -> Vec<u8> {
        self.bytes.get(offset_bytes..offset_bytes + len_bytes)
    }

    fn new_writer(&mut self, a: u64, b: u64) -> u32 {
        let id = u32::try_from(self.writers.len()).expect("writer ids fit u32");
        assert!(id != UNKNOWN);
        self.writers.push(WriterState::Pending);
        if a < b {
            self.writer.fill(a..b, id);
        }
        id
    }

    /// Applies a request the way the engine promises to; returns the writer
    /// id of a write, write-zeroes or trim.
    pub fn apply(&mut self, req: &Request) -> Option<u32> {
        let (a, b) = match effect_of(req, self.stripe_bytes, self.parity)? {
            Effect::Data { at, data } => {
                self.bytes.set(at, data);
                (at, at + data.len() as u64)
            }
            Effect::Zeros { from, to } => {
                if from < to {
                    self.bytes.fill(from..to, 0);
                }
                (from, to)
            }
        };
        Some(self.new_writer(a, b))
    }

    pub fn expect(&self, offset_bytes: u64, len_bytes: u64) -> ReadExpect {
        let r = offset_bytes..offset_bytes + len_bytes;
        ReadExpect {
            offset_bytes,
            bytes: self.bytes.get(r.clone()),
            writers: self.writer.get(r),
        }
    }

    fn vouches_for(&self, writer: u32) -> bool {
        writer != UNKNOWN && self.writers[writer as usize] != WriterState::Failed
    }

    /// Compares a read with its expectation, skipping bytes the oracle
    /// cannot vouch for. The error names the first wrong byte.
    pub fn check(&self, expect: &ReadExpect, got: &[u8]) -> Result<(), String> {
        if got.len() != expect.bytes.len() {
            return Err(format!(
                "read at {} returned {} bytes, expected {}",
                expect.offset_bytes,
                got.len(),
                expect.bytes.len()
            ));
        }
        if got == expect.bytes.as_slice() {
            return Ok(());
        }
        let mut wrong = (0..got.len())
            .filter(|&i| got[i] != expect.bytes[i] && self.vouches_for(expect.writers[i]));
        let Some(first) = wrong.next() else {
            return Ok(());
        };
        let count = 1 + wrong.count();
        Err(format!(
            "read at {} ({} bytes): {count} wrong bytes, first at volume offset {}: got {:#04x}, expected {:#04x} (writer {})",
            expect.offset_bytes,
            got.len(),
            expect.offset_bytes + first as u64,
            got[first],
            expect.bytes[first],
            expect.writers[first],
        ))
    }

    /// The bytes of a read that are wrong where the oracle vouches for
    /// them (0 when [`Oracle::check`] passes).
    pub fn wrong_bytes(&self, expect: &ReadExpect, got: &[u8]) -> u64 {
        (0..got.len().min(expect.bytes.len()))
            .filter(|&i| got[i] != expect.bytes[i] && self.vouches_for(expect.writers[i]))
            .count() as u64
    }

    /// A write completed successfully; a FUA write is durable at once.
    pub fn acked(&mut self, writer: u32, fua: bool) {
        let s = &mut self.writers[writer as usize];
        assert_eq!(*s, WriterState::Pending, "writer {writer} completed twice");
        if fua {
            *s = WriterState::Durable;
        } else {
            *s = WriterState::Acked;
            self.acked.insert(writer);
        }
    }

    pub fn failed(&mut self, writer: u32) {
        let s = &mut self.writers[writer as usize];
        assert_eq!(*s, WriterState::Pending, "writer {writer} completed twice");
        *s = WriterState::Failed;
    }

    pub fn state(&self, writer: u32) -> WriterState {
        self.writers[writer as usize]
    }

    /// Taken when a flush is submitted: the writes it will make durable.
    pub fn flush_covers(&self) -> Vec<u32> {
        self.acked.iter().copied().collect()
    }

    /// A flush completed successfully.
    pub fn flushed(&mut self, covers: &[u32]) {
        for &w in covers {
            // A crash in between loses the acked set; such writers stay.
            if self.acked.remove(&w) {
                self.writers[w as usize] = WriterState::Durable;
            }
        }
    }

    /// A crash: every byte whose last writer is not durable becomes unknown.
    /// Returns how many bytes that is.
    pub fn crash(&mut self) -> u64 {
        self.acked.clear();
        let mut unknown = 0;
        // Elements a sparse array does not hold are writer 0: durable.
        let writers = &self.writers;
        self.writer.for_each_held_mut(|w| {
            if *w != UNKNOWN && writers[*w as usize] != WriterState::Durable {
                *w = UNKNOWN;
                unknown += 1;
            }
        });
        unknown
    }
}

/// What a request does to the volume's content, the way the engine
/// promises to. The one statement of this rule: the simulator's [`Oracle`]
/// and the test kit's flat model (through [`apply_to_bytes`]) both apply
/// requests with it.
pub enum Effect<'a> {
    /// A write: these bytes at `at`.
    Data { at: u64, data: &'a [u8] },
    /// Write-zeroes, or a trim: `[from, to)` reads as zeros (empty for a
    /// trim that releases no whole stripe).
    Zeros { from: u64, to: u64 },
}

pub fn effect_of(req: &Request, stripe_bytes: u64, parity: bool) -> Option<Effect<'_>> {
    match req {
        Request::Write {
            offset_bytes, data, ..
        } => Some(Effect::Data {
            at: *offset_bytes,
            data,
        }),
        Request::WriteZeroes {
            offset_bytes,
            len_bytes,
            ..
        } => Some(Effect::Zeros {
            from: *offset_bytes,
            to: offset_bytes + len_bytes,
        }),
        Request::Trim {
            offset_bytes,
            len_bytes,
        } => {
            // Parity levels release whole stripes only; the others the
            // exact range.
            let (mut a, mut b) = (*offset_bytes, offset_bytes + len_bytes);
            if parity {
                a = a.div_ceil(stripe_bytes) * stripe_bytes;
                b = b / stripe_bytes * stripe_bytes;
            }
            Some(Effect::Zeros {
                from: a,
                to: b.max(a),
            })
        }
        // Reads, flushes and volume upkeep leave the content alone.
        _ => None,
    }
}

/// Applies a request to `bytes` (the volume's content, flat) by
/// [`effect_of`]; returns the range it wrote.
pub fn apply_to_bytes(
    bytes: &mut [u8],
    req: &Request,
    stripe_bytes: u64,
    parity: bool,
) -> Option<(u64, u64)> {
    match effect_of(req, stripe_bytes, parity)? {
        Effect::Data { at, data } => {
            bytes[at as usize..at as usize + data.len()].copy_from_slice(data);
            Some((at, at + data.len() as u64))
        }
        Effect::Zeros { from, to } => {
            bytes[from as usize..to as usize].fill(0);
            Some((from, to))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn trims_on_parity_levels_zero_whole_stripes_only() {
        let mut o = Oracle::new(4096, 1024, true);
        o.apply(&Request::Write {
            offset_bytes: 0,
            data: Bytes::from(vec![7; 4096]),
            fua: false,
        });
        o.apply(&Request::Trim {
            offset_bytes: 512,
            len_bytes: 2048,
        });
        assert!(o.bytes(0, 1024).iter().all(|&b| b == 7));
        assert!(o.bytes(1024, 1024).iter().all(|&b| b == 0));
        assert!(o.bytes(2048, 2048).iter().all(|&b| b == 7));
    }

    #[test]
    fn unknown_and_failed_bytes_are_not_checked() {
        let mut o = Oracle::new(16, 16, false);
        let w = o
            .apply(&Request::Write {
                offset_bytes: 0,
                data: Bytes::from(vec![1; 8]),
                fua: false,
            })
            .unwrap();
        let e = o.expect(0, 16);
        assert!(o.check(&e, &[0; 16]).is_err());
        o.failed(w);
        assert!(o.check(&e, &[0; 16]).is_ok());
        assert!(o.check(&e, &[2; 16]).is_err());
    }

    #[test]
    fn only_flushed_writes_survive_a_crash() {
        let mut o = Oracle::new(16, 16, false);
        let write = |o: &mut Oracle, at: u64| {
            o.apply(&Request::Write {
                offset_bytes: at,
                data: Bytes::from(vec![1; 4]),
                fua: false,
            })
            .unwrap()
        };
        let a = write(&mut o, 0);
        o.acked(a, false);
        let covers = o.flush_covers();
        let b = write(&mut o, 4);
        o.acked(b, false);
        o.flushed(&covers);
        assert_eq!(o.crash(), 4);
        let e = o.expect(0, 8);
        assert!(o.check(&e, &[1, 1, 1, 1, 9, 9, 9, 9]).is_ok());
        assert!(o.check(&e, &[1, 1, 1, 0, 1, 1, 1, 1]).is_err());
    }
}
