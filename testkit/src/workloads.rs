//! Launches the benchmarks and tests share: a kernel on a fresh runtime
//! set up the way a measurement needs it.

use crate::kernels::example;
use offload::{Device, OffloadError, Runtime};

/// The deopt-rate bench's launch: `inc` over `0..n` on a fresh CPU runtime
/// of `workers`, compiled so that workitems `w` with `w % modulus ==
/// remainder` deopt at its store (`remainder == modulus` never holds: the
/// baseline, with the same test). Returns the runtime and the closure to
/// launch over `0..n`.
pub fn deopt_rate_launch(
    workers: usize,
    n: usize,
    modulus: i64,
    remainder: i64,
) -> Result<(Runtime, offload::Closure), OffloadError> {
    let rt = Runtime::builder()
        .workers(workers)
        .device(Device::Cpu)
        .inject(offload_jit::Injection {
            site_bci: 10,
            modulus,
            remainder,
            reason: None,
        })
        .build()?;
    let m = rt.load("inc.obc", crate::kernels::INC_KERNEL)?;
    let o = rt.new_array::<i32>(n)?;
    let c = m.closure("inc", [(&o).into()])?;
    Ok((rt, c))
}

/// The poll-overhead bench's launch: mandelbrot on a `w` x `h` image at
/// `iters` iterations, on a fresh CPU runtime of `workers` with back-edge
/// polls `on` or off. Returns the runtime and the closure to launch over
/// `0..w * h`.
pub fn polls_launch(
    workers: usize,
    on: bool,
    w: i32,
    h: i32,
    iters: i32,
) -> Result<(Runtime, offload::Closure), OffloadError> {
    let rt = Runtime::builder()
        .workers(workers)
        .device(Device::Cpu)
        .back_edge_polls(on)
        .build()?;
    let m = rt.load("mandelbrot.obc", example("mandelbrot.obc"))?;
    let img = rt.new_array::<i32>((w * h) as usize)?;
    let c = m.closure(
        "mandelbrot",
        [w.into(), h.into(), iters.into(), (&img).into()],
    )?;
    Ok((rt, c))
}
