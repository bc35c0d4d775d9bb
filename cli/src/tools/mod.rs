//! The tooling of the `offload` binary: the benchmark suite (`offload
//! bench`), the CUDA C baselines, the instruction-set listing; and, from
//! `offload-testkit` (shared with the runtime's tests and benchmarks), the
//! demo, the recompilation-policy experiments, differential testing,
//! native Rust versions of the example kernels and the workloads both
//! measure. Built on the public API only.

pub mod bench;
pub mod bench_compile;
pub mod bench_counters;
pub mod bench_dispatch;
pub mod bench_load;
pub mod bench_peers;
pub mod bench_reduce;
pub mod bench_source;
pub mod bench_split;
mod bench_stops;
pub mod bench_summed;
pub mod cuda_c;
pub mod cuda_cases;
pub mod experiment_out;
pub mod isa;

pub use offload_testkit::{
    bytes, demo, differential, experiment, kernels, reference, scenes, source_gen, vgpu_counters,
    waits, workloads,
};
