//! `par_offload` on the interpreter device: the range is cut into chunks that
//! the workers claim; each worker runs its chunks' workitems one after another
//! in its own interpreter, allocating from its TLAB slot.

use crate::adaptive::Plan;
use crate::device::Device;
use crate::env::{KernelCall, LaunchEnv, Started};
use crate::error::OffloadError;
use crate::executor::{Executor, Unsupported};
use crate::replay::Thrown;
use crate::report::{DeoptAction, DeoptRow, LaunchReport, Timings};
use offload_abi::reduce::Builder;
use offload_host_interp::{Interpreter, Profile};
use rayon::prelude::*;
use std::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Workitems per claim of the interpreter device.
fn chunk_size(n: u64, workers: usize) -> u64 {
    (n / (workers as u64 * 16)).clamp(1, 4096)
}

/// The interpreter device: it runs every kernel.
#[derive(Debug)]
pub(crate) struct Interp;

impl Executor for Interp {
    fn launch(
        &self,
        env: &LaunchEnv,
        call: KernelCall<'_>,
        plan: &Plan,
        range: Range<i64>,
        started: Started,
    ) -> Result<Result<LaunchReport, OffloadError>, Unsupported> {
        Ok(run(env, range, call, plan, started))
    }
}

/// Run the launch in interpreters on every worker.
pub(crate) fn run(
    env: &LaunchEnv,
    range: Range<i64>,
    call: KernelCall<'_>,
    plan: &Plan,
    started: Started,
) -> Result<LaunchReport, OffloadError> {
    let t0 = Instant::now();
    let inner = env;
    let prog = call.prog;
    let n = range.end.wrapping_sub(range.start) as u64;
    let workers = inner.workers;
    let alloc = env.allocator(&call, workers, plan.tlab_bytes);
    let chunk = plan.chunk.unwrap_or_else(|| chunk_size(n, workers));
    let profiling = env.settings.profile || plan.warmup;
    let chunks = n.div_ceil(chunk);
    let epoch = started.ticket;
    let profiles: Vec<Mutex<Option<Profile>>> = (0..workers).map(|_| Mutex::new(None)).collect();
    // Each workitem's dead objects go back to its worker's TLAB as it ends
    // when every worker has a TLAB of its own, as on the CPU device (the
    // two devices must agree on which programs run out of memory).
    let nursery = env.settings.reclaim
        && prog.may_allocate(call.kernel)
        && crate::env::exclusive(&crate::env::tlabs_of(&alloc, workers));
    let recycled = std::sync::atomic::AtomicU64::new(0);
    let safepoints_before = inner.control.count();
    // The allocator's TLABs, for collections while the launch runs (an
    // interpreter that finds eden exhausted asks for one); the frames of
    // the interpreters are roots where they park.
    let roots = KernelCall::device_roots(&alloc, None);
    let registered = env.gc.launch(&roots);
    let on_exhausted = KernelCall::on_exhausted(env);

    let t1 = Instant::now();
    // Workers claim chunks from one counter until none is left or the
    // launch is interrupted: an interrupted launch of 2^51 chunks ends at
    // the next claim, not after visiting every chunk.
    let next = std::sync::atomic::AtomicU64::new(0);
    let reduction = call.reduction();
    let (completed, mut cut, thrown, escaped, nodes) = inner.pool.install(|| {
        (0..workers)
            .into_par_iter()
            .map(|_| {
                let mut totals = (0u64, Vec::new(), Thrown::default(), false, Vec::new());
                // This worker's values, joined into the tree's nodes.
                let mut values = reduction.map(|(ty, c)| Builder::new(n, ty, c));
                let worker = rayon::current_thread_index().unwrap_or(0);
                let mut it = Interpreter::new(prog, &inner.heap, &alloc, worker);
                it.set_control(&inner.control, epoch);
                it.set_collector(&on_exhausted);
                if profiling {
                    it.enable_profile();
                }
                if nursery {
                    it.enable_nursery();
                }
                let mut captures = Vec::new();
                loop {
                    let c = next.fetch_add(1, Ordering::Relaxed);
                    if c >= chunks || inner.control.interrupted_since(epoch) {
                        break;
                    }
                    let lo = range.start.wrapping_add((c * chunk) as i64);
                    let hi = lo.saturating_add(chunk as i64).min(range.end);
                    let (done, abandoned, thrown, _, _) = &mut totals;
                    let _running = inner.control.enter();
                    for w in lo..hi {
                        inner.control.poll();
                        if inner.control.interrupted_since(epoch) {
                            break;
                        }
                        // Read each time: a collection at a poll may have
                        // moved what they point at.
                        captures.clear();
                        captures.extend(call.captures.iter().map(|c| c.load(Ordering::Acquire)));
                        let r = it.run_kernel(call.kernel, w, &captures);
                        inner.control.workitem_ended();
                        match r {
                            Ok(v) => {
                                *done += 1;
                                if let (Some(b), Some(v)) = (values.as_mut(), v) {
                                    b.push_leaf(w.wrapping_sub(range.start) as u64, v);
                                }
                            }
                            // Stopped at a poll: the row shows where (the
                            // interpreter keeps no save-area values).
                            Err(e) if it.take_interrupted() => abandoned.push(DeoptRow {
                                workitem: w,
                                action: DeoptAction::Interrupted,
                                bci: e.trace.first().map_or(0, |f| f.bci),
                                reason: offload_deopt::Reason::Safepoint,
                                site: None,
                                values: Vec::new(),
                                saved: Vec::new(),
                            }),
                            Err(e) => thrown.add(e),
                        }
                    }
                }
                recycled.fetch_add(
                    it.take_recycled_words(),
                    std::sync::atomic::Ordering::Relaxed,
                );
                if profiling {
                    let mut slot = profiles[worker % profiles.len()]
                        .lock()
                        .unwrap_or_else(|e| e.into_inner());
                    let p = slot.get_or_insert_with(|| Profile::new(prog.verified()));
                    it.drain_profile_into(p);
                }
                totals.3 = it.escaped();
                totals.4 = values.map_or_else(Vec::new, Builder::finish);
                totals
            })
            .reduce(
                || (0, Vec::new(), Thrown::default(), false, Vec::new()),
                |mut a, mut b| {
                    a.1.extend(b.1);
                    a.4.append(&mut b.4);
                    (a.0 + b.0, a.1, a.2.merge(b.2), a.3 || b.3, a.4)
                },
            )
    });
    let t2 = Instant::now();
    drop(registered);
    let mut alloc_stats = env.end_allocation(alloc, escaped, safepoints_before);
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
    let mut report = LaunchReport::new(call.name(), Device::Interpreter, range, workers);
    report.on_device = completed + thrown.count;
    report.chunks = chunks;
    report.alloc = alloc_stats;
    report.timings = Timings::from_rounds(
        [started.at, t0, t1, t2, Instant::now()],
        None,
        Duration::ZERO,
    );
    report.profile = profile;
    report.safepoints = inner.control.count() - safepoints_before;
    report.deopt_table = cut;
    report.abandoned = abandoned;
    if let Some(r) = reduction.filter(|_| completed == n) {
        report.reduction = Some(crate::reduction::joined(r, n, nodes)?);
    }
    thrown.finish(report)
}
