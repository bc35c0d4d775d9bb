//! Floating-point operations PTX has no exact instruction for: `min` and
//! `max` with NaN propagation and signed zeros, and an exact `fmod`.

use super::*;

impl PtxWalker<'_> {
    /// `min`/`max` of floats with NaN propagation and `-0 < +0`.
    pub(super) fn fminmax(&mut self, k: Kind, max: bool, a: &str, b: &str) -> String {
        let (ty, bits, bc) = if k == Kind::F32 {
            ("f32", "b32", Cls::B32)
        } else {
            ("f64", "b64", Cls::B64)
        };
        let fc = cls(k);
        let r = self.t(fc);
        let op = if max { "max" } else { "min" };
        self.emit(format!("{op}.{ty} {r}, {a}, {b};"));
        // Equal operands: only the zeros differ; or the bits for min (a -0
        // wins), and them for max.
        let (ia, ib) = (self.t(bc), self.t(bc));
        self.emit(format!("mov.{bits} {ia}, {a};"));
        self.emit(format!("mov.{bits} {ib}, {b};"));
        let comb = if max { "and" } else { "or" };
        self.emit(format!("{comb}.{bits} {ia}, {ia}, {ib};"));
        let z = self.t(fc);
        self.emit(format!("mov.{bits} {z}, {ia};"));
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.eq.{ty} {p}, {a}, {b};"));
        self.emit(format!("selp.{ty} {r}, {z}, {r}, {p};"));
        let n = self.t(fc);
        self.emit(format!("add.rn.{ty} {n}, {a}, {b};"));
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.nan.{ty} {p}, {a}, {b};"));
        self.emit(format!("selp.{ty} {r}, {n}, {r}, {p};"));
        r
    }

    /// One step of `fmod`'s long division: `i = ux - uy`; if it does not
    /// borrow, it becomes `ux` (or the result is zero, at `zero`).
    pub(super) fn fmod_step(&mut self, ux: &str, uy: &str, i: &str, zero: &str) {
        self.emit(format!("sub.u64 {i}, {ux}, {uy};"));
        let p = self.t(Cls::Pred);
        let skip = self.new_label();
        self.emit(format!("setp.lt.s64 {p}, {i}, 0;"));
        self.emit(format!("@{p} bra {skip};"));
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.eq.u64 {p}, {i}, 0;"));
        self.emit(format!("@{p} bra {zero};"));
        self.emit(format!("mov.u64 {ux}, {i};"));
        self.label(&skip);
    }

    /// Exact `fmod` on `f64` (the `f32` form widens, which is exact, and
    /// narrows the exact result): musl's algorithm, shift-subtract on the
    /// significands.
    pub(super) fn fmod64(&mut self, a: &str, b: &str) -> String {
        let ux = self.t(Cls::B64);
        let uy = self.t(Cls::B64);
        self.emit(format!("mov.b64 {ux}, {a};"));
        self.emit(format!("mov.b64 {uy}, {b};"));
        let r = self.t(Cls::F64);
        let out = self.new_label();
        let ex = self.t(Cls::B64);
        let ey = self.t(Cls::B64);
        self.emit(format!("shr.u64 {ex}, {ux}, 52;"));
        self.emit(format!("and.b64 {ex}, {ex}, 2047;"));
        self.emit(format!("shr.u64 {ey}, {uy}, 52;"));
        self.emit(format!("and.b64 {ey}, {ey}, 2047;"));
        let sx = self.t(Cls::B64);
        self.emit(format!("and.b64 {sx}, {ux}, {:#x};", 1u64 << 63));
        // y == 0, y NaN or x not finite: NaN.
        let p = self.t(Cls::Pred);
        let y2 = self.t(Cls::B64);
        let x2 = self.t(Cls::B64);
        self.emit(format!("shl.b64 {y2}, {uy}, 1;"));
        self.emit(format!("shl.b64 {x2}, {ux}, 1;"));
        self.emit(format!("setp.eq.u64 {p}, {y2}, 0;"));
        self.emit(format!("setp.nan.or.f64 {p}, {b}, {b}, {p};"));
        self.emit(format!("setp.eq.or.u64 {p}, {ex}, 2047, {p};"));
        let xy = self.t(Cls::F64);
        self.emit(format!("mul.rn.f64 {xy}, {a}, {b};"));
        self.emit(format!("div.rn.f64 {r}, {xy}, {xy};"));
        self.emit(format!("@{p} bra {out};"));
        // |x| < |y|: x; |x| == |y|: signed zero.
        let p = self.t(Cls::Pred);
        self.emit(format!("mov.f64 {r}, {a};"));
        self.emit(format!("setp.lt.u64 {p}, {x2}, {y2};"));
        self.emit(format!("@{p} bra {out};"));
        let zero = self.new_label();
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.eq.u64 {p}, {x2}, {y2};"));
        self.emit(format!("@{p} bra {zero};"));
        // Normalize both significands (subnormals: shift up, lower exponent).
        for (u, e) in [(&ux, &ex), (&uy, &ey)] {
            let sub = self.new_label();
            let done = self.new_label();
            let p = self.t(Cls::Pred);
            self.emit(format!("setp.eq.u64 {p}, {e}, 0;"));
            self.emit(format!("@{p} bra {sub};"));
            self.emit(format!("and.b64 {u}, {u}, {:#x};", (1u64 << 52) - 1));
            self.emit(format!("or.b64 {u}, {u}, {:#x};", 1u64 << 52));
            self.emit(format!("bra {done};"));
            self.label(&sub);
            // ex = -(clz(u << 12)); u <<= -ex + 1
            let t = self.t(Cls::B64);
            self.emit(format!("shl.b64 {t}, {u}, 12;"));
            let c = self.t(Cls::B32);
            self.emit(format!("clz.b64 {c}, {t};"));
            let c64 = self.t(Cls::B64);
            self.emit(format!("cvt.u64.u32 {c64}, {c};"));
            self.emit(format!("neg.s64 {e}, {c64};"));
            self.emit(format!("add.u32 {c}, {c}, 1;"));
            self.emit(format!("shl.b64 {u}, {u}, {c};"));
            self.label(&done);
        }
        // Long division.
        let lp = self.new_label();
        let last = self.new_label();
        let i = self.t(Cls::B64);
        self.label(&lp);
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.le.s64 {p}, {ex}, {ey};"));
        self.emit(format!("@{p} bra {last};"));
        self.fmod_step(&ux, &uy, &i, &zero);
        self.emit(format!("shl.b64 {ux}, {ux}, 1;"));
        self.emit(format!("sub.s64 {ex}, {ex}, 1;"));
        self.emit(format!("bra {lp};"));
        self.label(&last);
        self.fmod_step(&ux, &uy, &i, &zero);
        // Renormalize: shift the leading one up to bit 52.
        let c = self.t(Cls::B32);
        self.emit(format!("clz.b64 {c}, {ux};"));
        self.emit(format!("sub.u32 {c}, {c}, 11;"));
        self.emit(format!("shl.b64 {ux}, {ux}, {c};"));
        let c64 = self.t(Cls::B64);
        self.emit(format!("cvt.u64.u32 {c64}, {c};"));
        self.emit(format!("sub.s64 {ex}, {ex}, {c64};"));
        // Scale: normal, or shift down into a subnormal.
        let sub = self.new_label();
        let fin = self.new_label();
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.le.s64 {p}, {ex}, 0;"));
        self.emit(format!("@{p} bra {sub};"));
        self.emit(format!("sub.u64 {ux}, {ux}, {:#x};", 1u64 << 52));
        let e = self.t(Cls::B64);
        self.emit(format!("shl.b64 {e}, {ex}, 52;"));
        self.emit(format!("or.b64 {ux}, {ux}, {e};"));
        self.emit(format!("bra {fin};"));
        self.label(&sub);
        let sh = self.t(Cls::B64);
        self.emit(format!("neg.s64 {sh}, {ex};"));
        self.emit(format!("add.s64 {sh}, {sh}, 1;"));
        let sh32 = self.t(Cls::B32);
        self.emit(format!("cvt.u32.u64 {sh32}, {sh};"));
        self.emit(format!("shr.u64 {ux}, {ux}, {sh32};"));
        self.label(&fin);
        self.emit(format!("or.b64 {ux}, {ux}, {sx};"));
        self.emit(format!("mov.b64 {r}, {ux};"));
        self.emit(format!("bra {out};"));
        self.label(&zero);
        self.emit(format!("mul.rn.f64 {r}, {a}, 0d0000000000000000;"));
        self.label(&out);
        r
    }
}
