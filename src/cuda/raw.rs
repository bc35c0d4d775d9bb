//! The few raw driver calls of a warm launch, without cudarc's per-buffer
//! event tracking (which records and waits on events around every use of a
//! `CudaSlice`: on the virtual GPU a launch made 28 event records, 59
//! stream waits and 19 event creations through it). Device memory, pinned
//! host memory and an event, each owned and freed here; copies, memsets and
//! the launch itself, ordered only by the one stream they are issued on.
//!
//! Every function needs the GPU's context current on the calling thread
//! ([`cudarc::driver::CudaContext::bind_to_thread`]); the owned resources
//! keep their context and make it current to free themselves, whichever
//! thread drops them.

use cudarc::driver::{CudaContext, DriverError, result, sys};
use std::ffi::c_void;
use std::sync::Arc;

/// A device allocation, freed on drop (the driver waits for work using it).
pub(super) struct DeviceMem {
    at: u64,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

impl DeviceMem {
    /// `bytes` of device memory on `ctx`'s GPU, unset.
    pub(super) fn new(ctx: &Arc<CudaContext>, bytes: usize) -> Result<DeviceMem, DriverError> {
        ctx.bind_to_thread()?;
        // SAFETY: a plain allocation; the memory is only ever used through
        // the addresses below, within `bytes`.
        let at = unsafe { result::malloc_sync(bytes.max(1)) }?;
        Ok(DeviceMem {
            at,
            bytes,
            ctx: ctx.clone(),
        })
    }

    /// The first byte's device address.
    pub(super) fn at(&self) -> u64 {
        self.at
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for DeviceMem {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: `at` came from `malloc_sync` and is freed once; a kernel
        // still using it is waited for by the driver (`cuMemFree`
        // synchronizes).
        let _ = unsafe { result::free_sync(self.at) };
    }
}

/// Page-locked host memory the device copies into asynchronously, freed
/// on drop.
pub(super) struct Pinned {
    ptr: *mut u8,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: the memory is a plain byte buffer owned by this value; access
// goes through `&self`/`&mut self` (reads after the copy's event).
unsafe impl Send for Pinned {}
// SAFETY: as above.
unsafe impl Sync for Pinned {}

impl Pinned {
    /// `bytes` of pinned host memory for `ctx`'s GPU, zeroed.
    pub(super) fn new(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Pinned, DriverError> {
        ctx.bind_to_thread()?;
        let bytes = bytes.max(8);
        // SAFETY: a plain page-locked allocation (no write combining: the
        // host reads it).
        let ptr = unsafe { result::malloc_host(bytes, 0) }?.cast::<u8>();
        // SAFETY: `ptr` holds `bytes` writable bytes.
        unsafe { std::ptr::write_bytes(ptr, 0, bytes) };
        Ok(Pinned {
            ptr,
            bytes,
            ctx: ctx.clone(),
        })
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The bytes, as the last completed copy into them left them.
    ///
    /// Only call after the event recorded behind the copy completed: the
    /// device does not write them then.
    pub(super) fn read(&self) -> &[u8] {
        // SAFETY: `ptr` holds `bytes` initialized bytes (zeroed at
        // allocation); no copy into them is in flight (the caller's
        // contract).
        unsafe { std::slice::from_raw_parts(self.ptr, self.bytes) }
    }

    /// Copy `len` bytes from device address `src` into these bytes from
    /// `off`, on `stream`, after its earlier work.
    pub(super) fn copy_from(
        &mut self,
        off: usize,
        src: u64,
        len: usize,
        stream: sys::CUstream,
    ) -> Result<(), DriverError> {
        assert!(off + len <= self.bytes, "a copy past pinned memory");
        // SAFETY: the destination lies inside this allocation (asserted),
        // which lives until the copy is done (`Drop` frees with
        // `cuMemFreeHost`, which waits for the device); the host reads it
        // only after the copy's event.
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(self.ptr.add(off).cast::<c_void>(), src, len, stream).result()
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: `ptr` came from `malloc_host` and is freed once.
        let _ = unsafe { result::free_host(self.ptr.cast::<c_void>()) };
    }
}

/// An event, made once and recorded again for each launch.
pub(super) struct Event(sys::CUevent, Arc<CudaContext>);

// SAFETY: a CUDA event handle may be used from any thread.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Event {
    pub(super) fn new(ctx: &Arc<CudaContext>) -> Result<Event, DriverError> {
        ctx.bind_to_thread()?;
        result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map(|e| Event(e, ctx.clone()))
    }

    /// Record the event behind `stream`'s work so far.
    pub(super) fn record(&self, stream: sys::CUstream) -> Result<(), DriverError> {
        // SAFETY: the event is live (owned by `self`).
        unsafe { result::event::record(self.0, stream) }
    }

    /// Whether the work before the last record is done (`Err`: a driver
    /// error, the kernel's included).
    pub(super) fn done(&self) -> Result<bool, DriverError> {
        // SAFETY: the event is live.
        match unsafe { result::event::query(self.0) } {
            Ok(()) => Ok(true),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let _ = self.1.bind_to_thread();
        // SAFETY: the event is live and destroyed once.
        let _ = unsafe { result::event::destroy(self.0) };
    }
}

/// Set `len` bytes at device address `at` to `byte`, on `stream`.
///
/// # Safety
///
/// `[at, at + len)` must lie in a live device allocation that no other
/// stream uses meanwhile.
pub(super) unsafe fn memset(
    at: u64,
    byte: u8,
    len: usize,
    stream: sys::CUstream,
) -> Result<(), DriverError> {
    // SAFETY: the caller's contract.
    unsafe { result::memset_d8_async(at, byte, len, stream) }
}

/// Copy `src` to device address `at`, on `stream` (from pageable memory:
/// the driver stages it before the call returns).
///
/// # Safety
///
/// `[at, at + size_of_val(src))` must lie in a live device allocation.
pub(super) unsafe fn send<T: cudarc::driver::DeviceRepr>(
    at: u64,
    src: &[T],
    stream: sys::CUstream,
) -> Result<(), DriverError> {
    // SAFETY: the caller's contract; `src` outlives the call, and a copy
    // from pageable memory is staged before it returns.
    unsafe { result::memcpy_htod_async(at, src, stream) }
}

/// Copy `dst.len()` elements from device address `at` into `dst`, on
/// `stream`, and wait for it.
///
/// # Safety
///
/// `[at, at + size_of_val(dst))` must lie in a live device allocation.
pub(super) unsafe fn fetch<T: cudarc::driver::DeviceRepr>(
    dst: &mut [T],
    at: u64,
    stream: sys::CUstream,
) -> Result<(), DriverError> {
    // SAFETY: the caller's contract; `dst` outlives the copy, which is
    // synchronized before this returns.
    unsafe {
        result::memcpy_dtoh_async(dst, at, stream)?;
        result::stream::synchronize(stream)
    }
}

/// Launch `f` on `stream` in `grid` blocks of `block` threads, with
/// `params` pointing at its parameters' values.
///
/// # Safety
///
/// `params` must match `f`'s parameters in number, order and size, and
/// what they point the kernel at must stay live until the launch is done.
pub(super) unsafe fn launch(
    f: sys::CUfunction,
    grid: u32,
    block: u32,
    stream: sys::CUstream,
    params: &mut [*mut c_void],
) -> Result<(), DriverError> {
    // SAFETY: the caller's contract; the driver copies the parameters'
    // values before the call returns.
    unsafe { result::launch_kernel(f, (grid, 1, 1), (block, 1, 1), 0, stream, params) }
}
