//! Calls in lockstep groups: a lane function ([`crate::opt::lane_call`])
//! inlined on vectors, a lane per workitem, with every block run under a
//! mask of the lanes whose path reaches it — full if-conversion of an
//! acyclic body. A branch splits its block's mask between its two targets;
//! a block's locals are, lane by lane, those of the edge that brought the
//! lane there (a `bitselect` by the edge's mask); a `ret` contributes its
//! value to the lanes of its block's mask. Every lane follows one path, so
//! the masks of a block's incoming edges are disjoint and each lane's
//! result is what its own path computed.
//!
//! `exp` and `log` of lanes call `crate::vmath` with the four lanes in a
//! stack slot.

use super::{Cpu, Lw};
use crate::JitError;
use crate::lower::Backend;
use crate::opt::lane_call::leaders;
use cranelift_codegen::ir::immediates::Ieee32;
use cranelift_codegen::ir::{
    InstBuilder, MemFlagsData, StackSlotData, StackSlotKind, Type, Value, types,
};
use offload_ir::isa::{Op, UnOp};
use offload_ir::{FuncId, Inst, Kind};
use std::collections::HashMap;

/// The vector type of a lane value of kind `k` (`i32` or `f32`).
pub(super) fn vector_of(k: Kind) -> Type {
    if k == Kind::F32 {
        types::F32X4
    } else {
        types::I32X4
    }
}

/// Where the lanes reaching a block come from: the lanes (a mask, all ones
/// per lane), the locals' vectors and the operand stack's (with kinds).
#[derive(Clone)]
struct Edge {
    mask: Value,
    locals: Vec<Value>,
    stack: Vec<(Value, Kind)>,
}

impl Lw<'_, '_> {
    /// `exp` or `log` (`op`) of the four `f32` lanes of `x`.
    pub(super) fn lane_math(&mut self, op: UnOp, x: Value) -> Value {
        let name = if op == UnOp::Exp {
            "offload_f32x4_exp"
        } else {
            "offload_f32x4_log"
        };
        let slot = self.e.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            16,
            4,
        ));
        let ptr = self.e.b.func.dfg.value_type(self.e.env.heap.expect("set"));
        let at = self.e.b.ins().stack_addr(ptr, slot, 0);
        let flags = MemFlagsData::new().with_notrap();
        self.e.b.ins().store(flags, x, at, 0);
        let f = self.e.math[name];
        self.e.b.ins().call(f, &[at]);
        self.e.b.ins().load(types::F32X4, flags, at, 0)
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
        let all = self.e.b.ins().iconst(types::I32, -1);
        let all = self.e.b.ins().splat(types::I32X4, all);
        let mut locals: Vec<Value> = args.to_vec();
        for &k in &kinds[args.len()..] {
            let z = self.zero(k);
            locals.push(self.e.b.ins().splat(vector_of(k), z));
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
                        let d = self.e.b.ins().iconst(types::I32, i64::from(delta));
                        let d = self.e.b.ins().splat(types::I32X4, d);
                        let l = local.index();
                        locals[l] = self.e.b.ins().iadd(locals[l], d);
                    }
                    Inst::I32Const { value } => {
                        let c = self.e.b.ins().iconst(types::I32, i64::from(value));
                        stack.push((self.e.b.ins().splat(types::I32X4, c), Kind::I32));
                    }
                    Inst::F32Const { value } => {
                        let c = self.e.b.ins().f32const(Ieee32::with_bits(value.0));
                        stack.push((self.e.b.ins().splat(types::F32X4, c), Kind::F32));
                    }
                    Inst::Dup | Inst::Pop | Inst::Swap => {
                        if crate::opt::shuffle(&mut stack, inst) != Some(true) {
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
                        let zero = self.e.b.ins().iconst(types::I32, 0);
                        let zero = self.e.b.ins().splat(types::I32X4, zero);
                        let set = self.e.b.ins().icmp(
                            cranelift_codegen::ir::condcodes::IntCC::NotEqual,
                            c,
                            zero,
                        );
                        let unset = self.e.b.ins().bnot(set);
                        let (jump, fall) = if matches!(inst, Inst::BrIf { .. }) {
                            (set, unset)
                        } else {
                            (unset, set)
                        };
                        let taken = self.e.b.ins().band(mask, jump);
                        let rest = self.e.b.ins().band(mask, fall);
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
                                self.e.b.ins().fcmp(super::emit::float_cc(op), a, b)
                            } else {
                                self.e.b.ins().icmp(super::emit::int_cc(op), a, b)
                            };
                            // All ones or zero per lane, as 1 or 0.
                            stack.push((self.e.b.ins().ushr_imm_u(m, 31), Kind::I32));
                        }
                        Op::Convert(Kind::I32, Kind::F32) => {
                            let a = pop(&mut stack)?;
                            let x = self.e.b.ins().fcvt_from_sint(types::F32X4, a);
                            stack.push((x, Kind::F32));
                        }
                        Op::Convert(Kind::F32, Kind::I32) => {
                            let a = pop(&mut stack)?;
                            let x = self.e.b.ins().fcvt_to_sint_sat(types::I32X4, a);
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
                let mut ls = Vec::with_capacity(locals.len());
                for (l, (&new, &old)) in locals.iter().zip(&e.locals).enumerate() {
                    ls.push(if new == old {
                        new
                    } else {
                        self.pick(kinds[l], mask, new, old)
                    });
                }
                let mut st = Vec::with_capacity(stack.len());
                for (&(new, k), &(old, _)) in stack.iter().zip(&e.stack) {
                    st.push((
                        if new == old {
                            new
                        } else {
                            self.pick(k, mask, new, old)
                        },
                        k,
                    ));
                }
                Edge {
                    mask: self.e.b.ins().bor(e.mask, mask),
                    locals: ls,
                    stack: st,
                }
            }
        };
        arriving.insert(at, merged);
    }

    /// `a` in the lanes of `mask`, `b` in the others (vectors of kind `k`).
    fn pick(&mut self, k: Kind, mask: Value, a: Value, b: Value) -> Value {
        let m = if k == Kind::F32 {
            self.e
                .b
                .ins()
                .bitcast(types::F32X4, MemFlagsData::new(), mask)
        } else {
            mask
        };
        self.e.b.ins().bitselect(m, a, b)
    }
}
