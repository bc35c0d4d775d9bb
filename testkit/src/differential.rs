//! Differential testing of the CPU device against the interpreter, shared by
//! the test suite (`tests/cpu_differential.rs`) and the `jit_differential`
//! cargo-fuzz target: run every kernel of a module on both devices with the
//! same generated inputs, and compare the heaps and the exceptions.

use crate::reference::Rng;
use offload::{Arg, Device, LaunchReport, OffloadError, Runtime, RuntimeBuilder, par_offload};
use offload_ir::{Elem, Kind, Type};

/// Runtimes, one per device (on the CPU, one per compiler tier), each with
/// one worker (generated kernels share their arrays between workitems, so
/// with more workers results would depend on the schedule) and one save
/// record per slot (a deopted workitem is replayed before its slot goes on,
/// so every device runs workitems in order).
#[derive(Debug)]
pub struct Differ {
    cpu: Runtime,
    /// What `cpu` is called in messages.
    label: &'static str,
    /// The CPU's optimized tier (`cpu` runs each kernel once: its quick tier).
    optimized: Option<Runtime>,
    interp: Runtime,
    shape: Shape,
}

/// How big a comparison's launches and arrays are.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Each kernel runs over `0..workitems`.
    pub workitems: i64,
    /// Elements of each array argument of numbers.
    pub elements: usize,
}

impl Default for Shape {
    /// 16 workitems over arrays of 5: generated kernels' constant indices
    /// (0 to 3) and loop counters land in bounds and out.
    fn default() -> Shape {
        Shape {
            workitems: 16,
            elements: 5,
        }
    }
}

/// The runtime comparisons are made against: the interpreter, one worker
/// (workitems in order).
fn interpreter() -> Result<Runtime, OffloadError> {
    Runtime::builder()
        .workers(1)
        .device(Device::Interpreter)
        .build()
}

/// What one comparison found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Compared {
    /// Kernels run on both devices.
    pub kernels: usize,
    /// Of those, kernels the JIT compiled (the rest fell back).
    pub compiled: usize,
    /// Save records the device runtimes resumed themselves
    /// ([`LaunchReport::resumed`], summed).
    pub resumed: u64,
    /// Of the kernels compared, those whose every native launch ran split
    /// over more than one device ([`LaunchReport::split`]).
    pub split: usize,
    /// Of the kernels compared, those whose launch changed an array or an
    /// object's field ([`order_free`]).
    pub wrote: usize,
}

enum Out {
    I32(offload::Array<i32>),
    I64(offload::Array<i64>),
    F32(offload::Array<f32>),
    F64(offload::Array<f64>),
    /// The objects of a reference array argument, whose numeric fields the
    /// kernel may change.
    Objects(offload::Module, Vec<offload::Object>),
}

impl Differ {
    /// Fresh runtimes: the CPU device against the interpreter.
    pub fn new() -> Result<Differ, OffloadError> {
        Differ::on(Device::Cpu)
    }

    /// `device` against the interpreter; a CUDA launch uses one device
    /// slot. An error when `device` is CUDA and no GPU is usable (kernels
    /// the PTX backend refuses still fall back, and count as not compiled).
    pub fn on(device: Device) -> Result<Differ, OffloadError> {
        Differ::with_gc(device, offload::GcPolicy::default())
    }

    /// [`Differ::on`] with the collector's policy `gc` on the device's
    /// runtimes (the interpreter it is compared with keeps the default):
    /// under stress, every launch that allocates collects, and must still
    /// agree with the interpreter.
    pub fn with_gc(device: Device, gc: offload::GcPolicy) -> Result<Differ, OffloadError> {
        Differ::configured(device, &|b| b.gc(gc))
    }

    /// [`Differ::on`] with `configure` applied to the device's runtimes
    /// (fault injection, policies; the interpreter it is compared with
    /// keeps the defaults).
    pub fn configured(
        device: Device,
        configure: &dyn Fn(RuntimeBuilder) -> RuntimeBuilder,
    ) -> Result<Differ, OffloadError> {
        let native = configure(
            Runtime::builder()
                .workers(1)
                .deopt_records(1)
                .device_slots(1)
                .device(device),
        )
        .build()?;
        if native.device() != device {
            return Err(OffloadError::Setup(
                native
                    .fallback()
                    .unwrap_or("not on that device")
                    .to_string(),
            ));
        }
        // On the CPU, a tiered runtime's single launch runs the quick tier;
        // the optimized tier runs on a second runtime that compiles only it.
        let optimized = match device {
            Device::Cpu => Some(
                configure(
                    Runtime::builder()
                        .workers(1)
                        .deopt_records(1)
                        .device(device)
                        .tiered(false),
                )
                .build()?,
            ),
            _ => None,
        };
        Ok(Differ {
            cpu: native,
            label: if optimized.is_some() {
                "cpu (quick tier)"
            } else {
                "device"
            },
            optimized,
            interp: interpreter()?,
            shape: Shape::default(),
        })
    }

    /// The same runtimes on launches and arrays of `shape`.
    pub fn with_shape(mut self, shape: Shape) -> Differ {
        self.shape = shape;
        self
    }

    /// One runtime that splits every launch over `over`
    /// ([`RuntimeBuilder::split_over`], in equal shares when `even`) with
    /// `configure` applied, against the interpreter, on launches and
    /// arrays of `shape`. One worker and one device slot: a generated
    /// kernel whose workitems share elements gives the interpreter's
    /// result only when run in order, which a split does not do — compare
    /// race-free kernels (`GenConfig::splittable` with a window of
    /// `shape.elements / shape.workitems`) or kernels the split refuses
    /// (they run on one device). An error when the runtime cannot have
    /// every device of `over`.
    pub fn split(
        over: &[Device],
        even: bool,
        shape: Shape,
        configure: &dyn Fn(RuntimeBuilder) -> RuntimeBuilder,
    ) -> Result<Differ, OffloadError> {
        let device = if over.contains(&Device::Cuda) {
            Device::Cuda
        } else {
            Device::Cpu
        };
        let native = configure(
            Runtime::builder()
                .workers(1)
                .deopt_records(1)
                .device_slots(1)
                .device(device)
                .strict(true)
                .split_over(over.iter().copied())
                .split_even(even),
        )
        .build()?;
        Ok(Differ {
            cpu: native,
            label: "split",
            optimized: None,
            interp: interpreter()?,
            shape,
        })
    }

    /// Run every kernel of the module `text` over `0..16` on both devices
    /// with inputs drawn from `seed`. `Err` describes the first mismatch
    /// (with the program); kernels whose parameters cannot be generated are
    /// skipped.
    pub fn compare(&self, text: &str, seed: u64) -> Result<Compared, String> {
        let load = |rt: &Runtime| rt.load("case.obc", text).map_err(|e| e.to_string());
        let mi = load(&self.interp)?;
        let natives = self.on_natives(&load)?;
        self.compare_loaded(&mi, &natives, text, seed)
    }

    /// A kernel's two forms, bytecode (`obc`) and source (`ofk`), against
    /// each other: the bytecode on the interpreter is the reference, and
    /// the source runs on the interpreter and on every native device with
    /// the same inputs; heaps and exceptions must agree as in
    /// [`Differ::compare`].
    pub fn compare_forms(&self, obc: &str, ofk: &str, seed: u64) -> Result<Compared, String> {
        let mi = self
            .interp
            .load("case.obc", obc)
            .map_err(|e| e.to_string())?;
        let load = |rt: &Runtime| rt.load_source("case.ofk", ofk).map_err(|e| e.to_string());
        let mut runs = vec![("interpreter (source)", &self.interp, load(&self.interp)?)];
        runs.extend(self.on_natives(&load)?);
        self.compare_loaded(&mi, &runs, ofk, seed)
    }

    /// The module `load` makes on each native runtime, named.
    fn on_natives<'s>(
        &'s self,
        load: &dyn Fn(&Runtime) -> Result<offload::Module, String>,
    ) -> Result<Vec<(&'static str, &'s Runtime, offload::Module)>, String> {
        [
            (self.label, Some(&self.cpu)),
            ("cpu (optimized tier)", self.optimized.as_ref()),
        ]
        .into_iter()
        .filter_map(|(name, rt)| rt.map(|rt| load(rt).map(|m| (name, rt, m))))
        .collect()
    }

    /// Every kernel of `mi` (loaded on the interpreter) against the same
    /// kernel of each module in `natives`; `text` goes into messages.
    fn compare_loaded(
        &self,
        mi: &offload::Module,
        natives: &[(&str, &Runtime, offload::Module)],
        text: &str,
        seed: u64,
    ) -> Result<Compared, String> {
        let mut rng = Rng::new(seed);
        let mut out = Compared::default();
        for k in mi.kernels() {
            let v = mi.program().verified();
            let kid = v.func_named(&k).expect("listed");
            let params: Vec<Type> = v.func(kid).param_types().skip(1).collect();
            let s = rng.next_u64();
            let n = self.shape.elements;
            let Some((ai, oi)) = args_for(&self.interp, mi, &params, s, n) else {
                continue;
            };
            let run = |m: &offload::Module, args| {
                m.closure(&k, args)
                    .map_err(|e| e.to_string())
                    .map(|c| outcome(par_offload(0..self.shape.workitems, &c)))
            };
            let (ri, _) = run(mi, ai)??;
            let hi = read_all(&self.interp, &oi)?;
            let mut all_native = true;
            let mut all_split = true;
            for (name, rt, m) in natives {
                let (ac, oc) = args_for(rt, m, &params, s, n)
                    .ok_or_else(|| format!("kernel {k}: no inputs on the {name}"))?;
                let (rc, rep) = run(m, ac)??;
                all_native &= rep.fallback.is_none();
                all_split &= rep.split.iter().filter(|d| d.workitems > 0).count() > 1;
                out.resumed += rep.resumed;
                if rc != ri {
                    return Err(format!(
                        "kernel {k}: exceptions differ: {name} {rc:?}, interpreter {ri:?}\n{text}"
                    ));
                }
                let hc = read_all(rt, &oc)?;
                if hc != hi {
                    let at = hc.iter().zip(&hi).position(|(a, b)| a != b);
                    let first = match at {
                        Some(w) => format!(
                            "first at word {w} (element {} of an array of {n}): {name} {:#x}, \
                             interpreter {:#x}",
                            w % n.max(1),
                            hc[w],
                            hi[w]
                        ),
                        None => format!(
                            "{name} read {} words, the interpreter {}",
                            hc.len(),
                            hi.len()
                        ),
                    };
                    return Err(format!(
                        "kernel {k}: heaps differ, {first}:\n{name} {hc:?}\ninterpreter {hi:?}\n{text}"
                    ));
                }
            }
            out.kernels += 1;
            out.compiled += usize::from(all_native);
            out.split += usize::from(all_split);
        }
        Ok(out)
    }
}

type Outcome = Option<(u64, Option<i64>, String)>;

/// A launch's exceptions (if any) and its report.
fn outcome(r: Result<LaunchReport, OffloadError>) -> Result<(Outcome, LaunchReport), String> {
    match r {
        Ok(rep) => Ok((None, rep)),
        Err(OffloadError::Exceptions(e)) => Ok((
            Some((e.count, e.first.workitem, e.first.kind.name().to_string())),
            e.report,
        )),
        Err(e) => Err(format!("launch failed: {e}")),
    }
}

/// Arguments drawn from `seed` for parameters `params`, arrays of numbers
/// `n` long, and the arrays and objects to read back.
fn args_for(
    rt: &Runtime,
    m: &offload::Module,
    params: &[Type],
    seed: u64,
    n: usize,
) -> Option<(Vec<Arg>, Vec<Out>)> {
    let mut rng = Rng::new(seed);
    let mut args = Vec::new();
    let mut outs = Vec::new();
    for &t in params {
        args.push(match t {
            Type::I32 => Arg::I32(rng.below(7) as i32 - 2),
            Type::I64 => Arg::I64(rng.below(7) as i64 - 2),
            Type::F32 => Arg::F32(rng.f32_in(-4.0, 4.0)),
            Type::F64 => Arg::F64(f64::from(rng.f32_in(-4.0, 4.0))),
            Type::Array(Elem::I32, 1) => {
                let a = rt
                    .array(&(0..n).map(|_| rng.below(9) as i32 - 3).collect::<Vec<_>>())
                    .ok()?;
                let arg = (&a).into();
                outs.push(Out::I32(a));
                arg
            }
            Type::Array(Elem::I64, 1) => {
                let a = rt
                    .array(&(0..n).map(|_| rng.below(9) as i64 - 3).collect::<Vec<_>>())
                    .ok()?;
                let arg = (&a).into();
                outs.push(Out::I64(a));
                arg
            }
            Type::Array(Elem::F32, 1) => {
                let a = rt
                    .array(&(0..n).map(|_| rng.f32_in(-2.0, 2.0)).collect::<Vec<_>>())
                    .ok()?;
                let arg = (&a).into();
                outs.push(Out::F32(a));
                arg
            }
            Type::Array(Elem::F64, 1) => {
                let a = rt
                    .array(
                        &(0..n)
                            .map(|_| f64::from(rng.f32_in(-2.0, 2.0)))
                            .collect::<Vec<_>>(),
                    )
                    .ok()?;
                let arg = (&a).into();
                outs.push(Out::F64(a));
                arg
            }
            Type::Class(c) => {
                let name = m.program().verified().class(c).name.clone();
                (&m.new_object(&name).ok()?).into()
            }
            Type::Array(Elem::Class(c), 1) => {
                let (a, objs) = objects_for(m, c, &mut rng)?;
                let arg = (&a).into();
                outs.push(Out::Objects(m.clone(), objs));
                arg
            }
            _ => return None,
        });
    }
    Some((args, outs))
}

/// A raw value slot of kind `kind` with every NaN made the same NaN: NaN
/// payloads may differ between the host's float unit and libm, and every
/// NaN is the same value to the bytecode.
pub fn canonical_bits(kind: Kind, raw: u64) -> u64 {
    match kind {
        Kind::F32 if f32::from_bits(raw as u32).is_nan() => u64::from(f32::NAN.to_bits()),
        Kind::F64 if f64::from_bits(raw).is_nan() => f64::NAN.to_bits(),
        _ => raw,
    }
}
fn canon32(x: f32) -> u64 {
    canonical_bits(Kind::F32, u64::from(x.to_bits()))
}
fn canon64(x: f64) -> u64 {
    canonical_bits(Kind::F64, x.to_bits())
}

/// What one order of [`order_free`] left: whether the launch changed its
/// arrays, their words, and the workitems that threw (their count last).
type OrderRun = (bool, Vec<u64>, Vec<i64>);

/// Whether the workitems of every kernel of the module `text` are free of
/// one another: each kernel runs on `rt` (the interpreter, one worker)
/// twice with the inputs [`Differ::compare`] draws from `seed` for arrays
/// of `shape.elements` — once over `0..shape.workitems`, once one workitem
/// per launch in reverse order — and must leave the same arrays and
/// objects and throw in the same workitems. `Err` names the first kernel
/// whose workitems read or write what others write: a race, whose result a
/// launch split over devices (or run on many workers) may change. A check,
/// not a proof: a race may give the same result in both orders.
pub fn order_free(rt: &Runtime, text: &str, seed: u64, shape: Shape) -> Result<Compared, String> {
    let m = rt.load("case.obc", text).map_err(|e| e.to_string())?;
    let mut rng = Rng::new(seed);
    let mut out = Compared::default();
    for k in m.kernels() {
        let v = m.program().verified();
        let kid = v.func_named(&k).expect("listed");
        let params: Vec<Type> = v.func(kid).param_types().skip(1).collect();
        let s = rng.next_u64();
        let run = |order: &[i64]| -> Result<Option<OrderRun>, String> {
            let Some((args, outs)) = args_for(rt, &m, &params, s, shape.elements) else {
                return Ok(None);
            };
            let before = read_all(rt, &outs)?;
            let c = m.closure(&k, args).map_err(|e| e.to_string())?;
            // How many threw, and the first of them (as many as a
            // launch's exceptions list).
            let (mut count, mut threw) = (0, Vec::new());
            for &i in order {
                match par_offload(i..order.get(1).map_or(shape.workitems, |_| i + 1), &c) {
                    Ok(_) => {}
                    Err(OffloadError::Exceptions(e)) => {
                        count += e.count;
                        threw.extend(e.workitems.iter().copied());
                    }
                    Err(e) => return Err(format!("kernel {k}: launch failed: {e}")),
                }
            }
            threw.sort_unstable();
            threw.truncate(offload::KernelExceptions::LISTED);
            threw.push(count as i64);
            let after = read_all(rt, &outs)?;
            Ok(Some((after != before, after, threw)))
        };
        let Some((wrote, whole, threw)) = run(&[0])? else {
            continue;
        };
        let reversed: Vec<i64> = (0..shape.workitems).rev().collect();
        let (_, each, threw_each) = run(&reversed)?.ok_or("inputs not made twice")?;
        if whole != each {
            let at = whole.iter().zip(&each).position(|(a, b)| a != b);
            return Err(format!(
                "kernel {k}: its workitems share what they write — one by one in \
                 reverse order, word {at:?} of its arrays ends differently\n{text}"
            ));
        }
        if threw != threw_each {
            return Err(format!(
                "kernel {k}: its workitems share what they write — the workitems \
                 that threw (and their count, last) {threw:?} in order, \
                 {threw_each:?} one by one in reverse\n{text}"
            ));
        }
        out.kernels += 1;
        out.wrote += usize::from(wrote);
    }
    Ok(out)
}

/// The arguments [`Differ::compare`] draws from `seed` for a kernel with
/// these parameter types (after the workitem index) — the same on every
/// runtime, objects included — or `None` if some type cannot be generated.
pub fn inputs(rt: &Runtime, m: &offload::Module, params: &[Type], seed: u64) -> Option<Vec<Arg>> {
    args_for(rt, m, params, seed, Shape::default().elements).map(|(args, _)| args)
}

/// A reference array of 6 elements for class `c`: instances of random
/// classes that are `c` or extend it and can be made (no abstract
/// method), their numeric fields random, or null (one in six).
fn objects_for(
    m: &offload::Module,
    c: offload_ir::ClassId,
    rng: &mut Rng,
) -> Option<(offload::RefArray, Vec<offload::Object>)> {
    let v = m.program().verified();
    let made: Vec<String> = (0..v.classes.len())
        .map(offload_ir::ClassId::new)
        .filter(|&k| v.is_subclass(k, c))
        .filter(|&k| v.vtable(k).iter().all(|&f| !v.func(f).is_abstract()))
        .map(|k| v.class(k).name.clone())
        .collect();
    if made.is_empty() {
        return None;
    }
    let a = m.new_ref_array(&v.class(c).name, 6).ok()?;
    let mut objs = Vec::new();
    for i in 0..6 {
        if rng.below(6) == 0 {
            continue;
        }
        let o = m
            .new_object(&made[rng.below(made.len() as u64) as usize])
            .ok()?;
        for (name, ty, _) in m.fields(&o).ok()? {
            let r = match ty.as_str() {
                "i32" => m.set_field(&o, &name, rng.below(9) as i32 - 3),
                "i64" => m.set_field(&o, &name, rng.below(9) as i64 - 3),
                "f32" => m.set_field(&o, &name, rng.f32_in(-3.0, 3.0)),
                "f64" => m.set_field(&o, &name, f64::from(rng.f32_in(-3.0, 3.0))),
                _ => Ok(()),
            };
            r.ok()?;
        }
        m.set_element(&a, i, &o).ok()?;
        objs.push(o);
    }
    Some((a, objs))
}

/// The numeric fields of `o` as words (references are left out).
fn field_words(m: &offload::Module, o: &offload::Object, v: &mut Vec<u64>) -> Result<(), String> {
    for (name, ty, _) in m.fields(o).map_err(|e| e.to_string())? {
        let e = |e: OffloadError| e.to_string();
        match ty.as_str() {
            "i32" => v.push(u64::from(m.get_field::<i32>(o, &name).map_err(e)? as u32)),
            "i64" => v.push(m.get_field::<i64>(o, &name).map_err(e)? as u64),
            "f32" => v.push(canon32(m.get_field::<f32>(o, &name).map_err(e)?)),
            "f64" => v.push(canon64(m.get_field::<f64>(o, &name).map_err(e)?)),
            _ => {}
        }
    }
    Ok(())
}

fn read_all(rt: &Runtime, outs: &[Out]) -> Result<Vec<u64>, String> {
    let mut v = Vec::new();
    let e = |e: OffloadError| e.to_string();
    for o in outs {
        match o {
            Out::I32(a) => v.extend(
                rt.read(a)
                    .map_err(e)?
                    .into_iter()
                    .map(|x| u64::from(x as u32)),
            ),
            Out::I64(a) => v.extend(rt.read(a).map_err(e)?.into_iter().map(|x| x as u64)),
            Out::F32(a) => v.extend(rt.read(a).map_err(e)?.into_iter().map(canon32)),
            Out::F64(a) => v.extend(rt.read(a).map_err(e)?.into_iter().map(canon64)),
            Out::Objects(m, objs) => {
                for o in objs {
                    field_words(m, o, &mut v)?;
                }
            }
        }
    }
    Ok(v)
}
