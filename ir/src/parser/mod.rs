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

mod operands;
mod resolve;

pub use operands::parse_type;
use resolve::attach_comments;

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
}
