//! The function-level rules: the dataflow over a body's types, one
//! instruction at a time.

use super::*;

pub(super) struct FnVerifier<'a> {
    pub(super) m: &'a Module,
    pub(super) f: &'a Function,
    pub(super) bci: Bci,
}

impl FnVerifier<'_> {
    pub(super) fn diag(&self, message: String) -> Diagnostic {
        Diagnostic {
            phase: Phase::Verify,
            file: self.m.source.0.clone(),
            span: self.f.span_of(Some(self.bci)),
            func: Some(self.f.name.clone()),
            bci: Some(self.bci),
            message,
            expected: None,
            found: None,
        }
    }

    pub(super) fn simple(&self, message: String) -> Box<Diagnostic> {
        Box::new(self.diag(message))
    }

    pub(super) fn mismatch(
        &self,
        message: &str,
        expected: String,
        found: String,
    ) -> Box<Diagnostic> {
        Box::new(Diagnostic {
            expected: Some(expected),
            found: Some(found),
            ..self.diag(message.to_string())
        })
    }

    pub(super) fn tn(&self, t: Type) -> String {
        format!("`{}`", type_name(self.m, t))
    }

    pub(super) fn mnemonic(&self) -> &'static str {
        self.f.body[self.bci as usize].opcode().mnemonic()
    }

    pub(super) fn pop(&self, fr: &mut Frame, what: &str) -> FResult<Type> {
        fr.stack.pop().ok_or_else(|| {
            self.mismatch(
                &format!("stack underflow in `{}`", self.mnemonic()),
                what.to_string(),
                "an empty stack".into(),
            )
        })
    }

    /// Pop a value assignable to `want`.
    pub(super) fn pop_type(&self, fr: &mut Frame, want: Type) -> FResult<Type> {
        let t = self.pop(fr, &self.tn(want))?;
        if assignable(self.m, t, want) {
            Ok(t)
        } else {
            Err(self.mismatch(
                &format!("type mismatch in `{}`", self.mnemonic()),
                self.tn(want),
                self.tn(t),
            ))
        }
    }

    pub(super) fn sig_matches(&self, s: Sig, t: Type) -> bool {
        match s {
            Sig::I32 => t == Type::I32,
            Sig::I64 => t == Type::I64,
            Sig::F32 => t == Type::F32,
            Sig::F64 => t == Type::F64,
            Sig::Ref => t.is_ref(),
            Sig::Array => matches!(t, Type::Array(..) | Type::Null),
            Sig::ArrayOf(e) => t == Type::Array(e, 1) || t == Type::Null,
        }
    }

    pub(super) fn sig_name(&self, s: Sig) -> String {
        match s {
            Sig::I32 => "`i32`".into(),
            Sig::I64 => "`i64`".into(),
            Sig::F32 => "`f32`".into(),
            Sig::F64 => "`f64`".into(),
            Sig::Ref => "a reference".into(),
            Sig::Array => "an array".into(),
            Sig::ArrayOf(e) => self.tn(Type::Array(e, 1)),
        }
    }

    pub(super) fn sig_type(s: Sig) -> Type {
        match s {
            Sig::I32 => Type::I32,
            Sig::I64 => Type::I64,
            Sig::F32 => Type::F32,
            Sig::F64 => Type::F64,
            Sig::Ref | Sig::Array => Type::Ref,
            Sig::ArrayOf(e) => Type::Array(e, 1),
        }
    }

    pub(super) fn local(&self, l: crate::types::LocalId) -> FResult<usize> {
        if l.index() < self.f.locals.len() {
            Ok(l.index())
        } else {
            Err(self.simple(format!("local {} does not exist", l.0)))
        }
    }

    pub(super) fn check_type_operand(&self, t: Type) -> FResult<()> {
        let ok = match t {
            Type::Null => false,
            Type::Class(c) | Type::Array(Elem::Class(c), _) => c.index() < self.m.classes.len(),
            Type::Array(_, d) => (1..=crate::types::MAX_ARRAY_DIMS).contains(&d),
            _ => true,
        };
        if ok {
            Ok(())
        } else {
            Err(self.simple("invalid type operand".into()))
        }
    }

    pub(super) fn field(&self, fid: crate::types::FieldId) -> FResult<&crate::module::Field> {
        self.m
            .fields
            .get(fid.index())
            .ok_or_else(|| self.simple(format!("field {} does not exist", fid.0)))
    }

    pub(super) fn call_args(&self, fr: &mut Frame, callee: &Function) -> FResult<()> {
        let params: Vec<Type> = callee.param_types().collect();
        if fr.stack.len() < params.len() {
            return Err(self.mismatch(
                &format!("not enough arguments for `{}`", callee.name),
                format!("{} argument(s)", params.len()),
                format!("{} value(s) on the stack", fr.stack.len()),
            ));
        }
        let base = fr.stack.len() - params.len();
        for (i, (&want, &got)) in params.iter().zip(&fr.stack[base..]).enumerate() {
            if !assignable(self.m, got, want) {
                let pname = &callee.locals[i].name;
                return Err(self.mismatch(
                    &format!("argument `{pname}` of `{}` has the wrong type", callee.name),
                    self.tn(want),
                    self.tn(got),
                ));
            }
        }
        fr.stack.truncate(base);
        if let Some(r) = callee.ret {
            fr.stack.push(r);
        }
        Ok(())
    }

    /// The frame after `inst` failed its check on `before`, when the types
    /// that follow do not depend on what went wrong; `None` stops the path.
    pub(super) fn recover(&self, inst: &Inst, mut before: Frame) -> Option<Frame> {
        match (inst.opcode().effect(), *inst) {
            (Effect::Fixed { pops, pushes }, _) if before.stack.len() >= pops.len() => {
                before.stack.truncate(before.stack.len() - pops.len());
                before
                    .stack
                    .extend(pushes.iter().map(|&s| Self::sig_type(s)));
                Some(before)
            }
            (_, Inst::Load { local }) => {
                let l = self.f.locals.get(local.index())?;
                before.stack.push(l.ty);
                Some(before)
            }
            (_, Inst::Store { local }) if !before.stack.is_empty() => {
                let l = self.f.locals.get(local.index())?;
                before.stack.pop();
                before.locals[local.index()] = Some(l.ty);
                Some(before)
            }
            _ => None,
        }
    }

    pub(super) fn step(&self, inst: &Inst, fr: &mut Frame) -> FResult<()> {
        let op = inst.opcode();
        if let Effect::Fixed { pops, pushes } = op.effect() {
            for &s in pops.iter().rev() {
                let t = self.pop(fr, &self.sig_name(s))?;
                if !self.sig_matches(s, t) {
                    return Err(self.mismatch(
                        &format!("type mismatch in `{}`", op.mnemonic()),
                        self.sig_name(s),
                        self.tn(t),
                    ));
                }
            }
            fr.stack.extend(pushes.iter().map(|&s| Self::sig_type(s)));
            return Ok(());
        }
        match *inst {
            Inst::RefNull => fr.stack.push(Type::Null),
            Inst::Load { local } => {
                let i = self.local(local)?;
                match fr.locals[i] {
                    Some(t) => fr.stack.push(t),
                    None => {
                        return Err(self.simple(format!(
                            "local `{}` is read before it is assigned on every path",
                            self.f.locals[i].name
                        )));
                    }
                }
            }
            Inst::Store { local } => {
                let i = self.local(local)?;
                let decl = self.f.locals[i].ty;
                let t = self.pop(fr, &self.tn(decl))?;
                if !assignable(self.m, t, decl) {
                    return Err(self.mismatch(
                        &format!("cannot store into local `{}`", self.f.locals[i].name),
                        self.tn(decl),
                        self.tn(t),
                    ));
                }
                fr.locals[i] = Some(t);
            }
            Inst::Inc { local, .. } => {
                let i = self.local(local)?;
                let l = &self.f.locals[i];
                if !l.ty.is_int() {
                    return Err(self.mismatch(
                        &format!("`inc` on local `{}`", l.name),
                        "an `i32` or `i64` local".into(),
                        self.tn(l.ty),
                    ));
                }
                if fr.locals[i].is_none() {
                    return Err(self.simple(format!(
                        "local `{}` is read before it is assigned on every path",
                        l.name
                    )));
                }
            }
            Inst::Dup => {
                let t = self.pop(fr, "a value")?;
                fr.stack.extend([t, t]);
            }
            Inst::Pop => {
                self.pop(fr, "a value")?;
            }
            Inst::Swap => {
                let a = self.pop(fr, "two values")?;
                let b = self.pop(fr, "two values")?;
                fr.stack.extend([a, b]);
            }
            Inst::NewArray { elem } => {
                self.check_type_operand(elem)?;
                let arr = elem
                    .array_of()
                    .ok_or_else(|| self.simple("arrays nest too deep".into()))?;
                self.pop_type(fr, Type::I32)?;
                fr.stack.push(arr);
            }
            Inst::RefALoad => {
                self.pop_type(fr, Type::I32)?;
                let a = self.pop(fr, "an array of references")?;
                let elem = self.ref_elem(a)?;
                fr.stack.push(elem);
            }
            Inst::RefAStore => {
                let v = self.pop(fr, "a reference")?;
                self.pop_type(fr, Type::I32)?;
                let a = self.pop(fr, "an array of references")?;
                let elem = self.ref_elem(a)?;
                if !assignable(self.m, v, elem) {
                    return Err(self.mismatch(
                        "stored element has the wrong type",
                        self.tn(elem),
                        self.tn(v),
                    ));
                }
            }
            Inst::New { class } => {
                if class.index() >= self.m.classes.len() {
                    return Err(self.simple(format!("class {} does not exist", class.0)));
                }
                if let Some(&a) = self
                    .m
                    .vtable(class)
                    .iter()
                    .find(|&&f| self.m.func(f).is_abstract())
                {
                    return Err(self.simple(format!(
                        "cannot instantiate `{}`: method `{}` is abstract",
                        self.m.class(class).name,
                        self.m.func(a).name
                    )));
                }
                fr.stack.push(Type::Class(class));
            }
            Inst::GetField { field } => {
                let fd = self.field(field)?;
                self.pop_type(fr, Type::Class(fd.class))?;
                fr.stack.push(fd.ty);
            }
            Inst::PutField { field } => {
                let fd = self.field(field)?;
                self.pop_type(fr, fd.ty)?;
                self.pop_type(fr, Type::Class(fd.class))?;
            }
            Inst::FieldAtomicAdd { field } | Inst::FieldCmpxchg { field } => {
                let fd = self.field(field)?;
                if !fd.ty.is_int() {
                    return Err(self.mismatch(
                        &format!("`{}` on field `{}`", op.mnemonic(), fd.name),
                        "an `i32` or `i64` field".into(),
                        self.tn(fd.ty),
                    ));
                }
                self.pop_type(fr, fd.ty)?;
                if matches!(inst, Inst::FieldCmpxchg { .. }) {
                    self.pop_type(fr, fd.ty)?;
                }
                self.pop_type(fr, Type::Class(fd.class))?;
                fr.stack.push(fd.ty);
            }
            Inst::InstanceOf { ty } | Inst::CheckCast { ty } => {
                self.check_type_operand(ty)?;
                if !ty.is_ref() {
                    return Err(self.mismatch(
                        &format!("`{}` needs a reference type", op.mnemonic()),
                        "a class or array type".into(),
                        self.tn(ty),
                    ));
                }
                self.pop_type(fr, Type::Ref)?;
                fr.stack.push(if matches!(inst, Inst::InstanceOf { .. }) {
                    Type::I32
                } else {
                    ty
                });
            }
            Inst::Call { func } => {
                let callee =
                    self.m.funcs.get(func.index()).ok_or_else(|| {
                        self.simple(format!("function {} does not exist", func.0))
                    })?;
                if callee.kind == FuncKind::Kernel {
                    return Err(self.simple(format!(
                        "kernel `{}` cannot be called; launch it instead",
                        callee.name
                    )));
                }
                if callee.is_abstract() {
                    return Err(self.simple(format!(
                        "abstract method `{}` can only be called with `callvirt`",
                        callee.name
                    )));
                }
                self.call_args(fr, callee)?;
            }
            Inst::CallVirt { method } => {
                let callee =
                    self.m.funcs.get(method.index()).ok_or_else(|| {
                        self.simple(format!("function {} does not exist", method.0))
                    })?;
                if !matches!(callee.kind, FuncKind::Method { .. }) {
                    return Err(self.simple(format!(
                        "`callvirt` needs a method, but `{}` is a function; use `call`",
                        callee.name
                    )));
                }
                self.call_args(fr, callee)?;
            }
            Inst::Ret => match self.f.ret {
                Some(r) => {
                    let t = self.pop(fr, &self.tn(r))?;
                    if !assignable(self.m, t, r) {
                        return Err(self.mismatch("wrong return type", self.tn(r), self.tn(t)));
                    }
                    if !fr.stack.is_empty() {
                        return Err(self.mismatch(
                            "values left on the stack at `ret`",
                            "only the return value".into(),
                            format!("{} more value(s)", fr.stack.len()),
                        ));
                    }
                }
                None => {
                    if !fr.stack.is_empty() {
                        return Err(self.mismatch(
                            "values left on the stack at `ret` of a void function",
                            "an empty stack".into(),
                            format!("{} value(s)", fr.stack.len()),
                        ));
                    }
                }
            },
            Inst::Throw { .. } => fr.stack.clear(),
            _ => unreachable!("{op:?} has a fixed effect"),
        }
        Ok(())
    }

    pub(super) fn ref_elem(&self, a: Type) -> FResult<Type> {
        match a {
            Type::Null => Ok(Type::Null),
            Type::Array(..) => match a.array_elem() {
                Some(e) if e.is_ref() => Ok(e),
                _ => Err(self.mismatch(
                    &format!("type mismatch in `{}`", self.mnemonic()),
                    "an array of references".into(),
                    self.tn(a),
                )),
            },
            _ => Err(self.mismatch(
                &format!("type mismatch in `{}`", self.mnemonic()),
                "an array of references".into(),
                self.tn(a),
            )),
        }
    }

    pub(super) fn merge(&self, old: &Frame, new: &Frame, at: Bci) -> FResult<Frame> {
        if old.stack.len() != new.stack.len() {
            return Err(self.mismatch(
                &format!("inconsistent stack depth where paths merge at bci {at}"),
                format!("depth {}", old.stack.len()),
                format!("depth {}", new.stack.len()),
            ));
        }
        let mut stack = Vec::with_capacity(old.stack.len());
        for (i, (&a, &b)) in old.stack.iter().zip(&new.stack).enumerate() {
            stack.push(lub(self.m, a, b).ok_or_else(|| {
                self.mismatch(
                    &format!("inconsistent types in stack slot {i} where paths merge at bci {at}"),
                    self.tn(a),
                    self.tn(b),
                )
            })?);
        }
        let locals = old
            .locals
            .iter()
            .zip(&new.locals)
            .map(|(&a, &b)| match (a, b) {
                (Some(a), Some(b)) => lub(self.m, a, b),
                _ => None,
            })
            .collect();
        Ok(Frame { stack, locals })
    }
}

impl FuncKind {
    /// The declaring class, for methods.
    pub fn method_class(self) -> Option<ClassId> {
        match self {
            FuncKind::Method { class, .. } => Some(class),
            _ => None,
        }
    }
}
