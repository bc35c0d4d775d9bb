//! The dispatch over instructions: what each instruction pops, checks,
//! computes through the backend's primitives, and pushes.

use super::{Backend, Walker, plan};
use crate::JitError;
use offload_deopt::Reason;
use offload_ir::isa::hz;
use offload_ir::{Bci, Inst, Kind};

pub(crate) use offload_ir::isa::{BinOp, CmpOp, Op, UnOp};

/// A constant of the bytecode.
#[derive(Copy, Clone, Debug, PartialEq)]
pub(crate) enum Const {
    I32(i32),
    I64(i64),
    /// An `f32` by its bits.
    F32(u32),
    /// An `f64` by its bits.
    F64(u64),
    Null,
}

impl Const {
    /// The zero of kind `k`.
    pub(crate) fn zero(k: Kind) -> Const {
        match k {
            Kind::I32 => Const::I32(0),
            Kind::I64 => Const::I64(0),
            Kind::F32 => Const::F32(0),
            Kind::F64 => Const::F64(0),
            Kind::Ref => Const::Null,
        }
    }
}

/// The element kind and size of an array access instruction.
pub(crate) fn elem(inst: Inst) -> (Kind, u32) {
    use Kind::{F32, F64, I32, I64, Ref};
    let k = match inst {
        Inst::I32ALoad | Inst::I32AStore | Inst::I32ArrayAtomicAdd | Inst::I32ArrayCmpxchg => I32,
        Inst::I64ALoad | Inst::I64AStore | Inst::I64ArrayAtomicAdd | Inst::I64ArrayCmpxchg => I64,
        Inst::F32ALoad | Inst::F32AStore => F32,
        Inst::F64ALoad | Inst::F64AStore => F64,
        _ => Ref,
    };
    (k, if matches!(k, I64 | F64) { 8 } else { 4 })
}

impl<B: Backend> Walker<'_, B> {
    /// Lower one instruction. Returns whether the block is terminated.
    pub(crate) fn inst(&mut self, bci: Bci, inst: Inst) -> Result<bool, JitError> {
        use Kind::{I32, Ref};
        let hazards = inst.opcode().hazards();
        if hazards.has(hz::HOST_MATH) {
            // The site exists whether or not this device hands the
            // operation to the host, so the metadata is the same on every
            // device.
            self.site_id(bci);
        }
        // The arithmetic the instruction table classifies.
        match inst.opcode().op() {
            Op::Binary(k, op) => {
                let b = self.pop(k);
                let a = self.pop(k);
                if hazards.has(hz::DIV_CHECK) {
                    // The deopt re-executes the division: its operands stay
                    // in the frame state.
                    self.cur.depth += 2;
                    let zero = B::is_zero(self, k, b.clone());
                    self.deopt_if(zero, bci, Reason::DivideByZero);
                    self.cur.depth -= 2;
                }
                let r = B::binary(self, op, k, a, b);
                self.push(k, r);
                return Ok(false);
            }
            Op::Unary(k, op) => {
                let a = self.pop(k);
                if let Some(big) = B::host_math(self, op, k, a.clone()) {
                    self.cur.depth += 1; // the host re-executes the instruction
                    self.deopt_if(big, bci, Reason::DeviceLimit);
                    self.cur.depth -= 1;
                }
                let r = B::unary(self, op, k, a);
                self.push(k, r);
                return Ok(false);
            }
            Op::Fma(k) => {
                let c = self.pop(k);
                let b = self.pop(k);
                let a = self.pop(k);
                let r = B::fma(self, k, a, b, c);
                self.push(k, r);
                return Ok(false);
            }
            Op::Compare(k, op) => {
                let b = self.pop(k);
                let a = self.pop(k);
                if self.outer.is_empty()
                    && let Some(c) = B::known_compare(self, bci)
                {
                    self.push_const(I32, super::Const::I32(c));
                    self.cur.known_branch = Some((bci + 1, c));
                    return Ok(false);
                }
                let r = B::compare(self, op, k, a, b);
                self.push(I32, r);
                return Ok(false);
            }
            Op::Convert(from, to) => {
                let a = self.pop(from);
                let r = B::convert(self, from, to, a);
                self.push(to, r);
                return Ok(false);
            }
            Op::Other => {}
        }
        match inst {
            Inst::I32Const { value } => self.push_const(I32, super::Const::I32(value)),
            Inst::I64Const { value } => self.push_const(Kind::I64, super::Const::I64(value)),
            Inst::F32Const { value } => self.push_const(Kind::F32, super::Const::F32(value.0)),
            Inst::F64Const { value } => self.push_const(Kind::F64, super::Const::F64(value.0)),
            Inst::RefNull => self.push_const(Ref, super::Const::Null),
            Inst::Load { local } => {
                let k = self.v.func(self.cur.func).locals[local.index()].ty.kind();
                let x = self.local(local.index());
                self.push(k, x);
            }
            Inst::Store { local } => {
                let k = self.v.func(self.cur.func).locals[local.index()].ty.kind();
                let x = self.pop(k);
                let var = self.cur.locals[local.index()].clone();
                B::def_var(self, &var, k, x);
            }
            Inst::Inc { local, delta } => {
                let k = self.v.func(self.cur.func).locals[local.index()].ty.kind();
                let var = self.cur.locals[local.index()].clone();
                B::increment(self, &var, k, delta);
            }
            Inst::Dup => {
                let k = self.kind_at(bci, 0);
                let x = self.pop(k);
                self.push(k, x.clone());
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
                let a = B::stable(self, ka, a);
                let b = B::stable(self, kb, b);
                self.push(ka, a);
                self.push(kb, b);
            }
            Inst::Br { target } => {
                let dest = self.edge(bci, target.0);
                B::jump(self, &dest);
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
                let jumps = matches!(inst, Inst::BrIf { .. } | Inst::BrNonNull { .. });
                if let Some((at, c)) = self.cur.known_branch.take()
                    && at == bci
                    && k == I32
                {
                    // Its condition is a known compare's (the value just
                    // pushed): one way only.
                    let to = if (c != 0) == jumps {
                        self.edge(bci, target.0)
                    } else {
                        self.cur.blocks[&(bci + 1)].clone()
                    };
                    B::jump(self, &to);
                    return Ok(true);
                }
                if self.cur.stays == Some(bci) {
                    // A loop test known to stay in the loop (an unrolled
                    // copy whose round was tested at its start).
                    let fall = self.cur.blocks[&(bci + 1)].clone();
                    B::jump(self, &fall);
                    return Ok(true);
                }
                if let Some(taken) = self.spec.branch(self.cur.func, bci) {
                    self.speculated_branch(jumps, bci, target.0, x, taken);
                    return Ok(true);
                }
                let dest = self.edge(bci, target.0);
                let fall = self.cur.blocks[&(bci + 1)].clone();
                B::cond_branch(self, x, jumps, &dest, &fall);
                return Ok(true);
            }
            Inst::ArrayLen => {
                let r = self.pop(Ref);
                self.cur.depth += 1;
                self.null_check_unless_known(r.clone(), bci, 0);
                self.cur.depth -= 1;
                let base = B::obj_addr(self, r);
                let len = B::array_len(self, base);
                self.push(I32, len);
            }
            Inst::I32ALoad | Inst::F32ALoad | Inst::RefALoad | Inst::I64ALoad | Inst::F64ALoad => {
                let (k, size) = elem(inst);
                let idx = self.pop(I32);
                let r = self.pop(Ref);
                self.cur.depth += 2; // operands stay in the frame state for the checks
                let a = B::elem_addr(self, r, idx, size, bci, 1);
                self.cur.depth -= 2;
                let x = B::load(self, k, a, 0);
                self.push(k, x);
            }
            Inst::I32AStore
            | Inst::F32AStore
            | Inst::RefAStore
            | Inst::I64AStore
            | Inst::F64AStore => {
                let (k, size) = elem(inst);
                let x = self.pop(k);
                let idx = self.pop(I32);
                let r = self.pop(Ref);
                self.cur.depth += 3;
                let a = B::elem_addr(self, r.clone(), idx, size, bci, 2);
                self.cur.depth -= 3;
                if k == Ref && !self.cur.analysis.fresh(bci, 2) {
                    B::write_barrier(self, r, x.clone());
                }
                B::store(self, k, a, 0, x);
            }
            Inst::GetField { field } | Inst::PutField { field } => {
                let k = self.v.field(field).ty.kind();
                let put = matches!(inst, Inst::PutField { .. });
                let x = if put { Some(self.pop(k)) } else { None };
                let r = self.pop(Ref);
                let n = if put { 2 } else { 1 };
                self.cur.depth += n;
                self.null_check_unless_known(r.clone(), bci, n - 1);
                self.cur.depth -= n;
                let base = B::obj_addr(self, r.clone());
                let off = self.prog.layout.field_offset[field.index()];
                match x {
                    Some(x) => {
                        // A receiver the workitem allocated is at least as
                        // young as anything stored into it: nothing escapes.
                        if k == Ref && !self.cur.analysis.fresh(bci, 1) {
                            B::write_barrier(self, r, x.clone());
                        }
                        B::store(self, k, base, off, x);
                    }
                    None => {
                        let x = B::load(self, k, base, off);
                        self.push(k, x);
                    }
                }
            }
            Inst::I32ArrayAtomicAdd | Inst::I64ArrayAtomicAdd => {
                let (k, size) = elem(inst);
                let x = self.pop(k);
                let idx = self.pop(I32);
                let r = self.pop(Ref);
                self.cur.depth += 3;
                let a = B::elem_addr(self, r, idx, size, bci, 2);
                self.cur.depth -= 3;
                // An add to the slot's own copy of a summed array (in the
                // kernel itself: such an array is passed to no function).
                let old = if self.outer.is_empty() && self.private_adds.contains(&bci) {
                    B::private_add(self, k, a, x)
                } else {
                    B::atomic_add(self, k, a, x)
                };
                self.push(k, old);
            }
            Inst::I32ArrayCmpxchg | Inst::I64ArrayCmpxchg => {
                let (k, size) = elem(inst);
                let new = self.pop(k);
                let expected = self.pop(k);
                let idx = self.pop(I32);
                let r = self.pop(Ref);
                self.cur.depth += 4;
                let a = B::elem_addr(self, r, idx, size, bci, 3);
                self.cur.depth -= 4;
                let old = B::cmpxchg(self, k, a, expected, new);
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
                self.null_check_unless_known(r.clone(), bci, n - 1);
                self.cur.depth -= n;
                let base = B::obj_addr(self, r);
                let off = self.prog.layout.field_offset[field.index()];
                let a = B::field_addr(self, base, off);
                let old = match expected {
                    None => B::atomic_add(self, k, a, new),
                    Some(e) => B::cmpxchg(self, k, a, e, new),
                };
                self.push(k, old);
            }
            Inst::Ret => {
                match self.cur.ret_to.clone() {
                    None => {
                        let ret = self.v.func(self.cur.func).ret;
                        let r = ret.map(|t| self.pop(t.kind()));
                        B::ret_kernel(self, r);
                    }
                    Some(join) => {
                        let ret = self.v.func(self.cur.func).ret;
                        let r = ret.map(|t| self.pop(t.kind()));
                        B::jump_join(self, &join, r);
                    }
                }
                return Ok(true);
            }
            Inst::Call { func } => {
                let reuse = self.outer.is_empty() && B::reuses_calls(self);
                let earlier = reuse
                    .then(|| {
                        self.call_results.iter().rev().find(|(at, f, _)| {
                            *f == func
                                && super::reuse::reusable_call(self.v, self.cur.func, *at, bci)
                        })
                    })
                    .flatten()
                    .map(|(_, _, r)| r.clone());
                let k = self.v.func(func).ret.map(|t| t.kind());
                if let (Some(r), Some(k)) = (earlier, k) {
                    // The same pure call with the same arguments: its
                    // result, the arguments popped.
                    for p in self.v.func(func).params().iter().rev() {
                        self.pop(p.ty.kind());
                    }
                    self.push(k, r);
                } else if let Some(r) = self.inline(bci, func)? {
                    if reuse {
                        self.call_results.push((bci, func, r.clone()));
                    }
                    self.push(k.expect("returns"), r);
                }
            }
            Inst::CallVirt { method } => self.call_virtual(bci, method)?,
            Inst::Throw { .. } => {
                self.deopt_here(bci, Reason::Throw);
                return Ok(true);
            }
            Inst::InstanceOf { ty } => {
                let r = self.pop(Ref);
                let x = B::instance_of(self, r, ty);
                self.push(I32, x);
            }
            Inst::CheckCast { ty } => {
                // The reference stays on the stack (and in the frame state).
                let r = self.pop(Ref);
                self.cur.depth += 1;
                let fail = B::cast_fails(self, r, ty);
                self.deopt_if(fail, bci, Reason::ClassCast);
            }
            Inst::New { class } => {
                let (tag, size) = plan::new_object(self.prog, class);
                let r = B::new_object(self, bci, tag, size);
                self.push(Ref, r);
            }
            Inst::NewArray { elem } => {
                let (tag, esize) = plan::new_array(self.prog, self.cur.func, elem, bci)?;
                let len = self.pop(I32);
                self.cur.depth += 1; // in the frame state for the checks
                let neg = B::is_negative(self, len.clone());
                self.deopt_if(neg, bci, Reason::NegativeSize);
                let r = B::new_array(self, bci, tag, esize, len);
                self.cur.depth -= 1;
                self.push(Ref, r);
            }
            _ => {
                return Err(JitError::Unsupported {
                    func: self.v.func(self.cur.func).name.clone(),
                    bci,
                    why: crate::Refusal::NoLowering {
                        mnemonic: inst.opcode().mnemonic(),
                    },
                });
            }
        }
        Ok(false)
    }

    fn push_const(&mut self, k: Kind, c: super::Const) {
        let x = B::constant(self, c);
        self.push(k, x);
    }
}
