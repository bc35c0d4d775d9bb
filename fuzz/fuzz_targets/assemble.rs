//! Arbitrary text to the assembler, then the verifier and analyses: never a
//! panic; whatever parses must print and parse back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    if let Ok(m) = offload_ir::parse_module("<fuzz>", src) {
        let text = offload_ir::print_module(&m);
        assert_eq!(offload_ir::parse_module("<printed>", &text).expect("printed text parses"), m);
        if let Ok(v) = offload_ir::verify(m) {
            for f in 0..v.funcs.len() {
                let _ = offload_ir::analysis::analyze(&v, offload_ir::FuncId::new(f));
            }
        }
    }
});
