//! The tooling of the `offload` binary and of the project's tests and
//! benchmarks: the benchmark suite (`offload bench`), the demo, the
//! recompilation-policy experiments, differential testing, native Rust
//! versions of the example kernels, and the CUDA C baselines.
//!
//! Used by the binary, by the runtime's integration tests and benchmarks
//! (a dev-dependency of `offload`), and built on the public API only.

pub mod bench;
pub mod bench_bytes;
pub mod bench_compile;
pub mod bench_peers;
pub mod bench_source;
mod bench_stops;
pub mod bench_waits;
pub mod cuda_c;
pub mod demo;
pub mod differential;
pub mod experiment;
pub mod isa;
pub mod reference;
pub mod source_gen;
pub mod vgpu_counters;
