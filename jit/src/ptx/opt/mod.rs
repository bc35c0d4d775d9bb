//! Cleanup of a kernel body's PTX before it is assembled: the walker
//! lowers stack bytecode one instruction at a time, into one register per
//! local and per operand-stack depth, so its text is full of `mov`s
//! between those registers, of values computed for a deopt exit's record
//! and never used on the common path, and of branches to the next line.
//! `ptxas` removes all of that on hardware, but the PTX the virtual GPU
//! executes — and counts against CUDA C's, which NVVM already cleaned — is
//! this text; so the backend cleans it itself, in the classic way:
//!
//! 1. **copy propagation**: a use of `d` after `mov d, s` (both registers
//!    of one declared type) reads `s` wherever the copy is available on
//!    every path (a forward "available copies" data flow over the blocks;
//!    a write to `d` or `s` kills it);
//! 2. **dead code**: an instruction without effects (not a store, atomic,
//!    fence, call, branch, or a load with memory-ordering semantics) whose
//!    results no path reads is removed (backward liveness);
//! 3. **branches**: a branch to a label that only branches on (with no
//!    guard, or the same guard) goes straight there, a branch to the next
//!    line goes, `@p bra a; bra b; a:` becomes `@!p bra b; a:`, and labels
//!    no branch names and code no branch reaches go;
//! 4. **tests of tests** ([`peephole`]): the walker's conditions are `b32`
//!    0/1 values (`selp.b32 r, 1, 0, p`) that a branch tests again
//!    (`setp.ne.u32 q, r, 0`): the second test becomes `p` itself (or
//!    `!p`), and a guard on `not.pred q, p` reads `p` negated;
//! 5. **constants** ([`copies`]): `mov r, 2.0` is read as the immediate
//!    where PTX takes one (arithmetic and compare sources, never a memory
//!    operand, and never leaving an instruction without a register);
//! 6. **coalescing** ([`dead`]): `op t, ...; ...; mov d, t` with `t` read
//!    nowhere else and `d` untouched between becomes `op d, ...`;
//! 7. **common subexpressions** ([`cse`]): within a block, a pure
//!    instruction (a plain load too, while nothing that may write memory
//!    ran between) that repeats an earlier one on unchanged operands
//!    becomes a copy of its result (an element's address computed
//!    for a load and again for the store);
//! 8. **fusions** ([`peephole`]): a product added to once is one
//!    `mad` (`mul.wide` + `add` of an element's address), and a
//!    narrowing `cvt` of a value already 32 bits wide is a copy.
//! 9. **selects** ([`select`]): a diamond whose arms each compute one
//!    register, the same, is the one arm and the other under the guard.
//!
//! A `mov` with a vector of parts (`mov.b64 {lo, hi}, x`, `mov.b64 x, {lo,
//! hi}`: a reduction's 64-bit shuffles) is an instruction that writes or
//! reads each part, never a copy; any other brace leaves the body as it is.
//!
//! Each step is repeated until nothing changes (a copy of a copy takes two
//! rounds). The text is the backend's own, in one regular shape — one
//! instruction or label per line, no nested `{ }` scopes — which [`parse`]
//! checks: text it does not recognize is returned unchanged.

mod branches;
mod copies;
mod cse;
mod dead;
mod peephole;
mod select;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

/// One line of a body.
#[derive(Clone, Debug)]
enum Line {
    Label(String),
    /// A comment or anything kept verbatim (never an instruction).
    Other(String),
    Inst(Inst),
}

#[derive(Clone, Debug)]
struct Inst {
    /// `@p` / `@!p`: (negated, predicate register).
    guard: Option<(bool, String)>,
    op: String,
    args: Vec<String>,
    /// A comment after the instruction (`// @count NAME` names what the
    /// virtual GPU counts it as), kept with it through every step.
    note: Option<String>,
}

/// How an instruction's operands are read and written.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Shape {
    /// Every operand is read (stores, reductions, branches, fences).
    NoDest,
    /// The first operand is written, the rest read.
    Dest,
    /// `call (results), f, (arguments)`.
    Call,
}

impl Inst {
    fn base(&self) -> &str {
        self.op.split('.').next().unwrap_or("")
    }

    fn shape(&self) -> Shape {
        match self.base() {
            "st" | "red" | "bra" | "ret" | "fence" | "membar" | "nanosleep" | "bar" | "trap"
            | "exit" | "prefetch" | "prefetchu" | "brkpt" => Shape::NoDest,
            "call" if self.args.len() == 3 && self.args[0].starts_with('(') => Shape::Call,
            "call" => Shape::NoDest,
            _ => Shape::Dest,
        }
    }

    /// Whether removing it when its results are unused changes nothing
    /// else: no memory effect, no ordering, no control.
    fn pure(&self) -> bool {
        match self.base() {
            "ld" => !self
                .op
                .split('.')
                .any(|m| matches!(m, "volatile" | "relaxed" | "acquire" | "sys" | "gpu")),
            "atom" | "call" | "vote" | "shfl" | "match" | "activemask" => false,
            _ => self.shape() == Shape::Dest,
        }
    }

    /// The `%name` tokens of its written operand (none for a store, a
    /// branch, ...).
    fn written(&self) -> Vec<&str> {
        match (self.shape(), self.args.first()) {
            (Shape::Dest | Shape::Call, Some(a)) => tokens(a).map(|(s, e)| &a[s..e]).collect(),
            _ => Vec::new(),
        }
    }

    fn is_jump(&self) -> bool {
        self.base() == "bra"
    }

    fn ends_block(&self) -> bool {
        self.is_jump() || (self.base() == "ret" && self.guard.is_none())
    }

    fn text(&self) -> String {
        let mut s = String::new();
        if let Some((neg, p)) = &self.guard {
            s.push('@');
            if *neg {
                s.push('!');
            }
            s.push_str(p);
            s.push(' ');
        }
        s.push_str(&self.op);
        if !self.args.is_empty() {
            s.push(' ');
            s.push_str(&self.args.join(", "));
        }
        s.push(';');
        if let Some(n) = &self.note {
            s.push_str(" // ");
            s.push_str(n);
        }
        s
    }
}

/// The registers named in `text` (`%name` tokens that `regs` declares).
fn regs_in<'t>(text: &'t str, regs: &HashMap<String, Reg>) -> impl Iterator<Item = u32> + 't {
    let regs: Vec<u32> = tokens(text)
        .filter_map(|(a, b)| regs.get(&text[a..b]).map(|r| r.id))
        .collect();
    regs.into_iter()
}

/// `(start, end)` of each `%name` token of `text`.
fn tokens(text: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    let b = text.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < b.len() {
            if b[i] == b'%' {
                let s = i;
                i += 1;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                return Some((s, i));
            }
            i += 1;
        }
        None
    })
}

/// A declared register.
#[derive(Clone, Copy)]
struct Reg {
    id: u32,
    ty: &'static str,
}

/// Split `s` at the commas outside `()` and `[]`.
fn split_args(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut depth, mut cur) = (0i32, String::new());
    for c in s.chars() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// The body's lines, or `None` if any is not in the backend's shape.
fn parse(body: &str) -> Option<Vec<Line>> {
    let mut out = Vec::new();
    for raw in body.lines() {
        let l = raw.trim();
        if l.is_empty() {
            continue;
        }
        if l.starts_with("//") {
            out.push(Line::Other(raw.to_string()));
            continue;
        }
        if let Some(name) = l.strip_suffix(':') {
            if name.contains(char::is_whitespace) {
                return None;
            }
            out.push(Line::Label(name.to_string()));
            continue;
        }
        let (l, note) = match l.split_once("//") {
            Some((code, note)) => (code.trim_end(), Some(note.trim().to_string())),
            None => (l, None),
        };
        let l = l.strip_suffix(';')?;
        // Braces only as a `mov`'s vector of parts (`mov.b64 {lo, hi}, x`:
        // an instruction that writes or reads each part, and no copy).
        let vector = l.starts_with("mov.") && l.matches('{').count() == 1;
        if l.contains(';') || (l.contains(['{', '}']) && !vector) || l.starts_with('.') {
            return None;
        }
        let (guard, rest) = match l.strip_prefix('@') {
            Some(g) => {
                let (p, rest) = g.split_once(char::is_whitespace)?;
                let (neg, p) = match p.strip_prefix('!') {
                    Some(p) => (true, p),
                    None => (false, p),
                };
                (Some((neg, p.to_string())), rest.trim())
            }
            None => (None, l),
        };
        let (op, args) = match rest.split_once(char::is_whitespace) {
            Some((op, args)) => (op.to_string(), split_args(args)),
            None => (rest.to_string(), Vec::new()),
        };
        out.push(Line::Inst(Inst {
            guard,
            op,
            args,
            note,
        }));
    }
    Some(out)
}

/// Optimize a kernel body (the lines between the entry's declarations and
/// its closing brace). `decls` gives each declared register's type (e.g.
/// `.b32`, `.pred`); a register it does not name is never touched.
pub(super) fn optimize(body: &str, decls: &[(String, &'static str)]) -> String {
    let Some(mut lines) = parse(body) else {
        return body.to_string();
    };
    let regs: HashMap<String, Reg> = decls
        .iter()
        .enumerate()
        .map(|(i, (n, ty))| (n.clone(), Reg { id: i as u32, ty }))
        .collect();
    for _ in 0..16 {
        // Coalescing first: forwarding a copy's reads to its source makes
        // the source live past the copy, which rules the merge out.
        let mut changed = false;
        while dead::coalesce(&mut lines, &regs) {
            changed = true;
        }
        changed |= branches::clean(&mut lines);
        changed |= select::diamonds(&mut lines);
        changed |= peephole::tests_of_tests(&mut lines, &regs);
        changed |= peephole::fuse(&mut lines, &regs);
        changed |= cse::common(&mut lines, &regs);
        changed |= copies::propagate(&mut lines, &regs);
        changed |= dead::remove(&mut lines, &regs);
        if !changed {
            break;
        }
    }
    let mut out = String::with_capacity(body.len());
    for l in &lines {
        match l {
            Line::Label(n) => {
                out.push_str(n);
                out.push_str(":\n");
            }
            Line::Other(s) => {
                out.push_str(s);
                out.push('\n');
            }
            Line::Inst(i) => {
                out.push('\t');
                out.push_str(&i.text());
                out.push('\n');
            }
        }
    }
    out
}

/// The body's basic blocks: line ranges, and each one's successors.
struct Cfg {
    blocks: Vec<std::ops::Range<usize>>,
    succs: Vec<Vec<usize>>,
    preds: Vec<Vec<usize>>,
}

fn cfg(lines: &[Line]) -> Cfg {
    let mut blocks = Vec::new();
    let mut start = 0;
    for (i, l) in lines.iter().enumerate() {
        match l {
            Line::Label(_) if i > start => {
                blocks.push(start..i);
                start = i;
            }
            Line::Inst(x) if x.is_jump() || x.ends_block() => {
                blocks.push(start..i + 1);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < lines.len() || blocks.is_empty() {
        blocks.push(start..lines.len());
    }
    let mut at: HashMap<&str, usize> = HashMap::new();
    for (b, r) in blocks.iter().enumerate() {
        for l in &lines[r.clone()] {
            match l {
                Line::Label(n) => {
                    at.insert(n.as_str(), b);
                }
                Line::Other(_) => {}
                Line::Inst(_) => break,
            }
        }
    }
    let n = blocks.len();
    let mut succs = vec![Vec::new(); n];
    for (b, r) in blocks.iter().enumerate() {
        let last = lines[r.clone()].iter().rev().find_map(|l| match l {
            Line::Inst(i) => Some(i),
            _ => None,
        });
        let falls = match last {
            Some(i) if i.is_jump() => {
                if let Some(&t) = i.args.first().and_then(|l| at.get(l.as_str())) {
                    succs[b].push(t);
                }
                i.guard.is_some()
            }
            Some(i) => !i.ends_block(),
            None => true,
        };
        if falls && b + 1 < n {
            succs[b].push(b + 1);
        }
    }
    let mut preds = vec![Vec::new(); n];
    for (b, s) in succs.iter().enumerate() {
        for &t in s {
            preds[t].push(b);
        }
    }
    Cfg {
        blocks,
        succs,
        preds,
    }
}

/// A set of small integers.
#[derive(Clone, PartialEq, Eq)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn full(n: usize) -> Bits {
        let mut b = Bits(vec![!0; n.div_ceil(64)]);
        if !n.is_multiple_of(64)
            && let Some(last) = b.0.last_mut()
        {
            *last = (1u64 << (n % 64)) - 1;
        }
        b
    }
    fn has(&self, i: u32) -> bool {
        self.0[i as usize / 64] >> (i % 64) & 1 == 1
    }
    fn set(&mut self, i: u32) {
        self.0[i as usize / 64] |= 1 << (i % 64);
    }
    fn clear(&mut self, i: u32) {
        self.0[i as usize / 64] &= !(1 << (i % 64));
    }
    fn and(&mut self, o: &Bits) {
        self.0.iter_mut().zip(&o.0).for_each(|(a, b)| *a &= b);
    }
    fn or(&mut self, o: &Bits) {
        self.0.iter_mut().zip(&o.0).for_each(|(a, b)| *a |= b);
    }
}

/// The registers an instruction reads and writes.
fn uses_defs(i: &Inst, regs: &HashMap<String, Reg>) -> (Vec<u32>, Vec<u32>) {
    let mut uses: Vec<u32> = Vec::new();
    let mut defs = Vec::new();
    if let Some((_, p)) = &i.guard {
        uses.extend(regs.get(p).map(|r| r.id));
    }
    let first_read = match i.shape() {
        Shape::NoDest => 0,
        Shape::Dest | Shape::Call => {
            if let Some(a) = i.args.first() {
                defs.extend(regs_in(a, regs));
            }
            1
        }
    };
    for a in i.args.iter().skip(first_read) {
        uses.extend(regs_in(a, regs));
    }
    (uses, defs)
}
