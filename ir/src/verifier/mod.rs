//! The verifier. Nothing unverified ever runs: every consumer takes a
//! [`Verified`] module, which only [`verify`] makes.
//!
//! It infers, by dataflow to a fixed point, the type of every operand-stack slot
//! and every local at the entry of every bytecode index ([`Frame`]). Reference
//! types merge to their least upper bound in the single-inheritance hierarchy
//! (`null` below every reference type, `ref` above all); locals merge to
//! "unassigned" when either side is unassigned.
//!
//! # Rules
//!
//! Module level:
//! - **M1** every class, field, function and local id in the module is in
//!   range, and class/field/method membership lists agree with the owners.
//! - **M2** names are identifiers; class names are unique and are not built-in
//!   type names; field names are unique within a class; function names are
//!   unique; local names are unique within a function.
//! - **M3** no class inherits from itself (no inheritance cycle).
//! - **M4** a field that redeclares an inherited field's name has the same type
//!   (it then hides the inherited field, as in Java).
//! - **M5** a method that overrides an inherited method has the same parameter
//!   and return types.
//! - **M6** a kernel's first parameter is the workitem index, of type `i64`, and
//!   a kernel returns nothing, or a number (`i32`, `i64`, `f32`, `f64`): a
//!   *reducing* kernel, whose launches combine the values of its workitems.
//! - **M7** a method's local 0 is `this`, of its class; abstract methods have no
//!   body and every other function has one.
//!
//! Function level, at each reachable bytecode index (every independent error
//! of a function is reported: after an error the dataflow goes on where the
//! types that follow do not depend on it, and stops on that path where they
//! do, so one mistake is one error, not a cascade):
//! - **F1** the operand stack does not underflow and stays within
//!   [`MAX_STACK`] slots.
//! - **F2** every operand has the type the instruction expects (numeric types
//!   exactly; references assignable: subclass to superclass, `null` to any
//!   reference, anything to `ref`; arrays are invariant).
//! - **F3** a local is read (`load`, `inc`) only where it is assigned on every
//!   path; values stored are assignable to its declared type; `inc` applies to
//!   `i32`/`i64` locals.
//! - **F4** branch targets are instructions of the same function.
//! - **F5** where paths merge, the stacks have the same depth and slot kinds.
//! - **F6** control never falls off the end of the body.
//! - **F7** `ret` finds exactly the return value (assignable to the declared
//!   return type), or an empty stack in a void function.
//! - **F8** calls name a function that exists and can be called that way
//!   (`call` not on a kernel or an abstract method; `callvirt` only on
//!   methods), with the right number and types of arguments.
//! - **F9** `new` names a class with no abstract method in its vtable;
//!   `newarray`, `instanceof`, `checkcast` name valid types; atomics on fields
//!   name `i32`/`i64` fields; `getfield`/`putfield` receivers are instances of
//!   the field's class.
//!
//! Unreachable instructions are allowed and get no frame.

use crate::diag::{Diagnostic, Diagnostics, Phase, Result};
use crate::isa::{Effect, Flow, Inst, Sig};
use crate::module::{FuncKind, Function, Module};
use crate::printer::type_name;
use crate::types::{Bci, ClassId, Elem, FuncId, Type};
use std::collections::{HashSet, VecDeque};

mod func;
mod module;

use func::FnVerifier;
use module::{FResult, Verifier};

/// The operand stack never holds more than this many values.
pub const MAX_STACK: usize = 1024;

/// The most `instructions × (locals + 16)` a function may have.
///
/// Reading a program (lexing, parsing, name resolution, the REPL's entries)
/// is linear in its size. What follows is not, by design: the verifier
/// keeps the type of every local at every instruction, liveness is a set of
/// locals per instruction, and the deopt metadata — what a deopting
/// workitem saves and the interpreter resumes from — is a frame map of the
/// live locals at every potential deopt site, which can be nearly every
/// instruction. Its size is instructions × locals whatever the
/// representation, as HotSpot's oop maps are, and HotSpot bounds it the same
/// way: by limits on a method's size. Past this limit (2^25 cells: a few
/// hundred MiB and well under a second with the analyses), a function is
/// refused with an error naming its size instead of exhausting the
/// machine's memory (a kernel of 20k locals and 80k instructions needed
/// more than 24 GiB). Real kernels are far below it.
pub const MAX_FRAME_CELLS: u64 = 1 << 25;

/// Types at the entry of one bytecode index.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Frame {
    /// Operand stack, bottom first.
    pub stack: Vec<Type>,
    /// Current type of each local; `None` while unassigned.
    pub locals: Vec<Option<Type>>,
}

/// What the verifier learned about one function.
#[derive(Clone, Debug)]
pub struct FuncTypes {
    /// The frame at the entry of each bytecode index; `None` if unreachable.
    pub frames: Vec<Option<Frame>>,
    /// The deepest the operand stack gets.
    pub max_stack: usize,
}

impl FuncTypes {
    /// The operand stack's depth on entry to bytecode index `bci`; `None`
    /// where it is unreachable (or past the end).
    pub fn stack_depth(&self, bci: usize) -> Option<usize> {
        self.frames
            .get(bci)
            .and_then(Option::as_ref)
            .map(|fr| fr.stack.len())
    }
}

/// A module that passed the verifier, with the inferred types.
#[derive(Clone, Debug)]
pub struct Verified {
    module: Module,
    types: Vec<FuncTypes>,
}

impl Verified {
    /// The module.
    pub fn module(&self) -> &Module {
        &self.module
    }
    /// Give back the module.
    pub fn into_module(self) -> Module {
        self.module
    }
    /// The inferred types of function `f`.
    pub fn types(&self, f: FuncId) -> &FuncTypes {
        &self.types[f.index()]
    }
}

impl std::ops::Deref for Verified {
    type Target = Module;
    fn deref(&self) -> &Module {
        &self.module
    }
}

/// Verify a module. Returns every module-level error, and every independent
/// error of each function.
pub fn verify(module: Module) -> Result<Verified> {
    let mut v = Verifier {
        m: &module,
        diags: Vec::new(),
    };
    v.module_rules();
    if !v.diags.is_empty() {
        return Err(Diagnostics(v.diags));
    }
    let mut types = Vec::with_capacity(module.funcs.len());
    for i in 0..module.funcs.len() {
        match v.function(FuncId::new(i)) {
            Ok(t) => types.push(t),
            Err(ds) => {
                v.diags.extend(ds);
                types.push(FuncTypes {
                    frames: Vec::new(),
                    max_stack: 0,
                });
            }
        }
    }
    if v.diags.is_empty() {
        Ok(Verified { module, types })
    } else {
        Err(Diagnostics(v.diags))
    }
}

/// Whether a value of type `from` may be used where `to` is expected.
pub fn assignable(m: &Module, from: Type, to: Type) -> bool {
    match (from, to) {
        _ if from == to => true,
        (Type::Null, t) => t.is_ref(),
        (f, Type::Ref) => f.is_ref(),
        (Type::Class(a), Type::Class(b)) => m.is_subclass(a, b),
        _ => false,
    }
}

/// The least upper bound of two types, or `None` if they have different kinds.
pub fn lub(m: &Module, a: Type, b: Type) -> Option<Type> {
    if a == b {
        return Some(a);
    }
    if a.kind() != b.kind() {
        return None;
    }
    Some(match (a, b) {
        (Type::Null, t) | (t, Type::Null) => t,
        (Type::Class(x), Type::Class(y)) => {
            let xs: Vec<ClassId> = m.ancestors(x).collect();
            m.ancestors(y)
                .find(|c| xs.contains(c))
                .map_or(Type::Ref, Type::Class)
        }
        _ => Type::Ref,
    })
}

fn is_ident(s: &str) -> bool {
    let mut cs = s.chars();
    cs.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && cs.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
