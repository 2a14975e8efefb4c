//! Opening a volume's devices: read each member's label, assemble the volume
//! the labels describe, and write labels back when the volume's state changes.

use crate::error::MemberError;
use crate::member::Member;
use crate::open::{open_member, OpenOptions};
use platter_core::assemble::{assemble, AssembleError, Assembly, Found};
use platter_core::label::{Label, LABEL_BYTES};
use std::sync::Arc;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum OpenError {
    #[error("{0}")]
    Member(#[from] MemberError),
    #[error("{0}")]
    Assemble(#[from] AssembleError),
    #[error("member {0} is named twice")]
    NamedTwice(String),
    #[error("members {0} and {1} are the same device")]
    SameDevice(String, String),
    #[error("member {member}: too small to hold a label ({size_bytes} bytes)")]
    TooSmall { member: String, size_bytes: u64 },
}

/// A volume's devices, opened and assembled.
pub struct OpenVolume {
    pub assembly: Assembly,
    /// Every device given, in the order given.
    pub devices: Vec<Arc<dyn Member>>,
}

impl OpenVolume {
    /// The devices by slot, `None` where a slot has no device.
    pub fn members_by_slot(&self) -> Vec<Option<Arc<dyn Member>>> {
        self.assembly
            .slot_device
            .iter()
            .map(|d| d.map(|i| Arc::clone(&self.devices[i])))
            .collect()
    }
}

/// Opens each spec, refusing the same member named twice.
pub fn open_all(specs: &[String], opts: OpenOptions) -> Result<Vec<Arc<dyn Member>>, OpenError> {
    for (i, a) in specs.iter().enumerate() {
        if specs[..i].contains(a) {
            return Err(OpenError::NamedTwice(a.clone()));
        }
    }
    // The same device under two names: the second open would be refused by
    // the first one's lock with a vaguer message, so look first.
    let mut members: Vec<Arc<dyn Member>> = Vec::with_capacity(specs.len());
    for spec in specs {
        let opened = open_member(spec, opts);
        // A file created by an earlier name of this list exists only now.
        let id = path_identity(spec);
        if let Some(earlier) = members.iter().find(|m| id.is_some() && m.identity() == id) {
            return Err(OpenError::SameDevice(
                earlier.describe().to_string(),
                spec.clone(),
            ));
        }
        members.push(Arc::from(opened?));
    }
    Ok(members)
}

/// The first bytes of a member, where its label lives.
pub fn read_label_area(m: &dyn Member) -> Result<Vec<u8>, OpenError> {
    if m.size_bytes() < LABEL_BYTES as u64 {
        return Err(OpenError::TooSmall {
            member: m.describe().to_string(),
            size_bytes: m.size_bytes(),
        });
    }
    let mut buf = vec![0u8; LABEL_BYTES];
    m.read_at(0, &mut buf)?;
    Ok(buf)
}

/// Reads every device's label and assembles the volume they describe.
pub fn assemble_devices(devices: Vec<Arc<dyn Member>>) -> Result<OpenVolume, OpenError> {
    let found = devices
        .iter()
        .map(|m| {
            Ok(Found {
                name: m.describe().to_string(),
                size_bytes: m.size_bytes(),
                label: Label::decode(&read_label_area(m.as_ref())?),
            })
        })
        .collect::<Result<Vec<_>, OpenError>>()?;
    let assembly = assemble(&found)?;
    Ok(OpenVolume { assembly, devices })
}

/// What names a path's device regardless of the name: the device number for
/// a block device, the inode otherwise; `None` for URIs and missing paths.
fn path_identity(spec: &str) -> Option<(u64, u64)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    if spec.contains("://") {
        return None;
    }
    let m = std::fs::metadata(spec).ok()?;
    Some(if m.file_type().is_block_device() {
        (u64::MAX, m.rdev())
    } else {
        (m.dev(), m.ino())
    })
}
