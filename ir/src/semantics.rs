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
}
