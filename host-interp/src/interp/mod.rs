//! The interpreter: its state, entering kernels and calls, and the run
//! loop. One step of an instruction is `step.rs`; resuming deopted
//! workitems from their frame states is `resume.rs`.

use crate::exception::{Exception, TraceFrame};
use offload_heap::layout::{Header, kind_size};
use offload_heap::{AllocFailure, Allocator, Heap, HeapError};
use offload_ir::isa::{Label, Op};
use offload_ir::semantics as sem;
use offload_ir::{Bci, ClassId, ExceptionKind, FuncId, Inst, Type, Verified};
use offload_program::{Profile, Program};
use std::sync::atomic::Ordering;

mod resume;
mod roots;
mod step;

pub use resume::{ResumeError, ResumeFrame, ResumePlan};
pub use roots::Collector;

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
    /// Called when eden is exhausted ([`Interpreter::set_collector`]).
    gc: Option<&'a dyn Collector>,
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
            gc: None,
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
    /// back to where the workitem started. The TLAB is the worker's one of
    /// the first kind (`Allocator::kinds`): a workitem that allocates an
    /// object of another kind is not reset.
    pub fn enable_nursery(&mut self) {
        self.nursery = self.alloc.tlab_for(self.worker, 0).is_some();
    }

    /// Heap words of dead workitem objects handed back since the last
    /// call.
    pub fn take_recycled_words(&mut self) -> u64 {
        std::mem::take(&mut self.recycled)
    }

    /// The end of a workitem under the nursery reset (see
    /// [`Interpreter::enable_nursery`]).
    fn nursery_end(&mut self, start: (u32, u32), direct: u64, refills: u64) {
        let Some(tlab) = self.alloc.tlab_for(self.worker, 0) else {
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

    /// Collect the heap through `gc` when eden is exhausted, and try the
    /// allocation again; without one, exhaustion throws `OutOfMemory` at
    /// once. The interpreter's frames are among the collection's roots (it
    /// updates them), here and wherever it parks at a safepoint.
    pub fn set_collector(&mut self, gc: &'a dyn Collector) {
        self.gc = Some(gc);
    }

    /// Whether the last workitem ended because its launch was interrupted
    /// (its `Err` is then that, not an exception of the kernel); clears
    /// the flag.
    pub fn take_interrupted(&mut self) -> bool {
        std::mem::take(&mut self.interrupted)
    }

    /// The poll at a back-edge or call of the innermost frame, at `pc`:
    /// parked, the frames are roots of whatever the safepoint does.
    #[inline]
    fn poll(&mut self, pc: Bci) -> Result<(), Box<Trap>> {
        if let Some(c) = self.control
            && c.poll_with(&mut self.frame_roots(pc))
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

    /// Run kernel `k` for one workitem with its captures (raw values): the
    /// value it returns, for a reducing kernel (`None` for one that
    /// returns nothing).
    pub fn run_kernel(
        &mut self,
        k: FuncId,
        workitem: i64,
        captures: &[u64],
    ) -> Result<Option<u64>, Exception> {
        self.workitem = Some(workitem);
        // Launches run the same kernel for many workitems: check it once.
        if self.checked_kernel != Some((k, captures.len())) {
            self.check_entry(k, captures.len() + 1, true)?;
            self.checked_kernel = Some((k, captures.len()));
        }
        let nursery = self.nursery.then(|| {
            let tlab = self.alloc.tlab_for(self.worker, 0);
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
        let r = self.exec(None).map(|o| match o {
            Outcome::Finished(v) => v,
            Outcome::Stopped(_) => None,
        });
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
                let at = f.span_of(Some(fr.pc));
                TraceFrame {
                    func: f.name.clone(),
                    bci: fr.pc,
                    file: v.source.0.clone(),
                    line: at.line,
                    col: at.col,
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
    fn finish(&mut self) -> Result<Option<u64>, Box<Exception>> {
        match self.run(None) {
            Ok(()) => Ok(self.result.take()),
            Err(t) => Err(Box::new(self.trap_exception(*t))),
        }
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
}
