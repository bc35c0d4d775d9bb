//! Totals over every launch of the process, readable by a program that
//! loaded the shim (`offload_vgpu_stats`, a symbol of this library beside
//! the CUDA API).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static INSTRUCTIONS: AtomicU64 = AtomicU64::new(0);
static NANOS: AtomicU64 = AtomicU64::new(0);
static LAUNCHES: AtomicU64 = AtomicU64::new(0);

pub(crate) fn add(instructions: u64, wall: Duration) {
    INSTRUCTIONS.fetch_add(instructions, Ordering::Relaxed);
    NANOS.fetch_add(wall.as_nanos() as u64, Ordering::Relaxed);
    LAUNCHES.fetch_add(1, Ordering::Relaxed);
}

/// Writes the launches, PTX instructions executed and nanoseconds spent
/// simulating them so far (any pointer may be null).
///
/// # Safety
///
/// Each non-null pointer must be valid for a `u64` write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_vgpu_stats(
    launches: *mut u64,
    instructions: *mut u64,
    nanos: *mut u64,
) {
    for (p, v) in [
        (launches, &LAUNCHES),
        (instructions, &INSTRUCTIONS),
        (nanos, &NANOS),
    ] {
        if !p.is_null() {
            // SAFETY: the caller passes a valid pointer or null.
            unsafe { p.write(v.load(Ordering::Relaxed)) };
        }
    }
}
