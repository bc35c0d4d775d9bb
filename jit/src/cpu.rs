//! The CPU backend: verified bytecode → Cranelift IR → native code, as one
//! persistent slot loop per kernel (docs/DESIGN.md, "How a launch flows"):
//!
//! ```text
//! entry:  [w, hi) = never_ran[slot]; if w < hi: goto item   ; resume a stopped chunk
//! claim:  lo = atomic_add(cursor, chunk); if lo >= end: exit DONE
//! item:   if w == hi: goto claim
//!         if control != 0: never_ran[slot] = [w, hi); exit STOPPED
//!         <the kernel body for workitem w>          ; `ret` → w += 1, goto item
//! deopt:  n = records[slot] + 1                     ; records not yet replayed
//!         save_area[slot][n - 1] = (w, site, reason, live values); records[slot] = n
//!         never_ran[slot] = [w+1, hi)
//!         if n == records_per_slot or reason == Safepoint: exit DEOPT
//!         exit RECORDED                              ; entered again at once
//! ```
//!
//! `never_ran[slot]`, `records[slot]` and the slot's completed count are
//! its `SlotWords`, on cache lines of their own (only its exits write them).
//! The record count lives there, not in a register. The other slots go on
//! while one deopts. A deopt exit returns rather than jumping back into the
//! loop: the
//! exits are then outside the loop, and what only they use stays out of the
//! loop's registers (see `EXIT_RECORDED`).
//!
//! Locals and operand-stack slots are cranelift-frontend `Variable`s (one per
//! local, one per stack depth and kind), so every deopt exit can store the
//! exact frame state the `ir` analysis describes, in the save-record layout of
//! [`offload_deopt::DeoptMetadata`]. Null, bounds, divide and explicit throws
//! leave through deopt exits; back-edges poll the control word and leave with
//! reason `Safepoint` at the loop header. Nothing traps.
//!
//! An array access checks null and bounds with one compare: null's header
//! (heap word 0) reads as an array of length 0. In the optimized tier, a
//! kernel whose accesses are indexed by the workitem number into arrays it
//! never reassigns (`plan::workitem_indexed`) gets a second version of the
//! item loop without those checks; a chunk `[lo, hi)` runs it when `0 <= lo`
//! and `hi` is at most each such array's length, and the checked version
//! otherwise (so the chunk that runs past an array's end deopts exactly as
//! before). For a small kernel with no loop and no call, that version also
//! checks the control word once per group of `plan::UNROLL` workitems and
//! runs their bodies back to back (`plan::unroll_factor`); a chunk's last
//! few workitems go one by one.
//!
//! Innermost counted loops get the same treatment inside a workitem
//! (`plan::loop_predicates`, after C2's loop predication): where such a loop
//! is entered, one test decides whether every covered access is in bounds
//! for every value the induction variable will take; if so the loop runs a
//! version without those checks — four copies of it, whose back-edges poll
//! the control word only in the last (`plan::loop_unroll`) — and otherwise
//! the checked version, which deopts exactly where the interpreter throws.
//!
//! Calls are inlined: a static call inlines its callee in a frame of its own
//! variables; a virtual call tests the receiver's class id against the
//! classes of each implementation (class hierarchy of the module) and
//! inlines the matching one, and any other receiver deopts so that the
//! interpreter makes the call. A deopt inside inlined code writes every
//! frame — the kernel's and each caller's as they stopped at their calls,
//! then the callee's — as one record ([`offload_deopt::SiteFrame`]), and the
//! interpreter rebuilds them all. Recursion, nesting deeper than
//! [`MAX_INLINE_DEPTH`] and more than [`MAX_INLINED_INSTS`] inlined
//! instructions are refused with [`JitError::Unsupported`] (the kernel runs
//! on the interpreter, and the launch report says why).
//!
//! `new`/`newarray` run the shared-TLAB fast path inline (generation check,
//! one atomic add, bounds compare, header stores) and call
//! [`crate::rt::offload_alloc_slow`] for the designated refill, waiting,
//! large objects and TLAB-less policies — through a `preserve_all`
//! trampoline, so that the call, which sits inside the loops that allocate,
//! clobbers no register; `instanceof`/`checkcast` compare the header's
//! class id with the target's subclasses.
//!
//! Register pressure is the CPU device's main cost, so what only cold paths
//! use (the slot's TLAB, the size limits) is loaded where it is used rather
//! than held from the slot's entry, and after the frontend has built SSA,
//! block parameters that only pass one value around a loop are removed
//! (`crate::ssa`): the frontend leaves them when blocks are sealed at the
//! end, and each would hold a register through the loop.
//!
//! **The nursery reset.** In a kernel that may allocate
//! (`plan::may_allocate`), when every slot has a TLAB of its own and the
//! runtime hands dead objects back (`LaunchCtx::nursery`), each workitem
//! notes its slot's TLAB state word when it starts: its objects are then
//! exactly `[top, end)` of that TLAB. The write barrier of `putfield` and
//! `ref.astore` tests that range: storing an object of the workitem into
//! an object outside it is an escape (it also sets the slot's `escaped`,
//! which keeps the launch's objects). When the workitem returns with no
//! escape and no refill or large object since its start (either turns the
//! barrier back into the launch's test for the rest of the workitem), its
//! objects are dead: the compiled code zeroes them (inline, no call: see
//! `Lower::zero_words`) and `top` goes back to where it was, so the next
//! workitem allocates in the same cache-warm words. A workitem that deopts skips the reset (its save
//! record refers to its objects) and the slot's next workitem starts above
//! them. The launch's objects stay what the interpreter's are; only the
//! memory of dead ones is reused earlier.

use crate::JitError;
use crate::ctx::{CONTROL_SAFEPOINT, EXIT_DEOPT, EXIT_DONE, EXIT_RECORDED, EXIT_STOPPED, offsets};
use crate::plan::{self, Inliner, TypeTest};
use crate::spec::Speculations;
use cranelift_codegen::Context;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::immediates::{Ieee32, Ieee64};
use cranelift_codegen::ir::{
    AbiParam, AtomicRmwOp, Block, FuncRef, InstBuilder, MemFlagsData, Signature, Type as ClType,
    Value, types,
};
use cranelift_codegen::isa::CallConv;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::JITModule;
use cranelift_module::{FuncId as ClFuncId, Linkage, Module, ModuleReloc};
use offload_deopt::{Assumption, DeoptMetadata, Reason, SaveLayout, Speculation};
use offload_host_interp::Program;
use offload_ir::analysis::{FuncAnalysis, Value as FsValue};
use offload_ir::isa::hz;
use offload_ir::{Bci, FuncId, Inst, Kind, SiteId, Verified};
use std::collections::HashMap;

fn cl_type(k: Kind) -> ClType {
    match k {
        Kind::I32 | Kind::Ref => types::I32,
        Kind::I64 => types::I64,
        Kind::F32 => types::F32,
        Kind::F64 => types::F64,
    }
}

struct Imports {
    funcs: HashMap<&'static str, ClFuncId>,
}

impl Imports {
    /// Declare the math functions, and for a kernel that `allocates` the
    /// runtime's allocation calls.
    fn declare(module: &mut JITModule, allocates: bool) -> Result<Imports, JitError> {
        let mut funcs = HashMap::new();
        let sigs: [(&str, &[ClType]); 14] = [
            ("offload_f32_rem", &[types::F32, types::F32]),
            ("offload_f64_rem", &[types::F64, types::F64]),
            ("offload_f32_exp", &[types::F32]),
            ("offload_f64_exp", &[types::F64]),
            ("offload_f32_log", &[types::F32]),
            ("offload_f64_log", &[types::F64]),
            ("offload_f32_sin", &[types::F32]),
            ("offload_f64_sin", &[types::F64]),
            ("offload_f32_cos", &[types::F32]),
            ("offload_f64_cos", &[types::F64]),
            ("offload_f32_pow", &[types::F32, types::F32]),
            ("offload_f64_pow", &[types::F64, types::F64]),
            ("offload_f32_fma", &[types::F32, types::F32, types::F32]),
            ("offload_f64_fma", &[types::F64, types::F64, types::F64]),
        ];
        let ptr = module.target_config().pointer_type();
        let declare =
            |module: &mut JITModule, name: &'static str, params: &[ClType], ret: Option<ClType>| {
                let mut sig = module.make_signature();
                for &p in params {
                    sig.params.push(AbiParam::new(p));
                }
                sig.returns.extend(ret.map(AbiParam::new));
                module
                    .declare_function(name, Linkage::Import, &sig)
                    .map_err(|e| JitError::Codegen(format!("declaring {name}: {e}")))
            };
        for (name, params) in sigs {
            funcs.insert(name, declare(module, name, params, Some(params[0]))?);
        }
        // The runtime call of allocating kernels: the slow path, through
        // a trampoline that preserves every register (below).
        let slow = [
            ptr,
            types::I64,
            types::I64,
            types::I64,
            types::I64,
            types::I32,
        ];
        if allocates {
            let target = declare(module, "offload_alloc_slow", &slow, None)?;
            let id = preserving_trampoline(module, "offload_alloc_slow_preserving", target, &slow)?;
            funcs.insert("offload_alloc_slow", id);
        }
        Ok(Imports { funcs })
    }
}

/// Define `name`, a function of Cranelift's `preserve_all` convention
/// that calls `target` (a Rust `extern "C"` function of the same
/// parameters and no result) and returns. Compiled code calls the
/// allocation slow path through one, so that the call, on a cold path
/// inside a kernel's loops, clobbers no register:
/// otherwise every value live across the call (the loop's counters, the
/// heap base, the TLAB state) must sit in one of the five callee-saved
/// registers or on the stack, and is reloaded on every iteration of the
/// hot path. The trampoline saves what the call clobbers only when it
/// runs. (`preserve_all` returns nothing, so results come back through
/// memory: `SlotWords::slow_result`.)
fn preserving_trampoline(
    module: &mut JITModule,
    name: &str,
    target: ClFuncId,
    params: &[ClType],
) -> Result<ClFuncId, JitError> {
    let mut sig = module.make_signature();
    sig.call_conv = CallConv::PreserveAll;
    for &p in params {
        sig.params.push(AbiParam::new(p));
    }
    let id = module
        .declare_function(name, Linkage::Local, &sig)
        .map_err(|e| JitError::Codegen(format!("declaring {name}: {e}")))?;
    let mut ctx = module.make_context();
    ctx.func.signature = sig;
    let mut fctx = FunctionBuilderContext::new();
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        b.seal_block(entry);
        let args = b.block_params(entry).to_vec();
        let callee = module.declare_func_in_func(target, b.func);
        b.ins().call(callee, &args);
        b.ins().return_(&[]);
        b.finalize(module.target_config());
    }
    module
        .define_function(id, &mut ctx)
        .map_err(|e| JitError::Codegen(format!("defining {name}: {e}")))?;
    module.clear_context(&mut ctx);
    Ok(id)
}

/// Fault injection compiled into a kernel version (tests only; a version
/// compiled without it pays nothing): workitems with
/// `w % modulus == remainder` deoptimize just before executing the
/// instruction at `site_bci` (which must be a deopt site), with the site's
/// first reason — as if its check had failed spuriously.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Injection {
    /// The site.
    pub site_bci: Bci,
    /// Workitems are chosen by `w % modulus == remainder`.
    pub modulus: i64,
    /// See `modulus`.
    pub remainder: i64,
}

/// Fault injection compiled into a kernel version: back-edge polls deopt
/// with reason `Safepoint` as if the host had requested a safepoint — every
/// `every`-th poll of a slot, or, with a `seed`, each poll with probability
/// 1/`every` (a per-slot xorshift stream seeded from `seed` and the slot).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SafepointInjection {
    /// The period (or the inverse probability), at least 1.
    pub every: u64,
    /// Random instead of periodic.
    pub seed: Option<u64>,
}

/// How a kernel version is compiled. The default is what production runs:
/// polls at every back-edge, no fault injection.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    /// Force deopts at a site (tests).
    pub inject: Option<Injection>,
    /// Force safepoint deopts at back-edge polls (tests).
    pub safepoints: Option<SafepointInjection>,
    /// Leave out the back-edge polls — only to measure what they cost: a
    /// safepoint then waits for each slot's current workitem to finish.
    pub no_polls: bool,
    /// Compile for latency (the first tier): no Cranelift optimizations and
    /// single-pass register allocation — 2–2.5x quicker to compile, about 2x
    /// slower to run. The same lowering, deopt sites and metadata as the
    /// optimized tier, so records from either decode the same way.
    pub quick: bool,
}

/// Compile the slot loop of kernel `k` into `module` as function `name`
/// (and, with `clif`, write its optimized Cranelift IR there).
#[allow(clippy::too_many_arguments)]
pub(crate) fn compile(
    module: &mut JITModule,
    prog: &Program,
    k: FuncId,
    version: u32,
    name: &str,
    opts: CompileOptions,
    spec: &Speculations,
    clif: Option<&mut String>,
) -> Result<(ClFuncId, DeoptMetadata), JitError> {
    let v = prog.verified();
    let analysis = prog
        .analysis(k)
        .ok_or_else(|| JitError::Unsupported("abstract".into()))?;
    let mut meta = DeoptMetadata::new(analysis, k, version);
    plan::check_options(&meta, &opts)?;
    let allocates = plan::may_allocate(prog, k);
    let imports = Imports::declare(module, allocates)?;

    let ptr = module.target_config().pointer_type();
    let mut sig: Signature = module.make_signature();
    sig.params.push(AbiParam::new(ptr));
    sig.params.push(AbiParam::new(types::I64));
    sig.returns.push(AbiParam::new(types::I32));
    let id = module
        .declare_function(name, Linkage::Local, &sig)
        .map_err(|e| JitError::Codegen(e.to_string()))?;
    let mut ctx = module.make_context();
    ctx.func.signature = sig;
    let mut fctx = FunctionBuilderContext::new();
    {
        let b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let mut lw = Lower {
            b,
            v,
            prog,
            meta,
            ptr,
            cur: Frame::new(k, analysis),
            outer: Vec::new(),
            inliner: Inliner::default(),
            env: Env::default(),
            math: HashMap::new(),
            opts,
            spec,
            exits: HashMap::new(),
            inlined_frames: 0,
            unchecked: Default::default(),
            loops: Vec::new(),
            allocates,
        };
        // In name order, so the function's text is the same every time.
        let mut funcs: Vec<_> = imports.funcs.iter().collect();
        funcs.sort_by_key(|(name, _)| **name);
        for (name, &fid) in funcs {
            let fr = module.declare_func_in_func(fid, lw.b.func);
            // The slow path's trampoline is defined in this module, but
            // cranelift-jit may place it further than a 32-bit call
            // reaches: call every function through its absolute address.
            lw.b.func.dfg.ext_funcs[fr].colocated = false;
            lw.math.insert(*name, fr);
        }
        lw.build()?;
        lw.b.seal_all_blocks();
        lw.b.finalize(module.target_config());
        meta = lw.meta;
    }
    crate::ssa::remove_redundant_params(&mut ctx.func);
    define(module, id, &mut ctx)?;
    // After `define`, `ctx.func` is the optimized function that was
    // lowered to machine code.
    if let Some(out) = clif {
        *out = ctx.func.display().to_string();
    }
    module.clear_context(&mut ctx);
    Ok((id, meta))
}

/// Compile `ctx.func` and define it as `id`. The optimizing module's
/// functions are optimized first, then their constants rematerialized
/// ([`crate::ssa::remat_constants`]), then lowered without optimizing
/// again; the quick tier's are compiled as they are.
fn define(module: &mut JITModule, id: ClFuncId, ctx: &mut Context) -> Result<(), JitError> {
    use cranelift_codegen::control::ControlPlane;
    use cranelift_codegen::settings::OptLevel;
    let fail = |e: &dyn std::fmt::Display, f: &cranelift_codegen::ir::Function| {
        JitError::Codegen(format!("{e}\n{}", f.display()))
    };
    if module.isa().flags().opt_level() == OptLevel::None {
        return module
            .define_function(id, ctx)
            .map_err(|e| fail(&e, &ctx.func));
    }
    ctx.optimize(module.isa(), &mut ControlPlane::default())
        .map_err(|e| fail(&e, &ctx.func))?;
    crate::ssa::remat_constants(&mut ctx.func);
    let isa = crate::lowering_isa(module.isa())?;
    if let Err(e) = ctx.compile(&**isa, &mut ControlPlane::default()) {
        return Err(JitError::Codegen(format!(
            "{}\n{}",
            e.inner,
            e.func.display()
        )));
    }
    let code = ctx.compiled_code().expect("just compiled");
    let relocs: Vec<ModuleReloc> = code
        .buffer
        .relocs()
        .iter()
        .map(|r| ModuleReloc::from_mach_reloc(r, &ctx.func, id))
        .collect();
    module
        .define_function_bytes(
            id,
            u64::from(code.buffer.alignment),
            code.code_buffer(),
            &relocs,
        )
        .map_err(|e| fail(&e, &ctx.func))
}

/// Values every part of the slot loop needs.
#[derive(Default)]
struct Env {
    ctx: Option<Value>,
    slot: Option<Value>,
    heap: Option<Value>,
    w: Option<Variable>,
    hi: Option<Variable>,
    done: Option<Variable>,
    next_item: Option<Block>,
    /// In a kernel that may allocate, on a slot with a TLAB of its own:
    /// the TLAB's state, kept here rather than in memory while the slot
    /// runs (the memory word is current whenever Rust code may read it:
    /// before the shared protocol or the slow path, and when the slot
    /// returns; see [`Lower::tlab_write_back`]). Unused (never written
    /// back) on other slots.
    ///
    /// Here the state is `(end - top) << 32 | top` (its *register form*),
    /// not the memory word's `end << 32 | top`: a bump of `n` words is then
    /// one add of the constant `n - (n << 32)`, which leaves the high half
    /// negative exactly when the object does not fit, and the old `top` is
    /// the low half — no unpacking, no compare. (`end - top` is below
    /// 2^31: `top` can pass `end` only by the overflowing adds of a failed
    /// refill, by a few objects; the low half never carries, as `top` is a
    /// word offset below 2^31.)
    tlab_state: Option<Variable>,
    /// Injected safepoints: the poll counter or random state.
    polls: Option<Variable>,
    /// Where a deopt exit goes once its record is written (not safepoints).
    after_deopt: Option<Block>,
    /// In a kernel that may allocate: the slot's TLAB state word when the
    /// running workitem started (its objects lie in `[top, end)` of it),
    /// or, once the workitem cannot be reset, [`Lower::nursery_off`].
    nursery: Option<Variable>,
    captures: Vec<Value>,
}

/// Calls nest at most this deep in compiled code (deeper: the kernel runs on
/// the interpreter).
pub const MAX_INLINE_DEPTH: usize = 8;
/// At most this many instructions are inlined into one kernel.
pub const MAX_INLINED_INSTS: usize = 4096;

/// A function being lowered: the kernel, or a function inlined into it.
struct Frame<'a> {
    func: FuncId,
    analysis: &'a FuncAnalysis,
    /// One variable per local.
    locals: Vec<Variable>,
    /// One variable per operand-stack depth and kind.
    stack: HashMap<(usize, Kind), Variable>,
    depth: usize,
    /// The block of each reachable leader.
    blocks: HashMap<Bci, Block>,
    /// Back-edge poll blocks waiting to be filled.
    pending_polls: Vec<(Block, Bci)>,
    /// While lowering a copy of an unrolled loop other than the last:
    /// its header, whose back-edges go to the next copy without a poll.
    poll_free_header: Option<Bci>,
    /// Where `ret` goes in an inlined function: the caller's continuation
    /// (with a parameter for the result). `None` for the kernel.
    ret_to: Option<Block>,
    /// Which lowering of its function this frame is: 0 for the kernel, a
    /// new number for each inlined copy. A deopt exit reads the variables
    /// of the frames it was emitted in, so exits are shared only within one
    /// copy ([`Lower::branch_to_exit`]).
    instance: u32,
}

impl<'a> Frame<'a> {
    fn new(func: FuncId, analysis: &'a FuncAnalysis) -> Frame<'a> {
        Frame {
            func,
            analysis,
            locals: Vec::new(),
            stack: HashMap::new(),
            depth: 0,
            blocks: HashMap::new(),
            pending_polls: Vec::new(),
            poll_free_header: None,
            ret_to: None,
            instance: 0,
        }
    }
}

/// A caller whose call is being inlined, stopped at `call_bci`.
struct Outer<'a> {
    frame: Frame<'a>,
    call_bci: Bci,
}

struct Lower<'a, 'f> {
    b: FunctionBuilder<'f>,
    v: &'a Verified,
    prog: &'a Program,
    meta: DeoptMetadata,
    ptr: ClType,
    cur: Frame<'a>,
    outer: Vec<Outer<'a>>,
    /// The inlining budget and the ids of sites in inlined code.
    inliner: Inliner,
    env: Env,
    math: HashMap<&'static str, FuncRef>,
    opts: CompileOptions,
    spec: &'a Speculations,
    /// The shared deopt exit of each site in each frame copy (see
    /// [`Lower::deopt_if`] and [`Frame::instance`]).
    exits: HashMap<(SiteId, u32), Block>,
    /// How many inlined frames have been lowered so far.
    inlined_frames: u32,
    /// While lowering the unchecked version of the body: the kernel's
    /// array accesses that cannot fail in this chunk.
    unchecked: std::collections::BTreeSet<Bci>,
    /// The kernel's loops whose accesses are checked once at entry, in a
    /// version of the loop of their own (optimized tier).
    loops: Vec<plan::PredicatedLoop>,
    /// Whether the kernel may allocate (`plan::may_allocate`).
    allocates: bool,
}

fn trusted() -> MemFlagsData {
    MemFlagsData::trusted()
}

/// A load of a value that never changes once the object exists (an array's
/// length, a field of the launch context) from an address that is always
/// readable (a reference of the heap, or null: heap word 0 is reserved and
/// committed; the context, which lives for the launch), so Cranelift may
/// hoist it out of the slot loop when the address is loop-invariant.
fn invariant() -> MemFlagsData {
    MemFlagsData::trusted().with_readonly().with_can_move()
}

impl Lower<'_, '_> {
    fn e(&self) -> (Value, Value, Value) {
        (
            self.env.ctx.expect("set"),
            self.env.slot.expect("set"),
            self.env.heap.expect("set"),
        )
    }

    fn var(&mut self, ty: ClType) -> Variable {
        self.b.declare_var(ty)
    }

    fn stack_var(&mut self, depth: usize, kind: Kind) -> Variable {
        if let Some(&v) = self.cur.stack.get(&(depth, kind)) {
            return v;
        }
        let v = self.b.declare_var(cl_type(kind));
        self.cur.stack.insert((depth, kind), v);
        v
    }

    fn push(&mut self, kind: Kind, x: Value) {
        let var = self.stack_var(self.cur.depth, kind);
        self.b.def_var(var, x);
        self.cur.depth += 1;
    }

    fn pop(&mut self, kind: Kind) -> Value {
        self.cur.depth -= 1;
        let var = self.stack_var(self.cur.depth, kind);
        self.b.use_var(var)
    }

    /// Kind of the stack slot `from_top` below the top at `bci`'s entry.
    fn kind_at(&self, bci: Bci, from_top: usize) -> Kind {
        let fr = self.v.types(self.cur.func).frames[bci as usize]
            .as_ref()
            .expect("reachable");
        fr.stack[fr.stack.len() - 1 - from_top].kind()
    }

    fn build(&mut self) -> Result<(), JitError> {
        let f = self.v.func(self.cur.func);
        let entry = self.b.create_block();
        self.b.append_block_params_for_function_params(entry);
        self.b.switch_to_block(entry);
        let ctx = self.b.block_params(entry)[0];
        let slot = self.b.block_params(entry)[1];
        let heap = self
            .b
            .ins()
            .load(self.ptr, trusted(), ctx, offsets::HEAP_BASE);
        let caps = self
            .b
            .ins()
            .load(self.ptr, trusted(), ctx, offsets::CAPTURES);
        self.env.ctx = Some(ctx);
        self.env.slot = Some(slot);
        self.env.heap = Some(heap);
        if self.allocates {
            let nv = self.var(types::I64);
            let off = self.nursery_off();
            self.b.def_var(nv, off);
            self.env.nursery = Some(nv);
            let zero = self.b.ins().iconst(types::I64, 0);
            // The TLAB state, from memory when the slot owns its TLAB.
            let sv = self.var(types::I64);
            self.env.tlab_state = Some(sv);
            self.b.def_var(sv, zero);
            self.tlab_reload();
        }
        for (i, p) in f.params().iter().enumerate().skip(1) {
            let raw = self
                .b
                .ins()
                .load(types::I64, trusted(), caps, ((i - 1) * 8) as i32);
            let val = self.unpack_raw(p.ty.kind(), raw);
            self.env.captures.push(val);
        }
        let w = self.var(types::I64);
        let hi = self.var(types::I64);
        let done = self.var(types::I64);
        self.env.w = Some(w);
        self.env.hi = Some(hi);
        self.env.done = Some(done);
        let zero64 = self.b.ins().iconst(types::I64, 0);
        self.b.def_var(w, zero64);
        self.b.def_var(hi, zero64);
        self.b.def_var(done, zero64);
        if let Some(si) = self.opts.safepoints {
            // The stream goes on from where the slot's last entry left it
            // (every injected deopt is an exit, so restarting it at each
            // entry would replay the same few decisions).
            let polls = self.var(types::I64);
            let at = self.slot_words();
            let saved = self
                .b
                .ins()
                .load(types::I64, trusted(), at, offsets::SLOT_INJECT_STATE);
            let init = match si.seed {
                // A non-zero xorshift state per slot.
                Some(seed) => {
                    let s0 = self.b.ins().iconst(
                        types::I64,
                        (seed | 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) as i64,
                    );
                    let sl = self.b.ins().imul_imm_s(slot, 0x2545_F491_4F6C_DD1D);
                    let x = self.b.ins().bxor(s0, sl);
                    self.b.ins().bor_imm_u(x, 1)
                }
                None => zero64,
            };
            let fresh = self.b.ins().icmp_imm_s(IntCC::Equal, saved, 0);
            let state = self.b.ins().select(fresh, init, saved);
            self.b.def_var(polls, state);
            self.env.polls = Some(polls);
        }
        for l in &f.locals {
            let var = self.b.declare_var(cl_type(l.ty.kind()));
            self.cur.locals.push(var);
        }

        let claim = self.b.create_block();
        let item = self.b.create_block();
        let next_item = self.b.create_block();
        let exit_done = self.b.create_block();
        let stopped = self.b.create_block();
        let after_deopt = self.b.create_block();
        for b in [exit_done, stopped, after_deopt] {
            self.b.set_cold_block(b);
        }
        self.env.after_deopt = Some(after_deopt);
        // A slot that stopped (records full, safepoint) is entered again
        // with its unstarted rest in never_ran[slot]; start there.
        let at = self.slot_words();
        let rest_lo = self
            .b
            .ins()
            .load(types::I64, trusted(), at, offsets::SLOT_NEVER_RAN_LO);
        let rest_hi = self
            .b
            .ins()
            .load(types::I64, trusted(), at, offsets::SLOT_NEVER_RAN_HI);
        self.b.def_var(w, rest_lo);
        self.b.def_var(hi, rest_hi);
        let has_rest = self.b.ins().icmp(IntCC::SignedLessThan, rest_lo, rest_hi);
        // With accesses indexed by the workitem number, a chunk whose range
        // is inside every such array runs a version of the body without
        // their checks (`plan::workitem_indexed`); the quick tier has one
        // version only.
        let unchecked = if self.opts.quick {
            Default::default()
        } else {
            plan::workitem_indexed(self.v, self.cur.func, self.cur.analysis)
        };
        if !self.opts.quick {
            self.loops = plan::loop_predicates(self.v, self.cur.func, self.cur.analysis);
        }
        let pick = (!unchecked.is_empty()).then(|| self.b.create_block());
        self.b
            .ins()
            .brif(has_rest, pick.unwrap_or(item), &[], claim, &[]);

        // claim: lo = cursor.fetch_add(chunk)
        self.b.switch_to_block(claim);
        let cursor = self.b.ins().load(self.ptr, trusted(), ctx, offsets::CURSOR);
        let chunk = self
            .b
            .ins()
            .load(types::I64, trusted(), ctx, offsets::CHUNK);
        let end = self.b.ins().load(types::I64, trusted(), ctx, offsets::END);
        let lo = self
            .b
            .ins()
            .atomic_rmw(types::I64, trusted(), AtomicRmwOp::Add, cursor, chunk);
        let exhausted = self.b.ins().icmp(IntCC::SignedGreaterThanOrEqual, lo, end);
        let got = self.b.create_block();
        self.b.ins().brif(exhausted, exit_done, &[], got, &[]);
        self.b.switch_to_block(got);
        let lo_chunk = self.b.ins().iadd(lo, chunk);
        let h = self.b.ins().smin(lo_chunk, end);
        self.b.def_var(hi, h);
        self.b.def_var(w, lo);
        self.b.ins().jump(pick.unwrap_or(item), &[]);

        // The checked version.
        self.item_loop(item, claim, stopped, next_item, 1)?;
        if let Some(pick) = pick {
            // pick: the unchecked version when 0 <= w and hi <= the length
            // of every array those accesses index (null's is 0).
            self.b.switch_to_block(pick);
            let wv = self.b.use_var(w);
            let hv = self.b.use_var(hi);
            let mut ok = self
                .b
                .ins()
                .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, wv, 0);
            let arrays: std::collections::BTreeSet<u32> = unchecked.values().copied().collect();
            for p in arrays {
                let r = self.env.captures[p as usize - 1];
                let base = self.obj_addr(r);
                let len = self.array_len(base);
                let len = self.b.ins().uextend(types::I64, len);
                let fits = self.b.ins().icmp(IntCC::SignedLessThanOrEqual, hv, len);
                ok = self.b.ins().band(ok, fits);
            }
            let fast_item = self.b.create_block();
            self.b.ins().brif(ok, fast_item, &[], item, &[]);
            let fast_next = self.b.create_block();
            self.unchecked = unchecked.into_keys().collect();
            self.inliner.next_version();
            let unroll = plan::unroll_factor(self.v, self.cur.func);
            self.item_loop(fast_item, claim, stopped, fast_next, unroll)?;
            self.unchecked.clear();
        }

        // after_deopt: the record is written; leave the slot function, to
        // be entered again at the next workitem (`EXIT_RECORDED`), or after
        // the host has replayed the records when they are full. Leaving,
        // rather than jumping back to `item`, keeps the deopt exits out of
        // the loop: Cranelift hoists loop-invariant values out of loops, and
        // those only the exits use would otherwise hold registers (or stack
        // slots) across every workitem.
        self.b.switch_to_block(after_deopt);
        let n1 = self.count_record();
        let per = self
            .b
            .ins()
            .load(types::I64, trusted(), ctx, offsets::RECORDS_PER_SLOT);
        let full = self.b.ins().icmp(IntCC::SignedGreaterThanOrEqual, n1, per);
        let wv = self.b.use_var(w);
        let w1 = self.b.ins().iadd_imm_s(wv, 1);
        let hv = self.b.use_var(hi);
        let full_blk = self.b.create_block();
        let more_blk = self.b.create_block();
        self.b.ins().brif(full, full_blk, &[], more_blk, &[]);
        self.b.switch_to_block(more_blk);
        self.exit(w1, hv, EXIT_RECORDED);
        self.b.switch_to_block(full_blk);
        self.exit(w1, hv, EXIT_DEOPT);

        // exits
        self.b.switch_to_block(exit_done);
        let z = self.b.ins().iconst(types::I64, 0);
        self.exit(z, z, EXIT_DONE);
        self.b.switch_to_block(stopped);
        let wv = self.b.use_var(w);
        let hv = self.b.use_var(hi);
        self.exit(wv, hv, EXIT_STOPPED);
        Ok(())
    }

    /// One version of the per-workitem loop: `item` stops between workitems
    /// when the control word is set, and otherwise runs the body, whose
    /// `ret` goes to `next_item`, which counts and advances.
    ///
    /// With `unroll > 1`, while at least `unroll` workitems of the chunk are
    /// left, one check of the control word precedes `unroll` copies of the
    /// body, each ending where the next begins ([`plan::unroll_factor`]);
    /// the last few workitems of a chunk go one by one.
    fn item_loop(
        &mut self,
        item: Block,
        claim: Block,
        stopped: Block,
        next_item: Block,
        unroll: u32,
    ) -> Result<(), JitError> {
        let (w, hi) = (self.env.w.expect("set"), self.env.hi.expect("set"));
        self.b.switch_to_block(item);
        let wv = self.b.use_var(w);
        let hv = self.b.use_var(hi);
        let chunk_done = self.b.ins().icmp(IntCC::SignedGreaterThanOrEqual, wv, hv);
        let check = self.b.create_block();
        let vector = unroll == plan::UNROLL
            && self.opts.inject.is_none()
            && plan::vectorizable(self.v, self.cur.func, &self.unchecked);
        // A vector group is VECTORS_PER_GROUP SIMD bodies of UNROLL lanes.
        let unroll = if vector {
            unroll * plan::VECTORS_PER_GROUP
        } else {
            unroll
        };
        if unroll > 1 {
            let group = self.b.create_block();
            let one = self.b.create_block();
            self.b.ins().brif(chunk_done, claim, &[], one, &[]);
            self.b.switch_to_block(one);
            let left = self.b.ins().isub(hv, wv);
            let full =
                self.b
                    .ins()
                    .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, left, i64::from(unroll));
            self.b.ins().brif(full, group, &[], check, &[]);
            self.b.switch_to_block(group);
            let cw = self.control_word();
            let mut start = self.b.create_block();
            self.b.ins().brif(cw, stopped, &[], start, &[]);
            if vector {
                self.b.switch_to_block(start);
                for _ in 0..plan::VECTORS_PER_GROUP {
                    self.vector_group()?;
                }
                self.b.ins().jump(item, &[]);
            }
            for j in (0..unroll).filter(|_| !vector) {
                let next = self.b.create_block();
                let then = if j + 1 == unroll {
                    item
                } else {
                    self.b.create_block()
                };
                self.one_workitem(start, next, then)?;
                start = then;
            }
        } else {
            self.b.ins().brif(chunk_done, claim, &[], check, &[]);
        }
        self.b.switch_to_block(check);
        let cw = self.control_word();
        let start = self.b.create_block();
        self.b.ins().brif(cw, stopped, &[], start, &[]);
        self.one_workitem(start, next_item, item)
    }

    /// The body for workitems `w .. w + UNROLL` as one SIMD body, a lane
    /// per workitem ([`plan::vectorizable`] said it can be); then counts
    /// them and advances `w`. No deopt site is left in such a body.
    fn vector_group(&mut self) -> Result<(), JitError> {
        #[derive(Copy, Clone)]
        enum VV {
            U(Value),
            V(Value),
            Idx,
            Idx32,
            Arr(Value),
        }
        let f = self.v.func(self.cur.func);
        let (w, done) = (self.env.w.expect("set"), self.env.done.expect("set"));
        let lanes = plan::UNROLL as i64;
        let vt = |k: Kind| {
            if k == Kind::F32 {
                types::F32X4
            } else {
                types::I32X4
            }
        };
        let mut env: Vec<VV> = Vec::with_capacity(f.locals.len());
        for (l, loc) in f.locals.iter().enumerate() {
            env.push(if l == 0 {
                VV::Idx
            } else if l < f.param_count as usize {
                let c = self.env.captures[l - 1];
                if loc.ty.kind() == Kind::Ref {
                    VV::Arr(c)
                } else {
                    VV::U(c)
                }
            } else {
                VV::U(self.zero(loc.ty.kind()))
            });
        }
        let mut stack: Vec<(VV, Kind)> = Vec::new();
        let wv = self.b.use_var(w);
        let unexpected = |bci: usize| {
            JitError::Codegen(format!("vector body: unexpected operands at bci {bci}"))
        };
        let flags = MemFlagsData::new().with_notrap();
        for (bci, &inst) in f.body.iter().enumerate() {
            match inst {
                Inst::Load { local } => {
                    let l = local.index();
                    stack.push((env[l], f.locals[l].ty.kind()));
                }
                Inst::Store { local } => {
                    let (x, _) = stack.pop().ok_or_else(|| unexpected(bci))?;
                    env[local.index()] = x;
                }
                Inst::I32Const { value } => {
                    let c = self.b.ins().iconst(types::I32, i64::from(value));
                    stack.push((VV::U(c), Kind::I32));
                }
                Inst::F32Const { value } => {
                    let c = self.b.ins().f32const(Ieee32::with_bits(value.0));
                    stack.push((VV::U(c), Kind::F32));
                }
                Inst::I64ToI32 => {
                    stack.pop();
                    stack.push((VV::Idx32, Kind::I32));
                }
                Inst::F32Add
                | Inst::F32Sub
                | Inst::F32Mul
                | Inst::F32Div
                | Inst::I32Add
                | Inst::I32Sub
                | Inst::I32And
                | Inst::I32Or
                | Inst::I32Xor => {
                    let ((b, k), (a, _)) = (
                        stack.pop().ok_or_else(|| unexpected(bci))?,
                        stack.pop().ok_or_else(|| unexpected(bci))?,
                    );
                    let both_u = matches!((a, b), (VV::U(_), VV::U(_)));
                    let val = |x: VV, this: &mut Self| match x {
                        VV::U(s) if !both_u => Ok(this.b.ins().splat(vt(k), s)),
                        VV::U(s) | VV::V(s) => Ok(s),
                        _ => Err(unexpected(bci)),
                    };
                    let (x, y) = (val(a, self)?, val(b, self)?);
                    let ins = self.b.ins();
                    let r = match inst {
                        Inst::F32Add => ins.fadd(x, y),
                        Inst::F32Sub => ins.fsub(x, y),
                        Inst::F32Mul => ins.fmul(x, y),
                        Inst::F32Div => ins.fdiv(x, y),
                        Inst::I32Add => ins.iadd(x, y),
                        Inst::I32Sub => ins.isub(x, y),
                        Inst::I32And => ins.band(x, y),
                        Inst::I32Or => ins.bor(x, y),
                        _ => ins.bxor(x, y),
                    };
                    stack.push((if both_u { VV::U(r) } else { VV::V(r) }, k));
                }
                Inst::I32ALoad | Inst::F32ALoad => {
                    let k = if inst == Inst::I32ALoad {
                        Kind::I32
                    } else {
                        Kind::F32
                    };
                    let (_, (arr, _)) = (stack.pop(), stack.pop().ok_or_else(|| unexpected(bci))?);
                    let VV::Arr(r) = arr else {
                        return Err(unexpected(bci));
                    };
                    let idx = self.b.ins().ireduce(types::I32, wv);
                    let a = self.elem_addr(r, idx, 4, bci as Bci);
                    let x = self.b.ins().load(vt(k), flags, a, 0);
                    stack.push((VV::V(x), k));
                }
                Inst::I32AStore | Inst::F32AStore => {
                    let k = if inst == Inst::I32AStore {
                        Kind::I32
                    } else {
                        Kind::F32
                    };
                    let (x, _) = stack.pop().ok_or_else(|| unexpected(bci))?;
                    stack.pop();
                    let (arr, _) = stack.pop().ok_or_else(|| unexpected(bci))?;
                    let VV::Arr(r) = arr else {
                        return Err(unexpected(bci));
                    };
                    let x = match x {
                        VV::U(s) => self.b.ins().splat(vt(k), s),
                        VV::V(v) => v,
                        _ => return Err(unexpected(bci)),
                    };
                    let idx = self.b.ins().ireduce(types::I32, wv);
                    let a = self.elem_addr(r, idx, 4, bci as Bci);
                    self.b.ins().store(flags, x, a, 0);
                }
                Inst::Dup => {
                    let x = *stack.last().ok_or_else(|| unexpected(bci))?;
                    stack.push(x);
                }
                Inst::Pop => {
                    stack.pop();
                }
                Inst::Swap => {
                    let n = stack.len();
                    stack.swap(n - 1, n - 2);
                }
                Inst::Ret => {}
                _ => return Err(unexpected(bci)),
            }
        }
        let d = self.b.use_var(done);
        let d1 = self.b.ins().iadd_imm_s(d, lanes);
        self.b.def_var(done, d1);
        let w1 = self.b.ins().iadd_imm_s(wv, lanes);
        self.b.def_var(w, w1);
        Ok(())
    }

    /// One copy of the body for workitem `w`, starting at `start`: its
    /// entry (parameters, captures, zeroed locals), the body, whose `ret`
    /// goes to `next`, and `next` itself, which counts the workitem,
    /// advances `w` and goes on to `then`.
    fn one_workitem(&mut self, start: Block, next: Block, then: Block) -> Result<(), JitError> {
        let f = self.v.func(self.cur.func);
        let (w, done) = (self.env.w.expect("set"), self.env.done.expect("set"));
        self.env.next_item = Some(next);
        self.b.switch_to_block(start);
        let wv = self.b.use_var(w);
        let lv0 = self.cur.locals[0];
        self.b.def_var(lv0, wv);
        for i in 1..f.locals.len() {
            let var = self.cur.locals[i];
            let val = if i < f.param_count as usize {
                self.env.captures[i - 1]
            } else {
                self.zero(f.locals[i].ty.kind())
            };
            self.b.def_var(var, val);
        }
        self.nursery_snapshot();
        self.cur.blocks.clear();
        self.make_blocks();
        let first = self.cur.blocks[&0];
        self.b.ins().jump(first, &[]);

        self.body()?;

        self.b.switch_to_block(next);
        self.nursery_reset();
        let d = self.b.use_var(done);
        let d1 = self.b.ins().iadd_imm_s(d, 1);
        self.b.def_var(done, d1);
        let wv = self.b.use_var(w);
        let w1 = self.b.ins().iadd_imm_s(wv, 1);
        self.b.def_var(w, w1);
        self.b.ins().jump(then, &[]);
        Ok(())
    }

    /// The address of this slot's [`crate::ctx::SlotWords`].
    fn slot_words(&mut self) -> Value {
        let (ctx, slot, _) = self.e();
        let words = self.b.ins().load(self.ptr, trusted(), ctx, offsets::SLOTS);
        let off = self.b.ins().imul_imm_s(slot, offsets::SLOT_BYTES);
        self.b.ins().iadd(words, off)
    }

    /// This slot's record count: the records it has written and the host
    /// has not replayed yet. Only deopt exits change it, and they leave the
    /// slot function, so it is kept in memory rather than in a variable
    /// that would hold a register across the loop.
    fn records_count(&mut self) -> Value {
        let at = self.slot_words();
        self.b
            .ins()
            .load(types::I64, trusted(), at, offsets::SLOT_RECORDS)
    }

    /// The write barrier of a reference store of `x` into the object at
    /// `r`: note in the slot's `escaped` word when `x` is an object of this
    /// launch and `r` an older one (`LaunchCtx::young`), which keeps the
    /// launch's objects when it ends. Null is never young (word 0).
    ///
    /// In a kernel that may allocate, the test is the nursery's: `x` lies
    /// in the running workitem's part of its TLAB and `r` does not (which
    /// also ends the workitem's chance of a reset); after a refill or such
    /// an escape it is the launch's test again ([`Lower::nursery_off`]).
    fn write_barrier(&mut self, r: Value, x: Value) {
        let escapes = if let Some(nv) = self.env.nursery {
            // In register form, `[top, end)` is `top` and its length.
            let st = self.b.use_var(nv);
            let lo = self.b.ins().ireduce(types::I32, st);
            let span = self.b.ins().ushr_imm_u(st, 32);
            let span = self.b.ins().ireduce(types::I32, span);
            let dx = self.b.ins().isub(x, lo);
            let in_x = self.b.ins().icmp(IntCC::UnsignedLessThan, dx, span);
            let dr = self.b.ins().isub(r, lo);
            let in_r = self.b.ins().icmp(IntCC::UnsignedLessThan, dr, span);
            self.b.ins().band_not(in_x, in_r)
        } else {
            let (ctx, _, _) = self.e();
            let young = self
                .b
                .ins()
                .load(types::I64, trusted(), ctx, offsets::YOUNG);
            let young = self.b.ins().ireduce(types::I32, young);
            let new_x = self
                .b
                .ins()
                .icmp(IntCC::UnsignedGreaterThanOrEqual, x, young);
            let old_r = self.b.ins().icmp(IntCC::UnsignedLessThan, r, young);
            self.b.ins().band(new_x, old_r)
        };
        let note = self.b.create_block();
        let cont = self.b.create_block();
        self.b.set_cold_block(note);
        self.b.ins().brif(escapes, note, &[], cont, &[]);
        self.b.switch_to_block(note);
        let at = self.slot_words();
        let one = self.b.ins().iconst(types::I64, 1);
        self.b
            .ins()
            .store(trusted(), one, at, offsets::SLOT_ESCAPED);
        if let Some(nv) = self.env.nursery {
            let off = self.nursery_off();
            self.b.def_var(nv, off);
        }
        self.b.ins().jump(cont, &[]);
        self.b.switch_to_block(cont);
    }

    /// The nursery state of a workitem that will not be reset: a TLAB
    /// state (in register form, [`Env::tlab_state`]) whose `[top, end)` is
    /// `[young, u32::MAX)`, so that the write barrier tests what the
    /// launch's does, and whose `end` no TLAB has.
    fn nursery_off(&mut self) -> Value {
        let (ctx, _, _) = self.e();
        let young = self
            .b
            .ins()
            .load(types::I64, invariant(), ctx, offsets::YOUNG);
        // u32::MAX - young is young's low 32 bits flipped.
        let span = self.b.ins().bxor_imm_u(young, 0xFFFF_FFFF);
        let span = self.b.ins().ishl_imm_u(span, 32);
        self.b.ins().bor(young, span)
    }

    /// The `top` of a TLAB state in register form (its low half), as `i64`.
    fn state_top(&mut self, st: Value) -> Value {
        let top = self.b.ins().ireduce(types::I32, st);
        self.b.ins().uextend(types::I64, top)
    }

    /// The low 32 bits of `top + (end - top)` of a TLAB state in register
    /// form: `end`.
    fn state_end(&mut self, st: Value) -> Value {
        let top = self.b.ins().ireduce(types::I32, st);
        let span = self.b.ins().ushr_imm_u(st, 32);
        let span = self.b.ins().ireduce(types::I32, span);
        self.b.ins().iadd(top, span)
    }

    /// At a workitem's start (kernels that may allocate): note the slot's
    /// TLAB state when the launch lets workitems hand their objects back,
    /// else [`Lower::nursery_off`].
    fn nursery_snapshot(&mut self) {
        let Some(nv) = self.env.nursery else {
            return;
        };
        let (ctx, _, _) = self.e();
        let on = self
            .b
            .ins()
            .load(types::I64, invariant(), ctx, offsets::NURSERY);
        let snap = self.b.create_block();
        let cont = self.b.create_block();
        self.b.append_block_param(cont, types::I64);
        let off = self.nursery_off();
        self.b.ins().brif(on, snap, &[], cont, &[off.into()]);
        self.b.switch_to_block(snap);
        // The nursery is on only when every slot owns its TLAB.
        let st = self.b.use_var(self.env.tlab_state.expect("set"));
        self.b.ins().jump(cont, &[st.into()]);
        self.b.switch_to_block(cont);
        let st = self.b.block_params(cont)[0];
        self.b.def_var(nv, st);
    }

    /// At a workitem's normal end (kernels that may allocate): when its
    /// objects all lie in its slot's TLAB above the snapshot and none was
    /// stored where it could outlive the workitem, zero them and move the
    /// TLAB's `top` back to the snapshot, counting the words in the slot's
    /// `recycled`.
    /// The next workitem allocates in the same, cache-warm words.
    fn nursery_reset(&mut self) {
        let Some(nv) = self.env.nursery else {
            return;
        };
        let st0 = self.b.use_var(nv);
        let end0 = self.state_end(st0);
        let off = self.b.ins().icmp_imm_s(IntCC::Equal, end0, -1);
        let check = self.b.create_block();
        let reset = self.b.create_block();
        let after = self.b.create_block();
        self.b.ins().brif(off, after, &[], check, &[]);
        self.b.switch_to_block(check);
        let sv = self.env.tlab_state.expect("set");
        let st = self.b.use_var(sv);
        let end = self.state_end(st);
        let same = self.b.ins().icmp(IntCC::Equal, end, end0);
        let top = self.state_top(st);
        let lo = self.state_top(st0);
        let grew = self.b.ins().icmp(IntCC::UnsignedGreaterThan, top, lo);
        let go = self.b.ins().band(same, grew);
        self.b.ins().brif(go, reset, &[], after, &[]);
        self.b.switch_to_block(reset);
        self.zero_words(lo, top);
        let at = self.slot_words();
        let n = self.b.ins().isub(top, lo);
        let was = self
            .b
            .ins()
            .load(types::I64, trusted(), at, offsets::SLOT_RECYCLED);
        let now = self.b.ins().iadd(was, n);
        self.b
            .ins()
            .store(trusted(), now, at, offsets::SLOT_RECYCLED);
        self.b.def_var(sv, st0);
        self.b.ins().jump(after, &[]);
        self.b.switch_to_block(after);
    }

    /// Zero the heap words `[lo, top)` (`lo < top`, both `i64`), inline:
    /// 64 bytes a round while they last, then a word at a time. A call
    /// (even to `memset`) at the end of every workitem would clobber the
    /// caller-saved registers, and every value live across the slot loop
    /// — the context, the slot, the chunk's bounds — would have to sit in
    /// the five callee-saved ones or on the stack.
    fn zero_words(&mut self, lo: Value, top: Value) {
        let (_, _, heap) = self.e();
        let p0 = self.b.ins().ishl_imm_u(lo, 3);
        let p0 = self.b.ins().iadd(heap, p0);
        let e = self.b.ins().ishl_imm_u(top, 3);
        let e = self.b.ins().iadd(heap, e);
        let z64 = self.b.ins().iconst(types::I64, 0);
        let zv = self.b.ins().splat(types::I64X2, z64);
        let wide = self.b.create_block();
        let wide_body = self.b.create_block();
        let narrow = self.b.create_block();
        let narrow_body = self.b.create_block();
        let done = self.b.create_block();
        for blk in [wide, wide_body, narrow, narrow_body] {
            self.b.append_block_param(blk, self.ptr);
        }
        self.b.ins().jump(wide, &[p0.into()]);
        self.b.switch_to_block(wide);
        let p = self.b.block_params(wide)[0];
        let p64 = self.b.ins().iadd_imm_s(p, 64);
        let room = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, p64, e);
        self.b
            .ins()
            .brif(room, wide_body, &[p.into()], narrow, &[p.into()]);
        self.b.switch_to_block(wide_body);
        let p = self.b.block_params(wide_body)[0];
        for k in 0..4 {
            self.b.ins().store(trusted(), zv, p, 16 * k);
        }
        let p64 = self.b.ins().iadd_imm_s(p, 64);
        self.b.ins().jump(wide, &[p64.into()]);
        self.b.switch_to_block(narrow);
        let p = self.b.block_params(narrow)[0];
        let more = self.b.ins().icmp(IntCC::UnsignedLessThan, p, e);
        self.b.ins().brif(more, narrow_body, &[p.into()], done, &[]);
        self.b.switch_to_block(narrow_body);
        let p = self.b.block_params(narrow_body)[0];
        self.b.ins().store(trusted(), z64, p, 0);
        let p8 = self.b.ins().iadd_imm_s(p, 8);
        self.b.ins().jump(narrow, &[p8.into()]);
        self.b.switch_to_block(done);
    }

    /// This slot's shared TLAB (null: the policy has none). Loaded where
    /// it is used — on the allocation paths that leave the slot's own bump
    /// — rather than kept in a register through every loop that allocates
    /// (so are [`Lower::own_limit`] and the large-object limit).
    fn tlab(&mut self) -> Value {
        let (ctx, slot, _) = self.e();
        let tlabs = self.b.ins().load(self.ptr, trusted(), ctx, offsets::TLABS);
        let toff = self.b.ins().imul_imm_s(slot, i64::from(self.ptr.bytes()));
        let tat = self.b.ins().iadd(tlabs, toff);
        self.b.ins().load(self.ptr, trusted(), tat, 0)
    }

    /// The largest object this slot bumps in a TLAB of its own
    /// (`LaunchCtx::own_limit`; 0 when it has none).
    fn own_limit(&mut self) -> Value {
        let (ctx, _, _) = self.e();
        self.b
            .ins()
            .load(types::I64, trusted(), ctx, offsets::OWN_LIMIT)
    }

    /// The address of TLAB `tl`'s state word (`end << 32 | top`).
    fn tlab_state_addr(&mut self, tl: Value) -> Value {
        self.b
            .ins()
            .iadd_imm_s(tl, i64::from(offload_tlab::SharedTlab::STATE_OFFSET))
    }

    /// Store the TLAB state kept in [`Env::tlab_state`] to memory, on a
    /// slot that owns its TLAB: before Rust code may read or change it.
    fn tlab_write_back(&mut self) {
        self.when_own(|lw, sv| {
            let st = lw.b.use_var(sv);
            let tl = lw.tlab();
            lw.store_tlab_state(tl, st);
        });
    }

    /// Store `st`, a TLAB state in register form ([`Env::tlab_state`]), to
    /// TLAB `tl`'s memory word: `end << 32 | top` is `st + (st << 32)`.
    fn store_tlab_state(&mut self, tl: Value, st: Value) {
        let sa = self.tlab_state_addr(tl);
        let hi = self.b.ins().ishl_imm_u(st, 32);
        let word = self.b.ins().iadd(st, hi);
        self.b.ins().store(trusted(), word, sa, 0);
    }

    /// Take the TLAB state from memory again, on a slot that owns its
    /// TLAB, after Rust code or the shared protocol may have changed it.
    /// The register form of the word `end << 32 | top` is the word minus
    /// `top << 32`, which is the word shifted left by 32.
    fn tlab_reload(&mut self) {
        self.when_own(|lw, sv| {
            let tl = lw.tlab();
            let sa = lw.tlab_state_addr(tl);
            let word = lw.b.ins().load(types::I64, trusted(), sa, 0);
            let lo = lw.b.ins().ishl_imm_u(word, 32);
            let st = lw.b.ins().isub(word, lo);
            lw.b.def_var(sv, st);
        });
    }

    /// Emit `body` (given [`Env::tlab_state`]) in a block run only on a
    /// slot that owns its TLAB; nothing in kernels that do not allocate.
    fn when_own(&mut self, body: impl FnOnce(&mut Self, Variable)) {
        let Some(sv) = self.env.tlab_state else {
            return;
        };
        let own = self.own_limit();
        let then = self.b.create_block();
        let cont = self.b.create_block();
        self.b.ins().brif(own, then, &[], cont, &[]);
        self.b.switch_to_block(then);
        body(self, sv);
        self.b.ins().jump(cont, &[]);
        self.b.switch_to_block(cont);
    }

    /// The length word of the array whose header is at `base` (`i32`, at
    /// byte 4 of the header; null's header, heap word 0, reads as 0). It
    /// never changes, so the load may be hoisted out of loops.
    fn array_len(&mut self, base: Value) -> Value {
        self.b.ins().load(types::I32, invariant(), base, 4)
    }

    /// Count the record just written; returns the count.
    fn count_record(&mut self) -> Value {
        let at = self.slot_words();
        let n = self
            .b
            .ins()
            .load(types::I64, trusted(), at, offsets::SLOT_RECORDS);
        let n1 = self.b.ins().iadd_imm_s(n, 1);
        self.b.ins().store(trusted(), n1, at, offsets::SLOT_RECORDS);
        n1
    }

    /// The control word, read through the context each time: the pointer
    /// is not kept in a register across the loop (the load hits L1).
    fn control_word(&mut self) -> Value {
        let (ctx, _, _) = self.e();
        let control = self
            .b
            .ins()
            .load(self.ptr, trusted(), ctx, offsets::CONTROL);
        self.b.ins().atomic_load(types::I32, trusted(), control)
    }

    fn zero(&mut self, k: Kind) -> Value {
        match k {
            Kind::I32 | Kind::Ref => self.b.ins().iconst(types::I32, 0),
            Kind::I64 => self.b.ins().iconst(types::I64, 0),
            Kind::F32 => self.b.ins().f32const(Ieee32::with_bits(0)),
            Kind::F64 => self.b.ins().f64const(Ieee64::with_bits(0)),
        }
    }

    /// A raw 64-bit slot as a value of kind `k`.
    fn unpack_raw(&mut self, k: Kind, raw: Value) -> Value {
        match k {
            Kind::I64 => raw,
            Kind::I32 | Kind::Ref => self.b.ins().ireduce(types::I32, raw),
            Kind::F32 => {
                let lo = self.b.ins().ireduce(types::I32, raw);
                self.b.ins().bitcast(types::F32, MemFlagsData::new(), lo)
            }
            Kind::F64 => self.b.ins().bitcast(types::F64, MemFlagsData::new(), raw),
        }
    }

    /// A value of kind `k` as a raw 64-bit slot (the save-record format).
    fn pack_raw(&mut self, k: Kind, x: Value) -> Value {
        match k {
            Kind::I64 => x,
            Kind::I32 | Kind::Ref => self.b.ins().uextend(types::I64, x),
            Kind::F32 => {
                let bits = self.b.ins().bitcast(types::I32, MemFlagsData::new(), x);
                self.b.ins().uextend(types::I64, bits)
            }
            Kind::F64 => self.b.ins().bitcast(types::I64, MemFlagsData::new(), x),
        }
    }

    /// Store this slot's counters and never-ran range, and return `code`.
    fn exit(&mut self, nr_lo: Value, nr_hi: Value, code: u32) {
        self.tlab_write_back();
        let at = self.slot_words();
        self.b
            .ins()
            .store(trusted(), nr_lo, at, offsets::SLOT_NEVER_RAN_LO);
        self.b
            .ins()
            .store(trusted(), nr_hi, at, offsets::SLOT_NEVER_RAN_HI);
        let done = self.b.use_var(self.env.done.expect("set"));
        self.b
            .ins()
            .store(trusted(), done, at, offsets::SLOT_COMPLETED);
        let c = self.b.ins().iconst(types::I32, i64::from(code));
        self.b.ins().return_(&[c]);
    }

    /// Emit a deopt exit for the site at `bci` (whose frame state is the
    /// current variables) with `reason`, in the current block.
    fn deopt_here(&mut self, bci: Bci, reason: Reason) {
        let id = self.site_id(bci);
        let sw = self
            .b
            .ins()
            .iconst(types::I64, SaveLayout::site_word(id, reason) as i64);
        self.deopt_exit(id, reason, sw);
    }

    /// The body of a deopt exit from site `id` (whose frame state is the
    /// current variables), in the current block: write the record with
    /// site word `sw`, then go on (or stop, for a safepoint).
    fn deopt_exit(&mut self, id: SiteId, reason: Reason, sw: Value) {
        // Deopt exits are laid out after the hot code, so that the checks
        // guarding them fall through.
        if let Some(exit) = self.b.current_block() {
            self.b.set_cold_block(exit);
        }
        let site = self.meta.site(id).expect("created").clone();
        debug_assert!(site.reasons.contains(&reason), "{reason:?} at {id:?}");
        let (ctx, slot, _) = self.e();
        let area = self
            .b
            .ins()
            .load(self.ptr, trusted(), ctx, offsets::SAVE_AREA);
        let words = self
            .b
            .ins()
            .load(types::I64, trusted(), ctx, offsets::RECORD_WORDS);
        let per = self
            .b
            .ins()
            .load(types::I64, trusted(), ctx, offsets::RECORDS_PER_SLOT);
        let first = self.b.ins().imul(slot, per);
        let n = self.records_count();
        let index = self.b.ins().iadd(first, n);
        let rec_words = self.b.ins().imul(index, words);
        let rec_bytes = self.b.ins().imul_imm_s(rec_words, 8);
        let rec = self.b.ins().iadd(area, rec_bytes);
        let w = self.b.use_var(self.env.w.expect("set"));
        self.b
            .ins()
            .store(trusted(), w, rec, (SaveLayout::WORKITEM_WORD * 8) as i32);
        // Every frame's values, outermost first: the callers' frames as they
        // stopped at their calls (their variables still hold those values),
        // then this frame's.
        for (fi, s) in site.frame_slots() {
            let k = s.ty.kind();
            let var = if fi < self.outer.len() {
                let fr = &self.outer[fi].frame;
                match s.value {
                    FsValue::Local(l) => fr.locals[l.index()],
                    FsValue::Stack(i) => *fr
                        .stack
                        .get(&(i as usize, k))
                        .expect("a caller's stack value was pushed before its call"),
                }
            } else {
                match s.value {
                    FsValue::Local(l) => self.cur.locals[l.index()],
                    FsValue::Stack(i) => self.stack_var(i as usize, k),
                }
            };
            let val = self.b.use_var(var);
            let raw = self.pack_raw(k, val);
            self.b.ins().store(trusted(), raw, rec, (s.word * 8) as i32);
        }
        // The site word marks the record as written. Only this slot's own
        // worker reads the record, after the slot function has returned, so
        // a plain store suffices (an atomic one costs a full fence on x86).
        self.b
            .ins()
            .store(trusted(), sw, rec, (SaveLayout::SITE_WORD * 8) as i32);
        if reason == Reason::Safepoint {
            // Everything stops at a safepoint: this slot's unstarted rest
            // runs when the slot is entered again.
            self.count_record();
            let w1 = self.b.ins().iadd_imm_s(w, 1);
            let hi = self.b.use_var(self.env.hi.expect("set"));
            self.exit(w1, hi, EXIT_DEOPT);
        } else {
            let next = self.env.after_deopt.expect("set");
            self.b.ins().jump(next, &[]);
        }
    }

    /// The site of the current frame's instruction at `bci`: a kernel site,
    /// or (in inlined code) one made for this call chain on first use.
    fn site_id(&mut self, bci: Bci) -> SiteId {
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
    fn make_blocks(&mut self) {
        let types_ = self.v.types(self.cur.func);
        for blk in &self.cur.analysis.cfg.blocks {
            if types_.frames[blk.start as usize].is_some() {
                let cb = self.b.create_block();
                self.cur.blocks.insert(blk.start, cb);
            }
        }
    }

    /// Inline a call of `callee` at `bci`: pop its arguments, lower its body
    /// in a frame of its own, and leave the builder in the continuation
    /// block. Returns the result, if the callee returns one (not pushed).
    fn inline(&mut self, bci: Bci, callee: FuncId) -> Result<Option<Value>, JitError> {
        let f = self.v.func(callee);
        let chain: Vec<FuncId> = self
            .outer
            .iter()
            .map(|o| o.frame.func)
            .chain([self.cur.func])
            .collect();
        let analysis = self.inliner.enter(self.prog, &chain, callee, bci)?;
        // Arguments, last first.
        let mut args = Vec::with_capacity(f.param_count as usize);
        for p in f.params().iter().rev() {
            args.push(self.pop(p.ty.kind()));
        }
        args.reverse();
        let cont = self.b.create_block();
        if let Some(t) = f.ret {
            self.b.append_block_param(cont, cl_type(t.kind()));
        }
        let mut frame = Frame::new(callee, analysis);
        frame.ret_to = Some(cont);
        self.inlined_frames += 1;
        frame.instance = self.inlined_frames;
        let caller = std::mem::replace(&mut self.cur, frame);
        self.outer.push(Outer {
            frame: caller,
            call_bci: bci,
        });
        for (i, l) in f.locals.iter().enumerate() {
            let var = self.b.declare_var(cl_type(l.ty.kind()));
            let val = match args.get(i) {
                Some(&a) => a,
                None => self.zero(l.ty.kind()),
            };
            self.b.def_var(var, val);
            self.cur.locals.push(var);
        }
        self.make_blocks();
        let first = self.cur.blocks[&0];
        self.b.ins().jump(first, &[]);
        let lowered = self.body();
        let o = self.outer.pop().expect("pushed");
        self.cur = o.frame;
        lowered?;
        self.b.switch_to_block(cont);
        Ok(f.ret.map(|_| self.b.block_params(cont)[0]))
    }

    /// `callvirt method` at `bci`: test the receiver's class against the
    /// classes of each implementation (every subclass of the method's class
    /// that this module has) and inline the matching one; a receiver of any
    /// other class deopts and the interpreter makes the call.
    fn call_virtual(&mut self, bci: Bci, method: FuncId) -> Result<(), JitError> {
        let m = self.v.func(method);
        let plan::VirtualCall {
            targets,
            miss,
            assumed,
        } = plan::virtual_call(self.prog, self.spec, self.cur.func, method, bci)?;
        if let Some(a) = assumed {
            self.speculate(bci, a);
        }
        let nargs = m.param_count as usize;
        let d0 = self.cur.depth;
        let recv_var = self.stack_var(d0 - nargs, Kind::Ref);
        let recv = self.b.use_var(recv_var);
        self.null_check_unless_known(recv, bci, nargs - 1);
        let base = self.obj_addr(recv);
        let tag = self.b.ins().load(types::I32, trusted(), base, 0);
        let join = self.b.create_block();
        if let Some(t) = m.ret {
            self.b.append_block_param(join, cl_type(t.kind()));
        }
        for (imp, ids) in targets {
            let mut hit = self.b.ins().iconst(types::I8, 0);
            for id in ids {
                let eq = self.b.ins().icmp_imm_s(IntCC::Equal, tag, i64::from(id));
                hit = self.b.ins().bor(hit, eq);
            }
            let take = self.b.create_block();
            let next = self.b.create_block();
            self.b.ins().brif(hit, take, &[], next, &[]);
            self.b.switch_to_block(take);
            self.cur.depth = d0;
            let r = self.inline(bci, imp)?;
            let args: Vec<_> = r.into_iter().map(Into::into).collect();
            self.b.ins().jump(join, &args);
            self.b.switch_to_block(next);
        }
        // A class no implementation was compiled for (or, speculating, one
        // the profile never saw): the interpreter calls.
        self.cur.depth = d0;
        self.deopt_here(bci, miss);
        self.b.switch_to_block(join);
        self.cur.depth = d0 - nargs;
        if let Some(t) = m.ret {
            let r = self.b.block_params(join)[0];
            self.push(t.kind(), r);
        }
        Ok(())
    }

    /// A conditional branch the profile saw go one way only (`taken`): that
    /// way is compiled, the other is a deopt exit (`Unreached`) with the
    /// frame at the branch's entry (the condition `x` still on the stack),
    /// where the interpreter re-executes the branch.
    fn speculated_branch(&mut self, inst: Inst, bci: Bci, target: Bci, x: Value, taken: bool) {
        self.speculate(bci, Assumption::Branch { taken });
        let kept = if taken {
            self.edge(bci, target)
        } else {
            self.cur.blocks[&(bci + 1)]
        };
        let out = self.b.create_block();
        // brif jumps on non-zero; `jumps` is whether non-zero means taken.
        let jumps = matches!(inst, Inst::BrIf { .. } | Inst::BrNonNull { .. });
        let (nonzero, zero) = if jumps == taken {
            (kept, out)
        } else {
            (out, kept)
        };
        self.b.ins().brif(x, nonzero, &[], zero, &[]);
        self.b.switch_to_block(out);
        self.cur.depth += 1;
        self.deopt_here(bci, Reason::Unreached);
        self.cur.depth -= 1;
    }

    /// Branch to a deopt exit if `cond` is non-zero; continue otherwise.
    ///
    /// The checks of one instruction (a null check and a bounds check, say)
    /// share its site's exit, which takes the site word (and so the reason)
    /// as a parameter: they all see the frame state before the instruction,
    /// and one copy of the record stores is half the code of two.
    fn deopt_if(&mut self, cond: Value, bci: Bci, reason: Reason) {
        let id = self.site_id(bci);
        let sw = self
            .b
            .ins()
            .iconst(types::I64, SaveLayout::site_word(id, reason) as i64);
        let cont = self.b.create_block();
        if reason == Reason::Safepoint {
            // Stops the slot: an exit of its own.
            let out = self.b.create_block();
            self.b.ins().brif(cond, out, &[], cont, &[]);
            self.b.switch_to_block(out);
            self.deopt_exit(id, reason, sw);
        } else {
            debug_assert!(
                self.meta
                    .site(id)
                    .is_some_and(|s| s.reasons.contains(&reason))
            );
            self.branch_to_exit(id, reason, |b, out| {
                b.ins().brif(cond, out, &[sw.into()], cont, &[]);
            });
        }
        self.b.switch_to_block(cont);
    }

    /// End the current block with `branch`, which goes to site `id`'s
    /// shared exit (a block taking the site word) on failure; the first
    /// time, emit that exit's body with [`Lower::deopt_exit`] (the exit
    /// checks `reason` is one of the site's).
    fn branch_to_exit(
        &mut self,
        id: SiteId,
        reason: Reason,
        branch: impl FnOnce(&mut FunctionBuilder<'_>, Block),
    ) {
        // An exit emitted for another copy of this frame (the same callee
        // inlined again in another version of the body) would read that
        // copy's variables, which are undefined on this path.
        let key = (id, self.cur.instance);
        let (out, new) = match self.exits.get(&key) {
            Some(&out) => (out, false),
            None => {
                let out = self.b.create_block();
                self.b.append_block_param(out, types::I64);
                self.exits.insert(key, out);
                (out, true)
            }
        };
        branch(&mut self.b, out);
        if new {
            self.b.switch_to_block(out);
            let param = self.b.block_params(out)[0];
            self.deopt_exit(id, reason, param);
        }
    }

    /// Deopt if `r` is null: a null check, or where the profile never saw
    /// null here, a guard of that speculation.
    fn null_check(&mut self, r: Value, bci: Bci) {
        let reason = self.null_reason(bci);
        let is_null = self.b.ins().icmp_imm_s(IntCC::Equal, r, 0);
        self.deopt_if(is_null, bci, reason);
    }

    /// [`Lower::null_check`], unless the operand `from_top` below the top
    /// of the stack at `bci` cannot be null (`offload_ir::refs`: made by
    /// `new`, or already dereferenced or tested): then neither a check nor
    /// a speculation.
    fn null_check_unless_known(&mut self, r: Value, bci: Bci, from_top: usize) {
        if !self.cur.analysis.non_null(bci, from_top) {
            self.null_check(r, bci);
        }
    }

    /// Record the speculation `assumed` at `bci` of the current function,
    /// guarded by that instruction's site (in this inlining chain).
    fn speculate(&mut self, bci: Bci, assumed: Assumption) {
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
    fn null_reason(&mut self, bci: Bci) -> Reason {
        let (reason, assumed) = plan::null_check(self.spec, self.cur.func, bci);
        if let Some(a) = assumed {
            self.speculate(bci, a);
        }
        reason
    }

    /// Address of the object `r` (non-null, checked by the caller).
    fn obj_addr(&mut self, r: Value) -> Value {
        let heap = self.env.heap.expect("set");
        let r64 = self.b.ins().uextend(types::I64, r);
        let off = self.b.ins().ishl_imm_u(r64, 3);
        self.b.ins().iadd(heap, off)
    }

    /// Checked address of element `idx` of array `r`.
    fn elem_addr(&mut self, r: Value, idx: Value, size: i64, bci: Bci) -> Value {
        let base = self.obj_addr(r);
        // In the unchecked version, the kernel's accesses `build` proved
        // in bounds for this chunk (0 <= idx < length) go unchecked.
        if !(self.outer.is_empty() && self.unchecked.contains(&bci)) {
            self.null_or_bounds_check(r, base, idx, bci);
        }
        let i64v = self.b.ins().uextend(types::I64, idx);
        let scaled = self.b.ins().imul_imm_s(i64v, size);
        let a = self.b.ins().iadd(base, scaled);
        self.b.ins().iadd_imm_s(a, 8)
    }

    /// Deopt unless `idx` is inside array `r` (at `base`), in one compare:
    /// null's "header" is heap word 0, reserved and zero, so it reads as an
    /// array of length 0 and every index is out of its bounds. The cold
    /// failure block tells the two apart for the record's reason. (A
    /// separate null check would be loop-invariant for a captured array;
    /// Cranelift hoists its flag out of the loop, and one flag register per
    /// array was what made nbody's inner loop spill.)
    fn null_or_bounds_check(&mut self, r: Value, base: Value, idx: Value, bci: Bci) {
        let null_reason = self.null_reason(bci);
        let len = self.array_len(base);
        let oob = self
            .b
            .ins()
            .icmp(IntCC::UnsignedGreaterThanOrEqual, idx, len);
        let id = self.site_id(bci);
        let fail = self.b.create_block();
        self.b.set_cold_block(fail);
        let cont = self.b.create_block();
        self.b.ins().brif(oob, fail, &[], cont, &[]);
        self.b.switch_to_block(fail);
        let is_null = self.b.ins().icmp_imm_s(IntCC::Equal, r, 0);
        let word = |reason| SaveLayout::site_word(id, reason) as i64;
        let null_word = self.b.ins().iconst(types::I64, word(null_reason));
        let bounds_word = self.b.ins().iconst(types::I64, word(Reason::BoundsCheck));
        let sw = self.b.ins().select(is_null, null_word, bounds_word);
        self.branch_to_exit(id, Reason::BoundsCheck, |b, out| {
            b.ins().jump(out, &[sw.into()]);
        });
        self.b.switch_to_block(cont);
    }

    /// Whether the object `r` is an instance of `ty`, as an `i8` truth
    /// value, reading its header (`r` may be null: word 0 of the heap is
    /// reserved and readable, and the caller masks the answer).
    fn type_test(&mut self, r: Value, ty: offload_ir::Type) -> Value {
        let base = self.obj_addr(r);
        let tag = self.b.ins().load(types::I32, trusted(), base, 0);
        match plan::type_test(self.prog, ty) {
            TypeTest::Classes(ids) => {
                let mut acc = self.b.ins().iconst(types::I8, 0);
                for id in ids {
                    let eq = self.b.ins().icmp_imm_s(IntCC::Equal, tag, i64::from(id));
                    acc = self.b.ins().bor(acc, eq);
                }
                acc
            }
            TypeTest::Tag(want) => {
                self.b
                    .ins()
                    .icmp_imm_s(IntCC::Equal, tag, i64::from(want as i32))
            }
            TypeTest::Always => self.b.ins().iconst(types::I8, 1),
            TypeTest::Never => self.b.ins().iconst(types::I8, 0),
        }
    }

    /// Unpack a TLAB state word `st` (`end << 32 | top`): `top`, and whether
    /// an object of `words` words fits at it.
    fn tlab_fits(&mut self, st: Value, words: Value) -> (Value, Value) {
        let top = self.b.ins().band_imm_u(st, 0xFFFF_FFFF);
        let end = self.b.ins().ushr_imm_u(st, 32);
        let new_top = self.b.ins().iadd(top, words);
        let fits = self
            .b
            .ins()
            .icmp(IntCC::UnsignedLessThanOrEqual, new_top, end);
        (top, fits)
    }

    /// Allocate an object with header words `(tag, word1)` of `words` heap
    /// words (`i64`): the TLAB fast path inline, the slow path in Rust.
    /// Failure deopts with `AllocationFailure`, a safepoint requested during
    /// the slow path with `Safepoint` (the frame state is the current one,
    /// which must be the site's state at `bci`). Returns the reference.
    fn allocate(&mut self, bci: Bci, tag: Value, word1: Value, words: Value) -> Value {
        let (_, slot, heap) = self.e();
        let done = self.b.create_block();
        self.b.append_block_param(done, types::I32);
        let slow = self.b.create_block();
        for t in [types::I64, types::I64, types::I32] {
            self.b.append_block_param(slow, t);
        }
        let try_fast = self.b.create_block();
        self.b.append_block_param(try_fast, self.ptr);
        let add = self.b.create_block();
        let got = self.b.create_block();
        self.b.append_block_param(got, types::I64);

        let z64 = self.b.ins().iconst(types::I64, 0);
        let z32 = self.b.ins().iconst(types::I32, 0);
        // Both header words as one (constants for `new`, which the
        // optimized tier folds): one store, one argument.
        let t64 = self.b.ins().uextend(types::I64, tag);
        let w64 = self.b.ins().uextend(types::I64, word1);
        let w64 = self.b.ins().ishl_imm_u(w64, 32);
        let header = self.b.ins().bor(t64, w64);
        let shared = self.b.create_block();
        let own_bump = self.b.create_block();
        // One compare decides the common case: a small object and a TLAB
        // of this slot's own (`LaunchCtx::own_limit`, in memory).
        let own_limit = self.own_limit();
        let own = self
            .b
            .ins()
            .icmp(IntCC::UnsignedLessThanOrEqual, words, own_limit);
        self.b.ins().brif(own, own_bump, &[], shared, &[]);

        // Otherwise a small object goes to the shared protocol, a large
        // one (or any without a TLAB) to the slow path.
        self.b.switch_to_block(shared);
        // Both work on the memory word (a large object's slow path may
        // park at a safepoint, and reloads the word when it returns).
        self.tlab_write_back();
        let tl = self.tlab();
        let (ctx, _, _) = self.e();
        let large = self
            .b
            .ins()
            .load(types::I64, trusted(), ctx, offsets::LARGE_WORDS);
        let has = self.b.ins().icmp_imm_s(IntCC::NotEqual, tl, 0);
        let small = self
            .b
            .ins()
            .icmp(IntCC::UnsignedLessThanOrEqual, words, large);
        let ok = self.b.ins().band(has, small);
        self.b.ins().brif(
            ok,
            try_fast,
            &[tl.into()],
            slow,
            &[z64.into(), z64.into(), z32.into()],
        );

        // Step 0, a TLAB of this slot's own: bump `top` with a plain load
        // and store when the object fits (no one else touches the state
        // during the launch, and a FAILED slot never fits: the failing
        // refiller's add left `top` past `end`); else the shared protocol.
        self.b.switch_to_block(own_bump);
        let sv = self.env.tlab_state.expect("kernels that allocate keep it");
        let st = self.b.use_var(sv);
        // In register form: top += words and end - top -= words, in one
        // add; the object fits when end - top stays non-negative.
        let hi = self.b.ins().ishl_imm_u(words, 32);
        let step = self.b.ins().isub(words, hi);
        let st1 = self.b.ins().iadd(st, step);
        let fits = self
            .b
            .ins()
            .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, st1, 0);
        let bumped = self.b.create_block();
        let full = self.b.create_block();
        self.b.ins().brif(fits, bumped, &[], full, &[]);
        self.b.switch_to_block(bumped);
        self.b.def_var(sv, st1);
        let top = self.state_top(st);
        self.b.ins().jump(got, &[top.into()]);
        // It does not fit: the protocol below works on the memory word.
        self.b.switch_to_block(full);
        self.b.set_cold_block(full);
        let tl = self.tlab();
        self.store_tlab_state(tl, st);
        self.b.ins().jump(try_fast, &[tl.into()]);

        // Step 1: the generation (not FAILED); step 2: the add.
        self.b.switch_to_block(try_fast);
        let tl = self.b.block_params(try_fast)[0];
        let sa = self.tlab_state_addr(tl);
        let ga = self
            .b
            .ins()
            .iadd_imm_s(tl, i64::from(offload_tlab::SharedTlab::GENERATION_OFFSET));
        let g = self.b.ins().atomic_load(types::I64, trusted(), ga);
        let failed = self.b.ins().ushr_imm_u(g, 63);
        self.b
            .ins()
            .brif(failed, slow, &[g.into(), z64.into(), z32.into()], add, &[]);
        self.b.switch_to_block(add);
        let old = self
            .b
            .ins()
            .atomic_rmw(types::I64, trusted(), AtomicRmwOp::Add, sa, words);
        let (top, fits) = self.tlab_fits(old, words);
        let one = self.b.ins().iconst(types::I32, 1);
        let added = self.b.create_block();
        self.b
            .ins()
            .brif(fits, added, &[], slow, &[g.into(), old.into(), one.into()]);
        // (On a slot that owns its TLAB the add never fits where the bump
        // did not; take the word from memory all the same.)
        self.b.switch_to_block(added);
        self.tlab_reload();
        self.b.ins().jump(got, &[top.into()]);

        // The object is at `top`: write its header (the memory is zero).
        self.b.switch_to_block(got);
        let at = self.b.block_params(got)[0];
        let off = self.b.ins().ishl_imm_u(at, 3);
        let addr = self.b.ins().iadd(heap, off);
        self.b.ins().store(trusted(), header, addr, 0);
        let r = self.b.ins().ireduce(types::I32, at);
        self.b.ins().jump(done, &[r.into()]);

        // The slow path (refill, wait, large objects, no TLABs; a poll).
        self.b.switch_to_block(slow);
        self.b.set_cold_block(slow);
        let p = self.b.block_params(slow).to_vec();
        let fr = self.math["offload_alloc_slow"];
        let (ctx, _, _) = self.e();
        self.b
            .ins()
            .call(fr, &[ctx, slot, header, p[0], p[1], p[2]]);
        let at = self.slot_words();
        let res = self
            .b
            .ins()
            .load(types::I32, trusted(), at, offsets::SLOT_SLOW_RESULT);
        // The refill changed the memory word; the deopt exits below write
        // the kept state back, so it must be the new one first.
        self.tlab_reload();
        let failed = self
            .b
            .ins()
            .icmp_imm_s(IntCC::Equal, res, i64::from(crate::rt::ALLOC_FAILED));
        self.deopt_if(failed, bci, Reason::AllocationFailure);
        let sp = self
            .b
            .ins()
            .icmp_imm_s(IntCC::Equal, res, i64::from(crate::rt::ALLOC_SAFEPOINT));
        self.deopt_if(sp, bci, Reason::Safepoint);
        // A refill (or a large object) puts this workitem's objects
        // outside its part of the TLAB: it will not be reset.
        if let Some(nv) = self.env.nursery {
            let off = self.nursery_off();
            self.b.def_var(nv, off);
        }
        self.b.ins().jump(done, &[res.into()]);

        self.b.switch_to_block(done);
        self.b.block_params(done)[0]
    }

    fn call_math(&mut self, name: &'static str, args: &[Value]) -> Value {
        let fr = self.math[name];
        let call = self.b.ins().call(fr, args);
        self.b.inst_results(call)[0]
    }

    fn body(&mut self) -> Result<(), JitError> {
        let n = self.v.func(self.cur.func).body.len() as Bci;
        // Predicated loops are the kernel's own (not an inlined callee's).
        let loops = if self.outer.is_empty() {
            self.loops.clone()
        } else {
            Vec::new()
        };
        let mut terminated = true;
        let mut from = 0;
        for lp in &loops {
            let t = self.lower_range(from, lp.header, terminated)?;
            self.predicated_loop(lp, t)?;
            terminated = true;
            from = lp.header;
        }
        self.lower_range(from, n, terminated)?;
        Ok(())
    }

    /// Lower the instructions `[lo, hi)` of the current function, entered
    /// with the current block `terminated` or not; returns whether the last
    /// block is terminated.
    fn lower_range(&mut self, lo: Bci, hi: Bci, mut terminated: bool) -> Result<bool, JitError> {
        let f = self.v.func(self.cur.func);
        let types_ = self.v.types(self.cur.func);
        for bci in lo..hi {
            let inst = f.body[bci as usize];
            let Some(frame) = types_.frames[bci as usize].as_ref() else {
                continue;
            };
            if let Some(&blk) = self.cur.blocks.get(&bci) {
                if !terminated {
                    self.b.ins().jump(blk, &[]);
                }
                self.b.switch_to_block(blk);
            }
            self.cur.depth = frame.stack.len();
            if let Some(inj) = self.opts.inject
                && self.outer.is_empty()
                && inj.site_bci == bci
            {
                let w = self.b.use_var(self.env.w.expect("set"));
                let m = self.b.ins().srem_imm_s(w, inj.modulus);
                let hit = self.b.ins().icmp_imm_s(IntCC::Equal, m, inj.remainder);
                let reason = self
                    .meta
                    .site_at(bci)
                    .expect("checked at compile start")
                    .reasons[0];
                self.deopt_if(hit, bci, reason);
            }
            terminated = self.inst(bci, inst)?;
            if terminated {
                self.flush_polls();
            }
        }
        Ok(terminated)
    }

    /// The entry of predicated loop `lp` (the block made for its header,
    /// which every entering edge targets): evaluate the predicate and go to
    /// a version of the loop without the covered accesses' checks when it
    /// holds, and to the checked version otherwise. Lowers the unchecked
    /// version; the checked one is lowered by the caller, from the header,
    /// which is left mapped to it (so its back-edges stay in it).
    fn predicated_loop(
        &mut self,
        lp: &plan::PredicatedLoop,
        terminated: bool,
    ) -> Result<(), JitError> {
        let (h, last) = (lp.header, lp.last);
        let entry = self.cur.blocks[&h];
        if !terminated {
            self.b.ins().jump(entry, &[]);
        }
        self.b.switch_to_block(entry);
        let ok = self.loop_predicate(lp);
        let (fast, checked) = (self.b.create_block(), self.b.create_block());
        self.b.ins().brif(ok, fast, &[], checked, &[]);
        // The unchecked version, in `copies` copies of the loop, each with
        // blocks of its own: copy j's back-edges go to copy j + 1's header
        // without a poll, and the last copy's go to the first's through the
        // safepoint poll, so that one poll serves `copies` iterations.
        let inside: Vec<(Bci, Block)> = self
            .cur
            .blocks
            .iter()
            .filter(|&(k, _)| (h..=last).contains(k))
            .map(|(&k, &b)| (k, b))
            .collect();
        let added: Vec<Bci> = lp
            .accesses
            .iter()
            .map(|a| a.0)
            .filter(|&b| self.unchecked.insert(b))
            .collect();
        let copies = plan::loop_unroll(lp);
        let headers: Vec<Block> = (0..copies)
            .map(|j| if j == 0 { fast } else { self.b.create_block() })
            .collect();
        let mut res: Result<bool, JitError> = Ok(true);
        for j in 0..copies {
            for &(k, _) in &inside {
                let nb = if k == h {
                    headers[j as usize]
                } else {
                    self.b.create_block()
                };
                self.cur.blocks.insert(k, nb);
            }
            let next = headers[((j + 1) % copies) as usize];
            let last_copy = j + 1 == copies;
            res = self.lower_range(h, h + 1, true).and_then(|t| {
                self.cur.blocks.insert(h, next);
                self.cur.poll_free_header = (!last_copy).then_some(h);
                self.lower_range(h + 1, last + 1, t)
            });
            self.cur.poll_free_header = None;
            match res {
                Ok(false) => {
                    // The last instruction falls through out of the loop.
                    let after = self.cur.blocks[&(last + 1)];
                    self.b.ins().jump(after, &[]);
                }
                Ok(true) => {}
                Err(_) => break,
            }
        }
        for b in added {
            self.unchecked.remove(&b);
        }
        for (k, b) in inside {
            self.cur.blocks.insert(k, b);
        }
        res?;
        self.cur.blocks.insert(h, checked);
        Ok(())
    }

    /// Whether every access `lp` covers is in bounds for every value its
    /// induction variable takes, evaluated where the loop is entered
    /// ([`plan::loop_predicates`] says why the two ends suffice).
    fn loop_predicate(&mut self, lp: &plan::PredicatedLoop) -> Value {
        let k0 = self.b.use_var(self.cur.locals[lp.iv as usize]);
        let k0 = self.b.ins().sextend(types::I64, k0);
        let n = self.eval_inv(&lp.bound);
        let n = self.b.ins().sextend(types::I64, n);
        let idle = self.b.ins().icmp(IntCC::SignedGreaterThanOrEqual, k0, n);
        let kmax = self.b.ins().iadd_imm_s(n, -1);
        // k never wraps: bound - 1 + step <= i32::MAX.
        let top = self.b.ins().iadd_imm_s(kmax, lp.step);
        let mut ok =
            self.b
                .ins()
                .icmp_imm_s(IntCC::SignedLessThanOrEqual, top, i64::from(i32::MAX));
        for (_, arr, form) in &lp.accesses {
            let coef = self.eval_inv(&form.coef);
            let coef = self.b.ins().sextend(types::I64, coef);
            let off = self.eval_inv(&form.off);
            let off = self.b.ins().sextend(types::I64, off);
            let at0 = self.b.ins().imul(coef, k0);
            let at0 = self.b.ins().iadd(at0, off);
            let at1 = self.b.ins().imul(coef, kmax);
            let at1 = self.b.ins().iadd(at1, off);
            let lo = self.b.ins().smin(at0, at1);
            let hi = self.b.ins().smax(at0, at1);
            let r = self.b.use_var(self.cur.locals[*arr as usize]);
            let base = self.obj_addr(r);
            let len = self.array_len(base);
            let len = self.b.ins().uextend(types::I64, len);
            let ge0 = self
                .b
                .ins()
                .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, lo, 0);
            let lt = self.b.ins().icmp(IntCC::SignedLessThan, hi, len);
            let fits = self.b.ins().band(ge0, lt);
            ok = self.b.ins().band(ok, fits);
        }
        self.b.ins().bor(ok, idle)
    }

    /// A loop-invariant expression's value, as the bytecode computes it.
    fn eval_inv(&mut self, e: &plan::Inv) -> Value {
        use plan::Inv;
        match e {
            Inv::Const(c) => self.b.ins().iconst(types::I32, i64::from(*c)),
            Inv::Local(l) => self.b.use_var(self.cur.locals[*l as usize]),
            Inv::Add(x, y) | Inv::Sub(x, y) | Inv::Mul(x, y) => {
                let (a, b) = (self.eval_inv(x), self.eval_inv(y));
                match e {
                    Inv::Add(..) => self.b.ins().iadd(a, b),
                    Inv::Sub(..) => self.b.ins().isub(a, b),
                    _ => self.b.ins().imul(a, b),
                }
            }
        }
    }

    /// The block to go to for `target`, through a safepoint poll when the
    /// edge goes backwards. The poll block is filled by [`Self::flush_polls`]
    /// once the current block is terminated.
    fn edge(&mut self, from: Bci, target: Bci) -> Block {
        let dest = self.cur.blocks[&target];
        if target > from || self.opts.no_polls || self.cur.poll_free_header == Some(target) {
            return dest;
        }
        let poll = self.b.create_block();
        self.cur.pending_polls.push((poll, target));
        poll
    }

    /// Fill the poll blocks of the back-edges just emitted: read the control
    /// word; on a safepoint request deoptimize at the loop header (whose frame
    /// state is the edge's: the verifier made the depths agree).
    fn flush_polls(&mut self) {
        for (poll, target) in std::mem::take(&mut self.cur.pending_polls) {
            let dest = self.cur.blocks[&target];
            self.b.switch_to_block(poll);
            let cw = self.control_word();
            let mut sp = self.b.ins().band_imm_u(cw, i64::from(CONTROL_SAFEPOINT));
            if let Some(si) = self.opts.safepoints {
                let var = self.env.polls.expect("set with the option");
                let x = self.b.use_var(var);
                let next = if si.seed.is_some() {
                    // xorshift64
                    let a = self.b.ins().ishl_imm_u(x, 13);
                    let x = self.b.ins().bxor(x, a);
                    let a = self.b.ins().ushr_imm_u(x, 7);
                    let x = self.b.ins().bxor(x, a);
                    let a = self.b.ins().ishl_imm_u(x, 17);
                    self.b.ins().bxor(x, a)
                } else {
                    self.b.ins().iadd_imm_s(x, 1)
                };
                self.b.def_var(var, next);
                let at = self.slot_words();
                self.b
                    .ins()
                    .store(trusted(), next, at, offsets::SLOT_INJECT_STATE);
                let r = self.b.ins().urem_imm_u(next, si.every.max(1) as i64);
                let hit = self.b.ins().icmp_imm_s(IntCC::Equal, r, 0);
                let hit = self.b.ins().uextend(types::I32, hit);
                sp = self.b.ins().bor(sp, hit);
            }
            let out = self.b.create_block();
            self.b.ins().brif(sp, out, &[], dest, &[]);
            self.b.switch_to_block(out);
            self.cur.depth = self.v.types(self.cur.func).frames[target as usize]
                .as_ref()
                .expect("reachable")
                .stack
                .len();
            self.deopt_here(target, Reason::Safepoint);
        }
    }

    /// Lower one instruction. Returns whether the block is terminated.
    #[allow(clippy::too_many_lines)]
    fn inst(&mut self, bci: Bci, inst: Inst) -> Result<bool, JitError> {
        use Kind::{F32, F64, I32, I64, Ref};
        macro_rules! bin {
            ($k:expr, $op:ident) => {{
                let b = self.pop($k);
                let a = self.pop($k);
                let r = self.b.ins().$op(a, b);
                self.push($k, r);
            }};
        }
        macro_rules! un {
            ($k:expr, $op:ident) => {{
                let a = self.pop($k);
                let r = self.b.ins().$op(a);
                self.push($k, r);
            }};
        }
        macro_rules! icmp {
            ($k:expr, $cc:expr) => {{
                let b = self.pop($k);
                let a = self.pop($k);
                let c = self.b.ins().icmp($cc, a, b);
                let r = self.b.ins().uextend(types::I32, c);
                self.push(I32, r);
            }};
        }
        macro_rules! fcmp {
            ($k:expr, $cc:expr) => {{
                let b = self.pop($k);
                let a = self.pop($k);
                let c = self.b.ins().fcmp($cc, a, b);
                let r = self.b.ins().uextend(types::I32, c);
                self.push(I32, r);
            }};
        }
        macro_rules! math1 {
            ($k:expr, $name:literal) => {{
                let a = self.pop($k);
                let r = self.call_math($name, &[a]);
                self.push($k, r);
            }};
        }
        macro_rules! math2 {
            ($k:expr, $name:literal) => {{
                let b = self.pop($k);
                let a = self.pop($k);
                let r = self.call_math($name, &[a, b]);
                self.push($k, r);
            }};
        }
        macro_rules! conv {
            ($from:expr, $to:expr, $op:ident) => {{
                let a = self.pop($from);
                let r = self.b.ins().$op(cl_type($to), a);
                self.push($to, r);
            }};
        }
        if inst.opcode().hazards().has(hz::HOST_MATH) {
            // Sine and cosine carry a `DeviceLimit` site (the GPU hands huge
            // arguments to the host); libm here covers them, so the site is
            // only registered, keeping the metadata equal to the PTX version's.
            self.site_id(bci);
        }
        match inst {
            Inst::I32Const { value } => {
                let c = self.b.ins().iconst(types::I32, i64::from(value));
                self.push(I32, c);
            }
            Inst::I64Const { value } => {
                let c = self.b.ins().iconst(types::I64, value);
                self.push(I64, c);
            }
            Inst::F32Const { value } => {
                let c = self.b.ins().f32const(Ieee32::with_bits(value.0));
                self.push(F32, c);
            }
            Inst::F64Const { value } => {
                let c = self.b.ins().f64const(Ieee64::with_bits(value.0));
                self.push(F64, c);
            }
            Inst::RefNull => {
                let c = self.b.ins().iconst(types::I32, 0);
                self.push(Ref, c);
            }
            Inst::Load { local } => {
                let k = self.v.func(self.cur.func).locals[local.index()].ty.kind();
                let var = self.cur.locals[local.index()];
                let x = self.b.use_var(var);
                self.push(k, x);
            }
            Inst::Store { local } => {
                let k = self.v.func(self.cur.func).locals[local.index()].ty.kind();
                let x = self.pop(k);
                let var = self.cur.locals[local.index()];
                self.b.def_var(var, x);
            }
            Inst::Inc { local, delta } => {
                let var = self.cur.locals[local.index()];
                let x = self.b.use_var(var);
                let r = self.b.ins().iadd_imm_s(x, i64::from(delta));
                self.b.def_var(var, r);
            }
            Inst::Dup => {
                let k = self.kind_at(bci, 0);
                let x = self.pop(k);
                self.push(k, x);
                self.push(k, x);
            }
            Inst::Pop => {
                let k = self.kind_at(bci, 0);
                self.pop(k);
            }
            Inst::Swap => {
                let (ka, kb) = (self.kind_at(bci, 0), self.kind_at(bci, 1));
                let a = self.pop(ka);
                let b = self.pop(kb);
                self.push(ka, a);
                self.push(kb, b);
            }
            Inst::I32Add => bin!(I32, iadd),
            Inst::I32Sub => bin!(I32, isub),
            Inst::I32Mul => bin!(I32, imul),
            Inst::I64Add => bin!(I64, iadd),
            Inst::I64Sub => bin!(I64, isub),
            Inst::I64Mul => bin!(I64, imul),
            Inst::I32Div | Inst::I32Rem | Inst::I64Div | Inst::I64Rem => {
                let k = if matches!(inst, Inst::I32Div | Inst::I32Rem) {
                    I32
                } else {
                    I64
                };
                let t = cl_type(k);
                let b = self.pop(k);
                let a = self.pop(k);
                // Re-push for the frame state: the deopt re-executes the division.
                self.push(k, a);
                self.push(k, b);
                let zero = self.b.ins().icmp_imm_s(IntCC::Equal, b, 0);
                self.deopt_if(zero, bci, Reason::DivideByZero);
                self.cur.depth -= 2;
                // MIN / -1 wraps (and MIN % -1 is 0) instead of trapping.
                let m1 = self.b.ins().icmp_imm_s(IntCC::Equal, b, -1);
                let one = self.b.ins().iconst(t, 1);
                let safe = self.b.ins().select(m1, one, b);
                let r = if matches!(inst, Inst::I32Div | Inst::I64Div) {
                    let q = self.b.ins().sdiv(a, safe);
                    let neg = self.b.ins().ineg(a);
                    self.b.ins().select(m1, neg, q)
                } else {
                    let rem = self.b.ins().srem(a, safe);
                    let z = self.b.ins().iconst(t, 0);
                    self.b.ins().select(m1, z, rem)
                };
                self.push(k, r);
            }
            Inst::I32Neg => un!(I32, ineg),
            Inst::I64Neg => un!(I64, ineg),
            Inst::I32And => bin!(I32, band),
            Inst::I32Or => bin!(I32, bor),
            Inst::I32Xor => bin!(I32, bxor),
            Inst::I32Shl => bin!(I32, ishl),
            Inst::I32Shr => bin!(I32, sshr),
            Inst::I32Ushr => bin!(I32, ushr),
            Inst::I64And => bin!(I64, band),
            Inst::I64Or => bin!(I64, bor),
            Inst::I64Xor => bin!(I64, bxor),
            Inst::I64Shl => bin!(I64, ishl),
            Inst::I64Shr => bin!(I64, sshr),
            Inst::I64Ushr => bin!(I64, ushr),
            Inst::F32Add => bin!(F32, fadd),
            Inst::F32Sub => bin!(F32, fsub),
            Inst::F32Mul => bin!(F32, fmul),
            Inst::F32Div => bin!(F32, fdiv),
            Inst::F32Rem => math2!(F32, "offload_f32_rem"),
            Inst::F32Neg => un!(F32, fneg),
            Inst::F64Add => bin!(F64, fadd),
            Inst::F64Sub => bin!(F64, fsub),
            Inst::F64Mul => bin!(F64, fmul),
            Inst::F64Div => bin!(F64, fdiv),
            Inst::F64Rem => math2!(F64, "offload_f64_rem"),
            Inst::F64Neg => un!(F64, fneg),
            Inst::I32Eq => icmp!(I32, IntCC::Equal),
            Inst::I32Ne => icmp!(I32, IntCC::NotEqual),
            Inst::I32Lt => icmp!(I32, IntCC::SignedLessThan),
            Inst::I32Le => icmp!(I32, IntCC::SignedLessThanOrEqual),
            Inst::I32Gt => icmp!(I32, IntCC::SignedGreaterThan),
            Inst::I32Ge => icmp!(I32, IntCC::SignedGreaterThanOrEqual),
            Inst::I64Eq => icmp!(I64, IntCC::Equal),
            Inst::I64Ne => icmp!(I64, IntCC::NotEqual),
            Inst::I64Lt => icmp!(I64, IntCC::SignedLessThan),
            Inst::I64Le => icmp!(I64, IntCC::SignedLessThanOrEqual),
            Inst::I64Gt => icmp!(I64, IntCC::SignedGreaterThan),
            Inst::I64Ge => icmp!(I64, IntCC::SignedGreaterThanOrEqual),
            Inst::F32Eq => fcmp!(F32, FloatCC::Equal),
            Inst::F32Ne => fcmp!(F32, FloatCC::NotEqual),
            Inst::F32Lt => fcmp!(F32, FloatCC::LessThan),
            Inst::F32Le => fcmp!(F32, FloatCC::LessThanOrEqual),
            Inst::F32Gt => fcmp!(F32, FloatCC::GreaterThan),
            Inst::F32Ge => fcmp!(F32, FloatCC::GreaterThanOrEqual),
            Inst::F64Eq => fcmp!(F64, FloatCC::Equal),
            Inst::F64Ne => fcmp!(F64, FloatCC::NotEqual),
            Inst::F64Lt => fcmp!(F64, FloatCC::LessThan),
            Inst::F64Le => fcmp!(F64, FloatCC::LessThanOrEqual),
            Inst::F64Gt => fcmp!(F64, FloatCC::GreaterThan),
            Inst::F64Ge => fcmp!(F64, FloatCC::GreaterThanOrEqual),
            Inst::RefEq => icmp!(Ref, IntCC::Equal),
            Inst::RefNe => icmp!(Ref, IntCC::NotEqual),
            Inst::Br { target } => {
                let dest = self.edge(bci, target.0);
                self.b.ins().jump(dest, &[]);
                return Ok(true);
            }
            Inst::BrIf { target }
            | Inst::BrUnless { target }
            | Inst::BrNull { target }
            | Inst::BrNonNull { target } => {
                let k = if matches!(inst, Inst::BrIf { .. } | Inst::BrUnless { .. }) {
                    I32
                } else {
                    Ref
                };
                let x = self.pop(k);
                if let Some(taken) = self.spec.branch(self.cur.func, bci) {
                    self.speculated_branch(inst, bci, target.0, x, taken);
                    return Ok(true);
                }
                let dest = self.edge(bci, target.0);
                let fall = self.cur.blocks[&(bci + 1)];
                // brif jumps on non-zero.
                match inst {
                    Inst::BrIf { .. } | Inst::BrNonNull { .. } => {
                        self.b.ins().brif(x, dest, &[], fall, &[])
                    }
                    _ => self.b.ins().brif(x, fall, &[], dest, &[]),
                };
                return Ok(true);
            }
            Inst::I32ToI64 => conv!(I32, I64, sextend),
            Inst::I32ToF32 => conv!(I32, F32, fcvt_from_sint),
            Inst::I32ToF64 => conv!(I32, F64, fcvt_from_sint),
            Inst::I64ToI32 => conv!(I64, I32, ireduce),
            Inst::I64ToF32 => conv!(I64, F32, fcvt_from_sint),
            Inst::I64ToF64 => conv!(I64, F64, fcvt_from_sint),
            Inst::F32ToI32 => conv!(F32, I32, fcvt_to_sint_sat),
            Inst::F32ToI64 => conv!(F32, I64, fcvt_to_sint_sat),
            Inst::F32ToF64 => conv!(F32, F64, fpromote),
            Inst::F64ToI32 => conv!(F64, I32, fcvt_to_sint_sat),
            Inst::F64ToI64 => conv!(F64, I64, fcvt_to_sint_sat),
            Inst::F64ToF32 => conv!(F64, F32, fdemote),
            Inst::ArrayLen => {
                let r = self.pop(Ref);
                self.push(Ref, r);
                self.null_check_unless_known(r, bci, 0);
                self.cur.depth -= 1;
                let base = self.obj_addr(r);
                let len = self.array_len(base);
                self.push(I32, len);
            }
            Inst::I32ALoad | Inst::F32ALoad | Inst::RefALoad | Inst::I64ALoad | Inst::F64ALoad => {
                let k = match inst {
                    Inst::I32ALoad => I32,
                    Inst::F32ALoad => F32,
                    Inst::RefALoad => Ref,
                    Inst::I64ALoad => I64,
                    _ => F64,
                };
                let idx = self.pop(I32);
                let r = self.pop(Ref);
                self.cur.depth += 2; // operands stay in the frame state for the checks
                let size = if matches!(k, I64 | F64) { 8 } else { 4 };
                let a = self.elem_addr(r, idx, size, bci);
                self.cur.depth -= 2;
                let x = self.b.ins().load(cl_type(k), trusted(), a, 0);
                self.push(k, x);
            }
            Inst::I32AStore
            | Inst::F32AStore
            | Inst::RefAStore
            | Inst::I64AStore
            | Inst::F64AStore => {
                let k = match inst {
                    Inst::I32AStore => I32,
                    Inst::F32AStore => F32,
                    Inst::RefAStore => Ref,
                    Inst::I64AStore => I64,
                    _ => F64,
                };
                let x = self.pop(k);
                let idx = self.pop(I32);
                let r = self.pop(Ref);
                self.cur.depth += 3;
                let size = if matches!(k, I64 | F64) { 8 } else { 4 };
                let a = self.elem_addr(r, idx, size, bci);
                self.cur.depth -= 3;
                if k == Ref && !self.cur.analysis.fresh(bci, 2) {
                    self.write_barrier(r, x);
                }
                self.b.ins().store(trusted(), x, a, 0);
            }
            Inst::GetField { field } => {
                let k = self.v.field(field).ty.kind();
                let r = self.pop(Ref);
                self.cur.depth += 1;
                self.null_check_unless_known(r, bci, 0);
                self.cur.depth -= 1;
                let base = self.obj_addr(r);
                let off = self.prog.layout.field_offset[field.index()] as i32;
                let x = self.b.ins().load(cl_type(k), trusted(), base, off);
                self.push(k, x);
            }
            Inst::PutField { field } => {
                let k = self.v.field(field).ty.kind();
                let x = self.pop(k);
                let r = self.pop(Ref);
                self.cur.depth += 2;
                self.null_check_unless_known(r, bci, 1);
                self.cur.depth -= 2;
                let base = self.obj_addr(r);
                let off = self.prog.layout.field_offset[field.index()] as i32;
                // A receiver the workitem allocated is at least as young
                // as anything stored into it: nothing escapes.
                if k == Ref && !self.cur.analysis.fresh(bci, 1) {
                    self.write_barrier(r, x);
                }
                self.b.ins().store(trusted(), x, base, off);
            }
            Inst::F32Sqrt => un!(F32, sqrt),
            Inst::F32Abs => un!(F32, fabs),
            Inst::F32Min => bin!(F32, fmin),
            Inst::F32Max => bin!(F32, fmax),
            Inst::F32Floor => un!(F32, floor),
            Inst::F32Ceil => un!(F32, ceil),
            Inst::F32Exp => math1!(F32, "offload_f32_exp"),
            Inst::F32Log => math1!(F32, "offload_f32_log"),
            Inst::F32Sin => math1!(F32, "offload_f32_sin"),
            Inst::F32Cos => math1!(F32, "offload_f32_cos"),
            Inst::F32Pow => math2!(F32, "offload_f32_pow"),
            Inst::F64Sqrt => un!(F64, sqrt),
            Inst::F64Abs => un!(F64, fabs),
            Inst::F64Min => bin!(F64, fmin),
            Inst::F64Max => bin!(F64, fmax),
            Inst::F64Floor => un!(F64, floor),
            Inst::F64Ceil => un!(F64, ceil),
            Inst::F64Exp => math1!(F64, "offload_f64_exp"),
            Inst::F64Log => math1!(F64, "offload_f64_log"),
            Inst::F64Sin => math1!(F64, "offload_f64_sin"),
            Inst::F64Cos => math1!(F64, "offload_f64_cos"),
            Inst::F64Pow => math2!(F64, "offload_f64_pow"),
            Inst::F32Fma | Inst::F64Fma => {
                let (k, name) = if inst == Inst::F32Fma {
                    (F32, "offload_f32_fma")
                } else {
                    (F64, "offload_f64_fma")
                };
                let c = self.pop(k);
                let b = self.pop(k);
                let a = self.pop(k);
                let r = self.call_math(name, &[a, b, c]);
                self.push(k, r);
            }
            Inst::I32Abs | Inst::I64Abs => {
                let k = if inst == Inst::I32Abs { I32 } else { I64 };
                let a = self.pop(k);
                let neg = self.b.ins().ineg(a);
                let is_neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, a, 0);
                let r = self.b.ins().select(is_neg, neg, a);
                self.push(k, r);
            }
            Inst::I32Min => bin!(I32, smin),
            Inst::I32Max => bin!(I32, smax),
            Inst::I64Min => bin!(I64, smin),
            Inst::I64Max => bin!(I64, smax),
            Inst::I32ArrayAtomicAdd | Inst::I64ArrayAtomicAdd => {
                let k = if inst == Inst::I32ArrayAtomicAdd {
                    I32
                } else {
                    I64
                };
                let x = self.pop(k);
                let idx = self.pop(I32);
                let r = self.pop(Ref);
                self.cur.depth += 3;
                let a = self.elem_addr(r, idx, if k == I32 { 4 } else { 8 }, bci);
                self.cur.depth -= 3;
                let old = self
                    .b
                    .ins()
                    .atomic_rmw(cl_type(k), trusted(), AtomicRmwOp::Add, a, x);
                self.push(k, old);
            }
            Inst::I32ArrayCmpxchg | Inst::I64ArrayCmpxchg => {
                let k = if inst == Inst::I32ArrayCmpxchg {
                    I32
                } else {
                    I64
                };
                let new = self.pop(k);
                let expected = self.pop(k);
                let idx = self.pop(I32);
                let r = self.pop(Ref);
                self.cur.depth += 4;
                let a = self.elem_addr(r, idx, if k == I32 { 4 } else { 8 }, bci);
                self.cur.depth -= 4;
                let old = self.b.ins().atomic_cas(trusted(), a, expected, new);
                self.push(k, old);
            }
            Inst::FieldAtomicAdd { field } | Inst::FieldCmpxchg { field } => {
                let k = self.v.field(field).ty.kind();
                let cas = matches!(inst, Inst::FieldCmpxchg { .. });
                let new = self.pop(k);
                let expected = if cas { Some(self.pop(k)) } else { None };
                let r = self.pop(Ref);
                let n = if cas { 3 } else { 2 };
                self.cur.depth += n;
                self.null_check_unless_known(r, bci, n - 1);
                self.cur.depth -= n;
                let base = self.obj_addr(r);
                let off = self.prog.layout.field_offset[field.index()];
                let a = self.b.ins().iadd_imm_s(base, i64::from(off));
                let old = match expected {
                    None => {
                        self.b
                            .ins()
                            .atomic_rmw(cl_type(k), trusted(), AtomicRmwOp::Add, a, new)
                    }
                    Some(e) => self.b.ins().atomic_cas(trusted(), a, e, new),
                };
                self.push(k, old);
            }
            Inst::Ret => {
                match self.cur.ret_to {
                    None => {
                        let next = self.env.next_item.expect("set");
                        self.b.ins().jump(next, &[]);
                    }
                    Some(cont) => {
                        let ret = self.v.func(self.cur.func).ret;
                        let args: Vec<_> = match ret {
                            Some(t) => vec![self.pop(t.kind()).into()],
                            None => Vec::new(),
                        };
                        self.b.ins().jump(cont, &args);
                    }
                }
                return Ok(true);
            }
            Inst::Call { func } => {
                if let Some(r) = self.inline(bci, func)? {
                    let k = self.v.func(func).ret.expect("returns").kind();
                    self.push(k, r);
                }
            }
            Inst::CallVirt { method } => self.call_virtual(bci, method)?,
            Inst::Throw { .. } => {
                self.deopt_here(bci, Reason::Throw);
                return Ok(true);
            }
            Inst::InstanceOf { ty } => {
                let r = self.pop(Ref);
                let yes = self.type_test(r, ty);
                let nonnull = self.b.ins().icmp_imm_s(IntCC::NotEqual, r, 0);
                let both = self.b.ins().band(yes, nonnull);
                let r = self.b.ins().uextend(types::I32, both);
                self.push(I32, r);
            }
            Inst::CheckCast { ty } => {
                // The reference stays on the stack (and in the frame state).
                let r = self.pop(Ref);
                self.push(Ref, r);
                let yes = self.type_test(r, ty);
                let nonnull = self.b.ins().icmp_imm_s(IntCC::NotEqual, r, 0);
                let no = self.b.ins().bnot(yes);
                let fail = self.b.ins().band(no, nonnull);
                self.deopt_if(fail, bci, Reason::ClassCast);
            }
            Inst::New { class } => {
                let (tag, size) = plan::new_object(self.prog, class);
                let tag = self.b.ins().iconst(types::I32, i64::from(tag));
                let word1 = self.b.ins().iconst(types::I32, i64::from(size));
                let words = self.b.ins().iconst(types::I64, i64::from(size / 8));
                let r = self.allocate(bci, tag, word1, words);
                self.push(Ref, r);
            }
            Inst::NewArray { elem } => {
                let (tag, esize) = plan::new_array(self.prog, elem, bci)?;
                let len = self.pop(I32);
                self.push(I32, len); // in the frame state for the checks
                let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, len, 0);
                self.deopt_if(neg, bci, Reason::NegativeSize);
                let tag = self.b.ins().iconst(types::I32, i64::from(tag as i32));
                // words = (8 + len * esize + 7) / 8
                let len64 = self.b.ins().uextend(types::I64, len);
                let bytes = self.b.ins().imul_imm_s(len64, i64::from(esize));
                let bytes = self.b.ins().iadd_imm_s(bytes, 15);
                let words = self.b.ins().ushr_imm_u(bytes, 3);
                let r = self.allocate(bci, tag, len, words);
                self.cur.depth -= 1;
                self.push(Ref, r);
            }
        }
        Ok(false)
    }
}
