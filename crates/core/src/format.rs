//! The sizes every on-disk structure is laid out around: the label at the
//! start of each member and its slot table. The areas after the label (the
//! write-intent bitmap, the checksum area, the partial parity log) place
//! themselves by these, and the label records where each of them lies, so
//! they sit below `label` here rather than taking its constants from it
//! (which made `label` and each area import the other). Byte tables:
//! docs/on-disk-format.md. Also the little-endian field helpers the
//! areas' encoders share.

/// Size of the label at the start of every member.
pub const LABEL_BYTES: usize = 4096;

/// Slots in the slot table, hence the most members a volume can have.
pub const MAX_MEMBERS: u32 = 64;

/// Writes `v` little-endian at `at` (every on-disk integer is).
pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Writes `v` little-endian at `at`.
pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Reads the little-endian `u32` at `at`.
pub fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Reads the little-endian `u64` at `at`.
pub fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
