//! The runtime: heap, workers, devices, loaded modules and host handles.

use crate::adaptive::{KernelInfo, KernelState};
use crate::error::OffloadError;
use crate::launch::LaunchReport;
use crate::policy::Policy;
use offload_host_interp::Program;
use offload_ir::{ClassId, Elem, FuncId, Type};
use offload_tlab::layout::{Header, array_elem_kind, kind_size};
use offload_tlab::{AllocPolicy, Allocator, Heap, HeapConfig, Ref};
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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

/// Configures a [`Runtime`].
#[derive(Clone, Debug)]
pub struct RuntimeBuilder {
    heap: HeapConfig,
    workers: Option<usize>,
    /// `None`: CUDA when a GPU is present, else the CPU (reported).
    device: Option<Device>,
    strict: bool,
    deadline: Option<std::time::Duration>,
    device_slots: Option<usize>,
    policy: AllocPolicy,
    alloc_buffers: bool,
    profile: bool,
    compile: offload_jit::CompileOptions,
    deopt_records: usize,
    fail_refills: Option<(u64, u64)>,
    reclaim: bool,
    warmup: u32,
    spec_cfg: offload_jit::SpecConfig,
    tiered: bool,
    /// The policy, or the unknown name asked for (an error at `build`).
    recompile_policy: Result<PolicyFactory, String>,
    rewrite_ptx: Option<PtxRewrite>,
}

/// A test hook that rewrites a kernel's PTX before the driver loads it.
#[derive(Clone)]
pub(crate) struct PtxRewrite(pub(crate) Arc<dyn Fn(&str) -> String + Send + Sync>);

impl std::fmt::Debug for PtxRewrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PtxRewrite")
    }
}

/// Makes one recompilation policy per kernel.
#[derive(Clone)]
pub(crate) struct PolicyFactory(Arc<dyn Fn() -> Box<dyn Policy> + Send + Sync>);

impl PolicyFactory {
    fn named(name: &str) -> Option<PolicyFactory> {
        crate::policy::by_name(name)?;
        let name = name.to_string();
        Some(PolicyFactory(Arc::new(move || {
            crate::policy::by_name(&name).expect("checked")
        })))
    }
}

impl std::ops::Deref for PolicyFactory {
    type Target = dyn Fn() -> Box<dyn Policy> + Send + Sync;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl std::fmt::Debug for PolicyFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PolicyFactory({})", (self.0)().name())
    }
}

/// Save records per slot on the CPU device unless configured.
pub const DEFAULT_DEOPT_RECORDS: usize = 1024;
/// The most save records per slot a runtime accepts
/// ([`RuntimeBuilder::deopt_records`]); more would not make a launch
/// faster (a slot replays its records about once per this many deopts),
/// only its save area larger.
pub const MAX_DEOPT_RECORDS: usize = 1 << 20;
/// The most worker threads a runtime starts ([`RuntimeBuilder::workers`]).
pub const MAX_WORKERS: usize = 1024;

impl RuntimeBuilder {
    /// Fault injection for tests: in every launch, TLAB refill number
    /// `first` (1-based) and every `every`-th after it (0: only `first`)
    /// fail for the allocation that does them (see
    /// [`offload_tlab::RefillFault`]): compiled code deopts with
    /// `AllocationFailure`, the interpreter retries. On the CUDA device,
    /// whose refills carve from a device eden, each launch's eden holds
    /// `first` TLABs, so every refill after those finds it exhausted
    /// (`every` does not apply there).
    pub fn fail_refills(mut self, first: u64, every: u64) -> Self {
        self.fail_refills = Some((first, every));
        self
    }

    /// Whether a launch on the CPU device or the interpreter whose objects
    /// all died with it hands their memory back to eden (default: yes).
    /// Its write barrier notes any reference to an object of the launch
    /// stored into an older object, and such a launch keeps its objects;
    /// so does one that overlapped another launch or a host allocation, or
    /// during which a [`Runtime::safepoint`] operation ran (it had the
    /// heap, and could have stored a reference anywhere).
    /// Off, every object stays in the heap until the runtime is dropped
    /// (for inspecting what a launch made, e.g. with
    /// [`Runtime::verify_heap`]). CUDA launches always keep theirs.
    pub fn reclaim(mut self, on: bool) -> Self {
        self.reclaim = on;
        self
    }

    /// Save records per slot (at least 1, at most [`MAX_DEOPT_RECORDS`];
    /// default [`DEFAULT_DEOPT_RECORDS`]).
    /// A slot that deoptimizes writes a record and goes on with its next
    /// workitem; only when its records are full does it stop, so a slot
    /// stops, replays its records and re-enters about once per `n` deopts. The save area is
    /// `workers * n` records: bounded by the slots, never by the range.
    pub fn deopt_records(mut self, n: usize) -> Self {
        self.deopt_records = n.max(1);
        self
    }

    /// Fault injection for tests: compile every kernel so that the chosen
    /// workitems deoptimize at the chosen site (see
    /// [`offload_jit::Injection`]). Kernels without that site run on the
    /// interpreter, and their reports say so.
    pub fn inject(mut self, inj: offload_jit::Injection) -> Self {
        self.compile.inject = Some(inj);
        self
    }

    /// Fault injection for tests: the CUDA device hands each kernel's PTX
    /// to `f` and loads what it returns (to check how a kernel that faults
    /// on the GPU, say with a store outside the heap, is reported).
    pub fn rewrite_ptx(mut self, f: impl Fn(&str) -> String + Send + Sync + 'static) -> Self {
        self.rewrite_ptx = Some(PtxRewrite(Arc::new(f)));
        self
    }

    /// Fault injection for tests: compiled back-edge polls deopt as if a
    /// safepoint had been requested — every `every`-th poll of a slot, or
    /// with `seed`, each poll with probability 1/`every` (see
    /// [`offload_jit::SafepointInjection`]).
    pub fn inject_safepoints(mut self, every: u64, seed: Option<u64>) -> Self {
        self.compile.safepoints = Some(offload_jit::SafepointInjection {
            every: every.max(1),
            seed,
        });
        self
    }

    /// Tiered compilation on the CPU (default on): a kernel version is
    /// first compiled quickly (no Cranelift optimizations, single-pass
    /// register allocation) so that its first launch starts soon, and
    /// compiled again, optimized, on a background thread; launches use the
    /// optimized code once it is there. Off: every version is compiled
    /// optimized before its first launch.
    pub fn tiered(mut self, on: bool) -> Self {
        self.tiered = on;
        self
    }

    /// Compile back-edge polls (default on). Off only to measure what they
    /// cost: a safepoint then waits until each slot's current workitem ends.
    pub fn back_edge_polls(mut self, on: bool) -> Self {
        self.compile.no_polls = !on;
        self
    }

    /// Bytes the heap starts with.
    pub fn initial_heap(mut self, bytes: usize) -> Self {
        self.heap.initial = bytes;
        self
    }
    /// Bytes the heap may grow to.
    pub fn max_heap(mut self, bytes: usize) -> Self {
        self.heap.max = bytes;
        self
    }
    /// TLAB size in bytes.
    pub fn tlab_bytes(mut self, bytes: u32) -> Self {
        self.heap.tlab_bytes = bytes;
        self
    }
    /// Number of worker threads (the concurrent slots); default: every core.
    /// [`RuntimeBuilder::build`] refuses more than [`MAX_WORKERS`].
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n.max(1));
        self
    }
    /// Force the device kernels run on. Without this, the runtime uses
    /// CUDA when a usable GPU is present and the CPU device otherwise, and
    /// says why in [`Runtime::fallback`]. Forcing `Cuda` on a machine
    /// without one also falls back to the CPU, reported (an error in
    /// strict mode).
    pub fn device(mut self, d: Device) -> Self {
        self.device = Some(d);
        self
    }
    /// Run CUDA launches with at most `n` slots (device threads) instead
    /// of the device's resident capacity — 1 makes a launch run its
    /// workitems in order, as the differential tests need.
    pub fn device_slots(mut self, n: usize) -> Self {
        self.device_slots = Some(n.max(1));
        self
    }
    /// Strict mode: a fallback — no usable GPU for the CUDA device, or a
    /// kernel the PTX backend does not compile — is an error instead of a
    /// report.
    pub fn strict(mut self, on: bool) -> Self {
        self.strict = on;
        self
    }
    /// A deadline for every launch: one still running this long after it
    /// started is interrupted as [`Runtime::interrupt`] interrupts it, and
    /// returns [`OffloadError::Interrupted`] with its report
    /// ([`LaunchReport::deadline`] says it was the deadline). `None` (the
    /// default): launches run until they end.
    /// [`Runtime::par_offload_with_deadline`] sets one launch's.
    pub fn launch_deadline(mut self, d: Option<std::time::Duration>) -> Self {
        self.deadline = d;
        self
    }
    /// The allocation policy.
    pub fn alloc_policy(mut self, p: AllocPolicy) -> Self {
        self.policy = p;
        self
    }
    /// Whether the workers of a shared TLAB each allocate from a buffer of
    /// their own taken from it (the default), or bump the shared TLAB with
    /// an atomic add per object, as a GPU warp does (for experiments on
    /// contention). See `offload_tlab::alloc`, "Allocation buffers".
    pub fn alloc_buffers(mut self, on: bool) -> Self {
        self.alloc_buffers = on;
        self
    }
    /// Record interpreter profiles during launches.
    pub fn profile(mut self, on: bool) -> Self {
        self.profile = on;
        self
    }

    /// Speculate: the first `launches` launches of each kernel (its
    /// warm-up) run in the interpreter with profiling, and the kernel is
    /// then compiled with the speculations the profile supports (see
    /// [`offload_jit::spec`]) — untaken branches, one or two receiver
    /// classes at virtual calls, values never seen null. 0 (the default)
    /// compiles at the first launch without speculation: a warm-up in the
    /// interpreter pays off only for kernels launched many times.
    pub fn speculate(mut self, launches: u32) -> Self {
        self.warmup = launches;
        self
    }

    /// How speculative compilation is (minimum profile counts, receiver
    /// classes inlined per call).
    pub fn spec_config(mut self, cfg: offload_jit::SpecConfig) -> Self {
        self.spec_cfg = cfg;
        self
    }

    /// The recompilation policy applied after every launch, by name (see
    /// [`crate::policy::NAMES`]; the default is `never`, Sumatra's
    /// behaviour). An unknown name makes [`RuntimeBuilder::build`] fail.
    pub fn policy(mut self, name: &str) -> Self {
        self.recompile_policy = PolicyFactory::named(name).ok_or_else(|| name.to_string());
        self
    }

    /// A recompilation policy of your own: `make` is called once per kernel.
    pub fn policy_with(
        mut self,
        make: impl Fn() -> Box<dyn Policy> + Send + Sync + 'static,
    ) -> Self {
        self.recompile_policy = Ok(PolicyFactory(Arc::new(make)));
        self
    }
    /// Make the runtime.
    pub fn build(self) -> Result<Runtime, OffloadError> {
        let policy_factory = self.recompile_policy.map_err(|bad| {
            OffloadError::Setup(format!(
                "unknown recompilation policy `{bad}` (available: {})",
                crate::policy::NAMES.join(", ")
            ))
        })?;
        // Every core by default (at most MAX_WORKERS); more only if asked.
        let workers = self.workers.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_WORKERS))
        });
        if workers > MAX_WORKERS {
            return Err(OffloadError::Setup(format!(
                "{workers} workers asked for; a runtime starts at most {MAX_WORKERS}"
            )));
        }
        if self.deopt_records > MAX_DEOPT_RECORDS {
            return Err(OffloadError::Setup(format!(
                "{} deopt records per worker asked for; at most {MAX_DEOPT_RECORDS}",
                self.deopt_records
            )));
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(workers)
            .thread_name(|i| format!("offload-worker-{i}"))
            .build()
            .map_err(|e| OffloadError::Setup(e.to_string()))?;
        let (device, gpu, fallback) = match self.device {
            Some(d @ (Device::Cpu | Device::Interpreter)) => (d, None, None),
            want => match crate::cuda::probe() {
                Ok(g) => {
                    // Not a fallback, but as plain to see: the CUDA device
                    // is a simulation.
                    let note = g.is_virtual().then(|| {
                        format!(
                            "the CUDA device is {}: offload's virtual GPU, a PTX simulator found on the library path, not hardware (its timings say nothing about a GPU's)",
                            g.describe()
                        )
                    });
                    (Device::Cuda, Some(g), note)
                }
                Err(why) if self.strict => {
                    return Err(OffloadError::Setup(format!(
                        "strict mode: the CUDA device is unavailable: {why}"
                    )));
                }
                Err(why) => {
                    let asked = if want.is_some() {
                        "requested"
                    } else {
                        "default"
                    };
                    (
                        Device::Cpu,
                        None,
                        Some(format!(
                            "the {asked} CUDA device is unavailable ({why}); using the CPU device"
                        )),
                    )
                }
            },
        };
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Ok(Runtime {
            inner: Arc::new(Inner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                heap: Heap::new(self.heap)?,
                pool,
                workers,
                device,
                gpu,
                fallback,
                strict: self.strict,
                deadline: self.deadline,
                device_slots: self.device_slots,
                policy: self.policy,
                alloc_buffers: self.alloc_buffers,
                profile: self.profile,
                control: offload_host_interp::Control::new(),
                jit: offload_jit::CpuJit::new(),
                compile: self.compile,
                deopt_records: self.deopt_records,
                fail_refills: self.fail_refills,
                reclaim: self.reclaim,
                warmup: self.warmup,
                spec_cfg: self.spec_cfg,
                policy_factory,
                rewrite_ptx: self.rewrite_ptx,
                kernels: dashmap::DashMap::new(),
                compiled: dashmap::DashMap::new(),
                tiered: self.tiered,
                background: Mutex::new(Vec::new()),
                class_shapes: Mutex::new(Vec::new()),
                next_module: AtomicU64::new(0),
                save_areas: Mutex::new(Vec::new()),
            }),
        })
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

/// A value passed to a kernel.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Arg {
    /// An `i32`.
    I32(i32),
    /// An `i64`.
    I64(i64),
    /// An `f32`.
    F32(f32),
    /// An `f64`.
    F64(f64),
    /// A heap reference, with the runtime it belongs to.
    Ref {
        /// The reference.
        r: Ref,
        /// The owning runtime's id.
        rt: u64,
    },
}

impl From<i32> for Arg {
    fn from(v: i32) -> Arg {
        Arg::I32(v)
    }
}
impl From<i64> for Arg {
    fn from(v: i64) -> Arg {
        Arg::I64(v)
    }
}
impl From<f32> for Arg {
    fn from(v: f32) -> Arg {
        Arg::F32(v)
    }
}
impl From<f64> for Arg {
    fn from(v: f64) -> Arg {
        Arg::F64(v)
    }
}

/// A numeric array element type that Rust slices can be copied from and to.
pub trait Element: Copy + Send + Sync + 'static {
    /// The bytecode element type.
    const ELEM: Elem;
    /// Raw bits as stored.
    fn to_bits(self) -> u64;
    /// From raw bits.
    fn from_bits(b: u64) -> Self;
}

impl Element for i32 {
    const ELEM: Elem = Elem::I32;
    fn to_bits(self) -> u64 {
        u64::from(self as u32)
    }
    fn from_bits(b: u64) -> Self {
        b as u32 as i32
    }
}
impl Element for i64 {
    const ELEM: Elem = Elem::I64;
    fn to_bits(self) -> u64 {
        self as u64
    }
    fn from_bits(b: u64) -> Self {
        b as i64
    }
}
impl Element for f32 {
    const ELEM: Elem = Elem::F32;
    fn to_bits(self) -> u64 {
        u64::from(f32::to_bits(self))
    }
    fn from_bits(b: u64) -> Self {
        f32::from_bits(b as u32)
    }
}
impl Element for f64 {
    const ELEM: Elem = Elem::F64;
    fn to_bits(self) -> u64 {
        f64::to_bits(self)
    }
    fn from_bits(b: u64) -> Self {
        f64::from_bits(b)
    }
}

/// A handle to an array of `T` in a runtime's heap.
#[derive(Debug)]
pub struct Array<T: Element> {
    r: Ref,
    len: u32,
    rt: u64,
    _t: PhantomData<T>,
}

impl<T: Element> Clone for Array<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Element> Copy for Array<T> {}

impl<T: Element> Array<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The heap reference.
    pub fn as_ref(&self) -> Ref {
        self.r
    }
}

impl<T: Element> From<&Array<T>> for Arg {
    fn from(a: &Array<T>) -> Arg {
        Arg::Ref { r: a.r, rt: a.rt }
    }
}
impl<T: Element> From<Array<T>> for Arg {
    fn from(a: Array<T>) -> Arg {
        Arg::Ref { r: a.r, rt: a.rt }
    }
}

/// A handle to an object of one of a module's classes.
#[derive(Clone, Debug)]
pub struct Object {
    r: Ref,
    class: ClassId,
    module: Module,
}

impl Object {
    /// The heap reference.
    pub fn as_ref(&self) -> Ref {
        self.r
    }
    /// The class name.
    pub fn class_name(&self) -> &str {
        &self.module.prog.verified().class(self.class).name
    }
    /// The module whose class it is an instance of.
    pub fn module(&self) -> &Module {
        &self.module
    }
}

impl From<&Object> for Arg {
    fn from(o: &Object) -> Arg {
        Arg::Ref {
            r: o.r,
            rt: o.module.rt.inner.id,
        }
    }
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
        RuntimeBuilder {
            heap: HeapConfig::default(),
            workers: None,
            device: None,
            strict: false,
            deadline: None,
            device_slots: None,
            policy: AllocPolicy::default(),
            alloc_buffers: true,
            profile: false,
            compile: offload_jit::CompileOptions::default(),
            deopt_records: DEFAULT_DEOPT_RECORDS,
            fail_refills: None,
            reclaim: true,
            warmup: 0,
            spec_cfg: offload_jit::SpecConfig::default(),
            tiered: true,
            recompile_policy: PolicyFactory::named("never").ok_or_else(|| "never".to_string()),
            rewrite_ptx: None,
        }
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

    /// A new array holding a copy of `data`.
    pub fn array<T: Element>(&self, data: &[T]) -> Result<Array<T>, OffloadError> {
        let a = self.new_array::<T>(data.len())?;
        self.write(&a, 0, data)?;
        Ok(a)
    }

    /// A new zeroed array of `len` elements.
    pub fn new_array<T: Element>(&self, len: usize) -> Result<Array<T>, OffloadError> {
        let len = u32::try_from(len)
            .ok()
            .filter(|&l| l <= i32::MAX as u32)
            .ok_or_else(|| {
                OffloadError::Handle(format!("array length {len} exceeds {}", i32::MAX))
            })?;
        let at = Allocator::alloc_host(
            &self.inner.heap,
            Header::Array {
                elem: T::ELEM,
                dims: 1,
                len,
            },
        )?;
        Ok(Array {
            r: Ref(at),
            len,
            rt: self.inner.id,
            _t: PhantomData,
        })
    }

    fn check<T: Element>(&self, a: &Array<T>) -> Result<(), OffloadError> {
        if a.rt != self.inner.id {
            return Err(OffloadError::Handle(
                "the array belongs to another runtime".into(),
            ));
        }
        Ok(())
    }

    /// Check that `a` is ours and `[at, at + n)` lies inside it; return the
    /// byte offset of element `at` and the element size.
    fn span<T: Element>(
        &self,
        a: &Array<T>,
        at: usize,
        n: usize,
        what: &str,
    ) -> Result<(usize, usize), OffloadError> {
        self.check(a)?;
        if at.checked_add(n).is_none_or(|e| e > a.len()) {
            return Err(OffloadError::Handle(format!(
                "{what} {n} elements at {at} overflows an array of {}",
                a.len()
            )));
        }
        let size = kind_size(array_elem_kind(T::ELEM, 1)) as usize;
        Ok((a.r.byte_offset() + 8 + at * size, size))
    }

    /// Copy `data` into `a` starting at element `at`.
    pub fn write<T: Element>(
        &self,
        a: &Array<T>,
        at: usize,
        data: &[T],
    ) -> Result<(), OffloadError> {
        let (base, size) = self.span(a, at, data.len(), "writing")?;
        let heap = &self.inner.heap;
        for (i, &x) in data.iter().enumerate() {
            if size == 8 {
                heap.store64(base + i * 8, x.to_bits())?;
            } else {
                heap.store32(base + i * 4, x.to_bits() as u32)?;
            }
        }
        Ok(())
    }

    /// Copy the whole array out.
    pub fn read<T: Element>(&self, a: &Array<T>) -> Result<Vec<T>, OffloadError> {
        let mut out = vec![T::from_bits(0); a.len()];
        self.read_into(a, 0, &mut out)?;
        Ok(out)
    }

    /// Copy `out.len()` elements starting at `at` into `out`.
    pub fn read_into<T: Element>(
        &self,
        a: &Array<T>,
        at: usize,
        out: &mut [T],
    ) -> Result<(), OffloadError> {
        let (base, size) = self.span(a, at, out.len(), "reading")?;
        let heap = &self.inner.heap;
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = T::from_bits(if size == 8 {
                heap.load64(base + i * 8)?
            } else {
                u64::from(heap.load32(base + i * 4)?)
            });
        }
        Ok(())
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

impl Module {
    /// The module's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The prepared program (verified module, layout, analyses).
    pub fn program(&self) -> &Arc<Program> {
        &self.prog
    }

    /// The names of the kernels.
    pub fn kernels(&self) -> Vec<String> {
        let v = self.prog.verified();
        v.kernels().map(|k| v.func(k).name.clone()).collect()
    }

    /// The kernel named `kernel`, or an error listing the kernels there are.
    pub(crate) fn kernel_id(&self, kernel: &str) -> Result<FuncId, OffloadError> {
        self.prog
            .verified()
            .func_named(kernel)
            .filter(|&k| self.prog.is_kernel(k))
            .ok_or_else(|| {
                let all = self.kernels();
                let nearest =
                    offload_ir::nearest(kernel, all.iter().map(String::as_str)).map(str::to_string);
                OffloadError::NoSuchKernel {
                    module: self.name.clone(),
                    kernel: kernel.to_string(),
                    available: all.join(", "),
                    nearest,
                }
            })
    }

    /// Bind a kernel to its captures (every parameter after the index, in
    /// order). Each capture is checked against its parameter: numbers by
    /// type, references by the runtime type of the object they point at.
    /// Captured references must not be null.
    pub fn closure(
        &self,
        kernel: &str,
        captures: impl IntoIterator<Item = Arg>,
    ) -> Result<Closure, OffloadError> {
        let v = self.prog.verified();
        let k = self.kernel_id(kernel)?;
        let f = v.func(k);
        let params = &f.params()[1..];
        let captures: Vec<Arg> = captures.into_iter().collect();
        let cerr = |problem: String| OffloadError::Capture {
            kernel: kernel.to_string(),
            problem,
        };
        if captures.len() != params.len() {
            let names: Vec<String> = params
                .iter()
                .map(|p| format!("{}: {}", p.name, v.type_name(p.ty)))
                .collect();
            return Err(cerr(format!(
                "takes {} capture(s) ({}), {} given",
                params.len(),
                names.join(", "),
                captures.len()
            )));
        }
        let mut raw = Vec::with_capacity(captures.len());
        for (i, (p, a)) in params.iter().zip(&captures).enumerate() {
            let want = v.type_name(p.ty);
            let bad = |found: String| {
                cerr(format!(
                    "capture {} (`{}`) must be {want}, found {found}",
                    i + 1,
                    p.name
                ))
            };
            let bits = match (p.ty, *a) {
                (Type::I32, Arg::I32(x)) => u64::from(x as u32),
                (Type::I64, Arg::I64(x)) => x as u64,
                (Type::F32, Arg::F32(x)) => u64::from(x.to_bits()),
                (Type::F64, Arg::F64(x)) => x.to_bits(),
                (t, Arg::Ref { r, rt }) if t.is_ref() => {
                    if r.is_null() {
                        return Err(bad("null".into()));
                    }
                    if rt != self.rt.inner.id {
                        return Err(bad("a reference from another runtime".into()));
                    }
                    let found = self.runtime_type(r)?;
                    if !self.is_instance(r, t)? {
                        return Err(bad(found));
                    }
                    u64::from(r.0)
                }
                (_, a) => return Err(bad(arg_kind(a).into())),
            };
            raw.push(bits);
        }
        Ok(Closure {
            module: self.clone(),
            kernel: k,
            captures: raw,
        })
    }

    fn is_instance(&self, r: Ref, t: Type) -> Result<bool, OffloadError> {
        Ok(self
            .prog
            .header_is_instance(self.rt.inner.heap.header(r)?, t))
    }

    fn runtime_type(&self, r: Ref) -> Result<String, OffloadError> {
        Ok(format!(
            "`{}`",
            self.prog.header_type_name(self.rt.inner.heap.header(r)?)
        ))
    }

    /// A new zeroed instance of `class`.
    pub fn new_object(&self, class: &str) -> Result<Object, OffloadError> {
        let v = self.prog.verified();
        let c = v.class_named(class).ok_or_else(|| {
            OffloadError::Lookup(format!("module `{}` has no class `{class}`", self.name))
        })?;
        if let Some(&a) = v.vtable(c).iter().find(|&&m| v.func(m).is_abstract()) {
            return Err(OffloadError::Lookup(format!(
                "cannot instantiate `{class}`: `{}` is abstract",
                v.func(a).name
            )));
        }
        let at = Allocator::alloc_host(
            &self.rt.inner.heap,
            Header::Object {
                class: self.prog.global_class(c),
                size: self.prog.layout.class_size[c.index()],
            },
        )?;
        Ok(Object {
            r: Ref(at),
            class: c,
            module: self.clone(),
        })
    }

    fn field_of(&self, o: &Object, name: &str) -> Result<(usize, Type), OffloadError> {
        let v = self.prog.verified();
        if o.module.rt.inner.id != self.rt.inner.id || !Arc::ptr_eq(&o.module.prog, &self.prog) {
            return Err(OffloadError::Handle(
                "the object belongs to another module".into(),
            ));
        }
        let f = v.lookup_field(o.class, name).ok_or_else(|| {
            OffloadError::Lookup(format!(
                "class `{}` has no field `{name}`",
                v.class(o.class).name
            ))
        })?;
        Ok((
            o.r.byte_offset() + self.prog.layout.field_offset[f.index()] as usize,
            v.field(f).ty,
        ))
    }

    /// Set a field of an object.
    pub fn set_field(
        &self,
        o: &Object,
        name: &str,
        value: impl Into<Arg>,
    ) -> Result<(), OffloadError> {
        let (off, ty) = self.field_of(o, name)?;
        let heap = &self.rt.inner.heap;
        let value = value.into();
        match (ty, value) {
            (Type::I32, Arg::I32(x)) => heap.store32(off, x as u32)?,
            (Type::F32, Arg::F32(x)) => heap.store32(off, x.to_bits())?,
            (Type::I64, Arg::I64(x)) => heap.store64(off, x as u64)?,
            (Type::F64, Arg::F64(x)) => heap.store64(off, x.to_bits())?,
            (t, Arg::Ref { r, rt })
                if t.is_ref()
                    && rt == self.rt.inner.id
                    && (r.is_null() || self.is_instance(r, t)?) =>
            {
                heap.store32(off, r.0)?
            }
            (t, a) => {
                return Err(OffloadError::Lookup(format!(
                    "field `{name}` has type {}, cannot store {}",
                    self.prog.verified().type_name(t),
                    arg_kind(a)
                )));
            }
        }
        Ok(())
    }

    /// Read a numeric field of an object.
    pub fn get_field<T: Element>(&self, o: &Object, name: &str) -> Result<T, OffloadError> {
        let (off, ty) = self.field_of(o, name)?;
        if ty != T::ELEM.to_type() {
            return Err(OffloadError::Lookup(format!(
                "field `{name}` has type {}, not {}",
                self.prog.verified().type_name(ty),
                self.prog.verified().type_name(T::ELEM.to_type())
            )));
        }
        let heap = &self.rt.inner.heap;
        Ok(T::from_bits(if kind_size(ty.kind()) == 8 {
            heap.load64(off)?
        } else {
            u64::from(heap.load32(off)?)
        }))
    }
}

/// A handle to a one-dimensional array of references to one of a module's
/// classes (`Shape[]`): its elements are null or instances of the class or
/// its subclasses.
#[derive(Clone, Debug)]
pub struct RefArray {
    r: Ref,
    len: u32,
    elem: ClassId,
    module: Module,
}

impl RefArray {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The heap reference.
    pub fn as_ref(&self) -> Ref {
        self.r
    }
    /// The element class.
    pub fn elem_class(&self) -> &str {
        &self.module.prog.verified().class(self.elem).name
    }
    /// The module of the element class.
    pub fn module(&self) -> &Module {
        &self.module
    }
}

impl From<&RefArray> for Arg {
    fn from(a: &RefArray) -> Arg {
        Arg::Ref {
            r: a.r,
            rt: a.module.rt.inner.id,
        }
    }
}

impl Module {
    /// A new array of `len` null references to `class` (`class[]`).
    pub fn new_ref_array(&self, class: &str, len: usize) -> Result<RefArray, OffloadError> {
        let c = self.prog.verified().class_named(class).ok_or_else(|| {
            OffloadError::Lookup(format!("module `{}` has no class `{class}`", self.name))
        })?;
        let len = u32::try_from(len)
            .ok()
            .filter(|&l| l <= i32::MAX as u32)
            .ok_or_else(|| {
                OffloadError::Handle(format!("array length {len} exceeds {}", i32::MAX))
            })?;
        let at = Allocator::alloc_host(
            &self.rt.inner.heap,
            Header::Array {
                elem: self.prog.global_elem(Elem::Class(c)),
                dims: 1,
                len,
            },
        )?;
        Ok(RefArray {
            r: Ref(at),
            len,
            elem: c,
            module: self.clone(),
        })
    }

    fn ref_slot(&self, a: &RefArray, i: usize) -> Result<usize, OffloadError> {
        if a.module.rt.inner.id != self.rt.inner.id || !Arc::ptr_eq(&a.module.prog, &self.prog) {
            return Err(OffloadError::Handle(
                "the array belongs to another module".into(),
            ));
        }
        if i >= a.len() {
            return Err(OffloadError::Handle(format!(
                "index {i} is out of bounds of an array of {}",
                a.len()
            )));
        }
        Ok(a.r.byte_offset() + 8 + i * 4)
    }

    /// Store a reference (null, or an instance of the element class) in
    /// element `i`.
    pub fn set_element(
        &self,
        a: &RefArray,
        i: usize,
        value: impl Into<Arg>,
    ) -> Result<(), OffloadError> {
        let off = self.ref_slot(a, i)?;
        match value.into() {
            Arg::Ref { r, rt }
                if rt == self.rt.inner.id
                    && (r.is_null() || self.is_instance(r, Type::Class(a.elem))?) =>
            {
                self.rt.inner.heap.store32(off, r.0)?;
                Ok(())
            }
            Arg::Ref { r, .. } if !r.is_null() => Err(OffloadError::Lookup(format!(
                "cannot store a {} in an element of `{}[]`",
                self.runtime_type(r)?,
                a.elem_class()
            ))),
            v => Err(OffloadError::Lookup(format!(
                "cannot store {} in an element of `{}[]`",
                arg_kind(v),
                a.elem_class()
            ))),
        }
    }

    /// Element `i`: `None` for null, else the reference and the name of
    /// its runtime class.
    pub fn element(&self, a: &RefArray, i: usize) -> Result<Option<(Ref, String)>, OffloadError> {
        let off = self.ref_slot(a, i)?;
        let r = Ref(self.rt.inner.heap.load32(off)?);
        if r.is_null() {
            return Ok(None);
        }
        Ok(Some((
            r,
            self.prog.header_type_name(self.rt.inner.heap.header(r)?),
        )))
    }

    /// Read a reference field of an object.
    pub fn get_ref_field(&self, o: &Object, name: &str) -> Result<Ref, OffloadError> {
        let (off, ty) = self.field_of(o, name)?;
        if !ty.is_ref() {
            return Err(OffloadError::Lookup(format!(
                "field `{name}` has type {}, not a reference",
                self.prog.verified().type_name(ty)
            )));
        }
        Ok(Ref(self.rt.inner.heap.load32(off)?))
    }

    /// Every field of `o` (inherited ones first) with its type and value,
    /// as text: numbers as Rust prints them, references as `null` or
    /// `Type@offset`.
    pub fn fields(&self, o: &Object) -> Result<Vec<(String, String, String)>, OffloadError> {
        let v = self.prog.verified();
        let mut chain: Vec<ClassId> = v.ancestors(o.class).collect();
        chain.reverse();
        let heap = &self.rt.inner.heap;
        let mut out = Vec::new();
        for c in chain {
            for &f in &v.class(c).fields {
                let fd = v.field(f);
                let (off, ty) = self.field_of(o, &fd.name)?;
                let text = match ty {
                    Type::I32 => (heap.load32(off)? as i32).to_string(),
                    Type::F32 => format!("{:?}", f32::from_bits(heap.load32(off)?)),
                    Type::I64 => (heap.load64(off)? as i64).to_string(),
                    Type::F64 => format!("{:?}", f64::from_bits(heap.load64(off)?)),
                    _ => {
                        let r = Ref(heap.load32(off)?);
                        match self.type_of(r)? {
                            None => "null".to_string(),
                            Some(t) => format!("{t}@{:#x}", r.byte_offset()),
                        }
                    }
                };
                out.push((fd.name.clone(), v.type_name(ty), text));
            }
        }
        Ok(out)
    }

    /// A handle to the object `r` points at (made by a kernel, or found in
    /// a field or array element): an error unless it is an instance of one
    /// of this module's classes.
    pub fn object_at(&self, r: Ref) -> Result<Object, OffloadError> {
        let h = self.rt.inner.heap.header(r)?;
        match h {
            Header::Object { class, .. } => match self.prog.local_class(class) {
                Some(c) => Ok(Object {
                    r,
                    class: c,
                    module: self.clone(),
                }),
                None => Err(OffloadError::Handle(format!(
                    "{} is an object of another module",
                    self.runtime_type(r)?
                ))),
            },
            _ => Err(OffloadError::Handle(format!(
                "{} is not an object",
                self.runtime_type(r)?
            ))),
        }
    }

    /// The runtime type of the object `r` points at, as the text form
    /// writes it (`None` for null).
    pub fn type_of(&self, r: Ref) -> Result<Option<String>, OffloadError> {
        if r.is_null() {
            return Ok(None);
        }
        Ok(Some(
            self.prog.header_type_name(self.rt.inner.heap.header(r)?),
        ))
    }
}

fn arg_kind(a: Arg) -> &'static str {
    match a {
        Arg::I32(_) => "an i32",
        Arg::I64(_) => "an i64",
        Arg::F32(_) => "an f32",
        Arg::F64(_) => "an f64",
        Arg::Ref { .. } => "a reference",
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
