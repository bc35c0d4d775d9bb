//! offload-vgpu-driver: the virtual GPU behind NVIDIA's driver API. Built as
//! a shared library and put on the library path as `libcuda.so`, it is what
//! cudarc's dynamic loading finds, so offload's CUDA device (`src/cuda/`)
//! runs unchanged — every driver call it makes is answered here and every
//! kernel it launches is executed by [`offload_vgpu`].
//!
//! `./scripts/gpu-tests --virtual` builds it and runs the GPU suite on it;
//! nothing else selects it (a user puts it on the library path on
//! purpose). The device calls itself "offload virtual GPU (PTX simulator,
//! not hardware)", and offload's reports show that name.
//!
//! # The API subset
//!
//! Initialization and versions; one device, or as many as
//! `OFFLOAD_VGPU_DEVICES` says, each with its attributes (SM count, threads
//! per SM and compute capability from the environment: see the `config`
//! module), name, UUID and memory; each device's primary context (retain,
//! release, flags, the calling thread's current context: memory, modules,
//! streams, events and launches belong to the current context's device,
//! and a kernel reaches only its device's memory and mapped host memory);
//! streams and events;
//! device memory (alloc, free, memset, synchronous and asynchronous copies
//! in every direction, memory info); pinned host memory mapped for the
//! device and its device pointer; modules from PTX text (with the JIT
//! error log), functions, globals, attributes and occupancy; kernel
//! launches; error names and strings. Kernel launches run asynchronously,
//! each stream on a worker thread; a failed launch makes the context's
//! error sticky, as on a GPU, and the error string carries the simulator's
//! diagnostic.
//!
//! Every other driver function cudarc can look up exists and returns
//! `CUDA_ERROR_NOT_SUPPORTED` (never a missing symbol or a crash); those
//! stubs ignore their arguments, which the C calling convention allows.

#![deny(missing_docs)]

mod config;
mod device;
mod err;
mod launch;
mod memory;
mod state;
mod stats;
mod unsupported;

pub use stats::{offload_vgpu_counters, offload_vgpu_counters_reset, offload_vgpu_stats};

/// An opaque handle (context, module, function, stream, event).
type Handle = usize;

/// Runs API call `name`, counting it (`stats`: a call another call makes
/// on its behalf is not counted again) and turning a panic into
/// `CUDA_ERROR_UNKNOWN` (a panic must not unwind into the caller's C
/// frames).
fn guard(name: &'static str, f: impl FnOnce() -> err::CUresult) -> err::CUresult {
    let _outer = stats::Call::enter(name);
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(err::UNKNOWN)
}

/// Writes `v` through the caller's out-pointer.
///
/// # Safety
///
/// `p` must be null or valid for a write of `T`.
unsafe fn put<T>(p: *mut T, v: T) -> err::CUresult {
    if p.is_null() {
        return err::INVALID_VALUE;
    }
    // SAFETY: non-null, and valid by the caller's contract.
    unsafe { p.write(v) };
    err::SUCCESS
}
