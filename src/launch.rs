//! `par_offload` on the interpreter device: the range is cut into chunks that
//! the workers claim; each worker runs its chunks' workitems one after another
//! in its own interpreter, allocating from its TLAB slot.

use crate::error::{KernelExceptions, OffloadError};
use crate::runtime::{Closure, Device, Runtime};
use offload_host_interp::{Exception, Interpreter, Profile};
use offload_ir::ExceptionKind;
use offload_tlab::{AllocStats, Allocator};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long each phase of a launch took.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timings {
    /// Setting up slots and TLABs.
    pub setup: Duration,
    /// Running workitems.
    pub run: Duration,
    /// Retiring TLABs and merging results.
    pub teardown: Duration,
    /// Everything.
    pub total: Duration,
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
    /// Workitems run on the device.
    pub on_device: u64,
    /// Workitems that completed without an exception.
    pub completed: u64,
    /// Workitems that threw.
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
}

impl fmt::Display for LaunchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} over {}..{} on {} ({} workers, {} chunks): {} completed, {} threw; {} TLAB refills, {} heap growths; {:.3} ms (setup {:.3}, run {:.3}, teardown {:.3})",
            self.kernel,
            self.range.start,
            self.range.end,
            self.device.name(),
            self.workers,
            self.chunks,
            self.completed,
            self.threw,
            self.alloc.refills,
            self.alloc.heap_grows,
            self.timings.total.as_secs_f64() * 1e3,
            self.timings.setup.as_secs_f64() * 1e3,
            self.timings.run.as_secs_f64() * 1e3,
            self.timings.teardown.as_secs_f64() * 1e3,
        )
    }
}

/// Exceptions of a part of the range: bounded however many workitems throw.
#[derive(Default)]
struct Thrown {
    first: Option<Exception>,
    count: u64,
    by_kind: BTreeMap<ExceptionKind, u64>,
    lowest: Vec<i64>,
}

impl Thrown {
    fn add(&mut self, e: Exception) {
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

    fn merge(mut self, other: Thrown) -> Thrown {
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
) -> Result<LaunchReport, OffloadError> {
    let t0 = Instant::now();
    if range.start > range.end {
        return Err(OffloadError::Range {
            start: range.start,
            end: range.end,
        });
    }
    let inner = &rt.inner;
    let prog = &*closure.module.prog;
    let n = (range.end - range.start) as u64;
    let workers = inner.workers;
    let alloc = Allocator::new(&inner.heap, inner.policy, workers);
    let chunk = chunk_size(n, workers);
    let chunks = n.div_ceil(chunk);
    let profiles: Vec<Mutex<Option<Profile>>> = (0..workers).map(|_| Mutex::new(None)).collect();
    let safepoints_before = inner.control.count();
    let t_setup = t0.elapsed();

    let t1 = Instant::now();
    let (completed, thrown) = inner.pool.install(|| {
        (0..chunks)
            .into_par_iter()
            .map_init(
                || {
                    let worker = rayon::current_thread_index().unwrap_or(0);
                    let mut it = Interpreter::new(prog, &inner.heap, &alloc, worker);
                    it.set_control(&inner.control);
                    if inner.profile {
                        it.enable_profile();
                    }
                    (worker, it)
                },
                |(worker, it), c| {
                    let lo = range.start + (c * chunk) as i64;
                    let hi = (lo + chunk as i64).min(range.end);
                    let mut done = 0u64;
                    let mut thrown = Thrown::default();
                    let _running = inner.control.enter();
                    for w in lo..hi {
                        inner.control.poll();
                        match it.run_kernel(closure.kernel, w, &closure.captures) {
                            Ok(()) => done += 1,
                            Err(e) => thrown.add(e),
                        }
                    }
                    if inner.profile {
                        let mut slot = profiles[*worker % profiles.len()]
                            .lock()
                            .unwrap_or_else(|e| e.into_inner());
                        let p = slot.get_or_insert_with(|| Profile::new(prog.verified()));
                        it.drain_profile_into(p);
                    }
                    (done, thrown)
                },
            )
            .reduce(
                || (0, Thrown::default()),
                |a, b| (a.0 + b.0, a.1.merge(b.1)),
            )
    });
    let t_run = t1.elapsed();

    let t2 = Instant::now();
    let alloc_stats = alloc.retire();
    let profile = inner.profile.then(|| {
        let mut all = Profile::new(prog.verified());
        for p in profiles
            .into_iter()
            .filter_map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
        {
            all.merge(&p);
        }
        all
    });
    let report = LaunchReport {
        kernel: closure.kernel_name().to_string(),
        device: inner.device,
        range,
        on_device: n,
        completed,
        threw: thrown.count,
        workers,
        chunks,
        alloc: alloc_stats,
        timings: Timings {
            setup: t_setup,
            run: t_run,
            teardown: t2.elapsed(),
            total: t0.elapsed(),
        },
        profile,
        safepoints: inner.control.count() - safepoints_before,
    };
    match thrown.first {
        None => Ok(report),
        Some(first) => Err(OffloadError::Exceptions(Box::new(KernelExceptions {
            first,
            count: thrown.count,
            by_kind: thrown.by_kind,
            workitems: thrown.lowest,
            report,
        }))),
    }
}
