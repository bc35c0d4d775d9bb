//! The PTX parser: module directives, variables, `.entry`/`.func` headers
//! and bodies (register declarations, labels, instructions). Instructions
//! are decoded by [`crate::decode`]. Anything not understood is an error
//! naming its line: a construct is never skipped.

use crate::Error;
use crate::decode::{self, Raw};
use crate::inst::{Inst, Op, Space, Ty};
use crate::lex::{T, Tok, int_literal, lex};
use crate::module::{Func, Module, Param, RegInfo, Var};
use std::collections::HashMap;

/// Parses a whole PTX module.
pub fn parse(text: &str) -> Result<Module, Error> {
    let toks = lex(text)?;
    let mut p = Parser {
        toks,
        pos: 0,
        m: Module {
            version: String::new(),
            target: Vec::new(),
            funcs: Vec::new(),
            vars: Vec::new(),
            data_bytes: 0,
            shared_bytes: 0,
            text: text.to_string(),
            by_name: HashMap::new(),
        },
        calls: Vec::new(),
    };
    p.module()?;
    let Parser { mut m, calls, .. } = p;
    for (f, i, name, line) in calls {
        let Some(&callee) = m.by_name.get(&name) else {
            return Err(Error::parse(
                line,
                format!("call of unknown function `{name}`"),
            ));
        };
        let target = &m.funcs[callee as usize];
        if target.entry {
            return Err(Error::parse(
                line,
                format!("`{name}` is a kernel; it cannot be called"),
            ));
        }
        let (nargs, nrets) = (target.arg_regs.len(), target.ret_regs.len());
        if let Op::Call { func, rets, args } = &mut m.funcs[f].code[i].op {
            if args.len() != nargs || rets.len() != nrets {
                return Err(Error::parse(
                    line,
                    format!(
                        "`{name}` takes {nargs} argument(s) and returns {nrets}; the call passes {} and receives {}",
                        args.len(),
                        rets.len()
                    ),
                ));
            }
            *func = callee;
        }
    }
    Ok(m)
}

/// A statement of a body before decoding: guard, opcode, operands, line.
type Stmt = (Option<(String, bool)>, String, Vec<Raw>, u32);

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
    m: Module,
    /// Calls to resolve once every function is known: (function, inst,
    /// callee name, line).
    calls: Vec<(usize, usize, String, u32)>,
}

/// What a function body resolves names against while it is parsed.
pub(crate) struct Scope<'a> {
    pub(crate) regs: &'a [RegInfo],
    pub(crate) reg_names: &'a HashMap<String, u32>,
    pub(crate) labels: &'a HashMap<String, u32>,
    /// Parameters, module variables and the function's own variables:
    /// name → (space, offset).
    pub(crate) syms: &'a HashMap<String, (Space, u64)>,
}

impl Parser {
    fn line(&self) -> u32 {
        self.toks
            .get(self.pos)
            .or_else(|| self.toks.last())
            .map_or(1, |t| t.line)
    }

    fn peek(&self) -> Option<&T> {
        self.toks.get(self.pos).map(|t| &t.t)
    }

    fn next(&mut self) -> Result<Tok, Error> {
        let t = self
            .toks
            .get(self.pos)
            .cloned()
            .ok_or_else(|| Error::parse(self.line(), "unexpected end of the module"))?;
        self.pos += 1;
        Ok(t)
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(&T::P(c)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: char) -> Result<(), Error> {
        let t = self.next()?;
        if t.t == T::P(c) {
            Ok(())
        } else {
            Err(Error::parse(
                t.line,
                format!("expected `{c}`, found {}", show(&t.t)),
            ))
        }
    }

    fn word(&mut self) -> Result<(String, u32), Error> {
        let t = self.next()?;
        match t.t {
            T::Word(w) => Ok((w, t.line)),
            other => Err(Error::parse(
                t.line,
                format!("expected a name, found {}", show(&other)),
            )),
        }
    }

    fn number(&mut self) -> Result<u64, Error> {
        let t = self.next()?;
        match &t.t {
            T::Num(n) => {
                int_literal(n).ok_or_else(|| Error::parse(t.line, format!("bad integer `{n}`")))
            }
            other => Err(Error::parse(
                t.line,
                format!("expected a number, found {}", show(other)),
            )),
        }
    }

    /// Skips to just after the next `;` (for directives that carry no
    /// meaning for execution, such as `.pragma`).
    fn skip_statement(&mut self) -> Result<(), Error> {
        while self.next()?.t != T::P(';') {}
        Ok(())
    }

    fn module(&mut self) -> Result<(), Error> {
        while let Some(t) = self.peek().cloned() {
            let line = self.line();
            let T::Word(w) = t else {
                return Err(Error::parse(line, format!("unexpected {}", show(&t))));
            };
            self.pos += 1;
            match w.as_str() {
                ".version" => {
                    let t = self.next()?;
                    match t.t {
                        T::Num(v) => self.m.version = v,
                        other => {
                            return Err(Error::parse(
                                t.line,
                                format!("bad .version {}", show(&other)),
                            ));
                        }
                    }
                }
                ".target" => loop {
                    let (w, _) = self.word()?;
                    self.m.target.push(w);
                    if !self.eat(',') {
                        break;
                    }
                },
                ".address_size" => {
                    let n = self.number()?;
                    if n != 64 {
                        return Err(Error::parse(
                            line,
                            format!(".address_size {n}: only 64 is modelled"),
                        ));
                    }
                }
                ".visible" | ".extern" | ".weak" => {}
                ".entry" => self.function(true, line)?,
                ".func" => self.function(false, line)?,
                ".global" | ".const" | ".shared" => {
                    let space = space_of(&w);
                    self.module_var(space)?;
                }
                ".pragma" | ".file" | ".loc" => self.skip_statement()?,
                _ => return Err(Error::parse(line, format!("unknown directive `{w}`"))),
            }
        }
        Ok(())
    }

    /// `[.align n] .ty name[[N]]` → (type, name, bytes, align).
    fn declarator(&mut self) -> Result<(Ty, String, u64, u64), Error> {
        let mut align = 0;
        let (mut w, mut line) = self.word()?;
        if w == ".align" {
            align = self.number()?;
            (w, line) = self.word()?;
        }
        let ty = w
            .strip_prefix('.')
            .and_then(Ty::parse)
            .ok_or_else(|| Error::parse(line, format!("expected a type, found `{w}`")))?;
        let (name, _) = self.word()?;
        let mut count = 1;
        if self.eat('[') {
            count = self.number()?;
            self.expect(']')?;
        }
        let bytes = u64::from(ty.bytes()) * count;
        Ok((ty, name, bytes, align.max(u64::from(ty.bytes()))))
    }

    fn module_var(&mut self, space: Space) -> Result<(), Error> {
        let line = self.line();
        let (ty, name, bytes, align) = self.declarator()?;
        let mut init = Vec::new();
        if self.eat('=') {
            if space == Space::Shared {
                return Err(Error::parse(
                    line,
                    "a .shared variable cannot have an initializer",
                ));
            }
            let braced = self.eat('{');
            loop {
                let neg = self.eat('-');
                let t = self.next()?;
                let T::Num(n) = &t.t else {
                    return Err(Error::parse(
                        t.line,
                        format!("expected a constant, found {}", show(&t.t)),
                    ));
                };
                let v = decode::immediate(n, neg, ty)
                    .ok_or_else(|| Error::parse(t.line, format!("bad constant `{n}` for {ty}")))?;
                init.extend_from_slice(&v.to_le_bytes()[..ty.bytes() as usize]);
                if !braced || !self.eat(',') {
                    break;
                }
            }
            if braced {
                self.expect('}')?;
            }
            if init.len() as u64 > bytes {
                return Err(Error::parse(
                    line,
                    format!("`{name}` has more initializers than elements"),
                ));
            }
        }
        self.expect(';')?;
        let total = if space == Space::Shared {
            &mut self.m.shared_bytes
        } else {
            &mut self.m.data_bytes
        };
        let offset = total.next_multiple_of(align);
        *total = offset + bytes;
        self.m.vars.push(Var {
            name,
            space,
            offset,
            bytes,
            init,
        });
        Ok(())
    }

    fn function(&mut self, entry: bool, line: u32) -> Result<(), Error> {
        let mut regs: Vec<RegInfo> = Vec::new();
        let mut reg_names: HashMap<String, u32> = HashMap::new();
        let mut ret_regs = Vec::new();
        if !entry && self.eat('(') {
            ret_regs = self.reg_params(&mut regs, &mut reg_names)?;
        }
        let (name, _) = self.word()?;
        let (mut params, mut param_bytes, mut arg_regs) = (Vec::new(), 0u64, Vec::new());
        if self.eat('(') {
            if entry {
                while !self.eat(')') {
                    let (w, l) = self.word()?;
                    if w != ".param" {
                        return Err(Error::parse(
                            l,
                            format!("a kernel parameter must be `.param`, found `{w}`"),
                        ));
                    }
                    let (ty, pname, bytes, align) = self.declarator()?;
                    let offset = param_bytes.next_multiple_of(align);
                    param_bytes = offset + bytes;
                    params.push(Param {
                        name: pname,
                        ty,
                        bytes,
                        offset,
                    });
                    self.eat(',');
                }
            } else {
                arg_regs = self.reg_params(&mut regs, &mut reg_names)?;
            }
        }
        // Performance-tuning directives between the header and the body.
        while let Some(T::Word(w)) = self.peek() {
            match w.as_str() {
                ".maxntid" | ".reqntid" | ".minnctapersm" | ".maxnreg" | ".noreturn" => {
                    self.pos += 1;
                    while matches!(self.peek(), Some(T::Num(_)) | Some(T::P(','))) {
                        self.pos += 1;
                    }
                }
                _ => break,
            }
        }
        if self.eat(';') {
            // A declaration only: it registers nothing.
            return Ok(());
        }
        if self.m.by_name.contains_key(&name) {
            return Err(Error::parse(
                line,
                format!("function `{name}` defined twice"),
            ));
        }
        self.expect('{')?;
        let mut syms: HashMap<String, (Space, u64)> = HashMap::new();
        for v in &self.m.vars {
            syms.insert(v.name.clone(), (v.space, v.offset));
        }
        for p in &params {
            syms.insert(p.name.clone(), (Space::Param, p.offset));
        }
        let mut f = Func {
            name: name.clone(),
            entry,
            params,
            param_bytes,
            arg_regs,
            ret_regs,
            regs: Vec::new(),
            code: Vec::new(),
            local_bytes: 0,
            shared_bytes: self.m.shared_bytes,
            line,
        };
        // Statements: (guard, opcode, operands, line), decoded once every
        // label is known.
        let mut stmts: Vec<Stmt> = Vec::new();
        let mut labels: HashMap<String, u32> = HashMap::new();
        let mut depth = 1;
        while depth > 0 {
            let t = self.next()?;
            match t.t {
                T::P('}') => depth -= 1,
                T::P('{') => depth += 1,
                T::P('@') => {
                    let neg = self.eat('!');
                    let (p, _) = self.word()?;
                    let (op, l) = self.word()?;
                    let ops = self.operands()?;
                    stmts.push((Some((p, neg)), op, ops, l));
                }
                T::Word(w) if self.peek() == Some(&T::P(':')) => {
                    self.pos += 1;
                    if labels.insert(w.clone(), stmts.len() as u32).is_some() {
                        return Err(Error::parse(t.line, format!("label `{w}` defined twice")));
                    }
                }
                T::Word(w) if w == ".reg" => self.reg_decl(&mut regs, &mut reg_names)?,
                T::Word(w) if w == ".local" || w == ".shared" => {
                    let (_, vname, bytes, align) = self.declarator()?;
                    self.expect(';')?;
                    let total = if w == ".local" {
                        &mut f.local_bytes
                    } else {
                        &mut f.shared_bytes
                    };
                    let offset = total.next_multiple_of(align);
                    *total = offset + bytes;
                    syms.insert(vname, (space_of(&w), offset));
                }
                T::Word(w) if w == ".pragma" || w == ".loc" => self.skip_statement()?,
                T::Word(w) if w.starts_with('.') => {
                    return Err(Error::parse(
                        t.line,
                        format!("unknown directive `{w}` in a function body"),
                    ));
                }
                T::Word(w) => {
                    let ops = self.operands()?;
                    stmts.push((None, w, ops, t.line));
                }
                other => return Err(Error::parse(t.line, format!("unexpected {}", show(&other)))),
            }
        }
        let index = self.m.funcs.len();
        let scope = Scope {
            regs: &regs,
            reg_names: &reg_names,
            labels: &labels,
            syms: &syms,
        };
        for (guard, op, ops, l) in stmts {
            let guard = match guard {
                None => None,
                Some((p, neg)) => {
                    let r = *reg_names
                        .get(&p)
                        .ok_or_else(|| Error::parse(l, format!("unknown predicate `{p}`")))?;
                    if regs[r as usize].ty.kind != crate::inst::TyKind::Pred {
                        return Err(Error::parse(l, format!("guard `{p}` is not a predicate")));
                    }
                    Some((r, neg))
                }
            };
            let (op, callee) = decode::decode(&op, ops, &scope, l)?;
            if let Some(c) = callee {
                self.calls.push((index, f.code.len(), c, l));
            }
            f.code.push(Inst { guard, op, line: l });
        }
        f.regs = regs;
        self.m.by_name.insert(name, index as u32);
        self.m.funcs.push(f);
        Ok(())
    }

    /// `.reg .ty %a, %b<4>;`
    fn reg_decl(
        &mut self,
        regs: &mut Vec<RegInfo>,
        names: &mut HashMap<String, u32>,
    ) -> Result<(), Error> {
        let (w, line) = self.word()?;
        let ty = w
            .strip_prefix('.')
            .and_then(Ty::parse)
            .ok_or_else(|| Error::parse(line, format!("`.reg` needs a type, found `{w}`")))?;
        loop {
            let (name, line) = self.word()?;
            if self.eat('<') {
                let n = self.number()?;
                self.expect('>')?;
                for i in 0..n {
                    add_reg(regs, names, format!("{name}{i}"), ty, line)?;
                }
            } else {
                add_reg(regs, names, name, ty, line)?;
            }
            if !self.eat(',') {
                break;
            }
        }
        self.expect(';')
    }

    /// `(.reg .ty %a, .reg .ty %b)` after its `(`; returns the registers.
    fn reg_params(
        &mut self,
        regs: &mut Vec<RegInfo>,
        names: &mut HashMap<String, u32>,
    ) -> Result<Vec<u32>, Error> {
        let mut out = Vec::new();
        while !self.eat(')') {
            let (w, line) = self.word()?;
            if w != ".reg" {
                return Err(Error::parse(
                    line,
                    format!("`{w}` parameters of a .func are not modelled (only `.reg` ones)"),
                ));
            }
            let (t, line) = self.word()?;
            let ty = t
                .strip_prefix('.')
                .and_then(Ty::parse)
                .ok_or_else(|| Error::parse(line, format!("expected a type, found `{t}`")))?;
            let (name, line) = self.word()?;
            out.push(add_reg(regs, names, name, ty, line)?);
            self.eat(',');
        }
        Ok(out)
    }

    /// The operands of an instruction up to its `;`.
    fn operands(&mut self) -> Result<Vec<Raw>, Error> {
        let mut out = Vec::new();
        if self.eat(';') {
            return Ok(out);
        }
        loop {
            out.push(self.operand()?);
            if self.eat(';') {
                return Ok(out);
            }
            self.expect(',')?;
        }
    }

    fn operand(&mut self) -> Result<Raw, Error> {
        let t = self.next()?;
        Ok(match t.t {
            T::P('!') => Raw::Not(Box::new(self.operand()?)),
            T::P('-') => {
                let n = self.next()?;
                match n.t {
                    T::Num(s) => Raw::Num(s, true),
                    other => {
                        return Err(Error::parse(
                            n.line,
                            format!("expected a number after `-`, found {}", show(&other)),
                        ));
                    }
                }
            }
            T::Num(s) => Raw::Num(s, false),
            T::Word(w) => {
                if self.eat('|') {
                    let (q, _) = self.word()?;
                    Raw::Pair(w, q)
                } else {
                    Raw::Name(w)
                }
            }
            T::P('[') => {
                let base = self.next()?;
                let base = match base.t {
                    T::Word(w) => Some(w),
                    T::Num(n) => {
                        let v = int_literal(&n)
                            .ok_or_else(|| Error::parse(base.line, format!("bad address `{n}`")))?;
                        self.expect(']')?;
                        return Ok(Raw::Addr(None, v as i64));
                    }
                    other => {
                        return Err(Error::parse(
                            base.line,
                            format!("bad address: {}", show(&other)),
                        ));
                    }
                };
                let mut off: i64 = 0;
                while !self.eat(']') {
                    let neg = if self.eat('+') {
                        self.eat('-')
                    } else if self.eat('-') {
                        true
                    } else {
                        let t = self.next()?;
                        return Err(Error::parse(
                            t.line,
                            format!(
                                "expected `+`, `-` or `]` in an address, found {}",
                                show(&t.t)
                            ),
                        ));
                    };
                    let n = self.number()? as i64;
                    off = off.wrapping_add(if neg { n.wrapping_neg() } else { n });
                }
                Raw::Addr(base, off)
            }
            T::P('{') => {
                let mut parts = Vec::new();
                while !self.eat('}') {
                    parts.push(self.operand()?);
                    self.eat(',');
                }
                Raw::Vec(parts)
            }
            T::P('(') => {
                let mut parts = Vec::new();
                while !self.eat(')') {
                    parts.push(self.operand()?);
                    self.eat(',');
                }
                Raw::List(parts)
            }
            other => {
                return Err(Error::parse(
                    t.line,
                    format!("unexpected {} in operands", show(&other)),
                ));
            }
        })
    }
}

fn add_reg(
    regs: &mut Vec<RegInfo>,
    names: &mut HashMap<String, u32>,
    name: String,
    ty: Ty,
    line: u32,
) -> Result<u32, Error> {
    let i = regs.len() as u32;
    if names.insert(name.clone(), i).is_some() {
        return Err(Error::parse(
            line,
            format!("register `{name}` declared twice"),
        ));
    }
    regs.push(RegInfo { name, ty });
    Ok(i)
}

fn space_of(directive: &str) -> Space {
    match directive {
        ".global" => Space::Global,
        ".const" => Space::Const,
        ".shared" => Space::Shared,
        ".local" => Space::Local,
        ".param" => Space::Param,
        _ => Space::Generic,
    }
}

fn show(t: &T) -> String {
    match t {
        T::Word(w) => format!("`{w}`"),
        T::Num(n) => format!("`{n}`"),
        T::P(c) => format!("`{c}`"),
        T::Str(s) => format!("\"{s}\""),
    }
}
