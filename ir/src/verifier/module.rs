//! The module-level rules (M1–M7) and the driver that runs the function
//! rules over every body.

use super::*;

pub(super) struct Verifier<'a> {
    pub(super) m: &'a Module,
    pub(super) diags: Vec<Diagnostic>,
}

pub(super) type FResult<T> = std::result::Result<T, Box<Diagnostic>>;

impl<'a> Verifier<'a> {
    pub(super) fn err(&mut self, span: crate::module::Span, func: Option<&str>, message: String) {
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

    pub(super) fn type_ok(&self, t: Type) -> bool {
        let class_ok = |c: ClassId| c.index() < self.m.classes.len();
        match t {
            Type::Null => false,
            Type::Class(c) | Type::Array(Elem::Class(c), _) => class_ok(c),
            Type::Array(_, d) => (1..=crate::types::MAX_ARRAY_DIMS).contains(&d),
            _ => true,
        }
    }

    pub(super) fn tn(&self, t: Type) -> String {
        format!("`{}`", type_name(self.m, t))
    }

    pub(super) fn module_rules(&mut self) {
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
                    if let Some(r) = f.ret.filter(|r| r.is_ref()) {
                        self.diags.push(Diagnostic {
                            expected: Some(
                                "no return type, or a number for a reduction (`i32`, `i64`, \
                                 `f32`, `f64`)"
                                    .into(),
                            ),
                            found: Some(self.tn(r)),
                            ..self.plain(
                                sp,
                                Some(&f.name),
                                "a kernel returns nothing or a number".into(),
                            )
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

    pub(super) fn plain(
        &self,
        span: crate::module::Span,
        func: Option<&str>,
        message: String,
    ) -> Diagnostic {
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
    pub(super) fn function(&self, id: FuncId) -> Result<FuncTypes, Vec<Diagnostic>> {
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
