//! Reductions on the CPU device (both tiers) and the interpreter: values
//! bit for bit the combine tree's, the same for every worker count and
//! device, and the refusals (`tests/common/reduce.rs`).

use offload::{Combine, Device, Runtime};
use offload_jit::Injection;

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

#[test]
fn deopted_workitems_are_counted_once_in_the_trees_place() {
    let probe = Runtime::builder()
        .device(Device::Interpreter)
        .build()
        .unwrap();
    let m = probe.load_source("reduce.ofk", reduce::SRC).unwrap();
    let k = m.program().verified().func_named("squares").unwrap();
    let sites = m.program().analysis(k).unwrap().sites.clone();
    for (tiered, records, site) in [
        (false, 1, sites[0].bci),
        (true, 4, sites[0].bci),
        (false, 3, sites[sites.len() - 1].bci),
    ] {
        let rt = Runtime::builder()
            .device(Device::Cpu)
            .workers(2)
            .tiered(tiered)
            .deopt_records(records)
            .inject(Injection {
                site_bci: site,
                modulus: 7,
                remainder: 3,
                reason: None,
            })
            .build()
            .unwrap();
        let what = format!("site {site}, tiered {tiered}, {records} records");
        let r = reduce::squares_checked(&rt, 20_011, &what);
        assert!(r.replayed + r.resumed >= 20_011 / 7, "{what}: {r}");
    }
}

#[test]
fn workitems_resumed_after_injected_safepoints_are_counted_once() {
    for (tiered, seed) in [(false, None), (true, Some(17)), (false, Some(3))] {
        let rt = Runtime::builder()
            .device(Device::Cpu)
            .workers(2)
            .tiered(tiered)
            .inject_safepoints(5, seed)
            .build()
            .unwrap();
        let what = format!("tiered {tiered}, seed {seed:?}");
        let r = reduce::squares_checked(&rt, 30_001, &what);
        assert!(r.replayed + r.resumed > 0, "{what}: {r}");
    }
}

#[test]
fn a_reduction_is_exact_across_collections_during_its_launch() {
    for device in [Device::Cpu, Device::Interpreter] {
        // 128 bytes of garbage per workitem, none reclaimed at its end,
        // in an 8 MiB heap: it fills many times over.
        let rt = Runtime::builder()
            .device(device)
            .workers(2)
            .reclaim(false)
            .max_heap(8 << 20)
            .build()
            .unwrap();
        let m = rt.load_source("reduce.ofk", reduce::SRC).unwrap();
        let n: i64 = 200_000;
        let c = m.closure("churn", [3i64.into()]).unwrap();
        let got = rt.par_reduce::<i64>(0..n, &c, Combine::Sum).unwrap();
        assert!(got.report.gc.collections >= 2, "{device:?}: {}", got.report);
        // a[i % 12] = 3i; the next element is 0, unless 12 divides 1 (never).
        assert_eq!(got.value, (0..n).map(|i| 3 * i).sum::<i64>(), "{device:?}");
        let max = rt.par_reduce::<i64>(0..n, &c, Combine::Max).unwrap().value;
        assert_eq!(max, 3 * (n - 1), "{device:?}");
    }
}

#[test]
fn a_kernel_closure_that_returns_a_value_reduces() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let x = rt.array(&[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let y = rt.array(&[0.5f32, 0.25, 2.0, 1.0]).unwrap();
    let dot = offload::kernel!(move |i: i64| -> f32 { x[i] * y[i] }).unwrap();
    let r = rt.par_reduce::<f32>(0..4, &dot, Combine::Sum).unwrap();
    assert_eq!(r.value, (0.5 + 0.5) + (6.0 + 4.0));
    assert_eq!(dot.returns(), Some(offload::Scalar::F32));
    // 2-D, with an i64 result.
    let w = 7i64;
    let cells =
        offload::kernel!(move |i: i64, j: i64| -> i64 { i * w + j + x.len() as i64 * 0 }).unwrap();
    let r = rt
        .par_reduce::<i64>((0..5, 0..7), &cells, Combine::Max)
        .unwrap();
    assert_eq!(r.value, 34);
}

#[test]
fn reductions_in_flight_are_ordered_by_what_they_capture() {
    for (device, inject) in [
        (Device::Cpu, false),
        (Device::Cpu, true),
        (Device::Interpreter, false),
    ] {
        let mut b = Runtime::builder().device(device).workers(2);
        if inject {
            b = b.inject_safepoints(7, Some(5));
        }
        let rt = b.build().unwrap();
        reduce::check_in_flight(
            &rt,
            30_000,
            &format!("{}, injected {inject}", device.name()),
        );
    }
}
