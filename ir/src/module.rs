//! The module model: classes, fields, functions (static, kernel, method).

use crate::isa::Inst;
use crate::types::{Bci, ClassId, FieldId, FuncId, LocalId, Type};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A position in source text. Byte offsets plus 1-based line and column.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct Span {
    /// Byte offset of the first character.
    pub start: u32,
    /// Byte offset one past the last character.
    pub end: u32,
    /// 1-based line of `start`.
    pub line: u32,
    /// 1-based column (in characters) of `start`.
    pub col: u32,
}

/// Source information that does not take part in equality: two modules that
/// differ only in spans or label names are equal (this is what makes
/// print → parse round-trips comparable).
#[derive(Clone, Debug, Default)]
pub struct Meta<T>(pub T);

impl<T> PartialEq for Meta<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl<T> Eq for Meta<T> {}

impl<T> std::ops::Deref for Meta<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Meta<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// A whole program: what one `.obc` file defines.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Module {
    /// Classes, indexed by [`ClassId`].
    pub classes: Vec<Class>,
    /// Fields of every class, indexed by [`FieldId`].
    pub fields: Vec<Field>,
    /// Static functions, kernels and methods, indexed by [`FuncId`].
    pub funcs: Vec<Function>,
    /// Where the module came from (file name for messages).
    pub source: Meta<Arc<str>>,
    /// Comments after the last item.
    pub tail_comments: Meta<Vec<String>>,
}

/// A class with single inheritance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Class {
    /// Name; unique in the module.
    pub name: String,
    /// The superclass, if any.
    pub superclass: Option<ClassId>,
    /// Fields declared by this class, in declaration order.
    pub fields: Vec<FieldId>,
    /// Methods declared by this class, in declaration order.
    pub methods: Vec<FuncId>,
    /// Where the class is declared.
    pub span: Meta<Span>,
    /// Comment lines before the class, and before its closing brace.
    pub comments: Meta<(Vec<String>, Vec<String>)>,
}

/// A field of a class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// Name; unique in its class.
    pub name: String,
    /// Declaring class.
    pub class: ClassId,
    /// The field's type.
    pub ty: Type,
    /// Where the field is declared.
    pub span: Meta<Span>,
    /// Comment lines before the field.
    pub comments: Meta<Vec<String>>,
}

/// What kind of function this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FuncKind {
    /// A static function.
    Static,
    /// A kernel: first parameter the workitem index (`i64`), the rest captures;
    /// returns nothing.
    Kernel,
    /// A virtual method of `class`; local 0 is the receiver `this`.
    Method {
        /// The declaring class.
        class: ClassId,
        /// No body: subclasses must provide it. A class that has an abstract
        /// method in its vtable cannot be instantiated.
        is_abstract: bool,
    },
}

/// A local variable or parameter, with its declared type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Local {
    /// Name; unique in the function.
    pub name: String,
    /// Declared type; every value stored must be assignable to it.
    pub ty: Type,
}

/// Source information of a function body.
#[derive(Clone, Debug, Default)]
pub struct FuncDebug {
    /// Where the function is declared (its name).
    pub span: Span,
    /// The span of each instruction.
    pub inst_spans: Vec<Span>,
    /// Label names written by the author, by target bytecode index.
    pub labels: BTreeMap<Bci, String>,
    /// Comment lines before the function.
    pub leading: Vec<String>,
    /// Comment lines between the header and the first instruction.
    pub head: Vec<String>,
    /// Comment lines before each instruction (and its label).
    pub before: BTreeMap<Bci, Vec<String>>,
    /// The comment at the end of an instruction's line.
    pub trailing: BTreeMap<Bci, String>,
    /// Comment lines before the closing brace.
    pub end: Vec<String>,
}

/// A function body with its signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// Name. Methods are named `Class.method`.
    pub name: String,
    /// Static, kernel or method.
    pub kind: FuncKind,
    /// Parameters then locals. For methods, local 0 is `this`.
    pub locals: Vec<Local>,
    /// How many of `locals` are parameters (including `this`).
    pub param_count: u32,
    /// Return type; `None` for void.
    pub ret: Option<Type>,
    /// The instructions.
    pub body: Vec<Inst>,
    /// Spans and label names.
    pub debug: Meta<FuncDebug>,
}

impl Function {
    /// The parameters (for methods, `this` first).
    pub fn params(&self) -> &[Local] {
        &self.locals[..(self.param_count as usize).min(self.locals.len())]
    }

    /// Types of the parameters.
    pub fn param_types(&self) -> impl Iterator<Item = Type> + '_ {
        self.params().iter().map(|l| l.ty)
    }

    /// The method's short name (after the dot) or the function's name.
    pub fn short_name(&self) -> &str {
        match self.kind {
            FuncKind::Method { .. } => self.name.rsplit_once('.').map_or(&self.name, |(_, m)| m),
            _ => &self.name,
        }
    }

    /// Find a local by name.
    pub fn local_named(&self, name: &str) -> Option<LocalId> {
        self.locals
            .iter()
            .position(|l| l.name == name)
            .map(LocalId::new)
    }

    /// The span of the instruction at `bci`, or of the declaration.
    pub fn span_of(&self, bci: Option<Bci>) -> Span {
        bci.and_then(|b| self.debug.inst_spans.get(b as usize).copied())
            .unwrap_or(self.debug.span)
    }

    /// Whether this is an abstract method.
    pub fn is_abstract(&self) -> bool {
        matches!(
            self.kind,
            FuncKind::Method {
                is_abstract: true,
                ..
            }
        )
    }
}

impl Module {
    /// The class `id`. Panics if out of range (verified modules never are).
    pub fn class(&self, id: ClassId) -> &Class {
        &self.classes[id.index()]
    }
    /// The field `id`.
    pub fn field(&self, id: FieldId) -> &Field {
        &self.fields[id.index()]
    }
    /// The function `id`.
    pub fn func(&self, id: FuncId) -> &Function {
        &self.funcs[id.index()]
    }

    /// Find a class by name.
    pub fn class_named(&self, name: &str) -> Option<ClassId> {
        self.classes
            .iter()
            .position(|c| c.name == name)
            .map(ClassId::new)
    }

    /// Find a function (or method, `Class.m`) by name.
    pub fn func_named(&self, name: &str) -> Option<FuncId> {
        self.funcs
            .iter()
            .position(|f| f.name == name)
            .map(FuncId::new)
    }

    /// The kernels of the module.
    pub fn kernels(&self) -> impl Iterator<Item = FuncId> + '_ {
        (0..self.funcs.len())
            .map(FuncId::new)
            .filter(|&f| self.func(f).kind == FuncKind::Kernel)
    }

    /// Superclass chain of `c`, starting with `c` itself. Stops after
    /// `classes.len()` steps, so it terminates even on a cyclic (unverified)
    /// hierarchy, and at dangling ids.
    pub fn ancestors(&self, c: ClassId) -> impl Iterator<Item = ClassId> + '_ {
        let mut cur = Some(c).filter(|c| c.index() < self.classes.len());
        let mut steps = 0;
        std::iter::from_fn(move || {
            let c = cur?;
            steps += 1;
            cur = if steps > self.classes.len() {
                None
            } else {
                self.classes[c.index()]
                    .superclass
                    .filter(|s| s.index() < self.classes.len())
            };
            Some(c)
        })
    }

    /// Whether `sub` is `sup` or a subclass of it.
    pub fn is_subclass(&self, sub: ClassId, sup: ClassId) -> bool {
        self.ancestors(sub).any(|c| c == sup)
    }

    /// Find a field by name in `c` or its superclasses (nearest first).
    pub fn lookup_field(&self, c: ClassId, name: &str) -> Option<FieldId> {
        self.ancestors(c).find_map(|c| {
            self.class(c)
                .fields
                .iter()
                .copied()
                .find(|&f| self.fields.get(f.index()).is_some_and(|fd| fd.name == name))
        })
    }

    /// Find a method by short name in `c` or its superclasses (nearest first).
    pub fn lookup_method(&self, c: ClassId, name: &str) -> Option<FuncId> {
        self.ancestors(c).find_map(|c| {
            self.class(c).methods.iter().copied().find(|&m| {
                self.funcs
                    .get(m.index())
                    .is_some_and(|f| f.short_name() == name)
            })
        })
    }

    /// The virtual method table of `c`: slot → implementation. A method that
    /// overrides an inherited one takes its slot; a new one appends a slot.
    /// Only meaningful on a verified module.
    pub fn vtable(&self, c: ClassId) -> Vec<FuncId> {
        let chain: Vec<ClassId> = self.ancestors(c).collect();
        let mut table: Vec<FuncId> = Vec::new();
        for &k in chain.iter().rev() {
            for &m in &self.class(k).methods {
                let name = self.func(m).short_name();
                match table
                    .iter()
                    .position(|&t| self.func(t).short_name() == name)
                {
                    Some(slot) => table[slot] = m,
                    None => table.push(m),
                }
            }
        }
        table
    }

    /// The vtable slot of method `m` (the slot it introduced or overrides).
    pub fn vtable_slot(&self, m: FuncId) -> Option<usize> {
        let FuncKind::Method { class, .. } = self.func(m).kind else {
            return None;
        };
        let name = self.func(m).short_name();
        self.vtable(class)
            .iter()
            .position(|&t| self.func(t).short_name() == name)
    }

    /// The display form of a type, with class names.
    pub fn type_name(&self, t: Type) -> String {
        crate::printer::type_name(self, t)
    }
}
