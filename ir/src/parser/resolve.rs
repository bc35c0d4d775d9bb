//! Resolving a parsed file: names to classes, fields and functions, the
//! canonical function order, labels to bytecode indices, and comments to
//! what they describe.

use super::operands::{Reader, suggest};
use super::*;

impl Parser {
    pub(super) fn resolve(&mut self, items: &[Item]) -> Module {
        let mut m = Module {
            source: Meta(self.file.clone()),
            ..Module::default()
        };
        let (classes, funcs) = split_items(items);
        // Classes.
        let mut class_ids: HashMap<String, ClassId> = HashMap::new();
        for c in &classes {
            if matches!(
                c.name.as_str(),
                "i32" | "i64" | "f32" | "f64" | "ref" | "null"
            ) {
                self.error(
                    c.span,
                    format!("`{}` is a built-in type and cannot name a class", c.name),
                );
            } else if c.name.contains('.') {
                self.error(
                    c.span,
                    format!("class name `{}` cannot contain `.`", c.name),
                );
            } else if class_ids.contains_key(&c.name) {
                self.error(c.span, format!("duplicate class `{}`", c.name));
            }
            let id = ClassId::new(m.classes.len());
            class_ids.entry(c.name.clone()).or_insert(id);
            m.classes.push(Class {
                name: c.name.clone(),
                superclass: None,
                fields: Vec::new(),
                methods: Vec::new(),
                span: Meta(c.span),
                comments: Meta::default(),
            });
        }
        for (i, c) in classes.iter().enumerate() {
            if let Some((s, span)) = &c.superclass {
                match class_ids.get(s) {
                    Some(&id) => m.classes[i].superclass = Some(id),
                    None => self.error(
                        *span,
                        format!(
                            "unknown superclass `{s}`{}",
                            crate::diag::did_you_mean(s, class_ids.keys().map(String::as_str))
                        ),
                    ),
                }
            }
        }
        // Fields.
        for (i, c) in classes.iter().enumerate() {
            for f in &c.fields {
                if m.classes[i]
                    .fields
                    .iter()
                    .any(|&x| m.fields[x.index()].name == f.name)
                {
                    self.error(
                        f.span,
                        format!("duplicate field `{}` in class `{}`", f.name, c.name),
                    );
                }
                let ty = self.resolve_type(&f.ty, &class_ids).unwrap_or(Type::I32);
                let id = FieldId::new(m.fields.len());
                m.fields.push(Field {
                    name: f.name.clone(),
                    class: ClassId::new(i),
                    ty,
                    span: Meta(f.span),
                    comments: Meta::default(),
                });
                m.classes[i].fields.push(id);
            }
        }
        // Function table in canonical order: methods by class, then free functions.
        let asts = canonical_funcs(&classes, &funcs);
        let mut func_ids: HashMap<String, FuncId> = HashMap::new();
        for (f, class) in &asts {
            let full = match class {
                Some(c) => format!("{}.{}", m.classes[c.index()].name, f.name),
                None => f.name.clone(),
            };
            if f.name.contains('.') {
                self.error(
                    f.span,
                    format!("function name `{}` cannot contain `.`", f.name),
                );
            } else if func_ids.contains_key(&full) {
                let what = if class.is_some() {
                    "method"
                } else {
                    "function"
                };
                self.error(f.span, format!("duplicate {what} `{full}`"));
            }
            let id = FuncId::new(m.funcs.len());
            func_ids.entry(full.clone()).or_insert(id);
            let kind = match (f.kind, class) {
                (AstKind::Method { is_abstract }, Some(c)) => FuncKind::Method {
                    class: *c,
                    is_abstract,
                },
                (AstKind::Kernel, _) => FuncKind::Kernel,
                _ => FuncKind::Static,
            };
            let mut locals = Vec::new();
            let mut seen = HashSet::new();
            if let Some(c) = class {
                seen.insert("this");
                locals.push(Local {
                    name: "this".into(),
                    ty: Type::Class(*c),
                });
                m.classes[c.index()].methods.push(id);
            }
            for p in f.params.iter().chain(&f.locals) {
                if !seen.insert(p.name.as_str()) {
                    self.error(p.span, format!("duplicate local `{}` in `{full}`", p.name));
                }
                let ty = self.resolve_type(&p.ty, &class_ids).unwrap_or(Type::I32);
                locals.push(Local {
                    name: p.name.clone(),
                    ty,
                });
            }
            let ret = f
                .ret
                .as_ref()
                .map(|t| self.resolve_type(t, &class_ids).unwrap_or(Type::I32));
            m.funcs.push(Function {
                name: full,
                kind,
                param_count: (f.params.len() + usize::from(class.is_some())) as u32,
                locals,
                ret,
                body: Vec::new(),
                debug: Meta(FuncDebug {
                    span: f.span,
                    ..FuncDebug::default()
                }),
            });
        }
        // Bodies.
        for (i, (f, _)) in asts.iter().enumerate() {
            self.resolve_body(&mut m, FuncId::new(i), f, &class_ids, &func_ids);
        }
        m
    }

    fn resolve_type(&mut self, t: &TypeAst, classes: &HashMap<String, ClassId>) -> Option<Type> {
        let base = match t.base.as_str() {
            "i32" => Type::I32,
            "i64" => Type::I64,
            "f32" => Type::F32,
            "f64" => Type::F64,
            "ref" => Type::Ref,
            name => match classes.get(name) {
                Some(&c) => Type::Class(c),
                None => {
                    let hint = crate::diag::did_you_mean(
                        name,
                        classes
                            .keys()
                            .map(String::as_str)
                            .chain(["i32", "i64", "f32", "f64", "ref"]),
                    );
                    self.error(t.span, format!("unknown type `{name}`{hint}"));
                    return None;
                }
            },
        };
        if t.dims > MAX_ARRAY_DIMS {
            self.error(t.span, format!("arrays nest at most {MAX_ARRAY_DIMS} deep"));
            return None;
        }
        let mut ty = base;
        for _ in 0..t.dims {
            ty = ty.array_of()?;
        }
        Some(ty)
    }

    fn resolve_body(
        &mut self,
        m: &mut Module,
        id: FuncId,
        f: &FuncAst,
        classes: &HashMap<String, ClassId>,
        funcs: &HashMap<String, FuncId>,
    ) {
        let full = m.funcs[id.index()].name.clone();
        let mut labels: HashMap<&str, Bci> = HashMap::new();
        let mut label_names = std::collections::BTreeMap::new();
        for (name, span, at) in &f.labels {
            if labels.contains_key(name.as_str()) {
                self.error(*span, format!("duplicate label `{name}` in `{full}`"));
                continue;
            }
            if *at >= f.insts.len() {
                self.error(
                    *span,
                    format!("label `{name}` is not followed by an instruction"),
                );
                continue;
            }
            labels.insert(name, *at as Bci);
            label_names
                .entry(*at as Bci)
                .or_insert_with(|| name.clone());
        }
        // Local names, for `load`/`store` operands (a scan per operand
        // would make a function's parse quadratic in its locals).
        let local_ids: HashMap<&str, LocalId> = {
            let func = &m.funcs[id.index()];
            let mut ids = HashMap::with_capacity(func.locals.len());
            for (i, l) in func.locals.iter().enumerate() {
                ids.entry(l.name.as_str()).or_insert(LocalId::new(i));
            }
            ids
        };
        let mut body = Vec::with_capacity(f.insts.len());
        let mut spans = Vec::with_capacity(f.insts.len());
        for (at, ia) in f.insts.iter().enumerate() {
            let Some(op) = crate::isa::Opcode::from_mnemonic(&ia.mnemonic) else {
                let mut d = diag(
                    &self.file,
                    ia.span,
                    format!("unknown instruction `{}`", ia.mnemonic),
                );
                d.func = Some(full.clone());
                d.bci = Some(at as Bci);
                if let Some(o) = crate::reference::jvm_equivalent(&ia.mnemonic) {
                    d.message.push_str(&format!(
                        " (the JVM's `{}` is {o} in offload; `offload isa` lists every instruction)",
                        ia.mnemonic
                    ));
                } else if let Some(s) = suggest(&ia.mnemonic) {
                    d.message.push_str(&format!(" (did you mean `{s}`?)"));
                }
                self.diags.push(d);
                continue;
            };
            let mut r = Reader {
                toks: &ia.operands,
                pos: 0,
                eol: ia.eol,
                module: m,
                func: &m.funcs[id.index()],
                classes,
                funcs,
                labels: &labels,
                locals: &local_ids,
                mnemonic: &ia.mnemonic,
            };
            let inst = op.read_operands(&mut r).and_then(|inst| {
                if r.pos < r.toks.len() {
                    let t = &r.toks[r.pos];
                    Err((
                        t.span,
                        format!(
                            "unexpected {} after the operands of `{}`",
                            t.tok.describe(),
                            ia.mnemonic
                        ),
                    ))
                } else {
                    Ok(inst)
                }
            });
            match inst {
                Ok(inst) => {
                    body.push(inst);
                    spans.push(ia.span);
                }
                Err((span, msg)) => {
                    let mut d = diag(&self.file, span, msg);
                    d.func = Some(full.clone());
                    d.bci = Some(at as Bci);
                    self.diags.push(d);
                }
            }
        }
        let func = &mut m.funcs[id.index()];
        func.body = body;
        func.debug.inst_spans = spans;
        func.debug.labels = label_names;
    }
}

/// The classes and the free functions of a file, each in declaration order.
fn split_items(items: &[Item]) -> (Vec<&ClassAst>, Vec<&FuncAst>) {
    let mut classes = Vec::new();
    let mut funcs = Vec::new();
    for item in items {
        match item {
            Item::Class(c) => classes.push(c),
            Item::Func(f) => funcs.push(f),
        }
    }
    (classes, funcs)
}

/// Functions in canonical id order: the methods of each class in class
/// order, then the free functions and kernels in declaration order.
fn canonical_funcs<'a>(
    classes: &[&'a ClassAst],
    funcs: &[&'a FuncAst],
) -> Vec<(&'a FuncAst, Option<ClassId>)> {
    let mut asts = Vec::new();
    for (i, c) in classes.iter().enumerate() {
        for meth in &c.methods {
            asts.push((meth, Some(ClassId::new(i))));
        }
    }
    asts.extend(funcs.iter().map(|&f| (f, None)));
    asts
}

/// Where a comment goes.
#[derive(Copy, Clone, Debug)]
enum Anchor {
    ClassStart(usize),
    ClassEnd(usize),
    Field(usize),
    FuncStart(usize),
    FuncHead(usize),
    Inst(usize, Bci),
    FuncEnd(usize),
}

/// Attach every comment to the item that follows it (or, for a comment at
/// the end of an instruction's line, to that instruction), so that the
/// printer — and `offload fmt` — keeps them.
pub(super) fn attach_comments(m: &mut Module, items: &[Item], comments: Vec<Comment>) {
    let (classes, funcs) = split_items(items);
    let mut anchors: Vec<(u32, Anchor)> = Vec::new();
    let mut field = 0;
    for (ci, c) in classes.iter().enumerate() {
        anchors.push((c.span.line, Anchor::ClassStart(ci)));
        for f in &c.fields {
            anchors.push((f.span.line, Anchor::Field(field)));
            field += 1;
        }
        anchors.push((c.end_line, Anchor::ClassEnd(ci)));
    }
    for (fi, (f, _)) in canonical_funcs(&classes, &funcs).into_iter().enumerate() {
        anchors.push((f.span.line, Anchor::FuncStart(fi)));
        for l in &f.locals {
            anchors.push((l.span.line, Anchor::FuncHead(fi)));
        }
        for (_, span, at) in &f.labels {
            anchors.push((span.line, Anchor::Inst(fi, *at as Bci)));
        }
        for (bci, i) in f.insts.iter().enumerate() {
            anchors.push((i.span.line, Anchor::Inst(fi, bci as Bci)));
        }
        if f.end_line > 0 {
            anchors.push((f.end_line, Anchor::FuncEnd(fi)));
        }
    }
    anchors.sort_by_key(|&(line, _)| line);
    for c in comments {
        let trailing_inst = c
            .trailing
            .then(|| {
                anchors
                    .iter()
                    .find(|(l, a)| *l == c.line && matches!(a, Anchor::Inst(..)))
            })
            .flatten();
        if let Some(&(_, Anchor::Inst(fi, bci))) = trailing_inst {
            if let Some(f) = m.funcs.get_mut(fi) {
                f.debug.trailing.insert(bci, c.text);
            }
            continue;
        }
        let at = anchors.partition_point(|&(l, _)| l < c.line + u32::from(!c.trailing));
        let text = c.text;
        match anchors.get(at).map(|&(_, a)| a) {
            None => m.tail_comments.push(text),
            Some(Anchor::ClassStart(ci)) => {
                if let Some(k) = m.classes.get_mut(ci) {
                    k.comments.0.0.push(text);
                }
            }
            Some(Anchor::ClassEnd(ci)) => {
                if let Some(k) = m.classes.get_mut(ci) {
                    k.comments.0.1.push(text);
                }
            }
            Some(Anchor::Field(i)) => {
                if let Some(f) = m.fields.get_mut(i) {
                    f.comments.push(text);
                }
            }
            Some(Anchor::FuncStart(fi)) => {
                if let Some(f) = m.funcs.get_mut(fi) {
                    f.debug.leading.push(text);
                }
            }
            Some(Anchor::FuncHead(fi)) => {
                if let Some(f) = m.funcs.get_mut(fi) {
                    f.debug.head.push(text);
                }
            }
            Some(Anchor::Inst(fi, bci)) => {
                if let Some(f) = m.funcs.get_mut(fi) {
                    f.debug.before.entry(bci).or_default().push(text);
                }
            }
            Some(Anchor::FuncEnd(fi)) => {
                if let Some(f) = m.funcs.get_mut(fi) {
                    f.debug.end.push(text);
                }
            }
        }
    }
}
