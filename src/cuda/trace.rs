//! What a launch on the GPU is doing while the host waits for it, printed
//! to standard error when `OFFLOAD_CUDA_TRACE` is set (to anything but
//! `0`): for diagnosing a launch that does not finish on real hardware,
//! where no debugger is at hand, and for seeing where a launch's time
//! goes. Lines start with `cuda-trace` and the milliseconds since the
//! launch began; nothing is printed otherwise.

use std::time::{Duration, Instant};

/// A rate-limited printer of one launch's progress.
pub(super) struct Trace {
    on: bool,
    t0: Instant,
    last: Option<Instant>,
    every: Duration,
}

impl Trace {
    /// A tracer for a launch starting now.
    pub(super) fn new() -> Trace {
        let on = std::env::var_os("OFFLOAD_CUDA_TRACE").is_some_and(|v| v != "0");
        Trace {
            on,
            t0: Instant::now(),
            last: None,
            every: Duration::from_millis(250),
        }
    }

    /// Whether tracing is on.
    pub(super) fn on(&self) -> bool {
        self.on
    }

    /// Prints `line()` now.
    pub(super) fn say(&self, line: impl FnOnce() -> String) {
        if self.on {
            eprintln!(
                "cuda-trace {:>10.3} ms: {}",
                self.t0.elapsed().as_secs_f64() * 1e3,
                line()
            );
        }
    }

    /// Prints `line()` if the last periodic line is at least 250 ms old.
    pub(super) fn tick(&mut self, line: impl FnOnce() -> String) {
        if !self.on {
            return;
        }
        let now = Instant::now();
        if self.last.is_none_or(|l| now - l >= self.every) {
            self.last = Some(now);
            self.say(line);
        }
    }
}
