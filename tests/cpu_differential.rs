//! Random valid kernels (loops, branches, arithmetic of every type, arrays,
//! allocation, calls, virtual calls, exceptions) on the CPU device and on
//! the interpreter, with the same inputs: the same heap contents and the
//! same exceptions (see `offload::differential`; the `jit_differential`
//! cargo-fuzz target runs the same comparison at length).

use offload::differential::Differ;
use offload::ir::fuzzgen::{GenConfig, arbitrary_module};
use offload::ir::print_module;
use offload::reference::Rng;

#[test]
fn random_kernels_agree_between_the_cpu_device_and_the_interpreter() {
    let differ = Differ::new().unwrap();
    let mut rng = Rng::new(77);
    let (mut compared, mut compiled) = (0, 0);
    for case in 0..400 {
        let bytes: Vec<u8> = (0..4096).map(|_| rng.next_u64() as u8).collect();
        let Ok(module) = arbitrary_module(
            &mut arbitrary::Unstructured::new(&bytes),
            &GenConfig::default(),
        ) else {
            continue;
        };
        let text = print_module(&module);
        match differ.compare(&text, rng.next_u64()) {
            Ok(c) => {
                compared += c.kernels;
                compiled += c.compiled;
            }
            Err(why) => panic!("case {case}: {why}"),
        }
    }
    assert!(compared > 300, "only {compared} kernels compared");
    // Every generated kernel compiles (calls are inlined, allocation and
    // type tests are compiled); none may silently fall back.
    assert!(
        compiled * 10 >= compared * 9,
        "only {compiled} of {compared} ran natively"
    );
    eprintln!("{compared} kernels compared, {compiled} compiled by the JIT");
}
