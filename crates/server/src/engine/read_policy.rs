//! Read balancing on a served volume: the policy from the labels at start,
//! which members spin (for `auto`), and `platter read-policy --control`,
//! which changes the policy live and records it in the labels.

use crate::manage::Manager;
use platter_core::balance::ReadPolicy;
use platter_core::label::Label;
use platter_core::volume::Volume;
use platter_io::Member;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Whether the device in `slot` spins: the operator's word, else what the
/// device says (sysfs for block devices and the disks under files), else
/// unknown.
pub fn rotational_of(
    slot: u32,
    device: Option<&Arc<dyn Member>>,
    overrides: &BTreeMap<u32, bool>,
) -> Option<bool> {
    overrides
        .get(&slot)
        .copied()
        .or_else(|| device.and_then(|d| d.rotational()))
}

/// Whether each slot's device spins ([`rotational_of`]), by slot.
pub fn rotations(
    members: &[Option<Arc<dyn Member>>],
    overrides: &BTreeMap<u32, bool>,
) -> Vec<Option<bool>> {
    members
        .iter()
        .enumerate()
        .map(|(slot, device)| rotational_of(slot as u32, device.as_ref(), overrides))
        .collect()
}

/// Sets up a new volume's balancer: every member's rotation and the
/// labels' policy. A policy the labels name but this build cannot apply
/// (unknown code, bad argument) is reported and `auto` is used; the labels
/// keep it until the operator sets another.
pub fn configure(
    vol: &mut Volume,
    label: &Label,
    members: &[Option<Arc<dyn Member>>],
    overrides: &BTreeMap<u32, bool>,
    write_mostly: &BTreeSet<u32>,
) {
    for (slot, spins) in rotations(members, overrides).into_iter().enumerate() {
        vol.set_rotational(slot as u32, spins);
    }
    for &slot in write_mostly {
        vol.set_write_mostly(slot, true);
    }
    let g = vol.geometry();
    let (level, n, copies) = (g.level(), g.members(), g.copies());
    let policy = ReadPolicy::from_label(label.read_policy, label.read_policy_arg)
        .and_then(|p| p.check(level, n, copies).map(|()| p));
    match policy {
        Ok(p) => {
            vol.set_read_policy(p).expect("checked");
        }
        Err(e) => {
            tracing::warn!("the labels' read policy cannot be used ({e}); reading with auto");
            vol.set_read_policy(ReadPolicy::Auto)
                .expect("auto fits every level");
        }
    }
    if copies > 1 {
        tracing::info!(
            policy = %vol.read_policy(),
            in_effect = %vol.effective_read_policy(),
            "read policy"
        );
    }
}

impl Manager {
    /// The read policy part of `status`.
    pub fn read_policy_status(&self) -> Value {
        let (policy, effective, rotational, write_mostly, latency_us) =
            self.engine.with_volume(|v| {
                let b = v.balancer();
                let members = 0..v.geometry().members();
                (
                    v.read_policy(),
                    v.effective_read_policy(),
                    b.rotational().to_vec(),
                    members
                        .clone()
                        .filter(|&m| b.write_mostly(m))
                        .collect::<Vec<_>>(),
                    members.map(|m| b.latency_ns(m) / 1000).collect::<Vec<_>>(),
                )
            });
        json!({
            "policy": policy.to_string(),
            "in_effect": effective.to_string(),
            "rotational": rotational,
            "write_mostly": write_mostly,
            "latency_us": latency_us,
        })
    }

    /// `read-policy`: shows the policy, or sets it (live, and in the labels).
    /// A level without copies has none to show or set, and says why.
    pub fn read_policy(&self, policy: Option<&str>) -> Result<Value, String> {
        let level = self.engine.with_volume(|v| {
            let g = v.geometry();
            (g.copies() < 2).then(|| g.level())
        });
        if let Some(level) = level {
            let why = platter_core::balance::no_copies(level);
            return match policy {
                None => Ok(json!({ "policy": null, "no_copies": why })),
                Some(p) => Err(format!("read policy {p}: {why}")),
            };
        }
        let Some(text) = policy else {
            return Ok(self.read_policy_status());
        };
        let policy: ReadPolicy = text.parse()?;
        self.engine.with_volume(|v| v.set_read_policy(policy))?;
        self.meta.record(|l| {
            l.read_policy = policy.code();
            l.read_policy_arg = policy.arg();
        });
        tracing::info!(%policy, "read policy changed");
        let mut v = self.read_policy_status();
        // A read-only server leaves the labels alone: the change lasts
        // until it stops.
        v["recorded"] = json!(!self.meta.read_only());
        Ok(v)
    }

    /// A device now in `slot` (a replacement or a spare): its rotation.
    pub fn note_rotational(&self, slot: u32, device: &Arc<dyn Member>) {
        let r = rotational_of(slot, Some(device), &self.rotational);
        self.engine.with_volume(|v| v.set_rotational(slot, r));
    }
}
