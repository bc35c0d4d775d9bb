//! One launch split over the CPU and every GPU (issue 52, second part;
//! `src/split.rs`): the parts partition the range, every workitem runs
//! exactly once — under injected deopts and safepoints, and a collection
//! between launches; for a kernel that allocates, under refill failures
//! and collections in the middle of the launch too — the devices' writes
//! to different elements of one chunk all land, the report has a row per device whose figures add up,
//! and a skewed kernel keeps every device busy until near the end; and
//! random race-free programs split over every device agree with the
//! interpreter (the differential suite, split).
//! Ignored in the ordinary run (no GPU); `scripts/gpu-tests --virtual`
//! runs them on two and four virtual GPUs (`OFFLOAD_VGPU_DEVICES`). On
//! hardware with one GPU they split over the CPU and that GPU.

use offload::ir::fuzzgen::GenConfig;
use offload::ir::print_module;
use offload::{Device, LaunchReport, Runtime, RuntimeBuilder};
use offload_jit::Injection;
use offload_testkit::differential::{Differ, Shape, order_free};
use offload_testkit::reference::Rng;

#[path = "common/programs.rs"]
mod programs;

#[path = "common/knob.rs"]
mod knob;
use knob::knob;

#[path = "common/examples.rs"]
mod examples;

#[path = "common/stress.rs"]
#[allow(dead_code)]
mod stress;

const NEEDS: &str = "needs a GPU, real or virtual: run scripts/gpu-tests";

const SRC: &str = "
#[kernel]
fn bump(i: i32, a: &mut [i64], iters: i32, k: i64) {
    let mut acc = 0i64;
    let mut s = 0;
    while s < iters {
        acc = acc + 1;
        s = s + 1;
    }
    a[i] = a[i] + (i as i64) * k + acc;
}

#[kernel]
fn mark(i: i32, a: &mut [i32], b: &mut [f32]) {
    a[i] = i * 3 + 1;
    b[i] = (i as f32) * 0.5;
}

#[kernel]
fn skew(i: i32, out: &mut [i64], per: i32) {
    let mut acc = 0i64;
    let mut s = 0;
    let n = i / per;
    while s < n {
        acc = acc + (s as i64);
        s = s + 1;
    }
    out[i] = acc;
}

#[kernel]
fn count(i: i32, hits: &mut [i32]) {
    atomic_add(&mut hits[i % 4], 1);
}

#[kernel]
fn ticket(i: i32, next: &mut [i32], got: &mut [i32]) {
    // `next` is read too: not a sum into copies.
    got[i] = atomic_add(&mut next[0], 1) + next[1];
}
";

/// Split over the GPUs (and the CPU, when `cpu`) in equal shares: every
/// device runs parts of every launch (`split_even`).
fn split(cpu: bool) -> RuntimeBuilder {
    speeds(cpu).split_even(true)
}

/// Split with parts sized by the devices' speeds.
fn speeds(cpu: bool) -> RuntimeBuilder {
    Runtime::builder()
        .device(Device::Cuda)
        .strict(true)
        .workers(2)
        .split_over(devices(cpu))
}

/// What a split runs over: the GPUs, and the CPU when `cpu`.
fn devices(cpu: bool) -> Vec<Device> {
    if cpu {
        vec![Device::Cpu, Device::Cuda]
    } else {
        vec![Device::Cuda]
    }
}

fn build(b: RuntimeBuilder) -> Runtime {
    b.build().unwrap_or_else(|e| panic!("{NEEDS}: {e}"))
}

/// The loop's site in `bump` (for injected deopts).
fn loop_site() -> u32 {
    let probe = Runtime::builder()
        .device(Device::Interpreter)
        .build()
        .unwrap();
    let m = probe.load_source("split.ofk", SRC).unwrap();
    let k = m.program().verified().func_named("bump").unwrap();
    let sites = m.program().analysis(k).unwrap().sites.clone();
    sites[sites.len() / 2].bci
}

/// The report's rows partition the range and add up to its counters.
fn check_rows(r: &LaunchReport, devices: usize) {
    assert_eq!(r.split.len(), devices, "{r}");
    let ran: u64 = r.split.iter().map(|s| s.workitems).sum();
    assert_eq!(ran, r.workitems(), "{r}");
    assert_eq!(r.on_device + r.replayed, r.workitems(), "{r}");
    assert_eq!(
        r.split.iter().map(|s| s.to_device_bytes).sum::<u64>(),
        r.to_device_bytes
    );
    assert_eq!(
        r.split.iter().map(|s| s.deopts).sum::<u64>(),
        r.deopts.values().sum::<u64>()
    );
    let parts: std::time::Duration = r.timings.parts().iter().map(|p| p.1).sum();
    assert_eq!(parts, r.timings.total);
    for s in &r.split {
        assert!(s.idle_tail <= r.timings.total, "{r}");
    }
    let text = r.to_string();
    assert!(text.contains("split over "), "{text}");
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn every_workitem_runs_once_over_every_device() {
    let site = loop_site();
    for (cpu, inject) in [(true, false), (false, false), (true, true)] {
        let mut b = split(cpu);
        if inject {
            b = b
                .inject(Injection {
                    site_bci: site,
                    modulus: 7,
                    remainder: 3,
                    reason: None,
                })
                .inject_safepoints(11, Some(5));
        }
        let rt = build(b);
        let gpus = rt.gpu_ordinals().len();
        let devices = gpus + usize::from(cpu);
        if devices < 2 {
            eprintln!("one GPU here: no split over the GPUs alone");
            continue;
        }
        let m = rt.load_source("split.ofk", SRC).unwrap();
        let what = format!("cpu {cpu}, injected {inject}, {gpus} GPUs");
        let n = 40_000usize;
        let a = rt.array(&vec![5i64; n]).unwrap();
        let bump = |k: i64| {
            m.closure("bump", [(&a).into(), 20.into(), k.into()])
                .unwrap()
        };
        let mut want = vec![5i64; n];
        for (round, k) in [3i64, 7, 11].into_iter().enumerate() {
            let r = rt.par_offload(0..n as i64, &bump(k)).unwrap();
            for (i, w) in want.iter_mut().enumerate() {
                *w += i as i64 * k + 20;
            }
            check_rows(&r, devices);
            if inject {
                assert!(r.replayed + r.resumed > 0, "{what}: no deopt\n{r}");
            }
            let got = rt.read(&a).unwrap();
            let bad: Vec<(usize, i64, i64)> = (0..n)
                .filter(|&i| got[i] != want[i])
                .map(|i| (i, got[i], want[i]))
                .take(8)
                .collect();
            assert!(bad.is_empty(), "{what}, round {round}: {bad:?}\n{r}");
            if round == 1 {
                // Garbage, then a collection: the array moves.
                for _ in 0..50 {
                    std::mem::forget(rt.new_array::<i64>(1000).unwrap());
                }
                rt.collect().unwrap();
            }
        }
        // Every device ran parts (equal shares).
        let r = rt.par_offload(0..n as i64, &bump(1)).unwrap();
        assert!(r.split.iter().all(|s| s.parts > 0), "{what}\n{r}");
    }
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn writes_of_every_device_to_one_chunk_land() {
    let rt = build(split(true));
    let m = rt.load_source("split.ofk", SRC).unwrap();
    // 20,000 i32 and f32: 80 KB each, the parts' boundaries inside
    // chunks the devices share.
    let n = 20_000usize;
    for _ in 0..4 {
        let a = rt.array(&vec![-1i32; n]).unwrap();
        let b = rt.array(&vec![-1f32; n]).unwrap();
        let k = m.closure("mark", [(&a).into(), (&b).into()]).unwrap();
        let r = rt.par_offload(0..n as i64, &k).unwrap();
        assert!(r.split.iter().filter(|s| s.parts > 0).count() >= 2, "{r}");
        let got = rt.read(&a).unwrap();
        for (i, v) in got.iter().enumerate() {
            assert_eq!(*v, i as i32 * 3 + 1, "a[{i}]\n{r}");
        }
        let got = rt.read(&b).unwrap();
        for (i, v) in got.iter().enumerate() {
            assert_eq!(*v, i as f32 * 0.5, "b[{i}]\n{r}");
        }
    }
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn kernels_whose_writes_do_not_merge_run_on_one_device() {
    let rt = build(split(true));
    let m = rt.load_source("split.ofk", SRC).unwrap();
    // Counting into one array: summed into copies per device group.
    let hits = rt.array(&[0i32; 4]).unwrap();
    let k = m.closure("count", [(&hits).into()]).unwrap();
    let r = rt.par_offload(0..4000, &k).unwrap();
    assert!(r.split.is_empty(), "{r}");
    let why = r.fallback.as_deref().unwrap_or_default();
    assert!(why.contains("not split") && why.contains("copies"), "{why}");
    assert_eq!(rt.read(&hits).unwrap(), [1000; 4]);
    // Tickets from an atomic counter: each device's counter would win
    // over the others'.
    let next = rt.array(&[0i32; 2]).unwrap();
    let got = rt.array(&vec![-1i32; 3000]).unwrap();
    let k = m
        .closure("ticket", [(&next).into(), (&got).into()])
        .unwrap();
    let r = rt.par_offload(0..3000, &k).unwrap();
    assert!(r.split.is_empty(), "{r}");
    let why = r.fallback.as_deref().unwrap_or_default();
    assert!(
        why.contains("not split") && why.contains("atomics"),
        "{why}"
    );
    assert_eq!(rt.read(&next).unwrap(), [3000, 0]);
    let mut t = rt.read(&got).unwrap();
    t.sort_unstable();
    assert_eq!(t, (0..3000).collect::<Vec<i32>>());
    // A pinned launch runs on its GPU.
    let a = rt.array(&vec![0i64; 1000]).unwrap();
    let bump = m
        .closure("bump", [(&a).into(), 1.into(), 1i64.into()])
        .unwrap();
    let r = rt
        .on_gpu(rt.gpu_ordinals()[0])
        .unwrap()
        .par_offload(0..1000, &bump)
        .unwrap();
    assert!(r.split.is_empty(), "{r}");
    // The interpreter takes no part.
    let e = Runtime::builder()
        .split_over([Device::Interpreter, Device::Cuda])
        .build()
        .unwrap_err()
        .to_string();
    assert!(e.contains("split over") && e.contains("interp"), "{e}");
}

/// Work growing with the index, split over the CPU and two GPUs once the
/// devices' speeds are known: each device's idle tail is at most a tenth
/// of the launch. The virtual GPUs run on the host's cores beside the CPU
/// device's workers, so one launch's timing is noisy on a small machine:
/// three of the last five launches must meet the bound.
#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn a_skewed_kernel_keeps_every_device_busy_until_near_the_end() {
    // The CPU and two GPUs (of the first runtime's).
    let probe = build(speeds(true));
    let two: Vec<usize> = probe.gpu_ordinals().into_iter().take(2).collect();
    drop(probe);
    let rt = build(speeds(true).gpus(two));
    let m = rt.load_source("split.ofk", SRC).unwrap();
    let (n, per) = (200_000usize, 50i64);
    let out = rt.array(&vec![0i64; n]).unwrap();
    let k = m
        .closure("skew", [(&out).into(), (per as i32).into()])
        .unwrap();
    let mut met = Vec::new();
    let mut text = String::new();
    for launch in 0..8 {
        let r = rt.par_offload(0..n as i64, &k).unwrap();
        check_rows(&r, r.split.len());
        let total = r.timings.total.as_secs_f64();
        let ok = r
            .split
            .iter()
            .all(|s| s.idle_tail.as_secs_f64() <= 0.10 * total);
        if launch >= 3 {
            met.push(ok);
            text += &format!("{r}\n");
        }
    }
    assert!(
        met.iter().filter(|&&ok| ok).count() >= 3,
        "idle tails over a tenth of the launch in {met:?}:\n{text}"
    );
    let want: Vec<i64> = (0..n as i64)
        .map(|i| {
            let t = i / per;
            t * (t - 1) / 2
        })
        .collect();
    assert_eq!(rt.read(&out).unwrap(), want);
}

/// Random race-free programs (`GenConfig::splittable`: workitem `i` touches
/// only its own window of each array) split over every device agree with
/// the interpreter — heaps and exceptions — in equal shares and in shares
/// by speed, and under injected deopts (at kernel entry, every fifth
/// workitem) and injected safepoints (the stopped workitems' rests resumed).
/// `OFFLOAD_SPLIT_CASES` programs from seed `OFFLOAD_SPLIT_SEED`; a failure
/// names its case and configuration, and the same seed replays it.
#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn random_race_free_programs_split_over_every_device_agree_with_the_interpreter() {
    let seed = knob("OFFLOAD_SPLIT_SEED", 52);
    let cases = knob("OFFLOAD_SPLIT_CASES", 120);
    let window = 5;
    let shape = Shape {
        workitems: 48,
        elements: 48 * window as usize,
    };
    let cfg = GenConfig::splittable(window);
    for (cpu, even, inject) in [
        (true, true, false),
        (false, false, false),
        (true, true, true),
    ] {
        let over = devices(cpu);
        let configure = |b: RuntimeBuilder| {
            if inject {
                b.inject(Injection {
                    site_bci: 0,
                    modulus: 5,
                    remainder: 2,
                    reason: None,
                })
                .inject_safepoints(3, Some(seed))
            } else {
                b
            }
        };
        let new_differ = || {
            Differ::split(&over, even, shape, &configure).unwrap_or_else(|e| panic!("{NEEDS}: {e}"))
        };
        let mut differ = new_differ();
        let what = format!("cpu {cpu}, equal shares {even}, injected {inject}");
        let mut rng = Rng::new(seed);
        let (mut compared, mut split) = (0, 0);
        let mut resumed = 0;
        for case in 0..cases {
            // Fresh runtimes now and then: nothing collects the arrays
            // each case leaves in the heap.
            if case % 25 == 24 {
                differ = new_differ();
            }
            let Some(module) = programs::generate_with(&mut rng, &cfg) else {
                continue;
            };
            let text = print_module(&module);
            match differ.compare(&text, rng.next_u64()) {
                Ok(c) => {
                    compared += c.kernels;
                    split += c.split;
                    resumed += c.resumed;
                }
                Err(why) => panic!("{what}, seed {seed}, case {case}: {why}"),
            }
        }
        eprintln!("{what}: {compared} kernels compared, {split} split, {resumed} resumed");
        // Most kernels run split: the rest read-modify-write an element
        // (`a[k] = a[k] + x`), which the runtime sums into per-block copies
        // and so runs on one device (`split::refuse`); they still agree.
        assert!(
            compared as u64 >= cases / 2,
            "{what}: only {compared} kernels compared"
        );
        if differ_devices(cpu) > 1 {
            assert!(
                2 * split >= compared,
                "{what}: only {split} of {compared} split"
            );
        }
    }
}

/// Exactly once, split, for a kernel that allocates: the split stress
/// kernel (an array made per round, its length read back) over the CPU and
/// every GPU, in equal shares and by speed, under a random mix of forced
/// deopts, injected safepoints and refill failures, and collections in the
/// middle of the launch (before each batch of replays, while the other
/// devices' parts run). Every cell holds what one run of each workitem
/// adds, the parts partition the range, and the heap holds exactly the
/// arrays the workitems made — no workitem ran twice, and each device's
/// objects landed beside the others' in the chunks their edens share.
#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn allocating_kernels_split_over_every_device_run_every_workitem_once() {
    let kernel = offload_testkit::kernels::SPLIT_STRESS_KERNEL;
    let probe = build(split(true));
    let sites = stress::sites(&probe, kernel);
    drop(probe);
    let mut rng = Rng::new(knob("OFFLOAD_SPLIT_SEED", 52));
    let cases = knob("OFFLOAD_SPLIT_CASES", 24) as usize;
    let (mut split_runs, mut failed_refills, mut collected) = (0, 0, 0);
    for case in 0..cases {
        let cpu = rng.below(4) > 0;
        let b = if rng.below(2) == 0 {
            split(cpu)
        } else {
            speeds(cpu)
        };
        let reclaim = rng.below(2) == 0;
        let gc = offload::GcPolicy {
            collect_before_replays: rng.below(3) == 0,
            // Every so many refills find eden exhausted, on every device:
            // collections in the middle of every part.
            stress: if rng.below(2) == 0 {
                2 + rng.below(30)
            } else {
                0
            },
            verify: true,
            ..offload::GcPolicy::default()
        };
        let b = b
            .tlab_bytes(256 + 64 * rng.below(8) as u32)
            .reclaim(reclaim)
            .gc(gc);
        let (b, mut what) = stress::random_faults(&mut rng, b, &sites, |rng| {
            (1 + rng.below(5), 1 + rng.below(3))
        });
        what.insert(0, format!("case {case}, cpu {cpu}, reclaim {reclaim}"));
        if gc.collect_before_replays {
            what.push("collections before replays".into());
        }
        if gc.stress > 0 {
            what.push(format!("eden exhausted every {} refills", gc.stress));
        }
        let n = 3_000 + rng.below(5_000) as usize;
        let rounds = 1 + rng.below(10) as i32;
        let rt = build(b);
        let m = rt.load("split_stress.obc", kernel).unwrap();
        let out = rt.new_array::<i32>(n).unwrap();
        let sums = rt.new_array::<i64>(n).unwrap();
        let before = rt.gc_totals().collections;
        let c = m
            .closure("stress", [rounds.into(), (&out).into(), (&sums).into()])
            .unwrap();
        let what = format!("{what:?}, {n} workitems, {rounds} rounds");
        let r = rt
            .par_offload(0..n as i64, &c)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(r.fallback.is_none(), "{what}: {r}");
        assert!(r.split.len() >= 2, "{what}: not split\n{r}");
        check_rows(&r, r.split.len());
        stress::check_report(&r, &what);
        assert_eq!(r.completed, n as u64, "{what}\n{r}");
        let got = rt.read(&out).unwrap();
        let bad: Vec<usize> = (0..n).filter(|&i| got[i] != rounds).take(5).collect();
        assert!(bad.is_empty(), "{what}: out {bad:?} wrong\n{r}");
        let want = i64::from(rounds) * i64::from(rounds + 1) / 2;
        let got = rt.read(&sums).unwrap();
        let bad: Vec<(usize, i64)> = (0..n)
            .filter(|&i| got[i] != want)
            .map(|i| (i, got[i]))
            .take(5)
            .collect();
        assert!(
            bad.is_empty(),
            "{what}: sums {bad:?} wrong (want {want})\n{r}"
        );
        let st = rt
            .verify_heap(&[&m])
            .unwrap_or_else(|e| panic!("{what}: {e}\n{r}"));
        let gcs = rt.gc_totals().collections - before;
        if !reclaim && gcs == 0 {
            // Nothing reused, handed back or collected: every array made
            // is there.
            assert_eq!(st.arrays, n as u64 * rounds as u64 + 2, "{what}\n{r}");
        }
        split_runs += usize::from(r.split.iter().filter(|s| s.parts > 0).count() >= 2);
        failed_refills += usize::from(
            r.deopts
                .keys()
                .any(|&(_, why)| why == offload::deopt::Reason::AllocationFailure),
        );
        collected += usize::from(gcs > 0);
    }
    eprintln!(
        "{cases} cases: {split_runs} ran on several devices, {failed_refills} with refills failing, {collected} collected"
    );
    assert!(
        split_runs * 2 >= cases,
        "only {split_runs} of {cases} ran split"
    );
    if cases >= 12 {
        assert!(failed_refills > 0 && collected > 0);
    }
}

/// How many devices a split over the GPUs (and the CPU, when `cpu`) has.
fn differ_devices(cpu: bool) -> usize {
    build(speeds(false)).gpu_ordinals().len() + usize::from(cpu)
}

/// Parts on every GPU write their workitems' elements of one small array
/// (one chunk) while the other GPUs' threads fetch that chunk for their
/// own next parts, and (with `throw`) every workitem deopts to throw, its
/// replay fetching too: 300 launches, each write lands. Caught a fetch
/// that cleared the ownership of a GPU whose kernel marked the chunk while
/// the fetch ran (7 launches in 400 lost a part's writes), and a part
/// registered after the check of what its GPU lacks (a merge between the
/// two left it writing over an old image with no twin).
#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn gpus_fetching_a_chunk_other_gpus_write_lose_no_write() {
    let rt = build(speeds(false).workers(1).deopt_records(1).device_slots(1));
    if rt.gpu_ordinals().len() < 2 {
        eprintln!("one GPU here: nothing to check");
        return;
    }
    let src = "
#[kernel]
fn wt(i: i32, a: &mut [f64], z: &mut [f64], throw: i32) {
    a[i * 5] = -7.0;
    if i < throw {
        z[i - 100000] = 1.0;
    }
}
";
    let m = rt.load_source("lost.ofk", src).unwrap();
    for throw in [0, 48] {
        for round in 0..300 {
            let a = rt.array(&vec![1.0f64; 240]).unwrap();
            let z = rt.array(&[1.0f64; 4]).unwrap();
            let c = m
                .closure("wt", [(&a).into(), (&z).into(), throw.into()])
                .unwrap();
            let rep = match rt.par_offload(0..48, &c) {
                Ok(r) => r,
                Err(offload::OffloadError::Exceptions(e)) => {
                    assert_eq!(e.count, throw as u64, "round {round}");
                    e.report
                }
                Err(e) => panic!("round {round}: {e}"),
            };
            let got = rt.read(&a).unwrap();
            let lost: Vec<usize> = (0..48).filter(|&i| got[i * 5] != -7.0).collect();
            assert!(
                lost.is_empty(),
                "throw {throw}, round {round}: writes of {lost:?} lost\n{rep}"
            );
            assert!(
                (0..240).all(|k| k % 5 == 0 || got[k] == 1.0),
                "throw {throw}, round {round}: an element nobody wrote changed"
            );
        }
    }
}

/// Every example kernel split over every device agrees with the
/// interpreter, as in `tests/gpu.rs`'s differential suite: in equal
/// shares over the CPU and the GPUs and over the GPUs alone, and under
/// injected safepoints. Those that reach nothing but their arrays of
/// numbers and the objects they make run split, allocation and virtual
/// calls included (the others — objects captured, atomics — on one
/// device, and agree too).
/// Every example must be race-free (`order_free` on the interpreter): a
/// split's result would otherwise depend on which device wrote last.
#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn every_example_kernel_split_over_every_device_agrees_with_the_interpreter() {
    let interp = Runtime::builder()
        .workers(1)
        .device(Device::Interpreter)
        .build()
        .unwrap();
    let shape = Shape::default();
    let files = examples::examples();
    for (f, text) in &files {
        for seed in 0..3 {
            order_free(&interp, text, seed, shape)
                .unwrap_or_else(|e| panic!("{f} is not race-free: {e}"));
        }
    }
    for (cpu, inject) in [(true, false), (false, false), (true, true)] {
        let over = devices(cpu);
        let configure = |b: RuntimeBuilder| {
            if inject {
                b.inject_safepoints(3, Some(11))
            } else {
                b
            }
        };
        let d = Differ::split(&over, true, shape, &configure)
            .unwrap_or_else(|e| panic!("{NEEDS}: {e}"));
        let (mut kernels, mut split) = (0, 0);
        for (f, text) in &files {
            for seed in 0..3 {
                let c = d
                    .compare(text, seed)
                    .unwrap_or_else(|e| panic!("cpu {cpu}, injected {inject}: {f}: {e}"));
                kernels += c.kernels;
                split += c.split;
            }
        }
        eprintln!("cpu {cpu}, injected {inject}: {kernels} kernels, {split} split");
        if differ_devices(cpu) > 1 {
            // saxpy, mandelbrot, nbody, matmul, blackscholes, spin,
            // throws, and the allocating alloc, linkedlist and shapes (its
            // virtual calls too).
            assert!(
                split >= 10 * 3,
                "cpu {cpu}: only {split} of {kernels} split"
            );
        }
    }
}

/// A CPU part of a split launch marks only its arrays written on the host
/// (`crate::footprint`): a GPU launch after it that is sent every stale
/// chunk (an allocating kernel's that runs on one device) is not sent the
/// rest of the heap again. Before, each CPU part's raw image marked the
/// whole heap written, and an 8 MiB array nobody touched crossed the bus
/// after every split launch. An allocating kernel split over the devices
/// is sent only its arrays and its device edens, even as the GPUs' first
/// launch.
#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn a_split_launch_leaves_the_rest_of_the_heap_current_on_the_gpus() {
    let rt = build(split(true));
    let src = format!(
        "{SRC}
struct Cell {{
    v: i64,
}}

#[kernel]
fn boxed(i: i32, out: &mut [i64]) {{
    let c = Cell {{ v: (i as i64) * 2 }};
    out[i] = c.v;
}}

#[kernel]
fn counted(i: i32, out: &mut [i64], hits: &mut [i32]) {{
    let c = Cell {{ v: (i as i64) * 2 }};
    out[i] = c.v;
    atomic_add(&mut hits[0], 1);
}}
"
    );
    let m = rt.load_source("rest.ofk", &src).unwrap();
    let big = rt.array(&vec![1i64; 1 << 20]).unwrap();
    let out = rt.array(&vec![0i64; 4096]).unwrap();
    let hits = rt.array(&[0i32; 1]).unwrap();
    let a = rt.array(&vec![5i64; 40_000]).unwrap();
    let split_boxed = m.closure("boxed", [(&out).into()]).unwrap();
    let boxed = m
        .closure("counted", [(&out).into(), (&hits).into()])
        .unwrap();
    let bump = m
        .closure("bump", [(&a).into(), 1.into(), 3i64.into()])
        .unwrap();
    // Split, the allocating kernel is sent its array and its edens.
    let first = rt.par_offload(0..4096, &split_boxed).unwrap();
    assert!(first.split.len() >= 2, "{first}");
    assert!(first.to_device_bytes < 2 << 20, "{first}");
    // With an atomic it runs on one GPU, which is sent the whole heap.
    let first = rt.par_offload(0..4096, &boxed).unwrap();
    assert!(first.split.is_empty(), "{first}");
    assert!(first.to_device_bytes >= 8 << 20, "{first}");
    for round in 0..3 {
        let r = rt.par_offload(0..40_000, &bump).unwrap();
        assert!(r.split.len() >= 2, "{r}");
        let again = rt.par_offload(0..4096, &boxed).unwrap();
        eprintln!(
            "round {round}: {} bytes to the GPU after the split",
            again.to_device_bytes
        );
        // The split's arrays (320 KB) and the allocating kernel's own, not
        // the 8 MiB nobody wrote.
        assert!(
            again.to_device_bytes < 2 << 20,
            "round {round}: {} bytes sent after a split launch\n{r}\n{again}",
            again.to_device_bytes
        );
    }
    assert_eq!(rt.read(&big).unwrap().iter().sum::<i64>(), 1 << 20);
    let got = rt.read(&out).unwrap();
    assert!(got.iter().enumerate().all(|(i, &v)| v == 2 * i as i64));
    assert_eq!(rt.read(&hits).unwrap(), [4 * 4096]);
}

/// A kernel that reaches its arrays only at its workitems' own elements
/// (`y[i] = 2 * x[i] + y[i]`; `offload_ir::own`): split in equal shares
/// over the CPU and the GPUs, a warm launch sends each GPU part only its
/// own range's edge chunks of `y` — `x` is never written, and `y`'s other
/// parts are not its (every chunk of both arrays went to each GPU part
/// after the CPU's before: 8 MiB each) — the CPU part fetches only its own
/// range's chunks the GPUs wrote, and every launch's result is
/// exact, in equal shares and with parts by speed, which move from launch
/// to launch.
#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn a_split_kernel_of_own_elements_sends_each_gpu_part_its_own_range() {
    let src = "
#[kernel]
fn axpy(i: i32, x: &[f32], y: &mut [f32]) {
    y[i] = 2.0 * x[i] + y[i];
}
";
    let n = 1usize << 20;
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    for even in [true, false] {
        let rt = build(if even { split(true) } else { speeds(true) });
        let m = rt.load_source("axpy.ofk", src).unwrap();
        let (xa, ya) = (rt.array(&x).unwrap(), rt.array(&vec![1.0f32; n]).unwrap());
        let k = m.closure("axpy", [(&xa).into(), (&ya).into()]).unwrap();
        let mut want = vec![1.0f32; n];
        for launch in 0..6 {
            let r = rt.par_offload(0..n as i64, &k).unwrap();
            for (w, xi) in want.iter_mut().zip(&x) {
                *w += 2.0 * xi;
            }
            check_rows(&r, r.split.len());
            eprintln!(
                "equal shares {even}, launch {launch}: {} B to the devices, {} B back, {} devices",
                r.to_device_bytes,
                r.to_host_bytes,
                r.split.len()
            );
            if even && launch >= 2 {
                assert!(r.split.len() >= 3, "{r}");
                // Each GPU part is sent the chunks of `y` it shares with
                // its neighbours' parts (which they wrote), `y`'s header
                // chunk and the chunk the CPU's raw image may be writing
                // when it begins — never `x`, which nobody writes, nor the
                // chunks of `y` only it writes. Before, every chunk of
                // both arrays (128 per GPU), then every chunk of `y` while
                // the CPU's part fetched and marked whole arrays.
                let chunk = 64u64 << 10;
                for s in r.split.iter().filter(|s| s.device.starts_with("GPU")) {
                    assert!(
                        s.to_device_bytes <= 5 * chunk,
                        "launch {launch}, {}: {} B sent\n{r}",
                        s.device,
                        s.to_device_bytes
                    );
                }
                // And what comes back is those shared chunks too: the
                // CPU's part fetches only its own elements' chunks (it
                // fetched every chunk of `y` the GPUs wrote: 89 on two
                // vGPUs).
                let devices = r.split.len() as u64;
                assert!(
                    r.to_host_bytes <= 8 * devices * chunk,
                    "launch {launch}: {} B back\n{r}",
                    r.to_host_bytes
                );
            }
        }
        let got = rt.read(&ya).unwrap();
        let wrong: Vec<(usize, f32, f32)> = (0..n)
            .filter(|&i| got[i] != want[i])
            .map(|i| (i, got[i], want[i]))
            .collect();
        assert!(
            wrong.is_empty(),
            "equal shares {even}: {} elements of y wrong, the first (index, got, want): {:?}, the last: {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(4)],
            wrong.last()
        );
        assert!(rt.read(&xa).unwrap() == x, "equal shares {even}: x changed");
    }
}
