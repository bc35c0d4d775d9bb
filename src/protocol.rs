//! One launch of compiled code, written once for every compiled device:
//! the save area's life, the launch's roots and control word, the loop of
//! rounds — run, read back, park, replay, hand back, re-enter or relaunch —
//! and the [`LaunchReport`] built from what the rounds returned
//! (docs/DESIGN.md, "How a launch flows").
//!
//! A device supplies its steps through two traits:
//!
//! - [`Compiled`]: the launch as a whole — how many slots, where the save
//!   area comes from and goes back to, and running its *units* (with
//!   [`drive`]) — and what only it knows for the report;
//! - [`Rounds`]: one unit's rounds. A unit is the slots that run a round
//!   together: one CPU worker's slot (each worker drives its own, so no
//!   slot waits for another's replays), or the GPU's whole grid.
//!
//! [`drive`] is the loop every unit runs: a round runs its slots until each
//! has stopped (the range exhausted, its records full, or a safepoint);
//! the unit's thread parks if a safepoint stopped it; the records the round
//! left are resumed on the device when their site is a re-entry point for
//! their reason (handed back, and the next round resumes them), replayed
//! in the interpreter otherwise, or abandoned when an interrupt cut the
//! launch short; the stops' unstarted rests are counted once; and the next
//! round goes on until nothing is left. Every workitem runs exactly once:
//! wholly on the device (stopped and resumed there any number of times),
//! on the device up to a deopt and the rest in the interpreter, or, if it
//! had not started when its slot stopped, in a later round.

use crate::adaptive::Plan;
use crate::device::Device;
use crate::env::{KernelCall, LaunchEnv, Started};
use crate::error::OffloadError;
use crate::gc::OnExhausted;
use crate::replay::{Header, Replayer, Replays};
use crate::report::{LaunchReport, NeverRan, Timings};
use offload_deopt::{DeoptMetadata, SaveArea};
use offload_heap::{AllocStats, Allocator};
use offload_ir::SiteId;
use rayon::prelude::*;
use smallvec::SmallVec;
use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

/// A save record the device was handed back to resume: its index in the
/// save area, header and values (for the report's deopt table).
pub(crate) type HandedBack = (usize, Header, Vec<u64>);

/// What one round of a unit left.
#[derive(Debug, Default)]
pub(crate) struct Round {
    /// Workitems the unit's slots ran to their end on the device.
    pub(crate) completed: u64,
    /// Two words per slot of the unit: the unstarted rest its stop left,
    /// the workitems `lo`, `lo + never_ran_stride`, … below `hi` (empty
    /// for a slot that did not stop; none at all when no slot did). A CPU
    /// unit's pair is kept inline.
    pub(crate) never_ran: SmallVec<[i64; 2]>,
    /// The step between a rest's workitems: 1 on the CPU (a rest is an
    /// interval), the slot count on the GPU (grid-stride parts); 0 reads
    /// as 1.
    pub(crate) never_ran_stride: i64,
    /// The save records the round left, by index in the save area, in the
    /// order they are drained.
    pub(crate) records: Vec<usize>,
    /// The records handed back that the round resumed on the device.
    pub(crate) resumed: Vec<HandedBack>,
    /// Whether the round ran the slots' unstarted rests and claims (not
    /// only records handed back): the unit's first such round is its
    /// entry, the others re-entries.
    pub(crate) claimed: bool,
    /// Every slot of the unit has exhausted the range: only the records
    /// are left.
    pub(crate) done: bool,
    /// Kernel time the unit measured itself (the GPU's; `None`: all of the
    /// round's time that is not replay is run time).
    pub(crate) run_time: Option<Duration>,
    /// Time the round spent bringing back what the replays need (the GPU's
    /// copies back), counted as replay time.
    pub(crate) copy_back: Duration,
}

/// One unit's rounds: the steps a device supplies to [`drive`] (`'r`:
/// the life of the unit's replayer).
pub(crate) trait Rounds<'r> {
    /// Run one round: every slot of the unit first resumes the record
    /// handed back to it, if any, then runs its unstarted rest and claims,
    /// until it stops. Safepoint requests reach the slots while they run.
    fn run(&mut self, launch: &Launch<'_>) -> Result<Round, OffloadError>;

    /// Whether the device resumes record `r` (`h`) itself rather than the
    /// interpreter, the code having a landing at its site and the site
    /// being a re-entry point for its reason (the device's own condition:
    /// e.g. a full heap's record only once there is room).
    fn may_resume(&mut self, r: usize, h: Header) -> bool;

    /// Hand `records` back: the next rounds resume them on the device.
    fn hand_back(&mut self, records: Vec<HandedBack>);

    /// Whether records handed back wait to be resumed.
    fn has_handed_back(&self) -> bool;

    /// The records handed back and not resumed yet (the launch was cut
    /// short: they are dropped).
    fn take_handed_back(&mut self) -> Vec<HandedBack>;

    /// The unit's own replayer, when its records are drained on its
    /// thread one after another (a CPU worker's), lent to [`drive`] until
    /// [`Rounds::put_replayer`]; `None`: they are replayed on the
    /// runtime's workers, in parallel (the GPU's grid).
    fn take_replayer(&mut self) -> Option<Replayer<'r>>;

    /// Give back the replayer [`Rounds::take_replayer`] lent.
    fn put_replayer(&mut self, rp: Replayer<'r>);
}

/// What one unit's rounds came to.
#[derive(Default)]
pub(crate) struct UnitOut {
    /// Workitems run to their end on the device.
    pub(crate) on_device: u64,
    /// Workitems a stop left unstarted and a later round ran, each once.
    pub(crate) never_ran: u64,
    /// Rounds that ran the slots' rests and claims ([`Round::claimed`])
    /// after the first of them: re-entries.
    pub(crate) reentries: u64,
    /// What became of the unit's records.
    pub(crate) replays: Replays,
    /// Time spent replaying (and bringing back what replays need).
    pub(crate) replay_time: Duration,
    /// Kernel time the unit measured, if it did.
    pub(crate) run_time: Option<Duration>,
    /// For a reducing kernel, the complete nodes of the combine tree
    /// ([`offload_abi::reduce`]) the unit's device code computed (the
    /// replayed workitems' values are in `replays`).
    pub(crate) nodes: Vec<offload_abi::reduce::Node>,
}

impl UnitOut {
    /// Both units' outcomes, as the report counts them: run and replay
    /// times are the longest (units run side by side).
    fn merge(mut self, o: UnitOut) -> UnitOut {
        self.on_device += o.on_device;
        self.never_ran += o.never_ran;
        self.reentries += o.reentries;
        self.replays = self.replays.merge(o.replays);
        self.replay_time = self.replay_time.max(o.replay_time);
        self.nodes.extend(o.nodes);
        self.run_time = match (self.run_time, o.run_time) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self
    }
}

/// A launch in flight, as its units see it.
pub(crate) struct Launch<'a> {
    /// The runtime's side of the launch.
    pub(crate) env: &'a LaunchEnv,
    /// The kernel.
    pub(crate) call: KernelCall<'a>,
    /// The metadata of the version that runs.
    pub(crate) meta: &'a DeoptMetadata,
    /// The sites where that version's code lands to resume a record.
    pub(crate) landings: &'a BTreeSet<SiteId>,
    /// The save area, one part per slot.
    pub(crate) area: &'a SaveArea,
    /// The allocator of the launch's replays (and the CPU's slow path).
    pub(crate) alloc: &'a Allocator<'a>,
    /// The hook an interpreter calls when it finds eden exhausted.
    pub(crate) on_exhausted: OnExhausted<'a>,
    /// The launch's control word (its safepoint and interrupt requests).
    pub(crate) control: &'a Arc<AtomicU32>,
    /// The launch's interrupt ticket.
    pub(crate) epoch: u64,
}

impl Launch<'_> {
    /// Whether an interrupt cut the launch short.
    pub(crate) fn interrupted(&self) -> bool {
        self.env.control.interrupted_since(self.epoch)
    }

    /// Record `r`'s header and values, or the save area's corruption.
    #[inline]
    fn read(&self, r: usize, values: &mut Vec<u64>) -> Result<Header, OffloadError> {
        match self.area.read_into(r, self.meta, values) {
            Ok(Some(h)) => Ok(h),
            Ok(None) => Err(OffloadError::CorruptSaveArea(
                offload_deopt::DeoptError::Empty { record: r },
            )),
            Err(e) => Err(OffloadError::CorruptSaveArea(e)),
        }
    }

    /// Whether the code resumes `h` itself: it lands at the site, and the
    /// site is a re-entry point for the reason.
    fn lands(&self, h: Header) -> bool {
        self.landings.contains(&h.1) && self.meta.site(h.1).is_some_and(|s| s.resumable(h.2))
    }
}

/// Run one unit's rounds until the range is exhausted and every record is
/// resumed or replayed (or an interrupt cut the launch short).
pub(crate) fn drive<'r>(
    launch: &Launch<'_>,
    unit: &mut dyn Rounds<'r>,
) -> Result<UnitOut, OffloadError> {
    let env = launch.env;
    let mut out = UnitOut {
        replays: Replays::new(launch.meta),
        ..UnitOut::default()
    };
    // The unit's thread counts as running for safepoints (a collection
    // must not move the heap under its slots); its slots return, rather
    // than park, when one is requested, and it parks below.
    let mut running = Some(env.control.enter());
    // Per slot, what its never-ran rests have counted (sized on first use:
    // most launches never stop).
    let mut passed: SmallVec<[NeverRan; 1]> = SmallVec::new();
    let mut values = Vec::new();
    // Whether a round has run the slots' rests and claims yet: the later
    // ones are re-entries.
    let mut entered = false;
    loop {
        if launch.interrupted() {
            abandon(launch, unit, &[], &mut out, &mut values)?;
            return Ok(out);
        }
        let round = unit.run(launch)?;
        out.on_device += round.completed;
        if round.claimed {
            out.reentries += u64::from(entered);
            entered = true;
        }
        if let Some(t) = round.run_time {
            out.run_time = Some(out.run_time.unwrap_or_default() + t);
        }
        out.replay_time += round.copy_back;
        for (_, h, v) in &round.resumed {
            out.replays.resumed_on_device(launch.meta, *h, v);
        }
        let tr = Instant::now();
        // Park here if a safepoint stopped the round; if it was an
        // interrupt, the unstarted rests stay unstarted and the saved
        // frames are dropped, not replayed.
        env.control.poll();
        if launch.interrupted() {
            abandon(launch, unit, &round.records, &mut out, &mut values)?;
            out.replay_time += tr.elapsed();
            return Ok(out);
        }
        if !round.never_ran.is_empty() && passed.len() < round.never_ran.len() / 2 {
            passed.resize(round.never_ran.len() / 2, NeverRan::default());
        }
        for (p, c) in round.never_ran.chunks_exact(2).zip(&mut passed) {
            out.never_ran += c.add(p[0], p[1], round.never_ran_stride.max(1));
        }
        if !round.records.is_empty() {
            env.gc.before_replays(&env.heap, &env.control)?;
        }
        // Each record: resumed by the device, or replayed.
        let (resume, cut) = match unit.take_replayer() {
            Some(mut rp) => {
                let drained = drain_here(launch, unit, &mut rp, &round.records, &mut out.replays);
                unit.put_replayer(rp);
                drained?
            }
            None => {
                let mut resume = Vec::new();
                let mut replay = Vec::new();
                for &r in &round.records {
                    let h = launch.read(r, &mut values)?;
                    if launch.lands(h) && unit.may_resume(r, h) {
                        resume.push((r, h, values.clone()));
                    } else {
                        replay.push(r);
                    }
                }
                // The replays are the running workers now.
                drop(running.take());
                let cut = replay_on_pool(launch, &replay, &mut out.replays);
                running = Some(env.control.enter());
                (resume, cut?)
            }
        };
        out.replay_time += tr.elapsed();
        if cut {
            // The records kept for the device are dropped with the rest.
            unit.hand_back(resume);
            abandon(launch, unit, &[], &mut out, &mut values)?;
            return Ok(out);
        }
        if !resume.is_empty() {
            unit.hand_back(resume);
        } else if round.done && !unit.has_handed_back() {
            return Ok(out);
        }
    }
}

/// Drop what an interrupt left: `records` the round left and the records
/// handed back, each counted as abandoned and cleared.
fn abandon<'r>(
    launch: &Launch<'_>,
    unit: &mut dyn Rounds<'r>,
    records: &[usize],
    out: &mut UnitOut,
    values: &mut Vec<u64>,
) -> Result<(), OffloadError> {
    for &r in records {
        let h = launch.read(r, values)?;
        let _ = launch.area.clear_one(r);
        out.replays.abandoned(launch.meta, h, values);
    }
    for (r, h, v) in unit.take_handed_back() {
        let _ = launch.area.clear_one(r);
        out.replays.abandoned(launch.meta, h, &v);
    }
    Ok(())
}

/// Drain `records` one after another on this thread: each is resumed by
/// the device (kept, and returned to be handed back) or replayed at once
/// with `rp` — read, cleared and resumed in the interpreter — so a
/// collection one replay ran lets the next record resume on the device.
/// Once an interrupt stops one part-way, the rest are abandoned. Returns
/// the records to hand back, and whether an interrupt stopped one.
#[inline(never)]
fn drain_here<'r>(
    launch: &Launch<'_>,
    unit: &mut dyn Rounds<'r>,
    rp: &mut Replayer<'_>,
    records: &[usize],
    replays: &mut Replays,
) -> Result<(Vec<HandedBack>, bool), OffloadError> {
    let mut values = Vec::new();
    let mut resume = Vec::new();
    let mut cut = false;
    for &r in records {
        // Park (if asked) while the record is still in the save area,
        // whose references a collection updates; from its read until the
        // replay's frames hold them nothing parks.
        launch.env.control.poll();
        let h = launch.read(r, &mut values)?;
        cut |= launch.interrupted();
        if !cut && launch.lands(h) && unit.may_resume(r, h) {
            resume.push((r, h, values.clone()));
            continue;
        }
        let _ = launch.area.clear_one(r);
        if cut {
            replays.abandoned(launch.meta, h, &values);
            continue;
        }
        let resumed = rp.resume(launch.meta, h, &values);
        cut |= resumed.1;
        replays.resumed(launch.meta, h, &values, resumed)?;
    }
    Ok((resume, cut))
}

/// Replay `records` in parallel on the runtime's workers, each with a
/// replayer of its own. Returns whether an interrupt stopped one
/// part-way.
fn replay_on_pool(
    launch: &Launch<'_>,
    records: &[usize],
    replays: &mut Replays,
) -> Result<bool, OffloadError> {
    if records.is_empty() {
        return Ok(false);
    }
    let env = launch.env;
    let results: Vec<_> = env.pool.install(|| {
        records
            .par_iter()
            .map_init(
                || {
                    let w = rayon::current_thread_index().unwrap_or(0);
                    Replayer::new(
                        launch.call.prog,
                        &env.heap,
                        launch.alloc,
                        &env.control,
                        w,
                        launch.epoch,
                        &launch.on_exhausted,
                        launch.meta,
                    )
                },
                |rp, &r| {
                    let _running = env.control.enter();
                    // As in `replay_here`: read, clear and resume with no
                    // park in between.
                    env.control.poll();
                    let mut vals = Vec::new();
                    let h = launch.read(r, &mut vals)?;
                    let _ = launch.area.clear_one(r);
                    let resumed = rp.resume(launch.meta, h, &vals);
                    Ok::<_, OffloadError>((h, vals, resumed))
                },
            )
            .collect()
    });
    let mut cut = false;
    for res in results {
        let (h, vals, resumed) = res?;
        cut |= resumed.1;
        replays.resumed(launch.meta, h, &vals, resumed)?;
    }
    Ok(cut)
}

/// A compiled device's side of a launch: everything [`run`] does not do
/// the same way on every device.
pub(crate) trait Compiled {
    /// The device's state for one launch (its buffers, its slot words).
    type State;

    /// The device the report names.
    const DEVICE: Device;

    /// Prepare a launch of `call` over `range`: the device's state, its
    /// slot count and an empty save area with a part per slot.
    fn prepare(
        &self,
        env: &LaunchEnv,
        call: KernelCall<'_>,
        plan: &Plan,
        range: &Range<i64>,
    ) -> Result<(Self::State, usize, SaveArea), OffloadError>;

    /// The bits a safepoint that moves no object sets in the launch's
    /// control word, to have the slots wait in place (0: they stop).
    fn wait_bits(&self, env: &LaunchEnv) -> u32;

    /// Run the launch's units, each through [`drive`], and merge what
    /// they came to.
    fn units(
        &self,
        launch: &Launch<'_>,
        state: &mut Self::State,
        range: &Range<i64>,
    ) -> Result<Vec<UnitOut>, OffloadError>;

    /// After the rounds: retire the allocator, take the save area back,
    /// and say what only the device knows for the report.
    fn finish(
        &self,
        env: &LaunchEnv,
        state: Self::State,
        area: SaveArea,
        alloc: Allocator<'_>,
        safepoints_before: u64,
    ) -> DeviceFacts;
}

/// What a device adds to the report besides what the rounds returned.
#[derive(Debug, Default)]
pub(crate) struct DeviceFacts {
    /// [`LaunchReport::chunks`].
    pub(crate) chunks: u64,
    /// [`LaunchReport::alloc`].
    pub(crate) alloc: AllocStats,
    /// [`LaunchReport::version`].
    pub(crate) version: u32,
    /// [`LaunchReport::quick_tier`].
    pub(crate) quick_tier: bool,
    /// [`LaunchReport::quick_workitems`].
    pub(crate) quick_workitems: u64,
    /// [`LaunchReport::launches`]: `None` for one (a device whose rounds
    /// re-enter rather than relaunch).
    pub(crate) launches: Option<u64>,
    /// [`LaunchReport::waits`].
    pub(crate) waits: u64,
    /// [`LaunchReport::runs_beside`].
    pub(crate) runs_beside: u64,
    /// [`LaunchReport::gpu`].
    pub(crate) gpu: Option<String>,
    /// [`LaunchReport::to_device_bytes`].
    pub(crate) to_device_bytes: u64,
    /// [`LaunchReport::to_host_bytes`].
    pub(crate) to_host_bytes: u64,
    /// [`LaunchReport::dispatch`].
    pub(crate) dispatch: Option<crate::report::Dispatches>,
}

/// The code a launch runs: its metadata and landings, for [`run`].
pub(crate) struct Code<'a> {
    /// The version's deopt metadata.
    pub(crate) meta: &'a DeoptMetadata,
    /// Where its code lands to resume a record.
    pub(crate) landings: &'a BTreeSet<SiteId>,
}

/// One launch of `code` over `range` on `dev`: prepare, register the
/// roots and the control word, run the units' rounds, retire, and build
/// the report.
pub(crate) fn run<D: Compiled>(
    dev: &D,
    env: &LaunchEnv,
    call: KernelCall<'_>,
    code: Code<'_>,
    plan: &Plan,
    range: Range<i64>,
    started: Started,
) -> Result<LaunchReport, OffloadError> {
    let t0 = Instant::now();
    let (mut state, slots, area) = dev.prepare(env, call, plan, &range)?;
    let alloc = env.allocator(&call, env.workers, plan.tlab_bytes);
    // The save area's records (kept there until replayed) and the
    // allocator's TLABs, for collections while the launch runs (a replay
    // that finds eden exhausted asks for one, see `crate::gc`).
    let roots = KernelCall::device_roots(&alloc, Some((&area, code.meta)));
    let registered = env.gc.launch(&roots);
    let safepoints_before = env.control.count();
    let control = Arc::new(AtomicU32::new(0));
    // A safepoint request stops this launch's slots at their next poll (or
    // has them wait there, where they can).
    let word = env.control.register_waiting(
        &control,
        offload_abi::control::SAFEPOINT,
        dev.wait_bits(env),
    );
    let launch = Launch {
        env,
        call,
        meta: code.meta,
        landings: code.landings,
        area: &area,
        alloc: &alloc,
        on_exhausted: KernelCall::on_exhausted(env),
        control: &control,
        epoch: started.ticket,
    };
    let td = Instant::now();
    let units = dev.units(&launch, &mut state, &range)?;
    let t_end = Instant::now();
    drop(word);
    drop(registered);
    drop(roots);
    let mut out = units.into_iter().reduce(UnitOut::merge).unwrap_or_default();
    let facts = dev.finish(env, state, area, alloc, safepoints_before);
    let mut report = LaunchReport::new(call.name(), D::DEVICE, range.clone(), slots);
    let n = range.end.wrapping_sub(range.start) as u64;
    let values = std::mem::take(&mut out.replays.values);
    if let Some(r) = call.reduction()
        && out.on_device + out.replays.replayed == n
        && out.replays.thrown.count == 0
    {
        // Every workitem ran: the device's nodes and the replays' leaves
        // tile the range.
        let leaves = values
            .into_iter()
            .map(|(w, v)| offload_abi::reduce::Node::leaf(w.wrapping_sub(range.start) as u64, v));
        let nodes = std::mem::take(&mut out.nodes)
            .into_iter()
            .chain(leaves)
            .collect();
        report.reduction = Some(crate::reduction::joined(r, n, nodes)?);
    }
    let thrown = out.replays.finish(call.prog, code.meta, &mut report);
    report.on_device = out.on_device;
    report.never_ran = out.never_ran;
    report.reentries = out.reentries;
    report.launches = facts.launches.unwrap_or(1);
    report.chunks = facts.chunks;
    report.alloc = facts.alloc;
    report.version = Some(facts.version);
    report.quick_tier = facts.quick_tier;
    report.quick_workitems = facts.quick_workitems;
    report.waits = facts.waits;
    report.runs_beside = facts.runs_beside;
    report.gpu = facts.gpu;
    report.to_device_bytes = facts.to_device_bytes;
    report.to_host_bytes = facts.to_host_bytes;
    report.dispatch = facts.dispatch;
    report.speculations = code.meta.speculations.clone();
    report.safepoints = env.control.count() - safepoints_before;
    report.timings = Timings::from_rounds(
        [started.at, t0, td, t_end, Instant::now()],
        out.run_time,
        out.replay_time,
    );
    thrown.finish(report)
}
