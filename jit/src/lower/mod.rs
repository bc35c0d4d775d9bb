//! The one bytecode walker both backends lower through.
//!
//! A kernel's body is lowered by walking its verified bytecode: each
//! instruction pops its operands from a model of the operand stack (one
//! variable per stack depth and kind), emits code for its operation and
//! pushes its result. Around the instructions sit the decisions that make
//! the code deoptimizable, and they are the same on every device:
//!
//! - **frames and inlining** ([`Walker::inline`]): a static call lowers the
//!   callee's body in a frame of its own variables; a deopt inside it writes
//!   every frame of the chain as one record ([`offload_deopt::SiteFrame`]);
//! - **virtual dispatch** ([`Walker::call_virtual`]): the receiver's class
//!   is tested against each implementation's classes (or the profiled
//!   ones), the match is inlined, any other receiver deopts;
//! - **site numbering** ([`Walker::site_id`], through [`plan::Inliner`]):
//!   kernel sites are the analysis's, sites in inlined code are made per
//!   call chain on first use — so a CPU and a PTX version of a kernel have
//!   equal [`DeoptMetadata`];
//! - **speculation** ([`Walker::speculate`]): a profiled branch compiles
//!   one way and deopts the other; non-null and receiver assumptions are
//!   recorded with the site whose exit their guard takes;
//! - **back-edge polls** ([`Walker::edge`], [`Walker::flush_polls`]): a
//!   backward branch goes through a poll of the control word that deopts
//!   with reason `Safepoint` at the loop header;
//! - **deopt exits** ([`Walker::deopt_here`], [`Walker::deopt_if`]): which
//!   variables hold each value of the site's save record ([`Exit`]);
//! - **re-entry landings** ([`Walker::lower_with_landings`]): in a copy
//!   of the body lowered with them, every re-entry point loads a stopped
//!   workitem's record into the variables its exit stores from, so the
//!   device resumes the workitem where it stopped.
//!
//! What differs between devices is how each of those is spelled: that is
//! the [`Backend`] trait, in the spirit of Cranelift's `machinst` lowering
//! — the walker owns the shared state ([`Walker`]) and calls the backend's
//! primitives (constants, arithmetic, compares, conversions, loads and
//! stores, atomics, branches and labels, allocation, a deopt exit, a poll)
//! with itself as the context, so a primitive that needs a deopt (a bounds
//! check) asks the walker for it. [`crate::cpu`] spells the primitives in
//! Cranelift IR, [`crate::ptx`] in PTX text. The slot loop around the body
//! (claiming chunks, the control word between workitems, the exits'
//! protocol) is each backend's own, and so are the CPU's optimizations
//! ([`crate::cpu::opt`]).

mod calls;
mod inst;
pub(crate) mod plan;
mod predicated;
pub(crate) mod reentry;
pub(crate) mod reuse;
pub(crate) mod weight;

use crate::spec::Speculations;
use crate::{CompileOptions, Injection, JitError};
use offload_deopt::{Assumption, DeoptMetadata, Reason, Speculation};
use offload_ir::analysis::{FuncAnalysis, Value as FsValue};
use offload_ir::{Bci, FuncId, Kind, SiteId, Type, Verified};
use offload_program::Program;
use std::collections::HashMap;

pub(crate) use inst::{BinOp, CmpOp, Const, UnOp, elem};

/// Calls nest at most this deep in compiled code (deeper: the kernel runs on
/// the interpreter).
pub const MAX_INLINE_DEPTH: usize = 8;
/// At most this many instructions are inlined into one kernel.
pub const MAX_INLINED_INSTS: usize = 4096;

/// How a device spells what the [`Walker`] lowers. Every primitive takes
/// the walker, whose [`Walker::e`] is the backend's own state.
///
/// A *condition* is a [`Backend::Val`] made by a test primitive (`is_null`,
/// `is_zero`, ...) and consumed by a branch or a deopt; a value of kind `k`
/// is one that [`Backend::use_var`] or an operation made.
pub(crate) trait Backend: Sized {
    /// A mutable variable: a local, an operand-stack slot.
    type Var: Clone;
    /// A value (or a condition).
    type Val: Clone;
    /// A place in the code that branches go to.
    type Block: Clone;
    /// Where an inlined call returns to, with its result.
    type Join: Clone;

    // --- Variables and values.

    /// Local `index` of frame copy `instance` (0 is the kernel's).
    fn local_var(w: &mut Walker<'_, Self>, instance: u32, index: usize, kind: Kind) -> Self::Var;
    /// The operand-stack slot at `depth` of kind `kind` in frame copy
    /// `instance`.
    fn stack_var(w: &mut Walker<'_, Self>, instance: u32, depth: usize, kind: Kind) -> Self::Var;
    /// The current value of `var`.
    fn use_var(w: &mut Walker<'_, Self>, var: &Self::Var, kind: Kind) -> Self::Val;
    /// Assign `x` to `var`.
    fn def_var(w: &mut Walker<'_, Self>, var: &Self::Var, kind: Kind, x: Self::Val);
    /// `x` as a value that stays valid when the variable it was read from
    /// is assigned (`swap`).
    fn stable(w: &mut Walker<'_, Self>, kind: Kind, x: Self::Val) -> Self::Val;
    /// A constant.
    fn constant(w: &mut Walker<'_, Self>, c: Const) -> Self::Val;
    /// Add `delta` to the integer local `var` of kind `kind`.
    fn increment(w: &mut Walker<'_, Self>, var: &Self::Var, kind: Kind, delta: i32);

    // --- Blocks and branches.

    /// The block of the leader at `bci` in frame copy `instance`.
    fn leader_block(w: &mut Walker<'_, Self>, instance: u32, bci: Bci) -> Self::Block;
    /// A fresh block.
    fn new_block(w: &mut Walker<'_, Self>) -> Self::Block;
    /// Go on emitting at `b`.
    fn switch_to(w: &mut Walker<'_, Self>, b: &Self::Block);
    /// Start leader block `b`, falling into it from the code before unless
    /// that is `terminated`.
    fn enter_block(w: &mut Walker<'_, Self>, b: &Self::Block, terminated: bool);
    /// Jump to `b`.
    fn jump(w: &mut Walker<'_, Self>, b: &Self::Block);
    /// A conditional branch on the `i32` or reference `x`: to `dest` when
    /// `(x != 0) == jumps_on_nonzero`, else to `fall`.
    fn cond_branch(
        w: &mut Walker<'_, Self>,
        x: Self::Val,
        jumps_on_nonzero: bool,
        dest: &Self::Block,
        fall: &Self::Block,
    );
    /// Go to `to` when the branch on `x` (jumping when `(x != 0) ==
    /// jumps_on_nonzero`) goes the way `when` says (`true`: it jumps), and
    /// go on here otherwise.
    fn branch_if(
        w: &mut Walker<'_, Self>,
        x: Self::Val,
        jumps_on_nonzero: bool,
        when: bool,
        to: &Self::Block,
    );
    /// Go to `to` when condition `cond` is `when`, and go on here otherwise.
    fn branch_on(w: &mut Walker<'_, Self>, cond: Self::Val, when: bool, to: &Self::Block);
    /// Go on here when condition `cond` holds; otherwise go to the block
    /// returned (not yet started).
    fn guard(w: &mut Walker<'_, Self>, cond: Self::Val) -> Self::Block;
    /// The kernel's `ret`: the workitem is done, with its value for a
    /// reducing kernel.
    fn ret_kernel(w: &mut Walker<'_, Self>, value: Option<Self::Val>);

    // --- Inlined calls.

    /// Whether a call of a pure function in the kernel's frame may take
    /// an earlier identical call's result ([`reuse::reusable_call`]) where
    /// the body is lowered now: only where no landing enters the body
    /// between two calls (a landing is a path around the first).
    fn reuses_calls(_w: &Walker<'_, Self>) -> bool {
        false
    }

    /// The value the compare at `bci` of the kernel's own body is known to
    /// have where the body is lowered now, if it is: in the unchecked
    /// version, the test that an `i64` index survives its narrowing
    /// ([`crate::cpu::opt::workitem_tests`]).
    fn known_compare(_w: &Walker<'_, Self>, _bci: Bci) -> Option<i32> {
        None
    }

    /// Where call number `n` (an inlined `call`, or a `callvirt` when
    /// `virtual_call`) returns to, with a result of kind `ret`.
    fn join(w: &mut Walker<'_, Self>, ret: Option<Kind>, virtual_call: bool, n: u32) -> Self::Join;
    /// Return to `j` with `result`.
    fn jump_join(w: &mut Walker<'_, Self>, j: &Self::Join, result: Option<Self::Val>);
    /// Go on emitting where `j` returns to; its result.
    fn enter_join(w: &mut Walker<'_, Self>, j: &Self::Join) -> Option<Self::Val>;

    // --- Deopt exits and polls.

    /// Leave through deopt exit `exit` here (control does not go on).
    fn deopt(w: &mut Walker<'_, Self>, exit: Exit<Self::Var>);
    /// Leave through `exit` when condition `cond` holds; go on otherwise.
    fn deopt_if(w: &mut Walker<'_, Self>, cond: Self::Val, exit: Exit<Self::Var>);
    /// Whether a safepoint is requested at a back-edge poll (or, with
    /// [`CompileOptions::safepoints`], injected there), as a condition.
    /// `work` is the loop's iteration in [`weight`] units: a backend may
    /// read the control word only once that much work has been done.
    fn safepoint_requested(w: &mut Walker<'_, Self>, work: u32) -> Self::Val;
    /// Whether injection `inj` picks the running workitem, as a condition.
    fn injected(w: &mut Walker<'_, Self>, inj: Injection) -> Self::Val;
    /// Word `word` of the save record being re-entered, as a value of kind
    /// `kind` (in a landing, `lower/reentry.rs`).
    fn reentry_value(w: &mut Walker<'_, Self>, word: u32, kind: Kind) -> Self::Val;

    // --- Tests.

    /// Whether reference `r` is null.
    fn is_null(w: &mut Walker<'_, Self>, r: Self::Val) -> Self::Val;
    /// Whether the integer `x` of kind `k` is zero.
    fn is_zero(w: &mut Walker<'_, Self>, k: Kind, x: Self::Val) -> Self::Val;
    /// Whether the `i32` `x` is negative.
    fn is_negative(w: &mut Walker<'_, Self>, x: Self::Val) -> Self::Val;
    /// Where the device hands `op` of argument `x` to the host (`sin` and
    /// `cos` beyond the GPU's reduction), the condition that it does.
    fn host_math(w: &mut Walker<'_, Self>, op: UnOp, k: Kind, x: Self::Val) -> Option<Self::Val>;

    // --- Arithmetic.

    /// `a op b` of kind `k`; an integer division's divisor is not zero.
    fn binary(
        w: &mut Walker<'_, Self>,
        op: BinOp,
        k: Kind,
        a: Self::Val,
        b: Self::Val,
    ) -> Self::Val;
    /// `op a` of kind `k`.
    fn unary(w: &mut Walker<'_, Self>, op: UnOp, k: Kind, a: Self::Val) -> Self::Val;
    /// `a * b + c` of kind `k`, rounded once.
    fn fma(
        w: &mut Walker<'_, Self>,
        k: Kind,
        a: Self::Val,
        b: Self::Val,
        c: Self::Val,
    ) -> Self::Val;
    /// `a op b` of kind `k` as an `i32` 0 or 1.
    fn compare(
        w: &mut Walker<'_, Self>,
        op: CmpOp,
        k: Kind,
        a: Self::Val,
        b: Self::Val,
    ) -> Self::Val;
    /// `a` of kind `from` converted to `to`.
    fn convert(w: &mut Walker<'_, Self>, from: Kind, to: Kind, a: Self::Val) -> Self::Val;

    // --- Memory.

    /// The address of the (non-null) object `r`.
    fn obj_addr(w: &mut Walker<'_, Self>, r: Self::Val) -> Self::Val;
    /// The length of the array whose header is at `base`.
    fn array_len(w: &mut Walker<'_, Self>, base: Self::Val) -> Self::Val;
    /// The class id of the object `r` (non-null): from its page's tag or
    /// its header, as the backend dispatches.
    fn class_tag(w: &mut Walker<'_, Self>, r: Self::Val) -> Self::Val;
    /// The class id in the header of the object `r` (non-null).
    fn header_tag(w: &mut Walker<'_, Self>, r: Self::Val) -> Self::Val;
    /// Where this backend dispatches a virtual call by address with the
    /// header read off the hot path: the tag of the page of `r` alone
    /// (non-null; `offload_abi::pages`), which is negative — matching no
    /// class — on a page that names no class, so that the call tests the
    /// page's tag first and reads the header only when no implementation
    /// matched. `None` (the default): the call tests [`Backend::class_tag`].
    fn page_tag(_w: &mut Walker<'_, Self>, _r: Self::Val) -> Option<Self::Val> {
        None
    }
    /// Whether the class id `tag` is one of `ids`, as a condition.
    fn tag_in(w: &mut Walker<'_, Self>, tag: Self::Val, ids: &[u32]) -> Self::Val;
    /// The address of element `idx` of array `r` (`size` bytes each),
    /// which is the operand `from_top` below the top of the stack at `bci`,
    /// deopting at `bci` on null or out of bounds.
    fn elem_addr(
        w: &mut Walker<'_, Self>,
        r: Self::Val,
        idx: Self::Val,
        size: u32,
        bci: Bci,
        from_top: usize,
    ) -> Self::Val;
    /// The address `off` bytes into the object at `base` (for atomics).
    fn field_addr(w: &mut Walker<'_, Self>, base: Self::Val, off: u32) -> Self::Val;
    /// Load a value of kind `k` from `addr + off`.
    fn load(w: &mut Walker<'_, Self>, k: Kind, addr: Self::Val, off: u32) -> Self::Val;
    /// Store `x` of kind `k` at `addr + off`.
    fn store(w: &mut Walker<'_, Self>, k: Kind, addr: Self::Val, off: u32, x: Self::Val);
    /// The write barrier of storing reference `x` into the object `r`
    /// (which the workitem did not just allocate).
    fn write_barrier(w: &mut Walker<'_, Self>, r: Self::Val, x: Self::Val);
    /// Atomically add `x` to the `k` at `addr`; the old value.
    fn atomic_add(w: &mut Walker<'_, Self>, k: Kind, addr: Self::Val, x: Self::Val) -> Self::Val;
    /// Add `x` to the `k` at `addr`, which no other thread touches
    /// meanwhile ([`CompileOptions::private_sums`]); the old value. A
    /// backend without a cheaper way adds atomically.
    fn private_add(w: &mut Walker<'_, Self>, k: Kind, addr: Self::Val, x: Self::Val) -> Self::Val {
        Self::atomic_add(w, k, addr, x)
    }
    /// Atomically replace the `k` at `addr` by `new` if it is `expected`;
    /// the old value.
    fn cmpxchg(
        w: &mut Walker<'_, Self>,
        k: Kind,
        addr: Self::Val,
        expected: Self::Val,
        new: Self::Val,
    ) -> Self::Val;

    // --- Objects.

    /// Whether `r` is non-null and an instance of `ty`, as an `i32`.
    fn instance_of(w: &mut Walker<'_, Self>, r: Self::Val, ty: Type) -> Self::Val;
    /// Whether `r` is non-null and not an instance of `ty`, as a condition.
    fn cast_fails(w: &mut Walker<'_, Self>, r: Self::Val, ty: Type) -> Self::Val;
    /// Allocate an object with class id `tag` of `size` bytes at `bci`.
    fn new_object(w: &mut Walker<'_, Self>, bci: Bci, tag: u32, size: u32) -> Self::Val;
    /// Allocate an array with header tag `tag` of `len` (non-negative)
    /// elements of `esize` bytes at `bci`.
    fn new_array(
        w: &mut Walker<'_, Self>,
        bci: Bci,
        tag: u32,
        esize: u32,
        len: Self::Val,
    ) -> Self::Val;
}

/// One value of a save record: its word in the record, its kind, and the
/// variable that holds it where the exit is.
#[derive(Clone, Debug)]
pub(crate) struct RecordSlot<V> {
    pub(crate) word: u32,
    pub(crate) kind: Kind,
    pub(crate) var: V,
}

/// A deopt exit to emit: the site, the reason, and where each value of
/// its record is.
#[derive(Clone, Debug)]
pub(crate) struct Exit<V> {
    pub(crate) site: SiteId,
    pub(crate) reason: Reason,
    /// The bytecode index in the frame that deopts (for comments).
    pub(crate) bci: Bci,
    /// The frame copy the exit reads the variables of: an exit is shared
    /// only within one copy.
    pub(crate) instance: u32,
    /// Every frame's values, outermost first.
    pub(crate) slots: Vec<RecordSlot<V>>,
}

/// A function being lowered: the kernel, or a function inlined into it.
pub(crate) struct Frame<'a, B: Backend> {
    pub(crate) func: FuncId,
    pub(crate) analysis: &'a FuncAnalysis,
    /// One variable per local.
    pub(crate) locals: Vec<B::Var>,
    /// One variable per operand-stack depth and kind.
    pub(crate) stack: HashMap<(usize, Kind), B::Var>,
    pub(crate) depth: usize,
    /// The block of each reachable leader.
    pub(crate) blocks: HashMap<Bci, B::Block>,
    /// Back-edge poll blocks waiting to be filled.
    /// Back-edges' poll blocks to fill: the block, the loop's header and
    /// the edge's source.
    pub(crate) pending_polls: Vec<(B::Block, Bci, Bci)>,
    /// A conditional branch known not to be taken where it is lowered now
    /// (`predicated.rs`: the header test of an unrolled loop's copies,
    /// whose whole round was tested at its start).
    pub(crate) stays: Option<Bci>,
    /// A conditional branch whose condition a known compare just before
    /// it gave (`Backend::known_compare`), with that condition's value.
    pub(crate) known_branch: Option<(Bci, i32)>,
    /// While lowering a copy of an unrolled loop other than the last:
    /// its header, whose back-edges go to the next copy without a poll.
    pub(crate) poll_free_header: Option<Bci>,
    /// Where `ret` goes in an inlined function. `None` for the kernel.
    pub(crate) ret_to: Option<B::Join>,
    /// Which lowering of its function this frame is: 0 for the kernel, a
    /// new number for each inlined copy.
    pub(crate) instance: u32,
}

impl<'a, B: Backend> Frame<'a, B> {
    pub(crate) fn new(func: FuncId, analysis: &'a FuncAnalysis, instance: u32) -> Frame<'a, B> {
        Frame {
            func,
            analysis,
            locals: Vec::new(),
            stack: HashMap::new(),
            depth: 0,
            blocks: HashMap::new(),
            pending_polls: Vec::new(),
            stays: None,
            known_branch: None,
            poll_free_header: None,
            ret_to: None,
            instance,
        }
    }
}

/// A caller whose call is being inlined, stopped at `call_bci`.
pub(crate) struct Outer<'a, B: Backend> {
    pub(crate) frame: Frame<'a, B>,
    pub(crate) call_bci: Bci,
}

/// The lowering of one kernel version: what every backend shares, and the
/// backend's own state in `e`.
pub(crate) struct Walker<'a, B: Backend> {
    /// The backend's state.
    pub(crate) backend: B,
    pub(crate) v: &'a Verified,
    pub(crate) prog: &'a Program,
    /// The version's metadata, grown by sites in inlined code and
    /// speculations.
    pub(crate) meta: DeoptMetadata,
    pub(crate) opts: CompileOptions,
    pub(crate) spec: &'a Speculations,
    /// The frame being lowered.
    pub(crate) cur: Frame<'a, B>,
    /// Its callers, outermost first.
    pub(crate) outer: Vec<Outer<'a, B>>,
    /// The inlining budget and the ids of sites in inlined code.
    pub(crate) inliner: plan::Inliner,
    /// Inlined calls (and virtual calls) so far: numbers frame copies.
    pub(crate) calls: u32,
    /// While a backend reuses calls ([`Backend::reuses_calls`]): the calls
    /// of the kernel's frame inlined so far, with their results
    /// ([`reuse::reusable_call`]).
    pub(crate) call_results: Vec<(Bci, FuncId, B::Val)>,
    /// While lowering a copy of the body with re-entry landings
    /// ([`Walker::lower_with_landings`]): those made so far, by site.
    pub(crate) landings: Option<Vec<(SiteId, B::Block)>>,
    /// Which re-entry points get landings while `landings` is set.
    pub(crate) landing_scope: reentry::Scope,
    /// The kernel's atomic adds on arrays each slot has a copy of to
    /// itself ([`CompileOptions::private_sums`]): plain adds.
    pub(crate) private_adds: std::collections::BTreeSet<offload_ir::Bci>,
}

impl<'a, B: Backend> Walker<'a, B> {
    /// A walker for version `version` of kernel `k`, with the backend state
    /// `backend`; checks the options against the kernel's sites.
    pub(crate) fn new(
        backend: B,
        prog: &'a Program,
        k: FuncId,
        version: u32,
        opts: CompileOptions,
        spec: &'a Speculations,
    ) -> Result<Walker<'a, B>, JitError> {
        let analysis = prog.analysis(k).ok_or_else(|| JitError::Abstract {
            kernel: prog.verified().func(k).name.clone(),
        })?;
        let meta = DeoptMetadata::new(analysis, k, version);
        plan::check_options(&meta, &opts)?;
        let private: Vec<u32> = (0..64)
            .filter(|p| opts.private_sums >> p & 1 == 1)
            .collect();
        let private_adds = if private.is_empty() {
            std::collections::BTreeSet::new()
        } else {
            offload_ir::summed::private_atomics(prog.verified(), k, &private)
        };
        Ok(Walker {
            backend,
            v: prog.verified(),
            prog,
            meta,
            opts,
            spec,
            cur: Frame::new(k, analysis, 0),
            outer: Vec::new(),
            inliner: plan::Inliner::default(),
            calls: 0,
            call_results: Vec::new(),
            landings: None,
            landing_scope: reentry::Scope::Every,
            private_adds,
        })
    }

    /// The variable of the stack slot at `depth` of kind `kind`.
    pub(crate) fn stack_var(&mut self, depth: usize, kind: Kind) -> B::Var {
        if let Some(v) = self.cur.stack.get(&(depth, kind)) {
            return v.clone();
        }
        let v = B::stack_var(self, self.cur.instance, depth, kind);
        self.cur.stack.insert((depth, kind), v.clone());
        v
    }

    pub(crate) fn push(&mut self, kind: Kind, x: B::Val) {
        let var = self.stack_var(self.cur.depth, kind);
        B::def_var(self, &var, kind, x);
        self.cur.depth += 1;
    }

    pub(crate) fn pop(&mut self, kind: Kind) -> B::Val {
        self.cur.depth -= 1;
        let var = self.stack_var(self.cur.depth, kind);
        B::use_var(self, &var, kind)
    }

    /// The current value of local `l` of the current frame.
    pub(crate) fn local(&mut self, l: usize) -> B::Val {
        let k = self.v.func(self.cur.func).locals[l].ty.kind();
        let var = self.cur.locals[l].clone();
        B::use_var(self, &var, k)
    }

    /// Kind of the stack slot `from_top` below the top at `bci`'s entry.
    pub(crate) fn kind_at(&self, bci: Bci, from_top: usize) -> Kind {
        let fr = self.v.types(self.cur.func).frames[bci as usize]
            .as_ref()
            .expect("reachable");
        fr.stack[fr.stack.len() - 1 - from_top].kind()
    }

    /// The stack depth at `bci`'s entry in the current frame.
    pub(crate) fn depth_at(&self, bci: Bci) -> usize {
        self.v.types(self.cur.func).frames[bci as usize]
            .as_ref()
            .expect("reachable")
            .stack
            .len()
    }

    /// The site of the current frame's instruction at `bci`: a kernel site,
    /// or (in inlined code) one made for this call chain on first use.
    pub(crate) fn site_id(&mut self, bci: Bci) -> SiteId {
        let outer: Vec<(FuncId, &FuncAnalysis, Bci)> = self
            .outer
            .iter()
            .map(|o| (o.frame.func, o.frame.analysis, o.call_bci))
            .collect();
        self.inliner.site(
            self.prog,
            &mut self.meta,
            &outer,
            self.cur.func,
            self.cur.analysis,
            bci,
        )
    }

    /// Blocks for every reachable leader of the current frame's function.
    pub(crate) fn make_blocks(&mut self) {
        let types_ = self.v.types(self.cur.func);
        for blk in &self.cur.analysis.cfg.blocks {
            if types_.frames[blk.start as usize].is_some() {
                let b = B::leader_block(self, self.cur.instance, blk.start);
                self.cur.blocks.insert(blk.start, b);
            }
        }
    }

    /// Record the speculation `assumed` at `bci` of the current function,
    /// guarded by that instruction's site (in this inlining chain).
    pub(crate) fn speculate(&mut self, bci: Bci, assumed: Assumption) {
        let id = self.site_id(bci);
        let spec = Speculation {
            func: self.cur.func,
            bci,
            assumed,
        };
        self.meta.speculate(id, spec);
    }

    /// The reason a null at `bci` deopts with (recording the non-null
    /// speculation if there is one).
    pub(crate) fn null_reason(&mut self, bci: Bci) -> Reason {
        let (reason, assumed) = plan::null_check(self.spec, self.cur.func, bci);
        if let Some(a) = assumed {
            self.speculate(bci, a);
        }
        reason
    }

    /// Deopt if `r` is null: a null check, or where the profile never saw
    /// null here, a guard of that speculation.
    pub(crate) fn null_check(&mut self, r: B::Val, bci: Bci) {
        let reason = self.null_reason(bci);
        let is_null = B::is_null(self, r);
        self.deopt_if(is_null, bci, reason);
    }

    /// [`Walker::null_check`], unless the operand `from_top` below the top
    /// of the stack at `bci` cannot be null (`offload_ir::refs`: made by
    /// `new`, or already dereferenced or tested): then neither a check nor
    /// a speculation.
    pub(crate) fn null_check_unless_known(&mut self, r: B::Val, bci: Bci, from_top: usize) {
        if !self.cur.analysis.non_null(bci, from_top) {
            self.null_check(r, bci);
        }
    }

    /// The exit of site `id` with `reason`, reading the current variables:
    /// the callers' frames as they stopped at their calls (their variables
    /// still hold those values), then this frame's.
    pub(crate) fn exit(&mut self, id: SiteId, reason: Reason, bci: Bci) -> Exit<B::Var> {
        let site = self.meta.site(id).expect("created").clone();
        debug_assert!(site.reasons.contains(&reason), "{reason:?} at {id:?}");
        let mut slots = Vec::with_capacity(site.slots.len());
        for (fi, s) in site.frame_slots() {
            let kind = s.ty.kind();
            let var = if fi < self.outer.len() {
                let fr = &self.outer[fi].frame;
                match s.value {
                    FsValue::Local(l) => fr.locals[l.index()].clone(),
                    FsValue::Stack(i) => fr
                        .stack
                        .get(&(i as usize, kind))
                        .expect("a caller's stack value was pushed before its call")
                        .clone(),
                }
            } else {
                match s.value {
                    FsValue::Local(l) => self.cur.locals[l.index()].clone(),
                    FsValue::Stack(i) => self.stack_var(i as usize, kind),
                }
            };
            slots.push(RecordSlot {
                word: s.word,
                kind,
                var,
            });
        }
        Exit {
            site: id,
            reason,
            bci,
            instance: self.cur.instance,
            slots,
        }
    }

    /// A deopt exit for the site at `bci` (whose frame state is the current
    /// variables) with `reason`, here.
    pub(crate) fn deopt_here(&mut self, bci: Bci, reason: Reason) {
        let id = self.site_id(bci);
        let exit = self.exit(id, reason, bci);
        B::deopt(self, exit);
    }

    /// Deopt at `bci` with `reason` if condition `cond` holds.
    pub(crate) fn deopt_if(&mut self, cond: B::Val, bci: Bci, reason: Reason) {
        let id = self.site_id(bci);
        let exit = self.exit(id, reason, bci);
        B::deopt_if(self, cond, exit);
    }

    /// Lower the instructions `[lo, hi)` of the current function, entered
    /// with the current block `terminated` or not; returns whether the last
    /// block is terminated.
    pub(crate) fn lower_range(
        &mut self,
        lo: Bci,
        hi: Bci,
        mut terminated: bool,
    ) -> Result<bool, JitError> {
        let f = self.v.func(self.cur.func);
        let types_ = self.v.types(self.cur.func);
        for bci in lo..hi {
            let inst = f.body[bci as usize];
            let Some(frame) = types_.frames[bci as usize].as_ref() else {
                continue;
            };
            self.cur.depth = frame.stack.len();
            let leader = self.cur.blocks.get(&bci).cloned();
            let inject = self
                .opts
                .inject
                .filter(|inj| self.outer.is_empty() && inj.site_bci == bci);
            let lands = self.lands_at(bci);
            if lands && inject.is_none() {
                terminated = self.landing(bci, leader.clone(), terminated);
            }
            if let Some(blk) = &leader {
                B::enter_block(self, blk, terminated);
            }
            if let Some(inj) = inject {
                let hit = B::injected(self, inj);
                let reason = inj.reason.unwrap_or_else(|| {
                    self.meta
                        .site_at(bci)
                        .expect("checked at compile start")
                        .reasons[0]
                });
                self.deopt_if(hit, bci, reason);
                // A workitem resumed here must not take the injected deopt
                // again (it would stop at every re-entry, and never get
                // on): its landing comes after the check.
                if lands {
                    self.landing(bci, None, false);
                }
            }
            terminated = self.inst(bci, inst)?;
            if terminated {
                self.flush_polls();
            }
        }
        Ok(terminated)
    }

    /// Jump to the current frame's first block and lower its whole body.
    pub(crate) fn whole_body(&mut self) -> Result<(), JitError> {
        let first = self.cur.blocks[&0].clone();
        B::jump(self, &first);
        let n = self.v.func(self.cur.func).body.len() as Bci;
        self.lower_range(0, n, true)?;
        Ok(())
    }

    /// The block to go to for `target`, through a safepoint poll when the
    /// edge goes backwards. The poll block is filled by
    /// [`Walker::flush_polls`] once the current block is terminated.
    pub(crate) fn edge(&mut self, from: Bci, target: Bci) -> B::Block {
        let dest = self.cur.blocks[&target].clone();
        if target > from || self.opts.no_polls || self.cur.poll_free_header == Some(target) {
            return dest;
        }
        let poll = B::new_block(self);
        self.cur.pending_polls.push((poll.clone(), target, from));
        poll
    }

    /// Fill the poll blocks of the back-edges just emitted: read the control
    /// word; on a safepoint request deoptimize at the loop header (whose
    /// frame state is the edge's: the verifier made the depths agree).
    pub(crate) fn flush_polls(&mut self) {
        for (poll, target, from) in std::mem::take(&mut self.cur.pending_polls) {
            let dest = self.cur.blocks[&target].clone();
            B::switch_to(self, &poll);
            let work = weight::iteration(self.v, self.cur.func, target, from);
            let sp = B::safepoint_requested(self, work);
            B::branch_on(self, sp, false, &dest);
            self.cur.depth = self.depth_at(target);
            self.deopt_here(target, Reason::Safepoint);
        }
    }

    /// A conditional branch the profile saw go one way only (`taken`): that
    /// way is compiled, the other is a deopt exit (`Unreached`) with the
    /// frame at the branch's entry (the condition `x` still on the stack),
    /// where the interpreter re-executes the branch.
    pub(crate) fn speculated_branch(
        &mut self,
        jumps_on_nonzero: bool,
        bci: Bci,
        target: Bci,
        x: B::Val,
        taken: bool,
    ) {
        self.speculate(bci, Assumption::Branch { taken });
        let kept = if taken {
            self.edge(bci, target)
        } else {
            self.cur.blocks[&(bci + 1)].clone()
        };
        B::branch_if(self, x, jumps_on_nonzero, taken, &kept);
        self.cur.depth += 1;
        self.deopt_here(bci, Reason::Unreached);
        self.cur.depth -= 1;
    }
}
