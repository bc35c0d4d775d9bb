//! Interpreter run tests in the file-test style: each `tests/runtests/*.obc`
//! starts with `; test run` and holds functions plus `; run:` lines:
//!
//! ```text
//! ; run: add(2, 3) == 5
//! ; run: div(1, 0) throws Arithmetic
//! ```
//!
//! Arguments and results are typed by the function's signature; `nan` matches
//! any NaN, other floats match bit for bit; `null` is the null reference. One
//! `#[test]` runs the directory, and another checks that together the files
//! execute every opcode of the ISA.

use offload_host_interp::{Interpreter, Program};
use offload_ir::{ExceptionKind, FuncId, Opcode, Type};
use offload_tlab::{AllocPolicy, Allocator, Heap, HeapConfig};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

fn files() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/runtests");
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "obc"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
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

fn run_file(name: &str, src: &str) -> (usize, Vec<String>) {
    assert!(
        src.starts_with("; test run"),
        "{name}: header must be `; test run`"
    );
    let v = Arc::new(offload_ir::load(name, src).unwrap_or_else(|e| panic!("{e}")));
    let prog = Program::new(v.clone(), 0);
    let heap = Heap::new(HeapConfig {
        initial: 1 << 20,
        max: 64 << 20,
        ..HeapConfig::default()
    })
    .unwrap();
    let alloc = Allocator::new(&heap, AllocPolicy::default(), 1);
    let mut it = Interpreter::new(&prog, &heap, &alloc, 0);
    let mut failures = Vec::new();
    let mut count = 0;
    for (lineno, line) in src.lines().enumerate() {
        let Some(spec) = line.strip_prefix("; run:") else {
            continue;
        };
        count += 1;
        let at = format!("{name}:{}", lineno + 1);
        let (call, expect) = match spec.split_once("==") {
            Some((c, e)) => (c, Some(Ok(e.trim()))),
            None => match spec.split_once("throws") {
                Some((c, k)) => (c, Some(Err(k.trim()))),
                None => (spec, None),
            },
        };
        let call = call.trim();
        let (fname, args) = call
            .split_once('(')
            .unwrap_or_else(|| panic!("{at}: expected `f(args)`"));
        let args = args
            .strip_suffix(')')
            .unwrap_or_else(|| panic!("{at}: missing `)`"));
        let f: FuncId = v
            .func_named(fname.trim())
            .unwrap_or_else(|| panic!("{at}: no function `{fname}`"));
        let func = v.func(f);
        let arg_strs: Vec<&str> = if args.trim().is_empty() {
            Vec::new()
        } else {
            args.split(',').collect()
        };
        assert_eq!(arg_strs.len(), func.params().len(), "{at}: argument count");
        let vals: Vec<u64> = arg_strs
            .iter()
            .zip(func.param_types())
            .map(|(s, t)| parse_value(t, s).unwrap_or_else(|e| panic!("{at}: {e}")))
            .collect();
        let result = it.call(f, &vals);
        match (expect, result) {
            (None, Ok(_)) => {}
            (Some(Ok(e)), Ok(Some(got))) => {
                let t = func.ret.expect("a value was returned");
                if !matches(t, e, got) {
                    failures.push(format!(
                        "{at}: {call} returned {got:#x} ({}) but expected {e}",
                        show(t, got)
                    ));
                }
            }
            (Some(Err(kind)), Err(ex)) => {
                let want = ExceptionKind::from_name(kind)
                    .unwrap_or_else(|| panic!("{at}: unknown exception {kind}"));
                if ex.kind != want {
                    failures.push(format!("{at}: {call} threw {ex} but expected {kind}"));
                }
                assert!(!ex.trace.is_empty(), "{at}: exceptions carry a trace");
            }
            (e, r) => failures.push(format!("{at}: {call}: expected {e:?}, got {r:?}")),
        }
    }
    drop(it);
    drop(alloc);
    heap.walk(|_, _| {})
        .unwrap_or_else(|e| panic!("{name}: heap does not walk after the run: {e}"));
    (count, failures)
}

fn show(t: Type, v: u64) -> String {
    match t {
        Type::I32 => (v as u32 as i32).to_string(),
        Type::I64 => (v as i64).to_string(),
        Type::F32 => format!("{:?}", f32::from_bits(v as u32)),
        Type::F64 => format!("{:?}", f64::from_bits(v)),
        _ => format!("ref {v}"),
    }
}

#[test]
fn runtests() {
    let mut total = 0;
    let mut failures = Vec::new();
    for (name, src) in files() {
        let (n, f) = run_file(&name, &src);
        total += n;
        failures.extend(f);
    }
    assert!(
        failures.is_empty(),
        "{} run test(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(total > 500, "only {total} run lines");
}

#[test]
fn runtests_cover_every_opcode() {
    let mut seen = HashSet::new();
    for (name, src) in files() {
        let m = offload_ir::parse_module(&name, &src).unwrap();
        for f in &m.funcs {
            seen.extend(f.body.iter().map(|i| i.opcode()));
        }
    }
    let missing: Vec<&str> = Opcode::ALL
        .iter()
        .filter(|op| !seen.contains(op))
        .map(|op| op.mnemonic())
        .collect();
    assert!(
        missing.is_empty(),
        "opcodes no run test executes: {missing:?}"
    );
}

#[test]
fn misuse_of_the_entry_points_is_an_error_not_a_panic() {
    let src = "class S {\n    abstract method m() -> i32\n}\n\nfunc f(a: i32) -> i32 {\n    load a\n    ret\n}\n\nkernel k(i: i64) {\n    ret\n}\n";
    let v = Arc::new(offload_ir::load("m.obc", src).unwrap());
    let prog = Program::new(v.clone(), 0);
    let heap = Heap::new(HeapConfig {
        initial: 1 << 20,
        max: 8 << 20,
        ..HeapConfig::default()
    })
    .unwrap();
    let alloc = Allocator::new(&heap, AllocPolicy::default(), 1);
    let mut it = Interpreter::new(&prog, &heap, &alloc, 0);
    let (m, f, k) = (
        v.func_named("S.m").unwrap(),
        v.func_named("f").unwrap(),
        v.func_named("k").unwrap(),
    );
    assert!(it.call(m, &[0]).unwrap_err().message.contains("abstract"));
    assert!(
        it.call(f, &[])
            .unwrap_err()
            .message
            .contains("takes 1 argument(s), 0 given")
    );
    assert!(
        it.call(k, &[0])
            .unwrap_err()
            .message
            .contains("is a kernel")
    );
    assert!(
        it.call(FuncId(99), &[])
            .unwrap_err()
            .message
            .contains("does not exist")
    );
    assert!(
        it.run_kernel(f, 0, &[])
            .unwrap_err()
            .message
            .contains("is not a kernel")
    );
    assert!(
        it.run_kernel(k, 0, &[1])
            .unwrap_err()
            .message
            .contains("takes 1 argument(s), 2 given")
    );
    assert!(
        it.run_to_site(k, 0, &[], 99, 0)
            .unwrap_err()
            .message
            .contains("not a deopt site")
    );
    assert_eq!(it.call(f, &[5]).unwrap(), Some(5));
    assert!(it.run_kernel(k, 3, &[]).is_ok());
}
