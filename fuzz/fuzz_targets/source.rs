//! Arbitrary text to the source front end (parse, lower, verify): never a
//! panic, an abort or a hang, whatever the nesting.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    let _ = offload_lang::compile_verified("<fuzz>", src);
});
