use super::*;
use crate::error::{MemberErrorKind, Op};
use crate::MemoryMember;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

const BYTES: u64 = 256 << 10;
const CHUNK: usize = 16 << 10;

/// A member whose reads take a while: the copy's read and its write to
/// the new place are far apart, as they are on a disk.
struct SlowReads(MemoryMember);

impl Member for SlowReads {
    fn describe(&self) -> &str {
        self.0.describe()
    }
    fn size_bytes(&self) -> u64 {
        self.0.size_bytes()
    }
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), MemberError> {
        // After the read: the bytes read grow old before the copy's write.
        let read = self.0.read_at(offset_bytes, buf);
        std::thread::sleep(Duration::from_micros(300));
        read
    }
    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> Result<(), MemberError> {
        self.0.write_at(offset_bytes, data)
    }
    fn flush(&self) -> Result<(), MemberError> {
        self.0.flush()
    }
    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), MemberError> {
        self.0.trim(offset_bytes, len_bytes)
    }
}

/// A new place whose writes fail after the first `ok` of them.
struct FailingWrites {
    inner: MemoryMember,
    ok: u64,
    seen: AtomicU64,
}

impl Member for FailingWrites {
    fn describe(&self) -> &str {
        "failing"
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), MemberError> {
        self.inner.read_at(offset_bytes, buf)
    }
    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> Result<(), MemberError> {
        if self.seen.fetch_add(1, Ordering::AcqRel) >= self.ok {
            return Err(MemberError::new(
                MemberErrorKind::Io,
                "failing",
                Op::Write,
                offset_bytes,
                data.len() as u64,
            ));
        }
        self.inner.write_at(offset_bytes, data)
    }
    fn flush(&self) -> Result<(), MemberError> {
        Ok(())
    }
    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), MemberError> {
        self.inner.trim(offset_bytes, len_bytes)
    }
}

fn bytes_of(m: &dyn Member) -> Vec<u8> {
    let mut out = vec![0u8; m.size_bytes() as usize];
    m.read_at(0, &mut out).unwrap();
    out
}

/// The copy as a mover makes it: the next chunk read (held) while a
/// thread of its own writes the last, two ranges held at once.
fn copy_pipelined(m: &MovingMember) {
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(CopyHold<'_>, Vec<u8>)>(0);
        scope.spawn(move || {
            for (held, buf) in rx {
                held.write(&buf);
            }
        });
        for offset in (0..BYTES).step_by(CHUNK) {
            let mut buf = vec![0u8; CHUNK];
            let held = m.read_held(offset, &mut buf).unwrap();
            tx.send((held, buf)).unwrap();
        }
    });
}

/// The story this guards: a copy reads a chunk of the old place, a
/// client's write lands on both places, then the copy writes the old
/// bytes it read over the new place, which now differs from the old for
/// good; the moved subdisk would serve a write lost. Writers hammer the
/// subdisk while the copy runs (its reads slowed so that the window is
/// wide), copying a chunk at a time and pipelined in turn; afterwards the
/// new place equals the old byte for byte.
#[test]
fn writes_racing_the_copy_leave_both_places_equal() {
    for round in 0..4u8 {
        let from = Arc::new(SlowReads(MemoryMember::new("old", BYTES)));
        let to = Arc::new(MemoryMember::new("new", BYTES));
        let m = Arc::new(MovingMember::new(from.clone(), to.clone()));
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..3u8)
            .map(|w| {
                let (m, stop) = (Arc::clone(&m), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut x = u64::from(w) * 7919 + u64::from(round);
                    while !stop.load(Ordering::Acquire) {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        // Each writer in a third of its own: the volume
                        // never overlaps its own writes (Member's contract).
                        let third = BYTES / 3 / 512 * 512;
                        let offset = u64::from(w) * third + (x >> 20) % (third - 8192) / 512 * 512;
                        let len = 512 * (1 + (x >> 50) % 16);
                        let data = vec![(x >> 8) as u8 | 1; len as usize];
                        m.write_at(offset, &data).unwrap();
                    }
                })
            })
            .collect();
        if round % 2 == 0 {
            let mut buf = vec![0u8; CHUNK];
            for offset in (0..BYTES).step_by(CHUNK) {
                m.copy(offset, &mut buf).unwrap();
            }
        } else {
            copy_pipelined(&m);
        }
        stop.store(true, Ordering::Release);
        for w in writers {
            w.join().unwrap();
        }
        assert!(m.given_up().is_none());
        assert!(
            bytes_of(from.as_ref()) == bytes_of(to.as_ref()),
            "round {round}: the places differ"
        );
        assert!(
            bytes_of(from.as_ref()).iter().any(|&b| b != 0),
            "the writers wrote"
        );
    }
}

/// A new place that fails gives the move up: the volume's writes still
/// succeed on the old place, and the error is kept for the mover to tell.
#[test]
fn a_failing_new_place_gives_the_move_up_and_never_fails_the_member() {
    let from = Arc::new(MemoryMember::new("old", BYTES));
    let to = Arc::new(FailingWrites {
        inner: MemoryMember::new("new", BYTES),
        ok: 2,
        seen: AtomicU64::new(0),
    });
    let m = MovingMember::new(from.clone(), to);
    for i in 0..4u64 {
        m.write_at(i * 4096, &[9u8; 4096]).unwrap();
    }
    let mut buf = vec![0u8; CHUNK];
    m.copy(0, &mut buf).unwrap();
    m.flush().unwrap();
    let why = m.given_up().expect("given up");
    assert!(why.contains("failing"), "{why}");
    assert_eq!(&bytes_of(from.as_ref())[..4 * 4096], &[9u8; 4 * 4096][..]);
}

/// Below a checkpoint after a crash: a range the places disagree on is
/// copied again, one they agree on is left alone.
#[test]
fn checking_a_copied_range_mends_only_what_differs() {
    let from = Arc::new(MemoryMember::new("old", BYTES));
    let to = Arc::new(MemoryMember::new("new", BYTES));
    from.write_at(0, &[1u8; CHUNK]).unwrap();
    to.write_at(0, &[1u8; CHUNK]).unwrap();
    from.write_at(CHUNK as u64 + 512, &[2u8; 512]).unwrap();
    let m = MovingMember::new(from.clone(), to.clone());
    let (mut a, mut b) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
    assert_eq!(m.check_copy(0, &mut a, &mut b).unwrap(), Checked::Same);
    assert_eq!(
        m.check_copy(CHUNK as u64, &mut a, &mut b).unwrap(),
        Checked::Mended
    );
    assert_eq!(
        bytes_of(from.as_ref())[..2 * CHUNK],
        bytes_of(to.as_ref())[..2 * CHUNK]
    );
}

/// Once the configuration names the new place, the old one is left
/// alone: reads and writes go to the new place only.
#[test]
fn switched_to_the_new_place_the_old_is_not_touched() {
    let from = Arc::new(MemoryMember::new("old", BYTES));
    let to = Arc::new(MemoryMember::new("new", BYTES));
    let m = MovingMember::new(from.clone(), to.clone());
    m.write_at(0, &[3u8; 4096]).unwrap();
    m.switch_to_new();
    m.write_at(4096, &[4u8; 4096]).unwrap();
    let mut buf = vec![0u8; 8192];
    m.read_at(0, &mut buf).unwrap();
    assert_eq!(&buf[..4096], &[3u8; 4096][..]);
    assert_eq!(&buf[4096..], &[4u8; 4096][..]);
    assert_eq!(&bytes_of(from.as_ref())[4096..8192], &[0u8; 4096][..]);
    assert_eq!(m.describe(), "new");
}
