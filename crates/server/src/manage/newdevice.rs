//! Opening a device the operator names for `replace` or `add-spare`: what
//! it may be (an absolute path, not one of the volume's own devices, big
//! enough, not another volume's member) and when a file is created for it.

use crate::manage::Manager;
use platter_io::assembly::{foreign_label, path_identity};
use platter_io::{open_member, Member, OpenOptions};
use std::path::Path;
use std::sync::Arc;

/// A device named for `replace` or `add-spare`.
pub struct NewDevice<'a> {
    /// An absolute path (the command line resolves a relative one where it
    /// runs: the server's working directory means nothing to the operator),
    /// or a URI.
    pub path: &'a str,
    /// Create a missing file of this size. Without it a missing path is
    /// refused: a typo must not become a new member file.
    pub create_size_bytes: Option<u64>,
    /// Overwrite a device that carries another volume's label.
    pub force: bool,
}

fn is_uri(path: &str) -> bool {
    path.contains("://")
}

/// True when `requested` (a name from the command line: absolute, or as
/// given) names the device the server knows as `own` (as it was given to
/// `serve`, perhaps relative to the server's working directory).
pub fn names_device(own: &str, requested: &str) -> bool {
    own == requested
        || (!is_uri(own) && std::path::absolute(own).is_ok_and(|p| p == Path::new(requested)))
}

/// Empties the partial parity log area (`ppl`, the volume's) of a device
/// joining the volume: records it kept from an earlier life in the volume
/// would be applied after the next crash, undoing writes it never saw.
pub fn empty_ppl(
    device: &dyn Member,
    ppl: Option<platter_core::ppl::Layout>,
) -> Result<(), String> {
    let Some(l) = ppl else { return Ok(()) };
    device
        .trim(l.offset_bytes, l.len_bytes)
        .and_then(|()| device.flush())
        .map_err(|e| {
            format!(
                "{}: emptying its partial parity log: {e}",
                device.describe()
            )
        })
}

impl Manager {
    /// Which of this volume's devices has identity `id`: "member N" or "a
    /// spare".
    fn holder_of(&self, id: (u64, u64)) -> Option<String> {
        let members = self.engine.members();
        if let Some(slot) = members
            .iter()
            .position(|m| m.as_ref().is_some_and(|m| m.identity() == Some(id)))
        {
            return Some(format!("member {slot}"));
        }
        let spares = self.spares.lock().expect("spares");
        spares
            .iter()
            .any(|m| m.identity() == Some(id))
            .then(|| "a spare".to_string())
    }

    /// Opens `new` to take a member's place or wait as a spare. A file this
    /// creates is removed again if the device is refused.
    pub fn open_new_device(&self, new: &NewDevice) -> Result<Arc<dyn Member>, String> {
        let path = new.path;
        if !is_uri(path) && !Path::new(path).is_absolute() {
            return Err(format!(
                "{path}: not an absolute path; the server cannot tell what it is relative \
                 to (platter replace and add-spare send absolute paths)"
            ));
        }
        // Before opening: the volume's own lock on one of its files would
        // refuse the open with a message about another process.
        if let Some(holder) = path_identity(path).and_then(|id| self.holder_of(id)) {
            return Err(format!("{path} is already {holder} of this volume"));
        }
        let label = self.meta.label();
        let needed_bytes = label
            .slots
            .iter()
            .try_fold(label.data_offset_bytes, |acc, s| {
                Some(acc.max(label.data_offset_bytes.checked_add(s.data_size_bytes)?))
            });
        let needed_bytes = needed_bytes.ok_or("the volume's label holds impossible sizes")?;
        let existed = is_uri(path) || std::fs::symlink_metadata(path).is_ok();
        if !existed && new.create_size_bytes.is_none() {
            return Err(format!(
                "{path} does not exist; give --member-size SIZE to create it as a file \
                 (a member of this volume needs at least {needed_bytes} bytes)"
            ));
        }
        let opened = open_member(
            path,
            OpenOptions {
                create_size_bytes: new.create_size_bytes,
                ..self.open_options
            },
        )
        .map_err(|e| e.to_string());
        let ppl = label.ppl;
        let checked = opened.and_then(|device| {
            let device: Arc<dyn Member> = Arc::from(device);
            self.check_new_device(device.as_ref(), needed_bytes, new.force)?;
            empty_ppl(device.as_ref(), ppl)?;
            Ok(device)
        });
        if checked.is_err() && !existed {
            let _ = std::fs::remove_file(path);
        }
        checked
    }

    fn check_new_device(
        &self,
        device: &dyn Member,
        needed_bytes: u64,
        force: bool,
    ) -> Result<(), String> {
        let path = device.describe();
        if device.size_bytes() < needed_bytes {
            return Err(format!(
                "{path}: {} bytes is too small; a member of this volume needs {needed_bytes}",
                device.size_bytes()
            ));
        }
        if force {
            return Ok(());
        }
        let ours = self.meta.label().volume_uuid;
        match foreign_label(device, Some(&ours)).map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(what) => Err(format!("{path}: {what}; use --force to overwrite it")),
        }
    }
}
