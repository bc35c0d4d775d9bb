//! What a launch did: the [`LaunchReport`] every device returns, its phase
//! [`Timings`], the deopt table's rows, and the counters devices build it
//! from ([`NeverRan`]). Every figure is defined once, on its field.

use crate::device::Device;
use offload_heap::AllocStats;
use offload_host_interp::Profile;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::time::{Duration, Instant};

mod gc;
mod shape;
pub(crate) mod split;
pub use gc::GcSummary;
pub use shape::LaunchShape;
pub use split::SplitShare;

/// How long each phase of a launch took, as wall-clock time on the host.
///
/// The phases follow one another, so they partition the launch:
/// `collect + compile + setup + run + replay + teardown == total`, exactly (each is
/// measured between two of the same clock's readings). On the CPU device,
/// slots replay their deopted workitems while other slots still run
/// compiled code; there `replay` is the longest any slot spent replaying and
/// `run` the rest of the time the slots took.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timings {
    /// A collection the heap was due for, run when the launch began,
    /// before any of its workers (zero when none was due). Its pause
    /// (in the launch's [`LaunchReport::gc`]) is the part of this with the
    /// workers stopped; the rest is the collector's work around it
    /// (finding the roots, giving memory back). Collections the workers
    /// start while they run are part of `run`.
    pub collect: Duration,
    /// Waiting for the kernel version's code: compiling it (and, on the
    /// CUDA device, loading it into the driver) when this launch is its
    /// first, a cache lookup otherwise. The CPU device's optimized tier,
    /// compiled on a background thread, is not part of any launch.
    pub compile: Duration,
    /// Preparing the launch: save area, TLABs, slot words, and on the CUDA
    /// device the copies of the heap image and buffers to the device.
    pub setup: Duration,
    /// Running workitems on the device (compiled code; on the interpreter
    /// device, everything).
    pub run: Duration,
    /// Replaying deoptimized workitems in the interpreter (what a
    /// recompilation policy weighs against `run`), with, on the CUDA
    /// device, the copies back that the replay needs.
    pub replay: Duration,
    /// Retiring TLABs and merging the slots' results into the report.
    pub teardown: Duration,
    /// The whole launch: the sum of the parts above.
    pub total: Duration,
}

/// `T ms (compile a ms, setup b ms, run c ms, replay d ms, teardown e ms)`,
/// with `collect z ms, ` first when a collection ran at the start; the
/// parts add up to the total (each figure is rounded to the microsecond,
/// so the printed parts can miss the printed total by a few).
impl fmt::Display for Timings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        write!(f, "{:.3} ms (", ms(self.total))?;
        let shown = self
            .parts()
            .into_iter()
            .filter(|&(name, d)| name != "collect" || !d.is_zero());
        for (i, (name, d)) in shown.enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{name} {:.3} ms", ms(d))?;
        }
        write!(f, ")")
    }
}

impl Timings {
    /// Phases from the clock's readings at their boundaries — the launch's
    /// start, the device's start, the rounds' start and end, and the end —
    /// and what the rounds measured: the rounds' span is `replay` (at most
    /// the span) and `run` (the kernel time the device measured, or else
    /// the rest of the span), and what is left of it is setup (the copies
    /// before each round).
    pub(crate) fn from_rounds(
        marks: [Instant; 5],
        run: Option<Duration>,
        replay: Duration,
    ) -> Timings {
        let span = |i: usize| marks[i + 1].saturating_duration_since(marks[i]);
        let rounds = span(2);
        let replay = replay.min(rounds);
        let run = run.map_or(rounds - replay, |r| r.min(rounds - replay));
        let between = rounds - replay - run;
        Timings::of(span(0), span(1) + between, run, replay, span(3))
    }

    /// Timings from the parts; `total` is their sum.
    pub(crate) fn of(
        compile: Duration,
        setup: Duration,
        run: Duration,
        replay: Duration,
        teardown: Duration,
    ) -> Timings {
        Timings {
            collect: Duration::ZERO,
            compile,
            setup,
            run,
            replay,
            teardown,
            total: compile + setup + run + replay + teardown,
        }
    }

    /// These timings with a collection of `d` before them (`collect`,
    /// and the total grows by as much).
    pub(crate) fn after_collection(mut self, d: Duration) -> Timings {
        self.collect += d;
        self.total += d;
        self
    }

    /// The parts as `name value` pairs, in launch order.
    pub fn parts(&self) -> [(&'static str, Duration); 6] {
        [
            ("collect", self.collect),
            ("compile", self.compile),
            ("setup", self.setup),
            ("run", self.run),
            ("replay", self.replay),
            ("teardown", self.teardown),
        ]
    }
}

/// What a launch did: where its workitems ran, what deoptimized where and
/// why, what it allocated, and how long each phase took. Every figure is
/// defined on its field; its `Display` is the one-line summary the REPL
/// prints.
///
/// ```
/// use offload::{Runtime, par_offload};
///
/// let rt = Runtime::builder().workers(2).build()?;
/// let m = rt.load_file("examples/kernels/saxpy.ofk")?;
/// let x = rt.array(&[1.0f32; 100])?;
/// let y = rt.array(&[0.0f32; 100])?;
/// let r = par_offload(0..100, m.closure("saxpy", [2.0f32.into(), (&x).into(), (&y).into()])?)?;
/// // The range is partitioned: on the device, replayed, stopped, unstarted.
/// assert_eq!(r.workitems(), 100);
/// assert_eq!(r.on_device + r.replayed + r.abandoned + r.not_started(), 100);
/// assert_eq!(r.completed, 100);
/// // The phases add up to the total.
/// let parts: std::time::Duration = r.timings.parts().iter().map(|p| p.1).sum();
/// assert_eq!(parts, r.timings.total);
/// println!("{r}");
/// # Ok::<(), offload::OffloadError>(())
/// ```
#[derive(Clone, Debug)]
pub struct LaunchReport {
    /// The kernel.
    pub kernel: String,
    /// Where it ran.
    pub device: Device,
    /// The range it ran over; for a 2-D or 3-D launch, `0..` its
    /// workitems, numbered row by row ([`LaunchReport::shape`]).
    pub range: Range<i64>,
    /// Workitems that ran to their end on the device without
    /// deoptimizing (on the interpreter device: every workitem that ran to
    /// its end). The range is partitioned as `on_device + replayed +
    /// abandoned + not_started() == workitems()`.
    pub on_device: u64,
    /// Workitems that ran to their end without an exception, on the device
    /// or in a replay: `completed + threw == on_device + replayed`.
    pub completed: u64,
    /// Workitems that ended with an exception (on the device or in a
    /// replay).
    pub threw: u64,
    /// Workers used.
    pub workers: usize,
    /// Claims the range was cut into: the pieces of at most the launch's
    /// claim size its workers take from it (on the CPU, each worker's home
    /// part of the range is cut on its own, so a part's last claim may be
    /// shorter; on the GPU, each slot's grid-stride part is one claim).
    pub chunks: u64,
    /// Allocation counters.
    pub alloc: AllocStats,
    /// Phase times.
    pub timings: Timings,
    /// The merged profile, if profiling was on.
    pub profile: Option<Profile>,
    /// Safepoints that completed while the launch ran.
    pub safepoints: u64,
    /// Of those, the ones the GPU's slots passed waiting at their poll,
    /// without leaving the grid (`RuntimeBuilder::gpu_wait_in_place`; 0 off
    /// the CUDA device). The others stopped the slots that were running.
    pub waits: u64,
    /// Of the launch's runs on the GPU ([`LaunchReport::launches`]), those
    /// that started while another launch held the GPU beside it — its
    /// kernel running, or its replays between runs — on a stream of their
    /// own ([`crate::Runtime::launch`]; launches whose arrays of numbers
    /// lie in different heap chunks share the GPU, docs/DESIGN.md
    /// "Launches in flight"). 0 off the CUDA device.
    pub runs_beside: u64,
    /// Workitems that deoptimized and were resumed in the interpreter,
    /// which ran them to their end.
    pub replayed: u64,
    /// Save records the device resumed itself (*re-entries*): a workitem a
    /// safepoint or a full heap stopped at a loop's back-edge or an
    /// allocation, entered again in compiled code where it stopped
    /// ([`crate::RuntimeBuilder::reentry`]). Not a part of the partition:
    /// a workitem resumed and run to its end on the device counts in
    /// `on_device`, one that then deoptimized for another reason in
    /// `replayed`; a workitem stopped and resumed twice counts twice here.
    /// Resumed records are deopts, and count in `deopts` and `site_deopts`
    /// like replayed ones.
    pub resumed: u64,
    /// Workitems that a stop (a slot's full deopt records, a safepoint)
    /// left unstarted and the device then ran after all (re-entered or
    /// relaunched). Each counts once however many stops passed it over, so
    /// this is at most `on_device + replayed`; it is a note on how the
    /// range was run, not a part of the partition.
    pub never_ran: u64,
    /// Device launches (1 plus relaunches of never-ran work; the CPU device
    /// never relaunches, its slots re-enter instead).
    pub launches: u64,
    /// Times a slot stopped (records full, safepoint), had its records
    /// replayed, and entered the device again with its unstarted rest.
    pub reentries: u64,
    /// Deopts by (site bytecode index, reason).
    pub deopts: BTreeMap<(offload_ir::Bci, offload_deopt::Reason), u64>,
    /// Deopts by (site of the version that ran, reason): the counters the
    /// recompilation policy sees.
    pub site_deopts: BTreeMap<(offload_ir::SiteId, offload_deopt::Reason), u64>,
    /// The compiled version that ran (`None`: the interpreter ran the
    /// launch).
    pub version: Option<u32>,
    /// The launch began on the CPU device's quick tier of the version: its
    /// optimized code was still being compiled (see
    /// [`crate::RuntimeBuilder::tiered`]). Each slot switches to the
    /// optimized code at its next claim once that is ready;
    /// [`LaunchReport::quick_workitems`] says how much ran before.
    pub quick_tier: bool,
    /// Workitems of [`LaunchReport::on_device`] that the quick tier ran;
    /// the rest ran the optimized code (0 when `quick_tier` is false).
    pub quick_workitems: u64,
    /// The speculations compiled into that version, with the sites that
    /// guard them.
    pub speculations: Vec<offload_deopt::SpecRecord>,
    /// The recompilation policy's decision after this launch.
    pub decision: Option<crate::policy::Logged>,
    /// Why the kernel ran on the interpreter instead of the requested device.
    pub fallback: Option<String>,
    /// The deoptimized workitems, as Sumatra's table shows them (the first
    /// [`LaunchReport::TABLE_ROWS`]).
    pub deopt_table: Vec<DeoptRow>,
    /// The ranges of a 2-D or 3-D launch (`None` for a 1-D one): the
    /// report's workitem numbers ([`LaunchReport::range`], a deopt row's
    /// [`DeoptRow::workitem`], an exception's) count its workitems row by
    /// row from 0, and [`crate::LaunchShape::coords`] gives their indices
    /// (the deopt table's text shows them).
    pub shape: Option<LaunchShape>,
    /// Whether [`crate::Runtime::interrupt`] stopped the launch (it then
    /// returns [`crate::OffloadError::Interrupted`] with this report).
    pub interrupted: bool,
    /// The deadline that interrupted the launch
    /// ([`crate::RuntimeBuilder::launch_deadline`],
    /// [`crate::Runtime::par_offload_with_deadline`]); `None` when no
    /// deadline passed while it ran.
    pub deadline: Option<Duration>,
    /// Workitems the interrupt stopped part-way: their frames were dropped,
    /// not replayed (what they wrote before stays written; every object is
    /// whole).
    pub abandoned: u64,
    /// The GPU that ran the launch, as `name (sm_XY, N SMs)`, or
    /// `GPU k: name (sm_XY, N SMs)` in a runtime of several GPUs (`None`
    /// off the CUDA device). offload's virtual GPU names itself so: a report
    /// never passes a simulation off as hardware.
    pub gpu: Option<String>,
    /// Bytes the launch moved from host to device memory, every relaunch
    /// included (0 off the CUDA device, where nothing moves): the heap
    /// chunks the host wrote since the device last had them (the heap's
    /// image stays on the device between launches), each run's kernel
    /// parameters (the launch context and the captures, passed by value),
    /// the eden's bounds (each run of a kernel that allocates), the save
    /// area (on a relaunch), and the filler headers written into the image
    /// after a run that refilled TLABs.
    pub to_device_bytes: u64,
    /// Bytes the launch moved from device to host memory, every relaunch
    /// included: each run's summary (the eden's bounds, the counters, the
    /// parked count, and the dirty map: a byte per 64 KiB heap chunk below
    /// the device eden's end), the records, never-ran ranges and exits
    /// when a slot left work behind, the TLAB states when a refill carved
    /// one, what the host read while slots waited in place, and the heap
    /// chunks host code fetched while the launch ran (its replays read
    /// what the device wrote).
    /// Heap bytes fetched later (a `read` of the results) belong to no
    /// launch: [`offload_heap::Heap::residency`] counts them.
    pub to_host_bytes: u64,
    /// The class lookups of the launch's virtual calls, guarded inlines
    /// and class tests on the GPU, as the virtual GPU counted them; `None`
    /// where nothing counted them (the CPU device, the interpreter, a real
    /// GPU: counting each would cost the code it measures).
    pub dispatch: Option<Dispatches>,
    /// What a reducing launch ([`crate::Runtime::par_reduce`]) combined;
    /// `None` for a kernel that returns nothing.
    pub reduction: Option<Reduction>,
    /// The collections that ran while the launch was in flight — its own
    /// (eden exhausted, or due before it started) and any another thread
    /// asked for meanwhile, which stopped this launch's workers too. Their
    /// pauses are inside the phase times above, not added to them.
    pub gc: GcSummary,
    /// For a launch split over devices
    /// ([`crate::RuntimeBuilder::split_over`]), each device's share, in the
    /// split's order (the CPU first, then the GPUs); empty for a launch on
    /// one device. The counters above are the sums of the devices' parts;
    /// the phase times are those of the device that finished last, summed
    /// over its parts, with the rest of the launch's time in `setup`.
    pub split: Vec<SplitShare>,
}

/// What a reducing launch combined ([`LaunchReport::reduction`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reduction {
    /// How it combined the values.
    pub combine: offload_abi::reduce::Combine,
    /// The values' type (the kernel's return type).
    pub ty: offload_abi::reduce::Scalar,
    /// The result's raw bits (an `i32` or `f32` in the low 32 bits): read
    /// it typed from [`crate::Reduced::value`].
    pub(crate) bits: u64,
    /// Partial results the host joined into the result: the complete
    /// subtrees of the combine tree ([`offload_abi::reduce`]) that the
    /// workers handed on — at most one per level for each run of
    /// consecutive workitems a worker computed — and one leaf per workitem
    /// whose value the host computed itself (a replayed deopt).
    pub joined: u64,
}

/// How a launch's compiled code found the classes of its receivers
/// ([`LaunchReport::dispatch`]): each lookup is one workitem asking for one
/// object's class once (a virtual call, a guarded inline or a class test;
/// array tests read the header and are not lookups).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dispatches {
    /// Class lookups, every run and relaunch of the launch included.
    pub lookups: u64,
    /// Of those, the ones that loaded the object's header: the object lay
    /// on a mixed page (a launch's own allocations), or the code
    /// dispatches by header ([`offload_jit::Dispatch`]). The rest found
    /// the class from the address alone (the page's tag).
    pub header_loads: u64,
}

impl Dispatches {
    /// Lookups that found the class from the address: `lookups -
    /// header_loads`.
    pub fn by_address(&self) -> u64 {
        self.lookups - self.header_loads
    }

    /// What the virtual GPU's noted counters (`count.NAME.lanes`,
    /// [`crate::vgpu::stream_counters`]) gained between `before` and
    /// `after`, for code that looks classes up by address or not.
    pub(crate) fn between(
        before: &BTreeMap<String, u64>,
        after: &BTreeMap<String, u64>,
        by_address: bool,
    ) -> Dispatches {
        let gained = |name: &str| {
            let key = format!("count.{name}.lanes");
            let at = |m: &BTreeMap<String, u64>| m.get(&key).copied().unwrap_or(0);
            at(after).saturating_sub(at(before))
        };
        let (page, header) = (gained("dispatch.page"), gained("dispatch.header"));
        Dispatches {
            lookups: if by_address { page } else { header },
            header_loads: header,
        }
    }
}

/// One value a deoptimized workitem saved, named as its frame state names
/// it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedValue {
    /// The local's name, or `s0`, `s1`… for operand-stack slots; prefixed
    /// with the function and a dot (`dist.x`) in the frame of an inlined
    /// call.
    pub name: String,
    /// Its type, as the text form writes it.
    pub ty: String,
    /// The value: integers in decimal, floats as the shortest text that
    /// reads back the same, references as `null` or `@word` (their word
    /// offset in the heap).
    pub value: String,
}

impl fmt::Display for SavedValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} = {}", self.name, self.ty, self.value)
    }
}

/// A saved record's values, named and typed from its site's frame-state
/// map (`raw[i]` is the value of the site's `i`-th slot).
pub(crate) fn saved_values(
    prog: &offload_host_interp::Program,
    meta: &offload_deopt::DeoptMetadata,
    site: offload_ir::SiteId,
    raw: &[u64],
) -> Vec<SavedValue> {
    use offload_ir::Type;
    let Some(s) = meta.site(site) else {
        return Vec::new();
    };
    let v = prog.verified();
    let m = v.module();
    s.frame_slots()
        .zip(raw)
        .map(|((fi, sl), &bits)| {
            let func = s.frames.get(fi).map(|fr| v.func(fr.func));
            let base = match sl.value {
                offload_ir::analysis::Value::Local(l) => func
                    .and_then(|f| f.locals.get(l.index()))
                    .map_or_else(|| format!("local{}", l.index()), |l| l.name.clone()),
                offload_ir::analysis::Value::Stack(k) => format!("s{k}"),
            };
            let name = match func {
                Some(f) if fi > 0 => format!("{}.{base}", f.name),
                _ => base,
            };
            let value = match sl.ty {
                Type::I32 => (bits as u32 as i32).to_string(),
                Type::I64 => (bits as i64).to_string(),
                Type::F32 => crate::diagnostics::f32_text(f32::from_bits(bits as u32)),
                Type::F64 => crate::diagnostics::f64_text(f64::from_bits(bits)),
                _ if bits as u32 == 0 => "null".to_string(),
                _ => format!("@{}", bits as u32),
            };
            SavedValue {
                name,
                ty: m.type_name(sl.ty),
                value,
            }
        })
        .collect()
}

/// Names the saved values of the rows that made it into the table.
pub(crate) fn name_saved(
    prog: &offload_host_interp::Program,
    meta: &offload_deopt::DeoptMetadata,
    rows: &mut [DeoptRow],
) {
    for r in rows {
        if let Some(site) = r.site {
            r.saved = saved_values(prog, meta, site, &r.values);
        }
    }
}

/// What became of a deoptimized workitem (a [`DeoptRow`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum DeoptAction {
    /// Resumed in the interpreter, which ran it to its end.
    Replayed,
    /// Resumed in the interpreter, where it threw.
    ReplayedThrew,
    /// An interrupt stopped it part-way; its frames were dropped.
    Interrupted,
    /// It stopped at a safepoint (or on a full heap) and the device resumed
    /// it from its record ([`LaunchReport::resumed`]).
    Resumed,
}

impl DeoptAction {
    /// As the deopt table prints it: `replayed`, `replayed, threw`,
    /// `interrupted`, `resumed on device`.
    pub fn name(self) -> &'static str {
        match self {
            DeoptAction::Replayed => "replayed",
            DeoptAction::ReplayedThrew => "replayed, threw",
            DeoptAction::Interrupted => "interrupted",
            DeoptAction::Resumed => "resumed on device",
        }
    }
}

impl fmt::Display for DeoptAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One row of the deopt table: a workitem that deoptimized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeoptRow {
    /// The workitem.
    pub workitem: i64,
    /// What happened to it.
    pub action: DeoptAction,
    /// Where it stopped.
    pub bci: offload_ir::Bci,
    /// The deopt site of the version that ran (`None` for a workitem the
    /// interpreter device stopped, which saves no record).
    pub site: Option<offload_ir::SiteId>,
    /// Why.
    pub reason: offload_deopt::Reason,
    /// The saved frame-state values, raw, in the order of the site's
    /// frame-state map.
    pub values: Vec<u64>,
    /// The same values with their names and types.
    pub saved: Vec<SavedValue>,
}

impl LaunchReport {
    /// The report of a launch of `kernel` on `device` over `range` with
    /// `workers`, before anything is counted: the devices fill in what
    /// they did, [`crate::replay::Replays::finish`] what became of the
    /// deopts, and [`Thrown::finish`] the exceptions.
    pub(crate) fn new(kernel: &str, device: Device, range: Range<i64>, workers: usize) -> Self {
        LaunchReport {
            kernel: kernel.to_string(),
            device,
            range,
            on_device: 0,
            completed: 0,
            threw: 0,
            workers,
            chunks: 0,
            alloc: AllocStats::default(),
            timings: Timings::default(),
            profile: None,
            safepoints: 0,
            waits: 0,
            runs_beside: 0,
            replayed: 0,
            resumed: 0,
            never_ran: 0,
            launches: 1,
            reentries: 0,
            deopts: BTreeMap::new(),
            site_deopts: BTreeMap::new(),
            version: None,
            quick_tier: false,
            quick_workitems: 0,
            speculations: Vec::new(),
            decision: None,
            fallback: None,
            deopt_table: Vec::new(),
            shape: None,
            interrupted: false,
            abandoned: 0,
            deadline: None,
            gpu: None,
            to_device_bytes: 0,
            to_host_bytes: 0,
            dispatch: None,
            reduction: None,
            gc: GcSummary::default(),
            split: Vec::new(),
        }
    }

    /// Rows kept in [`LaunchReport::deopt_table`].
    pub const TABLE_ROWS: usize = 64;

    /// Workitems in the range.
    pub fn workitems(&self) -> u64 {
        self.range.end.wrapping_sub(self.range.start) as u64
    }

    /// Workitems of the range that never started (nonzero only when
    /// interrupted): the rest of the partition, `workitems() - on_device -
    /// replayed - abandoned`.
    pub fn not_started(&self) -> u64 {
        self.workitems()
            .saturating_sub(self.on_device + self.replayed + self.abandoned)
    }

    /// The range as the launch was given it: `lo..hi`, or `(0..h, 0..w)`
    /// for a 2-D or 3-D launch ([`LaunchReport::shape`]).
    pub fn range_text(&self) -> String {
        match &self.shape {
            Some(s) => s.to_string(),
            None => format!("{}..{}", self.range.start, self.range.end),
        }
    }

    /// Workitem `w` of the launch as a user names it: its number, or its
    /// indices `(i, j)` in a 2-D or 3-D launch ([`LaunchReport::shape`]).
    pub fn workitem_name(&self, w: i64) -> String {
        self.shape
            .as_ref()
            .map_or_else(|| w.to_string(), |s| s.name(w))
    }

    /// The deopt table as text: a row per workitem in
    /// [`LaunchReport::deopt_table`], its saved values named and typed.
    pub fn deopt_table_text(&self) -> String {
        let mut t = crate::table::new(["workitem", "action", "bci", "reason", "saved values"]);
        for r in &self.deopt_table {
            let vals: Vec<String> = if r.saved.len() == r.values.len() {
                r.saved.iter().map(ToString::to_string).collect()
            } else {
                r.values.iter().map(|v| format!("{v:#x}")).collect()
            };
            t.add_row([
                self.workitem_name(r.workitem),
                r.action.to_string(),
                r.bci.to_string(),
                r.reason.name().to_string(),
                vals.join(", "),
            ]);
        }
        crate::table::right(&mut t, &[0, 2]);
        crate::table::text(&t)
    }
}

impl fmt::Display for LaunchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} over {} on {} ({} workers, {} chunks): {} completed, {} threw",
            self.kernel,
            self.range_text(),
            match &self.gpu {
                Some(g) => format!("{} ({g})", self.device.name()),
                None => self.device.name().to_string(),
            },
            self.workers,
            self.chunks,
            self.completed,
            self.threw,
        )?;
        if self.quick_tier {
            write!(
                f,
                " ({} on the quick tier, {} optimized)",
                self.quick_workitems,
                self.on_device - self.quick_workitems.min(self.on_device)
            )?;
        }
        if self.abandoned + self.not_started() > 0 {
            write!(
                f,
                ", {} stopped part-way, {} not started",
                self.abandoned,
                self.not_started()
            )?;
        }
        write!(
            f,
            "; {} TLAB refills, {} heap growths; {}",
            self.alloc.refills, self.alloc.heap_grows, self.timings
        )?;
        if self.gpu.is_some() {
            write!(
                f,
                "; {} to the device, {} back",
                crate::diagnostics::bytes_text(self.to_device_bytes),
                crate::diagnostics::bytes_text(self.to_host_bytes)
            )?;
            if self.runs_beside > 0 {
                write!(
                    f,
                    "; {} of {} runs beside other launches",
                    self.runs_beside, self.launches
                )?;
            }
        }
        if !self.split.is_empty() {
            write!(f, "; {}", split::text(&self.split, self.workitems()))?;
        }
        if let Some(d) = self.dispatch.filter(|d| d.lookups > 0) {
            write!(
                f,
                "; {} class lookups, {} by address, {} loading the header",
                d.lookups,
                d.by_address(),
                d.header_loads
            )?;
        }
        if self.alloc.buffer_refills > 0 {
            write!(
                f,
                "; {} allocation buffers taken from shared TLABs",
                self.alloc.buffer_refills
            )?;
        }
        if self.alloc.recycled > 0 {
            write!(
                f,
                "; {:.1} KiB of workitems' dead objects reused",
                self.alloc.recycled as f64 / 1024.0
            )?;
        }
        if self.alloc.reclaimed > 0 {
            write!(
                f,
                "; {:.1} KiB of dead objects handed back",
                self.alloc.reclaimed as f64 / 1024.0
            )?;
        }
        if self.gc.collections > 0 {
            write!(f, "; gc: {}", self.gc)?;
        }
        Ok(())
    }
}

/// The never-ran workitems one slot has counted: a stop leaves the rest of
/// the slot's chunk, `[lo, hi)`, unstarted, and the slot's next entry runs
/// it first; a second stop before it is done leaves a part of the same rest
/// (which must not count again), one after it a new chunk's rest.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NeverRan {
    lo: i64,
    hi: i64,
}

impl NeverRan {
    /// A stop left the workitems `lo`, `lo + stride`, … below `hi`
    /// unstarted: how many of them were not counted before. A slot's
    /// rests are all of one progression (its part of the range, or its
    /// interval on the CPU), so two of them overlap in the workitems of
    /// their common span.
    pub(crate) fn add(&mut self, lo: i64, hi: i64, stride: i64) -> u64 {
        if hi <= lo {
            return 0;
        }
        let items = |lo: i64, hi: i64| -> u64 {
            if hi <= lo {
                0
            } else {
                (hi.wrapping_sub(lo) as u64).div_ceil(stride as u64)
            }
        };
        let (olo, ohi) = (lo.max(self.lo), hi.min(self.hi));
        let overlap = items(olo, ohi);
        if overlap == 0 {
            (self.lo, self.hi) = (lo, hi);
        } else {
            (self.lo, self.hi) = (lo.min(self.lo), hi.max(self.hi));
        }
        items(lo, hi) - overlap
    }
}

#[cfg(test)]
mod tests {
    use super::NeverRan;

    #[test]
    fn a_slots_rests_count_each_unstarted_workitem_once() {
        // A GPU slot of 4 (grid-stride): workitems 3, 7, 11, 15, 19.
        let mut n = NeverRan::default();
        assert_eq!(n.add(3, 20, 4), 5);
        // Stopped again further on (a relaunch ran 3 and 7): nothing new.
        assert_eq!(n.add(11, 20, 4), 0);
        // A rest that holds no workitem, or the stored "none".
        assert_eq!(n.add(19, 19, 4), 0);
        assert_eq!(n.add(1, 0, 4), 0);
        // A negative range: -9, -5, -1.
        assert_eq!(NeverRan::default().add(-9, 0, 4), 3);
        // A CPU slot's interval (stride 1), then a later disjoint one.
        let mut c = NeverRan::default();
        assert_eq!(c.add(0, 10, 1), 10);
        assert_eq!(c.add(5, 10, 1), 0);
        assert_eq!(c.add(20, 25, 1), 5);
    }
}
