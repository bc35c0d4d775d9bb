//! The subtests that compare an output with an expectation: `verify`,
//! `print` and `analyze` (expected output embedded in the file), `ptx` and
//! `lower-clif` (expected output beside it).

use crate::{FileTest, bless};
use offload::ir::{FuncId, analysis, parse_module, print_module, verify};
use offload::jit::{CompileOptions, CpuJit, Speculations, ptx, ptxas};
use std::path::Path;

const MARKER: &str = "; ----- expected -----";

fn diagnostics_text(ds: &offload::ir::Diagnostics) -> String {
    ds.0.iter()
        .map(|d| {
            let phase = match d.phase {
                offload::ir::Phase::Parse => "parse",
                offload::ir::Phase::Verify => "verify",
                offload::ir::Phase::Compile => "compile",
            };
            format!(
                "{}:{}: {phase} error: {}\n",
                d.span.line,
                d.span.col,
                d.detail()
            )
        })
        .collect()
}

/// The output of an embedded-expectation subtest on `input`.
fn output(kind: &str, name: &str, input: &str) -> Result<String, String> {
    match kind {
        "verify" => Ok(match parse_module(name, input).and_then(verify) {
            Ok(_) => "ok\n".into(),
            Err(ds) => diagnostics_text(&ds),
        }),
        "print" => {
            let m = parse_module(name, input).map_err(|d| diagnostics_text(&d))?;
            let text = print_module(&m);
            let again = parse_module(name, &text)
                .map_err(|d| format!("printed text does not parse:\n{}", diagnostics_text(&d)))?;
            if again != m {
                return Err("printed text parses to a different module".into());
            }
            Ok(text)
        }
        _ => {
            let v = parse_module(name, input)
                .and_then(verify)
                .map_err(|d| diagnostics_text(&d))?;
            Ok((0..v.funcs.len())
                .map(FuncId::new)
                .filter(|&f| !v.func(f).is_abstract())
                .map(|f| analysis::dump(&v, f))
                .collect())
        }
    }
}

/// `text` as comment lines starting with `marker` (`;` in bytecode,
/// `//` in source), the form expectations are kept in.
pub fn comment(text: &str, marker: &str) -> String {
    text.lines()
        .map(|l| {
            if l.is_empty() {
                format!("{marker}\n")
            } else {
                format!("{marker} {l}\n")
            }
        })
        .collect()
}

/// The text of comment lines made by [`comment`].
pub fn uncomment(text: &str, marker: &str) -> String {
    text.lines()
        .map(|l| {
            format!(
                "{}\n",
                l.strip_prefix(&format!("{marker} "))
                    .unwrap_or(l.strip_prefix(marker).unwrap_or(l))
            )
        })
        .collect()
}

/// `verify`, `print` or `analyze`: the output against the file's expected
/// section. Returns the output.
pub fn embedded(t: &FileTest, kind: &str) -> Result<String, String> {
    let (input, expected) = match t.text.find(MARKER) {
        Some(at) => (
            &t.text[..at],
            uncomment(t.text[at + MARKER.len()..].trim_start_matches('\n'), ";"),
        ),
        None => (t.text.as_str(), String::new()),
    };
    let actual = output(kind, &t.name, input)?;
    if actual != expected {
        if bless() {
            let new = format!("{input}{MARKER}\n{}", comment(&actual, ";"));
            std::fs::write(&t.path, new).map_err(|e| e.to_string())?;
        } else {
            return Err(format!(
                "output differs\n--- expected\n{expected}--- actual\n{actual}"
            ));
        }
    }
    Ok(actual)
}

/// The kernel a `ptx` or `lower-clif` subtest compiles: its program and id.
fn kernel(t: &FileTest) -> Result<(offload::interp::Program, FuncId), String> {
    let k = t
        .option("kernel")
        .ok_or("the header names no `kernel=NAME`")?;
    let v = offload::ir::load(&t.name, &t.text).map_err(|e| e.to_string())?;
    let prog = offload::interp::Program::new(std::sync::Arc::new(v), 0);
    let f = prog
        .verified()
        .func_named(k)
        .ok_or_else(|| format!("no kernel `{k}`"))?;
    Ok((prog, f))
}

/// Compare `actual` with the file beside the test with extension `ext`.
fn beside(t: &FileTest, ext: &str, actual: &str) -> Result<(), String> {
    let want_path = t.path.with_extension(ext);
    if bless() {
        return std::fs::write(&want_path, actual).map_err(|e| e.to_string());
    }
    let want = std::fs::read_to_string(&want_path).unwrap_or_default();
    if want == actual {
        return Ok(());
    }
    let line = want
        .lines()
        .zip(actual.lines())
        .position(|(a, b)| a != b)
        .map_or(want.lines().count().min(actual.lines().count()), |n| n)
        + 1;
    Err(format!(
        "output differs from {} at line {line}",
        want_path.display()
    ))
}

/// `ptx`: the kernel's PTX, assembled for every architecture, parsed by
/// the virtual GPU, free of `trap`, `.approx` and `.ftz`, and equal to the
/// `.ptx` file.
pub fn ptx(t: &FileTest, ptxas_path: &Path) -> Result<(), String> {
    let (prog, f) = kernel(t)?;
    let k = ptx::compile(&prog, f, 1, CompileOptions::default()).map_err(|e| e.to_string())?;
    for bad in ["trap", ".approx", ".ftz"] {
        if k.text.contains(bad) {
            return Err(format!("the PTX contains `{bad}`"));
        }
    }
    for arch in ptxas::ARCHES {
        ptxas::assemble(ptxas_path, &k.text, arch)?;
    }
    offload_vgpu::parse(&k.text).map_err(|e| format!("the virtual GPU: {e}"))?;
    beside(t, "ptx", &k.text)
}

/// `lower-clif`: the Cranelift IR of the kernel's slot loop, equal to the
/// `.clif` file.
pub fn clif(t: &FileTest) -> Result<(), String> {
    let (prog, f) = kernel(t)?;
    let (text, _) = CpuJit::new()
        .clif(
            &prog,
            f,
            1,
            CompileOptions::default(),
            &Speculations::none(),
        )
        .map_err(|e| e.to_string())?;
    beside(t, "clif", &text)
}

/// The golden PTX of the `lower_*` files shows the protocol's landmarks.
pub fn ptx_landmarks() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/files");
    let read = |n: &str| std::fs::read_to_string(dir.join(n)).unwrap();
    let polls = read("lower_polls.ptx");
    assert!(
        polls.contains("ld.relaxed.gpu.u32"),
        "polls read the control word in device memory, strong at GPU scope"
    );
    assert!(
        polls.contains("%pollc"),
        "back-edges count down to their poll in a register"
    );
    assert!(polls.contains("(safepoint)"));
    let alloc = read("lower_alloc.ptx");
    for want in [
        "atom.acq_rel.gpu.add.u64",
        "nanosleep",
        "(alloc)",
        "(negsize)",
    ] {
        assert!(alloc.contains(want), "lower_alloc.ptx lacks {want}");
    }
    let deopts = read("lower_deopts.ptx");
    for want in [
        "(null)",
        "(bounds)",
        "(div0)",
        "(cast)",
        "(throw)",
        "fence.acq_rel.gpu",
    ] {
        assert!(deopts.contains(want), "lower_deopts.ptx lacks {want}");
    }
    let virt = read("lower_virtual.ptx");
    // Both implementations inlined behind class-id tests; others deopt.
    assert!(virt.matches("setp.eq.or.u32").count() >= 2 && virt.contains("(throw)"));
    let atomics = read("lower_atomics.ptx");
    for want in [
        "atom.add.u32",
        "atom.cas.b32",
        "atom.add.u64",
        "setp.nan.f32",
        "clz.b64",
    ] {
        assert!(atomics.contains(want), "lower_atomics.ptx lacks {want}");
    }
}
