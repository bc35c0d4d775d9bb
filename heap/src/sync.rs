//! Atomics for the TLAB protocol: std's normally, loom's under `--cfg loom` so
//! that the protocol can be model-checked.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

/// Back off while waiting for another thread: spin briefly, then yield.
pub(crate) fn backoff(round: u32) {
    #[cfg(loom)]
    {
        let _ = round;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        if round < 16 {
            for _ in 0..(1u32 << round.min(6)) {
                std::hint::spin_loop();
            }
        } else {
            std::thread::yield_now();
        }
    }
}

/// Read the latest value for a spin-wait. Hardware makes stores visible in
/// finite time; loom would let a plain load re-read a stale value forever, so
/// under loom this is a read-modify-write, which always reads the latest
/// value in modification order.
#[inline]
pub(crate) fn load_for_wait(a: &AtomicU64) -> u64 {
    #[cfg(loom)]
    {
        a.fetch_add(0, Ordering::Acquire)
    }
    #[cfg(not(loom))]
    {
        a.load(Ordering::Acquire)
    }
}
