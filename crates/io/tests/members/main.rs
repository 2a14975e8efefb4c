//! Integration tests for the member back ends, in one binary.

mod block_device;
mod common;
mod errors;
mod harness;
