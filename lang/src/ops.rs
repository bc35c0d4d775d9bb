//! Which bytecode instruction each typed source operator becomes, found in
//! the instruction table by its operation class (`Op::Binary(I32, Add)` is
//! `i32.add`): the front end derives its arithmetic from the one table, as
//! every executor does, and spells no opcode of its own.

use crate::ty::Ty;
use offload_ir::isa::{BinOp, CmpOp, Op, UnOp};
use offload_ir::{Elem, F32, F64, Inst, Kind, Opcode};
use std::collections::HashMap;
use std::sync::OnceLock;

/// The operand-free instruction that computes `op`, from the table.
pub fn inst_of(op: Op) -> Option<Inst> {
    static TABLE: OnceLock<HashMap<Op, Inst>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            Opcode::ALL
                .iter()
                .filter(|o| o.op() != Op::Other)
                .filter_map(|o| Some((o.op(), o.bare()?)))
                .collect()
        })
        .get(&op)
        .copied()
}

/// The bytecode kind of values of type `t` (`bool` is an `i32`).
pub fn kind_of(t: Ty) -> Option<Kind> {
    Some(match t {
        Ty::Bool | Ty::I32 => Kind::I32,
        Ty::I64 => Kind::I64,
        Ty::F32 => Kind::F32,
        Ty::F64 => Kind::F64,
        Ty::Obj { .. } | Ty::Arr(_) | Ty::Null => Kind::Ref,
        Ty::Unit | Ty::Never | Ty::Var(_) => return None,
    })
}

/// The arithmetic or bitwise operation of a source operator (compound
/// assignment too: `+=` gives `(Add, true)`).
pub fn arith_of(op: &syn::BinOp) -> Option<(BinOp, bool)> {
    use syn::BinOp as B;
    Some(match op {
        B::Add(_) => (BinOp::Add, false),
        B::Sub(_) => (BinOp::Sub, false),
        B::Mul(_) => (BinOp::Mul, false),
        B::Div(_) => (BinOp::Div, false),
        B::Rem(_) => (BinOp::Rem, false),
        B::BitAnd(_) => (BinOp::And, false),
        B::BitOr(_) => (BinOp::Or, false),
        B::BitXor(_) => (BinOp::Xor, false),
        B::Shl(_) => (BinOp::Shl, false),
        B::Shr(_) => (BinOp::Shr, false),
        B::AddAssign(_) => (BinOp::Add, true),
        B::SubAssign(_) => (BinOp::Sub, true),
        B::MulAssign(_) => (BinOp::Mul, true),
        B::DivAssign(_) => (BinOp::Div, true),
        B::RemAssign(_) => (BinOp::Rem, true),
        B::BitAndAssign(_) => (BinOp::And, true),
        B::BitOrAssign(_) => (BinOp::Or, true),
        B::BitXorAssign(_) => (BinOp::Xor, true),
        B::ShlAssign(_) => (BinOp::Shl, true),
        B::ShrAssign(_) => (BinOp::Shr, true),
        _ => return None,
    })
}

/// An operation's source operator, for messages.
pub fn symbol(op: BinOp) -> &'static str {
    match op {
        BinOp::Add => "+",
        BinOp::Sub => "-",
        BinOp::Mul => "*",
        BinOp::Div => "/",
        BinOp::Rem => "%",
        BinOp::And => "&",
        BinOp::Or => "|",
        BinOp::Xor => "^",
        BinOp::Shl => "<<",
        BinOp::Shr => ">>",
        _ => "this operator",
    }
}

/// Whether `op` is bitwise (it applies to `bool` too).
pub fn is_bitwise(op: BinOp) -> bool {
    matches!(op, BinOp::And | BinOp::Or | BinOp::Xor)
}

/// The instruction of `op` on operands of type `t` (on `bool`, only the
/// bitwise operations).
pub fn arith(op: BinOp, t: Ty) -> Result<Inst, String> {
    kind_of(t)
        .filter(|_| t != Ty::Bool || is_bitwise(op))
        .and_then(|k| inst_of(Op::Binary(k, op)))
        .ok_or_else(|| format!("`{}` does not apply to this type", symbol(op)))
}

/// The comparison of a source operator, if it is one.
pub fn cmp_of(op: &syn::BinOp) -> Option<CmpOp> {
    use syn::BinOp as B;
    Some(match op {
        B::Eq(_) => CmpOp::Eq,
        B::Ne(_) => CmpOp::Ne,
        B::Lt(_) => CmpOp::Lt,
        B::Le(_) => CmpOp::Le,
        B::Gt(_) => CmpOp::Gt,
        B::Ge(_) => CmpOp::Ge,
        _ => return None,
    })
}

/// The instruction comparing two operands of type `t` (pushes 0 or 1);
/// `bool`s and references compare only for equality.
pub fn compare(c: CmpOp, t: Ty) -> Result<Inst, String> {
    let equality = matches!(c, CmpOp::Eq | CmpOp::Ne);
    kind_of(t)
        .filter(|_| t != Ty::Bool || equality)
        .and_then(|k| inst_of(Op::Compare(k, c)))
        .ok_or_else(|| "these values cannot be ordered".into())
}

/// Negation of a number of type `t`.
pub fn neg(t: Ty) -> Result<Inst, String> {
    kind_of(t)
        .filter(|_| t.is_num())
        .and_then(|k| inst_of(Op::Unary(k, UnOp::Neg)))
        .ok_or_else(|| "`-` applies to numbers".into())
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
    let no = || "no `as` conversion between these types".to_string();
    if to == Ty::Bool || !(from.is_num() || from == Ty::Bool) || !to.is_num() {
        return Err(no());
    }
    let (a, b) = (kind_of(from).ok_or_else(no)?, kind_of(to).ok_or_else(no)?);
    if a == b {
        return Ok(None);
    }
    inst_of(Op::Convert(a, b)).map(Some).ok_or_else(no)
}

/// A math method of numbers: what it computes, by the table's classes.
#[derive(Copy, Clone, Debug)]
pub enum Math {
    /// One operand.
    Unary(UnOp),
    /// Two operands.
    Binary(BinOp),
    /// `a * b + c`, rounded once.
    Fma,
}

/// The math methods of floats: name, operands (the receiver included),
/// and operation.
pub const FLOAT_METHODS: [(&str, usize, Math); 12] = [
    ("sqrt", 1, Math::Unary(UnOp::Sqrt)),
    ("abs", 1, Math::Unary(UnOp::Abs)),
    ("floor", 1, Math::Unary(UnOp::Floor)),
    ("ceil", 1, Math::Unary(UnOp::Ceil)),
    ("exp", 1, Math::Unary(UnOp::Exp)),
    ("ln", 1, Math::Unary(UnOp::Log)),
    ("sin", 1, Math::Unary(UnOp::Sin)),
    ("cos", 1, Math::Unary(UnOp::Cos)),
    ("min", 2, Math::Binary(BinOp::Min)),
    ("max", 2, Math::Binary(BinOp::Max)),
    ("powf", 2, Math::Binary(BinOp::Pow)),
    ("mul_add", 3, Math::Fma),
];

/// The methods of integers (their arithmetic wraps, so `wrapping_add` is
/// `+`).
pub const INT_METHODS: [(&str, usize, Math); 6] = [
    ("abs", 1, Math::Unary(UnOp::Abs)),
    ("wrapping_abs", 1, Math::Unary(UnOp::Abs)),
    ("min", 2, Math::Binary(BinOp::Min)),
    ("max", 2, Math::Binary(BinOp::Max)),
    ("wrapping_add", 2, Math::Binary(BinOp::Add)),
    ("wrapping_sub", 2, Math::Binary(BinOp::Sub)),
];

impl Math {
    /// The instruction for operands of type `t`.
    pub fn inst(self, t: Ty) -> Result<Inst, String> {
        let k = kind_of(t)
            .filter(|_| t.is_num())
            .ok_or("a math method applies to numbers")?;
        inst_of(match self {
            Math::Unary(u) => Op::Unary(k, u),
            Math::Binary(b) => Op::Binary(k, b),
            Math::Fma => Op::Fma(k),
        })
        .ok_or_else(|| "no such method for this type".into())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_come_from_the_table() {
        assert_eq!(arith(BinOp::Add, Ty::F32), Ok(Inst::F32Add));
        assert_eq!(arith(BinOp::Shr, Ty::I64), Ok(Inst::I64Shr));
        assert_eq!(arith(BinOp::Xor, Ty::Bool), Ok(Inst::I32Xor));
        assert!(arith(BinOp::Add, Ty::Bool).is_err());
        assert!(
            arith(BinOp::And, Ty::F64).is_err(),
            "no f64.and in the table"
        );
        assert_eq!(compare(CmpOp::Le, Ty::I64), Ok(Inst::I64Le));
        assert_eq!(compare(CmpOp::Ne, Ty::Null), Ok(Inst::RefNe));
        assert!(compare(CmpOp::Lt, Ty::Bool).is_err());
        assert_eq!(neg(Ty::F64), Ok(Inst::F64Neg));
        assert_eq!(convert(Ty::I32, Ty::F64), Ok(Some(Inst::I32ToF64)));
        assert_eq!(convert(Ty::Bool, Ty::I64), Ok(Some(Inst::I32ToI64)));
        assert_eq!(convert(Ty::Bool, Ty::I32), Ok(None));
        assert!(convert(Ty::I32, Ty::Bool).is_err());
        assert_eq!(Math::Fma.inst(Ty::F32), Ok(Inst::F32Fma));
        assert_eq!(Math::Unary(UnOp::Log).inst(Ty::F64), Ok(Inst::F64Log));
        assert!(Math::Unary(UnOp::Sqrt).inst(Ty::I32).is_err());
    }
}
