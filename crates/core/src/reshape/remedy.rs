//! What would make a reshape the plan refuses possible. A refusal that
//! only says why leaves the operator to guess; md's answer is a backup
//! file, ours is to try the plan on the nearby requests that it accepts:
//! the same change with a member added (the new layout then pulls ahead
//! of the old and needs a backup only at its start), or two reshapes
//! through an interleave each of which fits. `platter reshape` and the
//! server's `reshape` command append what this finds to the refusal.

use super::target::{target, Asked};
use super::{reserved_from_bytes, Plan};
use crate::geometry::Geometry;
use crate::units::format_size;

/// An interleave as `--interleave` takes it back: in KiB or larger where
/// exact, else in sectors (126s).
fn interleave_arg(bytes: u64) -> String {
    if bytes.is_multiple_of(1024) {
        format_size(bytes)
    } else {
        format!("{}s", bytes / 512)
    }
}

/// Interleaves tried as the first of two steps: powers of two from 4 KiB
/// to 1 MiB (what `create` is usually given), and halves and doubles of
/// the old and asked interleaves (which line up with them).
fn stepping_stones(old_bytes: u64, asked_bytes: u64) -> Vec<u64> {
    let mut out: Vec<u64> = (12..=20).map(|s| 1u64 << s).collect();
    for il in [old_bytes, asked_bytes] {
        out.extend([il / 2, il * 2]);
    }
    out.retain(|&il| il >= 4096 && il % 512 == 0 && il != old_bytes && il != asked_bytes);
    out.sort_unstable();
    out.dedup();
    out
}

/// Whether the plan accepts moving `old` as `asked` says; the layout it
/// moves to (its data offset may be lower).
fn accepted(old: &Geometry, asked: &Asked, intent_region_stripes: u64) -> Option<Geometry> {
    let new = target(old, asked).ok()?;
    let reserved = reserved_from_bytes(old, &new, intent_region_stripes);
    let plan = Plan::choose(old.clone(), new, reserved).ok()?;
    Some(plan.new_geometry().clone())
}

/// A sentence naming what the plan would accept instead of `asked`,
/// which it refused: `None` when nothing near it fits.
pub fn remedies(old: &Geometry, asked: &Asked, intent_region_stripes: u64) -> Option<String> {
    let mut found = Vec::new();
    let with_member = Asked {
        added_members: asked.added_members + 1,
        ..asked.clone()
    };
    if accepted(old, &with_member, intent_region_stripes).is_some() {
        found.push(format!(
            "the same reshape with {} member{} added (--add DEVICE, as large as the members)",
            if asked.added_members == 0 {
                "a"
            } else {
                "one more"
            },
            if asked.added_members == 0 { "" } else { "s" },
        ));
    }
    let asked_bytes = asked.interleave_bytes.unwrap_or(old.interleave_bytes());
    if asked_bytes != old.interleave_bytes() {
        let two_steps = stepping_stones(old.interleave_bytes(), asked_bytes)
            .into_iter()
            .find(|&mid| {
                let first = Asked {
                    interleave_bytes: Some(mid),
                    ..Asked::default()
                };
                accepted(old, &first, intent_region_stripes)
                    .is_some_and(|g| accepted(&g, asked, intent_region_stripes).is_some())
            });
        if let Some(mid) = two_steps {
            found.push(format!(
                "two reshapes: first to --interleave {}, then this one",
                interleave_arg(mid)
            ));
        }
    }
    (!found.is_empty()).then(|| format!("the plan accepts {}", found.join("; or ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::GeometrySpec;
    use crate::level::{Level, ParityLayout};

    fn raid5(members: usize, interleave_bytes: u64) -> Geometry {
        Geometry::new(GeometrySpec {
            level: Level::Raid5,
            parity_layout: ParityLayout::LeftSymmetric,
            copies: 1,
            interleave_bytes,
            data_offset_bytes: 1 << 20,
            member_data_bytes: vec![64 << 20; members],
        })
        .unwrap()
    }

    /// Every remedy offered is one the plan accepts, step by step: the
    /// refusal that prompted this (128k to 126s, "new stripe 0 overwrites
    /// data beyond 64 stripes") said nothing of what would work.
    #[test]
    fn a_refused_interleave_change_is_offered_what_the_plan_accepts() {
        let old = raid5(4, 128 << 10);
        let asked = Asked {
            interleave_bytes: Some(126 * 512),
            ..Asked::default()
        };
        assert!(accepted(&old, &asked, 0).is_none(), "the plan took it");
        let text = remedies(&old, &asked, 0).expect("a remedy");
        assert!(text.contains("member added"), "{text}");
        let with_member = Asked {
            added_members: 1,
            ..asked.clone()
        };
        assert!(accepted(&old, &with_member, 0).is_some());
    }
}
