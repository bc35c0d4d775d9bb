//! Lockstep groups' lowering ([`opt::lockstep`]): `LANES` workitems of a
//! kernel with uniform loops as one SIMD body, a lane per workitem — every
//! uniform value and branch once, every lane value in a vector. The group
//! starts after the item loop's control-word check like any workitem; a
//! uniform index out of bounds, or the control word seen set at a loop's
//! back-edge, abandons it (nothing is stored before its last branch, so
//! nothing it did shows) for the scalar path, which runs the same
//! workitems and deopts or stops exactly where it always does.

use super::{Cpu, Lw, cl_type, trusted};
use crate::JitError;
use crate::lower::Backend;
use crate::opt::{LKind, Lockstep};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::immediates::Ieee32;
use cranelift_codegen::ir::{Block, InstBuilder, MemFlagsData, Value, types};
use cranelift_frontend::Variable;
use offload_ir::isa::Op;
use offload_ir::{Bci, Inst, Kind};
use std::collections::HashMap;

/// Workitems of a lockstep group: one 128-bit vector of `i32` or `f32`
/// lanes (the widest Cranelift's x64 backend has).
pub(super) const LANES: i64 = 4;

/// A value of the lockstep body.
#[derive(Copy, Clone)]
enum LV {
    /// The same for every lane.
    U(Value),
    /// One per lane.
    V(Value),
    /// The workitem number, `i64` (only narrowed).
    Idx,
    /// The narrowed workitem number (only an index).
    Idx32,
    /// An array parameter.
    Arr(Value),
}

fn vector_type(k: Kind) -> cranelift_codegen::ir::Type {
    if k == Kind::F32 {
        types::F32X4
    } else {
        types::I32X4
    }
}

impl Lw<'_, '_> {
    /// The item loop's way into lockstep groups, at block `entry` (which
    /// the item loop branches to when its chunk has workitems left): with
    /// at least [`LANES`] left, check the control word (set: `stopped`)
    /// and run a group, which goes back to `item` done or to `scalar` (the
    /// one-workitem path, `w` unchanged) abandoned; with fewer, `scalar`.
    pub(super) fn lockstep_entry(
        &mut self,
        plan: &Lockstep,
        entry: Block,
        scalar: Block,
        stopped: Block,
        item: Block,
    ) -> Result<(), JitError> {
        let (w, hi) = (self.e.env.w.expect("set"), self.e.env.hi.expect("set"));
        self.e.b.switch_to_block(entry);
        let wv = self.e.b.use_var(w);
        let hv = self.e.b.use_var(hi);
        let left = self.e.b.ins().isub(hv, wv);
        let full = self
            .e
            .b
            .ins()
            .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, left, LANES);
        let group = self.e.b.create_block();
        self.e.b.ins().brif(full, group, &[], scalar, &[]);
        self.e.b.switch_to_block(group);
        let cw = self.control_word();
        let start = self.e.b.create_block();
        self.e.b.ins().brif(cw, stopped, &[], start, &[]);
        self.e.b.switch_to_block(start);
        self.lockstep_group(plan, scalar, item)
    }

    /// One group's body (see the module docs); `abandon` is where a group
    /// that cannot finish goes, `then` where a finished one goes after
    /// counting its workitems and advancing `w`.
    #[allow(clippy::too_many_lines)]
    fn lockstep_group(
        &mut self,
        plan: &Lockstep,
        abandon: Block,
        then: Block,
    ) -> Result<(), JitError> {
        let f = self.v.func(self.cur.func);
        let params = f.param_count as usize;
        let (w, done) = (self.e.env.w.expect("set"), self.e.env.done.expect("set"));
        let wv = self.e.b.use_var(w);
        let flags = MemFlagsData::new().with_notrap();
        let unexpected = |bci: usize| {
            JitError::Codegen(format!("lockstep body: unexpected operands at bci {bci}"))
        };
        // The locals: a variable of the scalar type for a uniform one, of the
        // vector type for a lane one, none for the index and the arrays.
        let mut vars: Vec<Option<Variable>> = Vec::with_capacity(f.locals.len());
        for (l, loc) in f.locals.iter().enumerate() {
            let k = loc.ty.kind();
            let lk = plan.local(l);
            let init = |this: &mut Self| {
                if l >= 1 && l < params {
                    this.e.env.captures[l - 1]
                } else {
                    this.zero(k)
                }
            };
            vars.push(match lk {
                LKind::U(_) | LKind::Unset if matches!(k, Kind::I32 | Kind::F32) => {
                    let v = self.var(cl_type(k));
                    let x = init(self);
                    self.e.b.def_var(v, x);
                    Some(v)
                }
                LKind::V(_) => {
                    let v = self.var(vector_type(k));
                    let x = init(self);
                    let s = self.e.b.ins().splat(vector_type(k), x);
                    self.e.b.def_var(v, s);
                    Some(v)
                }
                _ => None,
            });
        }
        let blocks: HashMap<Bci, Block> = plan
            .leaders
            .iter()
            .map(|&b| (b, self.e.b.create_block()))
            .collect();
        let finish = self.e.b.create_block();
        self.e.b.ins().jump(blocks[&0], &[]);
        self.e.b.switch_to_block(blocks[&0]);
        // A back-edge goes through a block that reads the control word:
        // set, the group is abandoned. (poll block, loop header)
        let mut polls: Vec<(Block, Block)> = Vec::new();
        let mut stack: Vec<(LV, Kind)> = Vec::new();
        let mut terminated = false;
        for (bci, &inst) in f.body.iter().enumerate() {
            if bci > 0 && plan.leaders.contains(&(bci as Bci)) {
                if !terminated {
                    self.e.b.ins().jump(blocks[&(bci as Bci)], &[]);
                }
                self.e.b.switch_to_block(blocks[&(bci as Bci)]);
                terminated = false;
            }
            let pop = |stack: &mut Vec<(LV, Kind)>| stack.pop().ok_or_else(|| unexpected(bci));
            match inst {
                Inst::Load { local } => {
                    let l = local.index();
                    let k = f.locals[l].ty.kind();
                    let x = match (plan.local(l), vars[l]) {
                        (LKind::Idx, _) => LV::Idx,
                        (LKind::Idx32, _) => LV::Idx32,
                        (LKind::Arr, _) => LV::Arr(self.e.env.captures[l - 1]),
                        (LKind::V(_), Some(v)) => LV::V(self.e.b.use_var(v)),
                        (_, Some(v)) => LV::U(self.e.b.use_var(v)),
                        _ => return Err(unexpected(bci)),
                    };
                    stack.push((x, k));
                }
                Inst::Store { local } => {
                    let l = local.index();
                    let (x, k) = pop(&mut stack)?;
                    match (plan.local(l), x, vars[l]) {
                        (LKind::Idx32, LV::Idx32, _) => {}
                        (LKind::V(_), LV::U(s), Some(v)) => {
                            let s = self.e.b.ins().splat(vector_type(k), s);
                            self.e.b.def_var(v, s);
                        }
                        (LKind::V(_), LV::V(x), Some(v)) | (_, LV::U(x), Some(v)) => {
                            self.e.b.def_var(v, x);
                        }
                        _ => return Err(unexpected(bci)),
                    }
                }
                Inst::Inc { local, delta } => {
                    let v = vars[local.index()].ok_or_else(|| unexpected(bci))?;
                    let x = self.e.b.use_var(v);
                    let y = self.e.b.ins().iadd_imm_s(x, i64::from(delta));
                    self.e.b.def_var(v, y);
                }
                Inst::I32Const { value } => {
                    let c = self.e.b.ins().iconst(types::I32, i64::from(value));
                    stack.push((LV::U(c), Kind::I32));
                }
                Inst::F32Const { value } => {
                    let c = self.e.b.ins().f32const(Ieee32::with_bits(value.0));
                    stack.push((LV::U(c), Kind::F32));
                }
                Inst::I64ToI32 => match pop(&mut stack)? {
                    (LV::Idx, _) => stack.push((LV::Idx32, Kind::I32)),
                    _ => return Err(unexpected(bci)),
                },
                Inst::Br { target } => {
                    let t = target.0;
                    if t as usize <= bci {
                        let p = self.e.b.create_block();
                        polls.push((p, blocks[&t]));
                        self.e.b.ins().jump(p, &[]);
                    } else {
                        self.e.b.ins().jump(blocks[&t], &[]);
                    }
                    terminated = true;
                }
                Inst::BrIf { target } | Inst::BrUnless { target } => {
                    let (LV::U(c), _) = pop(&mut stack)? else {
                        return Err(unexpected(bci));
                    };
                    let t = target.0;
                    let taken = if t as usize <= bci {
                        let p = self.e.b.create_block();
                        polls.push((p, blocks[&t]));
                        p
                    } else {
                        blocks[&t]
                    };
                    let fall = blocks[&(bci as Bci + 1)];
                    if matches!(inst, Inst::BrIf { .. }) {
                        self.e.b.ins().brif(c, taken, &[], fall, &[]);
                    } else {
                        self.e.b.ins().brif(c, fall, &[], taken, &[]);
                    }
                    terminated = true;
                }
                Inst::I32ALoad | Inst::F32ALoad => {
                    let k = if inst == Inst::I32ALoad {
                        Kind::I32
                    } else {
                        Kind::F32
                    };
                    let (idx, _) = pop(&mut stack)?;
                    let (LV::Arr(r), _) = pop(&mut stack)? else {
                        return Err(unexpected(bci));
                    };
                    let base = self.obj_addr(r);
                    match idx {
                        LV::U(i) if plan.uniform_loads.contains(&(bci as Bci)) => {
                            // Checked: out of bounds (or a null array, whose
                            // length reads as 0), the scalar path deopts.
                            let len = self.array_len(base);
                            let oob =
                                self.e
                                    .b
                                    .ins()
                                    .icmp(IntCC::UnsignedGreaterThanOrEqual, i, len);
                            let ok = self.e.b.create_block();
                            self.e.b.ins().brif(oob, abandon, &[], ok, &[]);
                            self.e.b.switch_to_block(ok);
                            let i64v = self.e.b.ins().uextend(types::I64, i);
                            let off = self.e.b.ins().ishl_imm_u(i64v, 2);
                            let a = self.e.b.ins().iadd(base, off);
                            let x = self.e.b.ins().load(cl_type(k), trusted(), a, 8);
                            stack.push((LV::U(x), k));
                        }
                        LV::Idx32 => {
                            // Proven in bounds for the chunk.
                            let off = self.e.b.ins().ishl_imm_u(wv, 2);
                            let a = self.e.b.ins().iadd(base, off);
                            let x = self.e.b.ins().load(vector_type(k), flags, a, 8);
                            stack.push((LV::V(x), k));
                        }
                        _ => return Err(unexpected(bci)),
                    }
                }
                Inst::I32AStore | Inst::F32AStore => {
                    let (x, k) = pop(&mut stack)?;
                    let (LV::Idx32, _) = pop(&mut stack)? else {
                        return Err(unexpected(bci));
                    };
                    let (LV::Arr(r), _) = pop(&mut stack)? else {
                        return Err(unexpected(bci));
                    };
                    let x = match x {
                        LV::U(s) => self.e.b.ins().splat(vector_type(k), s),
                        LV::V(v) => v,
                        _ => return Err(unexpected(bci)),
                    };
                    let base = self.obj_addr(r);
                    let off = self.e.b.ins().ishl_imm_u(wv, 2);
                    let a = self.e.b.ins().iadd(base, off);
                    self.e.b.ins().store(flags, x, a, 8);
                }
                Inst::Dup => {
                    let x = *stack.last().ok_or_else(|| unexpected(bci))?;
                    stack.push(x);
                }
                Inst::Pop => {
                    pop(&mut stack)?;
                }
                Inst::Swap => {
                    let n = stack.len();
                    if n < 2 {
                        return Err(unexpected(bci));
                    }
                    stack.swap(n - 1, n - 2);
                }
                Inst::Ret => {
                    self.e.b.ins().jump(finish, &[]);
                    terminated = true;
                }
                _ => match inst.opcode().op() {
                    Op::Binary(k, op) => {
                        let (b, _) = pop(&mut stack)?;
                        let (a, _) = pop(&mut stack)?;
                        let r = match (a, b) {
                            (LV::U(x), LV::U(y)) => LV::U(Cpu::binary(self, op, k, x, y)),
                            (a, b) => {
                                let lane = |this: &mut Self, v: LV| match v {
                                    LV::U(s) => Ok(this.e.b.ins().splat(vector_type(k), s)),
                                    LV::V(x) => Ok(x),
                                    _ => Err(unexpected(bci)),
                                };
                                let (x, y) = (lane(self, a)?, lane(self, b)?);
                                LV::V(Cpu::binary(self, op, k, x, y))
                            }
                        };
                        stack.push((r, k));
                    }
                    Op::Unary(k, op) => {
                        let (a, _) = pop(&mut stack)?;
                        let r = match a {
                            LV::U(x) => LV::U(Cpu::unary(self, op, k, x)),
                            LV::V(x) => LV::V(Cpu::unary(self, op, k, x)),
                            _ => return Err(unexpected(bci)),
                        };
                        stack.push((r, k));
                    }
                    Op::Convert(from, to) => {
                        let (LV::U(a), _) = pop(&mut stack)? else {
                            return Err(unexpected(bci));
                        };
                        stack.push((LV::U(Cpu::convert(self, from, to, a)), to));
                    }
                    Op::Compare(k, op) => {
                        let (LV::U(b), _) = pop(&mut stack)? else {
                            return Err(unexpected(bci));
                        };
                        let (LV::U(a), _) = pop(&mut stack)? else {
                            return Err(unexpected(bci));
                        };
                        let c = Cpu::compare(self, op, k, a, b);
                        stack.push((LV::U(c), Kind::I32));
                    }
                    _ => return Err(unexpected(bci)),
                },
            }
        }
        if !terminated {
            self.e.b.ins().jump(finish, &[]);
        }
        for (p, to) in polls {
            self.e.b.switch_to_block(p);
            let cw = self.control_word();
            self.e.b.ins().brif(cw, abandon, &[], to, &[]);
        }
        self.e.b.switch_to_block(finish);
        let d = self.e.b.use_var(done);
        let d1 = self.e.b.ins().iadd_imm_s(d, LANES);
        self.e.b.def_var(done, d1);
        let w1 = self.e.b.ins().iadd_imm_s(wv, LANES);
        self.e.b.def_var(w, w1);
        self.e.b.ins().jump(then, &[]);
        Ok(())
    }
}
