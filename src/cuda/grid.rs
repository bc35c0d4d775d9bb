//! The GPU's rounds: the whole grid is one unit of the launch protocol
//! (`protocol.rs`), and a round is one grid launch — a fresh device eden,
//! the heap image brought up to date, the kernel run while the host
//! passes safepoint requests to it (`wait.rs`), then what it left brought
//! back: counters, the eden's top, the dirty map, and the records,
//! never-ran rests and exit codes when a slot left work behind.

use super::block::{Block, Shape};
use super::lane::Lane;
use super::launch::GpuState;
use super::raw::{self, DeviceMem};
use super::share::Footprint;
use super::wait::{Fairness, Waiting};
use super::{DEVICE_EDEN_BYTES, Gpu, Loaded, cuda_err};
use crate::error::OffloadError;
use crate::protocol::{HandedBack, Launch, Round, Rounds};
use crate::replay::{Header, Replayer};
use offload_abi::gpu::{self, DeviceCtx, counter};
use offload_abi::record;
use offload_heap::layout::Header as ObjectHeader;
use offload_heap::resident::{CHUNK_BYTES, CHUNK_SHIFT};
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Bytes of a memory sector, the unit a warp's accesses are coalesced to.
const SECTOR_BYTES: u64 = 32;

/// The rotation (below `slots`, the smallest of the best) that starts the
/// most of `firsts` — each an access's first element address and element
/// bytes — on a sector when thread 0 runs its first workitem.
fn sector_rotation(firsts: &[(u64, u64)], slots: u64) -> u64 {
    let aligned = |r: u64| {
        firsts
            .iter()
            .filter(|&&(at, size)| at.wrapping_add(r * size) % SECTOR_BYTES == 0)
            .count()
    };
    (0..SECTOR_BYTES.min(slots.max(1)))
        .max_by_key(|&r| (aligned(r), std::cmp::Reverse(r)))
        .unwrap_or(0)
}

/// Whether the launch's kernel tags pages of its device eden in the
/// device's page table: it allocates several kinds, and carves whole
/// pages for each class kind (`offload_jit::ptx` alloc).
fn tags_pages(launch: &Launch<'_>) -> bool {
    launch.alloc.kinds().len() > 1
}

/// The block a launch with `state`'s shape needs: the one the GPU kept
/// from its last launch when it has the room.
pub(super) fn block_for(
    gpu: &Gpu,
    launch: &Launch<'_>,
    state: &GpuState,
) -> Result<Block, OffloadError> {
    let shape = Shape {
        slots: state.slots,
        // A TLAB per kind of allocation per slot group, as the kernel
        // indexes them (`offload_jit::ptx` alloc).
        tlabs: (state.slots as u64).div_ceil(state.group.max(1)) as usize
            * launch.call.prog.allocation_kinds(launch.call.kernel).len(),
        // The map covers the largest heap, so that an image that grows
        // during the launch needs no new block.
        map_bytes: launch.env.heap.config().max.div_ceil(CHUNK_BYTES),
    };
    let kept = gpu
        .block
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    Block::fit(&gpu.ctx, kept, shape).map_err(cuda_err("launch block"))
}

/// The grid as a unit of the launch protocol.
pub(super) struct Grid<'a> {
    gpu: &'a Gpu,
    /// The launch's stream and control word (`lane.rs`).
    lane: &'a Lane,
    /// The launch's number for the GPU's holds (`share.rs`).
    ticket: u64,
    /// What the current run holds: the chunks of its arrays (shared), or
    /// `None` (the GPU alone).
    footprint: Option<Footprint>,
    /// For a part of a split launch that allocates: the device edens of
    /// its earlier rounds (bytes), where the workitems it resumes keep
    /// their objects — or, after a collection, everything below the
    /// eden of the first round since (they moved) — and the collections
    /// counted when it was last set (`send_heap`).
    edens: (Vec<Range<usize>>, Option<u64>),
    /// The chunks wholly inside this round's device eden, for a part of a
    /// split launch: registered, never sent.
    fresh: Range<usize>,
    /// For a part of a launch split over devices, its registration with
    /// the heap's twins (`part.rs`).
    part: Option<&'a super::part::PartWrite<'a>>,
    k: &'a Loaded,
    state: &'a mut GpuState,
    block: Block,
    range: Range<i64>,
    /// Workitems the slots' parts hold unstarted: the range before the
    /// first run, the rests a run that came back left.
    pending: u64,
    /// The slots' rests as the last run that came back left them (pairs,
    /// [`offload_abi::gpu::NeverRan`]), with `NEVER_RAN_NONE` for the
    /// slots that finished (which store none): sent before a relaunch.
    rests: Vec<i64>,
    /// The captures' words and their elements' addresses of the last
    /// run's launch (its parameters).
    params: (Vec<u64>, Vec<u64>),
    /// Records handed back, resumed by the next round.
    handed: Vec<HandedBack>,
    /// The allocation failures its records were resumed after (sized on
    /// first use: most launches leave no records).
    resumed_alloc: crate::replay::AllocResumes,
    fairness: Fairness,
    trace: super::trace::Trace,
    safepoints_before: u64,
    /// A reducing kernel's tiles and leaves (made at the first run).
    reducing: Option<super::reduce::Reducing>,
    /// The device copy of the launch's copies table
    /// (`DeviceCtx::copies`, taken at the first run, sent at every run).
    copies: KeptCopies<'a>,
}

/// The device memory of a launch's copies table: taken from the GPU's
/// (`Gpu::copies_mem`) when large enough, else made, and given back to it
/// for the next launch when the launch ends — a warm launch allocates
/// nothing.
struct KeptCopies<'a> {
    gpu: &'a Gpu,
    mem: Option<DeviceMem>,
}

impl KeptCopies<'_> {
    /// Device memory of at least `bytes`.
    fn at_least(&mut self, bytes: usize) -> Result<u64, OffloadError> {
        if self.mem.as_ref().is_none_or(|m| m.bytes() < bytes) {
            let kept = self
                .gpu
                .copies_mem
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take()
                .filter(|m| m.bytes() >= bytes);
            self.mem = Some(match kept {
                Some(m) => m,
                // (What was kept and too small is freed first.)
                None => DeviceMem::new(&self.gpu.ctx, bytes).map_err(cuda_err("copies table"))?,
            });
        }
        Ok(self.mem.as_ref().map_or(0, DeviceMem::at))
    }
}

impl Drop for KeptCopies<'_> {
    fn drop(&mut self) {
        if let Some(m) = self.mem.take() {
            *self
                .gpu
                .copies_mem
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(m);
        }
    }
}

/// Save records per slot on the GPU: a slot that deoptimizes leaves the
/// grid with its record (the relaunch resumes it, or the host replays it).
pub(super) const RECORDS_PER_SLOT: usize = 1;

/// One round's device eden, in heap words.
type Eden = (u32, u32);

impl<'a> Grid<'a> {
    pub(super) fn new(
        (gpu, lane, ticket): (&'a Gpu, &'a Lane, u64),
        k: &'a Loaded,
        (launch, part): (&Launch<'_>, Option<&'a super::part::PartWrite<'a>>),
        state: &'a mut GpuState,
        block: Block,
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
            lane,
            ticket,
            footprint: None,
            edens: (Vec::new(), None),
            fresh: 0..0,
            part,
            k,
            state,
            block,
            pending: range.end.saturating_sub(range.start).max(0) as u64,
            rests: Vec::new(),
            params: (Vec::new(), Vec::new()),
            range,
            handed: Vec::new(),
            resumed_alloc: Default::default(),
            fairness: Fairness::default(),
            trace,
            safepoints_before: launch.env.control.count(),
            reducing: None,
            copies: KeptCopies { gpu, mem: None },
        }
    }

    /// A reducing kernel's nodes, once the launch's rounds are over: the
    /// tiles its warps combined and the leaves of its runs (none for a
    /// kernel that does not reduce).
    pub(super) fn take_nodes(&mut self) -> Result<Vec<offload_abi::reduce::Node>, OffloadError> {
        let Some(r) = self.reducing.take() else {
            return Ok(Vec::new());
        };
        let (nodes, got) = r.nodes(self.gpu, self.lane.cu_stream())?;
        self.state.totals.to_host += got;
        Ok(nodes)
    }

    /// Hold the GPU for the next run (`share.rs`): shared, with the
    /// chunks of the kernel's arrays, or alone; waits out of the running
    /// set of safepoints until it may.
    /// Whether it holds it: not when the launch was interrupted while it
    /// waited.
    fn hold(&mut self, launch: &Launch<'_>) -> Result<bool, OffloadError> {
        let (gpu, env, allocates) = (self.gpu, launch.env, self.k.ptx.allocates);
        let admitted = gpu.share.hold(
            (self.ticket, gpu.resident.id().index(), launch.call.split),
            &mut || {
                let cap = gpu.resident.cap();
                super::share::want(launch, &self.range, allocates, cap, &gpu.sizes)
            },
            &|| env.gc.collections(),
            &|f| env.control.outside(f),
            &|| launch.interrupted(),
        )?;
        let Some(admitted) = admitted else {
            return Ok(false);
        };
        self.state.totals.runs_beside += u64::from(admitted.beside > 0);
        self.footprint = match admitted.footprint {
            // A part of a split launch registers and is sent its arrays'
            // chunks from twins even when it holds the GPU alone (it
            // allocates, or its image must grow first): `split.rs` splits
            // only kernels that reach nothing but their arrays and the
            // objects they make (`send_heap` adds the device eden's edges).
            None if self.part.is_some() => {
                super::share::captures(launch, &self.range, allocates, &gpu.sizes)?
            }
            fp => fp,
        };
        Ok(true)
    }

    /// The block, for the GPU to keep for its next launch.
    pub(super) fn into_block(self) -> Block {
        self.block
    }

    fn blocks(slots: usize) -> u32 {
        (slots as u32).div_ceil(super::BLOCK)
    }

    /// Carve the round's device eden from the heap: none (an empty one at
    /// the heap's top) for a kernel that never allocates. Injected refill
    /// failures (`fail_refills(first, _)`) give the device an eden of
    /// `first` TLABs: the refills after those find it exhausted, publish
    /// FAILED, and their waiters deopt with `AllocationFailure`.
    fn carve(&mut self, launch: &Launch<'_>) -> Result<Eden, OffloadError> {
        let env = launch.env;
        if !self.k.ptx.allocates {
            let top = u32::try_from(env.heap.used() / 8).unwrap_or(u32::MAX);
            return Ok((top, top));
        }
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
        // One kind: pages of its tag. Several: mixed pages from a page
        // boundary, of which the device tags those it carves for a class
        // (`offload_jit::ptx` alloc; `read_back` takes the tags back).
        let (tag, paged) = (launch.alloc.tag(), tags_pages(launch));
        let carved = match env.heap.carve_device_region(min, want, tag, paged) {
            Some(r) => Some(r),
            None => {
                env.gc.collect_here(&env.heap, &env.control)?;
                env.heap.carve_device_region(min, want, tag, paged)
            }
        };
        carved.ok_or_else(|| {
            OffloadError::Setup(format!(
                "heap exhausted: no room for a device eden of {} bytes, even after a collection",
                u64::from(min) * 8
            ))
        })
    }

    /// Bring the device's heap up to date for the round: on a relaunch the
    /// save area with the records handed back (after any collection since
    /// the last round, which updated them on the host); the heap chunks
    /// the host wrote since the device last had them; the zeroed eden.
    fn send_heap(&mut self, launch: &Launch<'_>, (es, ee): Eden) -> Result<(), OffloadError> {
        let gpu = self.gpu;
        let st = &mut *self.state;
        if st.totals.launches > 1 {
            // SAFETY: nothing else reads or writes the area during the
            // copy, and the device half is as long as the host's.
            unsafe {
                raw::send(
                    st.area_dev.at(),
                    area_words(launch.area),
                    self.lane.cu_stream(),
                )
            }
            .map_err(cuda_err("save area"))?;
            st.area_clean = false;
            st.totals.to_device += launch.area.bytes() as u64;
            if !self.rests.is_empty() {
                let l = self.block.layout;
                // SAFETY: the rests are the block's never-ran part, whole.
                unsafe { raw::send(self.block.at(l.never), &self.rests, self.lane.cu_stream()) }
                    .map_err(cuda_err("never_ran"))?;
                st.totals.to_device += 8 * self.rests.len() as u64;
            }
        }
        // The device image holds the heap up to the device eden's end
        // (whole chunks); what the host wrote since the device last had it
        // goes up (outside the device eden, which the device zeroes), and
        // nothing else crosses the bus.
        let heap = &launch.env.heap;
        let dh = &gpu.resident;
        let eden_bytes = es as usize * 8..ee as usize * 8;
        if let Some(part) = self.part
            && let Some(fp) = self.footprint.take()
        {
            // A part of a split launch: its arrays' chunks and its device
            // edens registered with the twins, and the stale ones sent from
            // them — the edens of its earlier rounds too, where the
            // workitems it resumes on the device keep their objects (the
            // host's replays may have written some since). The chunks
            // wholly inside this round's eden are the device's alone (it
            // zeroes them, and no other device or the host writes them
            // before they are fetched) and are not sent.
            let collections = launch.env.gc.collections();
            let (edens, seen) = &mut self.edens;
            if *seen != Some(collections) {
                // A collection moved the objects of the earlier rounds'
                // workitems: anywhere below this eden (a kernel that
                // allocates nothing has none).
                if seen.take().is_some() && !edens.is_empty() {
                    edens.clear();
                    edens.push(0..eden_bytes.start);
                }
                *seen = Some(collections);
            }
            if !eden_bytes.is_empty() {
                edens.push(eden_bytes.clone());
            }
            use offload_heap::resident::{chunks_of, chunks_within};
            let fp = crate::footprint::normalize(
                fp.into_iter()
                    .chain(edens.iter().map(|e| chunks_of(e.start, e.end)))
                    .collect(),
            );
            self.fresh = chunks_within(eden_bytes.start, eden_bytes.end);
            let end = fp.last().map_or(0, |r| r.end * CHUNK_BYTES);
            // Under a hold alone when it must grow (`hold`).
            dh.ensure(end.max(eden_bytes.end))?;
            if self.lane.number != 0 {
                dh.settle()?;
            }
            st.totals.to_device += part.send(dh, &fp, self.fresh.clone())?;
            self.footprint = Some(fp);
            if self.k.ptx.allocates {
                let sent = self.eden_pages(launch, (es, ee))?;
                self.state.totals.to_device += sent;
            }
            return Ok(());
        }
        if let Some(fp) = &self.footprint {
            // A shared run (`share.rs`): the stale chunks of its own arrays,
            // which the image holds (its hold was taken so); other kernels
            // may be running, and nothing else of theirs is touched.
            st.totals.to_device += dh.push(heap, &heap.take_device_stale_in(dh.id(), fp)?)?;
            return Ok(());
        }
        let runs = heap.take_device_stale(dh.id(), eden_bytes.clone())?;
        let need = runs.iter().map(|r| r.end).fold(eden_bytes.end, usize::max);
        dh.ensure(need)?;
        st.totals.to_device += dh.push(heap, &runs)?;
        let sent = self.eden_pages(launch, (es, ee))?;
        self.state.totals.to_device += sent;
        Ok(())
    }

    /// The page table the device's dispatch reads, the pages its kernel
    /// will tag forgotten, and its eden zeroed; returns the bytes sent.
    fn eden_pages(&self, launch: &Launch<'_>, (es, ee): Eden) -> Result<u64, OffloadError> {
        let dh = &self.gpu.resident;
        let sent = dh.send_pages(&launch.env.heap)?;
        if tags_pages(launch) && es < ee {
            // The kernel tags pages of its eden in the device's table.
            dh.forget_pages(
                offload_abi::pages::page_of(es)..offload_abi::pages::page_of(ee - 1) + 1,
            );
        }
        if es < ee {
            dh.zero_eden(es as usize * 8..ee as usize * 8)?;
        }
        if self.lane.number != 0 {
            // The image's stream is lane 0's: its kernel does not wait for
            // what was queued there.
            dh.settle()?;
        }
        Ok(sent)
    }

    /// The launch context of a round.
    fn context(&self, launch: &Launch<'_>) -> DeviceCtx {
        let (b, st) = (&self.block, &*self.state);
        let l = b.layout;
        let mut ctx = DeviceCtx {
            heap_base: self.gpu.resident.heap_at(),
            start: self.range.start,
            end: self.range.end,
            control: self.lane.control_at(),
            save_area: st.area_dev.at(),
            record_words: u64::from(launch.meta.layout.record_words),
            never_ran: b.at(l.never),
            records_per_slot: RECORDS_PER_SLOT as u64,
            tlabs: b.at(l.tlabs),
            tlab_group: st.group,
            eden: b.at(l.eden),
            large_words: st.tlab_words / 4,
            slots: st.slots as u64,
            tlab_words: st.tlab_words,
            exits: b.at(l.exits),
            stats: b.at(l.stats),
            inject: b.at(l.inject),
            // The map less the image's first chunk number (the image starts
            // at a chunk boundary): a store's byte is at its address's
            // chunk number past it.
            dirty: b
                .at(l.dirty)
                .wrapping_sub(self.gpu.resident.heap_at() >> CHUNK_SHIFT),
            parked: b.at(l.parked),
            fresh: u64::from(st.totals.launches == 1),
            rotate: self.rotate(),
            pages: self.gpu.resident.pages_at(),
            ..DeviceCtx::default()
        };
        if let Some(r) = &self.reducing {
            r.fill(&mut ctx);
        }
        ctx
    }

    /// Send the launch's copies table (`crate::env::CopyTable`), as the
    /// raw word and element 0's address of each cell, and point `ctx` at
    /// it; nothing for a kernel without one. Sent at every run: a
    /// collection between runs moves the copies.
    fn send_copies(
        &mut self,
        launch: &Launch<'_>,
        ctx: &mut DeviceCtx,
        s: cudarc::driver::sys::CUstream,
    ) -> Result<(), OffloadError> {
        let Some(t) = launch.call.copies else {
            return Ok(());
        };
        let heap = self.gpu.resident.heap_at();
        let words: Vec<u64> = t
            .cells
            .iter()
            .flat_map(|c| {
                let raw = c.load(std::sync::atomic::Ordering::Acquire);
                [raw, gpu::elem0(heap, raw)]
            })
            .collect();
        let bytes = 8 * words.len();
        let at = self.copies.at_least(bytes)?;
        // SAFETY: the table, `bytes` long, at the start of an allocation
        // of at least that size that this launch holds (later launches
        // take it only once this one has given it back, its runs done);
        // the copy is staged before the call returns.
        unsafe { raw::send(at, &words, s) }.map_err(cuda_err("copies table"))?;
        self.state.totals.to_device += bytes as u64;
        ctx.copies = at;
        ctx.copy_rows = t.rows as u64;
        Ok(())
    }

    /// [`DeviceCtx::rotate`]: the slot thread 0 runs, chosen so that the
    /// most of the kernel's array accesses (all indexed by the workitem
    /// number: `PtxKernel::streams`) start a warp's 32 workitems on a
    /// sector; 0 when the kernel has other accesses, or allocates.
    /// Reads the run's element addresses (`self.params`, made first).
    fn rotate(&self) -> u64 {
        let streams = &self.k.ptx.streams;
        // Slots share TLABs by number (`DeviceCtx::tlab_group`): those of a
        // kernel that allocates stay with their warps. A reducing kernel's
        // warps run aligned tiles of positions (`reduce.rs`).
        if streams.is_empty() || self.k.ptx.allocates || self.reducing.is_some() {
            return 0;
        }
        // Each access's element `start`.
        let firsts: Vec<(u64, u64)> = streams
            .iter()
            .filter_map(|&(c, size)| {
                let size = u64::from(size);
                let elem0 = *self.params.1.get(c)?;
                Some((
                    elem0.wrapping_add((self.range.start as u64).wrapping_mul(size)),
                    size,
                ))
            })
            .collect();
        sector_rotation(&firsts, self.state.slots as u64)
    }

    /// Start the round on the stream: its block set up (the save area's
    /// device half emptied first if a record may be in it), the grid, the
    /// summary's copy back and the event behind it.
    fn start(&mut self, launch: &Launch<'_>, (es, ee): Eden) -> Result<(), OffloadError> {
        let gpu = self.gpu;
        let s = self.lane.cu_stream();
        gpu.ctx.bind_to_thread().map_err(cuda_err("context"))?;
        let first = self.state.totals.launches == 1;
        if first && !self.state.area_clean {
            // Every word all ones: an empty record's site word.
            let a = &self.state.area_dev;
            // SAFETY: the device half of the area, whole, on this stream.
            unsafe { raw::memset(a.at(), 0xFF, a.bytes(), s) }.map_err(cuda_err("save area"))?;
            self.state.area_clean = true;
        }
        let mut bounds = [0u64; gpu::EDEN_WORDS];
        (bounds[gpu::EDEN_TOP], bounds[gpu::EDEN_LIMIT]) = (u64::from(es), u64::from(ee));
        let allocates = self.k.ptx.allocates;
        self.state.totals.to_device += self
            .block
            .begin(first, allocates.then_some(bounds), s)
            .map_err(cuda_err("launch block"))?;
        self.lane.set_control(&gpu.resident, 0)?;
        // The kernel's parameters, by value: the captures' words and their
        // elements' addresses (at least one each, as the PTX declares),
        // then the context (whose rotation reads those addresses).
        let heap = gpu.resident.heap_at();
        let (caps, elems) = (&mut self.params.0, &mut self.params.1);
        caps.clear();
        caps.extend(launch.call.capture_values());
        if caps.is_empty() {
            caps.push(0);
        }
        elems.clear();
        elems.extend(caps.iter().map(|&raw| gpu::elem0(heap, raw)));
        let mut ctx = self.context(launch);
        self.send_copies(launch, &mut ctx, s)?;
        let mut ctx = ctx.to_words();
        let (caps, elems) = (&mut self.params.0, &mut self.params.1);
        self.state.totals.to_device += 8 * (ctx.len() + caps.len() + elems.len()) as u64;
        // SAFETY: the kernel takes three byte arrays, its `DeviceCtx`'s
        // words, its captures' and their elements' (`offload_jit::ptx`, the
        // entry's header; the driver copies them before the call returns);
        // what they point at (the block, the area, the image) lives until
        // the round's event is done (the grid owns the block, and the
        // stream orders any later launch's use of it after this one; the
        // image is replaced only under a hold of the GPU alone, `share.rs`).
        unsafe {
            raw::launch(
                self.k.func.cu_function(),
                Self::blocks(self.state.slots),
                super::BLOCK,
                s,
                &mut [
                    ctx.as_mut_ptr().cast(),
                    caps.as_mut_ptr().cast(),
                    elems.as_mut_ptr().cast(),
                ],
            )
        }
        .map_err(cuda_err("launch"))?;
        let map = (ee as usize * 8).div_ceil(CHUNK_BYTES);
        self.block
            .collect(map, s)
            .map_err(cuda_err("launch summary"))
    }

    /// Pass safepoint requests to the running kernel until the round's
    /// event says it is done (its summary copied back); a safepoint that
    /// moves nothing is passed with the slots waiting in place.
    fn wait(&mut self, launch: &Launch<'_>, eden: Eden) -> Result<(), OffloadError> {
        let (b, l) = (&self.block, self.block.layout);
        let waiting = Waiting {
            env: launch.env,
            gpu: self.gpu,
            lane: self.lane,
            footprint: self.footprint.as_deref(),
            fresh: self.fresh.clone(),
            part: self.part,
            slots: self.state.slots,
            eden,
            eden_at: b.at(l.eden),
            parked_at: b.at(l.parked),
            exits_at: b.at(l.exits),
            dirty_at: b.at(l.dirty),
            epoch: launch.epoch,
        };
        let (sent, got, waits) = waiting.mirror(
            launch.control,
            &mut self.fairness,
            &|| b.event.done(),
            &mut self.trace,
        )?;
        let totals = &mut self.state.totals;
        totals.to_device += sent;
        totals.to_host += got;
        totals.waits += waits;
        Ok(())
    }

    /// Bring back what the round left: from its summary the counters and
    /// the eden's top (and mark what the kernel wrote); the records,
    /// never-ran rests and exits when a slot left work behind; and the
    /// TLABs' states, retired into fillers.
    fn read_back(
        &mut self,
        launch: &Launch<'_>,
        (es, ee): Eden,
        round: &mut Round,
    ) -> Result<(), OffloadError> {
        let heap = &launch.env.heap;
        let sum = self.block.summary();
        // The device eden's final top (past its end when a refill failed);
        // a kernel that does not allocate has no eden (its words are zero).
        let eden_top = if self.k.ptx.allocates {
            sum.eden[gpu::EDEN_TOP].min(u64::from(ee)) as u32
        } else {
            es
        };
        super::resident::mark_kernel_writes(
            heap,
            &self.gpu.resident,
            sum.map,
            es as usize * 8,
            eden_top as usize * 8,
        );
        // The tags the device wrote for the pages it carved for a class
        // (a kernel of several kinds), into the host's table.
        if tags_pages(launch) && es < ee {
            use offload_abi::pages::page_of;
            let forgotten = page_of(es)..page_of(ee - 1) + 1;
            let carved = if eden_top > es {
                page_of(es)..page_of(eden_top - 1) + 1
            } else {
                0..0
            };
            self.state.totals.to_host += self.gpu.resident.fetch_pages(heap, forgotten, carved)?;
        }
        let d = sum.counters;
        let totals = &mut self.state.totals;
        for (t, c) in totals.counters.iter_mut().zip(d) {
            *t += c;
        }
        totals.to_host += self.block.summary_bytes();
        if d[counter::LEAF_SLOTS] > 0
            && let Some(r) = &mut self.reducing
        {
            totals.to_host += r.take_leaves(self.lane.cu_stream())?;
        }
        if d[counter::EDEN_FAILURES] > 0 && launch.env.settings.fail_refills.is_none() {
            // A round that exhausted its eden doubles the next launch's.
            let cap = DEVICE_EDEN_BYTES / 8;
            let words = self.gpu.eden_words.load(Ordering::Relaxed);
            self.gpu
                .eden_words
                .store(words.saturating_mul(2).min(cap), Ordering::Relaxed);
        }
        // The records, never-ran rests and exits come back only when a
        // slot left work behind (a record, a stop): otherwise every slot
        // finished its part, and resumed the record it was given.
        let came_back = d[counter::DEOPTS] > 0 || d[counter::SLOTS_STOPPED] > 0;
        let refilled = d[counter::REFILLS] > 0;
        round.done = true;
        if came_back {
            self.came_back(launch, round)?;
        } else {
            // Every slot ran what it was given: its part's unstarted
            // workitems and the record handed back to it.
            round.completed = self.pending + round.resumed.len() as u64;
            self.pending = 0;
            // The host's records are those it handed back (the round's
            // `resumed`), which the device resumed.
            for &(r, _, _) in &round.resumed {
                let _ = launch.area.clear_one(r);
            }
        }
        let n = self.state.totals.launches;
        if n <= 20 || n.is_multiple_of(100) {
            let completed = round.completed;
            self.trace.say(|| {
                format!(
                    "launch {n} done: deopts {}, refills {}, refill waits {}, eden failures {}, slots stopped {}, workitems completed {completed}, eden top {eden_top}",
                    d[counter::DEOPTS],
                    d[counter::REFILLS],
                    d[counter::REFILL_WAITS],
                    d[counter::EDEN_FAILURES],
                    d[counter::SLOTS_STOPPED],
                )
            });
        }
        self.retire(launch, (es, ee), eden_top, refilled)
    }

    /// A round in which some slot left work behind: its records (the
    /// device's copy of the area replaces the host's), every slot's
    /// never-ran rest and exit.
    fn came_back(&mut self, launch: &Launch<'_>, round: &mut Round) -> Result<(), OffloadError> {
        let (s, l) = (self.lane.cu_stream(), self.block.layout);
        let given = self.pending;
        let st = &mut *self.state;
        let slots = st.slots;
        // SAFETY: each copy reads a whole part of the block (or the area's
        // device half) into a buffer of its length; nothing else reads or
        // writes the host area during the copy.
        unsafe {
            raw::fetch(area_words(launch.area), st.area_dev.at(), s)
                .map_err(cuda_err("save area"))?;
        }
        st.area_clean = false;
        let mut never = vec![0i64; 2 * slots];
        // SAFETY: as above.
        unsafe { raw::fetch(&mut never, self.block.at(l.never), s) }
            .map_err(cuda_err("never_ran"))?;
        let mut exits = vec![0u8; slots];
        // SAFETY: as above.
        unsafe { raw::fetch(&mut exits, self.block.at(l.exits), s) }.map_err(cuda_err("exits"))?;
        st.totals.to_host += (launch.area.bytes() + 8 * never.len() + exits.len()) as u64;
        let finished = |&c: &u8| gpu::exit_code(c) == Some(offload_abi::exit::DONE);
        round.done = exits.iter().all(finished);
        // A slot that finished stored no rest: it has none.
        let (none_lo, none_hi) = gpu::NEVER_RAN_NONE;
        for (r, c) in never.chunks_exact_mut(2).zip(&exits) {
            if finished(c) {
                (r[0], r[1]) = (none_lo, none_hi);
            }
        }
        // What the next run's parts hold: each slot's rest (a slot that
        // has not started holds its whole part).
        let stride = slots as i64;
        self.pending = never
            .chunks_exact(2)
            .enumerate()
            .map(|(i, p)| {
                let (lo, hi) = match (p[0], p[1]) {
                    (0, 0) => (self.range.start.saturating_add(i as i64), self.range.end),
                    r => r,
                };
                if lo < hi {
                    ((hi - lo) as u64).div_ceil(stride as u64)
                } else {
                    0
                }
            })
            .sum();
        round.never_ran = never.as_slice().into();
        self.rests = never;
        round.never_ran_stride = stride;
        let mut values = Vec::new();
        for slot in 0..slots {
            for r in record::slot_records(slot, RECORDS_PER_SLOT) {
                match launch.area.read_into(r, launch.meta, &mut values) {
                    Ok(Some(_)) => round.records.push(r),
                    Ok(None) => {}
                    Err(e) => return Err(OffloadError::CorruptSaveArea(e)),
                }
            }
        }
        // The slots count nothing: the round was given its parts' unstarted
        // workitems and the records handed back; what it started and did
        // not leave in a record (the area holds every record of the round,
        // a resumed one that stopped again included) it completed.
        let started = given - self.pending.min(given) + round.resumed.len() as u64;
        debug_assert!(self.pending <= given && round.records.len() as u64 <= started);
        round.completed = started.saturating_sub(round.records.len() as u64);
        Ok(())
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
        let heap = &launch.env.heap;
        let l = self.block.layout;
        let totals = &mut self.state.totals;
        // The TLABs' states, when a refill carved any (they start empty).
        let mut tl = Vec::new();
        if refilled {
            tl = vec![0u8; l.exits - l.tlabs];
            // SAFETY: the block's TLABs, whole, into a buffer as long.
            unsafe { raw::fetch(&mut tl, self.block.at(l.tlabs), self.lane.cu_stream()) }
                .map_err(cuda_err("TLABs"))?;
            totals.to_host += tl.len() as u64;
        }
        let mut fillers: Vec<(u64, u64)> = tl
            .chunks_exact(gpu::TLAB_BYTES as usize)
            .filter_map(|t| {
                let at = offload_abi::tlab::STATE_OFFSET as usize;
                let state = u64::from_le_bytes(t[at..at + 8].try_into().expect("8 bytes"));
                let (top, end) = offload_abi::tlab::unpack(state);
                (top < end).then(|| filler(top, end))
            })
            .collect();
        // Not a split launch's part: the device's image of the rest is
        // zeroes, not the host's bytes, and a part's merge against its
        // twin would write them over what another device allocates there.
        if eden_top < ee && (self.part.is_some() || !heap.give_back(eden_top, ee)) {
            fillers.push(filler(eden_top, ee));
        }
        totals.to_device +=
            self.gpu
                .resident
                .scatter(&fillers, self.block.at(l.fillers), l.end - l.fillers)?;
        // Marked once they are in the image: a fetch between a mark and
        // the scatter (another part's thread, in a split launch) would
        // take the chunk without its filler and leave the host a hole.
        for &(at, _) in &fillers {
            heap.device_wrote(self.gpu.resident.id(), at as usize, at as usize + 8);
        }
        Ok(())
    }
}

impl<'r> Rounds<'r> for Grid<'_> {
    fn run(&mut self, launch: &Launch<'_>) -> Result<Round, OffloadError> {
        if !self.hold(launch)? {
            // Interrupted while it waited for the GPU: nothing ran (the
            // protocol sees the interrupt and abandons the rest).
            return Ok(Round::default());
        }
        self.state.totals.launches += 1;
        let n = self.state.totals.launches;
        // The records handed back are resumed by this round.
        let resumed = std::mem::take(&mut self.handed);
        let eden = self.carve(launch)?;
        if let (Some((_, combine)), None) = (launch.call.reduction(), &self.reducing) {
            let len = self.range.end.saturating_sub(self.range.start).max(0) as u64;
            self.reducing = Some(super::reduce::Reducing::new(
                self.gpu,
                combine,
                len,
                self.state.slots,
                self.lane.cu_stream(),
            )?);
        }
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
        self.send_heap(launch, eden)?;
        let tr = Instant::now();
        self.start(launch, eden)?;
        self.wait(launch, eden)?;
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
        // carves a fresh one).
        self.resumed_alloc.may_resume(r, h)
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

#[cfg(test)]
mod tests {
    use super::sector_rotation;

    #[test]
    fn the_rotation_puts_the_most_accesses_on_a_sector() {
        // One `f32` stream 8 bytes past a sector: 6 elements on.
        assert_eq!(sector_rotation(&[(0x1008, 4)], 1024), 6);
        // Aligned already, or nothing to align: none.
        assert_eq!(sector_rotation(&[(0x1000, 4)], 1024), 0);
        assert_eq!(sector_rotation(&[], 1024), 0);
        // Two loads of one array outvote a store into another.
        let firsts = [(0x1008, 4), (0x1008, 4), (0x2010, 4)];
        assert_eq!(sector_rotation(&firsts, 1024), 6);
        // `f64`: 8 bytes past is 3 elements on.
        assert_eq!(sector_rotation(&[(0x1008, 8)], 1024), 3);
        // Never as many as the slots.
        assert!(sector_rotation(&[(0x1008, 4)], 4) < 4);
    }
}
