//! The `run` subtest: each `; run: f(args) == result` or `; run: f(args)
//! throws Kind` line of a file, on every device.
//!
//! Arguments and results are typed by the function's signature; `nan`
//! matches any NaN, other floats match bit for bit; `null` is the null
//! reference. The interpreter calls the function itself. On the CPU and
//! CUDA devices each function gets a wrapper kernel, appended to the
//! module: `run__f(i: i64, a0: T0, .., out: R[])` calls `f` with its
//! captures (a reference argument, which can only be `null`, is pushed by
//! the wrapper) and stores the result in `out[0]` (a reference result as
//! `ref.eq null`), and one workitem runs it.

use crate::FileTest;
use offload::heap::{AllocPolicy, Allocator, Heap, HeapConfig};
use offload::interp::{Interpreter, Program};
use offload::ir::{ExceptionKind, FuncId, Type, Verified};
use offload::{Arg, Device, OffloadError, Runtime, par_offload};
use std::collections::BTreeSet;
use std::sync::Arc;

/// One run line.
struct RunLine {
    /// `file:line`.
    at: String,
    /// The call as written.
    call: String,
    func: FuncId,
    /// The arguments' slots.
    args: Vec<u64>,
    /// What it must give: a result as written, or an exception kind.
    expect: Option<Result<String, ExceptionKind>>,
}

fn parse_value(t: Type, s: &str) -> Result<u64, String> {
    let s = s.trim();
    let bad = || format!("bad {t:?} literal `{s}`");
    Ok(match t {
        Type::I32 => u64::from(s.parse::<i32>().map_err(|_| bad())? as u32),
        Type::I64 => s.parse::<i64>().map_err(|_| bad())? as u64,
        Type::F32 => u64::from(
            match s {
                "nan" => f32::NAN,
                "inf" => f32::INFINITY,
                "-inf" => f32::NEG_INFINITY,
                _ => s.parse::<f32>().map_err(|_| bad())?,
            }
            .to_bits(),
        ),
        Type::F64 => match s {
            "nan" => f64::NAN,
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            _ => s.parse::<f64>().map_err(|_| bad())?,
        }
        .to_bits(),
        _ if s == "null" => 0,
        _ => return Err(format!("only `null` can be written for {t:?}")),
    })
}

fn matches(t: Type, expected: &str, got: u64) -> bool {
    match (t, expected.trim()) {
        (Type::F32, "nan") => f32::from_bits(got as u32).is_nan(),
        (Type::F64, "nan") => f64::from_bits(got).is_nan(),
        _ => parse_value(t, expected).is_ok_and(|e| e == got),
    }
}

/// What a line expects, as written.
fn expected_text(e: Option<&Result<String, ExceptionKind>>) -> String {
    match e {
        None => "no particular result".into(),
        Some(Ok(v)) => format!("`{v}`"),
        Some(Err(k)) => format!("an exception {}", k.name()),
    }
}

fn show(t: Type, v: u64) -> String {
    match t {
        Type::I32 => (v as u32 as i32).to_string(),
        Type::I64 => (v as i64).to_string(),
        Type::F32 => offload::diagnostics::f32_text(f32::from_bits(v as u32)),
        Type::F64 => offload::diagnostics::f64_text(f64::from_bits(v)),
        _ => format!("ref {v}"),
    }
}

/// The file's run lines, resolved against `v`.
fn run_lines(t: &FileTest, v: &Verified) -> Result<Vec<RunLine>, String> {
    let mut lines = Vec::new();
    for (lineno, line) in t.text.lines().enumerate() {
        let Some(spec) = line.strip_prefix("; run:") else {
            continue;
        };
        let at = format!("{}:{}", t.name, lineno + 1);
        let (call, expect) = match spec.split_once("==") {
            Some((c, e)) => (c, Some(Ok(e.trim().to_string()))),
            None => match spec.split_once("throws") {
                Some((c, k)) => {
                    let kind = ExceptionKind::from_name(k.trim())
                        .ok_or_else(|| format!("{at}: unknown exception `{}`", k.trim()))?;
                    (c, Some(Err(kind)))
                }
                None => (spec, None),
            },
        };
        let call = call.trim();
        let (fname, args) = call
            .split_once('(')
            .ok_or_else(|| format!("{at}: expected `f(args)`"))?;
        let args = args
            .strip_suffix(')')
            .ok_or_else(|| format!("{at}: missing `)`"))?;
        let func = v
            .func_named(fname.trim())
            .ok_or_else(|| format!("{at}: no function `{fname}`"))?;
        let f = v.func(func);
        let arg_strs: Vec<&str> = if args.trim().is_empty() {
            Vec::new()
        } else {
            args.split(',').collect()
        };
        if arg_strs.len() != f.params().len() {
            return Err(format!(
                "{at}: {} arguments for {}",
                arg_strs.len(),
                f.params().len()
            ));
        }
        let args = arg_strs
            .iter()
            .zip(f.param_types())
            .map(|(s, t)| parse_value(t, s).map_err(|e| format!("{at}: {e}")))
            .collect::<Result<_, _>>()?;
        lines.push(RunLine {
            at,
            call: call.to_string(),
            func,
            args,
            expect,
        });
    }
    Ok(lines)
}

/// The interpreter's leg: each line calls its function in one interpreter
/// over a fresh heap, which must still walk afterwards. Returns the lines
/// run.
pub fn interp(t: &FileTest) -> Result<usize, String> {
    let v = Arc::new(offload::ir::load(&t.name, &t.text).map_err(|e| e.to_string())?);
    let prog = Program::new(v.clone(), 0);
    let lines = run_lines(t, &v)?;
    let heap = Heap::new(HeapConfig {
        initial: 1 << 20,
        max: 64 << 20,
        ..HeapConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let alloc = Allocator::new(&heap, AllocPolicy::default(), 1);
    let mut it = Interpreter::new(&prog, &heap, &alloc, 0);
    let mut failures = Vec::new();
    for l in &lines {
        let f = v.func(l.func);
        match (&l.expect, it.call(l.func, &l.args)) {
            (None, Ok(_)) => {}
            (Some(Ok(e)), Ok(Some(got))) => {
                let ty = f.ret.expect("a value was returned");
                if !matches(ty, e, got) {
                    failures.push(format!(
                        "{}: {} returned {} but expected {e}",
                        l.at,
                        l.call,
                        show(ty, got)
                    ));
                }
            }
            (Some(Err(want)), Err(ex)) => {
                if ex.kind != *want {
                    failures.push(format!(
                        "{}: {} threw {ex} but expected {}",
                        l.at,
                        l.call,
                        want.name()
                    ));
                }
                if ex.trace.is_empty() {
                    failures.push(format!("{}: the exception carries no trace", l.at));
                }
            }
            (e, r) => failures.push(format!(
                "{}: {}: expected {}, got {}",
                l.at,
                l.call,
                expected_text(e.as_ref()),
                match r {
                    Ok(v) => format!("{v:?}"),
                    Err(ex) => ex.to_string(),
                }
            )),
        }
    }
    drop(it);
    drop(alloc);
    heap.walk(|_, _| {})
        .map_err(|e| format!("the heap does not walk after the run: {e}"))?;
    if failures.is_empty() {
        Ok(lines.len())
    } else {
        Err(failures.join("\n"))
    }
}

/// The wrapper kernel of function `f` (see the module docs).
fn wrapper(v: &Verified, f: FuncId) -> String {
    let func = v.func(f);
    let m = v.module();
    let mut params = vec!["i: i64".to_string()];
    let mut body = vec!["    load out".to_string(), "    i32.const 0".to_string()];
    for (n, t) in func.param_types().enumerate() {
        if t.is_ref() {
            // Only `null` can be written for a reference.
            body.push("    ref.null".into());
        } else {
            params.push(format!("a{n}: {}", m.type_name(t)));
            body.push(format!("    load a{n}"));
        }
    }
    body.push(format!("    call {}", func.name));
    let out = match func.ret {
        None => {
            // Nothing to store: drop the array and index.
            body.push("    pop".into());
            body.push("    pop".into());
            "i32"
        }
        Some(Type::I32) => {
            body.push("    i32.astore".into());
            "i32"
        }
        Some(Type::I64) => {
            body.push("    i64.astore".into());
            "i64"
        }
        Some(Type::F32) => {
            body.push("    f32.astore".into());
            "f32"
        }
        Some(Type::F64) => {
            body.push("    f64.astore".into());
            "f64"
        }
        Some(_) => {
            body.push("    ref.null".into());
            body.push("    ref.eq".into());
            body.push("    i32.astore".into());
            "i32"
        }
    };
    params.push(format!("out: {out}[]"));
    body.push("    ret".into());
    format!(
        "\nkernel run__{}({}) {{\n{}\n}}\n",
        func.name,
        params.join(", "),
        body.join("\n")
    )
}

/// A compiled device's leg: every line through its function's wrapper
/// kernel on `rt`.
fn device_leg(rt: &Runtime, t: &FileTest) -> Result<usize, String> {
    let v = offload::ir::load(&t.name, &t.text).map_err(|e| e.to_string())?;
    let lines = run_lines(t, &v)?;
    let called: BTreeSet<FuncId> = lines.iter().map(|l| l.func).collect();
    let mut src = t.text.clone();
    for &f in &called {
        src.push_str(&wrapper(&v, f));
    }
    let m = rt.load(&t.name, &src).map_err(|e| e.to_string())?;
    let device = rt.device().name();
    let mut failures = Vec::new();
    for l in &lines {
        let f = v.func(l.func);
        let mut caps: Vec<Arg> = l
            .args
            .iter()
            .zip(f.param_types())
            .filter_map(|(&bits, t)| match t {
                Type::I32 => Some(Arg::I32(bits as u32 as i32)),
                Type::I64 => Some(Arg::I64(bits as i64)),
                Type::F32 => Some(Arg::F32(f32::from_bits(bits as u32))),
                Type::F64 => Some(Arg::F64(f64::from_bits(bits))),
                // The wrapper pushes `null` itself.
                _ => None,
            })
            .collect();
        let (result, read): (Arg, Box<dyn Fn() -> Result<u64, OffloadError> + '_>) = match f.ret {
            Some(Type::I64) => {
                let a = rt.new_array::<i64>(1).map_err(|e| e.to_string())?;
                ((&a).into(), Box::new(move || Ok(rt.read(&a)?[0] as u64)))
            }
            Some(Type::F32) => {
                let a = rt.new_array::<f32>(1).map_err(|e| e.to_string())?;
                (
                    (&a).into(),
                    Box::new(move || Ok(u64::from(rt.read(&a)?[0].to_bits()))),
                )
            }
            Some(Type::F64) => {
                let a = rt.new_array::<f64>(1).map_err(|e| e.to_string())?;
                ((&a).into(), Box::new(move || Ok(rt.read(&a)?[0].to_bits())))
            }
            _ => {
                let a = rt.new_array::<i32>(1).map_err(|e| e.to_string())?;
                (
                    (&a).into(),
                    Box::new(move || Ok(u64::from(rt.read(&a)?[0] as u32))),
                )
            }
        };
        caps.push(result);
        let closure = m
            .closure(&format!("run__{}", f.name), caps)
            .map_err(|e| format!("{}: {e}", l.at))?;
        let r = par_offload(0..1, &closure);
        // The line ran on this device (a kernel it cannot compile — only
        // recursion — runs one device down, and the report says so).
        let report = match &r {
            Ok(rep) => Some(rep),
            Err(OffloadError::Exceptions(e)) => Some(&e.report),
            Err(_) => None,
        };
        if let Some(rep) = report
            && rep.device != rt.device()
            && !rep
                .fallback
                .as_deref()
                .is_some_and(|f| f.contains("recursive"))
        {
            failures.push(format!(
                "{}: {} ran on the {} device, not the {device} device: {}",
                l.at,
                l.call,
                rep.device.name(),
                rep.fallback.as_deref().unwrap_or("no reason given")
            ));
        }
        match (&l.expect, r) {
            (None, Ok(_)) => {}
            (Some(Ok(e)), Ok(_)) => {
                let got = read().map_err(|e| e.to_string())?;
                let ty = f.ret.expect("the function returns a value");
                let ok = match ty {
                    // The wrapper stored `ref.eq null`.
                    Type::I32 | Type::I64 | Type::F32 | Type::F64 => matches(ty, e, got),
                    _ => (e == "null") == (got == 1),
                };
                if !ok {
                    failures.push(format!(
                        "{}: {} on the {device} device returned {} but expected {e}",
                        l.at,
                        l.call,
                        show(ty, got)
                    ));
                }
            }
            (Some(Err(want)), Err(OffloadError::Exceptions(ex))) => {
                if ex.first.kind != *want {
                    failures.push(format!(
                        "{}: {} on the {device} device threw {} but expected {}",
                        l.at,
                        l.call,
                        ex.first,
                        want.name()
                    ));
                }
            }
            (e, r) => failures.push(format!(
                "{}: {} on the {device} device: expected {}, got {}",
                l.at,
                l.call,
                expected_text(e.as_ref()),
                match r {
                    Ok(rep) => format!("a launch of {} workitem(s)", rep.workitems()),
                    Err(e) => e.to_string(),
                }
            )),
        }
    }
    rt.verify_heap(&[&m])
        .map_err(|e| format!("the heap does not verify after the runs: {e}"))?;
    if failures.is_empty() {
        Ok(lines.len())
    } else {
        Err(failures.join("\n"))
    }
}

/// The CPU device's leg, on one runtime for every file.
pub struct CpuLeg {
    rt: Runtime,
    lines: usize,
}

impl CpuLeg {
    pub fn new() -> CpuLeg {
        CpuLeg::on(Device::Cpu, offload::GcPolicy::default())
    }

    /// The leg on `device` with the collector's policy `gc` (under GC
    /// stress, with small TLABs: more refills, more collections).
    pub fn on(device: Device, gc: offload::GcPolicy) -> CpuLeg {
        let mut b = Runtime::builder().device(device).workers(1).gc(gc);
        if gc.stress > 0 {
            b = b.tlab_bytes(256);
        }
        let rt = b.build().expect("a runtime");
        CpuLeg { rt, lines: 0 }
    }

    /// Run the file's lines; an error lists every line that failed.
    pub fn run(&mut self, t: &FileTest) -> Result<(), String> {
        self.lines += device_leg(&self.rt, t)?;
        Ok(())
    }

    /// The lines run so far.
    pub fn lines(&self) -> usize {
        self.lines
    }
}

/// The CUDA device's leg.
pub struct CudaLeg {
    rt: Runtime,
}

impl CudaLeg {
    pub fn new() -> CudaLeg {
        // Not strict: a kernel the PTX backend refuses (recursion) runs one
        // device down, which `device_leg` checks is for that reason only.
        let rt = Runtime::builder()
            .device(Device::Cuda)
            .device_slots(64)
            .build()
            .unwrap_or_else(|e| panic!("the CUDA device: {e}"));
        assert_eq!(rt.device(), Device::Cuda, "{:?}", rt.fallback());
        CudaLeg { rt }
    }

    /// Run the file's lines; returns how many.
    pub fn run(&mut self, t: &FileTest) -> Result<usize, String> {
        device_leg(&self.rt, t)
    }
}
