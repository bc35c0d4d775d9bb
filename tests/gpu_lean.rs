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

/// The virtual GPU's counters are the process's: the tests of this file
/// run one at a time.
static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn gpu() -> RuntimeBuilder {
    Runtime::builder().device(Device::Cuda).strict(true)
}

/// y[i] = a * x[i] + y[i], its accesses indexed by the workitem number.
const AXPY: &str = include_str!("../examples/kernels/saxpy.obc");

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn proven_accesses_run_unchecked_inside_the_arrays_and_checked_past_them() {
    let _one = one_at_a_time();
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
    let _one = one_at_a_time();
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

/// The driver calls and device counters of one warm launch of `c` over
/// `0..n` on the virtual GPU (`None` on a real driver, which has no
/// counters).
fn warm_counters(c: &offload::Closure, n: i64) -> Option<std::collections::BTreeMap<String, u64>> {
    for _ in 0..3 {
        par_offload(0..n, c).unwrap();
    }
    if !offload_testkit::vgpu_counters::reset() {
        return None;
    }
    let r = par_offload(0..n, c).unwrap();
    assert_eq!(
        (r.device, r.launches, r.on_device),
        (Device::Cuda, 1, n as u64),
        "{r}"
    );
    offload_testkit::vgpu_counters::counters()
}

fn calls(m: &std::collections::BTreeMap<String, u64>, names: &[&str]) -> u64 {
    names
        .iter()
        .map(|n| m.get(&format!("call.{n}")).copied().unwrap_or(0))
        .sum()
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn a_warm_launch_is_a_memset_the_kernel_and_a_copy_back() {
    let _one = one_at_a_time();
    let rt = gpu().build().unwrap_or_else(|e| panic!("{NEEDS_GPU}: {e}"));
    let m = rt.load("saxpy.obc", AXPY).unwrap();
    let n = 20_000usize;
    let (x, y) = (
        rt.array(&vec![1.0f32; n]).unwrap(),
        rt.array(&vec![2.0f32; n]).unwrap(),
    );
    let c = m
        .closure("saxpy", [0.5f32.into(), (&x).into(), (&y).into()])
        .unwrap();
    let Some(m) = warm_counters(&c, n as i64) else {
        eprintln!("a real GPU: the driver's calls are counted on the virtual GPU only");
        return;
    };
    let alloc = [
        "cuMemAlloc_v2",
        "cuMemAllocAsync",
        "cuMemHostAlloc",
        "cuMemAllocHost_v2",
    ];
    assert_eq!(calls(&m, &alloc), 0, "{m:?}");
    assert_eq!(
        calls(&m, &["cuMemFree_v2", "cuMemFreeAsync", "cuMemFreeHost"]),
        0
    );
    assert_eq!(
        calls(&m, &["cuEventCreate", "cuStreamWaitEvent"]),
        0,
        "{m:?}"
    );
    assert_eq!(calls(&m, &["cuMemsetD8Async", "cuMemsetD8_v2"]), 1, "{m:?}");
    // The context and the captures travel as the kernel's parameters; a
    // kernel that does not allocate has no eden bounds to send.
    assert_eq!(
        calls(&m, &["cuMemcpyHtoDAsync_v2", "cuMemcpyHtoD_v2"]),
        0,
        "{m:?}"
    );
    assert_eq!(calls(&m, &["cuLaunchKernel"]), 1, "{m:?}");
    assert_eq!(
        calls(&m, &["cuMemcpyDtoHAsync_v2", "cuMemcpyDtoH_v2"]),
        1,
        "{m:?}"
    );
    let syncs = [
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "cuCtxSynchronize",
    ];
    assert!(calls(&m, &syncs) <= 1, "{m:?}");
    // No atomic, no system-wide fence: every slot finished its part.
    assert_eq!(m.get("atomics").copied().unwrap_or(0), 0, "{m:?}");
    assert_eq!(m.get("sys_fences").copied().unwrap_or(0), 0, "{m:?}");
    assert_eq!(rt.read(&y).unwrap(), vec![2.0 + 4.0 * 0.5; n]);
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn a_kernel_that_allocates_adds_only_its_eden_to_a_warm_launch() {
    let _one = one_at_a_time();
    let rt = gpu().build().unwrap_or_else(|e| panic!("{NEEDS_GPU}: {e}"));
    let m = rt
        .load("alloc.obc", offload_testkit::kernels::example("alloc.obc"))
        .unwrap();
    let n = 1_000usize;
    let out = rt.new_array::<f64>(n).unwrap();
    let c = m
        .closure("alloc_vectors", [4i32.into(), (&out).into()])
        .unwrap();
    let Some(m) = warm_counters(&c, n as i64) else {
        eprintln!("a real GPU: the driver's calls are counted on the virtual GPU only");
        return;
    };
    // The block's memset and the device eden's; the kernel and the
    // scatter kernel that writes fillers over the TLABs' unused rests; the
    // summary and the TLABs' states back. (The heap's image grows with
    // what the launches allocate: its growth allocates.)
    assert_eq!(calls(&m, &["cuMemsetD8Async", "cuMemsetD8_v2"]), 2, "{m:?}");
    assert_eq!(calls(&m, &["cuLaunchKernel"]), 2, "{m:?}");
    // Up: the eden's bounds and the scatter kernel's fillers (the context
    // and the captures are parameters). No page tags: the kernel's Vec3,
    // alone in its hierarchy, is allocated on mixed pages.
    let up = ["cuMemcpyHtoDAsync_v2", "cuMemcpyHtoD_v2"];
    assert_eq!(calls(&m, &up), 2, "{m:?}");
    let back = ["cuMemcpyDtoHAsync_v2", "cuMemcpyDtoH_v2"];
    assert_eq!(calls(&m, &back), 2, "{m:?}");
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn a_kernel_of_several_kinds_adds_one_copy_of_its_tags_to_a_warm_launch() {
    let _one = one_at_a_time();
    let rt = gpu().build().unwrap_or_else(|e| panic!("{NEEDS_GPU}: {e}"));
    // Circles, rectangles and squares: a TLAB per class per slot group,
    // on pages the device tags (`offload_heap::pages`).
    let m = rt
        .load(
            "shapes.obc",
            offload_testkit::kernels::example("shapes.obc"),
        )
        .unwrap();
    let n = 1_000usize;
    let out = rt.new_array::<f64>(n).unwrap();
    let c = m.closure("shape_areas", [(&out).into()]).unwrap();
    let Some(m) = warm_counters(&c, n as i64) else {
        eprintln!("a real GPU: the driver's calls are counted on the virtual GPU only");
        return;
    };
    // As any allocating kernel's warm launch (above), and the tags of the
    // pages its eden's carves reached back: no page table goes up (the
    // host's table then holds what the device's does).
    let up = ["cuMemcpyHtoDAsync_v2", "cuMemcpyHtoD_v2"];
    assert_eq!(calls(&m, &up), 2, "{m:?}");
    let back = ["cuMemcpyDtoHAsync_v2", "cuMemcpyDtoH_v2"];
    assert_eq!(calls(&m, &back), 3, "{m:?}");
    rt.heap().check_pages().unwrap();
}

/// c = a × b for n × n matrices, its inner loop's accesses affine in `k`.
const MATMUL: &str = include_str!("../examples/kernels/matmul.obc");

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn a_loop_whose_accesses_leave_an_array_runs_checked_and_throws_where_they_do() {
    // a is 3 floats short: the last row's workitems read past its end at
    // k = 5; their loops fail the entry test and run checked, the others
    // run unchecked.
    let _one = one_at_a_time();
    let rt = gpu().build().unwrap_or_else(|e| panic!("{NEEDS_GPU}: {e}"));
    let m = rt.load("matmul.obc", MATMUL).unwrap();
    let n = 8usize;
    let av: Vec<f32> = (0..n * n - 3).map(|i| (i % 7) as f32 - 3.0).collect();
    let bv: Vec<f32> = (0..n * n).map(|i| (i % 5) as f32 * 0.25).collect();
    let (a, b, c) = (
        rt.array(&av).unwrap(),
        rt.array(&bv).unwrap(),
        rt.new_array::<f32>(n * n).unwrap(),
    );
    let k = m
        .closure(
            "matmul",
            [(n as i32).into(), (&a).into(), (&b).into(), (&c).into()],
        )
        .unwrap();
    // The first launches may run the quick tier (one version of each
    // loop); the later ones the optimized code with its predicated loops.
    for _ in 0..3 {
        let _ = par_offload(0..(n * n) as i64, &k);
    }
    let err = par_offload(0..(n * n) as i64, &k).unwrap_err();
    let OffloadError::Exceptions(e) = err else {
        panic!("{err}")
    };
    assert_eq!(e.count, n as u64, "{}", e.report);
    assert_eq!(
        e.by_kind.get(&ExceptionKind::IndexOutOfBounds),
        Some(&(n as u64))
    );
    assert_eq!(e.workitems.first(), Some(&((n * (n - 1)) as i64)));
    let got = rt.read(&c).unwrap();
    for (i, g) in got.iter().enumerate().take(n * (n - 1)) {
        let (row, col) = (i / n, i % n);
        let mut acc = 0.0f32;
        for k in 0..n {
            acc += av[row * n + k] * bv[k * n + col];
        }
        assert_eq!(g.to_bits(), acc.to_bits(), "c[{i}]");
    }
    // Every row inside a: the unchecked loops agree with the host.
    let a2 = rt.array(&vec![1.5f32; n * n]).unwrap();
    let k2 = m
        .closure(
            "matmul",
            [(n as i32).into(), (&a2).into(), (&b).into(), (&c).into()],
        )
        .unwrap();
    let mut r = par_offload(0..(n * n) as i64, &k2).unwrap();
    for _ in 0..3 {
        r = par_offload(0..(n * n) as i64, &k2).unwrap();
    }
    assert_eq!(
        (r.device, r.completed),
        (Device::Cuda, (n * n) as u64),
        "{r}"
    );
    assert!(!r.quick_tier, "the optimized code ran: {r}");
    let got = rt.read(&c).unwrap();
    for (i, g) in got.iter().enumerate() {
        let col = i % n;
        let mut acc = 0.0f32;
        for k in 0..n {
            acc += 1.5 * bv[k * n + col];
        }
        assert_eq!(g.to_bits(), acc.to_bits(), "c[{i}] with a full a");
    }
}

/// Each workitem bumps its own element n times and sums what it reads back:
/// the loop's loads sit at an index it does not change, but it stores
/// there too, so they are not hoisted out of it.
const BUMP: &str = "kernel bump(i: i64, n: i32, a: f32[], out: f32[]) {
    local j: i32
    local k: i32
    local acc: f32
    load i
    i64.to_i32
    store j
    f32.const 0.0
    store acc
    i32.const 0
    store k
  top:
    load k
    load n
    i32.ge
    br_if done
    load a
    load j
    load a
    load j
    f32.aload
    f32.const 1.0
    f32.add
    f32.astore
    load acc
    load a
    load j
    f32.aload
    f32.add
    store acc
    inc k 1
    br top
  done:
    load out
    load j
    load acc
    f32.astore
    ret
}
";

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn a_loop_that_stores_where_it_loads_reads_what_it_stored() {
    let _one = one_at_a_time();
    let rt = gpu().build().unwrap_or_else(|e| panic!("{NEEDS_GPU}: {e}"));
    let m = rt.load("bump.obc", BUMP).unwrap();
    let (len, n) = (300usize, 10i32);
    let out = rt.new_array::<f32>(len).unwrap();
    // The first launches may run the quick tier; the last ones the
    // optimized code with the predicated loop.
    for round in 1..=4 {
        let a = rt
            .array(&(0..len).map(|i| i as f32).collect::<Vec<_>>())
            .unwrap();
        let c = m
            .closure("bump", [n.into(), (&a).into(), (&out).into()])
            .unwrap();
        let r = par_offload(0..len as i64, &c).unwrap();
        assert_eq!(r.device, Device::Cuda, "{r}");
        let (got_a, got_out) = (rt.read(&a).unwrap(), rt.read(&out).unwrap());
        for i in 0..len {
            let a0 = i as f32;
            assert_eq!(got_a[i], a0 + n as f32, "a[{i}], round {round}");
            let want: f32 = (1..=n).map(|t| a0 + t as f32).sum();
            assert_eq!(got_out[i], want, "out[{i}], round {round}");
        }
    }
}
