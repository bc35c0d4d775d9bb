//! Golden PTX file tests: each `tests/ptx/*.obc` starts with
//! `; test ptx kernel=NAME`; the PTX of that kernel (default options,
//! version 1) must equal `tests/ptx/<stem>.ptx`. `OFFLOAD_BLESS=1`
//! rewrites the expected files. Every golden file is also assembled by
//! `ptxas` for sm_70, sm_80 and sm_90, and checked for what the protocol
//! forbids: no `trap` (it poisons the CUDA context), no `.approx` or
//! `.ftz` arithmetic (results must match the host bit for bit).

use offload::jit::CompileOptions;
use offload::jit::{ptx, ptxas};
use offload::{Device, Runtime};
use std::path::Path;

#[test]
fn golden_ptx() {
    let ptxas = ptxas::find().unwrap_or_else(|e| panic!("{e}"));
    let bless = std::env::var_os("OFFLOAD_BLESS").is_some();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ptx");
    let rt = Runtime::builder()
        .device(Device::Interpreter)
        .build()
        .unwrap();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "obc"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 5,
        "golden inputs missing in {}",
        dir.display()
    );
    let mut failures = Vec::new();
    for path in &files {
        let src = std::fs::read_to_string(path).unwrap();
        let header = src.lines().next().unwrap_or_default();
        let kernel = header
            .strip_prefix("; test ptx kernel=")
            .unwrap_or_else(|| {
                panic!(
                    "{}: first line must be `; test ptx kernel=NAME`",
                    path.display()
                )
            })
            .trim();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let m = rt
            .load(&name, &src)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let prog = m.program();
        let f = prog.verified().func_named(kernel).unwrap();
        let k = ptx::compile(prog, f, 1, CompileOptions::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for bad in ["trap", ".approx", ".ftz"] {
            assert!(!k.text.contains(bad), "{name}: PTX contains `{bad}`");
        }
        for arch in ptxas::ARCHES {
            ptxas::assemble(&ptxas, &k.text, arch).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        // The virtual GPU takes every instruction and qualifier of it.
        offload_vgpu::parse(&k.text).unwrap_or_else(|e| panic!("{name}: virtual GPU: {e}"));
        let want_path = path.with_extension("ptx");
        if bless {
            std::fs::write(&want_path, &k.text).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&want_path).unwrap_or_default();
        if want != k.text {
            let line = want
                .lines()
                .zip(k.text.lines())
                .position(|(a, b)| a != b)
                .map_or(want.lines().count().min(k.text.lines().count()), |n| n)
                + 1;
            failures.push(format!(
                "{name}: PTX differs from {} at line {line} (OFFLOAD_BLESS=1 to accept)",
                want_path.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The protocol's landmarks are where the golden files say they are.
#[test]
fn golden_files_show_the_protocol() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ptx");
    let read = |n: &str| std::fs::read_to_string(dir.join(n)).unwrap();
    let polls = read("polls.ptx");
    assert!(
        polls.contains("ld.relaxed.sys.u32"),
        "polls read the mapped control word"
    );
    assert!(polls.contains("(safepoint)"));
    let alloc = read("alloc.ptx");
    for want in [
        "atom.acq_rel.gpu.add.u64",
        "nanosleep",
        "(alloc)",
        "(negsize)",
    ] {
        assert!(alloc.contains(want), "alloc.ptx lacks {want}");
    }
    let deopts = read("deopts.ptx");
    for want in [
        "(null)",
        "(bounds)",
        "(div0)",
        "(cast)",
        "(throw)",
        "fence.acq_rel.gpu",
    ] {
        assert!(deopts.contains(want), "deopts.ptx lacks {want}");
    }
    let virt = read("virtual.ptx");
    // Both implementations inlined behind class-id tests; others deopt.
    assert!(virt.matches("setp.eq.or.u32").count() >= 2 && virt.contains("(throw)"));
    let atomics = read("atomics.ptx");
    for want in [
        "atom.add.u32",
        "atom.cas.b32",
        "atom.add.u64",
        "setp.nan.f32",
        "clz.b64",
    ] {
        assert!(atomics.contains(want), "atomics.ptx lacks {want}");
    }
}
