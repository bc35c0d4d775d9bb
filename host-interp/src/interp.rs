//! The interpreter loop.

use crate::exception::{Exception, TraceFrame};
use crate::profile::Profile;
use crate::program::Program;
use offload_ir::isa::Label;
use offload_ir::semantics as sem;
use offload_ir::{Bci, ClassId, ExceptionKind, FuncId, Inst, Type, Verified};
use offload_tlab::layout::{Header, kind_size};
use offload_tlab::{AllocFailure, Allocator, Heap, HeapError};
use std::sync::atomic::Ordering;

/// Frames deeper than this throw `StackOverflow`.
pub const DEFAULT_MAX_DEPTH: usize = 512;

#[derive(Copy, Clone, Debug)]
struct Frame {
    func: FuncId,
    pc: Bci,
    /// Index of local 0 in the value stack.
    base: u32,
}

/// Why the loop stopped early.
enum Trap {
    Throw(ExceptionKind, String),
    Stop(Vec<u64>),
    /// The launch was interrupted ([`crate::Control::interrupt`]).
    Interrupted,
}

impl From<HeapError> for Trap {
    fn from(e: HeapError) -> Trap {
        Trap::Throw(ExceptionKind::IllegalState, format!("heap fault: {e}"))
    }
}

/// What one step did: small, so the hot path returns it in registers (the
/// rare trap is boxed).
enum Step {
    Next,
    Done(Option<u64>),
}

impl From<HeapError> for Box<Trap> {
    fn from(e: HeapError) -> Box<Trap> {
        Box::new(Trap::from(e))
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The function returned (with its value, for non-void functions).
    Finished(Option<u64>),
    /// The run reached the requested site; these are the values of its frame
    /// state, in [`offload_ir::analysis::FrameState::values`] order.
    Stopped(Vec<u64>),
}

/// One frame to rebuild when resuming: a function, the bytecode index of one
/// of its deopt sites, and the values of that site's frame state. Outer frames
/// must stop at a call site; their call's arguments are consumed by the frame
/// above them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResumeFrame {
    /// The function.
    pub func: FuncId,
    /// The site's bytecode index.
    pub bci: Bci,
    /// The site's frame-state values.
    pub values: Vec<u64>,
}

/// The frames of one deopt site's records, resolved against the program
/// ([`Interpreter::resume_plan`]): resuming from it only copies values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResumePlan {
    /// Outermost first.
    frames: Vec<PlannedFrame>,
    /// The record values all frames take.
    values: usize,
    /// The site's bytecode index in the kernel (for errors).
    bci: Bci,
}

/// One frame of a [`ResumePlan`].
#[derive(Clone, Debug, PartialEq, Eq)]
struct PlannedFrame {
    func: FuncId,
    bci: Bci,
    /// The function's locals.
    nlocals: u32,
    /// The locals the first values go to; the rest are its operand stack.
    locals: Vec<u32>,
    /// Its values in the record.
    values: u32,
    /// Operand-stack values (the last ones) the next frame's call consumed
    /// as its arguments: not pushed back.
    consumed: u32,
}

/// A problem with a resume request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResumeError {
    /// No frames.
    #[error("nothing to resume")]
    Empty,
    /// The bci is not a deopt site of the function.
    #[error("bci {bci} is not a deopt site of `{func}`")]
    NotASite {
        /// Function name.
        func: String,
        /// The bci.
        bci: Bci,
    },
    /// The number of values does not match the frame state.
    #[error("site {bci} of `{func}` has {expected} live values, {found} given")]
    WrongValueCount {
        /// Function name.
        func: String,
        /// The bci.
        bci: Bci,
        /// Values the frame state has.
        expected: usize,
        /// Values given.
        found: usize,
    },
    /// An outer frame is not stopped at a call to the next frame's function.
    #[error("outer frame `{func}` at bci {bci} is not a call site")]
    NotACall {
        /// Function name.
        func: String,
        /// The bci.
        bci: Bci,
    },
}

/// An interpreter for one worker: a value stack, a frame stack, and
/// optionally a profile. Reuse it across workitems.
#[derive(Debug)]
pub struct Interpreter<'a> {
    prog: &'a Program,
    heap: &'a Heap,
    alloc: &'a Allocator<'a>,
    worker: usize,
    stack: Vec<u64>,
    frames: Vec<Frame>,
    profile: Option<Profile>,
    workitem: Option<i64>,
    control: Option<&'a crate::Control>,
    /// The interrupt epoch of the launch this interpreter serves.
    epoch: u64,
    interrupted: bool,
    checked_kernel: Option<(FuncId, usize)>,
    /// The allocator's first word ([`Allocator::young_start`]): objects at
    /// or above it were made during this launch.
    young: u32,
    /// A reference to such an object was stored into an older one.
    escaped: bool,
    /// The nursery reset ([`Interpreter::enable_nursery`]) is on.
    nursery: bool,
    /// The running workitem's TLAB words `[lo, end)` when it started: its
    /// objects are the ones it allocates there.
    item: (u32, u32),
    /// The running workitem stored one of its objects into an object
    /// outside them.
    item_escaped: bool,
    /// Words of dead workitem objects handed back so far.
    recycled: u64,
    /// What the outermost frame returned (see [`Interpreter::run`]).
    result: Option<u64>,
    /// Calls nested deeper than this throw `StackOverflow`.
    pub max_depth: usize,
}

#[inline]
fn f32v(v: u64) -> f32 {
    f32::from_bits(v as u32)
}
#[inline]
fn f64v(v: u64) -> f64 {
    f64::from_bits(v)
}
#[inline]
fn of_i32(x: i32) -> u64 {
    u64::from(x as u32)
}
fn i32v(x: u64) -> i32 {
    x as u32 as i32
}
fn i64v(x: u64) -> i64 {
    x as i64
}
fn of_i64(x: i64) -> u64 {
    x as u64
}
fn of_f64(x: f64) -> u64 {
    x.to_bits()
}
fn of_bool(b: bool) -> u64 {
    u64::from(b)
}
#[inline]
fn of_f32(x: f32) -> u64 {
    u64::from(x.to_bits())
}

impl<'a> Interpreter<'a> {
    /// An interpreter running `prog` over `heap`, allocating as `worker`.
    pub fn new(prog: &'a Program, heap: &'a Heap, alloc: &'a Allocator<'a>, worker: usize) -> Self {
        Interpreter {
            prog,
            heap,
            alloc,
            worker,
            stack: Vec::with_capacity(256),
            frames: Vec::with_capacity(16),
            profile: None,
            workitem: None,
            control: None,
            epoch: 0,
            interrupted: false,
            checked_kernel: None,
            young: alloc.young_start(),
            escaped: false,
            nursery: false,
            item: (0, 0),
            item_escaped: false,
            recycled: 0,
            result: None,
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }

    /// Whether a workitem stored a reference to an object allocated during
    /// the launch into an object allocated before it (the write barrier of
    /// `putfield` and `ref.astore`): then the launch's objects may be
    /// reachable after it, and its allocator must not reclaim them.
    pub fn escaped(&self) -> bool {
        self.escaped
    }

    /// The write barrier of a reference store of `x` into the object at
    /// `r` (see [`Interpreter::escaped`]; null is word 0, never young).
    #[inline]
    fn barrier(&mut self, r: u32, x: u64) {
        if x as u32 >= self.young && r < self.young {
            self.escaped = true;
        }
        let (lo, end) = self.item;
        let x = x as u32;
        if self.nursery && (lo..end).contains(&x) && !(lo..end).contains(&r) {
            self.item_escaped = true;
        }
    }

    /// Hand each workitem's dead objects back as it ends, as the CPU
    /// device's compiled code does: the worker's TLAB must be its own (no
    /// other allocator bumps it). A workitem that ends (completed, or threw)
    /// having stored none of its objects into an object outside them, with
    /// no TLAB refill and no object straight from eden meanwhile, made only
    /// objects nothing can reach: they are zeroed and the TLAB's top goes
    /// back to where the workitem started.
    pub fn enable_nursery(&mut self) {
        self.nursery = self.alloc.tlab_for(self.worker).is_some();
    }

    /// Heap words of dead workitem objects handed back since the last
    /// call.
    pub fn take_recycled_words(&mut self) -> u64 {
        std::mem::take(&mut self.recycled)
    }

    /// The end of a workitem under the nursery reset (see
    /// [`Interpreter::enable_nursery`]).
    fn nursery_end(&mut self, start: (u32, u32), direct: u64, refills: u64) {
        let Some(tlab) = self.alloc.tlab_for(self.worker) else {
            return;
        };
        let (top, end) = tlab.bounds();
        if self.item_escaped
            || self.interrupted
            || end != start.1
            || top <= start.0
            || self.alloc.direct_allocations() != direct
            || tlab.refills() != refills
        {
            return;
        }
        for w in start.0..top {
            if self.heap.store64(w as usize * 8, 0).is_err() {
                return;
            }
        }
        if tlab.rewind((top, end), start.0) {
            self.recycled += u64::from(top - start.0);
        }
    }

    /// Poll `control` for safepoints at back-edges and calls, and stop the
    /// workitem if the launch, which started under interrupt epoch `epoch`
    /// ([`crate::Control::interrupt_epoch`]), is interrupted.
    pub fn set_control(&mut self, control: &'a crate::Control, epoch: u64) {
        self.control = Some(control);
        self.epoch = epoch;
    }

    /// Whether the last workitem ended because its launch was interrupted
    /// (its `Err` is then that, not an exception of the kernel); clears
    /// the flag.
    pub fn take_interrupted(&mut self) -> bool {
        std::mem::take(&mut self.interrupted)
    }

    #[inline]
    fn poll(&self) -> Result<(), Box<Trap>> {
        if let Some(c) = self.control
            && c.poll()
            && c.interrupted_since(self.epoch)
        {
            return Err(Box::new(Trap::Interrupted));
        }
        Ok(())
    }

    /// Start collecting a profile (branch counts, receivers, nulls).
    pub fn enable_profile(&mut self) {
        if self.profile.is_none() {
            self.profile = Some(Profile::new(self.prog.verified()));
        }
    }

    /// Take the profile collected so far.
    pub fn take_profile(&mut self) -> Option<Profile> {
        self.profile.take()
    }

    /// Add the profile collected so far into `into`, and start counting from
    /// zero again.
    pub fn drain_profile_into(&mut self, into: &mut Profile) {
        if let Some(p) = self.profile.as_mut() {
            into.merge(p);
            p.clear();
        }
    }

    fn v(&self) -> &'a Verified {
        self.prog.verified()
    }

    /// Run kernel `k` for one workitem with its captures (raw values).
    pub fn run_kernel(
        &mut self,
        k: FuncId,
        workitem: i64,
        captures: &[u64],
    ) -> Result<(), Exception> {
        self.workitem = Some(workitem);
        // Launches run the same kernel for many workitems: check it once.
        if self.checked_kernel != Some((k, captures.len())) {
            self.check_entry(k, captures.len() + 1, true)?;
            self.checked_kernel = Some((k, captures.len()));
        }
        let nursery = self.nursery.then(|| {
            let tlab = self.alloc.tlab_for(self.worker);
            let start = tlab.map_or((0, 0), |t| t.bounds());
            self.item = start;
            self.item_escaped = false;
            (
                start,
                self.alloc.direct_allocations(),
                tlab.map_or(0, |t| t.refills()),
            )
        });
        self.enter(
            k,
            std::iter::once(workitem as u64).chain(captures.iter().copied()),
        );
        let r = self.exec(None).map(|_| ());
        if let Some((start, direct, refills)) = nursery {
            self.nursery_end(start, direct, refills);
            self.item = (0, 0);
        }
        r
    }

    /// Refuse to enter something that cannot run: a function that does not
    /// exist or has no body, the wrong kind, or the wrong number of arguments.
    fn check_entry(&self, f: FuncId, args: usize, kernel: bool) -> Result<(), Exception> {
        let v = self.v();
        let bad = |message: String| Exception {
            kind: ExceptionKind::IllegalArgument,
            workitem: self.workitem,
            message,
            trace: Vec::new(),
        };
        let Some(func) = v.funcs.get(f.index()) else {
            return Err(bad(format!("function {} does not exist", f.0)));
        };
        if func.is_abstract() {
            return Err(bad(format!("`{}` is abstract", func.name)));
        }
        if kernel != self.prog.is_kernel(f) {
            let what = if kernel {
                "is not a kernel"
            } else {
                "is a kernel; run it per workitem"
            };
            return Err(bad(format!("`{}` {what}", func.name)));
        }
        if args != func.param_count as usize {
            return Err(bad(format!(
                "`{}` takes {} argument(s), {args} given",
                func.name, func.param_count
            )));
        }
        Ok(())
    }

    /// Call a function with raw argument values (receiver first for methods)
    /// and return its raw result.
    pub fn call(&mut self, f: FuncId, args: &[u64]) -> Result<Option<u64>, Exception> {
        self.workitem = None;
        self.check_entry(f, args.len(), false)?;
        self.enter(f, args.iter().copied());
        match self.exec(None)? {
            Outcome::Finished(v) => Ok(v),
            Outcome::Stopped(_) => unreachable!("no stop was requested"),
        }
    }

    /// Run kernel `k` for one workitem, stopping when it is about to execute
    /// the instruction at `site_bci` of the kernel's own frame for the
    /// `occurrence`-th time (0-based). Returns the frame-state values there,
    /// or `Finished` if the workitem never got there.
    pub fn run_to_site(
        &mut self,
        k: FuncId,
        workitem: i64,
        captures: &[u64],
        site_bci: Bci,
        occurrence: u64,
    ) -> Result<Outcome, Exception> {
        self.workitem = Some(workitem);
        self.check_entry(k, captures.len() + 1, true)?;
        if self
            .prog
            .analysis(k)
            .and_then(|a| a.site_at(site_bci))
            .is_none()
        {
            return Err(Exception {
                kind: ExceptionKind::IllegalArgument,
                workitem: Some(workitem),
                message: format!(
                    "bci {site_bci} is not a deopt site of `{}`",
                    self.v().func(k).name
                ),
                trace: Vec::new(),
            });
        }
        self.enter(
            k,
            std::iter::once(workitem as u64).chain(captures.iter().copied()),
        );
        self.exec(Some((site_bci, occurrence)))
    }

    /// Resume a workitem from deopt frame states (outermost frame first) and
    /// run it to its end. This is the entry point deopt replay uses.
    pub fn resume(
        &mut self,
        workitem: Option<i64>,
        frames: &[ResumeFrame],
    ) -> Result<Result<Option<u64>, Exception>, ResumeError> {
        if frames.is_empty() {
            return Err(ResumeError::Empty);
        }
        let planned = frames
            .iter()
            .enumerate()
            .map(|(i, rf)| {
                let callee = frames.get(i + 1).map(|n| n.func);
                self.plan_frame(rf.func, rf.bci, rf.values.len(), callee)
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.stack.clear();
        self.frames.clear();
        for (pf, rf) in planned.iter().zip(frames) {
            self.push_planned(pf, &rf.values);
        }
        self.workitem = workitem;
        Ok(self.exec(None).map(|o| match o {
            Outcome::Finished(v) => v,
            Outcome::Stopped(_) => None,
        }))
    }

    /// How to push the frame of `func` stopped at `bci` with the site's
    /// `n` live values; `callee` is the function of the next (inner)
    /// frame, if any, whose arguments this frame's stack no longer holds.
    /// Checks the frame state against the function's analysis.
    fn plan_frame(
        &self,
        func_id: FuncId,
        bci: Bci,
        n: usize,
        callee: Option<FuncId>,
    ) -> Result<PlannedFrame, ResumeError> {
        let v = self.v();
        let func = v.func(func_id);
        let a = self
            .prog
            .analysis(func_id)
            .ok_or_else(|| ResumeError::NotASite {
                func: func.name.clone(),
                bci,
            })?;
        // A potential site of the analysis, or a conditional branch a
        // compiled version speculated on, whose frame is its entry state.
        let speculated_branch = matches!(
            func.body.get(bci as usize),
            Some(
                Inst::BrIf { .. }
                    | Inst::BrUnless { .. }
                    | Inst::BrNull { .. }
                    | Inst::BrNonNull { .. }
            )
        );
        let site = match a.site_at(bci) {
            Some(s) => std::borrow::Cow::Borrowed(s),
            None => std::borrow::Cow::Owned(
                speculated_branch
                    .then(|| offload_ir::analysis::site_or_frame(v, func_id, a, bci))
                    .flatten()
                    .ok_or_else(|| ResumeError::NotASite {
                        func: func.name.clone(),
                        bci,
                    })?,
            ),
        };
        if site.frame.len() != n {
            return Err(ResumeError::WrongValueCount {
                func: func.name.clone(),
                bci,
                expected: site.frame.len(),
                found: n,
            });
        }
        // An outer frame: stopped at a call whose arguments the next frame
        // consumed.
        let consumed = match callee {
            None => 0,
            Some(next) => match func.body.get(bci as usize) {
                Some(Inst::Call { func: c }) if *c == next => v.func(*c).param_count,
                Some(Inst::CallVirt { method })
                    if v.func(*method).short_name() == v.func(next).short_name() =>
                {
                    v.func(*method).param_count
                }
                _ => {
                    return Err(ResumeError::NotACall {
                        func: func.name.clone(),
                        bci,
                    });
                }
            },
        };
        let locals: Vec<u32> = site.frame.locals.iter().map(|&(l, _)| l.0).collect();
        let stack = n - locals.len();
        if stack < consumed as usize {
            return Err(ResumeError::NotACall {
                func: func.name.clone(),
                bci,
            });
        }
        Ok(PlannedFrame {
            func: func_id,
            bci,
            nlocals: func.locals.len() as u32,
            locals,
            values: n as u32,
            consumed,
        })
    }

    /// Push a planned frame with its `values` (as many as it plans for).
    #[inline]
    fn push_planned(&mut self, pf: &PlannedFrame, values: &[u64]) {
        debug_assert_eq!(values.len(), pf.values as usize);
        let base = self.stack.len();
        self.stack.resize(base + pf.nlocals as usize, 0);
        let (locals, stack) = values.split_at(pf.locals.len());
        for (&l, &x) in pf.locals.iter().zip(locals) {
            self.stack[base + l as usize] = x;
        }
        self.stack
            .extend_from_slice(&stack[..stack.len() - pf.consumed as usize]);
        self.frames.push(Frame {
            func: pf.func,
            pc: pf.bci,
            base: base as u32,
        });
    }

    /// How to rebuild the frames of records from `site` of a kernel version
    /// with metadata `meta`: every frame checked against its function's
    /// analysis once, so that [`Interpreter::resume_planned`] only copies
    /// values. Replay makes one per site it meets.
    pub fn resume_plan(
        &self,
        meta: &offload_deopt::DeoptMetadata,
        site: offload_ir::SiteId,
    ) -> Result<ResumePlan, ResumeError> {
        let site = meta.site(site).ok_or_else(|| ResumeError::NotASite {
            func: self.v().func(meta.kernel).name.clone(),
            bci: u32::MAX,
        })?;
        let frames = site
            .frames
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let callee = site.frames.get(i + 1).map(|n| n.func);
                self.plan_frame(f.func, f.bci, f.values as usize, callee)
            })
            .collect::<Result<Vec<_>, _>>()?;
        if frames.is_empty() {
            return Err(ResumeError::Empty);
        }
        Ok(ResumePlan {
            values: frames.iter().map(|f| f.values as usize).sum(),
            bci: site.bci,
            frames,
        })
    }

    /// Resume a workitem whose record holds `values` for the site `plan`
    /// was made for, and run it to its end. (The results are boxed so that
    /// the whole fits two registers: replay resumes millions of workitems.)
    #[inline]
    pub fn resume_planned(
        &mut self,
        plan: &ResumePlan,
        workitem: i64,
        values: &[u64],
    ) -> Result<Result<(), Box<Exception>>, Box<ResumeError>> {
        if plan.values != values.len() {
            return Err(Box::new(ResumeError::WrongValueCount {
                func: self.v().func(plan.frames[0].func).name.clone(),
                bci: plan.bci,
                expected: plan.values,
                found: values.len(),
            }));
        }
        self.stack.clear();
        self.frames.clear();
        let mut at = 0;
        for pf in &plan.frames {
            let n = pf.values as usize;
            self.push_planned(pf, &values[at..at + n]);
            at += n;
        }
        self.workitem = Some(workitem);
        Ok(self.finish())
    }

    /// Resume the workitem of a save record (decoded against its kernel
    /// version's metadata) and run it to its end: the host half of deopt
    /// replay.
    pub fn resume_record(
        &mut self,
        meta: &offload_deopt::DeoptMetadata,
        record: &offload_deopt::Record,
    ) -> Result<Result<(), Exception>, ResumeError> {
        self.resume_values(meta, record.workitem, record.site, &record.values)
    }

    /// [`Interpreter::resume_record`] from a record's parts (no copy of the
    /// values).
    pub fn resume_values(
        &mut self,
        meta: &offload_deopt::DeoptMetadata,
        workitem: i64,
        site: offload_ir::SiteId,
        values: &[u64],
    ) -> Result<Result<(), Exception>, ResumeError> {
        let plan = self.resume_plan(meta, site)?;
        match self.resume_planned(&plan, workitem, values) {
            Ok(r) => Ok(r.map_err(|e| *e)),
            Err(e) => Err(*e),
        }
    }

    fn enter(&mut self, f: FuncId, args: impl Iterator<Item = u64>) {
        self.stack.clear();
        self.frames.clear();
        self.stack.extend(args);
        let nlocals = self.v().func(f).locals.len();
        self.stack.resize(nlocals.max(self.stack.len()), 0);
        self.frames.push(Frame {
            func: f,
            pc: 0,
            base: 0,
        });
    }

    fn exception(&self, kind: ExceptionKind, message: String) -> Exception {
        let v = self.v();
        let trace = self
            .frames
            .iter()
            .rev()
            .map(|fr| {
                let f = v.func(fr.func);
                TraceFrame {
                    func: f.name.clone(),
                    bci: fr.pc,
                    line: f.span_of(Some(fr.pc)).line,
                }
            })
            .collect();
        Exception {
            kind,
            workitem: self.workitem,
            message,
            trace,
        }
    }

    #[inline]
    fn array_elem(&self, r: u32, idx: i32, esize: usize) -> Result<usize, Trap> {
        if r == 0 {
            return Err(Trap::Throw(
                ExceptionKind::NullPointer,
                "array is null".into(),
            ));
        }
        let base = r as usize * 8;
        let len = self.heap.load32(base + 4)?;
        if idx < 0 || idx as u32 >= len {
            return Err(Trap::Throw(
                ExceptionKind::IndexOutOfBounds,
                format!("index {idx} out of bounds for length {len}"),
            ));
        }
        Ok(base + 8 + idx as usize * esize)
    }

    #[inline]
    fn object(&self, r: u32, what: &str) -> Result<usize, Trap> {
        if r == 0 {
            Err(Trap::Throw(
                ExceptionKind::NullPointer,
                format!("{what} on null"),
            ))
        } else {
            Ok(r as usize * 8)
        }
    }

    fn allocate(&self, header: Header) -> Result<u32, Trap> {
        loop {
            match self.alloc.alloc(self.worker, header) {
                Ok(at) => return Ok(at),
                Err(AllocFailure::Overflow) => std::thread::yield_now(),
                Err(AllocFailure::Exhausted) => {
                    return Err(Trap::Throw(
                        ExceptionKind::OutOfMemory,
                        format!(
                            "cannot allocate {} bytes: heap at its maximum of {} bytes",
                            header.size().unwrap_or(u64::MAX),
                            self.heap.config().max
                        ),
                    ));
                }
            }
        }
    }

    /// Whether the object at `r` (non-null) is an instance of module type `t`.
    fn is_instance(&self, r: u32, t: Type) -> Result<bool, Trap> {
        Ok(self
            .prog
            .header_is_instance(self.heap.header(offload_tlab::Ref(r))?, t))
    }

    fn type_name(&self, r: u32) -> String {
        self.heap
            .header(offload_tlab::Ref(r))
            .map_or_else(|e| format!("<{e}>"), |h| self.prog.header_type_name(h))
    }

    fn exec(&mut self, stop: Option<(Bci, u64)>) -> Result<Outcome, Exception> {
        match self.run(stop) {
            Ok(()) => Ok(Outcome::Finished(self.result.take())),
            Err(t) => match *t {
                Trap::Stop(vals) => Ok(Outcome::Stopped(vals)),
                t => Err(self.trap_exception(t)),
            },
        }
    }

    /// Run the current frames to their end, for a workitem whose result
    /// nobody reads (replay): what [`Interpreter::exec`] does without a stop,
    /// returning a pointer-sized result.
    fn finish(&mut self) -> Result<(), Box<Exception>> {
        self.run(None)
            .map_err(|t| Box::new(self.trap_exception(*t)))
    }

    /// The exception a trap (other than a stop) raises.
    fn trap_exception(&mut self, t: Trap) -> Exception {
        match t {
            Trap::Throw(kind, msg) => self.exception(kind, msg),
            Trap::Interrupted => {
                self.interrupted = true;
                self.exception(ExceptionKind::IllegalState, "interrupted".into())
            }
            Trap::Stop(_) => {
                self.exception(ExceptionKind::IllegalState, "stopped without a stop".into())
            }
        }
    }

    /// Run the current frames until the outermost returns (its value, if
    /// any, in `self.result`), or a trap. The small result keeps the hot
    /// replay path from copying a large one through memory.
    fn run(&mut self, stop: Option<(Bci, u64)>) -> Result<(), Box<Trap>> {
        let v: &'a Verified = self.prog.verified();
        let prog = self.prog;
        let mut seen = 0u64;
        self.result = None;
        let Some(mut fr) = self.frames.last().copied() else {
            return Ok(());
        };
        let mut body: &'a [Inst] = &v.func(fr.func).body;
        let slow = stop.is_some() || self.profile.is_some();
        loop {
            if slow {
                let pc = fr.pc;
                if let Some((sbci, occ)) = stop
                    && self.frames.len() == 1
                    && pc == sbci
                {
                    if seen == occ {
                        let a = prog.analysis(fr.func).expect("kernels have bodies");
                        let site = a.site_at(pc).expect("stop only at sites");
                        let sp0 = fr.base as usize + v.func(fr.func).locals.len();
                        let vals = site
                            .frame
                            .values()
                            .map(|(val, _)| match val {
                                offload_ir::analysis::Value::Local(l) => {
                                    self.stack[fr.base as usize + l.index()]
                                }
                                offload_ir::analysis::Value::Stack(i) => {
                                    self.stack[sp0 + i as usize]
                                }
                            })
                            .collect();
                        self.frames.last_mut().expect("frame").pc = pc;
                        return Err(Box::new(Trap::Stop(vals)));
                    }
                    seen += 1;
                }
                if let Some(p) = self.profile.as_mut() {
                    p.exec(fr.func, pc);
                }
            }
            match self.step(&mut fr, &mut body) {
                Ok(Step::Next) => {}
                Ok(Step::Done(v)) => {
                    self.result = v;
                    return Ok(());
                }
                Err(t) => {
                    // Only now does the frame's pc need to be current.
                    if let Some(top) = self.frames.last_mut() {
                        top.pc = fr.pc;
                    }
                    return Err(t);
                }
            }
        }
    }

    /// Execute the instruction at `fr.pc`. On success `fr` and `body` move to
    /// the next instruction (or into a callee, or back to the caller); on an
    /// error they still name the faulting instruction.
    #[inline(always)]
    #[allow(clippy::too_many_lines)]
    fn step(&mut self, fr: &mut Frame, body: &mut &'a [Inst]) -> Result<Step, Box<Trap>> {
        let v: &'a Verified = self.prog.verified();
        let prog = self.prog;
        let pc = fr.pc;
        macro_rules! pop {
            () => {
                self.stack.pop().unwrap_or(0)
            };
        }
        macro_rules! push {
            ($x:expr) => {{
                let x: u64 = $x;
                self.stack.push(x)
            }};
        }
        macro_rules! bin {
            ($get:ident, $put:expr, |$a:ident, $b:ident| $e:expr) => {{
                let $b = $get(pop!());
                let $a = $get(pop!());
                push!($put($e));
            }};
        }
        macro_rules! un {
            ($get:ident, $put:expr, |$a:ident| $e:expr) => {{
                let $a = $get(pop!());
                push!($put($e));
            }};
        }
        let inst = body[pc as usize];
        let mut next = pc + 1;
        let base = fr.base as usize;
        match inst {
            Inst::I32Const { value } => push!(of_i32(value)),
            Inst::I64Const { value } => push!(value as u64),
            Inst::F32Const { value } => push!(u64::from(value.0)),
            Inst::F64Const { value } => push!(value.0),
            Inst::RefNull => push!(0),
            Inst::Load { local } => push!(self.stack[base + local.index()]),
            Inst::Store { local } => {
                let x = pop!();
                self.stack[base + local.index()] = x;
            }
            Inst::Inc { local, delta } => {
                let slot = &mut self.stack[base + local.index()];
                *slot = if v.func(fr.func).locals[local.index()].ty == Type::I32 {
                    of_i32(i32v(*slot).wrapping_add(delta))
                } else {
                    of_i64(i64v(*slot).wrapping_add(i64::from(delta)))
                };
            }
            Inst::Dup => {
                let x = *self.stack.last().unwrap_or(&0);
                push!(x);
            }
            Inst::Pop => {
                pop!();
            }
            Inst::Swap => {
                let n = self.stack.len();
                self.stack.swap(n - 1, n - 2);
            }
            Inst::I32Add => bin!(i32v, of_i32, |a, b| a.wrapping_add(b)),
            Inst::I32Sub => bin!(i32v, of_i32, |a, b| a.wrapping_sub(b)),
            Inst::I32Mul => bin!(i32v, of_i32, |a, b| a.wrapping_mul(b)),
            Inst::I32Div | Inst::I32Rem => {
                let b = i32v(pop!());
                let a = i32v(pop!());
                let r = if inst == Inst::I32Div {
                    sem::i32_div(a, b)
                } else {
                    sem::i32_rem(a, b)
                };
                match r {
                    Some(r) => push!(of_i32(r)),
                    None => {
                        return Err(Box::new(Trap::Throw(
                            ExceptionKind::Arithmetic,
                            "division by zero".into(),
                        )));
                    }
                }
            }
            Inst::I32Neg => un!(i32v, of_i32, |a| a.wrapping_neg()),
            Inst::I32And => bin!(i32v, of_i32, |a, b| a & b),
            Inst::I32Or => bin!(i32v, of_i32, |a, b| a | b),
            Inst::I32Xor => bin!(i32v, of_i32, |a, b| a ^ b),
            Inst::I32Shl => bin!(i32v, of_i32, |a, b| sem::i32_shl(a, b)),
            Inst::I32Shr => bin!(i32v, of_i32, |a, b| sem::i32_shr(a, b)),
            Inst::I32Ushr => bin!(i32v, of_i32, |a, b| sem::i32_ushr(a, b)),
            Inst::I64Add => bin!(i64v, of_i64, |a, b| a.wrapping_add(b)),
            Inst::I64Sub => bin!(i64v, of_i64, |a, b| a.wrapping_sub(b)),
            Inst::I64Mul => bin!(i64v, of_i64, |a, b| a.wrapping_mul(b)),
            Inst::I64Div | Inst::I64Rem => {
                let b = i64v(pop!());
                let a = i64v(pop!());
                let r = if inst == Inst::I64Div {
                    sem::i64_div(a, b)
                } else {
                    sem::i64_rem(a, b)
                };
                match r {
                    Some(r) => push!(of_i64(r)),
                    None => {
                        return Err(Box::new(Trap::Throw(
                            ExceptionKind::Arithmetic,
                            "division by zero".into(),
                        )));
                    }
                }
            }
            Inst::I64Neg => un!(i64v, of_i64, |a| a.wrapping_neg()),
            Inst::I64And => bin!(i64v, of_i64, |a, b| a & b),
            Inst::I64Or => bin!(i64v, of_i64, |a, b| a | b),
            Inst::I64Xor => bin!(i64v, of_i64, |a, b| a ^ b),
            Inst::I64Shl => bin!(i64v, of_i64, |a, b| sem::i64_shl(a, b)),
            Inst::I64Shr => bin!(i64v, of_i64, |a, b| sem::i64_shr(a, b)),
            Inst::I64Ushr => bin!(i64v, of_i64, |a, b| sem::i64_ushr(a, b)),
            Inst::F32Add => bin!(f32v, of_f32, |a, b| a + b),
            Inst::F32Sub => bin!(f32v, of_f32, |a, b| a - b),
            Inst::F32Mul => bin!(f32v, of_f32, |a, b| a * b),
            Inst::F32Div => bin!(f32v, of_f32, |a, b| a / b),
            Inst::F32Rem => bin!(f32v, of_f32, |a, b| a % b),
            Inst::F32Neg => un!(f32v, of_f32, |a| -a),
            Inst::F64Add => bin!(f64v, of_f64, |a, b| a + b),
            Inst::F64Sub => bin!(f64v, of_f64, |a, b| a - b),
            Inst::F64Mul => bin!(f64v, of_f64, |a, b| a * b),
            Inst::F64Div => bin!(f64v, of_f64, |a, b| a / b),
            Inst::F64Rem => bin!(f64v, of_f64, |a, b| a % b),
            Inst::F64Neg => un!(f64v, of_f64, |a| -a),
            Inst::I32Eq => bin!(i32v, of_bool, |a, b| a == b),
            Inst::I32Ne => bin!(i32v, of_bool, |a, b| a != b),
            Inst::I32Lt => bin!(i32v, of_bool, |a, b| a < b),
            Inst::I32Le => bin!(i32v, of_bool, |a, b| a <= b),
            Inst::I32Gt => bin!(i32v, of_bool, |a, b| a > b),
            Inst::I32Ge => bin!(i32v, of_bool, |a, b| a >= b),
            Inst::I64Eq => bin!(i64v, of_bool, |a, b| a == b),
            Inst::I64Ne => bin!(i64v, of_bool, |a, b| a != b),
            Inst::I64Lt => bin!(i64v, of_bool, |a, b| a < b),
            Inst::I64Le => bin!(i64v, of_bool, |a, b| a <= b),
            Inst::I64Gt => bin!(i64v, of_bool, |a, b| a > b),
            Inst::I64Ge => bin!(i64v, of_bool, |a, b| a >= b),
            Inst::F32Eq => bin!(f32v, of_bool, |a, b| a == b),
            Inst::F32Ne => bin!(f32v, of_bool, |a, b| a != b),
            Inst::F32Lt => bin!(f32v, of_bool, |a, b| a < b),
            Inst::F32Le => bin!(f32v, of_bool, |a, b| a <= b),
            Inst::F32Gt => bin!(f32v, of_bool, |a, b| a > b),
            Inst::F32Ge => bin!(f32v, of_bool, |a, b| a >= b),
            Inst::F64Eq => bin!(f64v, of_bool, |a, b| a == b),
            Inst::F64Ne => bin!(f64v, of_bool, |a, b| a != b),
            Inst::F64Lt => bin!(f64v, of_bool, |a, b| a < b),
            Inst::F64Le => bin!(f64v, of_bool, |a, b| a <= b),
            Inst::F64Gt => bin!(f64v, of_bool, |a, b| a > b),
            Inst::F64Ge => bin!(f64v, of_bool, |a, b| a >= b),
            Inst::RefEq => bin!(i32v, of_bool, |a, b| a == b),
            Inst::RefNe => bin!(i32v, of_bool, |a, b| a != b),
            Inst::Br { target } => {
                next = target.0;
                if next <= pc {
                    self.poll()?;
                }
            }
            Inst::BrIf { target }
            | Inst::BrUnless { target }
            | Inst::BrNull { target }
            | Inst::BrNonNull { target } => {
                let x = pop!() as u32;
                let taken = match inst {
                    Inst::BrIf { .. } => x != 0,
                    Inst::BrUnless { .. } => x == 0,
                    Inst::BrNull { .. } => x == 0,
                    _ => x != 0,
                };
                if let Some(p) = self.profile.as_mut() {
                    p.branch(fr.func, pc, taken);
                    if matches!(inst, Inst::BrNull { .. } | Inst::BrNonNull { .. }) && x == 0 {
                        p.null(fr.func, pc);
                    }
                }
                if taken {
                    let Label(t) = target;
                    next = t;
                    if t <= pc {
                        self.poll()?;
                    }
                }
            }
            Inst::I32ToI64 => un!(i32v, of_i64, |a| i64::from(a)),
            Inst::I32ToF32 => un!(i32v, of_f32, |a| a as f32),
            Inst::I32ToF64 => un!(i32v, of_f64, |a| f64::from(a)),
            Inst::I64ToI32 => un!(i64v, of_i32, |a| a as i32),
            Inst::I64ToF32 => un!(i64v, of_f32, |a| a as f32),
            Inst::I64ToF64 => un!(i64v, of_f64, |a| a as f64),
            Inst::F32ToI32 => un!(f32v, of_i32, |a| sem::f32_to_i32(a)),
            Inst::F32ToI64 => un!(f32v, of_i64, |a| sem::f32_to_i64(a)),
            Inst::F32ToF64 => un!(f32v, of_f64, |a| f64::from(a)),
            Inst::F64ToI32 => un!(f64v, of_i32, |a| sem::f64_to_i32(a)),
            Inst::F64ToI64 => un!(f64v, of_i64, |a| sem::f64_to_i64(a)),
            Inst::F64ToF32 => un!(f64v, of_f32, |a| a as f32),
            Inst::NewArray { elem } => {
                let len = i32v(pop!());
                if len < 0 {
                    return Err(Box::new(Trap::Throw(
                        ExceptionKind::NegativeArraySize,
                        format!("length {len}"),
                    )));
                }
                let Some(Type::Array(e, d)) = elem.array_of() else {
                    unreachable!("verified: the element type has an array type")
                };
                let at = self.allocate(Header::Array {
                    elem: prog.global_elem(e),
                    dims: d,
                    len: len as u32,
                })?;
                push!(u64::from(at));
            }
            Inst::ArrayLen => {
                let r = pop!() as u32;
                let off = self.object(r, "array.len")?;
                if r == 0 {
                    self.note_null(fr.func, pc);
                }
                push!(u64::from(self.heap.load32(off + 4)?));
            }
            Inst::I32ALoad | Inst::F32ALoad | Inst::RefALoad => {
                let i = i32v(pop!());
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let at = self.array_elem(r, i, 4)?;
                push!(u64::from(self.heap.load32(at)?));
            }
            Inst::I64ALoad | Inst::F64ALoad => {
                let i = i32v(pop!());
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let at = self.array_elem(r, i, 8)?;
                push!(self.heap.load64(at)?);
            }
            Inst::I32AStore | Inst::F32AStore | Inst::RefAStore => {
                let x = pop!();
                let i = i32v(pop!());
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let at = self.array_elem(r, i, 4)?;
                if matches!(inst, Inst::RefAStore) {
                    self.barrier(r, x);
                }
                self.heap.store32(at, x as u32)?;
            }
            Inst::I64AStore | Inst::F64AStore => {
                let x = pop!();
                let i = i32v(pop!());
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let at = self.array_elem(r, i, 8)?;
                self.heap.store64(at, x)?;
            }
            Inst::New { class } => {
                let at = self.allocate(Header::Object {
                    class: prog.global_class(class),
                    size: prog.layout.class_size[class.index()],
                })?;
                push!(u64::from(at));
            }
            Inst::GetField { field } => {
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let off =
                    self.object(r, "getfield")? + prog.layout.field_offset[field.index()] as usize;
                let x = if kind_size(v.field(field).ty.kind()) == 8 {
                    self.heap.load64(off)?
                } else {
                    u64::from(self.heap.load32(off)?)
                };
                push!(x);
            }
            Inst::PutField { field } => {
                let x = pop!();
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let off =
                    self.object(r, "putfield")? + prog.layout.field_offset[field.index()] as usize;
                let ty = v.field(field).ty;
                if kind_size(ty.kind()) == 8 {
                    self.heap.store64(off, x)?;
                } else {
                    if ty.is_ref() {
                        self.barrier(r, x);
                    }
                    self.heap.store32(off, x as u32)?;
                }
            }
            Inst::InstanceOf { ty } => {
                let r = pop!() as u32;
                let yes = r != 0 && self.is_instance(r, ty)?;
                push!(of_bool(yes));
            }
            Inst::CheckCast { ty } => {
                let r = *self.stack.last().unwrap_or(&0) as u32;
                if r != 0 && !self.is_instance(r, ty)? {
                    return Err(Box::new(Trap::Throw(
                        ExceptionKind::ClassCast,
                        format!(
                            "{} cannot be cast to {}",
                            self.type_name(r),
                            v.type_name(ty)
                        ),
                    )));
                }
            }
            Inst::Call { func } | Inst::CallVirt { method: func } => {
                let callee = v.func(func);
                let nargs = callee.param_count as usize;
                let arg0 = self.stack.len() - nargs;
                let target = if let Inst::CallVirt { .. } = inst {
                    let recv = self.stack[arg0] as u32;
                    self.null_note(recv, fr.func, pc);
                    let off = self.object(recv, "virtual call")?;
                    let class = self.heap.load32(off)?;
                    let local = prog.local_class(class).unwrap_or(ClassId(u32::MAX));
                    if let Some(p) = self.profile.as_mut() {
                        p.receiver(fr.func, pc, local.0);
                    }
                    prog.dispatch(local, func).ok_or_else(|| {
                        Trap::Throw(
                            ExceptionKind::IllegalState,
                            format!("no implementation of `{}` for the receiver", callee.name),
                        )
                    })?
                } else {
                    func
                };
                // The caller's pc, for traces and for the return.
                if let Some(top) = self.frames.last_mut() {
                    top.pc = pc;
                }
                self.poll()?;
                if self.frames.len() >= self.max_depth {
                    return Err(Box::new(Trap::Throw(
                        ExceptionKind::StackOverflow,
                        format!("more than {} nested calls", self.max_depth),
                    )));
                }
                let nlocals = v.func(target).locals.len();
                self.stack.resize(arg0 + nlocals, 0);
                *fr = Frame {
                    func: target,
                    pc: 0,
                    base: arg0 as u32,
                };
                self.frames.push(*fr);
                *body = &v.func(target).body;
                return Ok(Step::Next);
            }
            Inst::F32Sqrt => un!(f32v, of_f32, |a| a.sqrt()),
            Inst::F32Abs => un!(f32v, of_f32, |a| a.abs()),
            Inst::F32Min => bin!(f32v, of_f32, |a, b| sem::f32_min(a, b)),
            Inst::F32Max => bin!(f32v, of_f32, |a, b| sem::f32_max(a, b)),
            Inst::F32Floor => un!(f32v, of_f32, |a| a.floor()),
            Inst::F32Ceil => un!(f32v, of_f32, |a| a.ceil()),
            Inst::F32Exp => un!(f32v, of_f32, |a| sem::f32_exp(a)),
            Inst::F32Log => un!(f32v, of_f32, |a| sem::f32_log(a)),
            Inst::F32Sin => un!(f32v, of_f32, |a| sem::f32_sin(a)),
            Inst::F32Cos => un!(f32v, of_f32, |a| sem::f32_cos(a)),
            Inst::F32Pow => bin!(f32v, of_f32, |a, b| sem::f32_pow(a, b)),
            Inst::F32Fma => {
                let c = f32v(pop!());
                let b = f32v(pop!());
                let a = f32v(pop!());
                push!(of_f32(sem::f32_fma(a, b, c)));
            }
            Inst::F64Sqrt => un!(f64v, of_f64, |a| a.sqrt()),
            Inst::F64Abs => un!(f64v, of_f64, |a| a.abs()),
            Inst::F64Min => bin!(f64v, of_f64, |a, b| sem::f64_min(a, b)),
            Inst::F64Max => bin!(f64v, of_f64, |a, b| sem::f64_max(a, b)),
            Inst::F64Floor => un!(f64v, of_f64, |a| a.floor()),
            Inst::F64Ceil => un!(f64v, of_f64, |a| a.ceil()),
            Inst::F64Exp => un!(f64v, of_f64, |a| sem::f64_exp(a)),
            Inst::F64Log => un!(f64v, of_f64, |a| sem::f64_log(a)),
            Inst::F64Sin => un!(f64v, of_f64, |a| sem::f64_sin(a)),
            Inst::F64Cos => un!(f64v, of_f64, |a| sem::f64_cos(a)),
            Inst::F64Pow => bin!(f64v, of_f64, |a, b| sem::f64_pow(a, b)),
            Inst::F64Fma => {
                let c = f64v(pop!());
                let b = f64v(pop!());
                let a = f64v(pop!());
                push!(of_f64(sem::f64_fma(a, b, c)));
            }
            Inst::I32Abs => un!(i32v, of_i32, |a| a.wrapping_abs()),
            Inst::I32Min => bin!(i32v, of_i32, |a, b| a.min(b)),
            Inst::I32Max => bin!(i32v, of_i32, |a, b| a.max(b)),
            Inst::I64Abs => un!(i64v, of_i64, |a| a.wrapping_abs()),
            Inst::I64Min => bin!(i64v, of_i64, |a, b| a.min(b)),
            Inst::I64Max => bin!(i64v, of_i64, |a, b| a.max(b)),
            Inst::I32ArrayAtomicAdd => {
                let x = pop!() as u32;
                let i = i32v(pop!());
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let at = self.array_elem(r, i, 4)?;
                push!(u64::from(
                    self.heap.u32_cell(at)?.fetch_add(x, Ordering::SeqCst)
                ));
            }
            Inst::I64ArrayAtomicAdd => {
                let x = pop!();
                let i = i32v(pop!());
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let at = self.array_elem(r, i, 8)?;
                push!(self.heap.u64_cell(at)?.fetch_add(x, Ordering::SeqCst));
            }
            Inst::I32ArrayCmpxchg => {
                let new = pop!() as u32;
                let expected = pop!() as u32;
                let i = i32v(pop!());
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let at = self.array_elem(r, i, 4)?;
                let old = self.heap.u32_cell(at)?.compare_exchange(
                    expected,
                    new,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
                push!(u64::from(old.unwrap_or_else(|x| x)));
            }
            Inst::I64ArrayCmpxchg => {
                let new = pop!();
                let expected = pop!();
                let i = i32v(pop!());
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let at = self.array_elem(r, i, 8)?;
                let old = self.heap.u64_cell(at)?.compare_exchange(
                    expected,
                    new,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
                push!(old.unwrap_or_else(|x| x));
            }
            Inst::FieldAtomicAdd { field } | Inst::FieldCmpxchg { field } => {
                let new = pop!();
                let expected = if let Inst::FieldCmpxchg { .. } = inst {
                    Some(pop!())
                } else {
                    None
                };
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let off = self.object(r, inst.opcode().mnemonic())?
                    + prog.layout.field_offset[field.index()] as usize;
                let old = if v.field(field).ty == Type::I32 {
                    let cell = self.heap.u32_cell(off)?;
                    u64::from(match expected {
                        None => cell.fetch_add(new as u32, Ordering::SeqCst),
                        Some(e) => cell
                            .compare_exchange(
                                e as u32,
                                new as u32,
                                Ordering::SeqCst,
                                Ordering::SeqCst,
                            )
                            .unwrap_or_else(|x| x),
                    })
                } else {
                    let cell = self.heap.u64_cell(off)?;
                    match expected {
                        None => cell.fetch_add(new, Ordering::SeqCst),
                        Some(e) => cell
                            .compare_exchange(e, new, Ordering::SeqCst, Ordering::SeqCst)
                            .unwrap_or_else(|x| x),
                    }
                };
                push!(old);
            }
            Inst::Ret => {
                let result = v.func(fr.func).ret.map(|_| pop!());
                self.frames.pop();
                self.stack.truncate(fr.base as usize);
                match self.frames.last().copied() {
                    None => return Ok(Step::Done(result)),
                    Some(caller) => {
                        if let Some(x) = result {
                            push!(x);
                        }
                        *fr = caller;
                        fr.pc += 1;
                        *body = &v.func(fr.func).body;
                        return Ok(Step::Next);
                    }
                }
            }
            Inst::Throw { kind } => {
                return Err(Box::new(Trap::Throw(kind, "thrown by the kernel".into())));
            }
        }
        fr.pc = next;
        Ok(Step::Next)
    }

    fn null_note(&mut self, r: u32, f: FuncId, pc: Bci) {
        if r == 0 {
            self.note_null(f, pc);
        }
    }

    fn note_null(&mut self, f: FuncId, pc: Bci) {
        if let Some(p) = self.profile.as_mut() {
            p.null(f, pc);
        }
    }
}
