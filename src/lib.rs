//! `offload` runs data-parallel `for_each` closures written in a small typed
//! stack bytecode on an NVIDIA GPU or every CPU core, with the runtime
//! cooperation that OpenJDK's Sumatra project built for
//! Java on GPUs: safepoint polls, shared-TLAB allocation, deoptimization into
//! a bounded save area, and host replay.
//!
//! This crate is the facade: the [`Runtime`] (heap, workers, device), loaded
//! [`Module`]s, typed heap handles ([`Array`], [`Object`]), [`Closure`]s
//! type-checked against their kernel, and [`par_offload`].
//!
//! Device selection (a change to DESIGN.md's "Devices", which named the CPU
//! the embedded default): the default runtime uses the CUDA device when a
//! usable GPU is present and the CPU device otherwise, with the reason in
//! [`Runtime::fallback`] — the CPU stays the embedded default on every
//! machine without a GPU, and a machine with one gets it without asking.
//! Forcing a device is [`RuntimeBuilder::device`]; strict mode
//! ([`RuntimeBuilder::strict`]) turns every fallback into an error.
//!
//! Speculation and recompilation (DESIGN.md, "Speculation and
//! recompilation"; [`adaptive`], [`policy`], [`experiment`]): speculation is
//! opt-in ([`RuntimeBuilder::speculate`]) because its warm-up runs the first
//! launches in the interpreter, which only kernels launched many times win
//! back; without it kernels compile at their first launch with no
//! speculation, as before. The default policy is `never` (Sumatra's), so a
//! runtime acts on deopts only when asked to
//! ([`RuntimeBuilder::policy`]). A launch that ran in the interpreter —
//! warm-up, a policy's decision, or a fallback — reports
//! [`Device::Interpreter`] as its device.
//!
//! Tiered compilation on the CPU ([`RuntimeBuilder::tiered`], on by
//! default): a kernel version's first launch waits only for a quick compile
//! (no Cranelift optimizations, single-pass register allocation: 2–3x
//! quicker to compile, about 2x slower to run), and the optimized compile
//! runs on a background thread; later launches take the optimized code once
//! it is there ([`LaunchReport::quick_tier`] says which ran,
//! [`Runtime::finish_compiles`] waits for it). Both tiers come from one
//! lowering with the same deopt sites and metadata, so a version's counters,
//! records and speculations do not depend on the tier.
//!
//! Interrupting a launch ([`Runtime::interrupt`], what Ctrl-C does in the
//! REPL) is an addition to DESIGN.md's launch protocol: it is a safepoint
//! after which the running launch leaves instead of going on. Completed
//! workitems stay completed; workitems stopped part-way are dropped, not
//! replayed (reported as [`LaunchReport::abandoned`] and as `interrupted`
//! rows of the deopt table); the rest never start; the launch returns
//! [`OffloadError::Interrupted`]. Exactly-once becomes at-most-once for that
//! launch only, and says so. The REPL (`offload repl`, `offload run`) lives
//! in the binary and uses only this crate's public API; [`inspect`] gives it
//! (and anyone) a kernel's bytecode with verifier types, Cranelift IR, PTX
//! and deopt metadata.
//!
//! ```
//! use offload::{Runtime, par_offload};
//!
//! let rt = Runtime::builder().workers(2).build()?;
//! let m = rt.load("saxpy.obc", include_str!("../examples/kernels/saxpy.obc"))?;
//! let x = rt.array(&[1.0f32, 2.0, 3.0])?;
//! let y = rt.array(&[10.0f32, 20.0, 30.0])?;
//! let saxpy = m.closure("saxpy", [2.0f32.into(), (&x).into(), (&y).into()])?;
//! let report = par_offload(0..3, &saxpy)?;
//! assert_eq!(report.completed, 3);
//! assert_eq!(rt.read(&y)?, [12.0, 24.0, 36.0]);
//! # Ok::<(), offload::OffloadError>(())
//! ```

#![deny(missing_docs)]

pub use offload_deopt as deopt;
pub use offload_host_interp as interp;
pub use offload_ir as ir;
pub use offload_jit as jit;
pub use offload_tlab as tlab;

pub mod adaptive;
pub mod bench;
mod cpu;
mod cuda;
pub mod cuda_c;
pub mod demo;
pub mod diagnostics;
pub mod differential;
mod error;
pub mod experiment;
pub mod inspect;
mod launch;
pub mod policy;
pub mod reference;
mod runtime;

pub use error::{KernelExceptions, OffloadError};
pub use launch::{DeoptRow, LaunchReport, Timings};
pub use offload_tlab::AllocPolicy;
pub use runtime::{
    Arg, Array, Closure, DEFAULT_DEOPT_RECORDS, Device, Element, MAX_DEOPT_RECORDS, MAX_WORKERS,
    Module, Object, RefArray, Runtime, RuntimeBuilder, par_offload,
};
