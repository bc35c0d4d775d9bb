//! The CPU backend: verified bytecode → Cranelift IR → native code, as one
//! persistent slot loop per kernel (docs/DESIGN.md, "How a launch flows"):
//!
//! ```text
//! entry:  if reenter[slot]: goto resume             ; the host asks for a record
//!         [w, hi) = never_ran[slot]; if w < hi: goto item   ; resume a stopped chunk
//! claim:  lo = atomic_add(parts[p].cursor, chunk)   ; p: the slot's home part first
//!         if lo >= parts[p].end: p = next part; exit DONE once every part is spent
//! item:   if w == hi: goto claim
//!         if control != 0: never_ran[slot] = [w, hi); exit STOPPED
//!         <the kernel body for workitem w>          ; `ret` → w += 1, goto item
//! deopt:  n = records[slot] + 1                     ; records not yet replayed
//!         save_area[slot][n - 1] = (w, site, reason, live values); records[slot] = n
//!         never_ran[slot] = [w+1, hi)
//!         if n == records_per_slot or reason == Safepoint: exit DEOPT
//!         exit RECORDED                              ; entered again at once
//! resume: r = save_area[slot][records[slot]]; w = r.workitem; hi = w + 1
//!         goto landing[r.site]                      ; its frames into the variables
//!         <the re-entry copy of the body>           ; `ret` → exit RESUMED
//! ```
//!
//! **Re-entry.** A record of a safepoint (or of a full heap, once a
//! collection has run) at a loop header or an allocation is resumed by the
//! slot itself (`src/cpu/launch.rs` drains a slot's records, last first): the host
//! sets `reenter[slot]` with the record just past the slot's count, and the
//! slot function runs that workitem alone from a *landing*
//! (`lower/reentry.rs`), which loads the record into the variables its exit
//! stored from and jumps to the instruction. Landings at the kernel's
//! outermost loop headers sit in the hot copies of the body (checked and
//! unchecked): the workitem enters the item loop as any other, its body's
//! start dispatches on the record's site, and the resumed loop runs the
//! very code fresh workitems run — entered at its header, it stays a
//! natural loop. Every other re-entry point (an allocation, a nested or
//! inlined loop: landing there would give a loop a second entry) lands in
//! a copy of the body of its own, lowered plainly, which only the
//! optimized tier has (it costs compile time the first launch would wait
//! for). A deopt in the resumed workitem writes its record in the same
//! place.
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
//! Kernels with loops whose branches are the same for every workitem —
//! nbody's loop over the bodies, matmul's over `k` — run **lockstep
//! groups** (`cpu/lockstep.rs`, `opt::lockstep`): four workitems as one
//! SIMD body, uniform values and branches once, lane values in vectors,
//! consecutive indices as one vector load and uniform ones as a scalar load.
//! A group stores nothing before its last branch, so whatever would make a
//! workitem deopt or stop inside it (a uniform index out of bounds, a
//! divisor of 0, a safepoint at a back-edge) abandons it instead, and the
//! scalar item loop runs the same workitems and deopts or stops exactly
//! where it always does. The lanes compute each workitem's operations in
//! its own order (IEEE's lane-wise add, sub, mul, div and sqrt), so the
//! results are bit for bit the scalar code's.
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
//! [`crate::MAX_INLINE_DEPTH`] and more than [`crate::MAX_INLINED_INSTS`] inlined
//! instructions are refused with [`JitError::Unsupported`] (the kernel runs
//! on the interpreter, and the launch report says why).
//!
//! `new`/`newarray` run the shared-TLAB fast path inline (generation check,
//! one atomic add, bounds compare, header stores) and call
//! [`crate::cpu::rt::offload_alloc_slow`] for the designated refill, waiting,
//! large objects and TLAB-less policies — through a `preserve_all`
//! trampoline, so that the call, which sits inside the loops that allocate,
//! clobbers no register; `instanceof`/`checkcast` compare the header's
//! class id with the target's subclasses.
//!
//! Register pressure is the CPU device's main cost, so what only cold paths
//! use (the slot's TLAB, the size limits) is loaded where it is used rather
//! than held from the slot's entry, and after the frontend has built SSA,
//! block parameters that only pass one value around a loop are removed
//! (`crate::cpu::ssa`): the frontend leaves them when blocks are sealed at the
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

mod alloc;
mod deopt;
mod emit;
mod jit;
mod lane_call;
mod lockstep;
mod loops;
mod math;
pub(crate) mod opt;
mod reduce;
mod reentry;
pub mod rt;
mod slot_loop;
mod ssa;
mod vmath;
mod wide;

pub use jit::{CompiledKernel, CpuJit};

use crate::lower::{Walker, plan};
use crate::spec::Speculations;
use crate::{CompileOptions, JitError};
use cranelift_codegen::Context;
use cranelift_codegen::ir::{
    AbiParam, Block, FuncRef, InstBuilder, MemFlagsData, Signature, Type as ClType, Value, types,
};
use cranelift_codegen::isa::CallConv;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::JITModule;
use cranelift_module::{FuncId as ClFuncId, Linkage, Module, ModuleReloc};
use offload_deopt::DeoptMetadata;
use offload_ir::{Bci, FuncId, Kind, SiteId};
use offload_program::Program;
use std::collections::{BTreeSet, HashMap};

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
    pub(super) fn declare(module: &mut JITModule, allocates: bool) -> Result<Imports, JitError> {
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
        // Four lanes at once, in place at an address (`crate::cpu::vmath`).
        for name in ["offload_f32x4_exp", "offload_f32x4_log"] {
            funcs.insert(name, declare(module, name, &[ptr], None)?);
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
) -> Result<(ClFuncId, DeoptMetadata, BTreeSet<SiteId>), JitError> {
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
    let wide_id = if opts.quick || !wide::available() {
        None
    } else {
        define_wide(module, prog, k, name)?
    };
    let mut ctx = module.make_context();
    ctx.func.signature = sig;
    let mut fctx = FunctionBuilderContext::new();
    let (meta, reentry) = {
        let cpu = Cpu {
            builder: FunctionBuilder::new(&mut ctx.func, &mut fctx),
            ptr,
            env: Env::default(),
            math: HashMap::new(),
            exits: HashMap::new(),
            unchecked: Default::default(),
            known: Default::default(),
            loops: Vec::new(),
            allocates,
            alloc_kinds: prog.allocation_kinds(k).into(),
            resume_copy: None,
            resumable: BTreeSet::new(),
            wide: None,
        };
        let mut lw = Walker::new(cpu, prog, k, version, opts, spec)?;
        if let Some((wid, args)) = wide_id {
            let fr = module.declare_func_in_func(wid, lw.backend.builder.func);
            // As the imports below: called through its absolute address.
            lw.backend.builder.func.dfg.ext_funcs[fr].colocated = false;
            lw.backend.wide = Some((fr, args));
        }
        // In name order, so the function's text is the same every time.
        let mut funcs: Vec<_> = imports.funcs.iter().collect();
        funcs.sort_by_key(|(name, _)| **name);
        for (name, &fid) in funcs {
            let fr = module.declare_func_in_func(fid, lw.backend.builder.func);
            // The slow path's trampoline is defined in this module, but
            // cranelift-jit may place it further than a 32-bit call
            // reaches: call every function through its absolute address.
            lw.backend.builder.func.dfg.ext_funcs[fr].colocated = false;
            lw.backend.math.insert(*name, fr);
        }
        let reentry = lw.build()?;
        lw.backend.builder.seal_all_blocks();
        lw.backend.builder.finalize(module.target_config());
        (lw.meta, reentry)
    };
    crate::cpu::ssa::remove_redundant_params(&mut ctx.func);
    define(module, id, &mut ctx)?;
    // After `define`, `ctx.func` is the optimized function that was
    // lowered to machine code.
    if let Some(out) = clif {
        *out = ctx.func.display().to_string();
    }
    module.clear_context(&mut ctx);
    Ok((id, meta, reentry))
}

/// Kernel `k`'s 256-bit loop ([`wide`]) defined in `module` as
/// `{name}_wide`, with its argument table; `None` when it has none.
fn define_wide(
    module: &mut JITModule,
    prog: &Program,
    k: FuncId,
    name: &str,
) -> Result<Option<(ClFuncId, Vec<wide::WideArg>)>, JitError> {
    // The tests of an `i64` index that the proven chunk makes known (the
    // wide loop runs only there).
    let known = prog
        .analysis(k)
        .map(|a| opt::workitem_tests(prog.verified(), k, a))
        .unwrap_or_default();
    let Some(wl) = wide::compile(prog.verified(), k, &known) else {
        return Ok(None);
    };
    let ptr = module.target_config().pointer_type();
    let mut sig: Signature = module.make_signature();
    // The registers `wide` encodes for: System V's, whatever the host's
    // default convention.
    sig.call_conv = cranelift_codegen::isa::CallConv::SystemV;
    for t in [ptr, types::I64, types::I64, ptr] {
        sig.params.push(AbiParam::new(t));
    }
    sig.returns.push(AbiParam::new(types::I64));
    let codegen = |e: &dyn std::fmt::Display| JitError::Codegen(format!("{name}_wide: {e}"));
    let id = module
        .declare_function(&format!("{name}_wide"), Linkage::Local, &sig)
        .map_err(|e| codegen(&e))?;
    module
        .define_function_bytes(id, 32, &wl.code, &[])
        .map_err(|e| codegen(&e))?;
    Ok(Some((id, wl.args)))
}

/// Compile `ctx.func` and define it as `id`. The optimizing module's
/// functions are optimized first, then their constants rematerialized
/// ([`crate::cpu::ssa::remat_constants`]), then lowered without optimizing
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
    crate::cpu::ssa::remat_constants(&mut ctx.func);
    let isa = jit::lowering_isa(module.isa())?;
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
pub(crate) struct Env {
    pub(crate) ctx: Option<Value>,
    pub(crate) slot: Option<Value>,
    pub(crate) heap: Option<Value>,
    /// The heap's page table (`offload_abi::pages`), loaded on entry.
    pub(crate) pages: Option<Value>,
    pub(crate) w: Option<Variable>,
    pub(crate) hi: Option<Variable>,
    pub(crate) done: Option<Variable>,
    pub(crate) next_item: Option<Block>,
    /// In a kernel that may allocate, on a slot with a TLAB of its own:
    /// the TLAB's state, kept here rather than in memory while the slot
    /// runs (the memory word is current whenever Rust code may read it:
    /// before the shared protocol or the slow path, and when the slot
    /// returns; see [`CpuWalker::tlab_write_back`]). Unused (never written
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
    pub(crate) tlab_state: Option<Variable>,
    /// For a reducing kernel: the slot's part of the values buffer, the
    /// values filled in it and the workitem of the first (`cpu/reduce.rs`).
    pub(crate) values: Option<(Value, Variable, Variable)>,
    /// Injected safepoints: the poll counter or random state.
    pub(crate) polls: Option<Variable>,
    /// Where a deopt exit goes once its record is written (not safepoints).
    pub(crate) after_deopt: Option<Block>,
    /// In a kernel that may allocate: the slot's TLAB state word when the
    /// running workitem started (its objects lie in `[top, end)` of it),
    /// or, once the workitem cannot be reset, [`CpuWalker::nursery_off`].
    pub(crate) nursery: Option<Variable>,
    pub(crate) captures: Vec<Value>,
    /// In the re-entry copy of the body: the address of the record being
    /// re-entered (defined where the copy is entered, which dominates
    /// every landing).
    pub(crate) reentry_record: Option<Value>,
}

/// The CPU backend's state while lowering one kernel version: the
/// Cranelift function being built and what the slot loop keeps.
pub(crate) struct Cpu<'f> {
    /// The function being built.
    pub(crate) builder: FunctionBuilder<'f>,
    pub(crate) ptr: ClType,
    pub(crate) env: Env,
    /// The imported functions (math library, allocation slow path).
    pub(crate) math: HashMap<&'static str, FuncRef>,
    /// The shared deopt exit of each site in each frame copy (see
    /// [`CpuWalker::branch_to_exit`] and [`crate::lower::Frame::instance`]).
    pub(crate) exits: HashMap<(SiteId, u32), Block>,
    /// While lowering the unchecked version of the body: the kernel's
    /// array accesses that cannot fail in this chunk.
    pub(crate) unchecked: BTreeSet<Bci>,
    /// While lowering the unchecked version of the body: the compares
    /// known there (`opt::workitem_tests`), with their values.
    pub(crate) known: std::collections::BTreeMap<Bci, i32>,
    /// The kernel's loops whose accesses are checked once at entry, in a
    /// version of the loop of their own (optimized tier).
    pub(crate) loops: Vec<crate::cpu::opt::PredicatedLoop>,
    /// Whether the kernel may allocate (`plan::may_allocate`).
    pub(crate) allocates: bool,
    /// The kinds of what the kernel allocates, as page tags
    /// (`Program::allocation_kinds`): each slot has a TLAB per kind, in
    /// this order (`LaunchCtx::tlabs`).
    pub(crate) alloc_kinds: Box<[u32]>,
    /// While lowering the checked item loop of a kernel with re-entry
    /// code: the re-entry copy's entry, where its dispatch sends what it
    /// has no landing for.
    pub(crate) resume_copy: Option<Block>,
    /// The sites the function lands at so far (`slot_loop.rs`).
    pub(crate) resumable: BTreeSet<SiteId>,
    /// The kernel's 256-bit loop ([`wide`]), defined in the module, and
    /// the argument table it reads: called by the SIMD item loop.
    pub(crate) wide: Option<(FuncRef, Vec<wide::WideArg>)>,
}

/// The walker with the CPU backend.
pub(crate) type CpuWalker<'a, 'f> = Walker<'a, Cpu<'f>>;

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

impl CpuWalker<'_, '_> {
    /// The launch context, the slot and the heap base.
    pub(super) fn base_values(&self) -> (Value, Value, Value) {
        (
            self.backend.env.ctx.expect("set"),
            self.backend.env.slot.expect("set"),
            self.backend.env.heap.expect("set"),
        )
    }

    pub(super) fn var(&mut self, ty: ClType) -> Variable {
        self.backend.builder.declare_var(ty)
    }
}
