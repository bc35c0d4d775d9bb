//! What the CPU's optimizations ([`crate::cpu::opt`]) emit: SIMD bodies for
//! vectorizable item loops, and predicated loops with their entry test.

use super::{Cpu, CpuWalker};
use crate::JitError;
use crate::cpu::opt;
use crate::cpu::opt::lanes::{Lane, LaneEmit};
use crate::lower::Backend;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::immediates::Ieee32;
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Value, types};
use offload_ir::isa::BinOp;
use offload_ir::{Bci, Kind};

impl CpuWalker<'_, '_> {
    /// The bodies for workitems `w .. w + UNROLL * VECTORS_PER_GROUP`, as
    /// [`opt::VECTORS_PER_GROUP`] SIMD bodies of a lane per workitem
    /// ([`opt::vectorizable`] said it can be); then counts them and
    /// advances `w`. No deopt site is left in such a body.
    ///
    /// Each array's address for the group (`w`'s element) is computed once
    /// and the bodies' accesses are constant offsets from it — computed
    /// per body from its own `i32` index, the address took six scalar
    /// instructions per access (Cranelift cannot fold a zero-extension of
    /// `w + 4`), as many as the body's vector work for saxpy.
    pub(super) fn vector_group(&mut self) -> Result<(), JitError> {
        let (w, done) = (
            self.backend.env.w.expect("set"),
            self.backend.env.done.expect("set"),
        );
        let wv = self.backend.builder.use_var(w);
        let mut bases = std::collections::HashMap::new();
        for j in 0..i64::from(opt::VECTORS_PER_GROUP) {
            self.vector_body(wv, j, &mut bases)?;
        }
        let n = i64::from(opt::UNROLL * opt::VECTORS_PER_GROUP);
        let d = self.backend.builder.use_var(done);
        let d1 = self.backend.builder.ins().iadd_imm_s(d, n);
        self.backend.builder.def_var(done, d1);
        let w1 = self.backend.builder.ins().iadd_imm_s(wv, n);
        self.backend.builder.def_var(w, w1);
        Ok(())
    }

    /// Where the workitems from `wv` on may run as a group when fault
    /// injection (`CompileOptions::inject`) is compiled in: `hv`, or the
    /// first workitem at or after `wv` chosen to deopt if that comes first.
    /// Groups have no deopt site, so a chosen workitem runs the scalar body,
    /// where its injected deopt is, and the groups before and after it run
    /// as they would without injection. Without injection, `hv`.
    pub(super) fn group_limit(&mut self, wv: Value, hv: Value) -> Value {
        let Some(inj) = self.opts.inject else {
            return hv;
        };
        if !(0..inj.modulus).contains(&inj.remainder) {
            // `w % modulus` (with `w` from 0) never equals it: none chosen.
            return hv;
        }
        // The distance to the next chosen workitem: (remainder - w) mod
        // modulus, brought into 0 .. modulus (`srem` keeps the dividend's
        // sign).
        let r = self.backend.builder.ins().iconst(types::I64, inj.remainder);
        let d = self.backend.builder.ins().isub(r, wv);
        let m = self.backend.builder.ins().srem_imm_s(d, inj.modulus);
        let neg = self
            .backend
            .builder
            .ins()
            .icmp_imm_s(IntCC::SignedLessThan, m, 0);
        let up = self.backend.builder.ins().iadd_imm_s(m, inj.modulus);
        let dist = self.backend.builder.ins().select(neg, up, m);
        let next = self.backend.builder.ins().iadd(wv, dist);
        self.backend.builder.ins().smin(next, hv)
    }

    /// Call the kernel's 256-bit loop ([`super::wide`]) for workitems
    /// `wv ..` of the chunk `[wv, hv)`, then count what it ran and move
    /// `w` to where it stopped. Its argument table is filled here, once
    /// per call (once per chunk, unless a poll stops it).
    pub(super) fn wide_groups(&mut self, wv: Value, hv: Value) {
        use super::wide::WideArg;
        use cranelift_codegen::ir::{StackSlotData, StackSlotKind};
        let (fr, args) = self.backend.wide.clone().expect("a wide loop");
        let (w, done) = (
            self.backend.env.w.expect("set"),
            self.backend.env.done.expect("set"),
        );
        let table = self
            .backend
            .builder
            .create_sized_stack_slot(StackSlotData::new(
                StackSlotKind::ExplicitSlot,
                8 * args.len().max(1) as u32,
                3,
            ));
        let table_addr = self
            .backend
            .builder
            .ins()
            .stack_addr(self.backend.ptr, table, 0);
        for (i, arg) in args.iter().enumerate() {
            let word = match *arg {
                WideArg::Array(l) => {
                    let r = self.backend.env.captures[l - 1];
                    let base = self.obj_addr(r);
                    self.backend.builder.ins().iadd_imm_s(base, 8)
                }
                WideArg::Scalar(l) => {
                    let k = self.v.func(self.cur.func).locals[l].ty.kind();
                    let c = self.backend.env.captures[l - 1];
                    self.pack_raw(k, c)
                }
                WideArg::Bits(b) => self.backend.builder.ins().iconst(types::I64, i64::from(b)),
            };
            let flags = MemFlagsData::new().with_notrap();
            self.backend
                .builder
                .ins()
                .store(flags, word, table_addr, 8 * i as i32);
        }
        let control = self.control_ptr();
        let call = self
            .backend
            .builder
            .ins()
            .call(fr, &[table_addr, wv, hv, control]);
        let w1 = self.backend.builder.inst_results(call)[0];
        let ran = self.backend.builder.ins().isub(w1, wv);
        let d = self.backend.builder.use_var(done);
        let d1 = self.backend.builder.ins().iadd(d, ran);
        self.backend.builder.def_var(done, d1);
        self.backend.builder.def_var(w, w1);
    }

    /// The `j`-th SIMD body of a group starting at workitem `wv`: lanes
    /// `wv + UNROLL j ..`; `bases` holds each array's address of element
    /// `wv`, made on first use. The body is read off the bytecode by the
    /// one walk of SIMD bodies ([`opt::lanes::walk`]).
    fn vector_body(
        &mut self,
        wv: Value,
        j: i64,
        bases: &mut std::collections::HashMap<Value, Value>,
    ) -> Result<(), JitError> {
        let f = self.v.func(self.cur.func);
        let lanes = i64::from(opt::UNROLL);
        let known = std::mem::take(&mut self.backend.known);
        let mut body = ClBody {
            lw: self,
            wv,
            // Byte offset of this body's first lane from the group's
            // element.
            at: (j * lanes * 4) as i32,
            bases,
        };
        let walked = opt::lanes::walk(f, None, &known, &mut body);
        body.lw.backend.known = known;
        walked.map_err(|bci| {
            JitError::Codegen(format!("vector body: unexpected operands at bci {bci}"))
        })
    }

    /// The entry of predicated loop `lp` (the block made for its header,
    /// which every entering edge targets): evaluate the predicate and go to
    /// a version of the loop without the covered accesses' checks when it
    /// holds, and to the checked version otherwise. Lowers the unchecked
    /// version; the checked one is lowered by the caller, from the header,
    /// which is left mapped to it (so its back-edges stay in it).
    pub(super) fn predicated_loop(
        &mut self,
        lp: &opt::PredicatedLoop,
        terminated: bool,
    ) -> Result<(), JitError> {
        let h = lp.header;
        let entry = self.cur.blocks[&h];
        if !terminated {
            self.backend.builder.ins().jump(entry, &[]);
        }
        self.backend.builder.switch_to_block(entry);
        let ok = self.loop_predicate(lp);
        let (fast, checked) = (
            self.backend.builder.create_block(),
            self.backend.builder.create_block(),
        );
        self.backend.builder.ins().brif(ok, fast, &[], checked, &[]);
        let added: Vec<Bci> = lp
            .accesses
            .iter()
            .map(|a| a.0)
            .filter(|&b| self.backend.unchecked.insert(b))
            .collect();
        let res =
            self.unchecked_loop_copies((lp.header, lp.last), opt::loop_unroll(lp), fast, None);
        for b in added {
            self.backend.unchecked.remove(&b);
        }
        res?;
        self.cur.blocks.insert(h, checked);
        Ok(())
    }

    /// Whether every access `lp` covers is in bounds for every value its
    /// induction variable takes, evaluated where the loop is entered
    /// ([`opt::loop_predicates`] says why the two ends suffice).
    pub(super) fn loop_predicate(&mut self, lp: &opt::PredicatedLoop) -> Value {
        let k0 = self
            .backend
            .builder
            .use_var(self.cur.locals[lp.iv as usize]);
        let k0 = self.backend.builder.ins().sextend(types::I64, k0);
        let n = self.eval_inv(&lp.bound);
        let n = self.backend.builder.ins().sextend(types::I64, n);
        let idle = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::SignedGreaterThanOrEqual, k0, n);
        let kmax = self.backend.builder.ins().iadd_imm_s(n, -1);
        // k never wraps: bound - 1 + step <= i32::MAX.
        let top = self.backend.builder.ins().iadd_imm_s(kmax, lp.step);
        let mut ok = self.backend.builder.ins().icmp_imm_s(
            IntCC::SignedLessThanOrEqual,
            top,
            i64::from(i32::MAX),
        );
        for (_, arr, form) in &lp.accesses {
            let coef = self.eval_inv(&form.coef);
            let coef = self.backend.builder.ins().sextend(types::I64, coef);
            let off = self.eval_inv(&form.off);
            let off = self.backend.builder.ins().sextend(types::I64, off);
            let at0 = self.backend.builder.ins().imul(coef, k0);
            let at0 = self.backend.builder.ins().iadd(at0, off);
            let at1 = self.backend.builder.ins().imul(coef, kmax);
            let at1 = self.backend.builder.ins().iadd(at1, off);
            let lo = self.backend.builder.ins().smin(at0, at1);
            let hi = self.backend.builder.ins().smax(at0, at1);
            let r = self.backend.builder.use_var(self.cur.locals[*arr as usize]);
            let base = self.obj_addr(r);
            let len = self.array_len(base);
            let len = self.backend.builder.ins().uextend(types::I64, len);
            let ge0 = self
                .backend
                .builder
                .ins()
                .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, lo, 0);
            let lt = self
                .backend
                .builder
                .ins()
                .icmp(IntCC::SignedLessThan, hi, len);
            let fits = self.backend.builder.ins().band(ge0, lt);
            ok = self.backend.builder.ins().band(ok, fits);
        }
        self.backend.builder.ins().bor(ok, idle)
    }

    /// A loop-invariant expression's value, as the bytecode computes it.
    pub(super) fn eval_inv(&mut self, e: &opt::Inv) -> Value {
        use opt::Inv;
        match e {
            Inv::Const(c) => self.backend.builder.ins().iconst(types::I32, i64::from(*c)),
            Inv::Local(l) => self.backend.builder.use_var(self.cur.locals[*l as usize]),
            Inv::Add(x, y) | Inv::Sub(x, y) | Inv::Mul(x, y) => {
                let (a, b) = (self.eval_inv(x), self.eval_inv(y));
                match e {
                    Inv::Add(..) => self.backend.builder.ins().iadd(a, b),
                    Inv::Sub(..) => self.backend.builder.ins().isub(a, b),
                    _ => self.backend.builder.ins().imul(a, b),
                }
            }
        }
    }
}

/// A 128-bit SIMD body in Cranelift IR: a uniform value is a scalar
/// (splat where it meets a lane value), a lane value an `f32x4` or `i32x4`.
struct ClBody<'l, 'a, 'b> {
    lw: &'l mut CpuWalker<'a, 'b>,
    /// The group's first workitem.
    wv: Value,
    /// This body's byte offset from the group's element.
    at: i32,
    /// Each array's address of element `wv`.
    bases: &'l mut std::collections::HashMap<Value, Value>,
}

impl ClBody<'_, '_, '_> {
    fn vt(k: Kind) -> types::Type {
        if k == Kind::F32 {
            types::F32X4
        } else {
            types::I32X4
        }
    }

    /// `x` as a vector of kind `k`.
    fn vector(&mut self, k: Kind, x: Lane<Value, Value>) -> Option<Value> {
        match x {
            Lane::Uniform(s, _) => Some(self.lw.backend.builder.ins().splat(Self::vt(k), s)),
            Lane::Varying(v, _) => Some(v),
            _ => None,
        }
    }

    /// The group's element `wv` of array `r`: `wv` is below 2^31 (the
    /// kernel narrows it to its `i32` index, proven in bounds).
    fn elem(&mut self, r: Value) -> Value {
        if let Some(&a) = self.bases.get(&r) {
            return a;
        }
        let base = self.lw.obj_addr(r);
        let scaled = self.lw.backend.builder.ins().ishl_imm_u(self.wv, 2);
        let a = self.lw.backend.builder.ins().iadd(base, scaled);
        let a = self.lw.backend.builder.ins().iadd_imm_s(a, 8);
        self.bases.insert(r, a);
        a
    }
}

impl LaneEmit for ClBody<'_, '_, '_> {
    type V = Value;
    type A = Value;

    fn param(&mut self, local: usize, _k: Kind) -> Option<Value> {
        self.lw.backend.env.captures.get(local - 1).copied()
    }

    fn array(&mut self, local: usize) -> Option<Value> {
        self.lw.backend.env.captures.get(local - 1).copied()
    }

    fn zero(&mut self, k: Kind) -> Option<Value> {
        Some(self.lw.zero(k))
    }

    fn constant(&mut self, k: Kind, bits: u32) -> Option<Value> {
        let ins = self.lw.backend.builder.ins();
        Some(if k == Kind::F32 {
            ins.f32const(Ieee32::with_bits(bits))
        } else {
            ins.iconst(types::I32, i64::from(bits as i32))
        })
    }

    fn binary(
        &mut self,
        k: Kind,
        op: BinOp,
        a: Lane<Value, Value>,
        b: Lane<Value, Value>,
    ) -> Option<Lane<Value, Value>> {
        // The scalar primitive: Cranelift's lane-wise forms are the same
        // instructions on vector types.
        if let (Lane::Uniform(x, _), Lane::Uniform(y, _)) = (a, b) {
            return Some(Lane::Uniform(Cpu::binary(self.lw, op, k, x, y), k));
        }
        let (x, y) = (self.vector(k, a)?, self.vector(k, b)?);
        Some(Lane::Varying(Cpu::binary(self.lw, op, k, x, y), k))
    }

    fn load(&mut self, k: Kind, arr: Value) -> Option<Value> {
        let a = self.elem(arr);
        let flags = MemFlagsData::new().with_notrap();
        Some(
            self.lw
                .backend
                .builder
                .ins()
                .load(Self::vt(k), flags, a, self.at),
        )
    }

    fn store(&mut self, k: Kind, arr: Value, x: Lane<Value, Value>) -> Option<()> {
        let x = self.vector(k, x)?;
        let a = self.elem(arr);
        let flags = MemFlagsData::new().with_notrap();
        self.lw.backend.builder.ins().store(flags, x, a, self.at);
        Some(())
    }
}
