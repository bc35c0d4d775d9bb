//! Reductions on the CPU device (both tiers) and the interpreter: values
//! bit for bit the combine tree's, the same for every worker count and
//! device, and the refusals (`tests/common/reduce.rs`).

use offload::{Combine, Device, Runtime};

#[path = "common/reduce.rs"]
mod reduce;

#[test]
fn reductions_match_the_combine_tree_on_every_cpu_device() {
    let mut bits = Vec::new();
    for (device, tiered, workers) in [
        (Device::Cpu, true, 2),
        (Device::Cpu, false, 3),
        (Device::Interpreter, true, 1),
        (Device::Interpreter, true, 4),
    ] {
        let rt = Runtime::builder()
            .device(device)
            .workers(workers)
            .tiered(tiered)
            .build()
            .unwrap();
        let what = format!("{}, tiered {tiered}, {workers} workers", device.name());
        bits.push(reduce::check(&rt, 10_007, &what));
    }
    assert!(bits.windows(2).all(|w| w[0] == w[1]), "{bits:?}");
}

#[test]
fn a_float_sum_is_the_same_on_every_run() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let m = rt.load_source("reduce.ofk", reduce::SRC).unwrap();
    let n = 50_000;
    let x = rt.array(&reduce::awkward(n, 3)).unwrap();
    let y = rt.array(&reduce::awkward(n, 4)).unwrap();
    let dot = m.closure("dot", [(&x).into(), (&y).into()]).unwrap();
    let first = rt
        .par_reduce::<f32>(0..n as i64, &dot, Combine::Sum)
        .unwrap()
        .value;
    for _ in 0..20 {
        let again = rt
            .par_reduce::<f32>(0..n as i64, &dot, Combine::Sum)
            .unwrap()
            .value;
        assert_eq!(again.to_bits(), first.to_bits());
    }
}
