//! The CUDA device: PTX from [`offload_jit::ptx`] loaded through cudarc
//! (dynamic loading: the project builds and runs without CUDA), with the
//! launch → replay loop of a GPU (docs/DESIGN.md, "How a launch flows"):
//!
//! 1. carve a device eden from the host heap (1 MiB for a runtime's first
//!    launch, doubled after each launch that exhausts it, 64 MiB at most),
//!    copy the heap below it to the device and zero the eden there
//!    (references are 32-bit word offsets, so the image is relocatable and
//!    the same offsets mean the same objects on both sides);
//! 2. launch one persistent thread per resident slot (SM count × resident
//!    blocks per SM × block, from the device's occupancy); each claims
//!    chunks from the atomic cursor, polls the control word (pinned,
//!    mapped host memory that this thread mirrors the runtime's safepoint
//!    requests into while the kernel runs), allocates from TLABs shared
//!    by a warp (`SharedTlab { group }`: by `group` warps; `PrivateTlab`:
//!    one per slot; `EdenCas`: none) and writes deopt records into its
//!    slot of the save area;
//! 3. copy back the heap up to the device eden's final top, the records,
//!    never-ran ranges and counters, retire the TLABs into fillers, hand
//!    the unused rest of the eden back to the heap (a kernel that
//!    allocates nothing leaves the heap's top where it was), replay the
//!    records in the interpreter in parallel — except those of workitems a
//!    safepoint (or the device eden's exhaustion) stopped at a loop header
//!    or an allocation, which stay in the save area — and relaunch: each
//!    slot first resumes the record left in its part of the area (the
//!    PTX's re-entry, `offload_jit::ptx`), then runs its never-ran rest,
//!    then claims, until every slot has exhausted the range.
//!
//! **Why exit and re-enter, not wait in place.** A stopped slot leaves the
//! grid and the relaunch resumes it, rather than spinning at its poll
//! while the host runs the safepoint (the GC seed's §4.2.4): the host's
//! operation works on the host heap, so the device's image is stale for
//! as long as it runs and is replaced after it (a collection moves objects
//! that spinning threads would hold in registers). Waiting in place pays
//! only with a heap resident on the device (issue 30), where the host
//! would work on the device image.
//!
//! Every byte moved counts in [`LaunchReport::copied_bytes`]. The device
//! may be offload's virtual GPU (`vgpu/driver`, found only on the library
//! path): [`Gpu::is_virtual`] says so, and reports and
//! [`crate::Runtime::fallback`] show it.
//!
//! Why a heap image rather than managed memory (seed `002_…`): the image
//! moves exactly the heap's used prefix in two bulk copies per launch and
//! never page-faults on the device; managed memory with prefetch would
//! spare the copy back of untouched pages, but migrates in 64 KiB units
//! on first touch and needs the host heap to be allocated by CUDA, which
//! would tie the CPU device and the interpreter to the driver. The save
//! area is one record per slot (the Sumatra bound: O(resident threads),
//! never O(range)).
//!
//! One launch at a time per runtime uses the GPU (the heap image is copied
//! back whole, so launches are serialized by a lock).

use crate::adaptive::{Plan, Version};
use crate::device::{Executor, Unsupported};
use crate::env::{Device, KernelCall, LaunchEnv, Started};
use crate::error::OffloadError;
use crate::replay::{Replayer, Replays};
use crate::report::{LaunchReport, Timings};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg, sys,
};
use offload_deopt::SaveArea;
use offload_ir::FuncId;
use offload_jit::ptx::{DEVICE_TLAB_BYTES, DeviceCtx, PtxKernel};
use offload_tlab::Eden;
use rayon::prelude::*;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Threads per block of every launch.
const BLOCK: u32 = 256;
/// Threads in a warp: the slots that share one TLAB under the default
/// policy.
const WARP: u64 = 32;
/// The most device eden a launch carves (fewer if the heap has less).
const DEVICE_EDEN_BYTES: u32 = 64 << 20;
/// The device eden of a runtime's first launch. A launch that exhausts its
/// eden doubles it for the next launch (up to [`DEVICE_EDEN_BYTES`]): a
/// kernel that allocates little, or a relaunch after a safepoint, does not
/// pay to zero and move 64 MiB, and one that allocates much reaches the
/// size it needs after a few relaunches.
const FIRST_EDEN_BYTES: u32 = 1 << 20;

/// A kernel version loaded on the GPU.
struct Loaded {
    func: CudaFunction,
    ptx: PtxKernel,
    load_time: Duration,
    grid: u32,
}

/// Loaded kernel versions by (module id, kernel, version), or why not.
type ModuleCache = HashMap<(u64, FuncId, u32), Result<Arc<Loaded>, String>>;

/// The GPU of a runtime.
pub(crate) struct Gpu {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    name: String,
    cc: (i32, i32),
    pub(crate) sms: u32,
    /// The control word: pinned, mapped host memory (host pointer), and
    /// its device address.
    control_host: *mut u32,
    control_dev: u64,
    _control: cudarc::driver::PinnedHostSlice<u32>,
    modules: Mutex<ModuleCache>,
    launch_lock: Mutex<()>,
    /// Words of device eden the next launch carves (see
    /// [`FIRST_EDEN_BYTES`]).
    eden_words: AtomicU32,
}

// SAFETY: `control_host` points into the pinned allocation the struct
// owns; it is only written with volatile stores by the launching thread
// (under `launch_lock`). Everything else is cudarc's `Send + Sync` handles
// or behind mutexes.
unsafe impl Send for Gpu {}
// SAFETY: as above.
unsafe impl Sync for Gpu {}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("name", &self.name)
            .field("cc", &self.cc)
            .field("sms", &self.sms)
            .finish_non_exhaustive()
    }
}

/// Why no GPU can be used, or the GPU.
pub(crate) fn probe() -> Result<Gpu, String> {
    // SAFETY: only tries to load the driver library.
    if !unsafe { sys::is_culib_present() } {
        return Err("no CUDA driver: libcuda could not be loaded".into());
    }
    // cudarc panics on some driver failures; a panic is a missing GPU.
    std::panic::catch_unwind(probe_driver)
        .unwrap_or_else(|_| Err("the CUDA driver failed during start-up".into()))
}

fn probe_driver() -> Result<Gpu, String> {
    let n =
        CudaContext::device_count().map_err(|e| format!("CUDA driver: {}", driver_error(&e)))?;
    if n < 1 {
        return Err("the CUDA driver reports no GPU".into());
    }
    let ctx =
        CudaContext::new(0).map_err(|e| format!("CUDA context on GPU 0: {}", driver_error(&e)))?;
    let cc = ctx
        .compute_capability()
        .map_err(|e| format!("CUDA: {}", driver_error(&e)))?;
    let name = ctx.name().unwrap_or_else(|_| "GPU 0".into());
    if cc.0 < 7 {
        return Err(format!(
            "{name} is sm_{}{}; offload needs sm_70 or newer (independent thread scheduling)",
            cc.0, cc.1
        ));
    }
    let sms = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map_err(|e| format!("CUDA: {}", driver_error(&e)))? as u32;
    let stream = ctx
        .new_stream()
        .map_err(|e| format!("CUDA stream: {}", driver_error(&e)))?;
    // SAFETY: the word is initialized right below, before any use.
    let mut control = unsafe {
        ctx.alloc_pinned_with_flags::<u32>(
            1,
            sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE,
        )
    }
    .map_err(|e| format!("CUDA pinned control word: {}", driver_error(&e)))?;
    let control_host = control
        .as_mut_ptr()
        .map_err(|e| format!("CUDA pinned control word: {}", driver_error(&e)))?;
    // SAFETY: `control_host` is the one-word pinned allocation above.
    unsafe { control_host.write_volatile(0) };
    let mut control_dev: sys::CUdeviceptr = 0;
    // SAFETY: `control_host` was allocated with DEVICEMAP in this context,
    // which is current (alloc_pinned bound it to this thread).
    unsafe { sys::cuMemHostGetDevicePointer_v2(&mut control_dev, control_host.cast(), 0) }
        .result()
        .map_err(|e| format!("CUDA mapped control word: {}", driver_error(&e)))?;
    Ok(Gpu {
        ctx,
        stream,
        name,
        cc,
        sms,
        control_host,
        control_dev,
        _control: control,
        modules: Mutex::new(HashMap::new()),
        launch_lock: Mutex::new(()),
        eden_words: AtomicU32::new(FIRST_EDEN_BYTES / 8),
    })
}

impl Gpu {
    /// Whether this is offload's virtual GPU (the PTX simulator's driver
    /// shim), not hardware: its name says so.
    pub(crate) fn is_virtual(&self) -> bool {
        self.name.contains("virtual")
    }

    /// `name (sm_XY, N SMs)`.
    pub(crate) fn describe(&self) -> String {
        format!(
            "{} (sm_{}{}, {} SMs)",
            self.name, self.cc.0, self.cc.1, self.sms
        )
    }

    /// The loaded version of the closure's kernel (compiled, loaded and
    /// cached on first use), or why it cannot run on the GPU.
    fn loaded(
        &self,
        env: &LaunchEnv,
        call: KernelCall<'_>,
        ver: &Version,
    ) -> Result<Arc<Loaded>, String> {
        let key = (call.module, call.kernel, ver.number);
        let mut modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(hit) = modules.get(&key) {
            return hit.clone();
        }
        let res = self.load(env, call, ver).map(Arc::new);
        modules.insert(key, res.clone());
        res
    }

    fn load(&self, env: &LaunchEnv, call: KernelCall<'_>, ver: &Version) -> Result<Loaded, String> {
        let mut ptx = offload_jit::ptx::compile_speculative(
            call.prog,
            call.kernel,
            ver.number,
            env.settings.compile,
            &ver.spec,
        )
        .map_err(|e| e.to_string())?;
        if let Some(f) = &env.settings.rewrite_ptx {
            ptx.text = (f.0)(&ptx.text);
        }
        let t = Instant::now();
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx.text.clone()))
            .map_err(|e| {
                format!(
                    "the CUDA driver rejected the PTX of `{}`: {}\n{}\n--- PTX ---\n{}",
                    call.name(),
                    driver_error(&e),
                    jit_log(&ptx.text),
                    ptx.text
                )
            })?;
        let func = module
            .load_function(&ptx.name)
            .map_err(|e| format!("CUDA: no entry `{}`: {}", ptx.name, driver_error(&e)))?;
        let load_time = t.elapsed();
        let per_sm = func
            .occupancy_max_active_blocks_per_multiprocessor(BLOCK, 0, None)
            .map_err(|e| format!("CUDA occupancy of `{}`: {}", ptx.name, driver_error(&e)))?
            .max(1);
        Ok(Loaded {
            func,
            ptx,
            load_time,
            grid: self.sms * per_sm,
        })
    }
}

/// The JIT log of the driver for `text` (loaded again with log buffers;
/// only on the error path).
fn jit_log(text: &str) -> String {
    let Ok(src) = std::ffi::CString::new(text) else {
        return "(PTX contains a NUL byte)".into();
    };
    let mut err = vec![0u8; 16 << 10];
    let mut info = vec![0u8; 16 << 10];
    let mut opts = [
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        sys::CUjit_option::CU_JIT_INFO_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut vals: [*mut std::ffi::c_void; 4] = [
        err.as_mut_ptr().cast(),
        err.len() as *mut std::ffi::c_void,
        info.as_mut_ptr().cast(),
        info.len() as *mut std::ffi::c_void,
    ];
    let mut module: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: the option arrays have matching lengths; the buffers outlive
    // the call and their sizes are passed by value as the API specifies.
    let r = unsafe {
        sys::cuModuleLoadDataEx(
            &mut module,
            src.as_ptr().cast(),
            opts.len() as u32,
            opts.as_mut_ptr(),
            vals.as_mut_ptr(),
        )
    };
    if r == sys::CUresult::CUDA_SUCCESS && !module.is_null() {
        // SAFETY: the module was just loaded and is not used elsewhere.
        let _ = unsafe { sys::cuModuleUnload(module) };
    }
    let text = |b: &[u8]| {
        let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..n]).into_owned()
    };
    format!(
        "--- JIT error log ---\n{}\n--- JIT info log ---\n{}",
        text(&err),
        text(&info)
    )
}

/// A driver error as a sentence: the driver's message (which, on offload's
/// virtual GPU, carries the simulator's diagnostic) and the error's name.
/// A CUDA driver error as text: its name and the driver's description.
pub fn cuda_error_text(e: &cudarc::driver::DriverError) -> String {
    driver_error(e)
}

/// The GPU a runtime runs on, for tools that run kernels of their own
/// beside offload's on the same context (the CUDA C baselines of
/// `offload bench`): [`crate::Runtime::gpu_handles`].
#[derive(Clone, Debug)]
pub struct GpuHandles {
    /// The CUDA context.
    pub context: Arc<CudaContext>,
    /// The stream offload launches on.
    pub stream: Arc<CudaStream>,
    /// Streaming multiprocessors.
    pub sms: u32,
}

impl Gpu {
    /// The context, stream and size of this GPU.
    pub(crate) fn handles(&self) -> GpuHandles {
        GpuHandles {
            context: self.ctx.clone(),
            stream: self.stream.clone(),
            sms: self.sms,
        }
    }
}

pub(crate) fn driver_error(e: &cudarc::driver::DriverError) -> String {
    let text = |r: Result<&std::ffi::CStr, _>| {
        r.ok()
            .map(|c: &std::ffi::CStr| c.to_string_lossy().into_owned())
    };
    match (text(e.error_string()), text(e.error_name())) {
        (Some(m), Some(n)) => format!("{m} ({n})"),
        (Some(m), None) => m,
        (None, Some(n)) => n,
        (None, None) => format!("CUDA error {}", e.0 as u32),
    }
}

fn cuda_err(what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> OffloadError {
    move |e| OffloadError::Cuda {
        operation: what,
        message: driver_error(&e),
    }
}

impl Executor for Gpu {
    /// Run the kernel over `range` on the GPU, or say why it cannot run
    /// there (the PTX backend or the driver refused it).
    fn launch(
        &self,
        env: &LaunchEnv,
        call: KernelCall<'_>,
        plan: &Plan,
        range: Range<i64>,
        started: Started,
    ) -> Result<Result<LaunchReport, OffloadError>, Unsupported> {
        let loaded = self.loaded(env, call, &plan.version).map_err(Unsupported)?;
        Ok(run(env, self, &loaded, range, call, plan, started))
    }
}

#[allow(clippy::too_many_lines)]
fn run(
    env: &LaunchEnv,
    gpu: &Gpu,
    k: &Loaded,
    range: Range<i64>,
    call: KernelCall<'_>,
    plan: &Plan,
    started: Started,
) -> Result<LaunchReport, OffloadError> {
    let t0 = Instant::now();
    let _one = gpu.launch_lock.lock().unwrap_or_else(|e| e.into_inner());
    let inner = env;
    let heap = &inner.heap;
    let meta = &k.ptx.meta;
    let s = &gpu.stream;
    let slots = match env.settings.device_slots {
        Some(n) => n.min((k.grid * BLOCK) as usize),
        None => (k.grid * BLOCK) as usize,
    };
    let grid = (slots as u32).div_ceil(BLOCK);
    let total = range.end.wrapping_sub(range.start) as u64;
    let chunk = plan.chunk.map_or_else(
        || (total / (slots as u64 * 4)).clamp(1, 256) as i64,
        |c| c.min(1 << 20) as i64,
    );
    let area =
        SaveArea::try_new(slots, meta.layout).map_err(|e| OffloadError::Setup(e.to_string()))?;
    let words = meta.layout.record_words as usize;
    let safepoints_before = inner.control.count();
    // The kernel's TLAB size, if its policy changed it.
    let tlab_words = u64::from(plan.tlab_bytes.unwrap_or(heap.config().tlab_bytes) / 8);
    // Slots per TLAB: `SharedTlab { group }` shares one TLAB among
    // `group` warps (the device has no fail-on-overflow variant: its
    // allocators wait for the refiller); `PrivateTlab` gives each slot its
    // own; `EdenCas` allocates every object from eden.
    let group = match env.settings.policy {
        offload_tlab::AllocPolicy::EdenCas => 0,
        offload_tlab::AllocPolicy::PrivateTlab => 1,
        offload_tlab::AllocPolicy::SharedTlab { group }
        | offload_tlab::AllocPolicy::FailOnOverflow { group } => WARP * group.max(1) as u64,
    };
    let tlabs_n = (slots as u64).div_ceil(group.max(1)) as usize;
    // Per-launch device buffers.
    let cursor: CudaSlice<i64> = s.clone_htod(&[range.start]).map_err(cuda_err("cursor"))?;
    let never: CudaSlice<i64> = s.alloc_zeros(2 * slots).map_err(cuda_err("never_ran"))?;
    let completed: CudaSlice<u64> = s.alloc_zeros(slots).map_err(cuda_err("completed"))?;
    let exits: CudaSlice<u32> = s.alloc_zeros(slots).map_err(cuda_err("exits"))?;
    let stats: CudaSlice<u64> = s.alloc_zeros(4).map_err(cuda_err("counters"))?;
    // Injected safepoints' per-slot state, kept across relaunches.
    let inject: CudaSlice<u64> = s.alloc_zeros(slots).map_err(cuda_err("injection state"))?;
    let mut tlabs: CudaSlice<u8> = s
        .alloc_zeros(tlabs_n * DEVICE_TLAB_BYTES as usize)
        .map_err(cuda_err("TLABs"))?;
    // Uploaded again before each relaunch: a collection between two may
    // have moved what the references among them point at.
    let capture_values = || {
        let v = call.capture_values();
        if v.is_empty() { vec![0u64] } else { v }
    };
    let mut captures: CudaSlice<u64> = s
        .clone_htod(&capture_values())
        .map_err(cuda_err("captures"))?;
    // SAFETY: nothing else reads or writes the area during the copy.
    let mut area_dev: CudaSlice<u64> = s
        .clone_htod(unsafe { area_words(&area) })
        .map_err(cuda_err("save area"))?;
    let mut eden: CudaSlice<u64> = s.alloc_zeros(2).map_err(cuda_err("eden"))?;
    // Bytes copied between host and device: the uploads above, and what
    // each round of the loop below moves.
    let ctx_bytes = std::mem::size_of::<DeviceCtx>() as u64;
    let mut copied = 8 * (1 + call.captures.len().max(1) as u64) + area.bytes() as u64;
    let control = Arc::new(AtomicU32::new(0));
    let _registered = inner
        .control
        .register(&control, offload_jit::ctx::CONTROL_SAFEPOINT);
    // This thread is a running worker (no collection moves the heap while
    // the device holds its image) except while the replays run, which
    // are the running workers then.
    let mut running = Some(inner.control.enter());
    let epoch = started.ticket;

    let mut report = LaunchReport::new(call.name(), Device::Cuda, range.clone(), slots);
    report.launches = 0;
    let mut replays = Replays::default();
    let mut cut = false;
    // Kernel time, and replay time with the copies back it needs; the
    // rest of the loop (the copies up) is setup.
    let (mut run_time, mut replay_time) = (Duration::ZERO, Duration::ZERO);
    let mut passed = vec![crate::report::NeverRan::default(); slots];
    let alloc = env.allocator(inner.workers, plan.tlab_bytes);
    // The save area's records (kept there until replayed) and the
    // replays' allocator, for collections while the launch runs.
    let roots = KernelCall::device_roots(&alloc, Some((&area, meta)));
    let registered = env.gc.launch(&roots);
    let on_exhausted = KernelCall::on_exhausted(env);
    let mut device_stats: Vec<u64>;
    let mut eden_failures = 0u64;
    // Per slot, the (workitem, site) of the allocation failure it was last
    // given to resume: failing there again goes to the interpreter.
    let mut resumed_alloc: Vec<Option<(i64, offload_ir::SiteId)>> = vec![None; slots];
    loop {
        report.launches += 1;
        // The heap image, with a fresh device eden above the used part.
        // Injected refill failures (`fail_refills(first, _)`) give the
        // device an eden of `first` TLABs: the refills after those find it
        // exhausted, publish FAILED, and their waiters deopt with
        // `AllocationFailure`.
        let want = match env.settings.fail_refills {
            Some((first, _)) => {
                (first.max(1) * tlab_words).min(u64::from(DEVICE_EDEN_BYTES / 8)) as u32
            }
            None => gpu.eden_words.load(Ordering::Relaxed),
        };
        let min = (tlab_words as u32).max(2).min(want.max(2));
        // No room for the device eden: collect (this thread is a running
        // worker, the device holds no heap image now) and try once more.
        let carved = match heap.carve_region(min, want) {
            Some(r) => Some(r),
            None => {
                env.gc.collect_here(heap, &inner.control)?;
                heap.carve_region(min, want)
            }
        };
        let (es, ee) = carved.ok_or_else(|| {
            OffloadError::Setup(format!(
                "heap exhausted: no room for a device eden of {} bytes, even after a collection",
                u64::from(min) * 8
            ))
        })?;
        if report.launches > 1 {
            // A relaunch: the captures and the records left to resume go up
            // again, after any collection since the last launch (which
            // updated them on the host).
            s.memcpy_htod(&capture_values(), &mut captures)
                .map_err(cuda_err("captures"))?;
            // SAFETY: nothing else reads or writes the area during the copy.
            s.memcpy_htod(unsafe { area_words(&area) }, &mut area_dev)
                .map_err(cuda_err("save area"))?;
            copied += area.bytes() as u64 + 8 * call.captures.len().max(1) as u64;
        }
        // The device image: the heap's used part `[0, es)` copied, the
        // device eden `[es, ee)` zeroed on the device (it is zero on the
        // host too), so only what the heap holds crosses the bus.
        let image_bytes = ee as usize * 8;
        let used_bytes = es as usize * 8;
        // SAFETY: every byte is written before the kernel reads it: the
        // eden part is zeroed and the used part copied right below.
        let mut heap_dev: CudaSlice<u8> =
            unsafe { s.alloc(image_bytes) }.map_err(cuda_err("heap image"))?;
        s.memset_zeros(&mut heap_dev.slice_mut(used_bytes..))
            .map_err(cuda_err("device eden"))?;
        if used_bytes > 0 {
            // SAFETY: `[0, es)` words are committed and below eden's top;
            // no other launch runs (launch lock), and no host code of this
            // launch touches the heap during the copy.
            let src = unsafe { heap_image(heap, used_bytes) };
            s.memcpy_htod(src, &mut heap_dev.slice_mut(..used_bytes))
                .map_err(cuda_err("heap image"))?;
        }
        s.memcpy_htod(&[u64::from(es), u64::from(ee)], &mut eden)
            .map_err(cuda_err("eden"))?;
        copied += used_bytes as u64 + 16 + ctx_bytes;
        s.memset_zeros(&mut tlabs).map_err(cuda_err("TLABs"))?;
        let tr = Instant::now();
        // The launch context lives until the kernel is done: dropping it in
        // the scope below would free it while the kernel runs, and a
        // synchronous `cuMemFree` (a device without memory pools) would
        // wait for the kernel there, before the loop that mirrors
        // safepoint requests into the control word has started.
        let ctx_dev: CudaSlice<u64>;
        // The device addresses are taken in a scope of their own: their
        // guards record the launch's use of each buffer when they drop.
        {
            let (hp, _g1) = heap_dev.device_ptr(s);
            let (cp, _g2) = cursor.device_ptr(s);
            let (ap, _g3) = area_dev.device_ptr(s);
            let (np, _g4) = never.device_ptr(s);
            let (dp, _g5) = completed.device_ptr(s);
            let (kp, _g6) = captures.device_ptr(s);
            let (tp, _g7) = tlabs.device_ptr(s);
            let (ep, _g8) = eden.device_ptr(s);
            let (xp, _g9) = exits.device_ptr(s);
            let (sp, _g10) = stats.device_ptr(s);
            let (ip, _g12) = inject.device_ptr(s);
            let dctx = DeviceCtx {
                heap_base: hp,
                cursor: cp,
                end: range.end,
                chunk,
                control: gpu.control_dev,
                save_area: ap,
                record_words: words as u64,
                never_ran: np,
                completed: dp,
                captures: kp,
                records_per_slot: 1,
                tlabs: tp,
                tlab_group: group,
                eden: ep,
                large_words: tlab_words / 4,
                slots: slots as u64,
                tlab_words,
                exits: xp,
                stats: sp,
                inject: ip,
            };
            // SAFETY: `DeviceCtx` is `#[repr(C)]` and made of 20 `u64`/`i64`s.
            let raw: [u64; 20] = unsafe { std::mem::transmute(dctx) };
            ctx_dev = s.clone_htod(&raw[..]).map_err(cuda_err("launch context"))?;
            let (ctx_ptr, _g11) = ctx_dev.device_ptr(s);
            // SAFETY: the word is the pinned control word; the device reads it.
            unsafe { gpu.control_host.write_volatile(0) };
            let mut b = s.launch_builder(&k.func);
            b.arg(&ctx_ptr);
            // SAFETY: the kernel takes one `u64`, the address of a `DeviceCtx`
            // whose buffers are all alive until the stream is synchronized
            // below; sizes match the slot count of the grid.
            unsafe {
                b.launch(LaunchConfig {
                    grid_dim: (grid, 1, 1),
                    block_dim: (BLOCK, 1, 1),
                    shared_mem_bytes: 0,
                })
            }
            .map_err(cuda_err("launch"))?;
        }
        // Mirror safepoint requests into the mapped word while it runs.
        let done = s.record_event(None).map_err(cuda_err("event"))?;
        while !done.try_is_complete().map_err(cuda_err("kernel"))? {
            let cw = control.load(Ordering::Acquire);
            // SAFETY: as above.
            unsafe { gpu.control_host.write_volatile(cw) };
            std::thread::sleep(Duration::from_micros(20));
        }
        s.synchronize().map_err(cuda_err("kernel"))?;
        run_time += tr.elapsed();
        // Copy back what the replay and the user need.
        let tc = Instant::now();
        // Back: the heap up to the device eden's top (above it the device
        // wrote nothing, and the host's copy is zero).
        let ed: Vec<u64> = s.clone_dtoh(&eden).map_err(cuda_err("eden"))?;
        // The device eden's final top (past its end when a refill failed).
        let eden_top = ed[0].min(u64::from(ee)) as u32;
        let back_bytes = eden_top as usize * 8;
        // SAFETY: as for the upload; the kernel has finished, and the
        // replay (the next host access) starts after these copies.
        let dst = unsafe { heap_image(heap, back_bytes) };
        s.memcpy_dtoh(&heap_dev.slice(..back_bytes), dst)
            .map_err(cuda_err("heap image"))?;
        // SAFETY: nothing else reads or writes the area during the copy.
        s.memcpy_dtoh(&area_dev, unsafe { area_words(&area) })
            .map_err(cuda_err("save area"))?;
        let nr: Vec<i64> = s.clone_dtoh(&never).map_err(cuda_err("never_ran"))?;
        let comp: Vec<u64> = s.clone_dtoh(&completed).map_err(cuda_err("completed"))?;
        let ex: Vec<u32> = s.clone_dtoh(&exits).map_err(cuda_err("exits"))?;
        let tl: Vec<u8> = s.clone_dtoh(&tlabs).map_err(cuda_err("TLABs"))?;
        // `[deopts, refills, refill waits, eden failures]`, summed over the
        // launch's relaunches (the buffer is never reset). A launch that
        // exhausted its eden doubles the next one's.
        device_stats = s.clone_dtoh(&stats).map_err(cuda_err("counters"))?;
        if device_stats[3] > eden_failures && env.settings.fail_refills.is_none() {
            let cap = DEVICE_EDEN_BYTES / 8;
            let now = gpu.eden_words.load(Ordering::Relaxed);
            gpu.eden_words
                .store(now.saturating_mul(2).min(cap), Ordering::Relaxed);
        }
        eden_failures = device_stats[3];
        replay_time += tc.elapsed();
        copied += (32
            + back_bytes
            + area.bytes()
            + tl.len()
            + 8 * (nr.len() + comp.len() + ed.len())
            + 4 * ex.len()) as u64;
        // Retire the TLABs and the device eden: fillers over what is unused.
        for t in tl.chunks_exact(DEVICE_TLAB_BYTES as usize) {
            let state = u64::from_le_bytes(t[..8].try_into().expect("8 bytes"));
            let (top, end) = (state as u32, (state >> 32) as u32);
            if top < end {
                heap.fill(top, end);
            }
        }
        // The rest of the device eden goes back to the heap when nothing
        // was carved above it meanwhile (a kernel that allocates nothing
        // leaves the heap's top where it was), and is filled otherwise.
        if eden_top < ee && !heap.give_back(eden_top, ee) {
            heap.fill(eden_top, ee);
        }
        report.on_device += comp.iter().sum::<u64>();
        // Replay the records, in parallel. Each stays in the save area
        // (a root of the launch) until its replay has read it, so that a
        // collection meanwhile updates it.
        let tp = Instant::now();
        let mut occupied = Vec::new();
        let mut values = Vec::new();
        for r in 0..slots {
            match area.read_into(r, meta, &mut values) {
                Ok(Some(_)) => occupied.push(r),
                Ok(None) => {}
                Err(e) => return Err(OffloadError::CorruptSaveArea(e)),
            }
        }
        // An interrupt stopped the kernel: drop the saved frames instead of
        // replaying them, and launch nothing more.
        if inner.control.interrupted_since(epoch) {
            for &r in &occupied {
                if let Ok(Some(h)) = area.read_into(r, meta, &mut values) {
                    replays.abandoned(meta, h, &values);
                }
            }
            area.clear();
            inner.control.poll();
            break;
        }
        // The records the relaunch resumes on the device stay in the area:
        // a safepoint's, and a full device eden's (the relaunch carves a
        // fresh one) unless the same workitem's allocation failed there
        // again after a resume (then the interpreter, which collects,
        // finishes it).
        let mut resume = Vec::new();
        occupied.retain(|&r| {
            let Ok(Some(h)) = area.read_into(r, meta, &mut values) else {
                return true;
            };
            let again = h.2 == offload_deopt::Reason::AllocationFailure
                && resumed_alloc[r] == Some((h.0, h.1));
            let ok = k.ptx.resumes.contains(&h.1)
                && !again
                && meta.site(h.1).is_some_and(|s| s.resumable(h.2));
            if ok {
                resumed_alloc[r] =
                    (h.2 == offload_deopt::Reason::AllocationFailure).then_some((h.0, h.1));
                resume.push((h, values.clone()));
            }
            !ok
        });
        if !occupied.is_empty() || !resume.is_empty() {
            env.gc.before_replays(heap, &inner.control)?;
        }
        let prog = call.prog;
        drop(running.take());
        let results: Vec<_> = inner.pool.install(|| {
            occupied
                .par_iter()
                .map_init(
                    || {
                        let w = rayon::current_thread_index().unwrap_or(0);
                        Replayer::new(
                            prog,
                            heap,
                            &alloc,
                            &inner.control,
                            w,
                            epoch,
                            &on_exhausted,
                            meta,
                        )
                    },
                    |rp, &r| {
                        let _running = inner.control.enter();
                        inner.control.poll();
                        let mut vals = Vec::new();
                        let h = area.read_into(r, meta, &mut vals)?;
                        Ok(h.map(|h| {
                            let resumed = rp.resume(meta, h, &vals);
                            (h, vals, resumed)
                        }))
                    },
                )
                .collect()
        });
        running = Some(inner.control.enter());
        for &r in &occupied {
            let _ = area.clear_one(r);
        }
        for res in results {
            let Some((h, vals, resumed)) = res.map_err(OffloadError::CorruptSaveArea)? else {
                continue;
            };
            cut |= resumed.1;
            replays.resumed(meta, h, &vals, resumed)?;
        }
        replay_time += tp.elapsed();
        // A safepoint stopped the kernel: park until its operation is done.
        inner.control.poll();
        if cut || inner.control.interrupted_since(epoch) {
            // The records left to resume are dropped with the launch.
            for (h, vals) in &resume {
                replays.abandoned(meta, *h, vals);
            }
            area.clear();
            break;
        }
        if ex.iter().all(|&c| c == offload_jit::ctx::EXIT_DONE) && resume.is_empty() {
            break;
        }
        for (h, vals) in &resume {
            replays.resumed_on_device(meta, *h, vals);
        }
        report.never_ran += nr
            .chunks_exact(2)
            .zip(&mut passed)
            .map(|(p, c)| c.add(p[0], p[1]))
            .sum::<u64>();
        // Relaunch: the records are replayed or left to resume; the
        // never-ran rests and the cursor carry over (the device buffers
        // keep them); the captures and the area go up at the loop's top.
    }
    let t_loop = Instant::now();
    let thrown = replays.finish(call.prog, meta, &mut report);
    report.chunks = total.div_ceil(chunk as u64);
    // The device's own counters: refills of its TLABs and allocations
    // that found its eden exhausted.
    drop(registered);
    drop(running);
    report.alloc = alloc.retire();
    report.alloc.refills += device_stats[1];
    report.alloc.exhausted += device_stats[3];
    let teardown = t_loop.elapsed();
    let looped = t_loop.saturating_duration_since(t0);
    report.timings = Timings::of(
        t0.saturating_duration_since(started.at),
        looped.saturating_sub(run_time + replay_time),
        run_time,
        replay_time,
        teardown,
    );
    report.safepoints = inner.control.count() - safepoints_before;
    report.reentries = report.launches - 1;
    report.version = Some(k.ptx.version);
    report.speculations = k.ptx.meta.speculations.clone();
    report.gpu = Some(gpu.describe());
    report.copied_bytes = copied;
    thrown.finish(report)
}

/// The save area's words, for one copy to or from the device.
///
/// # Safety
///
/// Nothing else may access the area while the slice lives (keep it to
/// one copy).
// The slice aliases memory behind a shared reference; the caller
// guarantees exclusivity for its short life (see # Safety).
#[allow(clippy::mut_from_ref)]
unsafe fn area_words(area: &SaveArea) -> &mut [u64] {
    // SAFETY: the area is `bytes() / 8` contiguous `AtomicU64`s, which have
    // the layout of `u64`; exclusivity is the caller's.
    unsafe { std::slice::from_raw_parts_mut(area.as_ptr(), area.bytes() / 8) }
}

/// The first `bytes` of the heap, for one copy to or from the device.
///
/// # Safety
///
/// `bytes` must be committed, and nothing else may access the heap while
/// the slice lives (keep it to one copy).
// The slice aliases memory behind a shared reference; the caller
// guarantees exclusivity for its short life (see # Safety).
#[allow(clippy::mut_from_ref)]
unsafe fn heap_image(heap: &offload_tlab::Heap, bytes: usize) -> &mut [u8] {
    // SAFETY: the caller guarantees the range and exclusivity.
    unsafe { std::slice::from_raw_parts_mut(heap.base_ptr(), bytes) }
}

/// `load_module` time of a kernel version on the GPU (loads it if needed).
pub(crate) fn load_time(
    env: &LaunchEnv,
    gpu: &Gpu,
    call: KernelCall<'_>,
    ver: &Version,
) -> Result<Duration, String> {
    gpu.loaded(env, call, ver).map(|l| l.load_time)
}
