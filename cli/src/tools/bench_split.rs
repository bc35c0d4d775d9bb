//! One launch split over the CPU and every GPU (`offload bench --device
//! cuda`): mandelbrot over the CPU device and the runtime's GPUs at once
//! (`RuntimeBuilder::split_over`) against the faster of the CPU device
//! alone and the GPUs' device alone, by turns (issue 52: at least 1.0x
//! the faster on one GPU). Each side is a runtime of its own, warmed until
//! the split's parts are sized by measured speeds.

use super::bench::{BenchResult, Target, by_turns};
use crate::tools::kernels::example;
use offload::{Device, OffloadError, Runtime};

/// Warm-up launches of the split runtime before timing: its first
/// launches measure the devices' speeds.
const WARM: usize = 6;

/// The row: mandelbrot over a square of side `1024 / shrink` (at least
/// 16), medians of `reps` by turns.
pub fn row(shrink: usize, reps: usize) -> Result<BenchResult, OffloadError> {
    let side = (1024 / shrink.max(1) as i32).max(16);
    let (w, h, it) = (side, side, 256);
    let n = i64::from(w * h);
    let cpu = Runtime::builder().device(Device::Cpu).build()?;
    let gpu = Runtime::builder()
        .device(Device::Cuda)
        .strict(true)
        .build()?;
    let split = Runtime::builder()
        .device(Device::Cuda)
        .strict(true)
        .split_over([Device::Cpu, Device::Cuda])
        .build()?;
    let mut setups = Vec::new();
    for rt in [&cpu, &gpu, &split] {
        let m = rt.load("mandelbrot.obc", example("mandelbrot.obc"))?;
        let img = rt.new_array::<i32>((w * h) as usize)?;
        let c = m.closure("mandelbrot", [w.into(), h.into(), it.into(), (&img).into()])?;
        setups.push((rt, c, img));
    }
    for (rt, c, _) in &setups {
        for _ in 0..WARM {
            rt.par_offload(0..n, c)?;
        }
        rt.finish_compiles();
    }
    let mut last = None;
    let [tc, tg, ts] = {
        let (a, b, c) = (&setups[0], &setups[1], &setups[2]);
        by_turns(
            [
                &mut || a.0.par_offload(0..n, &a.1).map(|_| ()),
                &mut || b.0.par_offload(0..n, &b.1).map(|_| ()),
                &mut || {
                    last = Some(c.0.par_offload(0..n, &c.1)?);
                    Ok(())
                },
            ],
            reps,
        )?
    };
    // The three images agree.
    let want = cpu.read(&setups[0].2)?;
    let mut note = String::new();
    if gpu.read(&setups[1].2)? != want || split.read(&setups[2].2)? != want {
        note = "WRONG RESULT; ".into();
    }
    let (faster, t) = if tc <= tg { ("cpu", tc) } else { ("cuda", tg) };
    let rep = last.expect("timed at least once");
    let shares: Vec<String> = rep
        .split
        .iter()
        .map(|s| format!("{} {:.0}%", s.device, 100.0 * s.workitems as f64 / n as f64))
        .collect();
    note += &format!(
        "{w}x{h}, {it} iterations; cpu alone {}, cuda alone {}; last split: {}",
        offload::diagnostics::duration_text(tc),
        offload::diagnostics::duration_text(tg),
        if shares.is_empty() {
            "not split".to_string()
        } else {
            shares.join(", ")
        }
    );
    Ok(BenchResult {
        bench: format!(
            "mandelbrot split over cpu + {} GPU(s)",
            split.gpu_ordinals().len()
        ),
        device: Device::Cuda,
        baseline: Some((format!("the faster alone ({faster})"), t)),
        offload: ts,
        target: Some(Target::Slowdown(1.0)),
        note,
    })
}
