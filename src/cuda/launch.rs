//! One launch on the GPU: the launch → replay → relaunch loop of the
//! module docs, over the heap image that stays on the device
//! ([`super::resident`]).

use super::{BLOCK, DEVICE_EDEN_BYTES, Gpu, Loaded, WARP, cuda_err};
use crate::adaptive::Plan;
use crate::device::Device;
use crate::env::{KernelCall, LaunchEnv, Started};
use crate::error::OffloadError;
use crate::replay::{Replayer, Replays};
use crate::report::{LaunchReport, Timings};
use cudarc::driver::{CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};
use offload_abi::gpu::{self, DeviceCtx, TLAB_BYTES as DEVICE_TLAB_BYTES, counter};
use offload_deopt::SaveArea;
use offload_tlab::layout::Header;
use rayon::prelude::*;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

#[allow(clippy::too_many_lines)]
pub(super) fn run(
    env: &LaunchEnv,
    gpu: &Gpu,
    k: &Loaded,
    range: Range<i64>,
    call: KernelCall<'_>,
    plan: &Plan,
    started: Started,
) -> Result<LaunchReport, OffloadError> {
    let t0 = Instant::now();
    let _one = gpu.launch_lock.lock().unwrap_or_else(|e| e.into_inner());
    let inner = env;
    let heap = &inner.heap;
    let meta = &k.ptx.meta;
    let s = &gpu.stream;
    let total = range.end.wrapping_sub(range.start) as u64;
    let slots = match env.settings.device_slots {
        Some(n) => n.min((k.grid * BLOCK) as usize),
        None => default_slots(total, (k.grid * BLOCK) as usize, gpu.sms),
    };
    let grid = (slots as u32).div_ceil(BLOCK);
    let chunk = plan.chunk.map_or_else(
        || (total / (slots as u64 * 4)).clamp(1, 256) as i64,
        |c| c.min(1 << 20) as i64,
    );
    let mut trace = super::trace::Trace::new();
    // The save area: the last launch's when it has this launch's shape
    // (every record of it empty), a new one otherwise.
    let reuse = gpu
        .scratch
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .filter(|c| c.area.slots() == slots && c.area.layout() == meta.layout);
    let Scratch { area, mut area_dev } = match reuse {
        Some(c) => c,
        None => Scratch {
            area: SaveArea::try_new(slots, meta.layout)
                .map_err(|e| OffloadError::Setup(e.to_string()))?,
            // SAFETY: every word is set below, before any use.
            area_dev: unsafe { s.alloc(slots * meta.layout.record_words as usize) }
                .map_err(cuda_err("save area"))?,
        },
    };
    trace.say(|| format!("save area of {} bytes ready", area.bytes()));
    let words = meta.layout.record_words as usize;
    let safepoints_before = inner.control.count();
    // The kernel's TLAB size, if its policy changed it.
    let tlab_words = u64::from(plan.tlab_bytes.unwrap_or(heap.config().tlab_bytes) / 8);
    // Slots per TLAB: `SharedTlab { group }` shares one TLAB among
    // `group` warps (the device has no fail-on-overflow variant: its
    // allocators wait for the refiller); `PrivateTlab` gives each slot its
    // own; `EdenCas` allocates every object from eden.
    let group = match env.settings.policy {
        offload_tlab::AllocPolicy::EdenCas => 0,
        offload_tlab::AllocPolicy::PrivateTlab => 1,
        offload_tlab::AllocPolicy::SharedTlab { group }
        | offload_tlab::AllocPolicy::FailOnOverflow { group } => WARP * group.max(1) as u64,
    };
    let tlabs_n = (slots as u64).div_ceil(group.max(1)) as usize;
    // Per-launch device buffers.
    let cursor: CudaSlice<i64> = s.clone_htod(&[range.start]).map_err(cuda_err("cursor"))?;
    let never: CudaSlice<i64> = s.alloc_zeros(2 * slots).map_err(cuda_err("never_ran"))?;
    let exits: CudaSlice<u32> = s.alloc_zeros(slots).map_err(cuda_err("exits"))?;
    let stats: CudaSlice<u64> = s
        .alloc_zeros(counter::COUNT)
        .map_err(cuda_err("counters"))?;
    // Slots waiting in place plus slots gone, zeroed before each run.
    let mut parked: CudaSlice<u32> = s.alloc_zeros(1).map_err(cuda_err("parked count"))?;
    // Injected safepoints' per-slot state, kept across relaunches.
    let inject: CudaSlice<u64> = s.alloc_zeros(slots).map_err(cuda_err("injection state"))?;
    let mut tlabs: CudaSlice<u8> = s
        .alloc_zeros(tlabs_n * DEVICE_TLAB_BYTES as usize)
        .map_err(cuda_err("TLABs"))?;
    // Uploaded again before each relaunch: a collection between two may
    // have moved what the references among them point at.
    let capture_values = || {
        let v = call.capture_values();
        if v.is_empty() { vec![0u64] } else { v }
    };
    let mut captures: CudaSlice<u64> = s
        .clone_htod(&capture_values())
        .map_err(cuda_err("captures"))?;
    // The device's area starts empty: every word all ones (an empty
    // record's site word), set on the device rather than sent.
    {
        let (ap, _g) = area_dev.device_ptr(s);
        // SAFETY: `ap` is the allocation just made, `area.bytes()` long.
        unsafe { cudarc::driver::result::memset_d8_async(ap, 0xFF, area.bytes(), s.cu_stream()) }
            .map_err(cuda_err("save area"))?;
    }
    let mut eden: CudaSlice<u64> = s.alloc_zeros(gpu::EDEN_WORDS).map_err(cuda_err("eden"))?;
    // Bytes moved each way (`LaunchReport::to_device_bytes`,
    // `to_host_bytes`): the uploads above, what each round of the loop
    // below moves, and the heap bytes host code fetches meanwhile.
    let ctx_bytes = std::mem::size_of::<DeviceCtx>() as u64;
    let mut to_device = 8 * (1 + call.captures.len().max(1) as u64);
    let mut to_host = 0u64;
    let fetched_before = heap.residency().fetched_bytes;
    let control = Arc::new(AtomicU32::new(0));
    let wait_bit = if env.settings.wait_in_place {
        offload_abi::control::WAIT
    } else {
        0
    };
    let _registered =
        inner
            .control
            .register_waiting(&control, offload_abi::control::SAFEPOINT, wait_bit);
    // This thread is a running worker (no collection moves the heap while
    // the device holds its image) except while the replays run, which
    // are the running workers then.
    let mut running = Some(inner.control.enter());
    let epoch = started.ticket;

    let mut report = LaunchReport::new(call.name(), Device::Cuda, range.clone(), slots);
    report.launches = 0;
    let mut replays = Replays::default();
    let mut cut = false;
    // Kernel time, and replay time with the copies back it needs; the
    // rest of the loop (the copies up) is setup.
    let (mut run_time, mut replay_time) = (Duration::ZERO, Duration::ZERO);
    // (Sized on first use, as `resumed_alloc` below.)
    let mut passed: Vec<crate::report::NeverRan> = Vec::new();
    let alloc = env.allocator(inner.workers, plan.tlab_bytes);
    // The save area's records (kept there until replayed) and the
    // replays' allocator, for collections while the launch runs.
    let roots = KernelCall::device_roots(&alloc, Some((&area, meta)));
    let registered = env.gc.launch(&roots);
    let on_exhausted = KernelCall::on_exhausted(env);
    let mut device_stats: Vec<u64> = vec![0; counter::COUNT];
    // Per slot, the (workitem, site) of the allocation failure it was last
    // given to resume: failing there again goes to the interpreter.
    // (Sized on first use: most launches leave no records.)
    let mut resumed_alloc: Vec<Option<(i64, offload_ir::SiteId)>> = Vec::new();
    // The host area's slots that may hold a record: those given back to
    // the device to resume (the rest is empty, or the device's copy).
    let mut host_records: Vec<usize> = Vec::new();
    trace.say(|| "per-launch buffers ready".to_string());
    // Fairness: a launch runs at least as long as the last safepoint kept
    // the device from running (`owed`) before it honours the next request
    // (see the module docs of `super`); `asked` is when the request that
    // stopped the last run was mirrored.
    let mut owed = Duration::ZERO;
    let mut asked: Option<Instant> = None;
    trace.say(|| {
        format!(
            "{} over {range:?}: {slots} slots in {grid} blocks of {BLOCK}, chunks of {chunk}, wait in place {}",
            call.name(),
            env.settings.wait_in_place
        )
    });
    loop {
        report.launches += 1;
        // The heap image, with a fresh device eden above the used part.
        // Injected refill failures (`fail_refills(first, _)`) give the
        // device an eden of `first` TLABs: the refills after those find it
        // exhausted, publish FAILED, and their waiters deopt with
        // `AllocationFailure`.
        let want = match env.settings.fail_refills {
            Some((first, _)) => {
                (first.max(1) * tlab_words).min(u64::from(DEVICE_EDEN_BYTES / 8)) as u32
            }
            None => gpu.eden_words.load(Ordering::Relaxed),
        };
        let min = (tlab_words as u32).max(2).min(want.max(2));
        // No room for the device eden: collect (this thread is a running
        // worker, the device holds no heap image now) and try once more.
        let carved = match heap.carve_device_region(min, want) {
            Some(r) => Some(r),
            None => {
                env.gc.collect_here(heap, &inner.control)?;
                heap.carve_device_region(min, want)
            }
        };
        let (es, ee) = carved.ok_or_else(|| {
            OffloadError::Setup(format!(
                "heap exhausted: no room for a device eden of {} bytes, even after a collection",
                u64::from(min) * 8
            ))
        })?;
        if report.launches <= 20 || report.launches.is_multiple_of(100) {
            trace.say(|| {
                format!(
                    "launch {}: device eden words {es}..{ee}, heap used {} bytes, safepoints so far {}",
                    report.launches,
                    heap.used(),
                    inner.control.count() - safepoints_before
                )
            });
        }
        if report.launches > 1 {
            // A relaunch: the captures and the records left to resume go up
            // again, after any collection since the last launch (which
            // updated them on the host).
            s.memcpy_htod(&capture_values(), &mut captures)
                .map_err(cuda_err("captures"))?;
            // SAFETY: nothing else reads or writes the area during the copy.
            s.memcpy_htod(unsafe { area_words(&area) }, &mut area_dev)
                .map_err(cuda_err("save area"))?;
            to_device += area.bytes() as u64 + 8 * call.captures.len().max(1) as u64;
        }
        // The device image: it holds the heap up to the device eden's end
        // (whole chunks); what the host wrote since the device last had it
        // goes up (outside the device eden, which the device zeroes), and
        // nothing else crosses the bus.
        let dh = &gpu.resident;
        let eden_bytes = es as usize * 8..ee as usize * 8;
        let runs = heap.take_device_stale(eden_bytes.clone());
        let need = runs.iter().map(|r| r.end).fold(eden_bytes.end, usize::max);
        dh.ensure(need)?;
        to_device += dh.push(heap, &runs)?;
        dh.zero_eden(eden_bytes.clone())?;
        let mut bounds = [0u64; gpu::EDEN_WORDS];
        (bounds[gpu::EDEN_TOP], bounds[gpu::EDEN_LIMIT]) = (u64::from(es), u64::from(ee));
        s.memcpy_htod(&bounds, &mut eden)
            .map_err(cuda_err("eden"))?;
        to_device += 16 + ctx_bytes;
        s.memset_zeros(&mut tlabs).map_err(cuda_err("TLABs"))?;
        s.memset_zeros(&mut parked)
            .map_err(cuda_err("parked count"))?;
        let tr = Instant::now();
        trace.say(|| format!("launch {}: heap image and buffers sent", report.launches));
        // The eden's and the parked count's addresses, read while slots
        // wait in place.
        let (eden_at, parked_at): (u64, u64);
        // The launch context lives until the kernel is done: dropping it in
        // the scope below would free it while the kernel runs, and a
        // synchronous `cuMemFree` (a device without memory pools) would
        // wait for the kernel there, before the loop that mirrors
        // safepoint requests into the control word has started.
        let ctx_dev: CudaSlice<u64>;
        // The device addresses are taken in a scope of their own: their
        // guards record the launch's use of each buffer when they drop.
        {
            let (hp, dirty) = dh.addresses();
            let (pp, _g13) = parked.device_ptr(s);
            let (cp, _g2) = cursor.device_ptr(s);
            let (ap, _g3) = area_dev.device_ptr(s);
            let (np, _g4) = never.device_ptr(s);
            let (kp, _g6) = captures.device_ptr(s);
            let (tp, _g7) = tlabs.device_ptr(s);
            let (ep, _g8) = eden.device_ptr(s);
            let (xp, _g9) = exits.device_ptr(s);
            let (sp, _g10) = stats.device_ptr(s);
            let (ip, _g12) = inject.device_ptr(s);
            let dctx = DeviceCtx {
                heap_base: hp,
                cursor: cp,
                end: range.end,
                chunk,
                control: gpu.control_dev,
                save_area: ap,
                record_words: words as u64,
                never_ran: np,
                captures: kp,
                records_per_slot: 1,
                tlabs: tp,
                tlab_group: group,
                eden: ep,
                large_words: tlab_words / 4,
                slots: slots as u64,
                tlab_words,
                exits: xp,
                stats: sp,
                inject: ip,
                dirty,
                parked: pp,
            };
            (eden_at, parked_at) = (ep, pp);
            ctx_dev = s
                .clone_htod(&dctx.to_words()[..])
                .map_err(cuda_err("launch context"))?;
            let (ctx_ptr, _g11) = ctx_dev.device_ptr(s);
            gpu.set_control(0)?;
            let mut b = s.launch_builder(&k.func);
            b.arg(&ctx_ptr);
            // SAFETY: the kernel takes one `u64`, the address of a `DeviceCtx`
            // whose buffers are all alive until the stream is synchronized
            // below; sizes match the slot count of the grid.
            unsafe {
                b.launch(LaunchConfig {
                    grid_dim: (grid, 1, 1),
                    block_dim: (BLOCK, 1, 1),
                    shared_mem_bytes: 0,
                })
            }
            .map_err(cuda_err("launch"))?;
        }
        // Mirror safepoint requests into the control word while it runs; a
        // safepoint that moves nothing is passed with the slots waiting in
        // place (`wait_here`).
        let done = s.record_event(None).map_err(cuda_err("event"))?;
        if let Some(t) = asked.take() {
            owed = t.elapsed();
        }
        let mut run_from = Instant::now();
        while !done.try_is_complete().map_err(cuda_err("kernel"))? {
            let due = run_from.elapsed() >= owed;
            let cw = if due {
                control.load(Ordering::Acquire)
            } else {
                0
            };
            if trace.on() {
                trace.tick(|| {
                    let word = gpu
                        .control_word()
                        .map_or_else(|e| e.to_string(), |w| format!("{w:#x}"));
                    let mut n = [0u32];
                    let parked = match gpu.resident.read_raw(parked_at, &mut n) {
                        Ok(()) => n[0].to_string(),
                        Err(e) => e.to_string(),
                    };
                    format!(
                        "running: control word {word}, requested {cw:#x}, parked {parked} of {slots}"
                    )
                });
            }
            if cw & offload_abi::control::WAIT != 0 {
                let w = Waiting {
                    env,
                    gpu,
                    slots,
                    eden: (es, ee),
                    eden_at,
                    parked_at,
                    epoch,
                };
                let t = Instant::now();
                let (sent, got) =
                    w.wait_here(&|| done.try_is_complete().unwrap_or(true), &mut trace)?;
                (owed, run_from) = (t.elapsed(), Instant::now());
                to_device += sent;
                to_host += got;
                report.waits += u64::from(sent + got > 0);
                continue;
            }
            // An interrupt of this launch passed while the slots waited:
            // they stop now.
            let stop = if inner.control.interrupted_since(epoch) {
                offload_abi::control::SAFEPOINT
            } else {
                0
            };
            if cw != 0 && asked.is_none() {
                asked = Some(Instant::now());
            }
            gpu.set_control(cw | stop)?;
            std::thread::sleep(Duration::from_micros(20));
        }
        s.synchronize().map_err(cuda_err("kernel"))?;
        run_time += tr.elapsed();
        // Copy back what the replay and the user need.
        let tc = Instant::now();
        // Back: the eden's state and the dirty map; the heap itself stays
        // on the device, and host code fetches the chunks it touches.
        let ed: Vec<u64> = s.clone_dtoh(&eden).map_err(cuda_err("eden"))?;
        // The device eden's final top (past its end when a refill failed).
        let eden_top = ed[gpu::EDEN_TOP].min(u64::from(ee)) as u32;
        let dirty_bytes = dh.mark_kernel_writes(heap, es as usize * 8, eden_top as usize * 8)?;
        // `[deopts, refills, refill waits, eden failures, slots stopped,
        // workitems completed]`, summed over the launch's relaunches (the
        // buffer is never reset). A launch that exhausted its eden doubles
        // the next one's.
        let before = device_stats.clone();
        device_stats = s.clone_dtoh(&stats).map_err(cuda_err("counters"))?;
        if report.launches <= 20 || report.launches.is_multiple_of(100) {
            trace.say(|| {
                let d: Vec<u64> = device_stats.iter().zip(&before).map(|(a, b)| a - b).collect();
                format!(
                    "launch {} done after {} ms: deopts {}, refills {}, refill waits {}, eden failures {}, slots stopped {}, workitems completed {}, eden top {eden_top}",
                    report.launches,
                    tr.elapsed().as_millis(),
                    d[counter::DEOPTS], d[counter::REFILLS], d[counter::REFILL_WAITS], d[counter::EDEN_FAILURES], d[counter::SLOTS_STOPPED], d[counter::COMPLETED]
                )
            });
        }
        if device_stats[counter::EDEN_FAILURES] > before[counter::EDEN_FAILURES]
            && env.settings.fail_refills.is_none()
        {
            let cap = DEVICE_EDEN_BYTES / 8;
            let now = gpu.eden_words.load(Ordering::Relaxed);
            gpu.eden_words
                .store(now.saturating_mul(2).min(cap), Ordering::Relaxed);
        }
        to_host += 8 * (ed.len() + device_stats.len()) as u64 + dirty_bytes;
        // The records, never-ran rests and exit codes come back only when
        // a slot left work behind (a record, a stop): otherwise every slot
        // finished its chunks, and resumed the record it was given.
        let came_back = device_stats[counter::DEOPTS] > before[counter::DEOPTS]
            || device_stats[counter::SLOTS_STOPPED] > before[counter::SLOTS_STOPPED];
        let (nr, ex): (Vec<i64>, Vec<u32>) = if came_back {
            // SAFETY: nothing else reads or writes the area during the copy.
            s.memcpy_dtoh(&area_dev, unsafe { area_words(&area) })
                .map_err(cuda_err("save area"))?;
            let nr: Vec<i64> = s.clone_dtoh(&never).map_err(cuda_err("never_ran"))?;
            let ex: Vec<u32> = s.clone_dtoh(&exits).map_err(cuda_err("exits"))?;
            to_host += (area.bytes() + 8 * nr.len() + 4 * ex.len()) as u64;
            // The device's copy replaced the host's records.
            host_records.clear();
            (nr, ex)
        } else {
            // No slot left a record: the host's are those it gave the
            // device to resume, which it did.
            for r in host_records.drain(..) {
                let _ = area.clear_one(r);
            }
            (Vec::new(), Vec::new())
        };
        // The TLABs' states, when a refill carved any (they start empty).
        let tl: Vec<u8> = if device_stats[counter::REFILLS] > before[counter::REFILLS] {
            let tl = s.clone_dtoh(&tlabs).map_err(cuda_err("TLABs"))?;
            to_host += tl.len() as u64;
            tl
        } else {
            Vec::new()
        };
        replay_time += tc.elapsed();
        // Retire the TLABs and the device eden: fillers over what is
        // unused, written into the image (where the objects are). The rest
        // of the device eden goes back to the heap when nothing was carved
        // above it meanwhile (a kernel that allocates nothing leaves the
        // heap's top where it was), and is filled otherwise.
        let mut fillers: Vec<(u64, u64)> = tl
            .chunks_exact(DEVICE_TLAB_BYTES as usize)
            .filter_map(|t| {
                let state = u64::from_le_bytes(t[..8].try_into().expect("8 bytes"));
                let (top, end) = (state as u32, (state >> 32) as u32);
                (top < end).then(|| filler(top, end))
            })
            .collect();
        if eden_top < ee && !heap.give_back(eden_top, ee) {
            fillers.push(filler(eden_top, ee));
            heap.device_wrote(eden_top as usize * 8, eden_top as usize * 8 + 8);
        }
        to_device += dh.scatter(&fillers)?;
        // Replay the records, in parallel. Each stays in the save area
        // (a root of the launch) until its replay has read it, so that a
        // collection meanwhile updates it.
        let tp = Instant::now();
        trace.say(|| {
            format!(
                "launch {}: counters, records and TLABs back",
                report.launches
            )
        });
        let mut occupied = Vec::new();
        let mut values = Vec::new();
        // Records are only where the device's copy came back.
        if came_back {
            for r in 0..slots {
                match area.read_into(r, meta, &mut values) {
                    Ok(Some(_)) => occupied.push(r),
                    Ok(None) => {}
                    Err(e) => return Err(OffloadError::CorruptSaveArea(e)),
                }
            }
        }
        if !occupied.is_empty() && resumed_alloc.is_empty() {
            resumed_alloc = vec![None; slots];
        }
        // An interrupt stopped the kernel: drop the saved frames instead of
        // replaying them, and launch nothing more.
        if inner.control.interrupted_since(epoch) {
            for &r in &occupied {
                if let Ok(Some(h)) = area.read_into(r, meta, &mut values) {
                    replays.abandoned(meta, h, &values);
                }
            }
            area.clear();
            inner.control.poll();
            break;
        }
        // The records the relaunch resumes on the device stay in the area:
        // a safepoint's, and a full device eden's (the relaunch carves a
        // fresh one) unless the same workitem's allocation failed there
        // again after a resume (then the interpreter, which collects,
        // finishes it).
        let mut resume = Vec::new();
        occupied.retain(|&r| {
            let Ok(Some(h)) = area.read_into(r, meta, &mut values) else {
                return true;
            };
            let again = h.2 == offload_deopt::Reason::AllocationFailure
                && resumed_alloc[r] == Some((h.0, h.1));
            let ok = k.ptx.resumes.contains(&h.1)
                && !again
                && meta.site(h.1).is_some_and(|s| s.resumable(h.2));
            if ok {
                resumed_alloc[r] =
                    (h.2 == offload_deopt::Reason::AllocationFailure).then_some((h.0, h.1));
                resume.push((h, values.clone()));
                host_records.push(r);
            }
            !ok
        });
        if !occupied.is_empty() || !resume.is_empty() {
            env.gc.before_replays(heap, &inner.control)?;
        }
        let prog = call.prog;
        drop(running.take());
        let results: Vec<_> = inner.pool.install(|| {
            occupied
                .par_iter()
                .map_init(
                    || {
                        let w = rayon::current_thread_index().unwrap_or(0);
                        Replayer::new(
                            prog,
                            heap,
                            &alloc,
                            &inner.control,
                            w,
                            epoch,
                            &on_exhausted,
                            meta,
                        )
                    },
                    |rp, &r| {
                        let _running = inner.control.enter();
                        inner.control.poll();
                        let mut vals = Vec::new();
                        let h = area.read_into(r, meta, &mut vals)?;
                        Ok(h.map(|h| {
                            let resumed = rp.resume(meta, h, &vals);
                            (h, vals, resumed)
                        }))
                    },
                )
                .collect()
        });
        running = Some(inner.control.enter());
        for &r in &occupied {
            let _ = area.clear_one(r);
        }
        for res in results {
            let Some((h, vals, resumed)) = res.map_err(OffloadError::CorruptSaveArea)? else {
                continue;
            };
            cut |= resumed.1;
            replays.resumed(meta, h, &vals, resumed)?;
        }
        replay_time += tp.elapsed();
        trace.say(|| {
            format!(
                "launch {}: {} records replayed",
                report.launches,
                occupied.len()
            )
        });
        // A safepoint stopped the kernel: park until its operation is done.
        inner.control.poll();
        if cut || inner.control.interrupted_since(epoch) {
            // The records left to resume are dropped with the launch.
            for (h, vals) in &resume {
                replays.abandoned(meta, *h, vals);
            }
            area.clear();
            break;
        }
        if ex.iter().all(|&c| c == offload_abi::exit::DONE) && resume.is_empty() {
            break;
        }
        for (h, vals) in &resume {
            replays.resumed_on_device(meta, *h, vals);
        }
        if !nr.is_empty() && passed.is_empty() {
            passed = vec![crate::report::NeverRan::default(); slots];
        }
        report.never_ran += nr
            .chunks_exact(2)
            .zip(&mut passed)
            .map(|(p, c)| c.add(p[0], p[1]))
            .sum::<u64>();
        // Relaunch: the records are replayed or left to resume; the
        // never-ran rests and the cursor carry over (the device buffers
        // keep them); the captures and the area go up at the loop's top.
    }
    let t_loop = Instant::now();
    trace.say(|| "the last launch is done".to_string());
    let thrown = replays.finish(call.prog, meta, &mut report);
    report.chunks = total.div_ceil(chunk as u64);
    // The device's own counters: refills of its TLABs and allocations
    // that found its eden exhausted.
    drop(registered);
    drop(roots);
    drop(running);
    // Every record is empty again (each break above clears what it
    // leaves): the area serves the next launch.
    debug_assert!((0..slots).all(|r| matches!(area.read_into(r, meta, &mut Vec::new()), Ok(None))));
    *gpu.scratch.lock().unwrap_or_else(|e| e.into_inner()) = Some(Scratch { area, area_dev });
    report.alloc = alloc.retire();
    report.on_device = device_stats[counter::COMPLETED];
    report.alloc.refills += device_stats[counter::REFILLS];
    report.alloc.exhausted += device_stats[counter::EDEN_FAILURES];
    let teardown = t_loop.elapsed();
    let looped = t_loop.saturating_duration_since(t0);
    report.timings = Timings::of(
        t0.saturating_duration_since(started.at),
        looped.saturating_sub(run_time + replay_time),
        run_time,
        replay_time,
        teardown,
    );
    report.safepoints = inner.control.count() - safepoints_before;
    report.reentries = report.launches - 1;
    report.version = Some(k.ptx.version);
    report.speculations = k.ptx.meta.speculations.clone();
    report.gpu = Some(gpu.describe());
    report.to_device_bytes = to_device;
    report.to_host_bytes = to_host
        + heap
            .residency()
            .fetched_bytes
            .saturating_sub(fetched_before);
    thrown.finish(report)
}

/// Workitems per slot that a launch's slot count aims at (see
/// [`default_slots`]).
const ITEMS_PER_SLOT: u64 = 16;

/// The slots of a launch over `total` workitems when the settings name
/// none: one per [`ITEMS_PER_SLOT`] workitems, at least a block per
/// multiprocessor and at most the grid's `full` occupancy. Every slot
/// claims its chunks with an atomic on one cursor word and ends with
/// reductions on single words, and the device serializes atomics on one
/// address: with a slot per workitem (chunks of one), a saxpy launch over
/// 262,144 elements spent 590 µs in its kernel (Nsight Compute: 1.6
/// million atomic sectors, 1% of the SMs' throughput). One slot per 16
/// workitems made the bench's kernels 1.4–2.1x faster on an H200
/// (docs/GPU-RUNS.md).
fn default_slots(total: u64, full: usize, sms: u32) -> usize {
    let floor = sms as usize * BLOCK as usize;
    let want = usize::try_from(total.div_ceil(ITEMS_PER_SLOT)).unwrap_or(usize::MAX);
    want.max(floor).min(full)
}

/// A launch's save area, host and device halves (`slots` records each),
/// kept by the [`super::Gpu`] from one launch to the next: allocating and
/// writing a fresh one cost milliseconds a launch at a full GPU's slot
/// count (202,752 on an H100). Kept only with every host record empty;
/// the device half is set empty at each launch's start.
pub(super) struct Scratch {
    area: SaveArea,
    area_dev: CudaSlice<u64>,
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
unsafe fn area_words(area: &SaveArea) -> &mut [u64] {
    // SAFETY: the area is `bytes() / 8` contiguous `AtomicU64`s, which have
    // the layout of `u64`; exclusivity is the caller's.
    unsafe { std::slice::from_raw_parts_mut(area.as_ptr(), area.bytes() / 8) }
}

/// A filler header over words `[start, end)`, as `(byte offset, header
/// word)` for [`super::resident::DeviceHeap::scatter`].
fn filler(start: u32, end: u32) -> (u64, u64) {
    let (a, b) = Header::Filler {
        size: (end - start) * 8,
    }
    .encode()
    .expect("a filler header encodes");
    (u64::from(start) * 8, u64::from(a) | u64::from(b) << 32)
}

/// A run whose slots are asked to wait in place at a safepoint.
struct Waiting<'a> {
    env: &'a LaunchEnv,
    gpu: &'a Gpu,
    slots: usize,
    /// The run's device eden, in heap words.
    eden: (u32, u32),
    eden_at: u64,
    parked_at: u64,
    epoch: u64,
}

impl Waiting<'_> {
    /// Ask the slots to wait; once all wait (or are gone), mark what the
    /// kernel wrote so far, park this launch for the safepoint's
    /// operation, send what it wrote, and let the slots go on — or stop,
    /// when the safepoint was an interrupt of this launch. Returns the
    /// bytes sent and received (the parked count each time it is read, the
    /// eden's top, the dirty map and what the operation wrote; (0, 0) when
    /// the kernel finished first: then the safepoint is passed after the
    /// run, as for a stop). `finished` says whether the kernel is done.
    fn wait_here(
        &self,
        finished: &dyn Fn() -> bool,
        trace: &mut super::trace::Trace,
    ) -> Result<(u64, u64), OffloadError> {
        let (gpu, heap) = (self.gpu, &self.env.heap);
        let dh = &gpu.resident;
        gpu.set_control(offload_abi::control::WAIT)?;
        let mut n = [0u32];
        let mut got = 0u64;
        loop {
            if finished() {
                return Ok((0, 0));
            }
            dh.read_raw(self.parked_at, &mut n)?;
            got += 4;
            if n[0] as usize >= self.slots {
                break;
            }
            trace.tick(|| format!("waiting in place: {} of {} slots parked", n[0], self.slots));
            std::thread::sleep(Duration::from_micros(20));
        }
        // Every slot waits with its writes fenced, or is gone: what the
        // kernel wrote so far is what host code may now fetch.
        let (es, ee) = self.eden;
        let mut top = [0u64];
        dh.read_raw(self.eden_at + 8 * gpu::EDEN_TOP as u64, &mut top)?;
        let top = top[0].min(u64::from(ee)) as usize * 8;
        got += 8 + dh.mark_kernel_writes(heap, es as usize * 8, top)?;
        // The safepoint's operation runs while this launch is parked.
        self.env.control.poll();
        let runs = heap.take_device_stale(es as usize * 8..ee as usize * 8);
        let sent = dh.push(heap, &runs)?;
        let next = if self.env.control.interrupted_since(self.epoch) {
            offload_abi::control::SAFEPOINT
        } else {
            0
        };
        gpu.set_control(next)?;
        Ok((sent, got))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_has_a_slot_per_sixteen_workitems_within_the_grid() {
        let (full, sms) = (132 * 2048, 132);
        let floor = 132 * BLOCK as usize;
        assert_eq!(default_slots(0, full, sms), floor);
        assert_eq!(default_slots(1000, full, sms), floor);
        assert_eq!(default_slots(16 * 100_000, full, sms), 100_000);
        assert_eq!(default_slots(16 * 100_000 + 1, full, sms), 100_001);
        assert_eq!(default_slots(1 << 40, full, sms), full);
        // A grid smaller than a block per multiprocessor stays the bound.
        assert_eq!(default_slots(1 << 20, 512, sms), 512);
    }
}
