//! `offload-jit`: compiles verified kernels to native code for the CPU and
//! to PTX for NVIDIA GPUs.
//!
//! Both backends compile a kernel version into one persistent *slot loop*:
//! each slot (a CPU worker, a GPU thread) claims chunks of workitems from
//! atomic cursors (on the CPU, its home part of the range first), checks the control word before every workitem, polls
//! at loop back-edges, and leaves through deopt exits that write the site's
//! frame state into the bounded save area in the layout of
//! [`offload_deopt::SaveLayout`]. The runtime (`offload`) owns the launch →
//! replay loop.
//!
//! How the crate is laid out, following one kernel from bytecode to code
//! — shared code at the root and under `lower/`, each backend under its
//! own folder:
//!
//! - [`CompileOptions`] (`options.rs`): how a version is compiled (tier,
//!   polls, fault injection); [`spec`]: speculations.
//! - `lower/`: the **one bytecode walker** both backends lower through —
//!   frames and inlining, virtual dispatch, site numbering, speculation,
//!   back-edge polls, which values each deopt exit stores, and the dispatch
//!   over instructions, whose arithmetic arms come from the instruction
//!   table's operation classes ([`offload_ir::isa::Op`]). The walker calls
//!   a backend's primitives through its `Backend` trait; `lower/plan.rs`
//!   holds the decisions that depend on the module (inlining budget, class
//!   tests, allocation headers).
//! - [`cpu`]: everything CPU-only — the primitives in Cranelift IR
//!   (`cpu/emit.rs`) and the CPU slot loop (`cpu/slot_loop.rs`),
//!   allocation with the nursery reset (`cpu/alloc.rs`), deopt exits
//!   (`cpu/deopt.rs`), vector and predicated loops (`cpu/loops.rs`),
//!   lockstep groups (`cpu/lockstep.rs`), the 256-bit loop
//!   (`cpu/wide.rs`); the analyses behind those loops (`cpu/opt/`:
//!   workitem-indexed accesses, loop predication, unrolling and
//!   vectorization, lockstep); the JIT and its module ([`CpuJit`],
//!   `cpu/jit.rs`), the math it links (`cpu/math.rs`, `cpu/vmath.rs`),
//!   the SSA mending after optimization (`cpu/ssa.rs`) and the runtime
//!   calls compiled code makes ([`cpu::rt`]).
//! - [`ptx`]: everything GPU-only — the primitives in PTX text, the GPU
//!   slot loop, the device TLAB protocol, exact float operations;
//!   [`ptxlib`] is the math library in PTX and [`ptxas`] assembles for
//!   checks.
//!
//! The launch contexts, slot words, exit codes, control bits, save-record
//! index and TLAB words both backends emit code against are
//! `offload_abi`'s, defined once there.
//!
//! Because the walker is shared, a CPU and a PTX version of a kernel have
//! equal [`DeoptMetadata`](offload_deopt::DeoptMetadata) and the host replays either one's records the
//! same way. Both backends compile a version with the speculations of
//! [`spec`] (chosen from the interpreter's profile) and record each one in
//! the version's metadata with the site whose exit its guard takes.
//! `jit/examples/lowering_snapshot.rs` writes every example kernel's PTX and
//! Cranelift IR under every option, so that a change to the lowering can be
//! diffed whole.
//!
//! [`CpuJit`] owns the Cranelift module (one per kernel version, since a
//! `JITModule` frees its code only when dropped whole) behind a mutex: a
//! `JITModule` is `Send` but not `Sync`, so compilation is serialized while
//! the finished function pointers are called from any thread.

#![deny(missing_docs)]

pub mod cpu;
mod lower;
mod options;
pub mod ptx;
pub mod ptxas;
pub mod ptxlib;
pub mod spec;

pub use cpu::{CompiledKernel, CpuJit};
pub use offload_abi::cpu::{LaunchCtx, SlotFn};

pub use lower::{MAX_INLINE_DEPTH, MAX_INLINED_INSTS};
pub use options::{CompileOptions, Dispatch, Injection, SafepointInjection};
pub use spec::{SpecConfig, Speculations};

/// Why a kernel was not compiled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JitError {
    /// The kernel uses something the backends do not compile: the function
    /// and bytecode index at fault, and what it is (the kernel then runs on
    /// the next device down, and the launch report says why).
    #[error("not compiled: `{func}` at bci {bci}: {why}")]
    Unsupported {
        /// The function the instruction is in (the kernel, or a function
        /// inlined into it).
        func: String,
        /// The instruction's bytecode index in `func`.
        bci: offload_ir::Bci,
        /// What is not compiled.
        why: Refusal,
    },
    /// The kernel is abstract: there is no body to compile.
    #[error("`{kernel}` has no body to compile")]
    Abstract {
        /// The kernel.
        kernel: String,
    },
    /// Fault injection asked for a site the kernel does not have.
    #[error("injection at bci {bci}: {why}")]
    BadInjection {
        /// The bytecode index asked for.
        bci: offload_ir::Bci,
        /// What is wrong with it.
        why: &'static str,
    },
    /// Cranelift rejected what we generated (a bug: the message carries the IR).
    #[error("code generation failed: {0}")]
    Codegen(String),
    /// This machine is not a Cranelift target.
    #[error("no native code generator for this machine: {0}")]
    Host(String),
}

/// What the backends refuse to compile ([`JitError::Unsupported`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A call of a function already being inlined (recursion).
    #[error("call of `{callee}`: recursive calls are not compiled")]
    Recursive {
        /// The function called.
        callee: String,
    },
    /// Calls nested deeper than [`MAX_INLINE_DEPTH`].
    #[error("call of `{callee}`: calls nest deeper than {MAX_INLINE_DEPTH}")]
    TooDeep {
        /// The function called.
        callee: String,
    },
    /// More than [`MAX_INLINED_INSTS`] instructions inlined into one kernel.
    #[error("call of `{callee}`: more than {MAX_INLINED_INSTS} instructions inlined")]
    TooBig {
        /// The function called.
        callee: String,
    },
    /// A static call of an abstract method.
    #[error("call of abstract `{callee}`")]
    AbstractCall {
        /// The method called.
        callee: String,
    },
    /// A `callvirt` of something that is not a method.
    #[error("callvirt of non-method `{callee}`")]
    NotAMethod {
        /// The function called.
        callee: String,
    },
    /// A `newarray` whose element type has no array type (too many
    /// dimensions) or no header encoding.
    #[error("`newarray` of {elem}: no array header for it")]
    NoArrayHeader {
        /// The element type, as the text form writes it.
        elem: String,
    },
    /// More captures than a GPU kernel's parameters hold
    /// ([`offload_abi::gpu::MAX_CAPTURES`]).
    #[error("{count} captures: a GPU kernel takes at most {max}")]
    TooManyCaptures {
        /// The kernel's captures.
        count: usize,
        /// The most the GPU passes.
        max: usize,
    },
    /// An instruction no backend lowers.
    #[error("`{mnemonic}` has no lowering")]
    NoLowering {
        /// The instruction.
        mnemonic: &'static str,
    },
}
