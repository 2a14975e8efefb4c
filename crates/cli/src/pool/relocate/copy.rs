//! A move's copy: what lies below a recorded checkpoint compared, the
//! rest read a MiB at a time while a thread of its own writes the last
//! MiB to the new place, checkpoints recorded as it goes, at a rate.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use platter_core::pool::SubdiskMove;
use platter_io::moving::{Checked, CopyHold, MovingMember};
use platter_io::Member;

use crate::error::Result;

/// Bytes copied at a time: the range a client's write may wait for.
pub const COPY_CHUNK_BYTES: u64 = 1 << 20;

/// How often a move records how far it came: an eighth of the subdisk,
/// at most 64 MiB, in whole chunks.
pub fn checkpoint_bytes(len_bytes: u64) -> u64 {
    (len_bytes / 8)
        .min(64 << 20)
        .div_ceil(COPY_CHUNK_BYTES)
        .max(1)
        * COPY_CHUNK_BYTES
}

/// How a copy ended.
pub enum Copy {
    Done,
    /// Asked to stop, this far copied (and recorded).
    Stopped(u64),
    /// The new place failed: why.
    GivenUp(String),
    /// The old place failed a read: why. The subdisk's bytes are to be
    /// had only through its plex's redundancy, if it has any.
    SourceFailed(String),
}

/// Copies `m`'s subdisk through `member`, calling `record` with how far
/// it came at each checkpoint (the new place flushed first); `resumed`:
/// what lies below the recorded checkpoint is compared first. Above it,
/// the next MiB is read while the last is written (a thread of its own
/// writes), so that a drive's latency is paid once a MiB. Err: a
/// checkpoint could not be recorded.
pub fn copy_move(
    m: &SubdiskMove,
    member: &MovingMember,
    resumed: bool,
    rate: u64,
    stop: &AtomicBool,
    record: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<Copy> {
    let from = Checkpoint {
        name: m.subdisk_name(),
        recorded_bytes: m.copied_bytes,
        resumed,
    };
    copy_from(&from, member, rate, stop, record)
}

/// Where a copy begins: what `name` (a subdisk, a volume) had copied when
/// last recorded, and whether it was (what lies below is compared).
pub struct Checkpoint {
    pub name: String,
    pub recorded_bytes: u64,
    pub resumed: bool,
}

/// [`copy_move`] of any copy through `member`, from checkpoint `from`.
pub fn copy_from(
    from: &Checkpoint,
    member: &MovingMember,
    rate: u64,
    stop: &AtomicBool,
    record: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<Copy> {
    let mut pace = Pace::new(rate);
    let at = if from.resumed {
        match compare_below(from, member, stop, &mut pace)? {
            Ok(at) => at,
            Err(end) => return Ok(end),
        }
    } else {
        0
    };
    let copy = Copying {
        member,
        len: member.size_bytes(),
        every: checkpoint_bytes(member.size_bytes()),
        recorded: from.recorded_bytes,
    };
    copy.pipelined(at, stop, &mut pace, record)
}

/// What lies below `m`'s checkpoint, compared and copied again
/// where the places differ: Ok(where the copy goes on), or Err(how the
/// copy ended there).
fn compare_below(
    m: &Checkpoint,
    member: &MovingMember,
    stop: &AtomicBool,
    pace: &mut Pace,
) -> Result<std::result::Result<u64, Copy>> {
    let below = m.recorded_bytes.min(member.size_bytes());
    let mut buf = vec![0u8; COPY_CHUNK_BYTES as usize];
    let mut spare = vec![0u8; COPY_CHUNK_BYTES as usize];
    let (mut at, mut mended) = (0, 0u64);
    while at < below {
        if stop.load(Ordering::Acquire) {
            return Ok(Err(Copy::Stopped(m.recorded_bytes)));
        }
        let n = COPY_CHUNK_BYTES.min(below - at) as usize;
        match member.check_copy(at, &mut buf[..n], &mut spare[..n]) {
            Ok(checked) => mended += u64::from(checked == Checked::Mended),
            Err(e) => return Ok(Err(Copy::SourceFailed(e.to_string()))),
        }
        if let Some(why) = member.given_up() {
            return Ok(Err(Copy::GivenUp(why)));
        }
        at += n as u64;
        pace.after(n as u64);
    }
    if mended > 0 {
        tracing::warn!(copy = %m.name, chunks = mended, "a move taken up again found chunks below its checkpoint unequal (writes a crash cut short) and copied them again");
    }
    Ok(Ok(at))
}

/// A copy above its checkpoint.
struct Copying<'a> {
    member: &'a MovingMember,
    len: u64,
    every: u64,
    recorded: u64,
}

impl<'a> Copying<'a> {
    /// Reads chunk after chunk from `at` and hands each, held, to a
    /// writer thread (one at a time: the copy holds two ranges at most);
    /// at each checkpoint waits for the writes below it, then records.
    fn pipelined(
        mut self,
        at: u64,
        stop: &AtomicBool,
        pace: &mut Pace,
        record: &mut dyn FnMut(u64) -> Result<()>,
    ) -> Result<Copy> {
        std::thread::scope(|scope| {
            let (to_writer, writes) = std::sync::mpsc::sync_channel::<(CopyHold<'_>, Vec<u8>)>(0);
            let (written_tx, written) = std::sync::mpsc::channel::<(u64, Vec<u8>)>();
            scope.spawn(move || {
                for (held, buf) in writes {
                    let end = held.end_bytes();
                    held.write(&buf);
                    if written_tx.send((end, buf)).is_err() {
                        return;
                    }
                }
            });
            let mut flow = Flow {
                to_writer: Some(to_writer),
                written,
                free: vec![vec![0u8; COPY_CHUNK_BYTES as usize]; 2],
                done_to: at,
                read_to: at,
            };
            let end = self.read_all(&mut flow, stop, pace, record);
            flow.to_writer = None;
            while flow.written.recv().is_ok() {}
            end
        })
    }

    fn read_all(
        &mut self,
        flow: &mut Flow<'a>,
        stop: &AtomicBool,
        pace: &mut Pace,
        record: &mut dyn FnMut(u64) -> Result<()>,
    ) -> Result<Copy> {
        while flow.read_to < self.len {
            if stop.load(Ordering::Acquire) {
                flow.drain(flow.read_to);
                return self.stopped(flow.done_to, record);
            }
            let at = flow.read_to;
            let n = COPY_CHUNK_BYTES.min(self.len - at) as usize;
            let mut buf = flow.buffer();
            match self.member.read_held(at, &mut buf[..n]) {
                Ok(held) => flow.send(held, buf, n),
                Err(e) => return Ok(Copy::SourceFailed(e.to_string())),
            }
            flow.read_to = at + n as u64;
            if let Some(why) = self.member.given_up() {
                return Ok(Copy::GivenUp(why));
            }
            let end = flow.read_to;
            if end > self.recorded && (end.is_multiple_of(self.every) || end == self.len) {
                flow.drain(end);
                if let Some(why) = self.member.given_up() {
                    return Ok(Copy::GivenUp(why));
                }
                self.member.flush_new_place();
                record(end)?;
                self.recorded = end;
            }
            pace.after(n as u64);
        }
        Ok(Copy::Done)
    }

    /// Asked to stop with everything below `done_to` written: that is
    /// recorded, unless the move was given up meanwhile.
    fn stopped(&self, done_to: u64, record: &mut dyn FnMut(u64) -> Result<()>) -> Result<Copy> {
        self.member.flush_new_place();
        if done_to > self.recorded && self.member.given_up().is_none() {
            record(done_to)?;
        }
        Ok(Copy::Stopped(done_to.max(self.recorded)))
    }
}

/// The chunks between the reader and the writer thread.
struct Flow<'a> {
    to_writer: Option<std::sync::mpsc::SyncSender<(CopyHold<'a>, Vec<u8>)>>,
    /// Each chunk written: where it ends, and its buffer back.
    written: std::sync::mpsc::Receiver<(u64, Vec<u8>)>,
    free: Vec<Vec<u8>>,
    /// Written (or given up) below this.
    done_to: u64,
    /// Read and handed over below this.
    read_to: u64,
}

impl<'a> Flow<'a> {
    /// A buffer for the next chunk: a free one, or the next the writer
    /// hands back.
    fn buffer(&mut self) -> Vec<u8> {
        if let Some(b) = self.free.pop() {
            return b;
        }
        let (end, mut b) = self
            .written
            .recv()
            .expect("the writer lives while the reader does");
        self.done_to = end;
        b.resize(COPY_CHUNK_BYTES as usize, 0);
        b
    }

    fn send(&mut self, held: CopyHold<'a>, mut buf: Vec<u8>, n: usize) {
        buf.truncate(n);
        let sender = self.to_writer.as_ref().expect("sending");
        sender
            .send((held, buf))
            .expect("the writer lives while the reader does");
    }

    /// Waits until everything below `to` is written.
    fn drain(&mut self, to: u64) {
        while self.done_to < to {
            let (end, mut b) = self.written.recv().expect("the writer lives");
            b.resize(COPY_CHUNK_BYTES as usize, 0);
            self.free.push(b);
            self.done_to = end;
        }
    }
}

/// Holds a copy to `rate` bytes a second.
struct Pace {
    rate: u64,
    began: Instant,
    bytes: u64,
}

impl Pace {
    fn new(rate: u64) -> Pace {
        Pace {
            rate,
            began: Instant::now(),
            bytes: 0,
        }
    }

    fn after(&mut self, bytes: u64) {
        self.bytes += bytes;
        if self.rate == 0 || self.rate == platter_server::UNLIMITED_RATE {
            return;
        }
        let due = Duration::from_secs_f64(self.bytes as f64 / self.rate as f64);
        if let Some(wait) = due.checked_sub(self.began.elapsed()) {
            std::thread::sleep(wait);
        }
    }
}
