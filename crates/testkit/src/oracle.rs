//! The reference oracle of the tests: what the volume must hold.
//!
//! [`Model`] is a flat byte array for tests that know every request
//! succeeds; the simulator's [`Oracle`] (re-exported) also tracks each
//! byte's last writer, for runs with failures and crashes. Both apply
//! requests with one rule, [`platter_sim::oracle::apply_to_bytes`] (writes,
//! zeroes, and trims that release whole stripes only on parity levels).

use platter_core::volume::{Request, Volume};

pub use platter_sim::oracle::{apply_to_bytes, Oracle, ReadExpect};

/// A flat byte array: what the volume must look like.
pub struct Model {
    pub bytes: Vec<u8>,
    pub stripe_bytes: u64,
    pub parity: bool,
}

impl Model {
    pub fn new(volume: &Volume) -> Model {
        Model {
            bytes: vec![0; volume.size_bytes() as usize],
            stripe_bytes: volume.geometry().stripe_data_bytes(),
            parity: volume.geometry().level().is_parity(),
        }
    }

    /// Applies a request the way the engine promises to.
    pub fn apply(&mut self, req: &Request) {
        apply_to_bytes(&mut self.bytes, req, self.stripe_bytes, self.parity);
    }
}
