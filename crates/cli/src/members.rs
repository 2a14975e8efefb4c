//! Opening members for the command line.

pub use platter_io::assembly::{assemble_devices, open_all, read_label_area};
