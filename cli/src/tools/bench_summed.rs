//! The histogram row of `offload bench --device cuda --counters` that
//! measures arrays a launch sums into (`Closure::summed`): the histogram
//! of `examples/kernels/histogram.obc` (random words into 256 bins, 2^22 ÷
//! shrink of them) launched with its bins summed into — a copy per block
//! of the grid — against the same kernel adding to the bins themselves,
//! both checked against Rust's counts, one warm launch of each counted.
//!
//! Its target: the longest chain of atomics on one address (`atomic_chain`)
//! at most half the other launch's (each block's copy takes its own
//! threads' adds only).

use crate::tools::bench_counters::{
    CounterRow, Goal, counted, put_resources, ratios, resources, simulated,
};
use offload::{OffloadError, Runtime, par_offload};
use std::collections::BTreeMap;

/// Bins of the histogram.
const BINS: usize = 256;

/// The row (none when the GPU has no counters: a real one).
pub fn counter_rows(rt: &Runtime, shrink: usize) -> Result<Vec<CounterRow>, OffloadError> {
    let n = (1 << 22) / shrink.max(1);
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let data: Vec<i32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as i32
        })
        .collect();
    let mut want = vec![0i32; BINS];
    for &d in &data {
        want[((d & 0x7fff_ffff) % BINS as i32) as usize] += 1;
    }
    let m = rt.load(
        "histogram.obc",
        include_str!("../../../examples/kernels/histogram.obc"),
    )?;
    let d = rt.array(&data)?;
    let bins = rt.new_array::<i32>(BINS)?;
    let atomics = m.closure("histogram", [(&d).into(), (&bins).into()])?;
    let summed = atomics.clone().summed("bins")?;
    let mut sides = Vec::new();
    for c in [&summed, &atomics] {
        let launch = || {
            rt.write(&bins, 0, &[0; BINS])?;
            par_offload(0..n as i64, c).map(|_| ())
        };
        launch()?;
        if rt.read(&bins)? != want {
            return Err(OffloadError::Setup(
                "histogram (summed): the bins differ from Rust's counts".into(),
            ));
        }
        rt.finish_compiles();
        launch()?;
        rt.write(&bins, 0, &[0; BINS])?;
        let Some(counts) = counted(|| par_offload(0..n as i64, c).map(|_| ()))? else {
            return Ok(Vec::new());
        };
        let mut side = BTreeMap::new();
        simulated(&counts, n as i64, None, &mut side);
        let ptx = c.module().ptx(c.kernel_name()).unwrap_or_default();
        put_resources(resources(&ptx).values().next(), &mut side);
        sides.push(side);
    }
    let (offload, baseline) = (sides.remove(0), sides.remove(0));
    let ratios = ratios(&offload, &baseline);
    Ok(vec![CounterRow {
        bench: "histogram (summed)".into(),
        offload,
        baseline,
        ratios,
        targets: vec![("atomic_chain", Goal::Ratio(0.5))],
        note: String::new(),
        versus: Some("atomics on the bins".into()),
    }])
}
