//! One `par_offload` call: the kernel's plan (device, version), a deadline's
//! watchdog, the launch on the planned device with its fallbacks (CUDA →
//! CPU → interpreter), and the policy's look at the report afterwards.

use crate::adaptive::Plan;
use crate::error::OffloadError;
use crate::report::LaunchReport;
use crate::runtime::{Closure, Device, Runtime};
use std::ops::Range;
use std::time::{Duration, Instant};

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
        return crate::interp_device::launch(rt, range, closure, plan, started);
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
    let mut r = crate::interp_device::launch(rt, range, closure, plan, started);
    let note = Some(format!("ran on the interpreter: {why}"));
    match &mut r {
        Ok(rep) => rep.fallback = note,
        Err(OffloadError::Exceptions(e)) => e.report.fallback = note,
        Err(_) => {}
    }
    r
}
