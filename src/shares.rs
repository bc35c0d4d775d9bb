//! What a launch split over devices (`split.rs`) takes from the runtime's
//! settings ([`SplitOver`]) and keeps between launches of a kernel
//! ([`Speed`], in `adaptive.rs`).

use crate::report::SplitShare;

/// What a runtime splits its launches over ([`crate::RuntimeBuilder::split_over`]):
/// every GPU, and the CPU device too when `cpu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SplitOver {
    pub(crate) cpu: bool,
}

/// A device's speed for a kernel in its last split launches: what sizes
/// its parts in the next.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Speed {
    /// The device's label ([`SplitShare::device`]).
    pub(crate) device: String,
    /// Its workitems per second as a share of the fastest device's
    /// ([`SplitShare::speed`]).
    pub(crate) relative: f64,
    /// Seconds a part costs besides running workitems (launching, copies,
    /// replays).
    pub(crate) overhead: f64,
}

impl Speed {
    /// The speed a device's row shows (`None`: it ran no workitems).
    pub(crate) fn of(s: &SplitShare) -> Option<Speed> {
        if s.workitems == 0 || s.parts == 0 || s.speed <= 0.0 {
            return None;
        }
        Some(Speed {
            device: s.device.clone(),
            relative: s.speed,
            overhead: s.part_cost.as_secs_f64(),
        })
    }

    /// The mean of this and `now`.
    pub(crate) fn average(&mut self, now: &Speed) {
        self.relative = (self.relative + now.relative) / 2.0;
        self.overhead = (self.overhead + now.overhead) / 2.0;
    }
}
