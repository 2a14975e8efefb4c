//! Opening a volume's devices: read each member's label, assemble the volume
//! the labels describe, and write labels back when the volume's state changes.

use crate::error::{MemberError, MemberErrorKind};
use crate::member::Member;
use crate::open::{open_member, OpenOptions};
use platter_core::assemble::{assemble, AssembleError, Assembly, Found};
use platter_core::intent::{IntentLayout, RegionSet, INTENT_OFFSET_BYTES};
use platter_core::label::{is_blank, printable, Label, LABEL_BYTES};
use platter_core::volume::Health;
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
    #[error("volume '{volume}': {detail}")]
    Intent { volume: String, detail: String },
}

/// A volume's devices, opened and assembled.
pub struct OpenVolume {
    pub assembly: Assembly,
    /// Every device given, in the order given.
    pub devices: Vec<Arc<dyn Member>>,
}

impl OpenVolume {
    /// The volume's write-intent bitmap, if it keeps one: its layout and the
    /// regions marked on the members in use, OR-ed (a member that joined or
    /// failed part way may miss bits; none has extra ones that matter). A
    /// member whose bitmap cannot be read is skipped with a warning; if no
    /// member can be read, every region counts as marked.
    pub fn intent(&self) -> Result<Option<(IntentLayout, RegionSet)>, OpenError> {
        let a = &self.assembly;
        let layout =
            IntentLayout::new(&a.geometry, a.label.intent_region_stripes).map_err(|detail| {
                OpenError::Intent {
                    volume: a.label.name.clone(),
                    detail,
                }
            })?;
        let Some(layout) = layout else {
            return Ok(None);
        };
        let mut bits = RegionSet::new(&layout);
        let mut read_any = false;
        for (slot, device) in self.members_by_slot().iter().enumerate() {
            let Some(device) = device else { continue };
            if a.health[slot] != Health::Online {
                continue;
            }
            let mut area = vec![0u8; layout.area_bytes() as usize];
            match device.read_at(INTENT_OFFSET_BYTES, &mut area) {
                Ok(()) => {
                    bits.union_with(&RegionSet::from_bytes(&layout, &area));
                    read_any = true;
                }
                Err(e) => tracing::warn!(slot, error = %e, "cannot read the write-intent bitmap"),
            }
        }
        if !read_any {
            for r in 0..layout.regions {
                bits.insert(r);
            }
        }
        Ok(Some((layout, bits)))
    }

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
    let (members, unreachable) = open_each(specs, opts, false)?;
    assert!(
        unreachable.is_empty(),
        "nothing is left out when asked not to"
    );
    Ok(members)
}

/// Devices opened, in the order named.
pub type Opened = Vec<Arc<dyn Member>>;

/// [`open_all`], except that a remote member whose host does not answer
/// (refused, timed out, hung up: [`MemberErrorKind::Gone`]) is left out
/// and named in the second list, so that a volume can start without it
/// and take it back later. At least one member must open; local devices
/// and every other error still refuse.
pub fn open_reachable(
    specs: &[String],
    opts: OpenOptions,
) -> Result<(Opened, Vec<String>), OpenError> {
    let (members, mut unreachable) = open_each(specs, opts, true)?;
    if members.is_empty() && !unreachable.is_empty() {
        return Err(OpenError::Member(unreachable.swap_remove(0).1));
    }
    Ok((members, unreachable.into_iter().map(|(s, _)| s).collect()))
}

fn open_each(
    specs: &[String],
    opts: OpenOptions,
    leave_unreachable: bool,
) -> Result<(Opened, Vec<(String, MemberError)>), OpenError> {
    for (i, a) in specs.iter().enumerate() {
        if specs[..i].contains(a) {
            return Err(OpenError::NamedTwice(a.clone()));
        }
    }
    // The same device under two names: the second open would be refused by
    // the first one's lock with a vaguer message, so look first.
    let mut members: Vec<Arc<dyn Member>> = Vec::with_capacity(specs.len());
    let mut unreachable = Vec::new();
    for spec in specs {
        let opened = match open_member(spec, opts) {
            Err(e) if leave_unreachable && e.kind == MemberErrorKind::Gone && is_remote(spec) => {
                unreachable.push((spec.clone(), e));
                continue;
            }
            r => r,
        };
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
    Ok((members, unreachable))
}

/// A member named by URI, not a local path.
fn is_remote(spec: &str) -> bool {
    spec.contains("://") && !spec.starts_with("./") && !spec.starts_with('/')
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

/// Why `m` must not be overwritten unless the operator insists: it carries
/// the label of a volume other than `ours` (named, so the operator knows
/// what would be lost), or a damaged one. `None` for a blank device or one
/// of `ours` (a member given back).
pub fn foreign_label(m: &dyn Member, ours: Option<&[u8; 16]>) -> Result<Option<String>, OpenError> {
    let area = read_label_area(m)?;
    if is_blank(&area) {
        return Ok(None);
    }
    Ok(match Label::decode(&area) {
        Ok(l) if Some(&l.volume_uuid) == ours => None,
        Ok(l) => Some(format!(
            "already belongs to volume '{}' ({}, slot {})",
            printable(&l.name),
            platter_core::assemble::uuid_string(&l.volume_uuid),
            l.slot
        )),
        Err(e) => Some(format!("carries a damaged platter label ({e})")),
    })
}

/// What names a path's device regardless of the name: the device number for
/// a block device, the inode otherwise; `None` for URIs and missing paths.
pub fn path_identity(spec: &str) -> Option<(u64, u64)> {
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
