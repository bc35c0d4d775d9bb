//! Generated programs, shared by the tests that run them through the
//! devices and backends (`tests/cpu_differential.rs`, `deopt_frames.rs`,
//! `gpu.rs`, `gpu_split.rs`, `ptx.rs`, `random_programs.rs`).

use offload::ir::Module;
use offload::ir::fuzzgen::{GenConfig, arbitrary_module};
use offload_testkit::reference::Rng;

/// A module generated from the next 4096 bytes of `rng` with the default
/// configuration, or `None` when the generator cannot use them (the caller
/// goes on with the next case; the bytes are consumed either way, so a
/// seed names the same sequence of programs).
#[allow(dead_code)] // not every test that includes this module uses it
pub fn generate(rng: &mut Rng) -> Option<Module> {
    generate_with(rng, &GenConfig::default())
}

/// [`generate`] with the configuration `cfg`.
#[allow(dead_code)] // not every test that includes this module uses it
pub fn generate_with(rng: &mut Rng, cfg: &GenConfig) -> Option<Module> {
    let bytes: Vec<u8> = (0..4096).map(|_| rng.next_u64() as u8).collect();
    arbitrary_module(&mut arbitrary::Unstructured::new(&bytes), cfg).ok()
}
