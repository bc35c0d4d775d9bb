//! Calls in lockstep groups: a lane function ([`crate::cpu::opt::lane_call`])
//! inlined on vectors, a lane per workitem, with every block run under a
//! mask of the lanes whose path reaches it — full if-conversion of an
//! acyclic body. A branch splits its block's mask between its two targets;
//! a block's locals are, lane by lane, those of the edge that brought the
//! lane there (a `bitselect` by the edge's mask); a `ret` contributes its
//! value to the lanes of its block's mask. Every lane follows one path, so
//! the masks of a block's incoming edges are disjoint and each lane's
//! result is what its own path computed.
//!
//! `exp` and `log` of lanes are libm's steps inline on vectors, with the
//! constants and ranges of `crate::cpu::vmath`, whose out-of-line functions take
//! a group with a lane outside those ranges.

use super::{Cpu, CpuWalker};
use crate::JitError;
use crate::cpu::opt::lane_call::leaders;
use crate::lower::Backend;
use cranelift_codegen::ir::immediates::Ieee32;
use cranelift_codegen::ir::{
    InstBuilder, MemFlagsData, StackSlotData, StackSlotKind, Value, types,
};
use offload_ir::isa::{Op, UnOp};
use offload_ir::{FuncId, Inst, Kind};
use std::collections::HashMap;

/// Where the lanes reaching a block come from: the lanes (a mask, all ones
/// per lane), the locals' vectors and the operand stack's (with kinds).
#[derive(Clone)]
struct Edge {
    mask: Value,
    locals: Vec<Value>,
    stack: Vec<(Value, Kind)>,
}

impl CpuWalker<'_, '_> {
    /// `exp` or `log` (`op`) of the four `f32` lanes of `x`: libm's
    /// algorithm inline (the same operations in the same order, so the
    /// same bits) when every lane is in its common range, the
    /// out-of-line call otherwise (a lane there takes the scalar function).
    pub(super) fn lane_math(&mut self, op: UnOp, x: Value) -> Value {
        let (r, fast) = if op == UnOp::Exp {
            self.exp_inline(x, false)
        } else {
            self.log_inline(x)
        };
        let all = self.backend.builder.ins().vall_true(fast);
        let (slow, done) = (
            self.backend.builder.create_block(),
            self.backend.builder.create_block(),
        );
        let out = self.backend.builder.append_block_param(done, types::F32X4);
        self.backend.builder.set_cold_block(slow);
        self.backend
            .builder
            .ins()
            .brif(all, done, &[r.into()], slow, &[]);
        self.backend.builder.switch_to_block(slow);
        let mut blocks = vec![slow];
        if op == UnOp::Exp {
            // Out of the common range, still inline but for large positive
            // lanes: the special cases cost every group that has none.
            let (r, fast) = self.exp_inline(x, true);
            let all = self.backend.builder.ins().vall_true(fast);
            let call = self.backend.builder.create_block();
            self.backend.builder.set_cold_block(call);
            self.backend
                .builder
                .ins()
                .brif(all, done, &[r.into()], call, &[]);
            self.backend.builder.switch_to_block(call);
            blocks.push(call);
        }
        let r2 = self.lane_math_call(op, x);
        self.backend.builder.ins().jump(done, &[r2.into()]);
        // All have all their predecessors: sealed now, a variable read
        // after this resolves to its definition before, not to a new
        // block parameter (the same value again: `lockstep`'s memo of
        // lane calls relies on it).
        for b in blocks {
            self.backend.builder.seal_block(b);
        }
        self.backend.builder.seal_block(done);
        self.backend.builder.switch_to_block(done);
        out
    }

    /// The out-of-line `exp` or `log` of four lanes, through a stack slot.
    fn lane_math_call(&mut self, op: UnOp, x: Value) -> Value {
        let name = if op == UnOp::Exp {
            "offload_f32x4_exp"
        } else {
            "offload_f32x4_log"
        };
        let slot = self
            .backend
            .builder
            .create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 16, 4));
        let ptr = self
            .backend
            .builder
            .func
            .dfg
            .value_type(self.backend.env.heap.expect("set"));
        let at = self.backend.builder.ins().stack_addr(ptr, slot, 0);
        let flags = MemFlagsData::new().with_notrap();
        self.backend.builder.ins().store(flags, x, at, 0);
        let f = self.backend.math[name];
        self.backend.builder.ins().call(f, &[at]);
        self.backend.builder.ins().load(types::F32X4, flags, at, 0)
    }

    fn vf(&mut self, c: f32) -> Value {
        let c = self
            .backend
            .builder
            .ins()
            .f32const(Ieee32::with_bits(c.to_bits()));
        self.backend.builder.ins().splat(types::F32X4, c)
    }

    fn vi(&mut self, c: u32) -> Value {
        let c = self
            .backend
            .builder
            .ins()
            .iconst(types::I32, i64::from(c as i32));
        self.backend.builder.ins().splat(types::I32X4, c)
    }

    /// Lanes with `lo < x < hi` (as `i32`s).
    fn between(&mut self, x: Value, lo: u32, hi: u32) -> Value {
        use cranelift_codegen::ir::condcodes::IntCC;
        let (l, h) = (self.vi(lo), self.vi(hi));
        let above = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::SignedGreaterThan, x, l);
        let below = self.backend.builder.ins().icmp(IntCC::SignedLessThan, x, h);
        self.backend.builder.ins().band(above, below)
    }

    /// libm's `expf` (its steps, one for one) of the lanes in its common
    /// range, or (`full`) of every lane but large positive ones, special
    /// cases included; and the mask of those lanes.
    fn exp_inline(&mut self, x: Value, full: bool) -> (Value, Value) {
        use crate::cpu::vmath as m;
        use cranelift_codegen::ir::condcodes::IntCC;
        let plain = MemFlagsData::new();
        let bits = self.backend.builder.ins().bitcast(types::I32X4, plain, x);
        let abs = self.vi(0x7fff_ffff);
        let hx = self.backend.builder.ins().band(bits, abs);
        let neg = self.backend.builder.ins().sshr_imm_u(bits, 31);
        if !full {
            let fast = self.between(hx, m::EXP_FAST_LO, m::EXP_FAST_HI);
            return (self.exp_steps(x, bits, hx, neg, false), fast);
        }
        // Every lane but a large positive one (`x >= 87.33655`, where
        // `2^k` may overflow): those take the call.
        let inf = self.vi(0x7f80_0000);
        let (hi_bits, under) = (self.vi(m::EXP_FAST_HI), self.vi(m::EXP_UNDERFLOW));
        let big_mag = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::SignedGreaterThanOrEqual, hx, hi_bits);
        let not_nan = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::SignedLessThanOrEqual, hx, inf);
        let pos = self.backend.builder.ins().bnot(neg);
        let pos_big = self.backend.builder.ins().band(big_mag, not_nan);
        let pos_big = self.backend.builder.ins().band(pos_big, pos);
        let fast = self.backend.builder.ins().bnot(pos_big);
        let nan = self.backend.builder.ins().bnot(not_nan);
        let gone = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::SignedGreaterThanOrEqual, hx, under);
        let gone = self.backend.builder.ins().band(gone, neg);
        let lo_bits = self.vi(m::EXP_FAST_LO);
        let tiny = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::SignedLessThanOrEqual, hx, lo_bits);
        let r = self.exp_steps(x, bits, hx, neg, true);
        // `|x| <= 2^-14`: `1 + x`; `x <= -103.97`: 0; NaN: itself.
        let one_f = self.vf(1.0);
        let one_x = self.backend.builder.ins().fadd(one_f, x);
        let r = self.pick(Kind::F32, tiny, one_x, r);
        let zero = self.vf(0.0);
        let r = self.pick(Kind::F32, gone, zero, r);
        (self.pick(Kind::F32, nan, x, r), fast)
    }

    /// `expf`'s argument reduction, polynomial and scaling by `2^k` (of
    /// lanes whose `k` is at least -126, or, `full`, any).
    fn exp_steps(&mut self, x: Value, bits: Value, hx: Value, neg: Value, full: bool) -> Value {
        use crate::cpu::vmath as m;
        use cranelift_codegen::ir::condcodes::IntCC;
        let plain = MemFlagsData::new();
        // ±0.5 with x's sign.
        let sign = self.vi(0x8000_0000);
        let sign = self.backend.builder.ins().band(bits, sign);
        let half = self.vi(0.5f32.to_bits());
        let half = self.backend.builder.ins().bor(sign, half);
        let half = self
            .backend
            .builder
            .ins()
            .bitcast(types::F32X4, plain, half);
        let inv = self.vf(m::INV_LN2);
        let t = self.backend.builder.ins().fmul(inv, x);
        let t = self.backend.builder.ins().fadd(t, half);
        let k_big = self.backend.builder.ins().fcvt_to_sint_sat(types::I32X4, t);
        let one = self.vi(1);
        let k_mid = self.backend.builder.ins().bor(neg, one);
        let (b, h) = (self.vi(m::THREE_HALVES_LN2), self.vi(m::HALF_LN2));
        let big = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::SignedGreaterThan, hx, b);
        let mid = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::SignedGreaterThan, hx, h);
        let k_mid = self.backend.builder.ins().band(mid, k_mid);
        let k = self.backend.builder.ins().bitselect(big, k_big, k_mid);
        let kf = self.backend.builder.ins().fcvt_from_sint(types::F32X4, k);
        let (l2h, l2l) = (self.vf(m::EXP_LN2_HI), self.vf(m::EXP_LN2_LO));
        let t = self.backend.builder.ins().fmul(kf, l2h);
        let hi = self.backend.builder.ins().fsub(x, t);
        let lo = self.backend.builder.ins().fmul(kf, l2l);
        let xr = self.backend.builder.ins().fsub(hi, lo);
        let xx = self.backend.builder.ins().fmul(xr, xr);
        let (p1, p2) = (self.vf(m::P1), self.vf(m::P2));
        let t = self.backend.builder.ins().fmul(xx, p2);
        let t = self.backend.builder.ins().fadd(p1, t);
        let t = self.backend.builder.ins().fmul(xx, t);
        let c = self.backend.builder.ins().fsub(xr, t);
        let two = self.vf(2.0);
        let num = self.backend.builder.ins().fmul(xr, c);
        let den = self.backend.builder.ins().fsub(two, c);
        let q = self.backend.builder.ins().fdiv(num, den);
        let t = self.backend.builder.ins().fsub(q, lo);
        let t = self.backend.builder.ins().fadd(t, hi);
        let one_f = self.vf(1.0);
        let y = self.backend.builder.ins().fadd(one_f, t);
        // `scalbnf(y, k)`: one multiply by `2^k`, or for `k < -126` (a
        // subnormal result, only `full`) first by `2^-102` and then by
        // `2^(k + 102)`, as `scalbnf` does.
        let (k, y) = if full { self.scale_down(k, y) } else { (k, y) };
        let bias = self.vi(0x7f);
        let e = self.backend.builder.ins().iadd(k, bias);
        let e = self.backend.builder.ins().ishl_imm_u(e, 23);
        let scale = self.backend.builder.ins().bitcast(types::F32X4, plain, e);
        self.backend.builder.ins().fmul(y, scale)
    }

    /// `(k + 102, y * 2^-102)` in the lanes where `k < -126`.
    fn scale_down(&mut self, k: Value, y: Value) -> (Value, Value) {
        use crate::cpu::vmath as m;
        use cranelift_codegen::ir::condcodes::IntCC;
        let min_k = self.vi(-126i32 as u32);
        let low = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::SignedLessThan, k, min_k);
        let by = self.vi(102);
        let k_up = self.backend.builder.ins().iadd(k, by);
        let k = self.backend.builder.ins().bitselect(low, k_up, k);
        let down = self.vf(m::TWO_TO_MINUS_102);
        let y_down = self.backend.builder.ins().fmul(y, down);
        (k, self.pick(Kind::F32, low, y_down, y))
    }

    /// libm's `logf` of the lanes in its common range (its steps, one for
    /// one), and the mask of those lanes.
    fn log_inline(&mut self, x: Value) -> (Value, Value) {
        use crate::cpu::vmath as m;
        let plain = MemFlagsData::new();
        let ix = self.backend.builder.ins().bitcast(types::I32X4, plain, x);
        let fast = self.between(ix, m::LOG_FAST_LO - 1, m::LOG_FAST_HI);
        let shift = self.vi(0x3f80_0000 - 0x3f35_04f3);
        let ix = self.backend.builder.ins().iadd(ix, shift);
        let t = self.backend.builder.ins().ushr_imm_u(ix, 23);
        let bias = self.vi(0x7f);
        let k = self.backend.builder.ins().isub(t, bias);
        let mant = self.vi(0x007f_ffff);
        let t = self.backend.builder.ins().band(ix, mant);
        let base = self.vi(0x3f35_04f3);
        let t = self.backend.builder.ins().iadd(t, base);
        let xr = self.backend.builder.ins().bitcast(types::F32X4, plain, t);
        let (one, two, half) = (self.vf(1.0), self.vf(2.0), self.vf(0.5));
        let f = self.backend.builder.ins().fsub(xr, one);
        let d = self.backend.builder.ins().fadd(two, f);
        let s = self.backend.builder.ins().fdiv(f, d);
        let z = self.backend.builder.ins().fmul(s, s);
        let w = self.backend.builder.ins().fmul(z, z);
        let (g1, g2, g3, g4) = (
            self.vf(m::LG1),
            self.vf(m::LG2),
            self.vf(m::LG3),
            self.vf(m::LG4),
        );
        let t = self.backend.builder.ins().fmul(w, g4);
        let t = self.backend.builder.ins().fadd(g2, t);
        let t1 = self.backend.builder.ins().fmul(w, t);
        let t = self.backend.builder.ins().fmul(w, g3);
        let t = self.backend.builder.ins().fadd(g1, t);
        let t2 = self.backend.builder.ins().fmul(z, t);
        let r = self.backend.builder.ins().fadd(t2, t1);
        let t = self.backend.builder.ins().fmul(half, f);
        let hfsq = self.backend.builder.ins().fmul(t, f);
        let dk = self.backend.builder.ins().fcvt_from_sint(types::F32X4, k);
        let (l2h, l2l) = (self.vf(m::LOG_LN2_HI), self.vf(m::LOG_LN2_LO));
        let t = self.backend.builder.ins().fadd(hfsq, r);
        let a = self.backend.builder.ins().fmul(s, t);
        let t = self.backend.builder.ins().fmul(dk, l2l);
        let a = self.backend.builder.ins().fadd(a, t);
        let a = self.backend.builder.ins().fsub(a, hfsq);
        let a = self.backend.builder.ins().fadd(a, f);
        let t = self.backend.builder.ins().fmul(dk, l2h);
        (self.backend.builder.ins().fadd(a, t), fast)
    }

    /// A call of lane function `func` on argument vectors `args` (its
    /// parameters, in order): its result's vector.
    pub(super) fn lane_call(&mut self, func: FuncId, args: &[Value]) -> Result<Value, JitError> {
        let f = self.v.func(func);
        let bad = |bci: usize| {
            JitError::Codegen(format!(
                "lane function `{}`: unexpected operands at bci {bci}",
                f.name
            ))
        };
        let kinds: Vec<Kind> = f.locals.iter().map(|l| l.ty.kind()).collect();
        let all = self.backend.builder.ins().iconst(types::I32, -1);
        let all = self.backend.builder.ins().splat(types::I32X4, all);
        let mut locals: Vec<Value> = args.to_vec();
        for &k in &kinds[args.len()..] {
            let z = self.zero(k);
            locals.push(
                self.backend
                    .builder
                    .ins()
                    .splat(super::lockstep::vector_type(k), z),
            );
        }
        let starts: Vec<usize> = leaders(&f.body).iter().map(|&b| b as usize).collect();
        let mut arriving: HashMap<usize, Edge> = HashMap::new();
        arriving.insert(
            0,
            Edge {
                mask: all,
                locals,
                stack: Vec::new(),
            },
        );
        let mut result: Option<Value> = None;
        for (i, &s) in starts.iter().enumerate() {
            let end = starts.get(i + 1).copied().unwrap_or(f.body.len());
            // No path reaches the block: nothing to run.
            let Some(Edge {
                mask,
                mut locals,
                mut stack,
            }) = arriving.remove(&s)
            else {
                continue;
            };
            let mut open = true;
            for bci in s..end {
                let inst = f.body[bci];
                let pop = |stack: &mut Vec<(Value, Kind)>| {
                    stack.pop().map(|(v, _)| v).ok_or_else(|| bad(bci))
                };
                match inst {
                    Inst::Load { local } => {
                        stack.push((locals[local.index()], kinds[local.index()]));
                    }
                    Inst::Store { local } => locals[local.index()] = pop(&mut stack)?,
                    Inst::Inc { local, delta } => {
                        let d = self
                            .backend
                            .builder
                            .ins()
                            .iconst(types::I32, i64::from(delta));
                        let d = self.backend.builder.ins().splat(types::I32X4, d);
                        let l = local.index();
                        locals[l] = self.backend.builder.ins().iadd(locals[l], d);
                    }
                    Inst::I32Const { value } => {
                        let c = self
                            .backend
                            .builder
                            .ins()
                            .iconst(types::I32, i64::from(value));
                        stack.push((self.backend.builder.ins().splat(types::I32X4, c), Kind::I32));
                    }
                    Inst::F32Const { value } => {
                        let c = self
                            .backend
                            .builder
                            .ins()
                            .f32const(Ieee32::with_bits(value.0));
                        stack.push((self.backend.builder.ins().splat(types::F32X4, c), Kind::F32));
                    }
                    Inst::Dup | Inst::Pop | Inst::Swap => {
                        if crate::cpu::opt::shuffle(&mut stack, inst) != Some(true) {
                            return Err(bad(bci));
                        }
                    }
                    Inst::Br { target } => {
                        self.arrive(
                            &mut arriving,
                            &kinds,
                            target.0 as usize,
                            mask,
                            &locals,
                            &stack,
                        );
                        open = false;
                    }
                    Inst::BrIf { target } | Inst::BrUnless { target } => {
                        let c = pop(&mut stack)?;
                        let zero = self.backend.builder.ins().iconst(types::I32, 0);
                        let zero = self.backend.builder.ins().splat(types::I32X4, zero);
                        let set = self.backend.builder.ins().icmp(
                            cranelift_codegen::ir::condcodes::IntCC::NotEqual,
                            c,
                            zero,
                        );
                        let unset = self.backend.builder.ins().bnot(set);
                        let (jump, fall) = if matches!(inst, Inst::BrIf { .. }) {
                            (set, unset)
                        } else {
                            (unset, set)
                        };
                        let taken = self.backend.builder.ins().band(mask, jump);
                        let rest = self.backend.builder.ins().band(mask, fall);
                        self.arrive(
                            &mut arriving,
                            &kinds,
                            target.0 as usize,
                            taken,
                            &locals,
                            &stack,
                        );
                        self.arrive(&mut arriving, &kinds, bci + 1, rest, &locals, &stack);
                        open = false;
                    }
                    Inst::Ret => {
                        let x = pop(&mut stack)?;
                        let k = f.ret.map(|t| t.kind()).ok_or_else(|| bad(bci))?;
                        result = Some(match result {
                            None => x,
                            Some(r) => self.pick(k, mask, x, r),
                        });
                        open = false;
                    }
                    _ => match inst.opcode().op() {
                        Op::Binary(k, op) => {
                            let b = pop(&mut stack)?;
                            let a = pop(&mut stack)?;
                            stack.push((Cpu::binary(self, op, k, a, b), k));
                        }
                        Op::Unary(_, op @ (UnOp::Exp | UnOp::Log)) => {
                            let a = pop(&mut stack)?;
                            stack.push((self.lane_math(op, a), Kind::F32));
                        }
                        Op::Unary(k, op) => {
                            let a = pop(&mut stack)?;
                            stack.push((Cpu::unary(self, op, k, a), k));
                        }
                        Op::Compare(k, op) => {
                            let b = pop(&mut stack)?;
                            let a = pop(&mut stack)?;
                            let m = if k == Kind::F32 {
                                self.backend
                                    .builder
                                    .ins()
                                    .fcmp(super::emit::float_cc(op), a, b)
                            } else {
                                self.backend
                                    .builder
                                    .ins()
                                    .icmp(super::emit::int_cc(op), a, b)
                            };
                            // All ones or zero per lane, as 1 or 0.
                            stack.push((self.backend.builder.ins().ushr_imm_u(m, 31), Kind::I32));
                        }
                        Op::Convert(Kind::I32, Kind::F32) => {
                            let a = pop(&mut stack)?;
                            let x = self.backend.builder.ins().fcvt_from_sint(types::F32X4, a);
                            stack.push((x, Kind::F32));
                        }
                        Op::Convert(Kind::F32, Kind::I32) => {
                            let a = pop(&mut stack)?;
                            let x = self.backend.builder.ins().fcvt_to_sint_sat(types::I32X4, a);
                            stack.push((x, Kind::I32));
                        }
                        _ => return Err(bad(bci)),
                    },
                }
            }
            if open {
                self.arrive(&mut arriving, &kinds, end, mask, &locals, &stack);
            }
        }
        result.ok_or_else(|| bad(f.body.len()))
    }

    /// The lanes of `mask` arrive at block `at` with `locals` and `stack`
    /// (the same kinds on every edge, as the verifier and
    /// `opt::lane_call` check).
    fn arrive(
        &mut self,
        arriving: &mut HashMap<usize, Edge>,
        kinds: &[Kind],
        at: usize,
        mask: Value,
        locals: &[Value],
        stack: &[(Value, Kind)],
    ) {
        let merged = match arriving.remove(&at) {
            None => Edge {
                mask,
                locals: locals.to_vec(),
                stack: stack.to_vec(),
            },
            Some(e) => {
                let ls = (locals.iter().zip(&e.locals).enumerate())
                    .map(|(l, (&new, &old))| self.pick(kinds[l], mask, new, old))
                    .collect();
                let st = (stack.iter().zip(&e.stack))
                    .map(|(&(new, k), &(old, _))| (self.pick(k, mask, new, old), k))
                    .collect();
                Edge {
                    mask: self.backend.builder.ins().bor(e.mask, mask),
                    locals: ls,
                    stack: st,
                }
            }
        };
        arriving.insert(at, merged);
    }

    /// `a` in the lanes of `mask`, `b` in the others (vectors of kind `k`;
    /// `a` itself when they are the same value).
    fn pick(&mut self, k: Kind, mask: Value, a: Value, b: Value) -> Value {
        if a == b {
            return a;
        }
        let m = if k == Kind::F32 {
            self.backend
                .builder
                .ins()
                .bitcast(types::F32X4, MemFlagsData::new(), mask)
        } else {
            mask
        };
        self.backend.builder.ins().bitselect(m, a, b)
    }
}
