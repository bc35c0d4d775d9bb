//! Benchmarks of virtual calls (`offload bench`, CPU device): the two
//! virtual-dispatch workloads (`raycast`, `particles`: six classes behind
//! one virtual method, objects the host made, on pages of their class)
//! against native Rust's trait objects, and dispatch by address (the
//! receiver's class from its page's tag, `offload_heap::pages`) against
//! dispatch by header (`RuntimeBuilder::dispatch_by_address(false)`) on
//! runtimes of the same workers, timed by turns — the target is no slower.

use super::bench::{BenchResult, Target, by_turns};
use offload::{Closure, OffloadError, Runtime, par_offload};
use offload_testkit::kernels::example;
use offload_testkit::scenes;

/// A runtime like `rt` (device, workers) with dispatch by address `on`.
fn like(rt: &Runtime, on: bool) -> Result<Runtime, OffloadError> {
    Runtime::builder()
        .device(rt.device())
        .workers(rt.workers())
        .dispatch_by_address(on)
        .build()
}

/// The ray caster over `specs` on `rt`, a `w × h` image.
fn raycast(rt: &Runtime, w: i32, h: i32, specs: &[scenes::Spec]) -> Result<Closure, OffloadError> {
    let m = rt.load("raycast.obc", example("raycast.obc"))?;
    let (scene, _) = scenes::make_objects(&m, "Shape", specs)?;
    let n = (w * h) as usize;
    let (depth, hit) = (rt.new_array::<f32>(n)?, rt.new_array::<i32>(n)?);
    m.closure(
        "raycast",
        [
            w.into(),
            h.into(),
            (&scene).into(),
            (&depth).into(),
            (&hit).into(),
        ],
    )
}

/// The particle step over `specs` on `rt`.
fn particles(rt: &Runtime, steps: i32, specs: &[scenes::Spec]) -> Result<Closure, OffloadError> {
    let m = rt.load("particles.obc", example("particles.obc"))?;
    let (ps, _) = scenes::make_objects(&m, "Particle", specs)?;
    m.closure("particles", [steps.into(), 0.001f32.into(), (&ps).into()])
}

/// Time `a` and `b` (launches of `n` workitems, on runtimes `ra` and `rb`)
/// by turns once both kernels' optimized tiers are there.
fn pair(
    (ra, a): (&Runtime, &Closure),
    (rb, b): (&Runtime, &Closure),
    n: i64,
    reps: usize,
) -> Result<[std::time::Duration; 2], OffloadError> {
    let mut fa = || par_offload(0..n, a).map(|_| ());
    let mut fb = || par_offload(0..n, b).map(|_| ());
    fa()?;
    fb()?;
    ra.finish_compiles();
    rb.finish_compiles();
    by_turns([&mut fa, &mut fb], reps)
}

/// The rows at sizes divided by `shrink`.
pub fn rows(rt: &Runtime, shrink: usize, reps: usize) -> Result<Vec<BenchResult>, OffloadError> {
    let s = shrink.max(1);
    let mut out = Vec::new();
    let row = |bench: &str, base: &str, t, b, target| BenchResult {
        bench: bench.into(),
        device: rt.device(),
        baseline: Some((base.into(), b)),
        offload: t,
        target,
        note: String::new(),
    };
    let by_header = like(rt, false)?;

    // The ray caster: 2,000 shapes, every pixel testing every one.
    let specs = scenes::scene(2000 / s.min(8), 21);
    let (w, h) = (64 / s.min(8) as i32, 48 / s.min(8) as i32);
    let n = i64::from(w * h);
    let c = raycast(rt, w, h, &specs)?;
    let ch = raycast(&by_header, w, h, &specs)?;
    let native = scenes::native_scene(&specs);
    let (mut depth, mut hit) = (vec![0.0; n as usize], vec![0; n as usize]);
    let [t, tn] = by_turns(
        [&mut || par_offload(0..n, &c).map(|_| ()), &mut || {
            scenes::raycast_par(w, h, &native, &mut depth, &mut hit);
            Ok(())
        }],
        reps,
    )?;
    out.push(row("raycast", "native rayon dyn", t, tn, None));
    let [t, th] = pair((rt, &c), (&by_header, &ch), n, reps)?;
    out.push(row(
        "raycast by address",
        "by header",
        t,
        th,
        Some(Target::Slowdown(1.0)),
    ));

    // The particles: 200,000 of six kinds, 10 steps each per launch.
    let specs = scenes::population(200_000 / s, 23);
    let n = specs.len() as i64;
    let c = particles(rt, 10, &specs)?;
    let ch = particles(&by_header, 10, &specs)?;
    let mut native = scenes::native_population(&specs);
    let [t, tn] = by_turns(
        [&mut || par_offload(0..n, &c).map(|_| ()), &mut || {
            scenes::particles_par(&mut native, 10, 0.001);
            Ok(())
        }],
        reps,
    )?;
    out.push(row("particles", "native rayon dyn", t, tn, None));
    let [t, th] = pair((rt, &c), (&by_header, &ch), n, reps)?;
    out.push(row(
        "particles by address",
        "by header",
        t,
        th,
        Some(Target::Slowdown(1.0)),
    ));
    Ok(out)
}
