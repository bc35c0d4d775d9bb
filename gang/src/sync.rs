//! The primitives the gang's protocol uses: std's normally, loom's under
//! `--cfg loom` so that the protocol can be model-checked
//! (`gang/tests/loom.rs`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::thread::{self, JoinHandle};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::thread::{self, JoinHandle};

/// Spin-waits until `done()` holds or about `budget` has passed, and says
/// whether it holds; yields the core between rounds of checks. Under loom, where time does not pass, one check and a
/// yield.
pub(crate) fn spin_until(budget: std::time::Duration, mut done: impl FnMut() -> bool) -> bool {
    #[cfg(loom)]
    {
        let _ = budget;
        if done() {
            return true;
        }
        loom::thread::yield_now();
        done()
    }
    #[cfg(not(loom))]
    {
        let start = std::time::Instant::now();
        loop {
            // Read the clock once every 64 checks: a check is a load from
            // a line the other thread writes once per dispatch.
            for _ in 0..64 {
                if done() {
                    return true;
                }
                std::hint::spin_loop();
            }
            if start.elapsed() >= budget {
                return done();
            }
            // Give the core to a thread the scheduler put beside this one
            // (a waking helper may land on its caller's core, and a spin
            // there would hold off the very work it waits for).
            std::thread::yield_now();
        }
    }
}
