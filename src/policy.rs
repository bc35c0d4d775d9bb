//! Recompilation policies: after every launch of a kernel, a [`Policy`]
//! looks at what the launch did — deopts per (kernel version, site, reason),
//! how much work ran on the device and how much the host replayed, and how
//! long each took — and returns a [`Decision`] with its reason: keep the
//! code, recompile without the speculations that failed, resize TLABs or
//! chunks, stop offloading the kernel to this device, or try offloading
//! again later.
//!
//! Sumatra counted deopt reasons and never acted on them; the built-in
//! policies here are the ones the experiment harness compares:
//!
//! * [`Never`] — Sumatra's behaviour: always keep the code.
//! * [`TrapLimit`] — HotSpot's per-bytecode and per-method trap limits
//!   (`PerBytecodeTrapLimit`, `PerMethodTrapLimit`): a speculation whose site
//!   trapped more than the per-site limit is dropped at the next recompile;
//!   past the per-kernel limit every speculation is.
//! * [`DeoptRate`] — a threshold on the fraction of workitems deopted in a
//!   launch.
//! * [`CostModel`] — compares measured device time with measured replay
//!   time and acts when the replay dominates.
//!
//! Policies are pure functions of the launch history, so they are tested on
//! synthetic deopt streams (below) as well as end to end.

use crate::device::Device;
use offload_deopt::Reason;
use offload_ir::SiteId;
use std::collections::BTreeMap;
use std::time::Duration;

/// What one launch of one kernel version did, as policies see it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LaunchOutcome {
    /// The kernel version that ran.
    pub version: u32,
    /// Workitems in the launch.
    pub workitems: u64,
    /// Workitems that ran to the end on the device.
    pub on_device: u64,
    /// Workitems the host replayed after a deopt.
    pub replayed: u64,
    /// Stopped workitems the device resumed itself
    /// ([`crate::LaunchReport::resumed`]): deopts as much as replays
    /// (each stopped the workitem and saved its frames), so they count in
    /// `deopts` and the deopt rate too.
    pub resumed: u64,
    /// Deopts by (site of the version, reason).
    pub deopts: BTreeMap<(SiteId, Reason), u64>,
    /// Time on the device (launches, including never-ran relaunches).
    pub device_time: Duration,
    /// Time the host spent replaying.
    pub replay_time: Duration,
}

impl LaunchOutcome {
    /// Deopts per workitem: records replayed or resumed on the device,
    /// over the workitems of the launch.
    pub fn deopt_rate(&self) -> f64 {
        if self.workitems == 0 {
            0.0
        } else {
            (self.replayed + self.resumed) as f64 / self.workitems as f64
        }
    }

    /// Deopts whose reason is a failed speculation (`Unreached`, `TypeGuard`).
    pub fn speculation_failures(&self) -> impl Iterator<Item = ((SiteId, Reason), u64)> + '_ {
        self.deopts
            .iter()
            .filter(|((_, r), _)| is_speculative(*r))
            .map(|(&k, &n)| (k, n))
    }
}

/// Whether deopts for `r` mean a speculation failed (and recompiling without
/// it would stop them), rather than a real check, a safepoint or the heap.
pub fn is_speculative(r: Reason) -> bool {
    matches!(r, Reason::Unreached | Reason::TypeGuard)
}

/// What to do after a launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Keep running this version.
    Keep,
    /// Compile a new version without the speculations guarded by these
    /// sites of the current version (`None`: without any speculation).
    Recompile {
        /// The failed speculations, by (site, reason).
        drop: Option<Vec<(SiteId, Reason)>>,
    },
    /// Change the shared TLAB size (bytes) or the chunk size (workitems).
    Resize {
        /// New TLAB size, if changed.
        tlab_bytes: Option<usize>,
        /// New chunk size, if changed.
        chunk: Option<u64>,
    },
    /// Stop offloading this kernel to the current device: run it on `to`
    /// (the CPU JIT instead of the GPU, the interpreter instead of the CPU).
    StopOffloading {
        /// Where it runs from now on.
        to: Device,
    },
    /// Go back to the offloading device after this many more launches.
    RetryLater {
        /// Launches to wait.
        after: u32,
    },
}

/// A decision with the policy's reason for it (logged by the runtime).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decided {
    /// What to do.
    pub decision: Decision,
    /// Why, in words.
    pub why: String,
}

impl Decided {
    fn keep(why: impl Into<String>) -> Decided {
        Decided {
            decision: Decision::Keep,
            why: why.into(),
        }
    }
}

/// What a policy knows besides the launch: the device the kernel runs on
/// and the launches before (oldest first).
#[derive(Clone, Debug)]
pub struct Context<'a> {
    /// The device this launch ran on.
    pub device: Device,
    /// The current shared TLAB size in bytes.
    pub tlab_bytes: usize,
    /// Earlier launches of the kernel (every version), oldest first.
    pub history: &'a [LaunchOutcome],
}

/// A recompilation policy.
pub trait Policy: Send {
    /// Its name (as the CLI spells it).
    fn name(&self) -> &'static str;
    /// The decision after `launch`.
    fn decide(&mut self, launch: &LaunchOutcome, cx: &Context<'_>) -> Decided;
}

/// The device below `d`: the CPU JIT under the GPU, the interpreter under
/// the CPU JIT (and under itself).
pub fn fallback_device(d: Device) -> Device {
    match d {
        Device::Cuda => Device::Cpu,
        Device::Cpu | Device::Interpreter => Device::Interpreter,
    }
}

/// A TLAB refill failure rate above which the TLAB is doubled.
const ALLOC_FAILURE_RATE: f64 = 0.01;

/// Shared by the policies: doubling the TLAB when allocation failures are a
/// noticeable share of the workitems.
fn resize_for_allocation(launch: &LaunchOutcome, cx: &Context<'_>) -> Option<Decided> {
    let fails: u64 = launch
        .deopts
        .iter()
        .filter(|((_, r), _)| *r == Reason::AllocationFailure)
        .map(|(_, n)| n)
        .sum();
    (launch.workitems > 0 && fails as f64 / launch.workitems as f64 > ALLOC_FAILURE_RATE).then(
        || Decided {
            decision: Decision::Resize {
                tlab_bytes: Some(cx.tlab_bytes.saturating_mul(2)),
                chunk: None,
            },
            why: format!(
                "{fails} allocation failures in {} workitems: doubling the TLAB to {} bytes",
                launch.workitems,
                cx.tlab_bytes.saturating_mul(2)
            ),
        },
    )
}

/// Sumatra's behaviour: count, never act.
#[derive(Clone, Debug, Default)]
pub struct Never;

impl Policy for Never {
    fn name(&self) -> &'static str {
        "never"
    }
    fn decide(&mut self, launch: &LaunchOutcome, _: &Context<'_>) -> Decided {
        Decided::keep(format!(
            "never recompiles ({} deopts counted)",
            launch.deopts.values().sum::<u64>()
        ))
    }
}

/// HotSpot's trap limits: per site (bytecode) and per kernel (method),
/// counted over every launch of the current version.
#[derive(Clone, Debug)]
pub struct TrapLimit {
    /// Failed-speculation deopts at one site before that speculation is
    /// dropped (HotSpot's `PerBytecodeTrapLimit` is 4).
    pub per_site: u64,
    /// Failed-speculation deopts in the kernel before every speculation is
    /// dropped (HotSpot's `PerMethodTrapLimit` is 100).
    pub per_kernel: u64,
}

impl Default for TrapLimit {
    fn default() -> Self {
        TrapLimit {
            per_site: 4,
            per_kernel: 100,
        }
    }
}

impl Policy for TrapLimit {
    fn name(&self) -> &'static str {
        "trap-limit"
    }
    fn decide(&mut self, launch: &LaunchOutcome, cx: &Context<'_>) -> Decided {
        // Traps of this version so far: earlier launches of it plus this one.
        let mut per_site: BTreeMap<(SiteId, Reason), u64> = BTreeMap::new();
        for l in cx
            .history
            .iter()
            .filter(|l| l.version == launch.version)
            .chain(std::iter::once(launch))
        {
            for (k, n) in l.speculation_failures() {
                *per_site.entry(k).or_default() += n;
            }
        }
        let total: u64 = per_site.values().sum();
        if total > self.per_kernel {
            return Decided {
                decision: Decision::Recompile { drop: None },
                why: format!(
                    "{total} failed speculations in version {} exceed the per-kernel limit {}: recompiling without speculation",
                    launch.version, self.per_kernel
                ),
            };
        }
        let over: Vec<(SiteId, Reason)> = per_site
            .iter()
            .filter(|&(_, &n)| n > self.per_site)
            .map(|(&k, _)| k)
            .collect();
        if !over.is_empty() {
            let sites: Vec<String> = over
                .iter()
                .map(|(s, r)| format!("{} at site {}", r.name(), s.0))
                .collect();
            return Decided {
                decision: Decision::Recompile { drop: Some(over) },
                why: format!(
                    "over the per-site limit {}: {}",
                    self.per_site,
                    sites.join(", ")
                ),
            };
        }
        resize_for_allocation(launch, cx)
            .unwrap_or_else(|| Decided::keep(format!("{total} failed speculations, within limits")))
    }
}

/// Acts when more than `threshold` of a launch's workitems deoptimized:
/// recompiles without the failed speculations when there are any, and
/// otherwise stops offloading the kernel to this device.
#[derive(Clone, Debug)]
pub struct DeoptRate {
    /// The fraction of workitems (0..1).
    pub threshold: f64,
}

impl Default for DeoptRate {
    fn default() -> Self {
        DeoptRate { threshold: 0.05 }
    }
}

impl Policy for DeoptRate {
    fn name(&self) -> &'static str {
        "deopt-rate"
    }
    fn decide(&mut self, launch: &LaunchOutcome, cx: &Context<'_>) -> Decided {
        let rate = launch.deopt_rate();
        if rate <= self.threshold {
            return resize_for_allocation(launch, cx).unwrap_or_else(|| {
                Decided::keep(format!(
                    "{:.2}% deopted, under {:.2}%",
                    rate * 100.0,
                    self.threshold * 100.0
                ))
            });
        }
        let failed: Vec<(SiteId, Reason)> = launch.speculation_failures().map(|(k, _)| k).collect();
        if !failed.is_empty() {
            return Decided {
                decision: Decision::Recompile { drop: Some(failed) },
                why: format!(
                    "{:.2}% deopted (over {:.2}%), from failed speculations",
                    rate * 100.0,
                    self.threshold * 100.0
                ),
            };
        }
        if let Some(d) = resize_for_allocation(launch, cx) {
            return d;
        }
        let to = fallback_device(cx.device);
        Decided {
            decision: Decision::StopOffloading { to },
            why: format!(
                "{:.2}% deopted (over {:.2}%) with no speculation to drop: running on the {} device",
                rate * 100.0,
                self.threshold * 100.0,
                to.name()
            ),
        }
    }
}

/// Compares measured device time with measured replay time: when replaying
/// costs more than `dominance` × the device time, it recompiles without the
/// failed speculations if there are any, else stops offloading — and tries
/// the device again after `retry_after` launches, since the inputs (and so
/// the deopts) may change.
#[derive(Clone, Debug)]
pub struct CostModel {
    /// How many times the device time replay must cost to act.
    pub dominance: f64,
    /// Launches to wait before offloading again after stopping.
    pub retry_after: u32,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            dominance: 1.0,
            retry_after: 8,
        }
    }
}

impl Policy for CostModel {
    fn name(&self) -> &'static str {
        "cost-model"
    }
    fn decide(&mut self, launch: &LaunchOutcome, cx: &Context<'_>) -> Decided {
        let (dev, rep) = (
            launch.device_time.as_secs_f64(),
            launch.replay_time.as_secs_f64(),
        );
        if cx.device == Device::Interpreter {
            // Not offloaded now: go back once the wait is over.
            let since = cx
                .history
                .iter()
                .rev()
                .take_while(|l| l.on_device == 0 && l.replayed == 0)
                .count() as u32
                + 1;
            if since >= self.retry_after {
                return Decided {
                    decision: Decision::RetryLater { after: 0 },
                    why: format!("{since} launches off the device: trying it again"),
                };
            }
            return Decided::keep(format!("off the device for {since} launches"));
        }
        if rep <= self.dominance * dev {
            return resize_for_allocation(launch, cx).unwrap_or_else(|| {
                Decided::keep(format!(
                    "replay {:.3} ms vs device {:.3} ms",
                    rep * 1e3,
                    dev * 1e3
                ))
            });
        }
        let failed: Vec<(SiteId, Reason)> = launch.speculation_failures().map(|(k, _)| k).collect();
        if !failed.is_empty() {
            return Decided {
                decision: Decision::Recompile { drop: Some(failed) },
                why: format!(
                    "replay {:.3} ms dominates device {:.3} ms, from failed speculations",
                    rep * 1e3,
                    dev * 1e3
                ),
            };
        }
        let to = fallback_device(cx.device);
        Decided {
            decision: Decision::StopOffloading { to },
            why: format!(
                "replay {:.3} ms dominates device {:.3} ms with nothing to recompile: the {} device for {} launches",
                rep * 1e3,
                dev * 1e3,
                to.name(),
                self.retry_after
            ),
        }
    }
}

/// The built-in policy named `name` (as the CLI spells it), with defaults.
pub fn by_name(name: &str) -> Option<Box<dyn Policy>> {
    Some(match name {
        "never" => Box::new(Never),
        "trap-limit" => Box::new(TrapLimit::default()),
        "deopt-rate" => Box::new(DeoptRate::default()),
        "cost-model" => Box::new(CostModel::default()),
        _ => return None,
    })
}

/// The built-in policies' names.
pub const NAMES: [&str; 4] = ["never", "trap-limit", "deopt-rate", "cost-model"];

/// One decision of a kernel's policy, as logged.
#[derive(Clone, Debug, PartialEq)]
pub struct Logged {
    /// The launch it followed (1-based, warm-up launches included).
    pub launch: u64,
    /// The version that ran (`None`: the interpreter ran it).
    pub version: Option<u32>,
    /// Where the launch ran.
    pub device: Device,
    /// The policy.
    pub policy: &'static str,
    /// Its decision and reason.
    pub decided: Decided,
    /// What applying it did.
    pub applied: String,
}

impl std::fmt::Display for Logged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self
            .version
            .map_or("interp".to_string(), |v| format!("v{v}"));
        write!(
            f,
            "launch {} ({v} on {}): {} decided {} — {}; {}",
            self.launch,
            self.device.name(),
            self.policy,
            decision_name(&self.decided.decision),
            self.decided.why,
            self.applied
        )
    }
}

/// A decision's short name for tables: `keep`, `recompile`, `resize`,
/// `stop->interp`, `retry`.
pub fn decision_name(d: &Decision) -> String {
    match d {
        Decision::Keep => "keep".into(),
        Decision::Recompile { .. } => "recompile".into(),
        Decision::Resize { .. } => "resize".into(),
        Decision::StopOffloading { to } => format!("stop->{}", to.name()),
        Decision::RetryLater { .. } => "retry".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(version: u32, workitems: u64, deopts: &[(u32, Reason, u64)]) -> LaunchOutcome {
        let replayed = deopts.iter().map(|d| d.2).sum();
        LaunchOutcome {
            version,
            workitems,
            on_device: workitems - replayed,
            replayed,
            resumed: 0,
            deopts: deopts
                .iter()
                .map(|&(b, r, n)| ((SiteId(b), r), n))
                .collect(),
            device_time: Duration::from_millis(10),
            replay_time: Duration::from_millis(1),
        }
    }

    fn cx(history: &[LaunchOutcome]) -> Context<'_> {
        Context {
            device: Device::Cpu,
            tlab_bytes: 32 << 10,
            history,
        }
    }

    /// Runs `policy` over a stream of launches, feeding each into the history.
    fn stream(policy: &mut dyn Policy, launches: &[LaunchOutcome]) -> Vec<Decision> {
        let mut history = Vec::new();
        let mut out = Vec::new();
        for l in launches {
            let d = policy.decide(l, &cx(&history));
            assert!(!d.why.is_empty());
            out.push(d.decision);
            history.push(l.clone());
        }
        out
    }

    #[test]
    fn never_keeps_whatever_happens() {
        let ls: Vec<_> = (0..5)
            .map(|_| launch(1, 1000, &[(7, Reason::Unreached, 900)]))
            .collect();
        assert!(stream(&mut Never, &ls).iter().all(|d| *d == Decision::Keep));
    }

    #[test]
    fn trap_limit_drops_a_site_once_it_passes_the_per_site_limit() {
        let mut p = TrapLimit {
            per_site: 4,
            per_kernel: 100,
        };
        // Two traps per launch at bci 7: the limit (4) is passed on the third.
        let ls: Vec<_> = (0..3)
            .map(|_| {
                launch(
                    1,
                    1000,
                    &[(7, Reason::Unreached, 2), (3, Reason::Safepoint, 50)],
                )
            })
            .collect();
        let d = stream(&mut p, &ls);
        assert_eq!(d[0], Decision::Keep);
        assert_eq!(d[1], Decision::Keep);
        assert_eq!(
            d[2],
            Decision::Recompile {
                drop: Some(vec![(SiteId(7), Reason::Unreached)])
            }
        );
        // Safepoint deopts are never a reason to recompile; a new version
        // starts counting from zero.
        let mut history = ls.clone();
        history.push(launch(2, 1000, &[(3, Reason::Safepoint, 999)]));
        let l = launch(2, 1000, &[(3, Reason::Safepoint, 999)]);
        assert_eq!(p.decide(&l, &cx(&history)).decision, Decision::Keep);
    }

    #[test]
    fn trap_limit_drops_everything_past_the_per_kernel_limit() {
        let mut p = TrapLimit {
            per_site: 1000,
            per_kernel: 10,
        };
        let l = launch(
            1,
            100,
            &[(1, Reason::Unreached, 6), (9, Reason::TypeGuard, 6)],
        );
        assert_eq!(
            p.decide(&l, &cx(&[])).decision,
            Decision::Recompile { drop: None }
        );
    }

    #[test]
    fn deopt_rate_recompiles_speculation_and_stops_offloading_real_deopts() {
        let mut p = DeoptRate { threshold: 0.1 };
        let under = launch(1, 1000, &[(7, Reason::TypeGuard, 50)]);
        assert_eq!(p.decide(&under, &cx(&[])).decision, Decision::Keep);
        let over = launch(1, 1000, &[(7, Reason::TypeGuard, 150)]);
        assert_eq!(
            p.decide(&over, &cx(&[])).decision,
            Decision::Recompile {
                drop: Some(vec![(SiteId(7), Reason::TypeGuard)])
            }
        );
        // 30% real null checks: nothing to recompile, the kernel moves down.
        let nulls = launch(1, 1000, &[(4, Reason::NullCheck, 300)]);
        assert_eq!(
            p.decide(&nulls, &cx(&[])).decision,
            Decision::StopOffloading {
                to: Device::Interpreter
            }
        );
        let gpu = Context {
            device: Device::Cuda,
            ..cx(&[])
        };
        assert_eq!(
            p.decide(&nulls, &gpu).decision,
            Decision::StopOffloading { to: Device::Cpu }
        );
    }

    #[test]
    fn allocation_failures_grow_the_tlab() {
        let mut p = DeoptRate { threshold: 0.5 };
        let l = launch(1, 1000, &[(2, Reason::AllocationFailure, 40)]);
        assert_eq!(
            p.decide(&l, &cx(&[])).decision,
            Decision::Resize {
                tlab_bytes: Some(64 << 10),
                chunk: None
            }
        );
    }

    #[test]
    fn cost_model_acts_only_when_replay_dominates_and_retries_later() {
        let mut p = CostModel {
            dominance: 1.0,
            retry_after: 3,
        };
        let mut cheap = launch(1, 1000, &[(7, Reason::NullCheck, 10)]);
        cheap.replay_time = Duration::from_millis(2);
        assert_eq!(p.decide(&cheap, &cx(&[])).decision, Decision::Keep);
        let mut costly = cheap.clone();
        costly.replay_time = Duration::from_millis(30);
        assert_eq!(
            p.decide(&costly, &cx(&[])).decision,
            Decision::StopOffloading {
                to: Device::Interpreter
            }
        );
        costly.deopts.insert((SiteId(9), Reason::Unreached), 5);
        assert!(matches!(
            p.decide(&costly, &cx(&[])).decision,
            Decision::Recompile { drop: Some(ref d) } if d == &vec![(SiteId(9), Reason::Unreached)]
        ));
        // Off the device: keep waiting, then go back.
        let off = LaunchOutcome {
            workitems: 1000,
            ..LaunchOutcome::default()
        };
        fn interp(h: &[LaunchOutcome]) -> Context<'_> {
            Context {
                device: Device::Interpreter,
                tlab_bytes: 1,
                history: h,
            }
        }
        assert_eq!(p.decide(&off, &interp(&[])).decision, Decision::Keep);
        let h = vec![off.clone(), off.clone()];
        assert_eq!(
            p.decide(&off, &interp(&h)).decision,
            Decision::RetryLater { after: 0 }
        );
    }

    #[test]
    fn policies_are_found_by_name() {
        for n in NAMES {
            assert_eq!(by_name(n).unwrap().name(), n);
        }
        assert!(by_name("sometimes").is_none());
    }
}
