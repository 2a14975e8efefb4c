//! raidtest-like random I/O (FreeBSD's `tools/tools/raidtest`): `n`
//! requests in all, spread over `p` processes that each keep one request
//! outstanding; sizes uniform over `min..=max` in whole KiB (1 to 128 KiB
//! by default), offsets uniform over the volume and multiples of `align`
//! (a sector by default; fio aligns random offsets to its block size),
//! `read` percent reads (50) and the rest writes.

use super::{random_offset_aligned, uniform_units, Generator, Next, Op, Params};
use crate::rng::Rng;
use platter_core::units::format_size;
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Raidtest {
    pub processes: u32,
    pub requests: u64,
    pub read_percent: u32,
    pub min_bytes: u64,
    pub max_bytes: u64,
    /// Offsets are multiples of this.
    pub align_bytes: u64,
}

impl Default for Raidtest {
    fn default() -> Self {
        Raidtest {
            processes: 8,
            requests: 10_000,
            read_percent: 50,
            min_bytes: 1 << 10,
            max_bytes: 128 << 10,
            align_bytes: 512,
        }
    }
}

impl Raidtest {
    pub fn from_params(p: &mut Params) -> Result<Raidtest, String> {
        let d = Raidtest::default();
        let r = Raidtest {
            processes: p.num("p", u64::from(d.processes))? as u32,
            requests: p.num("n", d.requests)?,
            read_percent: p.num("read", u64::from(d.read_percent))? as u32,
            min_bytes: p.size("min", d.min_bytes)?,
            max_bytes: p.size("max", d.max_bytes)?,
            align_bytes: p.size("align", d.align_bytes)?,
        };
        if r.processes == 0 || r.read_percent > 100 {
            return Err("raidtest: p at least 1, read at most 100".into());
        }
        if r.min_bytes < 512 || !r.min_bytes.is_multiple_of(512) || r.max_bytes < r.min_bytes {
            return Err("raidtest: min and max multiples of 512 with min <= max".into());
        }
        if r.align_bytes < 512 || !r.align_bytes.is_multiple_of(512) {
            return Err("raidtest: align a positive multiple of 512".into());
        }
        Ok(r)
    }

    pub fn generator(&self, volume_bytes: u64, rng: Rng) -> RaidtestGen {
        RaidtestGen {
            w: self.clone(),
            left: self.requests,
            volume_bytes,
            rng,
        }
    }
}

impl fmt::Display for Raidtest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "raidtest p={} n={} read={}% size={}..{}",
            self.processes,
            self.requests,
            self.read_percent,
            format_size(self.min_bytes),
            format_size(self.max_bytes)
        )?;
        if self.align_bytes != 512 {
            write!(f, " align={}", format_size(self.align_bytes))?;
        }
        Ok(())
    }
}

pub struct RaidtestGen {
    w: Raidtest,
    left: u64,
    volume_bytes: u64,
    rng: Rng,
}

impl Generator for RaidtestGen {
    fn processes(&self) -> u32 {
        self.w.processes
    }

    fn next(&mut self, _p: u32, _now_ns: u64) -> Next {
        if self.left == 0 {
            return Next::Done;
        }
        self.left -= 1;
        let r = &mut self.rng;
        // Whole KiB when the bounds allow it, else whole sectors.
        let unit = if self.w.min_bytes.is_multiple_of(1024) && self.w.max_bytes.is_multiple_of(1024)
        {
            1024
        } else {
            512
        };
        let len = uniform_units(r, self.w.min_bytes, self.w.max_bytes, unit).min(self.volume_bytes);
        let at = random_offset_aligned(r, self.volume_bytes, len, self.w.align_bytes);
        Next::Op(if r.chance(self.w.read_percent) {
            Op::read(at, len)
        } else {
            Op::write(at, len)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::OpKind;

    #[test]
    fn sizes_and_offsets_stay_in_bounds_and_mix() {
        let w = Raidtest::default();
        let mut g = w.generator(1 << 30, Rng::new(3));
        let mut reads = 0;
        for _ in 0..w.requests {
            let Next::Op(o) = g.next(0, 0) else {
                panic!("ended early")
            };
            assert!((1024..=128 << 10).contains(&o.len_bytes) && o.len_bytes % 1024 == 0);
            assert!(o.offset_bytes % 512 == 0 && o.offset_bytes + o.len_bytes <= 1 << 30);
            reads += u32::from(o.kind == OpKind::Read);
        }
        assert!((4500..5500).contains(&reads), "{reads}");
        assert_eq!(g.next(0, 0), Next::Done);
    }

    #[test]
    fn align_puts_offsets_on_block_boundaries() {
        let spec = crate::workload::WorkloadSpec::parse("raidtest:min=4k,max=4k,align=4k").unwrap();
        let crate::workload::WorkloadSpec::Raidtest(w) = spec else {
            panic!("a raidtest")
        };
        assert_eq!(w.align_bytes, 4096);
        let mut g = w.generator((1 << 20) + 512, Rng::new(5));
        let mut odd = false;
        for _ in 0..2000 {
            let Next::Op(o) = g.next(0, 0) else {
                panic!("ended early")
            };
            assert_eq!(o.offset_bytes % 4096, 0, "{o:?}");
            assert!(o.offset_bytes + 4096 <= 1 << 20);
            odd |= o.offset_bytes == (1 << 20) - 4096;
        }
        assert!(odd, "the last whole block is drawn too");
        assert!(w.to_string().ends_with("align=4k"), "{w}");
        // A sector by default: the same draws as before `align`.
        let d = Raidtest::default();
        let mut g = d.generator(1 << 30, Rng::new(3));
        let Next::Op(o) = g.next(0, 0) else { panic!() };
        let mut r = Rng::new(3);
        let len = uniform_units(&mut r, 1024, 128 << 10, 1024);
        let slots = ((1 << 30) - len) / 512 + 1;
        assert_eq!(o.offset_bytes, r.below(slots) * 512);
    }
}
