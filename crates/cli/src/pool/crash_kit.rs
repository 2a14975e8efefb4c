//! For tests: a drive that a crash cuts off, to write the order of a
//! change's writes against, and pool `tank` gathered from drives in
//! memory, and volumes to lay out on them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use platter_core::pool::area::{gather, Gathered, Seen};
use platter_core::pool::{Drive, Plex, Pool, PoolVolume, Subdisk};
use platter_core::Level;
use platter_io::error::{MemberError, MemberErrorKind, Op};
use platter_io::memory::MemoryMember;
use platter_io::Member;

use super::drives::OpenPool;

/// A drive that a crash cuts off: the write numbered `torn_at` (of
/// every drive's writes, counted together) lands only its first
/// `keep_bytes`, and nothing after it lands at all.
pub struct Crashing {
    pub inner: Arc<MemoryMember>,
    pub writes: Arc<AtomicUsize>,
    pub torn_at: usize,
    pub keep_bytes: usize,
}

impl Member for Crashing {
    fn describe(&self) -> &str {
        self.inner.describe()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> std::result::Result<(), MemberError> {
        self.inner.read_at(offset_bytes, buf)
    }
    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> std::result::Result<(), MemberError> {
        let n = self.writes.fetch_add(1, Ordering::SeqCst);
        if n == self.torn_at {
            let keep = self.keep_bytes.min(data.len());
            self.inner.write_at(offset_bytes, &data[..keep])?;
        }
        if n >= self.torn_at {
            return Err(MemberError::new(
                MemberErrorKind::Gone,
                "crashed",
                Op::Write,
                offset_bytes,
                0,
            ));
        }
        self.inner.write_at(offset_bytes, data)
    }
    fn flush(&self) -> std::result::Result<(), MemberError> {
        Ok(())
    }
    /// Counted with the writes: it lands whole before the cut, not at all
    /// from it.
    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> std::result::Result<(), MemberError> {
        if self.writes.fetch_add(1, Ordering::SeqCst) >= self.torn_at {
            return Err(MemberError::new(
                MemberErrorKind::Gone,
                "crashed",
                Op::Trim,
                offset_bytes,
                0,
            ));
        }
        self.inner.trim(offset_bytes, len_bytes)
    }
}

/// A new pool `tank` on `disks` ([`empty_pool`], each disk a drive of
/// `drive_bytes`), its configuration written to every one.
pub fn write_empty_pool(disks: &[Arc<MemoryMember>], drive_bytes: u64) {
    let drives = u8::try_from(disks.len()).expect("a few drives");
    let pool = empty_pool(drives, drive_bytes);
    for (d, m) in disks.iter().enumerate() {
        super::drives::write_slot(m.as_ref(), &pool, d, 0).unwrap();
    }
}

/// Pool `tank` on `disks` opened as a command opens it, its drives read
/// and written through `over` (the disks themselves, [`plain`], or
/// [`crashing`] ones).
pub fn open_over(disks: &[Arc<MemoryMember>], over: Vec<Arc<dyn Member>>) -> OpenPool {
    OpenPool::over(
        gathered(disks).unwrap(),
        over.into_iter().map(Some).collect(),
    )
}

/// The disks as the pool's drives, nothing cut.
pub fn plain(disks: &[Arc<MemoryMember>]) -> Vec<Arc<dyn Member>> {
    disks
        .iter()
        .map(|d| Arc::clone(d) as Arc<dyn Member>)
        .collect()
}

/// A whole number from the environment, for a seeded test's seeds.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Pool `tank` as the commands gather it from `disks`.
pub fn gathered(disks: &[Arc<MemoryMember>]) -> Result<Gathered, String> {
    let seen: Vec<Seen> = disks
        .iter()
        .map(|m| Seen {
            size_bytes: m.size_bytes(),
            device: m.describe().to_string(),
            slots: super::drives::read_slots(m.as_ref()).unwrap(),
        })
        .collect();
    gather(&seen, Some("tank"))
}

/// `disks` cut off together: the write numbered `torn_at` of all their
/// writes lands its first `keep_bytes`, and none after it lands.
pub fn crashing(
    disks: &[Arc<MemoryMember>],
    torn_at: usize,
    keep_bytes: usize,
) -> Vec<Arc<dyn Member>> {
    let writes = Arc::new(AtomicUsize::new(0));
    disks
        .iter()
        .map(|d| {
            Arc::new(Crashing {
                inner: Arc::clone(d),
                writes: Arc::clone(&writes),
                torn_at,
                keep_bytes,
            }) as Arc<dyn Member>
        })
        .collect()
}

/// Pool `tank` (generation 1) of `drives` drives `d0`, `d1`, ... of
/// `drive_bytes` each, on devices `mem0`, `mem1`, ..., with no volume.
pub fn empty_pool(drives: u8, drive_bytes: u64) -> Pool {
    Pool {
        name: "tank".into(),
        uuid: [5; 16],
        generation: 1,
        drives: (0..drives)
            .map(|i| Drive {
                name: format!("d{i}"),
                uuid: [i + 1; 16],
                size_bytes: drive_bytes,
                device: format!("mem{i}"),
                state: platter_core::pool::DriveState::Up,
            })
            .collect(),
        volumes: Vec::new(),
        moves: Vec::new(),
        detached: Vec::new(),
        converts: Vec::new(),
        copies: Vec::new(),
    }
}

/// Volume `name`: one plex of `org` (64 KiB interleave) with a subdisk
/// of `len_mib` MiB at `at_mib` MiB on each of `drives`.
pub fn volume(name: &str, org: Level, at_mib: u64, len_mib: u64, drives: &[&str]) -> PoolVolume {
    let n = drives.len() as u32;
    PoolVolume {
        name: name.into(),
        size_bytes: None,
        plexes: vec![Plex {
            org,
            interleave_bytes: 64 << 10,
            parity_layout: platter_core::ParityLayout::DEFAULT,
            copies: if org == Level::Mirror { n } else { 1 },
            subdisks: drives
                .iter()
                .map(|d| Subdisk {
                    drive: d.to_string(),
                    offset_bytes: at_mib << 20,
                    len_bytes: len_mib << 20,
                })
                .collect(),
        }],
    }
}

/// Each dropped plex's subdisk in `gone` (drive, offset) holds no label:
/// a scan must not take what a change gave up or ended for an array.
pub fn assert_unlabelled(
    disks: &[Arc<MemoryMember>],
    pool: &Pool,
    gone: &[(String, u64)],
    seed: u64,
) {
    for (drive, offset) in gone {
        let d = pool.drives.iter().position(|d| &d.name == drive);
        let m = &disks[d.expect("a drive of the pool")];
        let mut label = vec![0u8; platter_core::label::LABEL_BYTES];
        m.read_at(*offset, &mut label).unwrap();
        assert!(
            label.iter().all(|&b| b == 0),
            "seed {seed}: a dropped plex's subdisk on {drive} at {offset} keeps its label"
        );
    }
}
