//! The sizes every on-disk structure is laid out around: the label at the
//! start of each member and its slot table. The areas after the label (the
//! write-intent bitmap, the checksum area, the partial parity log) place
//! themselves by these, and the label records where each of them lies, so
//! they sit below `label` here rather than taking its constants from it
//! (which made `label` and each area import the other). Byte tables:
//! docs/on-disk-format.md.

/// Size of the label at the start of every member.
pub const LABEL_BYTES: usize = 4096;

/// Slots in the slot table, hence the most members a volume can have.
pub const MAX_MEMBERS: u32 = 64;
