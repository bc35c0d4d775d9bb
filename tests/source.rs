//! The source language end to end: every example's source version
//! (`examples/kernels/*.ofk`) gives the heap and the exceptions its
//! bytecode version (`*.obc`) gives — the bytecode on the interpreter is
//! the reference; the source runs on the interpreter and the CPU device
//! (both tiers) with the same inputs.

use offload::Device;
use offload_testkit::differential::Differ;

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

/// Random source programs (`offload_testkit::source_gen`): the front
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
        let src = offload_testkit::source_gen::program(seed);
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

/// An `i32` index is narrowed once, like hand-written bytecode: the
/// runtime refuses a range that does not fit (the workitems would wrap
/// onto each other's elements). An `i64` index takes any range, and an
/// index past `i32` throws where it is used.
#[test]
fn index_types_and_ranges_beyond_i32() {
    let rt = offload::Runtime::builder()
        .device(Device::Cpu)
        .build()
        .unwrap();
    let narrow = rt
        .load_source(
            "narrow.ofk",
            "#[kernel]\nfn k(i: i32, out: &mut [i32]) {\n    out[i % 4] = i;\n}\n",
        )
        .unwrap();
    let out = rt.new_array::<i32>(4).unwrap();
    let c = narrow.closure("k", [(&out).into()]).unwrap();
    let big = 1i64 << 31;
    let e = offload::par_offload(big - 2..big + 2, &c).unwrap_err();
    assert!(
        matches!(e, offload::OffloadError::IndexRange { start, end, .. } if start == big - 2 && end == big + 2),
        "{e}"
    );
    assert!(e.to_string().contains("does not fit in i32"), "{e}");
    // The same kernel over a range that fits runs.
    offload::par_offload(big - 4..big, &c).unwrap();
    assert_eq!(
        rt.read(&out).unwrap(),
        [i32::MAX - 3, i32::MAX - 2, i32::MAX - 1, i32::MAX]
    );
    // An i64 index: past i32 the access throws, nothing wraps.
    let wide = rt
        .load_source(
            "wide.ofk",
            "#[kernel]\nfn k(i: i64, out: &mut [i64]) {\n    out[i - (1i64 << 40)] = i;\n    out[i] = i;\n}\n",
        )
        .unwrap();
    let out = rt.new_array::<i64>(4).unwrap();
    let c = wide.closure("k", [(&out).into()]).unwrap();
    let base = 1i64 << 40;
    let Err(offload::OffloadError::Exceptions(e)) = offload::par_offload(base..base + 4, &c) else {
        panic!("expected exceptions");
    };
    assert_eq!(e.count, 4);
    assert_eq!(e.first.kind.name(), "IndexOutOfBounds");
    assert_eq!(rt.read(&out).unwrap(), [base, base + 1, base + 2, base + 3]);
}

/// [`every_example_source_agrees_with_its_bytecode_on_every_device`] on
/// the CUDA device (the virtual GPU in CI: `scripts/gpu-tests`).
#[test]
#[ignore = "needs a CUDA driver: scripts/gpu-tests"]
fn on_the_gpu_every_example_source_agrees_with_its_bytecode() {
    let differ = Differ::on(Device::Cuda).unwrap();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/kernels");
    for (file, obc) in examples::examples() {
        let stem = file.trim_end_matches(".obc");
        let ofk = std::fs::read_to_string(format!("{dir}/{stem}.ofk")).unwrap();
        for seed in 0..2u64 {
            let c = differ
                .compare_forms(&obc, &ofk, seed)
                .unwrap_or_else(|why| panic!("{stem}.ofk on the GPU, seed {seed}: {why}"));
            assert!(
                c.kernels > 0 && c.compiled == c.kernels,
                "{stem}.ofk: {} of {} kernels ran as PTX",
                c.compiled,
                c.kernels
            );
        }
    }
    // Random source programs too, fewer than on the CPU (the virtual GPU
    // is slow).
    for seed in 0..20u64 {
        let src = offload_testkit::source_gen::program(seed);
        let v = offload::lang::compile_verified("random.ofk", &src).unwrap();
        differ
            .compare(&offload::ir::print_module(&v), seed)
            .unwrap_or_else(|why| panic!("seed {seed} on the GPU: {why}\n{src}"));
    }
}

/// Source handed to the bytecode loader fails with a hint naming the
/// loader that takes it; bytecode with the same mistake gets no such hint.
#[test]
fn source_given_to_the_bytecode_loader_says_how_to_load_it() {
    let rt = offload::Runtime::builder()
        .device(offload::Device::Cpu)
        .build()
        .unwrap();
    let src = "#[kernel]\nfn k(i: i32, a: &mut [f32]) {\n    a[i] = 1.0;\n}\n";
    let Err(offload::OffloadError::Load { rendered, .. }) = rt.load("k.ofk", src) else {
        panic!("source is not bytecode");
    };
    assert!(rendered.contains("Runtime::load_source"), "{rendered}");
    assert!(rt.load_source("k.ofk", src).is_ok());
    let Err(offload::OffloadError::Load { rendered, .. }) = rt.load("k.obc", "kernel k(\n") else {
        panic!("malformed bytecode");
    };
    assert!(!rendered.contains("load_source"), "{rendered}");
}
