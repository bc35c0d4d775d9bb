//! offload against native Rust on the example kernels, in the same run:
//! native sequential, native rayon, and `par_offload` on the interpreter and
//! on the CPU JIT device, each with one worker and with every core. Allocation kernels also
//! compare against `Box::new` on rayon and a per-thread bump allocator. The
//! protocol's costs on the CPU device — deopt rates, safepoint polls,
//! compile latency — have groups of their own (`protocol`).
//!
//! `cargo bench --bench interp`, then `python3 scripts/bench-ratios.py` for the
//! ratio table that goes into BENCHMARKS.md.

use criterion::{Criterion, criterion_group, criterion_main};
use offload::{Arg, Device, Runtime, par_offload};
use offload_testkit::kernels::example;
use offload_testkit::reference as native;
use rayon::prelude::*;
use std::hint::black_box;
use std::time::Duration;

fn runtimes() -> Vec<(&'static str, Runtime)> {
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rt = |workers, device| {
        Runtime::builder()
            .workers(workers)
            .device(device)
            .build()
            .unwrap()
    };
    vec![
        ("interp_1", rt(1, Device::Interpreter)),
        ("interp_all", rt(all, Device::Interpreter)),
        ("cpu_1", rt(1, Device::Cpu)),
        ("cpu_all", rt(all, Device::Cpu)),
    ]
}

fn offload_bench(
    c: &mut Criterion,
    group: &str,
    file: &str,
    kernel: &str,
    n: i64,
    args: impl Fn(&Runtime) -> Vec<Arg>,
) {
    let mut g = c.benchmark_group(group);
    for (name, rt) in runtimes() {
        let m = rt.load(file, example(file)).unwrap();
        let cl = m.closure(kernel, args(&rt)).unwrap();
        g.bench_function(name, |b| b.iter(|| par_offload(0..n, &cl).unwrap()));
    }
    g.finish();
}

fn compute(c: &mut Criterion) {
    // saxpy
    let n = 1 << 20;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut y = vec![1.0f32; n];
    let mut g = c.benchmark_group("saxpy");
    g.bench_function("native_seq", |b| {
        b.iter(|| native::saxpy(2.0, black_box(&x), &mut y))
    });
    g.bench_function("native_rayon", |b| {
        b.iter(|| native::saxpy_par(2.0, black_box(&x), &mut y))
    });
    g.finish();
    offload_bench(c, "saxpy", "saxpy.obc", "saxpy", n as i64, |rt| {
        vec![
            2.0f32.into(),
            (&rt.array(&x).unwrap()).into(),
            (&rt.array(&vec![1.0f32; n]).unwrap()).into(),
        ]
    });

    // mandelbrot
    let (w, h, it) = (256, 256, 256);
    let mut img = vec![0; (w * h) as usize];
    let mut g = c.benchmark_group("mandelbrot");
    g.bench_function("native_seq", |b| {
        b.iter(|| native::mandelbrot(w, h, it, &mut img))
    });
    g.bench_function("native_rayon", |b| {
        b.iter(|| native::mandelbrot_par(w, h, it, &mut img))
    });
    g.finish();
    offload_bench(
        c,
        "mandelbrot",
        "mandelbrot.obc",
        "mandelbrot",
        i64::from(w * h),
        |rt| {
            vec![
                w.into(),
                h.into(),
                it.into(),
                (&rt.new_array::<i32>((w * h) as usize).unwrap()).into(),
            ]
        },
    );

    // nbody
    let nb = 512;
    let bodies = native::Bodies::random(nb, 3);
    let mut g = c.benchmark_group("nbody");
    let mut p = bodies.clone();
    g.bench_function("native_seq", |b| {
        b.iter(|| native::nbody(&mut p, 0.01, 0.01))
    });
    g.bench_function("native_rayon", |b| {
        b.iter(|| native::nbody_par(&mut p, 0.01, 0.01))
    });
    g.finish();
    offload_bench(c, "nbody", "nbody.obc", "nbody", nb as i64, |rt| {
        let mut a: Vec<Arg> = vec![(nb as i32).into(), 0.01f32.into(), 0.01f32.into()];
        for v in [
            &bodies.px, &bodies.py, &bodies.pz, &bodies.m, &bodies.vx, &bodies.vy, &bodies.vz,
        ] {
            a.push((&rt.array(v).unwrap()).into());
        }
        a
    });

    // blackscholes
    let no = 100_000;
    let (s, x, t) = native::options(no, 4);
    let (mut call, mut put) = (vec![0.0; no], vec![0.0; no]);
    let mut g = c.benchmark_group("blackscholes");
    g.bench_function("native_seq", |b| {
        b.iter(|| native::blackscholes(0.02, 0.3, &s, &x, &t, &mut call, &mut put))
    });
    g.bench_function("native_rayon", |b| {
        b.iter(|| native::blackscholes_par(0.02, 0.3, &s, &x, &t, &mut call, &mut put))
    });
    g.finish();
    offload_bench(
        c,
        "blackscholes",
        "blackscholes.obc",
        "blackscholes",
        no as i64,
        |rt| {
            vec![
                0.02f32.into(),
                0.3f32.into(),
                (&rt.array(&s).unwrap()).into(),
                (&rt.array(&x).unwrap()).into(),
                (&rt.array(&t).unwrap()).into(),
                (&rt.new_array::<f32>(no).unwrap()).into(),
                (&rt.new_array::<f32>(no).unwrap()).into(),
            ]
        },
    );

    // matmul
    let nm = 128;
    let a: Vec<f32> = (0..nm * nm).map(|i| (i % 17) as f32).collect();
    let bm: Vec<f32> = (0..nm * nm).map(|i| (i % 13) as f32).collect();
    let mut cm = vec![0.0; nm * nm];
    let mut g = c.benchmark_group("matmul");
    g.bench_function("native_seq", |b| {
        b.iter(|| native::matmul(nm, &a, &bm, &mut cm))
    });
    g.bench_function("native_rayon", |b| {
        b.iter(|| native::matmul_par(nm, &a, &bm, &mut cm))
    });
    g.finish();
    offload_bench(
        c,
        "matmul",
        "matmul.obc",
        "matmul",
        (nm * nm) as i64,
        |rt| {
            vec![
                (nm as i32).into(),
                (&rt.array(&a).unwrap()).into(),
                (&rt.array(&bm).unwrap()).into(),
                (&rt.new_array::<f32>(nm * nm).unwrap()).into(),
            ]
        },
    );

    // histogram
    let nh = 1 << 20;
    let mut r = native::Rng::new(6);
    let data: Vec<i32> = (0..nh).map(|_| r.next_u64() as i32).collect();
    let mut bins = vec![0; 256];
    let mut g = c.benchmark_group("histogram");
    g.bench_function("native_seq", |b| {
        b.iter(|| native::histogram(&data, &mut bins))
    });
    g.bench_function("native_rayon", |b| {
        b.iter(|| native::histogram_par(&data, 256))
    });
    g.finish();
    offload_bench(
        c,
        "histogram",
        "histogram.obc",
        "histogram",
        nh as i64,
        |rt| {
            vec![
                (&rt.array(&data).unwrap()).into(),
                (&rt.new_array::<i32>(256).unwrap()).into(),
            ]
        },
    );

    // shapes (virtual dispatch and allocation)
    let ns = 100_000;
    let mut areas = vec![0.0; ns];
    let mut g = c.benchmark_group("shape_areas");
    g.bench_function("native_seq", |b| {
        b.iter(|| {
            areas
                .iter_mut()
                .enumerate()
                .for_each(|(i, a)| *a = native::shape_area(i as i64))
        })
    });
    g.bench_function("native_rayon", |b| {
        b.iter(|| {
            areas
                .par_iter_mut()
                .enumerate()
                .for_each(|(i, a)| *a = native::shape_area(i as i64))
        })
    });
    g.finish();
    offload_bench(
        c,
        "shape_areas",
        "shapes.obc",
        "shape_areas",
        ns as i64,
        |rt| vec![(&rt.new_array::<f64>(ns).unwrap()).into()],
    );
}

fn allocation(c: &mut Criterion) {
    let (n, per) = (5_000usize, 50);
    let mut out = vec![0.0; n];
    let mut g = c.benchmark_group("alloc_vectors");
    g.bench_function("native_seq_box", |b| {
        b.iter(|| {
            out.iter_mut()
                .enumerate()
                .for_each(|(i, o)| *o = native::alloc_vectors_one(i as i64, per))
        })
    });
    g.bench_function("native_rayon_box", |b| {
        b.iter(|| {
            out.par_iter_mut()
                .enumerate()
                .for_each(|(i, o)| *o = native::alloc_vectors_one(i as i64, per))
        })
    });
    g.bench_function("native_rayon_bump", |b| {
        b.iter(|| {
            out.par_iter_mut()
                .enumerate()
                .for_each_init(Vec::new, |arena, (i, o)| {
                    *o = native::alloc_vectors_bump(i as i64, per, arena)
                })
        })
    });
    g.finish();
    interp_alloc_bench(c, "alloc_vectors", "alloc.obc", n, |rt| {
        vec![per.into(), (&rt.new_array::<f64>(n).unwrap()).into()]
    });

    let (nl, len) = (5_000usize, 100);
    let mut sums = vec![0i64; nl];
    let mut g = c.benchmark_group("linked_list");
    g.bench_function("native_seq_box", |b| {
        b.iter(|| {
            sums.iter_mut()
                .enumerate()
                .for_each(|(i, s)| *s = native::linked_list_one(i as i64, len))
        })
    });
    g.bench_function("native_rayon_box", |b| {
        b.iter(|| {
            sums.par_iter_mut()
                .enumerate()
                .for_each(|(i, s)| *s = native::linked_list_one(i as i64, len))
        })
    });
    g.finish();
    interp_alloc_bench(c, "linked_list", "linkedlist.obc", nl, |rt| {
        vec![len.into(), (&rt.new_array::<i64>(nl).unwrap()).into()]
    });
}

/// The interpreter on an allocating kernel, with one worker and with every
/// core. There is no collector: a launch hands its objects back only when
/// none escaped (true of these kernels), so the heap may reach 16 GiB, in
/// case one does.
fn interp_alloc_bench(
    c: &mut Criterion,
    kernel: &str,
    file: &str,
    n: usize,
    args: impl Fn(&Runtime) -> Vec<Arg>,
) {
    let mut g = c.benchmark_group(kernel);
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (name, workers) in [("interp_1", 1), ("interp_all", all)] {
        let rt = Runtime::builder()
            .workers(workers)
            .max_heap(16 << 30)
            .build()
            .unwrap();
        let m = rt.load(file, example(file)).unwrap();
        let cl = m.closure(kernel, args(&rt)).unwrap();
        g.bench_function(name, |b| b.iter(|| par_offload(0..n as i64, &cl).unwrap()));
    }
    g.finish();
}

/// The Sumatra protocol's costs on the CPU device, each next to its
/// baseline in the same group: `inc` with every 1000th, 100th and 10th
/// workitem forced to deopt at its store against none (the baseline
/// carries the same injected test, which never holds); mandelbrot with
/// back-edge polls against without; and compile latency per kernel and
/// tier (the quick tier is what a first launch waits for).
fn protocol(c: &mut Criterion) {
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    let n = 1i64 << 20;
    let mut g = c.benchmark_group("deopt_rate");
    for (name, modulus, remainder) in [
        ("none", 100, 100),
        ("0.1%", 1000, 0),
        ("1%", 100, 0),
        ("10%", 10, 0),
    ] {
        let (rt, cl) =
            offload_testkit::workloads::deopt_rate_launch(all, n as usize, modulus, remainder)
                .unwrap();
        par_offload(0..n, &cl).unwrap();
        rt.finish_compiles();
        g.bench_function(name, |b| b.iter(|| par_offload(0..n, &cl).unwrap()));
    }
    g.finish();

    let mut g = c.benchmark_group("polls");
    let (w, h, iters) = (256, 256, 256);
    for (name, on) in [("on", true), ("off", false)] {
        let (rt, cl) = offload_testkit::workloads::polls_launch(all, on, w, h, iters).unwrap();
        par_offload(0..i64::from(w * h), &cl).unwrap();
        rt.finish_compiles();
        g.bench_function(name, |b| {
            b.iter(|| par_offload(0..i64::from(w * h), &cl).unwrap())
        });
    }
    g.finish();

    let mut g = c.benchmark_group("compile");
    let rt = Runtime::builder().device(Device::Cpu).build().unwrap();
    for (file, kernel) in [
        ("saxpy.obc", "saxpy"),
        ("mandelbrot.obc", "mandelbrot"),
        ("nbody.obc", "nbody"),
        ("matmul.obc", "matmul"),
    ] {
        let m = rt.load(file, example(file)).unwrap();
        let prog = m.program();
        let k = prog.verified().func_named(kernel).expect("example kernel");
        let jit = offload_jit::CpuJit::new();
        for (tier, quick) in [("quick", true), ("optimized", false)] {
            let opts = offload_jit::CompileOptions {
                quick,
                ..Default::default()
            };
            g.bench_function(format!("{kernel}_{tier}"), |b| {
                b.iter(|| jit.compile_with(prog, k, 0, opts).unwrap().compile_time)
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
    targets = compute, allocation, protocol
}
criterion_main!(benches);
