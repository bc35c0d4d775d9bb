//! One `par_offload` call: the kernel's plan (device, version), a deadline's
//! watchdog, the launch on the planned device with its fallbacks (CUDA →
//! CPU → interpreter), and the policy's look at the report afterwards.
//!
//! A launch sees the runtime only as its [`LaunchEnv`] and the devices it
//! may run on ([`Devices`]); each device sits behind
//! [`crate::executor::Executor`].

use crate::adaptive::{KernelState, Plan};
use crate::device::Device;
use crate::devices::{Devices, compiled_devices_refuse, try_on};
use crate::env::{KernelCall, LaunchEnv, Started};
use crate::error::OffloadError;
use crate::executor::{Executor, Unsupported};
use crate::interp_device::Interp;
use crate::report::LaunchReport;
use std::ops::Range;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Run `call` over `range` on `devices` as the kernel's `state` plans it,
/// within `deadline`, and let its policy see the report. `before` is the
/// runtime's collection totals when the launch began and the time a
/// collection took then (both go into the report).
pub(crate) fn launch(
    env: &LaunchEnv,
    devices: Devices<'_>,
    call: KernelCall<'_>,
    state: &Mutex<KernelState>,
    range: Range<i64>,
    deadline: Option<Duration>,
    (gc_before, collected): (crate::GcSummary, Duration),
) -> Result<LaunchReport, OffloadError> {
    if range.start > range.end {
        return Err(OffloadError::Range {
            start: range.start,
            end: range.end,
        });
    }
    let f = call.prog.verified().func(call.kernel);
    let fits = range.start >= i64::from(i32::MIN) && range.end <= i64::from(i32::MAX) + 1;
    if !fits && range.start < range.end && offload_ir::analysis::narrows_index(f) {
        return Err(OffloadError::IndexRange {
            kernel: f.name.clone(),
            start: range.start,
            end: range.end,
        });
    }
    let plan = state
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .plan(&env.settings);
    // The launch's interrupt ticket: what a deadline interrupts.
    let ticket = env.control.interrupt_epoch();
    let mut r = match deadline {
        None => launch_on(env, devices, call, &plan, range, ticket),
        Some(d) => {
            let (r, hit) = within(env, d, ticket, || {
                launch_on(env, devices, call, &plan, range, ticket)
            });
            let mut r = r;
            if hit && let Some(rep) = report_mut(&mut r) {
                rep.deadline = Some(d);
            }
            r
        }
    };
    env.control.finish_launch(ticket);
    if let Some(rep) = report_mut(&mut r) {
        rep.gc = env.gc.totals().since(&gc_before);
        rep.timings = std::mem::take(&mut rep.timings).after_collection(collected);
    }
    // An interrupted launch ran part of its range: it tells the policy
    // nothing about the kernel.
    let interrupted = matches!(r, Err(OffloadError::Interrupted(_)));
    if let Some(rep) = report_mut(&mut r).filter(|_| !interrupted) {
        state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .after(env, &plan, rep);
    }
    r
}

/// Runs `f` with a watchdog that interrupts the launch holding `ticket` if
/// `f` is still running after `d`; returns `f`'s result and whether the
/// watchdog fired.
fn within<R>(env: &LaunchEnv, d: Duration, ticket: u64, f: impl FnOnce() -> R) -> (R, bool) {
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let watchdog = s.spawn(move || match done_rx.recv_timeout(d) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                env.control.interrupt_launch(ticket);
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

/// The report a launch's result carries: its own, or the one an
/// interrupt's or the exceptions' error holds (`None` for an error before
/// anything ran).
fn report_mut(r: &mut Result<LaunchReport, OffloadError>) -> Option<&mut LaunchReport> {
    match r {
        Ok(rep) => Some(rep),
        Err(OffloadError::Interrupted(rep)) => Some(rep),
        Err(OffloadError::Exceptions(e)) => Some(&mut e.report),
        Err(_) => None,
    }
}

/// Note on a launch's result that it ran where it did because of `note`.
fn with_fallback(
    mut r: Result<LaunchReport, OffloadError>,
    note: String,
) -> Result<LaunchReport, OffloadError> {
    if let Some(rep) = report_mut(&mut r) {
        rep.fallback = Some(note);
    }
    r
}

/// Run one launch as `plan` says: on its device, falling back from CUDA to
/// the CPU and from the CPU to the interpreter when the kernel cannot run
/// there (reported; an error in strict mode when CUDA cannot run it).
fn launch_on(
    env: &LaunchEnv,
    devices: Devices<'_>,
    call: KernelCall<'_>,
    plan: &Plan,
    range: Range<i64>,
    ticket: u64,
) -> Result<LaunchReport, OffloadError> {
    let started = Started {
        at: Instant::now(),
        ticket,
    };
    // A launch split over the CPU and the GPUs (`split.rs`), when the
    // runtime asks for one and the kernel may be split.
    let mut split_note = None;
    if let Some(over) = env.settings.split
        && plan.device == Device::Cuda
        && !devices.gpus.is_empty()
        && !devices.pinned
        && compiled_devices_refuse(env, &range).is_none()
    {
        match crate::split::refuse(&call) {
            None => {
                if let Some(r) = crate::split::run(
                    env,
                    devices,
                    over,
                    call,
                    plan,
                    range.clone(),
                    started,
                    &plan.split_rates,
                ) {
                    return r;
                }
            }
            Some(why) => split_note = Some(format!("not split over devices: {why}")),
        }
    }
    let r = launch_one(env, devices, call, plan, range, started);
    match split_note {
        Some(note) => with_fallback(r, note),
        None => r,
    }
}

/// [`launch_on`] on one device: the planned one, or the next that can
/// run the kernel.
fn launch_one(
    env: &LaunchEnv,
    devices: Devices<'_>,
    call: KernelCall<'_>,
    plan: &Plan,
    range: Range<i64>,
    started: Started,
) -> Result<LaunchReport, OffloadError> {
    // The interpreter runs every kernel: the last resort.
    let interp = |range| match Interp.launch(env, call, plan, range, started) {
        Ok(r) => r,
        Err(Unsupported(why)) => Err(OffloadError::Setup(why)),
    };
    if plan.device == Device::Interpreter {
        return interp(range);
    }
    let mut cuda_note = None;
    let gpu = (plan.device == Device::Cuda)
        .then(|| crate::cuda::pick(devices.gpus))
        .flatten();
    if let Some(gpu) = gpu {
        let _running = gpu.running();
        match try_on(gpu, env, call, plan, &range, started) {
            Ok(r) => return r,
            Err(Unsupported(why)) => {
                if env.settings.strict {
                    return Err(OffloadError::Strict {
                        what: format!("`{}` cannot run on the CUDA device", call.name()),
                        why,
                    });
                }
                cuda_note = Some(format!("ran on the CPU device, not CUDA: {why}"));
            }
        }
    }
    let r = match try_on(devices.cpu, env, call, plan, &range, started) {
        Ok(r) => r,
        Err(Unsupported(why)) => {
            with_fallback(interp(range), format!("ran on the interpreter: {why}"))
        }
    };
    match cuda_note {
        Some(note) => with_fallback(r, note),
        None => r,
    }
}
