//! `offload bench`: offload against native Rust in the same run, as a table
//! or as JSON lines. Every comparison is a [`BenchResult`]; its one ratio is
//! the **slowdown**, offload's time ÷ the baseline's (1.0: as fast; 2.0:
//! twice as slow; below 1: faster), the convention of `BENCHMARKS.md` and
//! `scripts/bench-ratios.py` too. Medians of repeated runs; criterion
//! benches (`cargo bench`) give the same comparisons with confidence
//! intervals.

use crate::tools::kernels::example;
use crate::tools::reference as native;
use crate::tools::workloads::{deopt_rate_launch, polls_launch};
use offload::{Combine, Device, OffloadError, Runtime, par_offload};
use std::time::{Duration, Instant};

/// A loop that runs until told to stop (`flag[0] != 0`), for
/// time-to-safepoint.
const SPIN_KERNEL: &str = "
kernel spin(i: i64, flag: i32[], sink: i64[]) {
    local k: i64
    i64.const 0
    store k
  loop:
    load flag
    i32.const 0
    i32.aload
    br_if done
    inc k 1
    br loop
  done:
    load sink
    i32.const 0
    load k
    i64.array_atomic_add
    pop
    ret
}
";

/// What a row is held to.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "max")]
pub enum Target {
    /// The slowdown against the baseline is at most this.
    Slowdown(f64),
    /// Offload's time alone is at most this many nanoseconds (rows with no
    /// baseline to compare with: compile latency, time to safepoint).
    Nanos(u64),
}

impl Target {
    /// The target as text: `≤ 1.25x`, `≤ 1 ms`.
    pub fn text(self) -> String {
        match self {
            Target::Slowdown(x) => format!("≤ {x:.2}x"),
            Target::Nanos(n) => format!(
                "≤ {}",
                offload::diagnostics::duration_text(Duration::from_nanos(n))
            ),
        }
    }
}

/// One comparison: offload against a baseline measured in the same run, or
/// (with no baseline) offload's time against a target.
#[derive(Clone, Debug)]
pub struct BenchResult {
    /// What was measured.
    pub bench: String,
    /// The offload device.
    pub device: Device,
    /// What it was compared with, and its median time (`None`: nothing,
    /// the row has a time target).
    pub baseline: Option<(String, Duration)>,
    /// Offload's time: the median of the repetitions, or their worst in
    /// a row named `worst of N` (whose baseline is a worst too).
    pub offload: Duration,
    /// What the row is held to, if anything.
    pub target: Option<Target>,
    /// A note (e.g. the kernel ran on the interpreter, and why).
    pub note: String,
}

/// A row of `offload bench --json`: one JSON object per line, with the
/// field names below; times in nanoseconds.
#[derive(serde::Serialize)]
struct JsonRow<'a> {
    bench: &'a str,
    device: &'a str,
    baseline: Option<&'a str>,
    offload_ns: u128,
    baseline_ns: Option<u128>,
    /// Offload time ÷ baseline time.
    slowdown: Option<f64>,
    target: Option<Target>,
    met: Option<bool>,
    note: &'a str,
}

impl BenchResult {
    /// Offload's time ÷ the baseline's (`None` without a baseline): 1.0 is
    /// as fast, above 1 slower.
    pub fn slowdown(&self) -> Option<f64> {
        self.baseline
            .as_ref()
            .map(|(_, b)| self.offload.as_secs_f64() / b.as_secs_f64().max(1e-12))
    }

    /// Whether the row met its target (`None`: it has none).
    pub fn met(&self) -> Option<bool> {
        match self.target? {
            Target::Slowdown(max) => self.slowdown().map(|x| x <= max),
            Target::Nanos(max) => Some(self.offload.as_nanos() <= u128::from(max)),
        }
    }

    /// One JSON object (see `JsonRow`'s fields).
    pub fn json(&self) -> String {
        serde_json::to_string(&JsonRow {
            bench: &self.bench,
            device: self.device.name(),
            baseline: self.baseline.as_ref().map(|b| b.0.as_str()),
            offload_ns: self.offload.as_nanos(),
            baseline_ns: self.baseline.as_ref().map(|b| b.1.as_nanos()),
            slowdown: self.slowdown(),
            target: self.target,
            met: self.met(),
            note: &self.note,
        })
        .expect("a bench row serializes")
    }
}

fn median(
    mut f: impl FnMut() -> Result<(), OffloadError>,
    reps: usize,
) -> Result<Duration, OffloadError> {
    f()?; // warm up (and compile)
    let mut t: Vec<Duration> = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t0 = Instant::now();
        f()?;
        t.push(t0.elapsed());
    }
    Ok(middle(t))
}

/// The median of some timings (at least one).
pub(crate) fn middle(mut t: Vec<Duration>) -> Duration {
    t.sort();
    t[t.len() / 2]
}

/// The median time of `f`, a launch on `rt`, once the optimized tier of
/// its kernel is there ([`warm`]).
fn offload_median(
    rt: &Runtime,
    mut f: impl FnMut() -> Result<(), OffloadError>,
    reps: usize,
) -> Result<Duration, OffloadError> {
    warm(rt, &mut f)?;
    median(f, reps)
}

/// The medians of `N` measurements timed by turns — the first, the
/// second, ..., the first again — so that a change in the machine's load
/// during the run (this is a shared machine) weighs on each alike. Each
/// runs once untimed first; a launch's kernel must already be compiled
/// ([`warm`]).
pub(crate) fn by_turns<const N: usize>(
    mut fs: [&mut dyn FnMut() -> Result<(), OffloadError>; N],
    reps: usize,
) -> Result<[Duration; N], OffloadError> {
    for f in &mut fs {
        f()?;
    }
    let mut t: [Vec<Duration>; N] = std::array::from_fn(|_| Vec::with_capacity(reps));
    for _ in 0..reps.max(1) {
        for (f, t) in fs.iter_mut().zip(&mut t) {
            let t0 = Instant::now();
            f()?;
            t.push(t0.elapsed());
        }
    }
    Ok(t.map(middle))
}

/// The pause before each turn of [`apart`], as `scripts/bench_peers.py`
/// pauses between contenders.
const SETTLE: Duration = Duration::from_millis(50);

/// Untimed runs at the start of each turn of [`apart`]: the pause left
/// this side's threads asleep (after one, offload's saxpy over 2^20 took
/// 0.49, 0.60, 0.51, 0.45, 0.33, then 0.10 ms).
const TURN_WARM: usize = 3;

/// The medians of `N` measurements that use different thread pools,
/// taken in turns apart: before each turn a pause lets the last turn's
/// threads go idle — rayon's spin on after a parallel call, offload's
/// launch team 200 µs — and untimed runs wake this turn's; `reps` timed
/// runs each, in up to three turns. Back to back ([`by_turns`]), rayon's
/// spinning threads shared the cores with offload's next launch: saxpy
/// over 2^20 read 690–750 µs against 395 µs in a process of its own.
pub(crate) fn apart<const N: usize>(
    mut fs: [&mut dyn FnMut() -> Result<(), OffloadError>; N],
    reps: usize,
) -> Result<[Duration; N], OffloadError> {
    let reps = reps.max(1);
    let turns = reps.min(3);
    let mut t: [Vec<Duration>; N] = std::array::from_fn(|_| Vec::with_capacity(reps));
    for turn in 0..turns {
        // Timed runs of this turn: `reps` in all, spread over the turns.
        let per = reps / turns + usize::from(turn < reps % turns);
        for (f, t) in fs.iter_mut().zip(&mut t) {
            std::thread::sleep(SETTLE);
            for _ in 0..TURN_WARM {
                f()?;
            }
            for _ in 0..per {
                let t0 = Instant::now();
                f()?;
                t.push(t0.elapsed());
            }
        }
    }
    Ok(t.map(middle))
}

/// Run `launch` (a launch on `rt`) once and wait for its kernel's
/// optimized tier (see [`offload::RuntimeBuilder::tiered`]).
fn warm(
    rt: &Runtime,
    launch: &mut impl FnMut() -> Result<(), OffloadError>,
) -> Result<(), OffloadError> {
    launch()?;
    rt.finish_compiles();
    Ok(())
}

/// Medians of `offload` (a launch on `rt`, once its optimized tier is
/// there) and of its native baseline (on rayon's pool), timed in turns
/// apart ([`apart`]).
fn paired(
    rt: &Runtime,
    mut offload: impl FnMut() -> Result<(), OffloadError>,
    mut native: impl FnMut(),
    reps: usize,
) -> Result<(Duration, Duration), OffloadError> {
    warm(rt, &mut offload)?;
    let [t, b] = apart(
        [&mut offload, &mut || {
            native();
            Ok(())
        }],
        reps,
    )?;
    Ok((t, b))
}

fn native_median(mut f: impl FnMut(), reps: usize) -> Duration {
    median(
        || {
            f();
            Ok(())
        },
        reps,
    )
    .expect("native code does not fail")
}

/// The rows as they are made, on one device.
struct Rows {
    device: Device,
    out: Vec<BenchResult>,
}

impl Rows {
    fn push(
        &mut self,
        bench: &str,
        baseline: Option<(&str, Duration)>,
        offload: Duration,
        target: Option<Target>,
        note: String,
    ) {
        self.out.push(BenchResult {
            bench: bench.into(),
            device: self.device,
            baseline: baseline.map(|(name, t)| (name.to_string(), t)),
            offload,
            target,
            note,
        });
    }

    /// A row another module made (`bench_*`), on this device.
    fn add(&mut self, r: BenchResult) {
        self.out.push(BenchResult {
            device: self.device,
            ..r
        });
    }
}

/// What a launch's report says of where it ran (its fallback), for a
/// row's note.
fn note_of(r: &offload::LaunchReport) -> String {
    r.fallback.clone().unwrap_or_default()
}

/// Run the benchmarks on `rt` (`shrink` divides the problem sizes).
pub fn run(rt: &Runtime, shrink: usize, reps: usize) -> Result<Vec<BenchResult>, OffloadError> {
    let s = shrink.max(1);
    let mut rows = Rows {
        device: rt.device(),
        out: Vec::new(),
    };
    compute_rows(rt, s, reps, &mut rows)?;
    reduce_rows(rt, s, reps, &mut rows)?;
    blackscholes_row(rt, s, reps, &mut rows)?;
    alloc_rows(rt, s, reps, &mut rows)?;
    if rows.device == Device::Cuda {
        cuda_rows(rt, s, reps, &mut rows)?;
    }
    if rows.device == Device::Cpu {
        cpu_rows(rt, s, reps, &mut rows)?;
    }
    let mut out = rows.out;
    geomean_row(&mut out, rt.device());
    Ok(out)
}

/// saxpy, mandelbrot, nbody, matmul and the 2-D heat stencil against
/// native rayon.
fn compute_rows(rt: &Runtime, s: usize, reps: usize, rows: &mut Rows) -> Result<(), OffloadError> {
    // saxpy
    let n = (1 << 20) / s;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut y = vec![1.0f32; n];
    let m = rt.load("saxpy.obc", example("saxpy.obc"))?;
    let (xa, ya) = (rt.array(&x)?, rt.array(&y)?);
    let c = m.closure("saxpy", [2.0f32.into(), (&xa).into(), (&ya).into()])?;
    let mut note = String::new();
    let (t, b) = paired(
        rt,
        || par_offload(0..n as i64, &c).map(|r| note = note_of(&r)),
        || native::saxpy_par(2.0, &x, &mut y),
        reps,
    )?;
    rows.push("saxpy", Some(("native rayon", b)), t, None, note);

    // mandelbrot
    let (w, h, it) = (256 / s.min(8) as i32, 256 / s.min(8) as i32, 256);
    let m = rt.load("mandelbrot.obc", example("mandelbrot.obc"))?;
    let img = rt.new_array::<i32>((w * h) as usize)?;
    let c = m.closure("mandelbrot", [w.into(), h.into(), it.into(), (&img).into()])?;
    let mut note = String::new();
    let mut nimg = vec![0; (w * h) as usize];
    let (t, b) = paired(
        rt,
        || par_offload(0..i64::from(w * h), &c).map(|r| note = note_of(&r)),
        || native::mandelbrot_par(w, h, it, &mut nimg),
        reps,
    )?;
    rows.push("mandelbrot", Some(("native rayon", b)), t, None, note);

    // nbody
    let nb = 512 / s.min(8);
    let bodies = native::Bodies::random(nb, 3);
    let (c, _) = crate::tools::demo::nbody_closure(rt, &bodies)?;
    let mut note = String::new();
    let mut p = bodies.clone();
    let (t, b) = paired(
        rt,
        || par_offload(0..nb as i64, &c).map(|r| note = note_of(&r)),
        || native::nbody_par(&mut p, 0.01, 0.01),
        reps,
    )?;
    rows.push("nbody", Some(("native rayon", b)), t, None, note);

    // matmul
    let nm = 128 / s.min(4);
    let a: Vec<f32> = (0..nm * nm).map(|i| (i % 17) as f32).collect();
    let bm: Vec<f32> = (0..nm * nm).map(|i| (i % 13) as f32).collect();
    let m = rt.load("matmul.obc", example("matmul.obc"))?;
    let (aa, ba, ca) = (rt.array(&a)?, rt.array(&bm)?, rt.new_array::<f32>(nm * nm)?);
    let c = m.closure(
        "matmul",
        [(nm as i32).into(), (&aa).into(), (&ba).into(), (&ca).into()],
    )?;
    let mut note = String::new();
    let mut cm = vec![0.0; nm * nm];
    let (t, b) = paired(
        rt,
        || par_offload(0..(nm * nm) as i64, &c).map(|r| note = note_of(&r)),
        || native::matmul_par(nm, &a, &bm, &mut cm),
        reps,
    )?;
    rows.push("matmul", Some(("native rayon", b)), t, None, note);

    // A 2-D stencil: one step of heat diffusion over a grid, a kernel
    // over a 2-D range (`heat.ofk`) against rayon over rows.
    let (gh, gw) = (2048 / s.min(16), 2048 / s.min(16));
    let g0: Vec<f32> = (0..gh * gw).map(|x| ((x * 37) % 101) as f32).collect();
    let m = rt.load_source(
        "heat.ofk",
        include_str!("../../../examples/kernels/heat.ofk"),
    )?;
    let (ta, ua) = (rt.array(&g0)?, rt.array(&g0)?);
    let c = m.closure("heat", [(&ta).into(), (&ua).into(), (gw as i32).into()])?;
    let mut note = String::new();
    let mut gu = g0.clone();
    let (t, b) = paired(
        rt,
        || par_offload((1..gh as i64 - 1, 1..gw as i64 - 1), &c).map(|r| note = note_of(&r)),
        || native::heat_par(&g0, &mut gu, gh, gw),
        reps,
    )?;
    if rt.read(&ua)? != gu {
        note = "WRONG RESULT".into();
    }
    rows.push("heat 2-D stencil", Some(("native rayon", b)), t, None, note);

    Ok(())
}

/// Reductions: a dot product and a histogram, against rayon.
fn reduce_rows(rt: &Runtime, s: usize, reps: usize, rows: &mut Rows) -> Result<(), OffloadError> {
    // A reduction: the dot product of two 2^24-element f32 vectors
    // (`dot.ofk`, `par_reduce` with `Combine::Sum`) against rayon's
    // `par_iter().map().sum()`; checked bit for bit against the combine
    // tree computed here.
    {
        let nd = (1 << 24) / s;
        let dx: Vec<f32> = (0..nd).map(|i| ((i * 7) % 1000) as f32 * 1e-3).collect();
        let dy: Vec<f32> = (0..nd).map(|i| ((i * 13) % 777) as f32 * 1e-3).collect();
        let m = rt.load_source("dot.ofk", include_str!("../../../examples/kernels/dot.ofk"))?;
        let (dxa, dya) = (rt.array(&dx)?, rt.array(&dy)?);
        let c = m.closure("dot", [(&dxa).into(), (&dya).into()])?;
        let mut note = String::new();
        let mut got = 0f32;
        let (t, b) = paired(
            rt,
            || {
                rt.par_reduce::<f32>(0..nd as i64, &c, Combine::Sum)
                    .map(|r| {
                        got = r.value;
                        note = note_of(&r.report);
                    })
            },
            || {
                std::hint::black_box(native::dot_par(&dx, &dy));
            },
            reps,
        )?;
        if got.to_bits() != native::dot_tree(&dx, &dy).to_bits() {
            note = "WRONG RESULT".into();
        }
        rows.push(
            "dot product (reduce)",
            Some(("native rayon", b)),
            t,
            None,
            note,
        );
    }

    // A reduction of a small array: the histogram of 2^24 values into 256
    // bins (`histogram.ofk`, its bins summed into: a copy per slot)
    // against rayon with a histogram per task; the bins zeroed before
    // each launch.
    {
        let nh = (1 << 24) / s;
        let data: Vec<i32> = (0..nh as u64)
            .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33) as i32 % 1024)
            .collect();
        let m = rt.load_source(
            "histogram.ofk",
            include_str!("../../../examples/kernels/histogram.ofk"),
        )?;
        let (da, bins) = (rt.array(&data)?, rt.new_array::<i32>(256)?);
        let c = m
            .closure("histogram", [(&da).into(), (&bins).into()])?
            .summed("bins")?;
        let mut note = String::new();
        let (t, b) = paired(
            rt,
            || {
                rt.write(&bins, 0, &[0; 256])?;
                par_offload(0..nh as i64, &c).map(|r| note = note_of(&r))
            },
            || {
                std::hint::black_box(native::histogram_per_task(&data, 256));
            },
            reps,
        )?;
        if rt.read(&bins)? != native::histogram_per_task(&data, 256) {
            note = "WRONG RESULT".into();
        }
        rows.push(
            "histogram (bins summed)",
            Some(("native rayon", b)),
            t,
            None,
            note,
        );
    }

    Ok(())
}

/// Black-Scholes against native rayon.
fn blackscholes_row(
    rt: &Runtime,
    s: usize,
    reps: usize,
    rows: &mut Rows,
) -> Result<(), OffloadError> {
    // blackscholes
    let no = 100_000 / s;
    let (sp, st, ty) = native::options(no, 4);
    let (c, _, _) = crate::tools::demo::blackscholes_closure(rt, &sp, &st, &ty)?;
    let mut note = String::new();
    let (mut wc, mut wp) = (vec![0.0; no], vec![0.0; no]);
    let (t, b) = paired(
        rt,
        || par_offload(0..no as i64, &c).map(|r| note = note_of(&r)),
        || native::blackscholes_par(0.02, 0.3, &sp, &st, &ty, &mut wc, &mut wp),
        reps,
    )?;
    rows.push("blackscholes", Some(("native rayon", b)), t, None, note);

    Ok(())
}

/// Allocation-heavy lists against `Box::new` and a bump allocator.
fn alloc_rows(rt: &Runtime, s: usize, reps: usize, rows: &mut Rows) -> Result<(), OffloadError> {
    // Allocation: a list of 16 fresh nodes per workitem, on this runtime's
    // allocation policy and on shared TLABs of group 2: with each worker's
    // allocation buffer taken from the shared TLAB (the default), and with
    // an atomic add on the shared TLAB per object, two workers contending
    // for one TLAB as a GPU warp's threads do (an experiment: no target).
    // Not by turns: on a 2-core machine, launches timed right after a
    // native rayon run (whose idle workers spin for a while) or after
    // `Box::new`'s 320,000 frees ran up to 2x slower than alone.
    {
        let (items, n) = (20_000 / s.min(10), 16i32);
        let mut nout = vec![0i64; items];
        let bbox = native_median(|| native::list_sum_box_par(n, &mut nout), reps);
        let bbump = native_median(|| native::list_sum_bump_par(n, &mut nout), reps);
        let shared2 = Some(offload::AllocPolicy::SharedTlab { group: 2 });
        for (label, policy, buffers) in [
            ("alloc list", None, true),
            ("alloc list shared:2", shared2, true),
            ("alloc list shared:2 per-object", shared2, false),
        ] {
            let r2 = match policy {
                None => rt.clone(),
                Some(p) => Runtime::builder()
                    .workers(rt.workers())
                    .device(rows.device)
                    .alloc_policy(p)
                    .alloc_buffers(buffers)
                    .build()?,
            };
            let m = r2.load("linkedlist.obc", example("linkedlist.obc"))?;
            let out = r2.new_array::<i64>(items)?;
            let c = m.closure("linked_list", [n.into(), (&out).into()])?;
            let mut note = String::new();
            let t = offload_median(
                &r2,
                || par_offload(0..items as i64, &c).map(|r| note = note_of(&r)),
                reps,
            )?;
            let got = r2.read(&out)?;
            if (0..items).any(|i| got[i] != native::list_sum_expected(i as i64, n)) {
                note = "WRONG RESULT".into();
            }
            rows.push(label, Some(("rayon Box::new", bbox)), t, None, note.clone());
            rows.push(label, Some(("rayon bump", bbump)), t, None, note);
        }
    }

    Ok(())
}

/// The GPU's own rows: launches in flight, and one launch split over the
/// CPU and the GPUs.
fn cuda_rows(rt: &Runtime, s: usize, reps: usize, rows: &mut Rows) -> Result<(), OffloadError> {
    // Launches in flight sharing the GPU (`bench_load`).
    let r = crate::tools::bench_load::gpu_halves(rt, s, reps)?;
    rows.add(r);
    // One launch split over the CPU and the GPUs (`bench_split`).
    let r = crate::tools::bench_split::row(s, reps)?;
    rows.add(r);
    Ok(())
}

/// The CPU device's own rows: deopt rates, poll overhead, time to
/// safepoint, source against bytecode, dispatch, stops, tails under load
/// and compile latency.
fn cpu_rows(rt: &Runtime, s: usize, reps: usize, rows: &mut Rows) -> Result<(), OffloadError> {
    // Deopt rates: `inc` with every 1000th / 100th / 10th workitem forced to
    // deopt at its store, against no deopts, on fresh runtimes of this device,
    // timed by turns. The baseline carries the same injected test
    // (`w % m == m` never holds), so the ratio is the cost of the deopts and
    // their replay alone.
    let ni = (1 << 20) / s;
    for (label, m) in [("deopt 0.1%", 1000), ("deopt 1%", 100), ("deopt 10%", 10)] {
        let (r_none, c_none) = deopt_rate_launch(rt.workers(), ni, m, m)?;
        let (r_with, c_with) = deopt_rate_launch(rt.workers(), ni, m, 0)?;
        let mut note = String::new();
        let mut none = || par_offload(0..ni as i64, &c_none).map(|_| ());
        let mut with = || {
            par_offload(0..ni as i64, &c_with)
                .map(|r| note = format!("{} replayed, {} re-entries", r.replayed, r.reentries))
        };
        warm(&r_none, &mut none)?;
        warm(&r_with, &mut with)?;
        let [t, base] = by_turns([&mut with, &mut none], reps)?;
        rows.push(label, Some(("no deopts", base)), t, None, note);
    }
    // Poll overhead: mandelbrot (a loop per pixel) with back-edge polls
    // against the same code without them, timed by turns.
    {
        let (w, h, it) = (256 / s.min(8) as i32, 256 / s.min(8) as i32, 256);
        let (r_on, c_on) = polls_launch(rt.workers(), true, w, h, it)?;
        let (r_off, c_off) = polls_launch(rt.workers(), false, w, h, it)?;
        let mut on = || par_offload(0..i64::from(w * h), &c_on).map(|_| ());
        let mut off = || par_offload(0..i64::from(w * h), &c_off).map(|_| ());
        warm(&r_on, &mut on)?;
        warm(&r_off, &mut off)?;
        let [on, off] = by_turns([&mut on, &mut off], reps)?;
        rows.push(
            "poll overhead",
            Some(("polls off", off)),
            on,
            Some(Target::Slowdown(1.03)),
            String::new(),
        );
    }
    // Time to safepoint while every slot spins in a long loop.
    {
        let m = rt.load("spin.obc", SPIN_KERNEL)?;
        let flag = rt.new_array::<i32>(1)?;
        let sink = rt.new_array::<i64>(1)?;
        let c = m.closure("spin", [(&flag).into(), (&sink).into()])?;
        let workers = rt.workers() as i64;
        let mut stops = Vec::new();
        std::thread::scope(|sc| -> Result<(), OffloadError> {
            let h = sc.spawn(|| par_offload(0..workers, &c));
            // Wait until the slots spin (the kernel is compiled first).
            std::thread::sleep(Duration::from_millis(50));
            for _ in 0..reps.max(5) * 4 {
                let ((), tts) = rt.safepoint(|_| ());
                stops.push(tts);
                std::thread::sleep(Duration::from_millis(2));
            }
            rt.write(&flag, 0, &[1])?;
            h.join().expect("launch thread").map(|_| ())
        })?;
        stops.sort();
        rows.push(
            "time to safepoint",
            None,
            stops[stops.len() / 2],
            Some(Target::Nanos(100_000)),
            format!(
                "median of {}, max {}",
                stops.len(),
                offload::diagnostics::duration_text(stops[stops.len() - 1])
            ),
        );
    }
    // Kernels from source against the same kernels from bytecode
    // (`bench_source`).
    for r in crate::tools::bench_source::rows(rt, s, reps)? {
        rows.add(r);
    }
    // Virtual calls: the dispatch workloads against trait objects, and
    // dispatch by address against by header (`bench_dispatch`).
    for r in crate::tools::bench_dispatch::rows(rt, s, reps)? {
        rows.add(r);
    }
    // Stopping long workitems: safepoints during a launch against the
    // same launch without them (`bench_stops`).
    for r in crate::tools::bench_stops::rows(rt.workers(), s, reps)? {
        rows.add(r);
    }
    // Tails under a competing load against rayon's (`bench_load`).
    for r in crate::tools::bench_load::rows(rt, s, reps)? {
        rows.add(r);
    }
    // Compile latency: the JIT's tiers and the source front end
    // (`bench_compile`).
    for r in crate::tools::bench_compile::rows(rt, reps)? {
        rows.add(r);
    }
    Ok(())
}

/// The geometric means of the compute rows (their slowdown is the geomean
/// of the slowdowns): held to at most 1.25x, i.e. at least 80% of native
/// rayon's speed. Inserted after the last compute row.
fn geomean_row(out: &mut Vec<BenchResult>, device: Device) {
    let compute: Vec<&BenchResult> = out
        .iter()
        .filter(|r| COMPUTE.contains(&r.bench.as_str()))
        .collect();
    if compute.len() == COMPUTE.len() {
        let geo = |f: &dyn Fn(&BenchResult) -> Duration| {
            let l: f64 = compute.iter().map(|r| f(r).as_secs_f64().ln()).sum();
            Duration::from_secs_f64((l / compute.len() as f64).exp())
        };
        let row = BenchResult {
            bench: "compute geomean".into(),
            device,
            baseline: Some((
                "native rayon".into(),
                geo(&|r| r.baseline.as_ref().map_or(r.offload, |b| b.1)),
            )),
            offload: geo(&|r| r.offload),
            target: Some(Target::Slowdown(1.25)),
            note: String::new(),
        };
        let at = out
            .iter()
            .position(|r| r.bench == COMPUTE[COMPUTE.len() - 1])
            .map_or(out.len(), |i| i + 1);
        out.insert(at, row);
    }
}

/// The compute examples, each against native Rust on rayon.
const COMPUTE: [&str; 5] = ["saxpy", "mandelbrot", "nbody", "matmul", "blackscholes"];

/// The results as a table: one unit per time column (microseconds), the
/// slowdown (offload ÷ baseline) and the target in columns of their own,
/// and a missed target flagged in the `met` column.
pub fn table(rows: &[BenchResult]) -> String {
    let us = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e6);
    let mut t = offload::table::new([
        "bench",
        "device",
        "baseline",
        "offload µs",
        "baseline µs",
        "slowdown",
        "target",
        "met",
        "note",
    ]);
    for r in rows {
        t.add_row([
            r.bench.clone(),
            r.device.name().to_string(),
            r.baseline.as_ref().map_or("-".into(), |b| b.0.clone()),
            us(r.offload),
            r.baseline.as_ref().map_or("-".into(), |b| us(b.1)),
            r.slowdown().map_or("-".into(), |x| format!("{x:.2}x")),
            r.target.map_or(String::new(), Target::text),
            match r.met() {
                Some(true) => "yes".into(),
                Some(false) => "MISSED".into(),
                None => String::new(),
            },
            r.note.clone(),
        ]);
    }
    offload::table::right(&mut t, &[3, 4, 5]);
    offload::table::text(&t)
}

/// `offload bench --device cuda`: the example kernels on the GPU against the
/// same kernels in CUDA C (`benches/cuda/baselines.cu`, compiled by NVRTC
/// with `--fmad=false`), and offload's TLAB allocation against CUDA's device
/// `malloc` ([`crate::tools::cuda_cases`]). Each pair first runs once on
/// fresh inputs and the outputs are compared (bit for bit, except
/// blackscholes, whose CUDA C uses CUDA's own `expf`/`logf`: within 1e-4
/// relative), then both are timed (median of `reps`, kernels
/// synchronized). Slowdown = offload time ÷ CUDA C time.
pub fn run_cuda_c(
    rt: &Runtime,
    shrink: usize,
    reps: usize,
) -> Result<Vec<BenchResult>, OffloadError> {
    let cc = crate::tools::cuda_c::CudaC::for_runtime(rt)?;
    let mut out = Vec::new();
    for mut case in crate::tools::cuda_cases::cases(rt, shrink)? {
        let r = par_offload(0..case.items, &case.closure)?;
        let b = cc
            .run(case.kernel, case.items, &mut case.args, reps)
            .map_err(OffloadError::Setup)?;
        let note = (case.check)(&case.args)?.map_err(|w| {
            OffloadError::Setup(format!("{}: offload and CUDA C disagree: {w}", case.bench))
        })?;
        let t = offload_median(
            rt,
            || par_offload(0..case.items, &case.closure).map(|_| ()),
            reps,
        )?;
        let note = [r.fallback.unwrap_or_default(), note]
            .into_iter()
            .filter(|n| !n.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        out.push(BenchResult {
            bench: case.bench.into(),
            device: Device::Cuda,
            baseline: Some((case.baseline.into(), b)),
            offload: t,
            target: None,
            note,
        });
    }
    Ok(out)
}
