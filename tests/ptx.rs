//! The PTX backend without a GPU: every PTX kernel the suite can produce —
//! every example kernel, under every compile option the runtime uses, and
//! a batch of generated programs — is assembled by NVIDIA's `ptxas` for
//! sm_70, sm_80 and sm_90, parses on the virtual GPU (which runs them in
//! `scripts/gpu-tests --virtual`), and has exactly the CPU version's deopt
//! metadata (the lowering decisions are shared). A missing `ptxas` fails
//! the run: `scripts/test-all` installs it.

use offload::ir::print_module;
use offload::jit::{CompileOptions, Injection, SafepointInjection};
use offload::jit::{CpuJit, JitError, ptx, ptxas};
use offload::{Device, Runtime};
use offload_testkit::reference::Rng;
use std::path::PathBuf;

#[path = "common/programs.rs"]
mod programs;

#[path = "common/examples.rs"]
mod examples;
use examples::examples;

fn ptxas_path() -> PathBuf {
    ptxas::find().unwrap_or_else(|e| panic!("{e}"))
}

/// Compile every kernel of `text` to PTX and to CPU code with `opts`;
/// check the metadata agree and ptxas accepts the PTX for every arch.
/// Returns (kernels assembled, kernels refused with the reason).
fn check_module(
    rt: &Runtime,
    name: &str,
    text: &str,
    opts: CompileOptions,
    ptxas: &std::path::Path,
    arches: &[&str],
) -> (usize, Vec<String>) {
    let m = rt.load(name, text).unwrap();
    let prog = m.program();
    let jit = CpuJit::new();
    let (mut ok, mut refused) = (0, Vec::new());
    for k in m.kernels() {
        let f = prog.verified().func_named(&k).unwrap();
        let cpu = jit.compile_with(prog, f, 1, opts);
        let gpu = ptx::compile(prog, f, 1, opts);
        match (&cpu, &gpu) {
            (Ok(c), Ok(g)) => {
                assert_eq!(c.meta, g.meta, "{name}: kernel {k}: metadata differ");
                for arch in arches {
                    if let Err(e) = ptxas::assemble(ptxas, &g.text, arch) {
                        panic!("{name}: kernel {k}:\n{e}\n{}", g.text);
                    }
                }
                if let Err(e) = offload_vgpu::parse(&g.text) {
                    panic!("{name}: kernel {k}: the virtual GPU: {e}\n{}", g.text);
                }
                ok += 1;
            }
            (_, Err(e @ JitError::Unsupported { .. })) => refused.push(format!("{name}::{k}: {e}")),
            (Err(e), _) => panic!("{name}: kernel {k}: CPU refused but PTX did not: {e}"),
            (_, Err(e)) => panic!("{name}: kernel {k}: {e}"),
        }
    }
    (ok, refused)
}

#[test]
fn every_example_kernel_assembles_for_sm70_sm80_sm90() {
    let ptxas = ptxas_path();
    let rt = Runtime::builder()
        .device(Device::Interpreter)
        .build()
        .unwrap();
    let (mut ok, mut refused) = (0, Vec::new());
    for (name, text) in examples() {
        let (o, r) = check_module(
            &rt,
            &name,
            &text,
            CompileOptions::default(),
            &ptxas,
            &ptxas::ARCHES,
        );
        ok += o;
        refused.extend(r);
    }
    eprintln!("{ok} kernels assembled");
    // The PTX backend covers everything the CPU device does: nothing refused.
    assert!(refused.is_empty(), "refused: {refused:#?}");
    assert!(ok >= 10, "only {ok} example kernels assembled");
}

#[test]
fn every_compile_option_assembles() {
    let ptxas = ptxas_path();
    let rt = Runtime::builder()
        .device(Device::Interpreter)
        .build()
        .unwrap();
    let options = [
        CompileOptions {
            no_polls: true,
            ..CompileOptions::default()
        },
        CompileOptions {
            safepoints: Some(SafepointInjection {
                every: 7,
                seed: None,
            }),
            ..CompileOptions::default()
        },
        CompileOptions {
            safepoints: Some(SafepointInjection {
                every: 3,
                seed: Some(11),
            }),
            ..CompileOptions::default()
        },
    ];
    let mut ok = 0;
    for (name, text) in examples() {
        for opts in options {
            ok += check_module(&rt, &name, &text, opts, &ptxas, &["sm_70"]).0;
        }
        // A forced deopt at every site of every kernel.
        let m = rt.load(&name, &text).unwrap();
        let prog = m.program();
        for k in m.kernels() {
            let f = prog.verified().func_named(&k).unwrap();
            let Some(a) = prog.analysis(f) else { continue };
            for site in &a.sites {
                let opts = CompileOptions {
                    inject: Some(Injection {
                        site_bci: site.bci,
                        modulus: 3,
                        remainder: 1,
                        reason: None,
                    }),
                    ..CompileOptions::default()
                };
                match ptx::compile(prog, f, 1, opts) {
                    Ok(g) => {
                        let c = CpuJit::new().compile_with(prog, f, 1, opts).unwrap();
                        assert_eq!(c.meta, g.meta);
                        ptxas::assemble(&ptxas, &g.text, "sm_80")
                            .unwrap_or_else(|e| panic!("{name}::{k} at {}: {e}", site.bci));
                        offload_vgpu::parse(&g.text).unwrap_or_else(|e| {
                            panic!("{name}::{k} at {}: the virtual GPU: {e}", site.bci)
                        });
                        ok += 1;
                    }
                    Err(e) => panic!("{name}::{k} at {}: {e}", site.bci),
                }
            }
        }
    }
    assert!(ok > 50, "only {ok} assembled");
}

#[test]
fn generated_programs_assemble_and_share_the_cpu_metadata() {
    let ptxas = ptxas_path();
    let rt = Runtime::builder()
        .device(Device::Interpreter)
        .build()
        .unwrap();
    let mut rng = Rng::new(505);
    // The programs first (the generator's stream), then checked on every
    // core: ptxas takes most of the time (two threads: 174 s -> about
    // half on the 2-core CI machine).
    let cases: Vec<(usize, String)> = (0..120)
        .filter_map(|case| programs::generate(&mut rng).map(|m| (case, print_module(&m))))
        .collect();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    let (ok, refused) = std::thread::scope(|s| {
        let (rt, ptxas, cases) = (&rt, &ptxas, &cases);
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let (mut ok, mut refused) = (0, 0);
                    for (case, text) in cases.iter().skip(t).step_by(threads) {
                        // One arch per program keeps the run short; the
                        // examples cover all three.
                        let arch = ptxas::ARCHES[case % 3];
                        let (o, r) = check_module(
                            rt,
                            &format!("case{case}.obc"),
                            text,
                            CompileOptions::default(),
                            ptxas,
                            &[arch],
                        );
                        ok += o;
                        refused += r.len();
                    }
                    (ok, refused)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .fold((0, 0), |(a, b), (o, r)| (a + o, b + r))
    });
    eprintln!("{ok} generated kernels assembled");
    assert_eq!(
        refused, 0,
        "the PTX backend refused generated kernels the CPU compiled"
    );
    assert!(ok > 150, "only {ok} generated kernels assembled");
}

#[test]
fn the_cuda_c_baselines_assemble_for_sm70_sm80_sm90() {
    // The GPU benchmarks load this NVRTC output through the driver; it is
    // checked in, so the ordinary run makes sure ptxas takes it.
    let ptxas = ptxas_path();
    for arch in ptxas::ARCHES {
        ptxas::assemble(&ptxas, include_str!("../benches/cuda/baselines.ptx"), arch)
            .unwrap_or_else(|e| panic!("benches/cuda/baselines.ptx for {arch}: {e}"));
    }
}

#[test]
fn the_heap_scatter_kernel_assembles_and_parses() {
    // The CUDA device writes filler headers into the heap image with it
    // after each run (`src/cuda/resident.rs`).
    let ptxas = ptxas_path();
    let text = offload_jit::ptx::scatter_kernel();
    for arch in ptxas::ARCHES {
        ptxas::assemble(&ptxas, &text, arch)
            .unwrap_or_else(|e| panic!("the scatter kernel for {arch}: {e}\n{text}"));
    }
    offload_vgpu::parse(&text).unwrap_or_else(|e| panic!("the virtual GPU: {e}\n{text}"));
}

/// A kernel of `captures` `i32` captures that adds them into `out[i]`.
fn many_captures(captures: usize) -> String {
    let params: Vec<String> = (0..captures).map(|c| format!("c{c}: i32")).collect();
    let mut body = String::from("    i32.const 0\n");
    for c in 0..captures {
        body.push_str(&format!("    load c{c}\n    i32.add\n"));
    }
    format!(
        "kernel sum(i: i64, {}, out: i32[]) {{\n    load out\n    load i\n    i64.to_i32\n{body}    i32.astore\n    ret\n}}\n",
        params.join(", ")
    )
}

#[test]
fn captures_travel_as_parameters_up_to_the_gpu_limit_and_past_it_are_refused() {
    // The context and the captures are the kernel's parameters: the most
    // captures that fit assemble; one more is refused with a reason (the
    // launch then runs on the CPU).
    let ptxas = ptxas_path();
    let rt = Runtime::builder()
        .device(Device::Interpreter)
        .build()
        .unwrap();
    let max = offload_abi::gpu::MAX_CAPTURES;
    // `out` is a capture too.
    let (ok, refused) = check_module(
        &rt,
        "fits.obc",
        &many_captures(max - 1),
        CompileOptions::default(),
        &ptxas,
        &["sm_70"],
    );
    assert_eq!((ok, refused.len()), (1, 0), "{refused:?}");
    let m = rt.load("over.obc", &many_captures(max)).unwrap();
    let prog = m.program();
    let f = prog.verified().func_named("sum").unwrap();
    let err = ptx::compile(prog, f, 1, CompileOptions::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "not compiled: `sum` at bci 0: {} captures: a GPU kernel takes at most {max}",
            max + 1
        )
    );
}
