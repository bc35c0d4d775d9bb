//! The virtual GPU's own counters (`vgpu/driver/src/stats.rs`), read
//! through symbols of the driver shim beside the CUDA API, found in the
//! `libcuda` the process already loaded; `None` on a real driver, which
//! has no such symbols.
//!
//! - [`now`]: launches and PTX instructions since the process started.
//! - [`counters`] and [`reset`]: the cost model's counters and the driver
//!   calls by name since the last reset (their meanings:
//!   `offload_vgpu::cost::Costs` and the shim's `stats` module).

use std::collections::BTreeMap;

/// Launches and PTX instructions the virtual GPU has executed so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VgpuCounters {
    /// Kernel launches.
    pub launches: u64,
    /// PTX instructions executed.
    pub instructions: u64,
}

type StatsFn = unsafe extern "C" fn(*mut u64, *mut u64, *mut u64);
type CountersFn = unsafe extern "C" fn(*mut u8, usize) -> usize;
type ResetFn = unsafe extern "C" fn();

/// Calls `use_it` with the address of the shim's symbol `sym`, if the
/// loaded CUDA driver is the virtual GPU.
fn with_symbol<T>(sym: &std::ffi::CStr, use_it: impl FnOnce(*mut libc::c_void) -> T) -> Option<T> {
    let lib = c"libcuda.so.1";
    // SAFETY: RTLD_NOLOAD only looks up a library the process has loaded
    // (cudarc loaded it); the handle is released below.
    let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if h.is_null() {
        return None;
    }
    // SAFETY: `h` is a live handle and `sym` a NUL-terminated name.
    let f = unsafe { libc::dlsym(h, sym.as_ptr()) };
    let out = (!f.is_null()).then(|| use_it(f));
    // SAFETY: `h` came from the `dlopen` above; the library stays loaded
    // (cudarc holds it).
    unsafe { libc::dlclose(h) };
    out
}

/// The counters now, if the loaded CUDA driver is offload's virtual GPU.
pub fn now() -> Option<VgpuCounters> {
    with_symbol(c"offload_vgpu_stats", |f| {
        // SAFETY: the shim defines the symbol with exactly this signature
        // (`vgpu/driver/src/stats.rs`).
        let f: StatsFn = unsafe { std::mem::transmute(f) };
        let (mut launches, mut instructions) = (0u64, 0u64);
        // SAFETY: both pointers are valid for a `u64` write; null is
        // allowed for the one not asked for.
        unsafe { f(&mut launches, &mut instructions, std::ptr::null_mut()) };
        VgpuCounters {
            launches,
            instructions,
        }
    })
}

/// The cost model's counters and the driver calls (`call.NAME`) since the
/// last [`reset`], by name; counters never touched are absent.
pub fn counters() -> Option<BTreeMap<String, u64>> {
    let text = with_symbol(c"offload_vgpu_counters", |f| {
        // SAFETY: the shim defines the symbol with exactly this signature.
        let f: CountersFn = unsafe { std::mem::transmute(f) };
        let mut buf = Vec::new();
        loop {
            // SAFETY: `buf` holds `buf.len()` writable bytes.
            let n = unsafe { f(buf.as_mut_ptr(), buf.len()) };
            if n <= buf.len() {
                buf.truncate(n);
                return String::from_utf8_lossy(&buf).into_owned();
            }
            buf.resize(n + 256, 0);
        }
    })?;
    Some(
        text.lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(' ')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect(),
    )
}

/// Sets the counters of [`counters`] back to zero; `false` on a real
/// driver.
pub fn reset() -> bool {
    with_symbol(c"offload_vgpu_counters_reset", |f| {
        // SAFETY: the shim defines the symbol with exactly this signature.
        let f: ResetFn = unsafe { std::mem::transmute(f) };
        // SAFETY: takes nothing, clears the shim's counters.
        unsafe { f() }
    })
    .is_some()
}
