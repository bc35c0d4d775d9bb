//! The virtual GPU's own counters (`vgpu/driver/src/stats.rs`): PTX
//! instructions executed and launches, over the whole process. Read
//! through `offload_vgpu_stats`, a symbol of the driver shim beside the
//! CUDA API, found in the `libcuda` the process already loaded; `None` on a
//! real driver, which has no such symbol.

/// Launches and PTX instructions the virtual GPU has executed so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VgpuCounters {
    /// Kernel launches.
    pub launches: u64,
    /// PTX instructions executed.
    pub instructions: u64,
}

type StatsFn = unsafe extern "C" fn(*mut u64, *mut u64, *mut u64);

/// The counters now, if the loaded CUDA driver is offload's virtual GPU.
pub fn now() -> Option<VgpuCounters> {
    let lib = c"libcuda.so.1";
    let sym = c"offload_vgpu_stats";
    // SAFETY: RTLD_NOLOAD only looks up a library the process has loaded
    // (cudarc loaded it); the handle is released below.
    let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if h.is_null() {
        return None;
    }
    // SAFETY: `h` is a live handle and `sym` a NUL-terminated name.
    let f = unsafe { libc::dlsym(h, sym.as_ptr()) };
    let out = (!f.is_null()).then(|| {
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
    });
    // SAFETY: `h` came from the `dlopen` above; the library stays loaded
    // (cudarc holds it).
    unsafe { libc::dlclose(h) };
    out
}
