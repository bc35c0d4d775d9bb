//! Typed indices and the type system of the bytecode.

use std::fmt;

macro_rules! entity {
    ($(#[$m:meta])* $name:ident, $what:literal) => {
        $(#[$m])*
        #[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub u32);

        impl $name {
            /// Make an index from a `usize` position.
            ///
            /// # Panics
            /// If `index` does not fit in `u32` (a module never gets that big:
            /// the parser and builders reject it first).
            pub fn new(index: usize) -> Self {
                Self(u32::try_from(index).expect(concat!($what, " index overflows u32")))
            }
            /// The position this index names.
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}{}", $what, self.0)
            }
        }
    };
}

entity!(
    /// A class of a [`Module`](crate::Module).
    ClassId,
    "class"
);
entity!(
    /// A field, global to the module (each field belongs to one class).
    FieldId,
    "field"
);
entity!(
    /// A function: static function, kernel or method.
    FuncId,
    "func"
);
entity!(
    /// A potential deopt site of a function (numbered in bytecode order).
    SiteId,
    "site"
);
entity!(
    /// A local of a function; parameters are the first locals.
    LocalId,
    "local"
);

/// Bytecode index: the position of an instruction in a function body.
pub type Bci = u32;

/// The element type of an innermost array dimension.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Elem {
    /// 32-bit integers.
    I32,
    /// 64-bit integers.
    I64,
    /// 32-bit IEEE floats.
    F32,
    /// 64-bit IEEE floats.
    F64,
    /// Any reference.
    Ref,
    /// References to a class (or its subclasses).
    Class(ClassId),
}

impl Elem {
    /// The element as a full type.
    pub fn to_type(self) -> Type {
        match self {
            Elem::I32 => Type::I32,
            Elem::I64 => Type::I64,
            Elem::F32 => Type::F32,
            Elem::F64 => Type::F64,
            Elem::Ref => Type::Ref,
            Elem::Class(c) => Type::Class(c),
        }
    }
}

/// A type of the bytecode.
///
/// Declarable types are `i32 i64 f32 f64`, `ref` (any reference), a class name,
/// and arrays `T[]` of any of them (arrays of arrays included). `Null` is the
/// verifier's type of the constant `ref.null`; it cannot be written.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Type {
    /// 32-bit two's complement integer.
    I32,
    /// 64-bit two's complement integer.
    I64,
    /// 32-bit IEEE float.
    F32,
    /// 64-bit IEEE float.
    F64,
    /// Any reference: the top of the reference types.
    Ref,
    /// The type of `null` only: a subtype of every reference type.
    Null,
    /// An instance of a class or of one of its subclasses.
    Class(ClassId),
    /// An array with `dims` dimensions (at least 1) of `Elem`.
    Array(Elem, u8),
}

/// Arrays nest at most this deep.
pub const MAX_ARRAY_DIMS: u8 = 8;

/// The machine-level kind of a value: what a register or a save-area slot holds.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Kind {
    /// 32-bit integer.
    I32,
    /// 64-bit integer.
    I64,
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// A heap reference (a 32-bit scaled offset at run time).
    Ref,
}

impl Kind {
    /// Name as written in the text form.
    pub fn name(self) -> &'static str {
        match self {
            Kind::I32 => "i32",
            Kind::I64 => "i64",
            Kind::F32 => "f32",
            Kind::F64 => "f64",
            Kind::Ref => "ref",
        }
    }
}

impl Type {
    /// The machine kind of values of this type.
    pub fn kind(self) -> Kind {
        match self {
            Type::I32 => Kind::I32,
            Type::I64 => Kind::I64,
            Type::F32 => Kind::F32,
            Type::F64 => Kind::F64,
            Type::Ref | Type::Null | Type::Class(_) | Type::Array(..) => Kind::Ref,
        }
    }

    /// Whether values of this type are heap references (or null).
    pub fn is_ref(self) -> bool {
        self.kind() == Kind::Ref
    }

    /// Whether this is `i32` or `i64`.
    pub fn is_int(self) -> bool {
        matches!(self, Type::I32 | Type::I64)
    }

    /// The element type of an array type, or `None` if this is not an array.
    pub fn array_elem(self) -> Option<Type> {
        match self {
            Type::Array(e, 1) => Some(e.to_type()),
            Type::Array(e, d) => Some(Type::Array(e, d - 1)),
            _ => None,
        }
    }

    /// The type of arrays of this type, or `None` for `null` or past
    /// [`MAX_ARRAY_DIMS`].
    pub fn array_of(self) -> Option<Type> {
        let elem = match self {
            Type::I32 => Elem::I32,
            Type::I64 => Elem::I64,
            Type::F32 => Elem::F32,
            Type::F64 => Elem::F64,
            Type::Ref => Elem::Ref,
            Type::Class(c) => Elem::Class(c),
            Type::Array(e, d) if d < MAX_ARRAY_DIMS => return Some(Type::Array(e, d + 1)),
            Type::Array(..) | Type::Null => return None,
        };
        Some(Type::Array(elem, 1))
    }

    /// The type for a kind, with `ref` for references.
    pub fn of_kind(kind: Kind) -> Type {
        match kind {
            Kind::I32 => Type::I32,
            Kind::I64 => Type::I64,
            Kind::F32 => Type::F32,
            Kind::F64 => Type::F64,
            Kind::Ref => Type::Ref,
        }
    }
}

/// A bit-exact `f32` constant (so that modules with NaN constants compare equal
/// to themselves and round-trip).
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub struct F32(pub u32);

/// A bit-exact `f64` constant.
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub struct F64(pub u64);

impl F32 {
    /// From a float value.
    pub fn new(v: f32) -> Self {
        F32(v.to_bits())
    }
    /// The float value.
    pub fn get(self) -> f32 {
        f32::from_bits(self.0)
    }
}

impl F64 {
    /// From a float value.
    pub fn new(v: f64) -> Self {
        F64(v.to_bits())
    }
    /// The float value.
    pub fn get(self) -> f64 {
        f64::from_bits(self.0)
    }
}

impl fmt::Debug for F32 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.get())
    }
}

impl fmt::Debug for F64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.get())
    }
}

/// The built-in exceptions that `throw` raises and that checks raise implicitly.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum ExceptionKind {
    /// A null reference was dereferenced.
    NullPointer,
    /// An array index was outside `0..length`.
    IndexOutOfBounds,
    /// Integer division or remainder by zero.
    Arithmetic,
    /// A `checkcast` failed.
    ClassCast,
    /// `newarray` with a negative length.
    NegativeArraySize,
    /// The heap is exhausted even after growing to its maximum.
    OutOfMemory,
    /// A kernel rejected one of its arguments.
    IllegalArgument,
    /// A kernel found itself in a state it does not handle.
    IllegalState,
    /// Calls nested deeper than the runtime allows (runaway recursion).
    StackOverflow,
}

impl ExceptionKind {
    /// Every kind, in declaration order.
    pub const ALL: [ExceptionKind; 9] = [
        ExceptionKind::NullPointer,
        ExceptionKind::IndexOutOfBounds,
        ExceptionKind::Arithmetic,
        ExceptionKind::ClassCast,
        ExceptionKind::NegativeArraySize,
        ExceptionKind::OutOfMemory,
        ExceptionKind::IllegalArgument,
        ExceptionKind::IllegalState,
        ExceptionKind::StackOverflow,
    ];

    /// Name as written after `throw`.
    pub fn name(self) -> &'static str {
        match self {
            ExceptionKind::NullPointer => "NullPointer",
            ExceptionKind::IndexOutOfBounds => "IndexOutOfBounds",
            ExceptionKind::Arithmetic => "Arithmetic",
            ExceptionKind::ClassCast => "ClassCast",
            ExceptionKind::NegativeArraySize => "NegativeArraySize",
            ExceptionKind::OutOfMemory => "OutOfMemory",
            ExceptionKind::IllegalArgument => "IllegalArgument",
            ExceptionKind::IllegalState => "IllegalState",
            ExceptionKind::StackOverflow => "StackOverflow",
        }
    }

    /// Parse a name written after `throw`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_types_stay_small() {
        assert_eq!(std::mem::size_of::<Type>(), 12);
        assert_eq!(std::mem::size_of::<Elem>(), 8);
        assert_eq!(std::mem::size_of::<ClassId>(), 4);
    }

    #[test]
    fn arrays_nest_and_unnest() {
        let t = Type::F32.array_of().unwrap().array_of().unwrap();
        assert_eq!(t, Type::Array(Elem::F32, 2));
        assert_eq!(t.array_elem(), Some(Type::Array(Elem::F32, 1)));
        assert_eq!(t.array_elem().unwrap().array_elem(), Some(Type::F32));
        assert_eq!(Type::Null.array_of(), None);
        assert!(Type::Array(Elem::I32, 1).is_ref());
    }
}
