//! Benchmarks of the source language (`offload bench`, CPU device): each
//! compute example's source version (`.ofk`) against its hand-written
//! bytecode (`.obc`), launched by turns on one runtime with the same
//! inputs (the same speed is the target: the front end should emit what a
//! careful person writes). The front end's compile time is in
//! `bench_compile`.

use super::bench::{BenchResult, Target, by_turns};
use super::demo::{blackscholes_closure_from, nbody_closure_from};
use super::kernels::load_example;
use super::reference as native;
use offload::{Closure, OffloadError, Runtime, par_offload};

/// The closure of `kernel` over inputs made by `args`, from the example's
/// source and bytecode forms.
type Pair = (Closure, Closure);

fn pair(
    rt: &Runtime,
    stem: &str,
    make: &dyn Fn(&Runtime, &str) -> Result<Closure, OffloadError>,
) -> Result<Pair, OffloadError> {
    Ok((
        make(rt, &format!("{stem}.ofk"))?,
        make(rt, &format!("{stem}.obc"))?,
    ))
}

/// The rows: source against bytecode for saxpy, mandelbrot, matmul, nbody
/// and blackscholes at sizes divided by `shrink`.
pub fn rows(rt: &Runtime, shrink: usize, reps: usize) -> Result<Vec<BenchResult>, OffloadError> {
    let s = shrink.max(1);
    let mut out = Vec::new();
    let n = (1 << 20) / s;
    let x = rt.array(&(0..n).map(|i| i as f32).collect::<Vec<_>>())?;
    let y = rt.array(&vec![1.0f32; n])?;
    let (w, it) = (256 / s.min(8) as i32, 256);
    let img = rt.new_array::<i32>((w * w) as usize)?;
    let nm = 128 / s.min(4);
    let a = rt.array(&(0..nm * nm).map(|i| (i % 17) as f32).collect::<Vec<_>>())?;
    let b = rt.array(&(0..nm * nm).map(|i| (i % 13) as f32).collect::<Vec<_>>())?;
    let cm = rt.new_array::<f32>(nm * nm)?;
    let bodies = native::Bodies::random(512 / s.min(8), 3);
    let no = 100_000 / s;
    let (sp, st, ty) = native::options(no, 4);
    let cases: Vec<(&str, i64, Pair)> = vec![
        (
            "saxpy",
            n as i64,
            pair(rt, "saxpy", &|rt, f| {
                load_example(rt, f)?.closure("saxpy", [2.0f32.into(), (&x).into(), (&y).into()])
            })?,
        ),
        (
            "mandelbrot",
            i64::from(w * w),
            pair(rt, "mandelbrot", &|rt, f| {
                load_example(rt, f)?
                    .closure("mandelbrot", [w.into(), w.into(), it.into(), (&img).into()])
            })?,
        ),
        (
            "matmul",
            (nm * nm) as i64,
            pair(rt, "matmul", &|rt, f| {
                load_example(rt, f)?.closure(
                    "matmul",
                    [(nm as i32).into(), (&a).into(), (&b).into(), (&cm).into()],
                )
            })?,
        ),
        (
            "nbody",
            bodies.px.len() as i64,
            pair(rt, "nbody", &|rt, f| {
                nbody_closure_from(rt, f, &bodies).map(|(c, _)| c)
            })?,
        ),
        (
            "blackscholes",
            no as i64,
            pair(rt, "blackscholes", &|rt, f| {
                blackscholes_closure_from(rt, f, &sp, &st, &ty).map(|(c, _, _)| c)
            })?,
        ),
    ];
    for (name, range, (src, obc)) in &cases {
        let mut run_src = || par_offload(0..*range, src).map(|_| ());
        let mut run_obc = || par_offload(0..*range, obc).map(|_| ());
        run_src()?;
        run_obc()?;
        rt.finish_compiles();
        let [ts, tb] = by_turns([&mut run_src, &mut run_obc], reps)?;
        out.push(BenchResult {
            bench: format!("{name} from source"),
            device: rt.device(),
            baseline: Some(("from bytecode".into(), tb)),
            offload: ts,
            target: Some(Target::Slowdown(1.1)),
            note: format!("examples/kernels/{name}.ofk against {name}.obc, by turns"),
        });
    }
    Ok(out)
}
