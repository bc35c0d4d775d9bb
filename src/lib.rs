//! `offload` runs data-parallel `for_each` closures on an NVIDIA GPU or on
//! every CPU core. A closure's body is a *kernel*, written in Rust syntax
//! (a subset: docs/LANGUAGE.md in the repository); offload compiles it to
//! a small typed bytecode, verifies it, compiles that to native code with
//! Cranelift or to PTX, and runs it once for every workitem of a range.
//! Device code cooperates with a managed runtime: it allocates objects from
//! shared TLABs, stops at safepoints, and when it meets something it cannot
//! handle (a null, a failed speculation, a full heap) it *deoptimizes* and
//! the host interpreter finishes that workitem. Every workitem runs exactly
//! once, whatever happens.
//!
//! # Getting started
//!
//! Build a [`Runtime`] (the heap, the worker threads and the device), make
//! arrays in its heap, and offload a range with [`par_offload`] and a
//! [`kernel!`] closure, whose captures are its free variables:
//!
//! ```
//! use offload::{Runtime, kernel, par_offload};
//!
//! let rt = Runtime::builder().workers(2).build()?;
//! let x = rt.array(&[1.0f32, 2.0, 3.0])?;
//! let y = rt.array(&[10.0f32, 20.0, 30.0])?;
//! let a = 2.0f32;
//! let report = par_offload(0..3, kernel!(move |i| y[i] = a * x[i] + y[i]))?;
//! assert_eq!(report.completed, 3);
//! assert_eq!(rt.read(&y)?, [12.0, 24.0, 36.0]);
//! # Ok::<(), offload::OffloadError>(())
//! ```
//!
//! Kernels that need functions, classes or several entry points go in a
//! [`kernels!`] block, compiled with your program (a mistake in it is a
//! compile error at its line), or in a source file loaded at run time with
//! [`Runtime::load_source`]. Either gives a [`Module`]; bind a kernel's
//! arguments into a [`Closure`] (checked against the kernel's parameters)
//! and launch it:
//!
//! ```
//! use offload::{Runtime, kernels, par_offload};
//!
//! let rt = Runtime::builder().workers(2).build()?;
//! let m = kernels! {
//!     struct Particle { x: f32, v: f32 }
//!
//!     #[kernel]
//!     fn step(i: i32, ps: &mut [Option<Particle>], dt: f32, xs: &mut [f32]) {
//!         let p = ps[i].unwrap();
//!         p.x = p.x + p.v * dt;
//!         xs[i] = p.x;
//!     }
//! }
//! .load(&rt)?;
//! // Objects and arrays of references are made from the module's classes.
//! let ps = m.new_ref_array("Particle", 4)?;
//! let mut kept = Vec::new();
//! for k in 0..4 {
//!     let p = m.new_object("Particle")?;
//!     m.set_field(&p, "v", k as f32)?;
//!     m.set_element(&ps, k, &p)?;
//!     kept.push(p);
//! }
//! let xs = rt.new_array::<f32>(4)?;
//! let step = m.closure("step", [(&ps).into(), 0.5f32.into(), (&xs).into()])?;
//! par_offload(0..4, &step)?;
//! assert_eq!(rt.read(&xs)?, [0.0, 0.5, 1.0, 1.5]);
//! assert_eq!(m.get_field::<f32>(&kept[3], "x")?, 1.5);
//! # Ok::<(), offload::OffloadError>(())
//! ```
//!
//! Below the source language is the bytecode itself (`.obc` text,
//! [`Runtime::load`]; `offload isa` lists its instructions), which the
//! REPL (`offload repl`) and the recompilation experiments work with.
//!
//! In a debug build of your program, add this to your `Cargo.toml` so that
//! offload and Cranelift are optimized (kernels then compile in about a
//! millisecond instead of a hundred):
//!
//! ```toml
//! [profile.dev.package."*"]
//! opt-level = 2
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
//! exception's stack trace (file, line and column of each frame) and the
//! same report.
//!
//! # Compilation, speculation and recompilation
//!
//! On the CPU a kernel's first launch waits only for a quick compile; the
//! optimized code is compiled on a background thread and takes over when it
//! is there, in a running launch at its workers' next claims of work
//! ([`RuntimeBuilder::tiered`], [`LaunchReport::quick_workitems`]).
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
//! # For contributors
//!
//! The architecture — invariants, how a launch flows file by file, where
//! each part lives — is described in `docs/DESIGN.md` in the repository.
//! The modules form layers with no cycle (`scripts/module-cycles` checks it
//! in the test run): `device`, `diagnostics` and `table`; `policy`;
//! `report`; `error`; `gc` and `replay`; `env`; `adaptive`; `executor` and
//! `protocol`; the devices (`interp_device`, `cpu`, `cuda`); `launch`;
//! `runtime`; then `source` and `inspect`. The `offload` command, its REPL
//! and its tooling sit on top, in a crate of their own (`cli/`,
//! `offload-cli`).

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
mod devices;
pub mod diagnostics;
mod env;
mod error;
mod executor;
mod footprint;
mod gc;
pub mod inspect;
mod interp_device;
mod launch;
pub mod policy;
mod protocol;
mod reduction;
mod replay;
mod report;
mod runtime;
mod shares;
pub mod source;
mod split;
#[doc(hidden)]
pub mod table;
pub mod vgpu;

pub use cuda::{GpuHandles, cuda_error_text};
pub use error::{KernelExceptions, OffloadError};
pub use gc::{GcPolicy, Root};
pub use offload_heap::{AllocPolicy, GcStats};
/// A closure kernel: `kernel!(move |i| BODY)` is a kernel over the
/// workitem index `i` (an `i32`; write `|i: i64|` for an `i64`), ready to
/// launch with [`par_offload`]. With two or three indices,
/// `kernel!(move |i, j| BODY)` runs over a 2-D (or 3-D) range:
/// `par_offload((0..h, 0..w), kernel!(move |i, j| ...))` ([`LaunchRange`]).
///
/// The body is the source language (Rust syntax; docs/LANGUAGE.md in the
/// repository). Its captures are the closure's free variables, each a
/// number (`i32`, `i64`, `f32`, `f64`, `bool`) or an array of the
/// runtime's heap ([`Array`]), checked at compile time
/// ([`source::Capture`]); objects and arrays of references cannot be
/// captured — pass them to a kernel of a [`kernels!`] module instead.
/// The body is compiled at its first launch on a runtime, with the
/// captures' types, and reused after; a mistake in it is an
/// [`OffloadError::Load`] naming the invocation's file, line and column
/// (`kernel! at src/main.rs:12:13 does not load`) with the line shown.
/// The kernel is named `closure_at_LINE` in reports and traces.
///
/// ```
/// use offload::{Runtime, kernel, par_offload};
///
/// let rt = Runtime::builder().workers(2).build()?;
/// let n = 1000;
/// let x = rt.array(&vec![1.0f32; n])?;
/// let y = rt.array(&(0..n).map(|i| i as f32).collect::<Vec<_>>())?;
/// let a = 2.0f32;
/// // The captures are `y`, `a` and `x`.
/// par_offload(0..n as i64, kernel!(move |i| y[i] = a * x[i] + y[i]))?;
/// assert_eq!(rt.read(&y)?[10], 12.0);
///
/// // Loops, locals and branches, over an `i64` index.
/// let out = rt.new_array::<f64>(n)?;
/// let terms = 8;
/// par_offload(
///     0..n as i64,
///     kernel!(move |i: i64| {
///         let mut s = 0.0;
///         for k in 0..terms {
///             if k % 2 == 0 { s += k as f64; }
///         }
///         out[i] = s;
///     }),
/// )?;
/// assert_eq!(rt.read(&out)?[0], 12.0);
/// # Ok::<(), offload::OffloadError>(())
/// ```
///
/// A capture of a type no kernel takes does not compile:
///
/// ```compile_fail,E0277
/// use offload::{Runtime, kernel, par_offload};
///
/// let rt = Runtime::builder().workers(2).build()?;
/// let out = rt.new_array::<f32>(4)?;
/// let name = String::from("four");
/// par_offload(0..4, kernel!(move |i| out[i] = name))?;
/// # Ok::<(), offload::OffloadError>(())
/// ```
pub use offload_macros::kernel;

/// A source module in Rust code: `kernels! { ... }` holds kernels
/// (`#[kernel] fn`), functions, and classes (structs with their `impl`s,
/// `#[extends(Parent)]` for a subclass) in the source language (docs/LANGUAGE.md in the repository),
/// and evaluates to a `&'static` [`source::SourceModule`], whose
/// [`load`](source::SourceModule::load) gives the [`Module`] on a
/// runtime (loaded once per runtime).
///
/// The block is compiled when your program is: a mistake in it is a
/// compile error at its line and column, as rustc's own are. A kernel's
/// first parameter is the workitem index; slices of numbers
/// (`&mut [f32]`) and of objects (`&mut [Option<Cell>]`, made in Rust
/// with [`Module::new_ref_array`]) are arrays of the heap.
///
/// ```
/// use offload::{Runtime, kernels, par_offload};
///
/// let rt = Runtime::builder().workers(2).build()?;
/// let m = kernels! {
///     fn square(x: f64) -> f64 { x * x }
///
///     #[kernel]
///     fn squares(i: i32, out: &mut [f64]) {
///         out[i] = square(i as f64);
///     }
/// }
/// .load(&rt)?;
/// let out = rt.new_array::<f64>(8)?;
/// par_offload(0..8, m.closure("squares", [(&out).into()])?)?;
/// assert_eq!(rt.read(&out)?[3], 9.0);
/// # Ok::<(), offload::OffloadError>(())
/// ```
///
/// Virtual calls through a trait, on objects made from Rust:
///
/// ```
/// use offload::{Runtime, kernels, par_offload};
///
/// let rt = Runtime::builder().workers(2).build()?;
/// let m = kernels! {
///     struct Shape { id: i32 }
///     impl Shape { fn area(&self) -> f64; }
///     #[extends(Shape)]
///     struct Circle { r: f64 }
///     impl Circle { fn area(&self) -> f64 { 3.0 * self.r * self.r } }
///     #[extends(Shape)]
///     struct Square { s: f64 }
///     impl Square { fn area(&self) -> f64 { self.s * self.s } }
///
///     #[kernel]
///     fn areas(i: i32, shapes: &[Option<Shape>], out: &mut [f64]) {
///         out[i] = shapes[i].unwrap().area();
///     }
/// }
/// .load(&rt)?;
/// let shapes = m.new_ref_array("Shape", 2)?;
/// let c = m.new_object("Circle")?;
/// m.set_field(&c, "r", 1.0f64)?;
/// let q = m.new_object("Square")?;
/// m.set_field(&q, "s", 2.0f64)?;
/// m.set_element(&shapes, 0, &c)?;
/// m.set_element(&shapes, 1, &q)?;
/// let out = rt.new_array::<f64>(2)?;
/// par_offload(0..2, m.closure("areas", [(&shapes).into(), (&out).into()])?)?;
/// assert_eq!(rt.read(&out)?, [3.0, 4.0]);
/// # Ok::<(), offload::OffloadError>(())
/// ```
pub use offload_macros::kernels;
pub use report::{
    DeoptAction, DeoptRow, Dispatches, GcSummary, LaunchReport, LaunchShape, Reduction, SavedValue,
    SplitShare, Timings,
};
pub use runtime::{
    Arg, Array, Closure, Combine, DEFAULT_DEOPT_RECORDS, Device, Element, HeapRef, HeapView,
    LaunchHandle, LaunchRange, MAX_DEOPT_RECORDS, MAX_WORKERS, Module, Object, ReduceHandle,
    Reduced, Reducible, RefArray, Runtime, RuntimeBuilder, Scalar,
};
pub use source::{Capture, Launchable, Summed, par_offload};
