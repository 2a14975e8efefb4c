//! The engine tests' rig: a real `Engine` over memory members, each
//! wrapped for fault injection, on the thread-pool I/O layer.

#![allow(dead_code)]

use bytes::Bytes;
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::volume::{CacheLimits, Health, Limits, Reply, Request, Volume, VolumeError};
use platter_core::{Level, ParityLayout};
use platter_io::aio::layer::{Layer, LayerConfig};
use platter_io::{FaultControls, FaultSpec, FaultyMember, Member, MemoryMember};
use platter_server::engine::Engine;
use std::sync::Arc;
use std::time::Duration;

pub const INTERLEAVE_BYTES: u64 = 64 << 10;

pub struct Rig {
    pub engine: Arc<Engine>,
    pub controls: Vec<Arc<FaultControls>>,
}

/// What a rig is made of; `Spec::new(level, members)` and then the fields
/// a test cares about.
pub struct Spec {
    pub level: Level,
    pub members: u32,
    /// Mirror: the member count; raid10: near copies; others 1.
    pub copies: u32,
    pub member_bytes: u64,
    /// Each member's faults; its seed is made distinct per member.
    pub faults: FaultSpec,
    pub stripe_cache: bool,
    pub layer: LayerConfig,
}

impl Spec {
    pub fn new(level: Level, members: u32) -> Spec {
        Spec {
            level,
            members,
            copies: match level {
                Level::Mirror => members,
                Level::Raid10 => 2,
                _ => 1,
            },
            member_bytes: 8 << 20,
            faults: FaultSpec::default(),
            stripe_cache: false,
            layer: pool(32, Duration::from_secs(30)),
        }
    }
}

pub fn pool(queue_depth: usize, timeout: Duration) -> LayerConfig {
    LayerConfig {
        queue_depth,
        timeout,
        ..LayerConfig::default()
    }
}

pub fn rig(spec: Spec) -> Rig {
    let n = spec.members as usize;
    let geometry = Geometry::new(GeometrySpec {
        level: spec.level,
        parity_layout: ParityLayout::LeftSymmetric,
        copies: spec.copies,
        interleave_bytes: INTERLEAVE_BYTES,
        data_offset_bytes: 0,
        member_data_bytes: vec![spec.member_bytes; n],
    })
    .expect("valid geometry");
    let mut volume = Volume::new(geometry, vec![Health::Online; n], Limits::default());
    if spec.stripe_cache {
        volume.enable_stripe_cache(CacheLimits::DEFAULT);
    }
    let mut controls = Vec::new();
    let devices = (0..spec.members)
        .map(|i| {
            let m = FaultyMember::new(
                MemoryMember::new(format!("m{i}"), spec.member_bytes),
                FaultSpec {
                    seed: spec.faults.seed.wrapping_add(u64::from(i) + 1),
                    ..spec.faults.clone()
                },
            );
            controls.push(m.controls());
            Some(Arc::new(m) as Arc<dyn Member>)
        })
        .collect();
    Rig {
        engine: Engine::new(volume, devices, Arc::new(Layer::threads(spec.layer))),
        controls,
    }
}

pub fn read(engine: &Engine, offset_bytes: u64, len_bytes: u64) -> Result<Bytes, VolumeError> {
    match engine.run(Request::Read {
        offset_bytes,
        len_bytes,
    })? {
        Reply::Data(d) => Ok(d.to_bytes()),
        other => panic!("a read answered {other:?}"),
    }
}

pub fn write(engine: &Engine, offset_bytes: u64, data: Vec<u8>) -> Result<(), VolumeError> {
    engine
        .run(Request::Write {
            offset_bytes,
            data: Bytes::from(data),
            fua: false,
        })
        .map(|_| ())
}
