//! The virtual GPU's own counters (`vgpu/driver/src/stats.rs`), read
//! through symbols of the driver shim beside the CUDA API, found in the
//! `libcuda` the process already loaded; `None` on a real driver, which
//! has no such symbols.
//!
//! - [`now`]: launches and PTX instructions since the process started.
//! - [`counters`] and [`reset`]: the cost model's counters and the driver
//!   calls by name since the last reset (their meanings:
//!   `offload_vgpu::cost::Costs` and the shim's `stats` module).
//! - [`stream_counters`]: the counters of the PTX lines offload notes
//!   (`// @count NAME`) in the launches one stream has finished — how a
//!   launch's report counts its dispatches
//!   ([`crate::LaunchReport::dispatch`]) while other runtimes launch on
//!   streams of their own.
//!
//! The tests, `offload bench --counters` and the runtime read them here.

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
type StreamCountersFn = unsafe extern "C" fn(usize, *mut u8, usize) -> usize;

/// Calls `use_it` with the address of the shim's symbol `sym`, if the
/// loaded CUDA driver is the virtual GPU.
fn with_symbol<T>(sym: &std::ffi::CStr, use_it: impl FnOnce(*mut libc::c_void) -> T) -> Option<T> {
    // cudarc loads the driver by the first of its names that opens.
    let h = [c"libcuda.so", c"libcuda.so.1"].iter().find_map(|lib| {
        // SAFETY: RTLD_NOLOAD only looks up a library the process has
        // loaded (cudarc loaded it); the handle is released below.
        let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        (!h.is_null()).then_some(h)
    })?;
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
    with_symbol(c"offload_vgpu_counters", |f| {
        // SAFETY: the shim defines the symbol with exactly this signature.
        let f: CountersFn = unsafe { std::mem::transmute(f) };
        // SAFETY: `f` writes at most `cap` bytes into `buf`.
        read_lines(|buf, cap| unsafe { f(buf, cap) })
    })
    .flatten()
}

/// The noted counters (`count.NAME.instructions`, `.lanes`, `.sectors`)
/// of every launch the CUDA stream `stream` (its `CUstream` handle) has
/// finished since it was created, by name; `None` on a real driver or for
/// a stream the virtual GPU does not know.
pub fn stream_counters(stream: usize) -> Option<BTreeMap<String, u64>> {
    with_symbol(c"offload_vgpu_stream_counters", |f| {
        // SAFETY: the shim defines the symbol with exactly this signature.
        let f: StreamCountersFn = unsafe { std::mem::transmute(f) };
        // SAFETY: `f` writes at most `cap` bytes into `buf`.
        read_lines(|buf, cap| unsafe { f(stream, buf, cap) })
    })
    .flatten()
}

/// Reads `name value` lines from a shim function that fills a buffer of
/// `cap` bytes and returns the length it needs (`usize::MAX`: nothing to
/// read).
fn read_lines(mut fill: impl FnMut(*mut u8, usize) -> usize) -> Option<BTreeMap<String, u64>> {
    let mut buf = Vec::new();
    let text = loop {
        let n = fill(buf.as_mut_ptr(), buf.len());
        if n == usize::MAX {
            return None;
        }
        if n <= buf.len() {
            buf.truncate(n);
            break String::from_utf8_lossy(&buf).into_owned();
        }
        buf.resize(n + 256, 0);
    };
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
