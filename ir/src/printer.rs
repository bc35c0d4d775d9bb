//! The printer: [`Module`] → canonical `.obc` text that parses back to an equal
//! module.

use crate::isa::{Inst, Label, OperandWriter};
use crate::module::{FuncKind, Function, Module};
use crate::types::{Bci, ClassId, Elem, ExceptionKind, F32, F64, FieldId, FuncId, LocalId, Type};
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write;

/// The text form of a type (`f32[]`, `Point`, `null`).
pub fn type_name(m: &Module, t: Type) -> String {
    let class = |c: ClassId| {
        m.classes
            .get(c.index())
            .map_or_else(|| format!("<class {}>", c.0), |c| c.name.clone())
    };
    match t {
        Type::I32 => "i32".into(),
        Type::I64 => "i64".into(),
        Type::F32 => "f32".into(),
        Type::F64 => "f64".into(),
        Type::Ref => "ref".into(),
        Type::Null => "null".into(),
        Type::Class(c) => class(c),
        Type::Array(e, d) => {
            let mut s = match e {
                Elem::Class(c) => class(c),
                e => type_name(m, e.to_type()),
            };
            for _ in 0..d {
                s.push_str("[]");
            }
            s
        }
    }
}

fn comment_lines(out: &mut String, indent: &str, lines: &[String]) {
    for l in lines {
        if l.is_empty() {
            let _ = writeln!(out, "{indent};");
        } else {
            let _ = writeln!(out, "{indent}; {l}");
        }
    }
}

/// Print a whole module in canonical form. Comments kept by the parser come
/// back before the item, member or instruction they preceded.
pub fn print_module(m: &Module) -> String {
    let mut out = String::new();
    let mut first = true;
    for (i, c) in m.classes.iter().enumerate() {
        if !first {
            out.push('\n');
        }
        first = false;
        comment_lines(&mut out, "", &c.comments.0.0);
        let _ = write!(out, "class {}", c.name);
        if let Some(s) = c.superclass {
            let _ = write!(out, " extends {}", type_name(m, Type::Class(s)));
        }
        out.push_str(" {\n");
        for &f in &c.fields {
            let fd = m.field(f);
            comment_lines(&mut out, "    ", &fd.comments);
            let _ = writeln!(out, "    field {}: {}", fd.name, type_name(m, fd.ty));
        }
        for &meth in &c.methods {
            print_function_into(m, m.func(meth), "    ", &mut out);
        }
        comment_lines(&mut out, "    ", &c.comments.0.1);
        out.push_str("}\n");
        let _ = i;
    }
    for f in m
        .funcs
        .iter()
        .filter(|f| !matches!(f.kind, FuncKind::Method { .. }))
    {
        if !first {
            out.push('\n');
        }
        first = false;
        print_function_into(m, f, "", &mut out);
    }
    if !m.tail_comments.is_empty() {
        if !first {
            out.push('\n');
        }
        comment_lines(&mut out, "", &m.tail_comments);
    }
    out
}

/// Print one function (or method, with its `method` header).
pub fn print_function(m: &Module, f: &Function) -> String {
    let mut s = String::new();
    print_function_into(m, f, "", &mut s);
    s
}

/// Label names for the branch targets of `f`: the author's where they are
/// valid and unique, else `L<bci>`.
pub fn label_names(f: &Function) -> BTreeMap<Bci, String> {
    let targets: HashSet<Bci> = f.body.iter().filter_map(Inst::target).collect();
    let mut names = BTreeMap::new();
    let mut used = HashSet::new();
    let mut sorted: Vec<Bci> = targets.into_iter().collect();
    sorted.sort_unstable();
    for t in sorted {
        let mut name = f
            .debug
            .labels
            .get(&t)
            .filter(|n| valid_label(n) && !used.contains(n.as_str()))
            .cloned()
            .unwrap_or_else(|| format!("L{t}"));
        while used.contains(&name) {
            name.push('_');
        }
        used.insert(name.clone());
        names.insert(t, name);
    }
    names
}

fn valid_label(s: &str) -> bool {
    let mut cs = s.chars();
    cs.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && cs.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn print_function_into(m: &Module, f: &Function, indent: &str, out: &mut String) {
    let (kw, skip) = match f.kind {
        FuncKind::Static => ("func", 0),
        FuncKind::Kernel => ("kernel", 0),
        FuncKind::Method {
            is_abstract: true, ..
        } => ("abstract method", 1),
        FuncKind::Method { .. } => ("method", 1),
    };
    comment_lines(out, indent, &f.debug.leading);
    let params: Vec<String> = f
        .params()
        .iter()
        .skip(skip)
        .map(|l| format!("{}: {}", l.name, type_name(m, l.ty)))
        .collect();
    let _ = write!(
        out,
        "{indent}{kw} {}({})",
        f.short_name(),
        params.join(", ")
    );
    if let Some(r) = f.ret {
        let _ = write!(out, " -> {}", type_name(m, r));
    }
    if f.is_abstract() {
        out.push('\n');
        return;
    }
    out.push_str(" {\n");
    for l in &f.locals[(f.param_count as usize).min(f.locals.len())..] {
        let _ = writeln!(out, "{indent}    local {}: {}", l.name, type_name(m, l.ty));
    }
    let body_indent = format!("{indent}    ");
    comment_lines(out, &body_indent, &f.debug.head);
    let labels = label_names(f);
    for (bci, inst) in f.body.iter().enumerate() {
        let bci = bci as Bci;
        if let Some(c) = f.debug.before.get(&bci) {
            comment_lines(out, &body_indent, c);
        }
        if let Some(l) = labels.get(&bci) {
            let _ = writeln!(out, "{indent}  {l}:");
        }
        let text = inst_text(m, f, &labels, inst);
        match f.debug.trailing.get(&bci) {
            Some(c) => {
                let _ = writeln!(out, "{body_indent}{text:<24} ; {c}");
            }
            None => {
                let _ = writeln!(out, "{body_indent}{text}");
            }
        }
    }
    comment_lines(out, &body_indent, &f.debug.end);
    let _ = writeln!(out, "{indent}}}");
}

/// The text of one instruction, e.g. `getfield Point.x`.
pub fn inst_text(m: &Module, f: &Function, labels: &BTreeMap<Bci, String>, inst: &Inst) -> String {
    let mut w = Writer {
        m,
        f,
        labels,
        out: inst.opcode().mnemonic().to_string(),
    };
    inst.write_operands(&mut w);
    w.out
}

struct Writer<'a> {
    m: &'a Module,
    f: &'a Function,
    labels: &'a BTreeMap<Bci, String>,
    out: String,
}

impl Writer<'_> {
    fn word(&mut self, s: &str) {
        self.out.push(' ');
        self.out.push_str(s);
    }
}

fn f64_text(v: f64, bits: u64, canonical_nan: u64) -> String {
    if v.is_nan() {
        if bits == canonical_nan {
            "nan".into()
        } else {
            format!("nan:0x{bits:x}")
        }
    } else if v.is_infinite() {
        if v > 0.0 { "inf".into() } else { "-inf".into() }
    } else {
        format!("{v:?}")
    }
}

impl OperandWriter for Writer<'_> {
    fn write_i32(&mut self, v: i32) {
        self.word(&v.to_string());
    }
    fn write_i64(&mut self, v: i64) {
        self.word(&v.to_string());
    }
    fn write_f32(&mut self, v: F32) {
        let x = v.get();
        let s = if x.is_nan() || x.is_infinite() {
            f64_text(f64::from(x), u64::from(v.0), u64::from(f32::NAN.to_bits()))
        } else {
            format!("{x:?}")
        };
        self.word(&s);
    }
    fn write_f64(&mut self, v: F64) {
        let s = f64_text(v.get(), v.0, f64::NAN.to_bits());
        self.word(&s);
    }
    fn write_local(&mut self, v: LocalId) {
        let s = self
            .f
            .locals
            .get(v.index())
            .map_or_else(|| format!("<local {}>", v.0), |l| l.name.clone());
        self.word(&s);
    }
    fn write_label(&mut self, v: Label) {
        let s = self
            .labels
            .get(&v.0)
            .cloned()
            .unwrap_or_else(|| format!("L{}", v.0));
        self.word(&s);
    }
    fn write_type(&mut self, v: Type) {
        let s = type_name(self.m, v);
        self.word(&s);
    }
    fn write_class(&mut self, v: ClassId) {
        let s = type_name(self.m, Type::Class(v));
        self.word(&s);
    }
    fn write_field(&mut self, v: FieldId) {
        let s = match self.m.fields.get(v.index()) {
            Some(fd) => format!("{}.{}", type_name(self.m, Type::Class(fd.class)), fd.name),
            None => format!("<field {}>", v.0),
        };
        self.word(&s);
    }
    fn write_func(&mut self, v: FuncId) {
        let s = self
            .m
            .funcs
            .get(v.index())
            .map_or_else(|| format!("<func {}>", v.0), |f| f.name.clone());
        self.word(&s);
    }
    fn write_exception(&mut self, v: ExceptionKind) {
        self.word(v.name());
    }
}
