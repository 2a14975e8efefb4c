//! Opening members for the command line.

pub use platter_io::assembly::{assemble_devices, foreign_label, open_all, open_reachable};
