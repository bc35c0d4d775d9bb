//! The arithmetic of PTX, as pure functions on raw bits: integer operations
//! at their type's width, IEEE floats with round-to-nearest-even and
//! denormals kept, comparisons, and conversions with their rounding and
//! saturation. Each follows the PTX ISA manual; the unit tests check the
//! edge cases against Rust references.

use crate::inst::{BinOp, Cmp, Rnd, Ty, TyKind, UnOp};

fn f32b(v: u64) -> f32 {
    f32::from_bits(v as u32)
}

fn f64b(v: u64) -> f64 {
    f64::from_bits(v)
}

fn of32(x: f32) -> u64 {
    u64::from(x.to_bits())
}

/// PTX's canonical NaN of a float type.
pub fn canonical_nan(bits: u32) -> u64 {
    if bits == 32 {
        0x7fff_ffff
    } else {
        0x7fff_ffff_ffff_ffff
    }
}

/// Float `min`/`max`: a NaN operand yields the other; two NaNs the
/// canonical NaN; −0 orders below +0.
fn fminmax(ty: Ty, a: u64, b: u64, max: bool) -> u64 {
    let (an, bn, key_a, key_b) = if ty.bits == 32 {
        let (x, y) = (f32b(a), f32b(b));
        (x.is_nan(), y.is_nan(), total32(x), total32(y))
    } else {
        let (x, y) = (f64b(a), f64b(b));
        (x.is_nan(), y.is_nan(), total64(x), total64(y))
    };
    match (an, bn) {
        (true, true) => canonical_nan(ty.bits),
        (true, false) => b,
        (false, true) => a,
        _ => {
            if (key_a < key_b) != max {
                a
            } else {
                b
            }
        }
    }
}

/// An integer key ordering non-NaN floats, −0 below +0.
fn total32(x: f32) -> i64 {
    let b = x.to_bits() as i32;
    i64::from(if b < 0 { !(b & i32::MAX) } else { b })
}

fn total64(x: f64) -> i64 {
    let b = x.to_bits() as i64;
    if b < 0 { !(b & i64::MAX) } else { b }
}

/// A binary operation of type `ty` on `a` and `b` (each in the type's low
/// bits; shift amounts as `u32`). The result is in the destination's low
/// bits (twice the width for `mul.wide`).
pub fn bin(op: BinOp, ty: Ty, a: u64, b: u64) -> u64 {
    if ty.is_float() {
        return fbin(op, ty, a, b);
    }
    let signed = ty.is_signed();
    let (sa, sb) = (ty.extend(a) as i64, ty.extend(b) as i64);
    let (ua, ub) = (ty.trunc(a), ty.trunc(b));
    let r = match op {
        BinOp::Add => ua.wrapping_add(ub),
        BinOp::Sub => ua.wrapping_sub(ub),
        BinOp::MulLo => ua.wrapping_mul(ub),
        BinOp::MulHi | BinOp::MulWide => {
            let p: i128 = if signed {
                i128::from(sa) * i128::from(sb)
            } else {
                (u128::from(ua) * u128::from(ub)) as i128
            };
            if op == BinOp::MulWide {
                return p as u64 & wide_mask(ty.bits);
            }
            (p >> ty.bits) as u64
        }
        // Division by zero is unspecified in PTX; the simulator gives all
        // ones (−1) for the quotient and the dividend for the remainder.
        BinOp::Div => {
            if ub == 0 {
                u64::MAX
            } else if signed {
                sa.wrapping_div(sb) as u64
            } else {
                ua / ub
            }
        }
        BinOp::Rem => {
            if ub == 0 {
                ua
            } else if signed {
                sa.wrapping_rem(sb) as u64
            } else {
                ua % ub
            }
        }
        BinOp::And => ua & ub,
        BinOp::Or => ua | ub,
        BinOp::Xor => ua ^ ub,
        BinOp::Shl => {
            let n = b as u32;
            if n >= ty.bits { 0 } else { ua << n }
        }
        BinOp::Shr => {
            let n = (b as u32).min(ty.bits);
            if signed {
                (sa >> n.min(63)) as u64
            } else if n >= ty.bits {
                0
            } else {
                ua >> n
            }
        }
        BinOp::Min | BinOp::Max => {
            let less = if signed { sa < sb } else { ua < ub };
            if less == (op == BinOp::Min) { ua } else { ub }
        }
        BinOp::Copysign => unreachable!("rejected by the decoder on integers"),
    };
    ty.trunc(r)
}

fn wide_mask(bits: u32) -> u64 {
    if bits >= 32 {
        u64::MAX
    } else {
        (1u64 << (2 * bits)) - 1
    }
}

fn fbin(op: BinOp, ty: Ty, a: u64, b: u64) -> u64 {
    if matches!(op, BinOp::Min | BinOp::Max) {
        return fminmax(ty, a, b, op == BinOp::Max);
    }
    if op == BinOp::Copysign {
        // `copysign d, a, b`: b with a's sign.
        let sign = 1u64 << (ty.bits - 1);
        return (b & !sign) | (a & sign);
    }
    if ty.bits == 32 {
        let (x, y) = (f32b(a), f32b(b));
        of32(match op {
            BinOp::Add => x + y,
            BinOp::Sub => x - y,
            BinOp::MulLo => x * y,
            BinOp::Div => x / y,
            _ => unreachable!("rejected by the decoder on floats"),
        })
    } else {
        let (x, y) = (f64b(a), f64b(b));
        match op {
            BinOp::Add => x + y,
            BinOp::Sub => x - y,
            BinOp::MulLo => x * y,
            BinOp::Div => x / y,
            _ => unreachable!("rejected by the decoder on floats"),
        }
        .to_bits()
    }
}

/// Integer `mad`: `a * b + c` in the mode's width (`c` is twice the
/// width for `.wide`).
pub fn mad(mode: BinOp, ty: Ty, a: u64, b: u64, c: u64) -> u64 {
    let p = bin(mode, ty, a, b);
    if mode == BinOp::MulWide {
        p.wrapping_add(c) & wide_mask(ty.bits)
    } else {
        ty.trunc(p.wrapping_add(c))
    }
}

/// `fma.rn`: one rounding.
pub fn fma(rnd: Rnd, ty: Ty, a: u64, b: u64, c: u64) -> u64 {
    if ty.bits != 32 {
        return f64b(a).mul_add(f64b(b), f64b(c)).to_bits();
    }
    let (a, b, c) = (f32b(a), f32b(b), f32b(c));
    let near = a.mul_add(b, c);
    if rnd == Rnd::Near || near.is_nan() {
        return of32(near);
    }
    // The exact result is s + e: the product of two floats is exact in a
    // double, and the sum's rounding error `e` is exact (TwoSum).
    let p = f64::from(a) * f64::from(b);
    let s = p + f64::from(c);
    let bb = s - p;
    let e = (p - (s - bb)) + (f64::from(c) - bb);
    let r = s as f32;
    if r.is_infinite() && s.is_finite() {
        // Overflow: directed roundings stop at the largest finite value
        // on the side they do not round away to.
        let away = match rnd {
            Rnd::Up => s > 0.0,
            Rnd::Down => s < 0.0,
            _ => false,
        };
        return of32(if away { r } else { f32::MAX.copysign(r) });
    }
    let rd = f64::from(r);
    let above = rd > s || (rd == s && e < 0.0);
    let below = rd < s || (rd == s && e > 0.0);
    let toward_down = match rnd {
        Rnd::Down => true,
        Rnd::Up => false,
        _ => s + e > 0.0,
    };
    of32(if toward_down && above {
        r.next_down()
    } else if !toward_down && below {
        r.next_up()
    } else {
        r
    })
}

/// A unary operation.
pub fn un(op: UnOp, ty: Ty, a: u64) -> u64 {
    let a = ty.trunc(a);
    if ty.is_float() {
        let sign = 1u64 << (ty.bits - 1);
        return match op {
            UnOp::Neg => a ^ sign,
            UnOp::Abs => a & !sign,
            UnOp::Sqrt if ty.bits == 32 => of32(f32b(a).sqrt()),
            UnOp::Sqrt => f64b(a).sqrt().to_bits(),
            UnOp::Rcp if ty.bits == 32 => of32(1.0 / f32b(a)),
            UnOp::Rcp => (1.0 / f64b(a)).to_bits(),
            UnOp::Ex2 => of32(f32b(a).exp2()),
            UnOp::Ex2Ftz => of32(flush(flush(f32b(a)).exp2())),
            _ => unreachable!("rejected by the decoder on floats"),
        };
    }
    let r = match op {
        UnOp::Neg => a.wrapping_neg(),
        UnOp::Not => !a,
        UnOp::Cnot => u64::from(a == 0),
        UnOp::Abs => (ty.extend(a) as i64).wrapping_abs() as u64,
        UnOp::Clz => return u64::from(a.leading_zeros() - (64 - ty.bits)),
        UnOp::Popc => return u64::from(a.count_ones()),
        UnOp::Brev => a.reverse_bits() >> (64 - ty.bits),
        UnOp::Sqrt | UnOp::Rcp | UnOp::Ex2 | UnOp::Ex2Ftz => {
            unreachable!("rejected by the decoder on integers")
        }
    };
    ty.trunc(r)
}

/// `.ftz`: a subnormal becomes a zero of its sign.
fn flush(x: f32) -> f32 {
    if x.is_subnormal() {
        0.0f32.copysign(x)
    } else {
        x
    }
}

/// A `setp` comparison.
pub fn compare(cmp: Cmp, ty: Ty, a: u64, b: u64) -> bool {
    if ty.is_float() {
        let (o, nan) = if ty.bits == 32 {
            let (x, y) = (f32b(a), f32b(b));
            (x.partial_cmp(&y), x.is_nan() || y.is_nan())
        } else {
            let (x, y) = (f64b(a), f64b(b));
            (x.partial_cmp(&y), x.is_nan() || y.is_nan())
        };
        let ordered = |f: fn(std::cmp::Ordering) -> bool| o.is_some_and(f);
        let unordered = |f: fn(std::cmp::Ordering) -> bool| nan || o.is_some_and(f);
        return match cmp {
            Cmp::Eq => ordered(|o| o.is_eq()),
            Cmp::Ne => ordered(|o| o.is_ne()),
            Cmp::Lt => ordered(|o| o.is_lt()),
            Cmp::Le => ordered(|o| o.is_le()),
            Cmp::Gt => ordered(|o| o.is_gt()),
            Cmp::Ge => ordered(|o| o.is_ge()),
            Cmp::Equ => unordered(|o| o.is_eq()),
            Cmp::Neu => unordered(|o| o.is_ne()),
            Cmp::Ltu => unordered(|o| o.is_lt()),
            Cmp::Leu => unordered(|o| o.is_le()),
            Cmp::Gtu => unordered(|o| o.is_gt()),
            Cmp::Geu => unordered(|o| o.is_ge()),
            Cmp::Num => !nan,
            Cmp::Nan => nan,
            Cmp::Lo | Cmp::Ls | Cmp::Hi | Cmp::Hs => unreachable!("rejected by the decoder"),
        };
    }
    let o = if ty.is_signed() {
        (ty.extend(a) as i64).cmp(&(ty.extend(b) as i64))
    } else {
        ty.trunc(a).cmp(&ty.trunc(b))
    };
    match cmp {
        Cmp::Eq => o.is_eq(),
        Cmp::Ne => o.is_ne(),
        Cmp::Lt => o.is_lt(),
        Cmp::Le => o.is_le(),
        Cmp::Gt => o.is_gt(),
        Cmp::Ge => o.is_ge(),
        Cmp::Lo => ty.trunc(a) < ty.trunc(b),
        Cmp::Ls => ty.trunc(a) <= ty.trunc(b),
        Cmp::Hi => ty.trunc(a) > ty.trunc(b),
        Cmp::Hs => ty.trunc(a) >= ty.trunc(b),
        _ => unreachable!("rejected by the decoder on integers"),
    }
}

/// `cvt`: `a` (in `sty`'s low bits) to `dty`, in `dty`'s low bits.
pub fn cvt(dty: Ty, sty: Ty, rnd: Option<Rnd>, sat: bool, a: u64) -> u64 {
    match (dty.is_float(), sty.is_float()) {
        (false, false) => {
            let v: i128 = if sty.is_signed() {
                i128::from(sty.extend(a) as i64)
            } else {
                i128::from(sty.trunc(a))
            };
            if sat {
                let (lo, hi) = int_range(dty);
                dty.trunc(v.clamp(lo, hi) as u64)
            } else {
                dty.trunc(v as u64)
            }
        }
        (false, true) => {
            let x = if sty.bits == 32 {
                f64::from(f32b(a))
            } else {
                f64b(a)
            };
            let r = round_int(x, rnd.unwrap_or(Rnd::Zero));
            // NaN (PTX ISA, `cvt`): zero when neither the source is `.f64`
            // nor the destination 64 bits wide; otherwise `1 << (bits - 1)`
            // (MININT for a signed destination) — as the hardware does.
            if r.is_nan() {
                return if sty.bits == 64 || dty.bits == 64 {
                    dty.trunc(1u64 << (dty.bits - 1))
                } else {
                    0
                };
            }
            let (lo, hi) = int_range(dty);
            // Saturating: every float → integer conversion clamps.
            let v = if r <= lo as f64 {
                lo
            } else if r >= hi as f64 {
                hi
            } else {
                r as i128
            };
            dty.trunc(v as u64)
        }
        (true, false) => {
            let v: i128 = if sty.is_signed() {
                i128::from(sty.extend(a) as i64)
            } else {
                i128::from(sty.trunc(a))
            };
            let r = int_to_float(v, dty.bits, rnd.unwrap_or(Rnd::Near));
            if sat { saturate01(dty, r) } else { r }
        }
        (true, true) => {
            let r = if dty.bits == sty.bits {
                match rnd {
                    None => a,
                    Some(m) if dty.bits == 32 => of32(round_int(f64::from(f32b(a)), m) as f32),
                    Some(m) => round_int(f64b(a), m).to_bits(),
                }
            } else if dty.bits == 64 {
                f64::from(f32b(a)).to_bits()
            } else {
                of32(f64_to_f32(f64b(a), rnd.unwrap_or(Rnd::Near)))
            };
            if sat { saturate01(dty, r) } else { r }
        }
    }
}

fn int_range(ty: Ty) -> (i128, i128) {
    if ty.is_signed() {
        (-(1i128 << (ty.bits - 1)), (1i128 << (ty.bits - 1)) - 1)
    } else {
        (0, (1i128 << ty.bits) - 1)
    }
}

/// Rounds to an integral value (NaN and infinities stay).
fn round_int(x: f64, m: Rnd) -> f64 {
    match m {
        Rnd::Near => x.round_ties_even(),
        Rnd::Zero => x.trunc(),
        Rnd::Down => x.floor(),
        Rnd::Up => x.ceil(),
    }
}

/// `.sat` on a float result: clamps to [0, 1], NaN to +0.
fn saturate01(ty: Ty, r: u64) -> u64 {
    if ty.bits == 32 {
        let x = f32b(r);
        of32(if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) })
    } else {
        let x = f64b(r);
        (if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) }).to_bits()
    }
}

/// Which neighbour of a round-to-nearest result the rounding `m` wants,
/// when that result is inexact: `above` says whether it lies above the
/// exact value, `positive` the value's sign. −1 is the next float down,
/// +1 the next up, 0 the result itself.
fn neighbour(m: Rnd, above: bool, positive: bool) -> i8 {
    match m {
        Rnd::Near => 0,
        Rnd::Down => -i8::from(above),
        Rnd::Up => i8::from(!above),
        // Toward zero: step back when the result's magnitude went past the
        // value's.
        Rnd::Zero if above == positive => {
            if positive {
                -1
            } else {
                1
            }
        }
        Rnd::Zero => 0,
    }
}

fn step32(r: f32, dir: i8) -> f32 {
    match dir {
        -1 => r.next_down(),
        1 => r.next_up(),
        _ => r,
    }
}

fn step64(r: f64, dir: i8) -> f64 {
    match dir {
        -1 => r.next_down(),
        1 => r.next_up(),
        _ => r,
    }
}

fn f64_to_f32(x: f64, m: Rnd) -> f32 {
    let r = x as f32;
    if x.is_nan() || f64::from(r) == x {
        return r;
    }
    step32(r, neighbour(m, f64::from(r) > x, x > 0.0))
}

/// An integer to a float of `bits` width with rounding `m`. Integral
/// floats convert back to `i128` exactly, which decides the direction.
fn int_to_float(v: i128, bits: u32, m: Rnd) -> u64 {
    if bits == 32 {
        let r = v as f32;
        let exact = r as i128;
        if exact == v {
            return of32(r);
        }
        of32(step32(r, neighbour(m, exact > v, v > 0)))
    } else {
        let r = v as f64;
        let exact = r as i128;
        if exact == v {
            return r.to_bits();
        }
        step64(r, neighbour(m, exact > v, v > 0)).to_bits()
    }
}

/// Whether a type is an integer type (`.b`, `.u`, `.s`).
pub fn is_int(ty: Ty) -> bool {
    matches!(ty.kind, TyKind::B | TyKind::U | TyKind::S)
}
