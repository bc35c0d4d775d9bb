//! One step of the interpreter: the dispatch over instructions, the
//! arithmetic by the instruction table's operation classes
//! ([`offload_ir::semantics`]), and the heap accesses they make.

use super::*;
use crate::AfterWait;
use offload_ir::Kind;
use offload_ir::isa::{BinOp, CmpOp, UnOp};
use offload_ir::semantics::slot::{i32 as i32v, i64 as i64v, of_bool, of_i32, of_i64};

/// The interpreter's dispatch: `[self, inst, arms..]` then the rows of
/// [`offload_ir::for_each_op!`]. Expands to one `match inst` with the
/// given arms followed by an arm per row that runs the row's [`Op`] through
/// [`Interpreter::arith`] (rows the given arms already match are
/// unreachable there and dropped).
macro_rules! arith_arms {
    (
        [$it:ident, $inst:ident, $($arms:tt)*]
        $(
            $(#[doc = $doc:literal])*
            $name:ident $({ $($field:ident : $fty:ty),* })? = $mn:literal, $eff:expr, $hz:expr, $flow:ident, $op:expr;
        )*
    ) => {
        #[allow(unreachable_patterns)]
        match $inst {
            $($arms)*
            $(
                Inst::$name { .. } => {
                    const OP: Op = {
                        #[allow(unused_imports)]
                        use {BinOp::*, CmpOp::*, Kind::*, Op::*, UnOp::*};
                        $op
                    };
                    $it.arith(OP)?;
                }
            )*
        }
    };
}

impl<'a> Interpreter<'a> {
    /// Run arithmetic operation `op` on the stack: pop its operands, push
    /// its result ([`offload_ir::semantics`]). Called with a constant, it
    /// inlines to that one operation.
    #[inline(always)]
    fn arith(&mut self, op: Op) -> Result<(), Box<Trap>> {
        let mut pop = || self.stack.pop().unwrap_or(0);
        let r = match op {
            Op::Binary(k, op) => {
                let b = pop();
                let a = pop();
                sem::binary(op, k, a, b).ok_or_else(|| {
                    Box::new(Trap::Throw(
                        ExceptionKind::Arithmetic,
                        "division by zero".into(),
                    ))
                })?
            }
            Op::Unary(k, op) => {
                let a = pop();
                sem::unary(op, k, a)
            }
            Op::Fma(k) => {
                let c = pop();
                let b = pop();
                let a = pop();
                sem::fma(k, a, b, c)
            }
            Op::Compare(k, op) => {
                let b = pop();
                let a = pop();
                u64::from(sem::compare(op, k, a, b))
            }
            Op::Convert(from, to) => {
                let a = pop();
                sem::convert(from, to, a)
            }
            Op::Other => unreachable!("an instruction without an operation class has its own arm"),
        };
        self.stack.push(r);
        Ok(())
    }

    /// Execute the instruction at `fr.pc`. On success `fr` and `body` move to
    /// the next instruction (or into a callee, or back to the caller); on an
    /// error they still name the faulting instruction.
    #[inline(always)]
    #[allow(clippy::too_many_lines)]
    pub(super) fn step(
        &mut self,
        fr: &mut Frame,
        body: &mut &'a [Inst],
    ) -> Result<Step, Box<Trap>> {
        let v: &'a Verified = self.prog.verified();
        let prog = self.prog;
        let pc = fr.pc;
        macro_rules! pop {
            () => {
                self.stack.pop().unwrap_or(0)
            };
        }
        macro_rules! push {
            ($x:expr) => {{
                let x: u64 = $x;
                self.stack.push(x)
            }};
        }
        let inst = body[pc as usize];
        let mut next = pc + 1;
        let base = fr.base as usize;
        // One `match`: the arms below, then an arm per arithmetic row of the
        // instruction table (`arith_arms!`), each `Interpreter::arith` of its
        // row's constant operation, which inlines to that operation alone.
        offload_ir::for_each_op!(arith_arms, self, inst,
            Inst::I32Const { value } => push!(of_i32(value)),
            Inst::I64Const { value } => push!(value as u64),
            Inst::F32Const { value } => push!(u64::from(value.0)),
            Inst::F64Const { value } => push!(value.0),
            Inst::RefNull => push!(0),
            Inst::Load { local } => push!(self.stack[base + local.index()]),
            Inst::Store { local } => {
                let x = pop!();
                self.stack[base + local.index()] = x;
            }
            Inst::Inc { local, delta } => {
                let slot = &mut self.stack[base + local.index()];
                *slot = if v.func(fr.func).locals[local.index()].ty == Type::I32 {
                    of_i32(i32v(*slot).wrapping_add(delta))
                } else {
                    of_i64(i64v(*slot).wrapping_add(i64::from(delta)))
                };
            }
            Inst::Dup => {
                let x = *self.stack.last().unwrap_or(&0);
                push!(x);
            }
            Inst::Pop => {
                pop!();
            }
            Inst::Swap => {
                let n = self.stack.len();
                self.stack.swap(n - 1, n - 2);
            }
            Inst::Br { target } => {
                next = target.0;
                if next <= pc {
                    self.poll(pc)?;
                }
            }
            Inst::BrIf { target }
            | Inst::BrUnless { target }
            | Inst::BrNull { target }
            | Inst::BrNonNull { target } => {
                let x = pop!() as u32;
                let taken = match inst {
                    Inst::BrIf { .. } => x != 0,
                    Inst::BrUnless { .. } => x == 0,
                    Inst::BrNull { .. } => x == 0,
                    _ => x != 0,
                };
                if let Some(p) = self.profile.as_mut() {
                    p.branch(fr.func, pc, taken);
                    if matches!(inst, Inst::BrNull { .. } | Inst::BrNonNull { .. }) && x == 0 {
                        p.null(fr.func, pc);
                    }
                }
                if taken {
                    let Label(t) = target;
                    next = t;
                    if t <= pc {
                        self.poll(pc)?;
                    }
                }
            }
            Inst::NewArray { elem } => {
                let len = i32v(pop!());
                if len < 0 {
                    return Err(Box::new(Trap::Throw(
                        ExceptionKind::NegativeArraySize,
                        format!("length {len}"),
                    )));
                }
                let Some(Type::Array(e, d)) = elem.array_of() else {
                    unreachable!("verified: the element type has an array type")
                };
                let at = self.allocate(
                    Header::Array {
                        elem: prog.global_elem(e),
                        dims: d,
                        len: len as u32,
                    },
                    pc,
                )?;
                push!(u64::from(at));
            }
            Inst::ArrayLen => {
                let r = pop!() as u32;
                let off = self.object(r, "array.len")?;
                if r == 0 {
                    self.note_null(fr.func, pc);
                }
                push!(u64::from(self.heap.load32(off + 4)?));
            }
            Inst::I32ALoad | Inst::F32ALoad | Inst::RefALoad => {
                let i = i32v(pop!());
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let at = self.array_elem(r, i, 4)?;
                push!(u64::from(self.heap.load32(at)?));
            }
            Inst::I64ALoad | Inst::F64ALoad => {
                let i = i32v(pop!());
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let at = self.array_elem(r, i, 8)?;
                push!(self.heap.load64(at)?);
            }
            Inst::I32AStore | Inst::F32AStore | Inst::RefAStore => {
                let x = pop!();
                let i = i32v(pop!());
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let at = self.array_elem(r, i, 4)?;
                if matches!(inst, Inst::RefAStore) {
                    self.barrier(r, x);
                }
                self.heap.store32(at, x as u32)?;
            }
            Inst::I64AStore | Inst::F64AStore => {
                let x = pop!();
                let i = i32v(pop!());
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let at = self.array_elem(r, i, 8)?;
                self.heap.store64(at, x)?;
            }
            Inst::New { class } => {
                let at = self.allocate(
                    Header::Object {
                        class: prog.global_class(class),
                        size: prog.layout.class_size[class.index()],
                    },
                    pc,
                )?;
                push!(u64::from(at));
            }
            Inst::GetField { field } => {
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let off =
                    self.object(r, "getfield")? + prog.layout.field_offset[field.index()] as usize;
                let x = if kind_size(v.field(field).ty.kind()) == 8 {
                    self.heap.load64(off)?
                } else {
                    u64::from(self.heap.load32(off)?)
                };
                push!(x);
            }
            Inst::PutField { field } => {
                let x = pop!();
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let off =
                    self.object(r, "putfield")? + prog.layout.field_offset[field.index()] as usize;
                let ty = v.field(field).ty;
                if kind_size(ty.kind()) == 8 {
                    self.heap.store64(off, x)?;
                } else {
                    if ty.is_ref() {
                        self.barrier(r, x);
                    }
                    self.heap.store32(off, x as u32)?;
                }
            }
            Inst::InstanceOf { ty } => {
                let r = pop!() as u32;
                let yes = r != 0 && self.is_instance(r, ty)?;
                push!(of_bool(yes));
            }
            Inst::CheckCast { ty } => {
                let r = *self.stack.last().unwrap_or(&0) as u32;
                if r != 0 && !self.is_instance(r, ty)? {
                    return Err(Box::new(Trap::Throw(
                        ExceptionKind::ClassCast,
                        format!(
                            "{} cannot be cast to {}",
                            self.type_name(r),
                            v.type_name(ty)
                        ),
                    )));
                }
            }
            Inst::Call { func } | Inst::CallVirt { method: func } => {
                let callee = v.func(func);
                let nargs = callee.param_count as usize;
                let arg0 = self.stack.len() - nargs;
                let target = if let Inst::CallVirt { .. } = inst {
                    let recv = self.stack[arg0] as u32;
                    self.null_note(recv, fr.func, pc);
                    let off = self.object(recv, "virtual call")?;
                    let class = self.heap.load32(off)?;
                    let local = prog.local_class(class).unwrap_or(ClassId(u32::MAX));
                    if let Some(p) = self.profile.as_mut() {
                        p.receiver(fr.func, pc, local.0);
                    }
                    prog.dispatch(local, func).ok_or_else(|| {
                        Trap::Throw(
                            ExceptionKind::IllegalState,
                            format!("no implementation of `{}` for the receiver", callee.name),
                        )
                    })?
                } else {
                    func
                };
                // The caller's pc, for traces and for the return.
                if let Some(top) = self.frames.last_mut() {
                    top.pc = pc;
                }
                self.poll(pc)?;
                if self.frames.len() >= self.max_depth {
                    return Err(Box::new(Trap::Throw(
                        ExceptionKind::StackOverflow,
                        format!("more than {} nested calls", self.max_depth),
                    )));
                }
                let nlocals = v.func(target).locals.len();
                self.stack.resize(arg0 + nlocals, 0);
                *fr = Frame {
                    func: target,
                    pc: 0,
                    base: arg0 as u32,
                };
                self.frames.push(*fr);
                *body = &v.func(target).body;
                return Ok(Step::Next);
            }
            Inst::I32ArrayAtomicAdd => {
                let x = pop!() as u32;
                let i = i32v(pop!());
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let at = self.array_elem(r, i, 4)?;
                push!(u64::from(
                    self.heap.u32_cell(at)?.fetch_add(x, Ordering::SeqCst)
                ));
            }
            Inst::I64ArrayAtomicAdd => {
                let x = pop!();
                let i = i32v(pop!());
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let at = self.array_elem(r, i, 8)?;
                push!(self.heap.u64_cell(at)?.fetch_add(x, Ordering::SeqCst));
            }
            Inst::I32ArrayCmpxchg => {
                let new = pop!() as u32;
                let expected = pop!() as u32;
                let i = i32v(pop!());
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let at = self.array_elem(r, i, 4)?;
                let old = self.heap.u32_cell(at)?.compare_exchange(
                    expected,
                    new,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
                push!(u64::from(old.unwrap_or_else(|x| x)));
            }
            Inst::I64ArrayCmpxchg => {
                let new = pop!();
                let expected = pop!();
                let i = i32v(pop!());
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let at = self.array_elem(r, i, 8)?;
                let old = self.heap.u64_cell(at)?.compare_exchange(
                    expected,
                    new,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
                push!(old.unwrap_or_else(|x| x));
            }
            Inst::FieldAtomicAdd { field } | Inst::FieldCmpxchg { field } => {
                let new = pop!();
                let expected = if let Inst::FieldCmpxchg { .. } = inst {
                    Some(pop!())
                } else {
                    None
                };
                let r = pop!() as u32;
                self.null_note(r, fr.func, pc);
                let off = self.object(r, inst.opcode().mnemonic())?
                    + prog.layout.field_offset[field.index()] as usize;
                let old = if v.field(field).ty == Type::I32 {
                    let cell = self.heap.u32_cell(off)?;
                    u64::from(match expected {
                        None => cell.fetch_add(new as u32, Ordering::SeqCst),
                        Some(e) => cell
                            .compare_exchange(
                                e as u32,
                                new as u32,
                                Ordering::SeqCst,
                                Ordering::SeqCst,
                            )
                            .unwrap_or_else(|x| x),
                    })
                } else {
                    let cell = self.heap.u64_cell(off)?;
                    match expected {
                        None => cell.fetch_add(new, Ordering::SeqCst),
                        Some(e) => cell
                            .compare_exchange(e, new, Ordering::SeqCst, Ordering::SeqCst)
                            .unwrap_or_else(|x| x),
                    }
                };
                push!(old);
            }
            Inst::Ret => {
                let result = v.func(fr.func).ret.map(|_| pop!());
                self.frames.pop();
                self.stack.truncate(fr.base as usize);
                match self.frames.last().copied() {
                    None => return Ok(Step::Done(result)),
                    Some(caller) => {
                        if let Some(x) = result {
                            push!(x);
                        }
                        *fr = caller;
                        fr.pc += 1;
                        *body = &v.func(fr.func).body;
                        return Ok(Step::Next);
                    }
                }
            }
            Inst::Throw { kind } => {
                return Err(Box::new(Trap::Throw(kind, "thrown by the kernel".into())));
            }
        );
        fr.pc = next;
        Ok(Step::Next)
    }

    pub(super) fn null_note(&mut self, r: u32, f: FuncId, pc: Bci) {
        if r == 0 {
            self.note_null(f, pc);
        }
    }

    pub(super) fn note_null(&mut self, f: FuncId, pc: Bci) {
        if let Some(p) = self.profile.as_mut() {
            p.null(f, pc);
        }
    }

    #[inline]
    pub(super) fn array_elem(&self, r: u32, idx: i32, esize: usize) -> Result<usize, Trap> {
        if r == 0 {
            return Err(Trap::Throw(
                ExceptionKind::NullPointer,
                "array is null".into(),
            ));
        }
        let base = r as usize * 8;
        let len = self.heap.load32(base + 4)?;
        if idx < 0 || idx as u32 >= len {
            return Err(Trap::Throw(
                ExceptionKind::IndexOutOfBounds,
                format!("index {idx} out of bounds for length {len}"),
            ));
        }
        Ok(base + 8 + idx as usize * esize)
    }

    #[inline]
    pub(super) fn object(&self, r: u32, what: &str) -> Result<usize, Trap> {
        if r == 0 {
            Err(Trap::Throw(
                ExceptionKind::NullPointer,
                format!("{what} on null"),
            ))
        } else {
            Ok(r as usize * 8)
        }
    }

    /// Allocate an object for the instruction at `pc` of the innermost
    /// frame (its operands popped: none of them is a reference). When eden
    /// is exhausted the collector, if there is one, collects with the
    /// frames as roots and the allocation is tried again; `OutOfMemory`
    /// only when a collection of this interpreter's own did not make room.
    pub(super) fn allocate(&mut self, header: Header, pc: Bci) -> Result<u32, Trap> {
        // An object of another kind than the first lies outside the TLAB
        // the nursery hands back (`Interpreter::enable_nursery`).
        if self.nursery && self.alloc.kind_of(header) != Some(0) {
            self.item_escaped = true;
        }
        // Collections this allocation waited for (another worker's) or
        // ran: a bound, so that workers that keep taking each other's
        // room cannot loop for ever.
        let mut rounds = 0;
        loop {
            match self.alloc.alloc(self.worker, header) {
                Ok(at) => return Ok(at),
                Err(AllocFailure::Overflow) => std::thread::yield_now(),
                Err(AllocFailure::Exhausted) => {
                    rounds += 1;
                    let Some(gc) = self.gc else {
                        return Err(self.out_of_memory(header));
                    };
                    if rounds <= 8 && gc.collect(&mut self.frame_roots(pc)) {
                        continue;
                    }
                    // No room after collecting: what others hold may die
                    // (`crate::room`).
                    let (alloc, worker) = (self.alloc, self.worker);
                    let mut again = || alloc.alloc(worker, header).ok();
                    match gc.no_room(&mut self.frame_roots(pc), &mut again) {
                        AfterWait::Allocated(at) => return Ok(at),
                        AfterWait::OutOfMemory => return Err(self.out_of_memory(header)),
                        AfterWait::Retry => {
                            if self
                                .control
                                .is_some_and(|c| c.interrupted_since(self.epoch))
                            {
                                return Err(Trap::Interrupted);
                            }
                        }
                    }
                }
            }
        }
    }

    /// `OutOfMemory` for an allocation of `header` that found no room.
    fn out_of_memory(&self, header: Header) -> Trap {
        let max = self.heap.config().max;
        Trap::Throw(
            ExceptionKind::OutOfMemory,
            match header.size() {
                Some(bytes) => {
                    format!("cannot allocate {bytes} bytes: heap at its maximum of {max} bytes")
                }
                None => format!("cannot allocate {}", offload_heap::alloc::too_large(header)),
            },
        )
    }

    /// Whether the object at `r` (non-null) is an instance of module type `t`.
    pub(super) fn is_instance(&self, r: u32, t: Type) -> Result<bool, Trap> {
        Ok(self
            .prog
            .header_is_instance(self.heap.header(offload_heap::Ref(r))?, t))
    }

    pub(super) fn type_name(&self, r: u32) -> String {
        self.heap
            .header(offload_heap::Ref(r))
            .map_or_else(|e| format!("<{e}>"), |h| self.prog.header_type_name(h))
    }
}
