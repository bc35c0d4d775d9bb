//! The CPU device: the launch → replay loop around the JIT's slot loops
//! (DESIGN.md, "Execution model"):
//!
//! 1. launch one slot loop per worker over the range;
//! 2. when every slot has exited, resume each deoptimized workitem from its
//!    save record in the interpreter, in parallel;
//! 3. launch the device again on the never-ran work (each slot's unstarted
//!    rest, and the untouched tail), until nothing is left.
//!
//! Every workitem runs exactly once: wholly on the device; on the device up to
//! a deopt and the rest in the interpreter; or, if it never started, in a later
//! launch. The bookkeeping is O(workers) whatever the range.

use crate::error::OffloadError;
use crate::launch::{DeoptRow, LaunchReport, Thrown, Timings};
use crate::runtime::{Closure, Device, Runtime};
use offload_deopt::SaveArea;
use offload_host_interp::Interpreter;
use offload_jit::{CompiledKernel, JitError, LaunchCtx};
use offload_tlab::Allocator;
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The compiled version of the closure's kernel (compiled on first use and
/// cached), or why it cannot be compiled.
pub(crate) fn compiled(rt: &Runtime, closure: &Closure) -> Result<Arc<CompiledKernel>, JitError> {
    // Keyed by the module's id, which a runtime never reuses (an address or a
    // class base could come back for another module).
    let key = (closure.module.id, closure.kernel, 0);
    if let Some(hit) = rt.inner.compiled.get(&key) {
        return hit.value().clone();
    }
    let result = rt
        .inner
        .jit
        .compile_with(&closure.module.prog, closure.kernel, 0, rt.inner.inject)
        .map(Arc::new);
    rt.inner.compiled.insert(key, result.clone());
    result
}

fn chunk_size(n: u64, workers: usize) -> i64 {
    (n / (workers as u64 * 32)).clamp(1, 1024) as i64
}

pub(crate) fn launch(
    rt: &Runtime,
    range: Range<i64>,
    closure: &Closure,
    ck: &CompiledKernel,
) -> Result<LaunchReport, OffloadError> {
    let t0 = Instant::now();
    let inner = &rt.inner;
    let prog = &*closure.module.prog;
    let workers = inner.workers;
    let meta = &ck.meta;
    let area = SaveArea::new(workers, meta.layout);
    let alloc = Allocator::new(&inner.heap, inner.policy, workers);
    let total = range.end.wrapping_sub(range.start) as u64;
    let chunk = chunk_size(total, workers);
    let mut pending: Vec<Range<i64>> = vec![range.clone()];
    let mut thrown = Thrown::default();
    let (mut on_device, mut replayed, mut never_ran, mut launches) = (0u64, 0u64, 0u64, 0u64);
    let mut deopts = BTreeMap::new();
    let mut table = Vec::new();
    let (mut device_time, mut replay_time) = (Duration::ZERO, Duration::ZERO);
    let safepoints_before = inner.control.count();
    let mut never = vec![0i64; 2 * workers];
    let mut completed = vec![0u64; workers];
    while let Some(r) = pending.pop() {
        if r.start >= r.end {
            continue;
        }
        launches += 1;
        area.clear();
        never.fill(0);
        completed.fill(0);
        let cursor = AtomicI64::new(r.start);
        let control = Arc::new(AtomicU32::new(0));
        // A safepoint request stops this launch's slots at their next poll.
        let _registered = inner
            .control
            .register(&control, offload_jit::ctx::CONTROL_SAFEPOINT);
        let ctx = LaunchCtx {
            heap_base: inner.heap.base_ptr(),
            cursor: &cursor,
            end: r.end,
            chunk,
            control: &*control,
            save_area: area.as_ptr(),
            record_words: u64::from(meta.layout.record_words),
            never_ran: never.as_mut_ptr(),
            completed: completed.as_mut_ptr(),
            captures: closure.captures.as_ptr(),
        };
        let td = Instant::now();
        inner.pool.scope(|s| {
            for slot in 0..workers {
                let ctx = &ctx;
                s.spawn(move |_| {
                    // Slots count as running for safepoints; they return
                    // (rather than park) when one is requested.
                    let _running = inner.control.enter();
                    // SAFETY: `ctx` describes this launch of this kernel
                    // version: the heap outlives the launch and only grows;
                    // `captures` passed the closure's type check against the
                    // kernel; the save area, `never` and `completed` have
                    // `workers` slots of this version's layout and `slot <
                    // workers`; the scope joins every slot before any of
                    // them is read or freed.
                    unsafe { ck.run_slot(ctx, slot) };
                });
            }
        });
        device_time += td.elapsed();
        on_device += completed.iter().sum::<u64>();

        // Deopted workitems: resume in the interpreter, in parallel.
        let records = area
            .records(meta)
            .map_err(|e| OffloadError::Setup(format!("corrupt save area: {e}")))?;
        let tr = Instant::now();
        let results: Vec<_> = inner.pool.install(|| {
            records
                .par_iter()
                .map_init(
                    || {
                        let worker = rayon::current_thread_index().unwrap_or(0);
                        let mut it = Interpreter::new(prog, &inner.heap, &alloc, worker);
                        it.set_control(&inner.control);
                        it
                    },
                    |it, rec| {
                        let _running = inner.control.enter();
                        it.resume_record(meta, rec)
                    },
                )
                .collect()
        });
        replay_time += tr.elapsed();
        for (rec, res) in records.into_iter().zip(results) {
            let bci = meta.site(rec.site).map_or(u32::MAX, |s| s.bci);
            *deopts.entry((bci, rec.reason)).or_insert(0) += 1;
            let action = match res {
                Ok(Ok(())) => {
                    replayed += 1;
                    "replayed"
                }
                Ok(Err(e)) => {
                    replayed += 1;
                    thrown.add(e);
                    "replayed, threw"
                }
                Err(e) => {
                    return Err(OffloadError::Setup(format!(
                        "cannot resume workitem {}: {e}",
                        rec.workitem
                    )));
                }
            };
            if table.len() < LaunchReport::TABLE_ROWS {
                table.push(DeoptRow {
                    workitem: rec.workitem,
                    action,
                    bci,
                    reason: rec.reason,
                    values: rec.values,
                });
            }
        }

        // Never-ran work: each slot's unstarted rest, and the untouched tail.
        let mut rest: Vec<Range<i64>> = never
            .chunks(2)
            .map(|p| p[0]..p[1])
            .filter(|r| r.start < r.end)
            .collect();
        let tail = cursor.load(Ordering::Acquire).min(r.end);
        if tail < r.end {
            rest.push(tail..r.end);
        }
        never_ran += rest
            .iter()
            .map(|r| r.end.wrapping_sub(r.start) as u64)
            .sum::<u64>();
        pending.extend(rest);
    }
    let alloc_stats = alloc.retire();
    let report = LaunchReport {
        kernel: closure.kernel_name().to_string(),
        device: Device::Cpu,
        range,
        on_device,
        completed: on_device + replayed - thrown.count,
        threw: thrown.count,
        workers,
        chunks: total.div_ceil(chunk as u64),
        alloc: alloc_stats,
        timings: Timings {
            setup: ck.compile_time,
            run: device_time,
            teardown: replay_time,
            total: t0.elapsed(),
        },
        profile: None,
        safepoints: inner.control.count() - safepoints_before,
        replayed,
        never_ran,
        launches,
        deopts,
        fallback: None,
        deopt_table: table,
    };
    thrown.finish(report)
}
