//! The meaning of every arithmetic instruction, defined once.
//!
//! The interpreter calls these functions, and the JIT backends either call the
//! same functions (the CPU backend, as `extern "C"` symbols) or emit
//! instructions proven to give identical bits (tested against these). Floating
//! point is IEEE 754 binary32/binary64 with round-to-nearest-even;
//! transcendentals come from the `libm` crate (a port of musl's libm), so the
//! results are the same on every host, not whatever the platform libm says.

/// Integer division: `None` on a zero divisor (`Arithmetic`); `MIN / -1` wraps.
pub fn i32_div(a: i32, b: i32) -> Option<i32> {
    (b != 0).then(|| a.wrapping_div(b))
}
/// Integer remainder with the dividend's sign: `None` on a zero divisor; `MIN % -1` is 0.
pub fn i32_rem(a: i32, b: i32) -> Option<i32> {
    (b != 0).then(|| a.wrapping_rem(b))
}
/// See [`i32_div`].
pub fn i64_div(a: i64, b: i64) -> Option<i64> {
    (b != 0).then(|| a.wrapping_div(b))
}
/// See [`i32_rem`].
pub fn i64_rem(a: i64, b: i64) -> Option<i64> {
    (b != 0).then(|| a.wrapping_rem(b))
}

/// Shift left by `count & 31`.
pub fn i32_shl(a: i32, count: i32) -> i32 {
    a.wrapping_shl(count as u32)
}
/// Arithmetic shift right by `count & 31`.
pub fn i32_shr(a: i32, count: i32) -> i32 {
    a.wrapping_shr(count as u32)
}
/// Logical shift right by `count & 31`.
pub fn i32_ushr(a: i32, count: i32) -> i32 {
    ((a as u32).wrapping_shr(count as u32)) as i32
}
/// Shift left by `count & 63`.
pub fn i64_shl(a: i64, count: i64) -> i64 {
    a.wrapping_shl(count as u32)
}
/// Arithmetic shift right by `count & 63`.
pub fn i64_shr(a: i64, count: i64) -> i64 {
    a.wrapping_shr(count as u32)
}
/// Logical shift right by `count & 63`.
pub fn i64_ushr(a: i64, count: i64) -> i64 {
    ((a as u64).wrapping_shr(count as u32)) as i64
}

macro_rules! float_ops {
    ($t:ident, $min:ident, $max:ident, $exp:ident, $log:ident, $sin:ident, $cos:ident, $pow:ident,
     $lexp:path, $llog:path, $lsin:path, $lcos:path, $lpow:path) => {
        /// Minimum: NaN if either operand is NaN, and -0 is below +0.
        pub fn $min(a: $t, b: $t) -> $t {
            if a.is_nan() || b.is_nan() {
                <$t>::NAN
            } else if a == b {
                // Equal values: only the zeros differ, by sign.
                if a.is_sign_negative() { a } else { b }
            } else if a < b {
                a
            } else {
                b
            }
        }
        /// Maximum: NaN if either operand is NaN, and +0 is above -0.
        pub fn $max(a: $t, b: $t) -> $t {
            if a.is_nan() || b.is_nan() {
                <$t>::NAN
            } else if a == b {
                if a.is_sign_positive() { a } else { b }
            } else if a > b {
                a
            } else {
                b
            }
        }
        /// e raised to `a` (libm).
        pub fn $exp(a: $t) -> $t {
            $lexp(a)
        }
        /// Natural logarithm (libm).
        pub fn $log(a: $t) -> $t {
            $llog(a)
        }
        /// Sine (libm).
        pub fn $sin(a: $t) -> $t {
            $lsin(a)
        }
        /// Cosine (libm).
        pub fn $cos(a: $t) -> $t {
            $lcos(a)
        }
        /// `a` raised to `b` (libm).
        pub fn $pow(a: $t, b: $t) -> $t {
            $lpow(a, b)
        }
    };
}

float_ops!(
    f32,
    f32_min,
    f32_max,
    f32_exp,
    f32_log,
    f32_sin,
    f32_cos,
    f32_pow,
    libm::expf,
    libm::logf,
    libm::sinf,
    libm::cosf,
    libm::powf
);
float_ops!(
    f64,
    f64_min,
    f64_max,
    f64_exp,
    f64_log,
    f64_sin,
    f64_cos,
    f64_pow,
    libm::exp,
    libm::log,
    libm::sin,
    libm::cos,
    libm::pow
);

/// Fused multiply-add with one rounding (exactly specified by IEEE 754).
pub fn f32_fma(a: f32, b: f32, c: f32) -> f32 {
    libm::fmaf(a, b, c)
}
/// Fused multiply-add with one rounding.
pub fn f64_fma(a: f64, b: f64, c: f64) -> f64 {
    libm::fma(a, b, c)
}

/// Float to integer: truncate toward zero, NaN gives 0, out-of-range values
/// saturate. (This is exactly Rust's `as`.)
pub fn f64_to_i32(a: f64) -> i32 {
    a as i32
}
/// See [`f64_to_i32`].
pub fn f64_to_i64(a: f64) -> i64 {
    a as i64
}
/// See [`f64_to_i32`].
pub fn f32_to_i32(a: f32) -> i32 {
    a as i32
}
/// See [`f64_to_i32`].
pub fn f32_to_i64(a: f32) -> i64 {
    a as i64
}

/// Values of each kind as the raw 64-bit slots the interpreter's stack,
/// locals and save records hold: `i32` and references zero-extended, `i64`
/// as is, floats by their bits (`f32` zero-extended).
pub mod slot {
    /// The `i32` in slot `x`.
    #[inline]
    pub fn i32(x: u64) -> i32 {
        x as u32 as i32
    }
    /// The `i64` in slot `x`.
    #[inline]
    pub fn i64(x: u64) -> i64 {
        x as i64
    }
    /// The `f32` in slot `x`.
    #[inline]
    pub fn f32(x: u64) -> f32 {
        f32::from_bits(x as u32)
    }
    /// The `f64` in slot `x`.
    #[inline]
    pub fn f64(x: u64) -> f64 {
        f64::from_bits(x)
    }
    /// The slot of an `i32`.
    #[inline]
    pub fn of_i32(x: i32) -> u64 {
        u64::from(x as u32)
    }
    /// The slot of an `i64`.
    #[inline]
    pub fn of_i64(x: i64) -> u64 {
        x as u64
    }
    /// The slot of an `f32`.
    #[inline]
    pub fn of_f32(x: f32) -> u64 {
        u64::from(x.to_bits())
    }
    /// The slot of an `f64`.
    #[inline]
    pub fn of_f64(x: f64) -> u64 {
        x.to_bits()
    }
    /// The slot of a truth value (`i32` 0 or 1).
    #[inline]
    pub fn of_bool(b: bool) -> u64 {
        u64::from(b)
    }
}

use crate::isa::{BinOp, CmpOp, UnOp};
use crate::types::Kind;
use slot::{of_f32, of_f64, of_i32, of_i64};

/// `a op b` of kind `k` on slots ([`crate::isa::Op::Binary`]): `None` for
/// an integer division by zero. An operation the instruction table gives
/// no instruction of this kind panics (the table's test checks it has one
/// for every row).
#[inline(always)]
pub fn binary(op: BinOp, k: Kind, a: u64, b: u64) -> Option<u64> {
    Some(match k {
        Kind::I32 => {
            let (a, b) = (slot::i32(a), slot::i32(b));
            of_i32(match op {
                BinOp::Add => a.wrapping_add(b),
                BinOp::Sub => a.wrapping_sub(b),
                BinOp::Mul => a.wrapping_mul(b),
                BinOp::Div => i32_div(a, b)?,
                BinOp::Rem => i32_rem(a, b)?,
                BinOp::And => a & b,
                BinOp::Or => a | b,
                BinOp::Xor => a ^ b,
                BinOp::Shl => i32_shl(a, b),
                BinOp::Shr => i32_shr(a, b),
                BinOp::Ushr => i32_ushr(a, b),
                BinOp::Min => a.min(b),
                BinOp::Max => a.max(b),
                BinOp::Pow => unreachable!("no i32.pow"),
            })
        }
        Kind::I64 => {
            let (a, b) = (slot::i64(a), slot::i64(b));
            of_i64(match op {
                BinOp::Add => a.wrapping_add(b),
                BinOp::Sub => a.wrapping_sub(b),
                BinOp::Mul => a.wrapping_mul(b),
                BinOp::Div => i64_div(a, b)?,
                BinOp::Rem => i64_rem(a, b)?,
                BinOp::And => a & b,
                BinOp::Or => a | b,
                BinOp::Xor => a ^ b,
                BinOp::Shl => i64_shl(a, b),
                BinOp::Shr => i64_shr(a, b),
                BinOp::Ushr => i64_ushr(a, b),
                BinOp::Min => a.min(b),
                BinOp::Max => a.max(b),
                BinOp::Pow => unreachable!("no i64.pow"),
            })
        }
        Kind::F32 => {
            let (a, b) = (slot::f32(a), slot::f32(b));
            of_f32(match op {
                BinOp::Add => a + b,
                BinOp::Sub => a - b,
                BinOp::Mul => a * b,
                BinOp::Div => a / b,
                BinOp::Rem => a % b,
                BinOp::Min => f32_min(a, b),
                BinOp::Max => f32_max(a, b),
                BinOp::Pow => f32_pow(a, b),
                BinOp::And | BinOp::Or | BinOp::Xor | BinOp::Shl | BinOp::Shr | BinOp::Ushr => {
                    unreachable!("no bitwise f32 operation")
                }
            })
        }
        Kind::F64 => {
            let (a, b) = (slot::f64(a), slot::f64(b));
            of_f64(match op {
                BinOp::Add => a + b,
                BinOp::Sub => a - b,
                BinOp::Mul => a * b,
                BinOp::Div => a / b,
                BinOp::Rem => a % b,
                BinOp::Min => f64_min(a, b),
                BinOp::Max => f64_max(a, b),
                BinOp::Pow => f64_pow(a, b),
                BinOp::And | BinOp::Or | BinOp::Xor | BinOp::Shl | BinOp::Shr | BinOp::Ushr => {
                    unreachable!("no bitwise f64 operation")
                }
            })
        }
        Kind::Ref => unreachable!("no arithmetic on references"),
    })
}

/// `op a` of kind `k` on slots ([`crate::isa::Op::Unary`]).
#[inline(always)]
pub fn unary(op: UnOp, k: Kind, a: u64) -> u64 {
    match k {
        Kind::I32 => {
            let a = slot::i32(a);
            of_i32(match op {
                UnOp::Neg => a.wrapping_neg(),
                UnOp::Abs => a.wrapping_abs(),
                _ => unreachable!("no float operation on i32"),
            })
        }
        Kind::I64 => {
            let a = slot::i64(a);
            of_i64(match op {
                UnOp::Neg => a.wrapping_neg(),
                UnOp::Abs => a.wrapping_abs(),
                _ => unreachable!("no float operation on i64"),
            })
        }
        Kind::F32 => {
            let a = slot::f32(a);
            of_f32(match op {
                UnOp::Neg => -a,
                UnOp::Abs => a.abs(),
                UnOp::Sqrt => a.sqrt(),
                UnOp::Floor => a.floor(),
                UnOp::Ceil => a.ceil(),
                UnOp::Exp => f32_exp(a),
                UnOp::Log => f32_log(a),
                UnOp::Sin => f32_sin(a),
                UnOp::Cos => f32_cos(a),
            })
        }
        Kind::F64 => {
            let a = slot::f64(a);
            of_f64(match op {
                UnOp::Neg => -a,
                UnOp::Abs => a.abs(),
                UnOp::Sqrt => a.sqrt(),
                UnOp::Floor => a.floor(),
                UnOp::Ceil => a.ceil(),
                UnOp::Exp => f64_exp(a),
                UnOp::Log => f64_log(a),
                UnOp::Sin => f64_sin(a),
                UnOp::Cos => f64_cos(a),
            })
        }
        Kind::Ref => unreachable!("no arithmetic on references"),
    }
}

/// `a * b + c` of kind `k` on slots, rounded once ([`crate::isa::Op::Fma`]).
#[inline(always)]
pub fn fma(k: Kind, a: u64, b: u64, c: u64) -> u64 {
    match k {
        Kind::F32 => of_f32(f32_fma(slot::f32(a), slot::f32(b), slot::f32(c))),
        Kind::F64 => of_f64(f64_fma(slot::f64(a), slot::f64(b), slot::f64(c))),
        _ => unreachable!("fma is a float operation"),
    }
}

/// `a op b` of kind `k` on slots ([`crate::isa::Op::Compare`]): signed for
/// integers, IEEE for floats (every comparison with NaN is false but `Ne`),
/// identity for references.
#[inline(always)]
pub fn compare(op: CmpOp, k: Kind, a: u64, b: u64) -> bool {
    fn cmp<T: PartialOrd>(op: CmpOp, a: T, b: T) -> bool {
        match op {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
    match k {
        Kind::I32 | Kind::Ref => cmp(op, slot::i32(a), slot::i32(b)),
        Kind::I64 => cmp(op, slot::i64(a), slot::i64(b)),
        Kind::F32 => cmp(op, slot::f32(a), slot::f32(b)),
        Kind::F64 => cmp(op, slot::f64(a), slot::f64(b)),
    }
}

/// The slot `a` of kind `from` converted to `to` ([`crate::isa::Op::Convert`]):
/// integers sign-extend or wrap, integers to floats round to nearest even,
/// floats to integers truncate and saturate (NaN gives 0), `f64` to `f32`
/// rounds to nearest even.
#[inline(always)]
pub fn convert(from: Kind, to: Kind, a: u64) -> u64 {
    match (from, to) {
        (Kind::I32, Kind::I64) => of_i64(i64::from(slot::i32(a))),
        (Kind::I32, Kind::F32) => of_f32(slot::i32(a) as f32),
        (Kind::I32, Kind::F64) => of_f64(f64::from(slot::i32(a))),
        (Kind::I64, Kind::I32) => of_i32(slot::i64(a) as i32),
        (Kind::I64, Kind::F32) => of_f32(slot::i64(a) as f32),
        (Kind::I64, Kind::F64) => of_f64(slot::i64(a) as f64),
        (Kind::F32, Kind::I32) => of_i32(f32_to_i32(slot::f32(a))),
        (Kind::F32, Kind::I64) => of_i64(f32_to_i64(slot::f32(a))),
        (Kind::F32, Kind::F64) => of_f64(f64::from(slot::f32(a))),
        (Kind::F64, Kind::I32) => of_i32(f64_to_i32(slot::f64(a))),
        (Kind::F64, Kind::I64) => of_i64(f64_to_i64(slot::f64(a))),
        (Kind::F64, Kind::F32) => of_f32(slot::f64(a) as f32),
        _ => unreachable!("no conversion from {from:?} to {to:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edge_cases() {
        assert_eq!(i32_div(i32::MIN, -1), Some(i32::MIN));
        assert_eq!(i32_rem(i32::MIN, -1), Some(0));
        assert_eq!(i32_div(1, 0), None);
        assert_eq!(i32_rem(-7, 2), Some(-1));
        assert_eq!(i32_shl(1, 33), 2);
        assert_eq!(i32_ushr(-1, 28), 15);
        assert_eq!(i64_shr(-16, 66), -4);
        assert!(f32_min(1.0, f32::NAN).is_nan());
        assert!(f64_min(0.0, -0.0).is_sign_negative());
        assert!(f64_max(-0.0, 0.0).is_sign_positive());
        assert_eq!(f32_to_i32(f32::NAN), 0);
        assert_eq!(f64_to_i32(1e20), i32::MAX);
        assert_eq!(f64_to_i64(-1e30), i64::MIN);
        assert_eq!(f64_fma(0.1, 10.0, -1.0), 5.551115123125783e-17);
        assert_eq!(f64_exp(0.0), 1.0);
    }

    /// Every arithmetic row of the instruction table has its operation
    /// here, for its kind (the functions panic on a combination the table
    /// does not have).
    #[test]
    fn every_arithmetic_row_evaluates() {
        use crate::isa::{Op, Opcode};
        let samples = [0u64, 1, 7, u64::MAX, 0x8000_0000, 0x3F80_0000];
        for &opc in Opcode::ALL {
            for &a in &samples {
                for &b in &samples {
                    match opc.op() {
                        Op::Binary(k, op) => {
                            let _ = binary(op, k, a, b);
                        }
                        Op::Unary(k, op) => {
                            unary(op, k, a);
                        }
                        Op::Fma(k) => {
                            fma(k, a, b, a);
                        }
                        Op::Compare(k, op) => {
                            compare(op, k, a, b);
                        }
                        Op::Convert(from, to) => {
                            convert(from, to, a);
                        }
                        Op::Other => {}
                    }
                }
            }
        }
        assert_eq!(binary(BinOp::Div, Kind::I32, 5, 0), None);
        assert_eq!(
            binary(BinOp::Sub, Kind::I32, 0, 1),
            Some(u64::from(u32::MAX))
        );
        assert!(compare(
            CmpOp::Ne,
            Kind::F64,
            f64::NAN.to_bits(),
            f64::NAN.to_bits()
        ));
        assert!(!compare(
            CmpOp::Eq,
            Kind::F64,
            f64::NAN.to_bits(),
            f64::NAN.to_bits()
        ));
        assert_eq!(
            convert(Kind::F64, Kind::I32, 1e20f64.to_bits()),
            u64::from(i32::MAX as u32)
        );
    }
}
