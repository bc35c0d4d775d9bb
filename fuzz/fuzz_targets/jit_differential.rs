//! Random valid kernels from arbitrary bytes, on the CPU JIT and on the
//! interpreter: any difference in heap contents or exceptions is a crash
//! that prints the program (`offload_testkit::differential`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fuzz_target!(|data: &[u8]| {
    static DIFFER: OnceLock<offload_testkit::differential::Differ> = OnceLock::new();
    let differ = DIFFER.get_or_init(|| offload_testkit::differential::Differ::new().expect("runtimes"));
    let mut u = arbitrary::Unstructured::new(data);
    let seed: u64 = u.arbitrary().unwrap_or(0);
    let Ok(module) = offload_ir::fuzzgen::arbitrary_module(&mut u, &Default::default()) else {
        return;
    };
    let text = offload_ir::print_module(&module);
    if let Err(why) = differ.compare(&text, seed) {
        panic!("{why}");
    }
});
