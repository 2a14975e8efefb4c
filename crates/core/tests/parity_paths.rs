//! Which parity kernels the engine's writes reach: ISA-L's vector paths
//! take only 32-byte aligned blocks, so every stripe buffer the engine
//! hands them must be aligned (`platter_core::buf`). Checked with the
//! parity crate's call counters, in a test binary of its own so that no
//! other test's calls are counted.

mod support;

use bytes::Bytes;
use platter_core::buf::AlignedBuf;
use platter_core::volume::Request;
use platter_core::{Level, ParityLayout};
use platter_parity::kernel_counts;
use support::*;

fn config(level: Level, members: u32) -> Config {
    Config {
        level,
        layout: ParityLayout::DEFAULT,
        copies: 1,
        members,
        interleave_bytes: 64 << 10,
        rows: 8,
    }
}

/// Client data at a 64-byte boundary plus `skew` bytes.
fn client_data(h: &mut Harness, len: usize, skew: usize) -> Bytes {
    let mut b = AlignedBuf::zeroed(len + skew);
    b[skew..].copy_from_slice(&h.rng.bytes(len));
    b.into_bytes().slice(skew..)
}

#[test]
fn stripe_writes_reach_the_vector_kernels() {
    if platter_parity::backend_name() != "isa-l" {
        platter_testkit::skips::skipped(
            "stripe_writes_reach_the_vector_kernels",
            "platter-parity was built without ISA-L (Debian: libisal-dev)",
        );
        return;
    }
    for (level, n) in [(Level::Raid5, 4), (Level::Raid6, 6)] {
        let mut h = Harness::new(&config(level, n), 1);
        let mut model = Model::new(&h.volume);
        let sb = h.volume.geometry().stripe_data_bytes() as usize;
        // Full stripes, partial stripes (reconstruct-write) and small
        // writes (read-modify-write), from aligned and unaligned client
        // buffers, at sector-aligned offsets.
        for (at, len) in [
            (0, 2 * sb),
            (sb, sb / 2),
            (2 * sb + 4096, 8192),
            (3 * sb + 65536 + 512, 4096),
        ] {
            for skew in [0, 1, 8] {
                let data = client_data(&mut h, len, skew);
                let req = Request::Write {
                    offset_bytes: at as u64,
                    data,
                    fua: false,
                };
                model.apply(&req);
                let before = kernel_counts();
                h.one(req).expect("write");
                let after = kernel_counts();
                assert_eq!(
                    after.fallback, before.fallback,
                    "{level}: a write at {at}+{len} (client buffer skewed {skew}) fell back to the reference loops"
                );
                assert!(
                    after.accelerated > before.accelerated,
                    "{level}: no vector kernel ran for {at}+{len}"
                );
            }
        }
        verify_all(&mut h, &model);
    }
}

/// Full stripes of aligned client data are used where they lie (no copy):
/// each data chunk's own piece, at its own Q coefficient, at every width,
/// down to two data chunks (where pieces taken for the wrong data index
/// keep P, a plain XOR, and only Q tells).
#[test]
fn aligned_full_stripes_in_place_keep_p_and_q_at_every_width() {
    use platter_core::volume::Maintenance;
    for (level, n) in [
        (Level::Raid5, 3),
        (Level::Raid5, 4),
        (Level::Raid6, 4),
        (Level::Raid6, 5),
        (Level::Raid6, 6),
    ] {
        let mut h = Harness::new(&config(level, n), 2);
        let mut model = Model::new(&h.volume);
        let sb = h.volume.geometry().stripe_data_bytes() as usize;
        let data = client_data(&mut h, 2 * sb, 0);
        let req = Request::Write {
            offset_bytes: 0,
            data,
            fua: false,
        };
        model.apply(&req);
        h.one(req).expect("write");
        let report = h.scrub(Maintenance::Check);
        assert!(
            report.mismatched_stripes.is_empty(),
            "{level} over {n}: {:?}",
            report.mismatched_stripes
        );
        verify_all(&mut h, &model);
    }
}
