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

/// An error of one entry: what was wrong, rendered for people.
#[derive(Debug)]
pub struct ReplError(pub String);

impl From<OffloadError> for ReplError {
    fn from(e: OffloadError) -> ReplError {
        ReplError(e.to_string())
    }
}

impl From<String> for ReplError {
    fn from(e: String) -> ReplError {
        ReplError(e)
    }
}

macro_rules! bail {
    ($($t:tt)*) => { return Err(ReplError(format!($($t)*))) };
}

type Result<T, E = ReplError> = std::result::Result<T, E>;

/// What shapes the runtime: changing any of them rebuilds it.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub device: Device,
    pub workers: Option<usize>,
    pub policy: String,
    pub speculate: u32,
    pub tlab: Option<u32>,
    /// Safepoint deopts at back-edge polls: every N-th, or randomly 1/N
    /// with a seed.
    pub inject: Option<(u64, Option<u64>)>,
    /// TLAB refills that fail: the first, then every N-th.
    pub fail_refills: Option<(u64, u64)>,
    pub profile: bool,
    pub max_heap: Option<usize>,
    pub deopt_records: Option<usize>,
    /// Every launch's deadline (`None`: none).
    pub deadline: Option<Duration>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            device: Device::Cpu,
            workers: None,
            policy: "never".into(),
            speculate: 0,
            tlab: None,
            inject: None,
            fail_refills: None,
            profile: false,
            max_heap: None,
            deopt_records: None,
            deadline: None,
        }
    }
}

impl Settings {
    fn build(&self) -> Result<Runtime> {
        let mut b = Runtime::builder()
            .device(self.device)
            .policy(&self.policy)
            .speculate(self.speculate)
            .profile(self.profile);
        if let Some(w) = self.workers {
            b = b.workers(w);
        }
        if let Some(t) = self.tlab {
            b = b.tlab_bytes(t);
        }
        if let Some((every, seed)) = self.inject {
            b = b.inject_safepoints(every, seed);
        }
        if let Some((first, every)) = self.fail_refills {
            b = b.fail_refills(first, every);
        }
        if let Some(m) = self.max_heap {
            b = b.initial_heap(m.min(64 << 20)).max_heap(m);
        }
        if let Some(n) = self.deopt_records {
            b = b.deopt_records(n);
        }
        b = b.launch_deadline(self.deadline);
        Ok(b.build()?)
    }

    fn text(&self, rt: &Runtime) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "device      {}{}",
            self.device.name(),
            rt.fallback()
                .map(|f| format!(" (running on {}: {f})", rt.device().name()))
                .unwrap_or_default()
        );
        let _ = writeln!(
            s,
            "workers     {}{}",
            rt.workers(),
            if self.workers.is_none() {
                " (every core)"
            } else {
                ""
            }
        );
        let _ = writeln!(s, "policy      {}", self.policy);
        let _ = writeln!(
            s,
            "speculate   {}",
            if self.speculate == 0 {
                "off".to_string()
            } else {
                format!("after {} warm-up launch(es)", self.speculate)
            }
        );
        let _ = writeln!(
            s,
            "tlab        {}",
            self.tlab
                .map_or("default".to_string(), |t| format!("{t} bytes"))
        );
        let _ = writeln!(
            s,
            "inject      {}",
            match self.inject {
                None => "off".to_string(),
                Some((n, None)) => format!("safepoint deopt at every {n}th back-edge poll"),
                Some((n, Some(seed))) => {
                    format!("safepoint deopt at each back-edge poll with p=1/{n} (seed {seed})")
                }
            }
        );
        let _ = writeln!(
            s,
            "fail-refills {}",
            self.fail_refills
                .map_or("off".to_string(), |(f, e)| format!(
                    "refill {f} fails, then one refill in every {e}"
                ))
        );
        let _ = writeln!(s, "profile     {}", if self.profile { "on" } else { "off" });
        let _ = writeln!(
            s,
            "max-heap    {}",
            self.max_heap
                .map_or("default (4 GiB)".to_string(), |m| format!("{m} bytes"))
        );
        let _ = writeln!(
            s,
            "deopt-records {}",
            self.deopt_records.map_or_else(
                || format!("default ({})", offload::DEFAULT_DEOPT_RECORDS),
                |n| n.to_string()
            )
        );
        let _ = writeln!(
            s,
            "deadline    {}",
            self.deadline.map_or("off".to_string(), |d| format!(
                "{} (a launch still running then is interrupted)",
                offload::diagnostics::duration_text(d)
            ))
        );
        s
    }
}

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
            Var::Scalar(a) => *a,
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
            Var::Scalar(a) => format!("{} = {}", arg_type(*a), arg_text(*a)),
            Var::I32(a) => format!("i32[{}]", a.len()),
            Var::I64(a) => format!("i64[{}]", a.len()),
            Var::F32(a) => format!("f32[{}]", a.len()),
            Var::F64(a) => format!("f64[{}]", a.len()),
            Var::Refs(a) => format!("{}[{}]", a.elem_class(), a.len()),
            Var::Obj(o) => format!("{} object", o.class_name()),
        }
    }
}

fn arg_type(a: Arg) -> &'static str {
    match a {
        Arg::I32(_) => "i32",
        Arg::I64(_) => "i64",
        Arg::F32(_) => "f32",
        Arg::F64(_) => "f64",
        Arg::Ref { .. } => "ref",
    }
}

fn arg_text(a: Arg) -> String {
    match a {
        Arg::I32(x) => x.to_string(),
        Arg::I64(x) => x.to_string(),
        Arg::F32(x) => format!("{x:?}"),
        Arg::F64(x) => format!("{x:?}"),
        Arg::Ref { r, .. } if r.is_null() => "null".into(),
        Arg::Ref { r, .. } => format!("@{:#x}", r.byte_offset()),
    }
}

/// One definition of the session.
#[derive(Clone, Debug)]
struct Def {
    item: Item,
    /// Where it came from: `<input>`, or a file.
    origin: String,
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
        if trimmed.is_empty() || trimmed.starts_with(';') && !entry.contains('\n') {
            return Ok(());
        }
        let first_code = entry
            .lines()
            .find(|l| {
                let t = l.trim();
                !t.is_empty() && !t.starts_with(';')
            })
            .unwrap_or("");
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
                Ok(())
            }
            "let" => self.let_(tail, out),
            "set" => self.set_(tail, out),
            "print" | "p" | ":print" => self.print(tail, out),
            ":vars" => {
                self.vars_text(out);
                Ok(())
            }
            "run" | ":run" => self.run(rest, None, out),
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
            ":heap" => {
                let mods: Vec<&Module> = self.module.iter().collect();
                let w = self.rt.verify_heap(&mods)?;
                let _ = writeln!(out, "heap ok: {w}");
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
            ReplError("nothing is defined yet: define a kernel or `:load FILE`".into())
        })
    }

    // ---- definitions -------------------------------------------------------

    /// Define (or redefine) every item of `text`, which came from `origin`
    /// starting at line `line`.
    fn define(&mut self, text: &str, origin: &str, line: u32, out: &mut String) -> Result<()> {
        // Items are split textually; the whole session's text is then parsed
        // and verified at once (a definition may use any other), and each
        // error is shown in the definition it is in.
        let padded = format!("{}{}", "\n".repeat(line as usize - 1), text);
        let items = input::items(&padded);
        if items.is_empty() {
            bail!("{origin}: no class, kernel or func definition found");
        }
        let mut defs = self.defs.clone();
        // Definitions waiting for a name come along, unless redefined now.
        let mut waiting: Vec<Def> = Vec::new();
        for (d, _) in &self.pending {
            let replaced = items
                .iter()
                .any(|i| i.name == d.item.name && same_namespace(i.kind, d.item.kind));
            if !replaced {
                waiting.push(d.clone());
            }
        }
        let mut said = Vec::new();
        let mut fresh = Vec::new();
        for item in items {
            let old = defs
                .iter()
                .position(|d| d.item.name == item.name && same_namespace(d.item.kind, item.kind));
            let verb = if old.is_some() {
                "redefined"
            } else {
                "defined"
            };
            said.push((verb, item.kind, item.name.clone()));
            fresh.push(item.name.clone());
            let def = Def {
                item,
                origin: origin.to_string(),
            };
            match old {
                Some(i) => defs[i] = def,
                None => defs.push(def),
            }
        }
        let first_new = defs.len();
        defs.extend(waiting);
        // Load; definitions whose only errors are names not defined yet
        // (and that were not loaded before) wait for them, and the rest is
        // loaded again without them, until it loads or fails otherwise.
        let mut pending: Vec<(Def, String)> = Vec::new();
        let module = loop {
            if defs.is_empty() {
                break None;
            }
            match load_defs_diag(&self.rt, &defs) {
                Ok(m) => break Some(m),
                Err(fail) => {
                    let waits: Vec<(usize, String)> = fail.unresolved();
                    let movable = !waits.is_empty()
                        && fail.all_unresolved()
                        && waits
                            .iter()
                            .all(|(i, _)| *i >= first_new || fresh.contains(&defs[*i].item.name));
                    if !movable {
                        bail!("{}", fail.text);
                    }
                    let mut idx: Vec<usize> = waits.iter().map(|(i, _)| *i).collect();
                    idx.sort_unstable();
                    idx.dedup();
                    for &i in idx.iter().rev() {
                        let why: Vec<&str> = waits
                            .iter()
                            .filter(|(j, _)| *j == i)
                            .map(|(_, m)| m.as_str())
                            .collect();
                        pending.push((defs.remove(i), why.join(", ")));
                    }
                }
            }
        };
        // Objects are instances of a module's classes: make the variables'
        // objects again from the new definitions.
        let (vars, lost) = carry_over(&self.rt, &self.vars, &self.rt, module.as_ref())?;
        let was_pending: Vec<String> = self
            .pending
            .iter()
            .map(|(d, _)| d.item.name.clone())
            .collect();
        self.defs = defs;
        self.module = module;
        self.vars = vars;
        for (verb, kind, name) in said {
            match pending.iter().find(|(d, _)| d.item.name == name) {
                Some((_, why)) => {
                    let _ = writeln!(
                        out,
                        "{verb} {kind} {name}, waiting for what it names: {why} (it loads once that is defined)"
                    );
                }
                None => {
                    let _ = writeln!(out, "{verb} {kind} {name}");
                }
            }
        }
        for d in &self.defs {
            if was_pending.contains(&d.item.name) {
                let _ = writeln!(
                    out,
                    "loaded {} {} (what it was waiting for is defined)",
                    d.item.kind, d.item.name
                );
            }
        }
        pending.reverse();
        self.pending = pending;
        lost_note(&lost, out);
        Ok(())
    }

    /// Where line `line` of the session's combined source came from:
    /// `FILE:LINE` of its definition.
    fn origin_of(&self, line: u32) -> Option<String> {
        let mut first = 1u32;
        for d in &self.defs {
            let n = d.item.text.lines().count() as u32;
            if line < first + n {
                return Some(format!("{}:{}", d.origin, d.item.line + (line - first)));
            }
            first += n;
        }
        None
    }

    /// Trace lines name lines of the combined source (`line N)`): name the
    /// definition's file and line instead.
    fn source_lines(&self, text: &str) -> String {
        text.lines()
            .map(|l| {
                let Some(at) = l.rfind(", line ") else {
                    return l.to_string();
                };
                let num = l[at + 7..].trim_end_matches(')');
                match num.parse().ok().and_then(|n| self.origin_of(n)) {
                    Some(o) => format!("{}, {o})", &l[..at]),
                    None => l.to_string(),
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn load(&mut self, path: &str, out: &mut String) -> Result<()> {
        if path.is_empty() {
            bail!("usage: :load FILE.obc");
        }
        let text =
            offload::diagnostics::read_source(std::path::Path::new(path)).map_err(ReplError)?;
        self.define(&text, path, 1, out)
    }

    /// The definitions still waiting for a name, as `kind name (why)`.
    pub fn waiting(&self) -> Vec<String> {
        self.pending
            .iter()
            .map(|(d, why)| format!("{} {} ({why})", d.item.kind, d.item.name))
            .collect()
    }

    fn defs_text(&self, out: &mut String) {
        if self.defs.is_empty() && self.pending.is_empty() {
            out.push_str("nothing defined\n");
            return;
        }
        let mut t = offload::table::new(["kind", "name", "from", "state"]);
        for d in &self.defs {
            t.add_row([
                d.item.kind.to_string(),
                d.item.name.clone(),
                format!("{}:{}", d.origin, d.item.line),
                "loaded".to_string(),
            ]);
        }
        for (d, why) in &self.pending {
            t.add_row([
                d.item.kind.to_string(),
                d.item.name.clone(),
                format!("{}:{}", d.origin, d.item.line),
                format!("waiting for: {why}"),
            ]);
        }
        out.push_str(&offload::table::text(&t));
    }

    // ---- variables ---------------------------------------------------------

    fn var(&self, name: &str) -> Result<&Var> {
        self.vars.get(name).ok_or_else(|| {
            ReplError(format!(
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
            ReplError(format!(
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
                ReplError(format!("class `{}` has no field `{field}`", o.class_name()))
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
                .map_err(|_| ReplError(format!("`{len}` is not an array length")))?,
        };
        let rt = self.rt.clone();
        let mode = init.first().copied().unwrap_or("zero");
        macro_rules! num {
            ($t:ty, $v:ident, $from_f:expr, $from_i:expr, $rlo:expr, $rhi:expr) => {{
                let data: Vec<$t> = match mode {
                    "zero" => vec![<$t>::default(); len],
                    "fill" => {
                        let x = init.get(1).ok_or_else(|| {
                            ReplError("usage: ... fill VALUE".into())
                        })?;
                        let a = self.literal(x, Some(Elem::$v.to_type()))?;
                        vec![num_of::<$t>(a)?; len]
                    }
                    "range" => {
                        let start: f64 = init.get(1).map_or(Ok(0.0), |s| parse_f(s))?;
                        let step: f64 = init.get(2).map_or(Ok(1.0), |s| parse_f(s))?;
                        (0..len).map(|i| $from_f(start + step * i as f64)).collect()
                    }
                    "random" => {
                        let seed: u64 = init
                            .get(1)
                            .ok_or_else(|| ReplError("usage: ... random SEED [LO..HI]".into()))?
                            .parse()
                            .map_err(|_| ReplError("the seed is a non-negative integer".into()))?;
                        let (lo, hi) = match init.get(2) {
                            Some(r) => {
                                let (a, b) = r.split_once("..").ok_or_else(|| {
                                    ReplError(format!("`{r}` is not a range LO..HI"))
                                })?;
                                (parse_f(a)?, parse_f(b)?)
                            }
                            None => ($rlo, $rhi),
                        };
                        if lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less) {
                            bail!("the random range {lo}..{hi} is empty");
                        }
                        let mut g = rand_xorshift::XorShiftRng::seed_from_u64(seed);
                        (0..len).map(|_| $from_i(&mut g, lo, hi)).collect()
                    }
                    other => bail!(
                        "unknown initializer `{other}` (zero, fill VALUE, range [START [STEP]], random SEED [LO..HI])"
                    ),
                };
                Var::$v(rt.array(&data)?)
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
            .map_err(|_| ReplError(format!("`{idx}` is not an index")))?;
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
                    ReplError(format!("class `{}` has no field `{field}`", o.class_name()))
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
                let _ = writeln!(out, "{name}: {} = {}", arg_type(*a), arg_text(*a));
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

    // ---- running -------------------------------------------------------------

    /// `run KERNEL RANGE ARGS...`; with `repeat`, quietly, returning the
    /// report.
    fn run(
        &mut self,
        words: &[&str],
        quiet: Option<&mut Vec<LaunchReport>>,
        out: &mut String,
    ) -> Result<()> {
        let [kernel, range, args @ ..] = words else {
            bail!("usage: run KERNEL START..END ARGS... (`:help run`)");
        };
        if let Some((_, why)) = self
            .pending
            .iter()
            .find(|(d, _)| d.item.kind == "kernel" && d.item.name == *kernel)
        {
            bail!("kernel `{kernel}` is not loaded yet: it waits for what it names ({why})");
        }
        let m = self.module()?.clone();
        let range = parse_range(range, &self.vars)?;
        // Literals take the type of the parameter they are passed to.
        let v = m.program().verified();
        let params: Vec<(String, Type)> = v
            .func_named(kernel)
            .map(|k| {
                v.func(k).params()[1..]
                    .iter()
                    .map(|l| (l.name.clone(), l.ty))
                    .collect()
            })
            .unwrap_or_default();
        let mut captures = Vec::new();
        for (i, a) in args.iter().enumerate() {
            let param = params.get(i);
            let numeric = |t: Type| matches!(t, Type::I32 | Type::I64 | Type::F32 | Type::F64);
            captures.push(match self.vars.get(*a) {
                Some(var) => var.arg(),
                // A reference parameter takes a variable or `null`.
                None if *a != "null" && param.is_some_and(|p| !numeric(p.1)) => {
                    let (name, ty) = param.expect("checked");
                    bail!(
                        "argument {} of `{kernel}`: `{a}` is no variable, and parameter `{name}` is {} {} (pass a variable holding one, or null){}",
                        i + 1,
                        article(&v.type_name(*ty)),
                        v.type_name(*ty),
                        self.did_you_mean_var(a)
                    );
                }
                None => self
                    .literal(a, param.map(|p| p.1))
                    .map_err(|e| {
                        ReplError(format!(
                            "argument {} of `{kernel}`{}: {} (and no variable has that name){}",
                            i + 1,
                            param.map_or(String::new(), |(n, _)| format!(" (`{n}`)")),
                            e.0,
                            self.did_you_mean_var(a)
                        ))
                    })?,
            });
        }
        let closure = m.closure(kernel, captures)?;
        // A safepoint armed with `:safepoint`: requested from another
        // thread after its delay, unless the launch ends first.
        let armed = self.safepoint_after.take();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let rt = self.rt.clone();
        let timer = armed.map(|delay| {
            std::thread::spawn(move || match stop_rx.recv_timeout(delay) {
                Err(mpsc::RecvTimeoutError::Timeout) => Some(rt.safepoint(|heap| heap.used())),
                _ => None,
            })
        });
        let t0 = Instant::now();
        let r = par_offload(range, &closure);
        let wall = t0.elapsed();
        let _ = stop_tx.send(());
        let sp = timer.and_then(|t| t.join().ok().flatten());
        let (report, exceptions, interrupted) = match r {
            Ok(rep) => (rep, None, false),
            Err(OffloadError::Exceptions(e)) => {
                let text = self.source_lines(&e.to_string());
                (e.report, Some(text), false)
            }
            Err(OffloadError::Interrupted(rep)) => (*rep, None, true),
            Err(e) => return Err(e.into()),
        };
        let expected = std::mem::take(&mut self.expect_throws);
        let threw = report.threw;
        let last = Last { report, exceptions };
        if let Some(reps) = quiet {
            reps.push(last.report.clone());
            self.last = Some(last);
            if interrupted {
                bail!("interrupted: the timing stopped");
            }
            return Ok(());
        }
        summary(&last, out);
        if let Some(delay) = armed {
            match sp {
                Some((used, tts)) => {
                    let _ = writeln!(
                        out,
                        "safepoint requested after {}: every worker stopped within {} ({} heap bytes in use), then the launch went on",
                        ms(delay),
                        ms(tts),
                        used
                    );
                }
                None => {
                    let _ = writeln!(
                        out,
                        "safepoint requested after {}: the launch had already finished ({})",
                        ms(delay),
                        ms(wall)
                    );
                }
            }
        }
        self.last = Some(last);
        if expected && threw == 0 && !interrupted {
            bail!("`:expect throws`: no workitem of this run threw");
        }
        if self.script && !expected && threw > 0 {
            bail!(
                "{threw} workitem(s) threw; a script stops at exceptions it did not expect (`:expect throws` before a run allows them)"
            );
        }
        if interrupted {
            let rep = &self.last.as_ref().expect("just set").report;
            bail!(
                "{}: {} of {} workitems completed, {} stopped part-way, {} not started (the heap is consistent; `:deopts` lists the stopped ones)",
                match rep.deadline {
                    Some(d) => format!(
                        "stopped at the deadline ({})",
                        offload::diagnostics::duration_text(d)
                    ),
                    None => "interrupted".to_string(),
                },
                rep.completed,
                rep.range.end - rep.range.start,
                rep.abandoned,
                rep.not_started()
            );
        }
        Ok(())
    }

    /// `:time [N] run ...`.
    fn time(&mut self, words: &[&str], out: &mut String) -> Result<()> {
        let (n, rest) = match words.first().map(|w| w.parse::<usize>()) {
            Some(Ok(n)) => (n, &words[1..]),
            _ => (5, words),
        };
        if n == 0 || rest.first() != Some(&"run") {
            bail!("usage: :time [N] run KERNEL RANGE ARGS...");
        }
        let mut reps = Vec::new();
        for _ in 0..n {
            let mut sink = String::new();
            self.run(&rest[1..], Some(&mut reps), &mut sink)?;
        }
        let mut totals: Vec<Duration> = reps.iter().map(|r| r.timings.total).collect();
        totals.sort();
        let first = reps.first().expect("n >= 1");
        let _ = writeln!(
            out,
            "{} over {}..{} on {}, {n} launches: min {}, median {}, max {} (the first compiled for {})",
            first.kernel,
            first.range.start,
            first.range.end,
            first.device.name(),
            ms(totals[0]),
            ms(totals[n / 2]),
            ms(totals[n - 1]),
            ms(first.timings.compile)
        );
        Ok(())
    }

    fn arm_safepoint(&mut self, words: &[&str], out: &mut String) -> Result<()> {
        let d = one(words, ":safepoint DELAY (like 20ms, 1s; `off` to disarm)")?;
        if d == "off" {
            self.safepoint_after = None;
            out.push_str("safepoint disarmed\n");
            return Ok(());
        }
        let delay = parse_duration(d)?;
        self.safepoint_after = Some(delay);
        let _ = writeln!(
            out,
            "the next launch gets a safepoint request {} after it starts",
            ms(delay)
        );
        Ok(())
    }

    fn with_last(&self, out: &mut String, f: impl FnOnce(&Last, &mut String)) -> Result<()> {
        let last = self
            .last
            .as_ref()
            .ok_or_else(|| ReplError("no launch yet: `run` a kernel first".into()))?;
        f(last, out);
        Ok(())
    }

    fn profile(&self, out: &mut String) -> Result<()> {
        let last = self
            .last
            .as_ref()
            .ok_or_else(|| ReplError("no launch yet: `run` a kernel first".into()))?;
        let Some(p) = &last.report.profile else {
            bail!(
                "the last launch collected no profile: `:set profile on` (launches then run in the interpreter) or `:set speculate N` (warm-up launches profile)"
            );
        };
        let v = self.module()?.program().verified().clone();
        for (fi, fp) in p.funcs.iter().enumerate() {
            let entries = fp.execs.first().copied().unwrap_or(0);
            if entries == 0 {
                continue;
            }
            let f = &v.funcs[fi];
            let _ = writeln!(out, "{}: entered {entries} times", f.name);
            for bci in 0..fp.execs.len() {
                let mut parts = Vec::new();
                let [t, n] = fp.branches[bci];
                if t + n > 0 {
                    parts.push(format!("branch taken {t}, not taken {n}"));
                }
                if !fp.receivers[bci].is_empty() {
                    let rs: Vec<String> = fp.receivers[bci]
                        .iter()
                        .map(|&(c, k)| {
                            let name = v
                                .classes
                                .get(c as usize)
                                .map_or(format!("class {c}"), |c| c.name.clone());
                            format!("{name} {k}")
                        })
                        .collect();
                    parts.push(format!("receivers {}", rs.join(", ")));
                }
                if fp.nulls[bci] > 0 {
                    parts.push(format!("null {}", fp.nulls[bci]));
                }
                if !parts.is_empty() {
                    let _ = writeln!(
                        out,
                        "  @{bci:<4} ran {:<8} {}",
                        fp.execs[bci],
                        parts.join("; ")
                    );
                }
            }
        }
        Ok(())
    }

    /// `:info KERNEL`: versions, speculations, counters and decisions.
    fn info(&self, words: &[&str], out: &mut String) -> Result<()> {
        let k = one(words, ":info KERNEL")?;
        let Some(info) = self.module()?.kernel_info(k)? else {
            let _ = writeln!(out, "{k} has not been launched since it was defined");
            return Ok(());
        };
        let _ = writeln!(
            out,
            "{k}: {} launches, version {} ({} recompiles), next runs on {}",
            info.launches,
            info.version,
            info.recompiles,
            info.device.name()
        );
        for s in &info.speculations {
            let _ = writeln!(out, "  speculates {s}");
        }
        for ((ver, site, reason), n) in &info.deopts {
            let _ = writeln!(
                out,
                "  v{ver} site {} {}: {n} deopts",
                site.0,
                reason.name()
            );
        }
        for l in &info.log {
            let _ = writeln!(out, "  {l}");
        }
        Ok(())
    }

    // ---- settings ------------------------------------------------------------

    fn setting(&mut self, words: &[&str], out: &mut String) -> Result<()> {
        let Some((&key, vals)) = words.split_first() else {
            out.push_str(&self.settings.text(&self.rt));
            return Ok(());
        };
        let mut s = self.settings.clone();
        let val = |what: &str| -> Result<&str> {
            vals.first()
                .copied()
                .ok_or_else(|| ReplError(format!("usage: :set {key} {what}")))
        };
        let num = |what: &str| -> Result<u64> {
            let v = val(what)?;
            v.replace('_', "")
                .parse()
                .map_err(|_| ReplError(format!(":set {key}: `{v}` is not a number")))
        };
        let at_least_one = |what: &str| -> Result<u64> {
            match num(what)? {
                0 => bail!(":set {key}: must be at least 1"),
                n => Ok(n),
            }
        };
        let bytes = || -> Result<u64> {
            let v = val("BYTES")?;
            parse_bytes(v).ok_or_else(|| {
                ReplError(format!(
                    ":set {key}: `{v}` is not a size (bytes, or with a K, M or G suffix: 64M)"
                ))
            })
        };
        match key {
            "device" => s.device = val("cpu|cuda|interp")?.parse::<Device>()?,
            "workers" => s.workers = Some(at_least_one("N")? as usize),
            "policy" => {
                let p = val(&offload::policy::NAMES.join("|"))?;
                if !offload::policy::NAMES.contains(&p) {
                    bail!(
                        "unknown policy `{p}` (policies: {})",
                        offload::policy::NAMES.join(", ")
                    );
                }
                s.policy = p.to_string();
            }
            "speculate" => {
                s.speculate = if val("N|off")? == "off" {
                    0
                } else {
                    num("N")? as u32
                }
            }
            "tlab" => {
                s.tlab = if val("BYTES|default")? == "default" {
                    None
                } else {
                    let n = bytes()?;
                    Some(u32::try_from(n).map_err(|_| {
                        ReplError(format!(
                            ":set tlab: {n} bytes is more than a TLAB can be ({} bytes)",
                            u32::MAX
                        ))
                    })?)
                }
            }
            "inject" => {
                s.inject = match vals {
                    ["off"] => None,
                    ["every", n] => Some((parse_u64(n)?.max(1), None)),
                    ["random", n, "seed", seed] => {
                        Some((parse_u64(n)?.max(1), Some(parse_u64(seed)?)))
                    }
                    _ => bail!("usage: :set inject every N | random N seed S | off"),
                }
            }
            "fail-refills" => {
                s.fail_refills = match vals {
                    ["off"] => None,
                    [first, every] => Some((parse_u64(first)?, parse_u64(every)?.max(1))),
                    _ => bail!("usage: :set fail-refills FIRST EVERY | off"),
                }
            }
            "profile" => {
                s.profile = match val("on|off")? {
                    "on" => true,
                    "off" => false,
                    v => bail!(":set profile: `{v}` is neither on nor off"),
                }
            }
            "max-heap" => s.max_heap = Some(bytes()? as usize),
            "deopt-records" => s.deopt_records = Some(at_least_one("N")? as usize),
            "deadline" => {
                s.deadline = match val("DURATION|off")? {
                    "off" => None,
                    d => match parse_duration(d)? {
                        Duration::ZERO => bail!(":set deadline: must be longer than 0"),
                        d => Some(d),
                    },
                }
            }
            other => bail!(
                "unknown setting `{other}` ({}){}",
                help::SETTINGS.map(|s| s.0).join(", "),
                did_you_mean(other, help::SETTINGS.map(|s| s.0))
            ),
        }
        if s == self.settings {
            out.push_str("unchanged\n");
            return Ok(());
        }
        self.rebuild(s, out)
    }

    /// Move to a runtime built from `s`: definitions are reloaded; arrays
    /// and objects held by variables are copied into the new heap, and
    /// references between them are kept. Kernel state (versions,
    /// profiles, counters) starts afresh.
    fn rebuild(&mut self, s: Settings, out: &mut String) -> Result<()> {
        let rt = s.build()?;
        // A device asked for by `:set device` is the device, or an error
        // that keeps the session where it was.
        if s.device != self.settings.device
            && rt.device() != s.device
            && let Some(why) = rt.fallback()
        {
            bail!(
                ":set device {}: not available ({why}); still on the {} device",
                s.device.name(),
                self.rt.device().name()
            );
        }
        let module = if self.defs.is_empty() {
            None
        } else {
            Some(load_defs(&rt, &self.defs)?)
        };
        let (vars, lost) = carry_over(&self.rt, &self.vars, &rt, module.as_ref())?;
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = rt.clone();
        self.settings = s;
        self.rt = rt;
        self.module = module;
        self.vars = vars;
        self.last = None;
        let _ = writeln!(
            out,
            "runtime rebuilt: device {}{}, {} workers; {} definitions reloaded, {} variables copied",
            self.rt.device().name(),
            self.rt
                .fallback()
                .map(|f| format!(" ({f})"))
                .unwrap_or_default(),
            self.rt.workers(),
            self.defs.len(),
            self.vars.len()
        );
        lost_note(&lost, out);
        Ok(())
    }
}

/// Say which references could not be carried over.
fn lost_note(lost: &[String], out: &mut String) {
    if lost.is_empty() {
        return;
    }
    let shown: Vec<&str> = lost.iter().take(8).map(String::as_str).collect();
    let _ = writeln!(
        out,
        "note: {} value(s) could not be carried over: {}{}",
        lost.len(),
        shown.join(", "),
        if lost.len() > 8 { ", …" } else { "" }
    );
}

/// The variables of `vars` (on `from`) moved to runtime `to` and module
/// `module`: numbers copied (arrays of numbers are shared when the runtime
/// is the same), objects and reference arrays made again from their
/// class's new definition with the fields of the same name and type,
/// references between variables kept. Returns the variables and what
/// could not be carried over (a reference to an object no variable holds,
/// a field or class that is gone).
fn carry_over(
    from: &Runtime,
    vars: &BTreeMap<String, Var>,
    to: &Runtime,
    module: Option<&Module>,
) -> Result<(BTreeMap<String, Var>, Vec<String>)> {
    let same = std::ptr::eq(from, to) || from.heap().base_ptr() == to.heap().base_ptr();
    let mut next = BTreeMap::new();
    let mut moved: Vec<(offload::tlab::Ref, Arg)> = Vec::new();
    let mut lost = Vec::new();
    // Pass 1: make every array and object; copy numbers.
    for (name, v) in vars {
        let nv = match v {
            Var::Scalar(Arg::Ref { r, .. }) if !same && !r.is_null() => {
                lost.push(name.clone());
                continue;
            }
            Var::Scalar(a) => Var::Scalar(*a),
            Var::I32(_) | Var::I64(_) | Var::F32(_) | Var::F64(_) if same => v.clone(),
            Var::I32(a) => Var::I32(to.array(&from.read(a)?)?),
            Var::I64(a) => Var::I64(to.array(&from.read(a)?)?),
            Var::F32(a) => Var::F32(to.array(&from.read(a)?)?),
            Var::F64(a) => Var::F64(to.array(&from.read(a)?)?),
            Var::Refs(a) => match module.map(|m| m.new_ref_array(a.elem_class(), a.len())) {
                Some(Ok(na)) => Var::Refs(na),
                _ => {
                    lost.push(format!("{name} (class `{}` is gone)", a.elem_class()));
                    continue;
                }
            },
            Var::Obj(o) => {
                let Some((no, missing)) = remake(o, module)? else {
                    lost.push(format!("{name} (class `{}` is gone)", o.class_name()));
                    continue;
                };
                lost.extend(missing.iter().map(|f| format!("{name}.{f}")));
                Var::Obj(no)
            }
        };
        if let Arg::Ref { r, .. } = v.arg() {
            moved.push((r, nv.arg()));
        }
        next.insert(name.clone(), nv);
    }
    // Pass 2: references. An object reached from a variable that no
    // variable holds (one a kernel made, an element made by `new`) is
    // copied too, as far as it reaches.
    let mut work: Vec<(Object, Object)> = Vec::new();
    for (name, v) in vars {
        match (v, next.get(name)) {
            (Var::Obj(o), Some(Var::Obj(no))) => work.push((o.clone(), no.clone())),
            (Var::Refs(a), Some(Var::Refs(na))) => {
                let old = a.module();
                for i in 0..a.len() {
                    let r = old.element(a, i)?.map_or(offload::tlab::Ref(0), |(r, _)| r);
                    match reach(r, old, module, to, &mut moved, &mut work)
                        .map(|x| na.module().set_element(na, i, x))
                    {
                        Some(Ok(())) => {}
                        _ => lost.push(format!("{name}[{i}]")),
                    }
                }
            }
            _ => {}
        }
    }
    while let Some((o, no)) = work.pop() {
        let old = o.module().clone();
        for (f, t, _) in old.fields(&o)? {
            if matches!(t.as_str(), "i32" | "i64" | "f32" | "f64") {
                continue;
            }
            let r = old.get_ref_field(&o, &f)?;
            match reach(r, &old, module, to, &mut moved, &mut work)
                .map(|a| no.module().set_field(&no, &f, a))
            {
                Some(Ok(())) => {}
                _ => lost.push(format!("{}.{f}", o.class_name())),
            }
        }
    }
    Ok((next, lost))
}

/// A new instance of `o`'s class in `module`, with `o`'s number fields
/// that the new class has with the same name and type (references are
/// left to the caller); `None` when the class is gone. Also returns the
/// fields the new class lacks.
fn remake(o: &Object, module: Option<&Module>) -> Result<Option<(Object, Vec<String>)>> {
    let Some(no) = module.and_then(|m| m.new_object(o.class_name()).ok()) else {
        return Ok(None);
    };
    let old = o.module();
    let m = no.module().clone();
    let new_fields = m.fields(&no)?;
    let mut missing = Vec::new();
    for (f, t, _) in old.fields(o)? {
        if !new_fields.iter().any(|(nf, nt, _)| *nf == f && *nt == t) {
            missing.push(f);
            continue;
        }
        match t.as_str() {
            "i32" => m.set_field(&no, &f, old.get_field::<i32>(o, &f)?)?,
            "i64" => m.set_field(&no, &f, old.get_field::<i64>(o, &f)?)?,
            "f32" => m.set_field(&no, &f, old.get_field::<f32>(o, &f)?)?,
            "f64" => m.set_field(&no, &f, old.get_field::<f64>(o, &f)?)?,
            _ => {}
        }
    }
    Ok(Some((no, missing)))
}

/// The new value of old reference `r`: null, what it was moved to, or a
/// copy of the object it points at (queued on `work` for its fields);
/// `None` when it cannot be moved (an array no variable holds, a class
/// that is gone).
fn reach(
    r: offload::tlab::Ref,
    old: &Module,
    module: Option<&Module>,
    to: &Runtime,
    moved: &mut Vec<(offload::tlab::Ref, Arg)>,
    work: &mut Vec<(Object, Object)>,
) -> Option<Arg> {
    if r.is_null() {
        return Some(to.null());
    }
    if let Some((_, n)) = moved.iter().find(|(o, _)| *o == r) {
        return Some(*n);
    }
    let o = old.object_at(r).ok()?;
    let (no, _) = remake(&o, module).ok()??;
    let a = Arg::from(&no);
    moved.push((r, a));
    work.push((o, no));
    Some(a)
}

/// Load `defs` as one module; errors point into the definition (and its
/// file and line) they are in.
fn load_defs(rt: &Runtime, defs: &[Def]) -> Result<Module> {
    load_defs_diag(rt, defs).map_err(|f| ReplError(f.text))
}

/// Why a session's definitions did not load: the rendered errors, and for
/// each error the definition it is in and its message.
struct LoadFailure {
    text: String,
    errors: Vec<(usize, String)>,
}

impl LoadFailure {
    /// The errors that name a class, function or type no definition has:
    /// (definition, the message).
    fn unresolved(&self) -> Vec<(usize, String)> {
        self.errors
            .iter()
            .filter(|(_, m)| is_unresolved(m))
            .cloned()
            .collect()
    }

    fn all_unresolved(&self) -> bool {
        self.errors.iter().all(|(_, m)| is_unresolved(m))
    }
}

/// Whether a load error names something not defined (yet).
fn is_unresolved(message: &str) -> bool {
    [
        "unknown class",
        "unknown function",
        "unknown superclass",
        "unknown type",
    ]
    .iter()
    .any(|p| message.starts_with(p))
}

fn load_defs_diag(rt: &Runtime, defs: &[Def]) -> std::result::Result<Module, LoadFailure> {
    let mut src = String::new();
    let mut starts = Vec::new();
    for d in defs {
        starts.push(src.len());
        src.push_str(&d.item.text);
        if !d.item.text.ends_with('\n') {
            src.push('\n');
        }
    }
    match rt.load("<session>", &src) {
        Ok(m) => Ok(m),
        Err(OffloadError::Load { diagnostics, .. }) => {
            let mut text = String::new();
            let mut errors = Vec::new();
            for d in &diagnostics.0 {
                let at = d.span.start as usize;
                let i = starts.partition_point(|&s| s <= at).saturating_sub(1);
                errors.push((i, d.message.clone()));
                let def = &defs[i];
                let pad = "\n".repeat(def.item.line as usize - 1);
                let shift = pad.len() as i64 - starts[i] as i64;
                let mut moved = d.clone();
                moved.file = def.origin.as_str().into();
                moved.span.start = (i64::from(d.span.start) + shift) as u32;
                moved.span.end = (i64::from(d.span.end) + shift) as u32;
                let local = format!("{pad}{}", def.item.text);
                text.push_str(&offload::diagnostics::render(&moved, &local));
            }
            Err(LoadFailure {
                text: strip_error(&text),
                errors,
            })
        }
        Err(e) => Err(LoadFailure {
            text: e.to_string(),
            errors: Vec::new(),
        }),
    }
}

/// Whether two kinds of definition share a namespace (classes apart from
/// functions and kernels).
fn same_namespace(a: &str, b: &str) -> bool {
    (a == "class") == (b == "class")
}

/// Rendered diagnostics start with `error: `, which the REPL adds itself.
fn strip_error(text: &str) -> String {
    let t = text.trim_end();
    t.strip_prefix("error: ").unwrap_or(t).to_string()
}

fn one<'a>(words: &[&'a str], usage: &str) -> Result<&'a str> {
    match words {
        [w] => Ok(w),
        _ => Err(ReplError(format!("usage: {usage}"))),
    }
}

fn parse_u64(s: &str) -> Result<u64> {
    s.replace('_', "")
        .parse()
        .map_err(|_| ReplError(format!("`{s}` is not a non-negative integer")))
}

fn parse_f(s: &str) -> Result<f64> {
    s.parse()
        .map_err(|_| ReplError(format!("`{s}` is not a number")))
}

pub fn parse_duration(s: &str) -> Result<Duration> {
    let (num, unit) = s
        .find(|c: char| c.is_alphabetic())
        .map_or((s, "ms"), |i| s.split_at(i));
    let x: f64 = num
        .parse()
        .map_err(|_| ReplError(format!("`{s}` is not a duration (like 20ms, 1.5s, 300us)")))?;
    let secs = match unit {
        "s" => x,
        "ms" => x / 1e3,
        "us" | "µs" => x / 1e6,
        _ => bail!("`{s}`: the unit is s, ms or us"),
    };
    if !(0.0..=3600.0).contains(&secs) {
        bail!("`{s}` is not a delay between 0 and an hour");
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A code view's name and what to show of it.
fn code_args<'a>(words: &[&'a str], usage: &str) -> Result<(&'a str, Option<&'a str>)> {
    match words {
        [name] => Ok((name, None)),
        [name, view] => Ok((name, Some(view))),
        _ => bail!("usage: {usage}"),
    }
}

/// Lines a code view shows when given no range or filter.
const CODE_VIEW_LINES: usize = 60;

/// Shows `text`: whole when short, else its first [`CODE_VIEW_LINES`] lines
/// and how to see the rest; `A..B` shows lines A to B (1-based, B
/// included; either may be left out), any other word the lines that
/// contain it, numbered.
fn code_view(
    text: &str,
    cmd: &str,
    name: &str,
    view: Option<&str>,
    out: &mut String,
) -> Result<()> {
    let lines: Vec<&str> = text.lines().collect();
    let n = lines.len();
    let numbered = |out: &mut String, i: usize| {
        let _ = writeln!(out, "{:>5}  {}", i + 1, lines[i]);
    };
    match view {
        None if n <= CODE_VIEW_LINES => out.push_str(text),
        None => {
            for l in &lines[..CODE_VIEW_LINES] {
                let _ = writeln!(out, "{l}");
            }
            let _ = writeln!(
                out,
                "... {} more lines (of {n}): `{cmd} {name} {}..` shows them, `{cmd} {name} TEXT` the lines with TEXT",
                n - CODE_VIEW_LINES,
                CODE_VIEW_LINES + 1
            );
        }
        Some(v)
            if v.contains("..")
                && v.split("..")
                    .all(|p| p.is_empty() || p.parse::<usize>().is_ok()) =>
        {
            let (a, b) = v.split_once("..").expect("checked");
            let lo = a.parse::<usize>().unwrap_or(1).max(1);
            let hi = b.parse::<usize>().unwrap_or(n).min(n);
            if lo > hi {
                bail!("{cmd} {name}: lines {v} are not in 1..{n}");
            }
            for i in lo - 1..hi {
                numbered(out, i);
            }
        }
        Some(pat) => {
            let hits: Vec<usize> = (0..n).filter(|&i| lines[i].contains(pat)).collect();
            if hits.is_empty() {
                let _ = writeln!(out, "no line of {cmd} {name} contains `{pat}` ({n} lines)");
            }
            for i in hits {
                numbered(out, i);
            }
        }
    }
    Ok(())
}

/// Bytes, with an optional K, M or G suffix (powers of 1024): `4096`,
/// `64K`, `64M`, `1G`, `1_000`.
fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.replace('_', "");
    let (digits, shift) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 10),
        (i, 'm' | 'M') => (&s[..i], 20),
        (i, 'g' | 'G') => (&s[..i], 30),
        _ => (&s[..], 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// `A..B`, or `N` for `0..N`; either end may be a variable.
fn parse_range(s: &str, vars: &BTreeMap<String, Var>) -> Result<std::ops::Range<i64>> {
    let end = |x: &str| -> Result<i64> {
        match vars.get(x) {
            Some(Var::Scalar(Arg::I32(n))) => Ok(i64::from(*n)),
            Some(Var::Scalar(Arg::I64(n))) => Ok(*n),
            Some(Var::I32(a)) => Ok(a.len() as i64),
            Some(Var::I64(a)) => Ok(a.len() as i64),
            Some(Var::F32(a)) => Ok(a.len() as i64),
            Some(Var::F64(a)) => Ok(a.len() as i64),
            Some(Var::Refs(a)) => Ok(a.len() as i64),
            _ => x
                .replace('_', "")
                .parse()
                .map_err(|_| ReplError(format!("`{x}` is not a range end (a number, or a variable: an integer or an array, meaning its length)"))),
        }
    };
    match s.split_once("..") {
        Some((a, b)) => Ok(end(a)?..end(b)?),
        None => Ok(0..end(s)?),
    }
}

/// `i32[N]`, `Shape[N]`: the element type and the length.
fn array_head(s: &str) -> Option<(&str, &str)> {
    let (elem, rest) = s.split_once('[')?;
    let len = rest.strip_suffix(']')?;
    (!elem.is_empty() && !len.is_empty()).then_some((elem, len))
}

/// `name[inside]`.
fn index_of(s: &str) -> Result<(&str, &str)> {
    let (name, rest) = s
        .split_once('[')
        .ok_or_else(|| ReplError(format!("`{s}` is not NAME[INDEX]")))?;
    let inside = rest
        .strip_suffix(']')
        .ok_or_else(|| ReplError(format!("`{s}`: missing `]`")))?;
    Ok((name.trim(), inside.trim()))
}

trait FromArg: Sized {
    fn from_arg(a: Arg) -> Option<Self>;
}
impl FromArg for i32 {
    fn from_arg(a: Arg) -> Option<Self> {
        if let Arg::I32(x) = a { Some(x) } else { None }
    }
}
impl FromArg for i64 {
    fn from_arg(a: Arg) -> Option<Self> {
        if let Arg::I64(x) = a { Some(x) } else { None }
    }
}
impl FromArg for f32 {
    fn from_arg(a: Arg) -> Option<Self> {
        if let Arg::F32(x) = a { Some(x) } else { None }
    }
}
impl FromArg for f64 {
    fn from_arg(a: Arg) -> Option<Self> {
        if let Arg::F64(x) = a { Some(x) } else { None }
    }
}

fn num_of<T: FromArg>(a: Arg) -> Result<T> {
    T::from_arg(a).ok_or_else(|| {
        ReplError(format!(
            "{} {} does not fit the element type",
            arg_type(a),
            arg_text(a)
        ))
    })
}

fn slice<T: offload::Element>(rt: &Runtime, a: &Array<T>, lo: usize, hi: usize) -> Result<Vec<T>> {
    let mut v = vec![T::from_bits(0); hi - lo];
    rt.read_into(a, lo, &mut v)?;
    Ok(v)
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// The summary of a launch.
fn summary(last: &Last, out: &mut String) {
    let r = &last.report;
    let n = r.range.end - r.range.start;
    let _ = writeln!(
        out,
        "{} over {}..{} on {}{} ({} workers): {} of {} completed in {}",
        r.kernel,
        r.range.start,
        r.range.end,
        r.device.name(),
        r.version.map(|v| format!(" v{v}")).unwrap_or_default(),
        r.workers,
        r.completed,
        n,
        ms(r.timings.total)
    );
    // The range's partition (see `LaunchReport::on_device`).
    let mut parts = vec![
        format!("{} ran on the {} device", r.on_device, r.device.name()),
        format!("{} replayed after a deopt", r.replayed),
    ];
    if r.interrupted {
        parts.push(format!("{} stopped part-way", r.abandoned));
        parts.push(format!("{} not started", r.not_started()));
    }
    let _ = writeln!(out, "  {} · {} threw", parts.join(", "), r.threw);
    let deopts: u64 = r.deopts.values().sum();
    if deopts > 0 || r.never_ran > 0 {
        let mut by_reason: BTreeMap<&str, u64> = BTreeMap::new();
        for ((_, reason), k) in &r.deopts {
            *by_reason.entry(reason.name()).or_default() += k;
        }
        let reasons: Vec<String> = by_reason.iter().map(|(r, k)| format!("{r} {k}")).collect();
        let mut line = format!("  deopts {deopts}");
        if !reasons.is_empty() {
            let _ = write!(line, " ({})", reasons.join(", "));
        }
        if r.never_ran > 0 {
            let _ = write!(
                line,
                " · never-ran {} (left unstarted by a stop, then run)",
                r.never_ran
            );
        }
        let _ = writeln!(out, "{line}");
    }
    if let Some(g) = &r.gpu {
        let _ = writeln!(
            out,
            "  GPU {g} · {:.1} MiB copied between host and device",
            r.copied_bytes as f64 / (1 << 20) as f64
        );
    }
    if let Some(f) = &r.fallback {
        let _ = writeln!(out, "  note: {f}");
    }
    // The policy's decision, unless it kept things as they were.
    if let Some(d) = &r.decision
        && offload::adaptive::decision_name(&d.decided.decision) != "keep"
    {
        let _ = writeln!(out, "  policy: {d}");
    }
    if let Some(e) = &last.exceptions {
        for l in e.lines() {
            let _ = writeln!(out, "  {l}");
        }
    }
}

fn deopt_table(last: &Last, out: &mut String) {
    let r = &last.report;
    let total: u64 = r.deopts.values().sum::<u64>().max(r.abandoned);
    if r.deopt_table.is_empty() {
        let _ = writeln!(
            out,
            "no workitem deoptimized in the last launch of {}",
            r.kernel
        );
        return;
    }
    let _ = writeln!(
        out,
        "{} deoptimized workitem(s) in the last launch of {}{}:",
        total,
        r.kernel,
        if total as usize > r.deopt_table.len() {
            format!(" (the first {} by workitem)", r.deopt_table.len())
        } else {
            String::new()
        }
    );
    out.push_str(&r.deopt_table_text());
}

fn sites(last: &Last, out: &mut String) {
    let r = &last.report;
    if r.deopts.is_empty() {
        let _ = writeln!(out, "no deopts in the last launch of {}", r.kernel);
        return;
    }
    let mut t = offload::table::new(["bci", "reason", "deopts"]);
    for ((bci, reason), n) in &r.deopts {
        t.add_row([bci.to_string(), reason.name().to_string(), n.to_string()]);
    }
    offload::table::right(&mut t, &[0, 2]);
    out.push_str(&offload::table::text(&t));
    if !r.site_deopts.is_empty() {
        let _ = writeln!(
            out,
            "by site of version {}:",
            r.version.map_or("-".to_string(), |v| v.to_string())
        );
        let mut t = offload::table::new(["site", "reason", "deopts"]);
        for ((site, reason), n) in &r.site_deopts {
            t.add_row([site.0.to_string(), reason.name().to_string(), n.to_string()]);
        }
        offload::table::right(&mut t, &[0, 2]);
        out.push_str(&offload::table::text(&t));
    }
}
