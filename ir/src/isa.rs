//! The instruction set, defined once.
//!
//! [`for_each_op!`](crate::for_each_op) holds the one table of instructions: for
//! each, its doc line, its variant name and operands, its mnemonic, its stack
//! effect, the hazards that make it a potential deopt site, and its control flow.
//! The [`Inst`] and [`Opcode`] enums, the mnemonics, the assembler's operand
//! parsing, the printer, the stack effects and the site flags are all expanded
//! from it; later crates expand it again for interpreter dispatch.
//!
//! Instructions are typed, wasm style: `i32.add`, `f64.sqrt`, `i64.to_f32`.
//! Locals are declared with a type, so `load`/`store` are untyped.

use crate::types::{
    Bci, ClassId, Elem, ExceptionKind, F32, F64, FieldId, FuncId, Kind, LocalId, Type,
};

/// A branch target: the bytecode index of an instruction of the same function.
/// The text form names it with a label.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct Label(pub Bci);

/// The shape of one stack slot in a fixed stack effect.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Sig {
    /// An `i32`.
    I32,
    /// An `i64`.
    I64,
    /// An `f32`.
    F32,
    /// An `f64`.
    F64,
    /// Any reference, null included.
    Ref,
    /// Any array (or null).
    Array,
    /// A one-dimensional array of exactly this element (or null).
    ArrayOf(Elem),
}

/// The stack effect of an instruction.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Effect {
    /// Pops `pops` (the last is the top of the stack) and pushes `pushes`.
    Fixed {
        /// Popped slots, bottom first.
        pops: &'static [Sig],
        /// Pushed slots, bottom first.
        pushes: &'static [Sig],
    },
    /// Depends on the operands or on the types on the stack; the verifier
    /// computes it. The string describes it for documentation.
    Special(&'static str),
}

/// Why an instruction can stop a workitem: the hazards that make it a
/// potential deopt site. A bit set over the constants in [`hz`].
#[derive(Copy, Clone, PartialEq, Eq, Hash, Default)]
pub struct Hazards(pub u16);

/// The hazard bits used in the instruction table.
pub mod hz {
    /// No hazard.
    pub const NONE: u16 = 0;
    /// Dereferences a reference that may be null.
    pub const NULL_CHECK: u16 = 1 << 0;
    /// Indexes an array.
    pub const BOUNDS_CHECK: u16 = 1 << 1;
    /// Divides integers.
    pub const DIV_CHECK: u16 = 1 << 2;
    /// Casts a reference.
    pub const CAST_CHECK: u16 = 1 << 3;
    /// Allocates an array whose length may be negative.
    pub const NEG_SIZE_CHECK: u16 = 1 << 4;
    /// Allocates on the heap (may fail or need a TLAB refill).
    pub const ALLOCATES: u16 = 1 << 5;
    /// Calls a function (whose own sites may deopt).
    pub const CALLS: u16 = 1 << 6;
    /// Throws explicitly.
    pub const THROWS: u16 = 1 << 7;
    /// A transcendental some devices hand to the host for part of its domain
    /// (sine and cosine of huge arguments on the GPU).
    pub const HOST_MATH: u16 = 1 << 8;
}

impl Hazards {
    /// Whether every bit of `bits` is set.
    pub fn has(self, bits: u16) -> bool {
        self.0 & bits == bits && bits != 0
    }
    /// Whether no hazard is set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// Names of the set bits, for printing.
    pub fn names(self) -> Vec<&'static str> {
        const NAMES: [(u16, &str); 9] = [
            (hz::NULL_CHECK, "null"),
            (hz::BOUNDS_CHECK, "bounds"),
            (hz::DIV_CHECK, "div"),
            (hz::CAST_CHECK, "cast"),
            (hz::NEG_SIZE_CHECK, "negsize"),
            (hz::ALLOCATES, "alloc"),
            (hz::CALLS, "call"),
            (hz::THROWS, "throw"),
            (hz::HOST_MATH, "hostmath"),
        ];
        NAMES
            .iter()
            .filter(|(b, _)| self.0 & b != 0)
            .map(|(_, n)| *n)
            .collect()
    }
}

impl std::fmt::Debug for Hazards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.names().join("|"))
    }
}

/// What an arithmetic instruction computes: the operation class that the
/// executors (the interpreter, both JIT backends, the random-program
/// generator, the vectorizer) derive their arithmetic arms from. Adding an
/// arithmetic opcode with a fixed effect is its table row; each executor
/// then has one arm per operation ([`BinOp`], [`UnOp`], [`CmpOp`]), which
/// the compiler asks for when the operation is new.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Op {
    /// Pops two operands of the kind, pushes `a op b` of the kind. An
    /// integer `div`/`rem` also has the `DIV_CHECK` hazard.
    Binary(Kind, BinOp),
    /// Pops one operand of the kind, pushes `op a` of the kind.
    Unary(Kind, UnOp),
    /// Pops `a b c` of the kind, pushes `a * b + c` rounded once.
    Fma(Kind),
    /// Pops two operands of the kind, pushes `a op b` as an `i32` 0 or 1.
    Compare(Kind, CmpOp),
    /// Pops a value of the first kind, pushes it converted to the second.
    Convert(Kind, Kind),
    /// Not arithmetic: each executor handles the instruction by name.
    Other,
}

/// A binary arithmetic operation ([`Op::Binary`]); what it means for each
/// kind is the instruction's doc line.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum BinOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
    /// `a % b`.
    Rem,
    /// Bitwise and.
    And,
    /// Bitwise or.
    Or,
    /// Bitwise exclusive or.
    Xor,
    /// Shift left.
    Shl,
    /// Arithmetic shift right.
    Shr,
    /// Logical shift right.
    Ushr,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// `a` raised to `b`.
    Pow,
}

/// A unary arithmetic operation ([`Op::Unary`]).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum UnOp {
    /// Negation.
    Neg,
    /// Absolute value.
    Abs,
    /// Square root.
    Sqrt,
    /// Round toward negative infinity.
    Floor,
    /// Round toward positive infinity.
    Ceil,
    /// e raised to the operand.
    Exp,
    /// Natural logarithm.
    Log,
    /// Sine.
    Sin,
    /// Cosine.
    Cos,
}

/// A comparison ([`Op::Compare`]): signed for integers, ordered for floats
/// except `Ne` (true when either is NaN), identity for references.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum CmpOp {
    /// Equal.
    Eq,
    /// Not equal.
    Ne,
    /// Less than.
    Lt,
    /// Less or equal.
    Le,
    /// Greater than.
    Gt,
    /// Greater or equal.
    Ge,
}

/// How control leaves an instruction.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Flow {
    /// Falls through to the next instruction.
    Next,
    /// Always jumps to its target.
    Jump,
    /// Jumps to its target or falls through.
    Branch,
    /// Returns from the function.
    Return,
    /// Throws; control does not continue in this function.
    Throw,
}

/// Reads the operands of an instruction (implemented by the assembler).
pub trait OperandReader {
    /// The reader's error.
    type Error;
    /// An `i32` immediate.
    fn read_i32(&mut self) -> Result<i32, Self::Error>;
    /// An `i64` immediate.
    fn read_i64(&mut self) -> Result<i64, Self::Error>;
    /// An `f32` immediate.
    fn read_f32(&mut self) -> Result<F32, Self::Error>;
    /// An `f64` immediate.
    fn read_f64(&mut self) -> Result<F64, Self::Error>;
    /// A local, by name.
    fn read_local(&mut self) -> Result<LocalId, Self::Error>;
    /// A label.
    fn read_label(&mut self) -> Result<Label, Self::Error>;
    /// A type.
    fn read_type(&mut self) -> Result<Type, Self::Error>;
    /// A class name.
    fn read_class(&mut self) -> Result<ClassId, Self::Error>;
    /// A field, `Class.field`.
    fn read_field(&mut self) -> Result<FieldId, Self::Error>;
    /// A function or method, `name` or `Class.method`.
    fn read_func(&mut self) -> Result<FuncId, Self::Error>;
    /// A built-in exception name.
    fn read_exception(&mut self) -> Result<ExceptionKind, Self::Error>;
}

/// Writes the operands of an instruction (implemented by the printer).
pub trait OperandWriter {
    /// An `i32` immediate.
    fn write_i32(&mut self, v: i32);
    /// An `i64` immediate.
    fn write_i64(&mut self, v: i64);
    /// An `f32` immediate.
    fn write_f32(&mut self, v: F32);
    /// An `f64` immediate.
    fn write_f64(&mut self, v: F64);
    /// A local.
    fn write_local(&mut self, v: LocalId);
    /// A label.
    fn write_label(&mut self, v: Label);
    /// A type.
    fn write_type(&mut self, v: Type);
    /// A class.
    fn write_class(&mut self, v: ClassId);
    /// A field.
    fn write_field(&mut self, v: FieldId);
    /// A function.
    fn write_func(&mut self, v: FuncId);
    /// An exception kind.
    fn write_exception(&mut self, v: ExceptionKind);
}

/// An operand type of the instruction table.
pub trait Operand: Sized {
    /// Read one operand.
    fn read<R: OperandReader>(r: &mut R) -> Result<Self, R::Error>;
    /// Write one operand.
    fn write<W: OperandWriter>(&self, w: &mut W);
}

macro_rules! operand {
    ($($t:ty => $read:ident, $write:ident;)*) => {$(
        impl Operand for $t {
            fn read<R: OperandReader>(r: &mut R) -> Result<Self, R::Error> {
                r.$read()
            }
            fn write<W: OperandWriter>(&self, w: &mut W) {
                w.$write(*self)
            }
        }
    )*};
}

operand! {
    i32 => read_i32, write_i32;
    i64 => read_i64, write_i64;
    F32 => read_f32, write_f32;
    F64 => read_f64, write_f64;
    LocalId => read_local, write_local;
    Label => read_label, write_label;
    Type => read_type, write_type;
    ClassId => read_class, write_class;
    FieldId => read_field, write_field;
    FuncId => read_func, write_func;
    ExceptionKind => read_exception, write_exception;
}

/// The instruction table. Invokes `$m!` with one entry per instruction:
///
/// ```text
/// /// doc line
/// Name { operand: Type, .. } = "mnemonic", effect, hazards, flow, op;
/// ```
///
/// `effect` is `fixed!([pops] -> [pushes])` or `special!("description")`;
/// `hazards` is an expression over the constants of [`hz`](crate::isa::hz);
/// `flow` names a [`Flow`](crate::isa::Flow) variant; `op` is the
/// instruction's [`Op`](crate::isa::Op): `Binary(I32, Add)`, `Compare(F64,
/// Lt)`, `Convert(I32, F64)`, ... for the arithmetic whose executors derive
/// their arms from the table, `Other` for the rest.
///
/// `for_each_op!(m, tokens..)` passes `[tokens..]` to `m!` before the rows,
/// so that an executor can build one `match` of its own arms and an arm per
/// arithmetic row (the interpreter's step does).
#[macro_export]
macro_rules! for_each_op {
    ($m:ident $(, $($extra:tt)*)?) => {
        $m! {
            $([$($extra)*])?
            /// Push the constant `value`.
            I32Const { value: i32 } = "i32.const", fixed!([] -> [I32]), NONE, Next, Other;
            /// Push the constant `value`.
            I64Const { value: i64 } = "i64.const", fixed!([] -> [I64]), NONE, Next, Other;
            /// Push the constant `value` (bit-exact).
            F32Const { value: F32 } = "f32.const", fixed!([] -> [F32]), NONE, Next, Other;
            /// Push the constant `value` (bit-exact).
            F64Const { value: F64 } = "f64.const", fixed!([] -> [F64]), NONE, Next, Other;
            /// Push `null`.
            RefNull = "ref.null", special!("[] -> [null]"), NONE, Next, Other;
            /// Push the value of local `local`; it must be assigned on every path.
            Load { local: LocalId } = "load", special!("[] -> [T] where T is the local's current type"), NONE, Next, Other;
            /// Pop a value into local `local`; it must be assignable to the local's declared type.
            Store { local: LocalId } = "store", special!("[T] -> [] where T is assignable to the local"), NONE, Next, Other;
            /// Add `delta` to the integer local `local` (`i32` or `i64`) without touching the stack.
            Inc { local: LocalId, delta: i32 } = "inc", special!("[] -> []"), NONE, Next, Other;
            /// Duplicate the top value.
            Dup = "dup", special!("[T] -> [T T]"), NONE, Next, Other;
            /// Drop the top value.
            Pop = "pop", special!("[T] -> []"), NONE, Next, Other;
            /// Swap the two top values.
            Swap = "swap", special!("[A B] -> [B A]"), NONE, Next, Other;
            /// Add (wrapping).
            I32Add = "i32.add", fixed!([I32, I32] -> [I32]), NONE, Next, Binary(I32, Add);
            /// Subtract (wrapping).
            I32Sub = "i32.sub", fixed!([I32, I32] -> [I32]), NONE, Next, Binary(I32, Sub);
            /// Multiply (wrapping).
            I32Mul = "i32.mul", fixed!([I32, I32] -> [I32]), NONE, Next, Binary(I32, Mul);
            /// Signed division, truncating; `MIN / -1` wraps to `MIN`. Throws `Arithmetic` on a zero divisor.
            I32Div = "i32.div", fixed!([I32, I32] -> [I32]), DIV_CHECK, Next, Binary(I32, Div);
            /// Signed remainder with the sign of the dividend; `MIN % -1` is 0. Throws `Arithmetic` on a zero divisor.
            I32Rem = "i32.rem", fixed!([I32, I32] -> [I32]), DIV_CHECK, Next, Binary(I32, Rem);
            /// Negate (wrapping).
            I32Neg = "i32.neg", fixed!([I32] -> [I32]), NONE, Next, Unary(I32, Neg);
            /// Bitwise and.
            I32And = "i32.and", fixed!([I32, I32] -> [I32]), NONE, Next, Binary(I32, And);
            /// Bitwise or.
            I32Or = "i32.or", fixed!([I32, I32] -> [I32]), NONE, Next, Binary(I32, Or);
            /// Bitwise exclusive or.
            I32Xor = "i32.xor", fixed!([I32, I32] -> [I32]), NONE, Next, Binary(I32, Xor);
            /// Shift left by the low bits of the count (`count & 31`).
            I32Shl = "i32.shl", fixed!([I32, I32] -> [I32]), NONE, Next, Binary(I32, Shl);
            /// Arithmetic shift right by `count & 31`.
            I32Shr = "i32.shr", fixed!([I32, I32] -> [I32]), NONE, Next, Binary(I32, Shr);
            /// Logical shift right by `count & 31`.
            I32Ushr = "i32.ushr", fixed!([I32, I32] -> [I32]), NONE, Next, Binary(I32, Ushr);
            /// Add (wrapping).
            I64Add = "i64.add", fixed!([I64, I64] -> [I64]), NONE, Next, Binary(I64, Add);
            /// Subtract (wrapping).
            I64Sub = "i64.sub", fixed!([I64, I64] -> [I64]), NONE, Next, Binary(I64, Sub);
            /// Multiply (wrapping).
            I64Mul = "i64.mul", fixed!([I64, I64] -> [I64]), NONE, Next, Binary(I64, Mul);
            /// Signed division, truncating; `MIN / -1` wraps to `MIN`. Throws `Arithmetic` on a zero divisor.
            I64Div = "i64.div", fixed!([I64, I64] -> [I64]), DIV_CHECK, Next, Binary(I64, Div);
            /// Signed remainder with the sign of the dividend; `MIN % -1` is 0. Throws `Arithmetic` on a zero divisor.
            I64Rem = "i64.rem", fixed!([I64, I64] -> [I64]), DIV_CHECK, Next, Binary(I64, Rem);
            /// Negate (wrapping).
            I64Neg = "i64.neg", fixed!([I64] -> [I64]), NONE, Next, Unary(I64, Neg);
            /// Bitwise and.
            I64And = "i64.and", fixed!([I64, I64] -> [I64]), NONE, Next, Binary(I64, And);
            /// Bitwise or.
            I64Or = "i64.or", fixed!([I64, I64] -> [I64]), NONE, Next, Binary(I64, Or);
            /// Bitwise exclusive or.
            I64Xor = "i64.xor", fixed!([I64, I64] -> [I64]), NONE, Next, Binary(I64, Xor);
            /// Shift left by the low bits of the count (`count & 63`).
            I64Shl = "i64.shl", fixed!([I64, I64] -> [I64]), NONE, Next, Binary(I64, Shl);
            /// Arithmetic shift right by `count & 63`.
            I64Shr = "i64.shr", fixed!([I64, I64] -> [I64]), NONE, Next, Binary(I64, Shr);
            /// Logical shift right by `count & 63`.
            I64Ushr = "i64.ushr", fixed!([I64, I64] -> [I64]), NONE, Next, Binary(I64, Ushr);
            /// Add (IEEE, round to nearest even).
            F32Add = "f32.add", fixed!([F32, F32] -> [F32]), NONE, Next, Binary(F32, Add);
            /// Subtract (IEEE, round to nearest even).
            F32Sub = "f32.sub", fixed!([F32, F32] -> [F32]), NONE, Next, Binary(F32, Sub);
            /// Multiply (IEEE, round to nearest even).
            F32Mul = "f32.mul", fixed!([F32, F32] -> [F32]), NONE, Next, Binary(F32, Mul);
            /// IEEE division.
            F32Div = "f32.div", fixed!([F32, F32] -> [F32]), NONE, Next, Binary(F32, Div);
            /// Remainder truncating toward zero (C `fmod`, Java `%`).
            F32Rem = "f32.rem", fixed!([F32, F32] -> [F32]), NONE, Next, Binary(F32, Rem);
            /// Negate (flips the sign bit).
            F32Neg = "f32.neg", fixed!([F32] -> [F32]), NONE, Next, Unary(F32, Neg);
            /// Add (IEEE, round to nearest even).
            F64Add = "f64.add", fixed!([F64, F64] -> [F64]), NONE, Next, Binary(F64, Add);
            /// Subtract (IEEE, round to nearest even).
            F64Sub = "f64.sub", fixed!([F64, F64] -> [F64]), NONE, Next, Binary(F64, Sub);
            /// Multiply (IEEE, round to nearest even).
            F64Mul = "f64.mul", fixed!([F64, F64] -> [F64]), NONE, Next, Binary(F64, Mul);
            /// IEEE division.
            F64Div = "f64.div", fixed!([F64, F64] -> [F64]), NONE, Next, Binary(F64, Div);
            /// Remainder truncating toward zero (C `fmod`, Java `%`).
            F64Rem = "f64.rem", fixed!([F64, F64] -> [F64]), NONE, Next, Binary(F64, Rem);
            /// Negate (flips the sign bit).
            F64Neg = "f64.neg", fixed!([F64] -> [F64]), NONE, Next, Unary(F64, Neg);
            /// Push 1 if the operands are equal (signed), else 0.
            I32Eq = "i32.eq", fixed!([I32, I32] -> [I32]), NONE, Next, Compare(I32, Eq);
            /// Push 1 if the operands are not equal (signed), else 0.
            I32Ne = "i32.ne", fixed!([I32, I32] -> [I32]), NONE, Next, Compare(I32, Ne);
            /// Push 1 if the operands are less than (signed), else 0.
            I32Lt = "i32.lt", fixed!([I32, I32] -> [I32]), NONE, Next, Compare(I32, Lt);
            /// Push 1 if the operands are less or equal (signed), else 0.
            I32Le = "i32.le", fixed!([I32, I32] -> [I32]), NONE, Next, Compare(I32, Le);
            /// Push 1 if the operands are greater than (signed), else 0.
            I32Gt = "i32.gt", fixed!([I32, I32] -> [I32]), NONE, Next, Compare(I32, Gt);
            /// Push 1 if the operands are greater or equal (signed), else 0.
            I32Ge = "i32.ge", fixed!([I32, I32] -> [I32]), NONE, Next, Compare(I32, Ge);
            /// Push 1 if the operands are equal (signed), else 0.
            I64Eq = "i64.eq", fixed!([I64, I64] -> [I32]), NONE, Next, Compare(I64, Eq);
            /// Push 1 if the operands are not equal (signed), else 0.
            I64Ne = "i64.ne", fixed!([I64, I64] -> [I32]), NONE, Next, Compare(I64, Ne);
            /// Push 1 if the operands are less than (signed), else 0.
            I64Lt = "i64.lt", fixed!([I64, I64] -> [I32]), NONE, Next, Compare(I64, Lt);
            /// Push 1 if the operands are less or equal (signed), else 0.
            I64Le = "i64.le", fixed!([I64, I64] -> [I32]), NONE, Next, Compare(I64, Le);
            /// Push 1 if the operands are greater than (signed), else 0.
            I64Gt = "i64.gt", fixed!([I64, I64] -> [I32]), NONE, Next, Compare(I64, Gt);
            /// Push 1 if the operands are greater or equal (signed), else 0.
            I64Ge = "i64.ge", fixed!([I64, I64] -> [I32]), NONE, Next, Compare(I64, Ge);
            /// Push 1 if the operands are equal (false if either is NaN), else 0.
            F32Eq = "f32.eq", fixed!([F32, F32] -> [I32]), NONE, Next, Compare(F32, Eq);
            /// Push 1 if the operands are not equal (true if either is NaN), else 0.
            F32Ne = "f32.ne", fixed!([F32, F32] -> [I32]), NONE, Next, Compare(F32, Ne);
            /// Push 1 if the operands are less than (false if either is NaN), else 0.
            F32Lt = "f32.lt", fixed!([F32, F32] -> [I32]), NONE, Next, Compare(F32, Lt);
            /// Push 1 if the operands are less or equal (false if either is NaN), else 0.
            F32Le = "f32.le", fixed!([F32, F32] -> [I32]), NONE, Next, Compare(F32, Le);
            /// Push 1 if the operands are greater than (false if either is NaN), else 0.
            F32Gt = "f32.gt", fixed!([F32, F32] -> [I32]), NONE, Next, Compare(F32, Gt);
            /// Push 1 if the operands are greater or equal (false if either is NaN), else 0.
            F32Ge = "f32.ge", fixed!([F32, F32] -> [I32]), NONE, Next, Compare(F32, Ge);
            /// Push 1 if the operands are equal (false if either is NaN), else 0.
            F64Eq = "f64.eq", fixed!([F64, F64] -> [I32]), NONE, Next, Compare(F64, Eq);
            /// Push 1 if the operands are not equal (true if either is NaN), else 0.
            F64Ne = "f64.ne", fixed!([F64, F64] -> [I32]), NONE, Next, Compare(F64, Ne);
            /// Push 1 if the operands are less than (false if either is NaN), else 0.
            F64Lt = "f64.lt", fixed!([F64, F64] -> [I32]), NONE, Next, Compare(F64, Lt);
            /// Push 1 if the operands are less or equal (false if either is NaN), else 0.
            F64Le = "f64.le", fixed!([F64, F64] -> [I32]), NONE, Next, Compare(F64, Le);
            /// Push 1 if the operands are greater than (false if either is NaN), else 0.
            F64Gt = "f64.gt", fixed!([F64, F64] -> [I32]), NONE, Next, Compare(F64, Gt);
            /// Push 1 if the operands are greater or equal (false if either is NaN), else 0.
            F64Ge = "f64.ge", fixed!([F64, F64] -> [I32]), NONE, Next, Compare(F64, Ge);
            /// Push 1 if both references are the same object (or both null), else 0.
            RefEq = "ref.eq", fixed!([Ref, Ref] -> [I32]), NONE, Next, Compare(Ref, Eq);
            /// Push 1 if the references differ, else 0.
            RefNe = "ref.ne", fixed!([Ref, Ref] -> [I32]), NONE, Next, Compare(Ref, Ne);
            /// Jump to `target`.
            Br { target: Label } = "br", fixed!([] -> []), NONE, Jump, Other;
            /// Pop an `i32`; jump to `target` if it is not zero.
            BrIf { target: Label } = "br_if", fixed!([I32] -> []), NONE, Branch, Other;
            /// Pop an `i32`; jump to `target` if it is zero.
            BrUnless { target: Label } = "br_unless", fixed!([I32] -> []), NONE, Branch, Other;
            /// Pop a reference; jump to `target` if it is null.
            BrNull { target: Label } = "br_null", fixed!([Ref] -> []), NONE, Branch, Other;
            /// Pop a reference; jump to `target` if it is not null.
            BrNonNull { target: Label } = "br_nonnull", fixed!([Ref] -> []), NONE, Branch, Other;
            /// Sign-extend `i32` to `i64`.
            I32ToI64 = "i32.to_i64", fixed!([I32] -> [I64]), NONE, Next, Convert(I32, I64);
            /// Convert `i32` to `f32`, rounding to nearest even.
            I32ToF32 = "i32.to_f32", fixed!([I32] -> [F32]), NONE, Next, Convert(I32, F32);
            /// Convert `i32` to `f64`, rounding to nearest even.
            I32ToF64 = "i32.to_f64", fixed!([I32] -> [F64]), NONE, Next, Convert(I32, F64);
            /// Wrap `i64` to `i32` (keep the low 32 bits).
            I64ToI32 = "i64.to_i32", fixed!([I64] -> [I32]), NONE, Next, Convert(I64, I32);
            /// Convert `i64` to `f32`, rounding to nearest even.
            I64ToF32 = "i64.to_f32", fixed!([I64] -> [F32]), NONE, Next, Convert(I64, F32);
            /// Convert `i64` to `f64`, rounding to nearest even.
            I64ToF64 = "i64.to_f64", fixed!([I64] -> [F64]), NONE, Next, Convert(I64, F64);
            /// Convert `f32` to `i32`, truncating toward zero; NaN gives 0 and out-of-range values saturate.
            F32ToI32 = "f32.to_i32", fixed!([F32] -> [I32]), NONE, Next, Convert(F32, I32);
            /// Convert `f32` to `i64`, truncating toward zero; NaN gives 0 and out-of-range values saturate.
            F32ToI64 = "f32.to_i64", fixed!([F32] -> [I64]), NONE, Next, Convert(F32, I64);
            /// Widen `f32` to `f64` (exact).
            F32ToF64 = "f32.to_f64", fixed!([F32] -> [F64]), NONE, Next, Convert(F32, F64);
            /// Convert `f64` to `i32`, truncating toward zero; NaN gives 0 and out-of-range values saturate.
            F64ToI32 = "f64.to_i32", fixed!([F64] -> [I32]), NONE, Next, Convert(F64, I32);
            /// Convert `f64` to `i64`, truncating toward zero; NaN gives 0 and out-of-range values saturate.
            F64ToI64 = "f64.to_i64", fixed!([F64] -> [I64]), NONE, Next, Convert(F64, I64);
            /// Narrow `f64` to `f32`, rounding to nearest even.
            F64ToF32 = "f64.to_f32", fixed!([F64] -> [F32]), NONE, Next, Convert(F64, F32);
            /// Pop a length and push a new zeroed array of `elem`. Throws `NegativeArraySize` if the length is negative, `OutOfMemory` when the heap is exhausted.
            NewArray { elem: Type } = "newarray", special!("[i32] -> [elem[]]"), NEG_SIZE_CHECK | ALLOCATES, Next, Other;
            /// Push the length of an array. Throws `NullPointer`.
            ArrayLen = "array.len", fixed!([Array] -> [I32]), NULL_CHECK, Next, Other;
            /// Load an element of a `i32[]`. Throws `NullPointer` and `IndexOutOfBounds`.
            I32ALoad = "i32.aload", fixed!([ArrayOf(Elem::I32), I32] -> [I32]), NULL_CHECK | BOUNDS_CHECK, Next, Other;
            /// Store into an element of a `i32[]`. Throws `NullPointer` and `IndexOutOfBounds`.
            I32AStore = "i32.astore", fixed!([ArrayOf(Elem::I32), I32, I32] -> []), NULL_CHECK | BOUNDS_CHECK, Next, Other;
            /// Load an element of a `i64[]`. Throws `NullPointer` and `IndexOutOfBounds`.
            I64ALoad = "i64.aload", fixed!([ArrayOf(Elem::I64), I32] -> [I64]), NULL_CHECK | BOUNDS_CHECK, Next, Other;
            /// Store into an element of a `i64[]`. Throws `NullPointer` and `IndexOutOfBounds`.
            I64AStore = "i64.astore", fixed!([ArrayOf(Elem::I64), I32, I64] -> []), NULL_CHECK | BOUNDS_CHECK, Next, Other;
            /// Load an element of a `f32[]`. Throws `NullPointer` and `IndexOutOfBounds`.
            F32ALoad = "f32.aload", fixed!([ArrayOf(Elem::F32), I32] -> [F32]), NULL_CHECK | BOUNDS_CHECK, Next, Other;
            /// Store into an element of a `f32[]`. Throws `NullPointer` and `IndexOutOfBounds`.
            F32AStore = "f32.astore", fixed!([ArrayOf(Elem::F32), I32, F32] -> []), NULL_CHECK | BOUNDS_CHECK, Next, Other;
            /// Load an element of a `f64[]`. Throws `NullPointer` and `IndexOutOfBounds`.
            F64ALoad = "f64.aload", fixed!([ArrayOf(Elem::F64), I32] -> [F64]), NULL_CHECK | BOUNDS_CHECK, Next, Other;
            /// Store into an element of a `f64[]`. Throws `NullPointer` and `IndexOutOfBounds`.
            F64AStore = "f64.astore", fixed!([ArrayOf(Elem::F64), I32, F64] -> []), NULL_CHECK | BOUNDS_CHECK, Next, Other;
            /// Load an element of an array of references (its static element type is pushed). Throws `NullPointer` and `IndexOutOfBounds`.
            RefALoad = "ref.aload", special!("[T[] i32] -> [T]"), NULL_CHECK | BOUNDS_CHECK, Next, Other;
            /// Store a reference assignable to the element type into an array of references. Throws `NullPointer` and `IndexOutOfBounds`.
            RefAStore = "ref.astore", special!("[T[] i32 T] -> []"), NULL_CHECK | BOUNDS_CHECK, Next, Other;
            /// Push a new zeroed instance of `class`. Throws `OutOfMemory`.
            New { class: ClassId } = "new", special!("[] -> [class]"), ALLOCATES, Next, Other;
            /// Pop an object and push the value of `field`. Throws `NullPointer`.
            GetField { field: FieldId } = "getfield", special!("[C] -> [T] for field C.f: T"), NULL_CHECK, Next, Other;
            /// Pop an object and a value and store the value into `field`. Throws `NullPointer`.
            PutField { field: FieldId } = "putfield", special!("[C T] -> [] for field C.f: T"), NULL_CHECK, Next, Other;
            /// Pop a reference; push 1 if it is non-null and an instance of `ty`, else 0.
            InstanceOf { ty: Type } = "instanceof", special!("[ref] -> [i32]"), NONE, Next, Other;
            /// Pop a reference and push it back typed as `ty`. Null passes. Throws `ClassCast`.
            CheckCast { ty: Type } = "checkcast", special!("[ref] -> [ty]"), CAST_CHECK, Next, Other;
            /// Call `func` (a static function, or a method called without dispatch) with the arguments on the stack; push its result.
            Call { func: FuncId } = "call", special!("[args..] -> [ret?]"), CALLS, Next, Other;
            /// Call the virtual method `method` through the receiver's vtable; the receiver is the first argument. Throws `NullPointer`.
            CallVirt { method: FuncId } = "callvirt", special!("[recv args..] -> [ret?]"), CALLS | NULL_CHECK, Next, Other;
            /// Square root (correctly rounded).
            F32Sqrt = "f32.sqrt", fixed!([F32] -> [F32]), NONE, Next, Unary(F32, Sqrt);
            /// Absolute value (clears the sign bit).
            F32Abs = "f32.abs", fixed!([F32] -> [F32]), NONE, Next, Unary(F32, Abs);
            /// Minimum; NaN if either is NaN, and -0 < +0.
            F32Min = "f32.min", fixed!([F32, F32] -> [F32]), NONE, Next, Binary(F32, Min);
            /// Maximum; NaN if either is NaN, and -0 < +0.
            F32Max = "f32.max", fixed!([F32, F32] -> [F32]), NONE, Next, Binary(F32, Max);
            /// Round toward negative infinity.
            F32Floor = "f32.floor", fixed!([F32] -> [F32]), NONE, Next, Unary(F32, Floor);
            /// Round toward positive infinity.
            F32Ceil = "f32.ceil", fixed!([F32] -> [F32]), NONE, Next, Unary(F32, Ceil);
            /// e raised to the operand.
            F32Exp = "f32.exp", fixed!([F32] -> [F32]), NONE, Next, Unary(F32, Exp);
            /// Natural logarithm.
            F32Log = "f32.log", fixed!([F32] -> [F32]), NONE, Next, Unary(F32, Log);
            /// Sine (radians).
            F32Sin = "f32.sin", fixed!([F32] -> [F32]), HOST_MATH, Next, Unary(F32, Sin);
            /// Cosine (radians).
            F32Cos = "f32.cos", fixed!([F32] -> [F32]), HOST_MATH, Next, Unary(F32, Cos);
            /// First operand raised to the second.
            F32Pow = "f32.pow", fixed!([F32, F32] -> [F32]), NONE, Next, Binary(F32, Pow);
            /// Fused multiply-add `a * b + c` with one rounding.
            F32Fma = "f32.fma", fixed!([F32, F32, F32] -> [F32]), NONE, Next, Fma(F32);
            /// Square root (correctly rounded).
            F64Sqrt = "f64.sqrt", fixed!([F64] -> [F64]), NONE, Next, Unary(F64, Sqrt);
            /// Absolute value (clears the sign bit).
            F64Abs = "f64.abs", fixed!([F64] -> [F64]), NONE, Next, Unary(F64, Abs);
            /// Minimum; NaN if either is NaN, and -0 < +0.
            F64Min = "f64.min", fixed!([F64, F64] -> [F64]), NONE, Next, Binary(F64, Min);
            /// Maximum; NaN if either is NaN, and -0 < +0.
            F64Max = "f64.max", fixed!([F64, F64] -> [F64]), NONE, Next, Binary(F64, Max);
            /// Round toward negative infinity.
            F64Floor = "f64.floor", fixed!([F64] -> [F64]), NONE, Next, Unary(F64, Floor);
            /// Round toward positive infinity.
            F64Ceil = "f64.ceil", fixed!([F64] -> [F64]), NONE, Next, Unary(F64, Ceil);
            /// e raised to the operand.
            F64Exp = "f64.exp", fixed!([F64] -> [F64]), NONE, Next, Unary(F64, Exp);
            /// Natural logarithm.
            F64Log = "f64.log", fixed!([F64] -> [F64]), NONE, Next, Unary(F64, Log);
            /// Sine (radians).
            F64Sin = "f64.sin", fixed!([F64] -> [F64]), HOST_MATH, Next, Unary(F64, Sin);
            /// Cosine (radians).
            F64Cos = "f64.cos", fixed!([F64] -> [F64]), HOST_MATH, Next, Unary(F64, Cos);
            /// First operand raised to the second.
            F64Pow = "f64.pow", fixed!([F64, F64] -> [F64]), NONE, Next, Binary(F64, Pow);
            /// Fused multiply-add `a * b + c` with one rounding.
            F64Fma = "f64.fma", fixed!([F64, F64, F64] -> [F64]), NONE, Next, Fma(F64);
            /// Absolute value (wrapping: `abs(MIN)` is `MIN`).
            I32Abs = "i32.abs", fixed!([I32] -> [I32]), NONE, Next, Unary(I32, Abs);
            /// Signed minimum.
            I32Min = "i32.min", fixed!([I32, I32] -> [I32]), NONE, Next, Binary(I32, Min);
            /// Signed maximum.
            I32Max = "i32.max", fixed!([I32, I32] -> [I32]), NONE, Next, Binary(I32, Max);
            /// Absolute value (wrapping: `abs(MIN)` is `MIN`).
            I64Abs = "i64.abs", fixed!([I64] -> [I64]), NONE, Next, Unary(I64, Abs);
            /// Signed minimum.
            I64Min = "i64.min", fixed!([I64, I64] -> [I64]), NONE, Next, Binary(I64, Min);
            /// Signed maximum.
            I64Max = "i64.max", fixed!([I64, I64] -> [I64]), NONE, Next, Binary(I64, Max);
            /// Atomically add to an element of a `i32[]` and push the old value. Throws `NullPointer` and `IndexOutOfBounds`.
            I32ArrayAtomicAdd = "i32.array_atomic_add", fixed!([ArrayOf(Elem::I32), I32, I32] -> [I32]), NULL_CHECK | BOUNDS_CHECK, Next, Other;
            /// Atomically compare-exchange an element of a `i32[]` (array, index, expected, new) and push the old value. Throws `NullPointer` and `IndexOutOfBounds`.
            I32ArrayCmpxchg = "i32.array_cmpxchg", fixed!([ArrayOf(Elem::I32), I32, I32, I32] -> [I32]), NULL_CHECK | BOUNDS_CHECK, Next, Other;
            /// Atomically add to an element of a `i64[]` and push the old value. Throws `NullPointer` and `IndexOutOfBounds`.
            I64ArrayAtomicAdd = "i64.array_atomic_add", fixed!([ArrayOf(Elem::I64), I32, I64] -> [I64]), NULL_CHECK | BOUNDS_CHECK, Next, Other;
            /// Atomically compare-exchange an element of a `i64[]` (array, index, expected, new) and push the old value. Throws `NullPointer` and `IndexOutOfBounds`.
            I64ArrayCmpxchg = "i64.array_cmpxchg", fixed!([ArrayOf(Elem::I64), I32, I64, I64] -> [I64]), NULL_CHECK | BOUNDS_CHECK, Next, Other;
            /// Atomically add to an integer field and push the old value. Throws `NullPointer`.
            FieldAtomicAdd { field: FieldId } = "field.atomic_add", special!("[C T] -> [T] for integer field C.f: T"), NULL_CHECK, Next, Other;
            /// Atomically compare-exchange an integer field (object, expected, new) and push the old value. Throws `NullPointer`.
            FieldCmpxchg { field: FieldId } = "field.cmpxchg", special!("[C T T] -> [T] for integer field C.f: T"), NULL_CHECK, Next, Other;
            /// Return from the function; the stack must hold exactly the return value (or nothing for a void function).
            Ret = "ret", special!("[ret?] -> []"), NONE, Return, Other;
            /// Throw the built-in exception `kind`; the stack may hold anything.
            Throw { kind: ExceptionKind } = "throw", special!("[..] -> []"), THROWS, Throw, Other;

        }
    };
}

macro_rules! fixed {
    ([$($p:expr),*] -> [$($q:expr),*]) => {{
        #[allow(unused_imports)]
        use Sig::*;
        Effect::Fixed { pops: &[$($p),*], pushes: &[$($q),*] }
    }};
}

macro_rules! special {
    ($s:literal) => {
        Effect::Special($s)
    };
}

macro_rules! bare_inst {
    ($name:ident) => {
        Some(Inst::$name)
    };
    ($name:ident { $($field:ident),* }) => {
        None
    };
}

macro_rules! define_isa {
    ($(
        $(#[doc = $doc:literal])*
        $name:ident $({ $($field:ident : $fty:ty),* })? = $mn:literal, $eff:expr, $hz:expr, $flow:ident, $op:expr;
    )*) => {
        /// One instruction with its operands. The explicit `u8` tag keeps the
        /// discriminant a single byte load, which interpreters dispatch on.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
        #[repr(u8)]
        pub enum Inst {
            $(
                $(#[doc = $doc])*
                $name $({ $(#[allow(missing_docs)] $field: $fty),* })?,
            )*
        }

        /// The operation of an instruction, without operands.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
        pub enum Opcode {
            $(
                $(#[doc = $doc])*
                $name,
            )*
        }

        impl Opcode {
            /// Every opcode, in table order.
            pub const ALL: &'static [Opcode] = &[$(Opcode::$name),*];

            /// The mnemonic in the text form.
            pub fn mnemonic(self) -> &'static str {
                match self { $(Opcode::$name => $mn,)* }
            }

            /// The documentation line of the instruction.
            pub fn doc(self) -> &'static str {
                match self { $(Opcode::$name => concat!($($doc),*).trim_ascii(),)* }
            }

            /// The stack effect.
            pub fn effect(self) -> Effect {
                match self { $(Opcode::$name => $eff,)* }
            }

            /// What makes the instruction a potential deopt site.
            pub fn hazards(self) -> Hazards {
                use hz::*;
                match self { $(Opcode::$name => Hazards($hz),)* }
            }

            /// How control leaves the instruction.
            pub fn flow(self) -> Flow {
                match self { $(Opcode::$name => Flow::$flow,)* }
            }

            /// What the instruction computes, for the arithmetic executors
            /// derive their arms from ([`Op`]).
            pub fn op(self) -> Op {
                #[allow(unused_imports)]
                use {BinOp::*, CmpOp::*, Kind::*, Op::*, UnOp::*};
                match self { $(Opcode::$name => $op,)* }
            }

            /// The instruction of this opcode if it has no operands.
            pub fn bare(self) -> Option<Inst> {
                match self { $(Opcode::$name => bare_inst!($name $({ $($field),* })?),)* }
            }

            /// Look up an opcode by mnemonic.
            pub fn from_mnemonic(s: &str) -> Option<Opcode> {
                match s { $($mn => Some(Opcode::$name),)* _ => None }
            }

            /// The names of the operands, in order, for documentation.
            pub fn operand_names(self) -> &'static [&'static str] {
                match self { $(Opcode::$name => &[$($(stringify!($field)),*)?],)* }
            }

            /// Read the operands of an instruction with this opcode.
            pub fn read_operands<R: OperandReader>(self, r: &mut R) -> Result<Inst, R::Error> {
                // Opcodes without operands leave `r` unused.
                let _ = &r;
                match self {
                    $(Opcode::$name => Ok(Inst::$name $({ $($field: <$fty as Operand>::read(r)?),* })?),)*
                }
            }
        }

        impl Inst {
            /// The operation of this instruction.
            pub fn opcode(&self) -> Opcode {
                match self { $(Inst::$name { .. } => Opcode::$name,)* }
            }

            /// Write the operands, in order.
            pub fn write_operands<W: OperandWriter>(&self, w: &mut W) {
                let _ = &w;
                match self {
                    $(Inst::$name $({ $($field),* })? => { $($( Operand::write($field, w); )*)? })*
                }
            }
        }
    };
}

for_each_op!(define_isa);

impl Inst {
    /// The branch target, for branches.
    pub fn target(&self) -> Option<Bci> {
        match *self {
            Inst::Br { target }
            | Inst::BrIf { target }
            | Inst::BrUnless { target }
            | Inst::BrNull { target }
            | Inst::BrNonNull { target } => Some(target.0),
            _ => None,
        }
    }

    /// Mutable access to the branch target, for branches.
    pub fn target_mut(&mut self) -> Option<&mut Label> {
        match self {
            Inst::Br { target }
            | Inst::BrIf { target }
            | Inst::BrUnless { target }
            | Inst::BrNull { target }
            | Inst::BrNonNull { target } => Some(target),
            _ => None,
        }
    }

    /// The local read, if any (`load`, `inc`).
    pub fn local_read(&self) -> Option<LocalId> {
        match *self {
            Inst::Load { local } | Inst::Inc { local, .. } => Some(local),
            _ => None,
        }
    }

    /// The local written, if any (`store`, `inc`).
    pub fn local_written(&self) -> Option<LocalId> {
        match *self {
            Inst::Store { local } | Inst::Inc { local, .. } => Some(local),
            _ => None,
        }
    }

    /// The control-flow successors of the instruction at `bci`.
    pub fn successors(&self, bci: Bci) -> smallvec::SmallVec<[Bci; 2]> {
        let mut out = smallvec::SmallVec::new();
        match self.opcode().flow() {
            Flow::Next => out.push(bci + 1),
            Flow::Jump => out.extend(self.target()),
            Flow::Branch => {
                out.push(bci + 1);
                out.extend(self.target().filter(|&t| t != bci + 1));
            }
            Flow::Return | Flow::Throw => {}
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mnemonics_are_unique_and_round_trip() {
        let mut seen = std::collections::HashSet::new();
        for &op in Opcode::ALL {
            assert!(
                seen.insert(op.mnemonic()),
                "duplicate mnemonic {}",
                op.mnemonic()
            );
            assert_eq!(Opcode::from_mnemonic(op.mnemonic()), Some(op));
            assert!(!op.doc().is_empty(), "{op:?} has no doc");
        }
        assert!(Opcode::ALL.len() > 140);
    }

    /// The `op` column agrees with the stack effect of every row it
    /// classifies, and classifies every fixed-effect arithmetic row.
    #[test]
    fn op_classes_match_the_effects() {
        let sig = |k: Kind| match k {
            Kind::I32 => Sig::I32,
            Kind::I64 => Sig::I64,
            Kind::F32 => Sig::F32,
            Kind::F64 => Sig::F64,
            Kind::Ref => Sig::Ref,
        };
        let mut classified = 0;
        for &op in Opcode::ALL {
            let want: Option<(Vec<Sig>, Vec<Sig>)> = match op.op() {
                Op::Binary(k, _) => Some((vec![sig(k); 2], vec![sig(k)])),
                Op::Unary(k, _) => Some((vec![sig(k)], vec![sig(k)])),
                Op::Fma(k) => Some((vec![sig(k); 3], vec![sig(k)])),
                Op::Compare(k, _) => Some((vec![sig(k); 2], vec![Sig::I32])),
                Op::Convert(a, b) => Some((vec![sig(a)], vec![sig(b)])),
                Op::Other => None,
            };
            let Some((pops, pushes)) = want else {
                continue;
            };
            classified += 1;
            assert_eq!(
                op.effect(),
                Effect::Fixed {
                    pops: Vec::leak(pops),
                    pushes: Vec::leak(pushes)
                },
                "{}",
                op.mnemonic()
            );
        }
        assert_eq!(classified, 104);
        assert_eq!(Opcode::I32Add.op(), Op::Binary(Kind::I32, BinOp::Add));
        assert_eq!(Opcode::F64Ne.op(), Op::Compare(Kind::F64, CmpOp::Ne));
        assert_eq!(Opcode::F32ToI64.op(), Op::Convert(Kind::F32, Kind::I64));
        assert_eq!(Opcode::F32Sin.op(), Op::Unary(Kind::F32, UnOp::Sin));
        assert_eq!(Opcode::I32ALoad.op(), Op::Other);
    }

    #[test]
    fn table_facts() {
        assert_eq!(Opcode::I32Div.hazards().0, hz::DIV_CHECK);
        assert!(Opcode::F32Div.hazards().is_empty());
        assert!(
            Opcode::NewArray
                .hazards()
                .has(hz::ALLOCATES | hz::NEG_SIZE_CHECK)
        );
        assert_eq!(Opcode::BrIf.flow(), Flow::Branch);
        assert_eq!(Opcode::Inc.operand_names(), &["local", "delta"]);
        match Opcode::F32ALoad.effect() {
            Effect::Fixed { pops, pushes } => {
                assert_eq!(pops, &[Sig::ArrayOf(Elem::F32), Sig::I32]);
                assert_eq!(pushes, &[Sig::F32]);
            }
            Effect::Special(_) => panic!("f32.aload is fixed"),
        }
        assert_eq!(std::mem::size_of::<Inst>(), 16);
    }
}
