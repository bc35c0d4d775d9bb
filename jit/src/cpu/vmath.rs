//! `exp` and `log` of four `f32` lanes, for lockstep groups: the
//! constants of the `libm` crate's `expf` and `logf` (FreeBSD's, the
//! interpreter's [`offload_ir::semantics::f32_exp`] and
//! [`offload_ir::semantics::f32_log`]) and their common ranges, which the
//! lowering's inline versions use (`cpu/lane_call.rs`: the same IEEE
//! operations in the same order on vectors, so the same bits), and the
//! out-of-line functions a group calls when one of its lanes is outside
//! those ranges (huge, tiny, negative, zero, NaN, infinite, subnormal):
//! every lane by the scalar function.
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
    unsafe { lanes(p, sem::f32_exp) }
}

/// `log` of the four lanes at `p`, in place.
///
/// # Safety
///
/// `p` is valid for reads and writes of four `f32`s (no alignment needed).
pub unsafe extern "C" fn offload_f32x4_log(p: *mut f32) {
    // SAFETY: the caller's contract.
    unsafe { lanes(p, sem::f32_log) }
}

/// `f` of each of the four lanes at `p`, in place.
///
/// # Safety
///
/// As for the exports.
unsafe fn lanes(p: *mut f32, f: fn(f32) -> f32) {
    // SAFETY: `p` holds four `f32`s (the caller's contract).
    let x = unsafe { std::ptr::read_unaligned(p.cast::<[f32; 4]>()) };
    // SAFETY: as above.
    unsafe { std::ptr::write_unaligned(p.cast::<[f32; 4]>(), x.map(f)) };
}

/// `(symbol, address)` of the exports, for the JIT's symbol table.
pub fn symbols() -> Vec<(&'static str, *const u8)> {
    vec![
        ("offload_f32x4_exp", offload_f32x4_exp as *const u8),
        ("offload_f32x4_log", offload_f32x4_log as *const u8),
    ]
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

/// `expf`'s ranges, by the bits of `|x|`: up to `EXP_FAST_LO` (`2^-14`)
/// it returns `1 + x`; from `EXP_FAST_HI` (87.33655) on it may overflow
/// (positive `x`: the lanes inline code leaves to the call) or underflow,
/// to 0 from `EXP_UNDERFLOW` (`x <= -103.972084`); in between it reduces
/// the argument and scales by `2^k` (`scalbnf`: one multiply, two below
/// `k = -126`, the first by `TWO_TO_MINUS_102`).
pub(crate) const EXP_FAST_LO: u32 = 0x3900_0000;
pub(crate) const EXP_FAST_HI: u32 = 0x42ae_ac50;
pub(crate) const EXP_UNDERFLOW: u32 = 0x42cf_f1b5;
pub(crate) const TWO_TO_MINUS_102: f32 = f32::from_bits(25 << 23);
/// `|x|` above `0.5 ln 2`: `k` is not 0; above `1.5 ln 2`: `k` is
/// `INV_LN2 * x ± 0.5`, truncated.
pub(crate) const HALF_LN2: u32 = 0x3eb1_7218;
pub(crate) const THREE_HALVES_LN2: u32 = 0x3f85_1592;
/// `logf`'s common range: positive, normal, finite.
pub(crate) const LOG_FAST_LO: u32 = 0x0080_0000;
pub(crate) const LOG_FAST_HI: u32 = 0x7f80_0000;
