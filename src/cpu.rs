//! The CPU device: the launch → replay loop around the JIT's slot loops
//! (docs/DESIGN.md, "How a launch flows"):
//!
//! 1. launch one slot loop per worker over the range; a slot that deopts
//!    writes a record into its part of the save area and goes on;
//! 2. a slot stops when its records are full, or at a safepoint (after
//!    parking until the safepoint's operation is done), leaving its
//!    unstarted rest in `never_ran[slot]`;
//! 3. its worker then drains the slot's records: one stopped by a safepoint
//!    (or a full heap, after a collection) at a loop header or an allocation
//!    is resumed by the slot itself from the record ([`drain_records`]; the
//!    compiled side is `offload_jit`'s re-entry copy of the body), every
//!    other one is resumed in the interpreter; then it enters the slot loop
//!    again, which starts with the never-ran rest and goes on claiming
//!    chunks, until the range is exhausted.
//!
//! On a GPU the host replays after the whole launch returns and relaunches
//! on the never-ran work; on the CPU the device's worker *is* a host thread,
//! so each slot drains its own records as soon as they are full and no slot
//! waits for the others (a deopt costs its replay, not a relaunch of
//! everything). Every workitem runs exactly once: wholly on the device
//! (stopped and resumed there any number of times); on the device up to a
//! deopt and the rest in the interpreter; or, if it had not started when
//! its slot stopped, on the next entry of that slot. The
//! bookkeeping is O(workers × records per slot), whatever the range.

use crate::adaptive::{Plan, Version};
use crate::device::Device;
use crate::env::{KernelCall, LaunchEnv, Started, exclusive, tlabs_of};
use crate::error::OffloadError;
use crate::executor::{Executor, Unsupported};
use crate::replay::{Replayer, Replays};
use crate::report::{LaunchReport, Timings};
use offload_jit::{CompiledKernel, JitError, LaunchCtx};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use std::time::Instant;

/// The compiled code of one kernel version: the tier its first launch ran
/// (quick, or optimized when tiering is off), or why it cannot be compiled;
/// and the optimized tier once a background compile has made it.
#[derive(Debug)]
pub(crate) struct Tiers {
    first: Result<Arc<CompiledKernel>, JitError>,
    optimized: OnceLock<Arc<CompiledKernel>>,
}

impl Tiers {
    /// The best code there is now.
    fn best(&self) -> Result<Arc<CompiledKernel>, JitError> {
        match self.optimized.get() {
            Some(ck) => Ok(ck.clone()),
            None => self.first.clone(),
        }
    }
}

/// The CPU device: the JIT, and the compiled code of every kernel
/// version launched (in their tiers).
#[derive(Debug)]
pub(crate) struct CpuDevice {
    jit: offload_jit::CpuJit,
    /// Compiled kernel versions by (module id, kernel, version), in their
    /// tiers, or why the kernel could not be compiled.
    compiled: dashmap::DashMap<(u64, offload_ir::FuncId, u32), Arc<Tiers>>,
    /// Whether versions are compiled quick first, optimized in the
    /// background.
    tiered: bool,
    /// The background compiles not yet joined.
    background: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl CpuDevice {
    /// A CPU device that compiles `tiered` or not.
    pub(crate) fn new(tiered: bool) -> CpuDevice {
        CpuDevice {
            jit: offload_jit::CpuJit::new(),
            compiled: dashmap::DashMap::new(),
            tiered,
            background: Mutex::new(Vec::new()),
        }
    }

    /// The JIT.
    pub(crate) fn jit(&self) -> &offload_jit::CpuJit {
        &self.jit
    }

    /// Wait until every background compile started so far has finished
    /// ([`crate::Runtime::finish_compiles`]).
    pub(crate) fn finish_compiles(&self) {
        loop {
            let pending = std::mem::take(
                &mut *self
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

    /// Version `ver` of the closure's kernel (compiled on first use and
    /// cached), or why it cannot be compiled. With tiering, the first use
    /// compiles the quick tier and starts the optimized compile on a background
    /// thread; later uses get the optimized code once it is done. Both tiers
    /// come from the same lowering, with the same deopt metadata.
    pub(crate) fn compiled(
        &self,
        env: &LaunchEnv,
        call: KernelCall<'_>,
        ver: &Version,
    ) -> Result<Arc<CompiledKernel>, JitError> {
        // Keyed by the module's id, which a runtime never reuses (an address or a
        // class base could come back for another module).
        let key = (call.module, call.kernel, ver.number);
        if let Some(hit) = self.compiled.get(&key) {
            return hit.value().best();
        }
        let opts = offload_jit::CompileOptions {
            quick: self.tiered,
            ..env.settings.compile
        };
        let first = self
            .jit
            .compile_speculative(call.prog, call.kernel, ver.number, opts, &ver.spec)
            .map(Arc::new);
        let tiers = Arc::new(Tiers {
            first: first.clone(),
            optimized: OnceLock::new(),
        });
        if let Ok(ck) = &first {
            if ck.quick {
                let (tiers, prog, spec) = (tiers.clone(), call.prog.clone(), ver.spec.clone());
                let (k, number, opts) = (call.kernel, ver.number, env.settings.compile);
                let job = std::thread::Builder::new()
                    .name("offload-compile".into())
                    .spawn(move || {
                        let jit = offload_jit::CpuJit::new();
                        // The quick tier compiled, so this one does too; if it
                        // did not, launches would keep the quick tier.
                        if let Ok(ck) = jit.compile_speculative(&prog, k, number, opts, &spec) {
                            let _ = tiers.optimized.set(Arc::new(ck));
                        }
                    });
                // No thread to be had: launches keep the quick tier.
                if let Ok(h) = job {
                    let mut pending = self
                        .background
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    // Finished compiles need no joining.
                    pending.retain(|h| !h.is_finished());
                    pending.push(h);
                }
            } else {
                let _ = tiers.optimized.set(ck.clone());
            }
        }
        self.compiled.insert(key, tiers);
        first
    }
}

impl Executor for CpuDevice {
    fn launch(
        &self,
        env: &LaunchEnv,
        call: KernelCall<'_>,
        plan: &Plan,
        range: Range<i64>,
        started: Started,
    ) -> Result<Result<LaunchReport, OffloadError>, Unsupported> {
        match self.compiled(env, call, &plan.version) {
            Ok(ck) => Ok(run(env, range, call, &ck, plan, started)),
            Err(why) => Err(Unsupported(why.to_string())),
        }
    }
}

/// Workitems per claim: about 32 claims per worker, for balance when
/// workitems differ in cost, and at most 16384. A claim is an atomic add on
/// a part's cursor (`offload_abi::cpu::Part`; when the range had one cursor for every
/// slot, with claims of 1024 saxpy over 2^20
/// workitems spent more time moving that cache line between cores than in
/// its vectorized body: 275 µs against 163 µs with claims of 16384). Once
/// the kernel's time per workitem is known (`item_ns`), a claim is also
/// at least [`CLAIM_NS`] of work: saxpy over 1,024 workitems made 64
/// claims of 16, two cores taking turns at the cursor's line (4.3 µs
/// per launch with claims of 4 µs of work, 6.0 before; with 1 µs, 8.9
/// against 15.1 at a slower hour; nbody's claims of 8 heavy workitems,
/// 2 µs each, are left as they were: 4 µs claims cost it 1.3x).
fn chunk_size(n: u64, workers: usize, item_ns: Option<f64>) -> i64 {
    let balanced = n / (workers as u64 * 32);
    let worth = item_ns.map_or(0, |ns| (CLAIM_NS / ns.max(0.01)) as u64);
    balanced.max(worth).clamp(1, 16384) as i64
}

/// The fewest claims a worker's home part of a launch's range is cut into
/// (with fewer, the range is one part).
const MIN_PART_CLAIMS: u64 = 4;

/// The least work a claim is worth, in nanoseconds: a claim costs about a
/// hundred when cores contend for the cursor, so this keeps the claims'
/// share of a launch's time under a few percent.
const CLAIM_NS: f64 = 1000.0;

/// What one slot's worker did.
#[derive(Default)]
struct SlotOut {
    on_device: u64,
    never_ran: u64,
    /// What `never_ran` has counted (a workitem counts once).
    passed: crate::report::NeverRan,
    entries: u64,
    /// What became of the slot's records.
    replays: Replays,
    replay_time: Duration,
    error: Option<OffloadError>,
    /// The slot saw the launch's interrupt and left.
    cut: bool,
    /// A replay stored a reference to an object of this launch into an
    /// older object (the interpreter's write barrier).
    escaped: bool,
    /// The most records the slot held at once: its records past these
    /// were never written (so only these need to be found empty before
    /// the save area is reused).
    records_high: u64,
}

/// Empty slot `slot`'s records, the last first: each is resumed by the
/// slot itself when the code has re-entry, the record's site is a re-entry
/// point and its reason a safepoint's or a full heap's
/// ([`offload_deopt::SiteMap::resumable`]) — a full heap's only once a
/// collection has run since the record was written (`since` counts the
/// collections then; without one the allocation would only fail again);
/// the others are replayed in the interpreter, which collects when it
/// finds the heap full (or, after an interrupt, abandoned). A record the
/// resumed workitem writes (it stopped again, or deoptimized) takes the
/// place of the one it was resumed from and is drained in turn, so the slot
/// never holds more than its `records_per_slot`. Adds the time the slot
/// spent running resumed workitems to `resuming`.
#[allow(clippy::too_many_arguments)]
fn drain_records(
    ctx: &LaunchCtx,
    ck: &CompiledKernel,
    area: &offload_deopt::SaveArea,
    slot: usize,
    replayer: &mut Replayer<'_>,
    values: &mut Vec<u64>,
    out: &mut SlotOut,
    collections: &dyn Fn() -> u64,
    mut since: u64,
    resuming: &mut Duration,
) -> Result<(), OffloadError> {
    let meta = &ck.meta;
    let per_slot = ctx.records_per_slot as usize;
    let control = replayer.control();
    let epoch = replayer.epoch();
    let words = |f: &mut dyn FnMut(&mut offload_abi::cpu::SlotWords)| {
        // SAFETY: compiled code for this slot is not running (it returned,
        // or is called below and returns before the next access), and the
        // slot's words are this worker's alone (see `run`).
        f(unsafe { &mut *ctx.slots.add(slot) })
    };
    loop {
        let mut n = 0;
        words(&mut |w| n = w.records as usize);
        if n == 0 {
            return Ok(());
        }
        let r = offload_abi::record::host_index(slot, per_slot, n - 1);
        // Park (if asked) while the record is still in the save area, whose
        // references a collection updates; from its read until the replay's
        // frames (or the resumed code's variables) hold them nothing parks.
        control.poll();
        let header = match area.read_into(r, meta, values) {
            Ok(Some(h)) => h,
            Ok(None) => {
                return Err(OffloadError::CorruptSaveArea(
                    offload_deopt::DeoptError::Empty { record: r },
                ));
            }
            Err(e) => return Err(OffloadError::CorruptSaveArea(e)),
        };
        out.cut |= control.interrupted_since(epoch);
        let resolved =
            header.2 != offload_deopt::Reason::AllocationFailure || collections() > since;
        if !out.cut
            && ck.resumes.contains(&header.1)
            && resolved
            && meta.site(header.1).is_some_and(|s| s.resumable(header.2))
        {
            words(&mut |w| {
                w.records = (n - 1) as u64;
                w.reenter = 1;
            });
            let t_run = Instant::now();
            // SAFETY: as in `run`: `ctx` describes this launch, and record
            // `r`, just past the slot's count, is the one it resumes.
            let code = unsafe { ck.run_slot(ctx, slot) };
            // Device time, not the replays'.
            *resuming += t_run.elapsed();
            since = collections();
            if code == offload_abi::exit::STOPPED {
                // A safepoint came before the workitem started: the record
                // is still to resume, after the park at the loop's top.
                words(&mut |w| {
                    w.records = n as u64;
                    w.reenter = 0;
                });
                continue;
            }
            let mut again = false;
            words(&mut |w| {
                out.on_device += w.completed;
                again = w.records as usize == n;
                w.reenter = 0;
            });
            if code == offload_abi::exit::NO_LANDING {
                return Err(OffloadError::CorruptSaveArea(
                    offload_deopt::DeoptError::NoLanding {
                        record: r,
                        site: header.1.0,
                    },
                ));
            }
            out.replays.resumed_on_device(meta, header, values);
            if !again {
                // Its values are in the workitem's variables, or it ended.
                let _ = area.clear_one(r);
            }
            continue;
        }
        let _ = area.clear_one(r);
        words(&mut |w| w.records = (n - 1) as u64);
        if out.cut {
            out.replays.abandoned(meta, header, values);
            continue;
        }
        let resumed = replayer.resume(meta, header, values);
        out.cut |= resumed.1;
        out.replays.resumed(meta, header, values, resumed)?;
    }
}

/// Marks the whole heap written by the host when dropped (a compiled
/// kernel's stores are not tracked): the GPU's copy, if any, is refreshed
/// by its next launch.
struct HostWrites<'a>(&'a offload_tlab::Heap);

impl Drop for HostWrites<'_> {
    fn drop(&mut self) {
        self.0.host_wrote(0, self.0.used() as usize);
    }
}

fn run(
    env: &LaunchEnv,
    range: Range<i64>,
    call: KernelCall<'_>,
    ck: &CompiledKernel,
    plan: &Plan,
    started: Started,
) -> Result<LaunchReport, OffloadError> {
    let t0 = Instant::now();
    let inner = env;
    // Compiled code reads and writes the heap directly: on a runtime whose
    // heap also lives on a GPU, what kernels there wrote comes back first,
    // and everything goes to the GPU after, however the launch ends.
    inner.heap.sync_host()?;
    let _wrote = HostWrites(&inner.heap);
    let prog = call.prog;
    let workers = inner.workers;
    let meta = &ck.meta;
    let per_slot = env.settings.deopt_records.max(1);
    let area = env
        .take_save_area(workers * per_slot, meta.layout)
        .map_err(OffloadError::Setup)?;
    let alloc = env.allocator(workers, plan.tlab_bytes);
    // The save area's records and the allocator's TLABs, for collections
    // while the launch runs (a replay that finds eden exhausted asks for
    // one, see `crate::gc`).
    let roots = KernelCall::device_roots(&alloc, Some((&area, meta)));
    let registered = env.gc.launch(&roots);
    let on_exhausted = KernelCall::on_exhausted(env);
    let tlabs = tlabs_of(&alloc, workers);
    let total = range.end.wrapping_sub(range.start) as u64;
    let chunk = plan.chunk.map_or_else(
        || chunk_size(total, workers, plan.item_ns),
        |c| c.min(1 << 20) as i64,
    );
    let safepoints_before = inner.control.count();
    let epoch = started.ticket;
    let mut slot_words = vec![offload_abi::cpu::SlotWords::default(); workers];
    // A part of the range per slot, each slot's home (`offload_abi::cpu::Part`), when
    // each part is a few claims; a launch of fewer claims has one part (a
    // part's shorter last claim would be a claim more than one cursor
    // makes, and a few claims are not worth keeping apart).
    let parts = if total >= (workers as u64).saturating_mul(chunk as u64 * MIN_PART_CLAIMS) {
        workers
    } else {
        1
    };
    let parts = offload_abi::cpu::Part::split(range.clone(), parts);
    let claims = offload_abi::cpu::Part::claims(&parts, chunk);
    // Each slot's home is its own part: the caller runs slot 0 and each
    // helper its own slot, launch after launch, so each thread keeps its
    // share of the range.
    for (s, words) in slot_words.iter_mut().enumerate() {
        words.home = (s % parts.len()) as u64;
    }
    let control = Arc::new(AtomicU32::new(0));
    // A safepoint request stops this launch's slots at their next poll.
    let _registered = inner
        .control
        .register(&control, offload_abi::control::SAFEPOINT);
    let own_tlabs = exclusive(&tlabs);
    let ctx = LaunchCtx {
        heap_base: inner.heap.base_ptr(),
        parts: parts.as_ptr(),
        part_count: parts.len() as i64,
        chunk,
        control: &*control,
        save_area: area.as_ptr(),
        record_words: u64::from(meta.layout.record_words),
        slots: slot_words.as_mut_ptr(),
        captures: call.captures.as_ptr().cast::<u64>(),
        records_per_slot: per_slot as u64,
        tlabs: tlabs.as_ptr().cast(),
        allocator: std::ptr::from_ref(&alloc).cast(),
        large_words: u64::from(alloc.large_words()),
        own_limit: if own_tlabs {
            u64::from(alloc.large_words())
        } else {
            0
        },
        young: u64::from(alloc.young_start()),
        nursery: u64::from(env.settings.reclaim && own_tlabs),
    };
    let outs: Vec<Mutex<SlotOut>> = (0..workers).map(|_| Mutex::default()).collect();
    let td = Instant::now();
    let slot_body = {
        let (ctx, area, alloc, on_exhausted, outs) = (&ctx, &area, &alloc, &on_exhausted, &outs);
        move |slot: usize| {
            let mut out = outs[slot].lock().unwrap_or_else(|e| e.into_inner());
            // Slots count as running for safepoints; compiled code
            // returns (rather than parks) when one is requested, and
            // this worker parks in `poll` below.
            let _running = inner.control.enter();
            let mut replayer = Replayer::new(
                prog,
                &inner.heap,
                alloc,
                &inner.control,
                slot,
                epoch,
                on_exhausted,
                meta,
            );
            out.replays = Replays::new(meta);
            let mut values = Vec::new();
            loop {
                if inner.control.interrupted_since(epoch) {
                    out.cut = true;
                    return;
                }
                out.entries += 1;
                // A slot that wrote a record and has room for more
                // returns `EXIT_RECORDED`, and is entered again at once
                // (compiled code checks the control word itself).
                let code = loop {
                    // SAFETY: `ctx` describes this launch of this kernel
                    // version: the heap outlives the launch and only
                    // grows; `captures` passed the closure's type check
                    // against the kernel; the save area has `workers *
                    // per_slot` records of this version's layout,
                    // `slot_words` has `workers` entries, and `slot <
                    // workers`; slot `slot`'s parts of them are touched
                    // only by the thread running the slot (between its
                    // entries) and its compiled code (during them); the
                    // gang (or the pool's scope) joins every slot before
                    // any of them is freed.
                    let code = unsafe { ck.run_slot(ctx, slot) };
                    // SAFETY: compiled code for this slot has returned;
                    // this word is this slot's alone (see above).
                    out.on_device += unsafe { (*ctx.slots.add(slot)).completed };
                    if code != offload_abi::exit::RECORDED {
                        break code;
                    }
                };
                // Collections from here on may have made room for the
                // allocations that failed before the slot returned.
                let since = env.gc.collections();
                // SAFETY: as above.
                let [lo, hi] = unsafe { (*ctx.slots.add(slot)).never_ran };
                // Park here if a safepoint stopped the slot; if it was an
                // interrupt, the unstarted rest stays unstarted and the
                // saved frames are dropped, not replayed.
                inner.control.poll();
                out.cut |= inner.control.interrupted_since(epoch);
                if !out.cut {
                    out.never_ran += out.passed.add(lo, hi);
                }
                let tr = Instant::now();
                // SAFETY: as above.
                let records = unsafe { (*ctx.slots.add(slot)).records };
                out.records_high = out.records_high.max(records);
                if records > 0
                    && let Err(e) = env.gc.before_replays(&env.heap, &env.control)
                {
                    out.error = Some(e);
                    return;
                }
                let collections = || env.gc.collections();
                let mut resuming = Duration::ZERO;
                let drained = drain_records(
                    ctx,
                    ck,
                    area,
                    slot,
                    &mut replayer,
                    &mut values,
                    &mut out,
                    &collections,
                    since,
                    &mut resuming,
                );
                // The replays' time: the collection before them and the
                // drain, less the resumed workitems' runs on the device.
                out.replay_time += tr.elapsed().saturating_sub(resuming);
                if let Err(e) = drained {
                    out.error = Some(e);
                    return;
                }
                // SAFETY: compiled code for this slot has returned, and
                // the words are this slot's alone (see above). Resuming
                // records left the rest empty: the stop's rest runs at
                // the slot's next entry.
                unsafe { (*ctx.slots.add(slot)).never_ran = [lo, hi] };
                out.escaped |= replayer.escaped();
                if code == offload_abi::exit::DONE || out.cut {
                    return;
                }
            }
        }
    };
    // The launch team runs the slots, the caller taking slot 0; while
    // another thread's launch has it, the thread pool does. The slots
    // drain the parts together: slot 0 returns when every part is spent
    // (or the launch is cut short), and a slot that has not started by
    // then has nothing to do.
    if env.gang.run_draining(&slot_body).is_err() {
        inner.pool.scope(|s| {
            for slot in 0..workers {
                let slot_body = &slot_body;
                s.spawn(move |_| slot_body(slot));
            }
        });
    }
    let t_merge = Instant::now();
    let mut report = LaunchReport::new(call.name(), Device::Cpu, range, workers);
    let mut replays = Replays::default();
    let mut escaped = false;
    let mut replay_time = Duration::ZERO;
    let mut written = Vec::with_capacity(workers);
    for (slot, o) in outs.into_iter().enumerate() {
        let o = o.into_inner().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = o.error {
            return Err(e);
        }
        escaped |= o.escaped;
        report.on_device += o.on_device;
        report.never_ran += o.never_ran;
        // A slot's first entry is not a re-entry (and a slot the launch
        // team skipped has none).
        report.reentries += o.entries.saturating_sub(1);
        let first = offload_abi::record::slot_records(slot, per_slot).start;
        written.push(first..first + o.records_high as usize);
        replays = replays.merge(o.replays);
        replay_time = replay_time.max(o.replay_time);
    }
    let thrown = replays.finish(prog, meta, &mut report);
    // Compiled code's barrier notes escapes in the slot words, a replay's
    // in the interpreter.
    let escaped = slot_words.iter().any(|s| s.escaped != 0) || escaped;
    drop(registered);
    let mut alloc_stats = env.end_allocation(alloc, escaped, safepoints_before);
    alloc_stats.recycled = slot_words.iter().map(|s| s.recycled * 8).sum();
    env.give_back_save_area(area, &written);
    report.chunks = claims;
    report.alloc = alloc_stats;
    report.timings = Timings::from_rounds(
        [started.at, t0, td, t_merge, Instant::now()],
        None,
        replay_time,
    );
    report.safepoints = inner.control.count() - safepoints_before;
    report.version = Some(ck.version);
    report.quick_tier = ck.quick;
    report.speculations = meta.speculations.clone();
    thrown.finish(report)
}

#[cfg(test)]
mod tests {
    use super::chunk_size;

    #[test]
    fn claims_balance_and_are_worth_their_cost() {
        // Unknown cost: about 32 claims per worker, at most 16384.
        assert_eq!(chunk_size(1 << 20, 2, None), 16384);
        assert_eq!(chunk_size(1024, 2, None), 16);
        assert_eq!(chunk_size(10, 2, None), 1);
        // Cheap workitems: claims of at least a microsecond of work.
        assert_eq!(chunk_size(1024, 2, Some(2.0)), 500);
        assert_eq!(chunk_size(1 << 20, 2, Some(0.06)), 16384);
        // Dear ones: the balanced size wins.
        assert_eq!(chunk_size(512, 2, Some(250.0)), 8);
        assert_eq!(chunk_size(65536, 2, Some(60.0)), 1024);
        // A nonsense estimate still gives a claim.
        assert_eq!(chunk_size(1024, 2, Some(0.0)), 16384);
        assert_eq!(chunk_size(1024, 2, Some(f64::INFINITY)), 16);
    }
}
