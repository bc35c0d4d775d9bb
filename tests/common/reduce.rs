//! Reductions checked against Rust on one runtime (any device): the value
//! bit for bit the combine tree's (`offload_abi::reduce`, written out here
//! again from its definition), integers exact, and the refusals.

#![allow(dead_code)]

use offload::{Combine, OffloadError, Runtime};

/// The `squares` kernel's values over `x`, as Rust computes them.
pub fn squares(x: &[f64]) -> Vec<f64> {
    x.iter()
        .map(|&v| {
            let mut s = 0.0;
            for k in 0..4 {
                s += v * v / (k as f64 + 1.0);
            }
            s
        })
        .collect()
}

pub const SRC: &str = r#"
#[kernel]
fn dot(i: i64, x: &[f32], y: &[f32]) -> f32 {
    x[i] * y[i]
}

#[kernel]
fn squares(i: i64, x: &[f64]) -> f64 {
    let mut s = 0.0;
    let mut k = 0;
    while k < 4 {
        s += x[i] * x[i] / (k as f64 + 1.0);
        k += 1;
    }
    s
}

#[kernel]
fn count(i: i32, m: i32) -> i32 {
    if i % m == 0 { 1 } else { 0 }
}

#[kernel]
fn wide(i: i64, k: i64) -> i64 {
    i * k
}

#[kernel]
fn cells((i, j): (i64, i64), w: i64) -> i64 {
    i * w + j
}

#[kernel]
fn get(i: i64, x: &[f32]) -> f32 {
    x[i]
}

#[kernel]
fn fill(i: i64, out: &mut [f32]) {
    out[i] = 1.0;
}

#[kernel]
fn checked(i: i64, x: &[f32]) -> f32 {
    x[i + 1]
}

#[kernel]
fn churn(i: i64, k: i64) -> i64 {
    let mut a = vec![0i64; 12];
    a[i % 12] = i * k;
    a[i % 12] + a[(i + 1) % 12]
}
"#;

/// The tree's root from its definition (`offload_testkit`'s, written out
/// apart from the runtime's).
pub use offload_testkit::reference::combine_tree as tree;

/// Values whose sum depends on the order: large and small of both signs.
pub fn awkward(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = (i as u32 ^ seed).wrapping_mul(2_654_435_761);
            let mag = [1e7f32, 1.0, 3e-3, 250.0][(h >> 7) as usize % 4];
            let sign = if h & 1 == 0 { 1.0 } else { -1.0 };
            sign * mag * (1.0 + (h >> 12) as f32 / 1e6)
        })
        .collect()
}

/// Every check on `rt`; `what` names the runtime in failures. Returns the
/// dot product's bits (for comparisons between runtimes).
pub fn check(rt: &Runtime, n: usize, what: &str) -> u32 {
    let device = rt.device();
    let m = rt.load_source("reduce.ofk", SRC).unwrap();
    let x = awkward(n, 7);
    let y = awkward(n, 99);
    let (xa, ya) = (rt.array(&x).unwrap(), rt.array(&y).unwrap());
    let dot = m.closure("dot", [(&xa).into(), (&ya).into()]).unwrap();
    let prods: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a * b).collect();
    let got = rt
        .par_reduce::<f32>(0..n as i64, &dot, Combine::Sum)
        .unwrap();
    let want = tree(&prods, &|a, b| a + b).unwrap_or(0.0);
    assert_eq!(
        got.value.to_bits(),
        want.to_bits(),
        "{what}: dot {} vs {want}",
        got.value
    );
    // The order matters for these values: a loop gives other bits.
    let seq: f32 = prods.iter().sum();
    assert_ne!(seq.to_bits(), want.to_bits(), "{what}: the test's values");
    let r = got.report.reduction.expect("a reducing launch reports it");
    assert_eq!((r.combine, r.ty), (Combine::Sum, offload::Scalar::F32));
    assert!(r.joined >= 1, "{what}");
    assert_eq!(got.report.completed, n as u64, "{what}");
    // It ran where the runtime runs kernels (no fallback).
    assert_eq!(got.report.device, device, "{what}: {}", got.report);
    assert_eq!(got.report.fallback, None, "{what}");
    // Min and max.
    let min = rt
        .par_reduce::<f32>(0..n as i64, &dot, Combine::Min)
        .unwrap()
        .value;
    let max = rt
        .par_reduce::<f32>(0..n as i64, &dot, Combine::Max)
        .unwrap()
        .value;
    assert_eq!(
        min,
        prods.iter().copied().fold(f32::INFINITY, f32::min),
        "{what}"
    );
    assert_eq!(
        max,
        prods.iter().copied().fold(f32::NEG_INFINITY, f32::max),
        "{what}"
    );
    // A sub-range over the same values: positions from its own start.
    let sub = rt
        .par_reduce::<f32>(3..n as i64, &dot, Combine::Sum)
        .unwrap()
        .value;
    let want_sub = tree(&prods[3..], &|a, b| a + b).unwrap();
    assert_eq!(sub.to_bits(), want_sub.to_bits(), "{what}: 3..n");

    // f64 with a loop in the kernel.
    let xd: Vec<f64> = x.iter().map(|&v| f64::from(v) * 1e-3).collect();
    let xda = rt.array(&xd).unwrap();
    let sq = m.closure("squares", [(&xda).into()]).unwrap();
    let got = rt
        .par_reduce::<f64>(0..n as i64, &sq, Combine::Sum)
        .unwrap()
        .value;
    let per = squares(&xd);
    let want = tree(&per, &|a, b| a + b).unwrap();
    assert_eq!(got.to_bits(), want.to_bits(), "{what}: squares");

    // Integers: exact (an i32 index, a count; i64 products that wrap).
    let count = m.closure("count", [3i32.into()]).unwrap();
    let got = rt
        .par_reduce::<i32>(0..n as i64, &count, Combine::Sum)
        .unwrap()
        .value;
    assert_eq!(got as usize, n.div_ceil(3), "{what}: count");
    let wide = m.closure("wide", [(i64::MAX / 7).into()]).unwrap();
    let got = rt
        .par_reduce::<i64>(0..n as i64, &wide, Combine::Sum)
        .unwrap()
        .value;
    let want = (0..n as i64).fold(0i64, |a, i| a.wrapping_add(i.wrapping_mul(i64::MAX / 7)));
    assert_eq!(got, want, "{what}: wrapping sum");
    let got = rt
        .par_reduce::<i64>(0..n as i64, &wide, Combine::Max)
        .unwrap()
        .value;
    let want = (0..n as i64)
        .map(|i| i.wrapping_mul(i64::MAX / 7))
        .max()
        .unwrap();
    assert_eq!(got, want, "{what}: max");

    // A 2-D range.
    let (h, w) = (13i64, 29i64);
    let cells = m.closure("cells", [w.into()]).unwrap();
    let got = rt
        .par_reduce::<i64>((0..h, 0..w), &cells, Combine::Sum)
        .unwrap()
        .value;
    assert_eq!(got, (0..h * w).sum::<i64>(), "{what}: 2-D");

    // An empty range: the identity.
    let e = rt.par_reduce::<f32>(5..5, &dot, Combine::Sum).unwrap();
    assert_eq!(e.value.to_bits(), 0f32.to_bits(), "{what}");
    assert_eq!(
        rt.par_reduce::<i32>(0..0, &count, Combine::Min)
            .unwrap()
            .value,
        i32::MAX
    );
    assert_eq!(
        rt.par_reduce::<f32>(0..0, &dot, Combine::Max)
            .unwrap()
            .value,
        f32::NEG_INFINITY
    );

    // A workitem that throws: an error, no value.
    let checked = m.closure("checked", [(&xa).into()]).unwrap();
    match rt.par_reduce::<f32>(0..n as i64, &checked, Combine::Sum) {
        Err(OffloadError::Exceptions(e)) => assert_eq!(e.report.reduction, None, "{what}"),
        other => panic!("{what}: {:?}", other.map(|r| r.value)),
    }
    refusals(rt, &m, what);
    got_bits(rt, &dot, n)
}

fn got_bits(rt: &Runtime, dot: &offload::Closure, n: usize) -> u32 {
    rt.par_reduce::<f32>(0..n as i64, dot, Combine::Sum)
        .unwrap()
        .value
        .to_bits()
}

/// A reducing kernel launched without a combine, a combine for a kernel
/// that returns nothing, another type: errors naming the kernel.
fn refusals(rt: &Runtime, m: &offload::Module, what: &str) {
    let out = rt.new_array::<f32>(4).unwrap();
    let fill = m.closure("fill", [(&out).into()]).unwrap();
    let e = rt
        .par_reduce::<f32>(0..4, &fill, Combine::Sum)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`fill`") && e.contains("returns nothing"),
        "{what}: {e}"
    );
    let count = m.closure("count", [3i32.into()]).unwrap();
    let e = rt.par_offload(0..4, &count).unwrap_err().to_string();
    assert!(
        e.contains("`count`") && e.contains("par_reduce"),
        "{what}: {e}"
    );
    let e = rt
        .par_reduce::<f64>(0..4, &count, Combine::Sum)
        .unwrap_err()
        .to_string();
    assert!(e.contains("returns `i32`, not the `f64`"), "{what}: {e}");
    // Nothing ran.
    assert_eq!(rt.read(&out).unwrap(), vec![0.0; 4], "{what}");
}

/// `squares` over `n` values with the runtime `rt`: the sum's bits must be
/// the tree's whatever deopted; returns the report.
pub fn squares_checked(rt: &Runtime, n: usize, what: &str) -> offload::LaunchReport {
    let m = rt.load_source("reduce.ofk", SRC).unwrap();
    let x: Vec<f64> = awkward(n, 5).iter().map(|&v| f64::from(v) * 1e-3).collect();
    let xa = rt.array(&x).unwrap();
    let sq = m.closure("squares", [(&xa).into()]).unwrap();
    let got = rt
        .par_reduce::<f64>(0..n as i64, &sq, Combine::Sum)
        .unwrap();
    let want = tree(&squares(&x), &|a, b| a + b).unwrap();
    assert_eq!(
        got.value.to_bits(),
        want.to_bits(),
        "{what}: {}",
        got.report
    );
    assert_eq!(got.report.completed, n as u64, "{what}");
    got.report
}

/// Reductions in flight with a launch they depend on: each value as the
/// launches run one after another would give it.
pub fn check_in_flight(rt: &Runtime, n: usize, what: &str) {
    let m = rt.load_source("reduce.ofk", SRC).unwrap();
    let x = awkward(n, 11);
    let y = awkward(n, 12);
    let (xa, ya) = (rt.array(&x).unwrap(), rt.array(&y).unwrap());
    let ones = rt.new_array::<f32>(n).unwrap();
    let dot = m.closure("dot", [(&xa).into(), (&ya).into()]).unwrap();
    let fill = m.closure("fill", [(&ones).into()]).unwrap();
    let total = m.closure("dot", [(&ones).into(), (&ones).into()]).unwrap();
    let h1 = rt
        .launch_reduce::<f32>(0..n as i64, &dot, Combine::Sum)
        .unwrap();
    let h2 = rt.launch(0..n as i64, &fill).unwrap();
    // Reads what `fill` writes: it waits for it.
    let h3 = rt
        .launch_reduce::<f32>(0..n as i64, &total, Combine::Sum)
        .unwrap();
    let h4 = rt
        .launch_reduce::<f32>(0..n as i64, &dot, Combine::Max)
        .unwrap();
    let prods: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a * b).collect();
    let want = tree(&prods, &|a, b| a + b).unwrap();
    assert_eq!(h1.wait().unwrap().value.to_bits(), want.to_bits(), "{what}");
    h2.wait().unwrap();
    assert_eq!(h3.wait().unwrap().value, n as f32, "{what}");
    let max = prods.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    assert_eq!(h4.wait().unwrap().value, max, "{what}");
    // A wrong type is refused before anything is launched.
    let e = rt
        .launch_reduce::<i64>(0..n as i64, &dot, Combine::Sum)
        .unwrap_err()
        .to_string();
    assert!(e.contains("returns `f32`, not the `i64`"), "{what}: {e}");
}
