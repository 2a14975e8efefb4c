//! Observability: the Prometheus metrics and the live page, alerts for
//! events that need a person, the volume described for `status`, and the
//! host's registry of served volumes.

pub mod alerts;
pub mod describe;
pub mod drives;
pub(crate) mod livepage;
pub mod metrics;
pub mod registry;
