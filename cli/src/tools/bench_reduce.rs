//! The reduction row of `offload bench --device cuda --counters`: the dot
//! product of two `f32` vectors of 2^24 ÷ shrink elements
//! (`examples/kernels/dot.ofk`, `par_reduce` with `Combine::Sum`), checked
//! bit for bit against the combine tree, one warm launch counted.
//!
//! Its target is issue 51's: the longest chain of atomics on one address
//! at most the launch's blocks (offload's warps combine their tiles with
//! shuffles and store them: none at all). It has no CUDA C side yet — the
//! CUB-style block reduction it is to be measured against belongs in
//! `benches/cuda/baselines.cu`, whose PTX only NVRTC makes
//! (`scripts/cuda-baselines`, on a machine with CUDA) — so the row's
//! baseline is empty and its note says why.

use crate::tools::bench_counters::{
    CounterRow, Goal, counted, put_resources, resources, simulated,
};
use crate::tools::reference as native;
use offload::{Combine, OffloadError, Runtime};
use std::collections::BTreeMap;

/// Threads in a block of the CUDA device's grid.
const BLOCK_THREADS: f64 = 256.0;

/// The dot product's row (none when the GPU has no counters: a real one).
pub fn counter_rows(rt: &Runtime, shrink: usize) -> Result<Vec<CounterRow>, OffloadError> {
    let n = (1 << 24) / shrink.max(1);
    let x: Vec<f32> = (0..n).map(|i| ((i * 7) % 1000) as f32 * 1e-3).collect();
    let y: Vec<f32> = (0..n).map(|i| ((i * 13) % 777) as f32 * 1e-3).collect();
    let m = rt.load_source("dot.ofk", include_str!("../../../examples/kernels/dot.ofk"))?;
    let (xa, ya) = (rt.array(&x)?, rt.array(&y)?);
    let dot = m.closure("dot", [(&xa).into(), (&ya).into()])?;
    let launch = || rt.par_reduce::<f32>(0..n as i64, &dot, Combine::Sum);
    let first = launch()?;
    if first.value.to_bits() != native::dot_tree(&x, &y).to_bits() {
        return Err(OffloadError::Setup(format!(
            "dot (reduce): {} is not the combine tree's {}",
            first.value,
            native::dot_tree(&x, &y)
        )));
    }
    rt.finish_compiles();
    launch()?;
    let Some(counts) = counted(|| launch().map(|_| ()))? else {
        return Ok(Vec::new());
    };
    let mut offload = BTreeMap::new();
    simulated(&counts, n as i64, None, &mut offload);
    let ptx = dot.module().ptx(dot.kernel_name()).unwrap_or_default();
    put_resources(resources(&ptx).values().next(), &mut offload);
    let threads = offload.get("warps").copied().unwrap_or(0.0) * 32.0;
    let blocks = (threads / BLOCK_THREADS).ceil();
    let mut note = String::from(
        "no CUDA C side yet: a CUB-style block reduction needs NVRTC (scripts/cuda-baselines) on a machine with CUDA",
    );
    if let Some(f) = first.report.fallback {
        note = f;
    }
    Ok(vec![CounterRow {
        bench: "dot (reduce)".into(),
        offload,
        baseline: BTreeMap::new(),
        ratios: BTreeMap::new(),
        targets: vec![("atomic_chain", Goal::AtMost(blocks))],
        note,
        versus: None,
    }])
}
