//! The walker's primitives in Cranelift IR ([`Backend`] for [`Cpu`]).

use super::{Cpu, CpuWalker, cl_type, invariant, trusted};
use crate::Injection;
use crate::lower::plan::{self, TypeTest};
use crate::lower::{Backend, BinOp, CmpOp, Const, Exit, UnOp};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::immediates::{Ieee32, Ieee64};
use cranelift_codegen::ir::{AtomicRmwOp, BlockArg, InstBuilder, Value, types};
use cranelift_frontend::Variable;
use offload_abi::control;
use offload_ir::{Bci, Kind, Type};

impl CpuWalker<'_, '_> {
    /// Address of the object `r` (non-null, checked by the caller).
    pub(super) fn obj_addr(&mut self, r: Value) -> Value {
        let heap = self.backend.env.heap.expect("set");
        let r64 = self.backend.builder.ins().uextend(types::I64, r);
        let off = self.backend.builder.ins().ishl_imm_u(r64, 3);
        self.backend.builder.ins().iadd(heap, off)
    }

    /// The length word of the array whose header is at `base` (`i32`, at
    /// byte 4 of the header; null's header, heap word 0, reads as 0). It
    /// never changes, so the load may be hoisted out of loops.
    pub(super) fn array_len(&mut self, base: Value) -> Value {
        self.backend
            .builder
            .ins()
            .load(types::I32, invariant(), base, 4)
    }

    /// Whether the class id `tag` is one of `ids`, as an `i8` truth value.
    fn tag_in(&mut self, tag: Value, ids: &[u32]) -> Value {
        let mut acc = self.backend.builder.ins().iconst(types::I8, 0);
        for &id in ids {
            let eq = self
                .backend
                .builder
                .ins()
                .icmp_imm_s(IntCC::Equal, tag, i64::from(id));
            acc = self.backend.builder.ins().bor(acc, eq);
        }
        acc
    }

    /// The class id in the header of the object `r` (`i32`; `r` may be
    /// null: word 0 of the heap is reserved and readable).
    pub(super) fn header_tag(&mut self, r: Value) -> Value {
        let base = self.obj_addr(r);
        self.backend
            .builder
            .ins()
            .load(types::I32, trusted(), base, 0)
    }

    /// The tag of the page of the object `r` (`i32`,
    /// `offload_abi::pages`): a class id, or negative where the page names
    /// no class. `r` may be null (page 0's tag is that of the first
    /// objects).
    pub(super) fn page_tag(&mut self, r: Value) -> Value {
        let (ctx, _, _) = self.base_values();
        let pages = match self.backend.env.pages {
            Some(p) => p,
            None => self.backend.builder.ins().load(
                self.backend.ptr,
                invariant(),
                ctx,
                offload_abi::cpu::offsets::PAGES,
            ),
        };
        let b = &mut self.backend.builder;
        let r64 = b.ins().uextend(types::I64, r);
        let page = b
            .ins()
            .ushr_imm_u(r64, i64::from(offload_abi::pages::PAGE_SHIFT));
        let off = b
            .ins()
            .imul_imm_s(page, i64::from(offload_abi::pages::TAG_BYTES));
        let at = b.ins().iadd(pages, off);
        // A page's tag does not change while an object that exists lies on
        // it (a carve tags only pages above eden's top, and a collection
        // runs with no launch): the load may be hoisted and shared, unlike
        // the header's, which stores into the object's fields may alias.
        b.ins().load(types::I32, invariant(), at, 0)
    }

    /// The class id of the object `r` (`i32`): the tag of its page
    /// ([`CpuWalker::page_tag`]), or its header's when the page is mixed
    /// or the options say so (by default the CPU reads headers:
    /// [`crate::Dispatch::Auto`]). `r` may be null.
    pub(super) fn class_of(&mut self, r: Value) -> Value {
        if !self.opts.dispatch.by_address(false) {
            return self.header_tag(r);
        }
        let tag = self.page_tag(r);
        let b = &mut self.backend.builder;
        let mixed = b.ins().icmp_imm_s(IntCC::SignedLessThan, tag, 0);
        let header = b.create_block();
        let done = b.create_block();
        // Mixed pages hold a launch's own objects: off the hot path.
        b.set_cold_block(header);
        b.append_block_param(done, types::I32);
        b.ins().brif(mixed, header, &[], done, &[tag.into()]);
        b.switch_to_block(header);
        let tag = self.header_tag(r);
        let b = &mut self.backend.builder;
        b.ins().jump(done, &[tag.into()]);
        b.switch_to_block(done);
        b.block_params(done)[0]
    }

    /// Whether the object `r` is an instance of `ty`, as an `i8` truth
    /// value: a class by [`CpuWalker::class_of`], an array type from the
    /// header (`r` may be null: word 0 of the heap is reserved and
    /// readable, and the caller masks the answer).
    fn type_test(&mut self, r: Value, ty: Type) -> Value {
        let test = plan::type_test(self.prog, ty);
        let tag = if let TypeTest::Classes(_) = test {
            self.class_of(r)
        } else {
            self.header_tag(r)
        };
        match test {
            TypeTest::Classes(ids) => self.tag_in(tag, &ids),
            TypeTest::Tag(want) => {
                self.backend
                    .builder
                    .ins()
                    .icmp_imm_s(IntCC::Equal, tag, i64::from(want as i32))
            }
            TypeTest::Always => self.backend.builder.ins().iconst(types::I8, 1),
            TypeTest::Never => self.backend.builder.ins().iconst(types::I8, 0),
        }
    }

    /// A call of the imported function `name`; its result.
    pub(super) fn call_math(&mut self, name: &'static str, args: &[Value]) -> Value {
        let fr = self.backend.math[name];
        let call = self.backend.builder.ins().call(fr, args);
        self.backend.builder.inst_results(call)[0]
    }

    /// `a / b` or `a % b` (`rem`) of kind `k`, `b` not zero: `MIN / -1`
    /// wraps (and `MIN % -1` is 0) instead of trapping.
    fn int_div(&mut self, k: Kind, rem: bool, a: Value, b: Value) -> Value {
        let t = cl_type(k);
        let m1 = self.backend.builder.ins().icmp_imm_s(IntCC::Equal, b, -1);
        let one = self.backend.builder.ins().iconst(t, 1);
        let safe = self.backend.builder.ins().select(m1, one, b);
        if rem {
            let r = self.backend.builder.ins().srem(a, safe);
            let z = self.backend.builder.ins().iconst(t, 0);
            self.backend.builder.ins().select(m1, z, r)
        } else {
            let q = self.backend.builder.ins().sdiv(a, safe);
            let neg = self.backend.builder.ins().ineg(a);
            self.backend.builder.ins().select(m1, neg, q)
        }
    }
}

/// The name of the runtime's math function for `op` on kind `k`.
fn math_name(k: Kind, op: &str) -> &'static str {
    let f64 = k == Kind::F64;
    match op {
        "rem" if f64 => "offload_f64_rem",
        "rem" => "offload_f32_rem",
        "pow" if f64 => "offload_f64_pow",
        "pow" => "offload_f32_pow",
        "exp" if f64 => "offload_f64_exp",
        "exp" => "offload_f32_exp",
        "log" if f64 => "offload_f64_log",
        "log" => "offload_f32_log",
        "sin" if f64 => "offload_f64_sin",
        "sin" => "offload_f32_sin",
        "cos" if f64 => "offload_f64_cos",
        "cos" => "offload_f32_cos",
        "fma" if f64 => "offload_f64_fma",
        _ => "offload_f32_fma",
    }
}

pub(super) fn int_cc(op: CmpOp) -> IntCC {
    match op {
        CmpOp::Eq => IntCC::Equal,
        CmpOp::Ne => IntCC::NotEqual,
        CmpOp::Lt => IntCC::SignedLessThan,
        CmpOp::Le => IntCC::SignedLessThanOrEqual,
        CmpOp::Gt => IntCC::SignedGreaterThan,
        CmpOp::Ge => IntCC::SignedGreaterThanOrEqual,
    }
}

pub(super) fn float_cc(op: CmpOp) -> FloatCC {
    match op {
        CmpOp::Eq => FloatCC::Equal,
        CmpOp::Ne => FloatCC::NotEqual,
        CmpOp::Lt => FloatCC::LessThan,
        CmpOp::Le => FloatCC::LessThanOrEqual,
        CmpOp::Gt => FloatCC::GreaterThan,
        CmpOp::Ge => FloatCC::GreaterThanOrEqual,
    }
}

impl<'f> Backend for Cpu<'f> {
    type Var = Variable;
    type Val = Value;
    type Block = cranelift_codegen::ir::Block;
    type Join = cranelift_codegen::ir::Block;

    fn local_var(w: &mut CpuWalker<'_, 'f>, _instance: u32, _index: usize, kind: Kind) -> Variable {
        w.backend.builder.declare_var(cl_type(kind))
    }

    fn stack_var(w: &mut CpuWalker<'_, 'f>, _instance: u32, _depth: usize, kind: Kind) -> Variable {
        w.backend.builder.declare_var(cl_type(kind))
    }

    fn use_var(w: &mut CpuWalker<'_, 'f>, var: &Variable, _kind: Kind) -> Value {
        w.backend.builder.use_var(*var)
    }

    fn def_var(w: &mut CpuWalker<'_, 'f>, var: &Variable, _kind: Kind, x: Value) {
        w.backend.builder.def_var(*var, x);
    }

    fn stable(_w: &mut CpuWalker<'_, 'f>, _kind: Kind, x: Value) -> Value {
        x
    }

    fn constant(w: &mut CpuWalker<'_, 'f>, c: Const) -> Value {
        let ins = w.backend.builder.ins();
        match c {
            Const::I32(v) => ins.iconst(types::I32, i64::from(v)),
            Const::I64(v) => ins.iconst(types::I64, v),
            Const::F32(bits) => ins.f32const(Ieee32::with_bits(bits)),
            Const::F64(bits) => ins.f64const(Ieee64::with_bits(bits)),
            Const::Null => ins.iconst(types::I32, 0),
        }
    }

    fn increment(w: &mut CpuWalker<'_, 'f>, var: &Variable, _kind: Kind, delta: i32) {
        let x = w.backend.builder.use_var(*var);
        let r = w.backend.builder.ins().iadd_imm_s(x, i64::from(delta));
        w.backend.builder.def_var(*var, r);
    }

    fn leader_block(w: &mut CpuWalker<'_, 'f>, _instance: u32, _bci: Bci) -> Self::Block {
        w.backend.builder.create_block()
    }

    fn new_block(w: &mut CpuWalker<'_, 'f>) -> Self::Block {
        w.backend.builder.create_block()
    }

    fn switch_to(w: &mut CpuWalker<'_, 'f>, b: &Self::Block) {
        w.backend.builder.switch_to_block(*b);
    }

    fn enter_block(w: &mut CpuWalker<'_, 'f>, b: &Self::Block, terminated: bool) {
        if !terminated {
            w.backend.builder.ins().jump(*b, &[]);
        }
        w.backend.builder.switch_to_block(*b);
    }

    fn jump(w: &mut CpuWalker<'_, 'f>, b: &Self::Block) {
        w.backend.builder.ins().jump(*b, &[]);
    }

    fn cond_branch(
        w: &mut CpuWalker<'_, 'f>,
        x: Value,
        jumps_on_nonzero: bool,
        dest: &Self::Block,
        fall: &Self::Block,
    ) {
        // brif jumps on non-zero.
        if jumps_on_nonzero {
            w.backend.builder.ins().brif(x, *dest, &[], *fall, &[]);
        } else {
            w.backend.builder.ins().brif(x, *fall, &[], *dest, &[]);
        }
    }

    fn branch_if(
        w: &mut CpuWalker<'_, 'f>,
        x: Value,
        jumps_on_nonzero: bool,
        when: bool,
        to: &Self::Block,
    ) {
        let out = w.backend.builder.create_block();
        let (nonzero, zero) = if jumps_on_nonzero == when {
            (*to, out)
        } else {
            (out, *to)
        };
        w.backend.builder.ins().brif(x, nonzero, &[], zero, &[]);
        w.backend.builder.switch_to_block(out);
    }

    fn branch_on(w: &mut CpuWalker<'_, 'f>, cond: Value, when: bool, to: &Self::Block) {
        let out = w.backend.builder.create_block();
        if when {
            w.backend.builder.ins().brif(cond, *to, &[], out, &[]);
        } else {
            w.backend.builder.ins().brif(cond, out, &[], *to, &[]);
        }
        w.backend.builder.switch_to_block(out);
    }

    fn guard(w: &mut CpuWalker<'_, 'f>, cond: Value) -> Self::Block {
        let take = w.backend.builder.create_block();
        let next = w.backend.builder.create_block();
        w.backend.builder.ins().brif(cond, take, &[], next, &[]);
        w.backend.builder.switch_to_block(take);
        next
    }

    fn known_compare(w: &CpuWalker<'_, 'f>, bci: Bci) -> Option<i32> {
        w.backend.known.get(&bci).copied()
    }

    fn ret_kernel(w: &mut CpuWalker<'_, 'f>, value: Option<Value>) {
        if let Some(v) = value {
            w.append_value(v);
        }
        let next = w.backend.env.next_item.expect("set");
        w.backend.builder.ins().jump(next, &[]);
    }

    fn join(
        w: &mut CpuWalker<'_, 'f>,
        ret: Option<Kind>,
        _virtual_call: bool,
        _n: u32,
    ) -> Self::Join {
        let b = w.backend.builder.create_block();
        if let Some(k) = ret {
            w.backend.builder.append_block_param(b, cl_type(k));
        }
        b
    }

    fn jump_join(w: &mut CpuWalker<'_, 'f>, j: &Self::Join, result: Option<Value>) {
        let args: Vec<BlockArg> = result.into_iter().map(Into::into).collect();
        w.backend.builder.ins().jump(*j, &args);
    }

    fn enter_join(w: &mut CpuWalker<'_, 'f>, j: &Self::Join) -> Option<Value> {
        w.backend.builder.switch_to_block(*j);
        w.backend.builder.block_params(*j).first().copied()
    }

    fn deopt(w: &mut CpuWalker<'_, 'f>, exit: Exit<Variable>) {
        w.deopt_at(exit);
    }

    fn deopt_if(w: &mut CpuWalker<'_, 'f>, cond: Value, exit: Exit<Variable>) {
        w.deopt_when(cond, exit);
    }

    fn safepoint_requested(w: &mut CpuWalker<'_, 'f>, _work: u32) -> Value {
        let cw = w.control_word();
        let mut sp = w
            .backend
            .builder
            .ins()
            .band_imm_u(cw, i64::from(control::SAFEPOINT));
        if let Some(si) = w.opts.safepoints {
            let var = w.backend.env.polls.expect("set with the option");
            let x = w.backend.builder.use_var(var);
            let next = if si.seed.is_some() {
                // xorshift64
                let a = w.backend.builder.ins().ishl_imm_u(x, 13);
                let x = w.backend.builder.ins().bxor(x, a);
                let a = w.backend.builder.ins().ushr_imm_u(x, 7);
                let x = w.backend.builder.ins().bxor(x, a);
                let a = w.backend.builder.ins().ishl_imm_u(x, 17);
                w.backend.builder.ins().bxor(x, a)
            } else {
                w.backend.builder.ins().iadd_imm_s(x, 1)
            };
            w.backend.builder.def_var(var, next);
            let at = w.slot_words();
            w.backend.builder.ins().store(
                trusted(),
                next,
                at,
                offload_abi::cpu::offsets::SLOT_INJECT_STATE,
            );
            let r = w
                .backend
                .builder
                .ins()
                .urem_imm_u(next, si.every.max(1) as i64);
            let hit = w.backend.builder.ins().icmp_imm_s(IntCC::Equal, r, 0);
            let hit = w.backend.builder.ins().uextend(types::I32, hit);
            sp = w.backend.builder.ins().bor(sp, hit);
        }
        sp
    }

    fn reentry_value(w: &mut CpuWalker<'_, 'f>, word: u32, kind: Kind) -> Value {
        let rec = w
            .backend
            .env
            .reentry_record
            .expect("set in a re-entry copy");
        let raw = w
            .backend
            .builder
            .ins()
            .load(types::I64, trusted(), rec, (word * 8) as i32);
        w.unpack_raw(kind, raw)
    }

    fn injected(w: &mut CpuWalker<'_, 'f>, inj: Injection) -> Value {
        let x = w.backend.builder.use_var(w.backend.env.w.expect("set"));
        let m = w.backend.builder.ins().srem_imm_s(x, inj.modulus);
        w.backend
            .builder
            .ins()
            .icmp_imm_s(IntCC::Equal, m, inj.remainder)
    }

    fn is_null(w: &mut CpuWalker<'_, 'f>, r: Value) -> Value {
        w.backend.builder.ins().icmp_imm_s(IntCC::Equal, r, 0)
    }

    fn is_zero(w: &mut CpuWalker<'_, 'f>, _k: Kind, x: Value) -> Value {
        w.backend.builder.ins().icmp_imm_s(IntCC::Equal, x, 0)
    }

    fn is_negative(w: &mut CpuWalker<'_, 'f>, x: Value) -> Value {
        w.backend
            .builder
            .ins()
            .icmp_imm_s(IntCC::SignedLessThan, x, 0)
    }

    fn host_math(_w: &mut CpuWalker<'_, 'f>, _op: UnOp, _k: Kind, _x: Value) -> Option<Value> {
        // libm covers every argument here.
        None
    }

    fn binary(w: &mut CpuWalker<'_, 'f>, op: BinOp, k: Kind, a: Value, b: Value) -> Value {
        let float = matches!(k, Kind::F32 | Kind::F64);
        let ins = w.backend.builder.ins();
        match op {
            BinOp::Add if float => ins.fadd(a, b),
            BinOp::Add => ins.iadd(a, b),
            BinOp::Sub if float => ins.fsub(a, b),
            BinOp::Sub => ins.isub(a, b),
            BinOp::Mul if float => ins.fmul(a, b),
            BinOp::Mul => ins.imul(a, b),
            BinOp::Div if float => ins.fdiv(a, b),
            BinOp::Div => w.int_div(k, false, a, b),
            BinOp::Rem if float => w.call_math(math_name(k, "rem"), &[a, b]),
            BinOp::Rem => w.int_div(k, true, a, b),
            BinOp::And => ins.band(a, b),
            BinOp::Or => ins.bor(a, b),
            BinOp::Xor => ins.bxor(a, b),
            // Cranelift masks shift counts to the width, as the bytecode
            // does.
            BinOp::Shl => ins.ishl(a, b),
            BinOp::Shr => ins.sshr(a, b),
            BinOp::Ushr => ins.ushr(a, b),
            BinOp::Min if float => ins.fmin(a, b),
            BinOp::Min => ins.smin(a, b),
            BinOp::Max if float => ins.fmax(a, b),
            BinOp::Max => ins.smax(a, b),
            BinOp::Pow => w.call_math(math_name(k, "pow"), &[a, b]),
        }
    }

    fn unary(w: &mut CpuWalker<'_, 'f>, op: UnOp, k: Kind, a: Value) -> Value {
        let float = matches!(k, Kind::F32 | Kind::F64);
        match op {
            UnOp::Neg if float => w.backend.builder.ins().fneg(a),
            UnOp::Neg => w.backend.builder.ins().ineg(a),
            UnOp::Abs if float => w.backend.builder.ins().fabs(a),
            UnOp::Abs => {
                let neg = w.backend.builder.ins().ineg(a);
                let is_neg = w
                    .backend
                    .builder
                    .ins()
                    .icmp_imm_s(IntCC::SignedLessThan, a, 0);
                w.backend.builder.ins().select(is_neg, neg, a)
            }
            UnOp::Sqrt => w.backend.builder.ins().sqrt(a),
            UnOp::Floor => w.backend.builder.ins().floor(a),
            UnOp::Ceil => w.backend.builder.ins().ceil(a),
            UnOp::Exp => w.call_math(math_name(k, "exp"), &[a]),
            UnOp::Log => w.call_math(math_name(k, "log"), &[a]),
            UnOp::Sin => w.call_math(math_name(k, "sin"), &[a]),
            UnOp::Cos => w.call_math(math_name(k, "cos"), &[a]),
        }
    }

    fn fma(w: &mut CpuWalker<'_, 'f>, k: Kind, a: Value, b: Value, c: Value) -> Value {
        w.call_math(math_name(k, "fma"), &[a, b, c])
    }

    fn compare(w: &mut CpuWalker<'_, 'f>, op: CmpOp, k: Kind, a: Value, b: Value) -> Value {
        let c = match k {
            Kind::F32 | Kind::F64 => w.backend.builder.ins().fcmp(float_cc(op), a, b),
            _ => w.backend.builder.ins().icmp(int_cc(op), a, b),
        };
        w.backend.builder.ins().uextend(types::I32, c)
    }

    fn convert(w: &mut CpuWalker<'_, 'f>, from: Kind, to: Kind, a: Value) -> Value {
        let t = cl_type(to);
        let ins = w.backend.builder.ins();
        match (from, to) {
            (Kind::I32, Kind::I64) => ins.sextend(t, a),
            (Kind::I64, Kind::I32) => ins.ireduce(t, a),
            (Kind::I32 | Kind::I64, _) => ins.fcvt_from_sint(t, a),
            (Kind::F32, Kind::F64) => ins.fpromote(t, a),
            (Kind::F64, Kind::F32) => ins.fdemote(t, a),
            _ => ins.fcvt_to_sint_sat(t, a),
        }
    }

    fn obj_addr(w: &mut CpuWalker<'_, 'f>, r: Value) -> Value {
        w.obj_addr(r)
    }

    fn array_len(w: &mut CpuWalker<'_, 'f>, base: Value) -> Value {
        w.array_len(base)
    }

    fn class_tag(w: &mut CpuWalker<'_, 'f>, r: Value) -> Value {
        w.class_of(r)
    }

    fn header_tag(w: &mut CpuWalker<'_, 'f>, r: Value) -> Value {
        w.header_tag(r)
    }

    /// By address, a virtual call tests its receiver's page tag alone on
    /// the hot path: on a CPU, [`CpuWalker::class_of`]'s test of the tag's
    /// sign in front (its header's load in a cold block) made raycast take
    /// 1.23–1.26x the time of dispatch by header, testing the tag first
    /// 1.06–1.07x (BENCHMARKS.md).
    fn page_tag(w: &mut CpuWalker<'_, 'f>, r: Value) -> Option<Value> {
        w.opts.dispatch.by_address(false).then(|| w.page_tag(r))
    }

    fn tag_in(w: &mut CpuWalker<'_, 'f>, tag: Value, ids: &[u32]) -> Value {
        w.tag_in(tag, ids)
    }

    fn elem_addr(
        w: &mut CpuWalker<'_, 'f>,
        r: Value,
        idx: Value,
        size: u32,
        bci: Bci,
        _from_top: usize,
    ) -> Value {
        w.elem_addr(r, idx, i64::from(size), bci)
    }

    fn field_addr(w: &mut CpuWalker<'_, 'f>, base: Value, off: u32) -> Value {
        w.backend.builder.ins().iadd_imm_s(base, i64::from(off))
    }

    fn load(w: &mut CpuWalker<'_, 'f>, k: Kind, addr: Value, off: u32) -> Value {
        w.backend
            .builder
            .ins()
            .load(cl_type(k), trusted(), addr, off as i32)
    }

    fn store(w: &mut CpuWalker<'_, 'f>, _k: Kind, addr: Value, off: u32, x: Value) {
        w.backend
            .builder
            .ins()
            .store(trusted(), x, addr, off as i32);
    }

    fn write_barrier(w: &mut CpuWalker<'_, 'f>, r: Value, x: Value) {
        w.write_barrier(r, x);
    }

    fn atomic_add(w: &mut CpuWalker<'_, 'f>, k: Kind, addr: Value, x: Value) -> Value {
        w.backend
            .builder
            .ins()
            .atomic_rmw(cl_type(k), trusted(), AtomicRmwOp::Add, addr, x)
    }

    fn private_add(w: &mut CpuWalker<'_, 'f>, k: Kind, addr: Value, x: Value) -> Value {
        let b = &mut w.backend.builder;
        let old = b.ins().load(cl_type(k), trusted(), addr, 0);
        let new = b.ins().iadd(old, x);
        b.ins().store(trusted(), new, addr, 0);
        old
    }

    fn cmpxchg(
        w: &mut CpuWalker<'_, 'f>,
        _k: Kind,
        addr: Value,
        expected: Value,
        new: Value,
    ) -> Value {
        w.backend
            .builder
            .ins()
            .atomic_cas(trusted(), addr, expected, new)
    }

    fn instance_of(w: &mut CpuWalker<'_, 'f>, r: Value, ty: Type) -> Value {
        let yes = w.type_test(r, ty);
        let nonnull = w.backend.builder.ins().icmp_imm_s(IntCC::NotEqual, r, 0);
        let both = w.backend.builder.ins().band(yes, nonnull);
        w.backend.builder.ins().uextend(types::I32, both)
    }

    fn cast_fails(w: &mut CpuWalker<'_, 'f>, r: Value, ty: Type) -> Value {
        let yes = w.type_test(r, ty);
        let nonnull = w.backend.builder.ins().icmp_imm_s(IntCC::NotEqual, r, 0);
        let no = w.backend.builder.ins().bnot(yes);
        w.backend.builder.ins().band(no, nonnull)
    }

    fn new_object(w: &mut CpuWalker<'_, 'f>, bci: Bci, tag: u32, size: u32) -> Value {
        let class = tag;
        let tag = w.backend.builder.ins().iconst(types::I32, i64::from(tag));
        let word1 = w.backend.builder.ins().iconst(types::I32, i64::from(size));
        let words = w
            .backend
            .builder
            .ins()
            .iconst(types::I64, i64::from(size / 8));
        // The page tag of an instance is its class's global id.
        w.allocate(bci, class, tag, word1, words)
    }

    fn new_array(w: &mut CpuWalker<'_, 'f>, bci: Bci, tag: u32, esize: u32, len: Value) -> Value {
        let tag = w
            .backend
            .builder
            .ins()
            .iconst(types::I32, i64::from(tag as i32));
        // words = (8 + len * esize + 7) / 8
        let len64 = w.backend.builder.ins().uextend(types::I64, len);
        let bytes = w.backend.builder.ins().imul_imm_s(len64, i64::from(esize));
        let bytes = w.backend.builder.ins().iadd_imm_s(bytes, 15);
        let words = w.backend.builder.ins().ushr_imm_u(bytes, 3);
        w.allocate(bci, offload_abi::pages::ARRAYS, tag, len, words)
    }
}
