//! The server acknowledges no write that left a failed member behind until
//! the failure is in the labels of the members that remain: the event hook
//! (`Meta::on_event`, which writes and flushes them) must have returned
//! before the write's completion is delivered.
//!
//! Before, the hook ran on whichever thread drained the event, while other
//! threads went on completing writes: a crash between such an
//! acknowledgement and the label update assembled the failed member again
//! as current, with the acknowledged write missing from it.

use bytes::Bytes;
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::volume::{Event, Health, Limits, Request, Volume};
use platter_core::{Level, ParityLayout};
use platter_io::aio::layer::{Layer, LayerConfig};
use platter_io::{FaultSpec, FaultyMember, Member, MemoryMember};
use platter_server::engine::Engine;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DATA_OFFSET_BYTES: u64 = 1 << 20;
const MEMBER_DATA_BYTES: u64 = 1 << 20;
const LABEL_WRITE: Duration = Duration::from_millis(300);

/// A mirror of two memory members with `faults[m]` injected into member m.
fn mirror_engine(faults: [FaultSpec; 2]) -> Arc<Engine> {
    let geometry = Geometry::new(GeometrySpec {
        level: Level::Mirror,
        parity_layout: ParityLayout::LeftSymmetric,
        copies: 2,
        interleave_bytes: 65536,
        data_offset_bytes: DATA_OFFSET_BYTES,
        member_data_bytes: vec![MEMBER_DATA_BYTES; 2],
    })
    .expect("a mirror");
    let size = DATA_OFFSET_BYTES + MEMBER_DATA_BYTES;
    let members: Vec<Option<Arc<dyn Member>>> = faults
        .into_iter()
        .enumerate()
        .map(|(m, spec)| {
            let member = FaultyMember::new(MemoryMember::new(format!("m{m}"), size), spec);
            Some(Arc::new(member) as Arc<dyn Member>)
        })
        .collect();
    let volume = Volume::new(geometry, vec![Health::Online; 2], Limits::default());
    Engine::new(
        volume,
        members,
        Arc::new(Layer::threads(LayerConfig::default())),
    )
}

#[test]
fn a_write_is_acknowledged_only_after_the_labels_record_the_failure() {
    // Member 1 fails its first I/O (the write below) at once; member 0
    // takes 100 ms per I/O, so its write and FUA flush end on another
    // thread while the hook is still writing the labels. Without the hold
    // the write was acknowledged then, 100 ms before the labels had it.
    let engine = mirror_engine([
        FaultSpec {
            latency_us: 100_000,
            ..FaultSpec::default()
        },
        FaultSpec {
            fail_nth: Some(1),
            ..FaultSpec::default()
        },
    ]);
    let labels_written: Arc<Mutex<Option<Instant>>> = Arc::default();
    let seen = Arc::clone(&labels_written);
    engine.on_event(Box::new(move |e| {
        if let Event::MemberFaulty { member: 1, .. } = e {
            // A slow label write and flush on the member that remains.
            std::thread::sleep(LABEL_WRITE);
            *seen.lock().unwrap() = Some(Instant::now());
        }
        Vec::new()
    }));
    let result = engine.run(Request::Write {
        offset_bytes: 0,
        data: Bytes::from(vec![0x77; 4096]),
        fua: true,
    });
    let acknowledged = Instant::now();
    assert!(result.is_ok(), "member 0 holds the write: {result:?}");
    let written = labels_written
        .lock()
        .unwrap()
        .expect("the hook saw the failure before the write was acknowledged");
    assert!(written <= acknowledged);
    assert_eq!(engine.health()[1], Health::Faulty);
}

#[test]
fn a_member_whose_label_cannot_be_written_is_failed_too() {
    // Member 1 fails a write; the hook reports that member 0 could not take
    // the label either. A mirror that loses both copies fails the write.
    let engine = mirror_engine([
        FaultSpec::default(),
        FaultSpec {
            fail_nth: Some(1),
            ..FaultSpec::default()
        },
    ]);
    engine.on_event(Box::new(|e| match e {
        Event::MemberFaulty { member: 1, .. } => {
            vec![(0, "cannot write the label: test".to_string())]
        }
        _ => Vec::new(),
    }));
    let result = engine.run(Request::Write {
        offset_bytes: 0,
        data: Bytes::from(vec![0x77; 4096]),
        fua: false,
    });
    assert_eq!(engine.health(), [Health::Faulty, Health::Faulty]);
    // The write landed on member 0 and waited for member 1's failure to
    // be recorded; by then member 0 was out of use too, so nothing in use
    // holds the bytes: it must not be acknowledged.
    assert!(
        result.is_err(),
        "acknowledged with no member in use: {result:?}"
    );
}
