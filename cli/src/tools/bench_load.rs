//! Launches beside other work (`offload bench`): saxpy's worst of 20
//! launches while two other threads keep the cores busy, against native
//! rayon's worst of 20 in the same process under the same load; and two
//! half-size launches in flight at once (`Runtime::launch`) against one
//! full-size launch. A launch waits for its slowest worker, so a worker the scheduler
//! leaves waiting makes a long tail; the launch team's waiting must not
//! make it longer than a pool's (issue 50: repetitions of 199–536 ms
//! against a median of 6.9 ms were seen on an oversubscribed machine).

use super::bench::{BenchResult, Target, by_turns};
use crate::tools::kernels::example;
use crate::tools::reference as native;
use offload::{OffloadError, Runtime, par_offload};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Repetitions per side; the worst is the figure.
const REPS: usize = 20;

/// Threads of competing load.
const LOAD_THREADS: usize = 2;

/// The worst and the median of `f`'s `REPS` timed runs, after `warm`
/// untimed ones.
fn worst_of(
    mut f: impl FnMut() -> Result<(), OffloadError>,
) -> Result<(Duration, Duration), OffloadError> {
    for _ in 0..3 {
        f()?;
    }
    let mut t = Vec::with_capacity(REPS);
    for _ in 0..REPS {
        let t0 = Instant::now();
        f()?;
        t.push(t0.elapsed());
    }
    t.sort();
    Ok((t[REPS - 1], t[REPS / 2]))
}

/// The rows: saxpy over 10^7 elements (divided by `shrink`) on `rt`,
/// medians of `reps` where a row has medians.
pub fn rows(rt: &Runtime, shrink: usize, reps: usize) -> Result<Vec<BenchResult>, OffloadError> {
    let n = 10_000_000 / shrink.max(1);
    let x: Vec<f32> = (0..n).map(|i| (i % 100) as f32).collect();
    let mut y = vec![1.0f32; n];
    let m = rt.load("saxpy.obc", example("saxpy.obc"))?;
    let (xa, ya) = (rt.array(&x)?, rt.array(&y)?);
    let c = m.closure("saxpy", [2.0f32.into(), (&xa).into(), (&ya).into()])?;
    par_offload(0..n as i64, &c)?;
    rt.finish_compiles();
    let stop = AtomicBool::new(false);
    let timed = std::thread::scope(|s| {
        for _ in 0..LOAD_THREADS {
            s.spawn(|| {
                let mut k = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    k = std::hint::black_box(k.wrapping_mul(6_364_136_223_846_793_005) | 1);
                }
            });
        }
        let mut sides = || -> Result<_, OffloadError> {
            let offload = worst_of(|| par_offload(0..n as i64, &c).map(|_| ()))?;
            // As `bench::apart`: the other pool's threads go idle first.
            std::thread::sleep(Duration::from_millis(50));
            let rayon = worst_of(|| {
                native::saxpy_par(2.0, &x, &mut y);
                Ok(())
            })?;
            Ok((offload, rayon))
        };
        let r = sides();
        stop.store(true, Ordering::Relaxed);
        r
    });
    let ((worst, median), (rworst, rmedian)) = timed?;
    let ms = |d: Duration| offload::diagnostics::duration_text(d);
    Ok(vec![
        BenchResult {
            bench: format!("saxpy worst of {REPS}, {LOAD_THREADS} busy threads"),
            device: rt.device(),
            baseline: Some((format!("rayon worst of {REPS}"), rworst)),
            offload: worst,
            target: Some(Target::Slowdown(2.0)),
            note: format!(
                "{n} elements; medians: offload {}, rayon {}",
                ms(median),
                ms(rmedian)
            ),
        },
        halves(rt, &m, (&x, &y), &c, reps)?,
    ])
}

/// Repetitions of [`halves`] at least: two launches in flight on two
/// cores vary from pair to pair (a 41-rep program saw its 75th percentile
/// 1.5x its median), and 7 left the median on either side of 1.0x.
const HALVES_REPS: usize = 21;

/// On the GPU: [`halves`] of saxpy over 10^7 elements (divided by
/// `shrink`).
pub fn gpu_halves(rt: &Runtime, shrink: usize, reps: usize) -> Result<BenchResult, OffloadError> {
    let n = 10_000_000 / shrink.max(1);
    let x: Vec<f32> = (0..n).map(|i| (i % 100) as f32).collect();
    let y = vec![1.0f32; n];
    let m = rt.load("saxpy.obc", example("saxpy.obc"))?;
    let (xa, ya) = (rt.array(&x)?, rt.array(&y)?);
    let full = m.closure("saxpy", [2.0f32.into(), (&xa).into(), (&ya).into()])?;
    par_offload(0..n as i64, &full)?;
    halves(rt, &m, (&x, &y), &full, reps)
}

/// Two saxpy launches (of `m`'s `saxpy`) in flight at once
/// (`Runtime::launch`), each over half of `x` and `y` (arrays of their
/// own), against `full`, one launch over all of them; by turns, medians of
/// `reps`. On the GPU the two share
/// the device, each on a stream of its own (their arrays lie in different
/// heap chunks); the target (no slower) is the CPU device's.
pub fn halves(
    rt: &Runtime,
    m: &offload::Module,
    (x, y): (&[f32], &[f32]),
    full: &offload::Closure,
    reps: usize,
) -> Result<BenchResult, OffloadError> {
    let half = x.len() / 2;
    let (x1, y1) = (rt.array(&x[..half])?, rt.array(&y[..half])?);
    let (x2, y2) = (rt.array(&x[half..2 * half])?, rt.array(&y[half..2 * half])?);
    let c1 = m.closure("saxpy", [2.0f32.into(), (&x1).into(), (&y1).into()])?;
    let c2 = m.closure("saxpy", [2.0f32.into(), (&x2).into(), (&y2).into()])?;
    let mut beside = 0;
    let [two, one] = by_turns(
        [
            &mut || {
                let h1 = rt.launch(0..half as i64, &c1)?;
                let h2 = rt.launch(0..half as i64, &c2)?;
                beside += h1.wait()?.runs_beside;
                beside += h2.wait()?.runs_beside;
                Ok(())
            },
            &mut || par_offload(0..2 * half as i64, full).map(|_| ()),
        ],
        reps.max(HALVES_REPS),
    )?;
    let gpu = rt.device() == offload::Device::Cuda;
    Ok(BenchResult {
        bench: "two half saxpys in flight".into(),
        device: rt.device(),
        baseline: Some(("one full-size launch".into(), one)),
        offload: two,
        target: (!gpu).then_some(Target::Slowdown(1.0)),
        note: if gpu {
            format!(
                "{half} elements each, Runtime::launch and wait; {beside} runs beside the other"
            )
        } else {
            format!("{half} elements each, Runtime::launch and wait")
        },
    })
}
