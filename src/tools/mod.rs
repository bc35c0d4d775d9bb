//! The tooling of the `offload` binary and of the project's tests and
//! benchmarks: the benchmark suite (`offload bench`), the demo, the
//! recompilation-policy experiments, differential testing, native Rust
//! versions of the example kernels, and the CUDA C baselines.
//!
//! **Not public API**: hidden from the docs, free to change in any release.
//! It sits in the library only because the binary, the integration tests
//! and the benchmarks all need it, and uses nothing but the public API.

pub mod bench;
pub mod cuda_c;
pub mod demo;
pub mod differential;
pub mod experiment;
pub mod reference;
