//! The REPL's state and commands, on the public `offload` API only.

use super::help;
use super::input::{self, Item};
use super::suggest::{article, did_you_mean};
use offload::ir::{Elem, Type};
use offload::{
    Arg, Array, Device, LaunchReport, Module, Object, OffloadError, RefArray, Runtime, par_offload,
};
use rand::{RngExt, SeedableRng};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// An error of one entry, shown to people as its text.
#[derive(Debug, thiserror::Error)]
pub enum ReplError {
    /// The runtime refused what the entry asked (its error kept whole:
    /// a load's diagnostics, a launch's exceptions and report).
    #[error("{0}")]
    Runtime(#[from] OffloadError),
    /// The entry itself is wrong: an unknown command, name or setting, a
    /// bad argument or usage; the text says what and where.
    #[error("{0}")]
    Entry(String),
}

impl From<String> for ReplError {
    fn from(e: String) -> ReplError {
        ReplError::Entry(e)
    }
}

macro_rules! bail {
    ($($t:tt)*) => { return Err(ReplError::Entry(format!($($t)*))) };
}

type Result<T, E = ReplError> = std::result::Result<T, E>;

mod defs;
mod launch;
mod parse;
mod reduce;
mod settings;
mod source;
use source::SourceDef;
mod views;

use defs::*;
pub use parse::parse_duration;
use parse::*;
pub use settings::Settings;
use settings::*;
use views::*;

/// A host variable.
#[derive(Clone, Debug)]
pub enum Var {
    Scalar(Arg),
    I32(Array<i32>),
    I64(Array<i64>),
    F32(Array<f32>),
    F64(Array<f64>),
    Refs(RefArray),
    Obj(Object),
}

impl Var {
    fn arg(&self) -> Arg {
        match self {
            Var::Scalar(a) => a.clone(),
            Var::I32(a) => a.into(),
            Var::I64(a) => a.into(),
            Var::F32(a) => a.into(),
            Var::F64(a) => a.into(),
            Var::Refs(a) => a.into(),
            Var::Obj(o) => o.into(),
        }
    }

    fn describe(&self) -> String {
        match self {
            Var::Scalar(a) => format!("{} = {}", arg_type(a), arg_text(a)),
            Var::I32(a) => format!("i32[{}]", a.len()),
            Var::I64(a) => format!("i64[{}]", a.len()),
            Var::F32(a) => format!("f32[{}]", a.len()),
            Var::F64(a) => format!("f64[{}]", a.len()),
            Var::Refs(a) => format!("{}[{}]", a.elem_class(), a.len()),
            Var::Obj(o) => format!("{} object", o.class_name()),
        }
    }
}

fn arg_type(a: &Arg) -> &'static str {
    match a {
        Arg::I32(_) => "i32",
        Arg::I64(_) => "i64",
        Arg::F32(_) => "f32",
        Arg::F64(_) => "f64",
        Arg::Ref(_) => "ref",
    }
}

fn arg_text(a: &Arg) -> String {
    match a {
        Arg::I32(x) => x.to_string(),
        Arg::I64(x) => x.to_string(),
        Arg::F32(x) => format!("{x:?}"),
        Arg::F64(x) => format!("{x:?}"),
        Arg::Ref(r) if r.is_null() => "null".into(),
        Arg::Ref(r) => format!("@{:#x}", r.byte_offset()),
    }
}

/// One definition of the session.
#[derive(Clone, Debug)]
struct Def {
    item: Item,
    /// Where it came from: `<input>`, or a file.
    origin: String,
    /// Compiled from a source definition: `item` holds the bytecode it
    /// compiled to, and `origin` and `item.line` where its source is.
    compiled: bool,
}

/// The last launch.
#[derive(Clone, Debug)]
struct Last {
    report: LaunchReport,
    /// The exceptions, rendered (first with its trace, then the rest).
    exceptions: Option<String>,
}

/// The REPL's state: settings, runtime, definitions, variables and the last
/// launch.
pub struct Session {
    pub settings: Settings,
    rt: Runtime,
    /// The runtime a Ctrl-C handler interrupts.
    pub current: Arc<Mutex<Runtime>>,
    defs: Vec<Def>,
    /// The source definitions (`offload-lang`), compiled together; what
    /// they compile to is defined as bytecode in `defs`.
    sources: Vec<SourceDef>,
    /// For each function compiled from source: its origin and the source
    /// line of each bytecode index (for traces).
    source_lines: std::collections::HashMap<String, (String, Vec<u32>)>,
    /// Definitions that name a class or function not defined yet, each
    /// with what it waits for: they load once what they name is defined.
    pending: Vec<(Def, String)>,
    module: Option<Module>,
    vars: BTreeMap<String, Var>,
    last: Option<Last>,
    safepoint_after: Option<Duration>,
    /// Script mode (`offload run`): a launch whose workitems throw is an
    /// error unless `:expect throws` announced it.
    pub script: bool,
    /// `:expect throws` came before the next run.
    expect_throws: bool,
}

impl Session {
    /// A session on `settings`.
    pub fn new(settings: Settings) -> Result<Session> {
        let rt = settings.build()?;
        Ok(Session {
            settings,
            current: Arc::new(Mutex::new(rt.clone())),
            rt,
            defs: Vec::new(),
            sources: Vec::new(),
            source_lines: std::collections::HashMap::new(),
            pending: Vec::new(),
            module: None,
            vars: BTreeMap::new(),
            last: None,
            safepoint_after: None,
            script: false,
            expect_throws: false,
        })
    }

    /// The names completion offers: kernels, classes, functions, variables.
    pub fn names(&self) -> (Vec<String>, Vec<String>, Vec<String>) {
        let mut kernels = Vec::new();
        let mut classes = Vec::new();
        for d in &self.defs {
            match d.item.kind {
                "kernel" => kernels.push(d.item.name.clone()),
                "class" => classes.push(d.item.name.clone()),
                _ => {}
            }
        }
        (kernels, classes, self.vars.keys().cloned().collect())
    }

    /// Workers of the runtime.
    pub fn workers(&self) -> usize {
        self.rt.workers()
    }

    /// Run one entry typed at the prompt, appending what it prints to `out`.
    pub fn execute(&mut self, entry: &str, origin: &str, out: &mut String) -> Result<()> {
        self.execute_at(entry, origin, 1, out)
    }

    /// Run one entry that starts at line `line` of `origin`.
    pub fn execute_at(
        &mut self,
        entry: &str,
        origin: &str,
        line: u32,
        out: &mut String,
    ) -> Result<()> {
        let trimmed = entry.trim();
        if trimmed.is_empty() || input::is_comment(trimmed) && !entry.contains('\n') {
            return Ok(());
        }
        let first_code = entry
            .lines()
            .find(|l| {
                let t = l.trim();
                !t.is_empty() && !input::is_comment(t)
            })
            .unwrap_or("");
        if first_code.is_empty() {
            return Ok(());
        }
        if input::starts_source(first_code) {
            return self.define_source(entry, origin, line, out);
        }
        if input::starts_definition(first_code) {
            return self.define(entry, origin, line, out);
        }
        let words: Vec<&str> = trimmed.split_whitespace().collect();
        let (cmd, rest) = (words[0], &words[1..]);
        let tail = trimmed[cmd.len()..].trim();
        match cmd {
            ":help" | ":h" | "help" => {
                out.push_str(&help::help(rest.first().copied())?);
                Ok(())
            }
            ":load" | ":l" => self.load(tail, out),
            ":defs" => {
                self.defs_text(out);
                self.sources_text(out);
                Ok(())
            }
            "let" => self.let_(tail, out),
            "set" => self.set_(tail, out),
            "print" | "p" | ":print" => self.print(tail, out),
            ":vars" => {
                self.vars_text(out);
                Ok(())
            }
            "run" | ":run" => self.run(rest, reduce::Launch::ForEach, None, out).map(drop),
            "reduce" => {
                let c = reduce::combine(rest.first())?;
                self.run(&rest[1..], reduce::Launch::Reduce(c), None, out)
                    .map(drop)
            }
            ":time" => self.time(rest, out),
            ":safepoint" => self.arm_safepoint(rest, out),
            ":expect" => {
                if rest != ["throws"] {
                    bail!("usage: :expect throws (the next run must have workitems that throw)");
                }
                self.expect_throws = true;
                Ok(())
            }
            ":report" => self.with_last(out, summary),
            ":deopts" => self.with_last(out, deopt_table),
            ":sites" => self.with_last(out, sites),
            ":profile" => self.profile(out),
            ":info" => self.info(rest, out),
            ":bytecode" | ":bc" => {
                let (name, view) = code_args(rest, ":bytecode FUNCTION [A..B | TEXT]")?;
                code_view(
                    &self.module()?.bytecode(name)?,
                    ":bytecode",
                    name,
                    view,
                    out,
                )
            }
            ":clif" => {
                let (k, view) = code_args(rest, ":clif KERNEL [A..B | TEXT]")?;
                code_view(&self.module()?.cranelift_ir(k)?, ":clif", k, view, out)
            }
            ":ptx" => {
                let (k, view) = code_args(rest, ":ptx KERNEL [A..B | TEXT]")?;
                code_view(&self.module()?.ptx(k)?, ":ptx", k, view, out)
            }
            ":meta" => {
                let k = one(rest, ":meta KERNEL")?;
                out.push_str(&self.module()?.deopt_metadata(k)?);
                Ok(())
            }
            ":set" => self.setting(rest, out),
            ":settings" => {
                out.push_str(&self.settings.text(&self.rt));
                Ok(())
            }
            ":heap" => self.heap_view(out),
            ":gc" => {
                let st = self.rt.collect()?;
                let b = offload::diagnostics::bytes_text;
                let _ = writeln!(
                    out,
                    "collected in {}: freed {} of {}; {} in use after ({} and {} in {}, {} padding between pages of different classes), {} moved",
                    offload::diagnostics::duration_text(st.pause()),
                    b(st.freed()),
                    b(st.before),
                    b(st.after),
                    offload::diagnostics::count_text(st.live_objects - st.live_arrays, "object"),
                    offload::diagnostics::count_text(st.live_arrays, "array"),
                    b(st.after.saturating_sub(st.padding + 16)),
                    b(st.padding),
                    b(st.moved)
                );
                Ok(())
            }
            ":quit" | ":q" | ":exit" => Ok(()),
            other => bail!(
                "unknown command `{other}` (`:help` lists the commands; definitions start with class, kernel or func){}",
                did_you_mean(other, help::command_names())
            ),
        }
    }

    fn module(&self) -> Result<&Module> {
        self.module.as_ref().ok_or_else(|| {
            ReplError::Entry("nothing is defined yet: define a kernel or `:load FILE`".into())
        })
    }

    // ---- variables ---------------------------------------------------------

    fn var(&self, name: &str) -> Result<&Var> {
        self.vars.get(name).ok_or_else(|| {
            ReplError::Entry(format!(
                "no variable `{name}`{}",
                if self.vars.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (variables: {})",
                        self.vars.keys().cloned().collect::<Vec<_>>().join(", ")
                    )
                }
            ))
        })
    }

    /// `let NAME = EXPR`.
    fn let_(&mut self, tail: &str, out: &mut String) -> Result<()> {
        let Some((name, expr)) = tail.split_once('=') else {
            bail!("usage: let NAME = EXPR (`:help let`)");
        };
        let name = name.trim();
        if name.is_empty()
            || !name.chars().all(|c| c.is_alphanumeric() || c == '_')
            || name.starts_with(|c: char| c.is_ascii_digit())
        {
            bail!(
                "`{name}` is not a variable name (letters, digits and _, not starting with a digit)"
            );
        }
        let words: Vec<&str> = expr.split_whitespace().collect();
        let Some(&head) = words.first() else {
            bail!("let {name} = what? (`:help let`)");
        };
        let var = if head == "new" {
            self.new_object(&words[1..])?
        } else if head == "reduce" {
            let c = reduce::combine(words.get(1))?;
            let how = reduce::Launch::Reduce(c);
            match self.run(&words[2..], how, None, out)? {
                Some(v) => Var::Scalar(v),
                None => bail!("the reduction gave no value"),
            }
        } else if let Some((elem, len)) = array_head(head) {
            self.new_array(elem, len, &words[1..])?
        } else if words.len() == 1 {
            match self.vars.get(head) {
                Some(v) => v.clone(),
                None => Var::Scalar(self.literal(head, None)?),
            }
        } else {
            bail!("cannot read `{}` (`:help let`)", expr.trim());
        };
        let _ = writeln!(out, "{name}: {}", var.describe());
        self.vars.insert(name.to_string(), var);
        Ok(())
    }

    /// `; did you mean `v`?` for the variable nearest to `word`.
    fn did_you_mean_var(&self, word: &str) -> String {
        did_you_mean(word, self.vars.keys().map(String::as_str))
    }

    /// A literal: `null`, an integer (i32, or with an `i64` suffix), a float
    /// (f64, or with an `f32` suffix); `want` types an unsuffixed one.
    fn literal(&self, s: &str, want: Option<Type>) -> Result<Arg> {
        if s == "null" {
            return Ok(self.rt.null());
        }
        let (body, suffix) = ["i32", "i64", "f32", "f64"]
            .iter()
            .find_map(|suf| s.strip_suffix(suf).map(|b| (b, Some(*suf))))
            .unwrap_or((s, None));
        let is_float =
            body.contains(['.', 'e', 'E']) || body == "inf" || body == "-inf" || body == "nan";
        let ty = match (suffix, want) {
            (Some("i32"), _) => Type::I32,
            (Some("i64"), _) => Type::I64,
            (Some("f32"), _) => Type::F32,
            (Some(_), _) => Type::F64,
            (None, Some(t @ (Type::I32 | Type::I64 | Type::F32 | Type::F64))) => t,
            (None, _) if is_float => Type::F64,
            (None, _) => Type::I32,
        };
        let bad = || {
            ReplError::Entry(format!(
                "`{s}` is not {} literal",
                match ty {
                    Type::I32 => "an i32",
                    Type::I64 => "an i64",
                    Type::F32 => "an f32",
                    _ => "an f64",
                }
            ))
        };
        Ok(match ty {
            Type::I32 => Arg::I32(body.parse().map_err(|_| bad())?),
            Type::I64 => Arg::I64(body.parse().map_err(|_| bad())?),
            Type::F32 => Arg::F32(body.parse().map_err(|_| bad())?),
            _ => Arg::F64(body.parse().map_err(|_| bad())?),
        })
    }

    fn new_object(&mut self, words: &[&str]) -> Result<Var> {
        let Some(&class) = words.first() else {
            bail!("usage: let NAME = new CLASS [FIELD=VALUE ...]");
        };
        let m = self.module()?.clone();
        let o = m.new_object(class)?;
        for w in &words[1..] {
            let Some((f, v)) = w.split_once('=') else {
                bail!("`{w}`: fields are set as FIELD=VALUE");
            };
            self.store_field(&m, &o, f, v)?;
        }
        Ok(Var::Obj(o))
    }

    fn store_field(&self, m: &Module, o: &Object, field: &str, value: &str) -> Result<()> {
        let ty = m
            .fields(o)?
            .into_iter()
            .find(|(n, _, _)| n == field)
            .map(|(_, t, _)| t)
            .ok_or_else(|| {
                ReplError::Entry(format!("class `{}` has no field `{field}`", o.class_name()))
            })?;
        let want = match ty.as_str() {
            "i32" => Some(Type::I32),
            "i64" => Some(Type::I64),
            "f32" => Some(Type::F32),
            "f64" => Some(Type::F64),
            _ => None,
        };
        let arg = match self.vars.get(value) {
            Some(v) => v.arg(),
            None => self.literal(value, want)?,
        };
        m.set_field(o, field, arg)?;
        Ok(())
    }

    fn new_array(&mut self, elem: &str, len: &str, init: &[&str]) -> Result<Var> {
        let len: usize = match self.vars.get(len) {
            Some(Var::Scalar(Arg::I32(n))) if *n >= 0 => *n as usize,
            Some(Var::Scalar(Arg::I64(n))) if *n >= 0 => *n as usize,
            _ => len
                .replace('_', "")
                .parse()
                .map_err(|_| ReplError::Entry(format!("`{len}` is not an array length")))?,
        };
        let rt = self.rt.clone();
        let mode = init.first().copied().unwrap_or("zero");
        macro_rules! num {
            ($t:ty, $v:ident, $from_f:expr, $from_i:expr, $rlo:expr, $rhi:expr) => {{
                // The initializer is read first and the array allocated in
                // the heap before any host buffer, so that a length the
                // heap refuses is an error, not an abort of the session;
                // the values go in a chunk at a time.
                let mut next: Box<dyn FnMut(usize) -> $t> = match mode {
                    "zero" => Box::new(|_| <$t>::default()),
                    "fill" => {
                        let x = init.get(1).ok_or_else(|| {
                            ReplError::Entry("usage: ... fill VALUE".into())
                        })?;
                        let a = self.literal(x, Some(Elem::$v.to_type()))?;
                        let v = num_of::<$t>(a)?;
                        Box::new(move |_| v)
                    }
                    "range" => {
                        let start: f64 = init.get(1).map_or(Ok(0.0), |s| parse_f(s))?;
                        let step: f64 = init.get(2).map_or(Ok(1.0), |s| parse_f(s))?;
                        Box::new(move |i| $from_f(start + step * i as f64))
                    }
                    "random" => {
                        let seed: u64 = init
                            .get(1)
                            .ok_or_else(|| ReplError::Entry("usage: ... random SEED [LO..HI]".into()))?
                            .parse()
                            .map_err(|_| ReplError::Entry("the seed is a non-negative integer".into()))?;
                        let (lo, hi) = match init.get(2) {
                            Some(r) => {
                                let (a, b) = r.split_once("..").ok_or_else(|| {
                                    ReplError::Entry(format!("`{r}` is not a range LO..HI"))
                                })?;
                                (parse_f(a)?, parse_f(b)?)
                            }
                            None => ($rlo, $rhi),
                        };
                        if lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less) {
                            bail!("the random range {lo}..{hi} is empty");
                        }
                        let mut g = rand_xorshift::XorShiftRng::seed_from_u64(seed);
                        Box::new(move |_| $from_i(&mut g, lo, hi))
                    }
                    other => bail!(
                        "unknown initializer `{other}` (zero, fill VALUE, range [START [STEP]], random SEED [LO..HI])"
                    ),
                };
                let a = rt.new_array::<$t>(len)?;
                if mode != "zero" {
                    const CHUNK: usize = 1 << 16;
                    let mut buf = Vec::with_capacity(CHUNK.min(len));
                    for at in (0..len).step_by(CHUNK) {
                        buf.clear();
                        buf.extend((at..(at + CHUNK).min(len)).map(&mut next));
                        rt.write(&a, at, &buf)?;
                    }
                }
                Var::$v(a)
            }};
        }
        let int_rand = |g: &mut rand_xorshift::XorShiftRng, lo: f64, hi: f64| {
            g.random_range(lo as i64..hi as i64)
        };
        let float_rand =
            |g: &mut rand_xorshift::XorShiftRng, lo: f64, hi: f64| g.random_range(lo..hi);
        Ok(match elem {
            "i32" => num!(
                i32,
                I32,
                |x: f64| x as i32,
                |g: &mut _, lo, hi| int_rand(g, lo, hi) as i32,
                0.0,
                100.0
            ),
            "i64" => num!(
                i64,
                I64,
                |x: f64| x as i64,
                |g: &mut _, lo, hi| int_rand(g, lo, hi),
                0.0,
                100.0
            ),
            "f32" => num!(
                f32,
                F32,
                |x: f64| x as f32,
                |g: &mut _, lo, hi| float_rand(g, lo, hi) as f32,
                0.0,
                1.0
            ),
            "f64" => num!(
                f64,
                F64,
                |x: f64| x,
                |g: &mut _, lo, hi| float_rand(g, lo, hi),
                0.0,
                1.0
            ),
            class => {
                let classes = self
                    .module
                    .as_ref()
                    .map(|m| &m.program().verified().classes);
                let names: Vec<&str> = classes
                    .into_iter()
                    .flatten()
                    .map(|c| c.name.as_str())
                    .collect();
                if !names.contains(&class) {
                    bail!(
                        "unknown element type `{class}` (i32, i64, f32, f64, or a class: {}){}",
                        if names.is_empty() {
                            "this session defines none".to_string()
                        } else {
                            names.join(", ")
                        },
                        did_you_mean(
                            class,
                            ["i32", "i64", "f32", "f64"]
                                .into_iter()
                                .chain(names.iter().copied())
                        )
                    );
                }
                let m = self.module()?.clone();
                let a = m.new_ref_array(class, len)?;
                match mode {
                    "zero" | "null" => {}
                    "new" => {
                        let of = init.get(1).copied().unwrap_or(class);
                        for i in 0..len {
                            let o = m.new_object(of)?;
                            m.set_element(&a, i, &o)?;
                        }
                    }
                    other => bail!(
                        "unknown initializer `{other}` for a reference array (null, new [CLASS])"
                    ),
                }
                Var::Refs(a)
            }
        })
    }

    /// `set OBJ.FIELD = VALUE` or `set ARRAY[I] = VALUE`.
    fn set_(&mut self, tail: &str, out: &mut String) -> Result<()> {
        let Some((lhs, value)) = tail.split_once('=') else {
            bail!("usage: set OBJ.FIELD = VALUE | set ARRAY[I] = VALUE");
        };
        let (lhs, value) = (lhs.trim(), value.trim());
        if let Some((obj, field)) = lhs.split_once('.') {
            let Var::Obj(o) = self.var(obj)? else {
                bail!("`{obj}` is not an object");
            };
            let o = o.clone();
            self.store_field(&o.module().clone(), &o, field, value)?;
            let _ = writeln!(out, "{lhs} = {value}");
            return Ok(());
        }
        let (name, idx) = index_of(lhs)?;
        let idx: usize = idx
            .parse()
            .map_err(|_| ReplError::Entry(format!("`{idx}` is not an index")))?;
        let var = self.var(name)?.clone();
        let rt = &self.rt;
        match &var {
            Var::I32(a) => rt.write(a, idx, &[num_of(self.literal(value, Some(Type::I32))?)?])?,
            Var::I64(a) => rt.write(a, idx, &[num_of(self.literal(value, Some(Type::I64))?)?])?,
            Var::F32(a) => rt.write(a, idx, &[num_of(self.literal(value, Some(Type::F32))?)?])?,
            Var::F64(a) => rt.write(a, idx, &[num_of(self.literal(value, Some(Type::F64))?)?])?,
            Var::Refs(a) => {
                let v = match self.vars.get(value) {
                    Some(v) => v.arg(),
                    None => self.literal(value, None)?,
                };
                a.module().set_element(a, idx, v)?;
            }
            _ => bail!("`{name}` is not an array"),
        }
        let _ = writeln!(out, "{lhs} = {value}");
        Ok(())
    }

    fn print(&self, tail: &str, out: &mut String) -> Result<()> {
        if tail.is_empty() {
            bail!("usage: print NAME | NAME[I] | NAME[A..B] | OBJ.FIELD");
        }
        if let Some((obj, field)) = tail.split_once('.')
            && !tail.contains('[')
        {
            let Var::Obj(o) = self.var(obj)? else {
                bail!("`{obj}` is not an object");
            };
            let (_, t, v) = o
                .module()
                .fields(o)?
                .into_iter()
                .find(|(n, _, _)| n == field)
                .ok_or_else(|| {
                    ReplError::Entry(format!("class `{}` has no field `{field}`", o.class_name()))
                })?;
            let _ = writeln!(out, "{tail}: {t} = {v}");
            return Ok(());
        }
        let (name, range) = if tail.contains('[') {
            let (n, r) = index_of(tail)?;
            (n, Some(r))
        } else {
            (tail, None)
        };
        let var = self.var(name)?;
        let len = match var {
            Var::Scalar(a) => {
                let _ = writeln!(out, "{name}: {} = {}", arg_type(a), arg_text(a));
                return Ok(());
            }
            Var::Obj(o) => {
                let _ = writeln!(out, "{name}: {}", o.class_name());
                for (f, t, v) in o.module().fields(o)? {
                    let _ = writeln!(out, "  {f}: {t} = {v}");
                }
                return Ok(());
            }
            Var::I32(a) => a.len(),
            Var::I64(a) => a.len(),
            Var::F32(a) => a.len(),
            Var::F64(a) => a.len(),
            Var::Refs(a) => a.len(),
        };
        let (lo, hi, explicit) = match range {
            None => (0, len.min(16), false),
            Some(r) => {
                let (lo, hi) = match r.split_once("..") {
                    Some((a, b)) => (
                        if a.is_empty() {
                            Ok(0)
                        } else {
                            a.parse::<usize>()
                        },
                        if b.is_empty() {
                            Ok(len)
                        } else {
                            b.parse::<usize>()
                        },
                    ),
                    None => (r.parse::<usize>(), r.parse::<usize>().map(|x| x + 1)),
                };
                let (Ok(lo), Ok(hi)) = (lo, hi) else {
                    bail!("`[{r}]` is not an index or a range A..B");
                };
                if lo > hi {
                    bail!("`[{r}]` is a backwards range: its start {lo} is past its end {hi}");
                }
                if hi > len {
                    bail!("index {r} is out of bounds for `{name}` of length {len}");
                }
                (lo, hi, true)
            }
        };
        let cells: Vec<String> = match var {
            Var::I32(a) => slice(&self.rt, a, lo, hi)?
                .iter()
                .map(i32::to_string)
                .collect(),
            Var::I64(a) => slice(&self.rt, a, lo, hi)?
                .iter()
                .map(i64::to_string)
                .collect(),
            Var::F32(a) => slice(&self.rt, a, lo, hi)?
                .iter()
                .map(|x| format!("{x:?}"))
                .collect(),
            Var::F64(a) => slice(&self.rt, a, lo, hi)?
                .iter()
                .map(|x| format!("{x:?}"))
                .collect(),
            Var::Refs(a) => {
                let m = a.module();
                (lo..hi)
                    .map(|i| {
                        Ok(match m.element(a, i)? {
                            None => "null".to_string(),
                            Some((r, t)) => format!("{t}@{:#x}", r.byte_offset()),
                        })
                    })
                    .collect::<Result<_>>()?
            }
            _ => unreachable!("scalars and objects returned above"),
        };
        let more = if !explicit && hi < len {
            format!(", … ({} more)", len - hi)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "{name}[{lo}..{hi}] of {} = [{}{more}]",
            var.describe(),
            cells.join(", ")
        );
        Ok(())
    }

    fn vars_text(&self, out: &mut String) {
        if self.vars.is_empty() {
            out.push_str("no variables\n");
        }
        for (n, v) in &self.vars {
            let _ = writeln!(out, "{n:<12} {}", v.describe());
        }
    }

    fn with_last(&self, out: &mut String, f: impl FnOnce(&Last, &mut String)) -> Result<()> {
        let last = self
            .last
            .as_ref()
            .ok_or_else(|| ReplError::Entry("no launch yet: `run` a kernel first".into()))?;
        f(last, out);
        Ok(())
    }
}

fn slice<T: offload::Element>(rt: &Runtime, a: &Array<T>, lo: usize, hi: usize) -> Result<Vec<T>> {
    let mut v = vec![T::from_bits(0); hi - lo];
    rt.read_into(a, lo, &mut v)?;
    Ok(v)
}
