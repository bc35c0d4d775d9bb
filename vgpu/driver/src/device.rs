//! Initialization, the device and its attributes, the primary context, and
//! the error-name/-string calls.

use crate::config::Config;
use crate::err::{self, CUresult};
use crate::state::{STICKY, state};
use crate::{Handle, guard, put};
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint};
use std::sync::atomic::Ordering;

/// What `cuDeviceGetName` reports: nobody should take it for hardware.
pub(crate) const NAME: &str = "offload virtual GPU (PTX simulator, not hardware)";

thread_local! {
    /// The calling thread's current context.
    static CURRENT: Cell<Handle> = const { Cell::new(0) };
}

fn init_check() -> Result<(), CUresult> {
    if state().initialized {
        Ok(())
    } else {
        Err(err::NOT_INITIALIZED)
    }
}

/// Device ordinal `dev` as an index, if the driver reports it.
fn device_check(dev: c_int) -> Result<usize, CUresult> {
    init_check()?;
    usize::try_from(dev)
        .ok()
        .filter(|&d| d < Config::get().devices)
        .ok_or(err::INVALID_DEVICE)
}

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return code,
        }
    };
}
pub(crate) use tri;

#[unsafe(no_mangle)]
extern "C" fn cuInit(flags: c_uint) -> CUresult {
    guard("cuInit", || {
        if flags != 0 {
            return err::INVALID_VALUE;
        }
        state().initialized = true;
        err::SUCCESS
    })
}

/// # Safety
///
/// `v` must be null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuDriverGetVersion(v: *mut c_int) -> CUresult {
    // SAFETY: the caller's pointer, checked for null by `put`.
    guard("cuDriverGetVersion", || unsafe { put(v, 12090) })
}

/// # Safety
///
/// `n` must be null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuDeviceGetCount(n: *mut c_int) -> CUresult {
    guard("cuDeviceGetCount", || {
        tri!(init_check());
        // SAFETY: as above.
        unsafe { put(n, Config::get().devices as c_int) }
    })
}

/// # Safety
///
/// `dev` must be null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuDeviceGet(dev: *mut c_int, ordinal: c_int) -> CUresult {
    guard("cuDeviceGet", || {
        tri!(device_check(ordinal));
        // SAFETY: as above.
        unsafe { put(dev, ordinal) }
    })
}

/// # Safety
///
/// `name` must be valid for `len` bytes.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) -> CUresult {
    guard("cuDeviceGetName", || {
        tri!(device_check(dev));
        if name.is_null() || len <= 0 {
            return err::INVALID_VALUE;
        }
        let bytes = NAME.as_bytes();
        let n = bytes.len().min(len as usize - 1);
        // SAFETY: the caller's buffer holds `len` bytes; we write `n + 1 <= len`.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), name, n);
            name.add(n).write(0);
        }
        err::SUCCESS
    })
}

/// The value of device attribute `a` (CUDA's numbering).
fn attribute(a: c_int) -> Option<c_int> {
    let c = Config::get();
    Some(match a {
        1 => 1024,                       // max threads per block
        2 | 3 => 1024,                   // max block dim x, y
        4 => 64,                         // max block dim z
        5 => i32::MAX,                   // max grid dim x
        6 | 7 => 65535,                  // max grid dim y, z
        8 => 48 << 10,                   // shared memory per block
        9 => 64 << 10,                   // constant memory
        10 => 32,                        // warp size
        12 => 65536,                     // registers per block
        13 => 1_000_000,                 // clock rate (kHz)
        16 => c.sms as c_int,            // multiprocessor count
        18 => 0,                         // integrated
        19 => 1,                         // can map host memory
        31 => 1,                         // concurrent kernels
        36 => 1_000_000,                 // memory clock rate
        39 => c.threads_per_sm as c_int, // max threads per multiprocessor
        40 => 1,                         // async engines
        41 => 1,                         // unified addressing
        75 => c.cc.0 as c_int,
        76 => c.cc.1 as c_int,
        81 => 96 << 10,                     // shared memory per multiprocessor
        82 => 65536,                        // registers per multiprocessor
        106 => 32,                          // max blocks per multiprocessor
        111 => 0,                           // reserved shared memory per block
        115 => c_int::from(c.memory_pools), // memory pools (stream-ordered allocation)
        _ => return None,
    })
}

/// # Safety
///
/// `pi` must be null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuDeviceGetAttribute(pi: *mut c_int, attrib: c_int, dev: c_int) -> CUresult {
    guard("cuDeviceGetAttribute", || {
        tri!(device_check(dev));
        match attribute(attrib) {
            // SAFETY: as above.
            Some(v) => unsafe { put(pi, v) },
            None => err::NOT_SUPPORTED,
        }
    })
}

/// # Safety
///
/// `bytes` must be null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: c_int) -> CUresult {
    guard("cuDeviceTotalMem_v2", || {
        tri!(device_check(dev));
        // SAFETY: as above.
        unsafe { put(bytes, Config::get().memory as usize) }
    })
}

/// # Safety
///
/// `uuid` must be null or valid for a 16-byte write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut [u8; 16], dev: c_int) -> CUresult {
    guard("cuDeviceGetUuid", || {
        let d = tri!(device_check(dev));
        let mut id = *b"offload-vgpu-000";
        id[14] = b'0' + (d / 10) as u8;
        id[15] = b'0' + (d % 10) as u8;
        // SAFETY: as above.
        unsafe { put(uuid, id) }
    })
}

/// # Safety
///
/// As [`cuDeviceGetUuid`].
#[unsafe(no_mangle)]
unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], dev: c_int) -> CUresult {
    // SAFETY: the same contract.
    guard("cuDeviceGetUuid_v2", || unsafe {
        cuDeviceGetUuid(uuid, dev)
    })
}

/// # Safety
///
/// `pctx` must be null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut Handle, dev: c_int) -> CUresult {
    guard("cuDevicePrimaryCtxRetain", || {
        let d = tri!(device_check(dev));
        let mut s = state();
        let h = match s.ctx[d] {
            Some((h, n)) => {
                s.ctx[d] = Some((h, n + 1));
                h
            }
            None => {
                let h = s.handle();
                s.ctx[d] = Some((h, 1));
                h
            }
        };
        // SAFETY: as above.
        unsafe { put(pctx, h) }
    })
}

fn release(dev: c_int) -> CUresult {
    guard("cuDevicePrimaryCtxRelease", || {
        let d = tri!(device_check(dev));
        let mut s = state();
        match s.ctx[d] {
            Some((h, n)) if n > 1 => s.ctx[d] = Some((h, n - 1)),
            Some(_) => {
                // The last reference: the context is destroyed, with its
                // modules, streams, events, device memory and sticky
                // error (other devices' stay).
                s.ctx[d] = None;
                s.modules.retain(|_, l| l.dev != d);
                s.funcs.retain(|_, (l, _)| l.dev != d);
                for st in s.all_streams(d) {
                    st.close();
                }
                s.streams.retain(|_, st| st.dev != d);
                s.default_stream[d] = None;
                s.events.retain(|_, e| e.dev != d);
                s.mem
                    .retain(|_, a| a.dev != d || a.kind == offload_vgpu::mem::Kind::HostMapped);
                s.device_bytes[d] = 0;
                STICKY[d].store(0, Ordering::Release);
            }
            None => return err::INVALID_CONTEXT,
        }
        err::SUCCESS
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: c_int) -> CUresult {
    guard("cuDevicePrimaryCtxRelease_v2", || release(dev))
}

#[unsafe(no_mangle)]
extern "C" fn cuDevicePrimaryCtxRelease(dev: c_int) -> CUresult {
    guard("cuDevicePrimaryCtxRelease", || release(dev))
}

/// # Safety
///
/// `flags` and `active` must be null or valid for writes.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuDevicePrimaryCtxGetState(
    dev: c_int,
    flags: *mut c_uint,
    active: *mut c_int,
) -> CUresult {
    guard("cuDevicePrimaryCtxGetState", || {
        let d = tri!(device_check(dev));
        let on = c_int::from(state().ctx[d].is_some());
        // SAFETY: as above.
        let r = unsafe { put(flags, 0) };
        if r != err::SUCCESS {
            return r;
        }
        // SAFETY: as above.
        unsafe { put(active, on) }
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuDevicePrimaryCtxSetFlags_v2(dev: c_int, _flags: c_uint) -> CUresult {
    guard("cuDevicePrimaryCtxSetFlags_v2", || {
        tri!(device_check(dev));
        err::SUCCESS
    })
}

/// The device whose context the calling thread has current, as the
/// driver requires of memory operations, module loads, streams and
/// launches (a thread that never bound one, or bound one since destroyed,
/// gets `CUDA_ERROR_INVALID_CONTEXT`).
pub(crate) fn current() -> Result<usize, CUresult> {
    let cur = CURRENT.with(Cell::get);
    state().device_of(cur).ok_or(err::INVALID_CONTEXT)
}

#[unsafe(no_mangle)]
extern "C" fn cuCtxSetCurrent(ctx: Handle) -> CUresult {
    guard("cuCtxSetCurrent", || {
        if ctx != 0 && state().device_of(ctx).is_none() {
            return err::INVALID_CONTEXT;
        }
        CURRENT.with(|c| c.set(ctx));
        err::SUCCESS
    })
}

/// # Safety
///
/// `pctx` must be null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut Handle) -> CUresult {
    guard("cuCtxGetCurrent", || {
        tri!(init_check());
        let cur = CURRENT.with(Cell::get);
        // A destroyed context is no longer current.
        let cur = if state().device_of(cur).is_some() {
            cur
        } else {
            0
        };
        // SAFETY: as above.
        unsafe { put(pctx, cur) }
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuCtxPushCurrent_v2(ctx: Handle) -> CUresult {
    guard("cuCtxPushCurrent_v2", || cuCtxSetCurrent(ctx))
}

/// # Safety
///
/// `pctx` must be null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut Handle) -> CUresult {
    guard("cuCtxPopCurrent_v2", || {
        let cur = CURRENT.with(|c| c.replace(0));
        if pctx.is_null() {
            return err::SUCCESS;
        }
        // SAFETY: as above.
        unsafe { put(pctx, cur) }
    })
}

/// # Safety
///
/// `dev` must be null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuCtxGetDevice(dev: *mut c_int) -> CUresult {
    guard("cuCtxGetDevice", || {
        let d = tri!(current());
        // SAFETY: as above.
        unsafe { put(dev, d as c_int) }
    })
}

/// # Safety
///
/// `flags` must be null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuCtxGetFlags(flags: *mut c_uint) -> CUresult {
    // SAFETY: as above.
    guard("cuCtxGetFlags", || unsafe { put(flags, 0) })
}

/// # Safety
///
/// `least` and `greatest` must be null or valid for writes.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuCtxGetStreamPriorityRange(
    least: *mut c_int,
    greatest: *mut c_int,
) -> CUresult {
    guard("cuCtxGetStreamPriorityRange", || {
        for p in [least, greatest] {
            if !p.is_null() {
                // SAFETY: as above.
                unsafe { p.write(0) };
            }
        }
        err::SUCCESS
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuCtxSynchronize() -> CUresult {
    guard("cuCtxSynchronize", || {
        let d = tri!(current());
        let streams = state().all_streams(d);
        for s in streams {
            s.drain();
        }
        crate::state::sticky(d).unwrap_or(err::SUCCESS)
    })
}

/// # Safety
///
/// `p` must be null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuGetErrorName(code: CUresult, p: *mut *const c_char) -> CUresult {
    guard("cuGetErrorName", || match err::name(code) {
        // SAFETY: as above; the string lives for the process.
        Some(s) => unsafe { put(p, s.as_ptr()) },
        None => err::INVALID_VALUE,
    })
}

/// # Safety
///
/// `p` must be null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuGetErrorString(code: CUresult, p: *mut *const c_char) -> CUresult {
    guard("cuGetErrorString", || match err::message(code) {
        // SAFETY: as above; the string lives for the process.
        Some(s) => unsafe { put(p, s.as_ptr()) },
        None => err::INVALID_VALUE,
    })
}
