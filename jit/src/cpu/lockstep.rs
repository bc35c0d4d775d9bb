//! Lockstep groups' lowering ([`opt::lockstep`]): `LANES` workitems of a
//! kernel with uniform loops as one SIMD body, a lane per workitem — every
//! uniform value and branch once, every lane value in a vector. The group
//! starts after the item loop's control-word check like any workitem; a
//! uniform index out of bounds, or the control word seen set at a loop's
//! back-edge, abandons it (nothing is stored before its last branch, so
//! nothing it did shows) for the scalar path, which runs the same
//! workitems and deopts or stops exactly where it always does. Under fault
//! injection, a group with a workitem chosen to deopt goes scalar from its
//! start (`CpuWalker::group_limit`, as the straight-line SIMD groups do).

use super::{Cpu, CpuWalker, cl_type, trusted};
use crate::JitError;
use crate::cpu::opt::{LKind, Lockstep};
use crate::lower::Backend;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::immediates::Ieee32;
use cranelift_codegen::ir::{Block, InstBuilder, MemFlagsData, Value, types};
use cranelift_frontend::Variable;
use offload_ir::isa::{Op, UnOp};
use offload_ir::{Bci, FuncId, Inst, Kind};
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
    /// Consecutive `i32`s: lane `l` holds `base + l` (the value is `base`).
    Aff(Value),
    /// The workitem number, `i64` (only narrowed).
    Idx,
    /// The narrowed workitem number (only an index).
    Idx32,
    /// An array parameter.
    Arr(Value),
}

/// The vector type of a lane value of kind `k` (`i32` or `f32`).
pub(super) fn vector_type(k: Kind) -> cranelift_codegen::ir::Type {
    if k == Kind::F32 {
        types::F32X4
    } else {
        types::I32X4
    }
}

impl CpuWalker<'_, '_> {
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
        let (w, hi) = (
            self.backend.env.w.expect("set"),
            self.backend.env.hi.expect("set"),
        );
        self.backend.builder.switch_to_block(entry);
        let wv = self.backend.builder.use_var(w);
        let hv = self.backend.builder.use_var(hi);
        let left = self.backend.builder.ins().isub(hv, wv);
        let full =
            self.backend
                .builder
                .ins()
                .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, left, LANES);
        let group = self.backend.builder.create_block();
        self.backend
            .builder
            .ins()
            .brif(full, group, &[], scalar, &[]);
        self.backend.builder.switch_to_block(group);
        let cw = self.control_word();
        let start = self.backend.builder.create_block();
        self.backend
            .builder
            .ins()
            .brif(cw, stopped, &[], start, &[]);
        self.backend.builder.switch_to_block(start);
        // Fault injection (`CompileOptions::inject`) deopts chosen
        // workitems at a site: a group with one of them goes scalar, where
        // the site is.
        if self.opts.inject.is_some() {
            let lim = self.group_limit(wv, hv);
            let end = self.backend.builder.ins().iadd_imm_s(wv, LANES);
            let hit = self
                .backend
                .builder
                .ins()
                .icmp(IntCC::SignedLessThan, lim, end);
            self.abandon_if(hit, scalar);
        }
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
        let (w, done) = (
            self.backend.env.w.expect("set"),
            self.backend.env.done.expect("set"),
        );
        let wv = self.backend.builder.use_var(w);
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
                    this.backend.env.captures[l - 1]
                } else {
                    this.zero(k)
                }
            };
            vars.push(match lk {
                LKind::U(_) | LKind::Unset if matches!(k, Kind::I32 | Kind::F32) => {
                    let v = self.var(cl_type(k));
                    let x = init(self);
                    self.backend.builder.def_var(v, x);
                    Some(v)
                }
                LKind::Aff => {
                    let v = self.var(types::I32);
                    let x = self.zero(Kind::I32);
                    self.backend.builder.def_var(v, x);
                    Some(v)
                }
                LKind::V(_) => {
                    let v = self.var(vector_type(k));
                    let x = init(self);
                    let s = self.backend.builder.ins().splat(vector_type(k), x);
                    self.backend.builder.def_var(v, s);
                    Some(v)
                }
                _ => None,
            });
        }
        let blocks: HashMap<Bci, Block> = plan
            .leaders
            .iter()
            .map(|&b| (b, self.backend.builder.create_block()))
            .collect();
        let finish = self.backend.builder.create_block();
        self.backend.builder.ins().jump(blocks[&0], &[]);
        self.backend.builder.switch_to_block(blocks[&0]);
        // A back-edge goes through a block that reads the control word:
        // set, the group is abandoned. (poll block, loop header)
        let mut polls: Vec<(Block, Block)> = Vec::new();
        let mut stack: Vec<(LV, Kind)> = Vec::new();
        let mut terminated = false;
        // Lane calls made in this block, by function and argument vectors:
        // lane functions only compute, so a second call with the same
        // arguments is the first's result (`cnd(d1)` twice in
        // blackscholes). Code the calls emit rejoins before the next
        // instruction, so an earlier result dominates the rest of the
        // block; a new block starts afresh.
        let mut calls: HashMap<(FuncId, Vec<Value>), Value> = HashMap::new();
        // In a block no group reaches (`Lockstep::dead`).
        let mut dead = false;
        for (bci, &inst) in f.body.iter().enumerate() {
            if bci > 0 && plan.leaders.contains(&(bci as Bci)) {
                if !terminated {
                    self.backend.builder.ins().jump(blocks[&(bci as Bci)], &[]);
                }
                self.backend.builder.switch_to_block(blocks[&(bci as Bci)]);
                terminated = false;
                calls.clear();
                dead = plan.dead.contains(&(bci as Bci));
                if dead {
                    // Never entered; should it be, the scalar path runs
                    // the group's workitems.
                    self.backend.builder.ins().jump(abandon, &[]);
                    terminated = true;
                }
            }
            if dead {
                continue;
            }
            let pop = |stack: &mut Vec<(LV, Kind)>| stack.pop().ok_or_else(|| unexpected(bci));
            match inst {
                Inst::Load { local } => {
                    let l = local.index();
                    let k = f.locals[l].ty.kind();
                    let x = match (plan.local(l), vars[l]) {
                        (LKind::Idx, _) => LV::Idx,
                        (LKind::Idx32, _) => LV::Idx32,
                        (LKind::Arr, _) => {
                            let p = plan.arrays[l].ok_or_else(|| unexpected(bci))?;
                            LV::Arr(self.backend.env.captures[p - 1])
                        }
                        (LKind::V(_), Some(v)) => LV::V(self.backend.builder.use_var(v)),
                        (LKind::Aff, Some(v)) => LV::Aff(self.backend.builder.use_var(v)),
                        (_, Some(v)) => LV::U(self.backend.builder.use_var(v)),
                        // An `i64` parameter, read to be narrowed.
                        (LKind::Unset, None) if k == Kind::I64 && (1..params).contains(&l) => {
                            LV::U(self.backend.env.captures[l - 1])
                        }
                        _ => return Err(unexpected(bci)),
                    };
                    stack.push((x, k));
                }
                Inst::Store { local } => {
                    let l = local.index();
                    let (x, k) = pop(&mut stack)?;
                    match (plan.local(l), x, vars[l]) {
                        (LKind::Idx32, LV::Idx32, _)
                        | (LKind::Idx, LV::Idx, _)
                        | (LKind::Arr, LV::Arr(_), _) => {}
                        (LKind::Aff, LV::Aff(b), Some(v)) => self.backend.builder.def_var(v, b),
                        (LKind::V(_), LV::U(s), Some(v)) => {
                            let s = self.backend.builder.ins().splat(vector_type(k), s);
                            self.backend.builder.def_var(v, s);
                        }
                        (LKind::V(_), LV::Aff(_) | LV::Idx32, Some(v)) => {
                            let x = self.as_aff(x, wv);
                            let LV::V(x) = self.lanes(x) else {
                                return Err(unexpected(bci));
                            };
                            self.backend.builder.def_var(v, x);
                        }
                        (LKind::V(_), LV::V(x), Some(v)) | (_, LV::U(x), Some(v)) => {
                            self.backend.builder.def_var(v, x);
                        }
                        _ => return Err(unexpected(bci)),
                    }
                }
                Inst::Inc { local, delta } => {
                    let v = vars[local.index()].ok_or_else(|| unexpected(bci))?;
                    let x = self.backend.builder.use_var(v);
                    let y = self.backend.builder.ins().iadd_imm_s(x, i64::from(delta));
                    self.backend.builder.def_var(v, y);
                }
                Inst::I32Const { value } => {
                    let c = self
                        .backend
                        .builder
                        .ins()
                        .iconst(types::I32, i64::from(value));
                    stack.push((LV::U(c), Kind::I32));
                }
                Inst::F32Const { value } => {
                    let c = self
                        .backend
                        .builder
                        .ins()
                        .f32const(Ieee32::with_bits(value.0));
                    stack.push((LV::U(c), Kind::F32));
                }
                Inst::I64ToI32 => match pop(&mut stack)? {
                    (LV::Idx, _) => stack.push((LV::Idx32, Kind::I32)),
                    (LV::U(x), _) => {
                        let n = self.backend.builder.ins().ireduce(types::I32, x);
                        stack.push((LV::U(n), Kind::I32));
                    }
                    _ => return Err(unexpected(bci)),
                },
                Inst::Br { target } => {
                    let t = target.0;
                    if t as usize <= bci {
                        let p = self.backend.builder.create_block();
                        polls.push((p, blocks[&t]));
                        self.backend.builder.ins().jump(p, &[]);
                    } else {
                        self.backend.builder.ins().jump(blocks[&t], &[]);
                    }
                    terminated = true;
                }
                Inst::BrIf { target } | Inst::BrUnless { target } => {
                    let (LV::U(c), _) = pop(&mut stack)? else {
                        return Err(unexpected(bci));
                    };
                    let t = target.0;
                    let taken = if t as usize <= bci {
                        let p = self.backend.builder.create_block();
                        polls.push((p, blocks[&t]));
                        p
                    } else {
                        blocks[&t]
                    };
                    let fall = blocks[&(bci as Bci + 1)];
                    if matches!(inst, Inst::BrIf { .. }) {
                        self.backend.builder.ins().brif(c, taken, &[], fall, &[]);
                    } else {
                        self.backend.builder.ins().brif(c, fall, &[], taken, &[]);
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
                            let oob = self.backend.builder.ins().icmp(
                                IntCC::UnsignedGreaterThanOrEqual,
                                i,
                                len,
                            );
                            let ok = self.backend.builder.create_block();
                            self.backend.builder.ins().brif(oob, abandon, &[], ok, &[]);
                            self.backend.builder.switch_to_block(ok);
                            let i64v = self.backend.builder.ins().uextend(types::I64, i);
                            let off = self.backend.builder.ins().ishl_imm_u(i64v, 2);
                            let a = self.backend.builder.ins().iadd(base, off);
                            let x = self.backend.builder.ins().load(cl_type(k), trusted(), a, 8);
                            stack.push((LV::U(x), k));
                        }
                        LV::Idx32 if !plan.runs.contains(&(bci as Bci)) => {
                            // Proven in bounds for the chunk.
                            let off = self.backend.builder.ins().ishl_imm_u(wv, 2);
                            let a = self.backend.builder.ins().iadd(base, off);
                            let x = self.backend.builder.ins().load(vector_type(k), flags, a, 8);
                            stack.push((LV::V(x), k));
                        }
                        LV::Aff(_) | LV::Idx32 if plan.runs.contains(&(bci as Bci)) => {
                            let LV::Aff(first) = self.as_aff(idx, wv) else {
                                return Err(unexpected(bci));
                            };
                            let x = self.run_load(k, base, first, abandon);
                            stack.push((LV::V(x), k));
                        }
                        _ => return Err(unexpected(bci)),
                    }
                }
                Inst::I32AStore | Inst::F32AStore => {
                    let (x, k) = pop(&mut stack)?;
                    let (idx, _) = pop(&mut stack)?;
                    let (LV::Arr(r), _) = pop(&mut stack)? else {
                        return Err(unexpected(bci));
                    };
                    let x = self.as_aff(x, wv);
                    let x = match self.lanes(x) {
                        LV::U(s) => self.backend.builder.ins().splat(vector_type(k), s),
                        LV::V(v) => v,
                        _ => return Err(unexpected(bci)),
                    };
                    let base = self.obj_addr(r);
                    let a = match idx {
                        _ if plan.run_stores.contains(&(bci as Bci)) => {
                            let LV::Aff(first) = self.as_aff(idx, wv) else {
                                return Err(unexpected(bci));
                            };
                            self.run_addr(base, first, abandon)
                        }
                        LV::Idx32 => {
                            let off = self.backend.builder.ins().ishl_imm_u(wv, 2);
                            self.backend.builder.ins().iadd(base, off)
                        }
                        _ => return Err(unexpected(bci)),
                    };
                    self.backend.builder.ins().store(flags, x, a, 8);
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
                    self.backend.builder.ins().jump(finish, &[]);
                    terminated = true;
                }
                Inst::Call { func } => {
                    // A lane function (`opt::lane_call`), inlined on the
                    // lanes.
                    let g = self.v.func(func);
                    let ret = g.ret;
                    // The arguments, last first off the stack.
                    let mut args = Vec::with_capacity(g.params().len());
                    for p in g.params().iter().rev() {
                        let (x, _) = pop(&mut stack)?;
                        let x = self.as_aff(x, wv);
                        args.push(match self.lanes(x) {
                            LV::U(s) => self
                                .backend
                                .builder
                                .ins()
                                .splat(vector_type(p.ty.kind()), s),
                            LV::V(v) => v,
                            _ => return Err(unexpected(bci)),
                        });
                    }
                    args.reverse();
                    for a in &mut args {
                        *a = self.backend.builder.func.dfg.resolve_aliases(*a);
                    }
                    let r = match calls.entry((func, args)) {
                        std::collections::hash_map::Entry::Occupied(e) => *e.get(),
                        std::collections::hash_map::Entry::Vacant(e) => {
                            let r = self.lane_call(func, &e.key().1)?;
                            *e.insert(r)
                        }
                    };
                    let k = ret.map(|t| t.kind()).ok_or_else(|| unexpected(bci))?;
                    stack.push((LV::V(r), k));
                }
                _ => match inst.opcode().op() {
                    Op::Binary(k, op) => {
                        let (b, _) = pop(&mut stack)?;
                        let (a, _) = pop(&mut stack)?;
                        let (a, b) = (self.as_aff(a, wv), self.as_aff(b, wv));
                        let at = bci as Bci;
                        let r = match (a, b) {
                            (LV::Aff(first), LV::U(d)) if plan.run_divs.contains(&at) => {
                                self.run_div(op, first, d, abandon)
                            }
                            (a, LV::U(d)) if plan.divs.contains(&at) => self
                                .lane_div(op, a, d, abandon)
                                .ok_or_else(|| unexpected(bci))?,
                            (LV::U(x), LV::U(y)) => LV::U(Cpu::binary(self, op, k, x, y)),
                            (LV::Aff(x), LV::U(y)) | (LV::U(y), LV::Aff(x))
                                if op == offload_ir::isa::BinOp::Add =>
                            {
                                LV::Aff(self.backend.builder.ins().iadd(x, y))
                            }
                            (LV::Aff(x), LV::U(y)) if op == offload_ir::isa::BinOp::Sub => {
                                LV::Aff(self.backend.builder.ins().isub(x, y))
                            }
                            (a, b) => {
                                let lane = |this: &mut Self, v: LV| match this.lanes(v) {
                                    LV::U(s) => {
                                        Ok(this.backend.builder.ins().splat(vector_type(k), s))
                                    }
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
                            LV::V(x) if matches!(op, UnOp::Exp | UnOp::Log) => {
                                LV::V(self.lane_math(op, x))
                            }
                            LV::V(x) => LV::V(Cpu::unary(self, op, k, x)),
                            _ => return Err(unexpected(bci)),
                        };
                        stack.push((r, k));
                    }
                    Op::Convert(from, to) => match pop(&mut stack)? {
                        // The narrowed workitem number widened: the number
                        // (a proven chunk's numbers fit `i32`).
                        (LV::Idx32, _) if to == Kind::I64 => stack.push((LV::Idx, to)),
                        (LV::U(a), _) => {
                            stack.push((LV::U(Cpu::convert(self, from, to, a)), to));
                        }
                        _ => return Err(unexpected(bci)),
                    },
                    Op::Compare(_, _) if plan.known.contains_key(&(bci as Bci)) => {
                        pop(&mut stack)?;
                        pop(&mut stack)?;
                        let c = self
                            .backend
                            .builder
                            .ins()
                            .iconst(types::I32, i64::from(plan.known[&(bci as Bci)]));
                        stack.push((LV::U(c), Kind::I32));
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
            self.backend.builder.ins().jump(finish, &[]);
        }
        for (p, to) in polls {
            self.backend.builder.switch_to_block(p);
            let cw = self.control_word();
            self.backend.builder.ins().brif(cw, abandon, &[], to, &[]);
        }
        self.backend.builder.switch_to_block(finish);
        let d = self.backend.builder.use_var(done);
        let d1 = self.backend.builder.ins().iadd_imm_s(d, LANES);
        self.backend.builder.def_var(done, d1);
        let w1 = self.backend.builder.ins().iadd_imm_s(wv, LANES);
        self.backend.builder.def_var(w, w1);
        self.backend.builder.ins().jump(then, &[]);
        Ok(())
    }

    /// `x`, the narrowed workitem number made consecutive lanes from `w`
    /// (the group's `w` is `wv`).
    fn as_aff(&mut self, x: LV, wv: Value) -> LV {
        match x {
            LV::Idx32 => LV::Aff(self.backend.builder.ins().ireduce(types::I32, wv)),
            x => x,
        }
    }

    /// `x` with consecutive lanes made a vector (`first + [0, 1, 2, 3]`).
    fn lanes(&mut self, x: LV) -> LV {
        let LV::Aff(first) = x else { return x };
        let s = self.backend.builder.ins().splat(types::I32X4, first);
        let bytes: Vec<u8> = (0..LANES as u32).flat_map(u32::to_le_bytes).collect();
        let iota = self
            .backend
            .builder
            .func
            .dfg
            .constants
            .insert(cranelift_codegen::ir::ConstantData::from(bytes));
        let iota = self.backend.builder.ins().vconst(types::I32X4, iota);
        LV::V(self.backend.builder.ins().iadd(s, iota))
    }

    /// Go to `abandon` when `bad`; go on in a new block otherwise.
    fn abandon_if(&mut self, bad: Value, abandon: Block) {
        let ok = self.backend.builder.create_block();
        self.backend.builder.ins().brif(bad, abandon, &[], ok, &[]);
        self.backend.builder.switch_to_block(ok);
    }

    /// `x / d` or `x % d` (`op`) of `i32` lanes or a uniform `x`, by a
    /// uniform `d` that is neither 0 nor -1 (else `abandon`).
    fn lane_div(
        &mut self,
        op: offload_ir::isa::BinOp,
        x: LV,
        d: Value,
        abandon: Block,
    ) -> Option<LV> {
        let zero = self.backend.builder.ins().icmp_imm_s(IntCC::Equal, d, 0);
        let minus = self.backend.builder.ins().icmp_imm_s(IntCC::Equal, d, -1);
        let bad = self.backend.builder.ins().bor(zero, minus);
        self.abandon_if(bad, abandon);
        let rem = op == offload_ir::isa::BinOp::Rem;
        let one = |this: &mut Self, x: Value| {
            if rem {
                this.backend.builder.ins().srem(x, d)
            } else {
                this.backend.builder.ins().sdiv(x, d)
            }
        };
        Some(match self.lanes(x) {
            LV::U(x) => LV::U(one(self, x)),
            LV::V(v) => {
                let mut out = v;
                for l in 0..LANES as u8 {
                    let x = self.backend.builder.ins().extractlane(v, l);
                    let q = one(self, x);
                    out = self.backend.builder.ins().insertlane(out, q, l);
                }
                LV::V(out)
            }
            _ => return None,
        })
    }

    /// `(first + l) / d` (uniform) or `(first + l) % d` (consecutive) over
    /// the lanes `l`, when `d > 0`, `0 <= first <= i32::MAX - (LANES - 1)`
    /// and no multiple of `d` lies inside `first + 1 ..= first + LANES - 1`;
    /// `abandon` otherwise.
    fn run_div(
        &mut self,
        op: offload_ir::isa::BinOp,
        first: Value,
        d: Value,
        abandon: Block,
    ) -> LV {
        let nonpos = self
            .backend
            .builder
            .ins()
            .icmp_imm_s(IntCC::SignedLessThanOrEqual, d, 0);
        let neg = self
            .backend
            .builder
            .ins()
            .icmp_imm_s(IntCC::SignedLessThan, first, 0);
        // The last lanes would wrap past `i32::MAX` to negative dividends.
        let wraps = self.backend.builder.ins().icmp_imm_s(
            IntCC::SignedGreaterThan,
            first,
            i64::from(i32::MAX) - (LANES - 1),
        );
        let bad = self.backend.builder.ins().bor(nonpos, neg);
        let bad = self.backend.builder.ins().bor(bad, wraps);
        self.abandon_if(bad, abandon);
        let r = self.backend.builder.ins().srem(first, d);
        let room = self.backend.builder.ins().iadd_imm_s(d, -LANES);
        let straddles = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::SignedGreaterThan, r, room);
        self.abandon_if(straddles, abandon);
        if op == offload_ir::isa::BinOp::Div {
            LV::U(self.backend.builder.ins().sdiv(first, d))
        } else {
            LV::Aff(r)
        }
    }

    /// The elements `first .. first + LANES` of the array at `base` as one
    /// vector; any of them out of bounds (or a null array, of length 0)
    /// goes to `abandon`.
    fn run_load(&mut self, k: Kind, base: Value, first: Value, abandon: Block) -> Value {
        let a = self.run_addr(base, first, abandon);
        self.backend
            .builder
            .ins()
            .load(vector_type(k), MemFlagsData::new().with_notrap(), a, 8)
    }

    /// The address (less the header's 8 bytes) of elements `first ..
    /// first + LANES` of the array whose header is at `base`, abandoning
    /// the group unless all are in bounds (a null array's length reads as
    /// 0).
    fn run_addr(&mut self, base: Value, first: Value, abandon: Block) -> Value {
        let len = self.array_len(base);
        let len = self.backend.builder.ins().uextend(types::I64, len);
        let f = self.backend.builder.ins().sextend(types::I64, first);
        let neg = self
            .backend
            .builder
            .ins()
            .icmp_imm_s(IntCC::SignedLessThan, f, 0);
        let end = self.backend.builder.ins().iadd_imm_s(f, LANES);
        let past = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::SignedGreaterThan, end, len);
        let bad = self.backend.builder.ins().bor(neg, past);
        self.abandon_if(bad, abandon);
        let off = self.backend.builder.ins().ishl_imm_u(f, 2);
        self.backend.builder.ins().iadd(base, off)
    }
}
