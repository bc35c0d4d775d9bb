//! Arbitrary instruction sequences with arbitrary operands to the verifier.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut u = arbitrary::Unstructured::new(data);
    if let Ok(m) = offload_ir::fuzzgen::arbitrary_insts(&mut u) {
        if let Ok(v) = offload_ir::verify(m) {
            for f in 0..v.funcs.len() {
                let _ = offload_ir::analysis::analyze(&v, offload_ir::FuncId::new(f));
            }
        }
    }
});
