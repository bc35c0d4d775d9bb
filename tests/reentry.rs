//! Re-entry: a workitem a safepoint (or a full heap) stopped at a loop's
//! back-edge or an allocation is resumed on the device from its save
//! record, not finished by the interpreter (`offload_deopt::SiteMap::
//! resumable`; the CPU device's protocol is in `src/cpu/launch.rs`, the landings
//! in `jit/src/lower/reentry.rs`).

use offload::deopt::{Reason, reentry_point};
use offload::{Arg, Device, GcPolicy, Runtime, par_offload};
use offload_jit::Injection;
use offload_testkit::differential::Differ;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

const SPIN: &str = include_str!("../examples/kernels/spin.obc");

#[path = "common/examples.rs"]
mod examples;
use examples::examples;

/// The re-entry frame checker: at every re-entry point of every example
/// kernel, every workitem is stopped (an injected safepoint, on each
/// arrival) and resumed on the device from its record, in both tiers;
/// each must end with the heap and the exceptions the interpreter gives.
/// A value the landing loads into the wrong variable, a frame-state map
/// that disagrees between exit and entry, or a resumed workitem that runs
/// an instruction twice shows up as a differing heap.
#[test]
fn every_reentry_point_of_every_example_resumes_to_the_interpreters_heap() {
    check_every_reentry_point(Device::Cpu);
}

/// [`every_reentry_point_of_every_example_resumes_to_the_interpreters_heap`]
/// on the CUDA device: each stop ends the grid, and the relaunch resumes
/// the record.
#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn on_the_gpu_every_reentry_point_of_every_example_resumes_to_the_interpreters_heap() {
    check_every_reentry_point(Device::Cuda);
}

fn check_every_reentry_point(device: Device) {
    let probe = Runtime::builder()
        .device(Device::Interpreter)
        .build()
        .unwrap();
    let (mut points, mut resumed_points) = (0, 0);
    let mut not_reached = Vec::new();
    for (i, (file, text)) in examples().iter().enumerate() {
        let m = probe.load(file, text).unwrap();
        for k in m.kernels() {
            let v = m.program().verified();
            let kid = v.func_named(&k).unwrap();
            let sites = m.program().analysis(kid).unwrap().sites.clone();
            for site in sites.iter().filter(|s| reentry_point(s)) {
                points += 1;
                let differ = Differ::configured(device, &|b| {
                    b.strict(true).inject(Injection {
                        site_bci: site.bci,
                        modulus: 1,
                        remainder: 0,
                        reason: Some(Reason::Safepoint),
                    })
                })
                .unwrap_or_else(|e| panic!("{device:?}: {e}"));
                let mut resumed = 0;
                for seed in 0..4u64 {
                    let c = differ
                        .compare(text, 7919 * i as u64 + seed)
                        .unwrap_or_else(|why| panic!("{file}, {k} @{}: {why}", site.bci));
                    resumed += c.resumed;
                }
                if resumed > 0 {
                    resumed_points += 1;
                } else {
                    not_reached.push(format!("{file}: {k} @{}", site.bci));
                }
            }
        }
    }
    eprintln!(
        "{device:?}: {resumed_points} of {points} re-entry points resumed; not reached: {not_reached:?}"
    );
    assert!(points >= 10, "only {points} re-entry points");
    assert!(
        resumed_points == points,
        "only {resumed_points} of {points} re-entry points were resumed; not reached: {not_reached:?}"
    );
}

/// Every example under a storm of injected safepoints (every back-edge
/// poll, in the kernel and in inlined callees, stops with probability
/// 1/2) agrees with the interpreter.
#[test]
fn every_example_agrees_with_the_interpreter_under_a_safepoint_storm() {
    let mut resumed = 0;
    for seed in [3u64, 17] {
        let differ =
            Differ::configured(Device::Cpu, &|b| b.inject_safepoints(2, Some(seed))).unwrap();
        for (i, (file, text)) in examples().iter().enumerate() {
            for s in 0..3u64 {
                let c = differ
                    .compare(text, 31 * i as u64 + s + seed)
                    .unwrap_or_else(|why| panic!("{file}: {why}"));
                resumed += c.resumed;
            }
        }
    }
    assert!(resumed > 100, "only {resumed} records resumed");
}

/// `out[i] += 1` and an atomic counter on every iteration of a loop that
/// allocates, workitems of 0 to 4 * `m` iterations, under injected
/// safepoints and safepoints a host thread raises meanwhile: every
/// iteration happens exactly once, and every stop is resumed on the device.
const STORM: &str = "
kernel storm(i: i64, m: i32, out: i32[], counter: i64[]) {
    local k: i32
    local n: i32
    local tmp: i32[]
    load i
    i64.const 5
    i64.rem
    i64.to_i32
    load m
    i32.mul
    store n
    i32.const 0
    store k
  loop:
    load k
    load n
    i32.ge
    br_if done
    load k
    i32.const 3
    i32.and
    i32.const 1
    i32.add
    newarray i32
    store tmp
    load out
    load i
    i64.to_i32
    load out
    load i
    i64.to_i32
    i32.aload
    load tmp
    array.len
    i32.const 0
    i32.mul
    i32.const 1
    i32.add
    i32.add
    i32.astore
    load counter
    i32.const 0
    i64.const 1
    i64.array_atomic_add
    pop
    inc k 1
    br loop
  done:
    ret
}
";

#[test]
fn exactly_once_under_a_safepoint_storm_with_reentry() {
    for (every, seed) in [(7u64, 1u64), (50, 2), (400, 3)] {
        let b = Runtime::builder()
            .workers(2)
            .device(Device::Cpu)
            .tiered(false)
            .deopt_records(4)
            .inject_safepoints(every, Some(seed));
        storm(b, 4000, 60, &format!("every {every}"));
    }
}

/// [`exactly_once_under_a_safepoint_storm_with_reentry`] on the CUDA
/// device (smaller: every stop ends the grid).
#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn on_the_gpu_exactly_once_under_a_safepoint_storm_with_reentry() {
    for (every, seed) in [(7u64, 1u64), (50, 2)] {
        let b = gpu().device_slots(64).inject_safepoints(every, Some(seed));
        storm(b, 400, 12, &format!("every {every}"));
    }
}

/// The CUDA device, strict (no fallback).
fn gpu() -> offload::RuntimeBuilder {
    Runtime::builder().device(Device::Cuda).strict(true)
}

/// Launch [`STORM`] over `0..n` with `m` on a runtime from `b`, while a
/// host thread raises safepoints, and check it.
fn storm(b: offload::RuntimeBuilder, n: usize, m: i32, what: &str) {
    let expected = |i: usize| (i % 5) as i32 * m;
    let total: i64 = (0..n).map(|i| i64::from(expected(i))).sum();
    let rt = b.build().unwrap();
    let km = rt.load("storm.obc", STORM).unwrap();
    let out = rt.new_array::<i32>(n).unwrap();
    let counter = rt.new_array::<i64>(1).unwrap();
    let c = km
        .closure("storm", [Arg::I32(m), (&out).into(), (&counter).into()])
        .unwrap();
    // A host thread raising safepoints while the launch runs.
    let stop = Arc::new(AtomicBool::new(false));
    let raiser = {
        let (rt, stop) = (rt.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                rt.safepoint(|_| {});
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        })
    };
    let r = par_offload(0..n as i64, &c).unwrap();
    stop.store(true, Ordering::Relaxed);
    raiser.join().unwrap();
    let got = rt.read(&out).unwrap();
    for (i, &v) in got.iter().enumerate() {
        assert_eq!(v, expected(i), "{what}: workitem {i}\n{r}");
    }
    assert_eq!(rt.read(&counter).unwrap()[0], total, "{what}\n{r}");
    assert!(r.resumed > 0, "{what}: nothing resumed\n{r}");
    assert_eq!(r.replayed, 0, "{what}: every stop is resumed\n{r}");
    assert_eq!(r.on_device, n as u64, "{r}");
}

/// With every back-edge poll stopping (`inject_safepoints(1, None)`), a
/// workitem of `iters` iterations is stopped and resumed `iters` times in a
/// row, and still ends with the right count.
#[test]
fn a_workitem_stopped_again_and_again_finishes_on_the_device() {
    for tiered in [true, false] {
        let b = Runtime::builder()
            .workers(2)
            .device(Device::Cpu)
            .tiered(tiered);
        stopped_again_and_again(b, 40, 25);
    }
}

/// [`a_workitem_stopped_again_and_again_finishes_on_the_device`] on the
/// CUDA device: a relaunch per stop.
#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn on_the_gpu_a_workitem_stopped_again_and_again_finishes_on_the_device() {
    stopped_again_and_again(gpu().device_slots(32), 32, 8);
}

fn stopped_again_and_again(b: offload::RuntimeBuilder, n: usize, iters: i32) {
    let rt = b.inject_safepoints(1, None).build().unwrap();
    let m = rt.load("spin.obc", SPIN).unwrap();
    let out = rt.new_array::<i32>(n).unwrap();
    let r = par_offload(
        0..n as i64,
        m.closure("spin", [iters.into(), (&out).into()]).unwrap(),
    )
    .unwrap();
    assert!(rt.read(&out).unwrap().iter().all(|&v| v == iters), "{r}");
    assert_eq!(r.resumed, n as u64 * iters as u64, "{r}");
    assert_eq!((r.on_device, r.replayed), (n as u64, 0), "{r}");
    // The table lists one workitem's successive stops, its loop counter
    // going up by one each time.
    let ks: Vec<String> = r
        .deopt_table
        .iter()
        .filter(|row| row.workitem == r.deopt_table[0].workitem)
        .map(|row| {
            assert_eq!(row.action, offload::DeoptAction::Resumed);
            row.saved
                .iter()
                .find(|v| v.name == "k")
                .unwrap()
                .value
                .clone()
        })
        .collect();
    assert!(ks.len() > 1, "{ks:?}");
    for (j, k) in ks.iter().enumerate() {
        assert_eq!(k, &(j + 1).to_string(), "{ks:?}");
    }
}

/// A kernel that holds a node across a loop, with garbage allocated before
/// the node: stopped at the loop's header on every arrival, with a
/// collection before each batch of records, the node moves while the
/// workitem is stopped, and the resumed code must use the moved reference.
const HOLD: &str = "
class Node {
    field val: i64
}

kernel hold_loop(i: i64, iters: i32, out: i64[]) {
    local n: Node
    local junk: i64[]
    local k: i32
    i32.const 50
    newarray i64
    store junk
    new Node
    store n
    load n
    load i
    putfield Node.val
    i32.const 4
    newarray i64
    store junk
    i32.const 0
    store k
  top:
    load k
    load iters
    i32.ge
    br_if done
    load n
    load n
    getfield Node.val
    i64.const 1
    i64.add
    putfield Node.val
    inc k 1
    br top
  done:
    load out
    load i
    i64.to_i32
    load n
    getfield Node.val
    i64.astore
    ret
}
";

#[test]
fn a_resumed_workitem_uses_the_references_a_collection_moved() {
    // The optimized tier: it lands at every re-entry point (the quick tier
    // only at loop headers, and the collections' own safepoints may stop
    // a workitem in an allocation).
    let b = Runtime::builder()
        .device(Device::Cpu)
        .workers(2)
        .tiered(false)
        .deopt_records(8);
    moved_references(b, 500);
}

/// [`a_resumed_workitem_uses_the_references_a_collection_moved`] on the
/// CUDA device: the collection runs on the host between grids, and the
/// relaunch resumes the updated record.
#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn on_the_gpu_a_resumed_workitem_uses_the_references_a_collection_moved() {
    moved_references(gpu().device_slots(64), 128);
}

fn moved_references(b: offload::RuntimeBuilder, n: usize) {
    let probe = Runtime::builder()
        .device(Device::Interpreter)
        .build()
        .unwrap();
    let pm = probe.load("hold.obc", HOLD).unwrap();
    let k = pm.program().verified().func_named("hold_loop").unwrap();
    let header = *pm
        .program()
        .analysis(k)
        .unwrap()
        .loop_headers
        .first()
        .unwrap();
    let gc = GcPolicy {
        collect_before_replays: true,
        verify: true,
        ..GcPolicy::default()
    };
    let rt = b
        .inject(Injection {
            site_bci: header,
            modulus: 1,
            remainder: 0,
            reason: Some(Reason::Safepoint),
        })
        .gc(gc)
        .build()
        .unwrap();
    let m = rt.load("hold.obc", HOLD).unwrap();
    let iters = 3i32;
    let out = rt.new_array::<i64>(n).unwrap();
    let c = m
        .closure("hold_loop", [iters.into(), (&out).into()])
        .unwrap();
    let r = rt.par_offload(0..n as i64, &c).unwrap();
    // Every arrival at the header stops (iters + 1 per workitem), and the
    // collections' own safepoints stop a few more.
    assert!(
        r.resumed >= n as u64 * (iters as u64 + 1),
        "resumed {}, replayed {}: {r}",
        r.resumed,
        r.replayed
    );
    assert_eq!(r.replayed, 0, "{r}");
    assert!(r.gc.collections > 0 && r.gc.moved > 0, "{r}");
    let got = rt.read(&out).unwrap();
    for (i, &v) in got.iter().enumerate() {
        assert_eq!(v, i as i64 + i64::from(iters), "workitem {i}\n{r}");
    }
}

/// A loop whose objects escape into a ring (so they are not handed back
/// at the workitem's end) through a heap far smaller than they add up to.
const CHURN: &str = "
class Node {
    field val: i64
}

kernel churn_loop(i: i64, m: i32, ring: Node[], out: i32[]) {
    local k: i32
    local nd: Node
    i32.const 0
    store k
  loop:
    load k
    load m
    i32.ge
    br_if done
    new Node
    store nd
    load nd
    load i
    putfield Node.val
    load ring
    load i
    i64.const 1000
    i64.rem
    i64.to_i32
    load nd
    ref.astore
    load out
    load i
    i64.to_i32
    load out
    load i
    i64.to_i32
    i32.aload
    i32.const 1
    i32.add
    i32.astore
    inc k 1
    br loop
  done:
    ret
}
";

/// A full heap: a record of an allocation that found eden exhausted is
/// resumed on the device once a collection has made room (the first is
/// replayed, and its replay collects), and the launch completes exactly
/// once.
#[test]
fn allocation_failures_resume_on_the_device_after_a_collection() {
    let rt = Runtime::builder()
        .device(Device::Cpu)
        .workers(2)
        .tiered(false)
        .deopt_records(8)
        .initial_heap(2 << 20)
        .max_heap(2 << 20)
        .build()
        .unwrap();
    let km = rt.load("churn.obc", CHURN).unwrap();
    let (n, m) = (20_000usize, 40i32);
    let ring = km.new_ref_array("Node", 1000).unwrap();
    let out = rt.new_array::<i32>(n).unwrap();
    let c = km
        .closure("churn_loop", [Arg::I32(m), (&ring).into(), (&out).into()])
        .unwrap();
    let r = par_offload(0..n as i64, &c).unwrap();
    assert!(rt.read(&out).unwrap().iter().all(|&v| v == m), "{r}");
    let alloc_resumed = r
        .deopt_table
        .iter()
        .filter(|row| {
            row.action == offload::DeoptAction::Resumed && row.reason == Reason::AllocationFailure
        })
        .count();
    assert!(r.gc.collections > 0, "{r}");
    assert!(alloc_resumed > 0, "no allocation failure resumed\n{r}");
}

/// With re-entry off (`RuntimeBuilder::reentry(false)`), the interpreter
/// finishes every stopped workitem, as before.
#[test]
fn reentry_off_replays_every_stop() {
    let rt = Runtime::builder()
        .workers(2)
        .device(Device::Cpu)
        .reentry(false)
        .inject_safepoints(5, Some(1))
        .build()
        .unwrap();
    let m = rt.load("spin.obc", SPIN).unwrap();
    let n = 200usize;
    let out = rt.new_array::<i32>(n).unwrap();
    let r = par_offload(
        0..n as i64,
        m.closure("spin", [30i32.into(), (&out).into()]).unwrap(),
    )
    .unwrap();
    assert!(rt.read(&out).unwrap().iter().all(|&v| v == 30));
    assert_eq!(r.resumed, 0, "{r}");
    assert!(r.replayed > 0, "{r}");
}
