//! Which single block of a RAID-6 stripe is wrong, read off its syndromes
//! (the method of mdadm's `raid6check`, after H. P. Anvin's "The
//! mathematics of RAID-6").
//!
//! With the stored parity P, Q and the parity P*, Q* computed from the
//! data as read, the syndromes are `Sp = P ^ P*` and `Sq = Q ^ Q*`. If
//! only data block `z` is wrong, by `e` in some byte, then in that byte
//! `Sp = e` and `Sq = g^z * e`, so `z = log(Sq) - log(Sp)`. A wrong P
//! shows as `Sp != 0, Sq = 0`; a wrong Q as `Sp = 0, Sq != 0`. Every
//! mismatched byte of a block names a culprit; they must all name the same
//! one, or no single block explains the stripe (two or more are wrong).
//! Like any parity check it rests on the single-error assumption: two
//! blocks wrong by the same error in the same bytes cancel in P and read
//! as a wrong Q (per-chunk checksums, not parity, tell those apart).
//! RAID-5 has one syndrome and cannot locate anything: a mismatch there
//! only says *that* the stripe is wrong.

use crate::gf;

/// What the syndromes of one RAID-6 stripe (or one range of its bytes)
/// say about which block is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Culprit {
    /// P and Q agree with the data.
    Consistent,
    /// Data block `.0` (its syndrome order: its position in `data`)
    /// explains every mismatched byte. Its right content is its bytes XOR
    /// the P syndrome: [`correct_data`].
    Data(usize),
    /// Only P disagrees.
    P,
    /// Only Q disagrees.
    Q,
    /// No single block explains the syndromes.
    Several,
}

/// Locates the one wrong block among `data` (in syndrome order), `p` and
/// `q`, if there is one. Panics if the blocks differ in length or `data`
/// is empty or longer than [`crate::MAX_DATA_BLOCKS`].
pub fn locate(data: &[&[u8]], p: &[u8], q: &[u8]) -> Culprit {
    let (sp, sq) = syndromes(data, p, q);
    culprit(&sp, &sq, data.len())
}

/// [`locate`] for a caller that has the syndromes already (the parity the
/// data computes to, XOR the parity stored): the culprit among
/// `data_count` data blocks, P and Q.
pub fn culprit(sp: &[u8], sq: &[u8], data_count: usize) -> Culprit {
    assert_eq!(sp.len(), sq.len(), "P and Q syndromes differ in length");
    let mut found = Culprit::Consistent;
    for (&a, &b) in sp.iter().zip(sq) {
        let here = match (a, b) {
            (0, 0) => continue,
            (_, 0) => Culprit::P,
            (0, _) => Culprit::Q,
            (a, b) => {
                let z = (255 + gf::log2(b) as usize - gf::log2(a) as usize) % 255;
                if z < data_count {
                    Culprit::Data(z)
                } else {
                    // g^z for no data block: no single wrong block makes it.
                    return Culprit::Several;
                }
            }
        };
        match found {
            Culprit::Consistent => found = here,
            f if f == here => {}
            _ => return Culprit::Several,
        }
    }
    found
}

/// The P syndrome, to correct data block `z` once [`locate`] named it:
/// `block ^= sp` restores it. Returned separately so the caller may keep
/// the wrong bytes (for a report) until it writes the repair.
pub fn p_syndrome(data: &[&[u8]], p: &[u8]) -> Vec<u8> {
    let mut sp = p.to_vec();
    let mut computed = vec![0u8; p.len()];
    crate::gen_p(data, &mut computed);
    crate::xor_into(&mut sp, &computed);
    sp
}

/// `block ^= sp`: the located data block, corrected.
pub fn correct_data(block: &mut [u8], sp: &[u8]) {
    crate::xor_into(block, sp);
}

fn syndromes(data: &[&[u8]], p: &[u8], q: &[u8]) -> (Vec<u8>, Vec<u8>) {
    assert_eq!(p.len(), q.len(), "P and Q differ in length");
    let (mut sp, mut sq) = (vec![0u8; p.len()], vec![0u8; q.len()]);
    crate::gen_pq(data, &mut sp, &mut sq);
    crate::xor_into(&mut sp, p);
    crate::xor_into(&mut sq, q);
    (sp, sq)
}
