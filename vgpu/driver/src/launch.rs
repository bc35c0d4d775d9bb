//! Modules (PTX text parsed by the simulator), functions, kernel launches,
//! streams and events.

use crate::config::Config;
use crate::device::tri;
use crate::err::{self, CUresult};
use crate::state::{Event, Job, Loaded, Stream, Work, state, sticky};
use crate::{Handle, guard, put};
use offload_vgpu::mem::{Backing, Kind};
use offload_vgpu::{Dims, SimOptions};
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::Arc;

/// Parses and loads NUL-terminated PTX `image`; the error text on failure.
///
/// # Safety
///
/// `image` must be a NUL-terminated string.
unsafe fn load(image: *const c_void) -> Result<Handle, (CUresult, String)> {
    if image.is_null() {
        return Err((err::INVALID_VALUE, "no image".into()));
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let text = unsafe { CStr::from_ptr(image.cast::<c_char>()) };
    let text = text
        .to_str()
        .map_err(|_| (err::INVALID_PTX, "the PTX text is not UTF-8".to_string()))?;
    let dev = crate::device::current().map_err(|c| (c, "no current context".to_string()))?;
    let module = offload_vgpu::parse(text).map_err(|e| (err::INVALID_PTX, e.to_string()))?;
    let mut s = state();
    let data = if module.data_bytes > 0 {
        let b =
            Backing::new(module.data_bytes as usize).ok_or((err::OUT_OF_MEMORY, String::new()))?;
        b.write(0, &module.data_image());
        s.mem.insert(
            b.addr(),
            crate::state::Alloc {
                backing: b.clone(),
                kind: Kind::ModuleData,
                dev,
            },
        );
        Some(b)
    } else {
        None
    };
    let h = s.handle();
    let notes = crate::stats::notes(&module.text);
    s.modules.insert(
        h,
        Arc::new(Loaded {
            dev,
            module,
            data,
            notes,
        }),
    );
    Ok(h)
}

/// # Safety
///
/// `m` must be null or valid for a write; `image` NUL-terminated PTX.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuModuleLoadData(m: *mut Handle, image: *const c_void) -> CUresult {
    guard("cuModuleLoadData", || {
        // SAFETY: the caller's contract.
        match unsafe { load(image) } {
            // SAFETY: as above.
            Ok(h) => unsafe { put(m, h) },
            Err((code, msg)) => {
                err::set_detail(code, msg);
                code
            }
        }
    })
}

/// JIT options understood: the error log buffer and its size.
const ERROR_LOG_BUFFER: c_int = 5;
const ERROR_LOG_BUFFER_SIZE: c_int = 6;

/// # Safety
///
/// As [`cuModuleLoadData`]; `opts` and `vals` hold `n` entries each, and
/// an error log buffer option points to a buffer of its size option.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuModuleLoadDataEx(
    m: *mut Handle,
    image: *const c_void,
    n: c_uint,
    opts: *const c_int,
    vals: *const *mut c_void,
) -> CUresult {
    guard("cuModuleLoadDataEx", || {
        // SAFETY: the caller's contract.
        match unsafe { load(image) } {
            // SAFETY: as above.
            Ok(h) => unsafe { put(m, h) },
            Err((code, msg)) => {
                let (mut buf, mut size) = (std::ptr::null_mut::<u8>(), 0usize);
                for i in 0..n as usize {
                    if opts.is_null() || vals.is_null() {
                        break;
                    }
                    // SAFETY: both arrays hold `n` entries.
                    let (o, v) = unsafe { (*opts.add(i), *vals.add(i)) };
                    match o {
                        ERROR_LOG_BUFFER => buf = v.cast(),
                        ERROR_LOG_BUFFER_SIZE => size = v as usize,
                        _ => {}
                    }
                }
                if !buf.is_null() && size > 0 {
                    let b = msg.as_bytes();
                    let k = b.len().min(size - 1);
                    // SAFETY: the log buffer holds `size` bytes; we write `k + 1`.
                    unsafe {
                        std::ptr::copy_nonoverlapping(b.as_ptr(), buf, k);
                        buf.add(k).write(0);
                    }
                }
                err::set_detail(code, msg);
                code
            }
        }
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuModuleUnload(m: Handle) -> CUresult {
    guard("cuModuleUnload", || {
        let mut s = state();
        let Some(l) = s.modules.remove(&m) else {
            return err::INVALID_HANDLE;
        };
        s.funcs.retain(|_, (f, _)| !Arc::ptr_eq(f, &l));
        if let Some(d) = &l.data {
            s.mem.remove(&d.addr());
        }
        err::SUCCESS
    })
}

/// # Safety
///
/// `f` must be null or valid for a write; `name` NUL-terminated.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuModuleGetFunction(
    f: *mut Handle,
    m: Handle,
    name: *const c_char,
) -> CUresult {
    guard("cuModuleGetFunction", || {
        if name.is_null() {
            return err::INVALID_VALUE;
        }
        // SAFETY: the caller passes a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        let mut s = state();
        let Some(l) = s.modules.get(&m).cloned() else {
            return err::INVALID_HANDLE;
        };
        let Some(i) = l
            .module
            .func_index(&name)
            .filter(|&i| l.module.funcs[i as usize].entry)
        else {
            return err::NOT_FOUND;
        };
        let h = s.handle();
        s.funcs.insert(h, (l, i));
        // SAFETY: as above.
        unsafe { put(f, h) }
    })
}

/// # Safety
///
/// `dptr` and `bytes` must be null or valid for writes; `name`
/// NUL-terminated.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuModuleGetGlobal_v2(
    dptr: *mut u64,
    bytes: *mut usize,
    m: Handle,
    name: *const c_char,
) -> CUresult {
    guard("cuModuleGetGlobal_v2", || {
        if name.is_null() {
            return err::INVALID_VALUE;
        }
        // SAFETY: the caller passes a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        let s = state();
        let Some(l) = s.modules.get(&m) else {
            return err::INVALID_HANDLE;
        };
        let Some(v) = l
            .module
            .vars
            .iter()
            .find(|v| v.name == name && v.space != offload_vgpu::inst::Space::Shared)
        else {
            return err::NOT_FOUND;
        };
        let base = l.data.as_ref().map_or(0, |d| d.addr());
        if !dptr.is_null() {
            // SAFETY: as above.
            unsafe { dptr.write(base + v.offset) };
        }
        if !bytes.is_null() {
            // SAFETY: as above.
            unsafe { bytes.write(v.bytes as usize) };
        }
        err::SUCCESS
    })
}

/// # Safety
///
/// `pi` must be null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuFuncGetAttribute(pi: *mut c_int, attrib: c_int, f: Handle) -> CUresult {
    guard("cuFuncGetAttribute", || {
        let s = state();
        let Some((l, i)) = s.funcs.get(&f) else {
            return err::INVALID_HANDLE;
        };
        let func = &l.module.funcs[*i as usize];
        let v = match attrib {
            0 => 1024,                              // max threads per block
            1 => func.shared_bytes as c_int,        // static shared memory
            2 => 0,                                 // constant memory
            3 => func.local_bytes as c_int,         // local memory
            4 => func.regs.len().min(255) as c_int, // registers
            5 | 6 => 70,                            // PTX and binary version
            _ => 0,
        };
        // SAFETY: as above.
        unsafe { put(pi, v) }
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuFuncSetAttribute(f: Handle, _attrib: c_int, _value: c_int) -> CUresult {
    guard("cuFuncSetAttribute", || {
        if state().funcs.contains_key(&f) {
            err::SUCCESS
        } else {
            err::INVALID_HANDLE
        }
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuFuncSetCacheConfig(f: Handle, _config: c_int) -> CUresult {
    guard("cuFuncSetCacheConfig", || cuFuncSetAttribute(f, 0, 0))
}

/// # Safety
///
/// `n` must be null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessor(
    n: *mut c_int,
    f: Handle,
    block: c_int,
    _smem: usize,
) -> CUresult {
    guard("cuOccupancyMaxActiveBlocksPerMultiprocessor", || {
        if !state().funcs.contains_key(&f) {
            return err::INVALID_HANDLE;
        }
        if block <= 0 || block > 1024 {
            return err::INVALID_VALUE;
        }
        let per_sm = Config::get().threads_per_sm as c_int / block;
        // SAFETY: as above.
        unsafe { put(n, per_sm) }
    })
}

/// # Safety
///
/// As [`cuOccupancyMaxActiveBlocksPerMultiprocessor`].
#[unsafe(no_mangle)]
unsafe extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    n: *mut c_int,
    f: Handle,
    block: c_int,
    smem: usize,
    _flags: c_uint,
) -> CUresult {
    // SAFETY: the same contract.
    guard(
        "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
        || unsafe { cuOccupancyMaxActiveBlocksPerMultiprocessor(n, f, block, smem) },
    )
}

/// # Safety
///
/// `params` holds one pointer per kernel parameter, each to a value of
/// that parameter's size.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn cuLaunchKernel(
    f: Handle,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared: c_uint,
    stream: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    guard("cuLaunchKernel", || {
        let dev = tri!(crate::device::current());
        if let Some(e) = sticky(dev) {
            return e;
        }
        if !extra.is_null() {
            return err::NOT_SUPPORTED;
        }
        let mut s = state();
        // A function of another device's module is no function here.
        let Some((l, i)) = s.funcs.get(&f).filter(|(l, _)| l.dev == dev).cloned() else {
            return err::INVALID_HANDLE;
        };
        let func = &l.module.funcs[i as usize];
        if bx == 0 || by == 0 || bz == 0 || gx == 0 || gy == 0 || gz == 0 {
            return err::INVALID_VALUE;
        }
        if u64::from(bx) * u64::from(by) * u64::from(bz) > 1024 {
            return err::INVALID_VALUE;
        }
        if !func.params.is_empty() && params.is_null() {
            return err::INVALID_VALUE;
        }
        let mut buf = vec![0u8; func.param_bytes as usize];
        for (k, p) in func.params.iter().enumerate() {
            // SAFETY: `params` holds one pointer per parameter.
            let src = unsafe { *params.add(k) };
            if src.is_null() {
                return err::INVALID_VALUE;
            }
            // SAFETY: each points to a value of the parameter's size.
            let v = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), p.bytes as usize) };
            buf[p.offset as usize..(p.offset + p.bytes) as usize].copy_from_slice(v);
        }
        let Some(st) = s.stream(stream, dev) else {
            return err::INVALID_HANDLE;
        };
        let c = Config::get();
        s.launches += 1;
        let regions = s
            .regions(dev)
            .into_iter()
            .filter(|r| r.kind != Kind::ModuleData)
            .collect();
        let job = Job {
            dev,
            loaded: l.clone(),
            func: i,
            dims: Dims {
                grid: [gx, gy, gz],
                block: [bx, by, bz],
                shared_bytes: shared,
            },
            params: buf,
            regions,
            opts: SimOptions {
                seed: c.seed.wrapping_add(s.launches),
                quantum: c.quantum,
                max_steps: c.max_steps,
                sms: c.sms,
            },
        };
        drop(s);
        st.submit(Work::Launch(Box::new(job)));
        err::SUCCESS
    })
}

/// # Safety
///
/// `h` must be null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuStreamCreate(h: *mut Handle, _flags: c_uint) -> CUresult {
    guard("cuStreamCreate", || {
        let dev = tri!(crate::device::current());
        let mut s = state();
        let k = s.handle();
        s.streams.insert(k, Stream::new(dev));
        // SAFETY: as above.
        unsafe { put(h, k) }
    })
}

/// # Safety
///
/// As [`cuStreamCreate`].
#[unsafe(no_mangle)]
unsafe extern "C" fn cuStreamCreateWithPriority(
    h: *mut Handle,
    flags: c_uint,
    _prio: c_int,
) -> CUresult {
    // SAFETY: the same contract.
    guard("cuStreamCreateWithPriority", || unsafe {
        cuStreamCreate(h, flags)
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuStreamDestroy_v2(h: Handle) -> CUresult {
    guard("cuStreamDestroy_v2", || match state().streams.remove(&h) {
        Some(st) => {
            // Work already queued still runs (as CUDA specifies).
            st.close();
            err::SUCCESS
        }
        None => err::INVALID_HANDLE,
    })
}

/// The stream for handle `h`: a created stream of any device, or the
/// default stream of the current context's.
fn stream_of(h: Handle) -> Result<Arc<Stream>, CUresult> {
    if h <= 2 {
        let dev = crate::device::current()?;
        return state().stream(h, dev).ok_or(err::INVALID_HANDLE);
    }
    state().streams.get(&h).cloned().ok_or(err::INVALID_HANDLE)
}

#[unsafe(no_mangle)]
extern "C" fn cuStreamSynchronize(h: Handle) -> CUresult {
    guard("cuStreamSynchronize", || {
        let st = tri!(stream_of(h));
        st.drain();
        sticky(st.dev).unwrap_or(err::SUCCESS)
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuStreamQuery(h: Handle) -> CUresult {
    guard("cuStreamQuery", || {
        let st = tri!(stream_of(h));
        if let Some(e) = sticky(st.dev) {
            return e;
        }
        let seq = crate::state::lock(&st.progress).submitted;
        if st.reached(seq) {
            err::SUCCESS
        } else {
            err::NOT_READY
        }
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuStreamWaitEvent(h: Handle, ev: Handle, _flags: c_uint) -> CUresult {
    guard("cuStreamWaitEvent", || {
        tri!(stream_of(h));
        let Some(e) = state().events.get(&ev).cloned() else {
            return err::INVALID_HANDLE;
        };
        // Later work of `h` must follow the event: waiting here, on the
        // host, orders it (more strictly than a GPU would).
        if let Some((st, seq)) = e.at {
            st.wait_for(seq);
        }
        err::SUCCESS
    })
}

/// # Safety
///
/// `h` must be null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuEventCreate(h: *mut Handle, _flags: c_uint) -> CUresult {
    guard("cuEventCreate", || {
        let dev = tri!(crate::device::current());
        let mut s = state();
        let k = s.handle();
        s.events.insert(k, Event { dev, at: None });
        // SAFETY: as above.
        unsafe { put(h, k) }
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuEventRecord(ev: Handle, stream: Handle) -> CUresult {
    guard("cuEventRecord", || {
        let Some(dev) = state().events.get(&ev).map(|e| e.dev) else {
            return err::INVALID_HANDLE;
        };
        let mut s = state();
        // The event and the stream are of one context.
        let Some(st) = s.stream(stream, dev) else {
            return err::INVALID_HANDLE;
        };
        let seq = crate::state::lock(&st.progress).submitted;
        match s.events.get_mut(&ev) {
            Some(e) => {
                e.at = Some((st, seq));
                err::SUCCESS
            }
            None => err::INVALID_HANDLE,
        }
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuEventRecordWithFlags(ev: Handle, stream: Handle, _flags: c_uint) -> CUresult {
    guard("cuEventRecordWithFlags", || cuEventRecord(ev, stream))
}

#[unsafe(no_mangle)]
extern "C" fn cuEventQuery(ev: Handle) -> CUresult {
    guard("cuEventQuery", || {
        let Some(e) = state().events.get(&ev).cloned() else {
            return err::INVALID_HANDLE;
        };
        if let Some(code) = sticky(e.dev) {
            return code;
        }
        match e.at {
            Some((st, seq)) if !st.reached(seq) => err::NOT_READY,
            _ => err::SUCCESS,
        }
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuEventSynchronize(ev: Handle) -> CUresult {
    guard("cuEventSynchronize", || {
        let Some(e) = state().events.get(&ev).cloned() else {
            return err::INVALID_HANDLE;
        };
        if let Some((st, seq)) = e.at {
            st.wait_for(seq);
        }
        sticky(e.dev).unwrap_or(err::SUCCESS)
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuEventDestroy_v2(ev: Handle) -> CUresult {
    guard("cuEventDestroy_v2", || match state().events.remove(&ev) {
        Some(_) => err::SUCCESS,
        None => err::INVALID_HANDLE,
    })
}
