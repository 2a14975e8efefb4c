//! Opening members and reading their labels.

use crate::error::{CliError, Result};
use platter_core::assemble::{assemble, Assembly, Found};
use platter_core::label::{Label, LABEL_BYTES};
use platter_io::{open_member, Member, OpenOptions};
use std::sync::Arc;

/// Opens each spec, refusing the same member named twice.
pub fn open_all(specs: &[String], opts: OpenOptions) -> Result<Vec<Arc<dyn Member>>> {
    for (i, a) in specs.iter().enumerate() {
        if specs[..i].contains(a) {
            return Err(CliError(format!("member {a} is named twice")));
        }
    }
    specs
        .iter()
        .map(|s| open_member(s, opts).map(Arc::from).map_err(CliError::from))
        .collect()
}

/// The first bytes of a member, where its label lives.
pub fn read_label_area(m: &dyn Member) -> Result<Vec<u8>> {
    if m.size_bytes() < LABEL_BYTES as u64 {
        return Err(CliError(format!(
            "member {}: too small to hold a label ({} bytes)",
            m.describe(),
            m.size_bytes()
        )));
    }
    let mut buf = vec![0u8; LABEL_BYTES];
    m.read_at(0, &mut buf)?;
    Ok(buf)
}

/// Reads every member's label and assembles the volume they describe.
pub fn assemble_members(members: &[Arc<dyn Member>]) -> Result<Assembly> {
    let found = members
        .iter()
        .map(|m| {
            Ok(Found {
                name: m.describe().to_string(),
                size_bytes: m.size_bytes(),
                label: Label::decode(&read_label_area(m.as_ref())?),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(assemble(&found)?)
}
