//! Stripe recovery shared by both backends: argument checking, deciding what
//! has to be solved, and regenerating lost parity. The backends only supply
//! the arithmetic ([`Kernels`]), so the reference and ISA-L paths can differ
//! in how they solve (md's formulas vs. an ISA-L dot product) while agreeing
//! on every rule about which inputs are acceptable.

use std::error::Error;
use std::fmt;

use crate::MAX_DATA_BLOCKS;

/// Why [`recover`](crate::recover) refused a stripe. It refuses before it
/// writes anything, so on `Err` every block is as the caller left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoverError {
    /// `blocks.len()` is neither `data_count + 1` (RAID-5) nor
    /// `data_count + 2` (RAID-6), `data_count` is 0, or a RAID-6 stripe has
    /// more than [`MAX_DATA_BLOCKS`] data blocks.
    BadGeometry { blocks: usize, data_count: usize },
    /// A `missing` entry does not name a block of the stripe.
    IndexOutOfRange { index: usize, blocks: usize },
    /// The same block is listed twice in `missing`.
    DuplicateIndex { index: usize },
    /// More blocks are lost than the parity can rebuild.
    TooManyMissing { missing: usize, parity: usize },
}

impl fmt::Display for RecoverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RecoverError::BadGeometry { blocks, data_count } => write!(
                f,
                "a stripe of {blocks} blocks cannot hold {data_count} data blocks plus P (and Q); \
                 RAID-6 allows at most {MAX_DATA_BLOCKS} data blocks"
            ),
            RecoverError::IndexOutOfRange { index, blocks } => {
                write!(f, "missing block {index} is outside the stripe of {blocks} blocks")
            }
            RecoverError::DuplicateIndex { index } => {
                write!(f, "missing block {index} is listed twice")
            }
            RecoverError::TooManyMissing { missing, parity } => write!(
                f,
                "{missing} blocks are missing but {parity} parity block(s) can rebuild at most {parity}"
            ),
        }
    }
}

impl Error for RecoverError {}

/// The arithmetic a backend provides. Data blocks are given with their
/// syndrome index because Q weights block `i` by g^i.
pub(crate) trait Kernels {
    fn gen_p(data: &[&[u8]], p: &mut [u8]);
    fn gen_q(data: &[&[u8]], q: &mut [u8]);
    fn gen_pq(data: &[&[u8]], p: &mut [u8], q: &mut [u8]);
    /// Rebuilds data block `x` from Q and the other data blocks (P is lost).
    fn data_from_q(x: usize, others: &[(usize, &[u8])], q: &[u8], dx: &mut [u8]);
    /// Rebuilds data blocks `x < y` from P, Q and the other data blocks.
    fn two_data(
        x: usize,
        y: usize,
        others: &[(usize, &[u8])],
        p: &[u8],
        q: &[u8],
        dx: &mut [u8],
        dy: &mut [u8],
    );
}

/// What a stripe has lost, once the request has been checked.
#[derive(Debug)]
struct Lost {
    /// Lost data indices, ascending.
    data: Vec<usize>,
    p: bool,
    q: bool,
}

impl Lost {
    fn classify(blocks: usize, data_count: usize, missing: &[usize]) -> Result<Lost, RecoverError> {
        let bad_geometry = RecoverError::BadGeometry { blocks, data_count };
        let parity = match blocks.checked_sub(data_count) {
            _ if data_count == 0 => return Err(bad_geometry),
            Some(1) => 1,
            Some(2) if data_count <= MAX_DATA_BLOCKS => 2,
            _ => return Err(bad_geometry),
        };
        // Counting first bounds the duplicate scan below to two entries.
        if missing.len() > parity {
            return Err(RecoverError::TooManyMissing {
                missing: missing.len(),
                parity,
            });
        }
        for (k, &index) in missing.iter().enumerate() {
            if index >= blocks {
                return Err(RecoverError::IndexOutOfRange { index, blocks });
            }
            if missing[..k].contains(&index) {
                return Err(RecoverError::DuplicateIndex { index });
            }
        }
        let mut data: Vec<usize> = missing
            .iter()
            .copied()
            .filter(|&i| i < data_count)
            .collect();
        data.sort_unstable();
        Ok(Lost {
            data,
            p: missing.contains(&data_count),
            q: parity == 2 && missing.contains(&(data_count + 1)),
        })
    }
}

/// The body of every backend's `recover`: lost data first (from whichever
/// parity survives), then lost parity from the now complete data.
pub(crate) fn recover<K: Kernels>(
    blocks: &mut [&mut [u8]],
    data_count: usize,
    missing: &[usize],
) -> Result<(), RecoverError> {
    let lost = Lost::classify(blocks.len(), data_count, missing)?;
    let len = blocks[0].len();
    assert!(
        blocks.iter().all(|b| b.len() == len),
        "recover: all blocks of a stripe must have the same length"
    );

    let (data, parity) = blocks.split_at_mut(data_count);
    let (p, q) = match parity {
        [p] => (&mut **p, None),
        [p, q] => (&mut **p, Some(&mut **q)),
        _ => unreachable!("classify accepts only one or two parity blocks"),
    };
    rebuild_data::<K>(data, &lost, p, q.as_deref());

    let data: Vec<&[u8]> = data.iter().map(|d| &**d).collect();
    match (lost.p, q.filter(|_| lost.q)) {
        (true, Some(q)) => K::gen_pq(&data, p, q),
        (true, None) => K::gen_p(&data, p),
        (false, Some(q)) => K::gen_q(&data, q),
        (false, None) => {}
    }
    Ok(())
}

fn rebuild_data<K: Kernels>(data: &mut [&mut [u8]], lost: &Lost, p: &[u8], q: Option<&[u8]>) {
    let mut targets: Vec<&mut [u8]> = Vec::with_capacity(lost.data.len());
    let mut others: Vec<(usize, &[u8])> = Vec::with_capacity(data.len());
    for (i, block) in data.iter_mut().enumerate() {
        if lost.data.contains(&i) {
            targets.push(&mut **block);
        } else {
            others.push((i, &**block));
        }
    }
    // `p` and `q` hold garbage when they are themselves lost; classify()
    // guarantees each arm below reads only parity that survived.
    match (lost.data.as_slice(), targets.as_mut_slice()) {
        ([], []) => {}
        ([_], [dx]) if !lost.p => {
            // D_x = P + (sum of the other data): plain XOR of the survivors.
            let mut sources: Vec<&[u8]> = others.iter().map(|&(_, d)| d).collect();
            sources.push(p);
            K::gen_p(&sources, dx);
        }
        ([x], [dx]) => {
            let q = q.expect("classify: data and P lost implies RAID-6 with Q intact");
            K::data_from_q(*x, &others, q, dx);
        }
        ([x, y], [dx, dy]) => {
            let q = q.expect("classify: two data blocks lost implies RAID-6 with Q intact");
            K::two_data(*x, *y, &others, p, q, dx, dy);
        }
        _ => unreachable!("classify allows at most two lost data blocks"),
    }
}
