//! `par_offload` on the interpreter device: the range is cut into chunks that
//! the workers claim; each worker runs its chunks' workitems one after another
//! in its own interpreter, allocating from its TLAB slot.

use crate::adaptive::Plan;
use crate::error::{KernelExceptions, OffloadError};
use crate::runtime::{Closure, Device, Runtime};
use offload_host_interp::{Exception, Interpreter, Profile};
use offload_ir::ExceptionKind;
use offload_tlab::AllocStats;
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long each phase of a launch took, as wall-clock time on the host.
///
/// The phases follow one another, so they partition the launch:
/// `compile + setup + run + replay + teardown == total`, exactly (each is
/// measured between two of the same clock's readings). On the CPU device,
/// slots replay their deopted workitems while other slots still run
/// compiled code; there `replay` is the longest any slot spent replaying and
/// `run` the rest of the time the slots took.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timings {
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

/// `T ms (compile a ms, setup b ms, run c ms, replay d ms, teardown e ms)`;
/// the parts add up to the total (each figure is rounded to the
/// microsecond, so the printed parts can miss the printed total by a few).
impl fmt::Display for Timings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        write!(f, "{:.3} ms (", ms(self.total))?;
        for (i, (name, d)) in self.parts().iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{name} {:.3} ms", ms(*d))?;
        }
        write!(f, ")")
    }
}

impl Timings {
    /// Phases from the clock's readings at their boundaries: `marks[0]` is
    /// the launch's start, and phase `i` runs from `marks[i]` to
    /// `marks[i + 1]`, except that `replay` (overlapping `run` on the CPU
    /// device) is carved out of the run phase.
    pub(crate) fn from_marks(marks: [Instant; 5], replay: Duration) -> Timings {
        let span = |i: usize| marks[i + 1].saturating_duration_since(marks[i]);
        let device = span(2);
        let replay = replay.min(device);
        Timings::of(span(0), span(1), device - replay, replay, span(3))
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
            compile,
            setup,
            run,
            replay,
            teardown,
            total: compile + setup + run + replay + teardown,
        }
    }

    /// The parts as `name value` pairs, in launch order.
    pub fn parts(&self) -> [(&'static str, Duration); 5] {
        [
            ("compile", self.compile),
            ("setup", self.setup),
            ("run", self.run),
            ("replay", self.replay),
            ("teardown", self.teardown),
        ]
    }
}

/// What a launch did.
#[derive(Clone, Debug)]
pub struct LaunchReport {
    /// The kernel.
    pub kernel: String,
    /// Where it ran.
    pub device: Device,
    /// The range.
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
    /// Chunks the range was cut into.
    pub chunks: u64,
    /// Allocation counters.
    pub alloc: AllocStats,
    /// Phase times.
    pub timings: Timings,
    /// The merged profile, if profiling was on.
    pub profile: Option<Profile>,
    /// Safepoints that completed while the launch ran.
    pub safepoints: u64,
    /// Workitems that deoptimized and were resumed in the interpreter,
    /// which ran them to their end.
    pub replayed: u64,
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
    /// The CPU device ran the version's quick tier: its optimized code was
    /// still being compiled (see [`crate::RuntimeBuilder::tiered`]).
    pub quick_tier: bool,
    /// The speculations compiled into that version, with the sites that
    /// guard them.
    pub speculations: Vec<offload_deopt::SpecRecord>,
    /// The recompilation policy's decision after this launch.
    pub decision: Option<crate::adaptive::Logged>,
    /// Why the kernel ran on the interpreter instead of the requested device.
    pub fallback: Option<String>,
    /// The deoptimized workitems, as Sumatra's table shows them (the first
    /// [`LaunchReport::TABLE_ROWS`]).
    pub deopt_table: Vec<DeoptRow>,
    /// Whether [`crate::Runtime::interrupt`] stopped the launch (it then
    /// returns [`OffloadError::Interrupted`] with this report).
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
    /// The GPU that ran the launch, as `name (sm_XY, N SMs)` (`None` off
    /// the CUDA device). offload's virtual GPU names itself so: a report
    /// never passes a simulation off as hardware.
    pub gpu: Option<String>,
    /// Bytes copied between host and device memory by the launch, both
    /// directions, every relaunch included (0 off the CUDA device, where
    /// nothing is copied): the heap image each way, the save area, the
    /// launch context and the per-slot bookkeeping.
    pub copied_bytes: u64,
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

/// One row of the deopt table: a workitem that deoptimized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeoptRow {
    /// The workitem.
    pub workitem: i64,
    /// What happened to it: replayed to completion, or threw.
    pub action: &'static str,
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
                r.workitem.to_string(),
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
            "{} over {}..{} on {} ({} workers, {} chunks): {} completed, {} threw",
            self.kernel,
            self.range.start,
            self.range.end,
            match &self.gpu {
                Some(g) => format!("{} ({g})", self.device.name()),
                None => self.device.name().to_string(),
            },
            self.workers,
            self.chunks,
            self.completed,
            self.threw,
        )?;
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
        if self.copied_bytes > 0 {
            write!(
                f,
                "; {:.1} MiB copied between host and device",
                self.copied_bytes as f64 / (1 << 20) as f64
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
    /// A stop left `[lo, hi)` unstarted: the workitems of it not counted
    /// before.
    pub(crate) fn add(&mut self, lo: i64, hi: i64) -> u64 {
        if hi <= lo {
            return 0;
        }
        let overlap = (hi.min(self.hi) - lo.max(self.lo)).max(0);
        if overlap == 0 {
            (self.lo, self.hi) = (lo, hi);
        } else {
            (self.lo, self.hi) = (lo.min(self.lo), hi.max(self.hi));
        }
        (hi - lo - overlap) as u64
    }
}

/// Exceptions of a part of the range: bounded however many workitems throw.
#[derive(Default)]
pub(crate) struct Thrown {
    first: Option<Exception>,
    pub(crate) count: u64,
    by_kind: BTreeMap<ExceptionKind, u64>,
    lowest: Vec<i64>,
}

impl Thrown {
    pub(crate) fn add(&mut self, e: Exception) {
        let w = e.workitem.unwrap_or(i64::MAX);
        self.count += 1;
        *self.by_kind.entry(e.kind).or_default() += 1;
        self.note(w);
        if self
            .first
            .as_ref()
            .is_none_or(|f| f.workitem.unwrap_or(i64::MAX) > w)
        {
            self.first = Some(e);
        }
    }

    fn note(&mut self, w: i64) {
        let at = self.lowest.partition_point(|&x| x < w);
        if at < KernelExceptions::LISTED {
            self.lowest.insert(at, w);
            self.lowest.truncate(KernelExceptions::LISTED);
        }
    }

    pub(crate) fn merge(mut self, other: Thrown) -> Thrown {
        self.count += other.count;
        for (k, n) in other.by_kind {
            *self.by_kind.entry(k).or_default() += n;
        }
        for w in other.lowest {
            self.note(w);
        }
        if let Some(o) = other.first
            && self.first.as_ref().is_none_or(|f| f.workitem > o.workitem)
        {
            self.first = Some(o);
        }
        self
    }
}

fn chunk_size(n: u64, workers: usize) -> u64 {
    (n / (workers as u64 * 16)).clamp(1, 4096)
}

pub(crate) fn launch(
    rt: &Runtime,
    range: Range<i64>,
    closure: &Closure,
    deadline: Option<Duration>,
) -> Result<LaunchReport, OffloadError> {
    if range.start > range.end {
        return Err(OffloadError::Range {
            start: range.start,
            end: range.end,
        });
    }
    let state = rt.kernel_state(closure);
    let plan = state.lock().unwrap_or_else(|e| e.into_inner()).plan(rt);
    // The launch's interrupt ticket: what a deadline interrupts.
    let ticket = rt.inner.control.interrupt_epoch();
    let mut r = match deadline {
        None => launch_on(rt, range, closure, &plan, ticket),
        Some(d) => {
            let (r, hit) = within(rt, d, ticket, || {
                launch_on(rt, range, closure, &plan, ticket)
            });
            let mut r = r;
            if hit {
                match &mut r {
                    Ok(rep) => rep.deadline = Some(d),
                    Err(OffloadError::Interrupted(rep)) => rep.deadline = Some(d),
                    Err(OffloadError::Exceptions(e)) => e.report.deadline = Some(d),
                    Err(_) => {}
                }
            }
            r
        }
    };
    rt.inner.control.finish_launch(ticket);
    // An interrupted launch ran part of its range: it tells the policy
    // nothing about the kernel.
    let report = match &mut r {
        Ok(rep) => Some(rep),
        Err(OffloadError::Exceptions(e)) => Some(&mut e.report),
        Err(_) => None,
    };
    if let Some(rep) = report {
        state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .after(rt, &plan, rep);
    }
    r
}

/// When a launch started (its compile time counts from here: time spent
/// on a device's code that then could not run counts as compile time of
/// the launch that ran instead) and its interrupt ticket
/// ([`offload_host_interp::Control::interrupt_epoch`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Started {
    pub(crate) at: Instant,
    pub(crate) ticket: u64,
}

/// Runs `f` with a watchdog that interrupts the launch holding `ticket` if
/// `f` is still running after `d`; returns `f`'s result and whether the
/// watchdog fired.
fn within<R>(rt: &Runtime, d: Duration, ticket: u64, f: impl FnOnce() -> R) -> (R, bool) {
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let watchdog = s.spawn(move || match done_rx.recv_timeout(d) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                rt.inner.control.interrupt_launch(ticket);
                true
            }
            _ => false,
        });
        let r = f();
        let _ = done_tx.send(());
        let hit = watchdog.join().unwrap_or(false);
        (r, hit)
    })
}

/// Run one launch as `plan` says: on its device, falling back from CUDA to
/// the CPU and from the CPU to the interpreter when the kernel cannot run
/// there (reported; an error in strict mode).
fn launch_on(
    rt: &Runtime,
    range: Range<i64>,
    closure: &Closure,
    plan: &Plan,
    ticket: u64,
) -> Result<LaunchReport, OffloadError> {
    let started = Started {
        at: Instant::now(),
        ticket,
    };
    if plan.device == Device::Interpreter {
        return launch_interp(rt, range, closure, plan, started);
    }
    let mut cuda_note = None;
    if let Some(gpu) = rt
        .inner
        .gpu
        .as_ref()
        .filter(|_| plan.device == Device::Cuda)
    {
        let why = if rt.inner.profile {
            "profiling is on".to_string()
        } else if range.end > i64::MAX - (1 << 32) {
            "the range ends too close to i64::MAX for the device cursor".to_string()
        } else {
            match crate::cuda::launch(rt, gpu, range.clone(), closure, plan, started) {
                Ok(r) => return r,
                Err(crate::cuda::Unsupported(why)) => why,
            }
        };
        if rt.inner.strict {
            return Err(OffloadError::Setup(format!(
                "strict mode: `{}` cannot run on the CUDA device: {why}",
                closure.kernel_name()
            )));
        }
        cuda_note = Some(format!("ran on the CPU device, not CUDA: {why}"));
    }
    let mut r = launch_cpu(rt, range, closure, plan, started);
    if let Some(note) = cuda_note {
        match &mut r {
            Ok(rep) => rep.fallback = Some(note),
            Err(OffloadError::Exceptions(e)) => e.report.fallback = Some(note),
            Err(_) => {}
        }
    }
    r
}

fn launch_cpu(
    rt: &Runtime,
    range: Range<i64>,
    closure: &Closure,
    plan: &Plan,
    started: Started,
) -> Result<LaunchReport, OffloadError> {
    // The compiled slot loops claim chunks with an atomic add on the cursor,
    // which every slot may push up to a chunk past the end; keep that far
    // from overflowing.
    let why = if rt.inner.profile {
        "profiling is on".to_string()
    } else if range.end > i64::MAX - (1 << 32) {
        "the range ends too close to i64::MAX for the device cursor".to_string()
    } else {
        match crate::cpu::compiled(rt, closure, &plan.version) {
            Ok(ck) => return crate::cpu::launch(rt, range, closure, &ck, plan, started),
            Err(why) => why.to_string(),
        }
    };
    let mut r = launch_interp(rt, range, closure, plan, started);
    let note = Some(format!("ran on the interpreter: {why}"));
    match &mut r {
        Ok(rep) => rep.fallback = note,
        Err(OffloadError::Exceptions(e)) => e.report.fallback = note,
        Err(_) => {}
    }
    r
}

fn launch_interp(
    rt: &Runtime,
    range: Range<i64>,
    closure: &Closure,
    plan: &Plan,
    started: Started,
) -> Result<LaunchReport, OffloadError> {
    let t0 = Instant::now();
    let inner = &rt.inner;
    let prog = &*closure.module.prog;
    let n = range.end.wrapping_sub(range.start) as u64;
    let workers = inner.workers;
    let alloc = rt.allocator(workers, plan.tlab_bytes);
    let chunk = plan.chunk.unwrap_or_else(|| chunk_size(n, workers));
    let profiling = inner.profile || plan.warmup;
    let chunks = n.div_ceil(chunk);
    let epoch = started.ticket;
    let profiles: Vec<Mutex<Option<Profile>>> = (0..workers).map(|_| Mutex::new(None)).collect();
    // Each workitem's dead objects go back to its worker's TLAB as it ends
    // when every worker has a TLAB of its own, as on the CPU device (the
    // two devices must agree on which programs run out of memory).
    let nursery = inner.reclaim
        && prog.may_allocate(closure.kernel)
        && crate::cpu::exclusive(&crate::cpu::tlabs_of(&alloc, workers));
    let recycled = std::sync::atomic::AtomicU64::new(0);
    let safepoints_before = inner.control.count();

    let t1 = Instant::now();
    let (completed, mut cut, thrown, escaped) = inner.pool.install(|| {
        (0..chunks)
            .into_par_iter()
            .map_init(
                || {
                    let worker = rayon::current_thread_index().unwrap_or(0);
                    let mut it = Interpreter::new(prog, &inner.heap, &alloc, worker);
                    it.set_control(&inner.control, epoch);
                    if profiling {
                        it.enable_profile();
                    }
                    if nursery {
                        it.enable_nursery();
                    }
                    (worker, it)
                },
                |(worker, it), c| {
                    let lo = range.start.wrapping_add((c * chunk) as i64);
                    let hi = lo.saturating_add(chunk as i64).min(range.end);
                    let (mut done, mut abandoned) = (0u64, Vec::new());
                    let mut thrown = Thrown::default();
                    let _running = inner.control.enter();
                    for w in lo..hi {
                        inner.control.poll();
                        if inner.control.interrupted_since(epoch) {
                            break;
                        }
                        match it.run_kernel(closure.kernel, w, &closure.captures) {
                            Ok(()) => done += 1,
                            // Stopped at a poll: the row shows where (the
                            // interpreter keeps no save-area values).
                            Err(e) if it.take_interrupted() => abandoned.push(DeoptRow {
                                workitem: w,
                                action: "interrupted",
                                bci: e.trace.first().map_or(0, |f| f.bci),
                                reason: offload_deopt::Reason::Safepoint,
                                site: None,
                                values: Vec::new(),
                                saved: Vec::new(),
                            }),
                            Err(e) => thrown.add(e),
                        }
                    }
                    recycled.fetch_add(
                        it.take_recycled_words(),
                        std::sync::atomic::Ordering::Relaxed,
                    );
                    if profiling {
                        let mut slot = profiles[*worker % profiles.len()]
                            .lock()
                            .unwrap_or_else(|e| e.into_inner());
                        let p = slot.get_or_insert_with(|| Profile::new(prog.verified()));
                        it.drain_profile_into(p);
                    }
                    (done, abandoned, thrown, it.escaped())
                },
            )
            .reduce(
                || (0, Vec::new(), Thrown::default(), false),
                |mut a, b| {
                    a.1.extend(b.1);
                    (a.0 + b.0, a.1, a.2.merge(b.2), a.3 || b.3)
                },
            )
    });
    let t2 = Instant::now();
    let mut alloc_stats = rt.end_allocation(alloc, escaped, safepoints_before);
    alloc_stats.recycled = recycled.into_inner() * 8;
    let profile = profiling.then(|| {
        let mut all = Profile::new(prog.verified());
        for p in profiles
            .into_iter()
            .filter_map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
        {
            all.merge(&p);
        }
        all
    });
    let abandoned = cut.len() as u64;
    cut.sort_by_key(|r| r.workitem);
    cut.truncate(LaunchReport::TABLE_ROWS);
    let report = LaunchReport {
        kernel: closure.kernel_name().to_string(),
        device: Device::Interpreter,
        range,
        on_device: completed + thrown.count,
        completed,
        threw: thrown.count,
        workers,
        chunks,
        alloc: alloc_stats,
        timings: Timings::from_marks([started.at, t0, t1, t2, Instant::now()], Duration::ZERO),
        profile,
        safepoints: inner.control.count() - safepoints_before,
        replayed: 0,
        never_ran: 0,
        launches: 1,
        reentries: 0,
        deopts: BTreeMap::new(),
        site_deopts: BTreeMap::new(),
        version: None,
        quick_tier: false,
        speculations: Vec::new(),
        decision: None,
        fallback: None,
        deopt_table: cut,
        interrupted: false, // Thrown::finish
        abandoned,
        deadline: None,
        gpu: None,
        copied_bytes: 0,
    };
    thrown.finish(report)
}

impl Thrown {
    /// The launch's result: the report, or the exceptions with the report.
    /// Whether an interrupt cut the launch short is derived here, for every
    /// device: only what it actually stopped counts (one that came after
    /// the last workitem changed nothing).
    pub(crate) fn finish(self, mut report: LaunchReport) -> Result<LaunchReport, OffloadError> {
        report.interrupted = report.abandoned > 0 || report.not_started() > 0;
        if report.interrupted {
            return Err(OffloadError::Interrupted(Box::new(report)));
        }
        match self.first {
            None => Ok(report),
            Some(first) => Err(OffloadError::Exceptions(Box::new(KernelExceptions {
                first,
                count: self.count,
                by_kind: self.by_kind,
                workitems: self.lowest,
                report,
            }))),
        }
    }
}
