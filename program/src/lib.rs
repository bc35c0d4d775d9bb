//! `offload-program`: a verified module as every executor sees it.
//!
//! [`Program`] is a module prepared to run: the object layout of its
//! classes, their vtables, the shared analyses of every function
//! (`offload_ir::analysis`), and its classes placed in the heap's global
//! class-id space. [`Profile`] is what an executor observes for
//! speculation: branch directions, receiver classes, nulls.
//!
//! Both sit below every executor — the interpreter (`offload-host-interp`)
//! and the JIT backends (`offload-jit`) — so that neither depends on the
//! other to know what it runs.

#![deny(missing_docs)]

mod profile;
mod program;

pub use profile::{FuncProfile, Profile};
pub use program::{Layout, MAX_ALLOCATION_KINDS, Program};
