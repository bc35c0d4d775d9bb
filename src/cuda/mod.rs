//! The CUDA device: PTX from [`offload_jit::ptx`] loaded through cudarc
//! (dynamic loading: the project builds and runs without CUDA), with the
//! launch → replay loop of a GPU (docs/DESIGN.md, "How a launch flows"),
//! over a heap image that stays on the device between launches
//! ([`resident`]; the chunk bookkeeping is `offload_heap::resident`):
//!
//! 1. carve a device eden from the heap for a kernel that allocates (1
//!    MiB for a runtime's first launch, doubled after each launch that
//!    exhausts it, 64 MiB at most), send the heap chunks the host wrote
//!    since the device last had them (all of the heap at a runtime's first
//!    launch, then only what host code changed) and zero the eden on the
//!    device (references are 32-bit word offsets, so the same offsets mean
//!    the same objects on both sides);
//! 2. on the launch's stream (its lane, `lane.rs`), with no allocation and no event made: one
//!    memset of the launch block kept from the last launch (`block.rs`:
//!    counters, dirty map, TLABs, exits), one copy of the launch context,
//!    captures and eden bounds into it, the grid — a slot (thread) per 16
//!    workitems, each running its grid-stride part of the range, polling
//!    the control word (in device memory: this thread mirrors the
//!    runtime's safepoint requests into it with a copy on the copy stream
//!    while the kernel runs — a word in pinned, mapped host memory, read
//!    over PCIe at every back-edge, made mandelbrot 512² take 946 ms on an
//!    H100), allocating from TLABs shared by a warp (`SharedTlab { group
//!    }`: by `group` warps; `PrivateTlab`: one per slot; `EdenCas`: none),
//!    marking the chunk of every store in the dirty map and writing
//!    deopt records into its slot of the save area — then one copy of the
//!    run's summary (eden bounds, counters, dirty map) into pinned memory,
//!    and the event behind it, which the host polls (`wait.rs`);
//! 3. from the summary, mark the chunks the kernel wrote (what it stored
//!    to, and what it allocated) so that host code fetches them when it
//!    touches them; bring back the records, never-ran ranges and exits
//!    only when a slot left work behind, the TLAB states only when a
//!    refill carved one; write fillers over the TLABs' unused rests into
//!    the image; hand the unused rest of the eden back to the heap;
//!    replay the records in the interpreter in parallel (its loads fetch
//!    the chunks they read, its stores mark what the relaunch sends) —
//!    except those of workitems a safepoint (or the device eden's
//!    exhaustion) stopped at a loop header or an allocation, which stay in
//!    the save area — and relaunch: each slot first resumes the record
//!    left in its part of the area (the PTX's re-entry,
//!    `offload_jit::ptx`), then runs its never-ran rest, until every slot
//!    has exhausted its part.
//!
//! **Wait in place, or exit and re-enter.** At a safepoint that moves no
//! object the slots wait at their polls while the host runs the
//! operation on the resident heap (the GC seed's §4.2.4; `wait.rs`,
//! `Waiting`): no record is written, nothing relaunches, and only the
//! dirty map and what the operation wrote cross the bus. A collection
//! moves objects that waiting slots would hold in registers, so for it
//! (and with `RuntimeBuilder::gpu_wait_in_place(false)`) a stopped slot
//! leaves the grid with a record and the relaunch resumes it. On the
//! virtual GPU a safepoint waited out cost 0.59x the PTX instructions of
//! one that leaves and 63 bytes instead of 164 KiB (BENCHMARKS.md), so
//! waiting is the default.
//!
//! **Fairness.** A launch honours a safepoint request only after it has
//! run, since it started or last resumed, at least as long as the last
//! safepoint kept it from running (from the request to the relaunch, or
//! the wait). A host thread that raises safepoints back to back would
//! otherwise starve the kernel: on an H100 (202,752 slots) a relaunch
//! costs ~20 ms, a thread raising every 2 ms stopped every relaunch at
//! once, and the launch never finished (docs/GPU-RUNS.md). The device
//! gets at least half of the time; a safepoint's latency grows by at most
//! the last one's cost. Interrupts are mirrored at once.
//!
//! Bytes moved count in [`LaunchReport::to_device_bytes`] and
//! [`LaunchReport::to_host_bytes`]. The device may be offload's virtual
//! GPU (`vgpu/driver`, found only on the library path): [`Gpu::is_virtual`]
//! says so, and reports and [`crate::Runtime::fallback`] show it.
//!
//! Why chunks with dirty bits rather than managed memory (seed `002_…`):
//! the device image never page-faults, a launch moves exactly what the
//! host changed in one copy per run of chunks, and host code fetches only
//! the chunks it touches; managed memory would migrate on first touch,
//! in both directions, and needs the host heap to be allocated by CUDA,
//! which would tie the CPU device and the interpreter to the driver. The
//! save area is one record per slot (the Sumatra bound: O(resident
//! threads), never O(range)).
//!
//! **Launches in flight share the GPU** where their arrays allow
//! (`share.rs`): a run of a kernel that allocates nothing and touches
//! only arrays of numbers holds the chunks of those arrays, and runs on a
//! stream of its own (`lane.rs`) beside other runs whose chunks differ;
//! any other run holds the GPU alone — the image, its dirty map and the
//! chunk bits have one owner while its kernel runs.

mod block;
mod grid;
mod lane;
mod launch;
mod part;
mod raw;
mod reduce;
pub(crate) mod resident;
mod share;
mod trace;
mod wait;

use crate::adaptive::{Plan, Version};
use crate::env::{KernelCall, LaunchEnv, Started};
use crate::error::OffloadError;
use crate::executor::{Executor, Unsupported};
use crate::report::LaunchReport;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, sys};
use offload_ir::FuncId;
use offload_jit::ptx::PtxKernel;
use resident::DeviceHeap;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Threads per block of every launch.
pub(crate) const BLOCK: u32 = 256;
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

/// Threads a multiprocessor holds at once (every GPU offload runs on, sm_70
/// on): with [`BLOCK`], the blocks it runs together.
const THREADS_PER_SM: u32 = 2048;

/// Loaded kernel versions by (module id, kernel, version), or why not.
type ModuleCache = HashMap<(u64, FuncId, u32), Result<Arc<Loaded>, String>>;

/// A GPU of a runtime.
pub(crate) struct Gpu {
    /// The driver's number for it.
    pub(crate) ordinal: usize,
    /// Launches running on it now (a launch takes the GPU with the fewest:
    /// [`pick`]).
    busy: std::sync::atomic::AtomicUsize,
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    name: String,
    cc: (i32, i32),
    pub(crate) sms: u32,
    modules: Mutex<ModuleCache>,
    /// The streams and control words of launches in flight (`lane.rs`).
    lanes: lane::Lanes,
    /// Which launches hold the GPUs, shared or alone (`share.rs`): one for
    /// every GPU of the runtime.
    share: Arc<share::Share>,
    /// The sizes of captured arrays, for the holds' footprints.
    sizes: share::Sizes,
    /// The save area of the last launch, host and device halves, kept for
    /// the next launch of the same slot count and record width (see
    /// [`launch::Scratch`]).
    scratch: Mutex<Option<launch::Scratch>>,
    /// The last launch's device block (`block.rs`), kept for the next.
    block: Mutex<Option<block::Block>>,
    /// The last reduction's device memory (`reduce.rs`), kept for the next.
    reduce_mem: Mutex<Option<reduce::Memory>>,
    /// The last copies table's device memory (`grid.rs`), kept for the
    /// next.
    copies_mem: Mutex<Option<raw::DeviceMem>>,
    /// Words of device eden the next launch carves (see
    /// [`FIRST_EDEN_BYTES`]).
    eden_words: AtomicU32,
    /// The heap's image on this GPU, kept across launches.
    resident: Arc<DeviceHeap>,
    /// Whether the driver is offload's virtual GPU, whose counters a
    /// launch's report reads ([`crate::vgpu`]).
    virtual_gpu: bool,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("name", &self.name)
            .field("cc", &self.cc)
            .field("sms", &self.sms)
            .finish_non_exhaustive()
    }
}

/// Why no GPU can be used, or the GPUs: those numbered `wanted` (in that
/// order), or every GPU the driver reports (the first
/// [`offload_heap::MAX_MIRRORS`] of them).
pub(crate) fn probe(wanted: Option<&[usize]>) -> Result<Vec<Gpu>, String> {
    // SAFETY: only tries to load the driver library.
    if !unsafe { sys::is_culib_present() } {
        return Err("no CUDA driver: libcuda could not be loaded".into());
    }
    // cudarc panics on some driver failures; a panic is a missing GPU.
    std::panic::catch_unwind(|| probe_driver(wanted))
        .unwrap_or_else(|_| Err("the CUDA driver failed during start-up".into()))
}

fn probe_driver(wanted: Option<&[usize]>) -> Result<Vec<Gpu>, String> {
    let n =
        CudaContext::device_count().map_err(|e| format!("CUDA driver: {}", driver_error(&e)))?;
    if n < 1 {
        return Err("the CUDA driver reports no GPU".into());
    }
    let n = n as usize;
    let ordinals: Vec<usize> = match wanted {
        Some(w) => {
            if let Some(&bad) = w.iter().find(|&&k| k >= n) {
                return Err(format!(
                    "GPU {bad} asked for; the CUDA driver reports {n} (numbered 0 to {})",
                    n - 1
                ));
            }
            w.to_vec()
        }
        // One heap keeps at most MAX_MIRRORS images coherent: the first
        // of a bigger machine's GPUs (naming more is an error at build).
        None => (0..n.min(offload_heap::MAX_MIRRORS)).collect(),
    };
    // One set of holds for every GPU: two GPUs' kernels never write one
    // chunk at once (`share.rs`).
    let share = Arc::new(share::Share::default());
    ordinals
        .into_iter()
        .map(|k| open(k, share.clone()))
        .collect()
}

/// GPU `ordinal`, with its context, stream, heap image and lanes, and the
/// runtime's holds `share`.
fn open(ordinal: usize, share: Arc<share::Share>) -> Result<Gpu, String> {
    let ctx = CudaContext::new(ordinal)
        .map_err(|e| format!("CUDA context on GPU {ordinal}: {}", driver_error(&e)))?;
    let cc = ctx
        .compute_capability()
        .map_err(|e| format!("CUDA: {}", driver_error(&e)))?;
    let name = ctx.name().unwrap_or_else(|_| format!("GPU {ordinal}"));
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
    let resident = Arc::new(DeviceHeap::new(stream.clone())?);
    let lanes = lane::Lanes::first(&ctx, stream.clone(), &resident)
        .map_err(|e| format!("CUDA control word: {e}"))?;
    Ok(Gpu {
        ordinal,
        busy: std::sync::atomic::AtomicUsize::new(0),
        ctx,
        stream,
        name,
        cc,
        sms,
        modules: Mutex::new(HashMap::new()),
        lanes,
        share,
        sizes: share::Sizes::default(),
        scratch: Mutex::new(None),
        block: Mutex::new(None),
        reduce_mem: Mutex::new(None),
        copies_mem: Mutex::new(None),
        eden_words: AtomicU32::new(FIRST_EDEN_BYTES / 8),
        resident,
        virtual_gpu: crate::vgpu::now().is_some(),
    })
}

/// The GPUs, described: one as [`Gpu::describe`] says, several each with
/// its number, joined by `; `.
pub(crate) fn describe_all(gpus: &[Gpu]) -> String {
    match gpus {
        [one] => one.describe(),
        several => several
            .iter()
            .map(Gpu::describe_numbered)
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// The GPU a launch runs on: the one with the fewest launches running,
/// the first of those (one launch at a time runs on the first GPU).
pub(crate) fn pick(gpus: &[Gpu]) -> Option<&Gpu> {
    gpus.iter()
        .min_by_key(|g| g.busy.load(std::sync::atomic::Ordering::Acquire))
}

/// A launch running on a GPU, counted in its `busy` until dropped.
pub(crate) struct Running<'a>(&'a Gpu);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0
            .busy
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Gpu {
    /// Count a launch running on this GPU until the guard drops.
    pub(crate) fn running(&self) -> Running<'_> {
        self.busy.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Running(self)
    }

    /// The blocks this GPU runs at once: the rows of a launch's copies
    /// table worth making for it (`runtime/summed.rs`).
    pub(crate) fn copy_rows(&self) -> usize {
        (self.sms * (THREADS_PER_SM / BLOCK)) as usize
    }

    /// Drop the loaded versions of module `id` (its last handle is gone).
    pub(crate) fn forget_module(&self, id: u64) {
        self.modules
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|k, _| k.0 != id);
    }

    /// The virtual GPU's noted counters of `lane`'s stream
    /// ([`crate::vgpu::stream_counters`]); `None` on a real GPU.
    fn noted_counters(&self, lane: &lane::Lane) -> Option<std::collections::BTreeMap<String, u64>> {
        if !self.virtual_gpu {
            return None;
        }
        crate::vgpu::stream_counters(lane.cu_stream() as usize)
    }

    /// Whether this is offload's virtual GPU (the PTX simulator's driver
    /// shim), not hardware: its name says so.
    pub(crate) fn is_virtual(&self) -> bool {
        self.name.contains("virtual")
    }

    /// The heap image on this GPU, for the runtime's heap to fetch from
    /// ([`offload_heap::Heap::attach_mirror`]).
    pub(crate) fn mirror(&self) -> Arc<dyn offload_heap::Mirror> {
        self.resident.clone()
    }

    /// The heap attached this GPU's image as mirror `id`; `several`:
    /// the runtime has other GPUs besides.
    pub(crate) fn attached(&self, id: offload_heap::MirrorId, several: bool) {
        self.resident.attached(id, several);
    }

    /// What a launch's report calls this GPU: [`Gpu::describe`], with its
    /// number when the runtime has several.
    pub(crate) fn label(&self) -> String {
        if self.resident.several() {
            self.describe_numbered()
        } else {
            self.describe()
        }
    }

    /// `name (sm_XY, N SMs)`.
    pub(crate) fn describe(&self) -> String {
        format!(
            "{} (sm_{}{}, {} SMs)",
            self.name, self.cc.0, self.cc.1, self.sms
        )
    }

    /// [`Gpu::describe`] with the GPU's number, for a runtime of several:
    /// `GPU 1: name (sm_XY, N SMs)`.
    pub(crate) fn describe_numbered(&self) -> String {
        format!("GPU {}: {}", self.ordinal, self.describe())
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
    /// The stream offload launches on when one launch runs at a time (its
    /// lane 0; launches in flight beside it take streams of their own).
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
        Ok(launch::run(env, self, &loaded, range, call, plan, started))
    }
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
