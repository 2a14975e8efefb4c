//! A synchronous executor: drives a [`Volume`] over real members on the
//! calling thread, one request at a time, through the engine's one loop
//! ([`platter_core::drive::pump`]). Tests of the engine on files, memory
//! and faulty members use it; the server drives the same engine
//! concurrently.

use std::sync::Arc;

use bytes::Bytes;
use platter_core::drive::{pump, Host};
use platter_core::volume::{
    Completion, Event, MemberIo, Reply, Request, RequestId, Volume, VolumeError,
};
use platter_io::{perform, Member};

pub struct SyncExecutor {
    volume: Volume,
    /// By slot; `None` for a member that is not present.
    members: Vec<Option<Arc<dyn Member>>>,
    events: Vec<Event>,
    /// The request running and, once it finished, its result.
    running: Option<(RequestId, Option<Result<Reply, VolumeError>>)>,
}

impl SyncExecutor {
    pub fn new(volume: Volume, members: Vec<Option<Arc<dyn Member>>>) -> SyncExecutor {
        assert_eq!(members.len(), volume.geometry().members() as usize);
        SyncExecutor {
            volume,
            members,
            events: Vec::new(),
            running: None,
        }
    }

    pub fn volume(&self) -> &Volume {
        &self.volume
    }

    /// Events (members marked faulty) seen so far, oldest first.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// Runs one request to completion.
    pub fn run(&mut self, req: Request) -> Result<Reply, VolumeError> {
        let id = self.volume.submit(req);
        self.running = Some((id, None));
        // Every member I/O is performed as it is issued, so one pump runs
        // the request, and whatever upkeep it started, to the end.
        pump(self);
        assert!(
            self.volume.is_idle(),
            "a synchronous run leaves nothing behind"
        );
        let (_, result) = self.running.take().expect("the request we ran");
        result.expect("the engine completes every request it accepts")
    }

    pub fn read(&mut self, offset_bytes: u64, len_bytes: u64) -> Result<Bytes, VolumeError> {
        match self.run(Request::Read {
            offset_bytes,
            len_bytes,
        })? {
            Reply::Data(d) => Ok(d.to_bytes()),
            Reply::Done | Reply::Checked(_) => unreachable!("reads complete with data"),
        }
    }

    pub fn write(&mut self, offset_bytes: u64, data: Bytes) -> Result<(), VolumeError> {
        self.run(Request::Write {
            offset_bytes,
            data,
            fua: false,
        })
        .map(|_| ())
    }

    pub fn flush(&mut self) -> Result<(), VolumeError> {
        self.run(Request::Flush).map(|_| ())
    }
}

impl Host for SyncExecutor {
    type Engine = Volume;
    fn engine(&mut self) -> &mut Volume {
        &mut self.volume
    }

    fn issue(&mut self, io: MemberIo) {
        let member = self.members[io.member as usize]
            .as_ref()
            .expect("the engine never addresses a member that is not present");
        let result = perform(member.as_ref(), &io.op);
        self.volume.io_done(io.id, result);
    }

    fn complete(&mut self, done: Completion) {
        let (id, result) = self.running.as_mut().expect("a request runs");
        assert_eq!(done.id, *id, "only one request is in flight");
        assert!(result.is_none(), "a request completes once");
        *result = Some(done.result);
    }

    fn event(&mut self, event: Event) {
        // This executor keeps no labels: a failure is as recorded as it
        // will ever be once its event is seen.
        if let Event::MemberFaulty { member, .. } = &event {
            self.volume.failure_recorded(*member);
        }
        self.events.push(event);
    }
}
