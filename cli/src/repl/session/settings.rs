//! The session's settings (`:set`, `:settings`) and moving a session to
//! a runtime built from new ones: definitions reloaded, variables and the
//! objects they reach copied over.

use super::*;

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
    /// Stopped workitems are resumed on the device (`RuntimeBuilder::reentry`).
    pub reentry: bool,
    /// Launches split over every GPU (`Some(false)`) or the CPU and every
    /// GPU (`Some(true)`): `RuntimeBuilder::split_over`.
    pub split: Option<bool>,
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
            reentry: true,
            split: None,
        }
    }
}

impl Settings {
    pub(super) fn build(&self) -> Result<Runtime> {
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
        b = b.launch_deadline(self.deadline).reentry(self.reentry);
        if let Some(cpu) = self.split {
            b = b.split_over(if cpu {
                vec![Device::Cpu, Device::Cuda]
            } else {
                vec![Device::Cuda]
            });
        }
        Ok(b.build()?)
    }

    pub(super) fn text(&self, rt: &Runtime) -> String {
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
            "split       {}",
            match self.split {
                None => "off",
                Some(false) => "every launch over every GPU",
                Some(true) => "every launch over the CPU and every GPU",
            }
        );
        let _ = writeln!(
            s,
            "reentry     {}",
            if self.reentry {
                "on (stopped workitems resume on the device)"
            } else {
                "off (the interpreter finishes every stopped workitem)"
            }
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

impl Session {
    pub(super) fn setting(&mut self, words: &[&str], out: &mut String) -> Result<()> {
        let Some((&key, vals)) = words.split_first() else {
            out.push_str(&self.settings.text(&self.rt));
            return Ok(());
        };
        let mut s = self.settings.clone();
        let val = |what: &str| -> Result<&str> {
            vals.first()
                .copied()
                .ok_or_else(|| ReplError::Entry(format!("usage: :set {key} {what}")))
        };
        let num = |what: &str| -> Result<u64> {
            let v = val(what)?;
            v.replace('_', "")
                .parse()
                .map_err(|_| ReplError::Entry(format!(":set {key}: `{v}` is not a number")))
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
                ReplError::Entry(format!(
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
                        ReplError::Entry(format!(
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
            "profile" | "reentry" => {
                let on = match val("on|off")? {
                    "on" => true,
                    "off" => false,
                    v => bail!(":set {key}: `{v}` is neither on nor off"),
                };
                if key == "profile" {
                    s.profile = on;
                } else {
                    s.reentry = on;
                }
            }
            "split" => {
                s.split = match val("off|gpus|cpu+gpus")? {
                    "off" => None,
                    "gpus" => Some(false),
                    "cpu+gpus" => Some(true),
                    v => bail!(":set split: `{v}` is none of off, gpus, cpu+gpus"),
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
    pub(super) fn rebuild(&mut self, s: Settings, out: &mut String) -> Result<()> {
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
pub(super) fn lost_note(lost: &[String], out: &mut String) {
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
pub(super) fn carry_over(
    from: &Runtime,
    vars: &BTreeMap<String, Var>,
    to: &Runtime,
    module: Option<&Module>,
) -> Result<(BTreeMap<String, Var>, Vec<String>)> {
    let same = std::ptr::eq(from, to) || from.heap().same_as(&to.heap());
    let mut next = BTreeMap::new();
    let mut moved: Vec<(offload::Root, Arg)> = Vec::new();
    let mut lost = Vec::new();
    // Pass 1: make every array and object; copy numbers.
    for (name, v) in vars {
        let nv = match v {
            Var::Scalar(Arg::Ref(r)) if !same && !r.is_null() => {
                lost.push(name.clone());
                continue;
            }
            Var::Scalar(a) => Var::Scalar(a.clone()),
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
        if let Arg::Ref(r) = v.arg() {
            moved.push((r.root().clone(), nv.arg()));
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
                    let r = old.element(a, i)?.map(|(r, _)| r);
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
            match reach(Some(r), &old, module, to, &mut moved, &mut work)
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
pub(super) fn remake(o: &Object, module: Option<&Module>) -> Result<Option<(Object, Vec<String>)>> {
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
pub(super) fn reach(
    r: Option<offload::Root>,
    old: &Module,
    module: Option<&Module>,
    to: &Runtime,
    moved: &mut Vec<(offload::Root, Arg)>,
    work: &mut Vec<(Object, Object)>,
) -> Option<Arg> {
    let Some(r) = r.filter(|r| !r.is_null()) else {
        return Some(to.null());
    };
    if let Some((_, n)) = moved.iter().find(|(o, _)| *o == r) {
        return Some(n.clone());
    }
    let o = old.object_at(&r).ok()?;
    let (no, _) = remake(&o, module).ok()??;
    let a = Arg::from(&no);
    moved.push((r, a.clone()));
    work.push((o, no));
    Some(a)
}
