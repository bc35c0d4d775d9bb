//! `offload-testkit`: what offload's tests, benchmarks and tools share,
//! built on the public API only — the runtime's integration tests and
//! criterion benchmarks use it as a dev-dependency, and the `offload`
//! command (`offload-cli`) for its demo, benchmarks and experiments.
//!
//! - [`kernels`]: every example kernel, read from `examples/kernels/`,
//!   and small probes of the runtime's guarantees;
//! - [`reference`](mod@reference): native Rust versions of the example kernels (the
//!   oracles every device's results are checked against);
//! - [`differential`] and [`source_gen`]: random valid programs run on
//!   every device against the interpreter;
//! - [`scenes`]: the virtual-dispatch workloads' inputs and native
//!   references (trait objects);
//! - [`demo`]: every example through the public API, each checked against
//!   its native version (`offload demo`);
//! - [`experiment`]: the recompilation-policy workloads (`offload
//!   experiment`);
//! - [`workloads`], [`bytes`], [`waits`], [`vgpu_counters`] (the
//!   runtime's [`offload::vgpu`]): launches and measurements the
//!   benchmarks and the tests of their properties share.
//!
//! ```
//! use offload::{Device, Runtime, par_offload};
//! use offload_testkit::kernels::{INC_KERNEL, example};
//!
//! let rt = Runtime::builder().device(Device::Interpreter).build()?;
//! let m = rt.load("inc.obc", INC_KERNEL)?;
//! let out = rt.new_array::<i32>(4)?;
//! par_offload(0..4, &m.closure("inc", [(&out).into()])?)?;
//! assert_eq!(rt.read(&out)?, [1, 1, 1, 1]);
//! assert!(example("saxpy.obc").contains("kernel saxpy"));
//! # Ok::<(), offload::OffloadError>(())
//! ```

pub mod bytes;
pub mod demo;
pub mod differential;
pub mod experiment;
pub mod kernels;
pub mod reference;
pub mod scenes;
pub mod source_gen;
pub use offload::vgpu as vgpu_counters;
pub mod waits;
pub mod workloads;
