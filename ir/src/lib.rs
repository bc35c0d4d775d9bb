//! `offload-ir`: the bytecode that offload's closures are written in, and
//! everything later stages read from it — the instruction set (defined once, in
//! [`for_each_op!`]), the module model, the `.obc` text assembler and printer,
//! the verifier (nothing unverified ever runs: consumers take a [`Verified`]),
//! and the analyses shared by the interpreter, the JITs and deopt: CFG, loop
//! back-edges, liveness, and deopt sites with their frame states.
//!
//! ```
//! let src = "
//! kernel double(i: i64, xs: i32[]) {
//!     local j: i32
//!     load i
//!     i64.to_i32
//!     store j
//!     load xs
//!     load j
//!     load xs
//!     load j
//!     i32.aload
//!     i32.const 2
//!     i32.mul
//!     i32.astore
//!     ret
//! }
//! ";
//! let module = offload_ir::parse_module("double.obc", src)?;
//! assert_eq!(offload_ir::parse_module("again.obc", &offload_ir::print_module(&module))?, module);
//! let verified = offload_ir::verify(module)?;
//! let k = verified.func_named("double").unwrap();
//! let a = offload_ir::analysis::analyze(&verified, k);
//! // Entry poll, the i32.aload (null + bounds) and the i32.astore.
//! assert_eq!(a.sites.len(), 3);
//! # Ok::<(), offload_ir::Diagnostics>(())
//! ```

#![deny(missing_docs)]

pub mod analysis;
pub mod diag;
pub mod fuzzgen;
pub mod isa;
mod lexer;
mod mayflow;
pub mod module;
pub mod own;
pub mod parser;
pub mod printer;
pub mod reference;
pub mod refs;
pub mod semantics;
pub mod summed;
pub mod types;
pub mod verifier;

pub use diag::{Diagnostic, Diagnostics, Phase, Result, did_you_mean, nearest};
pub use isa::{Effect, Flow, Hazards, Inst, Label, Opcode, Sig};
pub use module::{Class, Field, FuncKind, Function, Local, Module, Span};
pub use parser::{parse_module, parse_type};
pub use printer::{print_function, print_module, type_name};
pub use types::{
    Bci, ClassId, Elem, ExceptionKind, F32, F64, FieldId, FuncId, Kind, LocalId, SiteId, Type,
};
pub use verifier::{Frame, FuncTypes, Verified, verify};

/// Parse and verify in one step.
pub fn load(file: &str, src: &str) -> Result<Verified> {
    verify(parse_module(file, src)?)
}
