//! `offload-host-interp`: the interpreter that gives offload its reference
//! semantics. It executes verified modules over the managed heap — every
//! instruction, virtual dispatch through per-class vtables, atomics on array
//! elements and fields — reports exceptions with the workitem, function,
//! bytecode index, source line and a bytecode stack trace, resumes a workitem
//! from a deopt site's frame state ([`Interpreter::resume`]), and records
//! profiles for speculation ([`Profile`]). It also holds the safepoint and
//! interrupt coordination every device of a runtime shares ([`Control`],
//! `safepoints.rs`): the interpreter is the lowest layer that parks at it.
//!
//! Values are untyped 64-bit slots: `i32`/`f32` in the low 32 bits, `i64`/`f64`
//! whole, references as 32-bit heap word offsets — the same representation as
//! a deopt save record, so resuming needs no conversion.
//!
//! ```
//! use offload_host_interp::{Interpreter, Program};
//! use offload_heap::{AllocPolicy, Allocator, Heap, HeapConfig};
//! use std::sync::Arc;
//!
//! let src = "func add(a: i32, b: i32) -> i32 {\n    load a\n    load b\n    i32.add\n    ret\n}\n";
//! let prog = Program::new(Arc::new(offload_ir::load("add.obc", src).unwrap()), 0);
//! let heap = Heap::new(HeapConfig { initial: 1 << 20, max: 16 << 20, ..Default::default() }).unwrap();
//! let alloc = Allocator::new(&heap, AllocPolicy::default(), 1);
//! let mut it = Interpreter::new(&prog, &heap, &alloc, 0);
//! let add = prog.verified().func_named("add").unwrap();
//! assert_eq!(it.call(add, &[2, 40]).unwrap(), Some(42));
//! ```

#![deny(missing_docs)]

mod exception;
mod interp;
mod room;
mod safepoints;

pub use exception::{Exception, TraceFrame};
pub use interp::{
    Collector, DEFAULT_MAX_DEPTH, Interpreter, Outcome, ResumeError, ResumeFrame, ResumePlan,
};
pub use offload_program::{FuncProfile, Layout, Profile, Program};
pub use room::{AfterWait, Room};
pub use safepoints::{Control, LaunchWord, Parked, Registered, Running};
