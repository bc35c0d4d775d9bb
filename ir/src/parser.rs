//! The assembler: `.obc` text → [`Module`].
//!
//! Grammar (one instruction per line; `;` starts a comment):
//!
//! ```text
//! module  := item*
//! item    := class | func | kernel
//! class   := "class" NAME ("extends" NAME)? "{" NL member* "}"
//! member  := "field" NAME ":" type
//!          | "method" NAME params ("->" type)? body
//!          | "abstract" "method" NAME params ("->" type)?
//! func    := "func" NAME params ("->" type)? body
//! kernel  := "kernel" NAME params body          ; first param: the index, i64
//! params  := "(" (NAME ":" type ("," NAME ":" type)*)? ")"
//! type    := ("i32" | "i64" | "f32" | "f64" | "ref" | CLASS) ("[" "]")*
//! body    := "{" NL ("local" NAME ":" type NL)* line* "}"
//! line    := (LABEL ":")? (MNEMONIC operand*)? NL
//! ```
//!
//! Names resolve module-wide, so classes and functions may be used before they
//! are declared. Methods take an implicit first parameter `this`. Functions
//! are numbered canonically: the methods of each class in class order, then
//! the free functions and kernels in declaration order; the printer emits the
//! same order, so print → parse gives back an equal module.

use crate::diag::{Diagnostic, Diagnostics, Phase, Result};
use crate::isa::{Label, OperandReader};
use crate::lexer::{Comment, Tok, Token, lex_with_comments};
use crate::module::{Class, Field, FuncDebug, FuncKind, Function, Local, Meta, Module, Span};
use crate::types::{
    Bci, ClassId, ExceptionKind, F32, F64, FieldId, FuncId, LocalId, MAX_ARRAY_DIMS, Type,
};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Stop collecting errors after this many.
const MAX_ERRORS: usize = 100;

/// Parse and resolve a module. `file` names the source in messages.
/// Returns every problem found (up to a limit), never panics.
pub fn parse_module(file: &str, src: &str) -> Result<Module> {
    let (toks, comments) = lex_with_comments(src);
    let mut p = Parser {
        toks,
        pos: 0,
        file: Arc::from(file),
        diags: Vec::new(),
    };
    let items = p.items();
    let mut module = p.resolve(&items);
    attach_comments(&mut module, &items, comments);
    if p.diags.is_empty() {
        Ok(module)
    } else {
        p.diags.truncate(MAX_ERRORS);
        Err(Diagnostics(p.diags))
    }
}

#[derive(Clone, Debug)]
struct TypeAst {
    base: String,
    dims: u8,
    span: Span,
}

#[derive(Clone, Debug)]
struct NamedAst {
    name: String,
    ty: TypeAst,
    span: Span,
}

#[derive(Clone, Debug)]
struct InstAst {
    mnemonic: String,
    span: Span,
    operands: Vec<Token>,
    /// End of the line, for "missing operand" messages.
    eol: Span,
}

#[derive(Clone, Debug)]
struct FuncAst {
    name: String,
    span: Span,
    kind: AstKind,
    params: Vec<NamedAst>,
    ret: Option<TypeAst>,
    locals: Vec<NamedAst>,
    labels: Vec<(String, Span, usize)>,
    insts: Vec<InstAst>,
    /// Line of the closing brace (0 for abstract methods).
    end_line: u32,
}

#[derive(Copy, Clone, Debug, PartialEq)]
enum AstKind {
    Static,
    Kernel,
    Method { is_abstract: bool },
}

#[derive(Clone, Debug)]
struct ClassAst {
    name: String,
    span: Span,
    superclass: Option<(String, Span)>,
    fields: Vec<NamedAst>,
    methods: Vec<FuncAst>,
    end_line: u32,
}

#[derive(Debug)]
enum Item {
    Class(ClassAst),
    Func(FuncAst),
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    file: Arc<str>,
    diags: Vec<Diagnostic>,
}

/// A parse failure already recorded in `diags`.
struct Failed;

type PResult<T> = std::result::Result<T, Failed>;

fn diag(file: &Arc<str>, span: Span, message: String) -> Diagnostic {
    Diagnostic {
        phase: Phase::Parse,
        file: file.clone(),
        span,
        func: None,
        bci: None,
        message,
        expected: None,
        found: None,
    }
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos].tok
    }

    fn peek_at(&self, k: usize) -> &Tok {
        &self.toks[(self.pos + k).min(self.toks.len() - 1)].tok
    }

    fn span(&self) -> Span {
        self.toks[self.pos].span
    }

    fn bump(&mut self) -> Token {
        let t = self.toks[self.pos].clone();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    fn error(&mut self, span: Span, message: impl Into<String>) {
        self.diags.push(diag(&self.file, span, message.into()));
    }

    fn expected(&mut self, what: &str) -> Failed {
        let found = self.peek().describe();
        let mut d = diag(&self.file, self.span(), "syntax error".into());
        d.expected = Some(what.into());
        d.found = Some(found);
        self.diags.push(d);
        Failed
    }

    fn skip_newlines(&mut self) {
        while *self.peek() == Tok::Newline {
            self.bump();
        }
    }

    /// Skip to the start of the next line.
    fn skip_line(&mut self) {
        while !matches!(self.peek(), Tok::Newline | Tok::Eof) {
            self.bump();
        }
        self.skip_newlines();
    }

    fn eat(&mut self, t: &Tok) -> bool {
        if self.peek() == t {
            self.bump();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, t: Tok, what: &str) -> PResult<Span> {
        if *self.peek() == t {
            Ok(self.bump().span)
        } else {
            Err(self.expected(what))
        }
    }

    fn ident(&mut self, what: &str) -> PResult<(String, Span)> {
        match self.peek().clone() {
            Tok::Ident(s) => {
                let sp = self.bump().span;
                Ok((s, sp))
            }
            _ => Err(self.expected(what)),
        }
    }

    fn end_of_line(&mut self) -> PResult<()> {
        match self.peek() {
            Tok::Newline => {
                self.skip_newlines();
                Ok(())
            }
            Tok::Eof => Ok(()),
            _ => Err(self.expected("end of line")),
        }
    }

    fn items(&mut self) -> Vec<Item> {
        let mut items = Vec::new();
        loop {
            self.skip_newlines();
            if self.diags.len() >= MAX_ERRORS {
                break;
            }
            let item = match self.peek().clone() {
                Tok::Eof => break,
                Tok::Ident(kw) if kw == "class" => self.class().map(Item::Class),
                Tok::Ident(kw) if kw == "func" => self.func(AstKind::Static).map(Item::Func),
                Tok::Ident(kw) if kw == "kernel" => self.func(AstKind::Kernel).map(Item::Func),
                _ => Err(self.expected("`class`, `func` or `kernel`")),
            };
            match item {
                Ok(i) => items.push(i),
                Err(Failed) => self.recover_item(),
            }
        }
        items
    }

    /// After an error, skip to the next line that starts an item.
    fn recover_item(&mut self) {
        loop {
            self.skip_line();
            match self.peek() {
                Tok::Eof => return,
                Tok::Ident(k) if k == "class" || k == "func" || k == "kernel" => return,
                _ => {}
            }
        }
    }

    fn ty(&mut self) -> PResult<TypeAst> {
        let (base, mut span) = self.ident("a type")?;
        let mut dims = 0u8;
        while *self.peek() == Tok::LBracket {
            self.bump();
            let close = self.expect(Tok::RBracket, "`]`")?;
            span.end = close.end;
            dims = dims.saturating_add(1);
        }
        Ok(TypeAst { base, dims, span })
    }

    fn named(&mut self, what: &str) -> PResult<NamedAst> {
        let (name, span) = self.ident(what)?;
        self.expect(Tok::Colon, "`:`")?;
        let ty = self.ty()?;
        Ok(NamedAst { name, ty, span })
    }

    fn class(&mut self) -> PResult<ClassAst> {
        self.bump();
        let (name, span) = self.ident("a class name")?;
        let superclass = if *self.peek() == Tok::Ident("extends".into()) {
            self.bump();
            Some(self.ident("a superclass name")?)
        } else {
            None
        };
        self.expect(Tok::LBrace, "`{`")?;
        self.end_of_line()?;
        let mut class = ClassAst {
            name,
            span,
            superclass,
            fields: Vec::new(),
            methods: Vec::new(),
            end_line: 0,
        };
        loop {
            self.skip_newlines();
            if self.diags.len() >= MAX_ERRORS {
                return Err(Failed);
            }
            let member = match self.peek().clone() {
                Tok::RBrace => {
                    class.end_line = self.bump().span.line;
                    self.end_of_line()?;
                    return Ok(class);
                }
                Tok::Eof => {
                    self.error(
                        span,
                        format!("class `{}` is not closed with `}}`", class.name),
                    );
                    return Err(Failed);
                }
                Tok::Ident(k) if k == "field" => {
                    self.bump();
                    self.named("a field name").and_then(|f| {
                        class.fields.push(f);
                        self.end_of_line()
                    })
                }
                Tok::Ident(k) if k == "method" => self
                    .func(AstKind::Method { is_abstract: false })
                    .map(|m| class.methods.push(m)),
                Tok::Ident(k) if k == "abstract" => {
                    self.bump();
                    if *self.peek() != Tok::Ident("method".into()) {
                        Err(self.expected("`method` after `abstract`"))
                    } else {
                        self.func(AstKind::Method { is_abstract: true })
                            .map(|m| class.methods.push(m))
                    }
                }
                _ => Err(self.expected("`field`, `method`, `abstract method` or `}`")),
            };
            if member.is_err() {
                // Skip the rest of a broken member; a broken method body is
                // skipped to its closing brace by `body`.
                self.skip_line();
            }
        }
    }

    fn func(&mut self, kind: AstKind) -> PResult<FuncAst> {
        self.bump(); // func / kernel / method
        let (name, span) = self.ident("a function name")?;
        self.expect(Tok::LParen, "`(`")?;
        let mut params = Vec::new();
        if *self.peek() != Tok::RParen {
            loop {
                params.push(self.named("a parameter name")?);
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
        }
        self.expect(Tok::RParen, "`,` or `)`")?;
        let ret = if self.eat(&Tok::Arrow) {
            Some(self.ty()?)
        } else {
            None
        };
        let mut f = FuncAst {
            name,
            span,
            kind,
            params,
            ret,
            locals: Vec::new(),
            labels: Vec::new(),
            insts: Vec::new(),
            end_line: 0,
        };
        if kind == (AstKind::Method { is_abstract: true }) {
            self.end_of_line()?;
            return Ok(f);
        }
        self.expect(Tok::LBrace, "`{`")?;
        // A body may start on the line of its `{` (`{ ret }`, or a first
        // instruction there); otherwise the line ends after it.
        if matches!(self.peek(), Tok::Newline | Tok::Eof) {
            self.end_of_line()?;
        }
        self.body(&mut f)?;
        Ok(f)
    }

    fn body(&mut self, f: &mut FuncAst) -> PResult<()> {
        let mut ok = true;
        loop {
            self.skip_newlines();
            if self.diags.len() >= MAX_ERRORS {
                return Err(Failed);
            }
            match self.peek().clone() {
                Tok::RBrace => {
                    f.end_line = self.bump().span.line;
                    self.end_of_line()?;
                    return if ok { Ok(()) } else { Err(Failed) };
                }
                Tok::Eof => {
                    self.error(
                        f.span,
                        format!("body of `{}` is not closed with `}}`", f.name),
                    );
                    return Err(Failed);
                }
                Tok::Ident(k)
                    if k == "local"
                        && matches!(self.peek_at(1), Tok::Ident(_))
                        && *self.peek_at(2) == Tok::Colon =>
                {
                    let kw = self.bump().span;
                    if !f.insts.is_empty() || !f.labels.is_empty() {
                        self.error(kw, "locals must be declared before the first instruction");
                        ok = false;
                    }
                    match self.named("a local name").and_then(|l| {
                        f.locals.push(l);
                        self.end_of_line()
                    }) {
                        Ok(()) => {}
                        Err(Failed) => {
                            ok = false;
                            self.skip_line();
                        }
                    }
                }
                Tok::Ident(_) | Tok::Number(_) | Tok::Bad(_) | Tok::Colon | Tok::Comma => {
                    if let Tok::Ident(name) = self.peek().clone()
                        && *self.peek_at(1) == Tok::Colon
                    {
                        let span = self.bump().span;
                        self.bump();
                        f.labels.push((name, span, f.insts.len()));
                        if matches!(self.peek(), Tok::Newline | Tok::Eof | Tok::RBrace) {
                            continue;
                        }
                    }
                    match self.peek().clone() {
                        Tok::Ident(mnemonic) => {
                            let span = self.bump().span;
                            let mut operands = Vec::new();
                            while !matches!(self.peek(), Tok::Newline | Tok::Eof | Tok::RBrace) {
                                operands.push(self.bump());
                            }
                            let eol = self.span();
                            f.insts.push(InstAst {
                                mnemonic,
                                span,
                                operands,
                                eol,
                            });
                        }
                        _ => {
                            self.expected("an instruction or a label");
                            ok = false;
                            self.skip_line();
                        }
                    }
                }
                _ => {
                    self.expected("an instruction, a label or `}`");
                    ok = false;
                    self.skip_line();
                }
            }
        }
    }

    // ----- resolution -----

    fn resolve(&mut self, items: &[Item]) -> Module {
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
                if let Some(s) = suggest(&ia.mnemonic) {
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
fn attach_comments(m: &mut Module, items: &[Item], comments: Vec<Comment>) {
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

/// The closest mnemonic, if one is close.
fn suggest(word: &str) -> Option<&'static str> {
    crate::diag::nearest(word, crate::isa::Opcode::ALL.iter().map(|op| op.mnemonic()))
}

struct Reader<'a> {
    toks: &'a [Token],
    pos: usize,
    eol: Span,
    module: &'a Module,
    func: &'a Function,
    classes: &'a HashMap<String, ClassId>,
    funcs: &'a HashMap<String, FuncId>,
    labels: &'a HashMap<&'a str, Bci>,
    locals: &'a HashMap<&'a str, LocalId>,
    mnemonic: &'a str,
}

type RErr = (Span, String);

impl Reader<'_> {
    fn next(&mut self, what: &str) -> Result<&Token, RErr> {
        // Operands may be separated by commas.
        if self.pos > 0 && self.toks.get(self.pos).is_some_and(|t| t.tok == Tok::Comma) {
            self.pos += 1;
        }
        match self.toks.get(self.pos) {
            Some(t) => {
                self.pos += 1;
                Ok(t)
            }
            None => Err((
                self.eol,
                format!("`{}` needs {what}, found end of line", self.mnemonic),
            )),
        }
    }

    fn word(&mut self, what: &str) -> Result<(String, Span), RErr> {
        let mnemonic = self.mnemonic;
        let t = self.next(what)?;
        match &t.tok {
            Tok::Ident(s) | Tok::Number(s) => Ok((s.clone(), t.span)),
            other => Err((
                t.span,
                format!("`{mnemonic}` needs {what}, found {}", other.describe()),
            )),
        }
    }

    fn int<T: TryFrom<i128>>(&mut self, what: &str, unsigned_bits: u32) -> Result<T, RErr> {
        let (s, span) = self.word(what)?;
        let bad = || {
            (
                span,
                format!("`{}` needs {what}, found `{s}`", self.mnemonic),
            )
        };
        let (neg, digits) = match s.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, s.strip_prefix('+').unwrap_or(&s)),
        };
        let digits = digits.replace('_', "");
        let (radix, digits) = match digits
            .strip_prefix("0x")
            .or_else(|| digits.strip_prefix("0X"))
        {
            Some(h) => (16, h.to_string()),
            None => (10, digits),
        };
        let mag = u128::from_str_radix(&digits, radix).map_err(|_| bad())?;
        let v: i128 = if neg { -(mag as i128) } else { mag as i128 };
        // Hex literals may spell the bit pattern of a negative number.
        let v = if radix == 16
            && !neg
            && mag < (1u128 << unsigned_bits)
            && mag >= (1u128 << (unsigned_bits - 1))
        {
            v - (1i128 << unsigned_bits)
        } else {
            v
        };
        T::try_from(v).map_err(|_| {
            (
                span,
                format!("`{}`: {s} does not fit in {what}", self.mnemonic),
            )
        })
    }

    fn float_bits(&mut self, what: &str) -> Result<(f64, Option<u64>, Span, String), RErr> {
        let (s, span) = self.word(what)?;
        if s == "nan" || s == "NaN" {
            if self.toks.get(self.pos).is_some_and(|t| t.tok == Tok::Colon) {
                self.pos += 1;
                let (p, pspan) = self.word("a NaN bit pattern")?;
                let bits = p
                    .strip_prefix("0x")
                    .and_then(|h| u64::from_str_radix(h, 16).ok())
                    .ok_or((
                        pspan,
                        format!("expected a hex bit pattern like 0x7fc00001, found `{p}`"),
                    ))?;
                return Ok((f64::NAN, Some(bits), span, s));
            }
            return Ok((f64::NAN, None, span, s));
        }
        let v: f64 = s.parse().map_err(|_| {
            (
                span,
                format!("`{}` needs {what}, found `{s}`", self.mnemonic),
            )
        })?;
        Ok((v, None, span, s))
    }
}

impl OperandReader for Reader<'_> {
    type Error = RErr;

    fn read_i32(&mut self) -> Result<i32, RErr> {
        self.int("an i32", 32)
    }

    fn read_i64(&mut self) -> Result<i64, RErr> {
        self.int("an i64", 64)
    }

    fn read_f32(&mut self) -> Result<F32, RErr> {
        let (v, bits, span, s) = self.float_bits("an f32")?;
        match bits {
            Some(b) => u32::try_from(b)
                .ok()
                .filter(|&b| f32::from_bits(b).is_nan())
                .map(F32)
                .ok_or((span, format!("0x{b:x} is not an f32 NaN bit pattern"))),
            None if v.is_nan() => Ok(F32::new(f32::NAN)),
            // Parse again as f32 so the value is rounded once, correctly.
            None => s
                .parse::<f32>()
                .map(F32::new)
                .map_err(|_| (span, format!("bad f32 `{s}`"))),
        }
    }

    fn read_f64(&mut self) -> Result<F64, RErr> {
        let (v, bits, span, _) = self.float_bits("an f64")?;
        match bits {
            Some(b) if f64::from_bits(b).is_nan() => Ok(F64(b)),
            Some(b) => Err((span, format!("0x{b:x} is not an f64 NaN bit pattern"))),
            None => Ok(F64::new(v)),
        }
    }

    fn read_local(&mut self) -> Result<LocalId, RErr> {
        let (name, span) = self.word("a local name")?;
        self.locals.get(name.as_str()).copied().ok_or_else(|| {
            (
                span,
                format!(
                    "unknown local `{name}` in `{}`{}",
                    self.func.name,
                    crate::diag::did_you_mean(&name, self.locals.keys().copied())
                ),
            )
        })
    }

    fn read_label(&mut self) -> Result<Label, RErr> {
        let (name, span) = self.word("a label")?;
        self.labels
            .get(name.as_str())
            .map(|&b| Label(b))
            .ok_or_else(|| {
                (
                    span,
                    format!(
                        "unknown label `{name}` in `{}`{}",
                        self.func.name,
                        crate::diag::did_you_mean(&name, self.labels.keys().copied())
                    ),
                )
            })
    }

    fn read_type(&mut self) -> Result<Type, RErr> {
        let (base, span) = self.word("a type")?;
        let mut ty = match base.as_str() {
            "i32" => Type::I32,
            "i64" => Type::I64,
            "f32" => Type::F32,
            "f64" => Type::F64,
            "ref" => Type::Ref,
            name => Type::Class(*self.classes.get(name).ok_or_else(|| {
                (
                    span,
                    format!(
                        "unknown type `{name}`{}",
                        crate::diag::did_you_mean(
                            name,
                            self.classes
                                .keys()
                                .map(String::as_str)
                                .chain(["i32", "i64", "f32", "f64", "ref"])
                        )
                    ),
                )
            })?),
        };
        while self
            .toks
            .get(self.pos)
            .is_some_and(|t| t.tok == Tok::LBracket)
        {
            self.pos += 1;
            match self.toks.get(self.pos) {
                Some(t) if t.tok == Tok::RBracket => self.pos += 1,
                _ => return Err((span, "expected `]` to close the array type".into())),
            }
            ty = ty
                .array_of()
                .ok_or_else(|| (span, format!("arrays nest at most {MAX_ARRAY_DIMS} deep")))?;
        }
        Ok(ty)
    }

    fn read_class(&mut self) -> Result<ClassId, RErr> {
        let (name, span) = self.word("a class name")?;
        self.classes.get(&name).copied().ok_or_else(|| {
            (
                span,
                format!(
                    "unknown class `{name}`{}",
                    crate::diag::did_you_mean(&name, self.classes.keys().map(String::as_str))
                ),
            )
        })
    }

    fn read_field(&mut self) -> Result<FieldId, RErr> {
        let (name, span) = self.word("a field `Class.field`")?;
        let Some((class, field)) = name.rsplit_once('.') else {
            return Err((
                span,
                format!("expected a field written `Class.field`, found `{name}`"),
            ));
        };
        let c = *self
            .classes
            .get(class)
            .ok_or_else(|| (span, format!("unknown class `{class}`")))?;
        self.module
            .lookup_field(c, field)
            .ok_or_else(|| (span, format!("class `{class}` has no field `{field}`")))
    }

    fn read_func(&mut self) -> Result<FuncId, RErr> {
        let (name, span) = self.word("a function name")?;
        if let Some(&f) = self.funcs.get(&name) {
            return Ok(f);
        }
        if let Some((class, meth)) = name.rsplit_once('.')
            && let Some(&c) = self.classes.get(class)
        {
            return self
                .module
                .lookup_method(c, meth)
                .ok_or_else(|| (span, format!("class `{class}` has no method `{meth}`")));
        }
        Err((
            span,
            format!(
                "unknown function `{name}`{}",
                crate::diag::did_you_mean(&name, self.funcs.keys().map(String::as_str))
            ),
        ))
    }

    fn read_exception(&mut self) -> Result<ExceptionKind, RErr> {
        let (name, span) = self.word("an exception kind")?;
        ExceptionKind::from_name(&name).ok_or_else(|| {
            let all: Vec<_> = ExceptionKind::ALL.iter().map(|k| k.name()).collect();
            (
                span,
                format!("unknown exception `{name}` (one of {})", all.join(", ")),
            )
        })
    }
}

/// Parse a type written in the text form (`f32[]`, `Point`), resolving class
/// names against `module`.
pub fn parse_type(module: &Module, text: &str) -> Option<Type> {
    let text = text.trim();
    let base = text.trim_end_matches("[]");
    let dims = (text.len() - base.len()) / 2;
    let mut ty = match base {
        "i32" => Type::I32,
        "i64" => Type::I64,
        "f32" => Type::F32,
        "f64" => Type::F64,
        "ref" => Type::Ref,
        name => Type::Class(module.class_named(name)?),
    };
    for _ in 0..dims {
        ty = ty.array_of()?;
    }
    Some(ty)
}
