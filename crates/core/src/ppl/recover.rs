//! Making parity agree with the data after a crash, from the log.

use super::Record;
use crate::geometry::{uncovered_rows, Geometry};

/// A parity write recovery asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fix {
    pub member: u32,
    pub offset_bytes: u64,
    pub data: Vec<u8>,
}

/// What recovery found and asks for.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Parity writes (no two overlap), to be made and then flushed.
    pub fixes: Vec<Fix>,
    /// Distinct records applied (a record is on each parity member).
    pub records: u64,
    /// Rows left alone because a member they modify is gone: their cells
    /// being written read back as whatever the parity makes of them.
    pub rows_skipped_bytes: u64,
}

/// Parity from the log: for every row of a logged stripe, from the newest
/// record that covers it, P = PP ^ the modified cells as the members hold
/// them now (Q likewise, each cell scaled by its data index's
/// coefficient). An older record's partial parity is stale where a newer
/// one wrote: the newest decides each row, whether it can be applied there
/// or not.
/// `present` says which members hold their data (a missing or failed one is
/// neither read nor written); `read` reads a member's bytes.
///
/// Rows where a modified cell's member is gone keep their parity: P
/// cannot be made there, and md's PPL does the same. Every other cell of
/// the stripe, the ones nobody was writing, then rebuilds right.
pub fn recover(
    geometry: &Geometry,
    present: &[bool],
    mut records: Vec<Record>,
    read: &mut dyn FnMut(u32, u64, u64) -> Result<Vec<u8>, String>,
) -> Result<Recovered, String> {
    let mut out = Recovered::default();
    records.sort_by_key(|r| std::cmp::Reverse(r.seq));
    records.dedup_by_key(|r| r.seq);
    // Per stripe, the rows a newer record decided.
    let mut decided: std::collections::HashMap<u64, Vec<(u64, u64)>> =
        std::collections::HashMap::new();
    for r in &records {
        out.records += 1;
        for &stripe in &r.stripes {
            let rows = decided.entry(stripe).or_default();
            apply(geometry, present, r, stripe, rows, read, &mut out)?;
            rows.push((r.lo_bytes, r.hi_bytes));
            rows.sort_unstable();
        }
    }
    Ok(out)
}

/// One record's rows of one stripe.
fn apply(
    geometry: &Geometry,
    present: &[bool],
    r: &Record,
    stripe: u64,
    decided: &[(u64, u64)],
    read: &mut dyn FnMut(u32, u64, u64) -> Result<Vec<u8>, String>,
    out: &mut Recovered,
) -> Result<(), String> {
    if stripe >= geometry.stripes() {
        return Err(format!(
            "log record {} names stripe {stripe}, past the volume's {} stripes",
            r.seq,
            geometry.stripes()
        ));
    }
    let roles = geometry
        .parity_roles(stripe)
        .ok_or("a partial parity log on a level without parity")?;
    let k = roles.data.len() as u32;
    if let Some(p) = r.pieces.iter().find(|p| p.data_index >= k) {
        return Err(format!(
            "log record {} names data index {} of a {k}-data stripe",
            r.seq, p.data_index
        ));
    }
    let lo = r.lo_bytes;
    let hull = (r.hi_bytes - lo) as usize;
    // Rows a newer record decided, and rows where a modified cell's member
    // is gone: this record makes no parity there.
    let mut gone: Vec<(u64, u64)> = r
        .pieces
        .iter()
        .filter(|p| !present[roles.data[p.data_index as usize] as usize])
        .map(|p| (p.within_bytes, p.within_bytes + p.len_bytes))
        .collect();
    gone.sort_unstable();
    let newer = uncovered_rows(lo, r.hi_bytes, decided.iter().copied());
    let newer_bytes: u64 = uncovered_rows(lo, r.hi_bytes, newer)
        .map(|(a, b)| b - a)
        .sum();
    gone.extend_from_slice(decided);
    gone.sort_unstable();
    let (mut p_new, mut q_new) = if r.whole {
        (Some(vec![0; hull]), roles.q.map(|_| vec![0; hull]))
    } else {
        (
            r.pp.as_ref().map(|b| b.to_vec()),
            r.pq.as_ref().map(|b| b.to_vec()),
        )
    };
    for piece in &r.pieces {
        let m = roles.data[piece.data_index as usize];
        if !present[m as usize] {
            continue;
        }
        let cell = read(
            m,
            geometry.member_offset_bytes(stripe, piece.within_bytes),
            piece.len_bytes,
        )?;
        let at = (piece.within_bytes - lo) as usize;
        let len = piece.len_bytes as usize;
        if let Some(p) = p_new.as_mut() {
            platter_parity::xor_into(&mut p[at..at + len], &cell);
        }
        if let Some(q) = q_new.as_mut() {
            let coef = platter_parity::gf_exp2(roles.q_slot[piece.data_index as usize]);
            platter_parity::mul_xor_into(coef, &cell, &mut q[at..at + len]);
        }
    }
    let keep: Vec<(u64, u64)> = uncovered_rows(lo, r.hi_bytes, gone).collect();
    out.rows_skipped_bytes +=
        hull as u64 - newer_bytes - keep.iter().map(|(a, b)| b - a).sum::<u64>();
    for (member, parity) in [(Some(roles.p), p_new), (roles.q, q_new)] {
        let (Some(member), Some(parity)) = (member, parity) else {
            continue;
        };
        if !present[member as usize] {
            continue;
        }
        for &(a, b) in &keep {
            out.fixes.push(Fix {
                member,
                offset_bytes: geometry.member_offset_bytes(stripe, a),
                data: parity[(a - lo) as usize..(b - lo) as usize].to_vec(),
            });
        }
    }
    Ok(())
}
