//! The policy-experiment harness: repeated launches of a workload under
//! each recompilation policy, with what each policy did and what it cost.
//!
//! Each workload is a `.obc` module (in `experiments/`, embedded here) and
//! a driver that changes its inputs from launch to launch:
//!
//! | workload | what changes |
//! |----------|--------------|
//! | `stable` | nothing: no deopts (the control) |
//! | `phase-change` | a branch never taken while profiling is taken by 10% of the workitems after the phase change |
//! | `rare-null` | 0.1% of the inputs are null after the warm-up |
//! | `megamorphic` | the receiver classes of a virtual call grow from one to five over the launches |
//! | `alloc-pressure` | a small eden: 1 KiB TLABs, every fourth refill of a launch fails, every object kept |
//! | `safepoint-storm` | a host thread requests a safepoint every 100 µs during each launch |
//!
//! The phase change (and the nulls and new classes) comes at launch
//! `max(warmup + 1, launches / 4)`. Every run of a workload sees the same
//! inputs, so the outputs — folded into a digest after every launch — must
//! be identical under every policy and equal to the interpreter's, which
//! [`run`] checks when asked.

use offload::adaptive::{Logged, decision_name};
use offload::policy::Decision;
use offload::{Arg, Array, Closure, Device, Module, OffloadError, Runtime};
use offload_deopt::Reason;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The workloads, as the CLI spells them.
pub const WORKLOADS: [&str; 6] = [
    "stable",
    "phase-change",
    "rare-null",
    "megamorphic",
    "alloc-pressure",
    "safepoint-storm",
];

/// The `.obc` source of a workload.
pub fn source(workload: &str) -> Option<&'static str> {
    Some(match workload {
        "stable" => include_str!("../../experiments/stable.obc"),
        "phase-change" => include_str!("../../experiments/phase_change.obc"),
        "rare-null" => include_str!("../../experiments/rare_null.obc"),
        "megamorphic" => include_str!("../../experiments/megamorphic.obc"),
        "alloc-pressure" => include_str!("../../experiments/alloc_pressure.obc"),
        "safepoint-storm" => include_str!("../../experiments/safepoint_storm.obc"),
        _ => return None,
    })
}

/// How an experiment runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// The device the runtime offloads to.
    pub device: Device,
    /// Launches per run, warm-up included.
    pub launches: u32,
    /// Workitems per launch.
    pub items: usize,
    /// Warm-up launches (profiled in the interpreter) before the first
    /// compiled version.
    pub warmup: u32,
    /// Worker threads (default: every core).
    pub workers: Option<usize>,
    /// Also run the workload on the interpreter and compare every
    /// launch's output with it.
    pub check: bool,
    /// Runs of each (workload, policy): the table reports their median
    /// and spread, so that noise does not read as a result.
    pub repeat: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            device: Device::Cpu,
            launches: 20,
            items: 1 << 16,
            warmup: 1,
            workers: None,
            check: false,
            repeat: 3,
        }
    }
}

impl Config {
    /// The launch (1-based) at which the inputs of the workloads that
    /// change change ([`has_phase`]).
    pub fn phase_launch(&self) -> u32 {
        (self.warmup + 1).max(self.launches / 4) + 1
    }
}

/// Whether a workload's inputs change part-way ([`Config::phase_launch`]).
pub fn has_phase(workload: &str) -> bool {
    matches!(workload, "phase-change" | "rare-null" | "megamorphic")
}

/// One launch of a run.
#[derive(Clone, Debug)]
pub struct LaunchRow {
    /// Its number, from 1 (warm-up launches first), as in the CSV, the
    /// plot and the policy's log.
    pub launch: u32,
    /// A warm-up launch (profiled in the interpreter): left out of the
    /// table's times.
    pub warmup: bool,
    /// Its wall time (compiling a new version included).
    pub time: Duration,
    /// Where it ran.
    pub device: Device,
    /// The version that ran (`None`: the interpreter).
    pub version: Option<u32>,
    /// Workitems finished on the device.
    pub on_device: u64,
    /// Workitems replayed in the interpreter.
    pub replayed: u64,
    /// Deopts by reason.
    pub deopts: BTreeMap<Reason, u64>,
    /// The policy's decision after it.
    pub decision: Option<Logged>,
}

/// A workload run under one policy.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// The workload.
    pub workload: String,
    /// The policy.
    pub policy: String,
    /// The launches of the first run.
    pub launches: Vec<LaunchRow>,
    /// Versions compiled after the first, in the first run.
    pub recompiles: u32,
    /// Every run's launches ([`Config::repeat`] runs; the first is
    /// `launches`).
    pub runs: Vec<Vec<LaunchRow>>,
    /// Whether every run produced the same outputs.
    pub runs_agree: bool,
    /// The digest of every launch's output.
    pub digest: u64,
    /// Whether the outputs equal the interpreter's (`None`: not checked).
    pub matches_interpreter: Option<bool>,
    /// Why the runtime is not on the device asked for, if it is not.
    pub fallback: Option<String>,
}

impl RunResult {
    /// Total wall time of the first run's launches after the warm-up.
    pub fn total(&self) -> Duration {
        steady(&self.launches)
    }

    /// Every run's time after the warm-up, sorted.
    pub fn steady_times(&self) -> Vec<Duration> {
        let mut t: Vec<Duration> = self.runs.iter().map(|r| steady(r)).collect();
        t.sort();
        t
    }

    /// The median run's time after the warm-up.
    pub fn median(&self) -> Duration {
        let t = self.steady_times();
        t.get(t.len() / 2).copied().unwrap_or_default()
    }

    /// The median run's launches.
    pub fn median_run(&self) -> &[LaunchRow] {
        let m = self.median();
        self.runs
            .iter()
            .find(|r| steady(r) == m)
            .map_or(&self.launches[..], |r| &r[..])
    }
    /// Workitems finished on the device, over every launch.
    pub fn on_device(&self) -> u64 {
        self.launches.iter().map(|l| l.on_device).sum()
    }
    /// Workitems replayed, over every launch.
    pub fn replayed(&self) -> u64 {
        self.launches.iter().map(|l| l.replayed).sum()
    }
    /// Deopts by reason, over every launch.
    pub fn deopts(&self) -> BTreeMap<Reason, u64> {
        let mut out = BTreeMap::new();
        for l in &self.launches {
            for (&r, &n) in &l.deopts {
                *out.entry(r).or_insert(0) += n;
            }
        }
        out
    }
    /// The last decision that was not `keep` (or `keep`), with the device
    /// the kernel ended on.
    pub fn final_decision(&self) -> String {
        let last = self
            .launches
            .iter()
            .rev()
            .filter_map(|l| l.decision.as_ref())
            .find(|d| d.version.is_some() && d.decided.decision != Decision::Keep);
        let end = self.launches.last().map_or(Device::Cpu, |l| l.device);
        match last {
            Some(d) => format!(
                "{} @{} (on {})",
                decision_name(&d.decided.decision),
                d.launch,
                end.name()
            ),
            None => format!("keep (on {})", end.name()),
        }
    }
}

/// The time of a run's launches after the warm-up.
pub fn steady(launches: &[LaunchRow]) -> Duration {
    launches.iter().filter(|l| !l.warmup).map(|l| l.time).sum()
}

/// The inputs and outputs of one workload in one runtime.
struct Driver {
    workload: String,
    module: Module,
    items: usize,
    phase: u32,
    out_f64: Option<Array<f64>>,
    out_i32: Option<Array<i32>>,
    x: Option<Array<f64>>,
    holder: Option<offload::Object>,
    kinds: i32,
}

impl Driver {
    fn new(rt: &Runtime, workload: &str, cfg: &Config) -> Result<Driver, OffloadError> {
        let src =
            source(workload).ok_or_else(|| OffloadError::Setup(unknown_workload(workload)))?;
        let module = rt.load(&format!("{workload}.obc"), src)?;
        let n = cfg.items;
        let mut d = Driver {
            workload: workload.to_string(),
            module,
            items: n,
            phase: cfg.phase_launch() - 1, // 0-based, as `j` below
            out_f64: None,
            out_i32: None,
            x: None,
            holder: None,
            kinds: 0,
        };
        if workload == "safepoint-storm" {
            d.out_i32 = Some(rt.new_array::<i32>(n)?);
        } else {
            d.out_f64 = Some(rt.new_array::<f64>(n)?);
        }
        let n32 = i32::try_from(n)
            .map_err(|_| OffloadError::Setup(format!("{n} workitems: at most {}", i32::MAX)))?;
        match workload {
            "stable" => {
                let xs: Vec<f64> = (0..n).map(|i| (i % 1000) as f64 / 1000.0).collect();
                d.x = Some(rt.array(&xs)?);
            }
            "rare-null" => {
                let h = d.module.new_object("Points")?;
                let make = d
                    .module
                    .closure("make_points", [Arg::I32(n32), (&h).into()])?;
                rt.par_offload(0..1, &make)?;
                d.holder = Some(h);
                d.fill_points(rt, false, 0)?;
            }
            "megamorphic" => {
                let h = d.module.new_object("Shapes")?;
                let make = d
                    .module
                    .closure("make_shapes", [Arg::I32(n32), (&h).into()])?;
                rt.par_offload(0..1, &make)?;
                d.holder = Some(h);
            }
            _ => {}
        }
        Ok(d)
    }

    fn fill_points(&self, rt: &Runtime, nulls: bool, seed: i64) -> Result<(), OffloadError> {
        let h = self.holder.as_ref().expect("rare-null holder");
        let fill = self.module.closure(
            "fill_points",
            [Arg::I32(i32::from(nulls)), Arg::I64(seed), h.into()],
        )?;
        rt.par_offload(0..self.items as i64, &fill)?;
        Ok(())
    }

    /// Prepare launch `j`'s inputs (untimed) and return its closure.
    fn before(&mut self, rt: &Runtime, j: u32) -> Result<Closure, OffloadError> {
        let after = j >= self.phase;
        let m = &self.module;
        let out = || -> Arg { self.out_f64.as_ref().expect("f64 output").into() };
        Ok(match self.workload.as_str() {
            "stable" => m.closure("stable", [self.x.as_ref().expect("inputs").into(), out()])?,
            "phase-change" => m.closure(
                "phase_change",
                [
                    Arg::I32(if after { 900 } else { 1000 }),
                    Arg::I64(i64::from(j) * 7919),
                    out(),
                ],
            )?,
            "rare-null" => {
                if after {
                    self.fill_points(rt, true, i64::from(j) * 7919)?;
                }
                let h = self.holder.as_ref().expect("holder");
                m.closure("rare_null", [h.into(), out()])?
            }
            "megamorphic" => {
                let kinds = if after {
                    (2 + (j - self.phase) as i32 / 2).min(5)
                } else {
                    1
                };
                let h = self.holder.clone().expect("holder");
                if kinds != self.kinds {
                    let fill = m.closure("fill_shapes", [Arg::I32(kinds), (&h).into()])?;
                    rt.par_offload(0..self.items as i64, &fill)?;
                    self.kinds = kinds;
                }
                m.closure("total_area", [(&h).into(), out()])?
            }
            "alloc-pressure" => m.closure("alloc_pressure", [Arg::I32(4), out()])?,
            "safepoint-storm" => m.closure(
                "safepoint_storm",
                [self.out_i32.as_ref().expect("i32 output").into()],
            )?,
            other => return Err(OffloadError::Setup(unknown_workload(other))),
        })
    }

    /// Fold the output into `digest`.
    fn digest(&self, rt: &Runtime, digest: &mut u64) -> Result<(), OffloadError> {
        let mut fold = |bits: u64| {
            *digest = (*digest ^ bits).wrapping_mul(0x0100_0000_01b3);
        };
        if let Some(o) = &self.out_f64 {
            for v in rt.read(o)? {
                fold(v.to_bits());
            }
        }
        if let Some(o) = &self.out_i32 {
            for v in rt.read(o)? {
                fold(u64::from(v as u32));
            }
        }
        Ok(())
    }
}

fn unknown_workload(w: &str) -> String {
    format!(
        "unknown workload `{w}` (available: {})",
        WORKLOADS.join(", ")
    )
}

/// The runtime a workload runs in under `policy`.
fn runtime(
    workload: &str,
    policy: &str,
    cfg: &Config,
    device: Device,
) -> Result<Runtime, OffloadError> {
    let mut b = Runtime::builder().device(device).policy(policy).speculate(
        if device == Device::Interpreter {
            0
        } else {
            cfg.warmup.max(1)
        },
    );
    if let Some(w) = cfg.workers {
        b = b.workers(w);
    }
    if workload == "alloc-pressure" {
        // Every object is kept (no nursery reset, nothing handed back at
        // the end), so that each launch allocates all of its lists from
        // eden, as a kernel whose objects outlive it would.
        b = b.tlab_bytes(1024).fail_refills(4, 4).reclaim(false);
    }
    b.build()
}

/// Run `workload` under `policy` for `cfg.launches` launches; `tick` is
/// called after every launch (a progress bar).
pub fn run(
    workload: &str,
    policy: &str,
    cfg: &Config,
    tick: &dyn Fn(),
) -> Result<RunResult, OffloadError> {
    let reference = if cfg.check {
        Some(run_on(workload, "never", cfg, Device::Interpreter, &|| ())?.digest_trace)
    } else {
        None
    };
    let mut r = run_on(workload, policy, cfg, cfg.device, tick)?;
    r.result.matches_interpreter = reference.map(|t| t == r.digest_trace);
    for _ in 1..cfg.repeat.max(1) {
        let again = run_on(workload, policy, cfg, cfg.device, tick)?;
        r.result.runs_agree &= again.digest_trace == r.digest_trace;
        r.result.runs.push(again.result.launches);
    }
    Ok(r.result)
}

struct Traced {
    result: RunResult,
    digest_trace: Vec<u64>,
}

fn run_on(
    workload: &str,
    policy: &str,
    cfg: &Config,
    device: Device,
    tick: &dyn Fn(),
) -> Result<Traced, OffloadError> {
    let rt = runtime(workload, policy, cfg, device)?;
    let mut d = Driver::new(&rt, workload, cfg)?;
    let mut rows = Vec::new();
    let mut digest = 0xcbf2_9ce4_8422_2325u64;
    let mut trace = Vec::new();
    let mut closure = None;
    for j in 0..cfg.launches {
        let c = d.before(&rt, j)?;
        let storm = (workload == "safepoint-storm").then(|| Storm::start(&rt));
        let t = Instant::now();
        let rep = rt.par_offload(0..cfg.items as i64, &c);
        let time = t.elapsed();
        drop(storm);
        let rep = rep?;
        d.digest(&rt, &mut digest)?;
        trace.push(digest);
        let mut deopts = BTreeMap::new();
        for (&(_, r), &n) in &rep.deopts {
            *deopts.entry(r).or_insert(0) += n;
        }
        rows.push(LaunchRow {
            launch: j + 1,
            warmup: j < cfg.warmup,
            time,
            device: rep.device,
            version: rep.version,
            on_device: if rep.device == Device::Interpreter {
                0
            } else {
                rep.on_device
            },
            replayed: rep.replayed,
            deopts,
            decision: rep.decision.clone(),
        });
        closure = Some(c);
        tick();
    }
    let recompiles = closure
        .as_ref()
        .and_then(|c| rt.kernel_info(c))
        .map_or(0, |i| i.recompiles);
    Ok(Traced {
        result: RunResult {
            workload: workload.to_string(),
            policy: policy.to_string(),
            runs: vec![rows.clone()],
            runs_agree: true,
            launches: rows,
            recompiles,
            digest,
            matches_interpreter: None,
            fallback: rt.fallback().map(str::to_string),
        },
        digest_trace: trace,
    })
}

/// A host thread that requests a safepoint every 100 µs until dropped.
struct Storm {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Storm {
    fn start(rt: &Runtime) -> Storm {
        let stop = Arc::new(AtomicBool::new(false));
        let (rt, flag) = (rt.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                rt.safepoint(|_| ());
                std::thread::sleep(Duration::from_micros(100));
            }
        });
        Storm {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Storm {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `d` in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Deopt counts by reason as `reason:n ...` (`-` for none).
pub fn reasons_text(m: &BTreeMap<Reason, u64>) -> String {
    if m.is_empty() {
        return "-".into();
    }
    m.iter()
        .map(|(r, n)| format!("{}:{n}", r.name()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The results as a table, one row per (workload, policy): the time of
/// the launches after the warm-up, the median of [`Config::repeat`] runs
/// with the fastest and slowest, that median relative to the best policy's
/// on the workload (`~` when its runs overlap the best policy's: within
/// noise), and what the first run did.
pub fn table(results: &[RunResult]) -> String {
    let mut t = offload::table::new([
        "workload",
        "policy",
        "median ms",
        "min–max ms",
        "vs best",
        "on device",
        "replayed",
        "recompiles",
        "deopts by reason",
        "final decision",
        "= interp",
    ]);
    for r in results {
        let best = results
            .iter()
            .filter(|o| o.workload == r.workload)
            .min_by_key(|o| o.median())
            .unwrap_or(r);
        let times = r.steady_times();
        // Within noise of the best: its fastest run is no slower than the
        // best policy's slowest.
        let overlaps = !std::ptr::eq(best, r) && times.first() <= best.steady_times().last();
        t.add_row([
            r.workload.clone(),
            r.policy.clone(),
            format!("{:.1}", ms(r.median())),
            format!(
                "{:.1}–{:.1}",
                ms(times.first().copied().unwrap_or_default()),
                ms(times.last().copied().unwrap_or_default())
            ),
            format!(
                "{:.2}x{}",
                r.median().as_secs_f64() / best.median().as_secs_f64().max(1e-12),
                if overlaps { " ~" } else { "" }
            ),
            r.on_device().to_string(),
            r.replayed().to_string(),
            r.recompiles.to_string(),
            reasons_text(&r.deopts()),
            r.final_decision(),
            match (r.matches_interpreter, r.runs_agree) {
                (_, false) => "RUNS DIFFER",
                (Some(true), true) => "yes",
                (Some(false), true) => "NO",
                (None, true) => "-",
            }
            .to_string(),
        ]);
    }
    offload::table::right(&mut t, &[2, 3, 4, 5, 6, 7]);
    offload::table::text(&t)
}
