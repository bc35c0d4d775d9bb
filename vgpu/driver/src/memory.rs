//! Device memory, pinned mapped host memory, copies and memsets. Device
//! addresses are the host addresses of the simulator's allocations; a copy
//! is checked against them and refused (`CUDA_ERROR_INVALID_VALUE`) when
//! its device range is not inside one allocation. An allocation belongs
//! to the device whose context is current when it is made; a copy may
//! name any device's memory (unified addressing, as with peer access).

use crate::config::Config;
use crate::device::tri;
use crate::err::{self, CUresult};
use crate::state::{Alloc, State, state, sticky};
use crate::{Handle, guard, put};
use offload_vgpu::mem::{Backing, Kind};
use std::ffi::{c_uint, c_void};
use std::sync::Arc;

type DevPtr = u64;

/// An allocation of `bytes` of `kind` in the calling thread's current
/// context.
fn alloc(bytes: usize, kind: Kind) -> Result<u64, CUresult> {
    let dev = crate::device::current()?;
    let mut s = state();
    if kind == Kind::Device {
        if s.device_bytes[dev] + bytes as u64 > Config::get().memory {
            return Err(err::OUT_OF_MEMORY);
        }
        s.device_bytes[dev] += bytes as u64;
    }
    let Some(b) = Backing::new(bytes) else {
        if kind == Kind::Device {
            s.device_bytes[dev] -= bytes as u64;
        }
        return Err(err::OUT_OF_MEMORY);
    };
    let a = b.addr();
    s.mem.insert(
        a,
        Alloc {
            backing: b,
            kind,
            dev,
        },
    );
    Ok(a)
}

/// Frees the device allocation `b` if it is still live.
pub(crate) fn free_exact(s: &mut State, b: &Arc<Backing>) {
    if let Some(a) = s.mem.get(&b.addr()).filter(|a| Arc::ptr_eq(&a.backing, b)) {
        let dev = a.dev;
        s.device_bytes[dev] -= b.len() as u64;
        s.mem.remove(&b.addr());
    }
}

/// Frees the allocation at `p` if it is of `kind`.
fn free(s: &mut State, p: u64, kind: Kind) -> CUresult {
    match s.mem.get(&p) {
        Some(a) if a.kind == kind => {
            if kind == Kind::Device {
                let dev = a.dev;
                s.device_bytes[dev] -= a.backing.len() as u64;
            }
            s.mem.remove(&p);
            err::SUCCESS
        }
        _ => err::INVALID_VALUE,
    }
}

/// # Safety
///
/// `dptr` must be null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut DevPtr, bytes: usize) -> CUresult {
    guard("cuMemAlloc_v2", || {
        if bytes == 0 {
            return err::INVALID_VALUE;
        }
        let a = tri!(alloc(bytes, Kind::Device));
        // SAFETY: the caller's pointer, checked for null by `put`.
        unsafe { put(dptr, a) }
    })
}

/// # Safety
///
/// As [`cuMemAlloc_v2`].
#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemAllocAsync(dptr: *mut DevPtr, bytes: usize, _stream: Handle) -> CUresult {
    // SAFETY: the same contract.
    guard("cuMemAllocAsync", || unsafe { cuMemAlloc_v2(dptr, bytes) })
}

#[unsafe(no_mangle)]
extern "C" fn cuMemFree_v2(p: DevPtr) -> CUresult {
    guard("cuMemFree_v2", || {
        // A launch still running may use the memory: wait for every stream
        // of its device.
        let streams = {
            let s = state();
            match s.mem.get(&p) {
                Some(a) => s.all_streams(a.dev),
                None => Vec::new(),
            }
        };
        for s in streams {
            s.drain();
        }
        free(&mut state(), p, Kind::Device)
    })
}

/// A stream-ordered free: the memory goes when the stream's earlier work
/// has finished, and the call does not wait for it.
#[unsafe(no_mangle)]
extern "C" fn cuMemFreeAsync(p: DevPtr, stream: Handle) -> CUresult {
    guard("cuMemFreeAsync", || {
        let dev = tri!(crate::device::current());
        let mut s = state();
        let b = match s.mem.get(&p) {
            Some(a) if a.kind == Kind::Device => a.backing.clone(),
            _ => return err::INVALID_VALUE,
        };
        let Some(st) = s.stream(stream, dev) else {
            return err::INVALID_HANDLE;
        };
        drop(s);
        st.submit(crate::state::Work::Free(b));
        err::SUCCESS
    })
}

/// # Safety
///
/// `free` and `total` must be null or valid for writes.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemGetInfo_v2(free_b: *mut usize, total: *mut usize) -> CUresult {
    guard("cuMemGetInfo_v2", || {
        let dev = tri!(crate::device::current());
        let t = Config::get().memory;
        let used = state().device_bytes[dev];
        // SAFETY: as above.
        let r = unsafe { put(free_b, t.saturating_sub(used) as usize) };
        if r != err::SUCCESS {
            return r;
        }
        // SAFETY: as above.
        unsafe { put(total, t as usize) }
    })
}

/// # Safety
///
/// `pp` must be null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemHostAlloc(
    pp: *mut *mut c_void,
    bytes: usize,
    _flags: c_uint,
) -> CUresult {
    guard("cuMemHostAlloc", || {
        let a = tri!(alloc(bytes, Kind::HostMapped));
        // SAFETY: as above.
        unsafe { put(pp, a as *mut c_void) }
    })
}

/// # Safety
///
/// As [`cuMemHostAlloc`].
#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytes: usize) -> CUresult {
    // SAFETY: the same contract.
    guard("cuMemAllocHost_v2", || unsafe {
        cuMemHostAlloc(pp, bytes, 0)
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    guard("cuMemFreeHost", || {
        // Every device's launches may use mapped host memory.
        let streams = state().every_stream();
        for s in streams {
            s.drain();
        }
        free(&mut state(), p as u64, Kind::HostMapped)
    })
}

/// # Safety
///
/// `pd` must be null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    pd: *mut DevPtr,
    p: *mut c_void,
    flags: c_uint,
) -> CUresult {
    guard("cuMemHostGetDevicePointer_v2", || {
        if flags != 0 {
            return err::INVALID_VALUE;
        }
        let s = state();
        match s.find(p as u64, 1) {
            // Unified addressing: the device sees the host address.
            Some((_, a)) if a.kind == Kind::HostMapped => {
                // SAFETY: as above.
                unsafe { put(pd, p as u64) }
            }
            _ => err::INVALID_VALUE,
        }
    })
}

/// Waits for `stream`'s launches (all the current device's streams for
/// the default one).
fn order(stream: Handle) -> Result<(), CUresult> {
    let dev = crate::device::current()?;
    let st = {
        let mut s = state();
        if stream <= 2 {
            s.all_streams(dev)
        } else {
            vec![s.stream(stream, dev).ok_or(err::INVALID_HANDLE)?]
        }
    };
    for s in st {
        s.drain();
    }
    match sticky(dev) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The backing and offset of the device range `[p, p + n)`.
fn device_range(p: DevPtr, n: usize) -> Result<(Arc<Backing>, usize), CUresult> {
    let s = state();
    let (base, a) = s.find(p, n as u64).ok_or(err::INVALID_VALUE)?;
    Ok((a.backing.clone(), (p - base) as usize))
}

/// A host → device copy.
///
/// # Safety
///
/// `src` must be valid for `n` bytes of reads.
unsafe fn htod(dst: DevPtr, src: *const c_void, n: usize, stream: Handle) -> CUresult {
    tri!(order(stream));
    if n == 0 {
        return err::SUCCESS;
    }
    if src.is_null() {
        return err::INVALID_VALUE;
    }
    let (b, off) = tri!(device_range(dst, n));
    // SAFETY: the caller's buffer holds `n` bytes.
    b.write(off, unsafe {
        std::slice::from_raw_parts(src.cast::<u8>(), n)
    });
    err::SUCCESS
}

/// A device → host copy.
///
/// # Safety
///
/// `dst` must be valid for `n` bytes of writes.
unsafe fn dtoh(dst: *mut c_void, src: DevPtr, n: usize, stream: Handle) -> CUresult {
    if n > 0 && stream > 2 {
        // Into pinned memory, on a stream of its own: the copy waits for
        // the stream's earlier work and the host goes on (its event says
        // when the bytes are there).
        let pinned = {
            let s = state();
            s.find(dst as u64, n as u64)
                .filter(|(_, a)| a.kind == Kind::HostMapped)
                .map(|(base, a)| (a.backing.clone(), (dst as u64 - base) as usize))
        };
        if let Some(to) = pinned {
            let dev = tri!(crate::device::current());
            let from = tri!(device_range(src, n));
            let Some(st) = state().stream(stream, dev) else {
                return err::INVALID_HANDLE;
            };
            st.submit(crate::state::Work::Copy { from, to, n });
            return err::SUCCESS;
        }
    }
    tri!(order(stream));
    if n == 0 {
        return err::SUCCESS;
    }
    if dst.is_null() {
        return err::INVALID_VALUE;
    }
    let (b, off) = tri!(device_range(src, n));
    // SAFETY: the caller's buffer holds `n` bytes.
    b.read(off, unsafe {
        std::slice::from_raw_parts_mut(dst.cast::<u8>(), n)
    });
    err::SUCCESS
}

fn dtod(dst: DevPtr, src: DevPtr, n: usize, stream: Handle) -> CUresult {
    tri!(order(stream));
    let (sb, so) = tri!(device_range(src, n));
    let (db, doff) = tri!(device_range(dst, n));
    let mut tmp = vec![0u8; n];
    sb.read(so, &mut tmp);
    db.write(doff, &tmp);
    err::SUCCESS
}

/// # Safety
///
/// `src` must be valid for `n` bytes.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemcpyHtoD_v2(dst: DevPtr, src: *const c_void, n: usize) -> CUresult {
    // SAFETY: the caller's contract.
    guard("cuMemcpyHtoD_v2", || unsafe { htod(dst, src, n, 0) })
}

/// # Safety
///
/// `src` must be valid for `n` bytes.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: DevPtr,
    src: *const c_void,
    n: usize,
    stream: Handle,
) -> CUresult {
    // SAFETY: the caller's contract.
    guard("cuMemcpyHtoDAsync_v2", || unsafe {
        htod(dst, src, n, stream)
    })
}

/// # Safety
///
/// `dst` must be valid for `n` bytes.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: DevPtr, n: usize) -> CUresult {
    // SAFETY: the caller's contract.
    guard("cuMemcpyDtoH_v2", || unsafe { dtoh(dst, src, n, 0) })
}

/// # Safety
///
/// `dst` must be valid for `n` bytes.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: DevPtr,
    n: usize,
    stream: Handle,
) -> CUresult {
    // SAFETY: the caller's contract.
    guard("cuMemcpyDtoHAsync_v2", || unsafe {
        dtoh(dst, src, n, stream)
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuMemcpyDtoD_v2(dst: DevPtr, src: DevPtr, n: usize) -> CUresult {
    guard("cuMemcpyDtoD_v2", || dtod(dst, src, n, 0))
}

#[unsafe(no_mangle)]
extern "C" fn cuMemcpyDtoDAsync_v2(dst: DevPtr, src: DevPtr, n: usize, stream: Handle) -> CUresult {
    guard("cuMemcpyDtoDAsync_v2", || dtod(dst, src, n, stream))
}

fn memset(dst: DevPtr, pattern: &[u8], count: usize, stream: Handle) -> CUresult {
    tri!(order(stream));
    let n = count * pattern.len();
    if n == 0 {
        return err::SUCCESS;
    }
    let (b, off) = tri!(device_range(dst, n));
    if pattern.iter().all(|&x| x == pattern[0]) {
        b.fill(off, n, pattern[0]);
    } else {
        b.write(off, &pattern.repeat(count));
    }
    err::SUCCESS
}

#[unsafe(no_mangle)]
extern "C" fn cuMemsetD8_v2(dst: DevPtr, v: u8, n: usize) -> CUresult {
    guard("cuMemsetD8_v2", || memset(dst, &[v], n, 0))
}

#[unsafe(no_mangle)]
extern "C" fn cuMemsetD8Async(dst: DevPtr, v: u8, n: usize, stream: Handle) -> CUresult {
    guard("cuMemsetD8Async", || memset(dst, &[v], n, stream))
}

#[unsafe(no_mangle)]
extern "C" fn cuMemsetD32_v2(dst: DevPtr, v: u32, n: usize) -> CUresult {
    guard("cuMemsetD32_v2", || memset(dst, &v.to_le_bytes(), n, 0))
}

#[unsafe(no_mangle)]
extern "C" fn cuMemsetD32Async(dst: DevPtr, v: u32, n: usize, stream: Handle) -> CUresult {
    guard("cuMemsetD32Async", || {
        memset(dst, &v.to_le_bytes(), n, stream)
    })
}
