//! One launch on the CPU device: its steps of the launch protocol
//! (`protocol.rs`) — the slot words, parts and launch context
//! ([`CpuLaunch`]), and each worker's slot as a unit of rounds
//! ([`CpuSlot`]).

use super::Tiers;
use super::{MIN_PART_CLAIMS, chunk_size};
use crate::adaptive::Plan;
use crate::device::Device;
use crate::env::{KernelCall, LaunchEnv, Started, exclusive, tlabs_of};
use crate::error::OffloadError;
use crate::protocol::{
    self, Code, Compiled, DeviceFacts, HandedBack, Launch, Round, Rounds, UnitOut,
};
use crate::replay::{Header, Replayer};
use crate::report::LaunchReport;
use offload_abi::cpu::{Part, SlotWords, VALUES_PER_SLOT};
use offload_abi::reduce::{Builder, Scalar};
use offload_abi::{exit, record};
use offload_deopt::{Reason, SaveArea};
use offload_heap::Allocator;
use offload_jit::{CompiledKernel, LaunchCtx};
use std::ops::Range;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

/// Run `ck` over `range`: one launch on the CPU device.
pub(super) fn run(
    env: &LaunchEnv,
    range: Range<i64>,
    call: KernelCall<'_>,
    ck: &Arc<CompiledKernel>,
    tiers: Option<&Tiers>,
    plan: &Plan,
    started: Started,
) -> Result<LaunchReport, OffloadError> {
    // Compiled code reads and writes the heap directly: on a runtime whose
    // heap also lives on a GPU, what kernels there wrote comes back first,
    // and everything goes to the GPU after, however the launch ends.
    let dev = CpuLaunch {
        ck,
        tiers,
        // The quick tier's launch watches for the optimized code; any other
        // has the best there is, or runs the code it began with (its word
        // is never set).
        better: match tiers {
            Some(t) if ck.quick => t.watch(),
            _ => Arc::default(),
        },
        image: raw_image(env, &call, &range)?,
    };
    let code = Code {
        meta: &ck.meta,
        landings: &ck.resumes,
    };
    protocol::run(&dev, env, call, code, plan, range, started)
}

/// The heap as compiled code sees it. A kernel that reaches
/// nothing but its arrays of numbers (`crate::footprint`) fetches the
/// chunks it reads or writes over `range` (of an array it reaches only at
/// its workitems' own elements, those elements' chunks) and marks only
/// those it writes: the GPUs' next launches are not sent the rest of the
/// heap, what it only read, or the other parts' elements again (after
/// each CPU part of a split launch, the whole heap was; later, every
/// chunk of its arrays). One that also allocates, its arrays and
/// everything above eden's top (where its objects will be): a CPU part of
/// a split launch does not fetch what the GPUs' parts made before. Any
/// other kernel, the whole heap.
fn raw_image<'a>(
    env: &'a LaunchEnv,
    call: &KernelCall<'_>,
    range: &Range<i64>,
) -> Result<offload_heap::RawImage<'a>, OffloadError> {
    let heap = &env.heap;
    if !heap.is_mirrored() {
        // No device holds a copy: nothing to fetch or mark.
        return Ok(heap.raw_image()?);
    }
    if call.prog.may_allocate(call.kernel) {
        let fp = crate::footprint::of_captures(call, |r| {
            crate::footprint::array_bytes(heap.header(r), r)
        })?;
        return Ok(match fp {
            Some(fp) => heap.raw_image_allocating(fp)?,
            None => heap.raw_image()?,
        });
    }
    let touched = crate::footprint::touched_over(call, range, |r| {
        crate::footprint::array_bytes(heap.header(r), r)
    })?;
    Ok(match touched {
        Some((reads, writes)) => heap.raw_image_touching(&reads, writes)?,
        None => heap.raw_image()?,
    })
}

/// The CPU device's side of one launch of `ck`.
struct CpuLaunch<'a> {
    ck: &'a Arc<CompiledKernel>,
    /// The version's tiers: a launch that began on the quick tier has its
    /// slots switch to the optimized code once it is ready (`None`: it
    /// keeps the code it began with).
    tiers: Option<&'a Tiers>,
    /// Set when the optimized code is ready (`LaunchCtx::better`).
    better: Arc<AtomicU32>,
    /// The heap as compiled code sees it (a compiled kernel's stores are
    /// not tracked: dropped, it marks the whole heap written).
    image: offload_heap::RawImage<'a>,
}

/// The CPU's state for one launch.
struct CpuState {
    /// Save records per slot.
    per_slot: usize,
    /// Workitems per claim.
    chunk: i64,
    /// The range cut into parts, each slot's home first in its claims.
    parts: Vec<Part>,
    /// Claims the parts are cut into ([`LaunchReport::chunks`]).
    claims: u64,
    /// Each slot's words.
    slot_words: Vec<SlotWords>,
    /// Per slot, the records it may have written (the others were never
    /// written, so only these need to be found empty before the save
    /// area is reused).
    written: Vec<Range<usize>>,
    /// A replay stored a reference to an object of this launch into an
    /// older object (the interpreter's write barrier).
    escaped: bool,
    /// Workitems the quick tier completed ([`LaunchReport::quick_workitems`]).
    quick: u64,
    /// For a reducing kernel, the slots' value buffers
    /// (`LaunchCtx::values`; empty otherwise).
    values: Vec<u64>,
}

impl Compiled for CpuLaunch<'_> {
    type State = CpuState;
    const DEVICE: Device = Device::Cpu;

    fn prepare(
        &self,
        env: &LaunchEnv,
        call: KernelCall<'_>,
        plan: &Plan,
        range: &Range<i64>,
    ) -> Result<(CpuState, usize, SaveArea), OffloadError> {
        let workers = env.workers;
        let per_slot = env.settings.deopt_records.max(1);
        let area = env
            .take_save_area(workers * per_slot, self.ck.meta.layout)
            .map_err(OffloadError::Setup)?;
        let total = range.end.wrapping_sub(range.start) as u64;
        let chunk = plan.chunk.map_or_else(
            || chunk_size(total, workers, plan.item_ns),
            |c| c.min(1 << 20) as i64,
        );
        // A part of the range per slot, each slot's home (`Part`), when
        // each part is a few claims; a launch of fewer claims has one part
        // (a part's shorter last claim would be a claim more than one
        // cursor makes, and a few claims are not worth keeping apart).
        let parts = if total >= (workers as u64).saturating_mul(chunk as u64 * MIN_PART_CLAIMS) {
            workers
        } else {
            1
        };
        let parts = Part::split(range.clone(), parts);
        let claims = Part::claims(&parts, chunk);
        // Each slot's home is its own part: the caller runs slot 0 and each
        // helper its own slot, launch after launch, so each thread keeps
        // its share of the range.
        let mut slot_words = vec![SlotWords::default(); workers];
        for (s, words) in slot_words.iter_mut().enumerate() {
            words.home = (s % parts.len()) as u64;
        }
        let state = CpuState {
            per_slot,
            chunk,
            parts,
            claims,
            slot_words,
            written: Vec::with_capacity(workers),
            escaped: false,
            quick: 0,
            values: if call.reduction().is_some() {
                vec![0; workers * VALUES_PER_SLOT as usize]
            } else {
                Vec::new()
            },
        };
        Ok((state, workers, area))
    }

    fn wait_bits(&self, _env: &LaunchEnv) -> u32 {
        0
    }

    fn units(
        &self,
        launch: &Launch<'_>,
        state: &mut CpuState,
        range: &Range<i64>,
    ) -> Result<Vec<UnitOut>, OffloadError> {
        let env = launch.env;
        let n = range.end.wrapping_sub(range.start) as u64;
        let workers = env.workers;
        // Compiled code indexes `tlabs` by the kernel's kinds of
        // allocation: the allocator must have exactly those.
        if launch.alloc.kinds() != launch.call.prog.allocation_kinds(launch.call.kernel) {
            return Err(OffloadError::Setup(
                "the launch's allocator does not have the kernel's kinds of allocation".into(),
            ));
        }
        let tlabs = tlabs_of(launch.alloc, workers);
        let own_tlabs = exclusive(&tlabs);
        let alloc = launch.alloc;
        let ctx = LaunchCtx {
            heap_base: self.image.base_ptr(),
            parts: state.parts.as_ptr(),
            part_count: state.parts.len() as i64,
            chunk: state.chunk,
            control: &**launch.control,
            save_area: launch.area.as_ptr(),
            record_words: u64::from(self.ck.meta.layout.record_words),
            slots: state.slot_words.as_mut_ptr(),
            captures: launch.call.captures.as_ptr().cast::<u64>(),
            records_per_slot: state.per_slot as u64,
            tlabs: tlabs.as_ptr().cast(),
            allocator: std::ptr::from_ref(alloc).cast(),
            large_words: u64::from(alloc.large_words()),
            own_limit: if own_tlabs {
                u64::from(alloc.large_words())
            } else {
                0
            },
            young: u64::from(alloc.young_start()),
            nursery: u64::from(env.settings.reclaim && own_tlabs),
            pages: env.heap.pages().as_ptr(),
            better: Arc::as_ptr(&self.better),
            values: if state.values.is_empty() {
                std::ptr::null_mut()
            } else {
                state.values.as_mut_ptr()
            },
            copies: launch
                .call
                .copies
                .map_or(std::ptr::null(), |t| t.cells.as_ptr().cast::<u64>()),
            copy_rows: launch.call.copies.map_or(0, |t| t.rows as u64),
        };
        let per_slot = state.per_slot;
        let outs: Vec<Mutex<Option<SlotResult>>> = (0..workers).map(|_| Mutex::default()).collect();
        let slot_body = |slot: usize| {
            let mut unit = CpuSlot::new(launch, &ctx, self.ck, self.tiers, slot, per_slot);
            unit.values = launch
                .call
                .reduction()
                .map(|(ty, c)| (range.start, Builder::new(n, ty, c)));
            let out = protocol::drive(launch, &mut unit);
            let escaped = unit.replayer.as_ref().is_some_and(Replayer::escaped);
            let nodes = unit
                .values
                .take()
                .map_or_else(Vec::new, |(_, b)| b.finish());
            let result = out.map(|mut o| {
                o.nodes = nodes;
                (o, unit.records_high, escaped, unit.quick)
            });
            *outs[slot].lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
        };
        // The launch team runs the slots, the caller taking slot 0; while
        // another thread's launch has it, this one runs beside it (slot 0
        // here, the others on the team's helpers as they come free), and
        // with a third at once, the thread pool runs it. The slots drain
        // the parts together: slot 0 returns when every part is spent (or
        // the launch is cut short), and a slot that has not started by
        // then has nothing to do.
        if env.gang.run_draining(&slot_body).is_err() && env.gang.run_beside(&slot_body).is_err() {
            env.pool.scope(|s| {
                for slot in 0..workers {
                    let slot_body = &slot_body;
                    s.spawn(move |_| slot_body(slot));
                }
            });
        }
        let mut units = Vec::with_capacity(workers);
        for (slot, o) in outs.into_iter().enumerate() {
            let first = record::slot_records(slot, per_slot).start;
            match o.into_inner().unwrap_or_else(|e| e.into_inner()) {
                Some(Ok((out, high, escaped, quick))) => {
                    state.written.push(first..first + high as usize);
                    state.escaped |= escaped;
                    state.quick += quick;
                    units.push(out);
                }
                Some(Err(e)) => return Err(e),
                // A slot the launch team skipped: it has nothing to tell.
                None => {}
            }
        }
        Ok(units)
    }

    fn finish(
        &self,
        env: &LaunchEnv,
        state: CpuState,
        area: SaveArea,
        alloc: Allocator<'_>,
        safepoints_before: u64,
    ) -> DeviceFacts {
        // Compiled code's barrier notes escapes in the slot words, a
        // replay's in the interpreter.
        let escaped = state.slot_words.iter().any(|s| s.escaped != 0) || state.escaped;
        let mut alloc_stats = env.end_allocation(alloc, escaped, safepoints_before);
        alloc_stats.recycled = state.slot_words.iter().map(|s| s.recycled * 8).sum();
        env.give_back_save_area(area, &state.written);
        DeviceFacts {
            chunks: state.claims,
            alloc: alloc_stats,
            version: self.ck.version,
            quick_tier: self.ck.quick,
            quick_workitems: state.quick,
            ..DeviceFacts::default()
        }
    }
}

/// What a slot's rounds came to: the protocol's account, the most records
/// it held at once, whether a replay let an object escape, and the
/// workitems its quick-tier code completed.
type SlotResult = Result<(UnitOut, u64, bool, u64), OffloadError>;

/// One worker's slot as a unit of the protocol: a round enters the slot
/// once — to resume one record handed back (the last first), or to run
/// its unstarted rest and claim (entered again at once while it returns
/// `RECORDED`).
struct CpuSlot<'a> {
    ctx: &'a LaunchCtx,
    area: &'a SaveArea,
    /// The code the slot runs: the quick tier until the optimized code is
    /// ready, that after (`CpuSlot::tier_up`).
    ck: Arc<CompiledKernel>,
    tiers: Option<&'a Tiers>,
    /// Workitems the quick tier completed.
    quick: u64,
    slot: usize,
    /// The slot's first save record.
    first: usize,
    /// The slot's replayer (lent to the protocol while it drains).
    replayer: Option<Replayer<'a>>,
    /// Records handed back, resumed from the last.
    handed: Vec<HandedBack>,
    /// The slot's unstarted rest while its records are resumed (an entry
    /// that resumes one leaves its never-ran words empty).
    rest: [i64; 2],
    /// The slot's claims found the range exhausted.
    exhausted: bool,
    /// The collections there had been when the slot last returned: a full
    /// heap's record is resumed only after one more.
    since: u64,
    /// The allocation failures its records were resumed after.
    resumed_alloc: crate::replay::AllocResumes,
    /// The most records the slot held at once.
    records_high: u64,
    /// The collector, for `since`.
    gc: &'a crate::gc::Collector,
    /// For a reducing kernel: the range's start and the slot's values,
    /// joined into the combine tree as it hands them on.
    values: Option<(i64, Builder)>,
}

impl<'a> CpuSlot<'a> {
    fn new(
        launch: &'a Launch<'a>,
        ctx: &'a LaunchCtx,
        ck: &Arc<CompiledKernel>,
        tiers: Option<&'a Tiers>,
        slot: usize,
        per_slot: usize,
    ) -> CpuSlot<'a> {
        let env = launch.env;
        CpuSlot {
            ctx,
            area: launch.area,
            ck: ck.clone(),
            tiers,
            quick: 0,
            slot,
            first: record::slot_records(slot, per_slot).start,
            replayer: Some(Replayer::new(
                launch.call.prog,
                &env.heap,
                launch.alloc,
                &env.control,
                slot,
                launch.epoch,
                &launch.on_exhausted,
                launch.meta,
            )),
            handed: Vec::new(),
            rest: [0, 0],
            exhausted: false,
            since: 0,
            resumed_alloc: Default::default(),
            records_high: 0,
            gc: &env.gc,
            values: None,
        }
    }

    /// Enter the slot once; the exit code and the workitems it completed.
    fn enter(&mut self) -> (u32, u64) {
        // SAFETY: `ctx` describes this launch of this kernel version: the
        // heap outlives the launch and only grows; `captures` passed the
        // closure's type check against the kernel; the save area has
        // `workers * per_slot` records of this version's layout, the slot
        // words `workers` entries, and `slot < workers`; slot `slot`'s
        // parts of them are touched only by this thread (between its
        // entries) and its compiled code (during them); the launch team
        // (or the pool's scope) joins every slot before any of them is
        // freed.
        let code = unsafe { self.ck.run_slot(self.ctx, self.slot) };
        self.take_values();
        let completed = self.words(|w| w.completed);
        if self.ck.quick {
            self.quick += completed;
        }
        (code, completed)
    }

    /// After an entry of the quick tier that stopped: switch to the
    /// optimized code if it is ready (the quick tier stops before a claim
    /// once it is: `LaunchCtx::better`), so that the slot's next entry runs
    /// it. Both tiers come from one lowering with one deopt metadata, so
    /// the slot's records and unstarted rest carry over as they are (and
    /// the slot keeps its code where the metadata were to differ).
    fn tier_up(&mut self) -> bool {
        match self.tiers.and_then(Tiers::optimized) {
            Some(opt) if self.ck.quick && opt.meta == self.ck.meta => {
                self.ck = opt.clone();
                true
            }
            _ => false,
        }
    }

    /// Join the values the slot's last entry left in its buffer into its
    /// tree, and empty the buffer.
    fn take_values(&mut self) {
        let Some((start, b)) = self.values.as_mut() else {
            return;
        };
        let start = *start;
        // SAFETY: compiled code for this slot is not running, and the
        // slot's words are this thread's alone (see `enter`).
        let words = unsafe { &mut *self.ctx.slots.add(self.slot) };
        let filled = std::mem::take(&mut words.values).min(VALUES_PER_SLOT as u64) as usize;
        if filled == 0 {
            return;
        }
        let first = words.values_first;
        let at = self
            .ctx
            .values
            .wrapping_add(self.slot * VALUES_PER_SLOT as usize);
        let p = first.wrapping_sub(start) as u64;
        if matches!(b.ty(), Scalar::I32 | Scalar::F32) {
            // 4 bytes each (`LaunchCtx::values`).
            // SAFETY: as below, in half the slot's bytes.
            let values = unsafe { std::slice::from_raw_parts_mut(at.cast::<u32>(), filled) };
            b.push_values32(p, values);
        } else {
            // SAFETY: `values` holds `VALUES_PER_SLOT` words per slot for
            // a reducing kernel (this one: `self.values` is set), of which
            // this slot's are written only by its compiled code, which
            // returned.
            let values = unsafe { std::slice::from_raw_parts_mut(at, filled) };
            b.push_values(p, values);
        }
    }

    /// Read or write the slot's words between its entries.
    fn words<R>(&mut self, f: impl FnOnce(&mut SlotWords) -> R) -> R {
        // SAFETY: compiled code for this slot is not running (it returned,
        // or is entered after this returns), and the slot's words are this
        // thread's alone (see `enter`).
        f(unsafe { &mut *self.ctx.slots.add(self.slot) })
    }

    /// A round that resumes handed-back record `r`.
    fn resume(&mut self, (r, h, v): HandedBack) -> Result<Round, OffloadError> {
        let n = (r - self.first) as u64;
        // The record just past the count is the one the slot resumes.
        self.words(|w| {
            w.records = n;
            w.reenter = 1;
        });
        let (code, completed) = self.enter();
        self.since = self.gc.collections();
        self.words(|w| w.reenter = 0);
        let mut round = Round {
            completed,
            done: self.exhausted,
            ..Round::default()
        };
        if code == exit::STOPPED {
            // A safepoint came before the workitem started: the record is
            // still to resume, after the park.
            self.handed.push((r, h, v));
            return Ok(round);
        }
        if code == exit::NO_LANDING {
            return Err(OffloadError::CorruptSaveArea(
                offload_deopt::DeoptError::NoLanding {
                    record: r,
                    site: h.1.0,
                },
            ));
        }
        // Its values are in the workitem's variables, or it ended; if it
        // stopped again, its new record took the same place.
        if self.words(|w| w.records) == n + 1 {
            round.records.push(r);
        } else {
            let _ = self.area.clear_one(r);
        }
        round.resumed.push((r, h, v));
        Ok(round)
    }
}

impl<'a> Rounds<'a> for CpuSlot<'a> {
    fn run(&mut self, _launch: &Launch<'_>) -> Result<Round, OffloadError> {
        if let Some(rec) = self.handed.pop() {
            return self.resume(rec);
        }
        // Every record is resumed or replayed: the slot starts with its
        // unstarted rest.
        let rest = self.rest;
        self.words(|w| {
            w.records = 0;
            w.never_ran = rest;
        });
        // A slot that wrote a record and has room for more returns
        // `RECORDED`, and is entered again at once (compiled code checks
        // the control word itself).
        let mut completed = 0;
        let code = loop {
            let (code, done) = self.enter();
            completed += done;
            // A stop of the quick tier with the optimized code ready (or a
            // safepoint's stop that finds it ready): the optimized code goes
            // on at once from the same words; a safepoint stops it again
            // before its first workitem.
            if code == exit::STOPPED && self.tier_up() {
                continue;
            }
            // A full values buffer was taken as the slot returned.
            if code != exit::RECORDED && code != exit::VALUES {
                break code;
            }
        };
        // Collections from here on may have made room for the
        // allocations that failed before the slot returned.
        self.since = self.gc.collections();
        let ([lo, hi], records) = self.words(|w| (w.never_ran, w.records));
        self.rest = [lo, hi];
        self.records_high = self.records_high.max(records);
        self.exhausted |= code == exit::DONE;
        Ok(Round {
            completed,
            never_ran: smallvec::smallvec![lo, hi],
            // The last first.
            records: (0..records as usize)
                .rev()
                .map(|n| self.first + n)
                .collect(),
            claimed: true,
            done: code == exit::DONE,
            ..Round::default()
        })
    }

    fn may_resume(&mut self, r: usize, h: Header) -> bool {
        if h.2 == Reason::AllocationFailure && self.gc.collections() <= self.since {
            return false;
        }
        self.resumed_alloc.may_resume(r - self.first, h)
    }

    fn hand_back(&mut self, records: Vec<HandedBack>) {
        // Drained last first: the first handed back is resumed last.
        self.handed.extend(records.into_iter().rev());
    }

    fn has_handed_back(&self) -> bool {
        !self.handed.is_empty()
    }

    fn take_handed_back(&mut self) -> Vec<HandedBack> {
        std::mem::take(&mut self.handed)
    }

    fn take_replayer(&mut self) -> Option<Replayer<'a>> {
        self.replayer.take()
    }

    fn put_replayer(&mut self, rp: Replayer<'a>) {
        self.replayer = Some(rp);
    }
}

#[cfg(test)]
mod tests {
    use crate::{Device, Runtime, par_offload};
    use offload_deopt::{Reason, reentry_point};
    use offload_jit::Injection;

    const SPIN: &str = include_str!("../../examples/kernels/spin.obc");

    /// A record the slot resumed and ran to its end is cleared: after a
    /// launch that stops every workitem at its loop header and resumes it
    /// on the device, every record is empty, so the save area goes back to
    /// the pool (a stale record would also be a root of no workitem).
    #[test]
    fn records_resumed_on_the_device_leave_the_save_area_empty() {
        let probe = Runtime::builder()
            .device(Device::Interpreter)
            .build()
            .unwrap();
        let m = probe.load("spin.obc", SPIN).unwrap();
        let k = m.program().verified().func_named("spin").unwrap();
        let site = m.program().analysis(k).unwrap().sites.clone();
        let site = site
            .iter()
            .find(|s| reentry_point(s))
            .expect("a loop header");
        for records in [1, 4] {
            let rt = Runtime::builder()
                .device(Device::Cpu)
                .workers(2)
                .tiered(false)
                .deopt_records(records)
                .inject(Injection {
                    site_bci: site.bci,
                    modulus: 3,
                    remainder: 0,
                    reason: Some(Reason::Safepoint),
                })
                .build()
                .unwrap();
            let m = rt.load("spin.obc", SPIN).unwrap();
            let out = rt.new_array::<i32>(64).unwrap();
            let c = m.closure("spin", [10i32.into(), (&out).into()]).unwrap();
            let r = par_offload(0..64, &c).unwrap();
            assert!(r.resumed > 0, "{r}");
            assert_eq!(rt.read(&out).unwrap(), vec![10; 64]);
            let pooled = rt.inner.env.pooled_save_areas();
            assert_eq!(pooled, [true], "records per slot {records}: {r}");
        }
    }
}
