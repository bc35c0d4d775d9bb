//! Per-kernel adaptive state: the warm-up that profiles a kernel in the
//! interpreter, the compiled version and its speculations, the deopt
//! counters per (version, site, reason), and the recompilation policy that
//! runs after every launch (docs/DESIGN.md, "Speculation and recompilation").
//!
//! A launch asks its kernel's state for a `Plan` (where to run, which
//! version, which TLAB and chunk sizes), runs it, and hands the report back
//! to `KernelState::after`, which counts the deopts, asks the policy, and
//! applies the decision to the next launch:
//!
//! - `Recompile` drops the speculations the failing sites guard (found in
//!   the version's metadata) and makes the next version from the warm-up
//!   profile without them; versions are compiled on first use;
//! - `Resize` changes the kernel's TLAB and chunk sizes;
//! - `StopOffloading` moves the kernel to the device below; `RetryLater`
//!   moves it back after a number of launches.
//!
//! Every decision is kept in the kernel's log (with what applying it did)
//! and emitted as a `tracing` event.

use crate::device::Device;
use crate::env::{LaunchEnv, Settings};
use crate::policy::{Context, Decided, Decision, LaunchOutcome, Policy};
pub use crate::policy::{Logged, decision_name};
use crate::report::LaunchReport;
use offload_deopt::{DeoptCounters, KernelVersion, Reason, Speculation};
use offload_host_interp::{Profile, Program};
use offload_ir::{Bci, FuncId, SiteId};
use offload_jit::{SpecConfig, Speculations};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Launch outcomes a kernel keeps for its policy, and decisions it keeps in
/// its log (the oldest are dropped: memory stays bounded however many
/// times a kernel is launched).
const HISTORY: usize = 4096;

/// A compiled version of a kernel: its number and what it speculates on.
#[derive(Debug)]
pub(crate) struct Version {
    pub(crate) number: u32,
    pub(crate) spec: Speculations,
}

/// How the next launch of a kernel runs.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    /// The device to run on.
    pub(crate) device: Device,
    /// A warm-up launch: the interpreter, profiling.
    pub(crate) warmup: bool,
    /// The version to run where code is compiled.
    pub(crate) version: Arc<Version>,
    /// The kernel's TLAB size, if a policy changed it.
    pub(crate) tlab_bytes: Option<u32>,
    /// The kernel's chunk size, if a policy changed it.
    pub(crate) chunk: Option<u64>,
    /// Nanoseconds a workitem took on the CPU device in recent launches
    /// (their device time over the workitems they ran there), once known:
    /// what sizes its claims ([`crate::cpu`]).
    pub(crate) item_ns: Option<f64>,
    /// Each device's speed in the kernel's last launches split over
    /// devices (`split.rs`): what sizes its parts.
    pub(crate) split_rates: Vec<crate::shares::Speed>,
}

/// What a kernel's adaptive state says about it now.
#[derive(Clone, Debug)]
pub struct KernelInfo {
    /// Launches so far, warm-up included.
    pub launches: u64,
    /// Warm-up launches still to run.
    pub warmup_left: u32,
    /// The current version.
    pub version: u32,
    /// Its speculations.
    pub speculations: Vec<Speculation>,
    /// Versions compiled after the first (recompiles).
    pub recompiles: u32,
    /// Where the next launch runs.
    pub device: Device,
    /// Deopts by (version, site, reason), over every launch.
    pub deopts: BTreeMap<(u32, SiteId, Reason), u64>,
    /// The policy's decisions, oldest first (the last 4096).
    pub log: Vec<Logged>,
}

/// The adaptive state of one kernel of one module.
pub(crate) struct KernelState {
    kernel: FuncId,
    prog: Arc<Program>,
    policy: Box<dyn Policy>,
    spec_cfg: SpecConfig,
    launches: u64,
    warmup_left: u32,
    profile: Option<Profile>,
    version: Arc<Version>,
    /// Instructions whose speculation failed: never speculated on again.
    excluded: BTreeSet<(FuncId, Bci)>,
    /// A policy asked for no speculation at all.
    no_speculation: bool,
    recompiles: u32,
    /// Where the policy moved the kernel (`None`: the runtime's device).
    target: Option<Device>,
    /// Launches until the kernel goes back to the runtime's device.
    retry_in: Option<u32>,
    tlab_bytes: Option<u32>,
    chunk: Option<u64>,
    /// See [`Plan::item_ns`].
    item_ns: Option<f64>,
    /// See [`Plan::split_rates`].
    split_rates: Vec<crate::shares::Speed>,
    history: Recent<LaunchOutcome>,
    counters: DeoptCounters,
    log: Recent<Logged>,
}

impl KernelState {
    /// The state of `kernel` of `prog` before its first launch, deciding
    /// with `policy`.
    pub(crate) fn new(
        settings: &Settings,
        policy: Box<dyn Policy>,
        prog: Arc<Program>,
        kernel: FuncId,
    ) -> KernelState {
        KernelState {
            kernel,
            prog,
            policy,
            spec_cfg: settings.spec_cfg,
            launches: 0,
            warmup_left: if settings.device == Device::Interpreter {
                0
            } else {
                settings.warmup
            },
            profile: None,
            version: Arc::new(Version {
                number: 0,
                spec: Speculations::none(),
            }),
            excluded: BTreeSet::new(),
            no_speculation: false,
            recompiles: 0,
            target: None,
            retry_in: None,
            tlab_bytes: None,
            chunk: None,
            item_ns: None,
            split_rates: Vec::new(),
            history: Recent::default(),
            counters: DeoptCounters::new(),
            log: Recent::default(),
        }
    }

    /// The version the next compiled launch runs.
    pub(crate) fn current_version(&self) -> Arc<Version> {
        self.version.clone()
    }

    /// How the next launch runs.
    pub(crate) fn plan(&self, settings: &Settings) -> Plan {
        let warmup = self.warmup_left > 0;
        Plan {
            device: if warmup {
                Device::Interpreter
            } else {
                self.target.unwrap_or(settings.device)
            },
            warmup,
            version: self.version.clone(),
            tlab_bytes: self.tlab_bytes,
            chunk: self.chunk,
            item_ns: self.item_ns,
            split_rates: self.split_rates.clone(),
        }
    }

    /// Each device's speed in a split launch's report, averaged with the
    /// last (a device with no part keeps its speed).
    fn split_rated(&mut self, rep: &LaunchReport) {
        for s in &rep.split {
            let Some(now) = crate::shares::Speed::of(s) else {
                continue;
            };
            match self.split_rates.iter_mut().find(|x| x.device == s.device) {
                Some(old) => old.average(&now),
                None => self.split_rates.push(now),
            }
        }
    }

    /// Account for a finished launch run by `plan` and apply the policy.
    pub(crate) fn after(&mut self, env: &LaunchEnv, plan: &Plan, rep: &mut LaunchReport) {
        self.launches += 1;
        self.split_rated(rep);
        if plan.warmup {
            self.warmed_up(rep);
            return;
        }
        if let Some(v) = rep.version {
            let kv = KernelVersion {
                kernel: self.kernel,
                version: v,
            };
            for (&(site, reason), &n) in &rep.site_deopts {
                self.counters.add(kv, site, reason, n);
            }
        }
        if rep.device == Device::Cpu && rep.on_device > 0 {
            // A moving average over about the last four launches.
            let ns = rep.timings.run.as_nanos() as f64 / rep.on_device as f64;
            self.item_ns = Some(self.item_ns.map_or(ns, |old| 0.75 * old + 0.25 * ns));
        }
        let offloaded = rep.device != Device::Interpreter;
        let outcome = LaunchOutcome {
            version: rep.version.unwrap_or(self.version.number),
            workitems: rep.range.end.wrapping_sub(rep.range.start) as u64,
            on_device: if offloaded { rep.on_device } else { 0 },
            replayed: rep.replayed,
            resumed: rep.resumed,
            deopts: rep.site_deopts.clone(),
            device_time: rep.timings.run,
            replay_time: rep.timings.replay,
        };
        let tlab = self.tlab_bytes.unwrap_or(env.heap.config().tlab_bytes) as usize;
        let decided = self.policy.decide(
            &outcome,
            &Context {
                device: rep.device,
                tlab_bytes: tlab,
                history: self.history.as_slice(),
            },
        );
        self.history.push(outcome);
        let applied = self.apply(env, &decided.decision, rep);
        let logged = Logged {
            launch: self.launches,
            version: rep.version,
            device: rep.device,
            policy: self.policy.name(),
            decided,
            applied,
        };
        tracing::info!(kernel = %rep.kernel, "{logged}");
        rep.decision = Some(logged.clone());
        self.log.push(logged);
    }

    /// A warm-up launch finished: keep its profile; after the last, make
    /// the first speculative version.
    fn warmed_up(&mut self, rep: &mut LaunchReport) {
        if let Some(p) = &rep.profile {
            match &mut self.profile {
                Some(all) => all.merge(p),
                None => self.profile = Some(p.clone()),
            }
        }
        self.warmup_left = self.warmup_left.saturating_sub(1);
        let applied = if self.warmup_left == 0 {
            self.recompile();
            format!(
                "warm-up done: version {} with {} speculation(s)",
                self.version.number,
                self.version.spec.len()
            )
        } else {
            format!("warm-up: {} launch(es) to go", self.warmup_left)
        };
        let logged = Logged {
            launch: self.launches,
            version: None,
            device: rep.device,
            policy: self.policy.name(),
            decided: Decided {
                decision: Decision::Keep,
                why: "profiling in the interpreter".into(),
            },
            applied,
        };
        tracing::info!(kernel = %rep.kernel, "{logged}");
        rep.decision = Some(logged.clone());
        self.log.push(logged);
    }

    /// Make the next version from the profile, without the excluded
    /// speculations.
    fn recompile(&mut self) {
        let spec = match &self.profile {
            Some(p) if !self.no_speculation => {
                Speculations::from_profile(&self.prog, p, self.spec_cfg, &self.excluded)
            }
            _ => Speculations::none(),
        };
        self.version = Arc::new(Version {
            number: self.version.number + 1,
            spec,
        });
    }

    fn apply(&mut self, env: &LaunchEnv, d: &Decision, rep: &LaunchReport) -> String {
        // A pending retry counts down on every launch off the device.
        let mut back = String::new();
        if let Some(n) = self.retry_in {
            if n <= 1 {
                self.retry_in = None;
                self.target = None;
                back = format!("; back to the {} device", env.settings.device.name());
            } else {
                self.retry_in = Some(n - 1);
            }
        }
        let what = match d {
            Decision::Keep => "kept".to_string(),
            Decision::Recompile { drop } => {
                let before = self.version.number;
                let had = self.version.spec.len();
                match drop {
                    None => {
                        self.no_speculation = true;
                        if had == 0 {
                            "no speculation to drop: kept".to_string()
                        } else {
                            self.recompile();
                            self.recompiles += 1;
                            format!(
                                "version {} → {} without speculation",
                                before, self.version.number
                            )
                        }
                    }
                    Some(sites) => {
                        let mut dropped: Vec<String> = Vec::new();
                        for &(site, reason) in sites {
                            for r in rep
                                .speculations
                                .iter()
                                .filter(|r| r.site == site && r.spec.assumed.reason() == reason)
                            {
                                if self.excluded.insert((r.spec.func, r.spec.bci)) {
                                    dropped.push(r.spec.to_string());
                                }
                            }
                        }
                        if dropped.is_empty() {
                            "no speculation at those sites: kept".to_string()
                        } else {
                            self.recompile();
                            self.recompiles += 1;
                            format!(
                                "version {} → {} without [{}] ({} speculation(s) left)",
                                before,
                                self.version.number,
                                dropped.join("; "),
                                self.version.spec.len()
                            )
                        }
                    }
                }
            }
            Decision::Resize { tlab_bytes, chunk } => {
                if let Some(t) = tlab_bytes {
                    let t = (*t).clamp(64, 64 << 20) as u32 & !7;
                    self.tlab_bytes = Some(t);
                }
                if let Some(c) = chunk {
                    self.chunk = Some((*c).max(1));
                }
                format!(
                    "TLAB {} bytes, chunk {}",
                    self.tlab_bytes.unwrap_or(env.heap.config().tlab_bytes),
                    self.chunk.map_or("default".to_string(), |c| c.to_string())
                )
            }
            Decision::StopOffloading { to } => {
                self.target = Some(*to);
                self.retry_in = None;
                back.clear();
                format!("next launches on the {} device", to.name())
            }
            Decision::RetryLater { after } => {
                if *after == 0 {
                    self.target = None;
                    self.retry_in = None;
                    back.clear();
                    format!("back to the {} device", env.settings.device.name())
                } else {
                    self.retry_in = Some(*after);
                    format!("back to the device in {after} launch(es)")
                }
            }
        };
        what + &back
    }

    pub(crate) fn info(&self, settings: &Settings) -> KernelInfo {
        let mut deopts = BTreeMap::new();
        for v in 0..=self.version.number {
            let kv = KernelVersion {
                kernel: self.kernel,
                version: v,
            };
            for ((site, reason), n) in self.counters.by_site(kv) {
                deopts.insert((v, site, reason), n);
            }
        }
        KernelInfo {
            launches: self.launches,
            warmup_left: self.warmup_left,
            version: self.version.number,
            speculations: self.version.spec.iter().collect(),
            recompiles: self.recompiles,
            device: self.plan(settings).device,
            deopts,
            log: self.log.as_slice().to_vec(),
        }
    }
}

/// The newest [`HISTORY`] entries of a stream, oldest first. The vector is
/// trimmed only once it holds twice as many, so an append costs O(1)
/// amortized (removing the oldest entry on every launch moved the whole
/// history, which cost more than a small kernel's launch).
struct Recent<T>(Vec<T>);

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Recent(Vec::new())
    }
}

impl<T> Recent<T> {
    fn push(&mut self, x: T) {
        if self.0.len() >= 2 * HISTORY {
            self.0.drain(..self.0.len() - HISTORY);
        }
        self.0.push(x);
    }

    fn as_slice(&self) -> &[T] {
        &self.0[self.0.len().saturating_sub(HISTORY)..]
    }
}

impl std::fmt::Debug for KernelState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelState")
            .field("kernel", &self.kernel)
            .field("policy", &self.policy.name())
            .field("launches", &self.launches)
            .field("version", &self.version.number)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_and_log_keep_only_the_newest_entries() {
        let mut v = Recent::default();
        for i in 0..3 {
            v.push(i);
        }
        assert_eq!(v.as_slice(), &[0, 1, 2]);
        for i in 3..5 * HISTORY + 10 {
            v.push(i);
            let s = v.as_slice();
            assert_eq!(s.len(), (i + 1).min(HISTORY));
            assert_eq!(s.last(), Some(&i));
            assert_eq!(s[0], (i + 1).saturating_sub(HISTORY));
            assert!(v.0.len() <= 2 * HISTORY);
        }
    }
}
