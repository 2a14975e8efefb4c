//! Virtual time. The simulator never reads the wall clock: time moves only
//! when the event loop takes the next event.

/// Nanoseconds since the start of the run.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    now_ns: u64,
}

impl Clock {
    pub fn new() -> Clock {
        Clock::default()
    }

    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Moves time forward to `t_ns`; time never runs backwards.
    pub fn advance_to(&mut self, t_ns: u64) {
        assert!(
            t_ns >= self.now_ns,
            "time ran backwards: {t_ns} < {}",
            self.now_ns
        );
        self.now_ns = t_ns;
    }
}
