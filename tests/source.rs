//! The source language end to end: every example's source version
//! (`examples/kernels/*.ofk`) gives the heap and the exceptions its
//! bytecode version (`*.obc`) gives — the bytecode on the interpreter is
//! the reference; the source runs on the interpreter and the CPU device
//! (both tiers) with the same inputs.

use offload::Device;
use offload_cli::tools::differential::Differ;

#[path = "common/examples.rs"]
mod examples;

#[test]
fn every_example_source_agrees_with_its_bytecode_on_every_device() {
    let differ = Differ::on(Device::Cpu).unwrap();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/kernels");
    let mut checked = 0;
    for (file, obc) in examples::examples() {
        let stem = file.trim_end_matches(".obc");
        let path = format!("{dir}/{stem}.ofk");
        let ofk = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{file} has no source version at {path}: {e}"));
        let mut kernels = 0;
        for seed in 0..6u64 {
            let c = differ
                .compare_forms(&obc, &ofk, seed)
                .unwrap_or_else(|why| panic!("{stem}.ofk against {file}, seed {seed}: {why}"));
            kernels = kernels.max(c.kernels);
        }
        assert!(kernels > 0, "{file}: no kernel was compared");
        checked += 1;
    }
    assert!(checked >= 11, "only {checked} examples");
}

/// Random source programs (`offload_cli::tools::source_gen`): the front
/// end compiles every one, its bytecode verifies, and the interpreter and
/// the CPU device (both tiers) agree on its heap and exceptions.
#[test]
fn random_source_programs_compile_verify_and_agree_on_every_device() {
    let differ = Differ::on(Device::Cpu).unwrap();
    let cases: u64 = std::env::var("OFFLOAD_SOURCE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150);
    let mut kernels = 0;
    for seed in 0..cases {
        let src = offload_cli::tools::source_gen::program(seed);
        let verified = offload::lang::compile_verified("random.ofk", &src).unwrap_or_else(|d| {
            panic!(
                "seed {seed}: the front end rejected a well-typed program:\n{}\n{src}",
                offload::diagnostics::render_all(&d.0, &src)
            )
        });
        let text = offload::ir::print_module(&verified);
        let c = differ
            .compare(&text, seed)
            .unwrap_or_else(|why| panic!("seed {seed}: {why}\nsource:\n{src}"));
        kernels += c.kernels;
    }
    assert_eq!(kernels as u64, cases, "every program's kernel ran");
}
