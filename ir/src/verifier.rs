//! The verifier. Nothing unverified ever runs: every consumer takes a
//! [`Verified`] module, which only [`verify`] makes.
//!
//! It infers, by dataflow to a fixed point, the type of every operand-stack slot
//! and every local at the entry of every bytecode index ([`Frame`]). Reference
//! types merge to their least upper bound in the single-inheritance hierarchy
//! (`null` below every reference type, `ref` above all); locals merge to
//! "unassigned" when either side is unassigned.
//!
//! # Rules
//!
//! Module level:
//! - **M1** every class, field, function and local id in the module is in
//!   range, and class/field/method membership lists agree with the owners.
//! - **M2** names are identifiers; class names are unique and are not built-in
//!   type names; field names are unique within a class; function names are
//!   unique; local names are unique within a function.
//! - **M3** no class inherits from itself (no inheritance cycle).
//! - **M4** a field that redeclares an inherited field's name has the same type
//!   (it then hides the inherited field, as in Java).
//! - **M5** a method that overrides an inherited method has the same parameter
//!   and return types.
//! - **M6** a kernel's first parameter is the workitem index, of type `i64`, and
//!   a kernel returns nothing.
//! - **M7** a method's local 0 is `this`, of its class; abstract methods have no
//!   body and every other function has one.
//!
//! Function level, at each reachable bytecode index (every independent error
//! of a function is reported: after an error the dataflow goes on where the
//! types that follow do not depend on it, and stops on that path where they
//! do, so one mistake is one error, not a cascade):
//! - **F1** the operand stack does not underflow and stays within
//!   [`MAX_STACK`] slots.
//! - **F2** every operand has the type the instruction expects (numeric types
//!   exactly; references assignable: subclass to superclass, `null` to any
//!   reference, anything to `ref`; arrays are invariant).
//! - **F3** a local is read (`load`, `inc`) only where it is assigned on every
//!   path; values stored are assignable to its declared type; `inc` applies to
//!   `i32`/`i64` locals.
//! - **F4** branch targets are instructions of the same function.
//! - **F5** where paths merge, the stacks have the same depth and slot kinds.
//! - **F6** control never falls off the end of the body.
//! - **F7** `ret` finds exactly the return value (assignable to the declared
//!   return type), or an empty stack in a void function.
//! - **F8** calls name a function that exists and can be called that way
//!   (`call` not on a kernel or an abstract method; `callvirt` only on
//!   methods), with the right number and types of arguments.
//! - **F9** `new` names a class with no abstract method in its vtable;
//!   `newarray`, `instanceof`, `checkcast` name valid types; atomics on fields
//!   name `i32`/`i64` fields; `getfield`/`putfield` receivers are instances of
//!   the field's class.
//!
//! Unreachable instructions are allowed and get no frame.

use crate::diag::{Diagnostic, Diagnostics, Phase, Result};
use crate::isa::{Effect, Flow, Inst, Sig};
use crate::module::{FuncKind, Function, Module};
use crate::printer::type_name;
use crate::types::{Bci, ClassId, Elem, FuncId, Type};
use std::collections::{HashSet, VecDeque};

/// The operand stack never holds more than this many values.
pub const MAX_STACK: usize = 1024;

/// The most `instructions × (locals + 16)` a function may have.
///
/// Reading a program (lexing, parsing, name resolution, the REPL's entries)
/// is linear in its size. What follows is not, by design: the verifier
/// keeps the type of every local at every instruction, liveness is a set of
/// locals per instruction, and the deopt metadata — what a deopting
/// workitem saves and the interpreter resumes from — is a frame map of the
/// live locals at every potential deopt site, which can be nearly every
/// instruction. Its size is instructions × locals whatever the
/// representation, as HotSpot's oop maps are, and HotSpot bounds it the same
/// way: by limits on a method's size. Past this limit (2^25 cells: a few
/// hundred MiB and well under a second with the analyses), a function is
/// refused with an error naming its size instead of exhausting the
/// machine's memory (a kernel of 20k locals and 80k instructions needed
/// more than 24 GiB). Real kernels are far below it.
pub const MAX_FRAME_CELLS: u64 = 1 << 25;

/// Types at the entry of one bytecode index.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Frame {
    /// Operand stack, bottom first.
    pub stack: Vec<Type>,
    /// Current type of each local; `None` while unassigned.
    pub locals: Vec<Option<Type>>,
}

/// What the verifier learned about one function.
#[derive(Clone, Debug)]
pub struct FuncTypes {
    /// The frame at the entry of each bytecode index; `None` if unreachable.
    pub frames: Vec<Option<Frame>>,
    /// The deepest the operand stack gets.
    pub max_stack: usize,
}

/// A module that passed the verifier, with the inferred types.
#[derive(Clone, Debug)]
pub struct Verified {
    module: Module,
    types: Vec<FuncTypes>,
}

impl Verified {
    /// The module.
    pub fn module(&self) -> &Module {
        &self.module
    }
    /// Give back the module.
    pub fn into_module(self) -> Module {
        self.module
    }
    /// The inferred types of function `f`.
    pub fn types(&self, f: FuncId) -> &FuncTypes {
        &self.types[f.index()]
    }
}

impl std::ops::Deref for Verified {
    type Target = Module;
    fn deref(&self) -> &Module {
        &self.module
    }
}

/// Verify a module. Returns every module-level error, and every independent
/// error of each function.
pub fn verify(module: Module) -> Result<Verified> {
    let mut v = Verifier {
        m: &module,
        diags: Vec::new(),
    };
    v.module_rules();
    if !v.diags.is_empty() {
        return Err(Diagnostics(v.diags));
    }
    let mut types = Vec::with_capacity(module.funcs.len());
    for i in 0..module.funcs.len() {
        match v.function(FuncId::new(i)) {
            Ok(t) => types.push(t),
            Err(ds) => {
                v.diags.extend(ds);
                types.push(FuncTypes {
                    frames: Vec::new(),
                    max_stack: 0,
                });
            }
        }
    }
    if v.diags.is_empty() {
        Ok(Verified { module, types })
    } else {
        Err(Diagnostics(v.diags))
    }
}

/// Whether a value of type `from` may be used where `to` is expected.
pub fn assignable(m: &Module, from: Type, to: Type) -> bool {
    match (from, to) {
        _ if from == to => true,
        (Type::Null, t) => t.is_ref(),
        (f, Type::Ref) => f.is_ref(),
        (Type::Class(a), Type::Class(b)) => m.is_subclass(a, b),
        _ => false,
    }
}

/// The least upper bound of two types, or `None` if they have different kinds.
pub fn lub(m: &Module, a: Type, b: Type) -> Option<Type> {
    if a == b {
        return Some(a);
    }
    if a.kind() != b.kind() {
        return None;
    }
    Some(match (a, b) {
        (Type::Null, t) | (t, Type::Null) => t,
        (Type::Class(x), Type::Class(y)) => {
            let xs: Vec<ClassId> = m.ancestors(x).collect();
            m.ancestors(y)
                .find(|c| xs.contains(c))
                .map_or(Type::Ref, Type::Class)
        }
        _ => Type::Ref,
    })
}

fn is_ident(s: &str) -> bool {
    let mut cs = s.chars();
    cs.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && cs.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

struct Verifier<'a> {
    m: &'a Module,
    diags: Vec<Diagnostic>,
}

type FResult<T> = std::result::Result<T, Box<Diagnostic>>;

impl<'a> Verifier<'a> {
    fn err(&mut self, span: crate::module::Span, func: Option<&str>, message: String) {
        self.diags.push(Diagnostic {
            phase: Phase::Verify,
            file: self.m.source.0.clone(),
            span,
            func: func.map(str::to_string),
            bci: None,
            message,
            expected: None,
            found: None,
        });
    }

    fn type_ok(&self, t: Type) -> bool {
        let class_ok = |c: ClassId| c.index() < self.m.classes.len();
        match t {
            Type::Null => false,
            Type::Class(c) | Type::Array(Elem::Class(c), _) => class_ok(c),
            Type::Array(_, d) => (1..=crate::types::MAX_ARRAY_DIMS).contains(&d),
            _ => true,
        }
    }

    fn tn(&self, t: Type) -> String {
        format!("`{}`", type_name(self.m, t))
    }

    fn module_rules(&mut self) {
        let m = self.m;
        let nclasses = m.classes.len();
        // M1 + M2: ids and names.
        let mut class_names = HashSet::new();
        for (i, c) in m.classes.iter().enumerate() {
            let sp = *c.span;
            if !is_ident(&c.name)
                || matches!(
                    c.name.as_str(),
                    "i32" | "i64" | "f32" | "f64" | "ref" | "null"
                )
            {
                self.err(sp, None, format!("`{}` is not a valid class name", c.name));
            }
            if !class_names.insert(c.name.as_str()) {
                self.err(sp, None, format!("duplicate class `{}`", c.name));
            }
            if c.superclass.is_some_and(|s| s.index() >= nclasses) {
                self.err(
                    sp,
                    None,
                    format!("class `{}` names a superclass that does not exist", c.name),
                );
            }
            let mut field_names = HashSet::new();
            for &f in &c.fields {
                match m.fields.get(f.index()) {
                    Some(fd) if fd.class.index() == i => {
                        if !field_names.insert(fd.name.as_str()) {
                            self.err(
                                *fd.span,
                                None,
                                format!("duplicate field `{}` in class `{}`", fd.name, c.name),
                            );
                        }
                    }
                    _ => self.err(
                        sp,
                        None,
                        format!("class `{}` lists a field it does not own", c.name),
                    ),
                }
            }
            for &f in &c.methods {
                match m.funcs.get(f.index()) {
                    Some(fd) if fd.kind.method_class() == Some(ClassId::new(i)) => {}
                    _ => self.err(
                        sp,
                        None,
                        format!("class `{}` lists a method it does not own", c.name),
                    ),
                }
            }
        }
        for fd in &m.fields {
            if !is_ident(&fd.name) {
                self.err(
                    *fd.span,
                    None,
                    format!("`{}` is not a valid field name", fd.name),
                );
            }
            if fd.class.index() >= nclasses
                || !m
                    .class(fd.class)
                    .fields
                    .iter()
                    .any(|&x| m.fields.get(x.index()).is_some_and(|y| std::ptr::eq(y, fd)))
            {
                self.err(
                    *fd.span,
                    None,
                    format!("field `{}` is not listed by its class", fd.name),
                );
            }
            if !self.type_ok(fd.ty) {
                self.err(
                    *fd.span,
                    None,
                    format!("field `{}` has an invalid type", fd.name),
                );
            }
        }
        let mut func_names = HashSet::new();
        for (i, f) in m.funcs.iter().enumerate() {
            let sp = f.debug.span;
            let name_ok = match f.kind {
                FuncKind::Method { class, .. } => {
                    class.index() < nclasses
                        && f.name
                            .split_once('.')
                            .is_some_and(|(c, n)| c == m.class(class).name && is_ident(n))
                        && m.class(class).methods.contains(&FuncId::new(i))
                }
                _ => is_ident(&f.name),
            };
            if !name_ok {
                self.err(
                    sp,
                    None,
                    format!("`{}` is not a valid name for this function", f.name),
                );
            }
            if !func_names.insert(f.name.as_str()) {
                self.err(sp, None, format!("duplicate function `{}`", f.name));
            }
            if f.param_count as usize > f.locals.len() {
                self.err(sp, Some(&f.name), "more parameters than locals".into());
            }
            let mut local_names = HashSet::new();
            for l in &f.locals {
                if !is_ident(&l.name) || !local_names.insert(l.name.as_str()) {
                    self.err(
                        sp,
                        Some(&f.name),
                        format!("duplicate or invalid local name `{}`", l.name),
                    );
                }
                if !self.type_ok(l.ty) {
                    self.err(
                        sp,
                        Some(&f.name),
                        format!("local `{}` has an invalid type", l.name),
                    );
                }
            }
            if f.ret.is_some_and(|t| !self.type_ok(t)) {
                self.err(sp, Some(&f.name), "invalid return type".into());
            }
        }
        if !self.diags.is_empty() {
            return;
        }
        // M3: inheritance cycles.
        let mut cyclic = vec![false; nclasses];
        for (i, is_cyclic) in cyclic.iter_mut().enumerate() {
            let mut seen = vec![ClassId::new(i)];
            let mut cur = m.classes[i].superclass;
            while let Some(s) = cur {
                if s.index() == i {
                    let chain: Vec<&str> = seen
                        .iter()
                        .chain([&s])
                        .map(|c| m.class(*c).name.as_str())
                        .collect();
                    self.err(
                        *m.classes[i].span,
                        None,
                        format!("inheritance cycle: {}", chain.join(" extends ")),
                    );
                    *is_cyclic = true;
                    break;
                }
                if seen.contains(&s) {
                    break; // a cycle not through i: reported at its own classes
                }
                seen.push(s);
                cur = m.class(s).superclass;
            }
        }
        if cyclic.iter().any(|&c| c) {
            return;
        }
        // M4: field hiding.
        for fd in &m.fields {
            if let Some(sup) = m.class(fd.class).superclass
                && let Some(h) = m.lookup_field(sup, &fd.name)
            {
                let hidden = m.field(h);
                if hidden.ty != fd.ty {
                    let msg = format!(
                        "field `{}.{}` redeclares `{}.{}` with another type",
                        m.class(fd.class).name,
                        fd.name,
                        m.class(hidden.class).name,
                        hidden.name
                    );
                    self.diags.push(Diagnostic {
                        expected: Some(self.tn(hidden.ty)),
                        found: Some(self.tn(fd.ty)),
                        ..self.plain(*fd.span, None, msg)
                    });
                }
            }
        }
        // M5, M6, M7.
        for f in &m.funcs {
            let sp = f.debug.span;
            match f.kind {
                FuncKind::Kernel => {
                    let first = f.params().first().map(|l| l.ty);
                    if first != Some(Type::I64) {
                        let found = first.map_or("no parameters".into(), |t| self.tn(t));
                        self.diags.push(Diagnostic {
                            expected: Some("the workitem index, `i64`, as first parameter".into()),
                            found: Some(found),
                            ..self.plain(sp, Some(&f.name), "kernel has no index parameter".into())
                        });
                    }
                    if let Some(r) = f.ret {
                        self.diags.push(Diagnostic {
                            expected: Some("no return type".into()),
                            found: Some(self.tn(r)),
                            ..self.plain(sp, Some(&f.name), "kernels return nothing".into())
                        });
                    }
                }
                FuncKind::Method { class, is_abstract } => {
                    if f.params().first().map(|l| (l.name.as_str(), l.ty))
                        != Some(("this", Type::Class(class)))
                    {
                        self.err(
                            sp,
                            Some(&f.name),
                            "a method's first parameter must be `this` of its class".into(),
                        );
                    }
                    if let Some(sup) = m.class(class).superclass
                        && let Some(o) = m.lookup_method(sup, f.short_name())
                    {
                        let of = m.func(o);
                        let sig = |g: &Function| {
                            let ps: Vec<String> =
                                g.param_types().skip(1).map(|t| type_name(m, t)).collect();
                            format!(
                                "({}){}",
                                ps.join(", "),
                                g.ret
                                    .map_or(String::new(), |r| format!(" -> {}", type_name(m, r)))
                            )
                        };
                        let same =
                            of.ret == f.ret && of.param_types().skip(1).eq(f.param_types().skip(1));
                        if !same {
                            self.diags.push(Diagnostic {
                                expected: Some(format!("`{}`", sig(of))),
                                found: Some(format!("`{}`", sig(f))),
                                ..self.plain(
                                    sp,
                                    Some(&f.name),
                                    format!(
                                        "method overrides `{}` with another signature",
                                        of.name
                                    ),
                                )
                            });
                        }
                    }
                    if is_abstract && !f.body.is_empty() {
                        self.err(sp, Some(&f.name), "an abstract method has no body".into());
                    }
                }
                FuncKind::Static => {}
            }
            if !f.is_abstract() && f.body.is_empty() {
                self.err(
                    sp,
                    Some(&f.name),
                    "empty body: execution falls off the end".into(),
                );
            }
        }
    }

    fn plain(&self, span: crate::module::Span, func: Option<&str>, message: String) -> Diagnostic {
        Diagnostic {
            phase: Phase::Verify,
            file: self.m.source.0.clone(),
            span,
            func: func.map(str::to_string),
            bci: None,
            message,
            expected: None,
            found: None,
        }
    }

    /// Verify one function: its types, or every independent error in it.
    /// After an error the dataflow goes on where it can tell the types
    /// that follow (an instruction with a fixed stack effect pushes what
    /// its opcode says whatever it popped; a read of an unassigned local
    /// gives the local's declared type), and stops on that path otherwise,
    /// so that one mistake is reported once, not as a cascade.
    fn function(&self, id: FuncId) -> Result<FuncTypes, Vec<Diagnostic>> {
        let f = self.m.func(id);
        let n = f.body.len();
        if f.is_abstract() {
            return Ok(FuncTypes {
                frames: Vec::new(),
                max_stack: 0,
            });
        }
        let mut fv = FnVerifier {
            m: self.m,
            f,
            bci: 0,
        };
        // F4 first, so the dataflow only sees valid targets.
        for (bci, inst) in f.body.iter().enumerate() {
            if let Some(t) = inst.target()
                && t as usize >= n
            {
                fv.bci = bci as Bci;
                return Err(vec![*fv.mismatch(
                    "branch target out of range",
                    format!("a bytecode index below {n}"),
                    t.to_string(),
                )]);
            }
        }
        let mut errors: Vec<Diagnostic> = Vec::new();
        let mut failed = vec![false; n];
        let cells = n as u64 * (f.locals.len() as u64 + 16);
        if cells > MAX_FRAME_CELLS {
            return Err(vec![Diagnostic {
                span: f.span_of(None),
                bci: None,
                ..*fv.simple(format!(
                    "`{}` is too large to verify: {n} instructions × {} locals is more than the verifier's limit of {MAX_FRAME_CELLS} (instructions × (locals + 16)); split it into functions",
                    f.name,
                    f.locals.len()
                ))
            }]);
        }
        let mut frames: Vec<Option<Frame>> = vec![None; n];
        let mut locals = vec![None; f.locals.len()];
        for (i, l) in f.params().iter().enumerate() {
            locals[i] = Some(l.ty);
        }
        frames[0] = Some(Frame {
            stack: Vec::new(),
            locals,
        });
        let mut work: VecDeque<Bci> = VecDeque::from([0]);
        let mut queued = vec![false; n];
        queued[0] = true;
        let mut max_stack = 0;
        while let Some(bci) = work.pop_front() {
            queued[bci as usize] = false;
            fv.bci = bci;
            let mut fr = frames[bci as usize]
                .clone()
                .expect("queued bcis have frames");
            let inst = &f.body[bci as usize];
            let mut report = |d: Box<Diagnostic>, at: Bci| {
                if !std::mem::replace(&mut failed[at as usize], true) {
                    errors.push(*d);
                }
            };
            let before = fr.clone();
            if let Err(d) = fv.step(inst, &mut fr) {
                report(d, bci);
                match fv.recover(inst, before) {
                    Some(next) => fr = next,
                    None => continue,
                }
            }
            max_stack = max_stack.max(fr.stack.len());
            if fr.stack.len() > MAX_STACK {
                report(
                    fv.mismatch(
                        "operand stack too deep",
                        format!("at most {MAX_STACK} values"),
                        fr.stack.len().to_string(),
                    ),
                    bci,
                );
                continue;
            }
            let flow = inst.opcode().flow();
            if matches!(flow, Flow::Next | Flow::Branch) && bci as usize + 1 >= n {
                report(
                    fv.simple(format!("execution falls off the end of `{}`", f.name)),
                    bci,
                );
                continue;
            }
            for succ in inst.successors(bci) {
                let s = succ as usize;
                let changed = match &frames[s] {
                    None => {
                        frames[s] = Some(fr.clone());
                        true
                    }
                    Some(old) => match fv.merge(old, &fr, succ) {
                        Ok(merged) => {
                            let changed = merged != *old;
                            frames[s] = Some(merged);
                            changed
                        }
                        Err(d) => {
                            report(d, bci);
                            false
                        }
                    },
                };
                if changed && !queued[s] {
                    queued[s] = true;
                    work.push_back(succ);
                }
            }
        }
        if errors.is_empty() {
            Ok(FuncTypes { frames, max_stack })
        } else {
            Err(errors)
        }
    }
}

struct FnVerifier<'a> {
    m: &'a Module,
    f: &'a Function,
    bci: Bci,
}

impl FnVerifier<'_> {
    fn diag(&self, message: String) -> Diagnostic {
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

    fn simple(&self, message: String) -> Box<Diagnostic> {
        Box::new(self.diag(message))
    }

    fn mismatch(&self, message: &str, expected: String, found: String) -> Box<Diagnostic> {
        Box::new(Diagnostic {
            expected: Some(expected),
            found: Some(found),
            ..self.diag(message.to_string())
        })
    }

    fn tn(&self, t: Type) -> String {
        format!("`{}`", type_name(self.m, t))
    }

    fn mnemonic(&self) -> &'static str {
        self.f.body[self.bci as usize].opcode().mnemonic()
    }

    fn pop(&self, fr: &mut Frame, what: &str) -> FResult<Type> {
        fr.stack.pop().ok_or_else(|| {
            self.mismatch(
                &format!("stack underflow in `{}`", self.mnemonic()),
                what.to_string(),
                "an empty stack".into(),
            )
        })
    }

    /// Pop a value assignable to `want`.
    fn pop_type(&self, fr: &mut Frame, want: Type) -> FResult<Type> {
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

    fn sig_matches(&self, s: Sig, t: Type) -> bool {
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

    fn sig_name(&self, s: Sig) -> String {
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

    fn sig_type(s: Sig) -> Type {
        match s {
            Sig::I32 => Type::I32,
            Sig::I64 => Type::I64,
            Sig::F32 => Type::F32,
            Sig::F64 => Type::F64,
            Sig::Ref | Sig::Array => Type::Ref,
            Sig::ArrayOf(e) => Type::Array(e, 1),
        }
    }

    fn local(&self, l: crate::types::LocalId) -> FResult<usize> {
        if l.index() < self.f.locals.len() {
            Ok(l.index())
        } else {
            Err(self.simple(format!("local {} does not exist", l.0)))
        }
    }

    fn check_type_operand(&self, t: Type) -> FResult<()> {
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

    fn field(&self, fid: crate::types::FieldId) -> FResult<&crate::module::Field> {
        self.m
            .fields
            .get(fid.index())
            .ok_or_else(|| self.simple(format!("field {} does not exist", fid.0)))
    }

    fn call_args(&self, fr: &mut Frame, callee: &Function) -> FResult<()> {
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
    fn recover(&self, inst: &Inst, mut before: Frame) -> Option<Frame> {
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

    fn step(&self, inst: &Inst, fr: &mut Frame) -> FResult<()> {
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

    fn ref_elem(&self, a: Type) -> FResult<Type> {
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

    fn merge(&self, old: &Frame, new: &Frame, at: Bci) -> FResult<Frame> {
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
