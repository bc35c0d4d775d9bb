//! Benchmarks of stopping long workitems (`offload bench`, CPU device):
//! a launch of long workitems during which the host raises safepoints,
//! against the same launch without them, timed by turns. Since stopped
//! workitems are resumed on the device (`RuntimeBuilder::reentry`), a stop
//! costs its time to safepoint and a re-entry; with re-entry off it costs
//! the interpreter running the rest of every stopped workitem, which the
//! last row measures for comparison.

use super::bench::{BenchResult, Target, by_turns};
use offload::{Device, OffloadError, Runtime, par_offload};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Loop iterations per workitem at `shrink` 1 (about 40 ms each).
const ITERS: i32 = 100_000_000;

/// A launch of `2 * workers` workitems of the `spin` example, each
/// `iters` iterations long, on a fresh CPU runtime with re-entry `on` or
/// off. Returns the runtime and the closure.
fn long_workitems(
    workers: usize,
    iters: i32,
    on: bool,
) -> Result<(Runtime, offload::Closure), OffloadError> {
    let rt = Runtime::builder()
        .workers(workers)
        .device(Device::Cpu)
        .tiered(false)
        .reentry(on)
        .build()?;
    let m = rt.load(
        "spin.obc",
        include_str!("../../../examples/kernels/spin.obc"),
    )?;
    let out = rt.new_array::<i32>(2 * workers)?;
    let c = m.closure("spin", [iters.into(), (&out).into()])?;
    Ok((rt, c))
}

/// Launch `c` on `rt` over `0..n` while a host thread raises a safepoint
/// `first` after the start and then every `every` (`None`: once); returns
/// the safepoints raised and the records resumed on the device.
fn with_safepoints(
    rt: &Runtime,
    c: &offload::Closure,
    n: i64,
    first: Duration,
    every: Option<Duration>,
) -> Result<(u64, u64), OffloadError> {
    let done = AtomicBool::new(false);
    std::thread::scope(|sc| {
        let raiser = sc.spawn(|| {
            let t0 = Instant::now();
            let mut next = first;
            let mut raised = 0u64;
            loop {
                // Asleep until the next safepoint is due (waking at most
                // every 5 ms to see whether the launch is over): a thread
                // that polled often would take CPU time from the workers,
                // on a machine with as many cores as workers.
                loop {
                    if done.load(Ordering::Relaxed) {
                        return raised;
                    }
                    let now = t0.elapsed();
                    if now >= next {
                        break;
                    }
                    std::thread::sleep((next - now).min(Duration::from_millis(5)));
                }
                rt.safepoint(|_| ());
                raised += 1;
                match every {
                    Some(e) => next += e,
                    None => return raised,
                }
            }
        });
        let r = par_offload(0..n, c);
        done.store(true, Ordering::Relaxed);
        let raised = raiser.join().expect("the safepoint thread");
        r.map(|r| (raised, r.resumed))
    })
}

/// The rows: one safepoint 30 ms into a launch of long workitems, a sweep
/// of safepoint rates, and one safepoint with re-entry off; each against
/// the same launch without safepoints, timed by turns.
pub(crate) fn rows(
    workers: usize,
    shrink: usize,
    reps: usize,
) -> Result<Vec<BenchResult>, OffloadError> {
    let iters = ITERS / shrink.max(1) as i32;
    let n = 2 * workers as i64;
    // Scaled like the workitems, so a stop lands inside them.
    let scale = |ms: u64| Duration::from_micros(ms * 1000 / shrink.max(1) as u64);
    let mut out = Vec::new();
    let (rt, c) = long_workitems(workers, iters, true)?;
    let mut none = || par_offload(0..n, &c).map(|_| ());
    for (label, first, every) in [
        (
            "one safepoint in long workitems",
            scale(30),
            None::<Duration>,
        ),
        ("safepoints every 20 ms", scale(20), Some(scale(20))),
        ("safepoints every 5 ms", scale(5), Some(scale(5))),
        ("safepoints every 1 ms", scale(1), Some(scale(1))),
    ] {
        let (mut raised, mut resumed) = (0, 0);
        let mut with = || {
            with_safepoints(&rt, &c, n, first, every).map(|(s, r)| {
                raised += s;
                resumed += r;
            })
        };
        let [t, base] = by_turns([&mut with, &mut none], reps)?;
        let runs = reps.max(1) as u64 + 1;
        out.push(BenchResult {
            bench: label.into(),
            device: Device::Cpu,
            baseline: Some(("no safepoint".into(), base)),
            offload: t,
            target: Some(Target::Slowdown(1.1)),
            note: format!(
                "{n} workitems of {iters} iterations; per launch {} safepoints, {} records resumed",
                raised / runs,
                resumed / runs
            ),
        });
    }
    // The same single stop with re-entry off: the interpreter runs the
    // rest of each stopped workitem (few repetitions: it is slow).
    let (rt_off, c_off) = long_workitems(workers, iters, false)?;
    let mut none_off = || par_offload(0..n, &c_off).map(|_| ());
    let mut with_off = || with_safepoints(&rt_off, &c_off, n, scale(30), None).map(|_| ());
    let [t, base] = by_turns([&mut with_off, &mut none_off], reps.min(3))?;
    out.push(BenchResult {
        bench: "one safepoint, re-entry off".into(),
        device: Device::Cpu,
        baseline: Some(("no safepoint".into(), base)),
        offload: t,
        target: None,
        note: "the interpreter finishes every stopped workitem (before issue 29)".into(),
    });
    Ok(out)
}
