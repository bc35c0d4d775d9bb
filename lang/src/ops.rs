//! Which bytecode instruction each typed source operator becomes: one
//! table per operator family, so the lowering never spells an opcode for
//! one type and forgets another.

use crate::ty::Ty;
use offload_ir::{Elem, F32, F64, Inst};

/// An arithmetic or bitwise operator.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Arith {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Rem,
    /// `&`
    And,
    /// `|`
    Or,
    /// `^`
    Xor,
    /// `<<`
    Shl,
    /// `>>` (arithmetic: the types are signed)
    Shr,
}

impl Arith {
    /// The operator from syn's, if it is one of these (compound
    /// assignment too: `+=` is `Add`).
    pub fn of(op: &syn::BinOp) -> Option<(Arith, bool)> {
        use syn::BinOp as B;
        Some(match op {
            B::Add(_) => (Arith::Add, false),
            B::Sub(_) => (Arith::Sub, false),
            B::Mul(_) => (Arith::Mul, false),
            B::Div(_) => (Arith::Div, false),
            B::Rem(_) => (Arith::Rem, false),
            B::BitAnd(_) => (Arith::And, false),
            B::BitOr(_) => (Arith::Or, false),
            B::BitXor(_) => (Arith::Xor, false),
            B::Shl(_) => (Arith::Shl, false),
            B::Shr(_) => (Arith::Shr, false),
            B::AddAssign(_) => (Arith::Add, true),
            B::SubAssign(_) => (Arith::Sub, true),
            B::MulAssign(_) => (Arith::Mul, true),
            B::DivAssign(_) => (Arith::Div, true),
            B::RemAssign(_) => (Arith::Rem, true),
            B::BitAndAssign(_) => (Arith::And, true),
            B::BitOrAssign(_) => (Arith::Or, true),
            B::BitXorAssign(_) => (Arith::Xor, true),
            B::ShlAssign(_) => (Arith::Shl, true),
            B::ShrAssign(_) => (Arith::Shr, true),
            _ => return None,
        })
    }

    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            Arith::Add => "+",
            Arith::Sub => "-",
            Arith::Mul => "*",
            Arith::Div => "/",
            Arith::Rem => "%",
            Arith::And => "&",
            Arith::Or => "|",
            Arith::Xor => "^",
            Arith::Shl => "<<",
            Arith::Shr => ">>",
        }
    }

    /// The instruction for operands of type `t`.
    pub fn inst(self, t: Ty) -> Result<Inst, String> {
        use Arith as A;
        Ok(match (self, t) {
            (A::Add, Ty::I32) => Inst::I32Add,
            (A::Sub, Ty::I32) => Inst::I32Sub,
            (A::Mul, Ty::I32) => Inst::I32Mul,
            (A::Div, Ty::I32) => Inst::I32Div,
            (A::Rem, Ty::I32) => Inst::I32Rem,
            (A::And, Ty::I32 | Ty::Bool) => Inst::I32And,
            (A::Or, Ty::I32 | Ty::Bool) => Inst::I32Or,
            (A::Xor, Ty::I32 | Ty::Bool) => Inst::I32Xor,
            (A::Shl, Ty::I32) => Inst::I32Shl,
            (A::Shr, Ty::I32) => Inst::I32Shr,
            (A::Add, Ty::I64) => Inst::I64Add,
            (A::Sub, Ty::I64) => Inst::I64Sub,
            (A::Mul, Ty::I64) => Inst::I64Mul,
            (A::Div, Ty::I64) => Inst::I64Div,
            (A::Rem, Ty::I64) => Inst::I64Rem,
            (A::And, Ty::I64) => Inst::I64And,
            (A::Or, Ty::I64) => Inst::I64Or,
            (A::Xor, Ty::I64) => Inst::I64Xor,
            (A::Shl, Ty::I64) => Inst::I64Shl,
            (A::Shr, Ty::I64) => Inst::I64Shr,
            (A::Add, Ty::F32) => Inst::F32Add,
            (A::Sub, Ty::F32) => Inst::F32Sub,
            (A::Mul, Ty::F32) => Inst::F32Mul,
            (A::Div, Ty::F32) => Inst::F32Div,
            (A::Rem, Ty::F32) => Inst::F32Rem,
            (A::Add, Ty::F64) => Inst::F64Add,
            (A::Sub, Ty::F64) => Inst::F64Sub,
            (A::Mul, Ty::F64) => Inst::F64Mul,
            (A::Div, Ty::F64) => Inst::F64Div,
            (A::Rem, Ty::F64) => Inst::F64Rem,
            _ => return Err(format!("`{}` does not apply to this type", self.symbol())),
        })
    }
}

/// A comparison operator.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Cmp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl Cmp {
    /// The comparison from syn's operator, if it is one.
    pub fn of(op: &syn::BinOp) -> Option<Cmp> {
        use syn::BinOp as B;
        Some(match op {
            B::Eq(_) => Cmp::Eq,
            B::Ne(_) => Cmp::Ne,
            B::Lt(_) => Cmp::Lt,
            B::Le(_) => Cmp::Le,
            B::Gt(_) => Cmp::Gt,
            B::Ge(_) => Cmp::Ge,
            _ => return None,
        })
    }

    /// The instruction comparing two operands of type `t` (pushes 0 or 1).
    pub fn inst(self, t: Ty) -> Result<Inst, String> {
        use Cmp as C;
        Ok(match (self, t) {
            (C::Eq, Ty::I32 | Ty::Bool) => Inst::I32Eq,
            (C::Ne, Ty::I32 | Ty::Bool) => Inst::I32Ne,
            (C::Lt, Ty::I32) => Inst::I32Lt,
            (C::Le, Ty::I32) => Inst::I32Le,
            (C::Gt, Ty::I32) => Inst::I32Gt,
            (C::Ge, Ty::I32) => Inst::I32Ge,
            (C::Eq, Ty::I64) => Inst::I64Eq,
            (C::Ne, Ty::I64) => Inst::I64Ne,
            (C::Lt, Ty::I64) => Inst::I64Lt,
            (C::Le, Ty::I64) => Inst::I64Le,
            (C::Gt, Ty::I64) => Inst::I64Gt,
            (C::Ge, Ty::I64) => Inst::I64Ge,
            (C::Eq, Ty::F32) => Inst::F32Eq,
            (C::Ne, Ty::F32) => Inst::F32Ne,
            (C::Lt, Ty::F32) => Inst::F32Lt,
            (C::Le, Ty::F32) => Inst::F32Le,
            (C::Gt, Ty::F32) => Inst::F32Gt,
            (C::Ge, Ty::F32) => Inst::F32Ge,
            (C::Eq, Ty::F64) => Inst::F64Eq,
            (C::Ne, Ty::F64) => Inst::F64Ne,
            (C::Lt, Ty::F64) => Inst::F64Lt,
            (C::Le, Ty::F64) => Inst::F64Le,
            (C::Gt, Ty::F64) => Inst::F64Gt,
            (C::Ge, Ty::F64) => Inst::F64Ge,
            (C::Eq, Ty::Obj { .. } | Ty::Arr(_) | Ty::Null) => Inst::RefEq,
            (C::Ne, Ty::Obj { .. } | Ty::Arr(_) | Ty::Null) => Inst::RefNe,
            _ => return Err("these values cannot be ordered".into()),
        })
    }
}

/// Negation of a number of type `t`.
pub fn neg(t: Ty) -> Result<Inst, String> {
    Ok(match t {
        Ty::I32 => Inst::I32Neg,
        Ty::I64 => Inst::I64Neg,
        Ty::F32 => Inst::F32Neg,
        Ty::F64 => Inst::F64Neg,
        _ => return Err("`-` applies to numbers".into()),
    })
}

/// The constant `v` (an integer literal's value) of type `t`.
pub fn int_const(v: i128, t: Ty) -> Result<Inst, String> {
    match t {
        Ty::I32 => i32::try_from(v)
            .map(|value| Inst::I32Const { value })
            .map_err(|_| format!("the literal {v} does not fit in `i32`")),
        Ty::I64 => i64::try_from(v)
            .map(|value| Inst::I64Const { value })
            .map_err(|_| format!("the literal {v} does not fit in `i64`")),
        _ => Err("an integer literal here must be `i32` or `i64`".into()),
    }
}

/// The constant written `digits` (a float literal, sign included) of
/// type `t`, rounded once from the decimal text.
pub fn float_const(digits: &str, t: Ty) -> Result<Inst, String> {
    match t {
        Ty::F32 => digits
            .parse::<f32>()
            .map(|v| Inst::F32Const { value: F32::new(v) })
            .map_err(|_| format!("`{digits}` is not an `f32`")),
        Ty::F64 => digits
            .parse::<f64>()
            .map(|v| Inst::F64Const { value: F64::new(v) })
            .map_err(|_| format!("`{digits}` is not an `f64`")),
        _ => Err("a float literal here must be `f32` or `f64`".into()),
    }
}

/// The conversion from `from` to `to` (`as`): `Ok(None)` when the bytecode
/// value needs no change.
pub fn convert(from: Ty, to: Ty) -> Result<Option<Inst>, String> {
    use Ty as T;
    Ok(Some(match (from, to) {
        (a, b) if a == b => return Ok(None),
        (T::Bool, T::I32) => return Ok(None),
        (T::Bool, T::I64) | (T::I32, T::I64) => Inst::I32ToI64,
        (T::I32, T::F32) => Inst::I32ToF32,
        (T::I32, T::F64) => Inst::I32ToF64,
        (T::I64, T::I32) => Inst::I64ToI32,
        (T::I64, T::F32) => Inst::I64ToF32,
        (T::I64, T::F64) => Inst::I64ToF64,
        (T::F32, T::I32) => Inst::F32ToI32,
        (T::F32, T::I64) => Inst::F32ToI64,
        (T::F32, T::F64) => Inst::F32ToF64,
        (T::F64, T::I32) => Inst::F64ToI32,
        (T::F64, T::I64) => Inst::F64ToI64,
        (T::F64, T::F32) => Inst::F64ToF32,
        _ => return Err("no `as` conversion between these types".into()),
    }))
}

/// Load an element of an array whose elements are `e` (innermost, at
/// one dimension) or arrays (`dims > 1`).
pub fn aload(e: Elem, dims: u8) -> Inst {
    match (e, dims) {
        (Elem::I32, 1) => Inst::I32ALoad,
        (Elem::I64, 1) => Inst::I64ALoad,
        (Elem::F32, 1) => Inst::F32ALoad,
        (Elem::F64, 1) => Inst::F64ALoad,
        _ => Inst::RefALoad,
    }
}

/// Store an element (see [`aload`]).
pub fn astore(e: Elem, dims: u8) -> Inst {
    match (e, dims) {
        (Elem::I32, 1) => Inst::I32AStore,
        (Elem::I64, 1) => Inst::I64AStore,
        (Elem::F32, 1) => Inst::F32AStore,
        (Elem::F64, 1) => Inst::F64AStore,
        _ => Inst::RefAStore,
    }
}
