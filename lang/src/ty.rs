//! The source language's types, their spelling in Rust syntax, and how
//! each maps to a bytecode type.
//!
//! | source | bytecode |
//! | --- | --- |
//! | `i32`, `i64`, `f32`, `f64` | the same |
//! | `bool` | `i32` holding 0 or 1 |
//! | `&[T]`, `&mut [T]` | `T[]` (a heap array; `&mut` allows element stores) |
//! | `C` (a class) | `C`, a reference that is never null when the front end made it |
//! | `Option<C>` | `C`, a reference that may be null |
//!
//! Integer and float literals without a suffix get the type their use
//! asks for, as in Rust; where nothing asks, an integer is `i32` and a
//! float `f64`.

use offload_ir::{ClassId, Elem, Module, Type};

/// A source type. `Var` is an unsuffixed literal's type before inference
/// settles it (see [`Vars`]).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Ty {
    /// `bool`.
    Bool,
    /// `i32`.
    I32,
    /// `i64`.
    I64,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
    /// `()`: what statements and functions without a result have.
    Unit,
    /// The type of `return`, `break`, `continue` and `throw!`: no value.
    Never,
    /// An object of a class; `nullable` for `Option<C>`.
    Obj {
        /// The class.
        class: ClassId,
        /// Spelled `Option<C>`: may be null.
        nullable: bool,
    },
    /// `None`, before it meets the `Option<C>` it stands for.
    Null,
    /// A slice: a heap array.
    Arr(ArrTy),
    /// An unsuffixed literal's type: an index into [`Vars`].
    Var(u32),
}

/// A slice type: `&[T]` or `&mut [T]`, nested for more dimensions.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct ArrTy {
    /// The innermost element type.
    pub elem: Elem,
    /// Whether class elements are spelled `Option<C>`.
    pub elem_nullable: bool,
    /// Dimensions (1 for `&[T]`).
    pub dims: u8,
    /// Spelled `&mut`: its elements may be stored.
    pub mutable: bool,
}

impl ArrTy {
    /// The type of one element.
    pub fn element(self) -> Ty {
        if self.dims > 1 {
            return Ty::Arr(ArrTy {
                dims: self.dims - 1,
                ..self
            });
        }
        match self.elem {
            Elem::I32 => Ty::I32,
            Elem::I64 => Ty::I64,
            Elem::F32 => Ty::F32,
            Elem::F64 => Ty::F64,
            Elem::Class(class) => Ty::Obj {
                class,
                nullable: self.elem_nullable,
            },
            Elem::Ref => Ty::Null,
        }
    }
}

impl Ty {
    /// The bytecode type of a value of this type (`None` for `()` and
    /// the never type). Unsettled literal types must be resolved first.
    pub fn ir(self) -> Option<Type> {
        Some(match self {
            Ty::Bool | Ty::I32 => Type::I32,
            Ty::I64 => Type::I64,
            Ty::F32 => Type::F32,
            Ty::F64 => Type::F64,
            Ty::Obj { class, .. } => Type::Class(class),
            Ty::Null => Type::Null,
            Ty::Arr(a) => Type::Array(a.elem, a.dims),
            Ty::Unit | Ty::Never | Ty::Var(_) => return None,
        })
    }

    /// Whether values of this type are integers (`i32`, `i64`).
    pub fn is_int(self) -> bool {
        matches!(self, Ty::I32 | Ty::I64)
    }

    /// Whether values of this type are floats.
    pub fn is_float(self) -> bool {
        matches!(self, Ty::F32 | Ty::F64)
    }

    /// Whether this is a number type.
    pub fn is_num(self) -> bool {
        self.is_int() || self.is_float()
    }

    /// Whether this is a reference (an object, a slice or `None`).
    pub fn is_ref(self) -> bool {
        matches!(self, Ty::Obj { .. } | Ty::Arr(_) | Ty::Null)
    }

    /// The element type of a slice of values of this type.
    pub fn slice_elem(self) -> Option<(Elem, bool, u8)> {
        Some(match self {
            Ty::I32 => (Elem::I32, false, 1),
            Ty::I64 => (Elem::I64, false, 1),
            Ty::F32 => (Elem::F32, false, 1),
            Ty::F64 => (Elem::F64, false, 1),
            Ty::Obj { class, nullable } => (Elem::Class(class), nullable, 1),
            Ty::Arr(a) if a.dims < offload_ir::types::MAX_ARRAY_DIMS => {
                (a.elem, a.elem_nullable, a.dims + 1)
            }
            _ => return None,
        })
    }

    /// The type as a user writes it.
    pub fn name(self, m: &Module) -> String {
        match self {
            Ty::Bool => "bool".into(),
            Ty::I32 => "i32".into(),
            Ty::I64 => "i64".into(),
            Ty::F32 => "f32".into(),
            Ty::F64 => "f64".into(),
            Ty::Unit => "()".into(),
            Ty::Never => "!".into(),
            Ty::Obj { class, nullable } => {
                let c = &m.class(class).name;
                if nullable {
                    format!("Option<{c}>")
                } else {
                    c.clone()
                }
            }
            Ty::Null => "Option<_>".into(),
            Ty::Arr(a) => {
                let mut inner = match a.elem {
                    Elem::I32 => "i32".to_string(),
                    Elem::I64 => "i64".into(),
                    Elem::F32 => "f32".into(),
                    Elem::F64 => "f64".into(),
                    Elem::Class(c) if a.elem_nullable => format!("Option<{}>", m.class(c).name),
                    Elem::Class(c) => m.class(c).name.clone(),
                    Elem::Ref => "_".into(),
                };
                let amp = if a.mutable { "&mut " } else { "&" };
                for _ in 0..a.dims {
                    inner = format!("{amp}[{inner}]");
                }
                inner
            }
            Ty::Var(_) => "{number}".into(),
        }
    }
}

/// What an unsuffixed literal's type is known to be so far.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum VarState {
    /// Some integer type (`{integer}`).
    Int,
    /// Some float type (`{float}`).
    Float,
    /// The same as another variable.
    Link(u32),
    /// Settled.
    Is(Ty),
}

/// The unsuffixed literals' types of one function, settled by their uses
/// (unification), and defaulted as Rust does at the end.
#[derive(Default, Debug)]
pub struct Vars(Vec<VarState>);

impl Vars {
    /// A new integer (`float`: float) literal type.
    pub fn fresh(&mut self, float: bool) -> Ty {
        self.0.push(if float {
            VarState::Float
        } else {
            VarState::Int
        });
        Ty::Var((self.0.len() - 1) as u32)
    }

    fn root(&self, mut v: u32) -> u32 {
        while let VarState::Link(n) = self.0[v as usize] {
            v = n;
        }
        v
    }

    /// `t` with every settled variable replaced by what it is.
    pub fn resolve(&self, t: Ty) -> Ty {
        match t {
            Ty::Var(v) => match self.0[self.root(v) as usize] {
                VarState::Is(t) => t,
                _ => Ty::Var(self.root(v)),
            },
            t => t,
        }
    }

    /// Whether `t` is an unsettled float literal type.
    pub fn is_float_var(&self, t: Ty) -> bool {
        matches!(self.resolve(t), Ty::Var(v) if self.0[v as usize] == VarState::Float)
    }

    /// Whether `t` is an integer type, settled or not.
    pub fn is_int(&self, t: Ty) -> bool {
        match self.resolve(t) {
            Ty::Var(v) => self.0[v as usize] == VarState::Int,
            t => t.is_int(),
        }
    }

    /// Whether `t` is a float type, settled or not.
    pub fn is_float(&self, t: Ty) -> bool {
        match self.resolve(t) {
            Ty::Var(v) => self.0[v as usize] == VarState::Float,
            t => t.is_float(),
        }
    }

    /// Whether `t` is a number type, settled or not.
    pub fn is_num(&self, t: Ty) -> bool {
        self.is_int(t) || self.is_float(t)
    }

    /// Make `a` and `b` the same type: `Some` of it, or `None` when they
    /// cannot be (`i32` against `f64`, a float literal against `i64`, ...).
    /// The never type unifies with anything.
    pub fn unify(&mut self, a: Ty, b: Ty) -> Option<Ty> {
        let (a, b) = (self.resolve(a), self.resolve(b));
        match (a, b) {
            _ if a == b => Some(a),
            (Ty::Never, t) | (t, Ty::Never) => Some(t),
            (Ty::Var(x), Ty::Var(y)) => {
                let (sx, sy) = (self.0[x as usize], self.0[y as usize]);
                if sx != sy {
                    return None;
                }
                self.0[x as usize] = VarState::Link(y);
                Some(Ty::Var(y))
            }
            (Ty::Var(v), t) | (t, Ty::Var(v)) => {
                let ok = match self.0[v as usize] {
                    VarState::Int => t.is_int(),
                    VarState::Float => t.is_float(),
                    _ => false,
                };
                if ok {
                    self.0[v as usize] = VarState::Is(t);
                    Some(t)
                } else {
                    None
                }
            }
            _ => None,
        }
    }

    /// `t` settled: unsettled integer literals default to `i32` and float
    /// literals to `f64`, as in Rust.
    pub fn settle(&self, t: Ty) -> Ty {
        match self.resolve(t) {
            Ty::Var(v) => match self.0[v as usize] {
                VarState::Float => Ty::F64,
                _ => Ty::I32,
            },
            t => t,
        }
    }
}
