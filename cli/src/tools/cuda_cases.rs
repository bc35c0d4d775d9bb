//! The pairs the GPU benchmarks compare: each example kernel on offload's
//! CUDA device and the same kernel in CUDA C (`benches/cuda/baselines.cu`),
//! on the same inputs, with the check that their outputs agree. Timed by
//! `offload bench --device cuda` (`bench::run_cuda_c`), counted by
//! `offload bench --device cuda --counters` (`bench_counters`).

use crate::tools::cuda_c::Arg as C;
use crate::tools::kernels::example;
use crate::tools::reference as native;
use offload::{Array, Closure, OffloadError, Runtime};

/// What comparing the outputs found: `Err` is a disagreement; `Ok` a note
/// for the report (empty when there is none).
pub type Verdict = Result<String, String>;

/// Compares offload's outputs with the CUDA C kernel's arguments after its
/// run.
pub type Check<'r> = Box<dyn Fn(&[C]) -> Result<Verdict, OffloadError> + 'r>;

impl std::fmt::Debug for Case<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case")
            .field("bench", &self.bench)
            .field("items", &self.items)
            .finish_non_exhaustive()
    }
}

/// One kernel and its CUDA C twin.
pub struct Case<'r> {
    /// The benchmark's name; the CUDA C kernel is [`Case::kernel`].
    pub bench: &'static str,
    /// The CUDA C kernel.
    pub kernel: &'static str,
    /// What the baseline is, for the report.
    pub baseline: &'static str,
    /// Workitems of a launch.
    pub items: i64,
    /// offload's closure over `0..items`.
    pub closure: Closure,
    /// The CUDA C kernel's arguments after the workitem count (inputs as
    /// the closure's; the arrays receive its results).
    pub args: Vec<C>,
    /// Compares offload's outputs (read from `rt`) with the CUDA C
    /// kernel's (in the arguments after its run).
    pub check: Check<'r>,
    /// Iterations of the kernel's inner loop over a whole launch, from
    /// its outputs (`None` for kernels without one).
    pub iterations: Option<Box<dyn Fn() -> Result<u64, OffloadError> + 'r>>,
    /// Whether the kernel allocates (its baseline uses device `malloc`,
    /// which the virtual GPU does not model).
    pub allocates: bool,
}

fn same_f32(a: &[f32], b: &[f32]) -> Verdict {
    match a
        .iter()
        .zip(b)
        .position(|(x, y)| x.to_bits() != y.to_bits())
    {
        Some(i) => Err(format!("element {i}: {} vs {}", a[i], b[i])),
        None => Ok(String::new()),
    }
}

fn f32s(args: &[C], i: usize) -> &[f32] {
    match &args[i] {
        C::F32s(v) => v,
        _ => &[],
    }
}

fn i32s(args: &[C], i: usize) -> &[i32] {
    match &args[i] {
        C::I32s(v) => v,
        _ => &[],
    }
}

/// The cases at the benchmark's sizes divided by `shrink`, in the order
/// they are reported.
pub fn cases(rt: &Runtime, shrink: usize) -> Result<Vec<Case<'_>>, OffloadError> {
    let s = shrink.max(1);
    [
        saxpy,
        mandelbrot,
        nbody,
        matmul,
        histogram,
        blackscholes,
        alloc,
    ]
    .into_iter()
    .map(|case| case(rt, s))
    .collect()
}

/// saxpy: `y[i] = a * x[i] + y[i]`.
fn saxpy(rt: &Runtime, s: usize) -> Result<Case<'_>, OffloadError> {
    let n = (1 << 24) / s;
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let y = vec![1.0f32; n];
    let m = rt.load("saxpy.obc", example("saxpy.obc"))?;
    let (xa, ya) = (rt.array(&x)?, rt.array(&y)?);
    Ok(Case {
        bench: "saxpy",
        kernel: "saxpy",
        baseline: "CUDA C (NVRTC)",
        items: n as i64,
        closure: m.closure("saxpy", [2.0f32.into(), (&xa).into(), (&ya).into()])?,
        args: vec![C::F32(2.0), C::F32s(x), C::F32s(y)],
        check: Box::new(move |a| Ok(same_f32(&rt.read(&ya)?, f32s(a, 2)))),
        iterations: None,
        allocates: false,
    })
}

/// mandelbrot: escape counts of a w×h grid, at most 256 iterations.
fn mandelbrot(rt: &Runtime, s: usize) -> Result<Case<'_>, OffloadError> {
    let (w, h, it) = (1024 / s.min(16) as i32, 1024 / s.min(16) as i32, 256);
    let np = (w * h) as usize;
    let m = rt.load("mandelbrot.obc", example("mandelbrot.obc"))?;
    let img = rt.new_array::<i32>(np)?;
    let img2 = img.clone();
    Ok(Case {
        bench: "mandelbrot",
        kernel: "mandelbrot",
        baseline: "CUDA C (NVRTC)",
        items: np as i64,
        closure: m.closure("mandelbrot", [w.into(), h.into(), it.into(), (&img).into()])?,
        args: vec![C::I32(w), C::I32(h), C::I32(it), C::I32s(vec![0; np])],
        check: Box::new(move |a| {
            Ok(if rt.read(&img)? == i32s(a, 3) {
                Ok(String::new())
            } else {
                Err("iteration counts differ".into())
            })
        }),
        // The escape-time loop runs once per iteration counted.
        iterations: Some(Box::new(move || {
            Ok(rt.read(&img2)?.iter().map(|&k| k as u64).sum())
        })),
        allocates: false,
    })
}

/// nbody, one step: accelerations from positions, velocities kicked.
fn nbody(rt: &Runtime, s: usize) -> Result<Case<'_>, OffloadError> {
    let nb = 4096 / s.min(8);
    let bodies = native::Bodies::random(nb, 3);
    let (c, arrays) = crate::tools::demo::nbody_closure(rt, &bodies)?;
    let mut args = vec![C::I32(nb as i32), C::F32(0.01), C::F32(0.01)];
    args.extend(bodies.columns().into_iter().map(|v| C::F32s(v.clone())));
    Ok(Case {
        bench: "nbody",
        kernel: "nbody",
        baseline: "CUDA C (NVRTC)",
        items: nb as i64,
        closure: c,
        args,
        check: Box::new(move |a| {
            for (k, arr) in arrays.iter().enumerate().skip(4) {
                if let Err(e) = same_f32(&rt.read(arr)?, f32s(a, 3 + k)) {
                    return Ok(Err(e));
                }
            }
            Ok(Ok(String::new()))
        }),
        iterations: Some(Box::new(move || Ok((nb * nb) as u64))),
        allocates: false,
    })
}

/// matmul: an n×n product.
fn matmul(rt: &Runtime, s: usize) -> Result<Case<'_>, OffloadError> {
    let nm = 512 / s.min(8);
    let a: Vec<f32> = (0..nm * nm).map(|i| (i % 17) as f32 * 0.25).collect();
    let bm: Vec<f32> = (0..nm * nm).map(|i| (i % 13) as f32 * 0.5).collect();
    let m = rt.load("matmul.obc", example("matmul.obc"))?;
    let (aa, ba, ca) = (rt.array(&a)?, rt.array(&bm)?, rt.new_array::<f32>(nm * nm)?);
    Ok(Case {
        bench: "matmul",
        kernel: "matmul",
        baseline: "CUDA C (NVRTC)",
        items: (nm * nm) as i64,
        closure: m.closure(
            "matmul",
            [(nm as i32).into(), (&aa).into(), (&ba).into(), (&ca).into()],
        )?,
        args: vec![
            C::I32(nm as i32),
            C::F32s(a),
            C::F32s(bm),
            C::F32s(vec![0.0; nm * nm]),
        ],
        check: Box::new(move |a| Ok(same_f32(&rt.read(&ca)?, f32s(a, 3)))),
        iterations: Some(Box::new(move || Ok((nm * nm * nm) as u64))),
        allocates: false,
    })
}

/// histogram: random words into 256 bins with atomics.
fn histogram(rt: &Runtime, s: usize) -> Result<Case<'_>, OffloadError> {
    let nh = (1 << 22) / s;
    let nbins = 256;
    let mut rng = native::Rng::new(9);
    let data: Vec<i32> = (0..nh).map(|_| rng.next_u64() as i32).collect();
    let m = rt.load("histogram.obc", example("histogram.obc"))?;
    let (da, bins) = (rt.array(&data)?, rt.new_array::<i32>(nbins)?);
    Ok(Case {
        bench: "histogram",
        kernel: "histogram",
        baseline: "CUDA C (NVRTC)",
        items: nh as i64,
        closure: m.closure("histogram", [(&da).into(), (&bins).into()])?,
        args: vec![C::I32s(data), C::I32s(vec![0; nbins]), C::I32(nbins as i32)],
        check: Box::new(move |a| {
            Ok(if rt.read(&bins)? == i32s(a, 1) {
                Ok(String::new())
            } else {
                Err("bin counts differ".into())
            })
        }),
        iterations: None,
        allocates: false,
    })
}

/// blackscholes: call and put prices.
fn blackscholes(rt: &Runtime, s: usize) -> Result<Case<'_>, OffloadError> {
    let no = (1 << 22) / s;
    let (sp, st, ty) = native::options(no, 4);
    let (c, cl, _) = crate::tools::demo::blackscholes_closure(rt, &sp, &st, &ty)?;
    Ok(Case {
        bench: "blackscholes",
        kernel: "blackscholes",
        baseline: "CUDA C (NVRTC)",
        items: no as i64,
        closure: c,
        args: vec![
            C::F32(0.02),
            C::F32(0.3),
            C::F32s(sp),
            C::F32s(st),
            C::F32s(ty),
            C::F32s(vec![0.0; no]),
            C::F32s(vec![0.0; no]),
        ],
        // CUDA's expf/logf are not the host's libm: within 1e-4 relative.
        check: Box::new(move |a| {
            let (ocall, ccall) = (rt.read(&cl)?, f32s(a, 5));
            Ok(
                match (0..no)
                    .find(|&i| (ocall[i] - ccall[i]).abs() > 1e-4 * ocall[i].abs().max(1.0))
                {
                    Some(i) => Err(format!("call {i}: {} vs {}", ocall[i], ccall[i])),
                    None => Ok(String::new()),
                },
            )
        }),
        iterations: None,
        allocates: false,
    })
}

/// Allocation: offload's shared TLABs against CUDA's device malloc/free,
/// three fresh Vec3 objects per loop iteration.
fn alloc(rt: &Runtime, s: usize) -> Result<Case<'_>, OffloadError> {
    let (items, count) = ((1 << 17) / s, 16i32);
    let m = rt.load("alloc.obc", example("alloc.obc"))?;
    let ao: Array<f64> = rt.new_array::<f64>(items)?;
    Ok(Case {
        bench: "alloc Vec3 (TLAB vs device malloc)",
        kernel: "alloc_vectors",
        baseline: "CUDA C malloc/free",
        items: items as i64,
        closure: m.closure("alloc_vectors", [count.into(), (&ao).into()])?,
        args: vec![C::I32(count), C::F64s(vec![0.0; items]), C::I32s(vec![0])],
        check: Box::new(move |a| {
            let failed = i32s(a, 2).first().copied().unwrap_or(0);
            if failed > 0 {
                return Ok(Ok(format!("device malloc failed in {failed} workitems")));
            }
            let (ov, cv) = (
                rt.read(&ao)?,
                match &a[1] {
                    C::F64s(v) => v.as_slice(),
                    _ => &[],
                },
            );
            Ok(
                match (0..items).find(|&i| ov[i].to_bits() != cv[i].to_bits()) {
                    Some(i) => Err(format!("item {i}: {} vs {}", ov[i], cv[i])),
                    None => Ok(String::new()),
                },
            )
        }),
        iterations: Some(Box::new(move || Ok(items as u64 * count as u64))),
        allocates: true,
    })
}
