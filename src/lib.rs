//! `offload` runs data-parallel `for_each` closures written in a small typed
//! stack bytecode on an NVIDIA GPU or on every CPU core, with the runtime
//! cooperation that OpenJDK's Sumatra project built for Java on GPUs:
//! safepoint polls, shared-TLAB allocation, deoptimization into a bounded
//! save area, and host replay.
//!
//! This crate is the facade: it re-exports the bytecode crate
//! ([`ir`]), renders its diagnostics for people ([`diagnostics`]), and hosts
//! the `offload` command-line tool.
//!
//! ```
//! let src = "kernel k(i: i64) {\n    ret\n}\n";
//! let verified = offload::ir::load("k.obc", src)?;
//! assert!(verified.func_named("k").is_some());
//! # Ok::<(), offload::ir::Diagnostics>(())
//! ```

#![deny(missing_docs)]

pub use offload_ir as ir;

pub mod diagnostics;
