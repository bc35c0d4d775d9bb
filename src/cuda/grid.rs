//! The GPU's rounds: the whole grid is one unit of the launch protocol
//! (`protocol.rs`), and a round is one grid launch — a fresh device eden,
//! the heap image brought up to date, the kernel run while the host
//! passes safepoint requests to it (`wait.rs`), then what it left brought
//! back: counters, the eden's top, the dirty map, and the records,
//! never-ran rests and exit codes when a slot left work behind.

use super::launch::GpuState;
use super::wait::{Fairness, Waiting};
use super::{DEVICE_EDEN_BYTES, Gpu, Loaded, cuda_err};
use crate::error::OffloadError;
use crate::protocol::{HandedBack, Launch, Round, Rounds};
use crate::replay::{Header, Replayer};
use cudarc::driver::{CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};
use offload_abi::gpu::{self, DeviceCtx, counter};
use offload_abi::record;
use offload_heap::layout::Header as ObjectHeader;
use offload_ir::SiteId;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// A launch's device buffers, made once and kept across its rounds.
pub(super) struct Buffers {
    /// Per slot, its unstarted rest (zero: its part not started).
    never: CudaSlice<i64>,
    exits: CudaSlice<u32>,
    stats: CudaSlice<u64>,
    /// Slots waiting in place plus slots gone, zeroed before each round.
    parked: CudaSlice<u32>,
    /// Injected safepoints' per-slot state, kept across rounds.
    inject: CudaSlice<u64>,
    tlabs: CudaSlice<u8>,
    captures: CudaSlice<u64>,
    eden: CudaSlice<u64>,
}

/// The captures as raw slots, at least one (a buffer is never empty).
fn capture_values(launch: &Launch<'_>) -> Vec<u64> {
    let v = launch.call.capture_values();
    if v.is_empty() { vec![0u64] } else { v }
}

impl Buffers {
    /// The buffers of a launch with `state`'s shape, and the
    /// device half of the save area filled empty.
    pub(super) fn new(
        gpu: &Gpu,
        launch: &Launch<'_>,
        state: &mut GpuState,
    ) -> Result<Buffers, OffloadError> {
        let s = &gpu.stream;
        let slots = state.slots;
        let tlabs_n = (slots as u64).div_ceil(state.group.max(1)) as usize;
        let b = Buffers {
            never: s
                .alloc_zeros(slots * gpu::NEVER_RAN_BYTES as usize / 8)
                .map_err(cuda_err("never_ran"))?,
            exits: s.alloc_zeros(slots).map_err(cuda_err("exits"))?,
            stats: s
                .alloc_zeros(counter::COUNT)
                .map_err(cuda_err("counters"))?,
            parked: s.alloc_zeros(1).map_err(cuda_err("parked count"))?,
            inject: s.alloc_zeros(slots).map_err(cuda_err("injection state"))?,
            tlabs: s
                .alloc_zeros(tlabs_n * gpu::TLAB_BYTES as usize)
                .map_err(cuda_err("TLABs"))?,
            captures: s
                .clone_htod(&capture_values(launch))
                .map_err(cuda_err("captures"))?,
            eden: s.alloc_zeros(gpu::EDEN_WORDS).map_err(cuda_err("eden"))?,
        };
        // The device's area starts empty: every word all ones (an empty
        // record's site word), set on the device rather than sent.
        {
            let (ap, _g) = state.area_dev.device_ptr(s);
            let bytes = launch.area.bytes();
            // SAFETY: `ap` is the device half of the area, `bytes` long.
            unsafe { cudarc::driver::result::memset_d8_async(ap, 0xFF, bytes, s.cu_stream()) }
                .map_err(cuda_err("save area"))?;
        }
        state.totals.to_device += 8 * (1 + launch.call.captures.len().max(1) as u64);
        Ok(b)
    }
}

/// The grid as a unit of the launch protocol.
pub(super) struct Grid<'a> {
    gpu: &'a Gpu,
    k: &'a Loaded,
    state: &'a mut GpuState,
    b: Buffers,
    range: Range<i64>,
    /// Records handed back, resumed by the next round.
    handed: Vec<HandedBack>,
    /// Per slot, the (workitem, site) of the allocation failure it was
    /// last given to resume: failing there again goes to the interpreter
    /// (sized on first use: most launches leave no records).
    resumed_alloc: Vec<Option<(i64, SiteId)>>,
    fairness: Fairness,
    trace: super::trace::Trace,
    safepoints_before: u64,
}

/// Save records per slot on the GPU: a slot that deoptimizes leaves the
/// grid with its record (the relaunch resumes it, or the host replays it).
pub(super) const RECORDS_PER_SLOT: usize = 1;

/// One round's device eden, in heap words.
type Eden = (u32, u32);

impl<'a> Grid<'a> {
    pub(super) fn new(
        gpu: &'a Gpu,
        k: &'a Loaded,
        launch: &Launch<'_>,
        state: &'a mut GpuState,
        b: Buffers,
        range: Range<i64>,
    ) -> Grid<'a> {
        let trace = super::trace::Trace::new();
        trace.say(|| {
            format!(
                "{} over {range:?}: {} slots in {} blocks of {}, grid-stride, wait in place {}",
                launch.call.name(),
                state.slots,
                Self::blocks(state.slots),
                super::BLOCK,
                launch.env.settings.wait_in_place
            )
        });
        Grid {
            gpu,
            k,
            state,
            b,
            range,
            handed: Vec::new(),
            resumed_alloc: Vec::new(),
            fairness: Fairness::default(),
            trace,
            safepoints_before: launch.env.control.count(),
        }
    }

    fn blocks(slots: usize) -> u32 {
        (slots as u32).div_ceil(super::BLOCK)
    }

    /// Carve the round's device eden from the heap. Injected refill
    /// failures (`fail_refills(first, _)`) give the device an eden of
    /// `first` TLABs: the refills after those find it exhausted, publish
    /// FAILED, and their waiters deopt with `AllocationFailure`.
    fn carve(&mut self, launch: &Launch<'_>) -> Result<Eden, OffloadError> {
        let env = launch.env;
        let tlab_words = self.state.tlab_words;
        let want = match env.settings.fail_refills {
            Some((first, _)) => {
                (first.max(1) * tlab_words).min(u64::from(DEVICE_EDEN_BYTES / 8)) as u32
            }
            None => self.gpu.eden_words.load(Ordering::Relaxed),
        };
        let min = (tlab_words as u32).max(2).min(want.max(2));
        // No room for the device eden: collect (this thread is a running
        // worker, the device holds no heap image now) and try once more.
        let carved = match env.heap.carve_device_region(min, want) {
            Some(r) => Some(r),
            None => {
                env.gc.collect_here(&env.heap, &env.control)?;
                env.heap.carve_device_region(min, want)
            }
        };
        carved.ok_or_else(|| {
            OffloadError::Setup(format!(
                "heap exhausted: no room for a device eden of {} bytes, even after a collection",
                u64::from(min) * 8
            ))
        })
    }

    /// Send what the round needs: on a relaunch the captures and the
    /// records handed back (after any collection since the last round,
    /// which updated them on the host); the heap chunks the host wrote
    /// since the device last had them; the zeroed eden and its bounds.
    fn send(&mut self, launch: &Launch<'_>, (es, ee): Eden) -> Result<(), OffloadError> {
        let (gpu, s) = (self.gpu, &self.gpu.stream);
        let totals = &mut self.state.totals;
        if totals.launches > 1 {
            s.memcpy_htod(&capture_values(launch), &mut self.b.captures)
                .map_err(cuda_err("captures"))?;
            // SAFETY: nothing else reads or writes the area during the copy.
            s.memcpy_htod(unsafe { area_words(launch.area) }, &mut self.state.area_dev)
                .map_err(cuda_err("save area"))?;
            totals.to_device +=
                launch.area.bytes() as u64 + 8 * launch.call.captures.len().max(1) as u64;
        }
        // The device image holds the heap up to the device eden's end
        // (whole chunks); what the host wrote since the device last had it
        // goes up (outside the device eden, which the device zeroes), and
        // nothing else crosses the bus.
        let heap = &launch.env.heap;
        let dh = &gpu.resident;
        let eden_bytes = es as usize * 8..ee as usize * 8;
        let runs = heap.take_device_stale(eden_bytes.clone());
        let need = runs.iter().map(|r| r.end).fold(eden_bytes.end, usize::max);
        dh.ensure(need)?;
        totals.to_device += dh.push(heap, &runs)?;
        dh.zero_eden(eden_bytes)?;
        let mut bounds = [0u64; gpu::EDEN_WORDS];
        (bounds[gpu::EDEN_TOP], bounds[gpu::EDEN_LIMIT]) = (u64::from(es), u64::from(ee));
        s.memcpy_htod(&bounds, &mut self.b.eden)
            .map_err(cuda_err("eden"))?;
        totals.to_device += 16 + std::mem::size_of::<DeviceCtx>() as u64;
        s.memset_zeros(&mut self.b.tlabs)
            .map_err(cuda_err("TLABs"))?;
        s.memset_zeros(&mut self.b.parked)
            .map_err(cuda_err("parked count"))?;
        Ok(())
    }

    /// Launch the grid. Returns the launch context's buffer (it must live
    /// until the kernel is done: freeing it while the kernel runs would,
    /// on a device without memory pools, wait for the kernel there, before
    /// the host passes safepoint requests to it), and the eden's and the
    /// parked count's addresses.
    fn start(&mut self, launch: &Launch<'_>) -> Result<(CudaSlice<u64>, u64, u64), OffloadError> {
        let (gpu, s, st) = (self.gpu, &self.gpu.stream, &*self.state);
        // The device addresses are taken in a scope of their own: their
        // guards record the launch's use of each buffer when they drop.
        let (hp, dirty) = gpu.resident.addresses();
        let (pp, _g1) = self.b.parked.device_ptr(s);
        let (ap, _g3) = st.area_dev.device_ptr(s);
        let (np, _g4) = self.b.never.device_ptr(s);
        let (kp, _g5) = self.b.captures.device_ptr(s);
        let (tp, _g6) = self.b.tlabs.device_ptr(s);
        let (ep, _g7) = self.b.eden.device_ptr(s);
        let (xp, _g8) = self.b.exits.device_ptr(s);
        let (sp, _g9) = self.b.stats.device_ptr(s);
        let (ip, _g10) = self.b.inject.device_ptr(s);
        let ctx = DeviceCtx {
            heap_base: hp,
            start: self.range.start,
            end: self.range.end,
            control: gpu.control_dev,
            save_area: ap,
            record_words: u64::from(launch.meta.layout.record_words),
            never_ran: np,
            captures: kp,
            records_per_slot: RECORDS_PER_SLOT as u64,
            tlabs: tp,
            tlab_group: st.group,
            eden: ep,
            large_words: st.tlab_words / 4,
            slots: st.slots as u64,
            tlab_words: st.tlab_words,
            exits: xp,
            stats: sp,
            inject: ip,
            dirty,
            parked: pp,
        };
        let ctx_dev = s
            .clone_htod(&ctx.to_words()[..])
            .map_err(cuda_err("launch context"))?;
        {
            let (ctx_ptr, _g) = ctx_dev.device_ptr(s);
            gpu.set_control(0)?;
            let mut b = s.launch_builder(&self.k.func);
            b.arg(&ctx_ptr);
            // SAFETY: the kernel takes one `u64`, the address of a
            // `DeviceCtx` whose buffers all live until the stream is
            // synchronized after the round; sizes match the slot count of
            // the grid.
            unsafe {
                b.launch(LaunchConfig {
                    grid_dim: (Self::blocks(st.slots), 1, 1),
                    block_dim: (super::BLOCK, 1, 1),
                    shared_mem_bytes: 0,
                })
            }
            .map_err(cuda_err("launch"))?;
        }
        Ok((ctx_dev, ep, pp))
    }

    /// Pass safepoint requests to the running kernel until it is done; a
    /// safepoint that moves nothing is passed with the slots waiting in
    /// place.
    fn wait(
        &mut self,
        launch: &Launch<'_>,
        eden: Eden,
        eden_at: u64,
        parked_at: u64,
    ) -> Result<(), OffloadError> {
        let s = &self.gpu.stream;
        let done = s.record_event(None).map_err(cuda_err("event"))?;
        let waiting = Waiting {
            env: launch.env,
            gpu: self.gpu,
            slots: self.state.slots,
            eden,
            eden_at,
            parked_at,
            epoch: launch.epoch,
        };
        let (sent, got, waits) = waiting.mirror(
            launch.control,
            &mut self.fairness,
            &|| done.try_is_complete(),
            &mut self.trace,
        )?;
        let totals = &mut self.state.totals;
        totals.to_device += sent;
        totals.to_host += got;
        totals.waits += waits;
        s.synchronize().map_err(cuda_err("kernel"))
    }

    /// Bring back what the round left: the counters and the eden's top
    /// (and mark what the kernel wrote); the records, never-ran rests and
    /// exit codes when a slot left work behind; and the TLABs' states,
    /// retired into fillers.
    fn read_back(
        &mut self,
        launch: &Launch<'_>,
        (es, ee): Eden,
        round: &mut Round,
    ) -> Result<(), OffloadError> {
        let (gpu, s) = (self.gpu, &self.gpu.stream);
        let heap = &launch.env.heap;
        let dh = &gpu.resident;
        // The heap itself stays on the device, and host code fetches the
        // chunks it touches.
        let ed: Vec<u64> = s.clone_dtoh(&self.b.eden).map_err(cuda_err("eden"))?;
        // The device eden's final top (past its end when a refill failed).
        let eden_top = ed[gpu::EDEN_TOP].min(u64::from(ee)) as u32;
        let dirty_bytes = dh.mark_kernel_writes(heap, es as usize * 8, eden_top as usize * 8)?;
        // The counters, summed over the launch's rounds (the buffer is
        // never reset). A round that exhausted its eden doubles the next
        // launch's.
        let totals = &mut self.state.totals;
        let before = std::mem::take(&mut totals.counters);
        totals.counters = s.clone_dtoh(&self.b.stats).map_err(cuda_err("counters"))?;
        let now = &totals.counters;
        let d = |c: usize| now[c] - before[c];
        round.completed = d(counter::COMPLETED);
        if d(counter::EDEN_FAILURES) > 0 && launch.env.settings.fail_refills.is_none() {
            let cap = DEVICE_EDEN_BYTES / 8;
            let words = gpu.eden_words.load(Ordering::Relaxed);
            gpu.eden_words
                .store(words.saturating_mul(2).min(cap), Ordering::Relaxed);
        }
        totals.to_host += 8 * (ed.len() + now.len()) as u64 + dirty_bytes;
        if totals.launches <= 20 || totals.launches.is_multiple_of(100) {
            let n = totals.launches;
            self.trace.say(|| {
                format!(
                    "launch {n} done: deopts {}, refills {}, refill waits {}, eden failures {}, slots stopped {}, workitems completed {}, eden top {eden_top}",
                    d(counter::DEOPTS),
                    d(counter::REFILLS),
                    d(counter::REFILL_WAITS),
                    d(counter::EDEN_FAILURES),
                    d(counter::SLOTS_STOPPED),
                    d(counter::COMPLETED)
                )
            });
        }
        // The records, never-ran rests and exit codes come back only when
        // a slot left work behind (a record, a stop): otherwise every slot
        // finished its chunks, and resumed the record it was given.
        let came_back = d(counter::DEOPTS) > 0 || d(counter::SLOTS_STOPPED) > 0;
        let refilled = d(counter::REFILLS) > 0;
        round.done = true;
        if came_back {
            // SAFETY: nothing else reads or writes the area during the copy.
            s.memcpy_dtoh(&self.state.area_dev, unsafe { area_words(launch.area) })
                .map_err(cuda_err("save area"))?;
            let never: Vec<i64> = s.clone_dtoh(&self.b.never).map_err(cuda_err("never_ran"))?;
            round.never_ran = never.into();
            round.never_ran_stride = self.state.slots as i64;
            let ex: Vec<u32> = s.clone_dtoh(&self.b.exits).map_err(cuda_err("exits"))?;
            totals.to_host +=
                (launch.area.bytes() + 8 * round.never_ran.len() + 4 * ex.len()) as u64;
            round.done = ex.iter().all(|&c| c == offload_abi::exit::DONE);
            // The device's copy replaced the host's records.
            let mut values = Vec::new();
            for slot in 0..self.state.slots {
                for r in record::slot_records(slot, RECORDS_PER_SLOT) {
                    match launch.area.read_into(r, launch.meta, &mut values) {
                        Ok(Some(_)) => round.records.push(r),
                        Ok(None) => {}
                        Err(e) => return Err(OffloadError::CorruptSaveArea(e)),
                    }
                }
            }
        } else {
            // No slot left a record: the host's are those it handed back
            // (the round's `resumed`), which the device resumed.
            for &(r, _, _) in &round.resumed {
                let _ = launch.area.clear_one(r);
            }
        }
        self.retire(launch, (es, ee), eden_top, refilled)
    }

    /// Retire the TLABs and the device eden: fillers over what is unused,
    /// written into the image (where the objects are). The rest of the
    /// device eden goes back to the heap when nothing was carved above it
    /// meanwhile (a kernel that allocates nothing leaves the heap's top
    /// where it was), and is filled otherwise.
    fn retire(
        &mut self,
        launch: &Launch<'_>,
        (_, ee): Eden,
        eden_top: u32,
        refilled: bool,
    ) -> Result<(), OffloadError> {
        let (s, heap) = (&self.gpu.stream, &launch.env.heap);
        let totals = &mut self.state.totals;
        // The TLABs' states, when a refill carved any (they start empty).
        let tl: Vec<u8> = if refilled {
            let tl = s.clone_dtoh(&self.b.tlabs).map_err(cuda_err("TLABs"))?;
            totals.to_host += tl.len() as u64;
            tl
        } else {
            Vec::new()
        };
        let mut fillers: Vec<(u64, u64)> = tl
            .chunks_exact(gpu::TLAB_BYTES as usize)
            .filter_map(|t| {
                let at = offload_abi::tlab::STATE_OFFSET as usize;
                let state = u64::from_le_bytes(t[at..at + 8].try_into().expect("8 bytes"));
                let (top, end) = offload_abi::tlab::unpack(state);
                (top < end).then(|| filler(top, end))
            })
            .collect();
        if eden_top < ee && !heap.give_back(eden_top, ee) {
            fillers.push(filler(eden_top, ee));
            heap.device_wrote(eden_top as usize * 8, eden_top as usize * 8 + 8);
        }
        totals.to_device += self.gpu.resident.scatter(&fillers)?;
        Ok(())
    }
}

impl<'r> Rounds<'r> for Grid<'_> {
    fn run(&mut self, launch: &Launch<'_>) -> Result<Round, OffloadError> {
        self.state.totals.launches += 1;
        let n = self.state.totals.launches;
        // The records handed back are resumed by this round.
        let resumed = std::mem::take(&mut self.handed);
        let eden = self.carve(launch)?;
        if n <= 20 || n.is_multiple_of(100) {
            let (used, sp) = (
                launch.env.heap.used(),
                launch.env.control.count() - self.safepoints_before,
            );
            self.trace.say(|| {
                format!(
                    "launch {n}: device eden words {}..{}, heap used {used} bytes, safepoints so far {sp}",
                    eden.0, eden.1
                )
            });
        }
        self.send(launch, eden)?;
        let tr = Instant::now();
        let (ctx_dev, eden_at, parked_at) = self.start(launch)?;
        self.wait(launch, eden, eden_at, parked_at)?;
        drop(ctx_dev);
        let run_time = tr.elapsed();
        let tc = Instant::now();
        let mut round = Round {
            resumed,
            claimed: true,
            run_time: Some(run_time),
            ..Round::default()
        };
        self.read_back(launch, eden, &mut round)?;
        round.copy_back = tc.elapsed();
        Ok(round)
    }

    fn may_resume(&mut self, r: usize, h: Header) -> bool {
        // A full device eden's record is resumed by the relaunch (which
        // carves a fresh one) unless the same workitem's allocation failed
        // there again after a resume (then the interpreter, which
        // collects, finishes it).
        if self.resumed_alloc.is_empty() {
            self.resumed_alloc = vec![None; self.state.slots * RECORDS_PER_SLOT];
        }
        let failed = h.2 == offload_deopt::Reason::AllocationFailure;
        if failed && self.resumed_alloc[r] == Some((h.0, h.1)) {
            return false;
        }
        self.resumed_alloc[r] = failed.then_some((h.0, h.1));
        true
    }

    fn hand_back(&mut self, records: Vec<HandedBack>) {
        self.handed.extend(records);
    }

    fn has_handed_back(&self) -> bool {
        !self.handed.is_empty()
    }

    fn take_handed_back(&mut self) -> Vec<HandedBack> {
        std::mem::take(&mut self.handed)
    }

    fn take_replayer(&mut self) -> Option<Replayer<'r>> {
        None
    }

    fn put_replayer(&mut self, _rp: Replayer<'r>) {}
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
unsafe fn area_words(area: &offload_deopt::SaveArea) -> &mut [u64] {
    // SAFETY: the area is `bytes() / 8` contiguous `AtomicU64`s, which have
    // the layout of `u64`; exclusivity is the caller's.
    unsafe { std::slice::from_raw_parts_mut(area.as_ptr(), area.bytes() / 8) }
}

/// A filler header over words `[start, end)`, as `(byte offset, header
/// word)` for [`super::resident::DeviceHeap::scatter`].
fn filler(start: u32, end: u32) -> (u64, u64) {
    let (a, b) = ObjectHeader::Filler {
        size: (end - start) * 8,
    }
    .encode()
    .expect("a filler header encodes");
    (u64::from(start) * 8, u64::from(a) | u64::from(b) << 32)
}
