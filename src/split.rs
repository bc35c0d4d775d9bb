//! One launch split over several devices: the CPU and every GPU of the
//! runtime ([`crate::RuntimeBuilder::split_over`]; docs/DESIGN.md, "One
//! launch over several devices").
//!
//! **Parts by guided self-scheduling, weighted by speed.** A thread per
//! device takes parts of the range from one queue, one at a time, and runs
//! each as a launch of its own on its device (the whole Sumatra protocol:
//! deopts replayed or re-entered, safepoints, its own report). A part is
//! half of what the device would run, at its speed, in the time the
//! devices together need for what is left, less the part's fixed cost
//! (launching, copies) — raised to the device's smallest useful part (a
//! block per multiprocessor on a GPU, 256 workitems per worker on the CPU)
//! but never past that whole fair share; a device slower than the fastest
//! takes a quarter rather than half (its speed is measured less often). A
//! device whose fixed cost alone outlasts what is left takes no more while
//! a faster device still takes parts. Parts shrink as the range runs out,
//! so every device is busy until near the end (OpenMP's guided schedule,
//! weighted by device as in heterogeneous self-scheduling).
//!
//! **Speeds.** The first device (the CPU when it takes part) is the
//! reference: its rate in its latest part says how costly the workitems
//! handed out now are, and every other device's speed is a share of it,
//! measured against the rate the reference had when the device took its
//! part — where the part lay. (A skewed kernel's workitems cost more
//! further along: a GPU measured on cheap early workitems against the
//! reference's later, costly ones would take a late part that outlasts the
//! launch.) A device's first part with no speed known is a probe (its
//! smallest part); speeds are kept for the kernel's next launches
//! (`adaptive.rs`, from [`SplitShare::speed`] and
//! [`SplitShare::part_cost`]). A GPU's part is not cut short to be shared:
//! its unstarted rest is a set of grid-stride sequences, not an interval,
//! and cutting it costs a stop and a read back for work the shrinking
//! parts already balance. [`crate::RuntimeBuilder::split_even`] cuts equal
//! shares instead, one per device.
//!
//! **Exactly once.** The parts partition the range; each part runs
//! exactly once on its device (its protocol's guarantee), and a part
//! handed back unrun (a GPU that cannot compile the kernel) goes to the
//! CPU.
//!
//! **Coherence.** The parts write different elements of the same arrays,
//! often in the same 64 KiB chunk: the heap runs in twin mode for the
//! launch (`offload_heap::twins`), a GPU's part registers the chunks it
//! may write and is sent them from twins, and every fetch merges each
//! device's bytes against its twin, so every part's writes land. GPUs'
//! parts take holds that let siblings on other GPUs share chunks
//! (`cuda/share.rs`).
//!
//! **What is split.** Kernels whose heap footprint is known before they
//! run and whose writes merge: captures of arrays of numbers and scalars
//! only, no atomics (each device's counter would win over the other's),
//! no reduction (a partition that depends on timing would change a float
//! result) and no sums into copies. Such a kernel may allocate and make
//! virtual calls: it reaches no object it did not make, so each object is
//! its workitem's alone, in eden space its device carved — a GPU part
//! registers its device edens with the twins besides its arrays
//! (`cuda/grid.rs`), a refill that fails there is replayed or resumed as
//! in any launch, and a collection its replays ask for stops every part
//! (they are all launches in flight). Any other kernel runs on one
//! device, and the report says why.

use crate::adaptive::Plan;
use crate::cpu::CpuDevice;
use crate::cuda::Gpu;
use crate::devices::{Devices, try_on};
use crate::env::{KernelCall, LaunchEnv, Started};
use crate::error::{KernelExceptions, OffloadError};
use crate::executor::{Executor, Unsupported};
use crate::interp_device::Interp;
use crate::report::LaunchReport;
use crate::report::split::{Part, SplitShare};
pub(crate) use crate::shares::{Speed, SplitOver};
use offload_ir::isa::Opcode;
use offload_ir::{Elem, FuncId, Inst, Type};
use std::ops::Range;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Why `call` runs on one device rather than split (`None`: it may be
/// split).
pub(crate) fn refuse(call: &KernelCall<'_>) -> Option<String> {
    if call.reduce.is_some() {
        return Some("it reduces (its parts would change the combine tree)".into());
    }
    if call.copies.is_some() {
        return Some("it sums into copies of arrays".into());
    }
    let v = call.prog.verified();
    let f = v.func(call.kernel);
    for p in f.params().get(1..).unwrap_or(&[]) {
        match p.ty {
            Type::Array(Elem::I32 | Elem::I64 | Elem::F32 | Elem::F64, 1)
            | Type::I32
            | Type::I64
            | Type::F32
            | Type::F64 => {}
            _ => {
                return Some(format!(
                    "it captures `{}`, not an array of numbers or a number",
                    p.name
                ));
            }
        }
    }
    // The kernel and every function it calls.
    let mut seen: Vec<FuncId> = vec![call.kernel];
    let mut todo = vec![call.kernel];
    while let Some(id) = todo.pop() {
        let g = v.func(id);
        for inst in &g.body {
            // Allocation and virtual calls are the workitem's own: the
            // kernel reaches no object it did not make (its captures are
            // arrays of numbers and numbers), so what it makes is written
            // by its workitem alone, in eden space its device carved.
            let why = match inst.opcode() {
                Opcode::I32ArrayAtomicAdd
                | Opcode::I32ArrayCmpxchg
                | Opcode::I64ArrayAtomicAdd
                | Opcode::I64ArrayCmpxchg
                | Opcode::FieldAtomicAdd
                | Opcode::FieldCmpxchg => Some("uses atomics"),
                _ => None,
            };
            if let Some(why) = why {
                return Some(format!("`{}` {why}", g.name));
            }
            let callees = match inst {
                Inst::Call { func } => func.index()..func.index() + 1,
                // Any method may be the one called: every function of the
                // module is looked at (a few more than need be).
                Inst::CallVirt { .. } => 0..v.funcs.len(),
                _ => 0..0,
            };
            for func in callees.map(FuncId::new) {
                if !seen.contains(&func) {
                    seen.push(func);
                    todo.push(func);
                }
            }
        }
    }
    None
}

/// A device of the split.
struct Member<'a> {
    label: String,
    exec: Exec<'a>,
    /// Its number in the split (its speed's index in the queue).
    index: usize,
    /// Its smallest part, in workitems.
    min_part: u64,
}

#[derive(Clone, Copy)]
enum Exec<'a> {
    Cpu(&'a CpuDevice),
    Gpu(&'a Gpu),
}

/// The range's parts not handed out yet, and the devices' speeds as the
/// launch measures them.
struct Queue {
    /// The range's start, and its next workitem not handed out (with
    /// `even`, the end: the shares are cut from `start`).
    start: i64,
    next: i64,
    end: i64,
    /// With `even`, per device: whether it took its share.
    given: Vec<bool>,
    /// Per device, whether it took a part of this launch.
    took: Vec<bool>,
    /// Parts handed back unrun, handed out first.
    back: Vec<Range<i64>>,
    /// No more parts (an interrupt, an error).
    stop: bool,
    /// Per device, its speed (`None`: not known yet).
    speeds: Vec<Option<Est>>,
    /// The reference rate: the first device's workitems per second in its
    /// latest part, which tells how costly the workitems handed out now
    /// are (a skewed kernel's grow along the range); `None` before any of
    /// its parts ended.
    reference: Option<(usize, f64)>,
    /// Per device, whether it still takes parts.
    active: Vec<bool>,
    /// Per device, the reference rate when it took its current part: its
    /// part lies just past where the reference device was working then,
    /// so its speed is measured against that (workitems of a skewed
    /// kernel cost more further along).
    taken_at: Vec<Option<f64>>,
    /// Equal shares whatever the speeds ([`crate::RuntimeBuilder::split_even`]).
    even: bool,
}

/// A device's speed (see [`Queue::speeds`]): its workitems per second as a
/// share of the reference rate (every device slows down alike where the
/// workitems cost more), and the seconds a part costs besides running
/// workitems (launching, copies, replays).
#[derive(Clone, Copy, Debug)]
struct Est {
    relative: f64,
    overhead: f64,
}

impl Queue {
    /// A device's workitems per second now (`None` before the reference
    /// is measured).
    fn rate_now(&self, e: &Est) -> Option<f64> {
        self.reference.map(|(_, r)| e.relative * r)
    }

    /// The next part for device `d`, whose smallest useful part is `min`
    /// (module docs); `None` when it takes no more.
    fn take(&mut self, d: usize, min: u64) -> Option<Range<i64>> {
        let r = self.take_part(d, min);
        if r.is_none() {
            self.active[d] = false;
        }
        r
    }

    fn take_part(&mut self, d: usize, min: u64) -> Option<Range<i64>> {
        if self.stop {
            return None;
        }
        if let Some(r) = self.back.pop() {
            return Some(r);
        }
        if self.even {
            return self.even_share(d);
        }
        let left = self.end.saturating_sub(self.next).max(0) as u64;
        if left == 0 {
            return None;
        }
        let n = self.speeds.len() as f64;
        // Half of a fair share, or the smallest useful part if that is
        // more — but never more than the fair share.
        let part = |fair: f64| ((fair / 2.0).ceil() as u64).max(min.min(fair.ceil() as u64));
        let own = self.speeds[d].and_then(|e| Some((self.rate_now(&e)?, e.overhead)));
        let share = match own {
            // A probe: the device's speed (or the reference) is not known
            // yet.
            None => min.min((left as f64 / (2.0 * n)).ceil() as u64),
            Some((rate, overhead)) => {
                let others: Vec<(usize, f64)> = self
                    .speeds
                    .iter()
                    .enumerate()
                    .filter_map(|(k, e)| Some((k, self.rate_now(e.as_ref()?)?)))
                    .collect();
                let total: f64 = others.iter().map(|x| x.1).sum();
                // The time the devices measured need for what is left, and
                // what of it this one may spend running workitems after a
                // part's fixed cost.
                let room = left as f64 / total - overhead;
                let faster_on = others
                    .iter()
                    .any(|&(k, r)| k != d && self.active[k] && r > rate);
                // Not before its first part of the launch: the time left
                // is measured on the first workitems only, which cost
                // less than later ones in a kernel whose work grows.
                if room <= 0.0 && faster_on && self.took[d] {
                    // Its part would end after the others have finished.
                    return None;
                }
                // A device slower than the fastest takes a quarter of its
                // fair share rather than half: its speed is measured less
                // often, and further from where the range is now.
                let fair = (rate * room).max(1.0);
                if faster_on {
                    part(fair / 2.0)
                } else {
                    part(fair)
                }
            }
        };
        let k = share.clamp(1, left) as i64;
        let r = self.next..self.next + k;
        self.next += k;
        self.took[d] = true;
        self.taken_at[d] = self.reference.map(|r| r.1);
        Some(r)
    }

    /// Device `d`'s equal share of the range (`even`), once.
    fn even_share(&mut self, d: usize) -> Option<Range<i64>> {
        if std::mem::replace(&mut self.given[d], true) {
            return None;
        }
        let r = self.share_of(d);
        (r.start < r.end).then_some(r)
    }

    /// Device `d`'s equal share of the range.
    fn share_of(&self, d: usize) -> Range<i64> {
        let n = self.given.len() as i128;
        let (lo, len) = (
            i128::from(self.start),
            i128::from(self.end) - i128::from(self.start),
        );
        let at = |k: usize| (lo + len * k as i128 / n) as i64;
        at(d)..at(d + 1)
    }

    /// Device `d` ran `items` workitems in a part that took `busy`, `run`
    /// of it running them and `once` of it on what the first part of a
    /// kernel pays once (compiling).
    fn measured(
        &mut self,
        d: usize,
        items: u64,
        busy: Duration,
        (run, once): (Duration, Duration),
    ) {
        if items == 0 || run.is_zero() {
            return;
        }
        let rate = items as f64 / run.as_secs_f64();
        let overhead = busy.saturating_sub(run + once).as_secs_f64();
        // The first device (the CPU when it takes part) is the reference:
        // its latest rate says how costly the workitems handed out now
        // are, and the others' speeds are shares of it measured where
        // their parts lay.
        let reference = if d == 0 {
            self.reference = Some((0, rate));
            rate
        } else {
            match self.taken_at[d] {
                Some(then) => then,
                // Taken before the reference was measured: where the part
                // lay against it is unknown, so its rate says nothing yet
                // (the next part measures it).
                None => return,
            }
        };
        let e = &mut self.speeds[d];
        *e = Some(Est {
            relative: rate / reference,
            // The least a part has cost: a device's first parts also pay
            // for growing its image and sending whole arrays.
            overhead: match *e {
                Some(old) => old.overhead.min(overhead),
                None => overhead,
            },
        });
    }

    /// Device `d`'s fixed cost per part (0 when not measured).
    fn part_cost(&self, d: usize) -> Duration {
        self.speeds[d].map_or(Duration::ZERO, |e| Duration::from_secs_f64(e.overhead))
    }

    /// Device `d`'s speed as a share of the fastest device's at the end
    /// (0 when not measured).
    fn relative(&self, d: usize) -> f64 {
        let best = self
            .speeds
            .iter()
            .flatten()
            .map(|e| e.relative)
            .fold(0.0f64, f64::max);
        match self.speeds[d] {
            Some(e) if best > 0.0 => e.relative / best,
            _ => 0.0,
        }
    }
}

/// What one device's thread came back with.
#[derive(Default)]
struct Out {
    parts: Vec<LaunchReport>,
    exceptions: Vec<KernelExceptions>,
    error: Option<OffloadError>,
    interrupted: bool,
    busy: Duration,
    ended: Option<Instant>,
}

/// The split's devices: the CPU first (when it takes part), then the GPUs.
fn members<'a>(env: &LaunchEnv, devices: Devices<'a>, over: SplitOver) -> Vec<Member<'a>> {
    let mut m = Vec::new();
    if over.cpu {
        m.push(Member {
            label: "cpu".into(),
            exec: Exec::Cpu(devices.cpu),
            index: 0,
            min_part: 256 * env.workers as u64,
        });
    }
    for g in devices.gpus {
        m.push(Member {
            label: format!("GPU {}", g.ordinal),
            exec: Exec::Gpu(g),
            index: m.len(),
            min_part: u64::from(g.sms) * u64::from(crate::cuda::BLOCK),
        });
    }
    m
}

/// Run `call` over `range` split over `over`'s devices (module docs), or
/// `None` when there are fewer than two of them (the launch runs on one
/// device as usual).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    env: &LaunchEnv,
    devices: Devices<'_>,
    over: SplitOver,
    call: KernelCall<'_>,
    plan: &Plan,
    range: Range<i64>,
    started: Started,
    rates: &[Speed],
) -> Option<Result<LaunchReport, OffloadError>> {
    let members = members(env, devices, over);
    if members.len() < 2 {
        return None;
    }
    let t0 = Instant::now();
    let safepoints = env.control.count();
    let _twins = env.heap.twin_mode();
    let call = KernelCall {
        split: Some(started.ticket),
        ..call
    };
    let even = env.settings.split_even;
    let queue = Mutex::new(Queue {
        start: range.start,
        next: if even { range.end } else { range.start },
        end: range.end,
        given: vec![false; members.len()],
        took: vec![false; members.len()],
        back: Vec::new(),
        stop: false,
        speeds: members
            .iter()
            .map(|m| {
                rates
                    .iter()
                    .find(|r| r.device == m.label && r.relative > 0.0)
                    .map(|r| Est {
                        relative: r.relative,
                        overhead: r.overhead,
                    })
            })
            .collect(),
        reference: None,
        active: vec![true; members.len()],
        taken_at: vec![None; members.len()],
        even,
    });
    let outs: Vec<Out> = std::thread::scope(|s| {
        let handles: Vec<_> = members
            .iter()
            .map(|m| {
                let queue = &queue;
                s.spawn(move || device_loop(env, m, call, plan, started, queue))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut outs = outs;
    let mut labels: Vec<String> = members.iter().map(|m| m.label.clone()).collect();
    let (mut speeds, left) = {
        let mut q = queue.lock().unwrap_or_else(|e| e.into_inner());
        let speeds: Vec<(f64, Duration)> = (0..members.len())
            .map(|d| (q.relative(d), q.part_cost(d)))
            .collect();
        // Parts no device ran: handed back by GPUs that cannot run the
        // kernel, with the CPU taking no part.
        let mut left = Vec::new();
        if !q.stop {
            left = std::mem::take(&mut q.back);
            if q.next < q.end {
                left.push(q.next..q.end);
            }
            if q.even {
                // Shares of devices that took none (an error ended them).
                left.extend(
                    (0..q.given.len())
                        .filter(|&d| !q.given[d])
                        .map(|d| q.share_of(d))
                        .filter(|r| r.start < r.end),
                );
            }
        }
        (speeds, left)
    };
    if !left.is_empty() {
        let m = Member {
            label: "cpu".into(),
            exec: Exec::Cpu(devices.cpu),
            index: 0,
            min_part: u64::MAX,
        };
        let q = Mutex::new(Queue {
            start: 0,
            next: 0,
            end: 0,
            given: vec![false],
            took: vec![false],
            back: left,
            stop: false,
            speeds: vec![None],
            reference: None,
            active: vec![true],
            taken_at: vec![None],
            even: false,
        });
        outs.push(device_loop(env, &m, call, plan, started, &q));
        labels.push("cpu (parts the GPUs could not run)".into());
        speeds.push((0.0, Duration::ZERO));
    }
    Some(finish(
        env,
        call,
        &range,
        (labels, speeds),
        outs,
        (t0, safepoints),
    ))
}

/// Marks a device's thread gone from the queue, however it leaves.
struct Leaves<'q> {
    queue: &'q Mutex<Queue>,
    d: usize,
}

impl Drop for Leaves<'_> {
    fn drop(&mut self) {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).active[self.d] = false;
    }
}

/// One device's thread: take parts and run them until none is left.
fn device_loop(
    env: &LaunchEnv,
    m: &Member<'_>,
    call: KernelCall<'_>,
    plan: &Plan,
    started: Started,
    queue: &Mutex<Queue>,
) -> Out {
    let mut out = Out::default();
    let _leaves = Leaves { queue, d: m.index };
    loop {
        if env.control.interrupted_since(started.ticket) {
            queue.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
        }
        let part = queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(m.index, m.min_part);
        let Some(part) = part else {
            break;
        };
        let t = Instant::now();
        // Each part's phases from its own start; the launch's ticket, so
        // that an interrupt of the launch reaches every part.
        let started = Started {
            at: t,
            ticket: started.ticket,
        };
        let r = match m.exec {
            Exec::Gpu(g) => {
                let _running = g.running();
                try_on(g, env, call, plan, &part, started)
            }
            Exec::Cpu(c) => match try_on(c, env, call, plan, &part, started) {
                Err(Unsupported(why)) => {
                    match Interp.launch(env, call, plan, part.clone(), started) {
                        Ok(r) => Ok(r.map(|mut rep| {
                            rep.fallback = Some(format!("cpu parts ran on the interpreter: {why}"));
                            rep
                        })),
                        Err(u) => Err(u),
                    }
                }
                other => other,
            },
        };
        let busy = t.elapsed();
        out.busy += busy;
        out.ended = Some(Instant::now());
        if let Ok(Ok(rep)) = &r {
            queue.lock().unwrap_or_else(|e| e.into_inner()).measured(
                m.index,
                rep.workitems(),
                busy,
                (rep.timings.run, rep.timings.compile),
            );
        }
        match r {
            Err(Unsupported(_)) => {
                // This device cannot run the kernel: the part goes back,
                // and the device takes no more.
                queue
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .back
                    .push(part);
                break;
            }
            Ok(Ok(rep)) => out.parts.push(rep),
            Ok(Err(OffloadError::Exceptions(x))) => {
                out.parts.push(x.report.clone());
                out.exceptions.push(*x);
            }
            Ok(Err(OffloadError::Interrupted(rep))) => {
                out.parts.push(*rep);
                out.interrupted = true;
                queue.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
            }
            Ok(Err(e)) => {
                out.error = Some(e);
                queue.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
                break;
            }
        }
    }
    out
}

/// The launch's result from the devices' outs: its merged report, or the
/// first error, or the exceptions of every part, or the interrupt.
fn finish(
    env: &LaunchEnv,
    call: KernelCall<'_>,
    range: &Range<i64>,
    (labels, speeds): (Vec<String>, Vec<(f64, Duration)>),
    outs: Vec<Out>,
    (t0, safepoints): (Instant, u64),
) -> Result<LaunchReport, OffloadError> {
    let end = outs.iter().filter_map(|o| o.ended).max().unwrap_or(t0);
    let mut outs = outs;
    if let Some(e) = outs.iter_mut().find_map(|o| o.error.take()) {
        return Err(e);
    }
    let last = outs
        .iter()
        .enumerate()
        .filter_map(|(i, o)| Some((o.ended?, i)))
        .max()
        .map_or(0, |(_, i)| i);
    let shares: Vec<SplitShare> = labels
        .iter()
        .zip(&outs)
        .zip(speeds)
        .map(|((label, o), (speed, part_cost))| SplitShare {
            device: label.clone(),
            speed,
            part_cost,
            parts: o.parts.len() as u64,
            workitems: o.parts.iter().map(LaunchReport::workitems).sum(),
            busy: o.busy,
            run: o.parts.iter().map(|p| p.timings.run).sum(),
            idle_tail: end.saturating_duration_since(o.ended.unwrap_or(t0)),
            to_device_bytes: o.parts.iter().map(|p| p.to_device_bytes).sum(),
            to_host_bytes: o.parts.iter().map(|p| p.to_host_bytes).sum(),
            deopts: o.parts.iter().flat_map(|p| p.deopts.values()).sum(),
        })
        .collect();
    let interrupted = outs.iter().any(|o| o.interrupted);
    let mut exceptions: Vec<KernelExceptions> = Vec::new();
    let mut parts: Vec<Part> = Vec::new();
    for (i, o) in outs.into_iter().enumerate() {
        exceptions.extend(o.exceptions);
        parts.extend(o.parts.into_iter().map(|p| (i, p)));
    }
    let base = LaunchReport::new(call.name(), crate::device::Device::Cuda, range.clone(), 0);
    let mut rep = crate::report::split::merge(base, parts, shares, last, t0.elapsed());
    rep.safepoints = env.control.count().saturating_sub(safepoints);
    rep.interrupted = interrupted;
    if interrupted {
        return Err(OffloadError::Interrupted(Box::new(rep)));
    }
    if exceptions.is_empty() {
        return Ok(rep);
    }
    exceptions.sort_by_key(|x| x.workitems.first().copied().unwrap_or(i64::MAX));
    let mut all = exceptions.remove(0);
    for x in exceptions {
        all.count += x.count;
        for (k, n) in x.by_kind {
            *all.by_kind.entry(k).or_default() += n;
        }
        all.workitems.extend(x.workitems);
    }
    all.workitems.sort_unstable();
    all.workitems.truncate(KernelExceptions::LISTED);
    all.report = rep;
    Err(OffloadError::Exceptions(Box::new(all)))
}
