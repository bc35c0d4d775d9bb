//! Random valid modules: they verify and round-trip through the text form.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut u = arbitrary::Unstructured::new(data);
    let Ok(m) = offload_ir::fuzzgen::arbitrary_module(&mut u, &Default::default()) else { return };
    let text = offload_ir::print_module(&m);
    let v = offload_ir::verify(m.clone()).unwrap_or_else(|e| panic!("generated module does not verify: {e}\n{text}"));
    assert_eq!(offload_ir::parse_module("<printed>", &text).expect("printed text parses"), m);
    drop(v);
});
