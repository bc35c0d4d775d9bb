//! The CUDA device on a real GPU. These tests need an NVIDIA GPU (sm_70 or
//! newer) with its driver, so the ordinary test run ignores them; on such a
//! machine `scripts/gpu-tests` runs them (with `--ignored`) together with
//! the CUDA benchmarks. Each test fails — never skips — when the runtime
//! cannot get the GPU.

use offload::differential::Differ;
use offload::ir::fuzzgen::{GenConfig, arbitrary_module};
use offload::ir::print_module;
use offload::reference::Rng;
use offload::{Device, Runtime, par_offload};
use std::time::{Duration, Instant};

const NEEDS_GPU: &str = "needs an NVIDIA GPU: run scripts/gpu-tests";

fn gpu() -> offload::RuntimeBuilder {
    Runtime::builder().device(Device::Cuda).strict(true)
}

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-tests"]
fn differential_random_programs_on_cuda() {
    let differ = Differ::on(Device::Cuda).unwrap_or_else(|e| panic!("{NEEDS_GPU}: {e}"));
    let mut rng = Rng::new(77);
    let (mut compared, mut compiled) = (0, 0);
    for case in 0..400 {
        let bytes: Vec<u8> = (0..4096).map(|_| rng.next_u64() as u8).collect();
        let Ok(module) = arbitrary_module(
            &mut arbitrary::Unstructured::new(&bytes),
            &GenConfig::default(),
        ) else {
            continue;
        };
        match differ.compare(&print_module(&module), rng.next_u64()) {
            Ok(c) => {
                compared += c.kernels;
                compiled += c.compiled;
            }
            Err(why) => panic!("case {case}: {why}"),
        }
    }
    eprintln!("{compared} kernels compared, {compiled} ran on the GPU");
    assert!(compared > 300);
    // Kernels with transcendentals fall back until the PTX backend has them.
    assert!(
        compiled * 10 >= compared * 6,
        "only {compiled} of {compared} on the GPU"
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-tests"]
fn exactly_once_while_the_host_raises_safepoints() {
    let rt = gpu().build().unwrap_or_else(|e| panic!("{NEEDS_GPU}: {e}"));
    let m = rt.load("spin.obc", offload::demo::SPIN_KERNEL).unwrap();
    let n = 200_000usize;
    let counts = rt.new_array::<i64>(n).unwrap();
    let c = m
        .closure("spin", [2000i32.into(), (&counts).into()])
        .unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (rep, raised) = std::thread::scope(|s| {
        let raiser = s.spawn(|| {
            let mut raised = 0;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(2));
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
        got.iter().all(|&x| x == 2000),
        "a workitem ran twice or not at all\n{rep}"
    );
    eprintln!("{raised} safepoints raised; {rep}");
    assert!(
        rep.safepoints > 0 && rep.replayed > 0,
        "no safepoint reached the kernel\n{rep}"
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-tests"]
fn tlab_refills_under_contention_from_the_full_grid() {
    // Small TLABs: every warp refills often, and the whole grid contends.
    let rt = gpu()
        .tlab_bytes(512)
        .build()
        .unwrap_or_else(|e| panic!("{NEEDS_GPU}: {e}"));
    let m = rt.load("list.obc", offload::bench::LIST_KERNEL).unwrap();
    let items = 1_000_000usize;
    let n = 8i32;
    let out = rt.new_array::<i64>(items).unwrap();
    let rep = par_offload(
        0..items as i64,
        &m.closure("list", [n.into(), (&out).into()]).unwrap(),
    )
    .unwrap();
    assert_eq!(rep.device, Device::Cuda, "{rep}");
    let got = rt.read(&out).unwrap();
    let want: Vec<i64> = (0..items as i64)
        .map(|i| offload::reference::list_sum_expected(i, n))
        .collect();
    assert_eq!(got, want, "{rep}");
    let stats = rt.verify_heap(&[&m]).unwrap();
    eprintln!("{rep}\n{stats:?}");
}

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-tests"]
fn transcendentals_match_libm_and_huge_trig_arguments_go_to_the_host() {
    // exp/log/sin/cos/pow in f32 and f64 through the PTX math library, bit
    // for bit against the host's libm; sine and cosine of huge arguments
    // deoptimize (DeviceLimit) and the host finishes them.
    let rt = gpu().build().unwrap_or_else(|e| panic!("{NEEDS_GPU}: {e}"));
    let m = rt.load("math.obc", include_str!("ptx/math.obc")).unwrap();
    let n = 200_000;
    let mut rng = Rng::new(3);
    let xs: Vec<f64> = (0..n)
        .map(|i| match i % 97 {
            0 => 1e9 * (rng.next_u64() % 1000) as f64,
            1 => f64::from_bits(rng.next_u64()),
            _ => (rng.next_u64() % 20_000) as f64 * 1e-3 - 10.0,
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
        .filter(|((_, reason), _)| *reason == offload::deopt::Reason::DeviceLimit)
        .map(|(_, n)| n)
        .sum();
    assert!(
        devlimit > 0,
        "huge arguments were not handed to the host: {r}"
    );
    eprintln!("{r}");
}

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-tests"]
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
    let rt = gpu().build().unwrap_or_else(|e| panic!("{NEEDS_GPU}: {e}"));
    let m = rt.load("storm.obc", src).unwrap();
    let n = 300_000;
    let out = rt.new_array::<i32>(n).unwrap();
    let err = par_offload(0..n as i64, &m.closure("div", [(&out).into()]).unwrap()).unwrap_err();
    let offload::OffloadError::Exceptions(e) = err else {
        panic!("{err}")
    };
    assert_eq!(e.count, n as u64, "every workitem throws exactly once");
    assert_eq!(e.report.replayed, n as u64);
    assert_eq!(e.report.device, Device::Cuda);
    eprintln!("{}", e.report);
}

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-tests"]
fn load_module_and_launch_overhead() {
    let rt = gpu().build().unwrap_or_else(|e| panic!("{NEEDS_GPU}: {e}"));
    let m = rt
        .load("nop.obc", "kernel nop(i: i64, out: i32[]) {\n ret\n}\n")
        .unwrap();
    let out = rt.new_array::<i32>(1).unwrap();
    let c = m.closure("nop", [(&out).into()]).unwrap();
    let load = rt.gpu_load_time(&c).unwrap();
    let mut times = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        par_offload(0..1, &c).unwrap();
        times.push(t.elapsed());
    }
    times.sort();
    eprintln!(
        "GPU {}: load_module {:?}; empty launch median {:?} (min {:?})",
        rt.gpu().unwrap(),
        load,
        times[times.len() / 2],
        times[0]
    );
}
