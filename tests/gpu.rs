//! The CUDA device, on a GPU: a real one, or offload's virtual GPU (the PTX
//! simulator behind a `libcuda.so` shim). The ordinary test run has neither,
//! so these tests are ignored there; `scripts/gpu-tests` runs them on
//! hardware and `scripts/gpu-tests --virtual` (which `scripts/test-all`
//! calls) on the simulator. Each test fails — never skips — when the
//! runtime cannot get a GPU. Sizes shrink on the virtual GPU, which runs
//! about 5·10^7 PTX instructions a second.

use offload::deopt::Reason;
use offload::ir::print_module;
use offload::{Combine, Device, OffloadError, Runtime, RuntimeBuilder, par_offload};
use offload_jit::Injection;
use offload_testkit::differential::Differ;
use offload_testkit::reference::Rng;
use std::time::{Duration, Instant};

#[path = "common/programs.rs"]
mod programs;

#[path = "common/knob.rs"]
mod knob;
use knob::knob;

#[path = "common/stress.rs"]
mod stress;

#[path = "common/examples.rs"]
mod examples;

#[path = "common/dispatch.rs"]
mod dispatch;

#[path = "common/ranges.rs"]
mod ranges;

#[path = "common/reduce.rs"]
mod reduce;

#[path = "common/summed.rs"]
mod summed;

const NEEDS_GPU: &str = "needs a GPU, real or virtual: run scripts/gpu-tests";

fn gpu() -> RuntimeBuilder {
    Runtime::builder().device(Device::Cuda).strict(true)
}

fn build(b: RuntimeBuilder) -> Runtime {
    b.build().unwrap_or_else(|e| panic!("{NEEDS_GPU}: {e}"))
}

/// Whether the runtime's GPU is the simulator.
fn is_virtual(rt: &Runtime) -> bool {
    rt.gpu_is_virtual()
}

/// `real` on hardware, `virt` on the simulator.
fn size(rt: &Runtime, real: usize, virt: usize) -> usize {
    if is_virtual(rt) { virt } else { real }
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn differential_random_programs_on_cuda() {
    // OFFLOAD_GPU_CASES programs from seed OFFLOAD_GPU_SEED: a failure names
    // its case, and the same seed replays it.
    let seed = knob("OFFLOAD_GPU_SEED", 77);
    let cases = knob("OFFLOAD_GPU_CASES", 400);
    let new_differ = || Differ::on(Device::Cuda).unwrap_or_else(|e| panic!("{NEEDS_GPU}: {e}"));
    let mut differ = new_differ();
    let mut rng = Rng::new(seed);
    let (mut compared, mut compiled) = (0, 0);
    for case in 0..cases {
        // Fresh runtimes now and then: nothing collects the arrays each
        // case leaves in the heap.
        if case % 25 == 24 {
            differ = new_differ();
        }
        let Some(module) = programs::generate(&mut rng) else {
            continue;
        };
        match differ.compare(&print_module(&module), rng.next_u64()) {
            Ok(c) => {
                compared += c.kernels;
                compiled += c.compiled;
            }
            Err(why) => panic!("seed {seed}, case {case}: {why}\n{}", print_module(&module)),
        }
    }
    eprintln!("seed {seed}: {compared} kernels compared, {compiled} ran on the GPU");
    assert!(
        compared as u64 >= 300 * cases / 400,
        "only {compared} kernels compared"
    );
    // Every kernel the generator makes compiles to PTX.
    assert_eq!(
        compiled, compared,
        "only {compiled} of {compared} on the GPU"
    );
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn every_example_kernel_gives_the_interpreters_heap_and_exceptions() {
    let differ = Differ::on(Device::Cuda).unwrap_or_else(|e| panic!("{NEEDS_GPU}: {e}"));
    let (mut kernels, mut compiled) = (0, 0);
    for (i, (f, text)) in examples::examples().iter().enumerate() {
        // Several argument draws per file: arrays of random lengths make
        // some launches throw, and the exceptions must agree too.
        for s in 0..3u64 {
            let c = differ
                .compare(text, 1000 * i as u64 + s)
                .unwrap_or_else(|why| panic!("{f}: {why}"));
            kernels += c.kernels;
            compiled += c.compiled;
        }
    }
    eprintln!("{kernels} example kernel launches compared, {compiled} on the GPU");
    assert!(kernels >= 30, "only {kernels}");
    assert_eq!(compiled, kernels, "every example kernel runs on the GPU");
}

/// `inc` with deopts forced at `site_bci` for workitems ≡ 3 (mod
/// `modulus`): every cell is 1 and exactly the forced workitems replay.
fn injected_inc(site_bci: u32, modulus: i64) -> offload::LaunchReport {
    let rt = build(gpu().inject(Injection {
        site_bci,
        modulus,
        remainder: 3 % modulus,
        reason: None,
    }));
    let n = size(&rt, 200_000, 6_000);
    let m = rt
        .load("inc.obc", offload_testkit::kernels::INC_KERNEL)
        .unwrap();
    let out = rt.new_array::<i32>(n).unwrap();
    let r = par_offload(0..n as i64, m.closure("inc", [(&out).into()]).unwrap()).unwrap();
    assert_eq!(r.device, Device::Cuda, "{r}");
    let got = rt.read(&out).unwrap();
    let wrong: Vec<usize> = (0..n).filter(|&i| got[i] != 1).take(5).collect();
    assert!(
        wrong.is_empty(),
        "cells not exactly 1 with deopts at bci {site_bci}: {wrong:?}\n{r}"
    );
    assert_eq!(
        r.replayed,
        (0..n as i64).filter(|w| w % modulus == 3 % modulus).count() as u64,
        "{r}"
    );
    assert_eq!(r.completed, n as u64);
    // The save area holds one record per slot: a launch replays at most
    // that many, however many workitems deopt.
    assert!(
        r.replayed <= r.launches * r.workers as u64,
        "{} records from {} launches of {} slots",
        r.replayed,
        r.launches,
        r.workers
    );
    r
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn exactly_once_under_injected_deopts_at_every_site() {
    // Sites of `inc`: the entry (0), the load of out[j] (7), the store (10).
    for site in [0, 7, 10] {
        let r = injected_inc(site, 7);
        let reason = if site == 0 {
            Reason::Safepoint
        } else {
            Reason::NullCheck
        };
        assert!(r.deopts.contains_key(&(site, reason)), "{:?}", r.deopts);
    }
    // A deopt storm: every workitem deopts, one record per slot per launch.
    let r = injected_inc(10, 1);
    assert_eq!(r.on_device, 0, "{r}");
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn exactly_once_under_random_deopts_safepoints_and_refill_failures() {
    let probe = build(gpu());
    let sites = stress::sites(&probe, offload_testkit::kernels::STRESS_KERNEL);
    let cases = size(&probe, 24, 10) as u64;
    drop(probe);
    let mut rng = Rng::new(knob("OFFLOAD_GPU_SEED", 2024));
    for case in 0..cases {
        let b = gpu()
            .tlab_bytes(256 + 64 * rng.below(8) as u32)
            .reclaim(false);
        // On the GPU, `fail_refills(first, _)` gives the device an eden of
        // `first` TLABs: every refill after those fails.
        let (b, mut what) = stress::random_faults(&mut rng, b, &sites, |rng| (1 + rng.below(5), 1));
        what.insert(0, format!("case {case}"));
        let rt = build(b);
        let n = size(&rt, 20_000, 1_500 + rng.below(1_500) as usize);
        let m = 1 + rng.below(12) as i32;
        let r = stress::run(&rt, n, m, &what);
        assert_eq!(r.device, Device::Cuda, "{what:?}: {r}");
        if what.iter().any(|w| w.starts_with("refills fail")) {
            assert!(
                r.deopts
                    .keys()
                    .any(|&(_, why)| why == Reason::AllocationFailure),
                "{what:?}: no allocation failure: {r}"
            );
        }
    }
}

/// `spin` on the GPU while another thread raises a safepoint every 2 ms:
/// every workitem runs exactly once. Returns the report and the safepoints
/// raised.
/// `pause` between one safepoint's end and the next request.
fn spin_under_host_safepoints(b: RuntimeBuilder, pause: Duration) -> (offload::LaunchReport, u64) {
    let rt = build(b);
    let m = rt
        .load("spin.obc", offload_testkit::kernels::SPIN_KERNEL)
        .unwrap();
    let n = size(&rt, 200_000, 6_000);
    let iters = size(&rt, 2000, 300) as i32;
    let counts = rt.new_array::<i64>(n).unwrap();
    let c = m.closure("spin", [iters.into(), (&counts).into()]).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (rep, raised) = std::thread::scope(|s| {
        let raiser = s.spawn(|| {
            let mut raised = 0;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                std::thread::sleep(pause);
                rt.safepoint(|_| ());
                raised += 1;
            }
            raised
        });
        let rep = par_offload(0..n as i64, &c).unwrap();
        stop.store(true, std::sync::atomic::Ordering::Release);
        (rep, raiser.join().unwrap())
    });
    assert_eq!(rep.device, Device::Cuda, "{rep}");
    let got = rt.read(&counts).unwrap();
    assert!(
        got.iter().all(|&x| x == i64::from(iters)),
        "a workitem ran twice or not at all\n{rep}"
    );
    // The figures add up, relaunches included: every workitem ran to its
    // end once, on the device (resumed there or not) or in a replay.
    assert_eq!(rep.on_device + rep.replayed, n as u64, "{rep}");
    assert_eq!(rep.completed, n as u64, "{rep}");
    eprintln!("{raised} safepoints raised; {rep}");
    assert!(rep.safepoints > 0, "no safepoint reached the kernel\n{rep}");
    (rep, raised)
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn exactly_once_while_the_host_raises_safepoints_and_slots_wait_in_place() {
    let (rep, _) = spin_under_host_safepoints(gpu(), Duration::from_millis(2));
    // The slots waited at their polls: nothing stopped, nothing relaunched.
    assert!(rep.waits > 0, "{rep}");
    assert_eq!(rep.launches, 1, "{rep}");
    assert_eq!(rep.deopts.values().sum::<u64>(), 0, "{rep}");
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn exactly_once_while_the_host_raises_safepoints_and_slots_leave() {
    let (rep, _) =
        spin_under_host_safepoints(gpu().gpu_wait_in_place(false), Duration::from_millis(2));
    assert_eq!(rep.waits, 0, "{rep}");
    assert!(rep.resumed > 0, "no safepoint stopped the kernel\n{rep}");
    // Every stopped workitem is resumed on the device by a relaunch.
    assert_eq!(rep.replayed, 0, "{rep}");
    assert!(
        rep.deopts.keys().any(|&(_, why)| why == Reason::Safepoint),
        "{rep}"
    );
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn a_host_raising_safepoints_back_to_back_does_not_starve_the_kernel() {
    // With no pause between requests, a relaunch (or a release from a
    // wait) met the next request at once: on an H100 the launch never
    // finished. Each launch now runs as long as the last safepoint cost
    // before honouring the next (`src/cuda/mod.rs`, "Fairness").
    for b in [gpu(), gpu().gpu_wait_in_place(false)] {
        let (rep, raised) = spin_under_host_safepoints(b, Duration::ZERO);
        assert!(rep.safepoints <= raised, "{raised} raised\n{rep}");
    }
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn tlab_refills_under_contention_one_refiller_per_overflow() {
    // Tiny TLABs shared by two warps each: the refill protocol is contended
    // on every few allocations.
    let tlab = 256u32;
    let rt = build(
        gpu()
            .tlab_bytes(tlab)
            .alloc_policy(offload::heap::AllocPolicy::SharedTlab { group: 2 })
            .reclaim(false),
    );
    let m = rt
        .load(
            "linkedlist.obc",
            offload_testkit::kernels::example("linkedlist.obc"),
        )
        .unwrap();
    let items = size(&rt, 1_000_000, 8_000);
    let n = 8i32;
    let out = rt.new_array::<i64>(items).unwrap();
    let before = rt.heap().used();
    let rep = par_offload(
        0..items as i64,
        m.closure("linked_list", [n.into(), (&out).into()]).unwrap(),
    )
    .unwrap();
    assert_eq!(rep.device, Device::Cuda, "{rep}");
    let got = rt.read(&out).unwrap();
    let want: Vec<i64> = (0..items as i64)
        .map(|i| offload_testkit::reference::list_sum_expected(i, n))
        .collect();
    assert_eq!(got, want, "{rep}");
    // No two objects overlap and every gap is a filler: the heap parses,
    // object by object.
    let stats = rt.verify_heap(&[&m]).unwrap();
    assert!(stats.objects >= items as u64 * n as u64, "{stats:?}");
    // Exactly one refill per TLAB carved: a second refiller for one
    // overflow would carve a TLAB that no count includes (or lose one,
    // which the heap walk would find unparsable). The count includes the
    // host's refills (replays after an exhausted eden), and a host refill
    // at the heap's limit takes the rest below it when that holds the
    // object (`Heap::carve_region`'s minimum) — one short TLAB per limit
    // met. On an H100 at the full size, 874,456 refills of 256 bytes came
    // with 3 words fewer carved than 256 each: one such TLAB, the heap
    // having grown 3 times (docs/GPU-RUNS.md).
    let grown = rt.heap().used() - before;
    assert!(rep.alloc.refills > 0, "{rep}");
    let short = (rep.alloc.heap_grows + 1) * u64::from(tlab - 8);
    assert!(
        rep.alloc.refills * u64::from(tlab) <= grown + short,
        "{} refills of {tlab} bytes, {grown} bytes carved, {} heap growths",
        rep.alloc.refills,
        rep.alloc.heap_grows
    );
    eprintln!("{rep}");
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn eden_exhaustion_fails_the_refill_and_the_host_replays() {
    // A device eden of two TLABs: the third refill finds it exhausted,
    // publishes FAILED, and every allocator waiting on that TLAB deopts
    // with AllocationFailure; the host replays them.
    let rt = build(gpu().tlab_bytes(512).fail_refills(2, 1).reclaim(false));
    let m = rt
        .load(
            "linkedlist.obc",
            offload_testkit::kernels::example("linkedlist.obc"),
        )
        .unwrap();
    let items = size(&rt, 100_000, 4_000);
    let out = rt.new_array::<i64>(items).unwrap();
    let rep = par_offload(
        0..items as i64,
        m.closure("linked_list", [8i32.into(), (&out).into()])
            .unwrap(),
    )
    .unwrap();
    let want: Vec<i64> = (0..items as i64)
        .map(|i| offload_testkit::reference::list_sum_expected(i, 8))
        .collect();
    assert_eq!(rt.read(&out).unwrap(), want, "{rep}");
    let failures: u64 = rep
        .deopts
        .iter()
        .filter(|((_, why), _)| *why == Reason::AllocationFailure)
        .map(|(_, n)| n)
        .sum();
    assert!(failures > 0 && rep.alloc.exhausted > 0, "{rep}");
    rt.verify_heap(&[&m]).unwrap();
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn a_full_heap_is_collected_between_relaunches() {
    // Lists of 64 nodes per workitem, several MiB in all through a 2 MiB
    // heap: the device eden runs out, its allocators deopt with
    // AllocationFailure, and the host collects before replaying them and
    // when the next device eden does not fit (save-area records and
    // captures are roots); the launch completes with the exact answer.
    let rt = build(
        gpu()
            .tlab_bytes(1024)
            .initial_heap(1 << 20)
            .max_heap(2 << 20)
            // Few slots: 64-node lists being built in each of an H100's
            // 168,960 (or even 4,096) slots do not fit in 2 MiB, the device
            // completes nothing, and the host replays all of it (22 s).
            .device_slots(256)
            .gc(offload::GcPolicy {
                stress: 3,
                collect_before_replays: true,
                verify: true,
                ..offload::GcPolicy::default()
            }),
    );
    let m = rt
        .load(
            "linkedlist.obc",
            offload_testkit::kernels::example("linkedlist.obc"),
        )
        .unwrap();
    // 20,000 on hardware: 200,000 lists of 64 nodes through 2 MiB (with
    // a verified collection at every third failure) kept an H100's host
    // replaying for minutes.
    let items = size(&rt, 20_000, 3_000);
    let out = rt.new_array::<i64>(items).unwrap();
    let rep = par_offload(
        0..items as i64,
        m.closure("linked_list", [64i32.into(), (&out).into()])
            .unwrap(),
    )
    .unwrap();
    let want: Vec<i64> = (0..items as i64)
        .map(|i| offload_testkit::reference::list_sum_expected(i, 64))
        .collect();
    assert_eq!(rt.read(&out).unwrap(), want, "{rep}");
    assert!(rep.gc.collections > 0, "{rep}");
    rt.verify_heap(&[&m]).unwrap();
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn transcendentals_match_libm_and_huge_trig_arguments_go_to_the_host() {
    // exp/log/sin/cos/pow in f32 and f64 through the PTX math library, bit
    // for bit against the host's libm; sine and cosine of huge arguments
    // deoptimize (DeviceLimit) and the host finishes them.
    let rt = build(gpu());
    let m = rt
        .load("math.obc", include_str!("files/lower_math.obc"))
        .unwrap();
    let n = size(&rt, 200_000, 3_000);
    let mut rng = Rng::new(3);
    let xs: Vec<f64> = (0..n)
        .map(|i| match i % 97 {
            0 => 1e9 * (rng.below(1000)) as f64,
            1 => f64::from_bits(rng.next_u64()),
            _ => (rng.below(20_000)) as f64 * 1e-3 - 10.0,
        })
        .collect();
    let xf: Vec<f32> = xs.iter().map(|&x| x as f32).collect();
    let (a, out) = (rt.array(&xs).unwrap(), rt.new_array::<f64>(n).unwrap());
    let (b, outf) = (rt.array(&xf).unwrap(), rt.new_array::<f32>(n).unwrap());
    let c = m
        .closure(
            "trig",
            [(&a).into(), (&out).into(), (&b).into(), (&outf).into()],
        )
        .unwrap();
    let r = par_offload(0..n as i64, &c).unwrap();
    assert_eq!(r.device, Device::Cuda, "{r}");
    let (od, of) = (rt.read(&out).unwrap(), rt.read(&outf).unwrap());
    for i in 0..n {
        let (x, y) = (xs[i], xf[i]);
        let wd = libm::pow(libm::exp(libm::sin(x) + libm::cos(x)), libm::log(x.abs()));
        let wf = libm::powf(
            libm::expf(libm::sinf(y) * libm::cosf(y)),
            libm::logf(y.abs()),
        );
        assert!(
            od[i].to_bits() == wd.to_bits() || (od[i].is_nan() && wd.is_nan()),
            "f64 lane {i}: x = {x:e}: {:e} vs libm {wd:e}",
            od[i]
        );
        assert!(
            of[i].to_bits() == wf.to_bits() || (of[i].is_nan() && wf.is_nan()),
            "f32 lane {i}: x = {y:e}: {:e} vs libm {wf:e}",
            of[i]
        );
    }
    let devlimit: u64 = r
        .deopts
        .iter()
        .filter(|((_, reason), _)| *reason == Reason::DeviceLimit)
        .map(|(_, n)| n)
        .sum();
    assert!(
        devlimit > 0,
        "huge arguments were not handed to the host: {r}"
    );
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn deopt_storm_every_workitem_deopts() {
    let src = "
kernel div(i: i64, out: i32[]) {
    load out
    load i
    i64.to_i32
    i32.const 7
    i32.const 0
    i32.div
    i32.astore
    ret
}
";
    let rt = build(gpu());
    let m = rt.load("storm.obc", src).unwrap();
    let n = size(&rt, 300_000, 5_000);
    let out = rt.new_array::<i32>(n).unwrap();
    let err = par_offload(0..n as i64, m.closure("div", [(&out).into()]).unwrap()).unwrap_err();
    let OffloadError::Exceptions(e) = err else {
        panic!("{err}")
    };
    assert_eq!(e.count, n as u64, "every workitem throws exactly once");
    assert_eq!(e.report.replayed, n as u64);
    assert_eq!(e.report.device, Device::Cuda);
    // One record per slot per launch: the save area never holds more.
    assert!(
        e.report.launches * e.report.workers as u64 >= n as u64,
        "{}",
        e.report
    );
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn a_kernel_that_stores_outside_the_heap_is_an_error_naming_its_ptx_line() {
    // The kernel's PTX with one store 2 GiB below the heap image (the image
    // starts a little into its buffer, at a chunk boundary): the GPU (the
    // virtual one names the line) reports an illegal address, and the
    // runtime returns an error instead of panicking.
    let rt = build(gpu().rewrite_ptx(|ptx| {
        let at = "ld.param.u64 %heap, [p_ctx+0];";
        assert!(ptx.contains(at), "the heap's load moved:\n{ptx}");
        ptx.replacen(
            at,
            &format!("{at}\n\tst.u32 [%heap+-2147483648], 0; // corrupted"),
            1,
        )
    }));
    let m = rt
        .load("inc.obc", offload_testkit::kernels::INC_KERNEL)
        .unwrap();
    let out = rt.new_array::<i32>(100).unwrap();
    let err = par_offload(0..100, m.closure("inc", [(&out).into()]).unwrap()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("illegal") && msg.contains("CUDA_ERROR_ILLEGAL_ADDRESS"),
        "{msg}"
    );
    if is_virtual(&rt) {
        assert!(msg.contains("st.u32 [%heap+-2147483648], 0;"), "{msg}");
        assert!(msg.contains("PTX line") && msg.contains("thread"), "{msg}");
    }
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn load_module_and_launch_overhead() {
    let rt = build(gpu());
    let m = rt
        .load("nop.obc", "kernel nop(i: i64, out: i32[]) {\n ret\n}\n")
        .unwrap();
    let out = rt.new_array::<i32>(1).unwrap();
    let c = m.closure("nop", [(&out).into()]).unwrap();
    let load = rt.gpu_load_time(&c).unwrap();
    let mut times = Vec::new();
    for _ in 0..size(&rt, 50, 5) {
        let t = Instant::now();
        par_offload(0..1, &c).unwrap();
        times.push(t.elapsed());
    }
    times.sort();
    eprintln!(
        "GPU {}: load_module {:?}; empty launch median {:?} (min {:?}){}",
        rt.gpu().unwrap(),
        load,
        times[times.len() / 2],
        times[0],
        if is_virtual(&rt) {
            " (simulated: says nothing about a GPU)"
        } else {
            ""
        }
    );
}

/// Injected random safepoints come at the rate asked for on the GPU too:
/// each slot's stream is kept in device memory across relaunches (every
/// injected deopt ends the slot's run), not restarted.
#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn injected_random_safepoints_come_at_the_rate_asked_for() {
    let probe = build(gpu());
    let n = size(&probe, 20_000, 4_000) as i64;
    drop(probe);
    for (every, seed) in [(50u64, 1u64), (50, 2), (4, 9)] {
        let rt = build(gpu().inject_safepoints(every, Some(seed)));
        stress::check_safepoint_rate(&rt, n, every, seed);
    }
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn virtual_calls_find_classes_from_pages_on_the_gpu() {
    // Host objects on pages of their class, kernel objects on mixed pages
    // (the header under a guard), with dispatch by address on and off.
    for by_address in [true, false] {
        let rt = build(gpu().dispatch_by_address(by_address));
        let n = size(&rt, 3000, 600);
        dispatch::check(&rt, n, &format!("cuda, by address {by_address}"));
    }
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn two_and_three_dimensional_launches_match_rust_on_the_gpu() {
    let rt = build(gpu());
    let (h, w) = if is_virtual(&rt) {
        (13, 11)
    } else {
        (370, 230)
    };
    ranges::check(&rt, h, w, "cuda");
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn a_launch_allocates_on_pages_of_each_kind_on_the_gpu() {
    // The device eden's pages carry the kernel's one kind's class; with
    // several kinds, the device tags the pages it carves for each class
    // and the host takes the tags back.
    let rt = build(gpu());
    let n = size(&rt, 3000, 600);
    dispatch::check_kinds(&rt, n, "cuda");
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn the_dispatch_workloads_match_rust_on_the_gpu() {
    // The ray caster and the particles against their trait-object
    // references, bit for bit, with dispatch by address on and off.
    use offload_testkit::scenes;
    for by_address in [true, false] {
        let rt = build(gpu().dispatch_by_address(by_address));
        let (w, h) = (size(&rt, 128, 24) as i32, size(&rt, 96, 16) as i32);
        let specs = scenes::scene(size(&rt, 2000, 200), 5);
        let rep = scenes::check_raycast(&rt, w, h, &specs)
            .unwrap_or_else(|e| panic!("raycast, by address {by_address}: {e}"));
        assert_eq!(rep.device, Device::Cuda, "{rep}");
        // Every pixel looks up the class of every shape once; host
        // objects lie on pages of their class, so no lookup by address
        // loads a header.
        let lookups = (w * h) as u64 * specs.len() as u64;
        check_dispatches(&rep, lookups..=lookups, by_address);
        let pop = scenes::population(size(&rt, 100_000, 2000), 9);
        let steps = 8;
        let rep = scenes::check_particles(&rt, &pop, steps, 0.01)
            .unwrap_or_else(|e| panic!("particles, by address {by_address}: {e}"));
        assert_eq!(rep.device, Device::Cuda, "{rep}");
        let n = pop.len() as u64;
        check_dispatches(&rep, n..=n * steps as u64, by_address);
    }
}

/// On the virtual GPU, the report counts the launch's class lookups (in
/// `lookups`, when no workitem deoptimized): all by address, or all
/// loading the header. Elsewhere it counts none.
fn check_dispatches(
    rep: &offload::LaunchReport,
    lookups: std::ops::RangeInclusive<u64>,
    by_address: bool,
) {
    let Some(d) = rep.dispatch else {
        assert!(
            offload::vgpu::now().is_none(),
            "the virtual GPU counts dispatches: {rep}"
        );
        return;
    };
    assert_eq!((rep.replayed, rep.resumed), (0, 0), "{rep}");
    assert!(
        lookups.contains(&d.lookups),
        "{:?} lookups, want {lookups:?}: {rep}",
        d.lookups
    );
    let want_header = if by_address { 0 } else { d.lookups };
    assert_eq!(d.header_loads, want_header, "{rep}");
    assert!(
        rep.to_string()
            .contains(&format!("{} class lookups", d.lookups)),
        "{rep}"
    );
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn reductions_on_the_cuda_device_give_the_cpus_bits() {
    // Every type and combine, 2-D, sub-ranges, empty ranges, exceptions,
    // the refusals, and reductions in flight.
    let rt = build(gpu());
    let n = size(&rt, 1 << 20, 10_007);
    let bits = reduce::check(&rt, n, "cuda");
    let cpu = Runtime::builder()
        .device(Device::Cpu)
        .workers(2)
        .build()
        .unwrap();
    assert_eq!(bits, reduce::check(&cpu, n, "cpu"));
    reduce::check_in_flight(&rt, n, "cuda, in flight");
    // The warps' float min and max: signed zeros ordered, the leftmost
    // NaN kept with its payload, as the CPU's.
    let mut v = reduce::awkward(4096, 5);
    for (i, x) in [(3, -0.0), (40, 0.0), (77, -0.0)] {
        v[i] = x;
    }
    let m = rt.load_source("reduce.ofk", reduce::SRC).unwrap();
    let mc = cpu.load_source("reduce.ofk", reduce::SRC).unwrap();
    for nans in [
        vec![],
        vec![
            (700, 0x7fc0_0007u32),
            (70, 0x7fc0_0003),
            (2000, 0xffc0_0009),
        ],
    ] {
        let mut v = v.clone();
        for &(i, b) in &nans {
            v[i] = f32::from_bits(b);
        }
        for c in [Combine::Min, Combine::Max] {
            let (a, ac) = (rt.array(&v).unwrap(), cpu.array(&v).unwrap());
            let get = m.closure("get", [(&a).into()]).unwrap();
            let getc = mc.closure("get", [(&ac).into()]).unwrap();
            let g = rt.par_reduce::<f32>(0..4096, &get, c).unwrap().value;
            let want = cpu.par_reduce::<f32>(0..4096, &getc, c).unwrap().value;
            assert_eq!(g.to_bits(), want.to_bits(), "{c:?}, NaNs {nans:?}");
        }
    }
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn gpu_reductions_count_deopted_and_stopped_workitems_once() {
    let probe = Runtime::builder()
        .device(Device::Interpreter)
        .build()
        .unwrap();
    let m = probe.load_source("reduce.ofk", reduce::SRC).unwrap();
    let k = m.program().verified().func_named("squares").unwrap();
    let sites = m.program().analysis(k).unwrap().sites.clone();
    // Injected deopts at the first and the last site: the deopted lanes
    // leave their warps, whose other lanes' values come back as leaves;
    // the device resumes the records it lands at, the host replays the
    // rest.
    for site in [sites[0].bci, sites[sites.len() - 1].bci] {
        let rt = build(gpu().inject(Injection {
            site_bci: site,
            modulus: 61,
            remainder: 5,
            reason: None,
        }));
        let n = size(&rt, 1 << 20, 20_011);
        let what = format!("cuda, deopts at {site}");
        let r = reduce::squares_checked(&rt, n, &what);
        assert!(r.replayed + r.resumed >= (n / 61) as u64, "{what}: {r}");
    }
    // Injected safepoints: every request stops a reducing kernel.
    for seed in [None, Some(17)] {
        let rt = build(gpu().inject_safepoints(5, seed));
        let what = format!("cuda, safepoints, seed {seed:?}");
        let n = size(&rt, 1 << 20, 30_001);
        let r = reduce::squares_checked(&rt, n, &what);
        assert!(r.replayed + r.resumed + r.never_ran > 0, "{what}: {r}");
    }
    // Collections during the launch (a kernel that allocates).
    let rt = build(gpu().reclaim(false).max_heap(8 << 20));
    let m = rt.load_source("reduce.ofk", reduce::SRC).unwrap();
    let n: i64 = size(&rt, 400_000, 100_000) as i64;
    let c = m.closure("churn", [3i64.into()]).unwrap();
    let got = rt.par_reduce::<i64>(0..n, &c, Combine::Sum).unwrap();
    assert!(got.report.gc.collections >= 1, "{}", got.report);
    assert_eq!(got.value, (0..n).map(|i| 3 * i).sum::<i64>());
    let max = rt.par_reduce::<i64>(0..n, &c, Combine::Max).unwrap().value;
    assert_eq!(max, 3 * (n - 1));
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn a_reduction_on_the_cuda_device_runs_there_with_the_trees_value() {
    // Warps combine tiles of 32 positions with shuffles; the range's tail
    // comes back as leaves; the value is the combine tree's, bit for bit.
    let rt = build(gpu().strict(true));
    let m = rt.load_source("reduce.ofk", reduce::SRC).unwrap();
    for n in [1000usize, 4099, 31, 0] {
        let x = reduce::awkward(n, 7);
        let y = reduce::awkward(n, 99);
        let (xa, ya) = (rt.array(&x).unwrap(), rt.array(&y).unwrap());
        let dot = m.closure("dot", [(&xa).into(), (&ya).into()]).unwrap();
        let r = rt
            .par_reduce::<f32>(0..n as i64, &dot, Combine::Sum)
            .unwrap();
        let prods: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a * b).collect();
        let want = reduce::tree(&prods, &|a, b| a + b).unwrap_or(0.0);
        assert_eq!(r.value.to_bits(), want.to_bits(), "n = {n}");
        assert_eq!(r.report.device, Device::Cuda, "{}", r.report);
        assert!(r.report.fallback.is_none(), "{}", r.report);
        // The host joined a node per full tile and a leaf per workitem of
        // the tail: no warp fell back to leaves.
        let joined = r.report.reduction.as_ref().map_or(0, |r| r.joined);
        assert_eq!(joined as usize, n / 32 + n % 32, "n = {n}");
    }
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn histograms_summed_into_per_block_copies_are_exact() {
    // Per-block copies on the GPU: the counts exact (with the array's old
    // contents, i64 bins, a 2-D range, under a collection forced between
    // runs by a safepoint, the refusals), and on the virtual GPU the
    // longest chain of atomics on one address shorter than with every
    // workitem adding to the array itself.
    let rt = build(gpu());
    let n = size(&rt, 1 << 22, 60_000);
    summed::check(&rt, n, "cuda");
    let m = rt.load_source("summed.ofk", summed::SRC).unwrap();
    let d = summed::data(n, 21);
    let data = rt.array(&d).unwrap();
    let bins = rt.new_array::<i32>(256).unwrap();
    let plain = m.closure("hist", [(&data).into(), (&bins).into()]).unwrap();
    let summed_hist = plain.clone().summed("bins").unwrap();
    let mut chains = Vec::new();
    for c in [&plain, &summed_hist] {
        par_offload(0..n as i64, c).unwrap();
        let counted = offload::vgpu::reset();
        par_offload(0..n as i64, c).unwrap();
        if counted {
            let k = offload::vgpu::counters().unwrap_or_default();
            chains.push(k.get("atomic_chain").copied().unwrap_or(0));
        }
    }
    let mut want = summed::counted(&d, &[0; 256]);
    for _ in 0..3 {
        want = summed::counted(&d, &want);
    }
    assert_eq!(rt.read(&bins).unwrap(), want);
    if let [plain, by_block] = chains[..] {
        // Three quarters of the workitems fall in bins 0..3; with a copy
        // per block, a bin's chain is its block's share (the virtual GPU
        // runs this launch in 4 blocks: 3,880 against 15,236).
        assert!(plain as usize >= n / 5, "{plain}");
        assert!(by_block * 3 <= plain, "{by_block} vs {plain}");
    }
    // Safepoints raised while the kernel runs: the copies hold what the
    // stopped runs added, the collection moves them.
    let again = rt.new_array::<i64>(64).unwrap();
    let w = m
        .closure("weighted", [(&data).into(), (&again).into()])
        .unwrap()
        .summed("bins")
        .unwrap();
    std::thread::scope(|s| {
        let launch = s.spawn(|| par_offload(0..n as i64, &w).unwrap());
        while !launch.is_finished() {
            rt.collect().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        launch.join().unwrap();
    });
    assert_eq!(rt.read(&again).unwrap(), summed::weighted(&d, &[0; 64]));
    // Injected deopts and safepoints: workitems resumed on the device or
    // finished by the interpreter add once, to some copy.
    let probe = Runtime::builder()
        .device(Device::Interpreter)
        .build()
        .unwrap();
    let pm = probe.load_source("summed.ofk", summed::SRC).unwrap();
    let k = pm.program().verified().func_named("weighted").unwrap();
    let sites = pm.program().analysis(k).unwrap().sites.clone();
    for (site, safepoints) in [(sites[0].bci, false), (sites[sites.len() / 2].bci, true)] {
        let mut b = gpu().inject(Injection {
            site_bci: site,
            modulus: 5,
            remainder: 2,
            reason: None,
        });
        if safepoints {
            b = b.inject_safepoints(3, Some(11));
        }
        let rt = build(b);
        let m = rt.load_source("summed.ofk", summed::SRC).unwrap();
        let data = rt.array(&d).unwrap();
        let bins = rt.new_array::<i64>(64).unwrap();
        let w = m
            .closure("weighted", [(&data).into(), (&bins).into()])
            .unwrap()
            .summed("bins")
            .unwrap();
        let r = par_offload(0..n as i64, &w).unwrap();
        assert!(r.replayed + r.resumed >= n as u64 / 5, "site {site}: {r}");
        assert_eq!(
            rt.read(&bins).unwrap(),
            summed::weighted(&d, &[0; 64]),
            "site {site}, safepoints {safepoints}: {r}"
        );
    }
}
