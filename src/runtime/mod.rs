//! The runtime: heap, workers, devices, loaded modules and host handles.
//!
//! `mod.rs` holds the [`Runtime`] and its shared state; `builder.rs` how
//! one is configured; `module.rs` a loaded [`Module`]: its kernels,
//! closures and objects; `values.rs` the host-side handles (arguments,
//! arrays, objects) and copying arrays in and out of the heap.

use crate::adaptive::{KernelInfo, KernelState};
use crate::error::OffloadError;
use crate::policy::Policy;
use crate::report::LaunchReport;
use offload_host_interp::Program;
use offload_ir::{ClassId, Elem, FuncId, Type};
use offload_tlab::layout::{Header, array_elem_kind, kind_size};
use offload_tlab::{AllocPolicy, Allocator, Heap, HeapConfig, Ref};
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

mod builder;
mod module;
mod values;

pub use builder::{DEFAULT_DEOPT_RECORDS, MAX_DEOPT_RECORDS, MAX_WORKERS, RuntimeBuilder};
pub(crate) use builder::{PolicyFactory, PtxRewrite};
pub use values::{Arg, Array, Element, Object, RefArray};

/// Where kernels run.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// The host interpreter on every core (the reference semantics).
    Interpreter,
    /// Native code from the Cranelift JIT on every core, with deopt into the
    /// interpreter. Kernels the JIT does not compile yet run on the
    /// interpreter, and the launch report says why.
    Cpu,
    /// An NVIDIA GPU (sm_70 or newer) through the CUDA driver, with deopt
    /// into the interpreter. Kernels the PTX backend does not compile run
    /// on the CPU device, and the launch report says why (an error in
    /// strict mode).
    Cuda,
}

impl Device {
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            Device::Interpreter => "interp",
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
        }
    }
}

impl std::str::FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "interp" | "interpreter" => Ok(Device::Interpreter),
            "cpu" => Ok(Device::Cpu),
            "cuda" | "gpu" => Ok(Device::Cuda),
            other => Err(format!(
                "unknown device `{other}` (available: cuda, cpu, interp)"
            )),
        }
    }
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) id: u64,
    pub(crate) heap: Heap,
    pub(crate) pool: rayon::ThreadPool,
    pub(crate) workers: usize,
    pub(crate) device: Device,
    pub(crate) gpu: Option<crate::cuda::Gpu>,
    pub(crate) fallback: Option<String>,
    pub(crate) strict: bool,
    /// Every launch's deadline ([`RuntimeBuilder::launch_deadline`]).
    pub(crate) deadline: Option<std::time::Duration>,
    pub(crate) device_slots: Option<usize>,
    pub(crate) policy: AllocPolicy,
    pub(crate) alloc_buffers: bool,
    pub(crate) profile: bool,
    pub(crate) control: offload_host_interp::Control,
    pub(crate) jit: offload_jit::CpuJit,
    pub(crate) compile: offload_jit::CompileOptions,
    pub(crate) deopt_records: usize,
    pub(crate) fail_refills: Option<(u64, u64)>,
    /// See [`RuntimeBuilder::reclaim`].
    pub(crate) reclaim: bool,
    pub(crate) warmup: u32,
    pub(crate) spec_cfg: offload_jit::SpecConfig,
    pub(crate) policy_factory: PolicyFactory,
    /// See [`RuntimeBuilder::rewrite_ptx`].
    pub(crate) rewrite_ptx: Option<PtxRewrite>,
    /// The adaptive state of every kernel launched, by (module id, kernel).
    pub(crate) kernels: dashmap::DashMap<(u64, FuncId), Arc<Mutex<KernelState>>>,
    /// Compiled kernel versions by (module id, kernel, version), in their
    /// tiers, or why the kernel could not be compiled.
    pub(crate) compiled: dashmap::DashMap<(u64, FuncId, u32), Arc<crate::cpu::Tiers>>,
    /// Whether versions are compiled quick first, optimized in the background.
    pub(crate) tiered: bool,
    /// The background compiles not yet joined.
    pub(crate) background: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// The shapes of every class loaded into the runtime, by global class
    /// id (ids are handed out in load order and never reused): the heap
    /// verifier knows the class of every object, including objects of a
    /// module the caller no longer holds (a REPL redefinition). Its length
    /// is the next module's class base.
    class_shapes: Mutex<Vec<offload_tlab::ClassShape>>,
    next_module: AtomicU64,
    /// Empty save areas of finished CPU launches, kept for the next launch
    /// of the same shape (a fresh one per launch costs more than a small
    /// kernel's whole run).
    pub(crate) save_areas: Mutex<Vec<offload_deopt::SaveArea>>,
}

/// The offload runtime: one managed heap, a pool of workers, a device.
/// Cloning is cheap and shares everything.
#[derive(Clone, Debug)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

/// A loaded, verified module.
#[derive(Clone, Debug)]
pub struct Module {
    pub(crate) rt: Runtime,
    pub(crate) prog: Arc<Program>,
    pub(crate) name: String,
    /// Unique within the runtime, never reused: the key of compiled code.
    pub(crate) id: u64,
}

/// A kernel with its captured values, type-checked against the signature.
#[derive(Clone, Debug)]
pub struct Closure {
    pub(crate) module: Module,
    pub(crate) kernel: FuncId,
    pub(crate) captures: Vec<u64>,
}

impl Runtime {
    /// A runtime with the defaults: the GPU when a usable one is present,
    /// else the CPU JIT on every core ([`Runtime::fallback`] says why), and
    /// a heap of 64 MiB growing to 4 GiB.
    pub fn new() -> Result<Runtime, OffloadError> {
        Runtime::builder().build()
    }

    /// Configure a runtime.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::new()
    }

    /// Bring every running launch to a safepoint — each worker stops at its
    /// next poll (a loop back-edge, a call, or between workitems) with its
    /// state intact — run `op` on the stopped heap, and let the launch go on.
    /// Callable from any thread; with no launch running, `op` runs at once.
    /// Returns `op`'s result and the time-to-safepoint.
    pub fn safepoint<R>(&self, op: impl FnOnce(&Heap) -> R) -> (R, std::time::Duration) {
        self.inner.control.safepoint(|| op(&self.inner.heap))
    }

    /// Interrupt every launch running now (callable from any thread — a
    /// Ctrl-C handler, a watchdog): each stops at its next poll, as for a
    /// safepoint, and then leaves instead of going on. Workitems that had
    /// completed stay completed; those stopped part-way are dropped, not
    /// replayed ([`LaunchReport::abandoned`]; the deopt table lists them as
    /// `interrupted`); the rest never start. The heap stays whole: TLABs
    /// are retired as after any launch. The launch returns
    /// [`OffloadError::Interrupted`] with its report. Launches that start
    /// later run normally. Returns the time-to-safepoint.
    pub fn interrupt(&self) -> std::time::Duration {
        self.inner.control.interrupt()
    }

    /// How many safepoints this runtime has completed.
    pub fn safepoint_count(&self) -> u64 {
        self.inner.control.count()
    }

    /// The null reference, as an argument.
    pub fn null(&self) -> Arg {
        Arg::Ref {
            r: Ref::NULL,
            rt: self.inner.id,
        }
    }

    /// The device kernels run on.
    pub fn device(&self) -> Device {
        self.inner.device
    }

    /// Why the runtime is not on the device it was asked for (or, by
    /// default, on CUDA), or that its CUDA device is offload's virtual GPU
    /// (a simulator, not hardware): `None` when it is on that device and
    /// the device is real.
    pub fn fallback(&self) -> Option<&str> {
        self.inner.fallback.as_deref()
    }

    /// Compile the closure's kernel to PTX and load it on the GPU (cached
    /// by kernel version); returns how long the driver's `load_module`
    /// took. An error when the device is not CUDA or the kernel cannot run
    /// on it.
    pub fn gpu_load_time(&self, closure: &Closure) -> Result<std::time::Duration, OffloadError> {
        let gpu =
            self.inner.gpu.as_ref().ok_or_else(|| {
                OffloadError::Setup("the runtime is not on the CUDA device".into())
            })?;
        crate::cuda::load_time(self, gpu, closure).map_err(OffloadError::Setup)
    }

    /// The CUDA C baselines of the GPU benchmarks, loaded on this runtime's
    /// GPU (an error unless the device is CUDA).
    pub fn cuda_c(&self) -> Result<crate::tools::cuda_c::CudaC, OffloadError> {
        let gpu =
            self.inner.gpu.as_ref().ok_or_else(|| {
                OffloadError::Setup("the runtime is not on the CUDA device".into())
            })?;
        crate::tools::cuda_c::CudaC::load(gpu).map_err(OffloadError::Setup)
    }

    /// The GPU, described (`None` unless the device is CUDA).
    pub fn gpu(&self) -> Option<String> {
        self.inner.gpu.as_ref().map(crate::cuda::Gpu::describe)
    }

    /// Whether the runtime's GPU is offload's virtual GPU (the PTX
    /// simulator's driver shim, `vgpu/driver`), not hardware.
    pub fn gpu_is_virtual(&self) -> bool {
        self.inner
            .gpu
            .as_ref()
            .is_some_and(crate::cuda::Gpu::is_virtual)
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.inner.workers
    }

    /// The allocator of one launch with `workers` workers (with the refill
    /// fault injection, if configured, and the kernel's TLAB size, if a
    /// policy changed it).
    pub(crate) fn allocator(
        &self,
        workers: usize,
        tlab_bytes: Option<u32>,
    ) -> offload_tlab::Allocator<'_> {
        let mut a = offload_tlab::Allocator::new(&self.inner.heap, self.inner.policy, workers)
            .with_buffers(self.inner.alloc_buffers);
        if let Some(t) = tlab_bytes {
            a = a.with_tlab_bytes(t);
        }
        match self.inner.fail_refills {
            Some((first, every)) => a.with_refill_fault(first, every),
            None => a,
        }
    }

    /// Retire a launch's allocator: hand its objects back to eden
    /// ([`offload_tlab::Allocator::reclaim`]) unless one may outlive the
    /// launch — a workitem stored one into an older object (`escaped`, the
    /// write barrier), or a safepoint operation, which had the heap to
    /// itself, ran since `safepoints_before` — or reclaiming is off.
    pub(crate) fn end_allocation(
        &self,
        alloc: offload_tlab::Allocator<'_>,
        escaped: bool,
        safepoints_before: u64,
    ) -> offload_tlab::AllocStats {
        let safepointed = self.inner.control.count() != safepoints_before;
        if escaped || safepointed || !self.inner.reclaim {
            alloc.retire()
        } else {
            alloc.reclaim()
        }
    }

    /// Wait until every background compile started so far (the optimized
    /// tier of kernel versions already launched) has finished, so that the
    /// next launches run optimized code — before timing launches, say.
    pub fn finish_compiles(&self) {
        loop {
            let pending = std::mem::take(
                &mut *self
                    .inner
                    .background
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            if pending.is_empty() {
                return;
            }
            for h in pending {
                // A compile that panicked leaves the quick tier in use.
                let _ = h.join();
            }
        }
    }

    /// An empty save area of `slots` records of `layout`: one a finished
    /// launch gave back, or a new one.
    pub(crate) fn take_save_area(
        &self,
        slots: usize,
        layout: offload_deopt::SaveLayout,
    ) -> Result<offload_deopt::SaveArea, OffloadError> {
        let mut pool = self
            .inner
            .save_areas
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match pool
            .iter()
            .position(|a| a.slots() == slots && a.layout() == layout)
        {
            Some(i) => Ok(pool.swap_remove(i)),
            None => offload_deopt::SaveArea::try_new(slots, layout)
                .map_err(|e| OffloadError::Setup(e.to_string())),
        }
    }

    /// Keep `area` for a later launch if every record in it is empty (a
    /// launch that failed part-way may leave records behind).
    pub(crate) fn give_back_save_area(&self, area: offload_deopt::SaveArea) {
        const KEPT: usize = 8;
        if area.is_clear() {
            let mut pool = self
                .inner
                .save_areas
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if pool.len() == KEPT {
                pool.remove(0);
            }
            pool.push(area);
        }
    }

    /// The heap.
    pub fn heap(&self) -> &Heap {
        &self.inner.heap
    }

    /// Load a module from `.obc` text; `name` names it in messages.
    pub fn load(&self, name: &str, src: &str) -> Result<Module, OffloadError> {
        let verified = offload_ir::load(name, src).map_err(|d| OffloadError::Load {
            name: name.to_string(),
            rendered: crate::diagnostics::render_all(&d.0, src),
            diagnostics: d,
        })?;
        let mut shapes = self
            .inner
            .class_shapes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let base = shapes.len() as u32;
        let count = verified.classes.len() as u32;
        if u64::from(base) + u64::from(count) > u64::from(offload_tlab::layout::MAX_ARRAY_CLASS) {
            return Err(OffloadError::Setup(
                "too many classes loaded into one runtime".into(),
            ));
        }
        let prog = Arc::new(Program::new(Arc::new(verified), base));
        for g in base..base + count {
            shapes.push(prog.class_shape(g).ok_or_else(|| {
                OffloadError::Setup(format!("class {g} of `{name}` has no shape"))
            })?);
        }
        Ok(Module {
            rt: self.clone(),
            prog,
            name: name.to_string(),
            id: self.inner.next_module.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// Load a module from a `.obc` file.
    pub fn load_file(&self, path: impl AsRef<std::path::Path>) -> Result<Module, OffloadError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| OffloadError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let src = crate::diagnostics::utf8_text(&path.display().to_string(), bytes)
            .map_err(OffloadError::Setup)?;
        self.load(&path.display().to_string(), &src)
    }

    /// Run `closure` for every workitem in `range`, on the runtime's device.
    pub fn par_offload(
        &self,
        range: Range<i64>,
        closure: &Closure,
    ) -> Result<LaunchReport, OffloadError> {
        if closure.module.rt.inner.id != self.inner.id {
            return Err(OffloadError::Handle(
                "the closure belongs to another runtime".into(),
            ));
        }
        crate::launch::launch(self, range, closure, self.inner.deadline)
    }

    /// [`Runtime::par_offload`] with a deadline for this launch (instead of
    /// the runtime's, [`RuntimeBuilder::launch_deadline`]): still running
    /// `deadline` after it started, the launch is interrupted as
    /// [`Runtime::interrupt`] interrupts it — it alone: other launches on
    /// the runtime only pass the safepoint that stops its workers — and
    /// returns [`OffloadError::Interrupted`] with its report.
    pub fn par_offload_with_deadline(
        &self,
        range: Range<i64>,
        closure: &Closure,
        deadline: std::time::Duration,
    ) -> Result<LaunchReport, OffloadError> {
        if closure.module.rt.inner.id != self.inner.id {
            return Err(OffloadError::Handle(
                "the closure belongs to another runtime".into(),
            ));
        }
        crate::launch::launch(self, range, closure, Some(deadline))
    }

    /// The adaptive state of `closure`'s kernel (created on first use).
    pub(crate) fn kernel_state(&self, closure: &Closure) -> Arc<Mutex<KernelState>> {
        self.inner
            .kernels
            .entry((closure.module.id, closure.kernel))
            .or_insert_with(|| {
                Arc::new(Mutex::new(KernelState::new(
                    self,
                    closure.module.prog.clone(),
                    closure.kernel,
                )))
            })
            .clone()
    }

    /// What the runtime knows about `closure`'s kernel: its version and
    /// speculations, its deopt counters per (version, site, reason), where
    /// it runs now, and its policy's decisions. `None` before its first
    /// launch.
    pub fn kernel_info(&self, closure: &Closure) -> Option<KernelInfo> {
        let st = self
            .inner
            .kernels
            .get(&(closure.module.id, closure.kernel))?
            .clone();
        let st = st.lock().unwrap_or_else(|e| e.into_inner());
        Some(st.info(self))
    }

    /// Walk and verify the whole heap (between launches): every object has a
    /// valid header and size, and every reference points at an object.
    /// Objects of every module ever loaded into the runtime are known,
    /// whether or not `modules` holds it; `modules` must be modules of this
    /// runtime (kept for callers that name what they check).
    pub fn verify_heap(
        &self,
        modules: &[&Module],
    ) -> Result<offload_tlab::WalkStats, OffloadError> {
        if let Some(m) = modules
            .iter()
            .find(|m| !Arc::ptr_eq(&m.rt.inner, &self.inner))
        {
            return Err(OffloadError::Setup(format!(
                "verify_heap: module `{}` belongs to another runtime",
                m.name
            )));
        }
        let shapes = self
            .inner
            .class_shapes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        Ok(self
            .inner
            .heap
            .verify(|g| shapes.get(g as usize).cloned())?)
    }
}
impl Closure {
    /// The kernel.
    pub fn kernel(&self) -> FuncId {
        self.kernel
    }
    /// The captured values as raw slots (what the interpreter receives).
    pub fn captures(&self) -> &[u64] {
        &self.captures
    }
    /// The kernel's name.
    pub fn kernel_name(&self) -> &str {
        &self.module.prog.verified().func(self.kernel).name
    }
    /// The module.
    pub fn module(&self) -> &Module {
        &self.module
    }
}

/// Run `closure` for every workitem of `range` on its runtime's device.
pub fn par_offload(range: Range<i64>, closure: &Closure) -> Result<LaunchReport, OffloadError> {
    closure.module.rt.par_offload(range, closure)
}
