//! Configuring a [`Runtime`]: [`RuntimeBuilder`].

use super::*;
use crate::env::{PtxRewrite, Settings};

/// Configures a [`Runtime`]: the device, the workers, the heap's sizes,
/// and the knobs of compilation, allocation and the collector. Each
/// setting has its default; [`RuntimeBuilder::build`] makes the runtime.
///
/// ```
/// use offload::{Device, Runtime};
///
/// let rt = Runtime::builder()
///     .device(Device::Cpu)
///     .workers(2)
///     .initial_heap(16 << 20)
///     .max_heap(256 << 20)
///     .launch_deadline(Some(std::time::Duration::from_secs(10)))
///     .build()?;
/// assert_eq!((rt.device(), rt.workers()), (Device::Cpu, 2));
/// // `strict` makes a device that cannot be had an error, not a fallback.
/// let cuda = Runtime::builder().device(Device::Cuda).strict(true).build();
/// assert!(cuda.is_ok() || cuda.unwrap_err().to_string().contains("CUDA"));
/// # Ok::<(), offload::OffloadError>(())
/// ```
#[derive(Clone, Debug)]
pub struct RuntimeBuilder {
    heap: HeapConfig,
    /// Whether [`RuntimeBuilder::initial_heap`] was called: if not, the
    /// default initial size is lowered to a smaller maximum.
    initial_heap_set: bool,
    workers: Option<usize>,
    /// `None`: CUDA when a GPU is present, else the CPU (reported).
    device: Option<Device>,
    /// The GPUs to use, by the driver's numbers (`None`: every GPU).
    gpus: Option<Vec<usize>>,
    split: Option<Vec<Device>>,
    split_even: bool,
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
    wait_in_place: bool,
    warmup: u32,
    spec_cfg: offload_jit::SpecConfig,
    tiered: bool,
    tier_up: bool,
    /// The policy, or the unknown name asked for (an error at `build`).
    recompile_policy: Result<PolicyFactory, String>,
    rewrite_ptx: Option<PtxRewrite>,
    gc: crate::GcPolicy,
}

/// Makes one recompilation policy per kernel.
#[derive(Clone)]
pub(crate) struct PolicyFactory(Arc<dyn Fn() -> Box<dyn Policy> + Send + Sync>);

impl PolicyFactory {
    pub(super) fn named(name: &str) -> Option<PolicyFactory> {
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
    /// The defaults ([`Runtime::builder`]).
    pub(super) fn new() -> RuntimeBuilder {
        RuntimeBuilder {
            heap: HeapConfig::default(),
            initial_heap_set: false,
            workers: None,
            device: None,
            gpus: None,
            split: None,
            split_even: false,
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
            wait_in_place: true,
            warmup: 0,
            spec_cfg: offload_jit::SpecConfig::default(),
            tiered: true,
            tier_up: true,
            recompile_policy: PolicyFactory::named("never").ok_or_else(|| "never".to_string()),
            rewrite_ptx: None,
            gc: crate::GcPolicy::default(),
        }
    }

    /// Fault injection for tests: in every launch, TLAB refill number
    /// `first` (1-based) and every `every`-th after it (0: only `first`)
    /// fail for the allocation that does them (see
    /// [`offload_heap::RefillFault`]): compiled code deopts with
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
    /// optimized code once it is there — a launch still running then from
    /// its slots' next claims ([`RuntimeBuilder::tier_up`]). A first
    /// launch over 2^19 workitems or more waits for the optimized code
    /// (the quick tier would cost it more than the compile). Off: every
    /// version is compiled optimized before its first launch.
    pub fn tiered(mut self, on: bool) -> Self {
        self.tiered = on;
        self
    }

    /// A launch that began on the quick tier switches to the optimized
    /// code at its slots' next claims once that is ready (default on;
    /// [`crate::LaunchReport::quick_workitems`] says how much ran before).
    /// Off: a launch runs the code it began with to its end — for
    /// experiments on one tier (the tiers poll at different back-edges:
    /// the optimized code's unrolled loops poll once per round).
    pub fn tier_up(mut self, on: bool) -> Self {
        self.tier_up = on;
        self
    }

    /// Compile back-edge polls (default on). Off only to measure what they
    /// cost: a safepoint then waits until each slot's current workitem ends.
    pub fn back_edge_polls(mut self, on: bool) -> Self {
        self.compile.no_polls = !on;
        self
    }

    /// Find the class of a virtual call's receiver (and of an object under
    /// `instanceof` or `checkcast`) from the page it lies on on every
    /// device (`on`), or from its header (off). Objects the host allocates
    /// are placed on pages of their class (`offload_heap::pages`), and
    /// compiled code reads one tag from a small table instead of each
    /// object's header. Unset, each device does what is faster there
    /// ([`offload_jit::Dispatch::Auto`]: by address on the GPU, by header
    /// on the CPU).
    pub fn dispatch_by_address(mut self, on: bool) -> Self {
        self.compile.dispatch = if on {
            offload_jit::Dispatch::ByAddress
        } else {
            offload_jit::Dispatch::ByHeader
        };
        self
    }

    /// Resume stopped workitems on the device (default on): a workitem a
    /// safepoint (or a full heap) stopped at a loop's back-edge or an
    /// allocation is entered again in compiled code from its save record
    /// ([`offload_deopt::SiteMap::resumable`]) rather than finished by the
    /// interpreter. Off, for experiments: every stopped workitem is
    /// replayed, as before devices could resume records.
    pub fn reentry(mut self, on: bool) -> Self {
        self.compile.no_reentry = !on;
        self
    }

    /// On the GPU, at a safepoint that moves no object (`Runtime::safepoint`,
    /// an interrupt's rendezvous — not a collection), slots wait at their
    /// poll with their frames in registers while the host runs the
    /// operation on the resident heap, then go on (default on); off, they
    /// leave the grid with a record and a relaunch resumes them, as they
    /// always do for a collection. BENCHMARKS.md compares the two.
    pub fn gpu_wait_in_place(mut self, on: bool) -> Self {
        self.wait_in_place = on;
        self
    }

    /// Bytes the heap starts with (default 64 MiB, or the maximum when
    /// that is smaller). [`RuntimeBuilder::build`] refuses an initial size
    /// set above the maximum.
    pub fn initial_heap(mut self, bytes: usize) -> Self {
        self.heap.initial = bytes;
        self.initial_heap_set = true;
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
    /// Use the GPUs numbered `ordinals` (the driver's numbers, as
    /// `nvidia-smi` lists them) instead of every GPU the driver reports
    /// (the first eight of them, `offload_heap::MAX_MIRRORS`: more is an
    /// error at build).
    /// Each keeps its own image of the heap, coherent per 64 KiB chunk
    /// with the host's and the others'; a launch runs on the GPU with the
    /// fewest launches running (the first of them when one runs at a
    /// time). A number the driver does not report makes
    /// [`RuntimeBuilder::build`] fall back to the CPU (reported; an error
    /// in strict mode); an empty list is none.
    ///
    /// ```
    /// use offload::{Device, Runtime};
    ///
    /// // The first GPU only (the CPU device where there is none).
    /// let rt = Runtime::builder().gpus([0]).build()?;
    /// assert!(rt.device() == Device::Cuda || rt.fallback().is_some());
    /// # Ok::<(), offload::OffloadError>(())
    /// ```
    pub fn gpus(mut self, ordinals: impl IntoIterator<Item = usize>) -> Self {
        let mut v: Vec<usize> = Vec::new();
        for k in ordinals {
            if !v.contains(&k) {
                v.push(k);
            }
        }
        self.gpus = Some(v);
        self
    }
    /// Split every launch over several devices at once: `Device::Cuda`
    /// stands for every GPU of the runtime, `Device::Cpu` adds the CPU
    /// device. Each device takes parts of the range in turn, sized by its
    /// speed for the kernel in earlier launches, until none is left; the
    /// report has a row per device ([`crate::LaunchReport::split`]).
    /// Exactly once holds across the devices, and their writes to
    /// different elements of one array all land, in the same 64 KiB chunk
    /// too (docs/DESIGN.md, "One launch over several devices").
    ///
    /// Only kernels whose writes merge are split: captures of arrays of
    /// numbers and numbers, no allocation, atomics, virtual calls,
    /// reduction or sums into copies. Others run on one device as usual,
    /// and the report's `fallback` says why; so do launches pinned to a
    /// GPU ([`Runtime::on_gpu`]) and every launch of a runtime that is not
    /// on the CUDA device (no GPU: nothing to split over). The list must
    /// name `Cuda`; the interpreter takes no part (an error at build).
    ///
    /// ```
    /// use offload::{Device, Runtime};
    ///
    /// let rt = Runtime::builder()
    ///     .split_over([Device::Cpu, Device::Cuda])
    ///     .build()?;
    /// let m = rt.load_file("examples/kernels/saxpy.ofk")?;
    /// let x = rt.array(&[1.0f32; 100_000])?;
    /// let y = rt.array(&[1.0f32; 100_000])?;
    /// let r = rt.par_offload(0..100_000, &m.closure("saxpy", [2.0f32.into(), (&x).into(), (&y).into()])?)?;
    /// // With a GPU, the CPU and every GPU ran parts of the range.
    /// let ran: u64 = r.split.iter().map(|s| s.workitems).sum();
    /// assert!(r.split.is_empty() || ran == 100_000);
    /// assert_eq!(rt.read(&y)?[99_999], 3.0);
    /// # Ok::<(), offload::OffloadError>(())
    /// ```
    pub fn split_over(mut self, devices: impl IntoIterator<Item = Device>) -> Self {
        self.split = Some(devices.into_iter().collect());
        self
    }
    /// Cut a split launch ([`RuntimeBuilder::split_over`]) into equal
    /// shares, one per device, whatever the devices' speeds: every device
    /// runs a part of every launch, however slow, and the partition does
    /// not depend on timing. For tests that must run every device, and
    /// for comparing devices on equal shares; off by default.
    pub fn split_even(mut self, on: bool) -> Self {
        self.split_even = on;
        self
    }
    /// Run CUDA launches with at most `n` slots (device threads) instead
    /// of the default — one per 16 workitems of the range, at least a
    /// block per multiprocessor, at most the device's resident capacity —
    /// 1 makes a launch run its workitems in order, as the differential
    /// tests need.
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
    /// contention). See `offload_heap::alloc`, "Allocation buffers".
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
    /// When the collector runs besides on exhaustion and on request
    /// ([`crate::GcPolicy`]: the growth that triggers a collection before
    /// a launch, stress for tests, verification after each collection).
    pub fn gc(mut self, policy: crate::GcPolicy) -> Self {
        self.gc = policy;
        self
    }

    /// Make the runtime.
    pub fn build(self) -> Result<Runtime, OffloadError> {
        check_gc(&self.gc)?;
        let policy_factory = self.recompile_policy.map_err(|bad| OffloadError::Config {
            setting: "policy",
            problem: format!(
                "unknown recompilation policy `{bad}` (available: {})",
                crate::policy::NAMES.join(", ")
            ),
        })?;
        let workers = worker_count(self.workers, self.deopt_records)?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(workers)
            .thread_name(|i| format!("offload-worker-{i}"))
            .build()
            .map_err(|e| OffloadError::Setup(e.to_string()))?;
        let gang = offload_gang::Gang::new(workers, |i| format!("offload-slot-{i}"))
            .map_err(|e| OffloadError::Setup(format!("starting the CPU device's threads: {e}")))?;
        let (device, gpus, fallback) = pick_device(self.device, self.gpus.as_deref(), self.strict)?;
        let split = split_setting(self.split.as_deref())?;
        let settings = Settings {
            split,
            split_even: self.split_even,
            device,
            strict: self.strict,
            deadline: self.deadline,
            device_slots: self.device_slots,
            policy: self.policy,
            alloc_buffers: self.alloc_buffers,
            profile: self.profile,
            compile: self.compile,
            deopt_records: self.deopt_records,
            fail_refills: self.fail_refills,
            reclaim: self.reclaim,
            wait_in_place: self.wait_in_place,
            warmup: self.warmup,
            spec_cfg: self.spec_cfg,
            rewrite_ptx: self.rewrite_ptx,
            gc: self.gc,
        };
        let mut heap = self.heap;
        if !self.initial_heap_set {
            heap.initial = heap.initial.min(heap.max);
        }
        let env = LaunchEnv::new(Heap::new(heap)?, pool, gang, workers, settings);
        attach_gpus(&env, &gpus)?;
        Ok(Runtime {
            inner: Arc::new(Inner::new(
                env,
                CpuDevice::new(self.tiered, self.tier_up),
                gpus,
                fallback,
                policy_factory,
            )),
            pinned: None,
        }
        .register())
    }
}

/// The collector's policy makes sense: a trigger above 1 (or 0, off), and
/// no stress of 1.
fn check_gc(gc: &crate::GcPolicy) -> Result<(), OffloadError> {
    if !(gc.trigger.is_finite() && gc.trigger >= 0.0) || (gc.trigger > 0.0 && gc.trigger <= 1.0) {
        return Err(OffloadError::Config {
            setting: "gc",
            problem: format!(
                "a collection trigger of {} times the live data: it must be above 1 (or 0, off)",
                gc.trigger
            ),
        });
    }
    if gc.stress == 1 {
        return Err(OffloadError::Config {
            setting: "gc",
            problem: "collector stress of 1: every refill would fail; use 0 (off) or at least 2"
                .into(),
        });
    }
    Ok(())
}

/// The CPU device's workers (`asked`, or every core up to
/// [`MAX_WORKERS`]), with the deopt records per worker checked too.
fn worker_count(asked: Option<usize>, deopt_records: usize) -> Result<usize, OffloadError> {
    // Every core by default (at most MAX_WORKERS); more only if asked.
    let workers = asked.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_WORKERS))
    });
    if workers > MAX_WORKERS {
        return Err(OffloadError::Config {
            setting: "workers",
            problem: format!("{workers} workers asked for; a runtime starts at most {MAX_WORKERS}"),
        });
    }
    if deopt_records > MAX_DEOPT_RECORDS {
        return Err(OffloadError::Config {
            setting: "deopt_records",
            problem: format!(
                "{} deopt records per worker asked for; at most {MAX_DEOPT_RECORDS}",
                deopt_records
            ),
        });
    }
    Ok(workers)
}

/// The runtime's device, its GPUs and why it is not on the one asked for:
/// `want` (CUDA by default) among the GPUs `wanted` (every one the driver
/// reports by default); in `strict` mode an unavailable CUDA device is an
/// error rather than the CPU device with a note.
fn pick_device(
    want: Option<Device>,
    wanted: Option<&[usize]>,
    strict: bool,
) -> Result<(Device, Vec<crate::cuda::Gpu>, Option<String>), OffloadError> {
    let probed = match wanted {
        Some([]) => Err("no GPU asked for (an empty list)".to_string()),
        wanted => crate::cuda::probe(wanted),
    };
    Ok(match want {
        Some(d @ (Device::Cpu | Device::Interpreter)) => (d, Vec::new(), None),
        want => match probed {
            Ok(gs) => {
                // Not a fallback, but as plain to see: the CUDA device
                // is a simulation.
                let note = gs.iter().any(crate::cuda::Gpu::is_virtual).then(|| {
                    format!(
                        "the CUDA device is {}: offload's virtual GPU, a PTX simulator found on the library path, not hardware (its timings say nothing about a GPU's)",
                        crate::cuda::describe_all(&gs)
                    )
                });
                (Device::Cuda, gs, note)
            }
            Err(why) if strict => {
                return Err(OffloadError::Strict {
                    what: "the CUDA device is unavailable".into(),
                    why,
                });
            }
            Err(why) => {
                let asked = if want.is_some() {
                    "requested"
                } else {
                    "default"
                };
                (
                    Device::Cpu,
                    Vec::new(),
                    Some(format!(
                        "the {asked} CUDA device is unavailable ({why}); using the CPU device"
                    )),
                )
            }
        },
    })
}

/// `split_over`'s list as the launch settings hold it: the GPUs, and the
/// CPU when named; an error when the list names no GPU or the
/// interpreter.
fn split_setting(
    list: Option<&[Device]>,
) -> Result<Option<crate::shares::SplitOver>, OffloadError> {
    Ok(match list {
        None => None,
        Some(list) if !list.contains(&Device::Cuda) || list.contains(&Device::Interpreter) => {
            return Err(OffloadError::Config {
                setting: "split_over",
                problem: format!(
                    "a launch is split over the GPUs (`cuda`) and optionally the CPU \
                     (`cpu`); the list named {}",
                    list.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ")
                ),
            });
        }
        Some(list) => Some(crate::shares::SplitOver {
            cpu: list.contains(&Device::Cpu),
        }),
    })
}

/// Attach the heap's image on each GPU: host accesses fetch what kernels
/// wrote from now on (`offload_heap::resident`).
fn attach_gpus(env: &LaunchEnv, gpus: &[crate::cuda::Gpu]) -> Result<(), OffloadError> {
    // The heap's image lives on the GPU from now on; host accesses
    // fetch what kernels wrote (`offload_heap::resident`).
    for g in gpus {
        match env.heap.attach_mirror(g.mirror()) {
            Some(id) => g.attached(id, gpus.len() > 1),
            None => {
                return Err(OffloadError::Config {
                    setting: "gpus",
                    problem: format!(
                        "{} GPUs; one heap keeps at most {} images coherent",
                        gpus.len(),
                        offload_heap::MAX_MIRRORS
                    ),
                });
            }
        }
    }
    Ok(())
}
