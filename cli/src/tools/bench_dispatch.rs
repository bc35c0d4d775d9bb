//! Benchmarks of virtual calls (`offload bench`, CPU device): the two
//! virtual-dispatch workloads (`raycast`, `particles`: six classes behind
//! one virtual method, objects the host made, on pages of their class)
//! against native Rust's trait objects, and dispatch by address (the
//! receiver's class from its page's tag, `offload_heap::pages`) against
//! dispatch by header (`RuntimeBuilder::dispatch_by_address(false)`) on
//! runtimes of the same workers, timed by turns — the target is no slower.
//! On the virtual GPU, [`counter_rows`] counts what each dispatch loads.

use super::bench::{BenchResult, Target, by_turns};
use super::bench_counters::{CounterRow, Goal, ratios};
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
    // Both ways forced: the bench's own runtime dispatches as its device
    // does by default (`offload_jit::Dispatch::Auto`).
    let (by_address, by_header) = (like(rt, true)?, like(rt, false)?);

    // The ray caster: 2,000 shapes, every pixel testing every one.
    let specs = scenes::scene(2000 / s.min(8), 21);
    let (w, h) = (64 / s.min(8) as i32, 48 / s.min(8) as i32);
    let n = i64::from(w * h);
    let c = raycast(rt, w, h, &specs)?;
    let ca = raycast(&by_address, w, h, &specs)?;
    let ch = raycast(&by_header, w, h, &specs)?;
    let native = scenes::native_scene(&specs);
    let (mut depth, mut hit) = (vec![0.0; n as usize], vec![0; n as usize]);
    let [t, tn] = super::bench::apart(
        [&mut || par_offload(0..n, &c).map(|_| ()), &mut || {
            scenes::raycast_par(w, h, &native, &mut depth, &mut hit);
            Ok(())
        }],
        reps,
    )?;
    out.push(row("raycast", "native rayon dyn", t, tn, None));
    let [t, th] = pair((&by_address, &ca), (&by_header, &ch), n, reps)?;
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
    let ca = particles(&by_address, 10, &specs)?;
    let ch = particles(&by_header, 10, &specs)?;
    let mut native = scenes::native_population(&specs);
    let [t, tn] = super::bench::apart(
        [&mut || par_offload(0..n, &c).map(|_| ()), &mut || {
            scenes::particles_par(&mut native, 10, 0.001);
            Ok(())
        }],
        reps,
    )?;
    out.push(row("particles", "native rayon dyn", t, tn, None));
    let [t, th] = pair((&by_address, &ca), (&by_header, &ch), n, reps)?;
    out.push(row(
        "particles by address",
        "by header",
        t,
        th,
        Some(Target::Slowdown(1.0)),
    ));
    Ok(out)
}

/// The counters of one warm launch of `c` (`n` workitems) on the virtual
/// GPU, for dispatch: `dispatches` (warp-wide loads that find a
/// receiver's class: of its page's tag by address, of its header by
/// header), `header_loads` (warp-wide loads of a receiver's header),
/// `dispatch_sectors` (the sectors both touched), each also per dispatch,
/// and the launch's `sectors` and `instructions`. `None` on a real GPU.
fn dispatch_counters(
    c: &Closure,
    n: i64,
    by_address: bool,
) -> Result<Option<std::collections::BTreeMap<String, f64>>, OffloadError> {
    use crate::tools::vgpu_counters;
    par_offload(0..n, c)?;
    if !vgpu_counters::reset() {
        return Ok(None);
    }
    par_offload(0..n, c)?;
    let Some(m) = vgpu_counters::counters() else {
        return Ok(None);
    };
    let get = |k: &str| m.get(k).copied().unwrap_or(0) as f64;
    let page = get("count.dispatch.page.instructions");
    let header = get("count.dispatch.header.instructions");
    let sectors = get("count.dispatch.page.sectors") + get("count.dispatch.header.sectors");
    let dispatches = if by_address { page } else { header };
    let per = |v: f64| v / dispatches.max(1.0);
    Ok(Some(
        [
            ("dispatches", dispatches),
            ("header_loads", header),
            ("header_loads_per_dispatch", per(header)),
            ("dispatch_sectors", sectors),
            ("dispatch_sectors_per_dispatch", per(sectors)),
            ("sectors", get("sectors")),
            ("instructions", get("instructions")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
    ))
}

/// `offload bench --device cuda --counters`: the two dispatch workloads,
/// one warm launch each with dispatch by address (`offload`) and by
/// header (`baseline`) on the virtual GPU, at sizes divided by `shrink`
/// (at most 8). The targets: no header load per dispatch, and at most half
/// the sectors per dispatch. Empty on a real GPU (no counters).
pub fn counter_rows(rt: &Runtime, shrink: usize) -> Result<Vec<CounterRow>, OffloadError> {
    let s = shrink.clamp(1, 8);
    // Both ways forced: the bench's own runtime dispatches as its device
    // does by default (`offload_jit::Dispatch::Auto`).
    let (by_address, by_header) = (like(rt, true)?, like(rt, false)?);
    let specs = scenes::scene(2048 / s, 21);
    let (w, h) = (256 / s as i32, 256 / s as i32);
    let pop = scenes::population(65_536 / s, 23);
    let cases: [(&str, i64, Closure, Closure); 2] = [
        (
            "raycast dispatch",
            i64::from(w * h),
            raycast(&by_address, w, h, &specs)?,
            raycast(&by_header, w, h, &specs)?,
        ),
        (
            "particles dispatch",
            pop.len() as i64,
            particles(&by_address, 4, &pop)?,
            particles(&by_header, 4, &pop)?,
        ),
    ];
    let mut rows = Vec::new();
    for (bench, n, on, off) in cases {
        let (Some(offload), Some(baseline)) = (
            dispatch_counters(&on, n, true)?,
            dispatch_counters(&off, n, false)?,
        ) else {
            return Ok(Vec::new());
        };
        let ratios = ratios(&offload, &baseline);
        rows.push(CounterRow {
            bench: bench.into(),
            offload,
            baseline,
            ratios,
            targets: vec![
                ("header_loads_per_dispatch", Goal::AtMost(0.0)),
                ("dispatch_sectors_per_dispatch", Goal::Ratio(0.5)),
            ],
            note: String::new(),
            versus: Some("by header".into()),
        });
    }
    Ok(rows)
}
