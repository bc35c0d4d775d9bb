//! `offload` runs data-parallel `for_each` closures on an NVIDIA GPU or on
//! every CPU core. A closure's body is a *kernel* in a small typed stack
//! bytecode (`.obc` text); offload verifies it, compiles it (to native code
//! with Cranelift, or to PTX) and runs it once for every workitem of a range.
//! Device code cooperates with a managed runtime: it allocates objects from
//! shared TLABs, stops at safepoints, and when it meets something it cannot
//! handle (a null, a failed speculation, a full heap) it *deoptimizes* and
//! the host interpreter finishes that workitem. Every workitem runs exactly
//! once, whatever happens.
//!
//! # Getting started
//!
//! Build a [`Runtime`] (the heap, the worker threads and the device), load a
//! [`Module`] of kernels, make arrays or objects in its heap, bind a
//! kernel's captures into a [`Closure`] (type-checked against the kernel)
//! and offload a range with [`par_offload`]:
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
//!
//! # Devices
//!
//! [`Runtime::new`] uses the CUDA device when a usable NVIDIA GPU is present
//! and the CPU device otherwise, with the reason in [`Runtime::fallback`].
//! [`RuntimeBuilder::device`] picks one ([`Device::Cpu`], [`Device::Cuda`],
//! or [`Device::Interpreter`], the reference semantics), and
//! [`RuntimeBuilder::strict`] turns every fallback into an error. A kernel a
//! device cannot compile runs on the next one, and its report says why
//! ([`LaunchReport::fallback`]). CUDA is loaded at run time: nothing about
//! CUDA is needed to build or to run on the CPU.
//!
//! # What a launch reports
//!
//! [`par_offload`] returns a [`LaunchReport`]: where the workitems ran (the
//! range is partitioned into [`LaunchReport::on_device`],
//! [`LaunchReport::replayed`], [`LaunchReport::abandoned`] and
//! [`LaunchReport::not_started`]), what deoptimized where and why, what was
//! allocated, and how long each phase took ([`Timings`]). Workitems that
//! throw make the launch return [`OffloadError::Exceptions`], with the first
//! exception's bytecode stack trace and the same report.
//!
//! # Compilation, speculation and recompilation
//!
//! On the CPU a kernel's first launch waits only for a quick compile; the
//! optimized code is compiled on a background thread and used once it is
//! there ([`RuntimeBuilder::tiered`], [`LaunchReport::quick_tier`]).
//! Speculation is opt-in ([`RuntimeBuilder::speculate`]): the first launches
//! run in the interpreter to profile the kernel, and the compiled code then
//! speculates on what they saw, deoptimizing where that turns out wrong. A
//! recompilation policy ([`RuntimeBuilder::policy`], see [`policy`]) decides
//! after each launch whether to keep the code, recompile it without a failed
//! speculation, or stop offloading the kernel.
//!
//! # Safepoints and interrupts
//!
//! [`Runtime::safepoint`] stops every running workitem at its next poll and
//! runs an operation with the heap. [`Runtime::interrupt`] stops the running
//! launch for good: completed workitems stay completed, workitems stopped
//! part-way are dropped (not replayed) and the rest never start; the launch
//! returns [`OffloadError::Interrupted`] with a report that counts each.
//!
//! [`inspect`] shows a kernel as the runtime sees it: its bytecode with the
//! verifier's types, its Cranelift IR and PTX, and its deopt metadata.
//!
//! # One `par_offload` call, file by file
//!
//! 1. `runtime/mod.rs`: [`par_offload`] checks the closure belongs to the
//!    runtime and hands the launch its `LaunchEnv` (heap, workers,
//!    control word, settings, allocator and save-area pool: `env.rs`), the
//!    devices it may use, the kernel call and the kernel's adaptive state.
//! 2. `launch.rs`: the kernel's state (`adaptive.rs`) plans the launch —
//!    the device, the compiled version with its speculations, TLAB and
//!    chunk sizes; a deadline starts a watchdog; the planned device runs
//!    it, falling back CUDA → CPU → interpreter when a device cannot
//!    (`executor.rs`: the one interface every device implements).
//! 3. The device: `cuda/` compiles the PTX (`offload-jit`'s `ptx`) and
//!    runs the grid over the heap image it keeps on the GPU; `cpu/`
//!    compiles with Cranelift (`offload-jit`'s `cpu`, quick tier first)
//!    and enters one slot loop per worker; `interp_device.rs` runs the
//!    workitems in interpreters. Compiled slots write deopt records into
//!    the save area as they meet what they cannot handle.
//! 4. `protocol.rs`: the launch of compiled code, written once for both
//!    compiled devices — the save area, roots and control word, and the
//!    loop of rounds each unit of slots drives (a CPU worker's slot, the
//!    GPU's grid): run, park at a safepoint, resume each record on the
//!    device or hand it to a replayer (`replay.rs`), which resumes the
//!    workitem in the interpreter from the site's frame state and accounts
//!    for it (replayed, threw, or abandoned by an interrupt), then
//!    re-enter or relaunch on the never-ran rest.
//! 5. `report.rs`: the protocol builds the [`LaunchReport`] from what the
//!    rounds returned — the partition of the range, the deopts by site and
//!    reason, the deopt table with named values, allocation, phase timings
//!    — and the exceptions decide whether the call returns it or
//!    [`OffloadError::Exceptions`] (`error.rs`).
//! 6. Back in `launch.rs`, the kernel's recompilation policy (`policy.rs`)
//!    sees the report and decides what the next launch runs.
//!
//! The modules form layers with no cycle (`scripts/module-cycles` checks
//! it in the test run): `device`, `diagnostics` and `table`; `policy`;
//! `report`; `error`; `gc` and `replay`; `env`; `adaptive`; `executor` and
//! `protocol`; the devices (`interp_device`, `cpu`, `cuda`); `launch`;
//! `runtime`; then `source` and `inspect`. The `offload` command, its REPL and its tooling sit on top,
//! in a crate of their own (`cli/`, `offload-cli`).
//! The architecture — invariants, how a launch flows, where each part lives
//! — is described in `docs/DESIGN.md` in the repository.

#![deny(missing_docs)]

pub use offload_deopt as deopt;
pub use offload_heap as heap;
pub use offload_host_interp as interp;
pub use offload_ir as ir;
pub use offload_jit as jit;
pub use offload_lang as lang;

pub mod adaptive;
mod cpu;
mod cuda;
mod device;
pub mod diagnostics;
mod env;
mod error;
mod executor;
mod gc;
pub mod inspect;
mod interp_device;
mod launch;
pub mod policy;
mod protocol;
mod replay;
mod report;
mod runtime;
pub mod source;
#[doc(hidden)]
pub mod table;
pub mod vgpu;

pub use cuda::{GpuHandles, cuda_error_text};
pub use error::{KernelExceptions, OffloadError};
pub use gc::{GcPolicy, Root};
pub use offload_heap::{AllocPolicy, GcStats};
pub use offload_macros::{kernel, kernels};
pub use report::{DeoptAction, DeoptRow, Dispatches, GcSummary, LaunchReport, SavedValue, Timings};
pub use runtime::{
    Arg, Array, Closure, DEFAULT_DEOPT_RECORDS, Device, Element, HeapRef, HeapView,
    MAX_DEOPT_RECORDS, MAX_WORKERS, Module, Object, RefArray, Runtime, RuntimeBuilder,
};
pub use source::{Capture, Launchable, par_offload};
