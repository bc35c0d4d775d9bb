//! Launches under a competing load (`offload bench`, CPU device): saxpy's
//! worst of 20 launches while two other threads keep the cores busy,
//! against native rayon's worst of 20 in the same process under the same
//! load. A launch waits for its slowest worker, so a worker the scheduler
//! leaves waiting makes a long tail; the launch team's waiting must not
//! make it longer than a pool's (issue 50: repetitions of 199–536 ms
//! against a median of 6.9 ms were seen on an oversubscribed machine).

use super::bench::{BenchResult, Target};
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

/// The row: saxpy over 10^7 elements (divided by `shrink`) on `rt`.
pub fn rows(rt: &Runtime, shrink: usize) -> Result<Vec<BenchResult>, OffloadError> {
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
    Ok(vec![BenchResult {
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
    }])
}
