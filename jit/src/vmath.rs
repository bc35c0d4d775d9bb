//! `exp` and `log` of four `f32` lanes at once, for lockstep groups
//! (`cpu/lockstep.rs`): bit for bit what the interpreter's scalar functions
//! ([`offload_ir::semantics::f32_exp`], [`offload_ir::semantics::f32_log`],
//! the `libm` crate's `expf` and `logf`, from FreeBSD's) give, lane by lane.
//!
//! Both scalar functions are a few IEEE operations (add, sub, mul, div,
//! conversions between `i32` and `f32`, bit operations) once their special
//! cases are out of the way, and each of those is exact in the vector unit
//! as in the scalar one: so a lane whose input is in the common range runs
//! the same operations, in the same order, on SSE2 vectors, and a lane
//! outside it (huge, tiny, negative, zero, NaN, infinite, subnormal) is
//! recomputed by the scalar function. The tests check every common-range
//! input of a wide sample against the scalar functions (all 2^32 inputs in
//! an ignored test).
//!
//! Compiled code calls the exports with the address of a 16-byte stack
//! slot holding the four lanes, which the call overwrites with the results.

use offload_ir::semantics as sem;

/// `exp` of the four lanes at `p`, in place.
///
/// # Safety
///
/// `p` is valid for reads and writes of four `f32`s (no alignment needed).
pub unsafe extern "C" fn offload_f32x4_exp(p: *mut f32) {
    // SAFETY: the caller's contract.
    let lanes = unsafe { std::ptr::read_unaligned(p.cast::<[f32; 4]>()) };
    let r = exp4(lanes);
    // SAFETY: as above.
    unsafe { std::ptr::write_unaligned(p.cast::<[f32; 4]>(), r) };
}

/// `log` of the four lanes at `p`, in place.
///
/// # Safety
///
/// `p` is valid for reads and writes of four `f32`s (no alignment needed).
pub unsafe extern "C" fn offload_f32x4_log(p: *mut f32) {
    // SAFETY: the caller's contract.
    let lanes = unsafe { std::ptr::read_unaligned(p.cast::<[f32; 4]>()) };
    let r = log4(lanes);
    // SAFETY: as above.
    unsafe { std::ptr::write_unaligned(p.cast::<[f32; 4]>(), r) };
}

/// `(symbol, address)` of the exports, for the JIT's symbol table.
pub fn symbols() -> Vec<(&'static str, *const u8)> {
    vec![
        ("offload_f32x4_exp", offload_f32x4_exp as *const u8),
        ("offload_f32x4_log", offload_f32x4_log as *const u8),
    ]
}

/// `expf` of each lane.
pub fn exp4(x: [f32; 4]) -> [f32; 4] {
    // SAFETY: SSE2 is part of every x86-64 CPU (the baseline target).
    let (mut r, fast) = unsafe { imp::exp4(x) };
    if fast != ALL {
        fix_lanes(&x, &mut r, fast, sem::f32_exp);
    }
    r
}

/// Every lane in the common range (a mask of lanes, bit `l` for lane `l`).
const ALL: u32 = 0b1111;

/// The lanes of `r` outside `fast` recomputed by `scalar` (out of line:
/// the common path keeps the lanes in one register).
#[cold]
#[inline(never)]
fn fix_lanes(x: &[f32; 4], r: &mut [f32; 4], fast: u32, scalar: fn(f32) -> f32) {
    for l in 0..4 {
        if fast & (1 << l) == 0 {
            r[l] = scalar(x[l]);
        }
    }
}

/// `logf` of each lane.
pub fn log4(x: [f32; 4]) -> [f32; 4] {
    // SAFETY: as in `exp4`.
    let (mut r, fast) = unsafe { imp::log4(x) };
    if fast != ALL {
        fix_lanes(&x, &mut r, fast, sem::f32_log);
    }
    r
}

// The constants of libm's `expf` and `logf` (same names, same bits).
pub(crate) const EXP_LN2_HI: f32 = f32::from_bits(0x3f317200); // 6.9314575195e-01
pub(crate) const EXP_LN2_LO: f32 = f32::from_bits(0x35bfbe8e); // 1.4286067653e-06
pub(crate) const INV_LN2: f32 = f32::from_bits(0x3fb8aa3b); // 1.4426950216e+00
pub(crate) const P1: f32 = f32::from_bits(0x3e2aaa8f); // 1.6666625440e-1
pub(crate) const P2: f32 = f32::from_bits(0xbb355215); // -2.7667332906e-3
pub(crate) const LOG_LN2_HI: f32 = f32::from_bits(0x3f317180); // 6.9313812256e-01
pub(crate) const LOG_LN2_LO: f32 = f32::from_bits(0x3717f7d1); // 9.0580006145e-06
pub(crate) const LG1: f32 = f32::from_bits(0x3f2aaaaa); // 0.66666662693
pub(crate) const LG2: f32 = f32::from_bits(0x3eccce13); // 0.40000972152
pub(crate) const LG3: f32 = f32::from_bits(0x3e91e9ee); // 0.28498786688
pub(crate) const LG4: f32 = f32::from_bits(0x3e789e26); // 0.24279078841

/// `expf`'s common range: `2^-14 < |x| < 87.33655` (`|x|`'s bits strictly
/// between these), where it reduces the argument and scales by `2^k` with
/// `-126 <= k <= 126` (one exact multiply, as `scalbnf` does there).
pub(crate) const EXP_FAST_LO: u32 = 0x3900_0000;
pub(crate) const EXP_FAST_HI: u32 = 0x42ae_ac50;
/// `|x|` above `0.5 ln 2`: `k` is not 0; above `1.5 ln 2`: `k` is
/// `INV_LN2 * x ± 0.5`, truncated.
pub(crate) const HALF_LN2: u32 = 0x3eb1_7218;
pub(crate) const THREE_HALVES_LN2: u32 = 0x3f85_1592;
/// `logf`'s common range: positive, normal, finite.
pub(crate) const LOG_FAST_LO: u32 = 0x0080_0000;
pub(crate) const LOG_FAST_HI: u32 = 0x7f80_0000;

#[cfg(target_arch = "x86_64")]
mod imp {
    //! SSE2 (every x86-64 CPU has it): the scalar functions' operations on
    //! four lanes.
    use super::*;
    use std::arch::x86_64::*;

    /// `a` where `m` is set, `b` elsewhere.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn pick(m: __m128i, a: __m128i, b: __m128i) -> __m128i {
        _mm_or_si128(_mm_and_si128(m, a), _mm_andnot_si128(m, b))
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn load(x: [f32; 4]) -> __m128 {
        // SAFETY: `x` is four `f32`s; `loadu` needs no alignment.
        unsafe { _mm_loadu_ps(x.as_ptr()) }
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn store(v: __m128) -> [f32; 4] {
        let mut r = [0f32; 4];
        // SAFETY: `r` is four `f32`s; `storeu` needs no alignment.
        unsafe { _mm_storeu_ps(r.as_mut_ptr(), v) };
        r
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn lanes_set(m: __m128i) -> u32 {
        _mm_movemask_ps(_mm_castsi128_ps(m)) as u32
    }

    /// Lanes `x` with `lo < x < hi` (as `i32`; `lo` and `hi` below 2^31).
    #[inline]
    #[target_feature(enable = "sse2")]
    fn between(x: __m128i, lo: u32, hi: u32) -> __m128i {
        let above = _mm_cmpgt_epi32(x, _mm_set1_epi32(lo as i32));
        let below = _mm_cmplt_epi32(x, _mm_set1_epi32(hi as i32));
        _mm_and_si128(above, below)
    }

    #[target_feature(enable = "sse2")]
    pub(super) fn exp4(xs: [f32; 4]) -> ([f32; 4], u32) {
        let x = load(xs);
        let bits = _mm_castps_si128(x);
        let hx = _mm_and_si128(bits, _mm_set1_epi32(0x7fff_ffff));
        // The common range (a NaN's or a negative's bits, as i32, compare
        // outside it: `hx` has the sign cleared).
        let fast = between(hx, EXP_FAST_LO, EXP_FAST_HI);
        // k: trunc(INV_LN2 * x + ±0.5) above 1.5 ln 2, ±1 above 0.5 ln 2,
        // else 0.
        let neg = _mm_srai_epi32(bits, 31); // all ones for a negative x
        let half = _mm_castsi128_ps(pick(
            neg,
            _mm_castps_si128(_mm_set1_ps(-0.5)),
            _mm_castps_si128(_mm_set1_ps(0.5)),
        ));
        let k_big = _mm_cvttps_epi32(_mm_add_ps(_mm_mul_ps(_mm_set1_ps(INV_LN2), x), half));
        // 1 - sign - sign: 1 or -1.
        let k_mid = _mm_or_si128(neg, _mm_set1_epi32(1));
        let big = _mm_cmpgt_epi32(hx, _mm_set1_epi32(THREE_HALVES_LN2 as i32));
        let mid = _mm_cmpgt_epi32(hx, _mm_set1_epi32(HALF_LN2 as i32));
        let k = pick(big, k_big, _mm_and_si128(mid, k_mid));
        let kf = _mm_cvtepi32_ps(k);
        // hi = x - kf * LN2_HI, lo = kf * LN2_LO, x = hi - lo (k = 0: hi is
        // x, lo 0 and x stays x, as the scalar code's |x| <= 0.5 ln 2 case).
        let hi = _mm_sub_ps(x, _mm_mul_ps(kf, _mm_set1_ps(EXP_LN2_HI)));
        let lo = _mm_mul_ps(kf, _mm_set1_ps(EXP_LN2_LO));
        let xr = _mm_sub_ps(hi, lo);
        let xx = _mm_mul_ps(xr, xr);
        let c = _mm_sub_ps(
            xr,
            _mm_mul_ps(
                xx,
                _mm_add_ps(_mm_set1_ps(P1), _mm_mul_ps(xx, _mm_set1_ps(P2))),
            ),
        );
        let q = _mm_div_ps(_mm_mul_ps(xr, c), _mm_sub_ps(_mm_set1_ps(2.0), c));
        let y = _mm_add_ps(_mm_set1_ps(1.0), _mm_add_ps(_mm_sub_ps(q, lo), hi));
        // scalbnf(y, k) = y * 2^k, one multiply for -126 <= k <= 127 (and
        // y * 1 = y for k = 0).
        let scale = _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(k, _mm_set1_epi32(0x7f)), 23));
        let r = _mm_mul_ps(y, scale);
        (store(r), lanes_set(fast))
    }

    #[target_feature(enable = "sse2")]
    pub(super) fn log4(xs: [f32; 4]) -> ([f32; 4], u32) {
        let x = load(xs);
        let ix = _mm_castps_si128(x);
        let fast = between(ix, LOG_FAST_LO - 1, LOG_FAST_HI);
        // Reduce x into [sqrt(2)/2, sqrt(2)]: 2^k * x'.
        let ix = _mm_add_epi32(ix, _mm_set1_epi32(0x3f80_0000 - 0x3f35_04f3));
        let k = _mm_sub_epi32(_mm_srli_epi32(ix, 23), _mm_set1_epi32(0x7f));
        let ix = _mm_add_epi32(
            _mm_and_si128(ix, _mm_set1_epi32(0x007f_ffff)),
            _mm_set1_epi32(0x3f35_04f3),
        );
        let xr = _mm_castsi128_ps(ix);
        let f = _mm_sub_ps(xr, _mm_set1_ps(1.0));
        let s = _mm_div_ps(f, _mm_add_ps(_mm_set1_ps(2.0), f));
        let z = _mm_mul_ps(s, s);
        let w = _mm_mul_ps(z, z);
        let t1 = _mm_mul_ps(
            w,
            _mm_add_ps(_mm_set1_ps(LG2), _mm_mul_ps(w, _mm_set1_ps(LG4))),
        );
        let t2 = _mm_mul_ps(
            z,
            _mm_add_ps(_mm_set1_ps(LG1), _mm_mul_ps(w, _mm_set1_ps(LG3))),
        );
        let r = _mm_add_ps(t2, t1);
        let hfsq = _mm_mul_ps(_mm_mul_ps(_mm_set1_ps(0.5), f), f);
        let dk = _mm_cvtepi32_ps(k);
        // s*(hfsq+r) + dk*LN2_LO - hfsq + f + dk*LN2_HI, left to right.
        let a = _mm_add_ps(
            _mm_mul_ps(s, _mm_add_ps(hfsq, r)),
            _mm_mul_ps(dk, _mm_set1_ps(LOG_LN2_LO)),
        );
        let a = _mm_add_ps(_mm_sub_ps(a, hfsq), f);
        let a = _mm_add_ps(a, _mm_mul_ps(dk, _mm_set1_ps(LOG_LN2_HI)));
        (store(a), lanes_set(fast))
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    //! Elsewhere: no lane is in the common range, so every lane goes to
    //! the scalar function.
    pub(super) unsafe fn exp4(x: [f32; 4]) -> ([f32; 4], u32) {
        (x, 0)
    }

    pub(super) unsafe fn log4(x: [f32; 4]) -> ([f32; 4], u32) {
        (x, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `step`-th bit pattern from `start`, four at a time, against
    /// the scalar functions, bit for bit (NaNs: any NaN).
    fn check(step: u64, start: u64) {
        let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        let mut bits = start;
        while bits < 1 << 32 {
            let x: [f32; 4] =
                std::array::from_fn(|l| f32::from_bits((bits + l as u64 * step) as u32));
            let (e, g) = (exp4(x), log4(x));
            for l in 0..4 {
                assert!(
                    same(e[l], sem::f32_exp(x[l])),
                    "exp({:e}) = {:e}, libm {:e}",
                    x[l],
                    e[l],
                    sem::f32_exp(x[l])
                );
                assert!(
                    same(g[l], sem::f32_log(x[l])),
                    "log({:e}) = {:e}, libm {:e}",
                    x[l],
                    g[l],
                    sem::f32_log(x[l])
                );
            }
            bits += 4 * step;
        }
    }

    #[test]
    fn a_wide_sample_of_inputs_matches_libm_bit_for_bit() {
        // 2^22 inputs spread over every exponent and sign, lanes mixing
        // common and special ranges.
        check(1021, 7);
    }

    #[test]
    fn the_edges_of_the_common_ranges_match_libm() {
        let edges = [
            EXP_FAST_LO,
            EXP_FAST_HI,
            HALF_LN2,
            THREE_HALVES_LN2,
            LOG_FAST_LO,
            LOG_FAST_HI,
            0x3f80_0000,
            0x3f35_04f3,
            0x42b1_7218,
            0x42cf_f1b5,
        ];
        for e in edges {
            for d in 0..64u32 {
                for sign in [0, 0x8000_0000] {
                    let lanes: [f32; 4] = std::array::from_fn(|l| {
                        f32::from_bits((e.wrapping_add(d * 4 + l as u32).wrapping_sub(128)) | sign)
                    });
                    for (l, &x) in lanes.iter().enumerate() {
                        assert_eq!(
                            exp4(lanes)[l].to_bits(),
                            sem::f32_exp(x).to_bits(),
                            "exp({x:e})"
                        );
                        let (a, b) = (log4(lanes)[l], sem::f32_log(x));
                        assert!(
                            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                            "log({x:e})"
                        );
                    }
                }
            }
        }
    }

    /// Every `f32` (about a minute in release builds).
    #[test]
    #[ignore = "exhaustive: run with --ignored"]
    fn every_input_matches_libm_bit_for_bit() {
        check(1, 0);
    }
}
