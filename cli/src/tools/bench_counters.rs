//! `offload bench --device cuda --counters`: per example kernel, what a
//! warm launch of offload's kernel costs beside the same kernel in CUDA C
//! ([`crate::tools::cuda_cases`]), counter by counter, with their ratios —
//! the evidence for the GPU's speed that needs no GPU.
//!
//! Each side is launched once on fresh inputs and the outputs compared,
//! then launched again until warm (offload: its optimized tier compiled,
//! the heap resident); the counted launch is the next one. On the
//! virtual GPU every counter is exact; on a real GPU the simulator's
//! counters are absent and the median times of `reps` launches are added.
//!
//! # The counters (`offload` and `baseline` maps, per kernel)
//!
//! From the virtual GPU's cost model (`offload_vgpu::cost`), over every
//! kernel launch the warm launch made:
//!
//! - `instructions`: PTX instructions executed by all threads.
//! - `instructions_per_item`: `instructions` ÷ the launch's workitems.
//! - `instructions_per_iteration`: `instructions` ÷ the iterations of the
//!   kernel's inner loop over the launch (mandelbrot: the escape counts
//!   summed; nbody: bodies²; matmul: n³; alloc: items × count) — the
//!   per-item work included, so an upper bound on the loop's own cost.
//! - `mem_instructions`: warp-wide global loads, stores and atomics.
//! - `sectors`: the 32-byte sectors those touched (coalescing).
//! - `atomics`: thread-level atomics and reductions on global memory;
//!   `atomic_chain`: the most on any one address in one kernel launch.
//! - `strong_loads`, `sys_loads`: `.volatile`/`.relaxed`/`.acquire` loads,
//!   and the `.sys`-scoped ones among them; `fences`, `sys_fences` the same
//!   for fences.
//! - `warps`: warps launched (threads ÷ 32, rounded up per launch).
//!
//! From the driver (the virtual GPU's shim counts every call the program
//! makes, by name), over the warm launch from its call to its return:
//!
//! - `driver_calls`: every call but the polls.
//! - `polls`: `cuStreamQuery` and `cuEventQuery` calls (how often the host
//!   looked whether the device was done: their number grows with the
//!   kernel's time, which on the virtual GPU is the simulator's).
//! - `kernel_launches`, `allocations` (device and pinned memory), `frees`,
//!   `event_creations`, `memsets`, `copies_back` (device to host, either
//!   way), `sync_copies` (copies that block the host), `host_syncs` (stream,
//!   event and context synchronizations, and synchronous copies to the
//!   host: every time the host waits for the device).
//!
//! From `ptxas -v` for sm_90 (when `ptxas` is found, on any GPU):
//! `registers` per thread and `spill_bytes` (spill stores plus loads).
//!
//! On a real GPU: `time_us`, the median time of a launch in microseconds.
//!
//! `ratios` holds offload ÷ CUDA C for every counter both sides have and
//! the baseline's is not zero.

use crate::tools::cuda_c::CudaC;
use crate::tools::cuda_cases::{Case, cases};
use crate::tools::vgpu_counters;
use offload::{OffloadError, Runtime, par_offload};
use offload_jit::ptxas::Resources;
use std::collections::BTreeMap;
use std::time::Instant;

/// One kernel's counters, both sides.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CounterRow {
    /// The benchmark.
    pub bench: String,
    /// offload's counters (see the module docs for each name).
    pub offload: BTreeMap<String, f64>,
    /// CUDA C's.
    pub baseline: BTreeMap<String, f64>,
    /// offload ÷ CUDA C, per counter both have (baseline not zero).
    pub ratios: BTreeMap<String, f64>,
    /// What the counters are held to (issue 47's targets), by name.
    #[serde(skip)]
    pub targets: Vec<(&'static str, Goal)>,
    /// A note (a fallback, a baseline the virtual GPU cannot run).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub note: String,
    /// What `baseline` is, when not CUDA C (the dispatch rows compare
    /// dispatch by address with dispatch by header: `by header`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub versus: Option<String>,
}

/// What a counter is held to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Goal {
    /// offload ÷ CUDA C at most this.
    Ratio(f64),
    /// offload's value at most this.
    AtMost(f64),
}

impl Goal {
    fn text(self) -> String {
        match self {
            Goal::Ratio(x) => format!("≤ {x:.2}x"),
            Goal::AtMost(v) => format!("≤ {v}"),
        }
    }
}

impl CounterRow {
    /// Whether counter `name` meets its goal (`None`: no goal, or not
    /// measured).
    pub fn met(&self, name: &str) -> Option<bool> {
        let goal = self.targets.iter().find(|(n, _)| *n == name)?.1;
        match goal {
            Goal::Ratio(x) => self.ratios.get(name).map(|r| *r <= x + 1e-9),
            Goal::AtMost(v) => self.offload.get(name).map(|o| *o <= v),
        }
    }

    /// The row as one JSON object: `bench`, `offload`, `baseline`,
    /// `ratios` (and `note` when there is one).
    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("a counter row serializes")
    }
}

/// `offload ÷ baseline` for every counter both sides have, the
/// baseline's not zero ([`CounterRow::ratios`]).
pub(crate) fn ratios(
    offload: &BTreeMap<String, f64>,
    baseline: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    offload
        .iter()
        .filter_map(|(k, o)| {
            let b = *baseline.get(k)?;
            (b != 0.0).then(|| (k.clone(), o / b))
        })
        .collect()
}

/// The driver-call counters from the shim's calls by name.
fn driver(m: &BTreeMap<String, u64>, out: &mut BTreeMap<String, f64>) {
    let sum = |names: &[&str]| -> f64 {
        names
            .iter()
            .map(|n| m.get(&format!("call.{n}")).copied().unwrap_or(0))
            .sum::<u64>() as f64
    };
    let polls = sum(&["cuStreamQuery", "cuEventQuery"]);
    out.insert(
        "driver_calls".into(),
        m.get("driver_calls").copied().unwrap_or(0) as f64 - polls,
    );
    out.insert("polls".into(), polls);
    out.insert("kernel_launches".into(), sum(&["cuLaunchKernel"]));
    out.insert(
        "allocations".into(),
        sum(&[
            "cuMemAlloc_v2",
            "cuMemAllocAsync",
            "cuMemHostAlloc",
            "cuMemAllocHost_v2",
        ]),
    );
    out.insert(
        "frees".into(),
        sum(&["cuMemFree_v2", "cuMemFreeAsync", "cuMemFreeHost"]),
    );
    out.insert("event_creations".into(), sum(&["cuEventCreate"]));
    out.insert(
        "memsets".into(),
        sum(&[
            "cuMemsetD8_v2",
            "cuMemsetD8Async",
            "cuMemsetD32_v2",
            "cuMemsetD32Async",
        ]),
    );
    out.insert(
        "copies_back".into(),
        sum(&["cuMemcpyDtoH_v2", "cuMemcpyDtoHAsync_v2"]),
    );
    out.insert(
        "sync_copies".into(),
        sum(&["cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyDtoD_v2"]),
    );
    out.insert(
        "host_syncs".into(),
        sum(&[
            "cuStreamSynchronize",
            "cuEventSynchronize",
            "cuCtxSynchronize",
            "cuMemcpyDtoH_v2",
        ]),
    );
}

/// The cost model's counters of a warm launch, per item and iteration.
pub(crate) fn simulated(
    m: &BTreeMap<String, u64>,
    items: i64,
    iterations: Option<u64>,
    out: &mut BTreeMap<String, f64>,
) {
    let get = |k: &str| m.get(k).copied().unwrap_or(0) as f64;
    for k in [
        "instructions",
        "mem_instructions",
        "sectors",
        "atomics",
        "atomic_chain",
        "strong_loads",
        "sys_loads",
        "fences",
        "sys_fences",
    ] {
        out.insert(k.into(), get(k));
    }
    out.insert("warps".into(), (get("threads") / 32.0).ceil());
    out.insert(
        "instructions_per_item".into(),
        get("instructions") / items.max(1) as f64,
    );
    if let Some(it) = iterations {
        out.insert(
            "instructions_per_iteration".into(),
            get("instructions") / it.max(1) as f64,
        );
    }
    driver(m, out);
}

/// Counts `launch` (one warm launch): the simulator's counters around it.
pub(crate) fn counted(
    mut launch: impl FnMut() -> Result<(), OffloadError>,
) -> Result<Option<BTreeMap<String, u64>>, OffloadError> {
    if !vgpu_counters::reset() {
        launch()?;
        return Ok(None);
    }
    launch()?;
    Ok(vgpu_counters::counters())
}

/// `ptxas -v`'s registers and spills of each entry of `ptx` for sm_90
/// (none when ptxas is not found or rejects it).
pub(crate) fn resources(ptx: &str) -> BTreeMap<String, Resources> {
    offload_jit::ptxas::find()
        .and_then(|ptxas| offload_jit::ptxas::resources(&ptxas, ptx, "sm_90"))
        .unwrap_or_default()
}

/// An entry's `registers` and `spill_bytes` counters, if it was assembled.
pub(crate) fn put_resources(r: Option<&Resources>, out: &mut BTreeMap<String, f64>) {
    if let Some(r) = r {
        out.insert("registers".into(), f64::from(r.registers));
        out.insert("spill_bytes".into(), f64::from(r.spill_bytes));
    }
}

/// The targets of a kernel's counters.
fn targets(case: &Case<'_>, warps: f64) -> Vec<(&'static str, Goal)> {
    let mut t = vec![
        ("instructions_per_item", Goal::Ratio(1.5)),
        ("sectors", Goal::Ratio(1.2)),
        ("registers", Goal::Ratio(1.5)),
        (
            "atomic_chain",
            Goal::AtMost(if case.allocates { warps } else { 0.0 }),
        ),
    ];
    if case.iterations.is_some() {
        t.push(("instructions_per_iteration", Goal::Ratio(1.5)));
    }
    if !case.allocates {
        t.extend([
            ("allocations", Goal::AtMost(0.0)),
            ("event_creations", Goal::AtMost(0.0)),
            ("memsets", Goal::AtMost(2.0)),
            ("kernel_launches", Goal::AtMost(1.0)),
            ("copies_back", Goal::AtMost(1.0)),
            ("host_syncs", Goal::AtMost(1.0)),
        ]);
    }
    t
}

/// Runs every case on `rt` (a CUDA runtime) and counts both sides.
pub fn run(rt: &Runtime, shrink: usize, reps: usize) -> Result<Vec<CounterRow>, OffloadError> {
    let cc = CudaC::for_runtime(rt)?;
    let virtual_gpu = rt.gpu_is_virtual();
    // The baselines are one module: assembled once for every kernel.
    let baseline_resources = resources(cc.ptx());
    let mut rows = Vec::new();
    for mut case in cases(rt, shrink)? {
        let mut row = CounterRow {
            bench: case.bench.into(),
            offload: BTreeMap::new(),
            baseline: BTreeMap::new(),
            ratios: BTreeMap::new(),
            targets: Vec::new(),
            note: String::new(),
            versus: None,
        };
        let first = par_offload(0..case.items, &case.closure)?;
        if let Some(f) = first.fallback {
            row.note = f;
        }
        let run_baseline = !(virtual_gpu && case.allocates);
        let prepared = if run_baseline {
            let p = cc
                .prepare(case.kernel, &case.args)
                .map_err(OffloadError::Setup)?;
            p.launch(case.items, &case.args)
                .map_err(OffloadError::Setup)?;
            p.download(&mut case.args).map_err(OffloadError::Setup)?;
            let note = (case.check)(&case.args)?.map_err(|w| {
                OffloadError::Setup(format!("{}: offload and CUDA C disagree: {w}", case.bench))
            })?;
            if !note.is_empty() {
                row.note = note;
            }
            Some(p)
        } else {
            row.note = "CUDA C's device malloc does not run on the virtual GPU".into();
            None
        };

        // offload: warm (optimized tier, heap resident), then counted.
        rt.finish_compiles();
        par_offload(0..case.items, &case.closure)?;
        let launch = || par_offload(0..case.items, &case.closure).map(|_| ());
        let counts = counted(launch)?;
        // Both sides run the same inner-loop iterations (their outputs
        // agree), read from offload's.
        let it = match &counts {
            Some(_) => case.iterations.as_ref().map(|f| f()).transpose()?,
            None => None,
        };
        if let Some(m) = &counts {
            simulated(m, case.items, it, &mut row.offload);
        }
        let ptx = case
            .closure
            .module()
            .ptx(case.closure.kernel_name())
            .unwrap_or_default();
        put_resources(resources(&ptx).values().next(), &mut row.offload);

        if let Some(p) = &prepared {
            let args = &case.args;
            let launch = || p.launch(case.items, args).map_err(OffloadError::Setup);
            if let Some(m) = counted(launch)? {
                simulated(&m, case.items, it, &mut row.baseline);
            }
            put_resources(baseline_resources.get(case.kernel), &mut row.baseline);
        }

        if !virtual_gpu {
            let time = |f: &mut dyn FnMut() -> Result<(), OffloadError>| {
                let mut t = Vec::with_capacity(reps.max(1));
                for _ in 0..reps.max(1) {
                    let t0 = Instant::now();
                    f()?;
                    t.push(t0.elapsed());
                }
                Ok::<_, OffloadError>(crate::tools::bench::middle(t))
            };
            let t = time(&mut || par_offload(0..case.items, &case.closure).map(|_| ()))?;
            row.offload.insert("time_us".into(), t.as_secs_f64() * 1e6);
            if let Some(p) = &prepared {
                let args = &case.args;
                let b = time(&mut || p.launch(case.items, args).map_err(OffloadError::Setup))?;
                row.baseline.insert("time_us".into(), b.as_secs_f64() * 1e6);
            }
        }

        row.ratios = ratios(&row.offload, &row.baseline);
        let warps = row.offload.get("warps").copied().unwrap_or(0.0);
        row.targets = targets(&case, warps);
        rows.push(row);
    }
    Ok(rows)
}

/// `offload bench --counters`: [`run`] on `rt`, printed as a table (or
/// JSON lines), and the targets missed named on standard error. An error
/// (its text) unless `rt` runs on the CUDA device.
pub fn command(rt: &Runtime, shrink: usize, reps: usize, json: bool) -> Result<(), String> {
    if rt.device() != offload::Device::Cuda {
        return Err(format!(
            "--counters compares the CUDA device with CUDA C; the runtime runs on the {} device{}",
            rt.device().name(),
            rt.fallback()
                .map_or(String::new(), |why| format!(" ({why})"))
        ));
    }
    let mut rows = run(rt, shrink, reps).map_err(|e| e.to_string())?;
    rows.extend(crate::tools::bench_reduce::counter_rows(rt, shrink).map_err(|e| e.to_string())?);
    let dispatch =
        crate::tools::bench_dispatch::counter_rows(rt, shrink).map_err(|e| e.to_string())?;
    let summed = crate::tools::bench_summed::counter_rows(rt, shrink).map_err(|e| e.to_string())?;
    if json {
        for r in rows.iter().chain(&dispatch).chain(&summed) {
            println!("{}", r.json());
        }
    } else {
        println!(
            "offload bench --counters on {}: one warm launch per kernel, offload against CUDA C (ratio = offload ÷ CUDA C)",
            rt.gpu().unwrap_or_default()
        );
        print!("{}", table(&rows, "CUDA C"));
        if !dispatch.is_empty() {
            println!(
                "virtual calls: one warm launch each, dispatch by address against by header (ratio = by address ÷ by header; a dispatch is a warp-wide load that finds the receivers' classes)"
            );
            print!("{}", table(&dispatch, "by header"));
        }
        if !summed.is_empty() {
            println!(
                "arrays summed into: one warm launch each, the histogram's bins summed into (a copy per block) against atomics on the bins (ratio = summed ÷ atomics)"
            );
            print!("{}", table(&summed, "atomics"));
        }
    }
    rows.extend(dispatch);
    rows.extend(summed);
    let missed: Vec<String> = rows
        .iter()
        .flat_map(|r| {
            r.targets
                .iter()
                .filter(|(n, _)| r.met(n) == Some(false))
                .map(|(n, _)| format!("{} {n}", r.bench))
                .collect::<Vec<_>>()
        })
        .collect();
    if !missed.is_empty() {
        eprintln!(
            "{} counter target(s) missed: {}",
            missed.len(),
            missed.join(", ")
        );
    }
    Ok(())
}

/// The counters as a table: a row per kernel and counter, the baseline's
/// column headed `baseline`.
pub fn table(rows: &[CounterRow], baseline: &str) -> String {
    let mut t = offload::table::new([
        "kernel", "counter", "offload", baseline, "ratio", "target", "met",
    ]);
    let num = |v: Option<&f64>| match v {
        None => "-".to_string(),
        Some(v) if v.fract() == 0.0 => format!("{v:.0}"),
        Some(v) => format!("{v:.2}"),
    };
    for r in rows {
        let mut names: Vec<&String> = r.offload.keys().chain(r.baseline.keys()).collect();
        names.sort();
        names.dedup();
        for n in names {
            let goal = r.targets.iter().find(|(g, _)| g == n).map(|(_, g)| *g);
            t.add_row([
                r.bench.clone(),
                n.clone(),
                num(r.offload.get(n)),
                num(r.baseline.get(n)),
                r.ratios.get(n).map_or("-".into(), |x| format!("{x:.2}x")),
                goal.map_or(String::new(), Goal::text),
                match r.met(n) {
                    Some(true) => "yes".into(),
                    Some(false) => "MISSED".into(),
                    None => String::new(),
                },
            ]);
        }
    }
    offload::table::right(&mut t, &[2, 3, 4]);
    let mut text = offload::table::text(&t);
    for r in rows.iter().filter(|r| !r.note.is_empty()) {
        text.push_str(&format!("note: {}: {}\n", r.bench, r.note));
    }
    text
}
