//! Writes the PTX and Cranelift IR of every kernel of the given `.obc`
//! files, under every compile option that changes the lowering, with and
//! without speculations, into a directory — one file per kernel and
//! variant, with its deopt metadata. Two snapshots (before and after a
//! change to the lowering) compared with `diff -r` show exactly what the
//! change did to the code both backends emit.
//!
//! ```text
//! cargo run --release -p offload-jit --example lowering_snapshot -- OUT FILE.obc...
//! ```

use offload_deopt::{Assumption, Speculation};
use offload_ir::{Inst, Opcode, isa::hz};
use offload_jit::{CompileOptions, Injection, SafepointInjection};
use offload_jit::{CpuJit, Speculations, ptx};
use offload_program::Program;
use std::sync::Arc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((out, files)) = args.split_first() else {
        eprintln!("usage: lowering_snapshot OUT FILE.obc...");
        std::process::exit(2);
    };
    std::fs::create_dir_all(out).expect("output directory");
    let jit = CpuJit::new();
    for file in files {
        let src = std::fs::read_to_string(file).expect("readable file");
        // Files that do not verify (the verifier's own tests) have no code.
        let Ok(v) = offload_ir::parser::parse_module(file, &src).and_then(offload_ir::verify)
        else {
            continue;
        };
        let prog = Program::new(Arc::new(v), 0);
        let stem = std::path::Path::new(file)
            .file_stem()
            .expect("a file name")
            .to_string_lossy()
            .to_string();
        let v = prog.verified();
        for (i, f) in v.module().funcs.iter().enumerate() {
            let k = offload_ir::FuncId(i as u32);
            if !prog.is_kernel(k) {
                continue;
            }
            let first_site = (0..f.body.len() as u32).find(|&b| {
                !f.body[b as usize].opcode().hazards().is_empty()
                    && f.body[b as usize].opcode() != Opcode::Call
            });
            let mut variants: Vec<(&str, CompileOptions)> = vec![
                ("default", CompileOptions::default()),
                (
                    "quick",
                    CompileOptions {
                        quick: true,
                        ..Default::default()
                    },
                ),
                (
                    "nopolls",
                    CompileOptions {
                        no_polls: true,
                        ..Default::default()
                    },
                ),
                (
                    "safepoints",
                    CompileOptions {
                        safepoints: Some(SafepointInjection {
                            every: 7,
                            seed: Some(3),
                        }),
                        ..Default::default()
                    },
                ),
                (
                    "periodic",
                    CompileOptions {
                        safepoints: Some(SafepointInjection {
                            every: 5,
                            seed: None,
                        }),
                        ..Default::default()
                    },
                ),
            ];
            if let Some(site_bci) = first_site {
                variants.push((
                    "inject",
                    CompileOptions {
                        inject: Some(Injection {
                            site_bci,
                            modulus: 3,
                            remainder: 1,
                            reason: None,
                        }),
                        ..Default::default()
                    },
                ));
            }
            // Every speculation the kernel's own instructions allow.
            let mut spec = Speculations::none();
            for (bci, inst) in f.body.iter().enumerate() {
                let bci = bci as u32;
                let assumed = match inst {
                    Inst::BrIf { .. } | Inst::BrUnless { .. } | Inst::BrNull { .. } => {
                        Some(Assumption::Branch {
                            taken: bci.is_multiple_of(2),
                        })
                    }
                    _ if inst.opcode().hazards().has(hz::NULL_CHECK)
                        && !matches!(inst, Inst::CallVirt { .. }) =>
                    {
                        Some(Assumption::NonNull)
                    }
                    _ => None,
                };
                if let Some(assumed) = assumed {
                    spec.insert(Speculation {
                        func: k,
                        bci,
                        assumed,
                    });
                }
            }
            for (name, opts) in &variants {
                for (sname, sp) in [("", Speculations::none()), ("-spec", spec.clone())] {
                    let base = format!("{out}/{stem}.{}.{name}{sname}", f.name);
                    let ptx = match ptx::compile_speculative(&prog, k, 1, *opts, &sp) {
                        Ok(p) => format!("{}\n{:#?}\n", p.text, p.meta),
                        Err(e) => format!("error: {e}\n"),
                    };
                    std::fs::write(format!("{base}.ptx"), ptx).expect("writable");
                    let clif = match jit.clif(&prog, k, 1, *opts, &sp) {
                        Ok((text, meta)) => format!("{text}\n{meta:#?}\n"),
                        Err(e) => format!("error: {e}\n"),
                    };
                    std::fs::write(format!("{base}.clif"), clif).expect("writable");
                }
            }
        }
    }
}
