//! The runtime: heap, workers, devices, loaded modules and host handles.
//!
//! `mod.rs` holds the [`Runtime`] and its shared state; `builder.rs` how
//! one is configured; `module.rs` a loaded [`Module`]: its kernels,
//! closures and objects; `values.rs` the host-side handles (arguments,
//! arrays, objects) and copying arrays in and out of the heap.

use crate::adaptive::{KernelInfo, KernelState};
use crate::cpu::CpuDevice;
use crate::cuda::Gpu;
pub use crate::device::Device;
use crate::env::{KernelCall, LaunchEnv};
use crate::error::OffloadError;
use crate::gc::Root;
use crate::policy::Policy;
use crate::report::LaunchReport;
use offload_heap::layout::{Header, array_elem_kind, kind_size};
use offload_heap::{AllocPolicy, Allocator, Heap, HeapConfig, Ref};
use offload_host_interp::Program;
use offload_ir::{ClassId, Elem, FuncId, Type};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

mod builder;
mod gpus;
mod heap_view;
mod inflight;
mod module;
mod range;
mod reduce;
mod summed;
mod values;

pub(crate) use builder::PolicyFactory;
pub use builder::{DEFAULT_DEOPT_RECORDS, MAX_DEOPT_RECORDS, MAX_WORKERS, RuntimeBuilder};
pub use heap_view::HeapView;
pub use inflight::{LaunchHandle, ReduceHandle};
pub use range::LaunchRange;
pub use reduce::{Combine, Reduced, Reducible, Scalar};
pub use values::{Arg, Array, Element, HeapRef, Object, RefArray};

thread_local! {
    /// The id of the runtime whose safepoint operation this thread is
    /// running (0: none).
    static IN_SAFEPOINT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// What a runtime shares between its clones.
#[derive(Debug)]
pub(crate) struct Inner {
    /// The runtime's id (an array handle knows its runtime's).
    pub(crate) id: u64,
    /// What every launch needs: heap, workers, control word, settings,
    /// allocator and save-area pool. Devices see only this.
    pub(crate) env: LaunchEnv,
    /// The CPU device: its JIT and compiled code.
    cpu: CpuDevice,
    /// The CUDA device, when a usable GPU was found.
    /// The GPUs (none unless the device is CUDA).
    gpus: Vec<Gpu>,
    /// Why the runtime runs on another device than asked (or a note that
    /// the GPU is a simulation).
    fallback: Option<String>,
    policy_factory: PolicyFactory,
    /// The adaptive state of every kernel launched, by (module id, kernel).
    kernels: dashmap::DashMap<(u64, FuncId), Arc<Mutex<KernelState>>>,
    next_module: AtomicU64,
    /// The launches in flight, and the rule that orders them.
    pub(crate) inflight: inflight::InFlight,
    /// The threads that run them, kept between launches (a fresh thread
    /// per launch cost about 0.15 ms more: the spawn, and a first dispatch
    /// to the launch team from a thread it has not seen).
    launchers: offload_gang::kept::Kept,
}

/// The most threads kept waiting for a launch in flight.
const LAUNCH_THREADS_KEPT: usize = 8;

impl Inner {
    /// Forget everything kept for module `id` (its last handle is gone):
    /// kernel states, and compiled code on every device.
    fn forget_module(&self, id: u64) {
        self.kernels.retain(|k, _| k.0 != id);
        self.cpu.forget_module(id);
        for g in &self.gpus {
            g.forget_module(id);
        }
    }

    pub(crate) fn new(
        env: LaunchEnv,
        cpu: CpuDevice,
        gpus: Vec<Gpu>,
        fallback: Option<String>,
        policy_factory: PolicyFactory,
    ) -> Inner {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Inner {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            env,
            cpu,
            gpus,
            fallback,
            policy_factory,
            kernels: dashmap::DashMap::new(),
            next_module: AtomicU64::new(0),
            inflight: inflight::InFlight::default(),
            launchers: offload_gang::kept::Kept::new("offload-launch", LAUNCH_THREADS_KEPT),
        }
    }
}

/// The offload runtime: one managed heap, a pool of workers, a device.
/// Cloning is cheap and shares everything.
///
/// [`Runtime::new`] picks the device (the GPU when one is usable, else
/// every CPU core); [`Runtime::builder`] configures one. Arrays live in
/// the runtime's heap: make them from slices, launch kernels over them,
/// read them back.
///
/// ```
/// use offload::{Device, Runtime, kernel, par_offload};
///
/// let rt = Runtime::builder().device(Device::Cpu).workers(2).build()?;
/// let v = rt.array(&[1i32, 2, 3, 4])?;
/// par_offload(0..4, kernel!(move |i| v[i] = v[i] * 10))?;
/// assert_eq!(rt.read(&v)?, [10, 20, 30, 40]);
/// // Writes into an array, and part of one read back.
/// rt.write(&v, 1, &[7, 8])?;
/// let mut first = [0; 3];
/// rt.read_into(&v, 0, &mut first)?;
/// assert_eq!(first, [10, 7, 8]);
/// // A collection keeps what handles reach.
/// rt.collect()?;
/// assert_eq!(rt.read(&v)?, [10, 7, 8, 40]);
/// # Ok::<(), offload::OffloadError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
    /// The GPU this handle's launches run on ([`Runtime::on_gpu`]), by its
    /// place in `inner.gpus`; `None`: the one with the fewest running.
    pub(crate) pinned: Option<usize>,
}

/// A loaded, verified module: kernels, functions and classes, from source
/// ([`Runtime::load_source`], `kernels!`), bytecode ([`Runtime::load`]) or
/// a file of either ([`Runtime::load_file`]). It makes closures of its
/// kernels and objects of its classes; it and its closures keep its
/// compiled code alive.
///
/// ```
/// use offload::{Runtime, par_offload};
///
/// let rt = Runtime::builder().workers(2).build()?;
/// let m = rt.load_source(
///     "count.ofk",
///     "#[kernel] fn count(i: i32, hits: &mut [i32], step: i32) { hits[i] = i * step; }",
/// )?;
/// assert_eq!(m.kernels(), ["count"]);
/// let hits = rt.new_array::<i32>(4)?;
/// par_offload(0..4, m.closure("count", [(&hits).into(), 3.into()])?)?;
/// assert_eq!(rt.read(&hits)?, [0, 3, 6, 9]);
/// // A kernel's arguments are checked against its parameters.
/// assert!(m.closure("count", [3.into(), (&hits).into()]).is_err());
/// # Ok::<(), offload::OffloadError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Module {
    pub(crate) rt: Runtime,
    pub(crate) prog: Arc<Program>,
    pub(crate) name: String,
    /// Unique within the runtime, never reused: the key of compiled code.
    pub(crate) id: u64,
    /// Shared by the module's clones (and its closures): when the last
    /// goes, the runtime forgets the module's compiled code.
    life: Arc<ModuleLife>,
}

/// The life of a loaded module: its runtime keeps the module's compiled
/// code and kernel states until this drops.
#[derive(Debug)]
struct ModuleLife {
    rt: std::sync::Weak<Inner>,
    id: u64,
}

impl Drop for ModuleLife {
    fn drop(&mut self) {
        if let Some(inner) = self.rt.upgrade() {
            inner.forget_module(self.id);
        }
    }
}

/// A module held without keeping its runtime alive: what the `kernel!`
/// and `kernels!` sites (statics) keep per runtime, so that a runtime a
/// program drops is freed, and its entries go with it.
#[derive(Clone, Debug)]
pub(crate) struct WeakModule {
    prog: Arc<Program>,
    name: String,
    /// Kept (it names the runtime weakly, and the module's id): the
    /// site's module stays compiled while its runtime lives.
    life: Arc<ModuleLife>,
}

impl WeakModule {
    /// The module, while its runtime lives.
    pub(crate) fn upgrade(&self) -> Option<Module> {
        Some(Module {
            rt: Runtime {
                inner: self.life.rt.upgrade()?,
                pinned: None,
            },
            prog: self.prog.clone(),
            name: self.name.clone(),
            id: self.life.id,
            life: self.life.clone(),
        })
    }

    /// Whether its runtime is gone.
    pub(crate) fn is_dead(&self) -> bool {
        self.life.rt.strong_count() == 0
    }
}

impl Module {
    /// This module, not keeping its runtime alive.
    pub(crate) fn downgrade(&self) -> WeakModule {
        WeakModule {
            prog: self.prog.clone(),
            name: self.name.clone(),
            life: self.life.clone(),
        }
    }
}

/// A kernel with its captured values, type-checked against the signature:
/// what [`crate::par_offload`] launches (as does a `kernel!` closure).
/// Launch it as often as needed; each launch sees the arrays as they are
/// then.
///
/// ```
/// use offload::{Runtime, par_offload};
///
/// let rt = Runtime::builder().workers(2).build()?;
/// let m = rt.load_file("examples/kernels/saxpy.ofk")?;
/// let x = rt.array(&[1.0f32; 8])?;
/// let y = rt.array(&[0.0f32; 8])?;
/// let saxpy = m.closure("saxpy", [2.0f32.into(), (&x).into(), (&y).into()])?;
/// par_offload(0..8, &saxpy)?;
/// par_offload(0..8, &saxpy)?;
/// assert_eq!(rt.read(&y)?, [4.0; 8]);
/// # Ok::<(), offload::OffloadError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Closure {
    pub(crate) module: Module,
    pub(crate) kernel: FuncId,
    /// The captured values as raw slots; the reference ones are 0 here and
    /// live in `refs`.
    pub(crate) captures: Vec<u64>,
    /// The captured references: (capture index, root).
    pub(crate) refs: Vec<(usize, Root)>,
    /// The dimensions of the kernel's range (`offload_lang::ranges`).
    pub(crate) dims: usize,
    /// The captures its launches sum into ([`Closure::summed`]), by
    /// capture index.
    pub(crate) summed: Vec<usize>,
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
    /// Returns `op`'s result and the time-to-safepoint. `op` sees the heap
    /// ([`HeapView`]) and writes through handles ([`Runtime::write`], …).
    pub fn safepoint<R>(&self, op: impl FnOnce(HeapView<'_>) -> R) -> (R, std::time::Duration) {
        // Inside this runtime's safepoint operation already: every worker
        // is stopped, so a nested one runs at once.
        if self.in_safepoint() {
            return (
                op(HeapView(&self.inner.env.heap)),
                std::time::Duration::ZERO,
            );
        }
        self.inner.env.control.safepoint(|| {
            // The operation may read and write through handles: it has
            // the heap to itself already (see `Runtime::running`).
            struct Restore(u64);
            impl Drop for Restore {
                fn drop(&mut self) {
                    IN_SAFEPOINT.with(|f| f.set(self.0));
                }
            }
            let _restore = Restore(IN_SAFEPOINT.with(|f| f.replace(self.inner.id)));
            op(HeapView(&self.inner.env.heap))
        })
    }

    /// Whether this thread is running one of this runtime's safepoint
    /// operations ([`Runtime::safepoint`]).
    fn in_safepoint(&self) -> bool {
        IN_SAFEPOINT.with(std::cell::Cell::get) == self.inner.id
    }

    /// [`OffloadError::InSafepoint`] when this thread is running one of
    /// this runtime's safepoint operations: `what` would wait for the
    /// workers the safepoint stopped, and they for the operation.
    fn refuse_in_safepoint(&self, what: &'static str) -> Result<(), OffloadError> {
        if self.in_safepoint() {
            return Err(OffloadError::InSafepoint { what });
        }
        Ok(())
    }

    /// Before the host reads or writes the array of numbers `array` (by
    /// handle identity; `None`: objects and arrays of references): wait
    /// for the launches in flight that may touch it (`inflight`'s rule) —
    /// unless this thread runs a safepoint's operation, which sees the
    /// heap as the stopped launches left it.
    pub(crate) fn settle(&self, array: Option<usize>) {
        if !self.in_safepoint() {
            self.inner.inflight.settle(array);
        }
    }

    /// Count this thread as a running worker, so that no collection starts
    /// until the guard drops — unless it is running a safepoint's
    /// operation ([`Runtime::safepoint`]), which has the heap to itself
    /// already.
    pub(crate) fn running(&self) -> Option<offload_host_interp::Running<'_>> {
        if self.in_safepoint() {
            None
        } else {
            Some(self.inner.env.control.enter())
        }
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
    ///
    /// Inside one of this runtime's safepoint operations, where every
    /// worker is stopped already, it counts the interrupt (which the
    /// workers see when the safepoint releases them) and returns zero.
    pub fn interrupt(&self) -> std::time::Duration {
        if self.in_safepoint() {
            self.inner.env.control.interrupt_stopped();
            return std::time::Duration::ZERO;
        }
        self.inner.env.control.interrupt()
    }

    /// How many safepoints this runtime has completed.
    pub fn safepoint_count(&self) -> u64 {
        self.inner.env.control.count()
    }

    /// The null reference, as an argument.
    pub fn null(&self) -> Arg {
        Arg::Ref(HeapRef {
            r: Root::null(),
            rt: self.inner.id,
        })
    }

    /// The device kernels run on.
    pub fn device(&self) -> Device {
        self.inner.env.settings.device
    }

    /// Why the runtime is not on the device it was asked for (or, by
    /// default, on CUDA), or that its CUDA device is offload's virtual GPU
    /// (a simulator, not hardware): `None` when it is on that device and
    /// the device is real.
    pub fn fallback(&self) -> Option<&str> {
        self.inner.fallback.as_deref()
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.inner.env.workers
    }

    /// Wait until every background compile started so far (the optimized
    /// tier of kernel versions already launched) has finished, so that the
    /// next launches run optimized code — before timing launches, say.
    pub fn finish_compiles(&self) {
        self.inner.cpu.finish_compiles();
    }

    /// The heap, to look at: sizes, headers, words, the walk
    /// ([`HeapView`]). Safe code writes to it only through the typed
    /// handles, which never touch a header that compiled code trusts.
    pub fn heap(&self) -> HeapView<'_> {
        HeapView(&self.inner.env.heap)
    }

    /// The heap itself, with every way to write to it.
    ///
    /// # Safety
    ///
    /// Compiled kernels trust the heap: every write through the returned
    /// reference must keep each header true (an array's length, an
    /// object's class), the heap parseable from its start to its top, and
    /// every reference field null or the start of an object; and no
    /// launch may be running on this runtime while it writes.
    pub unsafe fn raw_heap(&self) -> &Heap {
        &self.inner.env.heap
    }

    /// Load a module from `.obc` text; `name` names it in messages.
    pub fn load(&self, name: &str, src: &str) -> Result<Module, OffloadError> {
        let verified = offload_ir::load(name, src).map_err(|d| {
            let mut rendered = crate::diagnostics::render_all(&d.0, src);
            // Source text given to the bytecode loader fails on its first
            // `fn`: say what would load it.
            if name.ends_with(".ofk") || src.contains("#[kernel]") {
                rendered.push_str(
                    "help: this looks like kernel source (`.ofk`), not bytecode: load it with `Runtime::load_source`\n",
                );
            }
            OffloadError::Load {
                name: name.to_string(),
                rendered,
                diagnostics: d,
            }
        })?;
        self.install(name, verified)
    }

    /// Load a module from source text (`.ofk`: kernels in Rust syntax,
    /// compiled by `offload-lang`); `name` names it in messages. Errors
    /// point at the source.
    pub fn load_source(&self, name: &str, src: &str) -> Result<Module, OffloadError> {
        let verified =
            offload_lang::compile_verified(name, src).map_err(|d| OffloadError::Load {
                name: name.to_string(),
                rendered: crate::diagnostics::render_all(&d.0, src),
                diagnostics: d,
            })?;
        self.install(name, verified)
    }

    /// Make a verified module's classes known to the collector and hand it
    /// out.
    fn install(&self, name: &str, verified: offload_ir::Verified) -> Result<Module, OffloadError> {
        let mut shapes = self
            .inner
            .env
            .gc
            .shapes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let base = shapes.len() as u32;
        let count = verified.classes.len() as u32;
        if u64::from(base) + u64::from(count) > u64::from(offload_heap::layout::MAX_ARRAY_CLASS) {
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
        let id = self.inner.next_module.fetch_add(1, Ordering::Relaxed);
        Ok(Module {
            rt: self.clone(),
            prog,
            name: name.to_string(),
            id,
            life: Arc::new(ModuleLife {
                rt: Arc::downgrade(&self.inner),
                id,
            }),
        })
    }

    /// Load a module from a file: source (`.ofk`) or bytecode (any other
    /// extension, `.obc` by convention).
    pub fn load_file(&self, path: impl AsRef<std::path::Path>) -> Result<Module, OffloadError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| OffloadError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let src = crate::diagnostics::utf8_text(&path.display().to_string(), bytes)
            .map_err(OffloadError::Setup)?;
        if path
            .extension()
            .is_some_and(|e| e == offload_lang::EXTENSION)
        {
            self.load_source(&path.display().to_string(), &src)
        } else {
            self.load(&path.display().to_string(), &src)
        }
    }

    /// Run `closure` for every workitem in `range`, on the runtime's
    /// device: `lo..hi`, or a tuple of two or three ranges for a kernel
    /// over a 2-D or 3-D range ([`LaunchRange`]).
    pub fn par_offload(
        &self,
        range: impl Into<LaunchRange>,
        closure: &Closure,
    ) -> Result<LaunchReport, OffloadError> {
        self.owns(closure)?;
        self.launch_in_order(
            range.into(),
            closure,
            None,
            self.inner.env.settings.deadline,
        )
    }

    /// [`Runtime::par_offload`] with a deadline for this launch (instead of
    /// the runtime's, [`RuntimeBuilder::launch_deadline`]): still running
    /// `deadline` after it started, the launch is interrupted as
    /// [`Runtime::interrupt`] interrupts it — it alone: other launches on
    /// the runtime only pass the safepoint that stops its workers — and
    /// returns [`OffloadError::Interrupted`] with its report.
    pub fn par_offload_with_deadline(
        &self,
        range: impl Into<LaunchRange>,
        closure: &Closure,
        deadline: std::time::Duration,
    ) -> Result<LaunchReport, OffloadError> {
        self.owns(closure)?;
        self.launch_in_order(range.into(), closure, None, Some(deadline))
    }

    /// An error unless `closure` was made by this runtime.
    fn owns(&self, closure: &Closure) -> Result<(), OffloadError> {
        if closure.module.rt.inner.id != self.inner.id {
            return Err(OffloadError::Handle(
                "the closure belongs to another runtime".into(),
            ));
        }
        Ok(())
    }

    /// Launch `closure` over `range` within `deadline` and wait for it,
    /// after the launches in flight it may touch (`inflight`'s rule).
    /// Refused in a safepoint's operation before it waits: the launches
    /// it would wait for are stopped there.
    fn launch_in_order(
        &self,
        range: LaunchRange,
        closure: &Closure,
        reduce: Option<Combine>,
        deadline: Option<std::time::Duration>,
    ) -> Result<LaunchReport, OffloadError> {
        self.refuse_in_safepoint("a launch")?;
        let inflight = &self.inner.inflight;
        inflight.wait_for(&inflight.before(&inflight::Footprint::of(closure)));
        self.launch_registered(range, closure, reduce, deadline)
    }

    /// Launch `closure` over `range` on the runtime's devices, within
    /// `deadline`, now (its callers have ordered it after the launches in
    /// flight it may touch, and refused it in a safepoint's operation);
    /// `reduce` combines the values of a reducing kernel, and must be given
    /// exactly for one.
    fn launch_registered(
        &self,
        range: LaunchRange,
        closure: &Closure,
        reduce: Option<Combine>,
        deadline: Option<std::time::Duration>,
    ) -> Result<LaunchReport, OffloadError> {
        reduce::check(closure, reduce)?;
        // A 2-D or 3-D range runs flattened, its shape in the kernel's
        // last parameters (`offload_lang::ranges`).
        let narrowed = closure.module.prog.verified().func(closure.kernel).params()[0].name
            == offload_lang::ranges::NARROWED_FLAT;
        let (range, shape_args, shape) =
            range.flatten(closure.dims, narrowed, closure.kernel_name())?;
        let devices = crate::devices::Devices {
            cpu: &self.inner.cpu,
            gpus: match self.pinned {
                Some(k) => &self.inner.gpus[k..=k],
                None => &self.inner.gpus,
            },
            pinned: self.pinned.is_some(),
        };
        let state = self.kernel_state(closure);
        let env = &self.inner.env;
        // A collection the heap is due for belongs to this launch: its
        // time is the report's `collect` phase, its pause in the report's
        // `gc` (a first launch after big allocations was 8 ms longer than
        // its report said).
        let gc_before = env.gc.totals();
        let collected = if env.gc.due(&env.heap) {
            let t = std::time::Instant::now();
            self.collect()?;
            t.elapsed()
        } else {
            std::time::Duration::ZERO
        };
        // The copies of the arrays it sums into (`summed.rs`).
        let copies = self.copies(closure, range.end.wrapping_sub(range.start) as u64)?;
        // The launch's captures, read from the closure's roots and
        // registered as roots of the launch before a collection can move
        // them (this thread is a running worker meanwhile).
        let running = env.control.enter();
        let captures: Box<[AtomicU64]> = closure
            .capture_cells()
            .into_iter()
            .chain(shape_args.into_iter().map(AtomicU64::new))
            .collect();
        if let Some(c) = &copies {
            c.fill(&captures);
        }
        let roots = crate::gc::LaunchRoots {
            captures: &captures,
            ref_captures: closure.refs.iter().map(|(i, _)| *i).collect(),
            copies: copies.as_ref().map_or(&[], |c| &c.cells),
            area: None,
            alloc: None,
        };
        let _registered = env.gc.launch(&roots);
        drop(running);
        let shaped = |mut r: LaunchReport| {
            r.shape = shape.clone();
            r
        };
        let r = crate::launch::launch(
            env,
            devices,
            closure.call(&captures, reduce, copies.as_ref().map(|c| c.table())),
            &state,
            range,
            deadline,
            (gc_before, collected),
        );
        // What the workitems added to the copies goes into the arrays,
        // whatever the launch's outcome (an interrupted or throwing launch
        // ran some workitems).
        let added = copies
            .as_ref()
            .map_or(Ok(()), |c| c.add_into(self, closure));
        r.and_then(|rep| added.map(|()| rep))
            .map(shaped)
            .map_err(|e| match e {
                OffloadError::Exceptions(mut x) => {
                    x.report = shaped(x.report);
                    OffloadError::Exceptions(x)
                }
                OffloadError::Interrupted(r) => OffloadError::Interrupted(Box::new(shaped(*r))),
                other => other,
            })
    }

    /// The adaptive state of `closure`'s kernel (created on first use).
    pub(crate) fn kernel_state(&self, closure: &Closure) -> Arc<Mutex<KernelState>> {
        self.inner
            .kernels
            .entry((closure.module.id, closure.kernel))
            .or_insert_with(|| {
                Arc::new(Mutex::new(KernelState::new(
                    &self.inner.env.settings,
                    (self.inner.policy_factory)(),
                    closure.module.prog.clone(),
                    closure.kernel,
                )))
            })
            .clone()
    }

    /// The adaptive state of kernel `k` of the module with id `module`, if
    /// it has been launched.
    pub(crate) fn existing_kernel_state(
        &self,
        module: u64,
        k: FuncId,
    ) -> Option<Arc<Mutex<KernelState>>> {
        self.inner.kernels.get(&(module, k)).map(|s| s.clone())
    }

    /// The settings launches read.
    pub(crate) fn settings(&self) -> &crate::env::Settings {
        &self.inner.env.settings
    }

    /// The CPU device's JIT.
    pub(crate) fn cpu_jit(&self) -> &offload_jit::CpuJit {
        self.inner.cpu.jit()
    }

    /// What the runtime knows about `closure`'s kernel: its version and
    /// speculations, its deopt counters per (version, site, reason), where
    /// it runs now, and its policy's decisions. `None` before its first
    /// launch.
    pub fn kernel_info(&self, closure: &Closure) -> Option<KernelInfo> {
        let st = self.existing_kernel_state(closure.module.id, closure.kernel)?;
        let st = st.lock().unwrap_or_else(|e| e.into_inner());
        Some(st.info(&self.inner.env.settings))
    }

    /// Modules whose kernels the runtime keeps state or compiled code for:
    /// those launched that still have a handle (a [`Module`], a
    /// [`Closure`], or a `kernel!`/`kernels!` site's cache). A module's
    /// compiled code and kernel states go when its last handle does.
    pub fn kept_modules(&self) -> usize {
        let mut ids: std::collections::BTreeSet<u64> =
            self.inner.kernels.iter().map(|e| e.key().0).collect();
        ids.extend(self.inner.cpu.module_ids());
        ids.len()
    }

    /// Walk and verify the whole heap (between launches): every object has a
    /// valid header and size, and every reference points at an object.
    /// Objects of every module ever loaded into the runtime are known,
    /// whether or not `modules` holds it; `modules` must be modules of this
    /// runtime (kept for callers that name what they check).
    pub fn verify_heap(
        &self,
        modules: &[&Module],
    ) -> Result<offload_heap::WalkStats, OffloadError> {
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
            .env
            .gc
            .shapes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let _running = self.running();
        Ok(self
            .inner
            .env
            .heap
            .verify(|g| shapes.get(g as usize).cloned())?)
    }

    /// Collect the heap now: bring every launch in flight to a safepoint,
    /// free every object no handle, launch or parked worker can reach, and
    /// slide the rest down so that the heap's top is the end of the live
    /// data (see the collector's docs, `src/gc/mod.rs`). Handles stay
    /// valid; a bare [`offload_heap::Ref`] taken before does not. Callable
    /// from any thread but a launch's workers.
    pub fn collect(&self) -> Result<offload_heap::GcStats, OffloadError> {
        self.refuse_in_safepoint("a collection (Runtime::collect)")?;
        let env = &self.inner.env;
        env.gc.collect(&env.heap, &env.control)
    }

    /// Every collection so far, added up.
    pub fn gc_totals(&self) -> crate::GcSummary {
        self.inner.env.gc.totals()
    }

    /// The last collection's figures (`None` before the first).
    pub fn last_collection(&self) -> Option<offload_heap::GcStats> {
        self.inner.env.gc.last()
    }

    /// Handles alive now (each [`Root`] cell counts once, however many
    /// clones share it).
    pub fn live_handles(&self) -> usize {
        self.inner.env.gc.handles.live()
    }

    /// Run `f` as a running worker: no collection starts until it returns,
    /// so the references it reads from handles stay put.
    pub(crate) fn hold<R>(&self, f: impl FnOnce(&Heap) -> R) -> R {
        let _running = self.running();
        f(&self.inner.env.heap)
    }

    /// Allocate an object with header `h` from the host and root it; when
    /// the heap is full, collect and try once more.
    pub(crate) fn alloc_rooted(&self, h: Header) -> Result<Root, OffloadError> {
        let env = &self.inner.env;
        let running = self.running();
        // Inside a safepoint's operation no collection can run.
        let mut collected = running.is_none();
        loop {
            match Allocator::alloc_host(&env.heap, h) {
                Ok(at) => return Ok(env.gc.handles.root(Ref(at))),
                Err(offload_heap::HeapError::Exhausted { .. }) if !collected => {
                    let mut none = |_: &mut dyn FnMut(&mut u32)| {};
                    if let Some(r) = env
                        .gc
                        .collect_from_worker(&env.heap, &env.control, &mut none)
                    {
                        r?;
                        collected = true;
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// A root for `r`, read under [`Runtime::hold`] (or by a launch that
    /// just ended): the handle that keeps it.
    pub(crate) fn root(&self, r: Ref) -> Root {
        self.inner.env.gc.handles.root(r)
    }
}
impl Closure {
    /// The kernel call a launch of this closure makes, with its captures
    /// as the launch holds them.
    pub(crate) fn call<'a>(
        &'a self,
        captures: &'a [AtomicU64],
        reduce: Option<Combine>,
        copies: Option<crate::env::CopyTable<'a>>,
    ) -> KernelCall<'a> {
        KernelCall {
            prog: &self.module.prog,
            kernel: self.kernel,
            captures,
            module: self.module.id,
            reduce,
            copies,
            split: None,
        }
    }

    /// The captures now, as cells a launch holds (and a collection
    /// updates). Read them where no collection can start (a running
    /// worker).
    pub(crate) fn capture_cells(&self) -> Box<[AtomicU64]> {
        let cells: Box<[AtomicU64]> = self.captures.iter().map(|&c| AtomicU64::new(c)).collect();
        for (i, r) in &self.refs {
            cells[*i].store(u64::from(r.get().0), Ordering::Relaxed);
        }
        cells
    }

    /// The kernel.
    pub fn kernel(&self) -> FuncId {
        self.kernel
    }

    /// The dimensions of the ranges it runs over: 1 (`lo..hi`), or 2 or 3
    /// for a kernel that takes its indices as a tuple ([`LaunchRange`]).
    pub fn dims(&self) -> usize {
        self.dims
    }
    /// The captured values as raw slots (what the interpreter receives);
    /// references as they are now (valid until the next collection).
    pub fn captures(&self) -> Vec<u64> {
        self.capture_cells()
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
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

/// The live runtimes, by id: `kernel!` finds the runtime of the arrays it
/// captures here (an array knows only its runtime's id).
static LIVE: std::sync::LazyLock<dashmap::DashMap<u64, std::sync::Weak<Inner>>> =
    std::sync::LazyLock::new(dashmap::DashMap::new);

impl Runtime {
    /// Register a new runtime, so that [`Runtime::by_id`] finds it.
    pub(crate) fn register(self) -> Runtime {
        LIVE.retain(|_, w| w.strong_count() > 0);
        LIVE.insert(self.inner.id, Arc::downgrade(&self.inner));
        self
    }

    /// The live runtime with this id, if any.
    pub fn by_id(id: u64) -> Option<Runtime> {
        LIVE.get(&id)
            .and_then(|w| w.upgrade())
            .map(|inner| Runtime {
                inner,
                pinned: None,
            })
    }

    /// This runtime's id (unique in the process; what its arrays and
    /// objects name it by).
    pub fn id(&self) -> u64 {
        self.inner.id
    }
}
