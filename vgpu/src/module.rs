//! A parsed PTX module: its functions (kernels and device functions), their
//! registers and code, and the module's variables.

use crate::inst::{Inst, Space, Ty};
use std::collections::HashMap;

/// A register of a function.
#[derive(Clone, Debug)]
pub struct RegInfo {
    /// Its name, as written (`%rd12`, `%ctx`).
    pub name: String,
    /// Its declared type.
    pub ty: Ty,
}

/// A kernel parameter (`.param` of an `.entry`).
#[derive(Clone, Debug)]
pub struct Param {
    /// Its name.
    pub name: String,
    /// Its type.
    pub ty: Ty,
    /// Its size in bytes (arrays: element size × count).
    pub bytes: u64,
    /// Its offset in the parameter buffer.
    pub offset: u64,
}

/// A function: an `.entry` kernel or a `.func`.
#[derive(Clone, Debug)]
pub struct Func {
    /// The name.
    pub name: String,
    /// Whether it is a kernel (`.entry`).
    pub entry: bool,
    /// A kernel's parameters.
    pub params: Vec<Param>,
    /// Bytes of a kernel's parameter buffer.
    pub param_bytes: u64,
    /// A `.func`'s parameter registers, in order.
    pub arg_regs: Vec<u32>,
    /// A `.func`'s return registers, in order.
    pub ret_regs: Vec<u32>,
    /// Every register (parameters and predicates included).
    pub regs: Vec<RegInfo>,
    /// The code.
    pub code: Vec<Inst>,
    /// Bytes of `.local` variables per thread.
    pub local_bytes: u64,
    /// Bytes of `.shared` variables declared in the function.
    pub shared_bytes: u64,
    /// The 1-based line of the function's header.
    pub line: u32,
}

/// A module-level variable (`.global`, `.const` or `.shared`).
#[derive(Clone, Debug)]
pub struct Var {
    /// Its name.
    pub name: String,
    /// Its space.
    pub space: Space,
    /// Its offset in its space's window.
    pub offset: u64,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its initial bytes (`.global`/`.const` with an initializer; zeros
    /// otherwise).
    pub init: Vec<u8>,
}

/// A parsed module.
#[derive(Clone, Debug)]
pub struct Module {
    /// The `.version`, as written.
    pub version: String,
    /// The `.target`s.
    pub target: Vec<String>,
    /// Functions in file order.
    pub funcs: Vec<Func>,
    /// Module-level variables.
    pub vars: Vec<Var>,
    /// Bytes of the module's global and constant data (both in one
    /// block, constants read-only by their instructions' space).
    pub data_bytes: u64,
    /// Bytes of module-level `.shared` variables.
    pub shared_bytes: u64,
    /// The module's PTX text (diagnostics quote its lines).
    pub text: String,
    pub(crate) by_name: HashMap<String, u32>,
}

impl Module {
    /// The index of the function `name`.
    pub fn func_index(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    /// The function `name`.
    pub fn func(&self, name: &str) -> Option<&Func> {
        self.func_index(name).map(|i| &self.funcs[i as usize])
    }

    /// The module's global/constant data block, as initialized.
    pub fn data_image(&self) -> Vec<u8> {
        let mut img = vec![0u8; self.data_bytes as usize];
        for v in &self.vars {
            if matches!(v.space, Space::Global | Space::Const) && !v.init.is_empty() {
                let o = v.offset as usize;
                img[o..o + v.init.len()].copy_from_slice(&v.init);
            }
        }
        img
    }

    /// Instructions in the module (every function).
    pub fn instruction_count(&self) -> usize {
        self.funcs.iter().map(|f| f.code.len()).sum()
    }
}
