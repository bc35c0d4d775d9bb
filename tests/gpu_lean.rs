//! The GPU's lean device code (issue 47) keeps every guarantee: accesses
//! indexed by the workitem number run unchecked only in launches whose
//! range lies inside their arrays, and a launch past an array's end or
//! below 0 runs checked, every workitem in range right and every other
//! one an exception; stores of the unchecked copy reach the host although
//! they mark no chunk themselves. Like `tests/gpu.rs`, ignored in the
//! ordinary run; `scripts/gpu-tests` runs it on a GPU or the virtual GPU.

use offload::ir::ExceptionKind;
use offload::{Device, OffloadError, Runtime, RuntimeBuilder, par_offload};

const NEEDS_GPU: &str = "needs a GPU, real or virtual: run scripts/gpu-tests";

fn gpu() -> RuntimeBuilder {
    Runtime::builder().device(Device::Cuda).strict(true)
}

/// y[i] = a * x[i] + y[i], its accesses indexed by the workitem number.
const AXPY: &str = include_str!("../examples/kernels/saxpy.obc");

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn proven_accesses_run_unchecked_inside_the_arrays_and_checked_past_them() {
    let rt = gpu().build().unwrap_or_else(|e| panic!("{NEEDS_GPU}: {e}"));
    let m = rt.load("saxpy.obc", AXPY).unwrap();
    // 160 KiB of floats: y spans three 64 KiB chunks of the dirty map.
    let n = 40_000usize;
    let xs: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.5).collect();
    let ys: Vec<f32> = (0..n).map(|i| (i % 777) as f32).collect();
    let a = 3.0f32;
    let want = |rounds: usize, lo: usize, hi: usize| -> Vec<f32> {
        let mut y = ys.clone();
        for _ in 0..rounds {
            for i in lo..hi {
                y[i] += a * xs[i];
            }
        }
        y
    };
    let (x, y) = (rt.array(&xs).unwrap(), rt.array(&ys).unwrap());
    let c = m
        .closure("saxpy", [a.into(), (&x).into(), (&y).into()])
        .unwrap();
    // Inside both arrays, twice: no deopt, every element written back.
    for round in 1..=2 {
        let r = par_offload(0..n as i64, &c).unwrap();
        assert_eq!(r.device, Device::Cuda, "{r}");
        assert_eq!((r.completed, r.replayed), (n as u64, 0), "{r}");
        assert_eq!(rt.read(&y).unwrap(), want(round, 0, n), "round {round}");
    }
    // A range inside the arrays that starts past 0 (a part of the chunks).
    let r = par_offload(30_000..n as i64, &c).unwrap();
    assert_eq!(r.completed, (n - 30_000) as u64, "{r}");
    let mut expect = want(2, 0, n);
    for i in 30_000..n {
        expect[i] += a * xs[i];
    }
    assert_eq!(rt.read(&y).unwrap(), expect, "from 30,000");
    // Past the arrays' end: the checked copy runs; the 40 workitems past
    // it throw, every other one is right.
    let err = par_offload(0..n as i64 + 40, &c).unwrap_err();
    let OffloadError::Exceptions(e) = err else {
        panic!("{err}")
    };
    assert_eq!(e.count, 40, "{}", e.report);
    assert_eq!(e.by_kind.get(&ExceptionKind::IndexOutOfBounds), Some(&40));
    assert_eq!(e.workitems.first(), Some(&(n as i64)));
    for i in 0..n {
        expect[i] += a * xs[i];
    }
    assert_eq!(rt.read(&y).unwrap(), expect, "past the end");
    // Below 0: the same, the 7 negative workitems throw.
    let err = par_offload(-7..n as i64, &c).unwrap_err();
    let OffloadError::Exceptions(e) = err else {
        panic!("{err}")
    };
    assert_eq!(e.count, 7, "{}", e.report);
    assert_eq!(e.workitems.first(), Some(&-7));
    for i in 0..n {
        expect[i] += a * xs[i];
    }
    assert_eq!(rt.read(&y).unwrap(), expect, "from -7");
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn one_short_array_sends_the_whole_launch_to_the_checked_copy() {
    // x has half of y's length: the proof needs both, so every slot runs
    // checked; the workitems past x's end throw before they store.
    let rt = gpu().build().unwrap_or_else(|e| panic!("{NEEDS_GPU}: {e}"));
    let m = rt.load("saxpy.obc", AXPY).unwrap();
    let n = 6_000usize;
    let xs: Vec<f32> = (0..n / 2).map(|i| i as f32).collect();
    let ys: Vec<f32> = (0..n).map(|i| (i % 13) as f32).collect();
    let (x, y) = (rt.array(&xs).unwrap(), rt.array(&ys).unwrap());
    let c = m
        .closure("saxpy", [2.0f32.into(), (&x).into(), (&y).into()])
        .unwrap();
    let err = par_offload(0..n as i64, &c).unwrap_err();
    let OffloadError::Exceptions(e) = err else {
        panic!("{err}")
    };
    assert_eq!(e.count, (n / 2) as u64, "{}", e.report);
    assert_eq!(e.workitems.first(), Some(&((n / 2) as i64)));
    let mut want = ys.clone();
    for i in 0..n / 2 {
        want[i] += 2.0 * xs[i];
    }
    assert_eq!(rt.read(&y).unwrap(), want);
}
