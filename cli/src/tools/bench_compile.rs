//! Compile latency (`offload bench`, CPU device): fresh compiles of the
//! compute examples by the JIT in both tiers (the quick tier is what a
//! kernel's first launch waits for; the optimized one runs in the
//! background), and the source front end's compile time per kernel (parse,
//! lower, verify) against the JIT's quick tier compiling the same kernel.

use super::bench::{BenchResult, Target, middle};
use super::kernels::{example, load_example};
use offload::{Device, OffloadError, Runtime};
use std::time::{Duration, Instant};

/// The median time of `reps` fresh compiles of kernel `k` of `m` by the
/// CPU device's JIT, in its quick tier or its optimized one.
fn compile_time(
    m: &offload::Module,
    k: offload::ir::FuncId,
    quick: bool,
    reps: usize,
) -> Result<Duration, OffloadError> {
    let jit = offload_jit::CpuJit::new();
    let opts = offload_jit::CompileOptions {
        quick,
        ..Default::default()
    };
    let times = (0..reps.max(1))
        .map(|_| {
            jit.compile_with(m.program(), k, 0, opts)
                .map(|ck| ck.compile_time)
                .map_err(|e| OffloadError::Setup(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(middle(times))
}

/// The kernel `name` of the example `file` loaded on `rt`.
fn example_kernel(
    rt: &Runtime,
    file: &str,
    name: &str,
) -> Result<(offload::Module, offload::ir::FuncId), OffloadError> {
    let m = load_example(rt, file)?;
    let k = m
        .program()
        .verified()
        .func_named(name)
        .expect("example kernel");
    Ok((m, k))
}

/// The rows: each tier of the JIT on saxpy, mandelbrot, nbody and matmul,
/// then the front end on those and blackscholes.
pub fn rows(rt: &Runtime, reps: usize) -> Result<Vec<BenchResult>, OffloadError> {
    let mut out = Vec::new();
    for kernel in ["saxpy", "mandelbrot", "nbody", "matmul"] {
        let (m, k) = example_kernel(rt, &format!("{kernel}.obc"), kernel)?;
        for (tier, quick) in [("quick", true), ("optimized", false)] {
            out.push(BenchResult {
                bench: format!("compile {kernel} ({tier})"),
                device: rt.device(),
                baseline: None,
                offload: compile_time(&m, k, quick, reps)?,
                target: Some(Target::Nanos(1_000_000)),
                note: if quick {
                    "what the first launch waits for".into()
                } else {
                    "in the background".into()
                },
            });
        }
    }
    for name in ["saxpy", "mandelbrot", "nbody", "matmul", "blackscholes"] {
        let file = format!("{name}.ofk");
        let text = example(&file);
        let front = (0..reps.max(3))
            .map(|_| {
                let t0 = Instant::now();
                offload::lang::compile_verified(&file, text)
                    .map(|_| t0.elapsed())
                    .map_err(|d| OffloadError::Setup(d.to_string()))
            })
            .collect::<Result<Vec<Duration>, _>>()?;
        let (m, k) = example_kernel(rt, &file, name)?;
        out.push(BenchResult {
            bench: format!("front end {name}.ofk"),
            device: Device::Cpu,
            baseline: Some((
                "JIT quick tier".into(),
                compile_time(&m, k, true, reps.max(3))?,
            )),
            offload: middle(front),
            target: Some(Target::Slowdown(0.5)),
            note: "parse, lower and verify, against compiling the same kernel".into(),
        });
    }
    Ok(out)
}
