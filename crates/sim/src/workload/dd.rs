//! dd-like sequential streams: `bs`-byte requests from offset 0 upwards,
//! `qd` of them in flight (dd itself has one; `qd` is fio's iodepth), until
//! `total` bytes (cut to the volume) have been asked for.

use super::{Generator, Next, Op, Params};
use platter_core::units::format_size;
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dd {
    pub write: bool,
    pub block_bytes: u64,
    pub queue_depth: u32,
    pub total_bytes: u64,
}

impl Default for Dd {
    fn default() -> Self {
        Dd {
            write: false,
            block_bytes: 64 << 10,
            queue_depth: 1,
            total_bytes: 64 << 20,
        }
    }
}

impl Dd {
    pub fn from_params(p: &mut Params) -> Result<Dd, String> {
        let d = Dd::default();
        let rw = p.word("rw", "read");
        let write = match rw.as_str() {
            "read" => false,
            "write" => true,
            other => return Err(format!("dd: rw={other}: expected read or write")),
        };
        let dd = Dd {
            write,
            block_bytes: p.size("bs", d.block_bytes)?,
            queue_depth: p.num("qd", 1)? as u32,
            total_bytes: p.size("total", d.total_bytes)?,
        };
        if dd.block_bytes == 0 || !dd.block_bytes.is_multiple_of(512) || dd.queue_depth == 0 {
            return Err("dd: bs must be a positive multiple of 512 and qd at least 1".into());
        }
        Ok(dd)
    }

    pub fn generator(&self, volume_bytes: u64) -> DdGen {
        let total = self.total_bytes.min(volume_bytes) / self.block_bytes * self.block_bytes;
        DdGen {
            dd: self.clone(),
            next_bytes: 0,
            end_bytes: total,
        }
    }
}

impl fmt::Display for Dd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "dd {} bs={} qd={} total={}",
            if self.write { "write" } else { "read" },
            format_size(self.block_bytes),
            self.queue_depth,
            format_size(self.total_bytes)
        )
    }
}

pub struct DdGen {
    dd: Dd,
    next_bytes: u64,
    end_bytes: u64,
}

impl Generator for DdGen {
    fn processes(&self) -> u32 {
        self.dd.queue_depth
    }

    fn next(&mut self, _p: u32, _now_ns: u64) -> Next {
        if self.next_bytes >= self.end_bytes {
            return Next::Done;
        }
        let at = self.next_bytes;
        self.next_bytes += self.dd.block_bytes;
        let bs = self.dd.block_bytes;
        Next::Op(if self.dd.write {
            Op::write(at, bs)
        } else {
            Op::read(at, bs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_in_order_to_the_end() {
        let dd = Dd {
            total_bytes: 4 << 16,
            ..Dd::default()
        };
        let mut g = dd.generator(1 << 30);
        let offs: Vec<u64> = std::iter::from_fn(|| match g.next(0, 0) {
            Next::Op(o) => Some(o.offset_bytes),
            _ => None,
        })
        .collect();
        assert_eq!(offs, vec![0, 65536, 131072, 196608]);
    }
}
